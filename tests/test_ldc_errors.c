/* test_ldc_errors.c - the client API's error paths (shm/ldc.c), each with its errno and the
 * sentence ldc_error gives: what the client refuses before it sends anything (job names, share
 * and owner), calls on a connection with no job, and a fake loaderd (a socket of the test's own,
 * answered from a thread) that refuses, hangs up, or answers with the wrong message; and
 * ldc_s3_offer's message, answers and refusals. test_ldc.c
 * checks the numbers of a well-formed reply; the real server's refusals are test_srv.c's. */
#include "shm/ctl.h"
#include "shm/ldc.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/fake_listen.h"

static struct fake_listen g_fl = { .lfd = -1 };

static int setup(void **state)
{
	(void)state;
	return fake_listen_open(&g_fl, "test_ldc_errors");
}

static int teardown(void **state)
{
	(void)state;
	return fake_listen_close(&g_fl);
}

/* ---- the fake loaderd: one connection, one request, one answer ---- */

enum act { A_ERROR, A_WRONG_TYPE, A_HANG_UP, A_JOB_OK_NO_FDS, A_TEXT_THEN_ERROR, A_S3_TAKEN,
	    A_S3_NO_CACHE };

static struct {
	enum act act;
	uint16_t got;      /* the request's type */
	char body[CTL_MSG_MAX];  /* and its body */
	ssize_t len;
	pthread_t th;
} fake;

static void *fake_main(void *arg)
{
	char buf[CTL_MSG_MAX];
	int fds[4], nfds = 4;
	struct ctl_error e;

	(void)arg;
	int s = accept4(g_fl.lfd, NULL, NULL, SOCK_CLOEXEC);
	if (s < 0)
		return NULL;
	fake.len = ctl_recv(s, fake.body, &fake.got, fds, &nfds);
	if (fake.len < 0)
		fake.got = 0;
	switch (fake.act) {
	case A_ERROR:
		ctl_error_make(&e, EACCES, "not for you");
		ctl_send(s, CTL_ERROR, &e, sizeof(e), NULL, 0);
		break;
	case A_WRONG_TYPE:
		memset(buf, 0, sizeof(struct ctl_stats));
		ctl_send(s, CTL_STATS, buf, sizeof(struct ctl_stats), NULL, 0);
		break;
	case A_HANG_UP:
		close(s);
		return NULL;
	case A_JOB_OK_NO_FDS:
		memset(buf, 0, sizeof(struct ctl_job_ok));
		ctl_send(s, CTL_JOB_OK, buf, sizeof(struct ctl_job_ok), NULL, 0);
		break;
	case A_S3_TAKEN:
	case A_S3_NO_CACHE: {
		struct ctl_s3_ack ack = { .err = fake.act == A_S3_TAKEN ? 0 : EOPNOTSUPP };
		ctl_send(s, CTL_S3_ACK, &ack, sizeof(ack), NULL, 0);
		break;
	}
	case A_TEXT_THEN_ERROR:
		ctl_send(s, CTL_ADMIN_TEXT, "half an answer", 14, NULL, 0);
		ctl_error_make(&e, ENOENT, "no job named x");
		ctl_send(s, CTL_ERROR, &e, sizeof(e), NULL, 0);
		break;
	}
	/* wait for the client to hang up, so that what was sent is read first */
	while (recv(s, buf, sizeof(buf), 0) > 0)
		;
	close(s);
	return NULL;
}

static void fake_start(enum act act)
{
	fake.act = act;
	fake.got = 0;
	assert_int_equal(pthread_create(&fake.th, NULL, fake_main, NULL), 0);
}

static void fake_join(void)
{
	pthread_join(fake.th, NULL);
}

/* ---- cases ---- */

static struct ldc_job job_of(const char *name)
{
	return (struct ldc_job){ .job = name, .dataset = "/nonexistent.dpk", .batch = 4,
				 .world = 1 };
}

/* What ldc_open refuses itself, before sending: nothing reaches loaderd, so the fake's thread
 * never runs (the connection waits in the backlog). */
static void test_ldc_open_refuses_before_sending(void **state)
{
	static const struct {
		const char *what, *name, *share_group, *owner;
		int err;
		const char *needle;
	} cases[] = {
		{ "no name", "", NULL, NULL, -EINVAL, "job name missing or longer than 63 bytes" },
		{ "64-byte name", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL,
		  NULL, -EINVAL, "job name missing or longer than 63 bytes" },
		{ "share and owner", "j", "0", "0", -EINVAL,
		  "job j: share_group is for the job's owner, owner for another user joining it: "
		  "not both" },
		{ "unknown group", "j", "no-such-group-ldc", NULL, -ENOENT, "no such group" },
		{ "unknown owner", "j", NULL, "no-such-user-ldc", -ENOENT, "no such user" },
	};
	(void)state;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct ldc *c;
		struct ldc_info in;
		char err[256];
		struct ldc_job j = job_of(cases[k].name);

		j.share_group = cases[k].share_group;
		j.owner = cases[k].owner;
		assert_int_equal(ldc_connect(g_fl.sock, &c, err, sizeof(err)), 0);
		int ret = ldc_open(c, &j, &in);
		if (ret != cases[k].err || !strstr(ldc_error(c), cases[k].needle))
			fail_msg("%s: %d \"%s\", expected %d \"%s\"", cases[k].what, ret, ldc_error(c),
				 cases[k].err, cases[k].needle);
		ldc_close(c);
		int s = accept4(g_fl.lfd, NULL, NULL, SOCK_CLOEXEC);  /* empty the backlog */
		char buf[CTL_MSG_MAX];
		assert_true(s >= 0);
		assert_int_equal(recv(s, buf, sizeof(buf), 0), 0);  /* nothing was sent */
		close(s);
	}
}

