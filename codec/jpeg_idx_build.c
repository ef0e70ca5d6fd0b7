/* jpeg_idx_build.c - dpack's side of jpeg+idx records (see jpeg_build.h; the layout is in
 * docs/FORMAT.md, "jpeg+idx"): the index pass walks the whole scan once with the Huffman tables
 * (codec/jpeg_hdr.h) and the bit reader (jpeg_bits.h) it shares with loaderd's splice
 * (jpeg_idx.c), and writes the index of MCU bit offsets and DC predictions after the JPEG. A JPEG
 * the index cannot describe as it is goes through the lossless transcode first
 * (jpeg_rst_build.c), and its index is then counted from the DCT coefficients the transcode
 * encoded (index_coefs), not walked from the bits it wrote: the same points, a tenth of the work.
 *
 * dpack's index pass takes an AC code and its extra bits in one step from a 12-bit table
 * (acfast), built only here: the splice decodes one MCU a row and would not repay building it. */
#include "codec/jpeg_bits.h"
#include "codec/jpeg_build.h"
#include "codec/jpeg_hdr.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Every DC category of 8-bit data (0..11) has a code: any DC difference can be re-coded. */
static int dc_complete(const struct cdc_huff *h)
{
	for (unsigned s = 0; s <= 11; s++)
		if (!h->ehufsi[s])
			return 0;
	return 1;
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

/* ---- the index pass (dpack) ---- */

/* Append index point @k at the reader's position with predictions @pred. */
static int put_point(uint8_t *tab, uint32_t k, const struct cdc_idx_info *info,
		     const struct bitrd *b, const int *pred)
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

/* The offset just past the EOI that ends the scan at byte @at, or 0 when the scan is followed by
 * anything else (another scan: -ENOTSUP for the caller). */
static size_t scan_end_at(const uint8_t *jpg, size_t len, size_t at)
{
	for (size_t q = at; q + 1 < len; q++) {
		if (jpg[q] != 0xFF || jpg[q + 1] == 0x00)
			continue;
		while (q + 1 < len && jpg[q + 1] == 0xFF)
			q++;
		return q + 1 < len && jpg[q + 1] == 0xD9 ? q + 2 : 0;
	}
	return 0;
}

/* scan_end_at() the reader's position. */
static size_t scan_end(const uint8_t *jpg, size_t len, const struct bitrd *b)
{
	size_t at;
	unsigned bit;

	rd_pos(b, &at, &bit);
	return scan_end_at(jpg, len, at);
}

/* Walk the whole scan of the parsed JPEG @jpg[0, len), writing its index into *tab (malloc). */
static int index_scan(const uint8_t *jpg, size_t len, struct cdc_idx_info *info, uint8_t **tab,
		      size_t *tablen, char *why, size_t whylen)
{
	const struct cdc_rst_info *g = &info->geo;
	uint32_t K = g->interval, cols = g->segs_x, k = 0;
	uint64_t np = (uint64_t)g->mcus_y * cols + 1;
	int pred[CDC_IDX_COMP_MAX] = { 0 };
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

/* Parse the JPEG @jpg[0, len) into @info (the acfast tables when @fast) with index columns of
 * about @col_px: -ENOTSUP when it is not indexable as it is. */
static int index_geo(const uint8_t *jpg, size_t len, unsigned col_px, int fast,
		     struct cdc_idx_info *info, char *why, size_t whylen)
{
	int ret = cdc_idx_header(jpg, len, fast, info, why, whylen);

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
	return 0;
}

/* Index the JPEG @jpg[0, len) as it is: -ENOTSUP when it is not indexable as it is. */
static int index_jpeg(const uint8_t *jpg, size_t len, unsigned col_px, struct cdc_idx_info *info,
		      uint8_t **tab, size_t *tablen, char *why, size_t whylen)
{
	int ret = index_geo(jpg, len, col_px, 1, info, why, whylen);

	return ret < 0 ? ret : index_scan(jpg, len, info, tab, tablen, why, whylen);
}

/* ---- the index of a transcode, from its coefficients ---- */

/* The natural-order position of each zigzag index (libjpeg's jpeg_natural_order). */
static const uint8_t zz_natural[64] = {
	0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
	12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
};

/* Bits of a value of magnitude @a (JPEG's category). */
static unsigned nbits(unsigned a)
{
	return a ? 32u - (unsigned)__builtin_clz(a) : 0;
}

/* zz_bits[i][b]: the zigzag positions (as bits of a mask) of the natural positions 8i..8i+7 set
 * in @b, so that a block's nonzero mask in natural order becomes one in zigzag order in 8 loads. */
static uint64_t zz_bits[8][256];
static pthread_once_t zz_once = PTHREAD_ONCE_INIT;

static void zz_init(void)
{
	uint8_t zz_of[64];

	for (unsigned k = 0; k < 64; k++)
		zz_of[zz_natural[k]] = (uint8_t)k;
	for (unsigned i = 0; i < 8; i++)
		for (unsigned b = 0; b < 256; b++)
			for (unsigned t = 0; t < 8; t++)
				if (b >> t & 1)
					zz_bits[i][b] |= 1ull << zz_of[8 * i + t];
}

/* Bit i set where coefficient i of @c (natural order) is not zero. */
static uint64_t nonzero_mask(const int16_t *c)
{
#ifdef __SSE2__
	const __m128i z = _mm_setzero_si128();
	uint64_t m = 0;

	for (unsigned i = 0; i < 64; i += 16) {
		__m128i a = _mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *)(const void *)(c + i)), z);
		__m128i b = _mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *)(const void *)(c + i + 8)), z);
		m |= (uint64_t)(uint16_t)~_mm_movemask_epi8(_mm_packs_epi16(a, b)) << i;
	}
	return m;
