/* test_util.h - what the cmocka suites share: the seed of a seeded test (from an environment
 * variable, else the clock and pid; printed, with how to replay it) and the PRNGs drawn from it:
 * xorshift64 (test_xorshift, small and fast) and splitmix64 (mix_next, from common/mix.h, which
 * accepts any state). Header-only: each suite is one binary. */
#ifndef LOADERD_TEST_UTIL_H
#define LOADERD_TEST_UTIL_H
#include "common/mix.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* The seed of test @test: $@env (any base strtoull takes) or the clock and pid. Printed, with the
 * line that replays it; stdout is flushed so that a crash still shows it. */
static inline uint64_t test_seed(const char *test, const char *env)
{
	const char *v = getenv(env);
	uint64_t seed = v ? strtoull(v, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();

	printf("%s: seed %" PRIu64 " (%s=%" PRIu64 " to replay)\n", test, seed, env, seed);
	fflush(stdout);
	return seed;
}

/* A xorshift64 state from any seed (xorshift64 must not start at 0). */
static inline uint64_t test_xorshift_init(uint64_t seed)
{
	return mix64(seed) | 1;
}

/* The next xorshift64 word (Marsaglia 2003: shifts 13, 7, 17); *@x must not be 0. */
static inline uint64_t test_xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

#endif
