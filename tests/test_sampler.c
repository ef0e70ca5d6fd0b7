/* test_sampler.c - the sampler's contracts, checked exhaustively over many (N, world, batch)
 * triples: ldr_sampler_order is a bijection on [0, N) in every mode; ranks' sets are disjoint and
 * cover [0, N) exactly once (the tail padded, masked or dropped as PyTorch's DistributedSampler
 * does, compared against a direct re-implementation of its algorithm); any step can be computed
 * without the ones before it; substitution is deterministic; block mode keeps reads local. */
#include "loader/sampler.h"
#include "common/mix.h"
#include "shm/ctl.h"
#include "shm/ring.h"

#include <errno.h>
#include <inttypes.h>
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

/* Short names for the tables below. */
enum { SHUF = LDR_SAMPLE_SHUFFLE, SEQ = LDR_SAMPLE_SEQUENTIAL, BLK = LDR_SAMPLE_BLOCK };
enum { PAD = LDR_TAIL_PAD, DROP = LDR_TAIL_DROP, MASK = LDR_TAIL_MASK, DLAST = LDR_TAIL_DROP_LAST };

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Dataset sizes: tiny, powers of two and their neighbours, primes, N not divisible by anything
 * used as world, batch or block below. */
static const uint64_t sizes[] = { 1,  2,   3,   4,   5,    7,    8,    13,   31,   63,   64,
				  65, 97, 127, 128, 255, 1000, 1009, 4096, 4099, 10007 };

/* Block-mode geometries (records per block, blocks per window), incl. N < block for small N. */
static const uint32_t geoms[][2] = { { 1, 1 },  { 1, 7 },   { 4, 3 },    { 7, 5 },
				     { 64, 16 }, { 100, 2 }, { 5000, 4 }, { 3, 1 } };

static const char *mode_name(int m)
{
	return m == SHUF ? "shuffle" : m == SEQ ? "sequential" : "block";
}

static const char *tail_name(int t)
{
	return t == PAD ? "pad" : t == DROP ? "drop" : t == MASK ? "mask" : "drop_last";
}


/* ldr_sampler_init with default block geometry and seed 0. */
static int init0(struct ldr_sampler *s, uint64_t n, uint32_t world, uint32_t batch, int mode,
		 int tail)
{
	return ldr_sampler_init(s, n, world, batch, (enum ldr_sampling)mode, (enum ldr_tail)tail, 0,
				0, 0);
}

static void init_ok(struct ldr_sampler *s, uint64_t n, uint32_t world, uint32_t batch, int mode,
		    int tail, uint64_t seed, uint32_t block, uint32_t window)
{
	int ret = ldr_sampler_init(s, n, world, batch, (enum ldr_sampling)mode,
				   (enum ldr_tail)tail, seed, block, window);

	if (ret != 0)
		fail_msg("init(n=%" PRIu64 ", world=%u, batch=%u, %s, %s) = %d", n, world, batch,
			 mode_name(mode), tail_name(tail), ret);
}

/* Fails unless order(epoch, .) is a bijection on [0, n). @seen has n bytes. */
static void check_bijection(const struct ldr_sampler *s, uint64_t epoch, uint8_t *seen)
{
	memset(seen, 0, s->n);
	for (uint64_t p = 0; p < s->n; p++) {
		uint64_t v = ldr_sampler_order(s, epoch, p);

		if (v >= s->n)
			fail_msg("%s n=%" PRIu64 " block=%u window=%u epoch %" PRIu64
				 ": order(%" PRIu64 ") = %" PRIu64 " out of range",
				 mode_name(s->mode), s->n, s->block, s->window, epoch, p, v);
		if (seen[v]++)
			fail_msg("%s n=%" PRIu64 " block=%u window=%u epoch %" PRIu64 ": %" PRIu64
				 " comes twice (second at position %" PRIu64 ")",
				 mode_name(s->mode), s->n, s->block, s->window, epoch, v, p);
	}
}

/* ---- init ---- */

static void test_sampler_init_errors(void **state)
{
	struct ldr_sampler s;

	(void)state;
	for (int t = PAD; t <= MASK; t++) {
		assert_int_equal(init0(&s, 0, 1, 1, SHUF, t), -ENODATA);
		assert_int_equal(init0(&s, 0, 8, 32, BLK, t), -ENODATA);
		assert_int_equal(init0(&s, 10, 0, 1, SHUF, t), -EINVAL);
		assert_int_equal(init0(&s, 10, 2, 0, SHUF, t), -EINVAL);
		assert_int_equal(init0(&s, 0, 0, 1, SHUF, t), -EINVAL);
		assert_int_equal(init0(&s, 10, 2, 4, 3, t), -EINVAL);  /* no such mode */
	}
	assert_int_equal(init0(&s, 10, 2, 4, SHUF, 4), -EINVAL);  /* no such tail */
	/* drop_last: ceil(N / world) below one batch leaves no whole batch; exactly one is a step */
	assert_int_equal(init0(&s, 10, 3, 5, SHUF, DLAST), -ENODATA);  /* 4 per rank < 5 */
	assert_int_equal(init0(&s, 10, 3, 4, SHUF, DLAST), 0);
	assert_int_equal(s.per_rank, 4);
	assert_int_equal(s.steps, 1);
	assert_int_equal(init0(&s, 15, 1, 16, SEQ, DLAST), -ENODATA);
	assert_int_equal(init0(&s, 16, 1, 16, SEQ, DLAST), 0);
	assert_int_equal(s.steps, 1);
	/* the documented limit of the Feistel domain: N <= 2^62 */
	assert_int_equal(init0(&s, (1ull << 62) + 1, 2, 4, SHUF, PAD), -EINVAL);
	assert_int_equal(init0(&s, 1ull << 62, 2, 4, SHUF, PAD), 0);
	/* N < world: drop leaves a rank empty; pad and mask give every rank one sample */
	assert_int_equal(init0(&s, 3, 4, 1, SHUF, DROP), -ENODATA);
	assert_int_equal(init0(&s, 1, 2, 8, SEQ, DROP), -ENODATA);
	assert_int_equal(init0(&s, 3, 4, 1, SHUF, PAD), 0);
	assert_int_equal(s.per_rank, 1);
	assert_int_equal(s.steps, 1);
	assert_int_equal(init0(&s, 3, 4, 1, SHUF, MASK), 0);
	assert_int_equal(init0(&s, 4, 4, 1, SHUF, DROP), 0);
	assert_int_equal(s.per_rank, 1);
}

