/* test_trn_ddp.c - the DDP core (trainer/ddp.c) on the host device with real MPI, one rank.
 *
 * The bucket plan is pure and checked exhaustively: one bucket, many buckets (reverse parameter
 * order, contiguous offsets, the first cap on bucket 0, the cap on the others, greedy filling), a
 * parameter larger than the cap alone in its bucket, identical plans for identical inputs (which
 * is what makes every rank's plan the same) and -EINVAL on bad input.
 *
 * The engine runs on MPI_COMM_WORLD of a singleton MPI job (MPI_Init in the group setup). Its
 * collectives go to the real MPI backend through a spy that records each allreduce's range before
 * forwarding it, so the tests see the launch order itself, not only the counters: buckets start
 * in index order whatever order backward marks them in; a parameter marked twice and a step before
 * backward finished are errors; with --accum K only every K-th micro-step synchronises; the SGD
 * update (momentum, 1/(world x accum) scaling) and the mlp's forward/backward through the DDP core
 * match a reference computed here in double precision. */
#include "trainer/coll.h"
#include "trainer/ddp.h"
#include "trainer/dev.h"
#include "trainer/model.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include "tests/test_util.h"

/* Open MPI keeps some allocations until exit (and some it never frees); they are not ours. The
 * sanitizer build reads this list instead of failing on them. Most of them are made by MCA
 * components that MPI_Finalize has dlclose()d and through frames without frame pointers, so the
 * fast unwinder stops at "<unknown module>"; the slow one reaches libmpi and the list matches.
 * (ASAN_OPTIONS from the environment still override these defaults.) */
const char *__asan_default_options(void);
__attribute__((used)) const char *__asan_default_options(void)
{
	return "fast_unwind_on_malloc=0";
}

const char *__lsan_default_suppressions(void);
__attribute__((used)) const char *__lsan_default_suppressions(void)
{
	return "leak:libmpi.so\n"
	       "leak:libopen-pal.so\n"
	       "leak:libopen-rte.so\n"
	       "leak:libpmix.so\n"
	       "leak:libhwloc.so\n"
	       "leak:libevent\n"
	       "leak:mca_\n"
	       "leak:libucp.so\n"
	       "leak:libucs.so\n"
	       "leak:libfabric.so\n"
	       "leak:libmunge.so\n";
}

#define KB(x) ((size_t)(x) * sizeof(float))  /* a cap of x floats, in bytes */


/* ---- the plan ---- */

/* Checks every documented property of a plan of @nb buckets for @sizes. */
static void check_plan(const size_t *sizes, int np, size_t cap_bytes, size_t first_bytes,
		       const size_t *offs, const struct trn_bucket *b, int nb)
{
	size_t cap = cap_bytes / sizeof(float), first = first_bytes / sizeof(float);
	size_t off = 0;
	int p = np - 1;

	assert_in_range(nb, 1, np);
	for (int k = 0; k < nb; k++) {
		size_t lim = k == 0 ? first : cap;
		/* contiguous, and parameters in reverse order: first (highest index) down to last */
		if (b[k].off != off)
			fail_msg("bucket %d starts at %zu, expected %zu", k, b[k].off, off);
		if (b[k].first != p || b[k].last > b[k].first)
			fail_msg("bucket %d holds %d..%d, expected to start at parameter %d", k,
				 b[k].first, b[k].last, p);
		size_t n = 0;
		for (int q = b[k].first; q >= b[k].last; q--) {
			if (offs[q] != off + n)
				fail_msg("parameter %d at %zu, expected %zu (bucket %d)", q, offs[q],
					 off + n, k);
			n += sizes[q];
		}
		if (b[k].n != n)
			fail_msg("bucket %d: n %zu, its parameters hold %zu", k, b[k].n, n);
		/* under its cap, unless it is one parameter larger than the cap */
		if (n > lim && b[k].first != b[k].last)
			fail_msg("bucket %d: %zu floats over its cap %zu with %d parameters", k, n, lim,
				 b[k].first - b[k].last + 1);
		/* greedy: the bucket was closed only because the next parameter would not fit */
		if (k + 1 < nb && n + sizes[b[k].last - 1] <= lim)
			fail_msg("bucket %d (%zu floats) closed although parameter %d (%zu) fits "
				 "under %zu", k, n, b[k].last - 1, sizes[b[k].last - 1], lim);
		off += n;
		p = b[k].last - 1;
	}
	assert_int_equal(p, -1);  /* every parameter in some bucket */
	size_t total = 0;
	for (int q = 0; q < np; q++)
		total += sizes[q];
	assert_int_equal(off, total);
}

static void test_bucket_plan_one_bucket(void **state)
{
	const size_t sizes[] = { 100, 10, 50, 5 };
	size_t offs[4];
	struct trn_bucket b[4];

	(void)state;
	int nb = trn_bucket_plan(sizes, 4, TRN_BUCKET_CAP_DEFAULT, TRN_BUCKET_FIRST_DEFAULT, offs, b);
	assert_int_equal(nb, 1);
	assert_int_equal(b[0].off, 0);
	assert_int_equal(b[0].n, 165);
	assert_int_equal(b[0].first, 3);
	assert_int_equal(b[0].last, 0);
	/* reverse parameter order: the last parameter first */
	assert_int_equal(offs[3], 0);
	assert_int_equal(offs[2], 5);
	assert_int_equal(offs[1], 55);
	assert_int_equal(offs[0], 65);
	check_plan(sizes, 4, TRN_BUCKET_CAP_DEFAULT, TRN_BUCKET_FIRST_DEFAULT, offs, b, nb);

	/* exactly the first cap still fits one bucket */
	nb = trn_bucket_plan(sizes, 4, KB(165), KB(165), offs, b);
	assert_int_equal(nb, 1);
	/* a single parameter is one bucket */
	nb = trn_bucket_plan(sizes, 1, KB(1), KB(1), offs, b);
	assert_int_equal(nb, 1);
	assert_int_equal(b[0].n, 100);
	assert_int_equal(offs[0], 0);
}

