/* test_srv_stream.c - the server's steps on a streamed set (docs/STREAMING.md, part 2): a step
 * whose shard is pending parks (its slot kept, no worker waits), other rings and jobs keep being
 * filled, a shard's attach (srv_shard_ready) reopens exactly the parked steps of its job, steps
 * reach the consumer in order with the pattern's bytes, every step opened is released once, a
 * retired ring or a failed stream abandons its parked steps, and an attach between a step_open's
 * -EAGAIN and the park is not lost. A real server core in this process (tests/srv_harness.h's
 * pattern filler, wrapped): jobs named "s..." are streamed, step s of them reads shard
 * (s / SPS) % NSH only. Also under TSan (make test-tsan). */
#include "loader/srv_impl.h"
#include "tests/srv_harness.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define NSH 8   /* shards of a streamed fake set */
#define NJOBS 4

/* A fake streamed job: the pattern job it wraps and its shards' state. */
struct sjob {
	void *pat;                   /* pat_job_open's; NULL: free entry */
	int streamed;
	uint32_t sps;                /* steps per shard */
	atomic_int attached[NSH];
	atomic_int held[NSH];        /* steps holding each shard now */
	atomic_ulong eagain[64];     /* -EAGAIN answers per step (steps < 64) */
	atomic_ulong opens, releases;
	atomic_int race;             /* armed: the next -EAGAIN first attaches its shard */
	struct job *sj;              /* the server's job (for the race) */
};

static struct sjob g_jobs[NJOBS];
static pthread_mutex_t g_jmu = PTHREAD_MUTEX_INITIALIZER;
static struct srv *g_srv;
static pthread_t g_run;

static struct sjob *sjob_of(const void *pat)
{
	for (unsigned k = 0; k < NJOBS; k++)
		if (g_jobs[k].pat == pat)
			return &g_jobs[k];
	return NULL;
}

static int s_job_open(void *ctx, const struct ctl_job_open *spec, const struct srv_dataset *ds,
		      void **job, struct srv_job_info *info, char *why, size_t whylen)
{
	int ret = pat_job_open(ctx, spec, ds, job, info, why, whylen);

	if (ret < 0)
		return ret;
	pthread_mutex_lock(&g_jmu);
	struct sjob *x = sjob_of(NULL);
	if (x) {
		memset(x, 0, sizeof(*x));
		x->pat = *job;
		x->streamed = spec->job[0] == 's';
		x->sps = spec->job[1] >= '1' && spec->job[1] <= '9' ? (uint32_t)(spec->job[1] - '0') : 1;
		atomic_store(&x->attached[0], 1);  /* shard 0 comes with the open */
		if (x->streamed)
			info->stream_shards = NSH;
	}
	pthread_mutex_unlock(&g_jmu);
	if (!x) {
		pat_job_close(ctx, *job);
		snprintf(why, whylen, "test: too many jobs");
		return -ENOMEM;
	}
	return 0;
}

static void s_job_close(void *ctx, void *job)
{
	pthread_mutex_lock(&g_jmu);
	struct sjob *x = sjob_of(job);
	if (x)
		x->pat = NULL;
	pthread_mutex_unlock(&g_jmu);
	pat_job_close(ctx, job);
}

static struct sjob *sjob_locked(const void *pat)
{
	pthread_mutex_lock(&g_jmu);
	struct sjob *x = sjob_of(pat);
	pthread_mutex_unlock(&g_jmu);
	return x;
}

static int s_step_open(void *ctx, void *worker, struct srv_step *st, char *why, size_t whylen)
{
	struct sjob *x = sjob_locked(st->job);

	if (x && x->streamed) {
		uint64_t step = st->step_in_epoch;  /* one epoch in these tests */
		uint32_t k = (uint32_t)(step / x->sps) % NSH;
		if (!atomic_load(&x->attached[k])) {
			if (step < 64)
				atomic_fetch_add(&x->eagain[step], 1);
			if (step == 1 && atomic_exchange(&x->race, 0)) {  /* step 1's, whichever
									    * worker opens it */
				/* the stream attaches it now, between this answer and the park */
				atomic_store(&x->attached[k], 1);
				srv_shard_ready(g_srv, x->sj);
			}
			st->wait_shard = k;
			return -EAGAIN;
		}
		atomic_fetch_add(&x->held[k], 1);
		st->held[0] = k;
		st->nheld = 1;
		atomic_fetch_add(&x->opens, 1);
	}
	return pat_step_open(ctx, worker, st, why, whylen);
}