static void test_sampler_init_defaults_and_counts(void **state)
{
	struct ldr_sampler s;

	(void)state;
	init_ok(&s, 1000, 3, 64, BLK, PAD, 7, 0, 0);
	assert_int_equal(s.block, 64);
	assert_int_equal(s.window, 16);
	assert_int_equal(s.per_rank, 334);  /* ceil(1000 / 3) */
	assert_int_equal(s.steps, 6);       /* 5 x 64 + 14 */
	init_ok(&s, 1000, 3, 64, BLK, DROP, 7, 10, 3);
	assert_int_equal(s.block, 10);
	assert_int_equal(s.window, 3);
	assert_int_equal(s.per_rank, 333);
	assert_int_equal(s.steps, 6);
	init_ok(&s, 10, 4, 100, SHUF, MASK, 7, 0, 0);
	assert_int_equal(s.per_rank, 3);
	assert_int_equal(s.steps, 1);  /* batch > per rank: one short step */
	/* one rank, 300 samples, batch 16: drop gives 19 steps (18 x 16 + 12: drop only drops
	 * what does not divide among the ranks), drop_last 18 whole ones as
	 * DataLoader(drop_last=True) */
	init_ok(&s, 300, 1, 16, SHUF, DROP, 7, 0, 0);
	assert_int_equal(s.steps, 19);
	init_ok(&s, 300, 1, 16, SHUF, DLAST, 7, 0, 0);
	assert_int_equal(s.per_rank, 288);
	assert_int_equal(s.steps, 18);
	assert_int_equal(ldr_sampler_count(&s, 17), 16);
	/* 3 ranks: ceil(1000 / 3) = 334 padded, 5 whole batches of 64 */
	init_ok(&s, 1000, 3, 64, BLK, DLAST, 7, 0, 0);
	assert_int_equal(s.per_rank, 320);
	assert_int_equal(s.steps, 5);
	init_ok(&s, 320 * 3, 3, 64, BLK, DLAST, 7, 0, 0);   /* divides: nothing dropped */
	assert_int_equal(s.per_rank, 320);
	init_ok(&s, 320 * 3 - 1, 3, 64, BLK, DLAST, 7, 0, 0);   /* one short: padded, kept */
	assert_int_equal(s.per_rank, 320);
	init_ok(&s, 320 * 3 - 3, 3, 64, BLK, DLAST, 7, 0, 0);   /* 319 per rank: a batch goes */
	assert_int_equal(s.per_rank, 256);
}

/* ---- the global order ---- */

static void test_sampler_order_is_bijection_every_mode(void **state)
{
	uint8_t *seen = malloc(sizes[ARRAY_LEN(sizes) - 1]);
	struct ldr_sampler s;

	(void)state;
	assert_non_null(seen);
	for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
		uint64_t n = sizes[i];

		for (uint64_t seed = 0; seed < 3; seed++) {
			init_ok(&s, n, 1, 1, SHUF, PAD, seed * 0x1234567ull, 0, 0);
			for (uint64_t e = 0; e < 3; e++)
				check_bijection(&s, e, seen);
			init_ok(&s, n, 1, 1, SEQ, PAD, seed, 0, 0);
			check_bijection(&s, seed, seen);
			for (uint64_t p = 0; p < n; p++)
				assert_int_equal(ldr_sampler_order(&s, seed, p), p);
			for (size_t g = 0; g < ARRAY_LEN(geoms); g++) {
				init_ok(&s, n, 1, 1, BLK, PAD, seed, geoms[g][0], geoms[g][1]);
				for (uint64_t e = 0; e < 2; e++)
					check_bijection(&s, e, seen);
			}
			/* block mode with default geometry (64 x 16) */
			init_ok(&s, n, 1, 1, BLK, PAD, seed, 0, 0);
			check_bijection(&s, 5, seen);
		}
	}
	free(seen);
}

/* A Feistel network over a large domain: a sample of positions must land in range and stay
 * distinct (a full bijection check at this size would take too long). */
static void test_sampler_order_large_n_in_range(void **state)
{
	static const uint64_t big[] = { (1ull << 32) + 15, (1ull << 40) - 3, 1ull << 62 };
	struct ldr_sampler s;

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(big); i++) {
		for (int m = SHUF; m <= BLK; m++) {
			uint64_t got[512];

			init_ok(&s, big[i], 8, 256, m, PAD, 99, 0, 0);
			for (int k = 0; k < 512; k++) {
				/* the first and the last 256 positions */
				uint64_t p = k < 256 ? (uint64_t)k : big[i] - 512 + (uint64_t)k;

				got[k] = ldr_sampler_order(&s, 3, p);
				assert_true(got[k] < big[i]);
				for (int j = 0; j < k; j++)
					assert_true(got[j] != got[k]);
			}
		}
	}
}

static int same_order(const struct ldr_sampler *a, uint64_t ea, const struct ldr_sampler *b,
		      uint64_t eb)
{
	for (uint64_t p = 0; p < a->n; p++)
		if (ldr_sampler_order(a, ea, p) != ldr_sampler_order(b, eb, p))
			return 0;
	return 1;
}

