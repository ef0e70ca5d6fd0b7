/* test_uring_faults.c - loader/reader.c on a real io_uring with faults injected at the N-th
 * completion: io_uring_submit_and_wait is wrapped (--wrap), and after the kernel's own call the
 * wrapper rewrites the result of the completion it is told to (EIO, ECANCELED, ENOMEM, or a short
 * read of half the bytes), once (transient) or for every later completion of the same read
 * (persistent). What must hold: short reads are resumed and transient errors retried, with every
 * byte right; a persistent error reaches the caller for that record only, the same record every
 * run, after a bounded number of tries; and no fd is left behind. The job-level consequence (a
 * persistent error is a bad record, substituted deterministically) is checked through
 * loader/job.c's ops. Exit 77 where the kernel refuses io_uring. */
/* link: -Wl,--wrap=io_uring_submit_and_wait */
#include "formats/dpk.h"
#include "loader/job.h"
#include "loader/reader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/step_fill.h"
#include "tests/tmpdir.h"

#define NREC 64
#define RETRIES 5                /* reader.c's RETRY_MAX */

static char dir[64], path[128];
static uint64_t lens[NREC];

static uint8_t byte_at(uint64_t rec, uint64_t i)
{
	return (uint8_t)(rec * 29 + i * 13 + (i >> 9));
}

/* ---- the fault plan ---- */

enum fault { F_NONE, F_EIO, F_ECANCELED, F_ENOMEM, F_SHORT };

static struct {
	enum fault kind;
	unsigned at;                 /* the N-th completion (1-based) */
	int persistent;              /* every later completion of the same read too */
	unsigned seen;               /* completions seen */
	uint64_t victim;             /* user_data of the read hit at N */
	unsigned victim_hits;        /* completions of the victim rewritten */
	const struct io_uring *ring; /* the ring whose CQ position is tracked */
	unsigned pos;                /* next CQ index not looked at yet */
} plan;

static void plan_set(enum fault kind, unsigned at, int persistent)
{
	memset(&plan, 0, sizeof(plan));
	plan.kind = kind;
	plan.at = at;
	plan.persistent = persistent;
}

static void hit(struct io_uring_cqe *c)
{
	plan.victim_hits++;
	switch (plan.kind) {
	case F_EIO: c->res = -EIO; break;
	case F_ECANCELED: c->res = -ECANCELED; break;
	case F_ENOMEM: c->res = -ENOMEM; break;
	case F_SHORT: if (c->res > 1) c->res /= 2; break;
	case F_NONE: break;
	}
}

int __real_io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr);
int __wrap_io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr)
{
	int ret = __real_io_uring_submit_and_wait(ring, wait_nr);
	unsigned head = *ring->cq.khead;
	unsigned tail = __atomic_load_n(ring->cq.ktail, __ATOMIC_ACQUIRE);

	if (plan.ring != ring) {
		plan.ring = ring;
		plan.pos = head;
	}
	unsigned p = (int)(plan.pos - head) > 0 ? plan.pos : head;
	for (; p != tail; p++) {
		struct io_uring_cqe *c = &ring->cq.cqes[p & ring->cq.ring_mask];
		plan.seen++;
		if (plan.kind == F_NONE)
			continue;
		if (plan.seen == plan.at) {
			plan.victim = c->user_data;
			hit(c);
		} else if (plan.persistent && plan.seen > plan.at && c->user_data == plan.victim) {
			hit(c);
		}
	}
	plan.pos = tail;
	return ret;
}

/* ---- fixtures ---- */

