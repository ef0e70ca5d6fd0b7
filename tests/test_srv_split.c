/* test_srv_split.c - balanced shares across a loaderd restart (docs/RING.md, "Balanced shares"):
 * the split seed (CTL_SPLIT_SEED) and the weights request (CTL_SPLIT_REQ). ctl_check_split at
 * each bound and one past it (world, step, slots, rows, weights at the floor and the sum,
 * length, reserved); against the real server core with the pattern filler
 * (tests/srv_harness.h): a job created from a seed starts its split log there (the seed's
 * weights at its step, unknown before it), takes the seed's reports for the pending update
 * (the update is exactly ldr_shares_update of the seed's weights and reports), and a second
 * rank's different seed does not move it; a held job's pending update takes the resumed
 * rank's report from its seed in exactly the window k - 4 - slots < start <= k - 4 (both ends),
 * and at k - 4 - slots its own release as before; a seed for another step, world or slots,
 * for a job without balanced shares, a second seed, a request before a job or on an even job:
 * refused by name, and the server goes on. A job whose ranks start far out (10^12) decides its
 * first update with reports at the first step they open, at once, and a far resume into a held
 * job stops at its seeds' update (issue 36: both walked every update up to the start). */
#include "loader/shares.h"
#include "shm/ctl.h"
#include "shm/ldc.h"
#include "shm/ring.h"

#include <errno.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/srv_harness.h"

#define ONE CTL_SPLIT_ONE

/* A seed body into @buf (at least CTL_SPLIT_SIZE bytes): @world weights @w, every report @ns.
 * Returns its length. */
static size_t mk_seed(void *buf, uint64_t from, uint32_t world, uint32_t slots,
		      const uint32_t *w, double ns)
{
	struct ctl_split h = { .from = from, .world = world, .slots = slots,
			       .nrows = CTL_SPLIT_ROWS(from, slots) };
	size_t len = CTL_SPLIT_SIZE(world, h.nrows);
	char *p = buf;

	memset(buf, 0, len);
	memcpy(p, &h, sizeof(h));
	memcpy(p + sizeof(h), w, (size_t)world * 4u);
	for (size_t i = 0; i < (size_t)h.nrows * world; i++)
		memcpy(p + sizeof(h) + ((size_t)world * 4u + 7u) / 8u * 8u + i * 8u, &ns, 8);
	return len;
}

static int check(const void *b, size_t len, int seed)
{
	char why[CTL_TEXT_MAX];
	return ctl_check_split(b, len, seed, why, sizeof(why));
}

