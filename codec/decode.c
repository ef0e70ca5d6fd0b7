/* decode.c - crop-aware JPEG decode, raw and zstd records, resize and flip (see decode.h).
 *
 * The expensive part of a JPEG is the IDCT and colour conversion of every pixel. A training crop
 * covers on average ~half the image and is then shrunk to 224 px, so this decodes only what the
 * crop needs: jpeg_crop_scanline() limits the columns to the iMCU columns that cover the window,
 * jpeg_skip_scanlines() skips the rows above it, decoding stops at the last row, and the DCT scale
 * (1/8, 1/4, 1/2: the fast ones in libjpeg-turbo) is the smallest whose scaled window still has at
 * least the output's pixels in each direction, so the resize only ever shrinks or stays near 1.
 * Every path gives the window's pixels exactly as a full decode at the same scale would
 * (decode_rows()); tests/test_decode.c and the splice suites check it, on real photographs too. */
#include "codec/decode.h"
#include "codec/resize_filter.h"
#include "codec/jpeg_idx.h"
#include "codec/jpeg_rst.h"
#include "common/mix.h"

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

#if defined(__SSE2__) && defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1  /* resize() has an AVX2 loop, taken when the CPU has AVX2 */
#endif

struct err_mgr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
};

struct cdc_decoder {
	struct jpeg_decompress_struct cinfo;
	struct err_mgr err;
	uint8_t *scratch;          /* decoded window rows, or a decompressed zstd record */
	size_t scratch_size;
	uint8_t *splice;           /* the small JPEG spliced from a restart- or bit-indexed record */
	size_t splice_size;
	struct cdc_idx_info *idx;  /* the parsed bit-indexed record (tables: too large a local) */
	ZSTD_DCtx *zd;
	int32_t *xi;               /* resize tables: per output column, left and right byte offset */
	uint32_t *xw;              /* and the weights in 1/256: left | right << 16 (pmaddwd pairs) */
	uint16_t *hrow;            /* one vertically blended source row, + HROW_PAD elements */
	size_t hcap;               /* its capacity, in elements */
	int avx2;                  /* the CPU has AVX2: resize's horizontal pass takes 4 pixels a step */
	size_t xcap;
	uint64_t max_pixels;       /* per JPEG frame; 0 = no bound (cdc_decoder_limit) */
	void *fwork;               /* the filtered resize's tables and row (resize_filter.h) */
	size_t fwork_size;
};

/* ---- crop windows ---- */

static double uniform(uint64_t key, uint64_t *ctr)
{
	return (double)(mix3(key, (*ctr)++, 0x52414e44ull) >> 11) * (1.0 / 9007199254740992.0);
}

void cdc_crop_random(uint32_t w, uint32_t h, uint64_t key, struct cdc_crop *out)
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

void cdc_crop_center(uint32_t w, uint32_t h, uint32_t out_h, uint32_t out_w, struct cdc_crop *out)
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

unsigned cdc_jpeg_scale(const struct cdc_crop *crop, uint32_t out_h, uint32_t out_w)
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

int cdc_decoder_create(struct cdc_decoder **out)
{
	struct cdc_decoder *d = calloc(1, sizeof(*d));

	*out = NULL;
	if (!d)
		return -ENOMEM;
#ifdef HAVE_AVX2_PATH
	d->avx2 = __builtin_cpu_supports("avx2");
#endif
	d->cinfo.err = jpeg_std_error(&d->err.pub);
	d->err.pub.error_exit = on_error;
	d->err.pub.emit_message = on_message;
	jpeg_create_decompress(&d->cinfo);
	d->zd = ZSTD_createDCtx();
	if (!d->zd) {
		cdc_decoder_destroy(d);
		return -ENOMEM;
	}
	*out = d;
	return 0;
}

void cdc_decoder_limit(struct cdc_decoder *d, uint64_t max_pixels)
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

void cdc_decoder_destroy(struct cdc_decoder *d)
{
	if (!d)
		return;
	jpeg_destroy_decompress(&d->cinfo);
	ZSTD_freeDCtx(d->zd);
	free(d->scratch);
	free(d->splice);
	free(d->idx);
	free(d->xi);
	free(d->xw);
	free(d->hrow);
	free(d->fwork);
	free(d);
}