/* Shuffle with one (n, seed): the same order for the same (seed, epoch) whatever the sharding,
 * a different one for every other epoch and seed, and far from the identity. */
static void check_shuffle_keyed(uint64_t n, uint64_t seed)
{
	struct ldr_sampler a, b;
	uint64_t fixed = 0;

	init_ok(&a, n, 1, 1, SHUF, PAD, seed, 0, 0);
	/* another process, another world size and tail: the same global order */
	init_ok(&b, n, 7, 3, SHUF, DROP, seed, 0, 0);
	for (uint64_t e = 0; e < 6; e++) {
		assert_true(same_order(&a, e, &b, e));
		for (uint64_t e2 = 0; e2 < e; e2++)
			if (same_order(&a, e, &a, e2))
				fail_msg("n=%" PRIu64 " seed %" PRIu64 ": epochs %" PRIu64
					 " and %" PRIu64 " have the same order", n, seed, e2, e);
	}
	for (uint64_t s2 = 0; s2 < seed; s2++) {
		init_ok(&b, n, 1, 1, SHUF, PAD, s2, 0, 0);
		for (uint64_t e = 0; e < 3; e++)
			if (same_order(&a, e, &b, e))
				fail_msg("n=%" PRIu64 " epoch %" PRIu64 ": seeds %" PRIu64
					 " and %" PRIu64 " give the same order", n, e, s2, seed);
	}
	for (uint64_t p = 0; p < n; p++)
		fixed += ldr_sampler_order(&a, 1, p) == p;
	if (fixed > n / 4)
		fail_msg("n=%" PRIu64 " seed %" PRIu64 ": %" PRIu64 " fixed points", n, seed,
			 fixed);
}

static void test_sampler_shuffle_keyed_by_seed_and_epoch(void **state)
{
	static const uint64_t ns[] = { 16, 64, 65, 1000, 4099 };

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(ns); i++)
		for (uint64_t seed = 0; seed < 4; seed++)
			check_shuffle_keyed(ns[i], seed);
}

/* Over many epochs the first sample of a small dataset takes every value, and roughly evenly:
 * a loose check that the keyed permutation is not stuck (expected 300 each, 10 values). */
static void test_sampler_shuffle_first_sample_spread(void **state)
{
	unsigned hits[10] = { 0 };
	struct ldr_sampler s;

	(void)state;
	init_ok(&s, 10, 1, 1, SHUF, PAD, 12345, 0, 0);
	for (uint64_t e = 0; e < 3000; e++)
		hits[ldr_sampler_order(&s, e, 0)]++;
	for (int v = 0; v < 10; v++)
		if (hits[v] < 150 || hits[v] > 450)
			fail_msg("sample %d first in %u of 3000 epochs", v, hits[v]);
}

static void test_sampler_block_keyed_by_epoch(void **state)
{
	struct ldr_sampler a, b;

	(void)state;
	init_ok(&a, 4099, 1, 1, BLK, PAD, 5, 16, 4);
	init_ok(&b, 4099, 4, 32, BLK, MASK, 5, 16, 4);
	assert_true(same_order(&a, 2, &b, 2));
	assert_false(same_order(&a, 0, &a, 1));
	init_ok(&b, 4099, 1, 1, BLK, PAD, 6, 16, 4);
	assert_false(same_order(&a, 0, &b, 0));
	init_ok(&b, 4099, 1, 1, SEQ, PAD, 5, 16, 4);
	assert_false(same_order(&a, 0, &b, 0));
	/* the blocks themselves are in a keyed order, not only shuffled within their window: few
	 * windows read just the blocks that sit at their place on disk */
	for (uint64_t e = 0; e < 3; e++) {
		unsigned in_place = 0, windows = 0;

		for (uint64_t w0 = 0; w0 < a.n; w0 += 64, windows++) {
			int moved = 0;

			for (uint64_t p = w0; p < a.n && p < w0 + 64; p++)
				moved |= ldr_sampler_order(&a, e, p) / 64 != w0 / 64;
			in_place += !moved;
		}
		if (in_place > windows / 4)
			fail_msg("epoch %" PRIu64 ": %u of %u windows read their own blocks", e,
				 in_place, windows);
	}
}

/* The number of distinct blocks read by positions [from, from + len) of @epoch, failing past
 * @limit. When @win_of is given, records the window index @wi of every sample read. */
static unsigned blocks_read(const struct ldr_sampler *s, uint64_t epoch, uint64_t from,
			    uint64_t len, unsigned limit, uint32_t *win_of, uint32_t wi)
{
	uint64_t blocks[64];
	unsigned nb = 0;

	assert_true(limit <= ARRAY_LEN(blocks));
	for (uint64_t p = from; p < s->n && p < from + len; p++) {
		uint64_t v = ldr_sampler_order(s, epoch, p), b = v / s->block;
		unsigned k;

		if (win_of)
			win_of[v] = wi;
		for (k = 0; k < nb && blocks[k] != b; k++)
			;
		if (k < nb)
			continue;
		if (nb == limit)
			fail_msg("n=%" PRIu64 " block=%u window=%u epoch %" PRIu64 ": positions %"
				 PRIu64 "+%" PRIu64 " read more than %u blocks", s->n, s->block,
				 s->window, epoch, from, len, limit);
		blocks[nb++] = b;
	}
	return nb;
}

/* Block mode: each aligned window of block x window positions reads from at most `window`
 * blocks (the short last block counts as one), and every block's records are read within a
 * single window. A span of that length that is not aligned overlaps two windows, so it reads at
 * most twice as many. */
