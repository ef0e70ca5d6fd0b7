/* mix.h - the 64-bit hash mixer shared by the tools and tests: splitmix64 (Steele, Lea, Flood
 * 2014). mix64() is its finaliser, a bijection that spreads every input bit over the output;
 * mix_next() is the whole generator, for reproducible streams from one seed word. Neither is for
 * anything that needs to be unpredictable. */
#ifndef LOADERD_MIX_H
#define LOADERD_MIX_H
#include <stdint.h>

#define MIX_GOLDEN 0x9e3779b97f4a7c15ull  /* 2^64 / phi: splitmix64's increment */

/* The splitmix64 finaliser of @z. */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The next word of the splitmix64 stream whose state is *@s (any value is a valid seed). */
static inline uint64_t mix_next(uint64_t *s)
{
	*s += MIX_GOLDEN;
	return mix64(*s);
}

/* A keyed mix of three words: the finaliser over the xor of each word times an odd constant. The
 * sampler's permutations and the decoder's random crops draw from it (loader/sampler.c,
 * codec/decode.c): the values are part of what a seed means, so they may not change. */
static inline uint64_t mix3(uint64_t a, uint64_t b, uint64_t c)
{
	return mix64(a * MIX_GOLDEN ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^
		     (c + 0x85157af5ull) * 0x94d049bb133111ebull);
}

#endif
