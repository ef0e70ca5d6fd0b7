/* jpeg_rst.c - restart-indexed JPEG records, loaderd's side: parse, plan and splice (see
 * jpeg_rst.h; dpack's lossless rewrite into one is jpeg_rst_build.c).
 *
 * Why a splice works: a restart marker resets the entropy decoder's bit buffer and the DC
 * predictions of every component, so the bytes of a segment decode the same wherever they sit in
 * a scan, provided that the scan's geometry puts the same MCUs in them. Segments here never cross
 * an MCU row (the interval divides the row), so a splice of k segments from each of n rows is
 * itself a valid image of n MCU rows of k x interval MCUs, and its pixels are the record's pixels
 * of that rectangle, except where upsampling looks across the rectangle's edge: the plan adds one
 * MCU of margin there (jpeg_rst.h). The RST markers are renumbered (they count mod 8 from the
 * start of the scan), and the SOF gets the rectangle's size.
 *
 * The segment index is found by scanning the entropy data for markers at decode time rather than
 * stored: memchr over the bytes before the last segment needed costs about 1% of decoding them
 * (measured with callgrind, docs/BENCHMARKS.md), and the markers cannot disagree with an index.
 *
 * What it costs (callgrind, docs/BENCHMARKS.md): libjpeg-turbo decodes every MCU of a scan that
 * has a restart interval on its slow Huffman path (decode_mcu() turns the fast one off whenever
 * cinfo->restart_interval is set), which costs about as many instructions per MCU as skipping the
 * other MCUs saves on ImageNet-sized photographs; on larger images the splice wins. The splice
 * without markers that keeps the fast path is codec/jpeg_idx.c (jpeg+idx, dpack's default now);
 * this kind stays readable for older files and is made by dpack --restart-width. */
#include "codec/jpeg_rst.h"
#include "codec/jpeg_bits.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int cdc_rst_parse(const uint8_t *jpg, size_t len, struct cdc_rst_info *info, char *why,
		  size_t whylen)
{
	size_t pos = 0;
	int have_sof = 0;
	unsigned ncomp = 0, hs[4] = { 0 }, vs[4] = { 0 };

	memset(info, 0, sizeof(*info));
	for (;;) {
		struct cdc_jpeg_seg sg;
		int ret = cdc_jpeg_header_seg(jpg, len, &pos, &sg, why, whylen);
		if (ret < 0)
			return ret;
		unsigned m = sg.m;
		const uint8_t *p = sg.p;
		size_t n = sg.n;  /* payload bytes at p */
		if (m == 0xC0 || m == 0xC1) {  /* baseline or extended, Huffman */
			if (have_sof)
				return bad(why, whylen, -EBADMSG, "two frame headers");
			if (n < 6 || p[0] != 8)
				return bad(why, whylen, -ENOTSUP, "not an 8-bit frame");
			ncomp = p[5];
			if ((ncomp != 1 && ncomp != 3) || n != 6 + 3 * ncomp)
				return bad(why, whylen, -ENOTSUP, "frame is not 1 or 3 components");
			info->height = be16(p + 1);
			info->width = be16(p + 3);
			info->sof_at = (size_t)(p + 1 - jpg);
			if (!info->height || !info->width)
				return bad(why, whylen, -ENOTSUP, "frame without a size (DNL)");
			for (unsigned c = 0; c < ncomp; c++) {
				hs[c] = p[6 + 3 * c + 1] >> 4;
				vs[c] = p[6 + 3 * c + 1] & 15;
				if (hs[c] < 1 || hs[c] > 4 || vs[c] < 1 || vs[c] > 4)
					return bad(why, whylen, -EBADMSG, "bad sampling factor");
				info->hmax = hs[c] > info->hmax ? hs[c] : info->hmax;
				info->vmax = vs[c] > info->vmax ? vs[c] : info->vmax;
			}
			have_sof = 1;
		} else if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
			return bad(why, whylen, -ENOTSUP, "not a baseline Huffman JPEG");
		} else if (m == 0xDD) {
			if (n != 2)
				return bad(why, whylen, -EBADMSG, "bad DRI");
			info->interval = be16(p);
		} else if (m == 0xDA) {
			if (!have_sof)
				return bad(why, whylen, -EBADMSG, "scan before the frame header");
			if (n < 1 || p[0] != ncomp || n != 4 + 2 * (size_t)ncomp)
				return bad(why, whylen, -ENOTSUP, "scan does not hold every component");
			if (p[1 + 2 * ncomp] != 0 || p[2 + 2 * ncomp] != 63 || p[3 + 2 * ncomp] != 0)
				return bad(why, whylen, -ENOTSUP, "not a sequential scan");
			info->scan_at = pos;
			break;
		}
	}
	cdc_jpeg_geometry(info, ncomp);
	if (!info->interval || info->mcus_x % info->interval)
		return bad(why, whylen, -ENOTSUP, "restart interval does not divide the MCU row");
	info->segs_x = info->mcus_x / info->interval;
	return 0;
}

