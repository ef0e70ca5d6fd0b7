/* test_step_limit.c - the real loaderd (build/bin/loaderd --balance) asked every verb that takes a
 * step at the step limit (CTL_STEP_LIMIT, shm/ctl.h) and one past it: a job open from start_epoch,
 * a start AT (at_epoch, at_step), a resume token, a split seed (into a new job and into a job
 * loaderd holds), a balanced job of one and of two ranks, a split request (CTL_SPLIT_REQ) and
 * the stats verbs. At the limit each is answered (and a batch delivered) within ANSWER_MS; one
 * past it is refused naming the field, as fast. Then loaderd still serves another client every
 * byte of an epoch, and stops on SIGTERM within STOP_MS.
 *
 * Regression (issue 36): a balanced job's first share update was set at step 4 whatever its
 * start, and the catch-up decided every update up to the start one by one, under the server
 * lock: a job opened at epoch 10^12 wedged the whole daemon (no other client answered, SIGTERM
 * did nothing). No loop in loaderd may run in proportion to a step a client chose. */
#include "tests/ld_real.h"
#include "shm/ctl.h"
#include "shm/ldc.h"
#include "shm/ring.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define SIDE 8
#define NSAMPLES 64            /* batch 4: 16 steps an epoch for one rank, 8 for two */
#define ANSWER_MS 500          /* one answer, on a loaded 2-core machine: generous, and far
				* below the wedge (minutes to years) */
#define STOP_MS 2000           /* SIGTERM to exit */
#define L CTL_STEP_LIMIT

static char dir[64], sock[100], logp[128], ds[128];
static pid_t daemon_pid;

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_step_limit.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(sock, sizeof(sock), "%s/s.sock", dir);
	snprintf(logp, sizeof(logp), "%s/loaderd.log", dir);
	snprintf(ds, sizeof(ds), "%s/a.dpk", dir);
	daemon_pid = 0;
	return ld_dataset(ds, NSAMPLES, SIDE);
}

