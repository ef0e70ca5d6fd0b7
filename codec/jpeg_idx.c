/* jpeg_idx.c - bit-indexed JPEG records: dpack's index pass, the record parser and loaderd's
 * splice (see jpeg_idx.h; the layout is in docs/FORMAT.md, "jpeg+idx").
 *
 * Why a splice works without restart markers: in a scan without a restart interval the only state
 * that an MCU's decode takes from the MCUs before it is the bit position and each component's DC
 * prediction (the previous block's DC). The index stores both at every K-th MCU of every row, so
 * the bits of MCUs [c0, c1) of row r can be cut out and laid after those of the previous planned
 * row, provided that the first DC difference of each component in the range is re-coded against
 * the prediction the splice's decoder will hold there (the DC at the end of the previous range,
 * or 0 at the start of the splice). Every other bit is copied as it is, shifted to the output's
 * bit position: Huffman codes are prefix codes, so they need no byte alignment. The splice's
 * geometry is the planned rectangle (cdc_rst_plan(), one MCU of margin where chroma is subsampled),
 * so its pixels inside the window equal those of a full decode.
 *
 * The Huffman decoder here only walks symbols (DC category and extra bits, AC run/size and extra
 * bits until EOB): no dequantisation, no IDCT. A 9-bit lookahead table takes most codes in one
 * step; longer ones go through the canonical limits, as libjpeg does. dpack's index pass also
 * takes an AC code and its extra bits in one step from a 12-bit table (acfast), built only there:
 * the splice decodes one MCU a row and would not repay building it. Byte stuffing (0xFF 0x00)
 * is removed on input and added again on output; a marker, a bad code or data that ends inside an
 * MCU is -EBADMSG. */
#include "codec/jpeg_idx.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

static const uint8_t idx_magic[6] = { 'J', 'P', 'G', 'I', 'D', 'X' };

static int bad(char *why, size_t whylen, int ret, const char *msg)
{
	snprintf(why, whylen, "%s", msg);
	return ret;
}

static unsigned be16(const uint8_t *p)
{
	return (unsigned)p[0] << 8 | p[1];
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	put_le16(p, v & 0xFFFF);
	put_le16(p + 2, v >> 16);
}

static uint64_t be64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return __builtin_bswap64(v);
}

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

/* ---- Huffman tables ---- */

/* The acfast entries of AC code @code of length @l for run/size @rs (see struct cdc_huff). */
static void ac_fast(struct cdc_huff *h, uint32_t code, unsigned l, unsigned rs)
{
	unsigned r = rs >> 4, sz = rs & 15, bits = l + sz;
	unsigned adv = sz ? r + 1 : r == 15 ? 16 : 0;

	if (bits > CDC_IDX_ACFAST)
		return;
	/* every value of the extra bits: the entry covers all of them */
	for (uint32_t j = code << (CDC_IDX_ACFAST - l); j < (code + 1) << (CDC_IDX_ACFAST - l); j++)
		h->acfast[j] = (uint16_t)(bits | adv << 5);
}

/* Build @h from a DHT's 16 code counts and its symbols (libjpeg's canonical assignment). Returns
 * 0, or -1 for a table whose codes do not fit their lengths. */
static int huff_build(struct cdc_huff *h, const uint8_t counts[16], const uint8_t *syms,
		      unsigned nsyms, int dc, int fast)
{
	uint32_t code = 0;
	unsigned k = 0;

	memset(h, 0, offsetof(struct cdc_huff, acfast));
	if (fast && !dc)
		memset(h->acfast, 0, sizeof(h->acfast));  /* 0: the long way */
	memcpy(h->vals, syms, nsyms);
	for (unsigned l = 1; l <= 16; l++) {
		h->maxcode[l] = -1;
		h->valoff[l] = (int32_t)k - (int32_t)code;
		for (unsigned i = 0; i < counts[l - 1]; i++, k++, code++) {
			/* each code fits its length, and is not the all-ones code of it (libjpeg) */
			if (code + 1 >= 1u << l || (dc && syms[k] > 15))
				return -1;
			h->ehufco[syms[k]] = (uint16_t)code;
			h->ehufsi[syms[k]] = (uint8_t)l;
			if (l <= CDC_IDX_LOOK) {
				unsigned sh = CDC_IDX_LOOK - l;
				for (uint32_t j = code << sh; j < (code + 1) << sh; j++)
					h->look[j] = (uint16_t)(l << 8 | syms[k]);
			}
			if (fast && !dc && l <= CDC_IDX_ACFAST)
				ac_fast(h, code, l, syms[k]);
		}
		if (counts[l - 1])
			h->maxcode[l] = (int32_t)code - 1;
		code <<= 1;
	}
	h->defined = 1;
	return 0;
}

/* Every DC category of 8-bit data (0..11) has a code: any DC difference can be re-coded. */
static int dc_complete(const struct cdc_huff *h)
{
	for (unsigned s = 0; s <= 11; s++)
		if (!h->ehufsi[s])
			return 0;
	return 1;
}

/* ---- the bit reader (entropy-coded data, stuffing removed) ---- */

struct bitrd {
	const uint8_t *base;      /* the JPEG */
	size_t p, end;            /* next byte to load; the end of the entropy data */
	uint64_t acc;             /* unread bits, first at the top */
	int n;                    /* bits in acc */
	int fake;                 /* zero bits fed past a marker or the end (the last of acc) */
};

static void rd_fill(struct bitrd *b)
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
static void rd_init(struct bitrd *b, const uint8_t *base, size_t at, unsigned bit, size_t end)
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
static void rd_pos(const struct bitrd *b, size_t *at, unsigned *bit)
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

