/* kind_jpeg_cmyk.c - JPEGs with 4 components (DPK_KIND_JPEG_CMYK): CMYK, or YCCK that libjpeg
 * turns into CMYK, stored as they are and decoded to the RGB that PIL's convert("RGB") gives,
 * which is what torchvision's ImageFolder trains on (ImageNet's train set has 22 of them). PIL
 * reads every CMYK JPEG as Adobe-inverted (raw mode "CMYK;I": Photoshop writes them so, and PIL
 * assumes it whatever the APP14 marker says), then converts with k' = 255 - K:
 * R = k' - round(C' k' / 255) on the inverted values. The decode is at the DCT scale the
 * JPEG kinds use for the crop (1/8 .. 1), whole frame (libjpeg-turbo's TurboJPEG API). */
#include "formats/jpeg_probe.h"
#include "loader/kind_image.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

static int cmyk_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	int w, h, sub, cs;

	if (len < 2 || buf[0] != 0xFF || buf[1] != 0xD8)
		return -ENOMSG;
	tjhandle tj = tjInitDecompress();
	if (!tj) {
		snprintf(why, whylen, "TurboJPEG: out of memory");
		return -ENOMEM;
	}
	int ret = tjDecompressHeader3(tj, buf, len, &w, &h, &sub, &cs);
	if (ret == 0 && cs != TJCS_CMYK && cs != TJCS_YCCK)
		ret = -ENOMSG;  /* gray or YCbCr: the jpeg kind's */
	else if (ret < 0)
		snprintf(why, whylen, "JPEG header: %s", tjGetErrorStr2(tj));
	tjDestroy(tj);
	if (ret == -ENOMSG)
		return ret;
	if (ret < 0)
		return -EBADMSG;
	return ldr_image_record(DPK_KIND_JPEG_CMYK, (uint32_t)w, (uint32_t)h, r, why, whylen);
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

static int cmyk_decode(struct ldr_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		       const struct ldr_crop *crop, const struct ldr_out *o, uint8_t *dst, char *why,
		       size_t whylen)
{
	uint32_t h = e->shape[0], w = e->shape[1];
	uint64_t max = ldr_decoder_max_pixels(d);
	int fw, fh, sub, cs, ret = -EBADMSG;

	if (max && (uint64_t)w * h > max) {
		snprintf(why, whylen, "%u x %u pixels is more than the bound of %llu", w, h,
			 (unsigned long long)max);
		return -EBADMSG;
	}
	unsigned den = o->h ? ldr_jpeg_scale(crop, o->h, o->w) : 1;
	tjscalingfactor sf = { 1, (int)den };
	uint32_t sw = (uint32_t)TJSCALED((int)w, sf), sh = (uint32_t)TJSCALED((int)h, sf);
	tjhandle tj = tjInitDecompress();
	if (!tj) {
		snprintf(why, whylen, "TurboJPEG: out of memory");
		return -ENOMEM;
	}
	if (tjDecompressHeader3(tj, src, e->length, &fw, &fh, &sub, &cs) < 0) {
		snprintf(why, whylen, "JPEG header: %s", tjGetErrorStr2(tj));
		goto out;
	}
	if ((uint32_t)fw != w || (uint32_t)fh != h || (cs != TJCS_CMYK && cs != TJCS_YCCK)) {
		snprintf(why, whylen, "JPEG is %d x %d (colour space %d), the index says %u x %u CMYK",
			 fw, fh, cs, w, h);
		goto out;
	}
	uint8_t *px = ldr_decoder_scratch(d, (size_t)sw * sh * 4);
	if (!px) {
		snprintf(why, whylen, "out of memory for %u x %u pixels", sw, sh);
		ret = -ENOMEM;
		goto out;
	}
	if (tjDecompress2(tj, src, e->length, px, (int)sw, 0, (int)sh, TJPF_CMYK, 0) < 0 &&
	    tjGetErrorCode(tj) == TJERR_FATAL) {
		snprintf(why, whylen, "JPEG: %s", tjGetErrorStr2(tj));
		goto out;
	}
	cmyk_to_rgb(px, (size_t)sw * sh);
	if (o->h == 0) {
		memcpy(dst, px, (size_t)w * h * 3);
		ret = 0;
		goto out;
	}
	/* The crop at the decoded scale, widened to whole pixels. */
	uint32_t x0 = crop->x / den, y0 = crop->y / den;
	uint32_t x1 = (crop->x + crop->w + den - 1) / den, y1 = (crop->y + crop->h + den - 1) / den;
	if (x1 > sw)
		x1 = sw;
	if (y1 > sh)
		y1 = sh;
	if (x0 >= x1 || y0 >= y1 || crop->x + crop->w > w || crop->y + crop->h > h) {
		snprintf(why, whylen, "crop %ux%u+%u+%u outside the %ux%u image", crop->w, crop->h,
			 crop->x, crop->y, w, h);
		ret = -EINVAL;
		goto out;
	}
	struct ldr_crop sc = { x0, y0, x1 - x0, y1 - y0 };
	ret = ldr_decode_raw(d, px, sh, sw, 3, &sc, o, dst);
	if (ret < 0)
		snprintf(why, whylen, "cannot resize the %ux%u crop", sc.w, sc.h);
out:
	tjDestroy(tj);
	return ret;
}

/* dpack's check: one whole decode; a warning (data cut short, a corrupt segment) is damage too,
 * as PIL raises "image file is truncated" for what libjpeg only warns of. Stored as it is. */
static int cmyk_repack(const uint8_t *buf, size_t len, const struct ldr_repack_opts *opt,
		       struct dpk_record *r, uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	uint32_t h = r->shape[0], w = r->shape[1];
	uint8_t *px = malloc((size_t)w * h * 4), *copy = malloc(len);
	tjhandle tj = tjInitDecompress();
	int ret = -ENOMEM;

	(void)opt;
	if (!px || !copy || !tj) {
		snprintf(why, whylen, "out of memory for %u x %u pixels", w, h);
		goto out;
	}
	ret = -EBADMSG;
	if (tjDecompress2(tj, buf, len, px, (int)w, 0, (int)h, TJPF_CMYK, 0) < 0) {
		snprintf(why, whylen, "JPEG: %s", tjGetErrorStr2(tj));
		goto out;
	}
	memcpy(copy, buf, len);
	*out = copy;
	*outlen = len;
	copy = NULL;
	ret = 0;
out:
	if (tj)
		tjDestroy(tj);
	free(px);
	free(copy);
	return ret;
}

static unsigned cmyk_scale(const struct ldr_crop *crop, const struct ldr_out *o)
{
	return ldr_jpeg_scale(crop, o->h, o->w);
}

static const char *const cmyk_exts[] = { ".jpg", ".jpeg", NULL };

const struct ldr_kind ldr_kind_jpeg_cmyk = {
	.kind = DPK_KIND_JPEG_CMYK,
	.name = "jpeg+cmyk",
	.exts = cmyk_exts,
	.probe = cmyk_probe,
	.repack = cmyk_repack,
	.accepts = ldr_image_accepts,
	.decode = cmyk_decode,
	.scale = cmyk_scale,
};