static int teardown(void **state)
{
	char cmd[160];

	(void)state;
	if (daemon_pid > 0)
		ld_stop(daemon_pid);  /* SIGKILL after 5 s: a wedged daemon leaves nothing behind */
	daemon_pid = 0;
	if (getenv("TEST_STEP_LIMIT_LOG")) {
		snprintf(cmd, sizeof(cmd), "cat %s >&2", logp);
		(void)!system(cmd);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static int64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Fail unless the verb @what, begun at @t0 (ms_now), was answered within ANSWER_MS. */
static void answered_in_time(const char *what, int64_t t0)
{
	int64_t ms = ms_now() - t0;

	if (ms > ANSWER_MS)
		fail_msg("%s: answered after %" PRId64 " ms (at most %d)", what, ms, ANSWER_MS);
}

static struct ldc_job job_of(const char *name, uint32_t world, int balance)
{
	struct ldc_job j = { .job = name, .dataset = ds, .batch = 4, .world = world, .seed = 3,
			     .slots = 2, .balance = balance };
	return j;
}

static struct ldc *conn(void)
{
	char err[512];
	struct ldc *c;

	if (ldc_connect(sock, &c, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	return c;
}

/* Open @j on a fresh client within ANSWER_MS; it must start at @first. */
static struct ldc *open_only(const char *what, const struct ldc_job *j, uint64_t first)
{
	struct ldc *c = conn();
	struct ldc_info in;
	int64_t t0 = ms_now();

	if (ldc_open(c, j, &in) < 0)
		fail_msg("%s: open: %s", what, ldc_error(c));
	answered_in_time(what, t0);
	if (in.first_step != first)
		fail_msg("%s: first step %" PRIu64 ", want %" PRIu64, what, in.first_step, first);
	return c;
}

/* Take @c's next batch within ANSWER_MS; it must be of @step. Released again. */
static void batch_at(const char *what, struct ldc *c, uint64_t step)
{
	struct ldc_batch b;
	int64_t t0 = ms_now();

	if (ldc_acquire(c, 10 * ANSWER_MS, &b) < 0)
		fail_msg("%s: the batch of step %" PRIu64 ": %s", what, step, ldc_error(c));
	answered_in_time(what, t0);
	if (b.step != step || b.count == 0)
		fail_msg("%s: batch of step %" PRIu64 " (%u samples), want step %" PRIu64, what,
			 b.step, b.count, step);
	assert_int_equal(ldc_release(c, &b), 0);
}

/* open_only, then the first batch. */
static struct ldc *open_at(const char *what, const struct ldc_job *j, uint64_t first)
{
	struct ldc *c = open_only(what, j, first);

	batch_at(what, c, first);
	return c;
}

/* A balanced job of one rank named @name that served steps 0..5 (its split log at its first
 * updates), held by loaderd after the client that returns goes. */
static struct ldc *held_job(const char *name)
{
	struct ldc_job h = job_of(name, 1, 1);
	struct ldc *c = open_at("a balanced job at step 0", &h, 0);

	assert_int_equal(ldc_report(c, 1000), 0);
	for (uint64_t s = 1; s < 6; s++)
		batch_at("a balanced job's first steps", c, s);
	return c;
}

/* Open @j, which must be refused with EINVAL naming @needle, within ANSWER_MS. */
static void refused(const char *what, const struct ldc_job *j, const char *needle)
{
	struct ldc *c = conn();
	struct ldc_info in;
	int64_t t0 = ms_now();
	int r = ldc_open(c, j, &in);

	answered_in_time(what, t0);
	if (r != -EINVAL || !strstr(ldc_error(c), needle))
		fail_msg("%s: open %d (%s), want EINVAL naming \"%s\"", what, r, ldc_error(c), needle);
	ldc_close(c);
}

/* A split seed (CTL_SPLIT_SEED body) into @buf: even weights of @world ranks at @from, every
 * report @ns. Returns its length. */
static size_t mk_seed(void *buf, uint64_t from, uint32_t world, uint32_t slots, double ns)
{
	struct ctl_split h = { .from = from, .world = world, .slots = slots,
			       .nrows = CTL_SPLIT_ROWS(from, slots) };
	size_t len = CTL_SPLIT_SIZE(world, h.nrows), at = ((size_t)world * 4u + 7u) / 8u * 8u;
	char *p = buf;

	memset(buf, 0, len);
	memcpy(p, &h, sizeof(h));
	for (uint32_t r = 0; r < world; r++) {
		uint32_t w = CTL_SPLIT_ONE / world + (r < CTL_SPLIT_ONE % world);
		memcpy(p + sizeof(h) + 4 * (size_t)r, &w, 4);
	}
	for (size_t i = 0; i < (size_t)h.nrows * world; i++)
		memcpy(p + sizeof(h) + at + i * 8u, &ns, 8);
	return len;
}

/* A raw connection that sends the seed @b (@n bytes): loaderd's own check must refuse it naming
 * @needle, within ANSWER_MS. */
static void seed_refused_raw(const void *b, size_t n, const char *needle)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 5 };
	char buf[CTL_MSG_MAX];
	uint16_t type;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		fail_msg("connect %s: %s", sock, strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	int64_t t0 = ms_now();
	assert_int_equal(ctl_send(fd, CTL_SPLIT_SEED, b, n, NULL, 0), 0);
	ssize_t got = ctl_recv(fd, buf, &type, NULL, NULL);
	answered_in_time("a split seed past the limit", t0);
	close(fd);
	if (got < (ssize_t)sizeof(struct ctl_error) || type != CTL_ERROR)
		fail_msg("a split seed past the limit: reply %zd of type %u, want an error", got,
			 type);
	struct ctl_error e;
	memcpy(&e, buf, sizeof(e));
	if (e.err != EINVAL || !strstr(e.text, needle))
		fail_msg("a split seed past the limit: \"%s\" (%d), want EINVAL naming \"%s\"", e.text,
			 e.err, needle);
}

/* The weights at @step: 1 known, 0 not (answered within ANSWER_MS). */
static int split_at(struct ldc *c, uint64_t step, uint32_t world)
{
	uint32_t w[2];
	int64_t t0 = ms_now();
	int r = ldc_split_weights(c, step, w, world);

	answered_in_time("a split request", t0);
	if (r < 0)
		fail_msg("split request at %" PRIu64 ": %d (%s)", step, r, ldc_error(c));
	return r;
}

/* Every byte of one epoch to a fresh client of an even job. */
static void serves_another(void)
{
	struct ldc_job j = job_of("honest", 1, 0);
	struct ldc *c = conn();
	struct ldc_info in;
	struct ldc_batch b;
	uint8_t seen[NSAMPLES] = { 0 };

	j.epochs = 1;
	int64_t t0 = ms_now();
	if (ldc_open(c, &j, &in) < 0)
		fail_msg("another client: %s", ldc_error(c));
	answered_in_time("another client's open", t0);
	for (uint64_t s = 0; s < in.steps_total; s++) {
		if (ldc_acquire(c, 10000, &b) < 0)
			fail_msg("another client, step %" PRIu64 ": %s", s, ldc_error(c));
		for (uint32_t i = 0; i < b.count; i++) {
			uint64_t id = b.ids[i];
			assert_true(id < NSAMPLES && !seen[id]++);
			assert_int_equal(b.labels[i], ld_label(id));
			const uint8_t *p = (const uint8_t *)b.data + (size_t)i * b.sample_bytes;
			for (uint64_t k = 0; k < b.sample_bytes; k++)
				if (p[k] != ld_byte(id, k))
					fail_msg("another client: sample %" PRIu64 " byte %" PRIu64, id, k);
		}
		assert_int_equal(ldc_release(c, &b), 0);
	}
	for (uint64_t id = 0; id < NSAMPLES; id++)
		assert_int_equal(seen[id], 1);
	ldc_close(c);
}

static void stop_promptly(void)
{
	int64_t t0 = ms_now();
	int st = ld_stop(daemon_pid);
	int64_t ms = ms_now() - t0;

	daemon_pid = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || ms > STOP_MS)
		fail_msg("SIGTERM: loaderd ended with status 0x%x after %" PRId64 " ms (want exit 0 "
			 "within %d ms); log %s", st, ms, STOP_MS, logp);
}

static void test_step_limit_every_verb_answers_at_once(void **state)
{
	static const char *const opts[] = { "--balance", NULL };
	char name[32];
	uint8_t tok[LDC_TOKEN_SIZE];
	char seed[CTL_MSG_MAX];

	(void)state;
	daemon_pid = ld_start(sock, logp, opts);
	if (daemon_pid < 0)
		fail_msg("loaderd did not start: %s", strerror((int)-daemon_pid));

	/* A fresh job from start_epoch: the first step at the limit (16 steps an epoch), even and
	 * balanced; one epoch more is refused. */
	for (int bal = 0; bal <= 1; bal++) {
		snprintf(name, sizeof(name), "from-epoch-%d", bal);
		struct ldc_job j = job_of(name, 1, bal);
		j.start_epoch = L / 16;
		ldc_close(open_at(bal ? "a balanced job at start_epoch L / 16" :
				  "a job at start_epoch L / 16", &j, L));
		snprintf(name, sizeof(name), "from-epoch-past-%d", bal);
		j.start_epoch = L / 16 + 1;
		refused("start_epoch one past", &j, "start_epoch: 288230376151711745 of 16 steps "
			"starts at step 4611686018427387920, past the step limit 4611686018427387904");
	}

	/* A balanced job of two ranks (8 steps an epoch), each started AT the limit; the split
	 * requests: at the limit (the update pending there is not decided: not known), one past
	 * (refused), and at the steps before (known). Stats of the rank, and loaderctl's. */
	struct ldc_job j = job_of("at-two", 2, 1);
	j.start_at = 1;
	j.at_epoch = L / 8;
	/* (rank 0 waits for rank 1's report of the update at L + 4: both open, then each takes
	 * its first batch) */
	struct ldc *c0 = open_only("rank 0 of a balanced job AT the limit", &j, L);
	j.rank = 1;
	struct ldc *c1 = open_only("rank 1 of a balanced job AT the limit", &j, L);
	batch_at("rank 0 of a balanced job AT the limit", c0, L);
	batch_at("rank 1 of a balanced job AT the limit", c1, L);
	assert_int_equal(split_at(c0, L, 2), 1);      /* the step both ranks opened: decided */
	assert_int_equal(split_at(c0, L - 1, 2), 1);  /* before: the even split, never changed */
	int64_t t0 = ms_now();
	uint32_t w[2];
	int r = ldc_split_weights(c1, L + 1, w, 2);
	answered_in_time("a split request one past the limit", t0);
	if (r != -EINVAL || !strstr(ldc_error(c1), "split request: step 4611686018427387905 is "
				    "past the step limit"))
		fail_msg("a split request one past the limit: %d (%s)", r, ldc_error(c1));
	ldc_close(c1);
	struct ctl_stats st;
	t0 = ms_now();
	assert_int_equal(ldc_stats(c0, &st), 0);
	answered_in_time("a rank's stats", t0);
	char *text = NULL, err[512];
	t0 = ms_now();
	if (ldc_admin(sock, CTL_OP_STATS, 0, "at-two", &text, err, sizeof(err)) < 0)
		fail_msg("loaderctl stats: %s", err);
	answered_in_time("loaderctl stats", t0);
	free(text);
	ldc_close(c0);
	/* AT one past: the epoch, the step */
	j.job = "at-past";
	j.rank = 0;
	j.at_epoch = L / 8 + 1;
	refused("at_epoch one past", &j, "at_epoch: epoch 576460752303423489 step 0 of 8-step "
		"epochs is past the step limit");
	j.at_epoch = L / 8;
	j.at_step = 1;
	refused("at_step one past", &j, "at_epoch: epoch 576460752303423488 step 1 of 8-step "
		"epochs is past the step limit");

	/* A resume token at the limit into a balanced job loaderd holds, whose split log is at
	 * its first updates: the pending update must not walk up to it. */
	uint8_t past[LDC_TOKEN_SIZE];
	struct ldc *c = held_job("held");
	assert_int_equal(ldc_token(c, L, tok, sizeof(tok)), LDC_TOKEN_SIZE);
	assert_int_equal(ldc_token(c, L + 1, past, sizeof(past)), -EINVAL);  /* none past it */
	ldc_close(c);
	struct ldc_job h = job_of("held", 1, 1);
	h.token = tok;
	h.token_len = sizeof(tok);
	ldc_close(open_at("a resume token at the limit into a held balanced job", &h, L));

	/* A split seed at the limit: into a new job (it starts the job's log), and into a job
	 * loaderd holds at its first updates (the seed's reports are for the update at L + 4);
	 * one past: refused by loaderd itself. */
	size_t n = mk_seed(seed, L, 1, 2, 2000);
	ldc_close(held_job("held-seeded"));
	for (int held = 0; held <= 1; held++) {
		struct ldc_job sj = job_of(held ? "held-seeded" : "seeded", 1, 1);
		sj.start_at = 1;
		sj.at_epoch = L / 16;
		c = conn();
		assert_int_equal(ldc_split_seed(c, seed, n), 0);
		struct ldc_info in;
		int64_t t1 = ms_now();
		if (ldc_open(c, &sj, &in) < 0)
			fail_msg("a split seed at the limit (%s job): %s", held ? "a held" : "a new",
				 ldc_error(c));
		answered_in_time("a job open with a split seed at the limit", t1);
		batch_at("the first batch after a split seed at the limit", c, L);
		ldc_close(c);
	}
	n = mk_seed(seed, L + 1, 1, 2, 2000);
	c = conn();
	assert_int_equal(ldc_split_seed(c, seed, n), -EINVAL);  /* the client checks it too */
	ldc_close(c);
	seed_refused_raw(seed, n, "split seed: step 4611686018427387905 is past the limit");

	/* loaderd is not wedged: status, another client's epoch, and SIGTERM. */
	t0 = ms_now();
	if (ldc_admin(sock, CTL_OP_STATUS, 0, NULL, &text, err, sizeof(err)) < 0)
		fail_msg("loaderctl status: %s", err);
	answered_in_time("loaderctl status", t0);
	free(text);
	serves_another();
	stop_promptly();
}

/* SIGTERM while a balanced job of two ranks runs far out (one rank consuming, the other
 * attached and idle, so workers and the update gate are busy): loaderd exits 0 within STOP_MS. */
static void test_step_limit_sigterm_while_running(void **state)
{
	static const char *const opts[] = { "--balance", NULL };

	(void)state;
	daemon_pid = ld_start(sock, logp, opts);
	if (daemon_pid < 0)
		fail_msg("loaderd did not start: %s", strerror((int)-daemon_pid));
	struct ldc_job j = job_of("running", 2, 1);
	j.start_epoch = L / 8 - 1;
	struct ldc *c0 = open_only("rank 0", &j, L - 8);
	j.rank = 1;
	struct ldc *c1 = open_only("rank 1", &j, L - 8);
	assert_int_equal(ldc_report(c0, 500), 0);
	/* the batches are checked after the stop, so that a wedge shows as what SIGTERM does */
	struct ldc_batch b;
	uint64_t got = 0;
	for (uint64_t s = L - 8; s < L - 5 && ldc_acquire(c0, 10 * ANSWER_MS, &b) == 0; s++) {
		got += b.step == s;
		assert_int_equal(ldc_release(c0, &b), 0);
	}
	stop_promptly();
	assert_int_equal(got, 3);
	ldc_close(c0);
	ldc_close(c1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_step_limit_every_verb_answers_at_once, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_step_limit_sigterm_while_running, setup,
						teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
