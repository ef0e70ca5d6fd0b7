/* decode.c - crop-aware JPEG decode, raw and zstd records, resize and flip (see decode.h).
 *
 * The expensive part of a JPEG is the IDCT and colour conversion of every pixel. A training crop
 * covers on average ~half the image and is then shrunk to 224 px, so this decodes only what the
 * crop needs: jpeg_crop_scanline() limits the columns to the iMCU columns that cover the window,
 * jpeg_skip_scanlines() skips the rows above it, decoding stops at the last row, and the DCT scale
 * (1/8, 1/4, 1/2: the fast ones in libjpeg-turbo) is the smallest whose scaled window still has at
 * least the output's pixels in each direction, so the resize only ever shrinks or stays near 1. */
#include "loader/decode.h"
#include "loader/sampler.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <zstd.h>

struct err_mgr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
};

struct ldr_decoder {
	struct jpeg_decompress_struct cinfo;
	struct err_mgr err;
	uint8_t *scratch;          /* decoded window rows, or a decompressed zstd record */
	size_t scratch_size;
	ZSTD_DCtx *zd;
	int32_t *xi;               /* resize tables: per output column, left and right byte offset */
	uint16_t *xw;              /* and the right one's weight in 1/256 */
	uint16_t *hrow;            /* one vertically blended source row */
	size_t hcap;               /* its capacity, in elements */
	size_t xcap;
	uint64_t max_pixels;       /* per JPEG frame; 0 = no bound (ldr_decoder_limit) */
};

/* ---- crop windows ---- */

static double uniform(uint64_t key, uint64_t *ctr)
{
	return (double)(ldr_mix(key, (*ctr)++, 0x52414e44ull) >> 11) * (1.0 / 9007199254740992.0);
}

void ldr_crop_random(uint32_t w, uint32_t h, uint64_t key, struct ldr_crop *out)
{
	const double lo = log(3.0 / 4.0), hi = log(4.0 / 3.0);
	double area = (double)w * h;
	uint64_t ctr = 0;

	for (int attempt = 0; attempt < 10; attempt++) {
		double target = area * (0.08 + 0.92 * uniform(key, &ctr));
		double aspect = exp(lo + (hi - lo) * uniform(key, &ctr));
		long cw = lround(sqrt(target * aspect)), ch = lround(sqrt(target / aspect));
		if (cw > 0 && cw <= (long)w && ch > 0 && ch <= (long)h) {
			out->w = (uint32_t)cw;
			out->h = (uint32_t)ch;
			out->x = (uint32_t)(uniform(key, &ctr) * (double)(w - out->w + 1));
			out->y = (uint32_t)(uniform(key, &ctr) * (double)(h - out->h + 1));
			if (out->x > w - out->w)
				out->x = w - out->w;
			if (out->y > h - out->h)
				out->y = h - out->h;
			return;
		}
	}
	/* torchvision's fallback: the whole image, clamped to the ratio range, centered */
	double ratio = (double)w / h;
	out->w = w;
	out->h = h;
	if (ratio < 3.0 / 4.0)
		out->h = (uint32_t)lround(w / (3.0 / 4.0));
	else if (ratio > 4.0 / 3.0)
		out->w = (uint32_t)lround(h * (4.0 / 3.0));
	if (out->h > h)
		out->h = h;
	if (out->w > w)
		out->w = w;
	out->x = (w - out->w) / 2;
	out->y = (h - out->h) / 2;
}

void ldr_crop_center(uint32_t w, uint32_t h, uint32_t out_h, uint32_t out_w, struct ldr_crop *out)
{
	uint32_t short_side = w < h ? w : h, out_short = out_w < out_h ? out_w : out_h;
	double resize = floor(out_short / 0.875);  /* torchvision: Resize(int(224 / 0.875)) = 256 */
	double scale = short_side / resize;

	out->w = (uint32_t)lround(out_w * scale);
	out->h = (uint32_t)lround(out_h * scale);
	if (out->w == 0)
		out->w = 1;
	if (out->h == 0)
		out->h = 1;
	if (out->w > w)
		out->w = w;
	if (out->h > h)
		out->h = h;
	out->x = (w - out->w) / 2;
	out->y = (h - out->h) / 2;
}