/* Walk one block's symbols; its DC difference in *diff. -1 for a bad code. The AC codes whose
 * extra bits fit CDC_IDX_ACFAST bits go in one step (acfast), the others the long way. */
static int skip_block(struct bitrd *b, const struct cdc_huff *dc, const struct cdc_huff *ac,
		      int *diff)
{
	uint32_t code;
	unsigned len;

	rd_need(b);
	int s = huff_sym(b, dc, &code, &len);
	if (s < 0)
		return -1;
	rd_skip(b, len);
	*diff = extend(rd_peek(b, (unsigned)s), (unsigned)s);
	rd_skip(b, (unsigned)s);
	/* the AC loop keeps the bit buffer in locals: the compiler cannot keep struct fields in
	 * registers across the table loads */
	uint64_t acc = b->acc;
	int n = b->n;
	for (unsigned k = 1; k < 64;) {
		if (n < 32) {
			b->acc = acc;
			b->n = n;
			rd_need(b);
			acc = b->acc;
			n = b->n;
		}
		unsigned f = ac->acfast[acc >> (64 - CDC_IDX_ACFAST)];
		if (f) {
			acc <<= f & 31;
			n -= (int)(f & 31);
			if (!(f >> 5))
				break;
			k += f >> 5;
			continue;
		}
		b->acc = acc;
		b->n = n;
		int rs = huff_sym(b, ac, &code, &len);
		if (rs < 0)
			return -1;
		unsigned r = (unsigned)rs >> 4, sz = (unsigned)rs & 15;
		acc <<= len + sz;
		n -= (int)(len + sz);
		if (sz)
			k += r + 1;
		else if (r == 15)
			k += 16;
		else
			break;
	}
	b->acc = acc;
	b->n = n;
	return 0;
}

/* ---- the header ---- */

/* One DHT segment's tables into info->huff[]. */
static int parse_dht(const uint8_t *p, size_t n, struct cdc_idx_info *info, char *why,
		     size_t whylen)
{
	while (n > 0) {
		if (n < 17)
			return bad(why, whylen, -EBADMSG, "DHT segment too short");
		unsigned tc = p[0] >> 4, th = p[0] & 15, total = 0;
		for (unsigned i = 0; i < 16; i++)
			total += p[1 + i];
		if (tc > 1 || th > 3 || total > 256 || total > n - 17)
			return bad(why, whylen, -EBADMSG, "bad DHT table");
		if (huff_build(&info->huff[tc * 4 + th], p + 1, p + 17, total, tc == 0, info->fast) < 0)
			return bad(why, whylen, -EBADMSG, "bad Huffman table");
		p += 17 + total;
		n -= 17 + total;
	}
	return 0;
}

struct frame {
	unsigned ncomp, id[3], h[3], v[3];
};

static int parse_sof(const uint8_t *p, size_t n, size_t at, struct cdc_idx_info *info,
		     struct frame *f, char *why, size_t whylen)
{
	if (n < 6 || p[0] != 8)
		return bad(why, whylen, -ENOTSUP, "not an 8-bit frame");
	f->ncomp = p[5];
	if ((f->ncomp != 1 && f->ncomp != 3) || n != 6 + 3 * (size_t)f->ncomp)
		return bad(why, whylen, -ENOTSUP, "frame is not 1 or 3 components");
	info->geo.height = be16(p + 1);
	info->geo.width = be16(p + 3);
	info->geo.sof_at = at;
	if (!info->geo.height || !info->geo.width)
		return bad(why, whylen, -ENOTSUP, "frame without a size (DNL)");
	for (unsigned c = 0; c < f->ncomp; c++) {
		f->id[c] = p[6 + 3 * c];
		f->h[c] = p[7 + 3 * c] >> 4;
		f->v[c] = p[7 + 3 * c] & 15;
		if (f->h[c] < 1 || f->h[c] > 4 || f->v[c] < 1 || f->v[c] > 4)
			return bad(why, whylen, -EBADMSG, "bad sampling factor");
		if (f->h[c] > info->geo.hmax)
			info->geo.hmax = f->h[c];
		if (f->v[c] > info->geo.vmax)
			info->geo.vmax = f->v[c];
	}
	return 0;
}

static int parse_sos(const uint8_t *p, size_t n, const struct frame *f, struct cdc_idx_info *info,
		     char *why, size_t whylen)
{
	unsigned total = 0;

	if (!f->ncomp)
		return bad(why, whylen, -EBADMSG, "scan before the frame header");
	if (n < 1 || p[0] != f->ncomp || n != 4 + 2 * (size_t)f->ncomp)
		return bad(why, whylen, -ENOTSUP, "scan does not hold every component");
	if (p[1 + 2 * f->ncomp] != 0 || p[2 + 2 * f->ncomp] != 63 || p[3 + 2 * f->ncomp] != 0)
		return bad(why, whylen, -ENOTSUP, "not a sequential scan");
	info->ncomp = f->ncomp;
	for (unsigned i = 0; i < f->ncomp; i++) {
		unsigned id = p[1 + 2 * i], td = p[2 + 2 * i] >> 4, ta = p[2 + 2 * i] & 15, c;
		for (c = 0; c < f->ncomp && f->id[c] != id; c++)
			;
		if (c == f->ncomp || td > 3 || ta > 3)
			return bad(why, whylen, -EBADMSG, "bad scan component");
		info->dc[i] = &info->huff[td];
		info->ac[i] = &info->huff[4 + ta];
		if (!info->dc[i]->defined || !info->ac[i]->defined)
			return bad(why, whylen, -ENOTSUP, "scan uses an undefined Huffman table");
		info->nblocks[i] = f->ncomp == 1 ? 1 : f->h[c] * f->v[c];
		total += info->nblocks[i];
	}
	if (total > 10)
		return bad(why, whylen, -ENOTSUP, "more than 10 blocks in an MCU");
	return 0;
}

