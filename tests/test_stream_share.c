/* test_stream_share.c - the node cache shared among streamed jobs by their future
 * (loader/stream_share.h): floors (the first point, round 0) granted whatever they cost; the
 * rest of round 0 first, within the capacity; increments in the order of their time ahead
 * ((round + lead) / rate), ties by job; the node's capacity and a uid's at exactly
 * their bound and one byte short (the increment that does not fit gets what is left, nothing
 * after it); a job whose rate is not known
 * on the fastest's clock, rounds as they are when none is; no curve, nothing granted. */
#include "loader/stream_share.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

/* rounds 0..3, 10 bytes each: 10, 20, 30, 40 */
static const struct sshare_pt even[] = { { 0, 10 }, { 1, 20 }, { 2, 30 }, { 3, 40 } };

static struct sshare_ev ev[8 * SSHARE_POINTS];

static struct sshare_job job(uint32_t uid, double rate, const struct sshare_pt *pt, uint32_t npt)
{
	return (struct sshare_job){ .uid = uid, .rate = rate, .pt = pt, .npt = npt };
}

/* Room for everything: every curve whole. */
static void test_room(void **state)
{
	(void)state;
	struct sshare_job j[2] = { job(1, 5, even, 4), job(2, 1, even, 4) };

	sshare_run(j, 2, 80, 0, ev);
	assert_int_equal(j[0].grant, 40);
	assert_int_equal(j[1].grant, 40);
	sshare_run(j, 2, 79, 0, ev);  /* one byte short: the last increment (the slower job's) */
	assert_int_equal(j[0].grant, 40);
	assert_int_equal(j[1].grant, 39);
}

/* A job ten times faster reads its rounds ten times sooner: A's three increments (0.1, 0.2,
 * 0.3 s) before B's first (1 s). */
static void test_rate_orders(void **state)
{
	(void)state;
	struct sshare_job j[2] = { job(1, 10, even, 4), job(2, 1, even, 4) };

	sshare_run(j, 2, 60, 0, ev);  /* floors 20, A +30, B +10: exactly 60 */
	assert_int_equal(j[0].grant, 40);
	assert_int_equal(j[1].grant, 20);
	sshare_run(j, 2, 59, 0, ev);  /* B's round 1 gets what is left */
	assert_int_equal(j[0].grant, 40);
	assert_int_equal(j[1].grant, 19);
	/* the other way round: B first */
	j[0].rate = 1, j[1].rate = 10;
	sshare_run(j, 2, 60, 0, ev);
	assert_int_equal(j[0].grant, 20);
	assert_int_equal(j[1].grant, 40);
}

/* Equal rates: round by round, ties by the jobs' order. */
static void test_equal_rates(void **state)
{
	(void)state;
	struct sshare_job j[2] = { job(1, 2, even, 4), job(2, 2, even, 4) };

	sshare_run(j, 2, 60, 0, ev);
	assert_int_equal(j[0].grant, 30);
	assert_int_equal(j[1].grant, 30);
	sshare_run(j, 2, 59, 0, ev);  /* B's round 2 gets what is left; A's round 3 nothing */
	assert_int_equal(j[0].grant, 30);
	assert_int_equal(j[1].grant, 29);
}

/* A uid's bound: A and B of uid 1, C of uid 2. */
static void test_uid_bound(void **state)
{
	(void)state;
	struct sshare_job j[3] = { job(1, 1, even, 3), job(2, 1, even, 3), job(1, 1, even, 3) };

	sshare_run(j, 3, 1000, 40, ev);  /* uid 1: floors 20, +10 (A), +10 (C): exactly 40 */
	assert_int_equal(j[0].grant, 20);
	assert_int_equal(j[1].grant, 30);
	assert_int_equal(j[2].grant, 20);
	sshare_run(j, 3, 1000, 39, ev);  /* C's round 1 gets what uid 1 has left; uid 2 goes on */
	assert_int_equal(j[0].grant, 20);
	assert_int_equal(j[1].grant, 30);
	assert_int_equal(j[2].grant, 19);
	sshare_run(j, 3, 1000, 2000, ev);  /* a uid bound above the node's is the node's */
	assert_int_equal(j[0].grant + j[1].grant + j[2].grant, 90);
	sshare_run(j, 3, 50, 2000, ev);
	assert_int_equal(j[0].grant + j[1].grant + j[2].grant, 50);
}