/* The horizontal pass loads 4 elements at a pixel's 3: one past the row's last pixel. */
#define HROW_PAD 4

size_t cdc_decoder_held(const struct cdc_decoder *d)
{
	return d->scratch_size + d->splice_size + d->xcap * (2 * sizeof(*d->xi) + sizeof(*d->xw)) +
	       (d->hrow ? (d->hcap + HROW_PAD) * sizeof(*d->hrow) : 0) + d->fwork_size;
}

void cdc_decoder_trim(struct cdc_decoder *d, size_t keep)
{
	if (d->scratch_size > keep) {
		free(d->scratch);
		d->scratch = NULL;
		d->scratch_size = 0;
	}
	if (d->splice_size > keep) {
		free(d->splice);
		d->splice = NULL;
		d->splice_size = 0;
	}
	if (d->fwork_size > keep) {
		free(d->fwork);
		d->fwork = NULL;
		d->fwork_size = 0;
	}
}

/* Grow-only buffers: after the first few samples a worker never allocates again (but after an
 * outlier, which cdc_decoder_trim lets go). */
static int reserve(struct cdc_decoder *d, size_t n)
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

static int reserve_x(struct cdc_decoder *d, size_t w, size_t src_row)
{
	if (w > d->xcap) {
		int32_t *xi = realloc(d->xi, 2 * w * sizeof(*xi));
		if (xi)
			d->xi = xi;
		uint32_t *xw = realloc(d->xw, w * sizeof(*xw));
		if (xw)
			d->xw = xw;
		if (!xi || !xw)
			return -ENOMEM;
		d->xcap = w;
	}
	if (src_row > d->hcap) {
		uint16_t *hr = realloc(d->hrow, (src_row + HROW_PAD) * sizeof(*hr));
		if (!hr)
			return -ENOMEM;
		d->hrow = hr;
		d->hcap = src_row;
	}
	return 0;
}

/* Blend of two pixels of the vertically blended row: @l and @r (3 values each, 15-bit), weights
 * @w = left | right << 16 in 1/256, as 4 int32 lanes (the 4th is junk). SSE2 (x86-64's baseline):
 * one pmaddwd does the three multiply-adds. */
#if defined(__SSE2__)
#include <emmintrin.h>
static inline __m128i blend2(const uint16_t *l, const uint16_t *r, uint32_t w)
{
	__m128i a = _mm_loadl_epi64((const __m128i *)(const void *)l);
	__m128i b = _mm_loadl_epi64((const __m128i *)(const void *)r);
	__m128i s = _mm_madd_epi16(_mm_unpacklo_epi16(a, b), _mm_set1_epi32((int)w));
	return _mm_srli_epi32(_mm_add_epi32(s, _mm_set1_epi32(1 << 14)), 15);
}

/* Output pixels @ox and @ox + 1 of the row @v: bytes 0..2 and 4..6 (3 and 7 are junk). */
static inline __m128i blend_pair(const uint16_t *v, const int32_t *xi, const uint32_t *xw,
				 uint32_t ox)
{
	__m128i p = _mm_packs_epi32(blend2(v + xi[2 * ox], v + xi[2 * ox + 1], xw[ox]),
				    blend2(v + xi[2 * ox + 2], v + xi[2 * ox + 3], xw[ox + 1]));
	return _mm_packus_epi16(p, p);
}
#endif

#ifdef HAVE_AVX2_PATH
/* NHWC output pixels [0, n) of the row @v into @drow, four a step with AVX2 (the same arithmetic
 * as blend2(): one vpmaddwd per pixel pair of lanes); returns how many it wrote, leaving at least
 * the last pixel to the caller (4-byte stores of 3-byte pixels). Measured with callgrind: half
 * the instructions of the SSE2 loop per pixel. */
