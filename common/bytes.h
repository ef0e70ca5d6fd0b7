/* bytes.h - integers read from and written to byte strings in a fixed byte order, whatever the
 * alignment: the JPEG headers (big-endian) and the jpeg+idx index and footer (little-endian) read
 * them, and so do their tests. */
#ifndef LOADERD_BYTES_H
#define LOADERD_BYTES_H
#include <stdint.h>
#include <string.h>

static inline unsigned be16(const uint8_t *p)
{
	return (unsigned)p[0] << 8 | p[1];
}

static inline uint64_t be64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return __builtin_bswap64(v);
}

static inline uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void put_le16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void put_le32(uint8_t *p, uint32_t v)
{
	put_le16(p, v & 0xFFFF);
	put_le16(p + 2, v >> 16);
}

#endif
