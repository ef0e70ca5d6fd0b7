/* test_job_stream.c - loader/job.c on a streamed set (srv_dataset.stream; docs/STREAMING.md,
 * part 2), driven one step at a time (tests/step_fill.h) on a real set opened pending: the open
 * attaches shard 0 only and reports the whole set; a step over a pending shard answers -EAGAIN
 * naming it, holding nothing; an attach makes it fillable, with the shard's records; a step holds
 * its shards until step_release (a detach is refused until then); a shard with a record past
 * --max-record fails its attach naming the shard and the sample, and stays pending; the future's
 * shards come in first-use order, bounded and deduplicated. */
#include "formats/dpk.h"
#include "formats/dpkset.h"
#include "loader/job.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/set_fixture.h"
#include "tests/step_fill.h"
#include "tests/tmpdir.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	return tmpdir_create(dir, sizeof(dir), "test_job_stream");
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

/* s.dpks: a.dpk (samples 0..3), b.dpk (4..7), c.dpk (8..11; sample 10 a 64-byte record); record
 * i's bytes all i, label i. */
static void make_set(void)
{
	static const char *const names[] = { "a.dpk", "b.dpk", "c.dpk" };
	static const unsigned counts[] = { 4, 4, 4 };
	uint8_t ids[3][DPK_IDENTITY_SIZE];

	setfx_shard(dir, names[0], 4, 0, NULL, ids[0]);
	setfx_shard(dir, names[1], 4, 4, NULL, ids[1]);
	setfx_shard(dir, names[2], 4, 8, &(struct setfx){ .big_at = 2 }, ids[2]);
	setfx_manifest(dir, "s.dpks", 3, names, counts, ids);
}

struct t {
	struct ldr_config cfg;
	struct srv_ops ops;
	void *job, *worker;
	struct srv_job_info info;
	struct ring_slot slot;
	char why[CTL_TEXT_MAX];
};

/* The job on s.dpks streamed, shard 0 delivered with the open; batch 4, sequential: step s reads
 * shard s. */
static void t_start(struct t *t)
{
	struct ctl_job_open spec;
	int shards[3];

	memset(t, 0, sizeof(*t));
	t->cfg.io = LDR_IO_AUTO;
	t->cfg.workers = 1;
	t->cfg.max_record = 32;
	ldr_job_ops(&t->cfg, &t->ops);
	memset(&spec, 0, sizeof(spec));
	snprintf(spec.job, sizeof(spec.job), "test");
	snprintf(spec.dataset, sizeof(spec.dataset), "s3://b/s.dpks");
	spec.batch = 4;
	spec.world = 1;
	spec.sampling = CTL_SAMPLE_SEQUENTIAL;
	make_set();
	int fd = setfx_open(dir, "s.dpks");
	shards[0] = setfx_open(dir, "a.dpk");
	shards[1] = shards[2] = -1;
	struct srv_dataset ds = { .fd = fd, .shards = shards, .nshards = 3, .stream = 1,
				  .uid = getuid() };
	int ret = t->ops.job_open(t->ops.ctx, &spec, &ds, &t->job, &t->info, t->why,
				  sizeof(t->why));
	close(fd);
	if (ret < 0)
		fail_msg("job_open: %s", t->why);
	assert_int_equal(shards[0], -1);  /* taken over */
	t->worker = t->ops.worker_init(t->ops.ctx, 0);
	assert_non_null(t->worker);
	t->slot.ids = calloc(4, sizeof(uint64_t));
	t->slot.labels = calloc(4, sizeof(int64_t));
	t->slot.flags = calloc(4, 1);
	t->slot.payload = calloc(4, 16);
}

static void t_stop(struct t *t)
{
	t->ops.worker_fini(t->ops.ctx, t->worker);
	t->ops.job_close(t->ops.ctx, t->job);
	free(t->slot.ids);
	free(t->slot.labels);
	free(t->slot.flags);
	free(t->slot.payload);
}

static int t_fill(struct t *t, uint64_t step, uint32_t *wait, struct srv_fill *f)
{
	struct srv_step st = { .job = t->job, .world = 1, .step_in_epoch = step };
	int ret = step_fill(&t->ops, t->worker, &st, 4, 3, &t->slot, f);

	*wait = st.wait_shard;
	return ret;
}

/* Step @step filled: samples 4 step .. 4 step + 3, each record's bytes its id. */
static void filled(struct t *t, uint64_t step)
{
	struct srv_fill f;
	uint32_t wait;

	if (t_fill(t, step, &wait, &f) < 0)
		fail_msg("step %llu: %s", (unsigned long long)step, f.why);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(t->slot.ids[i], 4 * step + i);
		assert_int_equal(t->slot.labels[i], (int64_t)(4 * step + i));
		for (unsigned b = 0; b < 16; b++)
			assert_int_equal(((const uint8_t *)t->slot.payload)[16 * i + b], 4 * step + i);
	}
}