static void test_bucket_plan_many_buckets_worked_example(void **state)
{
	/* forward order p0..p6; reverse order is p6 p5 ... p0. First cap 10 floats, cap 20. */
	const size_t sizes[] = { 4, 8, 6, 7, 5, 3, 4 };
	size_t offs[7];
	struct trn_bucket b[7];

	(void)state;
	int nb = trn_bucket_plan(sizes, 7, KB(20), KB(10), offs, b);
	/* bucket 0: p6 (4) + p5 (3) = 7; + p4 (5) = 12 > 10 -> close.
	 * bucket 1: p4 (5) + p3 (7) + p2 (6) = 18; + p1 (8) = 26 > 20 -> close.
	 * bucket 2: p1 (8) + p0 (4) = 12. */
	assert_int_equal(nb, 3);
	assert_int_equal(b[0].first, 6);
	assert_int_equal(b[0].last, 5);
	assert_int_equal(b[0].n, 7);
	assert_int_equal(b[1].first, 4);
	assert_int_equal(b[1].last, 2);
	assert_int_equal(b[1].off, 7);
	assert_int_equal(b[1].n, 18);
	assert_int_equal(b[2].first, 1);
	assert_int_equal(b[2].last, 0);
	assert_int_equal(b[2].off, 25);
	assert_int_equal(b[2].n, 12);
	const size_t want[] = { 33, 25, 19, 12, 7, 4, 0 };
	for (int p = 0; p < 7; p++)
		assert_int_equal(offs[p], want[p]);
	check_plan(sizes, 7, KB(20), KB(10), offs, b, nb);
}

static void test_bucket_plan_many_buckets_seeded(void **state)
{
	enum { NP = 300, ROUNDS = 400 };
	uint64_t seed = test_seed(__func__, "TEST_TRN_DDP_SEED"), x = test_xorshift_init(seed);
	size_t *sizes = malloc(NP * sizeof(size_t)), *offs = malloc(NP * sizeof(size_t));
	struct trn_bucket *b = malloc(NP * sizeof(*b));

	(void)state;
	assert_non_null(sizes);
	assert_non_null(offs);
	assert_non_null(b);
	for (int r = 0; r < ROUNDS; r++) {
		int np = 1 + (int)(test_xorshift(&x) % NP);
		size_t cap = 1 + test_xorshift(&x) % 5000, first = 1 + test_xorshift(&x) % 5000;
		for (int p = 0; p < np; p++) {
			uint64_t big = test_xorshift(&x) % 4 == 0;  /* some over the cap */
			sizes[p] = 1 + test_xorshift(&x) % (big ? 12000 : 800);
		}
		int nb = trn_bucket_plan(sizes, np, KB(cap), KB(first), offs, b);
		if (nb < 1)
			fail_msg("seed %" PRIu64 " round %d: plan returned %d", seed, r, nb);
		check_plan(sizes, np, KB(cap), KB(first), offs, b, nb);
	}
	/* many parameters, each its own bucket: caps of one float */
	for (int p = 0; p < NP; p++)
		sizes[p] = 1 + (size_t)p % 3;
	int nb = trn_bucket_plan(sizes, NP, KB(1), KB(1), offs, b);
	assert_int_equal(nb, NP);
	for (int k = 0; k < NP; k++)
		assert_int_equal(b[k].first, NP - 1 - k);
	check_plan(sizes, NP, KB(1), KB(1), offs, b, nb);
	/* caps that are not a multiple of 4 bytes round down */
	nb = trn_bucket_plan(sizes, NP, KB(2) + 3, KB(2) + 3, offs, b);
	check_plan(sizes, NP, KB(2), KB(2), offs, b, nb);
	free(sizes);
	free(offs);
	free(b);
}

static void test_bucket_plan_param_larger_than_cap_alone(void **state)
{
	/* cap 100 floats, first cap 40 */
	const size_t mid[] = { 10, 10, 1000, 10, 10 };     /* p2 larger than the cap */
	const size_t last[] = { 1000, 10, 10, 10 };        /* the last bucket */
	const size_t firstp[] = { 10, 10, 10, 500 };       /* the first bucket, over the first cap */
	size_t offs[5];
	struct trn_bucket b[5];

	(void)state;
	int nb = trn_bucket_plan(mid, 5, KB(100), KB(40), offs, b);
	assert_int_equal(nb, 3);
	assert_int_equal(b[0].n, 20);   /* p4 p3 */
	assert_int_equal(b[1].first, 2);
	assert_int_equal(b[1].last, 2);
	assert_int_equal(b[1].n, 1000);
	assert_int_equal(b[2].n, 20);   /* p1 p0 */
	check_plan(mid, 5, KB(100), KB(40), offs, b, nb);

	nb = trn_bucket_plan(last, 4, KB(100), KB(40), offs, b);
	assert_int_equal(nb, 2);
	assert_int_equal(b[1].first, 0);
	assert_int_equal(b[1].last, 0);
	assert_int_equal(b[1].n, 1000);
	check_plan(last, 4, KB(100), KB(40), offs, b, nb);

	nb = trn_bucket_plan(firstp, 4, KB(100), KB(40), offs, b);
	assert_int_equal(nb, 2);
	assert_int_equal(b[0].first, 3);
	assert_int_equal(b[0].last, 3);
	assert_int_equal(b[0].n, 500);
	assert_int_equal(b[1].n, 30);
	check_plan(firstp, 4, KB(100), KB(40), offs, b, nb);

	/* two large parameters in a row: one bucket each */
	const size_t two[] = { 5, 300, 300, 5 };
	nb = trn_bucket_plan(two, 4, KB(100), KB(40), offs, b);
	assert_int_equal(nb, 4);
	check_plan(two, 4, KB(100), KB(40), offs, b, nb);
}

