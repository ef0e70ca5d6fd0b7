/* test_hostile.c - the real loaderd (build/bin/loaderd) against clients that misbehave: each test
 * starts the daemon on a fresh socket with a raw dataset whose every byte is known
 * (tests/ld_real.h), lets a client do its worst, and checks that loaderd is still alive and still
 * serves a well-behaved client correctly.
 *
 * What it covers: a consumer scribbling its slots' ids (the SIGSEGV of issue 13); datasets that
 * are a FIFO, /dev/zero, a directory, an empty file, not passed at all, renamed over, truncated
 * and rewritten mid-job; every limit with its option named; 1,000 idle connections; descriptor
 * exhaustion without a spin; a JPEG bomb; a squatted socket; a job of world 65,536 and its stats;
 * control characters in a path; a --group member's isolation; and the hostile client: several
 * hundred random moves from a replayable seed beside a job whose every byte is checked and whose
 * rate is compared with its rate alone.
 *
 * Tests named after a bug that was fixed say so ("Regression:"); they keep it fixed. */
#include "tests/ld_real.h"
#include "common/proc.h"
#include "formats/dpk.h"
#include "shm/ctl.h"
#include "shm/ldc.h"
#include "shm/ring.h"

#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define SIDE 8                   /* samples are SIDE x SIDE x 3 raw bytes */
#define NSAMPLES 4096

static char dir[64], sock[100], logp[128], ds[128];
static pid_t daemon_pid;

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_hostile.XXXXXX");
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

	int bad = 0;

	(void)state;
	if (daemon_pid > 0) {
		/* SIGTERM after whatever the test did: loaderd still stops cleanly */
		int st = ld_stop(daemon_pid);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "loaderd did not exit 0 on SIGTERM (status 0x%x); log %s\n", st,
				logp);
			bad = 1;
		}
	}
	daemon_pid = 0;
	if (getenv("TEST_HOSTILE_LOG")) {
		snprintf(cmd, sizeof(cmd), "cat %s >&2", logp);
		(void)!system(cmd);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 && !bad ? 0 : -1;
}

/* loaderd's options for a test whose honest job must be paced by its reads, not served from
 * memory (the rate tests beside a hostile load: see test_hostile_stats_hammer_beside_honest_job) */
static const char *const io_direct[] = { "--io", "direct", NULL };

static void start(const char *const *extra)
{
	daemon_pid = ld_start(sock, logp, extra);
	if (daemon_pid < 0)
		fail_msg("loaderd did not start: %s", strerror((int)-daemon_pid));
}

static void assert_daemon_alive(void)
{
	if (!ld_alive(daemon_pid)) {
		daemon_pid = 0;
		fail_msg("loaderd died (log in %s)", logp);
	}
}

static struct ldc_job job_of(const char *name, uint32_t batch, uint32_t epochs)
{
	struct ldc_job j = { .job = name, .dataset = ds, .batch = batch, .world = 1,
			     .epochs = epochs, .seed = 11 };
	return j;
}

/* Is @b an honest batch: every id once per epoch (@seen), labels and every byte right? */
static int batch_ok(const struct ldc_batch *b, uint8_t *seen, char *msg, size_t len)
{
	for (uint32_t i = 0; i < b->count; i++) {
		uint64_t id = b->ids[i];
		if (id >= NSAMPLES)
			return snprintf(msg, len, "step %" PRIu64 ": id %" PRIu64, b->step, id), -1;
		if (seen[id]++)
			return snprintf(msg, len, "step %" PRIu64 ": id %" PRIu64 " twice", b->step, id), -1;
		if (b->labels[i] != ld_label(id) || b->sample_flags[i])
			return snprintf(msg, len, "step %" PRIu64 ": id %" PRIu64 " label/flags", b->step,
					id), -1;
		const uint8_t *p = (const uint8_t *)b->data + (size_t)i * b->sample_bytes;
		for (uint64_t k = 0; k < b->sample_bytes; k++)
			if (p[k] != ld_byte(id, k))
				return snprintf(msg, len, "step %" PRIu64 ": id %" PRIu64 " byte %" PRIu64,
						b->step, id, k), -1;
	}
	return 0;
}

/* A client of the daemon with job @j open (what open said in *in); fails the test naming why
 * not. */
static struct ldc *open_job(const struct ldc_job *j, struct ldc_info *in)
{
	char err[512];
	struct ldc *c;

