/* kind_jpeg_cmyk.c - JPEGs with 4 components (DPK_KIND_JPEG_CMYK): CMYK, or YCCK that libjpeg
 * turns into CMYK, stored as they are and decoded to the RGB that PIL's convert("RGB") gives,
 * which is what torchvision's ImageFolder trains on (ImageNet's train set has 22 of them). PIL
 * reads every CMYK JPEG as Adobe-inverted (raw mode "CMYK;I": Photoshop writes them so, and PIL
 * assumes it whatever the APP14 marker says), then converts with k' = 255 - K:
 * R = k' - round(C' k' / 255) on the inverted values. The decode is at the DCT scale the
 * JPEG kinds use for the crop (1/8 .. 1), whole frame, with libjpeg itself: TurboJPEG's API
 * refuses the sampling factors PIL writes for CMYK with subsampling ("Could not determine
 * subsampling type"). */
#include "codec/kind_image.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* libjpeg's errors end in a longjmp here, with the message in @why; its warnings (data cut
 * short, a corrupt segment) are counted, never printed. */
struct cmyk_err {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	char *why;
	size_t whylen;
	int warnings;
};

static void on_error(j_common_ptr c)
{
	struct cmyk_err *e = (struct cmyk_err *)c->err;
	char msg[JMSG_LENGTH_MAX];

	c->err->format_message(c, msg);
	snprintf(e->why, e->whylen, "JPEG: %s", msg);
	longjmp(e->jb, 1);
}

static void on_message(j_common_ptr c, int level)
{
	struct cmyk_err *e = (struct cmyk_err *)c->err;

	if (level < 0 && e->warnings++ == 0) {
		char msg[JMSG_LENGTH_MAX];
		c->err->format_message(c, msg);
		snprintf(e->why, e->whylen, "JPEG: %s", msg);
	}
}

/* The libjpeg decode every path shares. @px NULL: the header only, into *w, *h. Else decode at
 * 1/@den into @px (*w x *h x 4 bytes at that scale, CMYK as libjpeg gives it), *w and *h being
 * the full size the caller expects; @strict: a warning is damage. Returns 0, -ENOMSG (not 4
 * components: the jpeg kind's), or -EBADMSG with @why. */
static int cmyk_run(const uint8_t *src, size_t len, unsigned den, uint8_t *px, uint32_t *w,
		    uint32_t *h, int strict, char *why, size_t whylen)
{
	struct jpeg_decompress_struct ci;
	struct cmyk_err e = { .why = why, .whylen = whylen };
	volatile int ret = -EBADMSG;  /* set after the setjmp */

	ci.err = jpeg_std_error(&e.pub);
	e.pub.error_exit = on_error;
	e.pub.emit_message = on_message;
	jpeg_create_decompress(&ci);
	if (setjmp(e.jb))
		goto out;
	jpeg_mem_src(&ci, src, (unsigned long)len);
	jpeg_read_header(&ci, TRUE);
	if (ci.num_components != 4 ||
	    (ci.jpeg_color_space != JCS_CMYK && ci.jpeg_color_space != JCS_YCCK)) {
		ret = -ENOMSG;
		goto out;
	}
	if (!px) {
		*w = ci.image_width;
		*h = ci.image_height;
		ret = 0;
		goto out;
	}
	if (ci.image_width != *w || ci.image_height != *h) {
		snprintf(why, whylen, "JPEG is %u x %u, the index says %u x %u", ci.image_width,
			 ci.image_height, *w, *h);
		goto out;
	}
	ci.out_color_space = JCS_CMYK;   /* libjpeg turns YCCK into CMYK, as PIL asks it to */
	ci.scale_num = 1;
	ci.scale_denom = den;
	ci.dct_method = JDCT_ISLOW;      /* PIL's default */
	jpeg_start_decompress(&ci);
	uint32_t sw = (*w + den - 1) / den, sh = (*h + den - 1) / den;
	if (ci.output_width != sw || ci.output_height != sh || ci.output_components != 4) {
		snprintf(why, whylen, "JPEG: %u x %u x %d at 1/%u, not %u x %u x 4",
			 ci.output_width, ci.output_height, ci.output_components, den, sw, sh);
		goto out;
	}
	while (ci.output_scanline < ci.output_height) {
		JSAMPROW row = px + (size_t)ci.output_scanline * sw * 4;
		jpeg_read_scanlines(&ci, &row, 1);
	}
	jpeg_finish_decompress(&ci);
	ret = strict && e.warnings ? -EBADMSG : 0;  /* @why holds the first warning */
out:
	jpeg_destroy_decompress(&ci);
	return ret;
}

