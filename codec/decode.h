/* decode.h - record to output pixels, written straight into a ring slot: crop-aware JPEG decode
 * (libjpeg-turbo: only the iMCU columns and the rows that cover the crop, at the smallest DCT
 * scale 1/8, 1/4, 1/2 or 1 that still covers the output), raw and zstd tensors, then a bilinear
 * resize to the output size (or, when asked, torchvision's bilinear or bicubic, antialiased or not:
 * resize_filter.h) with an optional horizontal flip, NHWC or NCHW.
 * One decoder per worker thread; not thread-safe. */
#ifndef LOADERD_DECODE_H
#define LOADERD_DECODE_H
#include <stddef.h>
#include <stdint.h>

/* A window of the source image, in source pixels. */
struct cdc_crop {
	uint32_t x, y, w, h;
};

/* The output of one sample. */
struct cdc_out {
	uint32_t h, w;     /* output size; 0, 0: the record as stored (raw kinds only) */
	int nchw;          /* channel-first */
	int flip;          /* mirror horizontally */
	unsigned filter;   /* enum cdc_filter (resize_filter.h): 0, the fast bilinear; else
			    * bilinear or bicubic as torchvision resizes, optionally antialiased */
	int antialias;
};

/* torchvision RandomResizedCrop(scale=(0.08, 1), ratio=(3/4, 4/3)) for an @w x @h image, drawn
 * from the 64-bit @key (deterministic). */
void cdc_crop_random(uint32_t w, uint32_t h, uint64_t key, struct cdc_crop *out);
/* Evaluation crop: the centered window that Resize(round(out / 0.875)) + CenterCrop(out) sees. */
void cdc_crop_center(uint32_t w, uint32_t h, uint32_t out_h, uint32_t out_w, struct cdc_crop *out);
/* The DCT scale denominator (1, 2, 4 or 8) used for @crop and @out. */
unsigned cdc_jpeg_scale(const struct cdc_crop *crop, uint32_t out_h, uint32_t out_w);

struct cdc_decoder;
struct cdc_idx_info;  /* codec/jpeg_hdr.h */

int cdc_decoder_create(struct cdc_decoder **out);  /* 0 or -ENOMEM */
/* Bound what one record may make the decoder spend: a JPEG whose frame is larger than
 * @max_pixels (width x height), or that needs more than a few bytes a pixel of libjpeg memory
 * (max_memory_to_use), fails with -EBADMSG; zstd frames are held to a window that fits.
 * Default (without this call): no bound. */
void cdc_decoder_limit(struct cdc_decoder *d, uint64_t max_pixels);
void cdc_decoder_destroy(struct cdc_decoder *d);   /* NULL ok */
/* Bytes the decoder's own buffers hold now (window rows or a decompressed tensor, a splice, the
 * resize's tables). */
size_t cdc_decoder_held(const struct cdc_decoder *d);
/* Let go of each buffer larger than @keep bytes (made for an outlier record), so that a worker
 * does not hold an outlier's size after it. The next call that needs one makes it again. */
void cdc_decoder_trim(struct cdc_decoder *d, size_t keep);

/* Decode JPEG @jpg (@len bytes) cropped to @crop, resized to @o, into @dst (o->h * o->w * 3).
 * Returns 0 or -EBADMSG with libjpeg's message in @why. */
int cdc_decode_jpeg(struct cdc_decoder *d, const uint8_t *jpg, size_t len, const struct cdc_crop *crop,
		    const struct cdc_out *o, uint8_t *dst, char *why, size_t whylen);
/* The same for a restart-indexed record (DPK_KIND_JPEG_RST, codec/jpeg_rst.h): only the restart
 * segments that cover the window are entropy-decoded, from a small JPEG spliced out of it. A JPEG
 * that does not splice (no restart markers) is decoded as cdc_decode_jpeg does. Returns 0, or
 * -EBADMSG with the reason in @why (a broken restart segment is one). */