static int setup(void **state)
{
	struct dpk_writer *w;
	uint8_t *buf = malloc(16 << 10);

	(void)state;
	if (!buf || tmpdir_create(dir, sizeof(dir), "test_uring_faults") < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/f.dpk", dir);
	if (dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w) < 0)
		return -1;
	for (uint64_t i = 0; i < NREC; i++) {
		/* 8 x 8 x 3 .. 48 x 48 x 3: raw images a job can crop */
		uint32_t side = 8 + (uint32_t)(i * 7 % 41);
		lens[i] = (uint64_t)side * side * 3;
		for (uint64_t j = 0; j < lens[i]; j++)
			buf[j] = byte_at(i, j);
		struct dpk_record r = { .kind = DPK_KIND_RAW, .label = (int64_t)i, .data = buf,
					.length = lens[i], .shape = { side, side, 3 }, .ndim = 3 };
		if (dpk_writer_add(w, &r) < 0)
			return -1;
	}
	int ret = dpk_writer_finish(w);
	dpk_writer_destroy(w);
	free(buf);
	return ret;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* Read every record once through a fresh io_uring reader; returns the index of the one record
 * that failed (with its error in *err), -1 if none did; every other record's bytes are checked.
 * @split: use both halves of the reader: records 32..64 submitted on one half, records 0..32
 * read (and the first half collected) while they are in flight. */
static int read_records(int split, int *err)
{
	struct ldr_reader *r;
	struct dpk *d;
	char why[256];
	uint64_t ids[NREC];
	const uint8_t *bufs[NREC];
	int errs[NREC], failed = -1;

	assert_int_equal(dpk_open(path, 0, &d, why, sizeof(why)), 0);
	assert_int_equal(ldr_reader_create(LDR_IO_BUFFERED, 4u << 20, &r), 0);
	if (strcmp(ldr_reader_path(r, -1), "io_uring")) {
		ldr_reader_destroy(r);
		dpk_close(d);
		skip();
	}
	for (uint32_t i = 0; i < NREC; i++)
		ids[i] = i;
	if (split) {
		assert_int_equal(ldr_reader_submit(r, 1, d, -1, ids + NREC / 2, NREC / 2), NREC / 2);
		assert_int_equal(ldr_reader_read(r, d, -1, ids, NREC / 2, bufs, errs), NREC / 2);
		assert_int_equal(ldr_reader_complete(r, 1, bufs + NREC / 2, errs + NREC / 2),
				 NREC / 2);
	} else {
		assert_int_equal(ldr_reader_read(r, d, -1, ids, NREC, bufs, errs), NREC);
	}
	for (int i = 0; i < NREC; i++) {
		if (errs[i]) {
			if (failed >= 0)
				fail_msg("records %d and %d both failed", failed, i);
			failed = i;
			*err = errs[i];
			continue;
		}
		for (uint64_t j = 0; j < lens[i]; j++)
			if (bufs[i][j] != byte_at((uint64_t)i, j))
				fail_msg("record %d byte %llu wrong", i, (unsigned long long)j);
	}
	ldr_reader_destroy(r);
	dpk_close(d);
	return failed;
}

/* ---- the reader ---- */

/* Each fault of @kinds once at the 1st, 7th or 40th completion of a read (@split: of both
 * halves): retried (EIO, ECANCELED, ENOMEM) or resumed (a short read); every record arrives
 * whole. */
static void transient_retried(int split, const enum fault *kinds, size_t nkinds)
{
	static const unsigned ats[] = { 1, 7, 40 };
	int err = 0;

	for (size_t k = 0; k < nkinds; k++)
		for (size_t a = 0; a < 3; a++) {
			plan_set(kinds[k], ats[a], 0);
			int failed = read_records(split, &err);
			if (failed >= 0)
				fail_msg("fault %d at %u: record %d failed (%s)", (int)kinds[k], ats[a],
					 failed, strerror(-err));
			assert_int_equal(plan.victim_hits, 1);
			assert_true(plan.seen > NREC);  /* the read was tried again */
		}
}

/* @kind on every completion of one read (@split: of both halves): the error (@want) reaches the
 * caller for that record only, after 1 + RETRIES tries, and it is the same record on two runs. */
static void persistent_reported(int split, enum fault kind, int want)
{
	int first = -1, err = 0;

	for (int run = 0; run < 2; run++) {
		plan_set(kind, 10, 1);
		int failed = read_records(split, &err);
		assert_true(failed >= 0);
		assert_int_equal(err, want);
		assert_int_equal(plan.victim_hits, 1 + RETRIES);
		if (run == 0)
			first = failed;
		else
			assert_int_equal(failed, first);
	}
}

static void test_uring_faults_transient_retried(void **state)
{
	static const enum fault kinds[] = { F_EIO, F_ECANCELED, F_ENOMEM, F_SHORT };
	int fds = count_fds();

	(void)state;
	transient_retried(0, kinds, 4);
	plan_set(F_NONE, 0, 0);
	assert_int_equal(count_fds(), fds);
}

/* The same fault on every completion of one read: a short read still finishes (each completion
 * brings half of what is left); an error reaches the caller for that record only. */
static void test_uring_faults_persistent_reported(void **state)
{
	int fds = count_fds(), err = 0;

	(void)state;
	plan_set(F_SHORT, 10, 1);
	assert_int_equal(read_records(0, &err), -1);
	assert_true(plan.victim_hits >= 2);
	persistent_reported(0, F_EIO, -EIO);
	persistent_reported(0, F_ECANCELED, -ECANCELED);
	persistent_reported(0, F_ENOMEM, -ENOMEM);
	plan_set(F_NONE, 0, 0);
	assert_int_equal(count_fds(), fds);
}

/* Faults while two halves are in flight (a completion of either half can arrive while the other
 * is waited for): transient ones are retried, a persistent one reaches the caller for that record
 * only. */
static void test_uring_faults_two_halves(void **state)
{
	static const enum fault kinds[] = { F_EIO, F_ECANCELED, F_SHORT };
	int fds = count_fds();

	(void)state;
	transient_retried(1, kinds, 3);
	persistent_reported(1, F_EIO, -EIO);
	plan_set(F_NONE, 0, 0);
	assert_int_equal(count_fds(), fds);
}

/* ---- the job: a persistent read error is a bad record ---- */

/* Fill one step of a sequential job over the dataset with @plan in force; the ids and flags. */
static void fill_step(uint64_t *ids, uint8_t *flags, uint64_t *bad)
{
	struct ldr_config cfg = { .io = LDR_IO_BUFFERED };
	struct srv_ops ops;
	struct ctl_job_open spec;
	struct srv_job_info info;
	struct srv_fill f;
	struct ring_slot slot;
	char why[CTL_TEXT_MAX];
	void *job;

	memset(&spec, 0, sizeof(spec));
	snprintf(spec.job, sizeof(spec.job), "faults");
	snprintf(spec.dataset, sizeof(spec.dataset), "%s", path);
	spec.batch = NREC;
	spec.world = 1;
	spec.crop_h = spec.crop_w = 8;
	spec.transforms = CTL_TF_CENTER_CROP;
	spec.sampling = CTL_SAMPLE_SEQUENTIAL;
	ldr_job_ops(&cfg, &ops);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct srv_dataset ds = { .fd = fd, .uid = getuid() };
	assert_int_equal(ops.job_open(ops.ctx, &spec, &ds, &job, &info, why, sizeof(why)), 0);
	close(fd);
	void *w = ops.worker_init(ops.ctx, 0);
	assert_non_null(w);
	int64_t labels[NREC];
	uint8_t *payload = malloc((size_t)NREC * info.ring.sample_bytes);
	memset(&slot, 0, sizeof(slot));
	slot.ids = ids;
	slot.flags = flags;
	slot.labels = labels;
	slot.payload = payload;
	struct srv_step st = { .job = job, .world = 1 };
	assert_int_equal(step_fill(&ops, w, &st, NREC, 0, &slot, &f), 0);
	assert_int_equal(st.count, NREC);
	*bad = f.bad;
	free(payload);
	ops.worker_fini(ops.ctx, w);
	ops.job_close(ops.ctx, job);
}

static void test_uring_faults_persistent_substituted_deterministically(void **state)
{
	uint64_t ids[2][NREC], bad[2];
	uint8_t flags[2][NREC];
	int fds = count_fds();

	(void)state;
	{
		int err;
		plan_set(F_NONE, 0, 0);
		(void)read_records(0, &err);  /* skips (77) where io_uring is refused */
	}
	for (int run = 0; run < 2; run++) {
		plan_set(F_EIO, 20, 1);
		fill_step(ids[run], flags[run], &bad[run]);
		assert_int_equal(bad[run], 1);
	}
	assert_memory_equal(ids[0], ids[1], sizeof(ids[0]));
	assert_memory_equal(flags[0], flags[1], sizeof(flags[0]));
	int subs = 0;
	for (int i = 0; i < NREC; i++)
		subs += !!(flags[0][i] & RING_SAMPLE_SUBSTITUTED);
	assert_int_equal(subs, 1);
	plan_set(F_NONE, 0, 0);
	assert_int_equal(count_fds(), fds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uring_faults_transient_retried),
		cmocka_unit_test(test_uring_faults_persistent_reported),
		cmocka_unit_test(test_uring_faults_two_halves),
		cmocka_unit_test(test_uring_faults_persistent_substituted_deterministically),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