static void test_job_stream_open_wait_attach(void **state)
{
	struct t t;
	struct srv_fill f;
	uint32_t wait = 99;
	struct stat sa;
	char p[128];

	(void)state;
	t_start(&t);
	assert_int_equal(t.info.samples, 12);  /* the whole set's, from the manifest */
	assert_int_equal(t.info.steps_per_epoch, 3);
	assert_int_equal(t.info.stream_shards, 3);
	snprintf(p, sizeof(p), "%s/a.dpk", dir);
	assert_int_equal(stat(p, &sa), 0);
	assert_int_equal(t.info.shard_bytes[0], (uint64_t)sa.st_size);
	assert_true(t.info.shard_bytes[1] > 0);  /* an estimate until it attaches */
	assert_int_equal(t.info.ring.sample_bytes, 16);
	filled(&t, 0);
	/* shard 1 pending: -EAGAIN naming it */
	assert_int_equal(t_fill(&t, 1, &wait, &f), -EAGAIN);
	assert_int_equal(wait, 1);
	/* a step holds its shards from step_open to step_release: no detach meanwhile */
	struct srv_step st = { .job = t.job, .world = 1, .step_in_epoch = 0 };
	uint64_t ids[4];
	uint8_t fl[4];
	int64_t lb[4];
	uint32_t held[4];
	st.ids = ids, st.flags = fl, st.labels = lb, st.held = held;
	assert_int_equal(t.ops.step_open(t.ops.ctx, t.worker, &st, t.why, sizeof(t.why)), 0);
	assert_int_equal(st.nheld, 1);
	assert_int_equal(held[0], 0);
	assert_int_equal(t.ops.shard_detach(t.ops.ctx, t.job, 0), -EBUSY);
	t.ops.step_release(t.ops.ctx, t.worker, &st);
	assert_int_equal(t.ops.shard_detach(t.ops.ctx, t.job, 0), 0);
	assert_int_equal(t.ops.shard_detach(t.ops.ctx, t.job, 0), -ENOENT);
	assert_int_equal(t_fill(&t, 0, &wait, &f), -EAGAIN);
	assert_int_equal(wait, 0);
	/* attach shard 1 (and 0 again): both steps fill, with their records */
	assert_int_equal(t.ops.shard_attach(t.ops.ctx, t.job, 1, setfx_open(dir, "b.dpk"), t.why,
					    sizeof(t.why)), 0);
	filled(&t, 1);
	assert_int_equal(t.ops.shard_attach(t.ops.ctx, t.job, 0, setfx_open(dir, "a.dpk"), t.why,
					    sizeof(t.why)), 0);
	filled(&t, 0);
	/* step_fill released: every shard can go */
	assert_int_equal(t.ops.shard_detach(t.ops.ctx, t.job, 1), 0);
	assert_int_equal(t.ops.shard_attach(t.ops.ctx, t.job, 1, setfx_open(dir, "b.dpk"), t.why,
					    sizeof(t.why)), 0);
	assert_int_equal(t.ops.shard_attach(t.ops.ctx, t.job, 1, setfx_open(dir, "b.dpk"), t.why,
					    sizeof(t.why)), -EEXIST);
	t_stop(&t);
}

/* A shard whose record is past --max-record (32 bytes: sample 10 has 64) fails its attach,
 * naming the shard and the sample, and stays pending: its steps still wait. */
static void test_job_stream_attach_refuses_record_past_bound(void **state)
{
	struct t t;
	struct srv_fill f;
	uint32_t wait = 99;

	(void)state;
	t_start(&t);
	int ret = t.ops.shard_attach(t.ops.ctx, t.job, 2, setfx_open(dir, "c.dpk"), t.why, sizeof(t.why));
	assert_int_equal(ret, -EFBIG);
	if (!strstr(t.why, "shard 2 (c.dpk): sample 10 is a record of 64 bytes, above the limit "
		    "of 32 (loaderd --max-record)"))
		fail_msg("%s", t.why);
	assert_int_equal(t_fill(&t, 2, &wait, &f), -EAGAIN);
	assert_int_equal(wait, 2);
	/* one past the last shard */
	assert_int_equal(t.ops.shard_attach(t.ops.ctx, t.job, 3, setfx_open(dir, "c.dpk"), t.why,
					    sizeof(t.why)), -ERANGE);
	t_stop(&t);
}

/* The future: steps' shards in first-use order, each once, the seen ones skipped, at most max. */
static void test_job_stream_future(void **state)
{
	struct t t;
	uint8_t seen[3] = { 0 };
	uint32_t out[8];

	(void)state;
	t_start(&t);
	assert_int_equal(t.ops.stream_future(t.ops.ctx, t.job, 0, 1, 2, seen, out, 8), 2);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 2);
	/* seen: only shard 0 is new; over the epoch's end (step 3 is epoch 1's step 0) */
	assert_int_equal(t.ops.stream_future(t.ops.ctx, t.job, 0, 0, 4, seen, out, 8), 1);
	assert_int_equal(out[0], 0);
	memset(seen, 0, sizeof(seen));
	assert_int_equal(t.ops.stream_future(t.ops.ctx, t.job, 0, 0, 3, seen, out, 2), 2);  /* max */
	assert_int_equal(out[1], 1);
	assert_int_equal(seen[2], 0);
	assert_int_equal(t.ops.stream_future(t.ops.ctx, t.job, 1, 0, 3, seen, out, 2), 0);  /* rank */
	t_stop(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_job_stream_open_wait_attach, setup, teardown),
		cmocka_unit_test_setup_teardown(test_job_stream_attach_refuses_record_past_bound,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_job_stream_future, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