void cdc_rst_plan(const struct cdc_rst_info *info, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
		  struct cdc_rst_plan *plan)
{
	uint32_t mx = info->hmax > 1, my = info->vmax > 1;  /* margin in MCUs */
	uint32_t c0 = x / info->mcu_w, c1 = (x + w + info->mcu_w - 1) / info->mcu_w;
	uint32_t r0 = y / info->mcu_h, r1 = (y + h + info->mcu_h - 1) / info->mcu_h;
	uint32_t seg_w = info->interval * info->mcu_w;

	c0 = c0 > mx ? c0 - mx : 0;
	r0 = r0 > my ? r0 - my : 0;
	c1 = c1 + mx < info->mcus_x ? c1 + mx : info->mcus_x;
	r1 = r1 + my < info->mcus_y ? r1 + my : info->mcus_y;
	plan->row0 = r0;
	plan->row1 = r1;
	plan->seg_x0 = c0 / info->interval;
	plan->seg_x1 = (c1 + info->interval - 1) / info->interval;
	plan->x = plan->seg_x0 * seg_w;
	plan->y = r0 * info->mcu_h;
	plan->w = plan->seg_x1 == info->segs_x ? info->width - plan->x
					       : (plan->seg_x1 - plan->seg_x0) * seg_w;
	plan->h = r1 == info->mcus_y ? info->height - plan->y : (r1 - r0) * info->mcu_h;
	plan->whole = plan->x == 0 && plan->y == 0 && plan->w == info->width &&
		      plan->h == info->height;
}

size_t cdc_rst_splice_bound(size_t len)
{
	return len + 16;
}

/* The end of the segment that starts at @pos: the offset of the RST or EOI marker that ends it,
 * with the marker's second byte in *m; or (size_t)-1 on any other marker or the end of data. */
static size_t segment_end(const uint8_t *jpg, size_t len, size_t pos, unsigned *m)
{
	while (pos < len) {
		const uint8_t *f = memchr(jpg + pos, 0xFF, len - pos);
		if (!f)
			break;
		size_t at = (size_t)(f - jpg);
		size_t k = at + 1;
		while (k < len && jpg[k] == 0xFF)
			k++;  /* fill bytes may precede a marker */
		if (k >= len)
			break;
		if (jpg[k] == 0x00) {  /* a stuffed 0xFF data byte */
			pos = k + 1;
			continue;
		}
		*m = jpg[k];
		return (*m >= 0xD0 && *m <= 0xD7) || *m == 0xD9 ? at : (size_t)-1;
	}
	return (size_t)-1;
}

long cdc_rst_splice(const uint8_t *jpg, size_t len, const struct cdc_rst_info *info,
		    const struct cdc_rst_plan *plan, uint8_t *out, char *why, size_t whylen)
{
	uint64_t total = (uint64_t)info->segs_x * info->mcus_y;
	uint64_t last = ((uint64_t)plan->row1 - 1) * info->segs_x + plan->seg_x1 - 1;
	size_t pos = info->scan_at, o = info->scan_at;
	unsigned emitted = 0;

	if (plan->row1 <= plan->row0 || plan->seg_x1 <= plan->seg_x0 || plan->seg_x1 > info->segs_x ||
	    plan->row1 > info->mcus_y || info->scan_at > len)
		return bad(why, whylen, -EINVAL, "bad splice plan");
	memcpy(out, jpg, info->scan_at);
	out[info->sof_at] = (uint8_t)(plan->h >> 8);
	out[info->sof_at + 1] = (uint8_t)plan->h;
	out[info->sof_at + 2] = (uint8_t)(plan->w >> 8);
	out[info->sof_at + 3] = (uint8_t)plan->w;
	for (uint64_t s = 0; s <= last; s++) {
		unsigned m = 0;
		size_t end = segment_end(jpg, len, pos, &m);
		if (end == (size_t)-1)
			return bad(why, whylen, -EBADMSG, "restart segment not ended by RST or EOI");
		if (s + 1 < total ? m != 0xD0 + (s & 7) : m != 0xD9)
			return bad(why, whylen, -EBADMSG, m == 0xD9 ? "scan ends before its last restart segment"
							     : "restart marker out of sequence");
		uint32_t row = (uint32_t)(s / info->segs_x), col = (uint32_t)(s % info->segs_x);
		if (row >= plan->row0 && col >= plan->seg_x0 && col < plan->seg_x1) {
			if (emitted) {
				out[o++] = 0xFF;
				out[o++] = (uint8_t)(0xD0 + ((emitted - 1) & 7));
			}
			memcpy(out + o, jpg + pos, end - pos);
			o += end - pos;
			emitted++;
		}
		/* past the marker (and the fill bytes before it) */
		pos = end + 1;
		while (jpg[pos] == 0xFF)
			pos++;
		pos++;
	}
	out[o++] = 0xFF;
	out[o++] = 0xD9;
	return (long)o;
}
