/* jpeg_bits.h - codec-private (only codec/ includes it): the bit reader over a JPEG's
 * entropy-coded data (stuffing removed) and the byte helpers that dpack's index pass
 * (jpeg_idx_build.c) and loaderd's splice (jpeg_idx.c) share. Static inline, so that the inner
 * loops of both keep them inlined as when they were one file. */
#ifndef LOADERD_JPEG_BITS_H
#define LOADERD_JPEG_BITS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codec/jpeg_hdr.h"
#include "common/bytes.h"
#include "common/err.h"

/* A reason that is a fixed string (most of the parsers' refusals). */
#define bad(why, whylen, ret, msg) err_set((why), (whylen), (ret), "%s", (msg))

/* The magic at the end of a jpeg+idx record's footer (docs/FORMAT.md, "jpeg+idx"). */
static const uint8_t idx_magic[6] = { 'J', 'P', 'G', 'I', 'D', 'X' };

/* Nonzero when a byte of @x is 0xFF. */
static inline uint64_t has_ff64(uint64_t x)
{
	uint64_t y = ~x;

	return (y - 0x0101010101010101ull) & ~y & 0x8080808080808080ull;
}

/* The top bit of each byte of @x that is 0xFF, exactly (no carries between bytes). */
static inline uint64_t ff_bytes(uint64_t x)
{
	uint64_t y = ~x;

	return ~(((y & 0x7F7F7F7F7F7F7F7Full) + 0x7F7F7F7F7F7F7F7Full) | y) & 0x8080808080808080ull;
}

/* ---- the bit reader (entropy-coded data, stuffing removed) ---- */

struct bitrd {
	const uint8_t *base;      /* the JPEG */
	size_t p, end;            /* next byte to load; the end of the entropy data */
	uint64_t acc;             /* unread bits, first at the top */
	int n;                    /* bits in acc */
	int fake;                 /* zero bits fed past a marker or the end (the last of acc) */
};

/* out of line, as the compiler chose when it was static in one file: inlined, it would bloat
 * every caller's fast path for the rare marker or stuffed byte */
static __attribute__((noinline, unused)) void rd_fill(struct bitrd *b)
{
	while (b->n <= 56) {
		if (!b->fake && b->p + 8 <= b->end) {
			uint64_t w = be64(b->base + b->p);
			if (!has_ff64(w)) {
				unsigned bytes = (unsigned)(64 - b->n) >> 3, bits = bytes * 8;
				uint64_t chunk = bits == 64 ? w : w >> (64 - bits);
				b->acc |= chunk << (64 - b->n - bits);
				b->n += (int)bits;
				b->p += bytes;
				continue;
			}
		}
		unsigned v = 0;
		if (!b->fake && b->p < b->end &&
		    (b->base[b->p] != 0xFF || (b->p + 1 < b->end && b->base[b->p + 1] == 0))) {
			v = b->base[b->p];
			b->p += v == 0xFF ? 2 : 1;
		} else {
			b->fake += 8;  /* a marker or the end: zeros, as libjpeg feeds */
		}
		b->acc |= (uint64_t)v << (56 - b->n);
		b->n += 8;
	}
}

/* Start reading at byte @at, bit @bit (0: the top bit). */
static inline void rd_init(struct bitrd *b, const uint8_t *base, size_t at, unsigned bit, size_t end)
{
	b->base = base;
	b->p = at;
	b->end = end;
	b->acc = 0;
	b->n = 0;
	b->fake = 0;
	rd_fill(b);
	b->acc <<= bit;
	b->n -= (int)bit;
}

static inline void rd_skip(struct bitrd *b, unsigned k)
{
	b->acc <<= k;
	b->n -= (int)k;
}

static inline uint32_t rd_peek(const struct bitrd *b, unsigned k)
{
	return k ? (uint32_t)(b->acc >> (64 - k)) : 0;
}

/* The next symbol of @h, its code in *code and length in *len; -1 for a bad code. Needs 16 bits
 * in the reader. */
static inline int huff_sym(const struct bitrd *b, const struct cdc_huff *h, uint32_t *code,
			   unsigned *len)
{
	unsigned e = h->look[b->acc >> (64 - CDC_IDX_LOOK)];

	if (e) {
		*len = e >> 8;
		*code = (uint32_t)(b->acc >> (64 - *len));
		return (int)(e & 0xFF);
	}
	for (unsigned l = CDC_IDX_LOOK + 1; l <= 16; l++) {
		int32_t c = (int32_t)(b->acc >> (64 - l));
		if (c <= h->maxcode[l]) {
			*len = l;
			*code = (uint32_t)c;
			return h->vals[(h->valoff[l] + c) & 0xFF];
		}
	}
	return -1;
}

/* The value of @s extra bits @v (JPEG's EXTEND). */
static inline int extend(uint32_t v, unsigned s)
{
	return s && v < 1u << (s - 1) ? (int)v - (int)(1u << s) + 1 : (int)v;
}

/* The reader's position: byte offset and bit of the next unread real bit. Walks back over the
 * bytes still in the accumulator (a stuffed 0xFF is two bytes). */
static __attribute__((noinline, unused)) void rd_pos(const struct bitrd *b, size_t *at, unsigned *bit)
{
	int u = b->n - b->fake;
	size_t q = b->p;

	for (int k = (u + 7) / 8; k > 0; k--)
		q -= q >= 2 && b->base[q - 1] == 0 && b->base[q - 2] == 0xFF ? 2 : 1;
	*at = q;
	*bit = (unsigned)(8 - (u & 7)) & 7;
}

/* Make at least 32 bits available: 8 bytes at once when none is 0xFF, else rd_fill(). */
static inline void rd_need(struct bitrd *b)
{
	if (b->n >= 32)
		return;
	if (!b->fake && b->p + 8 <= b->end) {
		uint64_t w = be64(b->base + b->p);
		if (!has_ff64(w)) {
			unsigned bytes = (unsigned)(64 - b->n) >> 3, bits = bytes * 8;
			b->acc |= w >> (64 - bits) << (64 - b->n - bits);
			b->n += (int)bits;
			b->p += bytes;
			return;
		}
	}
	rd_fill(b);
}

#endif