static void s_step_release(void *ctx, void *worker, struct srv_step *st)
{
	struct sjob *x = sjob_locked(st->job);

	(void)ctx, (void)worker;
	if (!x || !x->streamed) {
		assert_int_equal(st->nheld, 0);
		return;
	}
	assert_int_equal(st->nheld, 1);
	assert_true(atomic_fetch_sub(&x->held[st->held[0]], 1) > 0);
	atomic_fetch_add(&x->releases, 1);
}

static void *run_main(void *p)
{
	srv_run(p);
	return NULL;
}

static void *worker_init(void *ctx, unsigned index)
{
	static unsigned ids[64];

	(void)ctx;
	return &ids[index % 64];  /* pat_fill wants a worker state, any */
}

static int setup(void **state)
{
	/* fixed_workers: every free slot is opened at once (no self-sizing target that grows
	 * with the demand), so a streamed ring's parked steps settle at its free slots */
	struct srv_opts o = { .workers = 2, .group = (gid_t)-1, .default_slots = 4,
			      .linger_ms = 200, .fixed_workers = 1 };
	struct srv_ops ops = { .job_open = s_job_open, .job_close = s_job_close,
			       .worker_init = worker_init, .step_open = s_step_open,
			       .step_release = s_step_release, .fill = pat_fill,
			       .phases = { { "io", "reading" }, { "decode", "decoding" } } };
	char why[256];

	memset(g_jobs, 0, sizeof(g_jobs));
	srvh_setup(state);
	o.socket_path = g_sock;
	if (srv_create(&o, &ops, &g_srv, why, sizeof(why)) < 0) {
		fprintf(stderr, "srv_create: %s\n", why);
		return -1;
	}
	return pthread_create(&g_run, NULL, run_main, g_srv) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	srv_stop(g_srv);
	pthread_join(g_run, NULL);
	srv_destroy(g_srv);  /* abandons what still waits: ASan sees any leak */
	g_srv = NULL;
	return srvh_teardown(state);
}

/* The server's job @name and the fake's state of it. */
static struct sjob *find(const char *name, struct job **sj)
{
	pthread_mutex_lock(&g_srv->mu);
	struct job *j = srv_job_find(g_srv, getuid(), name);
	void *pat = j ? j->state : NULL;
	pthread_mutex_unlock(&g_srv->mu);
	assert_non_null(j);
	struct sjob *x = sjob_locked(pat);
	assert_non_null(x);
	*sj = j;
	x->sj = j;
	return x;
}

static unsigned nparked(struct job *j)
{
	pthread_mutex_lock(&g_srv->mu);
	unsigned n = j ? j->nparked : g_srv->nparked;
	pthread_mutex_unlock(&g_srv->mu);
	return n;
}

/* Wait up to 5 s for the parked steps of @j (NULL: all) to be @n. */
static void parked_is(struct job *j, unsigned n)
{
	int64_t end = mono_ms() + 5000;

	while (nparked(j) != n && mono_ms() < end)
		usleep(1000);
	assert_int_equal(nparked(j), n);
}

/* Wait until steps of @j park (how many: the ring's target, at most its slots), and a while
 * more for the count to settle; the count. */
static unsigned parked_settled(struct job *j)
{
	int64_t end = mono_ms() + 5000;
	unsigned n;

	while (!nparked(j) && mono_ms() < end)
		usleep(1000);
	do {
		n = nparked(j);
		usleep(50000);
	} while (n != nparked(j));
	assert_true(n >= 1 && n <= 4);
	return n;
}

static void wait_ulong(atomic_ulong *v, unsigned long want)
{
	int64_t end = mono_ms() + 5000;

	while (atomic_load(v) != want && mono_ms() < end)
		usleep(1000);
	assert_int_equal(atomic_load(v), want);
}