static void test_ctl_split_bounds_at_the_limit_and_one_past(void **state)
{
	(void)state;
	uint32_t w2[2] = { ONE / 8, ONE - ONE / 8 };  /* rank 0 exactly at the floor */
	char b[256];
	size_t n = mk_seed(b, 9, 2, 2, w2, 1000);
	struct ctl_split h;

	assert_int_equal(CTL_SPLIT_ROWS(9, 2), 1);   /* update 12 took step 6's report */
	assert_int_equal(CTL_SPLIT_ROWS(8, 2), 1);   /* 12 (6); the update at 8 is in force */
	assert_int_equal(CTL_SPLIT_ROWS(10, 2), 1);  /* 12 (6); 16 took step 10's */
	assert_int_equal(CTL_SPLIT_ROWS(0, 4), 1);   /* 4 (-4) */
	assert_int_equal(CTL_SPLIT_ROWS(3, 6), 3);   /* 4 (-6), 8 (-2), 12 (2); not 16 (6) */
	assert_int_equal(check(b, n, 1), 0);
	assert_int_equal(check(b, n - 1, 1), -EINVAL);  /* length one short, one long */
	assert_int_equal(check(b, n + 1, 1), -EINVAL);
	assert_int_equal(check(b, sizeof(h) - 1, 1), -EINVAL);
	/* weights: one under the floor; the sum one off either way */
	uint32_t u[2] = { ONE / 8 - 1, ONE - ONE / 8 + 1 };
	n = mk_seed(b, 9, 2, 2, u, 1000);
	assert_int_equal(check(b, n, 1), -EINVAL);
	u[0] = ONE / 8, u[1] = ONE - ONE / 8 + 1;
	n = mk_seed(b, 9, 2, 2, u, 1000);
	assert_int_equal(check(b, n, 1), -EINVAL);
	u[1] = ONE - ONE / 8 - 1;
	n = mk_seed(b, 9, 2, 2, u, 1000);
	assert_int_equal(check(b, n, 1), -EINVAL);
	/* the floor at the other end: the last rank exactly at it, then one below */
	u[0] = ONE - ONE / 8, u[1] = ONE / 8;
	n = mk_seed(b, 9, 2, 2, u, 1000);
	assert_int_equal(check(b, n, 1), 0);
	u[0] = ONE - ONE / 8 + 1, u[1] = ONE / 8 - 1;
	n = mk_seed(b, 9, 2, 2, u, 1000);
	assert_int_equal(check(b, n, 1), -EINVAL);
	/* the reports are raw: any bits */
	n = mk_seed(b, 9, 2, 2, w2, -1.0 / 0.0);
	assert_int_equal(check(b, n, 1), 0);
	/* slots 1..RING_SLOTS_MAX */
	char *big = malloc(CTL_SPLIT_SIZE(2, CTL_SPLIT_ROWS(9, RING_SLOTS_MAX + 1)));
	assert_non_null(big);
	n = mk_seed(big, 9, 2, RING_SLOTS_MAX, w2, 1);
	assert_int_equal(check(big, n, 1), 0);
	n = mk_seed(big, 9, 2, RING_SLOTS_MAX + 1, w2, 1);
	assert_int_equal(check(big, n, 1), -EINVAL);
	free(big);
	n = mk_seed(b, 9, 2, 1, w2, 1);
	assert_int_equal(check(b, n, 1), 0);
	n = mk_seed(b, 9, 2, 0, w2, 1);
	assert_int_equal(check(b, n, 1), -EINVAL);
	/* rows: exactly the updates pending, not one more or less */
	n = mk_seed(b, 9, 2, 2, w2, 1);
	memcpy(&h, b, sizeof(h));
	h.nrows = 2;
	memcpy(b, &h, sizeof(h));
	assert_int_equal(check(b, CTL_SPLIT_SIZE(2, 2), 1), -EINVAL);
	h.nrows = 0;
	memcpy(b, &h, sizeof(h));
	assert_int_equal(check(b, CTL_SPLIT_SIZE(2, 0), 1), -EINVAL);
	/* the step: CTL_STEP_LIMIT, one past */
	n = mk_seed(b, CTL_STEP_LIMIT, 2, 2, w2, 1);
	assert_int_equal(check(b, n, 1), 0);
	n = mk_seed(b, CTL_STEP_LIMIT + 1, 2, 2, w2, 1);
	assert_int_equal(check(b, n, 1), -EINVAL);
	/* reserved */
	n = mk_seed(b, 9, 2, 2, w2, 1);
	memcpy(&h, b, sizeof(h));
	h.reserved = 1;
	memcpy(b, &h, sizeof(h));
	assert_int_equal(check(b, n, 1), -EINVAL);
	/* world: 1, CTL_WORLD_MAX, 0 and one past */
	uint32_t w1 = ONE;
	n = mk_seed(b, 9, 1, 2, &w1, 1);
	assert_int_equal(check(b, n, 1), 0);
	uint32_t *wm = malloc(CTL_WORLD_MAX * 4u + 4u);
	assert_non_null(wm);
	for (uint32_t r = 0; r <= CTL_WORLD_MAX; r++)
		wm[r] = ONE / CTL_WORLD_MAX;  /* 16 each: the sum is ONE, the floor 4 */
	big = malloc(CTL_SPLIT_SIZE(CTL_WORLD_MAX + 1, 1));
	assert_non_null(big);
	n = mk_seed(big, 9, CTL_WORLD_MAX, 2, wm, 1);
	assert_int_equal(check(big, n, 1), 0);
	wm[CTL_WORLD_MAX] = 0;
	wm[0] = 0;  /* world + 1 ranks, still summing to ONE, but rank 0 under the floor anyway */
	n = mk_seed(big, 9, CTL_WORLD_MAX + 1, 2, wm, 1);
	assert_int_equal(check(big, n, 1), -EINVAL);
	free(big);
	free(wm);
	h = (struct ctl_split){ .from = 9 };
	assert_int_equal(check(&h, sizeof(h), 1), -EINVAL);  /* a seed of world 0 */
	/* the answer (CTL_SPLIT): world 0 is "not known"; no slots or rows */
	assert_int_equal(check(&h, sizeof(h), 0), 0);
	h.nrows = 1;
	assert_int_equal(check(&h, sizeof(h), 0), -EINVAL);
}

