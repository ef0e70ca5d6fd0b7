/* kind_bmp.c - Windows bitmaps (DPK_KIND_BMP), stored as they are and decoded to the RGB PIL's
 * convert("RGB") gives: uncompressed 1/4/8-bit palette images (an index past the palette is
 * black), 24-bit BGR, 32-bit BGRX or BGRA (the 4th byte dropped, as for any alpha), bottom-up or
 * top-down. Refused at pack time (-ENOTSUP): RLE compression, 16-bit samples and other bit-field
 * masks, which photographs do not use. Rows are decoded down to the crop's bottom row only. */
#include "codec/kind_image.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct bmp_hdr {
	uint32_t w, h;
	int top_down;
	unsigned bits;
	size_t data;          /* offset of the first stored row */
	size_t pal;           /* offset of the palette */
	unsigned pal_n;       /* entries */
	unsigned pal_step;    /* bytes an entry: 3 (OS/2 core header) or 4 */
};

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static unsigned le16(const uint8_t *p)
{
	return (unsigned)p[0] | (unsigned)p[1] << 8;
}

/* Every field is bounded here, before anything computes with it: the info header inside the
 * file, the sides 1..65535 (an image record's), the bits a pixel one of five, the palette inside
 * the file. Each refusal names the field and its value. */
static int bmp_header(const uint8_t *b, size_t len, struct bmp_hdr *hd, char *why, size_t whylen)
{
	if (len < 2 || b[0] != 'B' || b[1] != 'M')
		return -ENOMSG;
	if (len < 26) {
		snprintf(why, whylen, "BMP header cut short (%zu bytes)", len);
		return -EBADMSG;
	}
	uint32_t hsize = le32(b + 14), comp = 0;
	int64_t sw, sh;

	memset(hd, 0, sizeof(*hd));
	hd->data = le32(b + 10);
	if (hsize != 12 && hsize < 40) {
		snprintf(why, whylen, "BMP info header of %u bytes (12, or 40 and more)", hsize);
		return -EBADMSG;
	}
	if (hsize > len - 14) {
		snprintf(why, whylen, "BMP info header of %u bytes runs past the file's %zu bytes",
			 hsize, len);
		return -EBADMSG;
	}
	if (hsize == 12) {
		sw = le16(b + 18);
		sh = le16(b + 20);
		hd->bits = le16(b + 24);
		hd->pal_step = 3;
	} else {
		sw = (int32_t)le32(b + 18);
		sh = (int32_t)le32(b + 22);
		hd->bits = le16(b + 28);
		comp = le32(b + 30);
		hd->pal_n = le32(b + 46);
		hd->pal_step = 4;
	}
	hd->top_down = sh < 0;
	sh = sh < 0 ? -sh : sh;  /* int64_t: INT32_MIN negates */
	if (sw < 1 || sw > 65535) {
		snprintf(why, whylen, "BMP width %lld (1..65535)", (long long)sw);
		return -EBADMSG;
	}
	if (sh < 1 || sh > 65535) {
		snprintf(why, whylen, "BMP height %lld (1..65535)", (long long)sh);
		return -EBADMSG;
	}
	hd->w = (uint32_t)sw;
	hd->h = (uint32_t)sh;
	hd->pal = 14 + (size_t)hsize;
	if (comp == 3 && hd->bits == 32) {
		/* Bit fields: only the byte-aligned BGR(X|A) masks, the same pixels as uncompressed. */
		size_t m = 14 + 40;  /* after a 40-byte header, or inside a longer one */
		if (len < m + 12 || le32(b + m) != 0xFF0000 || le32(b + m + 4) != 0xFF00 ||
		    le32(b + m + 8) != 0xFF) {
			snprintf(why, whylen, "BMP bit-field masks other than BGRX");
			return -ENOTSUP;
		}
		comp = 0;
	}
	if (comp != 0) {
		snprintf(why, whylen, "BMP compression %u (only uncompressed)", comp);
		return -ENOTSUP;
	}
	if (hd->bits != 1 && hd->bits != 4 && hd->bits != 8 && hd->bits != 24 && hd->bits != 32) {
		snprintf(why, whylen, "BMP at %u bits a pixel (only 1, 4, 8, 24, 32)", hd->bits);
		return -ENOTSUP;
	}
	/* a colour count of 0 or above 2^bits: the 2^bits entries a pixel can index */
	if (hd->bits <= 8 && (hd->pal_n == 0 || hd->pal_n > (1u << hd->bits)))
		hd->pal_n = 1u << hd->bits;
	if (hd->bits > 8)
		hd->pal_n = 0;
	if ((size_t)hd->pal_n * hd->pal_step > len - hd->pal) {
		snprintf(why, whylen, "BMP palette of %u entries cut short (%zu bytes after the header)",
			 hd->pal_n, len - hd->pal);
		return -EBADMSG;
	}
	return 0;
}