static void attach(struct sjob *x, struct job *j, uint32_t k)
{
	atomic_store(&x->attached[k], 1);
	srv_shard_ready(g_srv, j);
}

static void no_batch(struct ldc *c, int ms)
{
	struct ldc_batch b;

	assert_int_not_equal(ldc_acquire(c, ms, &b), 0);
}

/* A streamed job waits on its pending shards without holding a worker: a plain job beside it is
 * filled whole meanwhile; an attach reopens exactly the parked steps, and the consumer gets
 * every step, in order, with the pattern's bytes; every open is released once. */
static void test_stream_wait_and_wake(void **state)
{
	(void)state;
	struct ldc *c = cli_connect(), *p = cli_connect();
	struct ldc_job js = mkjob("s1", "pattern:32", 4, 0, 1, 1);  /* 8 steps, shard = step */
	struct ldc_job jp = mkjob("plain", "pattern:64", 4, 0, 1, 1);
	struct ldc_info in, inp;
	struct job *sj;

	open_ok(c, &js, &in);
	struct sjob *x = find("s1", &sj);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 1);  /* shard 0 came with the open */
	unsigned n = parked_settled(sj);  /* steps 1..n: up to every slot of the ring, waiting */
	no_batch(c, 50);
	/* Two workers, the parked steps hold none: the plain job still gets every step. */
	open_ok(p, &jp, &inp);
	struct expect ep = expect_of(&inp, 0);
	consume_ok(p, &ep, 0, 16);
	assert_int_equal(nparked(sj), n);
	for (unsigned s = 1; s <= n; s++)
		assert_int_equal(atomic_load(&x->eagain[s]), 1);  /* parked once, not spun on */
	assert_int_equal(atomic_load(&x->eagain[n + 1]), 0);  /* not opened */
	assert_int_equal(atomic_load(&x->opens), 1);
	/* An attach of a shard no parked step reads (6): each parked step is opened again, once,
	 * and parks again. */
	attach(x, sj, 6);
	wait_ulong(&x->eagain[n], 2);
	for (unsigned s = 1; s <= n; s++)
		assert_int_equal(atomic_load(&x->eagain[s]), 2);
	assert_int_equal(nparked(sj), n);
	/* Shard 1: step 1 is opened, filled and published; its shard released after the
	 * publish (the shard is held while the step is filled only). */
	attach(x, sj, 1);
	wait_ulong(&x->opens, 2);
	wait_ulong(&x->releases, 2);
	assert_int_equal(atomic_load(&x->held[1]), 0);
	consume_ok(c, &e, 1, 2);
	no_batch(c, 50);  /* step 2 still waits */
	for (uint32_t k = 2; k < NSH; k++)
		attach(x, sj, k);
	consume_ok(c, &e, 2, 8);
	parked_is(NULL, 0);
	assert_int_equal(atomic_load(&x->opens), 8);
	int64_t end = mono_ms() + 5000;
	while (atomic_load(&x->releases) != 8 && mono_ms() < end)
		usleep(1000);
	assert_int_equal(atomic_load(&x->releases), 8);
	for (uint32_t k = 0; k < NSH; k++)
		assert_int_equal(atomic_load(&x->held[k]), 0);
	cli_close(c);
	cli_close(p);
}

/* A ring retired with steps parked: they are abandoned (no att, slot or step kept; ASan sees the
 * rest at srv_destroy), and the rank, attached again, resumes at its first unreleased step. */
static void test_stream_retire_parked(void **state)
{
	(void)state;
	struct ldc *c = cli_connect();
	struct ldc_job js = mkjob("s1", "pattern:32", 4, 0, 1, 1);
	struct ldc_info in;
	struct job *sj;

	open_ok(c, &js, &in);
	struct sjob *x = find("s1", &sj);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 1);
	parked_settled(sj);
	cli_close(c);
	parked_is(NULL, 0);  /* the control loop's sweep abandoned them */
	pthread_mutex_lock(&g_srv->mu);
	assert_int_equal(sj->atts, 0);
	pthread_mutex_unlock(&g_srv->mu);
	assert_int_equal(atomic_load(&x->opens), atomic_load(&x->releases));
	c = cli_connect();
	/* neither start given: the rank resumes at its first step not released (1) */
	open_ok(c, &js, &in);
	parked_settled(sj);
	assert_int_equal(atomic_load(&x->eagain[0]), 0);  /* from step 1 */
	for (uint32_t k = 1; k < NSH; k++)
		attach(x, sj, k);
	consume_ok(c, &e, 1, 8);
	cli_close(c);
}