static int split_of(struct ldc *c, uint64_t step, uint32_t *w)
{
	int r = ldc_split_weights(c, step, w, 2);
	if (r < 0)
		fail_msg("ldc_split_weights(%llu): %d (%s)", (unsigned long long)step, r,
			 ldc_error(c));
	return r;
}

/* Rank 0 sends a seed (even weights from step 2, 2 slots, reports 1000 and 3000 ns for the
 * update at 4) and opens at step 2: the weights in force at 2 and 3 are the seed's, step 1 is
 * unknown (before the seed), the update at 4 waits for rank 1. Rank 1 comes with another seed
 * (3/4, 1/4, other reports): the job keeps the first; the update at 4 is
 * ldr_shares_update(seed's weights, seed's reports): both ranks' reports from the seed (their
 * report step is before the resume), not "none" (which would keep the weights even). */
static void test_srv_split_seed_starts_the_log_and_replays_its_reports(void **state)
{
	(void)state;
	pid_t pid = start_server(&(struct tsrv){ .balance = 1 });
	uint32_t w[2] = { ONE / 4 * 3, ONE / 4 }, even[2] = { ONE / 2, ONE / 2 }, got[2];
	char b[256];
	struct ldc_info in;
	struct ldc *c0 = cli_connect(), *c1 = cli_connect();
	struct ldc_job j = mkjob("seeded", "pattern:1000", 4, 0, 2, 0);

	j.balance = 1;
	j.slots = 2;
	j.start_at = 1;
	j.at_step = 2;
	/* rows: the update at 4 took each rank's report of step -2: say 1000 and 3000 */
	size_t n = mk_seed(b, 2, 2, 2, even, 1000);
	double r1 = 3000;
	memcpy(b + sizeof(struct ctl_split) + 8 + 8, &r1, 8);
	assert_int_equal(ldc_split_seed(c0, b, n), 0);
	open_ok(c0, &j, &in);
	assert_int_equal(in.first_step, 2);
	assert_int_equal(split_of(c0, 2, got), 1);
	assert_memory_equal(got, even, sizeof(even));
	assert_int_equal(split_of(c0, 3, got), 1);
	assert_memory_equal(got, even, sizeof(even));
	assert_int_equal(split_of(c0, 1, got), 0);  /* before the seed: not known */
	usleep(100 * 1000);
	assert_int_equal(split_of(c0, 4, got), 0);  /* the update at 4 waits for rank 1 */

	n = mk_seed(b, 2, 2, 2, w, 50);
	assert_int_equal(ldc_split_seed(c1, b, n), 0);
	j.rank = 1;
	open_ok(c1, &j, &in);
	assert_int_equal(split_of(c1, 2, got), 1);
	assert_memory_equal(got, even, sizeof(even));  /* the first seed's */
	uint32_t want[2];
	double ns[2] = { 1000, 3000 };
	ldr_shares_update(2, even, ns, want, NULL);
	assert_true(want[0] > ONE / 2 + ONE / 16);  /* half way to 3/4: 5/8 */
	int64_t t0 = mono_ms();
	while (split_of(c1, 4, got) == 0 && mono_ms() - t0 < 5000)
		usleep(10 * 1000);
	assert_memory_equal(got, want, sizeof(want));
	cli_close(c0);
	cli_close(c1);
	assert_alive(pid);
	stop_server(pid);
}

