/* jpeg_idx_build.c - dpack's side of jpeg+idx records (see jpeg_build.h; the layout is in
 * docs/FORMAT.md, "jpeg+idx"): the index pass walks the whole scan once with the Huffman tables
 * (codec/jpeg_hdr.h) and the bit reader (jpeg_bits.h) it shares with loaderd's splice
 * (jpeg_idx.c), and writes the index of MCU bit offsets and DC predictions after the JPEG. A JPEG
 * the index cannot describe as it is goes through the lossless transcode first
 * (jpeg_rst_build.c).
 *
 * dpack's index pass takes an AC code and its extra bits in one step from a 12-bit table
 * (acfast), built only here: the splice decodes one MCU a row and would not repay building it. */
#include "codec/jpeg_bits.h"
#include "codec/jpeg_build.h"
#include "codec/jpeg_hdr.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

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

/* Index the JPEG @jpg[0, len) as it is: -ENOTSUP when it is not indexable as it is. */
static int index_jpeg(const uint8_t *jpg, size_t len, unsigned col_px, struct cdc_idx_info *info,
		      uint8_t **tab, size_t *tablen, char *why, size_t whylen)
{
	int ret = cdc_idx_header(jpg, len, 1, info, why, whylen);

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