unsigned ldr_jpeg_scale(const struct ldr_crop *crop, uint32_t out_h, uint32_t out_w)
{
	for (unsigned den = 8; den > 1; den /= 2)
		if (crop->w >= (uint64_t)out_w * den && crop->h >= (uint64_t)out_h * den)
			return den;
	return 1;
}

/* ---- decoder ---- */

static void on_error(j_common_ptr c)
{
	longjmp(((struct err_mgr *)(void *)c->err)->jb, 1);
}

/* Corrupt-data warnings would otherwise let libjpeg fill the rest with grey: that is garbage
 * delivered as data. Extraneous bytes between markers are common in real datasets and harmless. */
static void on_message(j_common_ptr c, int level)
{
	if (level < 0 && c->err->msg_code != JWRN_EXTRANEOUS_DATA)
		longjmp(((struct err_mgr *)(void *)c->err)->jb, 1);
}

int ldr_decoder_create(struct ldr_decoder **out)
{
	struct ldr_decoder *d = calloc(1, sizeof(*d));

	*out = NULL;
	if (!d)
		return -ENOMEM;
	d->cinfo.err = jpeg_std_error(&d->err.pub);
	d->err.pub.error_exit = on_error;
	d->err.pub.emit_message = on_message;
	jpeg_create_decompress(&d->cinfo);
	d->zd = ZSTD_createDCtx();
	if (!d->zd) {
		ldr_decoder_destroy(d);
		return -ENOMEM;
	}
	*out = d;
	return 0;
}

void ldr_decoder_limit(struct ldr_decoder *d, uint64_t max_pixels)
{
	d->max_pixels = max_pixels;
	/* libjpeg's own allocations (progressive coefficient buffers: 2 bytes per coefficient,
	 * up to 3 components) stay within 8 bytes a pixel of the largest frame allowed; past that
	 * it fails (no backing store) instead of taking the daemon's memory. */
	d->cinfo.mem->max_memory_to_use = (long)(max_pixels > (uint64_t)(LONG_MAX / 8) ?
						 LONG_MAX : max_pixels * 8);
	/* A frame whose window is larger than the largest tensor allowed is refused by zstd. */
	int log = 10;
	while (log < 31 && (1ull << log) < max_pixels * 4)
		log++;
	ZSTD_DCtx_setParameter(d->zd, ZSTD_d_windowLogMax, log);
}

void ldr_decoder_destroy(struct ldr_decoder *d)
{
	if (!d)
		return;
	jpeg_destroy_decompress(&d->cinfo);
	ZSTD_freeDCtx(d->zd);
	free(d->scratch);
	free(d->xi);
	free(d->xw);
	free(d->hrow);
	free(d);
}

/* Grow-only buffers: after the first few samples a worker never allocates again. */
static int reserve(struct ldr_decoder *d, size_t n)
{
	if (n <= d->scratch_size)
		return 0;
	uint8_t *p = realloc(d->scratch, n);
	if (!p)
		return -ENOMEM;
	d->scratch = p;
	d->scratch_size = n;
	return 0;
}

static int reserve_x(struct ldr_decoder *d, size_t w, size_t src_row)
{
	if (w > d->xcap) {
		int32_t *xi = realloc(d->xi, 2 * w * sizeof(*xi));
		if (xi)
			d->xi = xi;
		uint16_t *xw = realloc(d->xw, w * sizeof(*xw));
		if (xw)
			d->xw = xw;
		if (!xi || !xw)
			return -ENOMEM;
		d->xcap = w;
	}
	if (src_row > d->hcap) {
		uint16_t *hr = realloc(d->hrow, src_row * sizeof(*hr));
		if (!hr)
			return -ENOMEM;
		d->hrow = hr;
		d->hcap = src_row;
	}
	return 0;
}

/* Bilinear resize of the window (x0, y0, sw, sh) (fractional, in pixels of @src, which is
 * @src_w x @src_h x 3 with @stride bytes per row) to @o, flipped if asked, into @dst.
 *
 * Separable, in 8-bit fixed point, vertical pass first: for each output row, the two source rows
 * are blended over the columns the window uses (contiguous, so it vectorises), then that one row
 * is resized horizontally through the column tables, into which the flip is folded. Measured
 * with perf, this order halves the time of the horizontal-first one: the gathers run once per
 * output row instead of once per source row. The DCT scale has already done the bulk of any
 * shrink (an averaging filter), so what is left is a factor below 2 and bilinear does not alias. */