/* A held job (rank 0 attached first, without a seed; 2 slots): rank 0 reports 1000 ns and
 * releases steps 0..2; rank 1 then opens at @from with a seed whose rank 1 column says 3000 (rank
 * 0's: 50) and, at step 2, releases it with a report of 7000. The update at 8 takes rank 1's
 * report of step 2: for 2 < @from <= 4 (the window) it was released before @from, in a ring that
 * is gone, so it is the seed's; at @from = 2 rank 1's own release of step 2 (7000), not the seed.
 * The update at 4 takes rank 1's report of step -2: the seed's where it covers 4 (@from < 4),
 * else none. Returns after checking both updates against ldr_shares_update. */
static void held_case(uint64_t from, double want1_4, double want1_8)
{
	uint32_t even[2] = { ONE / 2, ONE / 2 }, got[2], w4[2], w8[2];
	char b[256], name[32];
	struct ldc_info in;
	struct ldc_batch bt;
	struct ldc *c0 = cli_connect(), *c1 = cli_connect();

	snprintf(name, sizeof(name), "held-%llu", (unsigned long long)from);
	struct ldc_job j = mkjob(name, "pattern:1000", 4, 0, 2, 0);
	j.balance = 1;
	j.slots = 2;
	open_ok(c0, &j, &in);
	assert_int_equal(in.first_step, 0);
	assert_int_equal(ldc_report(c0, 1000), 0);
	for (uint64_t s = 0; s < 3; s++) {
		assert_int_equal(ldc_acquire(c0, ACQUIRE_MS, &bt), 0);
		assert_int_equal(bt.step, s);
		assert_int_equal(ldc_release(c0, &bt), 0);
	}
	size_t n = mk_seed(b, from, 2, 2, even, 50);
	struct ctl_split h;
	memcpy(&h, b, sizeof(h));
	double r1 = 3000;
	for (uint32_t i = 0; i < h.nrows; i++)  /* rank 1's column */
		memcpy(b + sizeof(h) + 8 + (i * 2 + 1) * 8, &r1, 8);
	assert_int_equal(ldc_split_seed(c1, b, n), 0);
	j.rank = 1;
	j.start_at = 1;
	j.at_step = from;
	open_ok(c1, &j, &in);
	assert_int_equal(in.first_step, from);
	if (from == 2) {
		assert_int_equal(ldc_report(c1, 7000), 0);
		assert_int_equal(ldc_acquire(c1, ACQUIRE_MS, &bt), 0);
		assert_int_equal(bt.step, 2);
		assert_int_equal(ldc_release(c1, &bt), 0);
	}
	double ns4[2] = { 0, want1_4 }, ns8[2] = { 1000, want1_8 };
	ldr_shares_update(2, even, ns4, w4, NULL);
	ldr_shares_update(2, w4, ns8, w8, NULL);
	int64_t t0 = mono_ms();
	while (split_of(c0, 8, got) == 0 && mono_ms() - t0 < 5000)
		usleep(10 * 1000);
	assert_int_equal(split_of(c0, 4, got), 1);
	if (memcmp(got, w4, sizeof(w4)))
		fail_msg("from %llu: update 4 is %u %u, want %u %u", (unsigned long long)from,
			 got[0], got[1], w4[0], w4[1]);
	assert_int_equal(split_of(c0, 8, got), 1);
	if (memcmp(got, w8, sizeof(w8)))
		fail_msg("from %llu: update 8 is %u %u, want %u %u", (unsigned long long)from,
			 got[0], got[1], w8[0], w8[1]);
	cli_close(c0);
	cli_close(c1);
}

/* The pending update at k = 8 of a held job, 2 slots: a rank resumed with a seed at
 * k - 4 - slots < from <= k - 4 (3 and 4, both ends of the window) gives the seed's report, as
 * the uninterrupted run would have; at k - 4 - slots (2), one before the window, its own
 * release as before. The expected weights differ between the seed's report and none, so the
 * case fails when the seed is ignored. */
