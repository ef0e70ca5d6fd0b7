/* jpeg_idx.c - bit-indexed JPEG records, loaderd's side: the record parser and the splice (see
 * jpeg_idx.h; the layout is in docs/FORMAT.md, "jpeg+idx"; dpack's index pass that makes them is
 * jpeg_idx_build.c, the header parse, Huffman tables and bit reader both use are jpeg_hdr.c and
 * jpeg_bits.h).
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
#include "codec/jpeg_bits.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

static int unzigzag(uint32_t u)
{
	return u & 1 ? -(int)(u >> 1) - 1 : (int)(u >> 1);
}

/* ---- the record ---- */

/* Some component's prediction is not 0 (the unused ones are). */
static int any_pred(const int pred[CDC_IDX_COMP_MAX])
{
	int any = 0;

	for (unsigned c = 0; c < CDC_IDX_COMP_MAX; c++)
		any |= pred[c];
	return any != 0;
}

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
		      const struct cdc_idx_info *info, int first, uint64_t *off, int *pred, char *why,
		      size_t whylen)
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
		int pred[CDC_IDX_COMP_MAX] = { 0 };
		for (uint32_t j = 0; j < n; j++) {
			int ret = next_point(rec, &p, end, info, j == 0, &off, pred, why, whylen);
			if (ret < 0)
				return ret;
			if (r == 0 && j == 0) {
				if (off || any_pred(pred))
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
	int pred[CDC_IDX_COMP_MAX] = { 0 };
	for (uint32_t i = 0; i <= j; i++) {
		int ret = next_point(rec, &p, end, info, i == 0, &off, pred, why, whylen);
		if (ret < 0)
			return ret;
	}
	if (r == 0 && j == 0 && (off || any_pred(pred)))
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
	int ret = cdc_idx_header(rec, jpeg_len, 0, info, tmp, sizeof(tmp));
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
 * differences (at most 27 bits a component more than the codes they replace, 4 components:
 * 108 bits), the bits pending from the row before (< 32), the partial bytes at both ends, all
 * doubled by stuffing: 2 x (139 / 8 + 3) < 48. */
#define ROW_SLACK 48u
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
