/* kind_png.c - PNG records (DPK_KIND_PNG): the file as it was, decoded with libpng to the RGB
 * that PIL's Image.open(f).convert("RGB") gives, which is what torchvision's ImageFolder trains
 * on: 16-bit samples keep their high byte (PIL's "RGB;16B", "LA;16B"), except 16-bit grey, which
 * PIL opens as 32-bit integers and clips at 255 on the way to RGB; alpha (a channel or tRNS) is
 * dropped; palettes are looked up; 1/2/4-bit grey is scaled to 0..255; no gamma is applied.
 * A non-interlaced PNG is decoded down to the crop's bottom row only.
 * libpng, not libspng: measured faster on the same photographs (docs/BENCHMARKS.md). */
#include "codec/kind_image.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

static const uint8_t png_sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The signature, then IHDR (13 bytes of data) first: width and height from it. */
static int png_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	if (len < 8 || memcmp(buf, png_sig, 8) != 0)
		return -ENOMSG;
	if (len < 33 || be32(buf + 8) != 13 || memcmp(buf + 12, "IHDR", 4) != 0) {
		snprintf(why, whylen, "PNG without an IHDR chunk first (%zu bytes)", len);
		return -EBADMSG;
	}
	unsigned depth = buf[24], ct = buf[25];
	if (ct > 6 || ct == 1 || ct == 5 || !depth || depth > 16 || (depth & (depth - 1))) {
		snprintf(why, whylen, "PNG colour type %u at %u bits is not a valid one", ct, depth);
		return -EBADMSG;
	}
	return cdc_image_record(DPK_KIND_PNG, be32(buf + 16), be32(buf + 20), r, why, whylen);
}

struct png_src {
	const uint8_t *p;
	size_t len, off;
	char *why;
	size_t whylen;
	jmp_buf jb;
};

static void read_mem(png_structp png, png_bytep out, size_t n)
{
	struct png_src *s = png_get_io_ptr(png);

	if (n > s->len - s->off)
		png_error(png, "file cut short");
	memcpy(out, s->p + s->off, n);
	s->off += n;
}

static void on_error(png_structp png, png_const_charp msg)
{
	struct png_src *s = png_get_error_ptr(png);

	snprintf(s->why, s->whylen, "PNG: %s", msg);
	longjmp(s->jb, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
	/* PIL decodes past what libpng warns of too (e.g. a bad CRC in an ancillary chunk) */
	(void)png, (void)msg;
}

/* 16-bit grey as PIL converts it: mode "I", clipped to 0..255, replicated. In place, row by row
 * from the end of the row (2 bytes a pixel become 3). */
static void grey16_row(uint8_t *row, uint32_t w)
{
	for (uint32_t x = w; x-- > 0;) {
		unsigned v = (unsigned)row[2 * x] << 8 | row[2 * x + 1];
		uint8_t g = v > 255 ? 255 : (uint8_t)v;
		row[3 * x] = row[3 * x + 1] = row[3 * x + 2] = g;
	}
}

static int png_pixels(const uint8_t *src, size_t len, uint32_t w, uint32_t h, uint32_t rows,
		      uint8_t *rgb, char *why, size_t whylen)
{
	struct png_src s = { .p = src, .len = len, .why = why, .whylen = whylen };
	png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, on_error, on_warning);
	png_infop info = png ? png_create_info_struct(png) : NULL;
	int ret = -EBADMSG;

	if (!info) {
		snprintf(why, whylen, "PNG: out of memory");
		png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
		return -ENOMEM;
	}
	if (setjmp(s.jb))
		goto out;
	png_set_read_fn(png, &s, read_mem);
	/* The index's size bounds @rgb; the header must say the same (checked below, before any
	 * row is read), and libpng's own row buffers stay within an image record's sides. */
	png_set_user_limits(png, 65535, 65535);
	png_read_info(png, info);
	if (png_get_image_width(png, info) != w || png_get_image_height(png, info) != h) {
		snprintf(why, whylen, "PNG is %u x %u, the index says %u x %u",
			 png_get_image_width(png, info), png_get_image_height(png, info), w, h);
		goto out;
	}
	int ct = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
	int grey16 = ct == PNG_COLOR_TYPE_GRAY && depth == 16;

	if (ct == PNG_COLOR_TYPE_PALETTE) {
		png_set_palette_to_rgb(png);   /* also turns tRNS into alpha, stripped below */
		png_set_strip_alpha(png);
	} else if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) {
		png_set_expand_gray_1_2_4_to_8(png);
	}
	if (!grey16) {
		png_set_strip_16(png);         /* the high byte, as PIL's ;16B raw modes */
		if (ct & PNG_COLOR_MASK_ALPHA)
			png_set_strip_alpha(png);
		if (!(ct & PNG_COLOR_MASK_COLOR))
			png_set_gray_to_rgb(png);
	}
	int passes = png_set_interlace_handling(png);
	png_read_update_info(png, info);
	size_t rowbytes = png_get_rowbytes(png, info);
	if (rowbytes != (size_t)w * (grey16 ? 2 : 3)) {
		snprintf(why, whylen, "PNG: %zu bytes a row after conversion, not %u x 3", rowbytes, w);
		goto out;
	}
	/* An interlaced image's rows fill in over all its passes: each pass goes to the bottom. */
	uint32_t last = passes > 1 ? h : rows;
	for (int p = 0; p < passes; p++)
		for (uint32_t y = 0; y < last; y++)
			png_read_row(png, rgb + (size_t)y * w * 3, NULL);
	if (grey16)
		for (uint32_t y = 0; y < last; y++)
			grey16_row(rgb + (size_t)y * w * 3, w);
	ret = 0;
out:
	png_destroy_read_struct(&png, &info, NULL);
	return ret;
}

static int png_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		      const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		      size_t whylen)
{
	return cdc_image_decode(png_pixels, d, e, src, crop, o, dst, why, whylen);
}

static int png_repack(const uint8_t *buf, size_t len, const struct cdc_repack_opts *opt,
		       struct dpk_record *r, uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	(void)opt;
	return cdc_image_check(png_pixels, buf, len, r, out, outlen, why, whylen);
}

static const char *const png_exts[] = { ".png", NULL };

const struct cdc_kind_pack cdc_png_pack = {
	.exts = png_exts,
	.probe = png_probe,
	.repack = png_repack,
};

const struct cdc_kind_load cdc_png_load = {
	.accepts = cdc_image_accepts,
	.decode = png_decode,
};