__attribute__((target("avx2"))) static uint32_t hrow_avx2(const uint16_t *v, const int32_t *xi,
							  const uint32_t *xw, uint32_t n,
							  uint8_t *drow)
{
	const __m256i round = _mm256_set1_epi32(1 << 14);
	const __m256i even = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
	const __m256i odd = _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3);
	uint32_t ox = 0;

	for (; ox + 4 < n; ox += 4) {
		const int32_t *x = xi + 2 * ox;
		/* lane 0: pixels ox, ox + 1; lane 1: ox + 2, ox + 3 (4 values each, 3 used) */
		__m128i l01 = _mm_loadl_epi64((const __m128i *)(const void *)(v + x[0]));
		__m128i r01 = _mm_loadl_epi64((const __m128i *)(const void *)(v + x[1]));
		__m128i l23 = _mm_loadl_epi64((const __m128i *)(const void *)(v + x[4]));
		__m128i r23 = _mm_loadl_epi64((const __m128i *)(const void *)(v + x[5]));
		l01 = _mm_unpacklo_epi64(l01, _mm_loadl_epi64((const __m128i *)(const void *)(v + x[2])));
		r01 = _mm_unpacklo_epi64(r01, _mm_loadl_epi64((const __m128i *)(const void *)(v + x[3])));
		l23 = _mm_unpacklo_epi64(l23, _mm_loadl_epi64((const __m128i *)(const void *)(v + x[6])));
		r23 = _mm_unpacklo_epi64(r23, _mm_loadl_epi64((const __m128i *)(const void *)(v + x[7])));
		__m256i l = _mm256_inserti128_si256(_mm256_castsi128_si256(l01), l23, 1);
		__m256i r = _mm256_inserti128_si256(_mm256_castsi128_si256(r01), r23, 1);
		__m256i w = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(xw + ox)));
		/* unpacklo pairs pixels ox and ox + 2, unpackhi ox + 1 and ox + 3 */
		__m256i a = _mm256_madd_epi16(_mm256_unpacklo_epi16(l, r), _mm256_permutevar8x32_epi32(w, even));
		__m256i b = _mm256_madd_epi16(_mm256_unpackhi_epi16(l, r), _mm256_permutevar8x32_epi32(w, odd));
		a = _mm256_srli_epi32(_mm256_add_epi32(a, round), 15);
		b = _mm256_srli_epi32(_mm256_add_epi32(b, round), 15);
		__m256i p = _mm256_packs_epi32(a, b);
		p = _mm256_packus_epi16(p, p);
		__m128i p01 = _mm256_castsi256_si128(p), p23 = _mm256_extracti128_si256(p, 1);
		uint32_t q[4] = { (uint32_t)_mm_cvtsi128_si32(p01),
				  (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(p01, 4)),
				  (uint32_t)_mm_cvtsi128_si32(p23),
				  (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(p23, 4)) };
		for (int k = 0; k < 4; k++)
			memcpy(drow + 3 * (ox + (uint32_t)k), &q[k], 4);
	}
	return ox;
}
#endif

/* Channel @ch of output pixel @ox of the row @v, without SSE2 (the row's tail). */
static inline uint8_t blend1(const uint16_t *v, const int32_t *xi, const uint32_t *xw, uint32_t ox,
			     int ch)
{
	uint32_t l = v[xi[2 * ox] + ch], r = v[xi[2 * ox + 1] + ch];

	return (uint8_t)((l * (xw[ox] & 0xffff) + r * (xw[ox] >> 16) + 16384) >> 15);
}

/* The source position output sample @i of @out maps to, for a window of @len source pixels from
 * @x0 (pixel centres aligned), clamped to [0, @n - 1]; its two neighbours in *lo and *hi. */
static inline double src_pos(double x0, uint32_t i, double len, uint32_t out, uint32_t n,
			     uint32_t *lo, uint32_t *hi)
{
	double s = x0 + (i + 0.5) * len / out - 0.5;

	if (s < 0)
		s = 0;
	if (s > n - 1)
		s = n - 1;
	*lo = (uint32_t)s;
	*hi = *lo + 1 < n ? *lo + 1 : *lo;
	return s;
}

