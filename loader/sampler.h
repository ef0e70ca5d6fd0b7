/* sampler.h - which samples each rank gets at each step: a keyed permutation of [0, N) per epoch
 * (computed on the fly, O(1) state), sharded with DistributedSampler semantics.
 *
 * Global order: position p of epoch e holds sample order(e, p):
 *   shuffle     a Feistel permutation of [0, N) keyed by (seed, epoch), cycle-walked;
 *   sequential  p;
 *   block       full blocks of `block` consecutive records in a keyed order (a short last block
 *               stays last), then positions shuffled within windows of `window` blocks: reads
 *               stay within a few blocks of the disk at a time, and any rank can use it. A
 *               window is block x window consecutive positions; the last one may be short (the
 *               dataset's size need not be a multiple of either). Nothing is held per block or
 *               per window: each position costs two keyed permutations whatever the geometry.
 * Sharding (PyTorch DistributedSampler): rank r takes positions r, r + world, r + 2 world, ...
 *   pad   ceil(N / world) per rank; positions past N repeat the order from its start (flag
 *         RING_SAMPLE_REPEATED);
 *   mask  the same, but the repeats are flagged RING_SAMPLE_PADDING (weight 0);
 *   drop  floor(N / world) per rank: the tail is dropped (DistributedSampler(drop_last=True));
 *   drop_last  as pad, then the rank's last short batch dropped: floor(ceil(N / world) / batch)
 *         full steps, as DataLoader(drop_last=True) over a DistributedSampler.
 * Every rank has the same number of samples and of steps; the last step of an epoch may be short
 * (never with drop_last).
 * A position is (epoch, step): any step can be computed without the ones before it. */
#ifndef LOADERD_SAMPLER_H
#define LOADERD_SAMPLER_H
#include <stdint.h>

enum ldr_sampling { LDR_SAMPLE_SHUFFLE = 0, LDR_SAMPLE_SEQUENTIAL = 1, LDR_SAMPLE_BLOCK = 2 };
enum ldr_tail { LDR_TAIL_PAD = 0, LDR_TAIL_DROP = 1, LDR_TAIL_MASK = 2, LDR_TAIL_DROP_LAST = 3 };

struct ldr_sampler {
	uint64_t n;              /* samples in the dataset */
	uint32_t world, batch;
	enum ldr_sampling mode;
	enum ldr_tail tail;
	uint64_t seed;
	uint32_t block, window;  /* block mode: records per block, blocks per window */
	uint64_t per_rank;       /* samples per rank per epoch */
	uint64_t steps;          /* steps per epoch */
};

/* Set up @s. block/window of 0 take defaults (CTL_BLOCK_DEFAULT records, CTL_WINDOW_DEFAULT
 * blocks; shm/ctl.h); above CTL_BLOCK_MAX or CTL_WINDOW_MAX is -EINVAL. Returns 0, or -EINVAL for a
 * bad argument, or -ENODATA when a rank would get no sample (N < world with tail drop, ceil(N / world) < batch with drop_last, or N = 0). */
int ldr_sampler_init(struct ldr_sampler *s, uint64_t n, uint32_t world, uint32_t batch,
		     enum ldr_sampling mode, enum ldr_tail tail, uint64_t seed, uint32_t block,
		     uint32_t window);
/* The sample at global position @pos (< n) of @epoch. */
uint64_t ldr_sampler_order(const struct ldr_sampler *s, uint64_t epoch, uint64_t pos);
/* Step @step (< s->steps) of @epoch for @rank: writes count ids and RING_SAMPLE_* flags (0,
 * RING_SAMPLE_REPEATED or RING_SAMPLE_PADDING), returns count (1..batch). */
uint32_t ldr_sampler_batch(const struct ldr_sampler *s, uint64_t epoch, uint64_t step,
			   uint32_t rank, uint64_t *ids, uint8_t *flags);
/* The sample that replaces a bad one at global position @pos: the next position's sample, and so
 * on (@k-th try: pos + k). Deterministic across runs and ranks. */
uint64_t ldr_sampler_substitute(const struct ldr_sampler *s, uint64_t epoch, uint64_t pos,
				uint64_t k);
/* Samples each rank gets at @step under even splits (1..batch; the same for every rank). */
uint32_t ldr_sampler_count(const struct ldr_sampler *s, uint64_t step);
/* Balanced shares: entries [@offset, @offset + @n) of step @step's global list, which is the
 * even split's batches concatenated in rank order (entry g is sample g % c of rank g / c, c =
 * ldr_sampler_count): the same samples, the same order, only cut elsewhere. Writes @n ids and
 * flags as ldr_sampler_batch; @offset + @n <= world x c (the caller checks). Even shares (offset
 * r x c, n = c) give exactly ldr_sampler_batch's draw for rank r. */
void ldr_sampler_range(const struct ldr_sampler *s, uint64_t epoch, uint64_t step, uint64_t offset,
		       uint32_t n, uint64_t *ids, uint8_t *flags);
/* The global position of entry @g of step @step's global list (see ldr_sampler_range). */
uint64_t ldr_sampler_gpos(const struct ldr_sampler *s, uint64_t step, uint64_t g);
/* The global position of the i-th sample of (@step, @rank). */
uint64_t ldr_sampler_pos(const struct ldr_sampler *s, uint64_t step, uint32_t rank, uint32_t i);

#endif