static void test_srv_split_seed_fills_a_held_jobs_pending_update(void **state)
{
	(void)state;
	pid_t pid = start_server(&(struct tsrv){ .balance = 1 });
	uint32_t even[2] = { ONE / 2, ONE / 2 }, a[2], b[2];
	double with[2] = { 1000, 3000 }, none[2] = { 1000, 0 };

	ldr_shares_update(2, even, with, a, NULL);
	ldr_shares_update(2, even, none, b, NULL);
	assert_memory_not_equal(a, b, sizeof(a));  /* the case can tell them apart */
	held_case(4, 0, 3000);     /* k - 4: the seed starts at update 8 */
	held_case(3, 3000, 3000);  /* k - 4 - slots + 1: the seed covers 4 and 8 */
	held_case(2, 3000, 7000);  /* k - 4 - slots: its own release of step 2 */
	assert_alive(pid);
	stop_server(pid);
}

/* Take and release the next batch of each of @n clients @c, which must be of @step. */
static void step_all(struct ldc **c, int n, uint64_t step)
{
	struct ldc_batch bt;

	for (int i = 0; i < n; i++) {
		if (ldc_acquire(c[i], ACQUIRE_MS, &bt) < 0)
			fail_msg("rank %d, step %llu: %s", i, (unsigned long long)step,
				 ldc_error(c[i]));
		assert_int_equal(bt.step, step);
		assert_int_equal(ldc_release(c[i], &bt), 0);
	}
}

/* Wait (5 s at most) until the weights at @step are known, and return them in @got. */
static void wait_known(struct ldc *c, uint64_t step, uint32_t *got)
{
	int64_t t0 = mono_ms();

	while (split_of(c, step, got) == 0)
		if (mono_ms() - t0 > 5000)
			fail_msg("the weights at step %llu were never decided",
				 (unsigned long long)step);
		else
			usleep(10 * 1000);
}

/* Issue 36: a balanced job whose two ranks start AT F = 10^12 + 2 (2 slots; epochs of one
 * step). Before, the update pending at 4 walked every update up to F, one by one under the
 * server lock: the job never got a batch and loaderd wedged. Now the updates that no rank can
 * report for are skipped at once, and the first one decided with reports is the first whose
 * report step a rank opens: F + 6 (= 10^12 + 8) takes the ranks' reports of step F (1000 and
 * 3000 ns: ldr_shares_update of the even weights, as the update right after any start);
 * F + 2 (the update at 10^12 + 4, whose report step is before F) changed nothing. */
static void test_srv_split_far_start_first_update_from_its_reports(void **state)
{
	(void)state;
	pid_t pid = start_server(&(struct tsrv){ .balance = 1 });
	const uint64_t F = 1000000000002ull, K = 1000000000008ull;
	uint32_t even[2] = { ONE / 2, ONE / 2 }, got[2], want[2];
	double ns[2] = { 1000, 3000 };
	struct ldc_info in;
	struct ldc *c[2] = { cli_connect(), cli_connect() };
	struct ldc_job j = mkjob("far", "pattern:8", 4, 0, 2, 0);

	j.balance = 1;
	j.slots = 2;
	j.start_at = 1;
	j.at_epoch = F;
	for (uint32_t r = 0; r < 2; r++) {
		j.rank = r;
		open_ok(c[r], &j, &in);
		assert_int_equal(in.first_step, F);
		assert_int_equal(ldc_report(c[r], ns[r]), 0);
	}
	int64_t t0 = mono_ms();
	step_all(c, 2, F);
	assert_true(mono_ms() - t0 < 2000);
	for (uint64_t s = F + 1; s < F + 5; s++)
		step_all(c, 2, s);
	ldr_shares_update(2, even, ns, want, NULL);
	assert_memory_not_equal(want, even, sizeof(even));  /* the case tells them apart */
	wait_known(c[0], K, got);
	assert_memory_equal(got, want, sizeof(want));
	assert_int_equal(split_of(c[0], K - 1, got), 1);  /* the update at K - 4: none */
	assert_memory_equal(got, even, sizeof(even));
	assert_int_equal(split_of(c[0], F, got), 1);
	assert_memory_equal(got, even, sizeof(even));
	cli_close(c[0]);
	cli_close(c[1]);
	assert_alive(pid);
	stop_server(pid);
}

