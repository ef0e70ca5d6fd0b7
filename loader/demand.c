/* demand.c - the self-sizing controller (demand.h): consumption rates, ring targets, which ring a
 * free worker serves, how many workers decode at once, and the CPU budget. Pure: every input is
 * an argument, so each rule is a unit test (tests/test_demand.c).
 *
 * Why the order in dm_pick: ordering by time-to-empty alone lets a consumer that eats all it gets
 * (its ring always nearly empty) win every pick, and a slow consumer would be served only once its
 * ring is empty, i.e. after it waits. So the rings that can still be served in time go first,
 * soonest due first, but only up to their target (a bounded amount: rate x horizon); the late
 * ones (their consumer waits whatever we do) take what is left, the most late first. Serving an
 * in-time ring early costs the others nothing over time: its consumer eats those steps anyway.
 * Weights scale the slack: a heavier job is due sooner and counts as later. A weight divides its
 * uid's part only (dm_shares: the cores split evenly by uid, then by weight within one), and the
 * slack is scaled by that part, not by the raw weight: a job of weight 1000 is heavier than its
 * uid's other jobs, never than another uid's.
 *
 * That order is between jobs; between the ranks of one job it starves. With the workers short
 * (memory-speed records, one worker), a consumer that eats as fast as it is served keeps its ring
 * a few steps ahead and stays in time, so it won every pick until its ring reached its target
 * (every slot, at its rate), and its job's other rank, late, got only what the first could not
 * eat: 3.4M steps against 10k in it_multinode's ldprobe ceiling (issue 31). So the order picks a
 * job, and the job's emptiest ring that wants a step is served: its ranks, which run in step
 * anyway (DDP), get the workers in turns when all are hungry, and one that is ahead (its
 * consumer slower) leaves the workers to the others.
 *
 * Between jobs the same starvation: a consumer in time that eats nearly all the workers make
 * (a drain a little slower than them) kept the in-time priority, and another job's late ring got
 * the rest (1:6). So a ring keeps that priority only within its share of the cores (the ceiling
 * split by weight among the rings that want a step): a slow consumer, the case the priority is
 * for, takes far less than its share and keeps it; one past its share is served after the late
 * rings, which then get their turn. */
#include "loader/demand.h"

#include <assert.h>
#include <math.h>

void dm_rate_update(struct dm_rate *r, int64_t now, uint64_t released)
{
	if (!r->win_ns) {
		r->win_ns = now;
		r->win_released = r->released = released;
		r->release_ns = now;
		return;
	}
	if (released < r->released)
		released = r->released;  /* a re-attach from a resume point: never backwards */
	if (released != r->released) {
		r->released = released;
		r->release_ns = now;
	}
	/* A window ends on a release once it is long enough: a pause makes no window of rate 0. */
	if (now - r->win_ns >= DM_WINDOW_NS && released > r->win_released) {
		r->win[r->pos] = (double)(released - r->win_released) * 1e9 / (double)(now - r->win_ns);
		r->pos = (r->pos + 1) % DM_WINDOWS;
		if (r->nwin < DM_WINDOWS)
			r->nwin++;
		r->win_ns = now;
		r->win_released = released;
	}
}

double dm_rate_peak(const struct dm_rate *r)
{
	double p = 0;

	for (unsigned k = 0; k < r->nwin; k++)
		if (r->win[k] > p)
			p = r->win[k];
	return p;
}

static double horizon_s(const struct dm_ring *r)
{
	return DM_MARGIN * r->lat_s + (double)DM_MARGIN_NS * 1e-9;
}

double dm_pause_after_s(const struct dm_ring *r)
{
	if (r->rate <= 0)
		return -1;
	double t = DM_PAUSE_STEPS / r->rate, min = (double)DM_PAUSE_MIN_NS * 1e-9;
	return t > min ? t : min;
}

uint32_t dm_target(const struct dm_ring *r)
{
	if (r->rate <= 0 || r->lat_s <= 0 || r->starved)
		return r->slots;
	if (r->since_release_s > dm_pause_after_s(r))
		return r->slots;  /* paused: fill whole while the CPU is free */
	double t = 1 + ceil(r->rate * horizon_s(r));
	return t >= (double)r->slots ? r->slots : t < 1 ? 1 : (uint32_t)t;
}

double dm_slack(const struct dm_ring *r)
{
	if (r->rate <= 0)
		return -1e9;
	/* What is left of the steps it holds, in steps, if it eats them at its rate from its last
	 * release; below 0 once it has waited for the next that long: a consumer that holds
	 * nothing waits since its release (it asks for the next as it releases), and grows later
	 * and later, whatever its latency. */
	double left = (double)r->held - r->since_release_s * r->rate;
	return ((double)r->occ + left) / r->rate - r->lat_s;
}

