/* clk.h - monotonic clock helpers. */
#ifndef LOADERD_CLK_H
#define LOADERD_CLK_H
#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC. */
static inline uint64_t clk_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Nanoseconds of CPU the calling thread has used (CLOCK_THREAD_CPUTIME_ID): what a piece of work
 * cost its thread, without the time it waited for a lock or for a core. */
static inline uint64_t clk_thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double clk_now_s(void)
{
	return (double)clk_now_ns() * 1e-9;
}
#endif