static int cmyk_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	uint32_t w, h;

	if (len < 2 || buf[0] != 0xFF || buf[1] != 0xD8)
		return -ENOMSG;
	int ret = cmyk_run(buf, len, 1, NULL, &w, &h, 0, why, whylen);
	if (ret < 0)
		return ret;  /* -ENOMSG: gray or YCbCr, the jpeg kind's */
	return cdc_image_record(DPK_KIND_JPEG_CMYK, w, h, r, why, whylen);
}

/* PIL's MULDIV255: a * b / 255, rounded. */
static inline unsigned muldiv255(unsigned a, unsigned b)
{
	unsigned t = a * b + 128;

	return ((t >> 8) + t) >> 8;
}

/* @n CMYK pixels as libjpeg gives them (stored, i.e. inverted, values) to RGB, in place. */
static void cmyk_to_rgb(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned nk = p[4 * i + 3];  /* 255 - (255 - K) */
		for (int c = 0; c < 3; c++)
			p[3 * i + c] = (uint8_t)(nk - muldiv255(255u - p[4 * i + c], nk));
	}
}

static int cmyk_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		       const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		       size_t whylen)
{
	uint32_t h = e->shape[0], w = e->shape[1];
	uint64_t max = cdc_decoder_max_pixels(d);

	if (max && (uint64_t)w * h > max) {
		snprintf(why, whylen, "%u x %u pixels is more than the bound of %llu", w, h,
			 (unsigned long long)max);
		return -EBADMSG;
	}
	unsigned den = o->h ? cdc_jpeg_scale(crop, o->h, o->w) : 1;
	uint32_t sw = (w + den - 1) / den, sh = (h + den - 1) / den;
	if (o->h && (crop->w == 0 || crop->h == 0 || crop->x > w || crop->w > w - crop->x ||
		     crop->y > h || crop->h > h - crop->y)) {
		snprintf(why, whylen, "crop %ux%u+%u+%u outside the %ux%u image", crop->w, crop->h,
			 crop->x, crop->y, w, h);
		return -EINVAL;
	}
	uint8_t *px = cdc_decoder_scratch(d, (size_t)sw * sh * 4);
	if (!px) {
		snprintf(why, whylen, "out of memory for %u x %u pixels", sw, sh);
		return -ENOMEM;
	}
	int ret = cmyk_run(src, e->length, den, px, &w, &h, 0, why, whylen);
	if (ret < 0)
		return ret == -ENOMSG ? (snprintf(why, whylen, "not a 4-component JPEG"), -EBADMSG) : ret;
	cmyk_to_rgb(px, (size_t)sw * sh);
	if (o->h == 0) {
		memcpy(dst, px, (size_t)w * h * 3);
		return 0;
	}
	/* The crop at the decoded scale, widened to whole pixels. */
	uint32_t x0 = crop->x / den, y0 = crop->y / den;
	uint32_t x1 = (crop->x + crop->w + den - 1) / den, y1 = (crop->y + crop->h + den - 1) / den;
	struct cdc_crop sc = { x0, y0, (x1 < sw ? x1 : sw) - x0, (y1 < sh ? y1 : sh) - y0 };
	ret = cdc_decode_raw(d, px, sh, sw, 3, &sc, o, dst);
	if (ret < 0)
		snprintf(why, whylen, "cannot resize the %ux%u crop", sc.w, sc.h);
	return ret;
}

/* dpack's check: one whole decode; a warning (data cut short, a corrupt segment) is damage too,
 * as PIL raises "image file is truncated" for what libjpeg only warns of. Stored as it is. */
static int cmyk_repack(const uint8_t *buf, size_t len, const struct cdc_repack_opts *opt,
		       struct dpk_record *r, uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	uint32_t h = r->shape[0], w = r->shape[1];
	uint8_t *px = malloc((size_t)w * h * 4), *copy = malloc(len);
	int ret = -ENOMEM;

	(void)opt;
	if (!px || !copy) {
		snprintf(why, whylen, "out of memory for %u x %u pixels", w, h);
		goto out;
	}
	ret = cmyk_run(buf, len, 1, px, &w, &h, 1, why, whylen);
	if (ret < 0) {
		ret = -EBADMSG;
		goto out;
	}
	memcpy(copy, buf, len);
	*out = copy;
	*outlen = len;
	copy = NULL;
out:
	free(px);
	free(copy);
	return ret;
}

static unsigned cmyk_scale(const struct cdc_crop *crop, const struct cdc_out *o)
{
	return cdc_jpeg_scale(crop, o->h, o->w);
}

static const char *const cmyk_exts[] = { ".jpg", ".jpeg", NULL };

const struct cdc_kind_pack cdc_jpeg_cmyk_pack = {
	.exts = cmyk_exts,
	.probe = cmyk_probe,
	.repack = cmyk_repack,
};

const struct cdc_kind_load cdc_jpeg_cmyk_load = {
	.accepts = cdc_image_accepts,
	.decode = cmyk_decode,
	.scale = cmyk_scale,
};