static void test_sampler_block_locality(void **state)
{
	static const uint64_t ns[] = { 1, 3, 50, 999, 1024, 4099, 10007 };
	static const uint32_t geo[][2] = { { 1, 1 },   { 4, 1 },   { 4, 3 }, { 16, 2 },
					   { 64, 16 }, { 100, 5 }, { 7, 4 }, { 2048, 2 } };
	uint32_t *win_of = malloc(sizeof(uint32_t) * 10007);
	struct ldr_sampler s;

	(void)state;
	assert_non_null(win_of);
	for (size_t i = 0; i < ARRAY_LEN(ns); i++) {
		for (size_t g = 0; g < ARRAY_LEN(geo); g++) {
			uint64_t n = ns[i], block = geo[g][0], wsz = block * geo[g][1];
			unsigned window = geo[g][1];

			init_ok(&s, n, 3, 8, BLK, PAD, 77 + g, geo[g][0], window);
			for (uint64_t e = 0; e < 2; e++) {
				for (uint64_t w0 = 0; w0 < n; w0 += wsz)
					blocks_read(&s, e, w0, wsz, window, win_of,
						    (uint32_t)(w0 / wsz));
				for (uint64_t v = 0; v < n; v++)
					if (win_of[v] != win_of[v - v % block])
						fail_msg("n=%" PRIu64 " block=%" PRIu64
							 ": record %" PRIu64 " read in window %u,"
							 " its block's first in %u", n, block, v,
							 win_of[v], win_of[v - v % block]);
				if (n > 1024 || wsz > 256)
					continue;
				for (uint64_t a = 1; a + wsz <= n; a += 3)
					blocks_read(&s, e, a, wsz, 2 * window, NULL, 0);
			}
		}
	}
	free(win_of);
}

/* ---- sharding: PyTorch DistributedSampler semantics ---- */

/* torch.utils.data.DistributedSampler.__iter__, on the global order (the shuffle is ours):
 *   indices = order
 *   if not drop_last:
 *       padding_size = total_size - len(indices)
 *       if padding_size <= len(indices): indices += indices[:padding_size]
 *       else: indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
 *   else: indices = indices[:total_size]
 *   indices = indices[rank:total_size:num_replicas]
 * Writes the list before the rank slice into @list, with @padded[p] set where it came from the
 * padding, and returns num_samples; rank r's samples are list[r], list[r + world], ... */
static uint64_t torch_distributed(const struct ldr_sampler *s, uint64_t epoch, int drop_last,
				  uint64_t *list, uint8_t *padded)
{
	uint64_t n = s->n, world = s->world, len = n;
	uint64_t num_samples, total;

	if (drop_last && n % world != 0)
		num_samples = (n - world + world - 1) / world;  /* ceil((len - world) / world) */
	else
		num_samples = (n + world - 1) / world;          /* ceil(len / world) */
	total = num_samples * world;
	for (uint64_t p = 0; p < n; p++) {
		list[p] = ldr_sampler_order(s, epoch, p);
		padded[p] = 0;
	}
	if (!drop_last) {
		uint64_t padding = total - len;

		if (padding <= len) {
			for (uint64_t k = 0; k < padding; k++) {
				list[len + k] = list[k];
				padded[len + k] = 1;
			}
		} else {
			/* (indices * reps)[:padding] */
			uint64_t reps = (padding + len - 1) / len;

			for (uint64_t k = 0; k < padding && k < reps * len; k++) {
				list[len + k] = list[k % len];
				padded[len + k] = 1;
			}
		}
		len += padding;
	} else {
		len = total;
	}
	assert_int_equal(len, total);
	return num_samples;
}

struct shard_bufs {
	uint64_t *ids, *list;  /* one rank's samples; torch_distributed()'s list */
	uint8_t *flags, *lpad;
	uint32_t *plain;       /* per sample: how often delivered unflagged */
	size_t cap;
};

static void shard_bufs_init(struct shard_bufs *b, size_t nmax, size_t worldmax)
{
	b->cap = nmax + worldmax;
	b->ids = calloc(b->cap, sizeof(*b->ids));
	b->list = calloc(b->cap, sizeof(*b->list));
	b->flags = calloc(b->cap, 1);
	b->lpad = calloc(b->cap, 1);
	b->plain = calloc(nmax, sizeof(*b->plain));
	assert_true(b->ids && b->list && b->flags && b->lpad && b->plain);
}

static void shard_bufs_fini(struct shard_bufs *b)
{
	free(b->ids);
	free(b->list);
	free(b->flags);
	free(b->lpad);
	free(b->plain);
}

/* Walks every step of rank @r into b->ids and b->flags: step sizes, and the position query. */
static void walk_rank(struct shard_bufs *b, const struct ldr_sampler *s, uint64_t epoch,
		      uint32_t r, const char *cfg)
{
	uint64_t got = 0;

	for (uint64_t st = 0; st < s->steps; st++) {
		uint32_t c = ldr_sampler_batch(s, epoch, st, r, b->ids + got, b->flags + got);
		uint64_t left = s->per_rank - st * s->batch;
		uint64_t want = left < s->batch ? left : s->batch;

		if (c != want || c == 0)
			fail_msg("%s: rank %u step %" PRIu64 "/%" PRIu64 " has %u samples, want %"
				 PRIu64, cfg, r, st, s->steps, c, want);
		if (st + 1 < s->steps && c != s->batch)
			fail_msg("%s: rank %u step %" PRIu64 " short (%u) but not last", cfg, r, st,
				 c);
		for (uint32_t i = 0; i < c; i++) {
			uint64_t pos = ldr_sampler_pos(s, st, r, i);

			assert_int_equal(ldr_sampler_order(s, epoch, pos % s->n), b->ids[got + i]);
		}
		got += c;
	}
	if (got != s->per_rank)
		fail_msg("%s: rank %u got %" PRIu64 " samples, want %" PRIu64, cfg, r, got,
			 s->per_rank);
}