/* Bilinear resize of the window (x0, y0, sw, sh) (fractional, in pixels of @src, which is
 * @src_w x @src_h x 3 with @stride bytes per row) to @o, flipped if asked, into @dst.
 *
 * Separable, in fixed point, vertical pass first: for each output row, the two source rows are
 * blended over the columns the window uses (contiguous, so it vectorises) into 15-bit values,
 * then that one row is resized horizontally through the column tables, into which the flip is
 * folded: per output pixel one SSE2 multiply-add of the (left, right) value pairs of its three
 * channels, two pixels per step. Measured with callgrind on 224x224 crops of photographs, the
 * horizontal pass was 88% of the resize's instructions as scalar code (40 per pixel); this order
 * halves the time of the horizontal-first one, as the gathers run once per output row instead of
 * once per source row. The DCT scale has already done the bulk of any shrink (an averaging
 * filter), so what is left is a factor below 2 and bilinear does not alias. */
static int resize(struct cdc_decoder *d, const uint8_t *src, uint32_t src_w, uint32_t src_h,
		  size_t stride, double x0, double y0, double sw, double sh, const struct cdc_out *o,
		  uint8_t *dst)
{
	const size_t plane = (size_t)o->h * o->w;
	uint32_t lo = UINT32_MAX, hi = 0;

	if (o->filter != CDC_FILTER_FAST) {  /* bicubic, antialiased: torchvision's (±1) */
		struct cdc_resize r = { .filter = (enum cdc_filter)o->filter,
					.antialias = o->antialias, .out_h = o->h, .out_w = o->w,
					.flip = o->flip, .nchw = o->nchw };
		size_t need = (cdc_resize_filter_need(&r, sw, sh) + 15) / 16 * 16;
		if (need > d->fwork_size) {
			free(d->fwork);
			d->fwork_size = 0;
			if (!(d->fwork = aligned_alloc(16, need)))
				return -ENOMEM;
			d->fwork_size = need;
		}
		cdc_resize_filter(src, src_w, src_h, stride, x0, y0, sw, sh, &r, dst, d->fwork);
		return 0;
	}

	if (reserve_x(d, o->w, (size_t)src_w * 3) < 0)
		return -ENOMEM;
	for (uint32_t ox = 0; ox < o->w; ox++) {
		uint32_t xl, xr;
		double sx = src_pos(x0, ox, sw, o->w, src_w, &xl, &xr);
		uint32_t col = o->flip ? o->w - 1 - ox : ox;
		uint32_t wr = (uint32_t)lround((sx - xl) * 256);
		d->xi[2 * col] = (int32_t)xl * 3;
		d->xi[2 * col + 1] = (int32_t)xr * 3;
		d->xw[col] = (256 - wr) | wr << 16;
		if (xl < lo)
			lo = xl;
		if (xr > hi)
			hi = xr;
	}
	const size_t c0 = (size_t)lo * 3, c1 = (size_t)hi * 3 + 3;
	/* Locals with restrict: stores to the uint8_t output may alias anything, and without them
	 * the compiler reloads the tables on every pixel. */
	const int32_t *restrict xi = d->xi;
	const uint32_t *restrict xw = d->xw;
	uint16_t *restrict v = d->hrow;  /* one vertically blended row, value x 128, indexed like @src */
	memset(v + c1, 0, HROW_PAD * sizeof(*v));  /* read, never used: keep them defined */
	for (uint32_t oy = 0; oy < o->h; oy++) {
		uint32_t yt, yb;
		double sy = src_pos(y0, oy, sh, o->h, src_h, &yt, &yb);
		/* weights in 1/128, so that the blend fits 16-bit lanes (the compiler vectorises it
		 * 16 wide; a 1/256 blend shifted down does not) */
		uint16_t wb = (uint16_t)lround((sy - yt) * 128), wt = (uint16_t)(128 - wb);
		const uint8_t *restrict t = src + stride * yt, *restrict b = src + stride * yb;
		for (size_t i = c0; i < c1; i++)
			v[i] = (uint16_t)(t[i] * wt + b[i] * wb);
		uint32_t ox = 0;
		if (!o->nchw) {
			uint8_t *restrict drow = dst + (size_t)o->w * 3 * oy;
#if defined(__SSE2__)
			/* 4-byte stores of 3-byte pixels: the junk byte is overwritten by the next
			 * pixel, so the row's last pixel is left to the scalar loop */
#ifdef HAVE_AVX2_PATH
			if (d->avx2)
				ox = hrow_avx2(v, xi, xw, o->w, drow);
#endif
			for (; ox + 2 < o->w; ox += 2) {
				__m128i p = blend_pair(v, xi, xw, ox);
				uint32_t a = (uint32_t)_mm_cvtsi128_si32(p);
				uint32_t b2 = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(p, 4));
				memcpy(drow + 3 * ox, &a, 4);
				memcpy(drow + 3 * ox + 3, &b2, 4);
			}
#endif
			for (; ox < o->w; ox++)
				for (int ch = 0; ch < 3; ch++)
					drow[3 * ox + ch] = blend1(v, xi, xw, ox, ch);
		} else {
			uint8_t *d0 = dst + (size_t)oy * o->w;
#if defined(__SSE2__)
			for (; ox + 1 < o->w; ox += 2) {
				uint8_t px[8];
				_mm_storel_epi64((__m128i *)(void *)px, blend_pair(v, xi, xw, ox));
				for (int ch = 0; ch < 3; ch++) {
					d0[ch * plane + ox] = px[ch];
					d0[ch * plane + ox + 1] = px[4 + ch];
				}
			}
#endif
			for (; ox < o->w; ox++)
				for (int ch = 0; ch < 3; ch++)
					d0[ch * plane + ox] = blend1(v, xi, xw, ox, ch);
		}
	}
	return 0;
}

