/* demand.h - how much decode each ring needs, and who gets the CPU when there is not enough: a pure
 * controller (no threads, no clocks, no server state; the caller passes the time). The server's
 * workers (loader/srv_workers.c) feed it what they see and do what it says; tests/test_demand.c
 * checks it alone. The policy is described for operators in docs/TUNING.md ("Self-sizing").
 *
 * Units: times in ns (int64_t) or seconds (double, where said), rates in steps per second. */
#ifndef LOADERD_DEMAND_H
#define LOADERD_DEMAND_H
#include <stdint.h>

/* Consumption is sampled in windows of at least DM_WINDOW_NS that end on a release; the rate is
 * the peak of the last DM_WINDOWS of them (about a second of consumption): a consumer that
 * speeds up is followed within one window, one that slows down after DM_WINDOWS. A window with
 * no release does not end, so a consumer that pauses (a checkpoint) keeps its rate and its
 * target, and finds its ring as full as before when it comes back. */
#define DM_WINDOW_NS 100000000ll
#define DM_WINDOWS 8
/* A ring whose consumer found it empty, or has nothing ahead and has eaten what it holds, is
 * starved: it is filled as today (every slot) for this
 * long after, and counts as wanting all the budget (dm_active_cap). */
#define DM_STARVED_NS 1000000000ll
/* A consumer that has released nothing for DM_PAUSE_STEPS of its steps' time, and at least
 * DM_PAUSE_MIN_NS, has paused (a checkpoint, an evaluation): its ring is filled whole meanwhile
 * (the CPU it takes is free then, and the samples are eaten anyway), so that it drains a full ring
 * when it comes back, as with fixed workers. */
#define DM_PAUSE_STEPS 4.0
#define DM_PAUSE_MIN_NS 100000000ll
/* Headroom: the target covers the batch latency times DM_MARGIN plus DM_MARGIN_NS; the workers
 * kept active cover the measured decode demand times DM_MARGIN. */
#define DM_MARGIN 1.5
#define DM_MARGIN_NS 5000000ll
/* Job weights (ctl_job_open.weight): 0 means DM_WEIGHT_DEFAULT. */
#define DM_WEIGHT_DEFAULT 1u
#define DM_WEIGHT_MAX 1000u

/* A ring's consumption rate. Zero-initialised = nothing seen yet. */
struct dm_rate {
	int64_t win_ns;             /* start of the open window (0: not started) */
	uint64_t win_released;      /* the consumer's released step then */
	uint64_t released;          /* the last released step seen */
	int64_t release_ns;         /* when it last moved */
	double win[DM_WINDOWS];     /* steps/s of the last closed windows */
	unsigned nwin;              /* closed windows, up to DM_WINDOWS */
	unsigned pos;               /* next entry of win to overwrite */
};

/* The consumer has released every step below @released at @now (monotonic, ns). */
void dm_rate_update(struct dm_rate *r, int64_t now, uint64_t released);
/* Steps/s: the peak of the closed windows; 0 when none closed yet (start-up). */
double dm_rate_peak(const struct dm_rate *r);

/* What the controller knows of one ring when a worker looks for work. */
struct dm_ring {
	double rate;                /* steps/s (dm_rate_peak); 0 = unknown */
	double lat_s;               /* measured latency of its steps, pick to publish, s; 0 = none */
	double since_release_s;     /* time since the consumer last released a step */
	double work_step_s;         /* worker time per step, s (wall time a worker spent on it:
				     * decode, reads, being preempted); 0 = unknown */
	uint32_t occ;               /* steps opened and not taken by the consumer yet: filling or
				     * ready (the ones it holds are its own: a consumer that
				     * prefetches holds several) */
	uint32_t held;              /* steps the consumer holds (taken, not released) */
	uint32_t slots;             /* ring depth */
	uint32_t weight;            /* the job's, 1..DM_WEIGHT_MAX: divides its account's part only */
	uint32_t acct;              /* its job owner's account (uid), an index < dm_shares' nacct */
	int starved;                /* its consumer found it empty in the last DM_STARVED_NS */
	int free_slot;              /* the next step's slot is free (ring_prod_poll) */
	uint64_t group;             /* rings of one job (its ranks) share it; 0 = alone */
	int ahead;                  /* a ring or more ahead of its job's slowest eating rank
				     * (dm_paces_job): it waits for that rank */
	double share;               /* cores of decode it may take and stay first while in time
				     * (dm_shares); 0 = no limit */
	double wrel;                /* its weight as dm_pick uses it: its share over an even split
				     * (share x rings wanting / ceiling; dm_shares); 0 = the raw
				     * weight (dm_shares not run) */
};