	if (ldc_connect(sock, &c, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	if (ldc_open(c, j, in) < 0)
		fail_msg("open: %s", ldc_error(c));
	return c;
}

/* Read @epochs epochs of @batch from a fresh client; every id exactly once per epoch. */
static void consume_honest(const char *name, uint32_t batch, uint32_t epochs)
{
	char msg[256];
	struct ldc *c;
	struct ldc_info in;
	struct ldc_batch b;
	struct ldc_job j = job_of(name, batch, epochs);
	uint8_t *seen = calloc(NSAMPLES, 1);

	assert_non_null(seen);
	c = open_job(&j, &in);
	for (uint64_t s = 0; s < in.steps_total; s++) {
		if (s % in.steps_per_epoch == 0)
			memset(seen, 0, NSAMPLES);
		if (ldc_acquire(c, 10000, &b) < 0)
			fail_msg("step %" PRIu64 ": %s", s, ldc_error(c));
		if (batch_ok(&b, seen, msg, sizeof(msg)) < 0)
			fail_msg("%s", msg);
		assert_int_equal(ldc_release(c, &b), 0);
	}
	free(seen);
	ldc_close(c);
}

/* ---- raw protocol ---- */

static int raw_conn(void)
{
	int fd = ld_raw_connect(sock, 5);

	if (fd < 0)
		fail_msg("connect %s: %s", sock, strerror(-fd));
	return fd;
}

/* loaderctl's request @op on a fresh connection; the whole answer into @out. Returns its length,
 * or -errno (a CTL_ERROR's errno, with its text in @out). */
static ssize_t admin(uint32_t op, uint32_t flags, const char *job, char *out, size_t cap)
{
	struct ctl_admin a = { .op = op, .flags = flags };
	char buf[CTL_MSG_MAX];
	uint16_t type;
	size_t len = 0;
	int fd = raw_conn();

	if (job)
		snprintf(a.job, sizeof(a.job), "%s", job);
	assert_int_equal(ctl_send(fd, CTL_ADMIN, &a, sizeof(a), NULL, 0), 0);
	for (;;) {
		ssize_t n = ctl_recv(fd, buf, &type, NULL, NULL);
		if (n < 0) {
			close(fd);
			return n;
		}
		if (type == CTL_ERROR) {
			struct ctl_error e;
			memcpy(&e, buf, sizeof(e));
			snprintf(out, cap, "%s", e.text);
			close(fd);
			return -e.err;
		}
		if (n == 0)
			break;
		if (len + (size_t)n < cap) {
			memcpy(out + len, buf, (size_t)n);
			len += (size_t)n;
		}
	}
	out[len < cap ? len : cap - 1] = '\0';
	close(fd);
	return (ssize_t)len;
}

/* A JOB_OPEN for @name on @path with @fd (or none) on a raw connection; the error text, or
 * "OK" when it was accepted. */
static void raw_open(const char *name, const char *path, int dfd, char *text, size_t cap)
{
	struct ctl_job_open m;
	char buf[CTL_MSG_MAX];
	uint16_t type;
	int got[2], ngot = 0;
	int fd = raw_conn();

	memset(&m, 0, sizeof(m));
	snprintf(m.job, sizeof(m.job), "%s", name);
	snprintf(m.dataset, sizeof(m.dataset), "%s", path);
	m.batch = 4;
	m.world = 1;
	assert_int_equal(ctl_send(fd, CTL_JOB_OPEN, &m, sizeof(m), dfd >= 0 ? &dfd : NULL, dfd >= 0), 0);
	ssize_t n = ctl_recv(fd, buf, &type, got, &ngot);
	for (int i = 0; i < ngot; i++)
		close(got[i]);
	if (n >= 0 && type == CTL_ERROR) {
		struct ctl_error e;
		memcpy(&e, buf, sizeof(e));
		snprintf(text, cap, "%s", e.text);
	} else {
		snprintf(text, cap, n >= 0 && type == CTL_JOB_OK ? "OK" : "reply %zd type %u", n, type);
	}
	close(fd);
}

/* ---- shared memory is write-only for the producer ---- */

struct scribbler {
	struct ldc *c;
	atomic_int stop;
};

/* Overwrite the ids of every slot, all the time, with ids far out of range. */
static void *scribble_ids(void *p)
{
	struct scribbler *sc = p;
	uint8_t *base = ldc_ring_base(sc->c);
	const struct ring_hdr *h = (const struct ring_hdr *)base;
	uint64_t slots = h->slots, slot_size = h->slot_size, off = h->slots_offset, ids = h->ids_off;
	uint32_t batch = h->batch;
	uint64_t x = 0x9e3779b97f4a7c15ull;

	while (!atomic_load(&sc->stop))
		for (uint64_t s = 0; s < slots; s++) {
			uint64_t *p64 = (uint64_t *)(base + off + s * slot_size + ids);
			for (uint32_t i = 0; i < batch; i++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				p64[i] = x;
			}
		}
	return NULL;
}

/* Regression: a client that wrote into the sample-id array of its slots while consuming made
 * loaderd read an id back from shared memory between the sampler and the checksum, and die with
 * SIGSEGV. The ids now stay in the worker's memory until the slot is complete. */
static void test_hostile_scribbled_ids_do_not_crash(void **state)
{
	struct ldc *c;
	struct ldc_info in;
	struct ldc_batch b;
	struct ldc_job j = job_of("scribbler", 64, 0);
	struct scribbler sc = { 0 };
	pthread_t th;

	(void)state;
	start(NULL);
	c = open_job(&j, &in);
	sc.c = c;
	assert_int_equal(pthread_create(&th, NULL, scribble_ids, &sc), 0);
	for (int s = 0; s < 400; s++) {
		int ret = ldc_acquire(c, 10000, &b);
		if (ret < 0)
			break;
		ldc_release(c, &b);
	}
	atomic_store(&sc.stop, 1);
	pthread_join(th, NULL);
	ldc_close(c);
	assert_daemon_alive();
	consume_honest("after", 32, 1);
	assert_daemon_alive();
}

/* ---- datasets: opened by the client, regular files only ---- */

static int64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A FIFO, /dev/zero, a directory, an empty file, and no fd at all: each is refused with a
 * sentence naming the path; none blocks loaderd (status answers at once meanwhile). Regression:
 * loaderd opened the path itself on its control thread, and a FIFO blocked it there. */
static void test_hostile_dataset_not_a_dpk_refused(void **state)
{
	char text[4096], path[160], err[512];

	(void)state;
	start(NULL);
	snprintf(path, sizeof(path), "%s/fifo", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	int fifo = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	assert_true(fifo >= 0);
	raw_open("fifo", path, fifo, text, sizeof(text));
	assert_non_null(strstr(text, "is not a regular file"));
	close(fifo);
	int64_t t0 = ms_now();
	assert_true(admin(CTL_OP_STATUS, 0, NULL, text, sizeof(text)) > 0);
	assert_true(ms_now() - t0 < 2000);

	int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	raw_open("zero", "/dev/zero", zero, text, sizeof(text));
	assert_non_null(strstr(text, "/dev/zero is not a regular file"));
	close(zero);
	int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	raw_open("dir", dir, d, text, sizeof(text));
	assert_non_null(strstr(text, "is not a regular file"));
	close(d);
	snprintf(path, sizeof(path), "%s/empty.dpk", dir);
	int e = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	raw_open("empty", path, e, text, sizeof(text));
	assert_non_null(strstr(text, "shorter than a header"));
	close(e);
	raw_open("nofd", ds, -1, text, sizeof(text));
	assert_non_null(strstr(text, "the client did not pass it open"));
	/* A descriptor that cannot read: O_PATH (search rights on the folders are enough to make
	 * one of a file the client may not read) and write-only. Refused for what it is, before
	 * anything looks at the file (not "shorter than a header", which would be its size). */
	int op = open("/etc/passwd", O_PATH | O_CLOEXEC);
	assert_true(op >= 0);
	raw_open("opath", "/etc/passwd", op, text, sizeof(text));
	if (!strstr(text, "dataset /etc/passwd was not opened for reading (O_PATH)"))
		fail_msg("an O_PATH descriptor: \"%s\"", text);
	close(op);
	int wo = open(path, O_WRONLY | O_CLOEXEC);
	assert_true(wo >= 0);
	raw_open("wronly", path, wo, text, sizeof(text));
	if (!strstr(text, "was not opened for reading (write-only)"))
		fail_msg("a write-only descriptor: \"%s\"", text);
	close(wo);
	int rw = open(path, O_RDWR | O_CLOEXEC);  /* read-write reads: past this check */
	assert_true(rw >= 0);
	raw_open("rdwr", path, rw, text, sizeof(text));
	assert_non_null(strstr(text, "shorter than a header"));
	close(rw);

	/* Through the client API: a FIFO is refused by the client itself, without blocking. */
	struct ldc *c;
	snprintf(path, sizeof(path), "%s/fifo", dir);
	struct ldc_job j = job_of("fifo2", 4, 1);
	j.dataset = path;
	if (ldc_connect(sock, &c, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(ldc_open(c, &j, &(struct ldc_info){ 0 }), -EINVAL);
	assert_non_null(strstr(ldc_error(c), "is not a regular file"));
	ldc_close(c);
	/* A path the client cannot open: its own error, in its own words. */
	snprintf(path, sizeof(path), "%s/nope.dpk", dir);
	j.dataset = path;
	if (ldc_connect(sock, &c, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(ldc_open(c, &j, &(struct ldc_info){ 0 }), -ENOENT);
	assert_non_null(strstr(ldc_error(c), "cannot open dataset"));
	ldc_close(c);
	assert_daemon_alive();
	consume_honest("after", 64, 1);
}

/* The dataset is read through the client's fd, not its path: after the path is replaced by a
 * rename, the job keeps serving the file that was opened, and a second rank that opens the new
 * file under the same job name is refused. */
static void test_hostile_dataset_renamed_keeps_serving(void **state)
{
	char err[512], tmp[160];
	struct ldc *c, *c2;
	struct ldc_info in;
	struct ldc_batch b;
	uint8_t *seen = calloc(NSAMPLES, 1);

	(void)state;
	start(NULL);
	struct ldc_job j = job_of("renamed", 64, 1);
	j.world = 2;
	c = open_job(&j, &in);
	snprintf(tmp, sizeof(tmp), "%s/other.dpk", dir);
	assert_int_equal(ld_dataset(tmp, 100, 4), 0);
	assert_int_equal(rename(tmp, ds), 0);
	j.rank = 1;
	if (ldc_connect(sock, &c2, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(ldc_open(c2, &j, &(struct ldc_info){ 0 }), -EEXIST);
	assert_non_null(strstr(ldc_error(c2), "another dataset file"));
	ldc_close(c2);
	char msg[256];
	for (uint64_t s = 0; s < in.steps_total; s++) {
		if (ldc_acquire(c, 10000, &b) < 0)
			fail_msg("step %" PRIu64 ": %s", s, ldc_error(c));
		if (batch_ok(&b, seen, msg, sizeof(msg)) < 0)
			fail_msg("%s", msg);
		ldc_release(c, &b);
	}
	free(seen);
	ldc_close(c);
	assert_daemon_alive();
}

/* Block sampling's geometry is the client's: at its limits (a block of 2^24 records, a window
 * of 2^16 blocks) and at its smallest, a real job over the real dataset delivers every sample
 * once per epoch with its bytes and label, and nothing in loaderd grows with the values (the
 * sampler holds no state per block or window); one past a limit is refused naming the field. */
static void test_hostile_block_geometry_at_limits(void **state)
{
	static const uint32_t geo[][2] = { { CTL_BLOCK_MAX, CTL_WINDOW_MAX }, { 1, 1 }, { 7, 3 },
					   { CTL_BLOCK_MAX, 1 }, { 1, CTL_WINDOW_MAX } };
	uint8_t *seen = calloc(NSAMPLES, 1);
	char name[32], msg[256];

	(void)state;
	assert_non_null(seen);
	start(NULL);
	for (size_t g = 0; g < sizeof(geo) / sizeof(geo[0]); g++) {
		struct ldc_info in;
		struct ldc_batch b;
		snprintf(name, sizeof(name), "geo%zu", g);
		struct ldc_job j = job_of(name, 16, 2);
		j.sampling = CTL_SAMPLE_BLOCK;
		j.block = geo[g][0];
		j.window = geo[g][1];
		struct ldc *c = open_job(&j, &in);
		for (uint64_t s = 0; s < in.steps_total; s++) {
			if (s % in.steps_per_epoch == 0)
				memset(seen, 0, NSAMPLES);
			if (ldc_acquire(c, 10000, &b) < 0)
				fail_msg("block %u window %u step %" PRIu64 ": %s", j.block, j.window, s,
					 ldc_error(c));
			if (batch_ok(&b, seen, msg, sizeof(msg)) < 0)
				fail_msg("block %u window %u: %s", j.block, j.window, msg);
			assert_int_equal(ldc_release(c, &b), 0);
		}
		ldc_close(c);
	}
	free(seen);
	for (int w = 0; w < 2; w++) {
		struct ctl_job_open m;
		char buf[CTL_MSG_MAX];
		uint16_t type = 0;
		int got[2], ngot = 0, fd = raw_conn(), dfd = open(ds, O_RDONLY | O_CLOEXEC);
		memset(&m, 0, sizeof(m));
		snprintf(m.job, sizeof(m.job), "geo-past");
		snprintf(m.dataset, sizeof(m.dataset), "%s", ds);
		m.batch = 4;
		m.world = 1;
		m.sampling = CTL_SAMPLE_BLOCK;
		m.block = w ? 1 : CTL_BLOCK_MAX + 1;
		m.window = w ? CTL_WINDOW_MAX + 1 : 1;
		assert_int_equal(ctl_send(fd, CTL_JOB_OPEN, &m, sizeof(m), &dfd, 1), 0);
		close(dfd);
		ssize_t n = ctl_recv(fd, buf, &type, got, &ngot);
		for (int i = 0; i < ngot; i++)
			close(got[i]);
		struct ctl_error e;
		assert_true(n == (ssize_t)sizeof(e) && type == CTL_ERROR);
		memcpy(&e, buf, sizeof(e));
		assert_int_equal(e.err, EINVAL);
		if (!strstr(e.text, w ? "window: 65537 blocks is not in 1..65536" :
			    "block: 16777217 records is not in 1..16777216"))
			fail_msg("refusal: %s", e.text);
		close(fd);
	}
	assert_daemon_alive();
}

/* Read a job of unbounded epochs; after step @at, call @change on the dataset; then read until
 * the job stops. Every batch delivered is honest; returns the error text. */
static void read_through_change(const char *name, void (*change)(void), char *text, size_t cap)
{
	char msg[256];
	struct ldc *c;
	struct ldc_info in;
	struct ldc_batch b;
	struct ldc_job j = job_of(name, 64, 0);
	uint8_t *seen = calloc(NSAMPLES, 1);

	j.slots = 2;
	c = open_job(&j, &in);
	for (uint64_t s = 0;; s++) {
		if (s == 3)
			change();
		if (s % in.steps_per_epoch == 0)
			memset(seen, 0, NSAMPLES);
		if (s > 3 * in.steps_per_epoch)
			fail_msg("%s: the job goes on after its dataset changed", name);
		int ret = ldc_acquire(c, 10000, &b);
		if (ret < 0) {
			snprintf(text, cap, "%s", ldc_error(c));
			break;
		}
		if (batch_ok(&b, seen, msg, sizeof(msg)) < 0)
			fail_msg("%s: %s", name, msg);
		ldc_release(c, &b);
	}
	free(seen);
	ldc_close(c);
}

static void cut_in_half(void)
{
	assert_int_equal(truncate(ds, 4096 + NSAMPLES / 2 * SIDE * SIDE * 3), 0);
}

static void overwrite_records(void)
{
	int fd = open(ds, O_WRONLY | O_CLOEXEC);
	size_t len = (size_t)NSAMPLES * SIDE * SIDE * 3;
	uint8_t *junk = malloc(len);

	assert_true(fd >= 0 && junk);
	memset(junk, 0x5a, len);
	assert_int_equal(pwrite(fd, junk, len, 4096), (ssize_t)len);
	free(junk);
	close(fd);
}

/* A change to the dataset while a job reads it (read_through_change): the job stops with an
 * error holding @needle; no SIGBUS, no wrong byte. */
struct change_case {
	const char *job;
	void (*change)(void);
	const char *needle;
};

/* Truncated mid-job: the job stops with a sentence that says so. Rewritten in place mid-job:
 * every record fails its checksum; the job stops naming that, and not one byte of the junk is
 * delivered. */
static const struct change_case change_cases[] = {
	{ "cut", cut_in_half, "was truncated while the job ran" },
	{ "rewritten", overwrite_records, "checksum mismatch" },
};

static void test_hostile_dataset_changed_mid_job(void **state)
{
	const struct change_case *k = *state;
	char text[512] = "";

	start(NULL);
	read_through_change(k->job, k->change, text, sizeof(text));
	if (!strstr(text, k->needle))
		fail_msg("error: %s", text);
	assert_daemon_alive();
}

/* ---- limits ---- */

/* Connections past --max-conns-per-uid are refused with a message naming the option; jobs past
 * --max-jobs-per-uid, a world above --max-world and rings past --mem-share too. */
static void test_hostile_limits_refused_with_option_named(void **state)
{
	char buf[CTL_MSG_MAX], err[512];
	int fds[5];
	uint16_t type;

	(void)state;
	const char *opts[] = { "--max-conns-per-uid", "5", "--max-jobs-per-uid", "2", "--max-world",
			       "8", "--mem-limit", "64M", "--mem-share", "10", "--linger", "1", NULL };
	start(opts);
	for (int i = 0; i < 5; i++)
		fds[i] = raw_conn();
	int extra = raw_conn();
	ssize_t n = ctl_recv(extra, buf, &type, NULL, NULL);
	assert_int_equal(n, sizeof(struct ctl_error));
	assert_int_equal(type, CTL_ERROR);
	assert_non_null(strstr(((struct ctl_error *)buf)->text, "--max-conns-per-uid"));
	close(extra);
	for (int i = 0; i < 5; i++)
		close(fds[i]);
	usleep(100000);

	struct ldc *c[3];
	struct ldc_info in;
	const char *names[3] = { "one", "two", "three" };
	for (int i = 0; i < 3; i++) {
		struct ldc_job j = job_of(names[i], 4, 1);
		if (ldc_connect(sock, &c[i], err, sizeof(err)) < 0)
			fail_msg("%s", err);
		int ret = ldc_open(c[i], &j, &in);
		if (i < 2 && ret < 0)
			fail_msg("open %s: %s", names[i], ldc_error(c[i]));
		if (i == 2) {
			assert_int_equal(ret, -EUSERS);
			assert_non_null(strstr(ldc_error(c[i]), "--max-jobs-per-uid"));
		}
	}
	for (int i = 0; i < 3; i++)
		ldc_close(c[i]);
	struct ldc_job j = job_of("wide", 4, 1);
	j.world = 9;
	if (ldc_connect(sock, &c[0], err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(ldc_open(c[0], &j, &in), -EINVAL);
	assert_non_null(strstr(ldc_error(c[0]), "--max-world"));
	ldc_close(c[0]);
	usleep(1600000);  /* the jobs linger 1 s, then no longer count */
	/* 10% of 64 MiB is 6.4 MiB; a ring of 4 x 2048 x 192 bytes (1.5 MiB + headers) fits, five
	 * do not. */
	j = job_of("big", 2048, 1);
	j.world = 5;
	struct ldc *held[5] = { 0 };
	int refused = 0;
	for (uint32_t r = 0; r < 5 && !refused; r++) {
		j.rank = r;
		if (ldc_connect(sock, &held[r], err, sizeof(err)) < 0)
			fail_msg("%s", err);
		if (ldc_open(held[r], &j, &in) < 0) {
			if (!strstr(ldc_error(held[r]), "--mem-share"))
				fail_msg("rank %u: %s", r, ldc_error(held[r]));
			refused = 1;
		}
	}
	for (int r = 0; r < 5; r++)
		ldc_close(held[r]);
	assert_true(refused);
	assert_daemon_alive();
}

static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* 1,000 connections that open no job: loaderd takes them all, serves a job beside them, and
 * closes each after --idle-timeout with a reason. */
static void test_hostile_thousand_idle_connections(void **state)
{
	enum { N = 1000 };
	static int fds[N];
	char buf[CTL_MSG_MAX];
	uint16_t type;

	(void)state;
	const char *opts[] = { "--max-conns-per-uid", "2000", "--max-conns", "2000", "--idle-timeout",
			       "2", NULL };
	start(opts);
	for (int i = 0; i < N; i++)
		fds[i] = raw_conn();
	int64_t t0 = ms_now();
	consume_honest("beside-idle", 64, 1);
	assert_daemon_alive();
	int told = 0;
	for (int i = 0; i < N; i++) {
		ssize_t n = ctl_recv(fds[i], buf, &type, NULL, NULL);
		told += n == sizeof(struct ctl_error) && type == CTL_ERROR &&
			strstr(((struct ctl_error *)buf)->text, "no job opened");
	}
	assert_int_equal(told, N);
	assert_true(ms_now() - t0 < 8000);
	close_all(fds, N);
	assert_true(ld_log_has(logp, "no job opened within"));
}

/* Out of descriptors (a low RLIMIT_NOFILE): loaderd does not spin on accept; it pauses, says so,
 * and serves again once descriptors are free. */
static void test_hostile_fd_exhaustion_no_spin(void **state)
{
	enum { N = 100 };
	int fds[N];

	(void)state;
	daemon_pid = ld_start_nofile(sock, logp, NULL, 48, 48);
	if (daemon_pid < 0)
		fail_msg("loaderd did not start: %s", strerror((int)-daemon_pid));
	for (int i = 0; i < N; i++)
		fds[i] = raw_conn();
	usleep(200000);
	double cpu0 = proc_cpu_seconds(daemon_pid);
	usleep(1000000);
	double cpu = proc_cpu_seconds(daemon_pid) - cpu0;
	if (cpu > 0.3)
		fail_msg("loaderd used %.2f s of CPU in 1 s with no descriptors left", cpu);
	assert_true(ld_log_has(logp, "cannot accept connections"));
	close_all(fds, N);
	assert_daemon_alive();
	/* The refused backlog drains; then a job is served. */
	usleep(300000);
	consume_honest("after-emfile", 64, 1);
}

/* At start loaderd raises its soft RLIMIT_NOFILE to the hard limit. */
static void test_hostile_nofile_raised_to_hard_limit(void **state)
{
	char path[64], line[256];
	int found = 0;

	(void)state;
	daemon_pid = ld_start_nofile(sock, logp, NULL, 64, 4096);
	if (daemon_pid < 0)
		fail_msg("loaderd did not start: %s", strerror((int)-daemon_pid));
	snprintf(path, sizeof(path), "/proc/%d/limits", (int)daemon_pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Max open files", 14)) {
			unsigned long soft = 0, hard = 0;
			assert_int_equal(sscanf(line + 14, "%lu %lu", &soft, &hard), 2);
			assert_int_equal(soft, 4096);
			assert_int_equal(hard, 4096);
			found = 1;
		}
	fclose(f);
	assert_true(found);
}

/* ---- decoder bounds ---- */

/* A 16x16 JPEG whose frame header is patched to claim @side x @side pixels. */
static unsigned char *jpeg_bomb(uint16_t side, unsigned long *len)
{
	unsigned char px[16 * 16 * 3], *jpg = NULL;
	tjhandle tj = tjInitCompress();

	for (size_t i = 0; i < sizeof(px); i++)
		px[i] = (unsigned char)(i * 7);
	assert_int_equal(tjCompress2(tj, px, 16, 0, 16, TJPF_RGB, &jpg, len, TJSAMP_444, 90, 0), 0);
	tjDestroy(tj);
	for (unsigned long i = 0; i + 8 < *len; i++)
		if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {  /* SOF0: len, precision, height, width */
			jpg[i + 5] = jpg[i + 7] = (unsigned char)(side >> 8);
			jpg[i + 6] = jpg[i + 8] = (unsigned char)side;
			return jpg;
		}
	fail_msg("no SOF0 in the JPEG");
	return NULL;
}

/* A JPEG bomb is a bad record, not an out-of-memory kill: sample 5's index says 60000 x 60000
 * pixels (caught before decode), sample 9's index says 16 x 16 but its frame says 60000 x 60000
 * (caught by the decoder). Both are substituted and logged with the limit's option. */
static void test_hostile_jpeg_bomb_is_a_bad_record(void **state)
{
	char path[160];
	uint8_t raw[16 * 16 * 3];
	struct dpk_writer *w;
	unsigned long blen;
	unsigned char *bomb = jpeg_bomb(60000, &blen);

	(void)state;
	snprintf(path, sizeof(path), "%s/bomb.dpk", dir);
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	for (int i = 0; i < 32; i++) {
		memset(raw, i, sizeof(raw));
		struct dpk_record r = { .kind = DPK_KIND_RAW, .label = i, .data = raw,
					.length = sizeof(raw), .shape = { 16, 16, 3 }, .ndim = 3 };
		if (i == 5 || i == 9) {
			uint32_t side = i == 5 ? 60000 : 16;
			r = (struct dpk_record){ .kind = DPK_KIND_JPEG, .label = i, .data = bomb,
						 .length = blen, .shape = { side, side, 3 }, .ndim = 3,
						 .subsamp = DPK_SUB_444 };
		}
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	tjFree(bomb);

	start(NULL);
	struct ldc *c;
	struct ldc_info in;
	struct ldc_batch b;
	struct ldc_job j = { .job = "bomb", .dataset = path, .batch = 16, .world = 1, .epochs = 1,
			     .crop_h = 8, .crop_w = 8, .transforms = CTL_TF_CENTER_CROP,
			     .sampling = CTL_SAMPLE_SEQUENTIAL };
	c = open_job(&j, &in);
	int substituted = 0;
	for (uint64_t s = 0; s < in.steps_total; s++) {
		if (ldc_acquire(c, 10000, &b) < 0)
			fail_msg("step %" PRIu64 ": %s", s, ldc_error(c));
		for (uint32_t i = 0; i < b.count; i++) {
			int bad = b.step * 16 + i == 5 || b.step * 16 + i == 9;
			assert_int_equal(!!(b.sample_flags[i] & RING_SAMPLE_SUBSTITUTED), bad);
			assert_true(b.ids[i] != 5 && b.ids[i] != 9);
			substituted += bad;
		}
		ldc_release(c, &b);
	}
	ldc_close(c);
	assert_int_equal(substituted, 2);
	assert_daemon_alive();
	assert_true(ld_log_has(logp, "sample 5 is bad (60000x60000 pixels, above the limit"));
	assert_true(ld_log_has(logp, "sample 9 is bad (JPEG of 60000x60000 pixels"));
}

/* ---- the client checks the daemon ---- */

/* Another user's process listens on the socket path (a squatter in /tmp): the client refuses it
 * before it sends anything, naming the socket and the uid that serves it. */
static void test_hostile_squatted_socket_refused(void **state)
{
	char err[512];
	struct ldc *c = NULL;
	int pipefd[2];

	(void)state;
	if (geteuid() != 0)
		skip();  /* needs to become another user */
	assert_int_equal(chmod(dir, 0777), 0);
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(2);
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 8) < 0)
			_exit(3);
		chmod(sock, 0666);
		(void)!write(pipefd[1], "x", 1);
		for (;;) {
			int a = accept(fd, NULL, NULL);
			char b[CTL_MSG_MAX];
			if (a >= 0 && recv(a, b, sizeof(b), 0) > 0)
				_exit(4);  /* the client sent something: the test fails */
		}
	}
	char x;
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &x, 1), 1);
	close(pipefd[0]);
	int ret = ldc_connect(sock, &c, err, sizeof(err));
	int st = 0;
	usleep(100000);
	pid_t done = waitpid(pid, &st, WNOHANG);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	ldc_close(c);
	assert_int_equal(ret, -EPERM);
	assert_non_null(strstr(err, sock));
	assert_non_null(strstr(err, "served by uid 65534"));
	assert_int_equal(done, 0);  /* still waiting for bytes that never came */
}

/* ---- admin ---- */

/* Status, at once: answered, or (the uid spent its --admin-share on the stats before it, as every
 * admin verb is charged) refused with EAGAIN naming the option. */
static void status_quick(char *st, size_t cap)
{
	int64_t t0 = ms_now();
	ssize_t n = admin(CTL_OP_STATUS, 0, NULL, st, cap);

	assert_true(ms_now() - t0 < 2000);
	if (n < 0 && (n != -EAGAIN || !strstr(st, "--admin-share")))
		fail_msg("status: %zd %s", n, st);
}

/* A job of world 65,536: it opens, serves, and loaderctl's stats for it list its one attached
 * rank and count the others: the answer costs O(attached ranks), not O(world) (issue 36: it was
 * 15 MB of JSON a request, and one stats of 63 such jobs took loaderd to 688 MB). */
static void test_hostile_world_65536_stats_lists_attached(void **state)
{
	char err[512], path[160], *text = NULL;
	struct ldc *c;
	struct ldc_info in;
	struct ldc_batch b;

	(void)state;
	snprintf(path, sizeof(path), "%s/wide.dpk", dir);
	assert_int_equal(ld_dataset(path, 65536, 1), 0);
	start(NULL);
	struct ldc_job j = { .job = "wide", .dataset = path, .batch = 1, .world = 65536,
			     .epochs = 1, .rank = 65535 };
	c = open_job(&j, &in);
	assert_int_equal(in.steps_per_epoch, 1);
	assert_int_equal(ldc_acquire(c, 10000, &b), 0);
	assert_int_equal(b.count, 1);
	ldc_release(c, &b);
	int64_t t0 = ms_now();
	if (ldc_admin(sock, CTL_OP_STATS, CTL_ADMIN_JSON, "wide", &text, err, sizeof(err)) < 0)
		fail_msg("stats: %s", err);
	size_t len = strlen(text), ranks = 0;
	/* one pass (strstr in a loop is quadratic under ASan, which checks the whole rest each call) */
	for (size_t i = 0; i + 8 <= len; i++)
		ranks += text[i] == '{' && !memcmp(text + i, "{\"rank\":", 8);
	assert_int_equal(ranks, 1);
	assert_non_null(strstr(text, "{\"rank\":65535,\"attached\":true"));
	assert_non_null(strstr(text, "\"ranks_not_listed\":65535,"));
	assert_non_null(strstr(text, "\"ranks_never_attached\":65535,"));
	assert_true(len < 4096);
	assert_non_null(strstr(text + len - 8, "]}]"));
	free(text);
	printf("# stats of world 65536, 1 rank attached: %zu bytes in %lld ms\n", len,
	       (long long)(ms_now() - t0));
	char st[4096];
	status_quick(st, sizeof(st));
	ldc_close(c);
	assert_daemon_alive();
}

/* Control characters in a dataset path are escaped in loaderctl's text and in the log: they
 * cannot forge lines or move a terminal's cursor. */
static void test_hostile_control_chars_escaped(void **state)
{
	char err[512], path[160], *text = NULL;
	struct ldc *c;
	struct ldc_info in;

	(void)state;
	snprintf(path, sizeof(path), "%s/a\nFAKE\x1b[31m.dpk", dir);
	assert_int_equal(ld_dataset(path, 64, 2), 0);
	start(NULL);
	struct ldc_job j = { .job = "ctrl", .dataset = path, .batch = 4, .world = 1, .epochs = 1 };
	c = open_job(&j, &in);
	if (ldc_admin(sock, CTL_OP_JOBS, 0, NULL, &text, err, sizeof(err)) < 0)
		fail_msg("jobs: %s", err);
	assert_non_null(strstr(text, "a\\x0aFAKE\\x1b[31m.dpk"));
	assert_null(strchr(text, 0x1b));
	free(text);
	ldc_close(c);
	assert_int_equal(truncate(path, 4096), 0);  /* a failure that logs the path */
	usleep(300000);
	assert_false(ld_log_has(logp, "\x1b"));
	assert_daemon_alive();
}

/* --group: a member (uid 65534 in group nogroup) cannot read root's dataset through loaderd
 * (it cannot open it, and loaderd opens nothing for it), sees only its own jobs and cannot stop
 * root's. */
static void test_hostile_group_member_isolated(void **state)
{
	char err[512], text_path[160], mine[160];
	struct ldc *c;
	struct ldc_info in;
	int pipefd[2];

	(void)state;
	if (geteuid() != 0 || !getgrgid(65534))
		skip();
	const struct group *g = getgrgid(65534);
	const char *opts[] = { "--group", g->gr_name, NULL };
	assert_int_equal(chmod(dir, 0711), 0);
	snprintf(mine, sizeof(mine), "%s/public.dpk", dir);
	assert_int_equal(ld_dataset(mine, 64, 2), 0);
	assert_int_equal(chmod(mine, 0644), 0);
	assert_int_equal(chmod(ds, 0600), 0);
	start(opts);
	struct ldc_job j = job_of("rootjob", 4, 0);
	c = open_job(&j, &in);
	snprintf(text_path, sizeof(text_path), "%s/child.out", dir);
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		FILE *out = fdopen(pipefd[1], "w");
		struct ldc *m;
		char *t = NULL, e[512];
		close(pipefd[0]);
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(2);
		/* root's dataset: the member cannot open it, so loaderd never reads it for it */
		struct ldc_job mj = job_of("steal", 4, 1);
		if (ldc_connect(sock, &m, e, sizeof(e)) < 0)
			_exit(3);
		fprintf(out, "steal=%d %s\n", ldc_open(m, &mj, &(struct ldc_info){ 0 }), ldc_error(m));
		ldc_close(m);
		mj = (struct ldc_job){ .job = "memberjob", .dataset = mine, .batch = 4, .world = 1 };
		if (ldc_connect(sock, &m, e, sizeof(e)) < 0)
			_exit(4);
		fprintf(out, "own=%d\n", ldc_open(m, &mj, &(struct ldc_info){ 0 }));
		int r = ldc_admin(sock, CTL_OP_JOBS, 0, NULL, &t, e, sizeof(e));
		fprintf(out, "jobs=%d [%s]\n", r, r == 0 ? t : e);
		free(t);
		r = ldc_admin(sock, CTL_OP_STOP, 0, "rootjob", &t, e, sizeof(e));
		fprintf(out, "stop=%d %s\n", r, r == 0 ? t : e);
		free(t);
		fclose(out);
		ldc_close(m);
		_exit(0);
	}
	close(pipefd[1]);
	char got[4096];
	size_t n = 0;
	ssize_t k;
	while ((k = read(pipefd[0], got + n, sizeof(got) - 1 - n)) > 0)
		n += (size_t)k;
	got[n] = '\0';
	close(pipefd[0]);
	int st;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("member child: status %d, said: %s", st, got);
	assert_non_null(strstr(got, "steal=-13 cannot open dataset"));
	assert_non_null(strstr(got, "own=0"));
	assert_non_null(strstr(got, "memberjob"));
	assert_null(strstr(got, "rootjob ("));
	assert_non_null(strstr(got, "stop=-2 loaderd: no job named rootjob"));
	char *all = NULL;
	if (ldc_admin(sock, CTL_OP_JOBS, 0, NULL, &all, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_non_null(strstr(all, "rootjob"));
	assert_non_null(strstr(all, "memberjob"));
	assert_null(strstr(all, "FAILED"));
	free(all);
	ldc_close(c);
	assert_daemon_alive();
}

/* ---- jobs belong to their owner (issue 23, item 4) ---- */

#define UID_A 64001u             /* two users of the daemon's group, with no passwd entries: */
#define UID_B 64002u             /* the kernel needs none, and no account is made or left */
#define GID_SHARE 64100u         /* a second group: A shares a job with it */

/* What a user's child process is to do (struct who_act's op), and what it prints. */
enum who_op {
	W_OPEN_READ,      /* open @job (rank, batch, start), read @steps batches: "open=RET id=ID
			   * first=STEP err" and, per batch, nothing unless it is wrong */
	W_JOBS,           /* loaderctl jobs --json: "jobs=RET TEXT" */
	W_STOP,           /* loaderctl stop @job: "stop=RET TEXT" */
};

struct who_act {
	enum who_op op;
	const char *job, *share_group, *owner;
	uint32_t rank, world, batch;
	int start_at;
	uint64_t at_step, steps;
};

/* Run @act as uid @uid with groups @gids (the first is the primary) in a child; its words in
 * @out. */
static void as_user(uid_t uid, const gid_t *gids, int ngids, const struct who_act *act, char *out,
		    size_t len)
{
	int p[2];

	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		FILE *f = fdopen(p[1], "w");
		char e[512], *t = NULL;
		close(p[0]);
		if (!f || setgroups((size_t)ngids, gids) < 0 || setgid(gids[0]) < 0 || setuid(uid) < 0)
			_exit(2);
		setvbuf(f, NULL, _IONBF, 0);
		if (act->op == W_JOBS || act->op == W_STOP) {
			int r = ldc_admin(sock, act->op == W_JOBS ? CTL_OP_JOBS : CTL_OP_STOP,
					  CTL_ADMIN_JSON, act->job, &t, e, sizeof(e));
			fprintf(f, "%s=%d %s", act->op == W_JOBS ? "jobs" : "stop", r, r == 0 ? t : e);
			free(t);
			_exit(0);
		}
		struct ldc *c;
		struct ldc_info in;
		struct ldc_job j = { .job = act->job, .dataset = ds, .batch = act->batch,
				     .world = act->world, .rank = act->rank, .seed = 11,
				     .start_at = act->start_at, .at_step = act->at_step,
				     .share_group = act->share_group, .owner = act->owner };
		if (ldc_connect(sock, &c, e, sizeof(e)) < 0) {
			fprintf(f, "connect: %s", e);
			_exit(3);
		}
		int r = ldc_open(c, &j, &in);
		fprintf(f, "open=%d id=%" PRIu64 " first=%" PRIu64 " %s\n", r, r ? 0 : in.job_id,
			r ? 0 : in.first_step, ldc_error(c));
		for (uint64_t k = 0; r == 0 && k < act->steps; k++) {
			struct ldc_batch b;
			if (ldc_acquire(c, 10000, &b) < 0 || b.step != in.first_step + k ||
			    b.count != act->batch || b.labels[0] != ld_label(b.ids[0]) ||
			    ldc_release(c, &b) < 0) {
				fprintf(f, "batch %" PRIu64 " wrong: %s\n", k, ldc_error(c));
				_exit(4);
			}
		}
		ldc_close(c);
		_exit(0);
	}
	close(p[1]);
	size_t n = 0;
	ssize_t k;
	while (n + 1 < len && (k = read(p[0], out + n, len - 1 - n)) > 0)
		n += (size_t)k;
	out[n] = '\0';
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("uid %u: status 0x%x: %s", (unsigned)uid, st, out);
}

/* "open=0 id=N ...": N, or fail. */
static uint64_t opened_id(const char *out)
{
	unsigned long long id;

	if (sscanf(out, "open=0 id=%llu", &id) != 1)
		fail_msg("expected an open: %s", out);
	return id;
}

static void daemon_for_two_users(void)
{
	static const char *opts[] = { "--group", NULL, NULL };
	const struct group *g = getgrgid(65534);

	opts[1] = g->gr_name;
	assert_int_equal(chmod(dir, 0711), 0);
	assert_int_equal(chmod(ds, 0644), 0);
	start(opts);
}

/* --group, two real uids of the group: a job is its owner's. B can neither list A's job, join it
 * as a rank, read its data nor move its resume position; a name is per owner, so B opening the
 * same name (even first: a squat) makes B's own job and A's opens are unaffected. Regression: a
 * job was found by name alone, and B attached as a rank of A's job. */
static void test_hostile_job_owned_by_its_uid(void **state)
{
	static const gid_t grp[] = { 65534 };
	char out[8192];

	(void)state;
	if (geteuid() != 0 || !getgrgid(65534))
		skip();
	daemon_for_two_users();
	/* A reads 3 steps of its job x (world 2), detaches: it resumes at 3 */
	as_user(UID_A, grp, 1, &(struct who_act){ W_OPEN_READ, "x", NULL, NULL, 0, 2, 4, 0, 0, 3 },
		out, sizeof(out));
	uint64_t ax = opened_id(out);
	/* B sees nothing of it */
	as_user(UID_B, grp, 1, &(struct who_act){ .op = W_JOBS }, out, sizeof(out));
	assert_non_null(strstr(out, "jobs=0 []"));
	/* B cannot join it, as any rank or at any position: the same answer as no job at all */
	as_user(UID_B, grp, 1, &(struct who_act){ W_OPEN_READ, "x", NULL, "64001", 1, 2, 4, 0, 0, 1 },
		out, sizeof(out));
	assert_non_null(strstr(out, "open=-2 "));
	assert_non_null(strstr(out, "job x of uid 64001: no such job shared with a group of yours"));
	as_user(UID_B, grp, 1, &(struct who_act){ W_OPEN_READ, "x", NULL, "64001", 0, 2, 4, 1, 40, 1 },
		out, sizeof(out));
	assert_non_null(strstr(out, "open=-2 "));
	as_user(UID_B, grp, 1, &(struct who_act){ W_OPEN_READ, "nosuch", NULL, "64001", 0, 1, 4, 0, 0,
						  0 }, out, sizeof(out));
	assert_non_null(strstr(out, "job nosuch of uid 64001: no such job shared with a group of yours"));
	/* B's own x: another job (another batch is no conflict), rank 0 moved to step 40 */
	as_user(UID_B, grp, 1, &(struct who_act){ W_OPEN_READ, "x", NULL, NULL, 0, 2, 8, 1, 40, 1 },
		out, sizeof(out));
	uint64_t bx = opened_id(out);
	assert_true(bx != ax);
	assert_non_null(strstr(out, "first=40"));
	/* B stops "x": its own; A's goes on */
	as_user(UID_B, grp, 1, &(struct who_act){ .op = W_STOP, .job = "x" }, out, sizeof(out));
	assert_non_null(strstr(out, "stop=0 "));
	/* A's x is where A left it */
	as_user(UID_A, grp, 1, &(struct who_act){ W_OPEN_READ, "x", NULL, NULL, 0, 2, 4, 0, 0, 1 },
		out, sizeof(out));
	assert_int_equal(opened_id(out), ax);
	assert_non_null(strstr(out, "first=3 "));

	/* a squat: B takes y first; A's y is A's own job, with A's spec */
	as_user(UID_B, grp, 1, &(struct who_act){ W_OPEN_READ, "y", NULL, NULL, 0, 1, 8, 0, 0, 1 },
		out, sizeof(out));
	uint64_t by = opened_id(out);
	as_user(UID_A, grp, 1, &(struct who_act){ W_OPEN_READ, "y", NULL, NULL, 0, 1, 4, 0, 0, 2 },
		out, sizeof(out));
	uint64_t ay = opened_id(out);
	assert_true(ay != by);
	assert_non_null(strstr(out, "first=0 "));
	as_user(UID_A, grp, 1, &(struct who_act){ .op = W_JOBS }, out, sizeof(out));
	assert_non_null(strstr(out, "\"job\":\"x\""));
	assert_non_null(strstr(out, "\"job\":\"y\""));
	assert_null(strstr(out, "\"uid\":64002"));
	/* root sees both users' jobs, each with its owner */
	char err[512], *all = NULL;
	if (ldc_admin(sock, CTL_OP_JOBS, CTL_ADMIN_JSON, NULL, &all, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_non_null(strstr(all, "\"uid\":64001"));
	assert_non_null(strstr(all, "\"uid\":64002"));
	free(all);
	assert_daemon_alive();
}

/* A job its owner shared with a group (ldc_job.share_group): a member of that group sees it and
 * joins it as a rank (naming the owner), reads its data, cannot stop it; a user of the daemon's
 * group who is not in that group neither sees nor joins it; nobody shares with a group they are
 * not in; the owner's opens must agree on the sharing. */
static void test_hostile_job_shared_with_group(void **state)
{
	static const gid_t both[] = { 65534, GID_SHARE }, one[] = { 65534 };
	char out[8192], gid[16];

	(void)state;
	if (geteuid() != 0 || !getgrgid(65534))
		skip();
	snprintf(gid, sizeof(gid), "%u", GID_SHARE);
	daemon_for_two_users();
	as_user(UID_A, both, 2, &(struct who_act){ W_OPEN_READ, "s", gid, NULL, 0, 2, 4, 0, 0, 2 },
		out, sizeof(out));
	uint64_t as = opened_id(out);
	/* B, a member: sees it, joins rank 1 of it, reads it */
	as_user(UID_B, both, 2, &(struct who_act){ .op = W_JOBS }, out, sizeof(out));
	assert_non_null(strstr(out, "\"job\":\"s\""));
	assert_non_null(strstr(out, "\"uid\":64001,\"shared_gid\":64100"));
	as_user(UID_B, both, 2, &(struct who_act){ W_OPEN_READ, "s", NULL, "64001", 1, 2, 4, 0, 0, 3 },
		out, sizeof(out));
	assert_int_equal(opened_id(out), as);
	/* ... but does not stop it */
	as_user(UID_B, both, 2, &(struct who_act){ .op = W_STOP, .job = "s" }, out, sizeof(out));
	assert_non_null(strstr(out, "stop=-1 "));
	assert_non_null(strstr(out, "only its owner stops it"));
	/* B without that group: nothing */
	as_user(UID_B, one, 1, &(struct who_act){ .op = W_JOBS }, out, sizeof(out));
	assert_non_null(strstr(out, "jobs=0 []"));
	as_user(UID_B, one, 1, &(struct who_act){ W_OPEN_READ, "s", NULL, "64001", 1, 2, 4, 0, 0, 1 },
		out, sizeof(out));
	assert_non_null(strstr(out, "open=-2 "));
	/* nor may it share a job of its own with a group it is not in */
	as_user(UID_B, one, 1, &(struct who_act){ W_OPEN_READ, "t", gid, NULL, 0, 1, 4, 0, 0, 0 },
		out, sizeof(out));
	assert_non_null(strstr(out, "open=-1 "));
	assert_non_null(strstr(out, "share_gid: uid 64002 is not a member of group 64100"));
	/* the owner's own opens agree on the sharing */
	as_user(UID_A, both, 2, &(struct who_act){ W_OPEN_READ, "s", NULL, NULL, 1, 2, 4, 0, 0, 0 },
		out, sizeof(out));
	assert_non_null(strstr(out, "open=-17 "));
	assert_non_null(strstr(out, "exists with another share"));
	/* and the job is whole: A's rank 0 goes on where it was */
	as_user(UID_A, both, 2, &(struct who_act){ W_OPEN_READ, "s", gid, NULL, 0, 2, 4, 0, 0, 1 },
		out, sizeof(out));
	assert_int_equal(opened_id(out), as);
	assert_non_null(strstr(out, "first=2 "));
	assert_daemon_alive();
}

/* ---- the hostile client ---- */

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
	return *x;
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, us % 1000000 * 1000 };
	nanosleep(&ts, NULL);
}

/* Write @n random bytes at random places of the ring's mapping: the header, the state words,
 * ids, labels, flags, payload; anywhere. */
static void scribble(struct ldc *c, uint64_t *x, int n)
{
	uint8_t *base = ldc_ring_base(c);
	size_t size = ldc_ring_size(c);

	for (int i = 0; i < n && base; i++) {
		size_t off;
		switch (rnd(x) % 4) {
		case 0: off = rnd(x) % 4096; break;                    /* header page */
		case 1: off = 4096 + rnd(x) % 4096; break;             /* state words */
		default: off = rnd(x) % size; break;
		}
		base[off] = (uint8_t)rnd(x);
	}
}

static void die_now(int sig)
{
	(void)sig;
	raise(SIGKILL);
}

/* One of the hostile client's moves, in a process of its own (which may die anywhere). */
static void hostile_move(uint64_t x)
{
	char err[512], buf[CTL_MSG_MAX + 64];
	struct ldc *c;
	struct ldc_info in;
	struct ldc_batch b;
	int move = (int)(rnd(&x) % 8);

	if (rnd(&x) % 8 == 0) {  /* SIGKILL itself at a random point of the move */
		signal(SIGALRM, die_now);
		ualarm((useconds_t)(rnd(&x) % 20000 + 1), 0);
	}
	switch (move) {
	case 0: case 1: case 2: {  /* a job whose ring it scribbles while acquiring and releasing */
		char name[32];
		int k = (int)(rnd(&x) % 6);
		snprintf(name, sizeof(name), "h%d", k);
		struct ldc_job j = job_of(name, 4 + 4 * (uint32_t)k, 0);  /* one spec per name */
		j.slots = 2 + (uint32_t)k % 3;
		if (ldc_connect(sock, &c, err, sizeof(err)) < 0 || ldc_open(c, &j, &in) < 0)
			break;
		int rounds = (int)(rnd(&x) % 20);
		for (int r = 0; r < rounds; r++) {
			scribble(c, &x, (int)(rnd(&x) % 16));
			if (ldc_acquire(c, 20, &b) == 0) {
				scribble(c, &x, (int)(rnd(&x) % 16));
				if (rnd(&x) % 4)
					ldc_release(c, &b);
			}
		}
		if (rnd(&x) % 2)
			raise(SIGKILL);  /* die holding whatever it holds */
		ldc_close(c);
		break;
	}
	case 3: {  /* a packet of random bytes, or a damaged good one */
		int fd = raw_conn();
		size_t len = (size_t)(rnd(&x) % sizeof(buf));
		for (size_t i = 0; i < len; i++)
			buf[i] = (char)rnd(&x);
		if (rnd(&x) % 2 && len >= sizeof(struct ctl_hdr)) {
			struct ctl_hdr h = { .magic = CTL_MAGIC, .version = CTL_VERSION,
					     .type = (uint16_t)(rnd(&x) % 9), .length = (uint32_t)len };
			if (rnd(&x) % 3 == 0)
				h.length = (uint32_t)rnd(&x);
			memcpy(buf, &h, sizeof(h));
		}
		(void)!send(fd, buf, len, MSG_NOSIGNAL);
		(void)!recv(fd, buf, sizeof(buf), 0);
		close(fd);
		break;
	}
	case 4: {  /* a job open cut short: truncated, or abandoned before the answer */
		struct ctl_job_open m;
		memset(&m, 0, sizeof(m));
		snprintf(m.job, sizeof(m.job), "h-cut%d", (int)(rnd(&x) % 3));
		snprintf(m.dataset, sizeof(m.dataset), "%s", ds);
		m.batch = 4;
		m.world = 1 + (uint32_t)(rnd(&x) % 4);
		int fd = raw_conn(), dfd = open(ds, O_RDONLY | O_CLOEXEC);
		struct ctl_hdr h = { .magic = CTL_MAGIC, .version = CTL_VERSION, .type = CTL_JOB_OPEN,
				     .length = sizeof(h) + sizeof(m) };
		memcpy(buf, &h, sizeof(h));
		memcpy(buf + sizeof(h), &m, sizeof(m));
		size_t len = rnd(&x) % 2 ? sizeof(h) + sizeof(m) : rnd(&x) % (sizeof(h) + sizeof(m));
		if (rnd(&x) % 2)
			(void)!send(fd, buf, len, MSG_NOSIGNAL);
		else
			(void)ctl_send(fd, CTL_JOB_OPEN, &m, sizeof(m), &dfd, 1);
		close(dfd);
		close(fd);  /* gone before the answer */
		break;
	}
	case 5: {  /* descriptors that are not a dataset, or too many */
		int fd = raw_conn(), fds[2];
		struct ctl_job_open m;
		memset(&m, 0, sizeof(m));
		snprintf(m.job, sizeof(m.job), "h-fd");
		snprintf(m.dataset, sizeof(m.dataset), "/dev/zero");
		m.batch = 4;
		m.world = 1;
		fds[0] = open(rnd(&x) % 2 ? "/dev/zero" : dir, O_RDONLY | O_CLOEXEC);
		fds[1] = open(ds, O_RDONLY | O_CLOEXEC);
		(void)ctl_send(fd, rnd(&x) % 3 ? CTL_JOB_OPEN : CTL_STATS_REQ, &m, sizeof(m), fds,
			       1 + (int)(rnd(&x) % 2));
		(void)!recv(fd, buf, sizeof(buf), 0);
		close(fds[0]);
		close(fds[1]);
		close(fd);
		break;
	}
	case 6: {  /* loaderctl requests, valid and not, read or not */
		struct ctl_admin a = { .op = (uint32_t)(rnd(&x) % 6), .flags = (uint32_t)(rnd(&x) % 3) };
		if (rnd(&x) % 2)
			snprintf(a.job, sizeof(a.job), "h%d", (int)(rnd(&x) % 6));
		int fd = raw_conn();
		(void)ctl_send(fd, CTL_ADMIN, &a, sizeof(a), NULL, 0);
		if (rnd(&x) % 2)
			(void)!recv(fd, buf, sizeof(buf), 0);
		close(fd);
		break;
	}
	default:  /* a connection that says nothing and goes */
		close(raw_conn());
		break;
	}
}

/* The hostile client: @iters moves, each in a child that may be SIGKILLed (by itself or here).
 * The seed makes it replay. */
static int hostile_main(uint64_t seed, int iters)
{
	for (int i = 0; i < iters; i++) {
		uint64_t x = seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull) ^ 1;
		rnd(&x);
		pid_t pid = fork();
		if (pid == 0) {
			hostile_move(x);
			_exit(0);
		}
		if (pid < 0)
			return 1;
		int kill_after = rnd(&x) % 6 == 0 ? (int)(rnd(&x) % 30000) : -1;
		if (kill_after >= 0) {
			sleep_us(kill_after);
			kill(pid, SIGKILL);
		}
		waitpid(pid, NULL, 0);
		sleep_us((long)(rnd(&x) % 3000));
	}
	return 0;
}

/* Read job @name for @ms, checking every batch (every id once per epoch, labels, bytes);
 * returns samples per second. */
static double honest_rate(struct ldc *c, const struct ldc_info *in, uint8_t *seen, uint64_t *step,
			  int64_t ms)
{
	struct ldc_batch b;
	char msg[256];
	uint64_t samples = 0;
	int64_t t0 = ms_now(), t;

	while ((t = ms_now()) - t0 < ms) {
		if (*step % in->steps_per_epoch == 0)
			memset(seen, 0, NSAMPLES);
		if (ldc_acquire(c, 10000, &b) < 0)
			fail_msg("honest step %" PRIu64 ": %s", *step, ldc_error(c));
		if (b.step != *step)
			fail_msg("honest: step %" PRIu64 ", want %" PRIu64, b.step, *step);
		if (batch_ok(&b, seen, msg, sizeof(msg)) < 0)
			fail_msg("honest: %s", msg);
		samples += b.count;
		ldc_release(c, &b);
		(*step)++;
	}
	return (double)samples * 1000.0 / (double)(t - t0);
}

struct rates {
	double alone, beside;    /* samples/s, mean over the paired 300 ms windows */
	double best;             /* the best beside window */
	int pairs;
	uint64_t steps;          /* steps checked in all */
};

/* The honest job on @c, beside @disturb(@arg) run in a child process (whose exit status must be
 * 0): in pairs of 300 ms windows, one with the child and its descendants stopped (SIGSTOP to its
 * process group, then @settle_us for loaderd to finish what it had asked: the job alone), one
 * with them running, until the child ends. Paired windows see
 * the same load from the rest of the (shared) machine, so their ratio is loaderd's doing. Every
 * batch is checked. */
static void rates_beside(struct ldc *c, const struct ldc_info *in, int (*disturb)(const void *),
			 const void *arg, long settle_us, struct rates *r)
{
	uint8_t *seen = calloc(NSAMPLES, 1);
	uint64_t step = 0;
	int st = 0;

	memset(r, 0, sizeof(*r));
	(void)honest_rate(c, in, seen, &step, 200);  /* warm */
	pid_t h = fork();
	assert_true(h >= 0);
	if (h == 0) {
		setpgid(0, 0);
		signal(SIGPIPE, SIG_IGN);
		_exit(disturb(arg));
	}
	setpgid(h, h);  /* either side may get there first */
	while (waitpid(h, &st, WNOHANG) == 0) {
		kill(-h, SIGSTOP);
		sleep_us(settle_us);  /* what it asked for before it stopped is done */
		double a = honest_rate(c, in, seen, &step, 300);
		kill(-h, SIGCONT);
		double b = honest_rate(c, in, seen, &step, 300);
		r->alone += a;
		r->beside += b;
		r->best = b > r->best ? b : r->best;
		r->pairs++;
		assert_daemon_alive();
	}
	kill(-h, SIGCONT);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_true(r->pairs > 0);
	r->alone /= r->pairs;
	r->beside /= r->pairs;
	(void)honest_rate(c, in, seen, &step, 300);  /* and after it */
	r->steps = step;
	free(seen);
}

struct hostile_arg {
	uint64_t seed;
	int iters;
};

static int run_hostile(const void *p)
{
	const struct hostile_arg *a = p;
	return hostile_main(a->seed, a->iters);
}

/* A well-behaved job runs beside a hostile client that, for several hundred moves picked from a
 * replayable seed (TEST_HOSTILE_SEED, TEST_HOSTILE_ITERS), scribbles any byte of its rings while
 * acquiring and releasing, sends malformed, oversized and truncated packets, abandons
 * connections half-way and is SIGKILLed at random points. loaderd never dies; the honest job
 * gets exactly its sampler's ids, every byte right, at >= 80% of its rate alone (paired windows
 * with the hostile client stopped and running, rates_beside); the hostile client is dropped with
 * reasons in the log. */
static void test_hostile_random_client_beside_honest_job(void **state)
{
	const char *e = getenv("TEST_HOSTILE_SEED"), *it = getenv("TEST_HOSTILE_ITERS");
	uint64_t seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
	int iters = it ? atoi(it) : 300;
	struct ldc *c;
	struct ldc_info in;

	(void)state;
	printf("# hostile client: TEST_HOSTILE_SEED=0x%llx TEST_HOSTILE_ITERS=%d\n",
	       (unsigned long long)seed, iters);
	fflush(stdout);
	start(NULL);
	struct ldc_job j = job_of("honest", 64, 0);
	c = open_job(&j, &in);
	struct hostile_arg ha = { seed, iters };
	struct rates r;
	rates_beside(c, &in, run_hostile, &ha, 20000, &r);
	printf("# honest job: %.0f samples/s alone, %.0f beside the hostile client (ratio %.2f over "
	       "%d window pairs; best beside window %.0f); %" PRIu64 " steps checked\n", r.alone,
	       r.beside, r.beside / r.alone, r.pairs, r.best, r.steps);
	fflush(stdout);
	assert_true(r.beside >= 0.8 * r.alone);
	ldc_close(c);
	assert_daemon_alive();
	assert_true(ld_log_has(logp, "bad message") || ld_log_has(logp, "malformed"));
	assert_true(ld_log_has(logp, "corrupted by the consumer; dropped") ||
		    ld_log_has(logp, "went away"));
}

/* Ask for the stats of the world-65,536 job "wide" for 4 s, as fast as loaderd answers (a
 * refusal is retried after 20 ms: a monitoring loop gone wild, not a connection flood). */
static int stats_hammer(const void *arg)
{
	char err[512];
	int64_t end = ms_now() + 4000;
	int served = 0;

	(void)arg;
	while (ms_now() < end) {
		char *t = NULL;
		int ret = ldc_admin(sock, CTL_OP_STATS, CTL_ADMIN_JSON, "wide", &t, err, sizeof(err));
		if (ret < 0 && ret != -EAGAIN)
			return 1;
		if (ret == -EAGAIN)
			sleep_us(20000);
		served += ret == 0;
		free(t);
	}
	return served > 0 ? 0 : 2;
}

/* An honest job beside @load (rates_beside, @settle_us to settle after each switch) keeps at
 * least 80% of its rate alone (ASan: 70%); the figures go to stdout, named by @what. */
static void honest_beside(const char *what, int (*load)(const void *arg), int settle_us)
{
	struct ldc_info in;
	struct ldc_job j = job_of("honest", 64, 0);
	struct ldc *c = open_job(&j, &in);
	struct rates r;

	rates_beside(c, &in, load, NULL, settle_us, &r);
	printf("# honest job beside %s: %.0f samples/s alone, %.0f beside (ratio %.2f over %d window "
	       "pairs)\n", what, r.alone, r.beside, r.beside / r.alone, r.pairs);
	fflush(stdout);
#ifdef __SANITIZE_ADDRESS__
	assert_true(r.beside >= 0.7 * r.alone);
#else
	assert_true(r.beside >= 0.8 * r.alone);
#endif
	ldc_close(c);
}

/* While another client asks for the stats of a job of 65,536 ranks over and over (about 10 MB
 * each), a well-behaved job keeps at least 80% of its rate: each uid has a budget of answer bytes
 * of the control thread's time (--admin-share), since answers hold the lock the workers need.
 * With --io direct, the honest job is paced by its reads, as the bound was set: with --io auto it
 * is served from memory at ~2M samples/s, both workers CPU-bound, and the ratio then measures how
 * a loaded 2-core machine shares its CPU with the rendering, not the lock (0.75-0.94 seen). */
static void test_hostile_stats_hammer_beside_honest_job(void **state)
{
	char err[512], path[160];
	struct ldc *w;
	struct ldc_info win;

	(void)state;
	snprintf(path, sizeof(path), "%s/wide.dpk", dir);
	assert_int_equal(ld_dataset(path, 65536, 1), 0);
	start(io_direct);
	struct ldc_job wj = { .job = "wide", .dataset = path, .batch = 1, .world = 65536 };
	if (ldc_connect(sock, &w, err, sizeof(err)) < 0 || ldc_open(w, &wj, &win) < 0)
		fail_msg("wide: %s", err);
	/* ASan's loaderd renders the 10 MB answer in ~260-375 ms, not ~100: over only 7 or 8 window
	 * pairs, 0.80-0.97 were seen on the shared machine; below 0.7 is a regression. */
	honest_beside("a stats hammer", stats_hammer, 20000);
	ldc_close(w);
	assert_daemon_alive();
}

/* Two threads asking for status as fast as loaderd answers, for 6 s (a refusal, EAGAIN under
 * --admin-share, is retried after 20 ms, as stats_hammer does). */
static void *status_loop(void *arg)
{
	char err[512];
	int64_t end = ms_now() + 6000;
	int *served = arg;

	while (ms_now() < end) {
		char *t = NULL;
		int ret = ldc_admin(sock, CTL_OP_STATUS, 0, NULL, &t, err, sizeof(err));
		if (ret < 0 && ret != -EAGAIN) {
			*served = -1;
			return NULL;
		}
		if (ret == -EAGAIN)
			sleep_us(20000);
		*served += ret == 0;
		free(t);
	}
	return NULL;
}

static int status_flood(const void *arg)
{
	pthread_t th[2];
	int served[2] = { 0, 0 };

	(void)arg;
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, status_loop, &served[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	return served[0] > 0 && served[1] > 0 ? 0 : 1;
}

#define FLOOD_JOBS 16

/* Regression (issue 23): status copied every rank of every job under the workers' lock, and was
 * not charged to --admin-share: with 16 jobs of world 65,536 (rank 0 attached) and two threads
 * asking for status in a loop, an honest job fell from 2,846 to 7.6 batches/s. Status now copies
 * per-job summaries (its cost does not grow with world sizes), renders without the lock and is
 * charged like every verb: the honest job keeps >= 80% of its rate alone (ASan: 70%). Status
 * also shows each job's memory, the rank tables of these jobs among it. */
static void test_hostile_status_flood_beside_honest_job(void **state)
{
	char err[512], path[160], what[64], *text = NULL;
	struct ldc *wide[FLOOD_JOBS];
	struct ldc_info win;

	(void)state;
	snprintf(path, sizeof(path), "%s/wide.dpk", dir);
	assert_int_equal(ld_dataset(path, 65536, 1), 0);
	/* paced by its reads, as the stats hammer's honest job (see there): what is measured is the
	 * lock the workers need, not how 2 loaded cores share their CPU with the status threads */
	start(io_direct);
	for (int i = 0; i < FLOOD_JOBS; i++) {
		char name[32];
		snprintf(name, sizeof(name), "wide%d", i);
		struct ldc_job wj = { .job = name, .dataset = path, .batch = 1, .world = 65536 };
		if (ldc_connect(sock, &wide[i], err, sizeof(err)) < 0)
			fail_msg("%s", err);
		if (ldc_open(wide[i], &wj, &win) < 0)
			fail_msg("%s: %s", name, ldc_error(wide[i]));
	}
	if (ldc_admin(sock, CTL_OP_STATUS, CTL_ADMIN_JSON, NULL, &text, err, sizeof(err)) < 0)
		fail_msg("status: %s", err);
	const char *p = strstr(text, "{\"job\":\"wide0\"");
	unsigned long long table = 0;
	if (!p || !(p = strstr(p, "\"rank_table_bytes\":")) ||
	    sscanf(p, "\"rank_table_bytes\":%llu", &table) != 1)
		fail_msg("status has no memory for job wide0: %s", text);
	assert_true(table >= 65536ull * 64);
	free(text);
	/* 500 ms to settle: a status that copied every rank of 16 jobs took longer than 20 ms, and
	 * made the "alone" windows as slow as the others */
	snprintf(what, sizeof(what), "a status flood (%d jobs of world 65536)", FLOOD_JOBS);
	honest_beside(what, status_flood, 500000);
	for (int i = 0; i < FLOOD_JOBS; i++)
		ldc_close(wide[i]);
	assert_daemon_alive();
}

/* --mem-limit counts what a job makes loaderd hold besides its rings: a job of world 65,536 has a
 * rank table of several MiB; under --mem-limit 2M it is refused at open, naming the option, while
 * a small job fits. --max-record: a dataset whose records are exactly the limit opens; one byte
 * less and it is refused at open naming the sample and the option. */
static void test_hostile_mem_limit_and_max_record(void **state)
{
	char err[512];
	struct ldc *c;
	struct ldc_info in;

	(void)state;
	const char *opts[] = { "--mem-limit", "2M", "--max-record", "192", NULL };  /* 8x8x3 */
	start(opts);
	struct ldc_job wj = job_of("wide", 1, 1);
	wj.world = 65536;
	if (ldc_connect(sock, &c, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(ldc_open(c, &wj, &in), -ENOMEM);
	if (!strstr(ldc_error(c), "table of 65536 ranks") || !strstr(ldc_error(c), "--mem-limit"))
		fail_msg("refusal: %s", ldc_error(c));
	ldc_close(c);
	consume_honest("fits", 4, 1);
	ld_stop(daemon_pid);
	const char *opts2[] = { "--max-record", "191", NULL };
	start(opts2);
	struct ldc_job j = job_of("big", 4, 1);
	if (ldc_connect(sock, &c, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(ldc_open(c, &j, &in), -EFBIG);
	if (!strstr(ldc_error(c), "sample 0 is a record of 192 bytes, above the limit of 191 "
		    "(loaderd --max-record)"))
		fail_msg("refusal: %s", ldc_error(c));
	ldc_close(c);
	assert_daemon_alive();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hostile_scribbled_ids_do_not_crash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_dataset_not_a_dpk_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_block_geometry_at_limits, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_hostile_dataset_renamed_keeps_serving, setup,
						teardown),
		{ "test_hostile_dataset_truncated_mid_job", test_hostile_dataset_changed_mid_job, setup,
		  teardown, (void *)&change_cases[0] },
		{ "test_hostile_dataset_rewritten_mid_job", test_hostile_dataset_changed_mid_job, setup,
		  teardown, (void *)&change_cases[1] },
		cmocka_unit_test_setup_teardown(test_hostile_limits_refused_with_option_named, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_hostile_thousand_idle_connections, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_fd_exhaustion_no_spin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_nofile_raised_to_hard_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_jpeg_bomb_is_a_bad_record, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_squatted_socket_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_world_65536_stats_lists_attached, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_control_chars_escaped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_group_member_isolated, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_job_owned_by_its_uid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_job_shared_with_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_random_client_beside_honest_job, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_hostile_stats_hammer_beside_honest_job, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_hostile_status_flood_beside_honest_job, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_hostile_mem_limit_and_max_record, setup, teardown),
	};
	struct rlimit rl;
	signal(SIGPIPE, SIG_IGN);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;  /* 1,000 connections */
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