static int resize(struct ldr_decoder *d, const uint8_t *src, uint32_t src_w, uint32_t src_h,
		  size_t stride, double x0, double y0, double sw, double sh, const struct ldr_out *o,
		  uint8_t *dst)
{
	const size_t plane = (size_t)o->h * o->w;
	uint32_t lo = UINT32_MAX, hi = 0;

	if (reserve_x(d, o->w, (size_t)src_w * 3) < 0)
		return -ENOMEM;
	for (uint32_t ox = 0; ox < o->w; ox++) {
		double sx = x0 + (ox + 0.5) * sw / o->w - 0.5;
		if (sx < 0)
			sx = 0;
		if (sx > src_w - 1)
			sx = src_w - 1;
		uint32_t xl = (uint32_t)sx, xr = xl + 1 < src_w ? xl + 1 : xl;
		uint32_t col = o->flip ? o->w - 1 - ox : ox;
		d->xi[2 * col] = (int32_t)xl * 3;
		d->xi[2 * col + 1] = (int32_t)xr * 3;
		d->xw[col] = (uint16_t)lround((sx - xl) * 256);
		if (xl < lo)
			lo = xl;
		if (xr > hi)
			hi = xr;
	}
	const size_t c0 = (size_t)lo * 3, c1 = (size_t)hi * 3 + 3;
	/* Locals with restrict: stores to the uint8_t output may alias anything, and without them
	 * the compiler reloads the tables on every pixel. */
	const int32_t *restrict xi = d->xi;
	const uint16_t *restrict xw = d->xw;
	uint16_t *restrict v = d->hrow;  /* one vertically blended row, value x 256, indexed like @src */
	for (uint32_t oy = 0; oy < o->h; oy++) {
		double sy = y0 + (oy + 0.5) * sh / o->h - 0.5;
		if (sy < 0)
			sy = 0;
		if (sy > src_h - 1)
			sy = src_h - 1;
		uint32_t yt = (uint32_t)sy, yb = yt + 1 < src_h ? yt + 1 : yt;
		uint32_t wb = (uint32_t)lround((sy - yt) * 256), wt = 256 - wb;
		const uint8_t *restrict t = src + stride * yt, *restrict b = src + stride * yb;
		for (size_t i = c0; i < c1; i++)
			v[i] = (uint16_t)(t[i] * wt + b[i] * wb);
		if (!o->nchw) {
			uint8_t *restrict drow = dst + (size_t)o->w * 3 * oy;
			for (uint32_t ox = 0; ox < o->w; ox++) {
				const uint16_t *l = v + xi[2 * ox], *r = v + xi[2 * ox + 1];
				uint32_t wr = xw[ox], wl = 256 - wr;
				drow[3 * ox] = (uint8_t)((l[0] * wl + r[0] * wr + 32768) >> 16);
				drow[3 * ox + 1] = (uint8_t)((l[1] * wl + r[1] * wr + 32768) >> 16);
				drow[3 * ox + 2] = (uint8_t)((l[2] * wl + r[2] * wr + 32768) >> 16);
			}
		} else {
			uint8_t *d0 = dst + (size_t)oy * o->w;
			for (uint32_t ox = 0; ox < o->w; ox++) {
				const uint16_t *l = v + xi[2 * ox], *r = v + xi[2 * ox + 1];
				uint32_t wr = xw[ox], wl = 256 - wr;
				for (int ch = 0; ch < 3; ch++)
					d0[ch * plane + ox] = (uint8_t)((l[ch] * wl + r[ch] * wr + 32768) >> 16);
			}
		}
	}
	return 0;
}