/* Walks every step of every rank for one configuration and checks it against the contract and
 * against torch_distributed(). */
static void check_sharding_geo(struct shard_bufs *b, uint64_t n, uint32_t world, uint32_t batch,
			       int mode, int tail, uint64_t seed, uint64_t epoch, uint32_t block,
			       uint32_t window)
{
	struct ldr_sampler s;
	int ret = ldr_sampler_init(&s, n, world, batch, (enum ldr_sampling)mode,
				   (enum ldr_tail)tail, seed, block, window);
	uint8_t want_flag = tail == MASK ? RING_SAMPLE_PADDING : RING_SAMPLE_REPEATED;
	uint64_t per_rank = tail == DROP ? n / world : (n + world - 1) / world;
	uint64_t nflagged = 0, nplain = 0;
	char cfg[160];

	snprintf(cfg, sizeof(cfg), "n=%" PRIu64 " world=%u batch=%u %s %s seed=%" PRIu64
		 " epoch=%" PRIu64 " block=%u window=%u", n, world, batch, mode_name(mode),
		 tail_name(tail), seed, epoch, block, window);
	if (tail == DROP && n < world) {
		if (ret != -ENODATA)
			fail_msg("%s: init = %d, want -ENODATA", cfg, ret);
		return;
	}
	if (ret != 0)
		fail_msg("%s: init = %d", cfg, ret);
	if (s.per_rank != per_rank || s.steps != (per_rank + batch - 1) / batch)
		fail_msg("%s: per_rank %" PRIu64 " steps %" PRIu64 ", want %" PRIu64, cfg,
			 s.per_rank, s.steps, per_rank);
	assert_true(per_rank * world <= b->cap);
	assert_int_equal(torch_distributed(&s, epoch, tail == DROP, b->list, b->lpad), per_rank);
	memset(b->plain, 0, n * sizeof(*b->plain));
	for (uint32_t r = 0; r < world; r++) {
		walk_rank(b, &s, epoch, r, cfg);
		for (uint64_t i = 0; i < per_rank; i++) {
			uint64_t id = b->ids[i], want = b->list[r + i * world];
			uint8_t flag = b->lpad[r + i * world] ? want_flag : 0;

			if (id >= n)
				fail_msg("%s: rank %u sample %" PRIu64 " = %" PRIu64
					 " out of range", cfg, r, i, id);
			if (id != want)
				fail_msg("%s: rank %u sample %" PRIu64 " = %" PRIu64 ", PyTorch's"
					 " DistributedSampler gives %" PRIu64, cfg, r, i, id, want);
			if (b->flags[i] != flag)
				fail_msg("%s: rank %u sample %" PRIu64 " flags 0x%x, want 0x%x",
					 cfg, r, i, b->flags[i], flag);
			if (b->flags[i])
				nflagged++;
			else
				b->plain[id]++;
		}
	}
	/* coverage and disjointness of the unflagged samples; the flagged ones are the extras */
	for (uint64_t v = 0; v < n; v++) {
		if (tail == DROP ? b->plain[v] > 1 : b->plain[v] != 1)
			fail_msg("%s: sample %" PRIu64 " delivered %u times unflagged", cfg, v,
				 b->plain[v]);
		nplain += b->plain[v];
	}
	if (tail == DROP) {
		assert_int_equal(nflagged, 0);
		assert_int_equal(nplain, (n / world) * world);
	} else {
		if (nflagged != per_rank * world - n)
			fail_msg("%s: %" PRIu64 " flagged samples, want %" PRIu64, cfg, nflagged,
				 per_rank * world - n);
		assert_int_equal(nplain, n);
	}
}

static void check_sharding(struct shard_bufs *b, uint64_t n, uint32_t world, uint32_t batch,
			   int mode, int tail, uint64_t seed, uint64_t epoch)
{
	check_sharding_geo(b, n, world, batch, mode, tail, seed, epoch, 4, 3);
}

/* Block mode with the geometry a client chooses (ctl_job_open's block and window): each bound
 * at its limit and one past it; the edges (block 1, window 1, a block the whole dataset or
 * larger, a size that is not a multiple of the block, a short last window); and, for 2 and 3
 * ranks under every tail policy, every sample exactly once per epoch across the ranks (the
 * repeats flagged) in PyTorch's DistributedSampler order. */
