/* kind_jpeg_cmyk.c - JPEGs with 4 components: CMYK, or YCCK that libjpeg turns into CMYK, decoded
 * to the RGB that PIL's convert("RGB") gives, which is what torchvision's ImageFolder trains on
 * (ImageNet's train set has 22 of them). Two kinds: DPK_KIND_JPEG_CMYK, the file as it was,
 * decoded whole at the crop's DCT scale; and DPK_KIND_JPEG_IDX_CMYK, what dpack makes of one by
 * default: the baseline JPEG (losslessly transcoded when it is not) followed by a jpeg+idx index
 * with 4 components' DC predictions (codec/jpeg_idx.h), from which only the MCUs that cover the
 * crop are spliced out and entropy-decoded. PIL reads every CMYK JPEG as Adobe-inverted (raw mode
 * "CMYK;I": Photoshop writes them so, and PIL assumes it whatever the APP14 marker says), then
 * converts with k' = 255 - K: R = k' - round(C' k' / 255) on the inverted values. The decode is
 * at the DCT scale the JPEG kinds use for the crop (1/8 .. 1), with libjpeg itself: TurboJPEG's
 * API refuses the sampling factors PIL writes for CMYK with subsampling ("Could not determine
 * subsampling type"). Both paths give the resize the same box of pixels (the crop and one pixel
 * around it), so that a window from the splice equals the whole decode's byte for byte. */
#include "codec/kind_image.h"
#include "codec/jpeg_build.h"
#include "codec/jpeg_idx.h"

#include <assert.h>
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

/* What a crop reads of the image decoded at 1/den (sw x sh pixels): the crop widened to whole
 * pixels (sx, sy, scw, sch), and the box [bx0, bx1) x [by0, by1) of the pixels the bilinear
 * resize reads for it, the crop and one pixel around it inside the image. Both decode paths
 * (whole, spliced) hand the resize exactly this box, so that their outputs are equal byte for
 * byte whatever the splice's extent. */
struct crop_box {
	uint32_t sx, sy, scw, sch;
	uint32_t bx0, by0, bx1, by1;
};

static void crop_box(const struct cdc_crop *crop, unsigned den, uint32_t sw, uint32_t sh,
		     struct crop_box *b)
{
	uint32_t x0 = crop->x / den, y0 = crop->y / den;
	uint32_t x1 = (crop->x + crop->w + den - 1) / den, y1 = (crop->y + crop->h + den - 1) / den;

	x1 = x1 < sw ? x1 : sw;
	y1 = y1 < sh ? y1 : sh;
	b->sx = x0;
	b->sy = y0;
	b->scw = x1 - x0;
	b->sch = y1 - y0;
	b->bx0 = x0 ? x0 - 1 : 0;
	b->by0 = y0 ? y0 - 1 : 0;
	b->bx1 = x1 < sw ? x1 + 1 : sw;
	b->by1 = y1 < sh ? y1 + 1 : sh;
}

/* The box @b of CMYK pixels @px (rows of @pw pixels, its first pixel at (@ox, @oy) of the scaled
 * image) to RGB rows of the box's width at @px, in place (each pixel is read before its output
 * is written, and no output lands past its input), then resized to @o into @dst. */
static int box_resize(struct cdc_decoder *d, uint8_t *px, uint32_t pw, uint32_t ox, uint32_t oy,
		      const struct crop_box *b, const struct cdc_out *o, uint8_t *dst)
{
	uint32_t bw = b->bx1 - b->bx0, bh = b->by1 - b->by0;
	uint8_t *q = px;

	assert(b->bx0 >= ox && b->by0 >= oy && b->bx1 - ox <= pw);  /* the plan covers the box */

	for (uint32_t y = b->by0; y < b->by1; y++) {
		const uint8_t *p = px + ((size_t)(y - oy) * pw + (b->bx0 - ox)) * 4;
		for (uint32_t x = 0; x < bw; x++, p += 4, q += 3) {
			unsigned c = p[0], m = p[1], ye = p[2], nk = p[3];  /* nk = 255 - (255 - K) */
			q[0] = (uint8_t)(nk - muldiv255(255u - c, nk));
			q[1] = (uint8_t)(nk - muldiv255(255u - m, nk));
			q[2] = (uint8_t)(nk - muldiv255(255u - ye, nk));
		}
	}
	struct cdc_crop rel = { b->sx - b->bx0, b->sy - b->by0, b->scw, b->sch };
	return cdc_decode_raw(d, px, bh, bw, 3, &rel, o, dst);
}

