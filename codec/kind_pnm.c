/* kind_pnm.c - binary Netpbm records (DPK_KIND_PNM): PBM (P4), PGM (P5) and PPM (P6) with maxval
 * 1..255, stored as they are and decoded to the RGB PIL's convert("RGB") gives: samples scaled to
 * 0..255 as round(v / maxval * 255) (ties to even, Python's round), a PBM's 1 bits black. The
 * plain (text) forms P1..P3 and 16-bit samples are refused at pack time (-ENOTSUP): rare, and PIL
 * opens 16-bit grey as integers that it then clips, not scales. Rows are decoded down to the
 * crop's bottom row only. */
#include "codec/kind_image.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

struct pnm_hdr {
	unsigned type;        /* 4, 5 or 6 */
	uint32_t w, h, maxval;
	size_t data;          /* offset of the first sample */
};

/* One decimal token after whitespace and '#' comments (to the end of their line). */
static int token(const uint8_t *b, size_t len, size_t *pos, uint32_t *out)
{
	size_t i = *pos;
	uint64_t v = 0;

	for (;;) {
		while (i < len && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r' ||
				   b[i] == '\v' || b[i] == '\f'))
			i++;
		if (i < len && b[i] == '#') {
			while (i < len && b[i] != '\n' && b[i] != '\r')
				i++;
			continue;
		}
		break;
	}
	size_t start = i;
	while (i < len && b[i] >= '0' && b[i] <= '9' && v <= 0xFFFFFFFFu)
		v = v * 10 + (b[i++] - '0');
	if (i == start || v > 0xFFFFFFFFu)
		return -1;
	*out = (uint32_t)v;
	*pos = i;
	return 0;
}

/* Returns 0, -ENOMSG (not Netpbm), -ENOTSUP or -EBADMSG with @why. */
static int pnm_header(const uint8_t *b, size_t len, struct pnm_hdr *hd, char *why, size_t whylen)
{
	size_t pos = 2;

	if (len < 2 || b[0] != 'P' || b[1] < '1' || b[1] > '7')
		return -ENOMSG;
	hd->type = (unsigned)(b[1] - '0');
	if (hd->type < 4 || hd->type > 6) {
		snprintf(why, whylen, "Netpbm P%u (only the binary P4, P5, P6)", hd->type);
		return -ENOTSUP;
	}
	hd->maxval = 1;
	if (token(b, len, &pos, &hd->w) < 0 || token(b, len, &pos, &hd->h) < 0 ||
	    (hd->type != 4 && token(b, len, &pos, &hd->maxval) < 0) || pos >= len) {
		snprintf(why, whylen, "Netpbm P%u header damaged or cut short", hd->type);
		return -EBADMSG;
	}
	/* the sides bounded before the row size is computed from the width (and divides) */
	if (hd->w == 0 || hd->w > 65535) {
		snprintf(why, whylen, "Netpbm width %u (1..65535)", hd->w);
		return -EBADMSG;
	}
	if (hd->h == 0 || hd->h > 65535) {
		snprintf(why, whylen, "Netpbm height %u (1..65535)", hd->h);
		return -EBADMSG;
	}
	if (hd->maxval == 0 || hd->maxval > 65535) {
		snprintf(why, whylen, "Netpbm maxval %u (1..65535)", hd->maxval);
		return -EBADMSG;
	}
	if (hd->maxval > 255) {
		snprintf(why, whylen, "Netpbm maxval %u: 16-bit samples (only 8-bit)", hd->maxval);
		return -ENOTSUP;
	}
	hd->data = pos + 1;  /* one whitespace byte ends the header */
	return 0;
}

/* >= 1: pnm_header bounds the width */
static size_t row_bytes(const struct pnm_hdr *hd)
{
	return hd->type == 4 ? ((size_t)hd->w + 7) / 8 : (size_t)hd->w * (hd->type == 6 ? 3 : 1);
}

static int pnm_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	struct pnm_hdr hd;
	int ret = pnm_header(buf, len, &hd, why, whylen);

	if (ret < 0)
		return ret;
	ret = cdc_image_record(DPK_KIND_PNM, hd.w, hd.h, r, why, whylen);
	if (ret == 0 && (len - hd.data) / row_bytes(&hd) < hd.h) {
		snprintf(why, whylen, "Netpbm P%u cut short: %zu bytes of samples for %u x %u",
			 hd.type, len - hd.data, hd.w, hd.h);
		return -EBADMSG;
	}
	return ret;
}

static int pnm_pixels(const uint8_t *src, size_t len, uint32_t w, uint32_t h, uint32_t rows,
		      uint8_t *rgb, char *why, size_t whylen)
{
	struct pnm_hdr hd;
	uint8_t lut[256];

	if (pnm_header(src, len, &hd, why, whylen) < 0)
		return -EBADMSG;
	if (hd.w != w || hd.h != h) {
		snprintf(why, whylen, "Netpbm is %u x %u, the index says %u x %u", hd.w, hd.h, w, h);
		return -EBADMSG;
	}
	size_t rb = row_bytes(&hd);
	if ((len - hd.data) / rb < rows) {
		snprintf(why, whylen, "Netpbm cut short at row %zu of %u", (len - hd.data) / rb, h);
		return -EBADMSG;
	}
	for (unsigned v = 0; v < 256; v++) {
		double s = nearbyint((double)v / hd.maxval * 255.0);  /* ties to even, as Python */
		lut[v] = s > 255 ? 255 : (uint8_t)s;
	}
	for (uint32_t y = 0; y < rows; y++) {
		const uint8_t *in = src + hd.data + y * rb;
		uint8_t *out = rgb + (size_t)y * w * 3;
		for (uint32_t x = 0; x < w; x++) {
			if (hd.type == 4) {
				out[3 * x] = out[3 * x + 1] = out[3 * x + 2] =
					(in[x / 8] >> (7 - x % 8)) & 1 ? 0 : 255;
			} else if (hd.type == 5) {
				out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = lut[in[x]];
			} else {
				for (int c = 0; c < 3; c++)
					out[3 * x + c] = lut[in[3 * x + c]];
			}
		}
	}
	return 0;
}

static int pnm_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		      const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		      size_t whylen)
{
	return cdc_image_decode(pnm_pixels, d, e, src, crop, o, dst, why, whylen);
}

static int pnm_repack(const uint8_t *buf, size_t len, const struct cdc_repack_opts *opt,
		       struct dpk_record *r, uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	(void)opt;
	return cdc_image_check(pnm_pixels, buf, len, r, out, outlen, why, whylen);
}

static const char *const pnm_exts[] = { ".ppm", ".pgm", ".pbm", ".pnm", NULL };

const struct cdc_kind_pack cdc_pnm_pack = {
	.exts = pnm_exts,
	.probe = pnm_probe,
	.repack = pnm_repack,
};

const struct cdc_kind_load cdc_pnm_load = {
	.accepts = cdc_image_accepts,
	.decode = pnm_decode,
};