/* 0: in time (or rate unknown), 1: late. *key orders within a class, lower first. */
static int rank_of(const struct dm_ring *r, double *key)
{
	double s = dm_slack(r), w = r->wrel > 0 ? r->wrel : r->weight ? r->weight : DM_WEIGHT_DEFAULT;

	if (r->rate <= 0) {  /* start-up: fill as today, before anything else */
		*key = -1e18;
		return 0;
	}
	if (s < 0 || (r->share > 0 && r->rate * r->work_step_s > r->share)) {
		*key = s * w;  /* in time but past its share: after the late ones (key >= 0) */
		return 1;
	}
	*key = s / w;
	return 0;
}

static int wants(const struct dm_ring *r)
{
	return r->free_slot && !r->ahead && r->occ < dm_target(r);
}

static double weight_of(const struct dm_ring *r)
{
	return r->weight ? r->weight : DM_WEIGHT_DEFAULT;
}

void dm_shares(struct dm_ring *rings, unsigned n, unsigned ceiling, unsigned nacct,
	       double *scratch)
{
	unsigned accts = 0, wanting = 0;

	for (unsigned k = 0; k < nacct; k++)
		scratch[k] = 0;
	for (unsigned i = 0; i < n; i++) {
		const struct dm_ring *r = &rings[i];
		if (!wants(r))
			continue;
		assert(r->acct < nacct);
		accts += scratch[r->acct] == 0;
		scratch[r->acct] += weight_of(r);
		wanting++;
	}
	for (unsigned i = 0; i < n; i++) {
		struct dm_ring *r = &rings[i];
		if (!wants(r)) {
			r->share = r->wrel = 0;
			continue;
		}
		r->share = (double)ceiling / accts * weight_of(r) / scratch[r->acct];
		r->wrel = r->share * wanting / ceiling;
	}
}

int dm_paces_job(const struct dm_ring *r)
{
	return r->rate > 0 && r->since_release_s <= dm_pause_after_s(r);
}

int dm_ahead(uint64_t next, uint64_t pace, uint32_t slots)
{
	return pace != UINT64_MAX && next >= pace && next - pace >= slots;
}

int dm_pick(const struct dm_ring *rings, unsigned n, unsigned start)
{
	int best = -1, best_cls = 2;
	double best_key = 0;

	for (unsigned k = 0; k < n; k++) {
		unsigned i = (start + k) % n;
		const struct dm_ring *r = &rings[i];
		if (!wants(r))
			continue;
		double key;
		int cls = rank_of(r, &key);
		if (cls < best_cls || (cls == best_cls && key < best_key)) {
			best = (int)i;
			best_cls = cls;
			best_key = key;
		}
	}
	if (best < 0 || !rings[best].group)
		return best;
	/* The job is chosen: its emptiest ring that wants a step. */
	int pick = best;
	uint64_t least = (uint64_t)rings[best].occ + rings[best].held;
	for (unsigned k = 0; k < n; k++) {
		unsigned i = (start + k) % n;
		const struct dm_ring *r = &rings[i];
		if (r->group != rings[best].group || !wants(r))
			continue;
		if ((uint64_t)r->occ + r->held < least) {
			pick = (int)i;
			least = (uint64_t)r->occ + r->held;
		}
	}
	return pick;
}

unsigned dm_active_cap(const struct dm_ring *rings, unsigned n, unsigned ceiling)
{
	double cores = 0;

	assert(ceiling >= 1);
	for (unsigned i = 0; i < n; i++) {
		const struct dm_ring *r = &rings[i];
		if (r->starved || r->rate <= 0 || r->work_step_s <= 0)
			return ceiling;
		cores += r->rate * r->work_step_s;
	}
	double want = ceil(cores * DM_MARGIN);
	return want < 1 ? 1 : want >= (double)ceiling ? ceiling : (unsigned)want;
}

void dm_bucket_init(struct dm_bucket *b, double cores)
{
	assert(cores > 0);
	b->cores = cores;
	b->tokens_ns = (double)DM_BURST_NS * cores;
	b->last_ns = 0;
}

void dm_bucket_refill(struct dm_bucket *b, int64_t now)
{
	if (b->last_ns && now > b->last_ns) {
		b->tokens_ns += (double)(now - b->last_ns) * b->cores;
		if (b->tokens_ns > (double)DM_BURST_NS * b->cores)
			b->tokens_ns = (double)DM_BURST_NS * b->cores;
	}
	if (now > b->last_ns)
		b->last_ns = now;
}

void dm_bucket_charge(struct dm_bucket *b, int64_t cpu_ns)
{
	b->tokens_ns -= (double)cpu_ns;
}

int dm_bucket_ok(const struct dm_bucket *b, int64_t *wait_ns)
{
	if (b->tokens_ns > 0)
		return 1;
	*wait_ns = (int64_t)ceil((1 - b->tokens_ns) / b->cores);
	return 0;
}
