/* test_hostile_sets.c - the real loaderd (build/bin/loaderd) and sets of shards passed open: the
 * client (libldc) opens the manifest and every shard with its own rights and sends them
 * (CTL_SHARD_FDS); loaderd opens no path. A hostile client speaks the protocol by hand: batches
 * out of order, of the wrong size or total, a terminal or an eventfd for a shard, a manifest sent
 * without its shards or a .dpk with some, shards swapped, and sets at the per-uid descriptor
 * limit and one past it (the count given back when the job ends). Each is refused by name and
 * loaderd goes on serving; the descriptors it held come back. */
#include "tests/ld_real.h"
#include "formats/dpk.h"
#include "formats/dpkset.h"
#include "shm/ctl.h"
#include "shm/ldc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
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

#define SIDE 4
#define PER_SHARD 8u             /* samples per shard */
#define NSHARDS_MAX 70u          /* more than one batch (CTL_FDS_BATCH) */

static char dir[64], sock[100], logp[128];
static pid_t daemon_pid;

/* Shards dir/sK.dpk (K < n, PER_SHARD samples each, distinct contents) and the manifest
 * dir/NAME naming the first @n of them in order. */
static void make_set(const char *name, unsigned n)
{
	char path[192], err[256];
	struct dpkset_manifest *m = dpkset_manifest_create();

	assert_non_null(m);
	for (unsigned k = 0; k < n; k++) {
		snprintf(path, sizeof(path), "%s/s%u.dpk", dir, k);
		if (access(path, F_OK) != 0)
			assert_int_equal(ld_dataset(path, PER_SHARD + k, SIDE), 0);
		struct dpk *d;
		uint8_t id[DPK_IDENTITY_SIZE];
		assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
		dpk_identity(d, id);
		char rel[32];
		snprintf(rel, sizeof(rel), "s%u.dpk", k);
		assert_int_equal(dpkset_manifest_add(m, rel, dpk_count(d), id, err, sizeof(err)), 0);
		dpk_close(d);
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_int_equal(dpkset_write(path, m), 0);
	dpkset_manifest_destroy(m);
}

static void start(const char *const *extra)
{
	daemon_pid = ld_start(sock, logp, extra);
	if (daemon_pid < 0)
		fail_msg("loaderd did not start: %s", strerror((int)-daemon_pid));
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_hostile_sets.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(sock, sizeof(sock), "%s/s.sock", dir);
	snprintf(logp, sizeof(logp), "%s/loaderd.log", dir);
	daemon_pid = 0;
	return 0;
}

static int teardown(void **state)
{
	char cmd[160];
	int bad = 0;

	(void)state;
	if (daemon_pid > 0) {
		int st = ld_stop(daemon_pid);
		bad = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
		if (bad)
			fprintf(stderr, "loaderd did not exit 0 on SIGTERM (0x%x); log %s\n", st, logp);
	}
	daemon_pid = 0;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 && !bad ? 0 : -1;
}

static int raw_conn(void)
{
	int fd = ld_raw_connect(sock, 10);

	if (fd < 0)
		fail_msg("connect %s: %s", sock, strerror(-fd));
	return fd;
}

/* The answer to what was sent on @fd: "ACK", "OK" (a job), or the error's text. */
static void answer(int fd, char *text, size_t cap)
{
	char buf[CTL_MSG_MAX];
	uint16_t type = 0;
	int got[2], ngot = 0;
	ssize_t n = ctl_recv(fd, buf, &type, got, &ngot);

	for (int i = 0; i < ngot; i++)
		close(got[i]);
	if (n >= 0 && type == CTL_ERROR) {
		struct ctl_error e;
		memcpy(&e, buf, sizeof(e));
		snprintf(text, cap, "%s", e.text);
	} else if (n >= 0 && type == CTL_SHARD_ACK) {
		snprintf(text, cap, "ACK");
	} else {
		snprintf(text, cap, n >= 0 && type == CTL_JOB_OK ? "OK" : "reply %zd type %u", n, type);
	}
}

/* Send batch (@first, @total) with @fds[0, nfds) and the body saying @count; the answer. */
static void batch(int fd, uint32_t first, uint32_t total, uint32_t count, const int *fds,
		  int nfds, char *text, size_t cap)
{
	struct ctl_shard_fds b = { .first = first, .total = total, .count = count };

	assert_int_equal(ctl_send(fd, CTL_SHARD_FDS, &b, sizeof(b), fds, nfds), 0);
	answer(fd, text, cap);
}

/* A job open of @path (opened here) on @fd; the answer. */
static void job_open_raw(int fd, const char *name, const char *path, char *text, size_t cap)
{
	struct ctl_job_open m;
	int dfd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(dfd >= 0);
	memset(&m, 0, sizeof(m));
	snprintf(m.job, sizeof(m.job), "%s", name);
	snprintf(m.dataset, sizeof(m.dataset), "%s", path);
	m.batch = 4;
	m.world = 1;
	assert_int_equal(ctl_send(fd, CTL_JOB_OPEN, &m, sizeof(m), &dfd, 1), 0);
	close(dfd);
	answer(fd, text, cap);
}

/* Open shards @idx[0, n) of dir/sK.dpk. */
static void open_shards(const unsigned *idx, unsigned n, int *fds)
{
	char path[192];

	for (unsigned k = 0; k < n; k++) {
		snprintf(path, sizeof(path), "%s/s%u.dpk", dir, idx[k]);
		fds[k] = open(path, O_RDONLY | O_CLOEXEC);
		assert_true(fds[k] >= 0);
	}
}

static void close_all(int *fds, unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		close(fds[k]);
}

static int count_fds(pid_t pid)
{
	char p[64];
	int n = 0;

	snprintf(p, sizeof(p), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(p);
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* loaderd's descriptors come back to @before within 5 s (a job lingers --linger 1 s). */
static void assert_fds_back(int before)
{
	int now = -1;

	for (int i = 0; i < 100; i++) {
		if ((now = count_fds(daemon_pid)) <= before)
			return;
		usleep(50 * 1000);
	}
	char cmd[96];
	snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd >&2", (int)daemon_pid);
	(void)!system(cmd);
	fail_msg("loaderd holds %d descriptors, %d before", now, before);
}

/* A well-behaved client on the set @path (every shard opened by libldc): 0 and one batch read
 * with the set's first sample ids, or the error text in @why. */
static int client_open(const char *job, const char *path, char *why, size_t cap)
{
	struct ldc *c = NULL;
	struct ldc_job j = { .job = job, .dataset = path, .batch = 4, .world = 1, .epochs = 1,
			     .sampling = CTL_SAMPLE_SEQUENTIAL };
	struct ldc_info in;
	int ret = ldc_connect(sock, &c, why, cap);

	if (ret < 0)
		return ret;
	ret = ldc_open(c, &j, &in);
	if (ret < 0) {
		snprintf(why, cap, "%s", ldc_error(c));
		ldc_close(c);
		return ret;
	}
	struct ldc_batch b;
	ret = ldc_acquire(c, 10000, &b);
	if (ret == 0) {
		for (uint32_t i = 0; i < b.count; i++)
			if (b.ids[i] != i)
				fail_msg("sample %u of the first batch is id %llu", i,
					 (unsigned long long)b.ids[i]);
		ldc_release(c, &b);
	} else {
		snprintf(why, cap, "%s", ldc_error(c));
	}
	ldc_close(c);
	return ret;
}

static const char *const linger1[] = { "--linger", "1", NULL };

static int client_open(const char *job, const char *path, char *why, size_t cap);

/* loaderd's descriptors once it has served one job and let go of it (the first job makes the
 * process open what it keeps for good: its libraries' own): the count to come back to. */
static int settled_fds(void)
{
	char why[512], path[192];

	make_set("warm.dpks", 1);
	snprintf(path, sizeof(path), "%s/warm.dpks", dir);
	if (client_open("warm", path, why, sizeof(why)) < 0)
		fail_msg("warm-up: %s", why);
	usleep(2500 * 1000);  /* its linger (1 s) and the housekeeping after it */
	return count_fds(daemon_pid);
}

/* A set of more than one batch of shards, opened by libldc, is served from the first sample;
 * loaderd holds descriptors for it while the job lives and gives them all back. */
static void test_sets_served_and_fds_given_back(void **state)
{
	char why[512], path[192];

	(void)state;
	make_set("big.dpks", NSHARDS_MAX);
	start(linger1);
	int before = settled_fds();
	snprintf(path, sizeof(path), "%s/big.dpks", dir);
	if (client_open("big", path, why, sizeof(why)) < 0)
		fail_msg("a set of %u shards: %s", NSHARDS_MAX, why);
	assert_fds_back(before);
}

/* Batches out of order, of a wrong total or count, and what is not a regular file: each refused
 * by name, nothing kept. */
static void test_sets_bad_batches_refused(void **state)
{
	char text[512];
	int fds[CTL_FDS_BATCH + 1];
	unsigned idx[CTL_FDS_BATCH + 1];

	(void)state;
	for (unsigned k = 0; k <= CTL_FDS_BATCH; k++)
		idx[k] = k % 3;
	make_set("set.dpks", 3);
	start(linger1);
	int before = settled_fds();
	open_shards(idx, CTL_FDS_BATCH + 1, fds);
	struct { uint32_t first, total, count; int nfds; const char *needle; } cases[] = {
		{ 1, 3, 2, 2, "from shard 1 where shard 0 was next" },
		{ 0, 0, 0, 0, "a set of 0 shards (1..65536)" },
		{ 0, CTL_SHARDS_MAX + 1, CTL_FDS_BATCH, CTL_FDS_BATCH, "a set of 65537 shards" },
		{ 0, 3, 2, 2, "says 2 descriptors and carries 2; it must carry 3" },
		{ 0, 3, 3, 2, "says 3 descriptors and carries 2; it must carry 3" },
		{ 0, CTL_FDS_BATCH + 1, CTL_FDS_BATCH - 1, CTL_FDS_BATCH - 1,
		  "it must carry 64" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = raw_conn();
		batch(fd, cases[i].first, cases[i].total, cases[i].count, fds, cases[i].nfds, text,
		      sizeof(text));
		if (!strstr(text, cases[i].needle))
			fail_msg("case %zu: \"%s\", want \"%s\"", i, text, cases[i].needle);
		close(fd);
	}
	/* the last shard at its bound: a set of exactly CTL_SHARDS_MAX passes the batch check
	 * (and is then refused for the descriptors it would need, by option) */
	int fd = raw_conn();
	batch(fd, 0, CTL_SHARDS_MAX, CTL_FDS_BATCH, fds, CTL_FDS_BATCH, text, sizeof(text));
	if (!strstr(text, "a set of 65536 shards needs 131074 descriptors"))
		fail_msg("a set of 65536: \"%s\"", text);
	close(fd);
	/* an eventfd and a terminal are not shards */
	int ev = eventfd(0, EFD_CLOEXEC);
	int pty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	assert_true(ev >= 0 && pty >= 0);
	int odd[3] = { fds[0], ev, fds[2] };
	fd = raw_conn();
	batch(fd, 0, 3, 3, odd, 3, text, sizeof(text));
	if (!strstr(text, "shard 1 of the set is not a regular file"))
		fail_msg("an eventfd: \"%s\"", text);
	close(fd);
	odd[1] = pty;
	fd = raw_conn();
	batch(fd, 0, 3, 3, odd, 3, text, sizeof(text));
	if (!strstr(text, "shard 1 of the set is not a regular file"))
		fail_msg("a terminal: \"%s\"", text);
	close(fd);
	/* descriptors that cannot read: O_PATH (of a file the client need not be able to read)
	 * and write-only, refused at the batch for what they are */
	int op = open("/etc/passwd", O_PATH | O_CLOEXEC);
	char spath[192];
	snprintf(spath, sizeof(spath), "%s/s2.dpk", dir);
	int wo = open(spath, O_WRONLY | O_CLOEXEC);
	assert_true(op >= 0 && wo >= 0);
	odd[1] = op;
	fd = raw_conn();
	batch(fd, 0, 3, 3, odd, 3, text, sizeof(text));
	if (!strstr(text, "shard 1 of the set was not opened for reading (O_PATH)"))
		fail_msg("an O_PATH shard: \"%s\"", text);
	close(fd);
	odd[1] = fds[1];
	odd[2] = wo;
	fd = raw_conn();
	batch(fd, 0, 3, 3, odd, 3, text, sizeof(text));
	if (!strstr(text, "shard 2 of the set was not opened for reading (write-only)"))
		fail_msg("a write-only shard: \"%s\"", text);
	close(fd);
	close(op);
	close(wo);
	close(ev);
	close(pty);
	/* one more batch after the set came whole */
	fd = raw_conn();
	batch(fd, 0, 3, 3, fds, 3, text, sizeof(text));
	assert_string_equal(text, "ACK");
	batch(fd, 3, 3, 0, NULL, 0, text, sizeof(text));
	if (!strstr(text, "after all 3 shards came"))
		fail_msg("a batch past the set: \"%s\"", text);
	close(fd);
	close_all(fds, CTL_FDS_BATCH + 1);
	assert_fds_back(before);
	char why[512], path[192];
	snprintf(path, sizeof(path), "%s/set.dpks", dir);
	if (client_open("after", path, why, sizeof(why)) < 0)
		fail_msg("loaderd does not serve after the bad batches: %s", why);
}

/* Job opens that do not match the shards sent: each refused naming the manifest (as the client
 * named it), and loaderd never opens a shard itself. */
static void test_sets_job_open_mismatch_refused(void **state)
{
	char text[512], set[192], one[192];
	int fds[CTL_FDS_BATCH + 1];

	(void)state;
	make_set("set.dpks", 3);
	snprintf(set, sizeof(set), "%s/set.dpks", dir);
	snprintf(one, sizeof(one), "%s/s0.dpk", dir);
	start(linger1);
	int before = settled_fds();

	/* a manifest, no shards: loaderd does not open them by path */
	int fd = raw_conn();
	job_open_raw(fd, "noshards", set, text, sizeof(text));
	if (!strstr(text, "set.dpks names 3 shards; 0 were passed open"))
		fail_msg("a manifest without its shards: \"%s\"", text);
	close(fd);
	/* a .dpk with shards */
	unsigned idx3[3] = { 0, 1, 2 };
	open_shards(idx3, 3, fds);
	fd = raw_conn();
	batch(fd, 0, 3, 3, fds, 3, text, sizeof(text));
	assert_string_equal(text, "ACK");
	job_open_raw(fd, "dpkwith", one, text, sizeof(text));
	if (!strstr(text, "3 shards were passed with a file that is not a manifest"))
		fail_msg("a .dpk with shards: \"%s\"", text);
	close(fd);
	close_all(fds, 3);
	/* shards swapped: line 2 gets s1.dpk, which has another count */
	unsigned swapped[3] = { 1, 0, 2 };
	open_shards(swapped, 3, fds);
	fd = raw_conn();
	batch(fd, 0, 3, 3, fds, 3, text, sizeof(text));
	assert_string_equal(text, "ACK");
	job_open_raw(fd, "swapped", set, text, sizeof(text));
	if (!strstr(text, "line 2: shard s0.dpk has 9 samples; the manifest says 8"))
		fail_msg("swapped shards: \"%s\"", text);
	close(fd);
	close_all(fds, 3);
	/* a set sent in part: one batch of 65, then the job open */
	open_shards(idx3, 3, fds);
	unsigned many[CTL_FDS_BATCH];
	for (unsigned k = 0; k < CTL_FDS_BATCH; k++)
		many[k] = k % 3;
	int mf[CTL_FDS_BATCH];
	open_shards(many, CTL_FDS_BATCH, mf);
	fd = raw_conn();
	batch(fd, 0, CTL_FDS_BATCH + 1, CTL_FDS_BATCH, mf, CTL_FDS_BATCH, text, sizeof(text));
	assert_string_equal(text, "ACK");
	job_open_raw(fd, "part", set, text, sizeof(text));
	if (!strstr(text, "64 of the set's 65 shards came before the job open"))
		fail_msg("a set in part: \"%s\"", text);
	close(fd);
	close_all(mf, CTL_FDS_BATCH);
	close_all(fds, 3);
	assert_fds_back(before);
	char why[512];
	if (client_open("after", set, why, sizeof(why)) < 0)
		fail_msg("loaderd does not serve after the mismatches: %s", why);
}

/* --max-fds-per-uid 8: a set of 3 shards needs 2 x 3 + 2 = 8 (accepted, at the limit), a set of
 * 4 needs 10 (refused, naming the option); the limit is the uid's, and a job's count comes back
 * when it ends, so the same set opens again. */
static void test_sets_fd_limit_edges(void **state)
{
	char why[512], set3[192], set4[192];
	static const char *const opts[] = { "--linger", "1", "--max-fds-per-uid", "8", NULL };

	(void)state;
	make_set("set4.dpks", 4);
	make_set("set3.dpks", 3);
	snprintf(set3, sizeof(set3), "%s/set3.dpks", dir);
	snprintf(set4, sizeof(set4), "%s/set4.dpks", dir);
	start(opts);
	int before = settled_fds();
	if (client_open("four", set4, why, sizeof(why)) == 0)
		fail_msg("a set of 4 shards was served under --max-fds-per-uid 8");
	if (!strstr(why, "a set of 4 shards needs 10 descriptors; uid") ||
	    !strstr(why, "--max-fds-per-uid"))
		fail_msg("a set of 4: \"%s\"", why);
	if (client_open("three", set3, why, sizeof(why)) < 0)
		fail_msg("a set of 3 at the limit: %s", why);
	assert_fds_back(before);
	if (client_open("three-again", set3, why, sizeof(why)) < 0)
		fail_msg("the count did not come back: %s", why);
	assert_fds_back(before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sets_served_and_fds_given_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sets_bad_batches_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sets_job_open_mismatch_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sets_fd_limit_edges, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
