/* seed.h - for cmocka tests: a small PRNG and a seed that a failed run can be replayed with.
 * Header-only: each tests/test_NAME.c is one binary. */
#ifndef LOADERD_TESTS_SEED_H
#define LOADERD_TESTS_SEED_H
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* A seed from the environment variable @env or the clock, printed with @test's name so that a
 * failure can be replayed; returned mixed, never 0 (a valid xorshift state). */
static inline uint64_t test_seed_env(const char *test, const char *env)
{
	const char *s = getenv(env);
	uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);

	printf("%s: seed %" PRIu64 " (%s=%" PRIu64 " to replay)\n", test, seed, env, seed);
	return seed * 0x9e3779b97f4a7c15ull + 1;
}

#endif