int ldr_decode_jpeg(struct ldr_decoder *d, const uint8_t *jpg, size_t len, const struct ldr_crop *crop,
		    const struct ldr_out *o, uint8_t *dst, char *why, size_t whylen)
{
	struct jpeg_decompress_struct *c = &d->cinfo;
	struct ldr_crop win = *crop;

	if (setjmp(d->err.jb)) {
		char msg[JMSG_LENGTH_MAX];
		c->err->format_message((j_common_ptr)c, msg);
		snprintf(why, whylen, "JPEG: %s", msg);
		jpeg_abort_decompress(c);
		return -EBADMSG;
	}
	jpeg_mem_src(c, jpg, (unsigned long)len);
	jpeg_read_header(c, TRUE);
	if (d->max_pixels && (uint64_t)c->image_width * c->image_height > d->max_pixels) {
		snprintf(why, whylen, "JPEG of %ux%u pixels, above the limit of %llu (loaderd "
			 "--max-pixels)", c->image_width, c->image_height,
			 (unsigned long long)d->max_pixels);
		jpeg_abort_decompress(c);
		return -EBADMSG;
	}
	/* The window was planned from the index; the stream has the last word on the size. */
	if (win.x >= c->image_width || win.y >= c->image_height) {
		win.x = win.y = 0;
		win.w = c->image_width;
		win.h = c->image_height;
	}
	if (win.w > c->image_width - win.x)
		win.w = c->image_width - win.x;
	if (win.h > c->image_height - win.y)
		win.h = c->image_height - win.y;
	unsigned den = ldr_jpeg_scale(&win, o->h, o->w);
	c->out_color_space = JCS_RGB;
	c->scale_num = 1;
	c->scale_denom = den;
	jpeg_start_decompress(c);

	JDIMENSION sx = win.x / den, sy = win.y / den;
	JDIMENSION ex = (win.x + win.w + den - 1) / den, ey = (win.y + win.h + den - 1) / den;
	if (ex > c->output_width)
		ex = c->output_width;
	if (ey > c->output_height)
		ey = c->output_height;
	if (ex <= sx)
		ex = sx + 1;
	if (ey <= sy)
		ey = sy + 1;
	JDIMENSION xoff = sx, cw = ex - sx;
	if (cw < c->output_width)
		jpeg_crop_scanline(c, &xoff, &cw);  /* widens to iMCU boundaries: xoff <= sx */
	else
		xoff = 0, cw = c->output_width;
	size_t stride = (size_t)cw * 3;
	if (reserve(d, stride * (ey - sy)) < 0) {
		jpeg_abort_decompress(c);
		snprintf(why, whylen, "out of memory for a %ux%u window", cw, ey - sy);
		return -ENOMEM;
	}
	if (sy > 0)
		jpeg_skip_scanlines(c, sy);
	while (c->output_scanline < ey) {
		JSAMPROW rows[16];
		JDIMENSION n = ey - c->output_scanline;
		if (n > 16)
			n = 16;
		for (JDIMENSION i = 0; i < n; i++)
			rows[i] = d->scratch + stride * (c->output_scanline - sy + i);
		jpeg_read_scanlines(c, rows, n);
	}
	jpeg_abort_decompress(c);  /* the rows below the window are not needed */

	return resize(d, d->scratch, cw, ey - sy, stride, (double)win.x / den - xoff,
		      (double)win.y / den - sy, (double)win.w / den, (double)win.h / den, o, dst);
}

int ldr_decode_raw(struct ldr_decoder *d, const uint8_t *src, uint32_t h, uint32_t w, uint32_t c,
		   const struct ldr_crop *crop, const struct ldr_out *o, uint8_t *dst)
{
	if (o->h == 0) {
		memcpy(dst, src, (size_t)h * w * c);
		return 0;
	}
	/* written so that no sum can wrap */
	if (c != 3 || crop->w == 0 || crop->h == 0 || crop->x > w || crop->w > w - crop->x ||
	    crop->y > h || crop->h > h - crop->y)
		return -EINVAL;
	return resize(d, src, w, h, (size_t)w * 3, crop->x, crop->y, crop->w, crop->h, o, dst);
}

const uint8_t *ldr_decode_zstd(struct ldr_decoder *d, const uint8_t *src, size_t len, size_t raw,
			       char *why, size_t whylen)
{
	if (reserve(d, raw ? raw : 1) < 0) {
		snprintf(why, whylen, "out of memory for %zu bytes", raw);
		return NULL;
	}
	size_t n = ZSTD_decompressDCtx(d->zd, d->scratch, raw, src, len);
	if (ZSTD_isError(n)) {
		snprintf(why, whylen, "zstd: %s", ZSTD_getErrorName(n));
		return NULL;
	}
	if (n != raw) {
		snprintf(why, whylen, "zstd: %zu bytes, the index says %zu", n, raw);
		return NULL;
	}
	return d->scratch;
}