static void test_sampler_block_client_geometry(void **state)
{
	static const uint64_t ns[] = { 1, 7, 64, 1000, 1009, 4099 };
	static const uint32_t geo[][2] = { { 1, 1 }, { 1, 5 }, { 10, 1 }, { 10, 4 }, { 97, 3 },
					   { 1009, 1 }, { 5000, 2 }, { 0, 7 }, { 13, 0 },
					   { CTL_BLOCK_MAX, CTL_WINDOW_MAX }, { CTL_BLOCK_MAX, 1 },
					   { 1, CTL_WINDOW_MAX } };
	uint8_t *seen = malloc(4099);
	struct ldr_sampler s;
	struct shard_bufs b;

	(void)state;
	assert_non_null(seen);
	/* the bounds: at the limit, and one past */
	assert_int_equal(ldr_sampler_init(&s, 100, 2, 4, LDR_SAMPLE_BLOCK, LDR_TAIL_PAD, 1,
					  CTL_BLOCK_MAX, 1), 0);
	assert_int_equal(s.block, CTL_BLOCK_MAX);
	assert_int_equal(ldr_sampler_init(&s, 100, 2, 4, LDR_SAMPLE_BLOCK, LDR_TAIL_PAD, 1,
					  CTL_BLOCK_MAX + 1, 1), -EINVAL);
	assert_int_equal(ldr_sampler_init(&s, 100, 2, 4, LDR_SAMPLE_BLOCK, LDR_TAIL_PAD, 1, 1,
					  CTL_WINDOW_MAX), 0);
	assert_int_equal(s.window, CTL_WINDOW_MAX);
	assert_int_equal(ldr_sampler_init(&s, 100, 2, 4, LDR_SAMPLE_BLOCK, LDR_TAIL_PAD, 1, 1,
					  CTL_WINDOW_MAX + 1), -EINVAL);
	/* block 1, window 1: a window is one record, so the order is the keyed order of the
	 * blocks, i.e. of the records: a bijection, and not the identity */
	init_ok(&s, 1009, 1, 1, BLK, PAD, 3, 1, 1);
	check_bijection(&s, 0, seen);
	unsigned fixed = 0;
	for (uint64_t p = 0; p < s.n; p++)
		fixed += ldr_sampler_order(&s, 0, p) == p;
	assert_true(fixed < 20);
	/* block 10, window 4 on 1009 records: 100 full blocks and a short one of 9; windows of
	 * 40 positions, the last (positions 1000..1008) short: it reads exactly the short block,
	 * and every full window reads exactly 4 whole blocks */
	init_ok(&s, 1009, 1, 1, BLK, PAD, 3, 10, 4);
	for (uint64_t e = 0; e < 2; e++) {
		check_bijection(&s, e, seen);
		for (uint64_t p = 1000; p < 1009; p++)
			assert_true(ldr_sampler_order(&s, e, p) >= 1000);
		for (uint64_t w0 = 0; w0 < 1000; w0 += 40)
			assert_int_equal(blocks_read(&s, e, w0, 40, 4, NULL, 0), 4);
	}
	/* a block of CTL_BLOCK_MAX records on a larger dataset: one window of one block reads
	 * that block only, in an order of its own */
	init_ok(&s, 2ull * CTL_BLOCK_MAX + 5, 1, 1, BLK, PAD, 9, CTL_BLOCK_MAX, 1);
	for (uint64_t w = 0; w < 2; w++) {
		uint64_t first = ldr_sampler_order(&s, 0, w * CTL_BLOCK_MAX) / CTL_BLOCK_MAX;
		unsigned moved = 0;
		for (uint64_t p = w * CTL_BLOCK_MAX; p < w * CTL_BLOCK_MAX + 4096; p++) {
			uint64_t v = ldr_sampler_order(&s, 0, p);
			assert_int_equal(v / CTL_BLOCK_MAX, first);
			moved += v % CTL_BLOCK_MAX != p % CTL_BLOCK_MAX;
		}
		assert_true(moved > 4000);
	}
	assert_true(ldr_sampler_order(&s, 0, 2ull * CTL_BLOCK_MAX + 4) >= 2ull * CTL_BLOCK_MAX);
	/* exactly once across 2 and 3 ranks, every tail, each geometry */
	shard_bufs_init(&b, 4099, 3);
	for (size_t i = 0; i < ARRAY_LEN(ns); i++)
		for (size_t g = 0; g < ARRAY_LEN(geo); g++) {
			init_ok(&s, ns[i], 1, 1, BLK, PAD, 11 + g, geo[g][0], geo[g][1]);
			check_bijection(&s, 1, seen);
			for (uint32_t world = 2; world <= 3; world++)
				for (int tail = PAD; tail <= MASK; tail++)
					check_sharding_geo(&b, ns[i], world, 8, BLK, tail, 11 + g,
							   i + g, geo[g][0], geo[g][1]);
		}
	shard_bufs_fini(&b);
	free(seen);
}

static void test_sampler_distributed_semantics_many_triples(void **state)
{
	static const uint64_t ns[] = { 1, 2, 3, 5, 7, 10, 13, 64, 65, 97, 1000, 1001, 4099 };
	static const uint32_t worlds[] = { 1, 2, 3, 4, 7, 8, 16, 64, 130 };
	static const uint32_t batches[] = { 1, 2, 3, 5, 32, 1000 };
	struct shard_bufs b;

	(void)state;
	shard_bufs_init(&b, 4099, 130);
	for (size_t i = 0; i < ARRAY_LEN(ns); i++) {
		/* every mode on small N; shuffle only on large N */
		int modes = ns[i] > 100 ? 1 : 3;

		for (size_t w = 0; w < ARRAY_LEN(worlds); w++)
			for (size_t k = 0; k < ARRAY_LEN(batches) * 3 * (size_t)modes; k++) {
				size_t bi = k % ARRAY_LEN(batches), rest = k / ARRAY_LEN(batches);

				check_sharding(&b, ns[i], worlds[w], batches[bi], (int)(rest / 3),
					       (int)(rest % 3), 0xabcdef + i, i + w);
			}
	}
	shard_bufs_fini(&b);
}

/* Seeded random triples, incl. N < world (padding_size > N, PyTorch's repeated-list branch). */
static void test_sampler_distributed_semantics_seeded(void **state)
{
	uint64_t x = test_xorshift_init(test_seed(__func__, "TEST_SAMPLER_SEED"));
	struct shard_bufs b;

	(void)state;
	shard_bufs_init(&b, 3000, 300);
	for (int iter = 0; iter < 300; iter++) {
		uint64_t n = 1 + test_xorshift(&x) % (iter % 3 == 0 ? 20 : 3000);
		uint32_t world = 1 + (uint32_t)(test_xorshift(&x) % (iter % 4 == 0 ? 300 : 17));
		uint32_t batch = 1 + (uint32_t)(test_xorshift(&x) % 70);
		int mode = (int)(test_xorshift(&x) % 3), tail = (int)(test_xorshift(&x) % 3);
		uint64_t key = test_xorshift(&x), epoch = test_xorshift(&x) % 1000;

		check_sharding(&b, n, world, batch, mode, tail, key, epoch);
	}
	shard_bufs_fini(&b);
}