/* A job loaderd holds (its ranks served steps 0..3, then detached: the update pending early)
 * whose two ranks come back AT F = 4m + 1, far out, each with a split seed: rank 0's column
 * reports 1000, rank 1's 3000, for the update at F + 3 (its report step F - 3 was released
 * before F). Skipping the updates before it must stop there: the weights at F + 3 are
 * ldr_shares_update(weights in force at F, the seeds' reports); a skip that ignored the seeds
 * would jump to F + 7 and leave F + 3 even. */
static void test_srv_split_far_resume_into_held_job_takes_the_seeds(void **state)
{
	(void)state;
	pid_t pid = start_server(&(struct tsrv){ .balance = 1 });
	const uint64_t F = 4000000000001ull;
	uint32_t even[2] = { ONE / 2, ONE / 2 }, prev[2], got[2], want[2];
	double ns[2] = { 1000, 3000 };
	char b[256];
	struct ldc_info in;
	struct ldc *c[2] = { cli_connect(), cli_connect() };
	struct ldc_job j = mkjob("far-held", "pattern:8", 4, 0, 2, 0);

	j.balance = 1;
	j.slots = 2;
	for (uint32_t r = 0; r < 2; r++) {
		j.rank = r;
		open_ok(c[r], &j, &in);
	}
	for (uint64_t s = 0; s < 4; s++)
		step_all(c, 2, s);
	cli_close(c[0]);
	cli_close(c[1]);
	j.start_at = 1;
	j.at_epoch = F;
	for (uint32_t r = 0; r < 2; r++) {
		c[r] = cli_connect();
		size_t n = mk_seed(b, F, 2, 2, even, ns[r]);  /* (only rank r's column counts) */
		struct ctl_split h;
		memcpy(&h, b, sizeof(h));
		assert_int_equal(h.nrows, 1);
		memcpy(b + sizeof(h) + 8 + (1 - r) * 8, &ns[1 - r], 8);
		assert_int_equal(ldc_split_seed(c[r], b, n), 0);
		j.rank = r;
		open_ok(c[r], &j, &in);
		assert_int_equal(in.first_step, F);
	}
	int64_t t0 = mono_ms();
	step_all(c, 2, F);
	assert_true(mono_ms() - t0 < 2000);
	assert_int_equal(split_of(c[0], F, prev), 1);
	ldr_shares_update(2, prev, ns, want, NULL);
	assert_memory_not_equal(want, prev, sizeof(prev));
	wait_known(c[0], F + 3, got);
	assert_memory_equal(got, want, sizeof(want));
	cli_close(c[0]);
	cli_close(c[1]);
	assert_alive(pid);
	stop_server(pid);
}