/* The checks every decode makes before it allocates: the shape, the pixel bound, the crop inside
 * the image. */
static int cmyk_bounds(struct cdc_decoder *d, const struct dpk_entry *e,
		       const struct cdc_crop *crop, const struct cdc_out *o, char *why, size_t whylen)
{
	uint32_t h = e->shape[0], w = e->shape[1];
	uint64_t max = cdc_decoder_max_pixels(d);

	/* "as stored" writes w x h x 3 bytes: an index saying H x W x 1 gave a third of that */
	if (e->ndim != 3 || e->shape[2] != 3) {
		snprintf(why, whylen, "an image record's shape must be H x W x 3, not %u-d x %u",
			 e->ndim, e->shape[2]);
		return -EBADMSG;
	}
	if (max && cdc_pixels_over(h, w, max)) {
		snprintf(why, whylen, "%u x %u pixels is more than the bound of %llu", w, h,
			 (unsigned long long)max);
		return -EBADMSG;
	}
	/* written so that no sum can wrap */
	if (o->h && (crop->w == 0 || crop->h == 0 || crop->x > w || crop->w > w - crop->x ||
		     crop->y > h || crop->h > h - crop->y)) {
		snprintf(why, whylen, "crop %ux%u+%u+%u outside the %ux%u image", crop->w, crop->h,
			 crop->x, crop->y, w, h);
		return -EINVAL;
	}
	return 0;
}

/* The whole-decode path: the record @src (its JPEG; anything after EOI is ignored) decoded whole
 * at the crop's DCT scale, then cropped and resized (or, o->h == 0, the whole RGB image). */
static int cmyk_whole(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		      const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		      size_t whylen)
{
	uint32_t h = e->shape[0], w = e->shape[1];
	unsigned den = o->h ? cdc_jpeg_scale(crop, o->h, o->w) : 1;
	uint32_t sw = (w + den - 1) / den, sh = (h + den - 1) / den;
	uint8_t *px = cdc_decoder_scratch(d, (size_t)sw * sh * 4);

	if (!px) {
		snprintf(why, whylen, "out of memory for %u x %u pixels", sw, sh);
		return -ENOMEM;
	}
	int ret = cmyk_run(src, e->length, den, px, &w, &h, 0, why, whylen);
	if (ret < 0)
		return ret == -ENOMSG ? (snprintf(why, whylen, "not a 4-component JPEG"), -EBADMSG) : ret;
	if (o->h == 0) {
		cmyk_to_rgb(px, (size_t)sw * sh);
		memcpy(dst, px, (size_t)w * h * 3);
		return 0;
	}
	struct crop_box b;
	crop_box(crop, den, sw, sh, &b);
	ret = box_resize(d, px, sw, 0, 0, &b, o, dst);
	if (ret < 0)
		snprintf(why, whylen, "cannot resize the %ux%u crop", b.scw, b.sch);
	return ret;
}

static int cmyk_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		       const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		       size_t whylen)
{
	int ret = cmyk_bounds(d, e, crop, o, why, whylen);

	return ret < 0 ? ret : cmyk_whole(d, e, src, crop, o, dst, why, whylen);
}

/* jpeg+idx+cmyk: the record's index is checked whole (cdc_idx_parse), the MCUs that cover the
 * crop's box plus the margin subsampled chroma needs are spliced out at bit level
 * (codec/jpeg_idx.h) and only they are entropy-decoded, at the crop's DCT scale, with libjpeg as
 * the whole path does; the box then goes through the same conversion and resize. "As stored",
 * or a plan that is the whole image: the whole path. */