/* Is a @w x @h frame above the decoder's limit (cdc_decoder_limit)? 1 with @why set, else 0. */
static int too_many_pixels(const struct cdc_decoder *d, uint32_t w, uint32_t h, char *why,
			   size_t whylen)
{
	if (!d->max_pixels || (uint64_t)w * h <= d->max_pixels)
		return 0;
	snprintf(why, whylen, "JPEG of %ux%u pixels, above the limit of %llu (loaderd --max-pixels)",
		 w, h, (unsigned long long)d->max_pixels);
	return 1;
}

/* Clip @crop to a @w x @h stream: the window was planned from the index, and the stream has the
 * last word on the size. A window that starts outside the image becomes the whole image. */
static void clip_window(struct cdc_crop *win, uint32_t w, uint32_t h)
{
	if (win->x >= w || win->y >= h) {
		win->x = win->y = 0;
		win->w = w;
		win->h = h;
	}
	if (win->w > w - win->x)
		win->w = w - win->x;
	if (win->h > h - win->y)
		win->h = h - win->y;
}

/* Does fancy upsampling blend horizontally neighbouring chroma samples in @c's decode (after
 * jpeg_start_decompress)? That is where a component has fewer samples per row than the output
 * (after the DCT scaling, which gives 4:2:0 chroma its full size at 1/2 to 1/8 but not 4:2:2's),
 * except at 1/8, where libjpeg turns fancy upsampling off (a sample is one pixel). Errs towards
 * yes (4:1:1's plain replication counts): a yes costs at most an iMCU column on each side. */
static int fancy_across_columns(const struct jpeg_decompress_struct *c)
{
	if (!c->do_fancy_upsampling || c->min_DCT_scaled_size <= 1)
		return 0;
	for (int i = 0; i < c->num_components; i++) {
		const jpeg_component_info *k = &c->comp_info[i];
		if (k->h_samp_factor * k->DCT_scaled_size < c->max_h_samp_factor * c->min_DCT_scaled_size)
			return 1;
	}
	return 0;
}

