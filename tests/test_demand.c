/* test_demand.c - the self-sizing controller (loader/demand.c) alone, with made-up clocks: rates
 * from releases (peak, pauses held), targets from rates and latency, the order in which rings are
 * served (due soon, late, weights, the in-time priority within a share; a job's ranks emptiest
 * first, none a ring ahead of the slowest), the workers the demand needs, and the CPU budget at
 * exactly its limit and one past it. Deterministic: no thread, no clock. */
#include "loader/demand.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define MS 1000000ll

/* A consumer releasing one step every @period_ms from @t0_ms for @n steps. */
static int64_t feed(struct dm_rate *r, int64_t t0_ms, int period_ms, unsigned n, uint64_t *rel)
{
	int64_t t = t0_ms * MS;
	for (unsigned k = 0; k < n; k++) {
		t += period_ms * MS;
		dm_rate_update(r, t, ++*rel);
	}
	return t;
}

static void test_demand_rate_unknown_until_a_window(void **state)
{
	(void)state;
	struct dm_rate r = { 0 };
	uint64_t rel = 0;

	dm_rate_update(&r, 1 * MS, 0);
	assert_true(dm_rate_peak(&r) == 0);
	feed(&r, 1, 10, 9, &rel);  /* 90 ms: the window is not long enough yet */
	assert_true(dm_rate_peak(&r) == 0);
	feed(&r, 91, 10, 1, &rel);  /* 100 ms, 10 steps */
	assert_float_equal(dm_rate_peak(&r), 100.0, 1e-9);
}

static void test_demand_rate_pause_keeps_peak_then_decays(void **state)
{
	(void)state;
	struct dm_rate r = { 0 };
	uint64_t rel = 0;

	dm_rate_update(&r, 0, 0);
	int64_t t = feed(&r, 0, 10, 100, &rel);  /* 100 steps/s for a second */
	assert_float_equal(dm_rate_peak(&r), 100.0, 1e-9);
	/* A checkpoint: 5 s without a release. The rate (and so the target) is kept. */
	dm_rate_update(&r, t + 5000 * MS, rel);
	assert_float_equal(dm_rate_peak(&r), 100.0, 1e-9);
	/* The drain after it: 20 steps in 20 ms. The window that spans the pause is slow, but the
	 * peak holds; a burst window raises it at once. */
	t = feed(&r, (t + 5000 * MS) / MS, 1, 20, &rel);
	assert_true(dm_rate_peak(&r) >= 100.0);
	/* Then 10 steps/s: after DM_WINDOWS windows of it the peak is 10. */
	t = feed(&r, t / MS, 100, DM_WINDOWS + 1, &rel);
	assert_float_equal(dm_rate_peak(&r), 10.0, 1e-9);
	/* Never backwards (a resume). */
	dm_rate_update(&r, t + 200 * MS, rel - 5);
	assert_int_equal(r.released, rel);
}

static struct dm_ring ring(double rate, double lat_s, uint32_t occ, uint32_t slots)
{
	return (struct dm_ring){ .rate = rate, .lat_s = lat_s, .occ = occ, .held = 1, .slots = slots,
				 .weight = 1, .free_slot = 1, .work_step_s = 0.01 };
}

static void test_demand_target_from_rate_and_latency(void **state)
{
	(void)state;
	/* 10 steps/s, 20 ms latency: horizon 1.5 x 20 + 5 = 35 ms, 0.35 steps: 1 + 1 = 2. */
	struct dm_ring r = ring(10, 0.020, 0, 8);
	assert_int_equal(dm_target(&r), 2);
	/* 100 steps/s: 3.5 steps: 1 + 4 = 5. */
	r.rate = 100;
	assert_int_equal(dm_target(&r), 5);
	/* 1000 steps/s: past the ring: every slot. */
	r.rate = 1000;
	assert_int_equal(dm_target(&r), 8);
	/* Start-up (no rate, no latency) and a starved ring: every slot. */
	r = ring(0, 0.020, 0, 8);
	assert_int_equal(dm_target(&r), 8);
	r = ring(10, 0, 0, 8);
	assert_int_equal(dm_target(&r), 8);
	r = ring(10, 0.020, 0, 8);
	r.starved = 1;
	assert_int_equal(dm_target(&r), 8);
}

