/* kind_image.h - what the record kinds of image files decoded whole share (jpeg+cmyk, png, webp,
 * pnm, bmp: codec/kind_NAME.c): the size bound at pack time, the decoder's size bound and
 * scratch rows at load time, and the crop and resize of the RGB rows they decode (or, "as
 * stored", the whole RGB image: what PIL's Image.open(f).convert("RGB") gives). */
#ifndef LOADERD_KIND_IMAGE_H
#define LOADERD_KIND_IMAGE_H
#include <stddef.h>
#include <stdint.h>

#include "codec/kind.h"
#include "codec/kind_load.h"
#include "codec/kind_pack.h"

/* Fill @r as an RGB image record of @kind, @w x @h. Returns 0, or -EBADMSG with the reason in
 * @why when a side is 0 or larger than an image record may be (65535). */
int cdc_image_record(unsigned kind, uint32_t w, uint32_t h, struct dpk_record *r, char *why,
		     size_t whylen);

/* Decode the first @rows rows (1..h) of an @w x @h image @src[0, len) as RGB into @rgb
 * (rows x w x 3 bytes); more rows may be decoded when the format needs them. Returns 0, or
 * -EBADMSG with the reason in @why (damaged, or the file's size is not @w x @h). */
typedef int cdc_image_pixels_fn(const uint8_t *src, size_t len, uint32_t w, uint32_t h,
				uint32_t rows, uint8_t *rgb, char *why, size_t whylen);

/* A kind's decode through @fn: the rows the crop needs into the decoder's scratch (refused with
 * -EBADMSG past cdc_decoder_limit's pixel bound, before any allocation), then cropped and
 * resized to @o, or copied whole when o->h == 0. Returns 0, -EBADMSG or -ENOMEM with @why. */
int cdc_image_decode(cdc_image_pixels_fn *fn, struct cdc_decoder *d, const struct dpk_entry *e,
		     const uint8_t *src, const struct cdc_crop *crop, const struct cdc_out *o,
		     uint8_t *dst, char *why, size_t whylen);

/* dpack's repack of an image kind through @fn: decode @buf[0, len) whole once (a damaged or cut
 * short file is refused at pack time, not found by a training job) and store it as it is: *out
 * is a copy (free()). The caller has bounded r->shape. Returns 0, -EBADMSG with @why, -ENOMEM. */
int cdc_image_check(cdc_image_pixels_fn *fn, const uint8_t *buf, size_t len,
		    const struct dpk_record *r, uint8_t **out, size_t *outlen, char *why,
		    size_t whylen);

/* Every image kind takes both a crop and "as stored" (the whole RGB image): always 0. */
int cdc_image_accepts(const struct dpk_entry *e, uint64_t id, const struct cdc_out *o, char *why,
		      size_t whylen);

#endif
