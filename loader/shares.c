/* shares.c - balanced shares: the weights, their update from the ranks' reports, the split of a
 * step, and the split log (shares.h). Integer weights, so that a split recorded once is the same
 * split whenever it is computed again; the doubles only enter in ldr_shares_update, whose output
 * is recorded. */
#include "loader/shares.h"
#include "shm/ctl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(CTL_SPLIT_ONE == LDR_SHARES_ONE && CTL_SPLIT_EVERY == LDR_SHARES_EVERY &&
	       LDR_SHARES_FLOOR_DIV == 4, "ctl_check_split checks the weights loaderd keeps");

static uint32_t weight_floor(uint32_t world)
{
	return LDR_SHARES_ONE / (LDR_SHARES_FLOOR_DIV * world);
}

void ldr_shares_even(uint32_t world, uint32_t *w)
{
	for (uint32_t r = 0; r < world; r++)
		w[r] = LDR_SHARES_ONE / world + (r < LDR_SHARES_ONE % world);
}

/* Make @w sum to exactly LDR_SHARES_ONE, none under @floor: take what is over from the weights
 * above the floor, in proportion to their excess, the last units one by one from rank 0 on. */
static void normalise(uint32_t world, uint32_t floor, uint32_t *w)
{
	uint64_t sum = 0, excess = 0;

	for (uint32_t r = 0; r < world; r++) {
		if (w[r] < floor)
			w[r] = floor;
		sum += w[r];
		excess += w[r] - floor;
	}
	if (sum < LDR_SHARES_ONE) {
		/* the remainder to the heaviest rank (the lowest index of equals) */
		uint32_t best = 0;
		for (uint32_t r = 1; r < world; r++)
			if (w[r] > w[best])
				best = r;
		w[best] += (uint32_t)(LDR_SHARES_ONE - sum);
		return;
	}
	uint64_t need = sum - LDR_SHARES_ONE, took = 0;
	/* world x floor <= ONE / 4, so excess >= need: this ends */
	for (uint32_t r = 0; r < world && need; r++) {
		uint64_t t = need * (w[r] - floor) / excess;
		w[r] -= (uint32_t)t;
		took += t;
	}
	for (uint32_t r = 0; took < need; r = (r + 1) % world)
		if (w[r] > floor) {
			w[r]--;
			took++;
		}
}

/* The speed (1 / ns) a raw report stands for, or -1 when it is unusable; counts it in @nt (NULL:
 * not counted). */
static double speed_of(double v, struct ldr_shares_note *nt)
{
	if (v == 0) {
		if (nt)
			nt->missing++;
		return -1;
	}
	if (isnan(v) || isinf(v) || v < 0) {
		if (nt)
			nt->nonsense++;
		return -1;
	}
	if (v < LDR_SHARES_NS_MIN || v > LDR_SHARES_NS_MAX) {
		if (nt)
			nt->clamped++;
		v = v < LDR_SHARES_NS_MIN ? LDR_SHARES_NS_MIN : LDR_SHARES_NS_MAX;
	}
	return 1.0 / v;
}

void ldr_shares_update(uint32_t world, const uint32_t *prev, const double *ns, uint32_t *out,
		       struct ldr_shares_note *note)
{
	struct ldr_shares_note nt = { 0 };
	double known_mass = 0, speed_sum = 0;

	for (uint32_t r = 0; r < world; r++) {
		double sp = speed_of(ns[r], &nt);
		if (sp >= 0) {
			speed_sum += sp;
			known_mass += prev[r];
		}
	}
	for (uint32_t r = 0; r < world; r++) {
		double sp = speed_of(ns[r], NULL), w = prev[r];
		if (sp >= 0 && speed_sum > 0) {
			double t = known_mass * sp / speed_sum;
			w = prev[r] + (t - prev[r]) / 2;  /* damped: half the way each update */
		}
		out[r] = w <= 0 ? 0 : w >= LDR_SHARES_ONE ? LDR_SHARES_ONE : (uint32_t)w;
	}
	normalise(world, weight_floor(world), out);
	if (note)
		*note = nt;
}