static void test_bucket_plan_identical_for_identical_inputs(void **state)
{
	enum { NP = 64 };
	size_t sizes[NP], o1[NP], o2[NP];
	struct trn_bucket b1[NP], b2[NP];

	(void)state;
	for (int p = 0; p < NP; p++)
		sizes[p] = 1 + (size_t)(p * 7919) % 3000;
	/* what two ranks do: same sizes and caps, separate (differently dirty) output memory */
	memset(o1, 0xaa, sizeof(o1));
	memset(o2, 0x55, sizeof(o2));
	memset(b1, 0xaa, sizeof(b1));
	memset(b2, 0x55, sizeof(b2));
	int n1 = trn_bucket_plan(sizes, NP, KB(4000), KB(1000), o1, b1);
	int n2 = trn_bucket_plan(sizes, NP, KB(4000), KB(1000), o2, b2);
	assert_true(n1 > 1);
	assert_int_equal(n1, n2);
	assert_memory_equal(o1, o2, sizeof(o1));
	for (int k = 0; k < n1; k++) {
		assert_int_equal(b1[k].off, b2[k].off);
		assert_int_equal(b1[k].n, b2[k].n);
		assert_int_equal(b1[k].first, b2[k].first);
		assert_int_equal(b1[k].last, b2[k].last);
	}
}

static void test_bucket_plan_bad_input_einval(void **state)
{
	const size_t sizes[] = { 10, 20, 30 }, zero[] = { 10, 0, 30 };
	size_t offs[3];
	struct trn_bucket b[3];

	(void)state;
	assert_int_equal(trn_bucket_plan(sizes, 0, KB(10), KB(10), offs, b), -EINVAL);
	assert_int_equal(trn_bucket_plan(sizes, -1, KB(10), KB(10), offs, b), -EINVAL);
	assert_int_equal(trn_bucket_plan(sizes, 3, 0, KB(10), offs, b), -EINVAL);
	assert_int_equal(trn_bucket_plan(sizes, 3, 3, KB(10), offs, b), -EINVAL);  /* < 1 float */
	assert_int_equal(trn_bucket_plan(sizes, 3, KB(10), 0, offs, b), -EINVAL);
	assert_int_equal(trn_bucket_plan(sizes, 3, KB(10), 2, offs, b), -EINVAL);
	assert_int_equal(trn_bucket_plan(zero, 3, KB(10), KB(10), offs, b), -EINVAL);
	/* the smallest legal caps work */
	assert_int_equal(trn_bucket_plan(sizes, 3, 4, 4, offs, b), 3);
}

/* ---- the engine, on one MPI rank ---- */

/* A spy collective: records every allreduce's range, then forwards to the real MPI backend. */
#define SPY_MAX 4096
struct spy {
	struct trn_coll c;         /* first: the DDP core sees only this */
	struct trn_coll *real;
	const float *base;         /* the gradient buffer, for offsets */
	int n;                     /* allreduces recorded */
	size_t off[SPY_MAX], len[SPY_MAX];
};

static struct trn_coll *g_real;
static struct trn_dev *g_dev;
static struct spy g_spy;

static int spy_bcast(struct trn_coll *c, float *buf, size_t n, int root)
{
	(void)c;
	return g_real->ops->bcast(g_real, buf, n, root);
}

static int spy_iallreduce(struct trn_coll *c, float *buf, size_t n, int *req)
{
	struct spy *s = (struct spy *)c;

	if (s->n < SPY_MAX) {
		s->off[s->n] = s->base ? (size_t)(buf - s->base) : 0;
		s->len[s->n] = n;
	}
	s->n++;
	return g_real->ops->iallreduce(g_real, buf, n, req);
}

static int spy_test(struct trn_coll *c, int req)
{
	(void)c;
	return g_real->ops->test(g_real, req);
}

static int spy_wait(struct trn_coll *c, int req)
{
	(void)c;
	return g_real->ops->wait(g_real, req);
}

static void spy_close(struct trn_coll *c)
{
	(void)c;
}

static const struct trn_coll_ops spy_ops = {
	.name = "mpi-spy", .close = spy_close, .bcast = spy_bcast, .iallreduce = spy_iallreduce,
	.test = spy_test, .wait = spy_wait,
};

static void spy_reset(const float *base)
{
	memset(&g_spy, 0, sizeof(g_spy));
	g_spy.c.ops = &spy_ops;
	g_spy.c.rank = g_real->rank;
	g_spy.c.world = g_real->world;
	g_spy.c.averages = g_real->averages;
	g_spy.real = g_real;
	g_spy.base = base;
}