#else
	uint64_t m = 0;

	for (unsigned i = 0; i < 64; i++)
		m |= (uint64_t)(c[i] != 0) << i;
	return m;
#endif
}

/* The bits block @c (natural order) takes in a baseline scan with code lengths @dsi, @asi (as
 * libjpeg's encode_one_block codes it), DC prediction *pred (updated). Only the nonzero AC
 * coefficients are visited, in zigzag order, from a mask. BLOCK_UNCODABLE when a symbol has no
 * code (a DC difference past category 11, an AC value past 10 bits: coefficients a damaged
 * progressive file can hold): libjpeg writes such a symbol with no code bits, a scan that no
 * decoder can walk, so it must not be indexed as if it could. */
#define BLOCK_UNCODABLE UINT64_MAX
static uint64_t block_bits(const int16_t *c, int *pred, const uint8_t *dsi, const uint8_t *asi)
{
	int diff = c[0] - *pred;
	unsigned s = nbits((unsigned)(diff < 0 ? -diff : diff)), last = 0;
	if (s > 15 || !dsi[s])
		return BLOCK_UNCODABLE;
	uint64_t bits = dsi[s] + s, n = nonzero_mask(c), m = 0;

	*pred = c[0];
	for (unsigned i = 0; i < 8; i++)
		m |= zz_bits[i][(n >> (8 * i)) & 0xFF];
	for (m &= ~1ull; m; m &= m - 1) {
		unsigned k = (unsigned)__builtin_ctzll(m), r = k - last - 1;
		int v = c[zz_natural[k]];
		for (; r > 15; r -= 16) {
			if (!asi[0xF0])
				return BLOCK_UNCODABLE;
			bits += asi[0xF0];
		}
		s = nbits((unsigned)(v < 0 ? -v : v));
		if (s > 15 || !asi[(r << 4) + s])
			return BLOCK_UNCODABLE;
		bits += asi[(r << 4) + s] + s;
		last = k;
	}
	if (last != 63) {
		if (!asi[0x00])
			return BLOCK_UNCODABLE;
		bits += asi[0x00];
	}
	return bits;
}

/* What index_coefs() needs beside the transcode's output. */
struct coefs_job {
	unsigned col_px;
	struct cdc_idx_info *info;
	uint8_t **tab;
	size_t *tablen;
	char *why;
	size_t whylen;
};

/* Advance *pos (a byte of the scan) and *j (its index with the stuffing taken out) to unstuffed
 * byte @J, stepping over the 0x00 after each 0xFF; stops at @len. */
static void stuffed_seek(const uint8_t *jpg, size_t len, size_t *pos, uint64_t *j, uint64_t J)
{
	while (*j < J && *pos < len) {
		size_t left = len - *pos < J - *j ? len - *pos : (size_t)(J - *j);
		const uint8_t *ff = memchr(jpg + *pos, 0xFF, left);
		if (!ff) {
			*pos += left;
			*j += left;
			continue;
		}
		size_t d = (size_t)(ff - (jpg + *pos));
		*pos += d + 2;
		*j += d + 1;
	}
}

/* @fn of cdc_jpeg_transcode_coefs(): the index of the transcode @jpg[0, len), counted from its
 * coefficients @c into *job->tab: what index_scan() finds walking it, since the scan was coded
 * from these coefficients with these tables (tests/test_jpeg_idx.c compares the two). A geometry
 * that is not what the loop below assumes is walked instead. */