static size_t bmp_stride(const struct bmp_hdr *hd)
{
	return (((size_t)hd->w * hd->bits + 31) / 32) * 4;
}

/* Stored rows available from the data offset. */
static size_t bmp_rows_in(const struct bmp_hdr *hd, size_t len)
{
	size_t stride = bmp_stride(hd);  /* >= 4: bmp_header bounds the width and the bits */

	return hd->data >= len || !stride ? 0 : (len - hd->data) / stride;
}

static int bmp_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	struct bmp_hdr hd;
	int ret = bmp_header(buf, len, &hd, why, whylen);

	if (ret < 0)
		return ret;
	ret = cdc_image_record(DPK_KIND_BMP, hd.w, hd.h, r, why, whylen);
	if (ret == 0 && bmp_rows_in(&hd, len) < hd.h) {
		snprintf(why, whylen, "BMP cut short: %zu of %u rows", bmp_rows_in(&hd, len), hd.h);
		return -EBADMSG;
	}
	return ret;
}

static int bmp_pixels(const uint8_t *src, size_t len, uint32_t w, uint32_t h, uint32_t rows,
		      uint8_t *rgb, char *why, size_t whylen)
{
	struct bmp_hdr hd;
	uint8_t pal[256][3];

	if (bmp_header(src, len, &hd, why, whylen) < 0)
		return -EBADMSG;
	if (hd.w != w || hd.h != h || bmp_rows_in(&hd, len) < h) {
		snprintf(why, whylen, "BMP is %u x %u (%zu rows stored), the index says %u x %u", hd.w,
			 hd.h, bmp_rows_in(&hd, len), w, h);
		return -EBADMSG;
	}
	memset(pal, 0, sizeof(pal));
	for (unsigned i = 0; i < hd.pal_n; i++)
		for (int c = 0; c < 3; c++)
			pal[i][c] = src[hd.pal + (size_t)i * hd.pal_step + 2 - c];
	size_t stride = bmp_stride(&hd);
	for (uint32_t y = 0; y < rows; y++) {
		const uint8_t *in = src + hd.data + (hd.top_down ? y : h - 1 - y) * stride;
		uint8_t *out = rgb + (size_t)y * w * 3;
		for (uint32_t x = 0; x < w; x++) {
			unsigned i;
			switch (hd.bits) {
			case 24:
			case 32: {
				const uint8_t *p = in + (size_t)x * (hd.bits / 8);
				out[3 * x] = p[2];
				out[3 * x + 1] = p[1];
				out[3 * x + 2] = p[0];
				continue;
			}
			case 8: i = in[x]; break;
			case 4: i = (in[x / 2] >> (x % 2 ? 0 : 4)) & 15; break;
			default: i = (in[x / 8] >> (7 - x % 8)) & 1; break;
			}
			memcpy(out + 3 * x, pal[i], 3);
		}
	}
	return 0;
}

static int bmp_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		      const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		      size_t whylen)
{
	return cdc_image_decode(bmp_pixels, d, e, src, crop, o, dst, why, whylen);
}

static int bmp_repack(const uint8_t *buf, size_t len, const struct cdc_repack_opts *opt,
		       struct dpk_record *r, uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	(void)opt;
	return cdc_image_check(bmp_pixels, buf, len, r, out, outlen, why, whylen);
}

static const char *const bmp_exts[] = { ".bmp", NULL };

const struct cdc_kind_pack cdc_bmp_pack = {
	.exts = bmp_exts,
	.probe = bmp_probe,
	.repack = bmp_repack,
};

const struct cdc_kind_load cdc_bmp_load = {
	.accepts = cdc_image_accepts,
	.decode = bmp_decode,
};