/* Seconds after its last release at which @r's consumer counts as paused (dm_target), or a
 * negative number when that does not apply (rate unknown). */
double dm_pause_after_s(const struct dm_ring *r);
/* Steps the ring should hold ahead of its consumer (occ) so that it never waits: one, plus
 * rate x (DM_MARGIN x latency + DM_MARGIN_NS) rounded up, in [1, slots]; every slot while
 * the rate or the latency is unknown, the ring is starved or its consumer paused. */
uint32_t dm_target(const struct dm_ring *r);
/* Seconds left before a step opened on @r must have been started for its consumer not to wait:
 * the time its consumer needs to use up the steps ahead of it (occ) and what is left of the
 * ones it holds (held, eaten at its rate since its last release; once they are, the time it
 * has waited counts against it), minus one batch latency. Negative: it is late (its consumer will wait whatever
 * is done now); -1e9 while the rate is unknown (fill first). */
double dm_slack(const struct dm_ring *r);
/* Does @r's consumer pace its job's other ranks? Yes while it eats: its rate is known and it has
 * not paused (dm_pause_after_s). The caller marks a ring of the job "ahead" when the step it would
 * open is a ring's depth or more past the first step such a rank has not released: a rank whose
 * consumer gets less CPU (2 busy cores) was otherwise left behind by one that got more, 1:6;
 * a DDP job's ranks are in step anyway. A stopped or paused rank paces no one: it does not hold
 * back the others (a stalled consumer only stalls its own ring). */
int dm_paces_job(const struct dm_ring *r);
/* Is a ring of @slots whose next step to open is @next ahead of its job's slowest eating rank,
 * whose first step not released is @pace (UINT64_MAX: no rank paces the job)? 1 when @next >=
 * @pace + @slots, else 0. */
int dm_ahead(uint64_t next, uint64_t pace, uint32_t slots);
/* Each ring's share: @ceiling cores split evenly among the accounts (uids) that have a ring that
 * wants a step (a free slot, below the target, not ahead), then an account's part by weight among
 * its rings that want one; 0 for the others. So a job's weight divides its own uid's part only: a
 * weight-1000 job cannot take another uid's (issue 36: it took a weight-1 victim of another uid
 * from 64 to 1.6 samples/s under --cpu-budget 1). Sets wrel, the weight dm_pick orders by.
 * @nacct: accounts (every ring's acct < nacct); @scratch: nacct doubles. */
void dm_shares(struct dm_ring *rings, unsigned n, unsigned ceiling, unsigned nacct,
	       double *scratch);
/* Among @n rings, the one a free worker opens its next step on, or -1 when none wants one (each
 * is at its target, or has no free slot). Weights are wrel (dm_shares) when set. Order: rings
 * whose rate is not known yet; then rings
 * in time (slack >= 0: their consumer can still be served before it waits), by slack / weight,
 * unless they take more than their share (rate x work_step_s > share > 0): those go after the
 * late ones; then the late ones (slack < 0: starved, or short of budget), by slack x weight
 * (the most late first). Ties: the first from @start (the caller rotates it). That order picks a job; among
 * the rings of its group that want a step, the emptiest (fewest steps opened or held ahead of
 * its consumer: occ + held) is served (ties: the one the order chose), so that the ranks of
 * one job share the workers evenly whatever their slack. A ring marked ahead is not picked. */
int dm_pick(const struct dm_ring *rings, unsigned n, unsigned start);
/* Workers that may decode at once: the measured demand (sum of rate x worker time per step, x
 * DM_MARGIN)
 * rounded up, at least 1; @ceiling (min of --workers and the budget's cores rounded up) when any
 * ring is starved or its demand unknown. */
unsigned dm_active_cap(const struct dm_ring *rings, unsigned n, unsigned ceiling);

/* The CPU budget as a token bucket of worker CPU time: @cores x wall time comes in, the workers'
 * thread CPU time goes out; a worker starts work only while tokens > 0. At most DM_BURST_NS x
 * cores can be saved up. */
#define DM_BURST_NS 50000000ll
struct dm_bucket {
	double cores;               /* > 0 */
	double tokens_ns;
	int64_t last_ns;            /* last refill; 0 = never (starts full) */
};
void dm_bucket_init(struct dm_bucket *b, double cores);
/* Bring @b up to @now. */
void dm_bucket_refill(struct dm_bucket *b, int64_t now);
/* A worker used @cpu_ns of CPU. */
void dm_bucket_charge(struct dm_bucket *b, int64_t cpu_ns);
/* May a worker start work now (after dm_bucket_refill)? 1 or 0; when 0, *wait_ns is how long
 * until it may. */
int dm_bucket_ok(const struct dm_bucket *b, int64_t *wait_ns);

#endif