/* Explicit small cases worked by hand (sequential order, so ids are positions). */
static void test_sampler_distributed_worked_examples(void **state)
{
	struct ldr_sampler s;
	uint64_t ids[8];
	uint8_t fl[8];

	(void)state;
	/* N=10, world=4, pad: total 12; positions 10, 11 repeat 0, 1 (ranks 2 and 3, last) */
	init_ok(&s, 10, 4, 8, SEQ, PAD, 0, 0, 0);
	assert_int_equal(ldr_sampler_batch(&s, 0, 0, 2, ids, fl), 3);
	assert_int_equal(ids[0], 2);
	assert_int_equal(ids[1], 6);
	assert_int_equal(ids[2], 0);
	assert_int_equal(fl[0], 0);
	assert_int_equal(fl[1], 0);
	assert_int_equal(fl[2], RING_SAMPLE_REPEATED);
	assert_int_equal(ldr_sampler_batch(&s, 0, 0, 3, ids, fl), 3);
	assert_int_equal(ids[2], 1);
	assert_int_equal(fl[2], RING_SAMPLE_REPEATED);
	assert_int_equal(ldr_sampler_batch(&s, 0, 0, 1, ids, fl), 3);
	assert_int_equal(ids[2], 9);
	assert_int_equal(fl[2], 0);
	/* mask: the same samples, flagged as weight-0 padding */
	init_ok(&s, 10, 4, 8, SEQ, MASK, 0, 0, 0);
	assert_int_equal(ldr_sampler_batch(&s, 0, 0, 3, ids, fl), 3);
	assert_int_equal(ids[2], 1);
	assert_int_equal(fl[2], RING_SAMPLE_PADDING);
	/* drop_last: pad's samples, whole batches of 2 (the padded repeat of 0 and 1 kept) */
	init_ok(&s, 10, 4, 2, SEQ, DLAST, 0, 0, 0);
	assert_int_equal(s.steps, 1);
	assert_int_equal(ldr_sampler_batch(&s, 0, 0, 2, ids, fl), 2);
	assert_int_equal(ids[0], 2);
	assert_int_equal(ids[1], 6);
	/* drop: 2 each, 8 and 9 never delivered */
	init_ok(&s, 10, 4, 8, SEQ, DROP, 0, 0, 0);
	assert_int_equal(ldr_sampler_batch(&s, 0, 0, 3, ids, fl), 2);
	assert_int_equal(ids[0], 3);
	assert_int_equal(ids[1], 7);
	/* N=2, world=7 (padding 5 > N): total 7 = [0 1 | 0 1 0 1 0] */
	init_ok(&s, 2, 7, 3, SEQ, PAD, 0, 0, 0);
	for (uint32_t r = 0; r < 7; r++) {
		assert_int_equal(ldr_sampler_batch(&s, 0, 0, r, ids, fl), 1);
		assert_int_equal(ids[0], r % 2);
		assert_int_equal(fl[0], r < 2 ? 0 : RING_SAMPLE_REPEATED);
	}
	/* N=1: every rank gets sample 0, only rank 0 unflagged */
	init_ok(&s, 1, 5, 4, SHUF, MASK, 3, 0, 0);
	for (uint32_t r = 0; r < 5; r++) {
		assert_int_equal(ldr_sampler_batch(&s, 9, 0, r, ids, fl), 1);
		assert_int_equal(ids[0], 0);
		assert_int_equal(fl[0], r == 0 ? 0 : RING_SAMPLE_PADDING);
	}
}

/* drop_last is pad without each rank's short last batch: for every (rank, step) it keeps, the
 * same samples and flags as pad (checked against torch's DistributedSampler above), always a
 * whole batch; the steps are floor(ceil(N / world) / batch). */
static void test_sampler_drop_last_is_pad_whole_batches(void **state)
{
	static const uint32_t worlds[] = { 1, 2, 3, 7 }, batches[] = { 1, 3, 4, 16 };
	uint64_t a[16], b[16];
	uint8_t fa[16], fb[16];

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(sizes); i++)
		for (size_t w = 0; w < ARRAY_LEN(worlds); w++)
			for (size_t k = 0; k < ARRAY_LEN(batches); k++) {
				uint64_t n = sizes[i];
				uint32_t world = worlds[w], batch = batches[k];
				struct ldr_sampler p, d;
				uint64_t want = (n + world - 1) / world / batch;
				int ret = init0(&d, n, world, batch, SHUF, DLAST);

				if (want == 0) {
					assert_int_equal(ret, -ENODATA);
					continue;
				}
				assert_int_equal(ret, 0);
				init_ok(&p, n, world, batch, SHUF, PAD, 0, 0, 0);
				assert_int_equal(d.steps, want);
				assert_int_equal(d.per_rank, want * batch);
				if (n > 1000)
					continue;
				for (uint32_t r = 0; r < world; r++)
					for (uint64_t st = 0; st < d.steps; st++) {
						uint32_t c = ldr_sampler_batch(&d, 2, st, r, a, fa);

						assert_int_equal(c, batch);
						assert_int_equal(ldr_sampler_batch(&p, 2, st, r, b, fb),
								 batch);
						assert_memory_equal(a, b, c * sizeof(a[0]));
						assert_memory_equal(fa, fb, c);
					}
			}
}

/* ---- positions: resume without replay ---- */

/* One rank's epoch walked step by step, then every step recomputed in another order by a
 * freshly initialised sampler (a resumed process): the same samples and flags. */