static int group_setup(void **state)
{
	int argc = 0;
	char **argv = NULL;

	(void)state;
	if (MPI_Init(&argc, &argv) != MPI_SUCCESS)
		return -1;
	if (trn_dev_host_open(&g_dev) < 0 || trn_coll_mpi_open(&g_real) < 0)
		return -1;
	if (g_real->world != 1) {
		fprintf(stderr, "test_trn_ddp: run it as one rank (world is %d)\n", g_real->world);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (g_real)
		g_real->ops->close(g_real);
	if (g_dev)
		g_dev->ops->close(g_dev);
	MPI_Finalize();
	return 0;
}

/* Four parameters, each in its own bucket (cap of 1 float): bucket k holds parameter 3 - k. */
static const size_t four[] = { 6, 5, 4, 3 };

struct eng {
	struct trn_ddp *d;
	float *params, *grads, *mom;
	size_t total;
};

static void eng_create(struct eng *e, const size_t *sizes, int np, size_t cap, size_t first, int accum)
{
	size_t total = 0;

	for (int p = 0; p < np; p++)
		total += sizes[p];
	e->params = g_dev->ops->alloc(g_dev, total * sizeof(float));
	e->grads = g_dev->ops->alloc(g_dev, total * sizeof(float));
	e->mom = g_dev->ops->alloc(g_dev, total * sizeof(float));
	assert_non_null(e->params);
	assert_non_null(e->grads);
	assert_non_null(e->mom);
	spy_reset(e->grads);
	assert_int_equal(trn_ddp_create(&g_spy.c, g_dev, sizes, np, cap, first, accum, &e->d), 0);
	e->total = total;
	assert_int_equal(trn_ddp_total(e->d), total);
}

static void eng_destroy(struct eng *e)
{
	trn_ddp_destroy(e->d);
	g_dev->ops->free(g_dev, e->params);
	g_dev->ops->free(g_dev, e->grads);
	g_dev->ops->free(g_dev, e->mom);
}

static uint64_t launched(const struct eng *e)
{
	struct trn_ddp_stats st;

	trn_ddp_get_stats(e->d, &st);
	return st.launched;
}

static void test_ddp_create_matches_plan(void **state)
{
	const size_t sizes[] = { 4, 8, 6, 7, 5, 3, 4 };
	size_t offs[7];
	struct trn_bucket b[7];
	struct eng e;
	const struct trn_bucket *eb;

	(void)state;
	int nb = trn_bucket_plan(sizes, 7, KB(20), KB(10), offs, b);
	eng_create(&e, sizes, 7, KB(20), KB(10), 1);
	assert_int_equal(trn_ddp_buckets(e.d, &eb), nb);
	assert_memory_equal(trn_ddp_offsets(e.d), offs, sizeof(offs));
	assert_memory_equal(eb, b, (size_t)nb * sizeof(*b));
	/* broadcast of one rank leaves the parameters alone */
	for (size_t i = 0; i < e.total; i++)
		e.params[i] = (float)i;
	assert_int_equal(trn_ddp_broadcast(e.d, e.params), 0);
	for (size_t i = 0; i < e.total; i++)
		assert_true(e.params[i] == (float)i);
	eng_destroy(&e);

	struct trn_ddp *d = (struct trn_ddp *)1;
	assert_int_equal(trn_ddp_create(g_real, g_dev, sizes, 7, 0, KB(10), 1, &d), -EINVAL);
	assert_null(d);
}

/* Marks parameters in @order, checking how many allreduces have started after each. */
static void mark(struct eng *e, const int *order, const int *launched_after, int n)
{
	uint64_t l0 = launched(e);

	for (int i = 0; i < n; i++) {
		assert_int_equal(trn_ddp_ready(e->d, order[i], e->grads), 0);
		if (launched(e) - l0 != (uint64_t)launched_after[i])
			fail_msg("after marking parameter %d (#%d): %" PRIu64 " buckets launched, "
				 "expected %d", order[i], i, launched(e) - l0, launched_after[i]);
	}
}

/* The spy saw exactly buckets 0..nb-1, in that order, since it was reset to @from. */
static void check_spy_order(const struct eng *e, int from)
{
	const struct trn_bucket *b;
	int nb = trn_ddp_buckets(e->d, &b);

	assert_int_equal(g_spy.n - from, nb);
	for (int k = 0; k < nb; k++)
		if (g_spy.off[from + k] != b[k].off || g_spy.len[from + k] != b[k].n)
			fail_msg("allreduce #%d covered [%zu, +%zu), bucket %d is [%zu, +%zu)", k,
				 g_spy.off[from + k], g_spy.len[from + k], k, b[k].off, b[k].n);
}

static void test_ddp_launch_in_index_order(void **state)
{
	struct eng e;
	struct trn_ddp_stats st;
	int sync, acc;

	(void)state;
	eng_create(&e, four, 4, KB(1), KB(1), 1);
	const struct trn_bucket *b;
	assert_int_equal(trn_ddp_buckets(e.d, &b), 4);

	/* backward order: each bucket starts the moment its parameter is ready */
	trn_ddp_begin(e.d, 0, &sync, &acc);
	assert_int_equal(sync, 1);
	assert_int_equal(acc, 0);
	mark(&e, (const int[]){ 3, 2, 1, 0 }, (const int[]){ 1, 2, 3, 4 }, 4);
	assert_int_equal(trn_ddp_progress(e.d), 0);
	assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.9f), 0);
	check_spy_order(&e, 0);
	trn_ddp_get_stats(e.d, &st);
	assert_int_equal(st.launched, 4);
	assert_int_equal(st.last_order_ok, 1);

	/* out of order: a bucket that is ready early waits for the ones before it */
	int from = g_spy.n;
	trn_ddp_begin(e.d, 1, &sync, &acc);
	mark(&e, (const int[]){ 0, 1, 3, 2 }, (const int[]){ 0, 0, 1, 4 }, 4);
	assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.9f), 0);
	check_spy_order(&e, from);
	trn_ddp_get_stats(e.d, &st);
	assert_int_equal(st.launched, 8);
	assert_int_equal(st.last_order_ok, 1);

	/* forward order: nothing can start before the last parameter, then all at once */
	from = g_spy.n;
	trn_ddp_begin(e.d, 2, &sync, &acc);
	mark(&e, (const int[]){ 0, 1, 2, 3 }, (const int[]){ 0, 0, 0, 4 }, 4);
	assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.9f), 0);
	check_spy_order(&e, from);
	eng_destroy(&e);

	/* buckets of several parameters: launched once all of theirs are ready */
	const size_t sizes[] = { 4, 8, 6, 7, 5, 3, 4 };  /* buckets {6,5} {4,3,2} {1,0} */
	eng_create(&e, sizes, 7, KB(20), KB(10), 1);
	trn_ddp_begin(e.d, 0, &sync, &acc);
	mark(&e, (const int[]){ 5, 2, 6, 3, 0, 4, 1 }, (const int[]){ 0, 0, 1, 1, 1, 2, 3 }, 7);
	assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.9f), 0);
	check_spy_order(&e, 0);
	eng_destroy(&e);
}