static void test_demand_target_paused_consumer_fills_whole(void **state)
{
	(void)state;
	/* 10 steps/s: paused past 4 steps' time (400 ms): at exactly it, still its target; past
	 * it, every slot (a checkpoint: it comes back to a full ring, as with fixed workers). */
	struct dm_ring r = ring(10, 0.020, 0, 8);
	assert_float_equal(dm_pause_after_s(&r), 0.4, 1e-12);
	r.since_release_s = 0.4;
	assert_int_equal(dm_target(&r), 2);
	r.since_release_s = 0.4001;
	assert_int_equal(dm_target(&r), 8);
	/* 1000 steps/s: 4 steps are 4 ms, but a pause is at least 100 ms. */
	r = ring(1000, 0.001, 0, 64);
	assert_float_equal(dm_pause_after_s(&r), 0.1, 1e-12);
	r.since_release_s = 0.1;
	assert_int_equal(dm_target(&r), 1 + 7);
	r.since_release_s = 0.1001;
	assert_int_equal(dm_target(&r), 64);
	/* No rate: no pause to wait for (the ring is filled whole anyway). */
	r.rate = 0;
	assert_true(dm_pause_after_s(&r) < 0);
}

static void test_demand_pick_only_below_target(void **state)
{
	(void)state;
	struct dm_ring r[2] = { ring(10, 0.020, 2, 8), ring(10, 0.020, 1, 8) };

	/* Ring 0 is at its target (2): only ring 1 wants a step. */
	assert_int_equal(dm_pick(r, 2, 0), 1);
	r[1].occ = 2;
	assert_int_equal(dm_pick(r, 2, 0), -1);
	/* A ring below its target without a free slot is skipped. */
	r[1].occ = 1;
	r[1].free_slot = 0;
	assert_int_equal(dm_pick(r, 2, 0), -1);
	/* At exactly one below the target it is taken; at the target it is not. */
	r[1] = ring(100, 0.020, 4, 8);
	assert_int_equal(dm_pick(r, 2, 0), 1);
	r[1].occ = 5;
	assert_int_equal(dm_pick(r, 2, 0), -1);
}

static void test_demand_pick_in_time_before_late(void **state)
{
	(void)state;
	/* Ring 0: a fast consumer that eats all it gets (late: slack < 0). Ring 1: a slow one
	 * (5 steps/s) with nothing ahead, 100 ms into the 200 ms of the step it works on: it needs
	 * the next in 100 ms, less 20 ms of latency: 80 ms. It can still be served in time: it
	 * goes before the late ring, whatever the rotation. */
	struct dm_ring r[2] = { ring(200, 0.020, 1, 8), ring(5, 0.020, 0, 8) };
	r[1].since_release_s = 0.100;
	assert_true(dm_slack(&r[0]) < 0);
	assert_float_equal(dm_slack(&r[1]), 0.080, 1e-9);
	assert_int_equal(dm_pick(r, 2, 0), 1);
	assert_int_equal(dm_pick(r, 2, 1), 1);
	/* At its target (2: 1 + 5/s x 35 ms rounded up) it takes no more: the late ring gets the
	 * rest. One below, it is served first again. */
	r[1].occ = dm_target(&r[1]);
	assert_int_equal(r[1].occ, 2);
	assert_int_equal(dm_pick(r, 2, 1), 0);
	r[1].occ = 1;
	assert_int_equal(dm_pick(r, 2, 0), 1);
	r[1].occ = 0;
	/* Past its step's time, the time it has waited counts against it: a consumer waiting
	 * 50 ms on an empty ring is later than a fast ring that is 10 ms late, whatever their
	 * latencies (regression: clamped at -latency, a slow ring with a short latency lost every
	 * pick to a fast one and waited seconds). */
	r[1].since_release_s = 0.250;
	r[1].lat_s = 0.001;
	assert_float_equal(dm_slack(&r[1]), -0.051, 1e-9);
	assert_float_equal(dm_slack(&r[0]), -0.010, 1e-9);
	assert_int_equal(dm_pick(r, 2, 0), 1);
	/* Holding nothing, it has waited since its release (it asked for the next then): 5 ms
	 * after it, it is late by 5 ms plus the latency (regression: counted as holding a step,
	 * a waiting slow consumer looked 1/rate early and waited that long). */
	r[1].held = 0;
	r[1].since_release_s = 0.005;
	assert_float_equal(dm_slack(&r[1]), -0.006, 1e-9);
	/* Holding two (it prefetches), 100 ms into the first: 300 ms to go, less the latency. */
	r[1].held = 2;
	r[1].since_release_s = 0.100;
	assert_float_equal(dm_slack(&r[1]), 0.299, 1e-9);
	/* Unknown rates come first of all (start-up: fill). */
	r[0].rate = 0;
	assert_int_equal(dm_pick(r, 2, 1), 0);
}

