/* kind_image.c - the part the whole-image kinds share (see kind_image.h). */
#include "codec/kind_image.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cdc_image_record(unsigned kind, uint32_t w, uint32_t h, struct dpk_record *r, char *why,
		     size_t whylen)
{
	if (w == 0 || h == 0 || w > 65535 || h > 65535) {
		snprintf(why, whylen, "%u x %u pixels: an image record's sides are 1..65535", w, h);
		return -EBADMSG;
	}
	r->kind = kind;
	r->ndim = 3;
	r->shape[0] = h;
	r->shape[1] = w;
	r->shape[2] = 3;
	r->shape[3] = 0;
	r->subsamp = 0;
	r->flags = 0;
	return 0;
}

int cdc_image_decode(cdc_image_pixels_fn *fn, struct cdc_decoder *d, const struct dpk_entry *e,
		     const uint8_t *src, const struct cdc_crop *crop, const struct cdc_out *o,
		     uint8_t *dst, char *why, size_t whylen)
{
	uint32_t h = e->shape[0], w = e->shape[1];
	uint64_t max = cdc_decoder_max_pixels(d);

	if (e->ndim != 3 || e->shape[2] != 3) {
		snprintf(why, whylen, "an image record's shape must be H x W x 3");
		return -EBADMSG;
	}
	/* the sides every decoder's row arithmetic relies on (the .dpk reader checks them too) */
	if (w == 0 || h == 0 || w > 65535 || h > 65535) {
		snprintf(why, whylen, "%u x %u pixels: an image record's sides are 1..65535", w, h);
		return -EBADMSG;
	}
	if (max && cdc_pixels_over(h, w, max)) {
		snprintf(why, whylen, "%u x %u pixels is more than the bound of %llu", w, h,
			 (unsigned long long)max);
		return -EBADMSG;
	}
	/* A crop needs the rows down to its bottom only (formats that decode top-down stop there);
	 * the rows below those are never read, so the resize is given the whole image's height. */
	uint32_t rows = h;
	if (o->h) {
		if (crop->w == 0 || crop->h == 0 || crop->x > w || crop->w > w - crop->x ||
		    crop->y > h || crop->h > h - crop->y) {
			snprintf(why, whylen, "crop %ux%u+%u+%u outside the %ux%u image", crop->w,
				 crop->h, crop->x, crop->y, w, h);
			return -EINVAL;
		}
		/* the resize blends each output row from two source rows: one past the crop's */
		rows = crop->y + crop->h < h ? crop->y + crop->h + 1 : h;
	}
	uint8_t *px = o->h ? cdc_decoder_scratch(d, (size_t)w * h * 3) : dst;
	if (!px) {
		snprintf(why, whylen, "out of memory for %u x %u pixels", w, h);
		return -ENOMEM;
	}
	int ret = fn(src, e->length, w, h, rows, px, why, whylen);
	if (ret < 0 || o->h == 0)
		return ret;
	ret = cdc_decode_raw(d, px, h, w, 3, crop, o, dst);
	if (ret < 0)
		snprintf(why, whylen, "cannot resize the %ux%u crop", crop->w, crop->h);
	return ret;
}

int cdc_image_check(cdc_image_pixels_fn *fn, const uint8_t *buf, size_t len,
		    const struct dpk_record *r, uint8_t **out, size_t *outlen, char *why,
		    size_t whylen)
{
	uint32_t h = r->shape[0], w = r->shape[1];
	uint8_t *px = malloc((size_t)w * h * 3), *copy = malloc(len ? len : 1);

	if (!px || !copy) {
		free(px);
		free(copy);
		snprintf(why, whylen, "out of memory for %u x %u pixels", w, h);
		return -ENOMEM;
	}
	int ret = fn(buf, len, w, h, h, px, why, whylen);
	free(px);
	if (ret < 0) {
		free(copy);
		return ret;
	}
	memcpy(copy, buf, len);
	*out = copy;
	*outlen = len;
	return 0;
}

int cdc_image_accepts(const struct dpk_entry *e, uint64_t id, const struct cdc_out *o, char *why,
		      size_t whylen)
{
	(void)e, (void)id, (void)o, (void)why, (void)whylen;
	return 0;
}