/* Decode the rows and columns of the JPEG @jpg that cover @crop (in its pixels) at DCT scale
 * 1/@den (0: chosen from the clipped window and @out_h x @out_w) into the scratch buffer, and
 * describe them in @win (positions in the stream's scaled pixels). The window's pixels equal a
 * full decode's at that scale.
 * Columns outside the window's iMCU columns are left out (jpeg_crop_scanline()), and the rows
 * above it are skipped (jpeg_skip_scanlines(), which keeps the context rows that vertical
 * upsampling and block smoothing need). Horizontal fancy upsampling blends a pixel's chroma
 * sample with its left or right neighbour, and libjpeg takes the crop's edges for the image's
 * (it repeats the edge sample there): the crop's first pixel, and its last where that is the
 * right half of a sample, differ from a full decode's. So where that upsampling runs, the crop
 * reaches one pixel past the window on each side (before jpeg_crop_scanline() widens it to
 * iMCU boundaries), which keeps those pixels out of the window. Without it, about half of the
 * RandomResizedCrop windows of real 4:2:0 and 4:2:2 photographs at 1/1 (and of 4:2:2's at 1/2 and
 * 1/4) had an edge column off, by up to 35. And a crop of 2 chroma samples or fewer is upsampled
 * plainly (libjpeg re-chooses the upsampler for the crop's width), so the crop is at least
 * FANCY_MIN_W pixels wide. */
#define FANCY_MIN_W 6u
static __attribute__((noinline)) int rows_body(struct cdc_decoder *d, const uint8_t *jpg,
		size_t len, const struct cdc_crop *crop, unsigned den, uint32_t out_h, uint32_t out_w,
		struct cdc_window *win, char *why, size_t whylen)
{
	struct jpeg_decompress_struct *c = &d->cinfo;
	struct cdc_crop cw0 = *crop;

	jpeg_mem_src(c, jpg, (unsigned long)len);
	jpeg_read_header(c, TRUE);
	if (too_many_pixels(d, c->image_width, c->image_height, why, whylen)) {
		jpeg_abort_decompress(c);
		return -EBADMSG;
	}
	clip_window(&cw0, c->image_width, c->image_height);
	if (!den)
		den = cdc_jpeg_scale(&cw0, out_h, out_w);
	c->out_color_space = JCS_RGB;
	c->scale_num = 1;
	c->scale_denom = den;
	jpeg_start_decompress(c);

	JDIMENSION sx = cw0.x / den, sy = cw0.y / den;
	JDIMENSION ex = (cw0.x + cw0.w + den - 1) / den, ey = (cw0.y + cw0.h + den - 1) / den;
	if (ex > c->output_width)
		ex = c->output_width;
	if (ey > c->output_height)
		ey = c->output_height;
	if (ex <= sx)
		ex = sx + 1;
	if (ey <= sy)
		ey = sy + 1;
	JDIMENSION xoff = sx, cw = ex - sx;
	if (fancy_across_columns(c)) {
		JDIMENSION end = ex < c->output_width ? ex + 1 : ex;
		xoff = sx > 0 ? sx - 1 : 0;
		if (end - xoff < FANCY_MIN_W) {
			end = xoff + FANCY_MIN_W < c->output_width ? xoff + FANCY_MIN_W : c->output_width;
			xoff = end > FANCY_MIN_W ? end - FANCY_MIN_W : 0;
		}
		cw = end - xoff;
	}
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

	win->px = d->scratch;
	win->stride = stride;
	win->w = cw;
	win->h = ey - sy;
	win->ox = xoff;
	win->oy = sy;
	win->den = den;
	win->x0 = (double)cw0.x / den - xoff;
	win->y0 = (double)cw0.y / den - sy;
	win->sw = (double)cw0.w / den;
	win->sh = (double)cw0.h / den;
	return 0;
}

/* libjpeg's errors longjmp here; rows_body() holds every local that changes after the setjmp. */
static int decode_rows(struct cdc_decoder *d, const uint8_t *jpg, size_t len,
		       const struct cdc_crop *crop, unsigned den, uint32_t out_h, uint32_t out_w,
		       struct cdc_window *win, char *why, size_t whylen)
{
	struct jpeg_decompress_struct *c = &d->cinfo;

	if (setjmp(d->err.jb)) {
		char msg[JMSG_LENGTH_MAX];
		c->err->format_message((j_common_ptr)c, msg);
		snprintf(why, whylen, "JPEG: %s", msg);
		jpeg_abort_decompress(c);
		return -EBADMSG;
	}
	return rows_body(d, jpg, len, crop, den, out_h, out_w, win, why, whylen);
}