static void test_demand_pick_order_and_weights(void **state)
{
	(void)state;
	/* Two late rings (-30 ms, -10 ms): the later goes first; a weight of 4 on the other makes
	 * it later (-40 ms); 2 does not (-20 ms). */
	struct dm_ring r[2] = { ring(100, 0.050, 1, 8), ring(100, 0.030, 1, 8) };
	assert_float_equal(dm_slack(&r[0]), -0.030, 1e-9);
	assert_float_equal(dm_slack(&r[1]), -0.010, 1e-9);
	assert_int_equal(dm_pick(r, 2, 0), 0);
	r[1].weight = 4;
	assert_int_equal(dm_pick(r, 2, 0), 1);
	r[1].weight = 2;
	assert_int_equal(dm_pick(r, 2, 0), 0);
	assert_int_equal(dm_pick(r, 2, 1), 0);
	/* Two rings in time (nothing ahead, 10 steps/s): the lesser slack first; weight divides
	 * it. */
	r[0] = ring(10, 0.020, 0, 8);
	r[1] = ring(10, 0.020, 0, 8);
	r[0].since_release_s = 0.050;  /* slack 30 ms */
	r[1].since_release_s = 0.060;  /* slack 20 ms */
	assert_int_equal(dm_pick(r, 2, 0), 1);
	r[0].weight = 2;               /* 15 ms */
	assert_int_equal(dm_pick(r, 2, 0), 0);
	/* Equal: the rotation decides. */
	r[0].weight = 1;
	r[1].since_release_s = 0.050;
	assert_int_equal(dm_pick(r, 2, 0), 0);
	assert_int_equal(dm_pick(r, 2, 1), 1);
}

/* Regression (issue 31): two ranks of one job on a short worker. Ring 0's consumer eats what it
 * gets and is a little ahead (4 steps ahead of it at 500/s, 4 ms latency: 4 ms of slack, in
 * time, target 7); ring 1's waits (late). By slack alone ring 0 wins every pick until it is at
 * its target, and ring 1 gets only what ring 0 cannot eat. Within a job the emptiest ring that
 * wants a step is served; between jobs the order is unchanged. */
static void test_demand_pick_ranks_of_a_job_emptiest_first(void **state)
{
	(void)state;
	struct dm_ring r[3] = { ring(500, 0.004, 3, 8), ring(450, 0.004, 0, 8) };
	r[1].held = 0;
	r[1].since_release_s = 0.002;
	assert_float_equal(dm_slack(&r[0]), 0.004, 1e-9);
	assert_true(dm_slack(&r[1]) < 0);
	assert_int_equal(dm_target(&r[0]), 7);
	/* Two jobs: in time first, whatever the rotation. */
	assert_int_equal(dm_pick(r, 2, 0), 0);
	assert_int_equal(dm_pick(r, 2, 1), 0);
	/* One job: the emptiest (0 ahead or held against 4). */
	r[0].group = r[1].group = 7;
	assert_int_equal(dm_pick(r, 2, 0), 1);
	assert_int_equal(dm_pick(r, 2, 1), 1);
	/* One step fewer than ring 0 is enough; as many is a tie: the order's choice, ring 0. */
	r[1].held = 1, r[1].occ = 2;
	assert_int_equal(dm_pick(r, 2, 0), 1);
	r[1].occ = 3;
	r[1].since_release_s = 0;  /* slack 4.9 ms: the order puts ring 0 (4 ms) first */
	assert_int_equal(dm_pick(r, 2, 1), 0);
	r[1].held = 0, r[1].occ = 0, r[1].since_release_s = 0.002;
	/* A rank that cannot take a step (no free slot, or at its target) leaves it to the job's
	 * others. */
	r[1].free_slot = 0;
	assert_int_equal(dm_pick(r, 2, 0), 0);
	r[1].free_slot = 1;
	r[1].slots = 1;
	r[1].starved = 1;  /* target: every slot, 1 */
	r[1].occ = 1;
	assert_int_equal(dm_target(&r[1]), 1);
	assert_int_equal(dm_pick(r, 2, 0), 0);
	r[1].slots = 8, r[1].starved = 0, r[1].occ = 0;
	assert_int_equal(dm_pick(r, 2, 0), 1);
	/* Another job's ring in time with less slack (2 ms) still goes first: the job order is
	 * the controller's; the rank order within a job is emptiest first. */
	r[2] = ring(500, 0.004, 2, 8);
	r[2].group = 8;
	assert_float_equal(dm_slack(&r[2]), 0.002, 1e-9);
	assert_int_equal(dm_pick(r, 3, 0), 2);
	assert_int_equal(dm_pick(r, 3, 1), 2);
}