static void test_ddp_ready_twice_is_error(void **state)
{
	struct eng e;
	int sync, acc;

	(void)state;
	eng_create(&e, four, 4, KB(1), KB(1), 1);
	trn_ddp_begin(e.d, 0, &sync, &acc);
	assert_int_equal(trn_ddp_ready(e.d, 3, e.grads), 0);
	assert_true(trn_ddp_ready(e.d, 3, e.grads) < 0);
	assert_int_equal(trn_ddp_ready(e.d, 4, e.grads), -EINVAL);   /* no such parameter */
	assert_int_equal(trn_ddp_ready(e.d, -1, e.grads), -EINVAL);
	/* the rest of the step still completes, and the next begin() starts clean */
	mark(&e, (const int[]){ 2, 1, 0 }, (const int[]){ 1, 2, 3 }, 3);
	assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.9f), 0);
	trn_ddp_begin(e.d, 1, &sync, &acc);
	mark(&e, (const int[]){ 3, 2, 1, 0 }, (const int[]){ 1, 2, 3, 4 }, 4);
	assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.9f), 0);
	/* on a micro-step that does not synchronise, too */
	eng_destroy(&e);
	eng_create(&e, four, 4, KB(1), KB(1), 2);
	trn_ddp_begin(e.d, 0, &sync, &acc);
	assert_int_equal(sync, 0);
	assert_int_equal(trn_ddp_ready(e.d, 1, e.grads), 0);
	assert_true(trn_ddp_ready(e.d, 1, e.grads) < 0);
	eng_destroy(&e);
}

/* Regression: a parameter marked twice while another parameter of its bucket is still pending.
 * The per-bucket countdown reaches 0 on the second mark, so the bucket's allreduce starts before
 * the other parameter's gradient is written, and the error surfaces only later, on that other
 * (innocent) parameter. The second mark must be the error. */
static void test_ddp_ready_twice_in_shared_bucket_is_error(void **state)
{
	const size_t sizes[] = { 4, 8, 6, 7, 5, 3, 4 };  /* buckets {6,5} {4,3,2} {1,0} */
	struct eng e;
	int sync, acc;

	(void)state;
	eng_create(&e, sizes, 7, KB(20), KB(10), 1);
	trn_ddp_begin(e.d, 0, &sync, &acc);
	assert_int_equal(trn_ddp_ready(e.d, 6, e.grads), 0);
	int ret = trn_ddp_ready(e.d, 6, e.grads);
	uint64_t l = launched(&e);
	/* finish the step whatever happened, so that no request is left in flight */
	for (int p = 5; p >= 0; p--)
		(void)trn_ddp_ready(e.d, p, e.grads);
	(void)trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.9f);
	eng_destroy(&e);
	if (ret == 0)
		fail_msg("parameter 6 marked twice returned 0; bucket 0 {6,5} launched %" PRIu64
			 " time(s) before parameter 5 was ready", l);
	assert_int_equal(l, 0);
}

static void test_ddp_step_before_all_ready_is_error(void **state)
{
	struct eng e;
	int sync, acc;

	(void)state;
	eng_create(&e, four, 4, KB(1), KB(1), 1);
	for (size_t i = 0; i < e.total; i++)
		e.params[i] = 1.0f, e.grads[i] = 1.0f;
	trn_ddp_begin(e.d, 0, &sync, &acc);
	/* nothing ready */
	assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.0f), -EINVAL);
	assert_true(strlen(trn_ddp_error(e.d)) > 0);
	/* some ready */
	mark(&e, (const int[]){ 3, 2 }, (const int[]){ 1, 2 }, 2);
	assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.0f), -EINVAL);
	assert_non_null(strstr(trn_ddp_error(e.d), "2 of 4"));
	/* a refused step changes no parameter */
	for (size_t i = 0; i < e.total; i++)
		assert_true(e.params[i] == 1.0f);
	/* and it can still complete once backward has */
	mark(&e, (const int[]){ 1, 0 }, (const int[]){ 1, 2 }, 2);
	assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.0f), 0);
	for (size_t i = 0; i < e.total; i++)
		assert_float_equal(e.params[i], 0.9f, 1e-7);
	eng_destroy(&e);
}

static void test_ddp_accum_syncs_every_kth(void **state)
{
	struct eng e;
	int sync, acc;

	(void)state;
	for (int accum = 1; accum <= 4; accum++) {
		eng_create(&e, four, 4, KB(1), KB(1), accum);
		for (size_t i = 0; i < e.total; i++)
			e.params[i] = 1.0f;
		uint64_t l = 0;
		for (uint64_t micro = 0; micro < 12; micro++) {
			int want_sync = micro % (uint64_t)accum == (uint64_t)accum - 1;
			int want_acc = micro % (uint64_t)accum != 0;
			trn_ddp_begin(e.d, micro, &sync, &acc);
			if (sync != want_sync || acc != want_acc)
				fail_msg("accum %d micro %" PRIu64 ": sync %d accumulate %d, expected %d %d",
					 accum, micro, sync, acc, want_sync, want_acc);
			int n0 = g_spy.n;
			/* the "model": a gradient of 1 per micro-step, accumulated when told */
			for (size_t i = 0; i < e.total; i++)
				e.grads[i] = acc ? e.grads[i] + 1.0f : 1.0f;
			for (int p = 3; p >= 0; p--) {
				assert_int_equal(trn_ddp_ready(e.d, p, e.grads), 0);
				assert_int_equal(trn_ddp_progress(e.d), 0);
			}
			assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.5f, 0.0f), 0);
			if (sync) {
				l += 4;
				check_spy_order(&e, n0);
				/* the accumulated sum of accum ones, divided by accum: a step of lr */
				for (size_t i = 0; i < e.total; i++)
					assert_float_equal(e.params[i],
							   (1.0f - 0.5f * (float)((micro + 1) / (uint64_t)accum)), 1e-6);
			}
			assert_int_equal(g_spy.n - n0, sync ? 4 : 0);
			assert_int_equal(launched(&e), l);
		}
		assert_int_equal(l, 4 * (12 / accum));
		eng_destroy(&e);
	}
}