int ldr_shares_split(uint32_t world, uint32_t total, uint32_t cap, const uint32_t *w,
		     uint32_t *count, uint32_t *offset)
{
	if (world == 0 || total < world || (uint64_t)cap * world < total)
		return -EINVAL;
	uint32_t floor = total / (LDR_SHARES_FLOOR_DIV * world);
	uint64_t sum = 0;

	if (floor < 1)
		floor = 1;
	if (floor > cap)
		floor = cap;
	for (uint32_t r = 0; r < world; r++) {
		uint64_t c = (uint64_t)total * w[r] / LDR_SHARES_ONE;
		count[r] = c < floor ? floor : c > cap ? cap : (uint32_t)c;
		sum += count[r];
	}
	/* What rounding and the bounds left over goes one sample at a time to the rank furthest
	 * below its ideal share (furthest above, when taking back); ties to the lower rank. The
	 * weights keep a floor, so this moves about world samples, not a batch. */
	while (sum != total) {
		int add = sum < total;
		uint32_t best = world;
		int64_t best_key = 0;
		for (uint32_t r = 0; r < world; r++) {
			if (add ? count[r] >= cap : count[r] <= floor)
				continue;
			/* ideal - count, in units of 1 / ONE sample */
			int64_t key = (int64_t)((uint64_t)total * w[r]) - (int64_t)count[r] * LDR_SHARES_ONE;
			if (!add)
				key = -key;
			if (best == world || key > best_key) {
				best = r;
				best_key = key;
			}
		}
		if (best == world)
			return -EINVAL;  /* cannot happen with cap x world >= total >= floor x world */
		count[best] += add ? 1 : (uint32_t)-1;
		sum += add ? 1 : (uint64_t)-1;
	}
	if (offset)
		for (uint32_t r = 0, o = 0; r < world; o += count[r], r++)
			offset[r] = o;
	return 0;
}

int ldr_split_log_init(struct ldr_split_log *l, uint32_t world)
{
	memset(l, 0, sizeof(*l));
	l->world = world;
	l->w = calloc((size_t)LDR_SHARES_LOG * world, sizeof(*l->w));
	return l->w ? 0 : -ENOMEM;
}

void ldr_split_log_fini(struct ldr_split_log *l)
{
	free(l->w);
	l->w = NULL;
	l->n = 0;
}

static unsigned slot_of(const struct ldr_split_log *l, unsigned k)
{
	return (l->head + k) % LDR_SHARES_LOG;
}

const uint32_t *ldr_split_log_at(const struct ldr_split_log *l, uint64_t step)
{
	for (unsigned k = l->n; k-- > 0;) {
		unsigned i = slot_of(l, k);
		if (l->from[i] <= step)
			return l->w + (size_t)i * l->world;
	}
	return NULL;
}

const uint32_t *ldr_split_log_known_at(const struct ldr_split_log *l, uint64_t step,
				       uint32_t *even)
{
	const uint32_t *w = ldr_split_log_at(l, step);

	if (w || l->dropped)
		return w;
	ldr_shares_even(l->world, even);
	return even;
}

const uint32_t *ldr_split_log_last(const struct ldr_split_log *l)
{
	return l->n ? l->w + (size_t)slot_of(l, l->n - 1) * l->world : NULL;
}

int ldr_split_log_push(struct ldr_split_log *l, uint64_t step, const uint32_t *w)
{
	if (l->n && l->from[slot_of(l, l->n - 1)] >= step)
		return -EINVAL;
	if (l->n == LDR_SHARES_LOG) {
		l->head = (l->head + 1) % LDR_SHARES_LOG;
		l->n--;
		l->dropped = 1;
	}
	unsigned i = slot_of(l, l->n++);
	l->from[i] = step;
	memcpy(l->w + (size_t)i * l->world, w, sizeof(*w) * l->world);
	return 0;
}