/* Floors whatever they cost; nothing after them when they exceed the capacity. */
static void test_floors(void **state)
{
	(void)state;
	static const struct sshare_pt big[] = { { 0, 100 }, { 1, 101 } };
	struct sshare_job j[2] = { job(1, 1, big, 2), job(2, 1, even, 4) };

	sshare_run(j, 2, 50, 0, ev);
	assert_int_equal(j[0].grant, 100);
	assert_int_equal(j[1].grant, 10);
	/* no curve yet: nothing; a curve that does not start at round 0: no floor */
	static const struct sshare_pt late[] = { { 2, 10 } };
	j[0] = job(1, 1, big, 0);
	j[1] = job(2, 1, late, 1);
	sshare_run(j, 2, 5, 0, ev);
	assert_int_equal(j[0].grant, 0);
	assert_int_equal(j[1].grant, 5);
	sshare_run(j, 2, 10, 0, ev);
	assert_int_equal(j[1].grant, 10);
}

/* One uid's floors beyond its bound (many streams, each a first step as large as the bound)
 * count against the node at that bound only: ldfetch holds no more of the uid, so another uid's
 * job still gets its curve, up to its own bound. Floors near 2^64 saturate, not wrap. */
static void test_floors_uid_bound(void **state)
{
	(void)state;
	static const struct sshare_pt hog[] = { { 0, 100 }, { 1, 100 } };
	struct sshare_job j[5] = { job(1, 1, even, 4) };

	for (int k = 1; k < 5; k++)
		j[k] = job(2, 1, hog, 2);
	sshare_run(j, 5, 200, 100, ev);  /* uid 2 counted 100 of 200: uid 1's whole curve */
	assert_int_equal(j[0].grant, 40);
	for (int k = 1; k < 5; k++)
		assert_int_equal(j[k].grant, 100);  /* floors whatever they cost */
	sshare_run(j, 5, 130, 100, ev);  /* 100 + 10 + 20 of uid 1's increments */
	assert_int_equal(j[0].grant, 30);
	static const struct sshare_pt huge[] = { { 0, UINT64_MAX - 5 }, { 1, UINT64_MAX } };
	j[1] = job(2, 1, huge, 2);
	j[2] = job(3, 1, huge, 2);
	sshare_run(j, 3, 1000, 0, ev);  /* no bound: the node is full, nothing past the floors */
	assert_int_equal(j[0].grant, 10);
	assert_true(j[1].grant == UINT64_MAX - 5 && j[2].grant == UINT64_MAX - 5);
}

/* The water level: the first increment that does not fit gets what is left, and nothing later
 * is granted, a small one of another job included. */
static void test_prefix(void **state)
{
	(void)state;
	static const struct sshare_pt gap[] = { { 0, 10 }, { 1, 110 }, { 2, 111 } };
	struct sshare_job j[2] = { job(1, 1, gap, 3), job(2, 2, even, 4) };

	sshare_run(j, 2, 60, 0, ev);  /* B 0.5 s +10, A 1 s +100: 30 of it; B's 1 s +10: none */
	assert_int_equal(j[0].grant, 40);
	assert_int_equal(j[1].grant, 20);
}

/* A rate not known: the fastest's clock; none known: rounds as they are. */
static void test_unknown_rate(void **state)
{
	(void)state;
	struct sshare_job j[3] = { job(1, 0, even, 4), job(2, 100, even, 4), job(3, 1, even, 4) };

	/* A and B on B's clock (0.01 s a round), C at 1 s: A and B take everything past the
	 * floors (30), A first at each round */
	sshare_run(j, 3, 60, 0, ev);
	assert_int_equal(j[0].grant, 30);
	assert_int_equal(j[1].grant, 20);
	assert_int_equal(j[2].grant, 10);
	j[1].rate = -1;
	j[2].rate = 0.0 / 0.0;  /* NaN: not known either */
	sshare_run(j, 3, 60, 0, ev);  /* rounds compared as they are: round 1 of each */
	assert_int_equal(j[0].grant, 20);
	assert_int_equal(j[1].grant, 20);
	assert_int_equal(j[2].grant, 20);
}

