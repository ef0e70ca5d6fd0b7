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

/* The split's adjustment, one mode at a time: giving (@add: samples to the ranks furthest below
 * their ideal share, up to @cap) or taking back (to @floor, from the ranks furthest above it).
 * Each sample moved is a pair (r, m), the m-th sample given to (taken from) rank r, valued
 * key(r) - m x ONE where key is the rank's distance from its ideal in units of 1 / ONE sample
 * (ideal - count when giving, count - ideal when taking). */
struct adjust {
	uint32_t total, cap, floor;
	int add;
};

/* Rank @r's key and how many samples it may move (0: none), from its count @c and weight @w. */
static uint64_t adjust_room(const struct adjust *a, uint32_t c, uint32_t w, int64_t *key)
{
	int64_t k = (int64_t)((uint64_t)a->total * w) - (int64_t)c * LDR_SHARES_ONE;

	*key = a->add ? k : -k;
	if (a->add)
		return c < a->cap ? a->cap - c : 0;
	return c > a->floor ? c - a->floor : 0;
}

/* Of rank @r's movable samples (@room, key @key), how many are valued at least @t. */
static uint64_t pairs_from(int64_t key, uint64_t room, int64_t t)
{
	if (!room || key < t)
		return 0;
	uint64_t q = (uint64_t)(key - t) / LDR_SHARES_ONE + 1;
	return q < room ? q : room;
}

/* Move @need samples as the one-at-a-time rule would (each to the rank furthest from its ideal,
 * ties to the lower rank): that rule takes the @need pairs of the highest value, the lower rank
 * first among equal values, since each rank's values fall by ONE per sample. So: the value t of
 * the last pair taken, by bisection over the values (O(world) a step, 64 steps at most), then
 * every pair above t and the first ranks' pairs at t. O(world x 64), whatever the batch: the
 * one-at-a-time loop was O(world) a sample, and a lopsided split of a large step moves up to
 * 3/4 of it. -EINVAL when fewer than @need pairs exist. */
static int adjust_counts(const struct adjust *a, uint32_t world, const uint32_t *w,
			 uint32_t *count, uint64_t need)
{
	int64_t lo = INT64_MAX, hi = INT64_MIN, key;
	uint64_t have = 0;

	for (uint32_t r = 0; r < world; r++) {
		uint64_t room = adjust_room(a, count[r], w[r], &key);
		if (!room)
			continue;
		int64_t last = key - (int64_t)(room - 1) * LDR_SHARES_ONE;
		if (key > hi)
			hi = key;
		if (last < lo)
			lo = last;
		have += room;
	}
	if (have < need)
		return -EINVAL;  /* cannot happen with cap x world >= total >= floor x world */
	/* the largest t with at least need pairs valued >= t: lo has them all, hi + 1 none */
	while (lo < hi) {
		int64_t mid = lo + (int64_t)(((uint64_t)hi - (uint64_t)lo + 1) / 2);
		uint64_t n = 0;
		for (uint32_t r = 0; r < world && n < need; r++) {
			uint64_t room = adjust_room(a, count[r], w[r], &key);
			n += pairs_from(key, room, mid);
		}
		if (n >= need)
			lo = mid;
		else
			hi = mid - 1;
	}
	uint64_t above = 0;
	for (uint32_t r = 0; r < world; r++) {
		uint64_t room = adjust_room(a, count[r], w[r], &key);
		above += pairs_from(key, room, lo + 1);
	}
	uint64_t at = need - above;  /* the pairs valued exactly lo to take, lower ranks first */
	for (uint32_t r = 0; r < world; r++) {
		uint64_t room = adjust_room(a, count[r], w[r], &key);
		uint64_t n = pairs_from(key, room, lo + 1);
		if (at && n < room && key >= lo && (uint64_t)(key - lo) / LDR_SHARES_ONE == n &&
		    (uint64_t)(key - lo) % LDR_SHARES_ONE == 0) {
			n++;
			at--;
		}
		count[r] = a->add ? count[r] + (uint32_t)n : count[r] - (uint32_t)n;
	}
	return at ? -EINVAL : 0;
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
	 * below its ideal share (furthest above, when taking back); ties to the lower rank
	 * (adjust_counts computes the result of that rule without the loop). */
	if (sum != total) {
		struct adjust a = { .total = total, .cap = cap, .floor = floor, .add = sum < total };
		if (adjust_counts(&a, world, w, count, a.add ? total - sum : sum - total) < 0)
			return -EINVAL;
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
