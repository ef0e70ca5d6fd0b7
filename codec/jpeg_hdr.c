/* jpeg_hdr.c - what the codec's pack and load sides share about a JPEG (see jpeg_hdr.h): the MCU
 * geometry, the Huffman tables (libjpeg's canonical assignment, a 9-bit lookahead, and the index
 * pass's 12-bit AC table) and the header parse of jpeg+idx, which dpack's index pass
 * (jpeg_idx_build.c) and loaderd's record parser (jpeg_idx.c) both run. */
#include "codec/jpeg_hdr.h"
#include "codec/jpeg_bits.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

void cdc_jpeg_geometry(struct cdc_rst_info *g, unsigned ncomp)
{
	if (ncomp == 1)  /* a non-interleaved scan: the MCU is one block */
		g->hmax = g->vmax = 1;
	g->mcu_w = 8 * g->hmax;
	g->mcu_h = 8 * g->vmax;
	g->mcus_x = (g->width + g->mcu_w - 1) / g->mcu_w;
	g->mcus_y = (g->height + g->mcu_h - 1) / g->mcu_h;
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
	unsigned ncomp, id[CDC_IDX_COMP_MAX], h[CDC_IDX_COMP_MAX], v[CDC_IDX_COMP_MAX];
};

static int parse_sof(const uint8_t *p, size_t n, size_t at, struct cdc_idx_info *info,
		     struct frame *f, char *why, size_t whylen)
{
	if (n < 6 || p[0] != 8)
		return bad(why, whylen, -ENOTSUP, "not an 8-bit frame");
	f->ncomp = p[5];
	if ((f->ncomp != 1 && f->ncomp != 3 && f->ncomp != 4) || n != 6 + 3 * (size_t)f->ncomp)
		return bad(why, whylen, -ENOTSUP, "frame is not 1, 3 or 4 components");
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
int cdc_idx_header(const uint8_t *jpg, size_t len, int fast, struct cdc_idx_info *info, char *why,
		   size_t whylen)
{
	struct frame f = { 0 };
	size_t pos = 0;

	/* not a memset of the whole struct: the tables are large and built only where defined */
	memset(&info->geo, 0, sizeof(info->geo));
	for (unsigned t = 0; t < 8; t++)
		info->huff[t].defined = 0;
	info->ncomp = 0;
	info->fast = fast;
	for (;;) {
		struct cdc_jpeg_seg sg;
		int ret = cdc_jpeg_header_seg(jpg, len, &pos, &sg, why, whylen);
		if (ret < 0)
			return ret;
		unsigned m = sg.m;
		const uint8_t *p = sg.p;
		size_t n = sg.n;  /* payload bytes at p */
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
