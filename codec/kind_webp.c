/* kind_webp.c - WebP records (DPK_KIND_WEBP): the file as it was, lossy or lossless, decoded with
 * libwebp to RGB; alpha is dropped, as PIL's convert("RGB") does (its RGB values are decoded the
 * same with or without an alpha channel). An animation is refused at pack time: ImageFolder would
 * train on its first frame only, which this kind does not single out. */
#include "codec/kind_image.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <webp/decode.h>

static int webp_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	WebPBitstreamFeatures f;

	if (len < 12 || memcmp(buf, "RIFF", 4) != 0 || memcmp(buf + 8, "WEBP", 4) != 0)
		return -ENOMSG;
	VP8StatusCode st = WebPGetFeatures(buf, len, &f);
	if (st != VP8_STATUS_OK) {
		snprintf(why, whylen, "WebP header unreadable (libwebp status %d)", (int)st);
		return -EBADMSG;
	}
	if (f.has_animation) {
		snprintf(why, whylen, "animated WebP (only still images)");
		return -ENOTSUP;
	}
	return cdc_image_record(DPK_KIND_WEBP, (uint32_t)f.width, (uint32_t)f.height, r, why, whylen);
}

static int webp_pixels(const uint8_t *src, size_t len, uint32_t w, uint32_t h, uint32_t rows,
		       uint8_t *rgb, char *why, size_t whylen)
{
	int fw, fh;

	(void)rows;
	/* The size the bitstream declares is checked before libwebp writes a pixel. */
	if (!WebPGetInfo(src, len, &fw, &fh) || (uint32_t)fw != w || (uint32_t)fh != h) {
		snprintf(why, whylen, "WebP header says %d x %d, the index %u x %u", fw, fh, w, h);
		return -EBADMSG;
	}
	size_t n = (size_t)w * h * 3;
	if (!WebPDecodeRGBInto(src, len, rgb, n, (int)w * 3)) {
		snprintf(why, whylen, "WebP data damaged or cut short (%zu bytes)", len);
		return -EBADMSG;
	}
	return 0;
}

static int webp_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		       const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		       size_t whylen)
{
	return cdc_image_decode(webp_pixels, d, e, src, crop, o, dst, why, whylen);
}

static int webp_repack(const uint8_t *buf, size_t len, const struct cdc_repack_opts *opt,
		       struct dpk_record *r, uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	(void)opt;
	return cdc_image_check(webp_pixels, buf, len, r, out, outlen, why, whylen);
}

static const char *const webp_exts[] = { ".webp", NULL };

const struct cdc_kind_pack cdc_webp_pack = {
	.exts = webp_exts,
	.probe = webp_probe,
	.repack = webp_repack,
};

const struct cdc_kind_load cdc_webp_load = {
	.accepts = cdc_image_accepts,
	.decode = webp_decode,
};