static int index_coefs(void *arg, const uint8_t *jpg, size_t len, const struct cdc_coefs *c)
{
	struct coefs_job *job = arg;
	struct cdc_idx_info *info = job->info;
	int ret = index_geo(jpg, len, job->col_px, 0, info, job->why, job->whylen);

	if (ret < 0)
		return ret;
	const struct cdc_rst_info *g = &info->geo;
	int ok = c->ncomp == info->ncomp;
	for (unsigned ci = 0; ok && ci < c->ncomp; ci++) {
		if (c->ncomp == 1)
			ok = c->wblocks[0] == g->mcus_x && c->hblocks[0] == g->mcus_y;
		else
			ok = c->v[ci] <= 4 && c->h[ci] * c->v[ci] == info->nblocks[ci] &&
			     c->wblocks[ci] <= g->mcus_x * c->h[ci] &&
			     c->hblocks[ci] <= g->mcus_y * c->v[ci];
	}
	if (!ok) {
		ret = index_geo(jpg, len, job->col_px, 1, info, job->why, job->whylen);
		return ret < 0 ? ret : index_scan(jpg, len, info, job->tab, job->tablen, job->why,
						  job->whylen);
	}
	uint32_t K = g->interval, k = 0;
	uint64_t np = (uint64_t)g->mcus_y * g->segs_x + 1, u = 0, j = 0;
	size_t pos = g->scan_at;
	int pred[CDC_COEFS_MAX] = { 0 };
	const uint8_t *dsi[CDC_COEFS_MAX], *asi[CDC_COEFS_MAX];
	const int16_t *rows[CDC_COEFS_MAX][4];  /* the MCU row's block rows (v <= 4) */

	if (np * info->entry_size > UINT32_MAX)
		return bad(job->why, job->whylen, -ENOTSUP, "index too large");
	uint8_t *tab = malloc(np * info->entry_size);
	if (!tab)
		return bad(job->why, job->whylen, -ENOMEM, "out of memory for the index");
	pthread_once(&zz_once, zz_init);
	for (unsigned ci = 0; ci < c->ncomp; ci++) {
		dsi[ci] = info->dc[ci]->ehufsi;
		asi[ci] = info->ac[ci]->ehufsi;
	}
	for (uint32_t r = 0; r <= g->mcus_y; r++) {
		for (uint32_t mc = 0; mc < g->mcus_x; mc++) {
			if (mc % K == 0 || r == g->mcus_y) {
				/* a point: unstuffed bit @u, where index_scan's reader stands */
				stuffed_seek(jpg, len, &pos, &j, u >> 3);
				uint64_t off = (uint64_t)(pos - g->scan_at) * 8 + (u & 7);
				if (j != u >> 3 || off > UINT32_MAX) {
					free(tab);
					return bad(job->why, job->whylen, -ENOTSUP,
						   "scan too large for the index");
				}
				uint8_t *e = tab + (size_t)k++ * info->entry_size;
				put_le32(e, (uint32_t)off);
				for (unsigned ci = 0; ci < info->ncomp; ci++)
					put_le16(e + 4 + 2 * ci, (unsigned)pred[ci] & 0xFFFF);
				if (r == g->mcus_y)
					break;
			}
			if (mc == 0) {  /* the MCU row's block rows */
				for (unsigned ci = 0; ci < c->ncomp; ci++) {
					unsigned v = c->ncomp == 1 ? 1 : c->v[ci];
					for (unsigned y = 0; y < v; y++) {
						uint32_t br = r * v + y;
						rows[ci][y] = br < c->hblocks[ci] ? c->row(c, ci, br)
										 : NULL;
					}
				}
			}
			for (unsigned ci = 0; ci < c->ncomp; ci++) {
				unsigned h = c->ncomp == 1 ? 1 : c->h[ci];
				unsigned v = c->ncomp == 1 ? 1 : c->v[ci];
				for (unsigned y = 0; y < v; y++) {
					for (unsigned x = 0; x < h; x++) {
						uint32_t bc = mc * h + x;
						uint64_t b = dsi[ci][0] + asi[ci][0x00];
						/* else libjpeg's dummy block: the DC before, no AC */
						if (rows[ci][y] && bc < c->wblocks[ci])
							b = block_bits(rows[ci][y] + (size_t)bc * 64,
								       &pred[ci], dsi[ci], asi[ci]);
						if (b == BLOCK_UNCODABLE) {
							free(tab);
							return bad(job->why, job->whylen, -EBADMSG,
								   "a coefficient out of baseline's range "
								   "(damaged scan)");
						}
						u += b;
					}
				}
				if (pred[ci] < -32768 || pred[ci] > 32767) {
					free(tab);
					return bad(job->why, job->whylen, -EBADMSG,
						   "bad Huffman code or DC value in the scan");
				}
			}
		}
	}
	info->npoints = k;
	info->jpeg_len = scan_end_at(jpg, len, pos);
	if (!info->jpeg_len) {
		free(tab);
		return bad(job->why, job->whylen, -ENOTSUP,
			   "the scan is not followed by EOI (several scans?)");
	}
	*job->tab = tab;
	*job->tablen = np * info->entry_size;
	return 0;
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
		/* not indexable as it is: baseline with the standard tables, indexed from the
		 * coefficients it was coded from */
		struct coefs_job job = { col_px, info, &tab, &tablen, why, whylen };
		ret = cdc_jpeg_transcode_coefs(jpg, len, &tc, &tclen, index_coefs, &job, why, whylen);
		if (ret == 0)
			jpg = tc;
	}
	if (ret == -ENOTSUP) {  /* e.g. 2 components: stored as it is */
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
		r->kind = info->ncomp == 4 ? DPK_KIND_JPEG_IDX_CMYK : DPK_KIND_JPEG_IDX;
		r->flags &= (uint8_t)~DPK_F_PROGRESSIVE;
	}
out:
	free(tab);
	free(tc);
	free(info);
	return ret;
}
