/* test_cpu_clock.c - a worker's CPU charges with few thread-clock reads (loader/cpu_clock.c), on
 * the real thread clock: a read at exactly the unit and window limits and not one before, the
 * sum of the charges equal to the CPU read at each read plus what was charged ahead, no charge
 * below zero when a unit that slept was overestimated. */
#include "loader/cpu_clock.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#define MS 1000000ll

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Use about @ns of this thread's CPU. */
static void burn(int64_t ns)
{
	int64_t end = ldr_thread_cpu_ns() + ns;
	volatile uint64_t x = 1;

	while (ldr_thread_cpu_ns() < end)
		for (int k = 0; k < 1000; k++)
			x = x * 6364136223846793005ull + 1;
}

static void test_cpu_clock_reads_at_the_unit_limit(void **state)
{
	struct ldr_cpu_clock c;
	int64_t t = 1000 * MS;

	(void)state;
	ldr_cpu_clock_init(&c, t);
	/* made-up wall times, all inside one window: only the unit count ends it */
	for (int k = 1; k < LDR_CPU_CLOCK_UNITS; k++) {
		ldr_cpu_clock_lap(&c, 1000, t + k);
		assert_int_equal(c.reads, 0);
	}
	ldr_cpu_clock_lap(&c, 1000, t + LDR_CPU_CLOCK_UNITS);
	assert_int_equal(c.reads, 1);
	assert_int_equal(c.units, 0);
}

static void test_cpu_clock_reads_at_the_window_limit(void **state)
{
	struct ldr_cpu_clock c;
	int64_t t = 1000 * MS;

	(void)state;
	ldr_cpu_clock_init(&c, t);
	ldr_cpu_clock_lap(&c, 10, t + LDR_CPU_CLOCK_WINDOW_NS - 1);
	assert_int_equal(c.reads, 0);
	ldr_cpu_clock_lap(&c, 10, t + LDR_CPU_CLOCK_WINDOW_NS);
	assert_int_equal(c.reads, 1);
	assert_int_equal(c.mark_ns, t + LDR_CPU_CLOCK_WINDOW_NS);
}

/* Units of real work (50-400 us of CPU each): the charges add up to the thread clock at each
 * read, plus what was charged ahead of it, which is never negative. */
static void test_cpu_clock_charges_sum_to_the_clock(void **state)
{
	struct ldr_cpu_clock c;
	int64_t total = 0, start;

	(void)state;
	ldr_cpu_clock_init(&c, mono_ns());
	start = c.mark;
	for (int k = 0; k < 200; k++) {
		int64_t t0 = mono_ns();
		burn((50 + 50 * (k % 8)) * 1000);
		int64_t t1 = mono_ns(), ch = ldr_cpu_clock_lap(&c, t1 - t0, t1);
		assert_true(ch >= 0);
		assert_true(c.est >= 0);
		total += ch;
		assert_int_equal(total, c.mark - start + c.est);
	}
	assert_true(c.reads >= 200 / LDR_CPU_CLOCK_UNITS);
	assert_true(c.reads < 200);
	/* one more read now: the charges then hold all the CPU used, within one window's estimate */
	int64_t used = ldr_thread_cpu_ns() - start;
	assert_true(total <= used + c.est);
}

/* A unit that slept (wall time, no CPU) is overestimated at a ratio near 1: the read after it
 * charges nothing and carries the excess, and the next window pays it back. */
static void test_cpu_clock_overestimate_carried_not_negative(void **state)
{
	struct ldr_cpu_clock c;
	int64_t total = 0, start, t = mono_ns();

	(void)state;
	ldr_cpu_clock_init(&c, t);
	start = c.mark;
	/* a first window of busy units sets the ratio near 1 */
	for (int k = 0; k < LDR_CPU_CLOCK_UNITS; k++) {
		int64_t t0 = mono_ns();
		burn(100 * 1000);
		int64_t t1 = mono_ns();
		total += ldr_cpu_clock_lap(&c, t1 - t0, t1);
	}
	assert_int_equal(c.reads, 1);
	assert_true(c.ratio > 0.02);  /* about 1; far less only when preempted 50 times over */
	/* a unit said to have taken 500 us of wall time with no CPU behind it */
	t = c.mark_ns;
	int64_t e = ldr_cpu_clock_lap(&c, 500 * 1000, t + 1);
	assert_true(e > 10 * 1000);  /* 500 us x the ratio: more than the next units will use */
	total += e;
	/* the window's end comes right after: it used almost nothing, so it charges 0 and carries */
	for (int k = 1; k < LDR_CPU_CLOCK_UNITS; k++)
		total += ldr_cpu_clock_lap(&c, 0, t + 1 + k);
	assert_int_equal(c.reads, 2);
	assert_true(c.est > 0);
	assert_int_equal(total, c.mark - start + c.est);
	/* busy units pay it back: charges stay >= 0 and the sum meets the clock again */
	for (int k = 0; k < 4 * LDR_CPU_CLOCK_UNITS; k++) {
		int64_t t0 = mono_ns();
		burn(200 * 1000);
		int64_t t1 = mono_ns(), ch = ldr_cpu_clock_lap(&c, t1 - t0, t1);
		assert_true(ch >= 0);
		total += ch;
	}
	assert_int_equal(total, c.mark - start + c.est);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpu_clock_reads_at_the_unit_limit),
		cmocka_unit_test(test_cpu_clock_reads_at_the_window_limit),
		cmocka_unit_test(test_cpu_clock_charges_sum_to_the_clock),
		cmocka_unit_test(test_cpu_clock_overestimate_carried_not_negative),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