int cdc_decode_jpeg_rst(struct cdc_decoder *d, const uint8_t *jpg, size_t len,
			const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst,
			char *why, size_t whylen);

/* The same for a bit-indexed record (DPK_KIND_JPEG_IDX, codec/jpeg_idx.h): only the MCUs that
 * cover the window are entropy-decoded, from a small JPEG spliced out of it at bit level. Returns
 * 0, or -EBADMSG with the reason in @why (a damaged index or scan is one). */
int cdc_decode_jpeg_idx(struct cdc_decoder *d, const uint8_t *rec, size_t len,
			const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst,
			char *why, size_t whylen);

/* The decoded window of a JPEG before its resize: RGB rows in the decoder's scratch buffer, valid
 * until the decoder's next call. */
struct cdc_window {
	const uint8_t *px;  /* first pixel */
	size_t stride;      /* bytes per row */
	uint32_t w, h;      /* pixels held */
	uint32_t ox, oy;    /* where px is in the whole image decoded at the same DCT scale */
	unsigned den;       /* DCT scale denominator */
	double x0, y0;      /* the crop in px's pixels (fractional at reduced scales) */
	double sw, sh;
};
/* The window cdc_decode_jpeg resizes (crop clipped to the image, DCT scale for @out_h x @out_w). */
int cdc_jpeg_window(struct cdc_decoder *d, const uint8_t *jpg, size_t len,
		    const struct cdc_crop *crop, uint32_t out_h, uint32_t out_w,
		    struct cdc_window *win, char *why, size_t whylen);
/* The window cdc_decode_jpeg_rst resizes. Its pixels inside the crop equal those of a full decode
 * of the record at the same scale. Returns 0, -EBADMSG, -ENOMEM, or -ENOTSUP for a JPEG that does
 * not splice (then nothing was decoded). */
int cdc_jpeg_rst_window(struct cdc_decoder *d, const uint8_t *jpg, size_t len,
			const struct cdc_crop *crop, uint32_t out_h, uint32_t out_w,
			struct cdc_window *win, char *why, size_t whylen);
/* The window cdc_decode_jpeg_idx resizes. Its pixels inside the crop equal those of a full decode
 * of the record at the same scale. Returns 0, -EBADMSG or -ENOMEM. */
int cdc_jpeg_idx_window(struct cdc_decoder *d, const uint8_t *rec, size_t len,
			const struct cdc_crop *crop, uint32_t out_h, uint32_t out_w,
			struct cdc_window *win, char *why, size_t whylen);
/* A raw HxWxC uint8 tensor @src, cropped and resized like a JPEG (C must be 3 unless @o is 0x0, in
 * which case it is copied as is, @h * @w * @c bytes). 0 or -EINVAL. */
int cdc_decode_raw(struct cdc_decoder *d, const uint8_t *src, uint32_t h, uint32_t w, uint32_t c,
		   const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst);
/* Decompress zstd @src into the decoder's scratch buffer, @raw bytes expected. Returns a pointer
 * to them, or NULL with the reason in @why. */
const uint8_t *cdc_decode_zstd(struct cdc_decoder *d, const uint8_t *src, size_t len, size_t raw,
			       char *why, size_t whylen);
/* Hooks for the kinds that decode a whole image first (codec/kind_image.h): @n bytes of the
 * decoder's scratch buffer (valid until its next call), or NULL when out of memory; and the
 * cdc_decoder_limit() bound (0: none). */
uint8_t *cdc_decoder_scratch(struct cdc_decoder *d, size_t n);
/* The decoder's room for one parsed jpeg+idx record (codec/jpeg_hdr.h; too large a local), made
 * on first use and kept; NULL when out of memory. */
struct cdc_idx_info *cdc_decoder_idx(struct cdc_decoder *d);
uint64_t cdc_decoder_max_pixels(const struct cdc_decoder *d);

#endif