/* Round 0 past the floor: at (lead / 2) / rate (now without a lead), before the job's later
 * rounds, within the capacity. */
static void test_round0_rest(void **state)
{
	(void)state;
	static const struct sshare_pt r0[] = { { 0, 10 }, { 0, 40 }, { 1, 50 } };
	static const struct sshare_pt b[] = { { 0, 10 }, { 1, 20 } };
	struct sshare_job j[2] = { job(1, 1, r0, 3), job(2, 100, b, 2) };

	sshare_run(j, 2, 50, 0, ev);  /* floors 20, A's round 0 +30 (at 0 s, before B's 0.01 s) */
	assert_int_equal(j[0].grant, 40);
	assert_int_equal(j[1].grant, 10);
	sshare_run(j, 2, 49, 0, ev);
	assert_int_equal(j[0].grant, 39);
	assert_int_equal(j[1].grant, 10);
	/* A's steps opened 4 ahead of its consumer: the rest of its round 0 at (4 / 2) / 1 = 2 s,
	 * after B's round 1 (1 s); at 2 s A before B (ties by job) */
	static const struct sshare_pt even2[] = { { 0, 10 }, { 1, 20 }, { 2, 30 } };
	j[0].lead = 4;
	j[1] = job(2, 1, even2, 3);
	sshare_run(j, 2, 50, 0, ev);  /* floors 20, B 1 s +10, A 2 s +30: 20 of it; then none */
	assert_int_equal(j[0].grant, 30);
	assert_int_equal(j[1].grant, 20);
	j[0].lead = 0;  /* without it: A's round 0 now, B's round 1 after: A 40, B 10 */
	sshare_run(j, 2, 50, 0, ev);
	assert_int_equal(j[0].grant, 40);
	assert_int_equal(j[1].grant, 10);
}

/* The steps a job has opened ahead of its consumers put its rounds later. */
static void test_lead(void **state)
{
	(void)state;
	struct sshare_job j[2] = { job(1, 1, even, 4), job(2, 1, even, 4) };

	j[1].lead = 5;  /* B's rounds at 6, 7, 8 s; A's at 1, 2, 3 */
	sshare_run(j, 2, 60, 0, ev);
	assert_int_equal(j[0].grant, 40);
	assert_int_equal(j[1].grant, 20);
	sshare_run(j, 2, 50, 0, ev);
	assert_int_equal(j[0].grant, 40);
	assert_int_equal(j[1].grant, 10);
	j[1].lead = 1.5;  /* B's round 1 at 2.5 s: after A's round 2, before its round 3 */
	sshare_run(j, 2, 50, 0, ev);
	assert_int_equal(j[0].grant, 30);
	assert_int_equal(j[1].grant, 20);
	j[1].lead = -3;  /* not below 0 */
	j[0].lead = 0.0 / 0.0;
	sshare_run(j, 2, 60, 0, ev);
	assert_int_equal(j[0].grant, 30);
	assert_int_equal(j[1].grant, 30);
}

/* The room for one more open: two of the largest shards, at most a quarter of the bound. */
static void test_reserve(void **state)
{
	(void)state;
	assert_int_equal(sshare_reserve(24, 100), 24);
	assert_int_equal(sshare_reserve(25, 100), 25);  /* exactly a quarter */
	assert_int_equal(sshare_reserve(26, 100), 25);  /* one past */
	assert_int_equal(sshare_reserve(UINT64_MAX, 100), 25);
	assert_int_equal(sshare_reserve(1, 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_room),
		cmocka_unit_test(test_rate_orders),
		cmocka_unit_test(test_equal_rates),
		cmocka_unit_test(test_uid_bound),
		cmocka_unit_test(test_floors),
		cmocka_unit_test(test_floors_uid_bound),
		cmocka_unit_test(test_prefix),
		cmocka_unit_test(test_unknown_rate),
		cmocka_unit_test(test_round0_rest),
		cmocka_unit_test(test_lead),
		cmocka_unit_test(test_reserve),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