/* A rank ahead of its job's slowest eating rank by a ring's depth waits for it: at exactly a
 * ring (next = pace + slots) it is ahead, one step less it is not; no pacing rank, never. A rank
 * paces while it eats: rate known, not paused (at exactly the pause time it still does, past it
 * not). dm_pick skips a ring marked ahead, also as the emptiest of its job. */
static void test_demand_ranks_ahead_wait_for_the_slowest(void **state)
{
	(void)state;
	assert_int_equal(dm_ahead(100 + 8, 100, 8), 1);
	assert_int_equal(dm_ahead(100 + 7, 100, 8), 0);
	assert_int_equal(dm_ahead(50, 100, 8), 0);
	assert_int_equal(dm_ahead(UINT64_MAX - 1, UINT64_MAX, 8), 0);
	assert_int_equal(dm_ahead(1000000, UINT64_MAX, 8), 0);

	struct dm_ring r = ring(100, 0.001, 1, 8);  /* pauses after 4 steps' time: 100 ms min */
	r.since_release_s = 0.1;
	assert_int_equal(dm_paces_job(&r), 1);
	r.since_release_s = 0.1001;
	assert_int_equal(dm_paces_job(&r), 0);
	r.since_release_s = 0;
	r.rate = 0;                                /* nothing released yet, or a stalled rank */
	assert_int_equal(dm_paces_job(&r), 0);

	struct dm_ring two[2] = { ring(500, 0.004, 0, 8), ring(500, 0.004, 3, 8) };
	two[0].group = two[1].group = 3;
	assert_int_equal(dm_pick(two, 2, 0), 0);
	two[0].ahead = 1;
	assert_int_equal(dm_pick(two, 2, 0), 1);
	two[1].ahead = 1;
	assert_int_equal(dm_pick(two, 2, 0), -1);
}

/* Between jobs (issue 31): a ring in time keeps its priority over late ones only within its
 * share of the cores, the ceiling split by weight among the rings that want a step. At exactly
 * its share (512 steps/s x 1/1024 s = 0.5 of 1 core, 2 rings) it keeps it; one past, the late
 * ring goes first. dm_shares: rings that want no step get 0 and count for nothing. */
static void test_demand_in_time_priority_within_its_share(void **state)
{
	(void)state;
	struct dm_ring r[3] = { ring(512, 0.004, 3, 8), ring(450, 0.004, 0, 8),
				ring(100, 0.004, 0, 8) };
	r[1].held = 0;
	r[1].since_release_s = 0.002;
	r[2].free_slot = 0;
	r[2].weight = 2;
	double sc[2];
	dm_shares(r, 3, 1, 1, sc);
	assert_float_equal(r[0].share, 0.5, 1e-12);
	assert_float_equal(r[1].share, 0.5, 1e-12);
	assert_float_equal(r[2].share, 0, 1e-12);
	assert_true(dm_slack(&r[0]) >= 0 && dm_slack(&r[1]) < 0);
	r[0].work_step_s = 1.0 / 1024;
	assert_int_equal(dm_pick(r, 3, 0), 0);
	assert_int_equal(dm_pick(r, 3, 1), 0);
	r[0].work_step_s = 1.0 / 1024 * (1 + 1e-9);
	assert_int_equal(dm_pick(r, 3, 0), 1);
	assert_int_equal(dm_pick(r, 3, 1), 1);
	/* No share (0: the caller set none) is no limit. */
	r[0].share = 0;
	assert_int_equal(dm_pick(r, 3, 1), 0);
	/* Weights: 2 cores, ring 2 wanting too with weight 2: 0.5, 0.5, 1. */
	r[2].free_slot = 1;
	dm_shares(r, 3, 2, 1, sc);
	assert_float_equal(r[0].share, 0.5, 1e-12);
	assert_float_equal(r[1].share, 0.5, 1e-12);
	assert_float_equal(r[2].share, 1.0, 1e-12);
}

