/* kind_jpeg.c - JPEG records: DPK_KIND_JPEG, the file as it was, probed at pack time from the
 * frame header (codec/jpeg_probe.h) and decoded crop-aware at a reduced DCT scale
 * (codec/decode.h); DPK_KIND_JPEG_IDX, what dpack makes of a JPEG by default: the baseline JPEG
 * followed by an index of MCU bit offsets and DC predictions, decoded from a bit-level splice of
 * the MCUs that cover the crop (codec/jpeg_idx.h); and DPK_KIND_JPEG_RST, the older rewrite
 * (dpack --restart-width): the same coefficients with restart markers, decoded from a splice of
 * the segments that cover the crop (codec/jpeg_rst.h). They share everything but the decode.
 * None has an "as stored" form: a job must give a crop size. This file is only the kinds' glue:
 * their pack operations (cdc_jpeg_pack, kind_pack.h) call the pack side (jpeg_build.h), their load
 * operations (cdc_*_load, kind_load.h) the load side (decode.h). */
#include "codec/decode.h"
#include "codec/jpeg_build.h"
#include "codec/jpeg_probe.h"
#include "codec/kind_load.h"
#include "codec/kind_pack.h"

#include <errno.h>
#include <stdio.h>

static int jpeg_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	struct cdc_jpeg_info ji;
	int ret = cdc_jpeg_probe(buf, len, &ji, why, whylen);

	if (ret < 0)
		return len < 2 || buf[0] != 0xFF || buf[1] != 0xD8 ? -ENOMSG : ret;  /* no SOI */
	r->kind = DPK_KIND_JPEG;
	r->ndim = 3;
	r->shape[0] = ji.height;
	r->shape[1] = ji.width;
	r->shape[2] = ji.components;
	r->shape[3] = 0;
	r->subsamp = ji.subsamp;
	r->flags = ji.progressive ? DPK_F_PROGRESSIVE : 0;
	return 0;
}

static int jpeg_accepts(const struct dpk_entry *e, uint64_t id, const struct cdc_out *o, char *why,
			size_t whylen)
{
	(void)e, (void)id;
	if (o->h)
		return 0;
	snprintf(why, whylen, "holds JPEG records: give a crop size (e.g. 224x224)");
	return -EINVAL;
}

static int jpeg_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		       const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		       size_t whylen)
{
	return cdc_decode_jpeg(d, src, e->length, crop, o, dst, why, whylen);
}

static int jpeg_rst_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
			   const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst,
			   char *why, size_t whylen)
{
	return cdc_decode_jpeg_rst(d, src, e->length, crop, o, dst, why, whylen);
}

static int jpeg_idx_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
			   const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst,
			   char *why, size_t whylen)
{
	return cdc_decode_jpeg_idx(d, src, e->length, crop, o, dst, why, whylen);
}

/* jpeg+idx by default; jpeg+rst when asked (a restart width). */
static int jpeg_repack(const uint8_t *buf, size_t len, const struct cdc_repack_opts *opt,
		       struct dpk_record *r, uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	if (opt->rst)
		return cdc_rst_rewrite(buf, len, opt->width, r, out, outlen, why, whylen);
	return cdc_idx_build(buf, len, opt->width, r, out, outlen, why, whylen);
}

static unsigned jpeg_scale(const struct cdc_crop *crop, const struct cdc_out *o)
{
	return cdc_jpeg_scale(crop, o->h, o->w);
}

static const char *const jpeg_exts[] = { ".jpg", ".jpeg", NULL };

const struct cdc_kind_pack cdc_jpeg_pack = {
	.exts = jpeg_exts,
	.probe = jpeg_probe,
	.repack = jpeg_repack,
};

const struct cdc_kind_load cdc_jpeg_load = {
	.accepts = jpeg_accepts,
	.decode = jpeg_decode,
	.scale = jpeg_scale,
};

const struct cdc_kind_load cdc_jpeg_rst_load = {
	.accepts = jpeg_accepts,
	.decode = jpeg_rst_decode,
	.scale = jpeg_scale,
};

const struct cdc_kind_load cdc_jpeg_idx_load = {
	.accepts = jpeg_accepts,
	.decode = jpeg_idx_decode,
	.scale = jpeg_scale,
};