static void test_ddp_sgd_momentum_hand_computed(void **state)
{
	/* Two parameters of one float each, lr 0.1, momentum 0.5, gradients 1 then 2 then -1:
	 *   m = 1              p = 1 - 0.1         = 0.9
	 *   m = 0.5 + 2 = 2.5  p = 0.9 - 0.25      = 0.65
	 *   m = 1.25 - 1 = .25 p = 0.65 - 0.025    = 0.625
	 * With accum 2 and micro-gradients (-1, 3), (2, 2), (-1, -1) the averages are the same. */
	const size_t sizes[] = { 1, 1 };
	const float g[3][2] = { { -1, 3 }, { 2, 2 }, { -1, -1 } };
	const float want[3] = { 0.9f, 0.65f, 0.625f }, want_m[3] = { 1.0f, 2.5f, 0.25f };
	struct eng e;
	int sync, acc;

	(void)state;
	for (int accum = 1; accum <= 2; accum++) {
		eng_create(&e, sizes, 2, KB(1), KB(1), accum);  /* two buckets */
		e.params[0] = e.params[1] = 1.0f;
		uint64_t micro = 0;
		for (int s = 0; s < 3; s++) {
			for (int a = 0; a < accum; a++, micro++) {
				trn_ddp_begin(e.d, micro, &sync, &acc);
				float gv = accum == 1 ? (g[s][0] + g[s][1]) / 2 : g[s][a];
				e.grads[0] = acc ? e.grads[0] + gv : gv;
				e.grads[1] = acc ? e.grads[1] + gv : gv;
				assert_int_equal(trn_ddp_ready(e.d, 1, e.grads), 0);
				assert_int_equal(trn_ddp_ready(e.d, 0, e.grads), 0);
				assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, 0.1f, 0.5f), 0);
			}
			assert_int_equal(sync, 1);
			for (int i = 0; i < 2; i++) {
				assert_float_equal(e.params[i], want[s], 1e-6);
				assert_float_equal(e.mom[i], want_m[s], 1e-6);
			}
		}
		eng_destroy(&e);
	}
}

/* Weighted averaging (balanced shares): the count slot ends bucket 0 and moves the later buckets
 * one float up; bucket 0's allreduce carries (weight x gradient, weight); the update divides by
 * the summed weight, so it is the plain mean's; weight 0 updates nothing; no accumulation. */
static void test_ddp_weighted_count_slot_in_bucket_0(void **state)
{
	const size_t sizes[] = { 2, 3 };  /* bucket 0: parameter 1 (3 floats), bucket 1: parameter 0 */
	const struct trn_bucket *b;
	struct trn_ddp *d;
	int sync, acc;

	(void)state;
	spy_reset(NULL);
	assert_int_equal(trn_ddp_create(&g_spy.c, g_dev, sizes, 2, 4, 4, 2, &d), 0);
	assert_int_equal(trn_ddp_weighted(d), -EINVAL);  /* accum 2 */
	trn_ddp_destroy(d);

	assert_int_equal(trn_ddp_create(&g_spy.c, g_dev, sizes, 2, 4, 4, 1, &d), 0);
	assert_int_equal(trn_ddp_weighted(d), 0);
	assert_int_equal(trn_ddp_weighted(d), -EINVAL);  /* once */
	assert_int_equal(trn_ddp_buckets(d, &b), 2);
	assert_int_equal(b[0].off, 0);
	assert_int_equal(b[0].n, 4);                     /* 3 gradients + the count */
	assert_int_equal(b[1].off, 4);
	assert_int_equal(b[1].n, 2);
	assert_int_equal(trn_ddp_offsets(d)[1], 0);
	assert_int_equal(trn_ddp_offsets(d)[0], 4);
	assert_int_equal(trn_ddp_total(d), 6);
	float *p = g_dev->ops->alloc(g_dev, 6 * sizeof(float));
	float *g = g_dev->ops->alloc(g_dev, 6 * sizeof(float));
	float *m = g_dev->ops->alloc(g_dev, 6 * sizeof(float));
	assert_non_null(p);
	assert_non_null(g);
	assert_non_null(m);
	spy_reset(g);
	const float weights[] = { 4, 0, 1 };
	float want = 1;
	for (int s = 0; s < 3; s++) {
		for (int i = 0; i < 6; i++)
			p[i] = s == 0 ? 1.0f : p[i], g[i] = 0.5f;  /* a mean gradient of 0.5 */
		g[3] = 99;  /* the slot is written by the core */
		trn_ddp_begin(d, (uint64_t)s, &sync, &acc);
		trn_ddp_set_weight(d, weights[s]);
		assert_int_equal(trn_ddp_ready(d, 1, g), 0);
		assert_int_equal(g[3], weights[s]);        /* the count, not scaled */
		assert_float_equal(g[0], 0.5f * weights[s], 1e-7);
		assert_int_equal(trn_ddp_ready(d, 0, g), 0);
		assert_float_equal(g[4], 0.5f * weights[s], 1e-7);
		assert_int_equal(trn_ddp_step(d, p, g, m, 0.1f, 0.0f), 0);
		if (weights[s] > 0)
			want -= 0.1f * 0.5f;  /* plain mean: weight x g / weight */
		for (int i = 0; i < 6; i++)
			if (i != 3)
				assert_float_equal(p[i], want, 1e-6);
	}
	assert_int_equal(g_spy.n, 6);
	assert_int_equal(g_spy.off[0], 0);
	assert_int_equal(g_spy.len[0], 4);
	assert_int_equal(g_spy.off[1], 4);
	assert_int_equal(g_spy.len[1], 2);
	trn_ddp_destroy(d);
	g_dev->ops->free(g_dev, p);
	g_dev->ops->free(g_dev, g);
	g_dev->ops->free(g_dev, m);
}