/* Issue 36: a job's weight divides its own uid's part of the cores, never another uid's. Uid 0
 * has a job of weight 1000 and one of weight 1, uid 1 a victim of weight 1: 1 core goes 0.5 to
 * each uid, uid 0's half split 1000:1. The heavy job stays first while in time within its
 * uid's half (at exactly 0.5 core it does; one past, the victim, late, goes first), and between
 * late rings its weight no longer scales its lateness past the victim's: with raw weights (the
 * old rule, 1000/1001 of the core to it) it won both. */
static void test_demand_weight_divides_its_uid_share_only(void **state)
{
	(void)state;
	struct dm_ring r[3] = { ring(512, 0.004, 3, 8), ring(450, 0.004, 0, 8),
				ring(100, 0.004, 0, 8) };
	double sc[2];
	r[0].weight = 1000;                  /* uid 0's heavy job, in time */
	r[1].acct = 1;                       /* uid 1's victim, late */
	r[1].held = 0;
	r[1].since_release_s = 0.002;
	r[2].free_slot = 0;                  /* uid 0's light job: wants nothing for now */
	dm_shares(r, 3, 1, 2, sc);
	assert_float_equal(r[0].share, 0.5, 1e-12);
	assert_float_equal(r[1].share, 0.5, 1e-12);
	assert_float_equal(r[0].wrel, 1, 1e-12);
	assert_float_equal(r[1].wrel, 1, 1e-12);
	assert_true(dm_slack(&r[0]) >= 0 && dm_slack(&r[1]) < 0);
	r[0].work_step_s = 1.0 / 1024;       /* 512 x 1/1024: exactly its uid's half */
	assert_int_equal(dm_pick(r, 3, 0), 0);
	assert_int_equal(dm_pick(r, 3, 1), 0);
	r[0].work_step_s = 1.0 / 1024 * (1 + 1e-9);
	assert_int_equal(dm_pick(r, 3, 0), 1);
	assert_int_equal(dm_pick(r, 3, 1), 1);
	/* uid 0's light job wants a step too: uid 0's half split 1000:1, uid 1's half whole. */
	r[2].free_slot = 1;
	dm_shares(r, 3, 1, 2, sc);
	assert_float_equal(r[0].share, 0.5 * 1000 / 1001, 1e-12);
	assert_float_equal(r[2].share, 0.5 / 1001, 1e-12);
	assert_float_equal(r[1].share, 0.5, 1e-12);
	assert_float_equal(r[0].share + r[1].share + r[2].share, 1, 1e-12);
	/* Both late, the heavy one less late (-10 ms against -30 ms): the raw weight made it
	 * -10 s; its part of the core (1.5 x 1000/1001 of an even split) does not. */
	struct dm_ring l[2] = { ring(100, 0.030, 1, 8), ring(100, 0.050, 1, 8) };
	l[0].weight = 1000;
	l[1].acct = 1;
	dm_shares(l, 2, 1, 2, sc);
	assert_float_equal(dm_slack(&l[0]), -0.010, 1e-9);
	assert_float_equal(dm_slack(&l[1]), -0.030, 1e-9);
	assert_int_equal(dm_pick(l, 2, 0), 1);
	assert_int_equal(dm_pick(l, 2, 1), 1);
	/* One uid: the weight divides its part as before (1000:1 of the core; the heavy first). */
	l[1].acct = 0;
	dm_shares(l, 2, 1, 2, sc);
	assert_float_equal(l[0].share, 1000.0 / 1001, 1e-12);
	assert_int_equal(dm_pick(l, 2, 1), 0);
}

