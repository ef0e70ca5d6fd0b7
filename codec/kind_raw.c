/* kind_raw.c - raw uint8 tensors, stored as they are (DPK_KIND_RAW) or as one zstd frame
 * (DPK_KIND_RAW_ZSTD). dpack makes them from arrays (npy), not from files, so they have no probe.
 * A job delivers them as stored, or crops and resizes HxWx3 ones like images. */
#include "codec/kind_load.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int raw_accepts(const struct dpk_entry *e, uint64_t id, const struct cdc_out *o, char *why,
		       size_t whylen)
{
	if (!o->h || (e->ndim == 3 && e->shape[2] == 3))
		return 0;
	snprintf(why, whylen, "sample %" PRIu64 ": a %u-d raw tensor cannot be cropped (HxWx3 images "
		 "only)", id, e->ndim);
	return -EINVAL;
}

static int raw_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		      const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		      size_t whylen)
{
	if (o->h == 0) {
		memcpy(dst, src, e->raw_size);
		return 0;
	}
	/* raw_accepts, again where the shape is used (the fill checks each record's entry once) */
	if (e->ndim != 3 || e->shape[2] != 3) {
		snprintf(why, whylen, "a %u-d raw tensor cannot be cropped (HxWx3 images only)",
			 e->ndim);
		return -EINVAL;
	}
	int ret = cdc_decode_raw(d, src, e->shape[0], e->shape[1], e->shape[2], crop, o, dst);
	if (ret < 0)
		snprintf(why, whylen, "raw record cannot be resized");
	return ret;
}

static int raw_zstd_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
			   const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst,
			   char *why, size_t whylen)
{
	const uint8_t *raw = cdc_decode_zstd(d, src, e->length, e->raw_size, why, whylen);

	return raw ? raw_decode(d, e, raw, crop, o, dst, why, whylen) : -EBADMSG;
}

const struct cdc_kind_load cdc_raw_load = {
	.accepts = raw_accepts,
	.decode = raw_decode,
};

const struct cdc_kind_load cdc_raw_zstd_load = {
	.accepts = raw_accepts,
	.decode = raw_zstd_decode,
};