/* ---- the mlp through the DDP core, against a double-precision reference ---- */

enum { RH = 2, RW = 2, RC = 3, RI = RH * RW * RC, RHID = 5, RCLS = 3, RB = 4 };

struct ref {
	double W1[RI][RHID], b1[RHID], W2[RHID][RCLS], b2[RCLS];
	double mW1[RI][RHID], mb1[RHID], mW2[RHID][RCLS], mb2[RCLS];
};

/* Gradients of the mean (weighted) cross-entropy over a batch, added into g* (zeroed by caller). */
static void ref_grad(const struct ref *r, const uint8_t *img, const int64_t *lab, const float *w,
		     int n, double gW1[RI][RHID], double gb1[RHID], double gW2[RHID][RCLS],
		     double gb2[RCLS])
{
	double wsum = 0;

	for (int s = 0; s < n; s++)
		wsum += w[s];
	for (int s = 0; s < n; s++) {
		double x[RI], h[RHID], z[RCLS], dz[RCLS], dh[RHID];
		for (int i = 0; i < RI; i++)
			x[i] = img[s * RI + i] * 2.0 / 255.0 - 1.0;  /* pool 1, NHWC: the bytes in order */
		for (int j = 0; j < RHID; j++) {
			h[j] = r->b1[j];
			for (int i = 0; i < RI; i++)
				h[j] += x[i] * r->W1[i][j];
			h[j] = h[j] > 0 ? h[j] : 0;
		}
		double mx = -1e300, sum = 0;
		for (int c = 0; c < RCLS; c++) {
			z[c] = r->b2[c];
			for (int j = 0; j < RHID; j++)
				z[c] += h[j] * r->W2[j][c];
			mx = z[c] > mx ? z[c] : mx;
		}
		for (int c = 0; c < RCLS; c++)
			sum += exp(z[c] - mx);
		for (int c = 0; c < RCLS; c++)
			dz[c] = (exp(z[c] - mx) / sum - (c == lab[s])) * w[s] / wsum;
		for (int c = 0; c < RCLS; c++) {
			gb2[c] += dz[c];
			for (int j = 0; j < RHID; j++)
				gW2[j][c] += h[j] * dz[c];
		}
		for (int j = 0; j < RHID; j++) {
			dh[j] = 0;
			for (int c = 0; c < RCLS; c++)
				dh[j] += dz[c] * r->W2[j][c];
			dh[j] = h[j] > 0 ? dh[j] : 0;
			gb1[j] += dh[j];
			for (int i = 0; i < RI; i++)
				gW1[i][j] += x[i] * dh[j];
		}
	}
}

static void sgd1(double *p, double *m, double g, double lr, double mu)
{
	*m = mu * *m + g;
	*p -= lr * *m;
}

static void ref_step(struct ref *r, double gW1[RI][RHID], double gb1[RHID], double gW2[RHID][RCLS],
		     double gb2[RCLS], double scale, double lr, double mu)
{
	for (int i = 0; i < RI; i++)
		for (int j = 0; j < RHID; j++)
			sgd1(&r->W1[i][j], &r->mW1[i][j], gW1[i][j] * scale, lr, mu);
	for (int j = 0; j < RHID; j++) {
		sgd1(&r->b1[j], &r->mb1[j], gb1[j] * scale, lr, mu);
		for (int c = 0; c < RCLS; c++)
			sgd1(&r->W2[j][c], &r->mW2[j][c], gW2[j][c] * scale, lr, mu);
	}
	for (int c = 0; c < RCLS; c++)
		sgd1(&r->b2[c], &r->mb2[c], gb2[c] * scale, lr, mu);
}

static void check_close(const char *what, int idx, float got, double want)
{
	if (fabs((double)got - want) > 1e-5 + 1e-4 * fabs(want))
		fail_msg("%s[%d] = %.8g, reference %.8g", what, idx, (double)got, want);
}