/* Each refusal by name; the server goes on. */
static void test_srv_split_seed_refusals(void **state)
{
	(void)state;
	pid_t pid = start_server(&(struct tsrv){ .balance = 1 });
	uint32_t even[2] = { ONE / 2, ONE / 2 };
	char b[256];
	struct ldc_info in;
	struct ldc_job j = mkjob("refused", "pattern:1000", 4, 0, 2, 0);
	static const struct {
		uint64_t from;
		uint32_t world, slots;
		int balance;
		const char *needle;
	} cases[] = {
		{ 3, 2, 2, 1, "the split seed is for world 2, 2 slots, step 3; rank 0 opens world 2, "
			      "2 slots, at step 2" },
		{ 2, 1, 2, 1, "the split seed is for world 1" },
		{ 2, 2, 3, 1, "2, 3 slots" },
		{ 2, 2, 2, 0, "a split seed for a job without balanced shares" },
	};

	j.slots = 2;
	j.start_at = 1;
	j.at_step = 2;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ldc *c = cli_connect();
		char name[32];
		snprintf(name, sizeof(name), "refused-%zu", i);
		j.job = name;
		uint32_t w1 = ONE;
		size_t n = mk_seed(b, cases[i].from, cases[i].world, cases[i].slots,
				   cases[i].world == 1 ? &w1 : even, 1000);
		assert_int_equal(ldc_split_seed(c, b, n), 0);
		j.balance = cases[i].balance;
		int r = ldc_open(c, &j, &in);
		if (r != -EINVAL || !strstr(ldc_error(c), cases[i].needle))
			fail_msg("case %zu: ldc_open %d (%s), want EINVAL with \"%s\"", i, r,
				 ldc_error(c), cases[i].needle);
		cli_close(c);
	}
	/* the client refuses a bad seed itself, and one that comes after the open */
	struct ldc *c = cli_connect();
	j.job = "refused-ok";
	uint32_t bad[2] = { ONE / 2, ONE / 2 + 1 };
	size_t n = mk_seed(b, 2, 2, 2, bad, 1);
	assert_int_equal(ldc_split_seed(c, b, n), -EINVAL);
	assert_non_null(strstr(ldc_error(c), "the weights sum to 1048577"));
	j.balance = 1;
	open_ok(c, &j, &in);
	n = mk_seed(b, 2, 2, 2, even, 1);
	assert_int_equal(ldc_split_seed(c, b, n), -EINVAL);
	uint32_t got[2];
	assert_int_equal(ldc_split_weights(c, 2, got, 3), -EINVAL);  /* not the job's world */
	cli_close(c);

	/* raw: a second seed; a seed after the open; a request before a job, on an even job,
	 * with its reserved field set; a malformed seed */
	int fd = raw_connect();
	assert_int_equal(ctl_send(fd, CTL_SPLIT_SEED, b, n, NULL, 0), 0);
	assert_int_equal(ctl_send(fd, CTL_SPLIT_SEED, b, n, NULL, 0), 0);
	expect_refused(fd, "a second seed", EINVAL, "a split seed comes once, before the job open");
	fd_close(fd);
	struct ctl_split_req q = { .step = 2 };
	fd = raw_connect();
	assert_int_equal(ctl_send(fd, CTL_SPLIT_REQ, &q, sizeof(q), NULL, 0), 0);
	expect_refused(fd, "a request before a job", EINVAL, "split request before a job");
	fd_close(fd);
	int bell;
	fd = raw_open("even-job", NULL, &bell);
	assert_int_equal(ctl_send(fd, CTL_SPLIT_REQ, &q, sizeof(q), NULL, 0), 0);
	expect_refused(fd, "a request on an even job", EINVAL, "does not balance shares");
	fd_close(fd);
	fd = raw_open("even-job2", NULL, &bell);
	q.reserved = 1;
	assert_int_equal(ctl_send(fd, CTL_SPLIT_REQ, &q, sizeof(q), NULL, 0), 0);
	expect_refused(fd, "a request with reserved bits", EINVAL, "reserved field is not zero");
	fd_close(fd);
	n = mk_seed(b, 2, 2, 2, bad, 1);
	fd = raw_connect();
	assert_int_equal(ctl_send(fd, CTL_SPLIT_SEED, b, n, NULL, 0), 0);
	expect_refused(fd, "a seed whose weights do not sum to one", EINVAL, "the weights sum to");
	fd_close(fd);
	assert_alive(pid);
	assert_serves("after-split");
	stop_server(pid);
}

#define T(f) cmocka_unit_test_setup_teardown(f, srvh_setup, srvh_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ctl_split_bounds_at_the_limit_and_one_past),
		T(test_srv_split_seed_starts_the_log_and_replays_its_reports),
		T(test_srv_split_seed_fills_a_held_jobs_pending_update),
		T(test_srv_split_far_start_first_update_from_its_reports),
		T(test_srv_split_far_resume_into_held_job_takes_the_seeds),
		T(test_srv_split_seed_refusals),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