int cdc_jpeg_window(struct cdc_decoder *d, const uint8_t *jpg, size_t len,
		    const struct cdc_crop *crop, uint32_t out_h, uint32_t out_w,
		    struct cdc_window *win, char *why, size_t whylen)
{
	return decode_rows(d, jpg, len, crop, 0, out_h, out_w, win, why, whylen);
}

/* Grow the splice buffer to @need bytes. */
static int reserve_splice(struct cdc_decoder *d, size_t need, char *why, size_t whylen)
{
	if (need > d->splice_size) {
		uint8_t *p = realloc(d->splice, need);
		if (!p) {
			snprintf(why, whylen, "out of memory for a %zu-byte splice", need);
			return -ENOMEM;
		}
		d->splice = p;
		d->splice_size = need;
	}
	return 0;
}

/* Decode the window @c (record pixels) of the splice d->splice[0, n) that starts at @plan's
 * top-left, and move the window's origin back into the record's pixels. The splice starts on an
 * MCU boundary, a multiple of 8 pixels: exact at every scale. */
static int decode_splice(struct cdc_decoder *d, long n, const struct cdc_crop *c,
			 const struct cdc_rst_plan *plan, unsigned den, uint32_t out_h,
			 uint32_t out_w, struct cdc_window *win, char *why, size_t whylen)
{
	struct cdc_crop rel = { c->x - plan->x, c->y - plan->y, c->w, c->h };
	int ret = decode_rows(d, d->splice, (size_t)n, &rel, den, out_h, out_w, win, why,
			      whylen);

	if (ret == 0) {
		win->ox += plan->x / den;
		win->oy += plan->y / den;
	}
	return ret;
}

int cdc_jpeg_rst_window(struct cdc_decoder *d, const uint8_t *jpg, size_t len,
			const struct cdc_crop *crop, uint32_t out_h, uint32_t out_w,
			struct cdc_window *win, char *why, size_t whylen)
{
	struct cdc_rst_info info;
	struct cdc_rst_plan plan;
	struct cdc_crop c = *crop;
	char tmp[160];
	int ret = cdc_rst_parse(jpg, len, &info, tmp, sizeof(tmp));

	if (ret < 0) {
		snprintf(why, whylen, "JPEG: %s", tmp);
		return ret;
	}
	if (too_many_pixels(d, info.width, info.height, why, whylen))
		return -EBADMSG;
	clip_window(&c, info.width, info.height);
	cdc_rst_plan(&info, c.x, c.y, c.w, c.h, &plan);
	unsigned den = cdc_jpeg_scale(&c, out_h, out_w);
	if (plan.whole)
		return decode_rows(d, jpg, len, &c, den, out_h, out_w, win, why, whylen);

	ret = reserve_splice(d, cdc_rst_splice_bound(len), why, whylen);
	if (ret < 0)
		return ret;
	long n = cdc_rst_splice(jpg, len, &info, &plan, d->splice, tmp, sizeof(tmp));
	if (n < 0) {
		snprintf(why, whylen, "JPEG: %s", tmp);
		return (int)n;
	}
	return decode_splice(d, n, &c, &plan, den, out_h, out_w, win, why, whylen);
}

