/* sampler.c - keyed permutations and DistributedSampler sharding (see sampler.h). */
#include "loader/sampler.h"
#include "common/mix.h"
#include "shm/ctl.h"
#include "shm/ring.h"

#include <errno.h>

#define FEISTEL_ROUNDS 6

/* A bijection on [0, n) keyed by @key: a balanced Feistel network on the smallest even power of
 * two >= n, cycle-walked (re-applied until the value lands in range; expected < 4 rounds, since
 * the domain is < 4n). */
static uint64_t permute(uint64_t x, uint64_t n, uint64_t key)
{
	unsigned bits = 2;

	if (n <= 1)
		return 0;
	while (bits < 64 && (1ull << bits) < n)
		bits++;
	bits += bits & 1;
	unsigned half = bits / 2;
	uint64_t mask = (1ull << half) - 1;

	do {
		uint64_t l = x >> half, r = x & mask;
		for (unsigned i = 0; i < FEISTEL_ROUNDS; i++) {
			uint64_t t = l ^ (mix3(key, i, r) & mask);
			l = r;
			r = t;
		}
		x = (l << half) | r;
	} while (x >= n);
	return x;
}

int ldr_sampler_init(struct ldr_sampler *s, uint64_t n, uint32_t world, uint32_t batch,
		     enum ldr_sampling mode, enum ldr_tail tail, uint64_t seed, uint32_t block,
		     uint32_t window)
{
	if (world == 0 || batch == 0 || mode > LDR_SAMPLE_BLOCK || tail > LDR_TAIL_DROP_LAST ||
	    n > (1ull << 62) || block > CTL_BLOCK_MAX || window > CTL_WINDOW_MAX)
		return -EINVAL;
	s->n = n;
	s->world = world;
	s->batch = batch;
	s->mode = mode;
	s->tail = tail;
	s->seed = seed;
	s->block = block ? block : CTL_BLOCK_DEFAULT;
	s->window = window ? window : CTL_WINDOW_DEFAULT;
	s->per_rank = tail == LDR_TAIL_DROP ? n / world : (n + world - 1) / world;
	if (tail == LDR_TAIL_DROP_LAST)   /* whole batches only */
		s->per_rank -= s->per_rank % batch;
	if (n == 0 || s->per_rank == 0)
		return -ENODATA;
	s->steps = (s->per_rank + batch - 1) / batch;
	return 0;
}

uint64_t ldr_sampler_order(const struct ldr_sampler *s, uint64_t epoch, uint64_t pos)
{
	uint64_t key = mix3(s->seed, epoch, 0x5348554646ull);

	switch (s->mode) {
	case LDR_SAMPLE_SEQUENTIAL:
		return pos;
	case LDR_SAMPLE_SHUFFLE:
		return permute(pos, s->n, key);
	case LDR_SAMPLE_BLOCK: {
		uint64_t wsz = (uint64_t)s->block * s->window;
		uint64_t w = pos / wsz, off = pos % wsz;
		uint64_t wlen = s->n - w * wsz < wsz ? s->n - w * wsz : wsz;
		uint64_t q = w * wsz + permute(off, wlen, mix3(key, w, 0x57494eull));
		uint64_t nfull = s->n / s->block, b = q / s->block;
		if (b >= nfull)
			return q;  /* the short last block stays last */
		return permute(b, nfull, mix3(key, 0x424c4bull, 1)) * s->block + q % s->block;
	}
	}
	return pos;
}

uint64_t ldr_sampler_pos(const struct ldr_sampler *s, uint64_t step, uint32_t rank, uint32_t i)
{
	return ((uint64_t)step * s->batch + i) * s->world + rank;
}

uint32_t ldr_sampler_count(const struct ldr_sampler *s, uint64_t step)
{
	uint64_t first = step * s->batch;

	return (uint32_t)(s->per_rank - first < s->batch ? s->per_rank - first : s->batch);
}

uint64_t ldr_sampler_gpos(const struct ldr_sampler *s, uint64_t step, uint64_t g)
{
	uint32_t c = ldr_sampler_count(s, step);

	return ldr_sampler_pos(s, step, (uint32_t)(g / c), (uint32_t)(g % c));
}

/* The id and flags of global position @pos of @epoch. */
static uint64_t draw(const struct ldr_sampler *s, uint64_t epoch, uint64_t pos, uint8_t *flag)
{
	*flag = 0;
	if (pos >= s->n) {
		/* pad/mask only (drop never reaches past n): repeat from the start */
		*flag = s->tail == LDR_TAIL_MASK ? RING_SAMPLE_PADDING : RING_SAMPLE_REPEATED;
		pos %= s->n;
	}
	return ldr_sampler_order(s, epoch, pos);
}

void ldr_sampler_range(const struct ldr_sampler *s, uint64_t epoch, uint64_t step, uint64_t offset,
		       uint32_t n, uint64_t *ids, uint8_t *flags)
{
	for (uint32_t i = 0; i < n; i++)
		ids[i] = draw(s, epoch, ldr_sampler_gpos(s, step, offset + i), &flags[i]);
}

uint32_t ldr_sampler_batch(const struct ldr_sampler *s, uint64_t epoch, uint64_t step,
			   uint32_t rank, uint64_t *ids, uint8_t *flags)
{
	uint32_t count = ldr_sampler_count(s, step);

	for (uint32_t i = 0; i < count; i++) {
		uint64_t pos = ldr_sampler_pos(s, step, rank, i);
		flags[i] = 0;
		if (pos >= s->n) {
			/* pad/mask only (drop never reaches past n): repeat from the start */
			flags[i] = s->tail == LDR_TAIL_MASK ? RING_SAMPLE_PADDING : RING_SAMPLE_REPEATED;
			pos %= s->n;
		}
		ids[i] = ldr_sampler_order(s, epoch, pos);
	}
	return count;
}

uint64_t ldr_sampler_substitute(const struct ldr_sampler *s, uint64_t epoch, uint64_t pos,
				uint64_t k)
{
	return ldr_sampler_order(s, epoch, (pos + k) % s->n);
}