/* Parse @jpg[0, len) up to its scan into @info (tables, with the index pass's acfast ones when
 * @fast; geometry). -ENOTSUP: a JPEG the index
 * cannot describe as it is (progressive, arithmetic, restart interval, ...); -EBADMSG: damaged. */
static int parse_header(const uint8_t *jpg, size_t len, int fast, struct cdc_idx_info *info,
			char *why, size_t whylen)
{
	struct frame f = { 0 };
	size_t pos = 2;

	/* not a memset of the whole struct: the tables are large and built only where defined */
	memset(&info->geo, 0, sizeof(info->geo));
	for (unsigned t = 0; t < 8; t++)
		info->huff[t].defined = 0;
	info->ncomp = 0;
	info->fast = fast;
	if (len < 4 || jpg[0] != 0xFF || jpg[1] != 0xD8)
		return bad(why, whylen, -EBADMSG, "not a JPEG (no SOI)");
	for (;;) {
		unsigned m;
		const uint8_t *p;
		size_t n;
		int ret = cdc_jpeg_segment(jpg, len, &pos, &m, &p, &n, why, whylen);
		if (ret < 0)
			return ret;
		if (m == 0xC0 || m == 0xC1) {
			if (f.ncomp)
				return bad(why, whylen, -EBADMSG, "two frame headers");
			ret = parse_sof(p, n, (size_t)(p + 1 - jpg), info, &f, why, whylen);
		} else if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8) {
			return bad(why, whylen, -ENOTSUP, "not a baseline Huffman JPEG");
		} else if (m == 0xC4) {
			ret = parse_dht(p, n, info, why, whylen);
		} else if (m == 0xDD) {
			if (n != 2)
				return bad(why, whylen, -EBADMSG, "bad DRI");
			if (be16(p))
				return bad(why, whylen, -ENOTSUP, "has a restart interval");
		} else if (m == 0xDA) {
			ret = parse_sos(p, n, &f, info, why, whylen);
			if (ret < 0)
				return ret;
			info->geo.scan_at = pos;
			break;
		}
		if (ret < 0)
			return ret;
	}
	cdc_jpeg_geometry(&info->geo, info->ncomp);
	info->entry_size = 4 + 2 * info->ncomp;
	return 0;
}

/* ---- the index pass (dpack) ---- */

/* Append index point @k at the reader's position with predictions @pred. */
static int put_point(uint8_t *tab, uint32_t k, const struct cdc_idx_info *info,
		     const struct bitrd *b, const int pred[3])
{
	size_t at;
	unsigned bit;

	rd_pos(b, &at, &bit);
	uint64_t off = (uint64_t)(at - info->geo.scan_at) * 8 + bit;
	if (off > UINT32_MAX)
		return -1;
	uint8_t *e = tab + (size_t)k * info->entry_size;
	put_le32(e, (uint32_t)off);
	for (unsigned c = 0; c < info->ncomp; c++)
		put_le16(e + 4 + 2 * c, (unsigned)pred[c] & 0xFFFF);
	return 0;
}

/* The offset just past the EOI that ends the scan at the reader's position, or 0 when the scan
 * is followed by anything else (another scan: -ENOTSUP for the caller). */
static size_t scan_end(const uint8_t *jpg, size_t len, const struct bitrd *b)
{
	size_t at;
	unsigned bit;

	rd_pos(b, &at, &bit);
	for (size_t q = at; q + 1 < len; q++) {
		if (jpg[q] != 0xFF || jpg[q + 1] == 0x00)
			continue;
		while (q + 1 < len && jpg[q + 1] == 0xFF)
			q++;
		return q + 1 < len && jpg[q + 1] == 0xD9 ? q + 2 : 0;
	}
	return 0;
}

/* Walk the whole scan of the parsed JPEG @jpg[0, len), writing its index into *tab (malloc). */
static int index_scan(const uint8_t *jpg, size_t len, struct cdc_idx_info *info, uint8_t **tab,
		      size_t *tablen, char *why, size_t whylen)
{
	const struct cdc_rst_info *g = &info->geo;
	uint32_t K = g->interval, cols = g->segs_x, k = 0;
	uint64_t np = (uint64_t)g->mcus_y * cols + 1;
	int pred[3] = { 0, 0, 0 };
	struct bitrd b;

	if (np * info->entry_size > UINT32_MAX)
		return bad(why, whylen, -ENOTSUP, "index too large");
	*tab = malloc(np * info->entry_size);
	if (!*tab)
		return bad(why, whylen, -ENOMEM, "out of memory for the index");
	*tablen = np * info->entry_size;
	rd_init(&b, jpg, g->scan_at, 0, len);
	for (uint32_t r = 0; r < g->mcus_y; r++) {
		for (uint32_t c = 0; c < g->mcus_x; c++) {
			if (c % K == 0 && put_point(*tab, k++, info, &b, pred) < 0)
				goto too_large;
			for (unsigned ci = 0; ci < info->ncomp; ci++) {
				for (unsigned bl = 0; bl < info->nblocks[ci]; bl++) {
					int diff;
					if (skip_block(&b, info->dc[ci], info->ac[ci], &diff) < 0)
						goto bad_code;
					pred[ci] += diff;
				}
				if (pred[ci] < -32768 || pred[ci] > 32767)
					goto bad_code;
			}
			if (b.n < b.fake) {
				snprintf(why, whylen, "scan data ends inside MCU row %u", r);
				goto fail_badmsg;
			}
		}
	}
	if (put_point(*tab, k++, info, &b, pred) < 0)
		goto too_large;
	info->npoints = k;
	info->jpeg_len = scan_end(jpg, len, &b);
	if (!info->jpeg_len) {
		free(*tab);
		*tab = NULL;
		return bad(why, whylen, -ENOTSUP, "the scan is not followed by EOI (several scans?)");
	}
	return 0;
bad_code:
	snprintf(why, whylen, "bad Huffman code or DC value in the scan");
fail_badmsg:
	free(*tab);
	*tab = NULL;
	return -EBADMSG;
too_large:
	free(*tab);
	*tab = NULL;
	return bad(why, whylen, -ENOTSUP, "scan too large for the index");
}