/* Body of cdc_jpeg_idx_window with the parsed record (a large struct) in @info. */
static int idx_window(struct cdc_decoder *d, const uint8_t *rec, size_t len,
		      struct cdc_idx_info *info, const struct cdc_crop *crop, uint32_t out_h,
		      uint32_t out_w, struct cdc_window *win, char *why, size_t whylen)
{
	struct cdc_rst_plan plan;
	struct cdc_crop c = *crop;
	char tmp[160];
	int ret = cdc_idx_parse(rec, len, info, tmp, sizeof(tmp));

	if (ret < 0) {
		snprintf(why, whylen, "JPEG index: %s", tmp);
		return ret;
	}
	if (info->ncomp == 4) {  /* TurboJPEG would refuse it later; say why now */
		snprintf(why, whylen, "JPEG index: 4 components (CMYK) in a jpeg+idx record");
		return -EBADMSG;
	}
	if (too_many_pixels(d, info->geo.width, info->geo.height, why, whylen))
		return -EBADMSG;
	clip_window(&c, info->geo.width, info->geo.height);
	cdc_rst_plan(&info->geo, c.x, c.y, c.w, c.h, &plan);
	unsigned den = cdc_jpeg_scale(&c, out_h, out_w);
	if (plan.whole)  /* the record as it is: the trailer after EOI is ignored by libjpeg */
		return decode_rows(d, rec, len, &c, den, out_h, out_w, win, why, whylen);
	ret = reserve_splice(d, cdc_idx_splice_bound(info, &plan), why, whylen);
	if (ret < 0)
		return ret;
	long n = cdc_idx_splice(rec, info, &plan, d->splice, tmp, sizeof(tmp));
	if (n < 0) {
		snprintf(why, whylen, "JPEG index: %s", tmp);
		return (int)n;
	}
	return decode_splice(d, n, &c, &plan, den, out_h, out_w, win, why, whylen);
}

struct cdc_idx_info *cdc_decoder_idx(struct cdc_decoder *d)
{
	if (!d->idx)
		d->idx = malloc(sizeof(*d->idx));
	return d->idx;
}

int cdc_jpeg_idx_window(struct cdc_decoder *d, const uint8_t *rec, size_t len,
			const struct cdc_crop *crop, uint32_t out_h, uint32_t out_w,
			struct cdc_window *win, char *why, size_t whylen)
{
	if (!cdc_decoder_idx(d)) {
		snprintf(why, whylen, "out of memory for a JPEG index");
		return -ENOMEM;
	}
	return idx_window(d, rec, len, d->idx, crop, out_h, out_w, win, why, whylen);
}

int cdc_decode_jpeg_idx(struct cdc_decoder *d, const uint8_t *rec, size_t len,
			const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst,
			char *why, size_t whylen)
{
	struct cdc_window w;
	int ret = cdc_jpeg_idx_window(d, rec, len, crop, o->h, o->w, &w, why, whylen);

	return ret < 0 ? ret : resize(d, w.px, w.w, w.h, w.stride, w.x0, w.y0, w.sw, w.sh, o, dst);
}

int cdc_decode_jpeg(struct cdc_decoder *d, const uint8_t *jpg, size_t len, const struct cdc_crop *crop,
		    const struct cdc_out *o, uint8_t *dst, char *why, size_t whylen)
{
	struct cdc_window w;
	int ret = cdc_jpeg_window(d, jpg, len, crop, o->h, o->w, &w, why, whylen);

	return ret < 0 ? ret : resize(d, w.px, w.w, w.h, w.stride, w.x0, w.y0, w.sw, w.sh, o, dst);
}

int cdc_decode_jpeg_rst(struct cdc_decoder *d, const uint8_t *jpg, size_t len,
			const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst,
			char *why, size_t whylen)
{
	struct cdc_window w;
	int ret = cdc_jpeg_rst_window(d, jpg, len, crop, o->h, o->w, &w, why, whylen);

	if (ret == -ENOTSUP)  /* a JPEG, but not one that splices: decode it the usual way */
		return cdc_decode_jpeg(d, jpg, len, crop, o, dst, why, whylen);
	return ret < 0 ? ret : resize(d, w.px, w.w, w.h, w.stride, w.x0, w.y0, w.sw, w.sh, o, dst);
}

int cdc_decode_raw(struct cdc_decoder *d, const uint8_t *src, uint32_t h, uint32_t w, uint32_t c,
		   const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst)
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

const uint8_t *cdc_decode_zstd(struct cdc_decoder *d, const uint8_t *src, size_t len, size_t raw,
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

/* ---- hooks for the kinds that decode a whole image before the resize (codec/kind_image.c) ---- */

uint8_t *cdc_decoder_scratch(struct cdc_decoder *d, size_t n)
{
	return reserve(d, n ? n : 1) < 0 ? NULL : d->scratch;
}

uint64_t cdc_decoder_max_pixels(const struct cdc_decoder *d)
{
	return d->max_pixels;
}