/* The stream fails: the job fails with its reason, every rank is told, parked steps go. */
static void test_stream_fail(void **state)
{
	(void)state;
	struct ldc *c = cli_connect();
	struct ldc_job js = mkjob("s1", "pattern:32", 4, 0, 1, 1);
	struct ldc_info in;
	struct ldc_batch b;
	struct job *sj;

	open_ok(c, &js, &in);
	find("s1", &sj);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 1);
	parked_settled(sj);
	srv_job_stream_fail(g_srv, sj, EACCES, "shard 1 (s3://b/set/shard-00001.dpk): HTTP 403 "
			    "AccessDenied");
	/* every parked step of the server (the control loop may free the failed job now) */
	assert_int_equal(nparked(NULL), 0);
	int r = ldc_acquire(c, ACQUIRE_MS, &b);
	assert_int_not_equal(r, 0);
	assert_has(ldc_error(c), "HTTP 403 AccessDenied");
	cli_close(c);
}

/* The shard a step waits for attaches after its step_open answered -EAGAIN and before the server
 * parked it (srv_shard_ready found nothing parked): the step is opened again at once, not
 * parked forever. */
static void test_stream_lost_wakeup(void **state)
{
	(void)state;
	struct ldc *c = cli_connect();
	struct ldc_job js = mkjob("s1", "pattern:32", 4, 0, 1, 1);
	struct ldc_info in;
	struct job *sj;

	open_ok(c, &js, &in);
	struct sjob *x = find("s1", &sj);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 1);
	parked_settled(sj);
	/* Shard 3 reopens the parked steps; the first of them (step 1) to answer -EAGAIN has its
	 * shard attached (and srv_shard_ready called) before it returns. */
	atomic_store(&x->race, 1);
	attach(x, sj, 3);
	consume_ok(c, &e, 1, 2);  /* step 1: not lost */
	assert_int_equal(atomic_load(&x->race), 0);
	for (uint32_t k = 2; k < NSH; k++)
		attach(x, sj, k);
	consume_ok(c, &e, 2, 8);
	cli_close(c);
}

/* Two ranks, shards attaching from another thread while they read (4 steps a shard): every step
 * of each rank arrives in order with its bytes (also under TSan). */
struct attacher {
	struct sjob *x;
	struct job *j;
};

static void *attacher_main(void *p)
{
	struct attacher *a = p;

	for (uint32_t k = 1; k < NSH; k++) {
		usleep(2000);
		attach(a->x, a->j, k);
	}
	return NULL;
}

static void test_stream_concurrent(void **state)
{
	(void)state;
	struct ldc *c0 = cli_connect(), *c1 = cli_connect();
	struct ldc_job j0 = mkjob("s4", "pattern:256", 4, 0, 2, 1);  /* 32 steps */
	struct ldc_job j1 = mkjob("s4", "pattern:256", 4, 1, 2, 1);
	struct ldc_info in0, in1;
	struct job *sj;
	pthread_t th;

	open_ok(c0, &j0, &in0);
	open_ok(c1, &j1, &in1);
	struct attacher a;
	a.x = find("s4", &sj);
	a.j = sj;
	assert_int_equal(pthread_create(&th, NULL, attacher_main, &a), 0);
	struct expect e0 = expect_of(&in0, 0), e1 = expect_of(&in1, 1);
	for (uint64_t s = 0; s < 32; s++) {
		consume_ok(c0, &e0, s, s + 1);
		consume_ok(c1, &e1, s, s + 1);
	}
	pthread_join(th, NULL);
	parked_is(NULL, 0);
	cli_close(c0);
	cli_close(c1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stream_wait_and_wake, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stream_retire_parked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stream_fail, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stream_lost_wakeup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stream_concurrent, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