/* Index the JPEG @jpg[0, len) as it is: -ENOTSUP when it is not indexable as it is. */
static int index_jpeg(const uint8_t *jpg, size_t len, unsigned col_px, struct cdc_idx_info *info,
		      uint8_t **tab, size_t *tablen, char *why, size_t whylen)
{
	int ret = parse_header(jpg, len, 1, info, why, whylen);

	if (ret < 0)
		return ret;
	for (unsigned i = 0; i < info->ncomp; i++)
		if (!dc_complete(info->dc[i]))
			return bad(why, whylen, -ENOTSUP, "a DC table lacks categories");
	struct cdc_rst_info *g = &info->geo;
	uint32_t K = col_px ? col_px / g->mcu_w : g->mcus_x;
	if (K < 1)
		K = 1;
	if (K > g->mcus_x)
		K = g->mcus_x;
	g->interval = K;
	g->segs_x = (g->mcus_x + K - 1) / K;
	return index_scan(jpg, len, info, tab, tablen, why, whylen);
}

/* Append @v as a LEB128 varint at @o; returns the bytes written (at most 5). */
static size_t put_varint(uint8_t *o, uint32_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		o[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	o[n++] = (uint8_t)v;
	return n;
}

static uint32_t zigzag(int v)
{
	return v < 0 ? ((uint32_t)-(v + 1) << 1) | 1 : (uint32_t)v << 1;
}

static int unzigzag(uint32_t u)
{
	return u & 1 ? -(int)(u >> 1) - 1 : (int)(u >> 1);
}

/* The index pass's fixed entries @tab (one per point) as the stored index: the row directory, then
 * the point stream (docs/FORMAT.md). *out (malloc) holds *outlen bytes. */
static int encode_index(const struct cdc_idx_info *info, const uint8_t *tab, uint8_t **out,
			size_t *outlen)
{
	const struct cdc_rst_info *g = &info->geo;
	size_t dirlen = 4 * ((size_t)g->mcus_y + 1);
	uint8_t *o = malloc(dirlen + (size_t)info->npoints * (5 + 5 * info->ncomp));
	size_t n = dirlen;

	if (!o)
		return -ENOMEM;
	for (uint32_t k = 0; k < info->npoints; k++) {
		const uint8_t *e = tab + (size_t)k * info->entry_size;
		int first = k % g->segs_x == 0;  /* a row's first point, or the final one */
		const uint8_t *pe = first ? e : e - info->entry_size;
		if (first)
			put_le32(o + 4 * (k / g->segs_x), (uint32_t)(n - dirlen));
		n += put_varint(o + n, le32(e) - (first ? 0 : le32(pe)));
		for (unsigned c = 0; c < info->ncomp; c++) {
			int v = (int16_t)(e[4 + 2 * c] | e[5 + 2 * c] << 8);
			int pv = first ? 0 : (int16_t)(pe[4 + 2 * c] | pe[5 + 2 * c] << 8);
			n += put_varint(o + n, zigzag(v - pv));
		}
	}
	*out = o;
	*outlen = n;
	return 0;
}

/* The record: the JPEG, the index, the footer. */
static int assemble(const uint8_t *jpg, const struct cdc_idx_info *info, const uint8_t *tab,
		    uint8_t **out, size_t *outlen)
{
	uint8_t *idx;
	size_t idxlen;

	if (encode_index(info, tab, &idx, &idxlen) < 0)
		return -ENOMEM;
	size_t n = info->jpeg_len + idxlen + CDC_IDX_FOOTER;
	uint8_t *o = malloc(n);
	if (!o || idxlen > UINT32_MAX) {
		free(idx);
		free(o);
		return -ENOMEM;
	}
	memcpy(o, jpg, info->jpeg_len);
	memcpy(o + info->jpeg_len, idx, idxlen);
	free(idx);
	uint8_t *f = o + info->jpeg_len + idxlen;
	memset(f, 0, CDC_IDX_FOOTER);
	put_le32(f, (uint32_t)idxlen);
	put_le32(f + 4, (uint32_t)info->jpeg_len);
	put_le32(f + 8, (uint32_t)info->geo.scan_at);
	put_le16(f + 12, info->geo.interval);
	f[14] = (uint8_t)info->ncomp;
	put_le32(f + 16, info->npoints);
	put_le32(f + 20, (uint32_t)XXH3_64bits(f, 20));
	put_le16(f + 24, CDC_IDX_VERSION);
	memcpy(f + 26, idx_magic, sizeof(idx_magic));
	*out = o;
	*outlen = n;
	return 0;
}

int cdc_idx_build(const uint8_t *jpg, size_t len, unsigned col_px, struct dpk_record *r,
		  uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	struct cdc_idx_info *info = malloc(sizeof(*info));
	uint8_t *tc = NULL, *tab = NULL;
	size_t tclen = 0, tablen = 0;
	int ret;

	*out = NULL;
	*outlen = 0;
	if (!info)
		return -ENOMEM;
	if (len > UINT32_MAX) {
		ret = bad(why, whylen, -EBADMSG, "JPEG larger than 4 GiB");
		goto out;
	}
	ret = index_jpeg(jpg, len, col_px, info, &tab, &tablen, why, whylen);
	if (ret == -ENOTSUP) {
		/* not indexable as it is: baseline with the standard tables, then index that */
		ret = cdc_jpeg_transcode(jpg, len, 0, -1, &tc, &tclen, why, whylen);
		if (ret == 0)
			ret = index_jpeg(tc, tclen, col_px, info, &tab, &tablen, why, whylen);
		if (ret == 0)
			jpg = tc;
	}
	if (ret == -ENOTSUP) {  /* e.g. CMYK: stored as it is */
		*out = malloc(len ? len : 1);
		if (!*out) {
			ret = -ENOMEM;
			goto out;
		}
		memcpy(*out, jpg, len);
		*outlen = len;
		ret = 0;
		goto out;
	}
	if (ret == 0)
		ret = assemble(jpg, info, tab, out, outlen);
	if (ret == 0) {
		r->kind = DPK_KIND_JPEG_IDX;
		r->flags &= (uint8_t)~DPK_F_PROGRESSIVE;
	}
out:
	free(tab);
	free(tc);
	free(info);
	return ret;
}

/* ---- the record ---- */

/* Check the row directory: row 0 at the stream's start, rows in order, all inside the stream. */
static int check_rows(const struct cdc_idx_info *info, char *why, size_t whylen)
{
	uint32_t prev = 0;

	for (uint32_t r = 0; r <= info->geo.mcus_y; r++) {
		uint32_t a = le32(info->rows + 4 * (size_t)r);
		if ((r == 0 && a != 0) || a < prev || a >= info->stream_len)
			return bad(why, whylen, -EBADMSG, "index row directory out of order or range");
		prev = a;
	}
	return 0;
}

/* The next varint of [*p, end) into *v; -1 past the end or longer than a u32. */
static int get_varint(const uint8_t **p, const uint8_t *end, uint32_t *v)
{
	uint32_t x = 0;

	for (unsigned sh = 0; sh < 35; sh += 7) {
		if (*p >= end)
			return -1;
		uint8_t b = *(*p)++;
		if (sh == 28 && b > 0x0F)
			return -1;
		x |= (uint32_t)(b & 0x7F) << sh;
		if (!(b & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

/* One point of a row's stream at *p (before @end): its bit offset added to *off (within the row:
 * the first point's is absolute) and its predictions to @pred. @first: the row's first point. */
static int next_point(const uint8_t *rec, const uint8_t **p, const uint8_t *end,
		      const struct cdc_idx_info *info, int first, uint64_t *off, int pred[3], char *why, size_t whylen)
{
	uint64_t limit = (uint64_t)(info->eoi_at - info->geo.scan_at) * 8;
	uint32_t d;

	if (get_varint(p, end, &d) < 0)
		return bad(why, whylen, -EBADMSG, "index point stream damaged");
	if (!first && d == 0)  /* an MCU has at least one bit per block */
		return bad(why, whylen, -EBADMSG, "index points out of order");
	*off += d;
	if (*off > limit || *off > UINT32_MAX)
		return bad(why, whylen, -EBADMSG, "index point outside the scan");
	for (unsigned c = 0; c < info->ncomp; c++) {
		if (get_varint(p, end, &d) < 0)
			return bad(why, whylen, -EBADMSG, "index point stream damaged");
		int64_t v = (int64_t)pred[c] + unzigzag(d);  /* 64 bits: cannot wrap */
		if (v < -32768 || v > 32767)
			return bad(why, whylen, -EBADMSG, "index DC prediction out of range");
		pred[c] = (int)v;
	}
	size_t at = info->geo.scan_at + (size_t)(*off >> 3);
	if (at > info->geo.scan_at && at < info->eoi_at && rec[at - 1] == 0xFF &&
	    rec[at] == 0)
		return bad(why, whylen, -EBADMSG, "index point inside a stuffed byte");
	return 0;
}

/* Check every point of the index once, in stream order, before any splice trusts one: row 0
 * starts at bit 0 with zero predictions; points rise strictly, within a row and from each row's
 * last point to the next row's first (every MCU has bits), so that the bit ranges of any rows
 * planned together never overlap and their sum is at most the scan; every point lies inside the
 * scan and not on a stuffed byte; each row's stream holds exactly its points. */
static int check_points(const uint8_t *rec, const struct cdc_idx_info *info, char *why,
			size_t whylen)
{
	const struct cdc_rst_info *g = &info->geo;
	uint64_t last = 0;

	for (uint32_t r = 0; r <= g->mcus_y; r++) {
		uint32_t a = le32(info->rows + 4 * (size_t)r);
		uint32_t e = r < g->mcus_y ? le32(info->rows + 4 * ((size_t)r + 1)) : info->stream_len;
		const uint8_t *p = info->stream + a, *end = info->stream + e;
		uint32_t n = r < g->mcus_y ? g->segs_x : 1;  /* the last "row" is the final point */
		uint64_t off = 0;
		int pred[3] = { 0, 0, 0 };
		for (uint32_t j = 0; j < n; j++) {
			int ret = next_point(rec, &p, end, info, j == 0, &off, pred, why, whylen);
			if (ret < 0)
				return ret;
			if (r == 0 && j == 0) {
				if (off || pred[0] || pred[1] || pred[2])
					return bad(why, whylen, -EBADMSG,
						   "index does not start at the scan");
			} else if (off <= last) {
				return bad(why, whylen, -EBADMSG,
					   "index row starts before the row above ends");
			}
			last = off;
		}
		if (p != end)
			return bad(why, whylen, -EBADMSG, "index row holds more than its points");
	}
	return 0;
}

int cdc_idx_point(const uint8_t *rec, const struct cdc_idx_info *info, uint32_t r, uint32_t j,
		  struct cdc_idx_point *pt, char *why, size_t whylen)
{
	const struct cdc_rst_info *g = &info->geo;
	uint64_t off = 0;

	if (j >= g->segs_x && r < g->mcus_y) {  /* the end of row r: the next row's start */
		r++;
		j = 0;
	}
	if (r > g->mcus_y || (r == g->mcus_y && j) || j >= g->segs_x)
		return bad(why, whylen, -EINVAL, "no such index point");
	uint32_t a = le32(info->rows + 4 * (size_t)r);
	uint32_t e = r < g->mcus_y ? le32(info->rows + 4 * ((size_t)r + 1)) : info->stream_len;
	const uint8_t *p = info->stream + a, *end = info->stream + e;
	int pred[3] = { 0, 0, 0 };
	for (uint32_t i = 0; i <= j; i++) {
		int ret = next_point(rec, &p, end, info, i == 0, &off, pred, why, whylen);
		if (ret < 0)
			return ret;
	}
	if (r == 0 && j == 0 && (off || pred[0] || pred[1] || pred[2]))
		return bad(why, whylen, -EBADMSG, "index does not start at the scan");
	pt->bit = (uint32_t)off;
	memcpy(pt->pred, pred, sizeof(pred));
	return 0;
}

int cdc_idx_parse(const uint8_t *rec, size_t len, struct cdc_idx_info *info, char *why,
		  size_t whylen)
{
	char tmp[160];

	if (len < CDC_IDX_FOOTER + 4)
		return bad(why, whylen, -EBADMSG, "record shorter than its index footer");
	const uint8_t *f = rec + len - CDC_IDX_FOOTER;
	if (memcmp(f + 26, idx_magic, sizeof(idx_magic)) || f[24] != CDC_IDX_VERSION || f[25])
		return bad(why, whylen, -EBADMSG, "no index footer (magic or version)");
	uint32_t tablen = le32(f), jpeg_len = le32(f + 4), scan_at = le32(f + 8);
	unsigned K = f[12] | (unsigned)f[13] << 8, ncomp = f[14];
	uint32_t np = le32(f + 16);
	if ((uint64_t)jpeg_len + tablen + CDC_IDX_FOOTER != len || f[15] || jpeg_len < 4)
		return bad(why, whylen, -EBADMSG, "index footer lengths do not add up");
	if (le32(f + 20) != (uint32_t)XXH3_64bits(f, 20))
		return bad(why, whylen, -EBADMSG, "index footer check does not match");
	int ret = parse_header(rec, jpeg_len, 0, info, tmp, sizeof(tmp));
	if (ret < 0) {
		snprintf(why, whylen, "index record header: %s", tmp);
		return -EBADMSG;
	}
	struct cdc_rst_info *g = &info->geo;
	if (rec[jpeg_len - 2] != 0xFF || rec[jpeg_len - 1] != 0xD9 || scan_at != g->scan_at ||
	    scan_at > jpeg_len - 2 || ncomp != info->ncomp)
		return bad(why, whylen, -EBADMSG, "index footer does not match the JPEG");
	if (K < 1 || K > g->mcus_x)
		return bad(why, whylen, -EBADMSG, "bad index column width");
	g->interval = K;
	g->segs_x = (g->mcus_x + K - 1) / K;
	uint64_t dirlen = 4 * ((uint64_t)g->mcus_y + 1);
	if ((uint64_t)g->mcus_y * g->segs_x + 1 != np || dirlen >= tablen)
		return bad(why, whylen, -EBADMSG, "index size does not match the image");
	info->jpeg_len = jpeg_len;
	info->eoi_at = jpeg_len - 2;
	info->rows = rec + jpeg_len;
	info->stream = info->rows + dirlen;
	info->stream_len = (uint32_t)(tablen - dirlen);
	info->npoints = np;
	ret = check_rows(info, why, whylen);
	return ret < 0 ? ret : check_points(rec, info, why, whylen);
}

/* ---- the splice ---- */

/* The bit writer: bits are appended at the bottom of acc; whole bytes go out with stuffing. */
struct bitwr {
	uint8_t *o;
	uint64_t acc;
	unsigned n;               /* pending bits in acc, < 32 between calls */
};

static void wr_flush32(struct bitwr *w)
{
	uint32_t x = (uint32_t)(w->acc >> (w->n - 32));

	w->n -= 32;
	if (!has_ff64(x)) {
		x = __builtin_bswap32(x);
		memcpy(w->o, &x, 4);
		w->o += 4;
		return;
	}
	for (int s = 24; s >= 0; s -= 8) {
		uint8_t v = (uint8_t)(x >> s);
		*w->o++ = v;
		if (v == 0xFF)
			*w->o++ = 0;
	}
}

/* Append the low @k bits of @v (k <= 32). */
static inline void wr_put(struct bitwr *w, uint32_t v, unsigned k)
{
	if (!k)
		return;
	w->acc = w->acc << k | (v & (uint32_t)(0xFFFFFFFFull >> (32 - k)));
	w->n += k;
	if (w->n >= 32)
		wr_flush32(w);
}

static void wr_bytes(struct bitwr *w);

/* Pad the last byte with 1-bits and write out what is pending. */
static void wr_finish(struct bitwr *w)
{
	unsigned pad = (8 - (w->n & 7)) & 7;

	wr_put(w, (1u << pad) - 1, pad);
	wr_bytes(w);
}

/* Write out the whole bytes pending in @w, so that fewer than 8 bits remain. */
static void wr_bytes(struct bitwr *w)
{
	while (w->n >= 8) {
		uint8_t v = (uint8_t)(w->acc >> (w->n - 8));
		*w->o++ = v;
		if (v == 0xFF)
			*w->o++ = 0;
		w->n -= 8;
	}
}

/* Append the 8 bytes @v (first at the top) behind the fewer than 8 pending bits of @w: one
 * 64-bit store when no output byte is 0xFF. */
static inline void wr_put64(struct bitwr *w, uint64_t v)
{
	uint64_t out = w->n ? w->acc << (64 - w->n) | v >> w->n : v;

	w->acc = v;  /* its low n bits are the new pending bits */
	if (!has_ff64(out)) {
		out = __builtin_bswap64(out);
		memcpy(w->o, &out, 8);
		w->o += 8;
		return;
	}
	for (int s = 56; s >= 0; s -= 8) {
		uint8_t b = (uint8_t)(out >> s);
		*w->o++ = b;
		if (b == 0xFF)
			*w->o++ = 0;
	}
}

/* Copy the entropy bits from (@a, @abit) to (@e, @ebit) of @rec to @w, stuffing removed. The
 * bytes between go 8 at a time where none is 0xFF. */
static int copy_bits(const uint8_t *rec, size_t a, unsigned abit, size_t e, unsigned ebit,
		     struct bitwr *w, char *why, size_t whylen)
{
	if (a == e) {
		wr_put(w, (uint32_t)(rec[a] >> (8 - ebit)), ebit - abit);
		return 0;
	}
	wr_put(w, rec[a], 8 - abit);
	size_t i = a + (rec[a] == 0xFF ? 2 : 1);
	wr_bytes(w);
	while (i < e) {
		if (i + 8 <= e) {
			uint64_t v = be64(rec + i);
			uint64_t ff = ff_bytes(v);
			if (!ff) {
				wr_put64(w, v);
				i += 8;
				continue;
			}
			/* the bytes before the first 0xFF in one go, then the 0xFF below */
			unsigned k = (unsigned)__builtin_clzll(ff) / 8;
			if (k) {
				uint64_t head = v >> (64 - 8 * k);
				if (k > 4)
					wr_put(w, (uint32_t)(head >> 32), 8 * k - 32);
				wr_put(w, (uint32_t)head, k > 4 ? 32 : 8 * k);
				wr_bytes(w);
				i += k;
			}
		}
		unsigned v = rec[i];
		wr_put(w, v, 8);
		wr_bytes(w);
		if (v != 0xFF) {
			i++;
		} else if (i + 1 < e && rec[i + 1] == 0) {
			i += 2;
		} else {
			return bad(why, whylen, -EBADMSG, "marker inside the scan data");
		}
	}
	if (i != e)
		return bad(why, whylen, -EBADMSG, "index point inside a stuffed byte");
	if (ebit)
		wr_put(w, (uint32_t)(rec[e] >> (8 - ebit)), ebit);
	return 0;
}

/* The DC difference @d coded with @h. -1: the table has no code for its category. */
static int put_dc(struct bitwr *w, const struct cdc_huff *h, int d)
{
	unsigned a = (unsigned)(d < 0 ? -d : d), cat = 0;

	while (a >> cat)
		cat++;
	if (cat > 15 || !h->ehufsi[cat])
		return -1;
	wr_put(w, h->ehufco[cat], h->ehufsi[cat]);
	wr_put(w, (uint32_t)(d < 0 ? d - 1 : d), cat);
	return 0;
}

/* Copy one block from @b to @w; with @dc_pred, re-code its DC difference from the predictions
 * (original, new). */
static int copy_block(struct bitrd *b, struct bitwr *w, const struct cdc_huff *dc,
		      const struct cdc_huff *ac, const int *dc_pred, char *why, size_t whylen)
{
	uint32_t code;
	unsigned len;

	if (b->n < 32)
		rd_fill(b);
	int s = huff_sym(b, dc, &code, &len);
	if (s < 0)
		return bad(why, whylen, -EBADMSG, "bad Huffman code in the scan");
	rd_skip(b, len);
	uint32_t v = rd_peek(b, (unsigned)s);
	rd_skip(b, (unsigned)s);
	if (dc_pred) {
		int dcv = dc_pred[0] + extend(v, (unsigned)s);
		if (put_dc(w, dc, dcv - dc_pred[1]) < 0)
			return bad(why, whylen, -EBADMSG,
				   "DC table has no code for a re-coded difference");
	} else {
		wr_put(w, code, len);
		wr_put(w, v, (unsigned)s);
	}
	for (unsigned k = 1; k < 64; k++) {
		if (b->n < 32)
			rd_fill(b);
		int rs = huff_sym(b, ac, &code, &len);
		if (rs < 0)
			return bad(why, whylen, -EBADMSG, "bad Huffman code in the scan");
		unsigned r = (unsigned)rs >> 4, sz = (unsigned)rs & 15;
		wr_put(w, (uint32_t)(b->acc >> (64 - len - sz)), len + sz);
		rd_skip(b, len + sz);
		if (sz)
			k += r;
		else if (r == 15)
			k += 15;
		else
			break;
	}
	return 0;
}

/* Output bytes a planned row may take beyond twice its bytes of entropy data: the re-coded DC
 * differences (at most 27 bits a component more than the codes they replace), the bits pending
 * from the row before, the partial bytes at both ends, all doubled by stuffing. */
#define ROW_SLACK 40u
/* Output that one block read into the zero bits past its row's data can write before the check
 * after it stops the row: 64 codes of at most 31 bits, stuffing included; the splice's tail
 * (CDC_IDX_SPLICE_TAIL, inside the bound) absorbs it. */
#define BLOCK_OVERRUN 512u
_Static_assert(BLOCK_OVERRUN < CDC_IDX_SPLICE_TAIL, "a block's overrun must land in the tail");

/* One planned row: index points @s to @t; @prev: the point whose predictions the splice's decoder
 * holds at the row's start, or NULL (the first row: zero). The row is refused before any byte is
 * copied when its bits cannot fit before @cap (the splice's end less its tail), and its reader
 * stops at @t's byte, so that an index that lies cannot make the copy run past the buffer. */
static int splice_row(const uint8_t *rec, const struct cdc_idx_info *info,
		      const struct cdc_idx_point *s, const struct cdc_idx_point *t,
		      const struct cdc_idx_point *prev, struct bitwr *w, const uint8_t *cap,
		      char *why, size_t whylen)
{
	uint32_t so = s->bit, to = t->bit;
	size_t at, stop = info->geo.scan_at + ((size_t)to + 7) / 8 + 1;  /* + a stuffed 0x00 */
	unsigned bit;
	struct bitrd b;

	if (to <= so)
		return bad(why, whylen, -EBADMSG, "index points out of order");
	if (w->o > cap || (size_t)(cap - w->o) < 2 * ((size_t)(to - so) / 8) + ROW_SLACK)
		return bad(why, whylen, -EBADMSG, "index rows hold more bits than the scan");
	rd_init(&b, rec, info->geo.scan_at + (so >> 3), so & 7,
		stop < info->eoi_at ? stop : info->eoi_at);
	for (unsigned ci = 0; ci < info->ncomp; ci++) {
		int pr[2] = { s->pred[ci], prev ? prev->pred[ci] : 0 };
		for (unsigned bl = 0; bl < info->nblocks[ci]; bl++) {
			int ret = copy_block(&b, w, info->dc[ci], info->ac[ci], bl ? NULL : pr,
					     why, whylen);
			if (ret < 0)
				return ret;
			if (b.n < b.fake)
				return bad(why, whylen, -EBADMSG,
					   "an MCU runs past the next index point");
		}
	}
	rd_pos(&b, &at, &bit);
	uint64_t off = (uint64_t)(at - info->geo.scan_at) * 8 + bit;
	if (off > to)
		return bad(why, whylen, -EBADMSG, "an MCU runs past the next index point");
	return copy_bits(rec, at, bit, info->geo.scan_at + (to >> 3), to & 7, w, why, whylen);
}

size_t cdc_idx_splice_bound(const struct cdc_idx_info *info, const struct cdc_rst_plan *plan)
{
	/* stuffing may double the copied bytes; each row adds ROW_SLACK (splice_row's check), the
	 * end 4 (the last byte, EOI) */
	return info->geo.scan_at + 2 * (info->eoi_at - info->geo.scan_at) +
	       (size_t)(plan->row1 - plan->row0) * ROW_SLACK + 4 + CDC_IDX_SPLICE_TAIL;
}

long cdc_idx_splice(const uint8_t *rec, const struct cdc_idx_info *info,
		    const struct cdc_rst_plan *plan, uint8_t *out, char *why, size_t whylen)
{
	const struct cdc_rst_info *g = &info->geo;
	uint64_t cols = g->segs_x;

	if (plan->row1 <= plan->row0 || plan->seg_x1 <= plan->seg_x0 || plan->seg_x1 > cols ||
	    plan->row1 > g->mcus_y)
		return bad(why, whylen, -EINVAL, "bad splice plan");
	memcpy(out, rec, g->scan_at);
	out[g->sof_at] = (uint8_t)(plan->h >> 8);
	out[g->sof_at + 1] = (uint8_t)plan->h;
	out[g->sof_at + 2] = (uint8_t)(plan->w >> 8);
	out[g->sof_at + 3] = (uint8_t)plan->w;
	struct bitwr w = { out + g->scan_at, 0, 0 };
	const uint8_t *cap = out + cdc_idx_splice_bound(info, plan) - CDC_IDX_SPLICE_TAIL - 4;
	struct cdc_idx_point ps, pt, prev;
	for (uint32_t r = plan->row0; r < plan->row1; r++) {
		/* the end of the previous row's range is where the splice's predictions stand */
		int ret = cdc_idx_point(rec, info, r, plan->seg_x0, &ps, why, whylen);
		if (ret == 0)
			ret = cdc_idx_point(rec, info, r, plan->seg_x1, &pt, why, whylen);
		if (ret == 0)
			ret = splice_row(rec, info, &ps, &pt, r > plan->row0 ? &prev : NULL, &w,
					 cap, why, whylen);
		if (ret < 0)
			return ret == -EINVAL ? -EBADMSG : ret;
		prev = pt;
	}
	wr_finish(&w);
	*w.o++ = 0xFF;
	*w.o++ = 0xD9;
	memset(w.o, 0, CDC_IDX_SPLICE_TAIL);
	return (long)(w.o + CDC_IDX_SPLICE_TAIL - out);
}