static void test_demand_active_cap(void **state)
{
	(void)state;
	/* 10 steps/s x 10 ms of worker time = 0.1 core, x 1.5: one worker. */
	struct dm_ring r[2] = { ring(10, 0.020, 1, 8), ring(10, 0.020, 1, 8) };
	assert_int_equal(dm_active_cap(r, 1, 4), 1);
	/* 2 x 60 steps/s x 10 ms = 1.2 cores, x 1.5 = 1.8: two. */
	r[0].rate = r[1].rate = 60;
	assert_int_equal(dm_active_cap(r, 2, 4), 2);
	/* Never past the ceiling: at it, and one past it. */
	r[0].rate = r[1].rate = 100;  /* 3 cores */
	assert_int_equal(dm_active_cap(r, 2, 3), 3);
	assert_int_equal(dm_active_cap(r, 2, 2), 2);
	/* Starved or unknown: the ceiling. */
	r[0].rate = r[1].rate = 10;
	r[1].starved = 1;
	assert_int_equal(dm_active_cap(r, 2, 4), 4);
	r[1].starved = 0;
	r[1].work_step_s = 0;
	assert_int_equal(dm_active_cap(r, 2, 4), 4);
}

static void test_demand_budget_at_its_limit_and_one_past(void **state)
{
	(void)state;
	struct dm_bucket b;
	int64_t wait = 0;

	/* One core: a 50 ms burst saved up. */
	dm_bucket_init(&b, 1.0);
	dm_bucket_refill(&b, 1000 * MS);
	dm_bucket_charge(&b, 50 * MS - 1);
	assert_true(dm_bucket_ok(&b, &wait));
	dm_bucket_charge(&b, 1);  /* exactly spent */
	assert_false(dm_bucket_ok(&b, &wait));
	assert_int_equal(wait, 1);
	/* 1 ns later at one core: 1 ns of CPU: ok again. */
	dm_bucket_refill(&b, 1000 * MS + 1);
	assert_true(dm_bucket_ok(&b, &wait));
	/* Overspent by 10 ms (a task ran past the budget): 10 ms to wait at 1 core, 5 at 2. */
	dm_bucket_charge(&b, 10 * MS + 1);
	assert_false(dm_bucket_ok(&b, &wait));
	assert_int_equal(wait, 10 * MS + 1);
	/* Long idle saves up no more than the burst. */
	dm_bucket_refill(&b, 60000 * MS);
	assert_float_equal(b.tokens_ns, (double)DM_BURST_NS, 0);
	/* Half a core: CPU of 2 x wall is 4 x over. */
	dm_bucket_init(&b, 0.5);
	dm_bucket_refill(&b, 1 * MS);
	dm_bucket_charge(&b, 25 * MS + 10 * MS);
	assert_false(dm_bucket_ok(&b, &wait));
	assert_int_equal(wait, 20 * MS + 2);
	dm_bucket_refill(&b, 1 * MS + 20 * MS);
	assert_false(dm_bucket_ok(&b, &wait));  /* exactly at 0: not yet */
	dm_bucket_refill(&b, 1 * MS + 20 * MS + 2);
	assert_true(dm_bucket_ok(&b, &wait));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_demand_rate_unknown_until_a_window),
		cmocka_unit_test(test_demand_rate_pause_keeps_peak_then_decays),
		cmocka_unit_test(test_demand_target_from_rate_and_latency),
		cmocka_unit_test(test_demand_target_paused_consumer_fills_whole),
		cmocka_unit_test(test_demand_pick_only_below_target),
		cmocka_unit_test(test_demand_pick_in_time_before_late),
		cmocka_unit_test(test_demand_pick_order_and_weights),
		cmocka_unit_test(test_demand_weight_divides_its_uid_share_only),
		cmocka_unit_test(test_demand_pick_ranks_of_a_job_emptiest_first),
		cmocka_unit_test(test_demand_ranks_ahead_wait_for_the_slowest),
		cmocka_unit_test(test_demand_in_time_priority_within_its_share),
		cmocka_unit_test(test_demand_active_cap),
		cmocka_unit_test(test_demand_budget_at_its_limit_and_one_past),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