static void check_resume(uint64_t n, uint32_t world, uint32_t batch, int mode, int tail,
			 uint64_t epoch)
{
	static uint64_t walk[10100], start[1100], ids[1000];
	static uint8_t wflags[10100], fl[1000];
	uint32_t rank = (uint32_t)(epoch * 5 % world);
	struct ldr_sampler s, r;
	uint64_t got = 0;

	init_ok(&s, n, world, batch, mode, tail, 42, 8, 3);
	assert_true(s.steps <= ARRAY_LEN(start) && s.per_rank <= ARRAY_LEN(walk));
	for (uint64_t st = 0; st < s.steps; st++) {
		start[st] = got;
		got += ldr_sampler_batch(&s, epoch, st, rank, walk + got, wflags + got);
	}
	assert_int_equal(got, s.per_rank);
	init_ok(&r, n, world, batch, mode, tail, 42, 8, 3);
	for (uint64_t k = 0; k < r.steps; k++) {
		uint64_t st = (r.steps - 1 - k) * 7 % r.steps;  /* reverse, strided */
		uint32_t cnt = ldr_sampler_batch(&r, epoch, st, rank, ids, fl);
		uint64_t want = st + 1 < r.steps ? batch : r.per_rank - st * batch;

		assert_int_equal(cnt, want);
		assert_memory_equal(ids, walk + start[st], cnt * sizeof(uint64_t));
		assert_memory_equal(fl, wflags + start[st], cnt);
	}
}

/* Computing step s directly (as a resumed rank does) gives the s-th step of a walk through the
 * epoch; only the last step may be short. */
static void test_sampler_step_random_access_equals_walk(void **state)
{
	static const uint64_t cfg[][3] = {  /* n, world, batch */
		{ 1000, 3, 64 }, { 4099, 8, 32 },    { 65, 4, 7 }, { 7, 16, 3 },
		{ 1, 1, 1 },     { 10007, 1, 1000 }, { 97, 5, 1 },
	};

	(void)state;
	for (size_t c = 0; c < ARRAY_LEN(cfg); c++)
		for (int m = SHUF; m <= BLK; m++)
			for (int t = PAD; t <= MASK; t++)
				for (uint64_t e = 0; e < 3; e++)
					if (t != DROP || cfg[c][0] >= cfg[c][1])
						check_resume(cfg[c][0], (uint32_t)cfg[c][1],
							     (uint32_t)cfg[c][2], m, t, e);
}

/* ---- substitution ---- */

static void check_substitute(uint64_t n, int mode)
{
	struct ldr_sampler s, t;

	init_ok(&s, n, 4, 16, mode, PAD, 31337, 8, 2);
	init_ok(&t, n, 1, 1, mode, MASK, 31337, 8, 2);  /* another rank's view */
	for (uint64_t pos = 0; pos < n; pos += 1 + n / 50)
		for (uint64_t k = 0; k < 2 * n + 2; k += 1 + k / 3) {
			uint64_t sub = ldr_sampler_substitute(&s, 4, pos, k);

			assert_int_equal(sub, ldr_sampler_order(&s, 4, (pos + k) % n));
			assert_int_equal(sub, ldr_sampler_substitute(&s, 4, pos, k));
			assert_int_equal(sub, ldr_sampler_substitute(&t, 4, pos, k));
			/* never the bad sample itself (a bijection), unless k wraps */
			if (k % n != 0)
				assert_true(sub != ldr_sampler_order(&s, 4, pos));
		}
	/* the last position wraps to the first */
	assert_int_equal(ldr_sampler_substitute(&s, 1, n - 1, 1), ldr_sampler_order(&s, 1, 0));
}

static void test_sampler_substitute_next_positions(void **state)
{
	static const uint64_t ns[] = { 1, 2, 7, 65, 1000 };

	(void)state;
	for (size_t i = 0; i < ARRAY_LEN(ns); i++)
		for (int m = SHUF; m <= BLK; m++)
			check_substitute(ns[i], m);
}

static void test_sampler_mix_deterministic(void **state)
{
	const uint64_t a = 0x1234, b = 0x5678, c = 0x9abc, base = mix3(a, b, c);

	(void)state;
	assert_int_equal(mix3(1, 2, 3), mix3(1, 2, 3));
	assert_true(mix3(1, 2, 3) != mix3(1, 2, 4));
	assert_true(mix3(1, 2, 3) != mix3(1, 3, 3));
	assert_true(mix3(1, 2, 3) != mix3(2, 2, 3));
	/* each argument reaches every output bit: flipping one input bit flips about half */
	for (int bit = 0; bit < 64; bit++) {
		uint64_t f = 1ull << bit;
		int pa = __builtin_popcountll(base ^ mix3(a ^ f, b, c));
		int pb = __builtin_popcountll(base ^ mix3(a, b ^ f, c));
		int pc = __builtin_popcountll(base ^ mix3(a, b, c ^ f));

		if (pa < 12 || pb < 12 || pc < 12)
			fail_msg("bit %d: %d %d %d output bits change", bit, pa, pb, pc);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sampler_init_errors),
		cmocka_unit_test(test_sampler_init_defaults_and_counts),
		cmocka_unit_test(test_sampler_order_is_bijection_every_mode),
		cmocka_unit_test(test_sampler_order_large_n_in_range),
		cmocka_unit_test(test_sampler_shuffle_keyed_by_seed_and_epoch),
		cmocka_unit_test(test_sampler_shuffle_first_sample_spread),
		cmocka_unit_test(test_sampler_block_keyed_by_epoch),
		cmocka_unit_test(test_sampler_block_locality),
		cmocka_unit_test(test_sampler_block_client_geometry),
		cmocka_unit_test(test_sampler_distributed_semantics_many_triples),
		cmocka_unit_test(test_sampler_distributed_semantics_seeded),
		cmocka_unit_test(test_sampler_distributed_worked_examples),
		cmocka_unit_test(test_sampler_drop_last_is_pad_whole_batches),
		cmocka_unit_test(test_sampler_step_random_access_equals_walk),
		cmocka_unit_test(test_sampler_substitute_next_positions),
		cmocka_unit_test(test_sampler_mix_deterministic),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