/* loaderd's answer to a job open: a refusal (its errno and text), the wrong message, a reply
 * without the ring, or a hang-up. */
static void test_ldc_open_answers(void **state)
{
	static const struct {
		enum act act;
		int err;
		const char *needle;
	} cases[] = {
		{ A_ERROR, -EACCES, "loaderd: not for you" },
		{ A_WRONG_TYPE, -EBADMSG, "loaderd answered with message type 4, expected 2" },
		{ A_JOB_OK_NO_FDS, -EBADMSG, "loaderd's job reply is malformed" },
		{ A_HANG_UP, -EPIPE, "loaderd closed the connection: it exited or was killed" },
	};
	(void)state;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct ldc *c;
		struct ldc_info in;
		char err[256];
		struct ldc_job j = job_of("j");

		fake_start(cases[k].act);
		assert_int_equal(ldc_connect(g_fl.sock, &c, err, sizeof(err)), 0);
		int ret = ldc_open(c, &j, &in);
		if (ret != cases[k].err || !strstr(ldc_error(c), cases[k].needle))
			fail_msg("case %zu: %d \"%s\", expected %d \"%s\"", k, ret, ldc_error(c),
				 cases[k].err, cases[k].needle);
		ldc_close(c);
		fake_join();
		assert_int_equal(fake.got, CTL_JOB_OPEN);
	}
}

/* ldc_s3_offer, the one rule of ldcat, the trainer and the Python Loader: this process's endpoint,
 * region and credentials (here from the environment) sent in one CTL_S3_OPEN, in the body's order;
 * loaderd's EOPNOTSUPP is 1 (fetch it yourself), taken is 0; LOADERD_S3_CLIENT_FETCH=1 is 1 with
 * nothing read or sent (and only "1" is); no credentials is -ENOKEY naming the variables and the
 * URL, with nothing sent. */
