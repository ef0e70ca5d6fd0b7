/* test_hostile.c - the real loaderd (build/bin/loaderd) against clients that misbehave: each test
 * starts the daemon on a fresh socket with a raw dataset whose every byte is known
 * (tests/ld_real.h), lets a client do its worst, and checks that loaderd is still alive and still
 * serves a well-behaved client correctly.
 *
 * Tests named after a bug that was fixed say so ("Regression:"); they keep it fixed. */
#include "tests/ld_real.h"
#include "shm/ldc.h"
#include "shm/ring.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define SIDE 8                   /* samples are SIDE x SIDE x 3 raw bytes */
#define NSAMPLES 4096

static char dir[64], sock[128], logp[128], ds[128];
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

	(void)state;
	if (daemon_pid > 0)
		ld_stop(daemon_pid);
	daemon_pid = 0;
	if (getenv("TEST_HOSTILE_LOG")) {
		snprintf(cmd, sizeof(cmd), "cat %s >&2", logp);
		(void)!system(cmd);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

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

/* Read @epochs epochs of @batch from a fresh client; every id exactly once per epoch. */
static void consume_honest(const char *name, uint32_t batch, uint32_t epochs)
{
	char err[512], msg[256];
	struct ldc *c;
	struct ldc_info in;
	struct ldc_batch b;
	struct ldc_job j = job_of(name, batch, epochs);
	uint8_t *seen = calloc(NSAMPLES, 1);

	assert_non_null(seen);
	if (ldc_connect(sock, &c, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	if (ldc_open(c, &j, &in) < 0)
		fail_msg("open: %s", ldc_error(c));
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
	char err[512];
	struct ldc *c;
	struct ldc_info in;
	struct ldc_batch b;
	struct ldc_job j = job_of("scribbler", 64, 0);
	struct scribbler sc = { 0 };
	pthread_t th;

	(void)state;
	start(NULL);
	if (ldc_connect(sock, &c, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	if (ldc_open(c, &j, &in) < 0)
		fail_msg("open: %s", ldc_error(c));
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hostile_scribbled_ids_do_not_crash, setup, teardown),
	};
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