static int idx_cmyk_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
			   const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst,
			   char *why, size_t whylen)
{
	uint32_t h = e->shape[0], w = e->shape[1];
	struct cdc_idx_info *info = cdc_decoder_idx(d);
	char tmp[160];
	int ret = cmyk_bounds(d, e, crop, o, why, whylen);

	if (ret < 0)
		return ret;
	if (!info) {
		snprintf(why, whylen, "out of memory for a JPEG index");
		return -ENOMEM;
	}
	ret = cdc_idx_parse(src, e->length, info, tmp, sizeof(tmp));
	if (ret < 0) {
		snprintf(why, whylen, "JPEG index: %s", tmp);
		return ret;
	}
	if (info->ncomp != 4) {
		snprintf(why, whylen, "JPEG index: %u components in a jpeg+idx+cmyk record",
			 info->ncomp);
		return -EBADMSG;
	}
	if (info->geo.width != w || info->geo.height != h) {
		snprintf(why, whylen, "JPEG is %u x %u, the index says %u x %u", info->geo.width,
			 info->geo.height, w, h);
		return -EBADMSG;
	}
	if (o->h == 0)
		return cmyk_whole(d, e, src, crop, o, dst, why, whylen);
	unsigned den = cdc_jpeg_scale(crop, o->h, o->w);
	uint32_t sw = (w + den - 1) / den, sh = (h + den - 1) / den;
	struct crop_box b;
	struct cdc_rst_plan plan;
	crop_box(crop, den, sw, sh, &b);
	uint32_t x0 = b.bx0 * den, y0 = b.by0 * den;
	uint32_t x1 = b.bx1 * den < w ? b.bx1 * den : w, y1 = b.by1 * den < h ? b.by1 * den : h;
	cdc_rst_plan(&info->geo, x0, y0, x1 - x0, y1 - y0, &plan);
	if (plan.whole)
		return cmyk_whole(d, e, src, crop, o, dst, why, whylen);
	/* the splice, then its pixels at 1/den, in one scratch buffer */
	size_t bound = (cdc_idx_splice_bound(info, &plan) + 15) & ~(size_t)15;
	uint32_t pw = (plan.w + den - 1) / den, ph = (plan.h + den - 1) / den;
	uint8_t *buf = cdc_decoder_scratch(d, bound + (size_t)pw * ph * 4);
	if (!buf) {
		snprintf(why, whylen, "out of memory for a %zu-byte splice", bound);
		return -ENOMEM;
	}
	long n = cdc_idx_splice(src, info, &plan, buf, tmp, sizeof(tmp));
	if (n < 0) {
		snprintf(why, whylen, "JPEG index: %s", tmp);
		return (int)n;
	}
	uint32_t spw = plan.w, sph = plan.h;
	ret = cmyk_run(buf, (size_t)n, den, buf + bound, &spw, &sph, 0, why, whylen);
	if (ret < 0)
		return ret == -ENOMSG ? (snprintf(why, whylen, "splice is not 4 components"),
					 -EBADMSG) : ret;
	ret = box_resize(d, buf + bound, pw, plan.x / den, plan.y / den, &b, o, dst);
	if (ret < 0)
		snprintf(why, whylen, "cannot resize the %ux%u crop", b.scw, b.sch);
	return ret;
}

/* dpack's check: one whole decode; a warning (data cut short, a corrupt segment) is damage too,
 * as PIL raises "image file is truncated" for what libjpeg only warns of. Then the index pass
 * (codec/jpeg_build.h) makes it jpeg+idx+cmyk. */
static int cmyk_repack(const uint8_t *buf, size_t len, const struct cdc_repack_opts *opt,
		       struct dpk_record *r, uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	uint32_t h = r->shape[0], w = r->shape[1];
	uint8_t *px = malloc((size_t)w * h * 4);
	int ret = -ENOMEM;

	if (!px) {
		snprintf(why, whylen, "out of memory for %u x %u pixels", w, h);
		goto out;
	}
	ret = cmyk_run(buf, len, 1, px, &w, &h, 1, why, whylen);
	if (ret < 0) {
		ret = -EBADMSG;
		goto out;
	}
	/* jpeg+idx+cmyk (there is no restart-marker form: --restart-width indexes CMYK too, its
	 * width as the index's); a JPEG the index cannot describe even transcoded stays as it is */
	ret = cdc_idx_build(buf, len, opt ? opt->width : CDC_IDX_WIDTH_DEFAULT, r, out, outlen, why,
			    whylen);
out:
	free(px);
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

const struct cdc_kind_load cdc_jpeg_idx_cmyk_load = {
	.accepts = cdc_image_accepts,
	.decode = idx_cmyk_decode,
	.scale = cmyk_scale,
};