static void test_ldc_s3_offer(void **state)
{
	static const char *const url = "s3://bkt/p/set.dpks";
	struct ldc *c;
	char err[256];

	(void)state;
	setenv("HOME", "/nonexistent", 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
	unsetenv("AWS_ENDPOINT_URL_S3");
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("AWS_PROFILE");
	unsetenv("AWS_DEFAULT_REGION");
	setenv("AWS_ACCESS_KEY_ID", "AKTEST", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SECRETTEST", 1);
	setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9/", 1);
	setenv("AWS_REGION", "eu-west-3", 1);
	for (int k = 0; k < 4; k++) {
		/* 0: taken; 1: no cache; 2: LOADERD_S3_CLIENT_FETCH=1; 3: =0 is not it */
		setenv("LOADERD_S3_CLIENT_FETCH", k == 2 ? "1" : "0", 1);
		fake_start(k == 1 ? A_S3_NO_CACHE : A_S3_TAKEN);
		assert_int_equal(ldc_connect(g_fl.sock, &c, err, sizeof(err)), 0);
		int ret = ldc_s3_offer(c, url);
		ldc_close(c);
		fake_join();
		assert_int_equal(ret, k == 0 || k == 3 ? 0 : 1);
		if (k == 2) {
			assert_int_equal(fake.got, 0);  /* nothing sent */
			continue;
		}
		assert_int_equal(fake.got, CTL_S3_OPEN);
		static const char want[] = "s3://bkt/p/set.dpks" "http://127.0.0.1:9" "eu-west-3"
					   "AKTEST" "SECRETTEST";
		struct ctl_s3_open h;
		assert_int_equal(fake.len, (ssize_t)(sizeof(h) + sizeof(want) - 1));
		memcpy(&h, fake.body, sizeof(h));
		assert_int_equal(h.url_len, strlen(url));
		assert_int_equal(h.endpoint_len, 18);
		assert_int_equal(h.region_len, 9);
		assert_int_equal(h.access_len, 6);
		assert_int_equal(h.secret_len, 10);
		assert_int_equal(h.token_len, 0);
		assert_memory_equal(fake.body + sizeof(h), want, sizeof(want) - 1);
	}
	unsetenv("LOADERD_S3_CLIENT_FETCH");
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	fake_start(A_S3_TAKEN);
	assert_int_equal(ldc_connect(g_fl.sock, &c, err, sizeof(err)), 0);
	assert_int_equal(ldc_s3_offer(c, url), -ENOKEY);
	if (!strstr(ldc_error(c), "s3://bkt/p/set.dpks: no S3 credentials: AWS_ACCESS_KEY_ID"))
		fail_msg("no credentials: \"%s\"", ldc_error(c));
	ldc_close(c);
	fake_join();
	assert_int_equal(fake.got, 0);
	unsetenv("AWS_ENDPOINT_URL");
	unsetenv("AWS_REGION");
}

/* Every call that needs a job says so when there is none. */
static void test_ldc_calls_without_a_job(void **state)
{
	struct ldc *c;
	char err[256], tok[LDC_TOKEN_SIZE];
	struct ldc_batch b = { 0 };
	struct ctl_stats st;

	(void)state;
	assert_int_equal(ldc_connect(g_fl.sock, &c, err, sizeof(err)), 0);
	assert_string_equal(ldc_error(c), "");
	assert_int_equal(ldc_acquire(c, 0, &b), -EINVAL);
	assert_string_equal(ldc_error(c), "no job is open on this connection");
	assert_int_equal(ldc_release(c, &b), -EINVAL);
	assert_int_equal(ldc_stats(c, &st), -EINVAL);
	assert_string_equal(ldc_error(c), "no job is open on this connection");
	assert_int_equal(ldc_token(c, LDC_TOKEN_NEXT, tok, sizeof(tok)), -EINVAL);
	assert_null(ldc_ring_base(c));
	assert_int_equal(ldc_ring_size(c), 0);
	ldc_detach(c);
	ldc_detach(c);  /* a second time does nothing */
	ldc_close(c);
	ldc_close(NULL);
	int s = accept4(g_fl.lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(s >= 0);
	close(s);
}

/* Where there is no loaderd: a missing socket, a path too long for a socket. */
static void test_ldc_connect_errors(void **state)
{
	struct ldc *c = (struct ldc *)1;
	char err[256] = "", path[200];

	(void)state;
	snprintf(path, sizeof(path), "%s/none.sock", g_fl.dir);
	assert_int_equal(ldc_connect(path, &c, err, sizeof(err)), -ENOENT);
	assert_null(c);
	assert_non_null(strstr(err, "none.sock"));
	char longp[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
	memset(longp, 'x', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	assert_int_equal(ldc_connect(longp, &c, err, sizeof(err)), -ENAMETOOLONG);
	assert_non_null(strstr(err, "is too long"));
	/* one byte shorter fits the socket address: refused for not existing, not for its length */
	longp[sizeof(longp) - 2] = '\0';
	assert_int_equal(ldc_connect(longp, &c, err, sizeof(err)), -ENOENT);
}

/* ldc_admin: a job name too long, loaderd's refusal after part of an answer, the wrong message,
 * a hang-up; each with the reason in err and no text. */
static void test_ldc_admin_errors(void **state)
{
	static const struct {
		enum act act;
		int err;
		const char *needle;
	} cases[] = {
		{ A_TEXT_THEN_ERROR, -ENOENT, "loaderd: no job named x" },
		{ A_WRONG_TYPE, -EBADMSG, "loaderd answered with message type 4, expected 7" },
		{ A_HANG_UP, -EPIPE, "loaderd closed the connection" },
	};
	char err[256], name[CTL_JOB_NAME_MAX + 1];
	char *text = (char *)1;

	(void)state;
	memset(name, 'j', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	assert_int_equal(ldc_admin(g_fl.sock, CTL_OP_STATS, 0, name, &text, err, sizeof(err)), -EINVAL);
	assert_null(text);
	assert_non_null(strstr(err, "is longer than 63 bytes"));
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		text = (char *)1;
		err[0] = '\0';
		fake_start(cases[k].act);
		int ret = ldc_admin(g_fl.sock, CTL_OP_STATS, 0, "x", &text, err, sizeof(err));
		fake_join();
		if (ret != cases[k].err || !strstr(err, cases[k].needle))
			fail_msg("case %zu: %d \"%s\", expected %d \"%s\"", k, ret, err, cases[k].err,
				 cases[k].needle);
		assert_null(text);
		assert_int_equal(fake.got, CTL_ADMIN);
	}
}

/* The default socket: $XDG_RUNTIME_DIR's, else /tmp's per uid; truncated to the buffer. */
static void test_ldc_default_socket(void **state)
{
	char buf[128], want[64], small[8];
	const char *old = getenv("XDG_RUNTIME_DIR");
	char *saved = old ? strdup(old) : NULL;

	(void)state;
	setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
	assert_string_equal(ldc_default_socket(buf, sizeof(buf)), "/run/user/4242/loaderd.sock");
	assert_string_equal(ldc_default_socket(small, sizeof(small)), "/run/us");
	unsetenv("XDG_RUNTIME_DIR");
	snprintf(want, sizeof(want), "/tmp/loaderd-%u.sock", (unsigned)getuid());
	assert_string_equal(ldc_default_socket(buf, sizeof(buf)), want);
	if (saved)
		setenv("XDG_RUNTIME_DIR", saved, 1);
	free(saved);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ldc_open_refuses_before_sending, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ldc_open_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ldc_calls_without_a_job, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ldc_connect_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ldc_admin_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ldc_default_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ldc_s3_offer, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