static void run_mlp_vs_reference(int accum, size_t cap, size_t first)
{
	const struct trn_model_shape shp = { .h = RH, .w = RW, .c = RC, .classes = RCLS, .batch = RB };
	struct trn_model *m;
	char err[256];
	const float lr = 0.2f, mu = 0.9f;

	assert_int_equal(trn_model_create("mlp:hidden=5", g_dev, &shp, &m, err, sizeof(err)), 0);
	const size_t *sizes;
	assert_int_equal(m->ops->params(m, &sizes), 4);
	assert_int_equal(sizes[0], RI * RHID);
	assert_int_equal(sizes[1], RHID);
	assert_int_equal(sizes[2], RHID * RCLS);
	assert_int_equal(sizes[3], RCLS);
	struct eng e;
	eng_create(&e, sizes, 4, cap, first, accum);
	const size_t *offs = trn_ddp_offsets(e.d);

	/* parameters: small deterministic values, the same in the reference */
	struct ref r;
	memset(&r, 0, sizeof(r));
	uint64_t x = 88172645463325252ull;
#define U() ((double)(test_xorshift(&x) >> 11) / 9007199254740992.0 - 0.5)
	for (int i = 0; i < RI; i++)
		for (int j = 0; j < RHID; j++)
			e.params[offs[0] + (size_t)i * RHID + j] = (float)(r.W1[i][j] = (float)U());
	for (int j = 0; j < RHID; j++)
		e.params[offs[1] + j] = (float)(r.b1[j] = (float)(0.1 * U()));
	for (int j = 0; j < RHID; j++)
		for (int c = 0; c < RCLS; c++)
			e.params[offs[2] + (size_t)j * RCLS + c] = (float)(r.W2[j][c] = (float)U());
	for (int c = 0; c < RCLS; c++)
		e.params[offs[3] + c] = (float)(r.b2[c] = (float)(0.1 * U()));

	/* batches: random pixels; the last sample of every batch is padding (weight 0) */
	uint8_t img[RB * RI];
	int64_t lab[RB];
	float w[RB];
	double gW1[RI][RHID], gb1[RHID], gW2[RHID][RCLS], gb2[RCLS];
	int sync = 0, acc;
	for (uint64_t micro = 0; micro < 6 * (uint64_t)accum; micro++) {
		for (int i = 0; i < RB * RI; i++)
			img[i] = (uint8_t)(test_xorshift(&x) >> 24);
		for (int s = 0; s < RB; s++) {
			lab[s] = (int64_t)((micro + (uint64_t)s) % RCLS);
			w[s] = s == RB - 1 ? 0.0f : 1.0f;
		}
		trn_ddp_begin(e.d, micro, &sync, &acc);
		if (!acc) {
			memset(gW1, 0, sizeof(gW1));
			memset(gb1, 0, sizeof(gb1));
			memset(gW2, 0, sizeof(gW2));
			memset(gb2, 0, sizeof(gb2));
		}
		ref_grad(&r, img, lab, w, RB, gW1, gb1, gW2, gb2);
		double out[2] = { 0, 0 };
		uint64_t l0 = launched(&e);
		if (m->ops->step(m, img, lab, w, RB, e.params, e.grads, offs, acc, e.d, out) < 0)
			fail_msg("mlp step %" PRIu64 ": %s %s", micro, g_dev->err, trn_ddp_error(e.d));
		const struct trn_bucket *b;
		int nb = trn_ddp_buckets(e.d, &b);
		/* backward marked every parameter: all buckets started (on a synchronising step) */
		assert_int_equal(launched(&e) - l0, sync ? (uint64_t)nb : 0);
		assert_true(out[0] > 0);
		assert_in_range((int)out[1], 0, RB - 1);
		assert_int_equal(trn_ddp_step(e.d, e.params, e.grads, e.mom, lr, mu), 0);
		if (sync)
			ref_step(&r, gW1, gb1, gW2, gb2, 1.0 / accum, lr, mu);
	}
#undef U
	assert_int_equal(sync, 1);
	for (int i = 0; i < RI * RHID; i++)
		check_close("W1", i, e.params[offs[0] + i], r.W1[i / RHID][i % RHID]);
	for (int j = 0; j < RHID; j++)
		check_close("b1", j, e.params[offs[1] + j], r.b1[j]);
	for (int i = 0; i < RHID * RCLS; i++)
		check_close("W2", i, e.params[offs[2] + i], r.W2[i / RCLS][i % RCLS]);
	for (int c = 0; c < RCLS; c++)
		check_close("b2", c, e.params[offs[3] + c], r.b2[c]);
	/* and the parameters did move */
	double moved = 0;
	for (int c = 0; c < RCLS; c++)
		moved += fabs(r.b2[c]);
	assert_true(moved > 1e-3);
	eng_destroy(&e);
	m->ops->destroy(m);
}

static void test_ddp_mlp_matches_reference(void **state)
{
	(void)state;
	run_mlp_vs_reference(1, TRN_BUCKET_CAP_DEFAULT, TRN_BUCKET_FIRST_DEFAULT);  /* one bucket */
	run_mlp_vs_reference(1, KB(1), KB(1));                                      /* four */
}

static void test_ddp_mlp_accum_matches_reference(void **state)
{
	(void)state;
	run_mlp_vs_reference(2, TRN_BUCKET_CAP_DEFAULT, TRN_BUCKET_FIRST_DEFAULT);
	run_mlp_vs_reference(3, KB(16), KB(4));
}

int main(void)
{
	const struct CMUnitTest plan[] = {
		cmocka_unit_test(test_bucket_plan_one_bucket),
		cmocka_unit_test(test_bucket_plan_many_buckets_worked_example),
		cmocka_unit_test(test_bucket_plan_many_buckets_seeded),
		cmocka_unit_test(test_bucket_plan_param_larger_than_cap_alone),
		cmocka_unit_test(test_bucket_plan_identical_for_identical_inputs),
		cmocka_unit_test(test_bucket_plan_bad_input_einval),
	};
	const struct CMUnitTest engine[] = {
		cmocka_unit_test(test_ddp_create_matches_plan),
		cmocka_unit_test(test_ddp_launch_in_index_order),
		cmocka_unit_test(test_ddp_ready_twice_is_error),
		cmocka_unit_test(test_ddp_ready_twice_in_shared_bucket_is_error),
		cmocka_unit_test(test_ddp_step_before_all_ready_is_error),
		cmocka_unit_test(test_ddp_accum_syncs_every_kth),
		cmocka_unit_test(test_ddp_sgd_momentum_hand_computed),
		cmocka_unit_test(test_ddp_weighted_count_slot_in_bucket_0),
		cmocka_unit_test(test_ddp_mlp_matches_reference),
		cmocka_unit_test(test_ddp_mlp_accum_matches_reference),
	};
	int fails = cmocka_run_group_tests_name("trn_bucket_plan", plan, NULL, NULL);

	fails += cmocka_run_group_tests_name("trn_ddp (one MPI rank, host device)", engine,
					     group_setup, group_teardown);
	return fails ? 1 : 0;
}
