/* resize_filter.h - the resize of a window of RGB pixels by a separable filter: torchvision's
 * F.resize on a uint8 tensor with bilinear or bicubic interpolation, antialiased or not (torch's
 * _upsample_bilinear2d_aa / _upsample_bicubic2d_aa, which follow PIL; upsample_bicubic2d), within
 * 1 of its values (float32 sums in another order). The window is the crop torchvision resizes:
 * taps never reach outside it. Pure function over caller memory; thread-safe. */
#ifndef LOADERD_RESIZE_FILTER_H
#define LOADERD_RESIZE_FILTER_H
#include <stddef.h>
#include <stdint.h>

enum cdc_filter {
	CDC_FILTER_FAST = 0,      /* decode.c's own bilinear (fixed point, no antialias) */
	CDC_FILTER_BILINEAR = 1,
	CDC_FILTER_BICUBIC = 2,
};

struct cdc_resize {
	enum cdc_filter filter;   /* CDC_FILTER_BILINEAR or CDC_FILTER_BICUBIC */
	int antialias;            /* the filter stretched over the source pixels of a shrink */
	uint32_t out_h, out_w;
	int flip, nchw;           /* mirror horizontally; channel-first output */
};

/* Bytes of workspace cdc_resize_filter needs for a @sw x @sh window (its pixels, rounded out) into
 * @r. */
size_t cdc_resize_filter_need(const struct cdc_resize *r, double sw, double sh);
/* Resize the window (x0, y0, sw, sh) (fractional at a reduced DCT scale; integers for a crop of
 * the image as stored), of @src (@src_w x @src_h x 3, @stride bytes a row), to @r, into @dst
 * (out_h x out_w x 3). @work: cdc_resize_filter_need() bytes, 16-aligned. */
void cdc_resize_filter(const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t stride,
		       double x0, double y0, double sw, double sh, const struct cdc_resize *r,
		       uint8_t *dst, void *work);

#endif
