/* augment.c - per-sample augmentations on uint8 RGB (see augment.h).
 *
 * Exactness: each op repeats the arithmetic of torchvision 0.14's tensor implementation
 * (functional_tensor.py) on a uint8 image: the same float32 products and sums in the same order,
 * truncation to uint8 where `.to(torch.uint8)` truncates, round half to even where torch.round or
 * grid_sample's nearest rounds. Where torch sums in an order C cannot see (the mean of
 * adjust_contrast, the matrix product of affine_grid), a value may land on the other side of an
 * integer: docs/AUGMENT.md lists the differences measured against torchvision
 * (python/tests/test_augment.py). The random draws are ours, not torch's: the same distributions,
 * drawn from the sample's key, so that they are a function of (seed, epoch, sample) alone.
 * No allocation: ops that read neighbours (sharpness, the affine warp) copy the image into the
 * caller's scratch first. */
#include "codec/augment.h"
#include "common/mix.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void cdc_img_hwc(struct cdc_img *im, uint8_t *px, uint32_t h, uint32_t w)
{
	im->px = px, im->h = h, im->w = w;
	im->xs = 3, im->cs = 1, im->ys = (size_t)w * 3;
}

void cdc_img_chw(struct cdc_img *im, uint8_t *px, uint32_t h, uint32_t w)
{
	im->px = px, im->h = h, im->w = w;
	im->xs = 1, im->cs = (size_t)h * w, im->ys = w;
}

size_t cdc_aug_scratch(const struct cdc_img *im)
{
	return (size_t)im->h * im->w * 3;
}

/* Contiguous images only (a decoded sample): pixel i (= y * w + x) of channel c is
 * px[c * cs + i * xs], HWC (xs 3, cs 1) or CHW (xs 1, cs h * w). The loops below take the pixel
 * step as a constant (XS, inlined twice by EACH_LAYOUT) so that -O3 vectorises them. */
#define INLINE static inline __attribute__((always_inline))
#define EACH_LAYOUT(fn, im, ...) \
	((im)->xs == 3 ? fn(im, 3, __VA_ARGS__) : fn(im, 1, __VA_ARGS__))

static size_t npix(const struct cdc_img *im)
{
	return (size_t)im->h * im->w;
}

/* (ratio * a + (1 - ratio) * b).clamp(0, 255).to(uint8): float32, truncated. Branch-free, so
 * that it vectorises; NaN cannot occur (finite factors, values 0..255). */
INLINE uint8_t blend(float r, float r1, float a, float b)
{
	float v = r * a + r1 * b;

	v = v > 0.0f ? v : 0.0f;      /* maxps, minps: the forms x86 has (NaN cannot occur) */
	v = v < 255.0f ? v : 255.0f;
	return (uint8_t)(int)v;
}

/* rgb_to_grayscale(img).to(uint8): (0.2989 r + 0.587 g + 0.114 b) in float32, truncated. */
INLINE float gray(float r, float g, float b)
{
	return (float)(int)(0.2989f * r + 0.587f * g + 0.114f * b);
}

/* rgb_to_grayscale's three products of every value, computed once: the same floats as
 * gray()'s, so the same sums. */
struct gray_tab {
	float r[256], g[256], b[256];
};

static void gray_tab_init(struct gray_tab *t)
{
	for (unsigned v = 0; v < 256; v++) {
		t->r[v] = 0.2989f * (float)v;
		t->g[v] = 0.587f * (float)v;
		t->b[v] = 0.114f * (float)v;
	}
}

/* The sum of the gray of every pixel, its values mapped by @lut first (defined below). */
INLINE uint64_t gray_sum_lut_x(const struct cdc_img *im, size_t XS, const uint8_t *lut,
			       const struct gray_tab *t);

/* Round half to even (grid_sample's nearest, torch.round) for |x| < 2^22: adding and taking
 * away 1.5 x 2^23 leaves the float's integer part rounded in the default mode (nearbyintf is a
 * library call on x86-64's baseline). */
INLINE float round_even(float x)
{
	const float m = 12582912.0f;  /* not folded: without -ffast-math, (x + m) - m is no identity */

	return (x + m) - m;
}

/* One table for every channel, over the whole (contiguous) image. */
static void map_lut1(const struct cdc_img *im, const uint8_t lut[256])
{
	uint8_t *p = im->px;
	size_t n = npix(im) * 3;

	for (size_t i = 0; i < n; i++)
		p[i] = lut[p[i]];
}

INLINE void map_lut_x(const struct cdc_img *im, size_t XS, const uint8_t (*lut)[256])
{
	uint8_t *p0 = im->px, *p1 = im->px + im->cs, *p2 = im->px + 2 * im->cs;
	size_t n = npix(im);

	for (size_t i = 0; i < n; i++) {
		p0[i * XS] = lut[0][p0[i * XS]];
		p1[i * XS] = lut[1][p1[i * XS]];
		p2[i * XS] = lut[2][p2[i * XS]];
	}
}

static void map_lut(const struct cdc_img *im, const uint8_t lut[3][256])
{
	EACH_LAYOUT(map_lut_x, im, lut);
}

/* A blend of every value with one constant @other, as a table of the 256 values (measured:
 * faster than the float arithmetic vectorised on x86-64's baseline, which widens bytes to
 * floats in many shuffles). */
static void blend_all(const struct cdc_img *im, float r, float r1, float other)
{
	uint8_t lut[256];

	for (unsigned v = 0; v < 256; v++)
		lut[v] = blend(r, r1, (float)v, other);
	map_lut1(im, lut);
}

void cdc_aug_brightness(const struct cdc_img *im, double factor)
{
	/* _blend(img, zeros): (1 - r) * 0 adds 0 (or -0: the same sum) */
	blend_all(im, (float)factor, (float)(1.0 - factor), 0.0f);
}

void cdc_aug_contrast(const struct cdc_img *im, double factor)
{
	uint64_t n = npix(im);

	if (!n)
		return;
	static const uint8_t id[256] = {
#define ID4(k) (k), (k) + 1, (k) + 2, (k) + 3
#define ID16(k) ID4(k), ID4((k) + 4), ID4((k) + 8), ID4((k) + 12)
#define ID64(k) ID16(k), ID16((k) + 16), ID16((k) + 32), ID16((k) + 48)
		ID64(0), ID64(64), ID64(128), ID64(192)
#undef ID64
#undef ID16
#undef ID4
	};
	struct gray_tab gt;
	gray_tab_init(&gt);
	uint64_t sum = EACH_LAYOUT(gray_sum_lut_x, im, id, &gt);
	/* torch.mean in float32: the sum (exact below 2^24) divided by the count */
	float mean = (float)sum / (float)n;

	blend_all(im, (float)factor, (float)(1.0 - factor), mean);
}

INLINE void saturation_x(const struct cdc_img *im, size_t XS, float r, float r1)
{
	uint8_t *p0 = im->px, *p1 = im->px + im->cs, *p2 = im->px + 2 * im->cs;
	size_t n = npix(im);

	for (size_t i = 0; i < n; i++) {
		float a = p0[i * XS], b = p1[i * XS], c = p2[i * XS];
		float g = gray(a, b, c);
		p0[i * XS] = blend(r, r1, a, g);
		p1[i * XS] = blend(r, r1, b, g);
		p2[i * XS] = blend(r, r1, c, g);
	}
}

void cdc_aug_saturation(const struct cdc_img *im, double factor)
{
	EACH_LAYOUT(saturation_x, im, (float)factor, (float)(1.0 - factor));
}

static inline uint8_t to_u8(float v)  /* (v * 255.0).to(uint8), v in [0, 1] */
{
	float s = v * 255.0f;

	s = s > 0.0f ? s : 0.0f;
	s = s < 255.0f ? s : 255.0f;
	return (uint8_t)(int)s;
}

/* adjust_hue in float32, op for op (_rgb2hsv, the shift, _hsv2rgb); fmod and floor of values
 * whose range is known written as the subtraction they come to (exact: Sterbenz), and every
 * branch a select, so that it vectorises. */
INLINE void hue_x(const struct cdc_img *im, size_t XS, float hf)
{
	uint8_t *p0 = im->px, *p1 = im->px + im->cs, *p2 = im->px + 2 * im->cs;
	size_t n = npix(im);

	for (size_t i = 0; i < n; i++) {
		float r = (float)p0[i * XS] / 255.0f, g = (float)p1[i * XS] / 255.0f;
		float b = (float)p2[i * XS] / 255.0f;
		float maxc = r > g ? r : g;
		maxc = maxc > b ? maxc : b;
		float minc = r < g ? r : g;
		minc = minc < b ? minc : b;
		int eqc = maxc == minc;
		float cr = maxc - minc;
		float s = cr / (eqc ? 1.0f : maxc);
		float crd = eqc ? 1.0f : cr;
		float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
		float hr = maxc == r ? bc - gc : 0.0f;
		float hg = maxc == g && maxc != r ? 2.0f + rc - bc : 0.0f;
		float hb = maxc != g && maxc != r ? 4.0f + gc - rc : 0.0f;
		float h = ((hr + hg) + hb) / 6.0f + 1.0f;  /* in [1 - 1/6, 2) */
		h = h >= 1.0f ? h - 1.0f : h;             /* torch.fmod(h, 1.0) */
		float v = maxc;
		h = h + hf;                               /* (h + hue) % 1.0: in (-0.5, 1.5) */
		h = h >= 1.0f ? h - 1.0f : h;
		h = h < 0.0f ? h + 1.0f : h;
		float h6 = h * 6.0f;
		float fi = (float)(int)h6;                /* floor: h6 >= 0 */
		float f = h6 - fi;
		int ii = (int)fi;
		ii = ii == 6 ? 0 : ii;                    /* i % 6 */
		float pp = v * (1.0f - s), q = v * (1.0f - s * f), t = v * (1.0f - s * (1.0f - f));
		pp = pp < 0.0f ? 0.0f : pp > 1.0f ? 1.0f : pp;
		q = q < 0.0f ? 0.0f : q > 1.0f ? 1.0f : q;
		t = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
		float o0 = ii == 0 || ii == 5 ? v : ii == 1 ? q : ii == 4 ? t : pp;
		float o1 = ii == 1 || ii == 2 ? v : ii == 0 ? t : ii == 3 ? q : pp;
		float o2 = ii == 3 || ii == 4 ? v : ii == 2 ? t : ii == 5 ? q : pp;
		p0[i * XS] = to_u8(o0);
		p1[i * XS] = to_u8(o1);
		p2[i * XS] = to_u8(o2);
	}
}

void cdc_aug_hue(const struct cdc_img *im, double factor)
{
	EACH_LAYOUT(hue_x, im, (float)factor);
}

void cdc_aug_posterize(const struct cdc_img *im, unsigned bits)
{
	uint8_t mask = (uint8_t)(bits >= 8 ? 0xffu : (0xffu << (8 - bits)) & 0xffu);
	uint8_t *p = im->px;
	size_t n = npix(im) * 3;

	for (size_t i = 0; i < n; i++)
		p[i] &= mask;
}

void cdc_aug_solarize(const struct cdc_img *im, double threshold)
{
	/* img >= threshold (float) for an integer img: img >= ceil(threshold) */
	float t = (float)threshold;
	unsigned k = 0;
	while (k < 256 && !((float)k >= t))
		k++;
	uint8_t *p = im->px;
	size_t n = npix(im) * 3;

	for (size_t i = 0; i < n; i++)
		p[i] = p[i] >= k ? (uint8_t)(255 - p[i]) : p[i];
}

static void invert(const struct cdc_img *im)
{
	uint8_t *p = im->px;
	size_t n = npix(im) * 3;

	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(255 - p[i]);
}

INLINE void histograms_x(const struct cdc_img *im, size_t XS, uint32_t (*hist)[256])
{
	const uint8_t *p0 = im->px, *p1 = im->px + im->cs, *p2 = im->px + 2 * im->cs;
	size_t n = npix(im);

	memset(hist, 0, sizeof(uint32_t) * 3 * 256);
	for (size_t i = 0; i < n; i++) {
		hist[0][p0[i * XS]]++;
		hist[1][p1[i * XS]]++;
		hist[2][p2[i * XS]]++;
	}
}

static void histograms(const struct cdc_img *im, uint32_t hist[3][256])
{
	EACH_LAYOUT(histograms_x, im, hist);
}

void cdc_aug_autocontrast(const struct cdc_img *im)
{
	uint32_t hist[3][256];
	uint8_t lut[3][256];

	histograms(im, hist);
	for (int c = 0; c < 3; c++) {
		unsigned lo = 0, hi = 255;
		while (lo < 255 && !hist[c][lo])
			lo++;
		while (hi > 0 && !hist[c][hi])
			hi--;
		float mn = (float)lo, scale;
		if (hi <= lo)  /* scale = 255 / 0 is not finite: minimum 0, scale 1 */
			mn = 0.0f, scale = 1.0f;
		else
			scale = 255.0f / ((float)hi - (float)lo);
		for (unsigned v = 0; v < 256; v++) {
			float o = ((float)v - mn) * scale;
			lut[c][v] = o <= 0.0f ? 0 : o >= 255.0f ? 255 : (uint8_t)o;
		}
	}
	map_lut(im, lut);
}

void cdc_aug_equalize(const struct cdc_img *im)
{
	uint32_t hist[3][256];
	uint8_t lut[3][256];

	histograms(im, hist);
	for (int c = 0; c < 3; c++) {
		/* _scale_channel: step = (the nonzero bins but the last) // 255 */
		int last = 255;
		while (last > 0 && !hist[c][last])
			last--;
		uint64_t total = 0;
		for (int v = 0; v < last; v++)
			total += hist[c][v];
		uint64_t step = total / 255;
		if (!step) {
			for (unsigned v = 0; v < 256; v++)
				lut[c][v] = (uint8_t)v;
			continue;
		}
		/* lut[v] = (cumsum[v - 1] + step // 2) // step, lut[0] = 0, clamped to 255 */
		uint64_t cum = 0;
		lut[c][0] = 0;
		for (unsigned v = 1; v < 256; v++) {
			cum += hist[c][v - 1];
			uint64_t o = (cum + step / 2) / step;
			lut[c][v] = o > 255 ? 255 : (uint8_t)o;
		}
	}
	map_lut(im, lut);
}

/* The image as HWC into @scratch (sharpness and the warps read neighbours). */
static void copy_out(const struct cdc_img *im, uint8_t *scratch)
{
	size_t n = npix(im);

	if (im->xs == 3) {
		memcpy(scratch, im->px, n * 3);
		return;
	}
	for (size_t i = 0; i < n; i++)
		for (int c = 0; c < 3; c++)
			scratch[i * 3 + c] = im->px[c * im->cs + i];
}

/* One interior row of the sharpness blend: the 3x3 kernel (1 1 1, 1 5 1, 1 1 1) / 13, rounded
 * (a sum k / 13 is never a tie, so integers give torch's value), blended with the pixel. HWC: the
 * row's interleaved values in one run (a neighbour is 3 values away), which vectorises. */
INLINE void sharp_row_x(const struct cdc_img *im, size_t XS, const uint8_t *s, uint32_t y,
			float r, float r1)
{
	uint32_t w = im->w;
	size_t rs = (size_t)w * 3;
	const uint8_t *up = s + (y - 1) * rs, *mid = s + y * rs, *dn = s + (y + 1) * rs;

	if (XS == 3) {
		uint8_t *out = im->px + (size_t)y * rs;
		for (size_t k = 3; k + 3 < rs; k++) {
			unsigned sum = (unsigned)up[k - 3] + up[k] + up[k + 3] + mid[k - 3] +
				       5u * mid[k] + mid[k + 3] + dn[k - 3] + dn[k] + dn[k + 3];
			out[k] = blend(r, r1, (float)mid[k], (float)((2 * sum + 13) / 26));
		}
		return;
	}
	for (uint32_t x = 1; x + 1 < w; x++)
		for (int c = 0; c < 3; c++) {
			size_t k = (size_t)x * 3 + c;
			unsigned sum = (unsigned)up[k - 3] + up[k] + up[k + 3] + mid[k - 3] +
				       5u * mid[k] + mid[k + 3] + dn[k - 3] + dn[k] + dn[k + 3];
			unsigned blur = (2 * sum + 13) / 26;
			im->px[c * im->cs + ((size_t)y * w + x) * XS] =
				blend(r, r1, (float)mid[k], (float)blur);
		}
}

void cdc_aug_sharpness(const struct cdc_img *im, double factor, uint8_t *scratch)
{
	uint32_t h = im->h, w = im->w;
	float r = (float)factor, r1 = (float)(1.0 - factor);

	if (h <= 2 || w <= 2)
		return;
	copy_out(im, scratch);
	/* the border keeps its pixels, blended with themselves (r a + (1 - r) a is not always
	 * a in float32: torchvision's result, kept) */
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x += (y == 0 || y == h - 1) ? 1 : w - 1) {
			size_t i = (size_t)y * w + x;
			for (int c = 0; c < 3; c++) {
				float a = scratch[i * 3 + c];
				im->px[c * im->cs + i * im->xs] = blend(r, r1, a, a);
			}
		}
	for (uint32_t y = 1; y + 1 < h; y++)
		EACH_LAYOUT(sharp_row_x, im, scratch, y, r, r1);
}

void cdc_aug_matrix(double cx, double cy, double angle, double tx, double ty, double scale,
		    double shx, double shy, double m[6])
{
	double rot = angle * (M_PI / 180.0);
	double sx = shx * (M_PI / 180.0), sy = shy * (M_PI / 180.0);
	double a = cos(rot - sy) / cos(sy);
	double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
	double c = sin(rot - sy) / cos(sy);
	double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);

	m[0] = d / scale, m[1] = -b / scale, m[2] = 0.0 / scale;
	m[3] = -c / scale, m[4] = a / scale, m[5] = 0.0 / scale;
	m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
	m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
	m[2] += cx;
	m[5] += cy;
}

#define AFFINE_W_MAX 8192u  /* CTL_CROP_MAX: the column products on the stack */

INLINE void affine_row_x(const struct cdc_img *im, size_t XS, const uint8_t *s, uint32_t y,
			 const float *cx0, const float *cx3, float ry1, float ry4, float t2,
			 float t5)
{
	uint32_t w = im->w;
	float fw = (float)w, fh = (float)im->h;
	uint8_t *p0 = im->px, *p1 = im->px + im->cs, *p2 = im->px + 2 * im->cs;

	for (uint32_t x = 0; x < w; x++) {
		float gx = (cx0[x] + ry1) + t2, gy = (cx3[x] + ry4) + t5;
		/* grid_sample, align_corners=False, nearest */
		float ix = round_even(((gx + 1.0f) * fw - 1.0f) / 2.0f);
		float iy = round_even(((gy + 1.0f) * fh - 1.0f) / 2.0f);
		size_t o = ((size_t)y * w + x) * XS;
		if (ix >= 0.0f && ix < fw && iy >= 0.0f && iy < fh) {
			const uint8_t *q = s + ((size_t)iy * w + (size_t)ix) * 3;
			p0[o] = q[0], p1[o] = q[1], p2[o] = q[2];
		} else {
			p0[o] = p1[o] = p2[o] = 0;
		}
	}
}

void cdc_aug_affine(const struct cdc_img *im, const double m[6], uint8_t *scratch)
{
	uint32_t h = im->h, w = im->w;
	/* _gen_affine_grid: theta (float32) / (0.5 w, 0.5 h), the base grid at pixel centres; the
	 * grid times theta summed as (x t0 + y t1) + t2, each product once per column or row */
	float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
	float t0 = (float)m[0] / hw, t1 = (float)m[1] / hw, t2 = (float)m[2] / hw;
	float t3 = (float)m[3] / hh, t4 = (float)m[4] / hh, t5 = (float)m[5] / hh;
	float cx0[AFFINE_W_MAX], cx3[AFFINE_W_MAX];

	assert(w <= AFFINE_W_MAX);
	copy_out(im, scratch);
	for (uint32_t x = 0; x < w; x++) {
		float bx = -(float)w * 0.5f + 0.5f + (float)x;
		cx0[x] = bx * t0;
		cx3[x] = bx * t3;
	}
	for (uint32_t y = 0; y < h; y++) {
		float by = -(float)h * 0.5f + 0.5f + (float)y;
		EACH_LAYOUT(affine_row_x, im, scratch, y, cx0, cx3, by * t1, by * t4, t2, t5);
	}
}

void cdc_aug_erase(const struct cdc_img *im, uint32_t i, uint32_t j, uint32_t h, uint32_t w,
		   const uint8_t rgb[3])
{
	for (uint32_t y = i; y < i + h && y < im->h; y++)
		for (uint32_t x = j; x < j + w && x < im->w; x++) {
			size_t o = ((size_t)y * im->w + x) * im->xs;
			for (int c = 0; c < 3; c++)
				im->px[c * im->cs + o] = rgb[c];
		}
}

static void saturation_table(const struct cdc_img *im, float r, float r1, const uint8_t *lut,
			     uint8_t *scratch);

const char *const cdc_aug_op_names[CDC_OPS] = {
	"Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
	"Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
	"Invert",
};

void cdc_aug_apply_op(const struct cdc_img *im, enum cdc_aug_op op, double magnitude,
		      uint8_t *scratch)
{
	double m[6];
	double cx = -(double)im->w * 0.5, cy = -(double)im->h * 0.5;  /* center=[0, 0] */
	/* math.radians(math.degrees(math.atan(mag))), as torchvision passes the shear */
	double shear = atan(magnitude) * (180.0 / M_PI);

	switch (op) {
	case CDC_OP_IDENTITY: case CDC_OPS:
		return;
	case CDC_OP_SHEAR_X:
		cdc_aug_matrix(cx, cy, 0.0, 0.0, 0.0, 1.0, shear, 0.0, m);
		break;
	case CDC_OP_SHEAR_Y:
		cdc_aug_matrix(cx, cy, 0.0, 0.0, 0.0, 1.0, 0.0, shear, m);
		break;
	case CDC_OP_TRANSLATE_X:
		cdc_aug_matrix(0.0, 0.0, 0.0, (double)(long)magnitude, 0.0, 1.0, 0.0, 0.0, m);
		break;
	case CDC_OP_TRANSLATE_Y:
		cdc_aug_matrix(0.0, 0.0, 0.0, 0.0, (double)(long)magnitude, 1.0, 0.0, 0.0, m);
		break;
	case CDC_OP_ROTATE:  /* F.rotate: the inverse matrix of -angle */
		cdc_aug_matrix(0.0, 0.0, -magnitude, 0.0, 0.0, 1.0, 0.0, 0.0, m);
		break;
	case CDC_OP_BRIGHTNESS:
		cdc_aug_brightness(im, 1.0 + magnitude);
		return;
	case CDC_OP_COLOR:
		if (cdc_aug_scratch(im) >= 65536) {
			uint8_t id[256];
			for (unsigned v = 0; v < 256; v++)
				id[v] = (uint8_t)v;
			saturation_table(im, (float)(1.0 + magnitude), (float)(1.0 - (1.0 + magnitude)),
					 id, scratch);
		} else {
			cdc_aug_saturation(im, 1.0 + magnitude);
		}
		return;
	case CDC_OP_CONTRAST:
		cdc_aug_contrast(im, 1.0 + magnitude);
		return;
	case CDC_OP_SHARPNESS:
		cdc_aug_sharpness(im, 1.0 + magnitude, scratch);
		return;
	case CDC_OP_POSTERIZE:
		cdc_aug_posterize(im, (unsigned)(long)magnitude);
		return;
	case CDC_OP_SOLARIZE:
		cdc_aug_solarize(im, magnitude);
		return;
	case CDC_OP_AUTOCONTRAST:
		cdc_aug_autocontrast(im);
		return;
	case CDC_OP_EQUALIZE:
		cdc_aug_equalize(im);
		return;
	case CDC_OP_INVERT:
		invert(im);
		return;
	}
	cdc_aug_affine(im, m, scratch);
}

/* torch.linspace(start, end, n)[i] in float32, as torch 1.13's CPU kernel (AVX2 build) makes it:
 * step = (end - start) / (n - 1); the first n / 2 values start + step * i, the others
 * end - step * (n - 1 - i), each a fused multiply-add; but the first 16-value blocks come from its
 * vectorised loop (two vectors of 8 a turn), whose first value is that fused formula at the
 * block's index and whose others add k * step to it, rounded twice. The bins are part of what a
 * magnitude means (a factor one ulp away truncates to another pixel), so the order is kept. */
static float linspace(double start, double end, unsigned n, unsigned i)
{
	float s = (float)start, e = (float)end;
	if (n == 1)
		return s;
	float step = (e - s) / (float)(n - 1);
	unsigned half = n / 2;
	unsigned vec = n / 16 * 16;  /* values the vectorised loop makes */
	unsigned at = i < vec ? i / 8 * 8 : i;
	float base = at < half ? fmaf(step, (float)at, s) : fmaf(-step, (float)(n - at - 1), e);

	if (at == i)
		return base;
	float k = (float)(i - at) * step;
	return base + k;
}

double cdc_aug_magnitude(enum cdc_aug_space space, enum cdc_aug_op op, unsigned bin,
			 unsigned nbins, uint32_t h, uint32_t w)
{
	int wide = space == CDC_SPACE_WIDE;

	switch (op) {
	case CDC_OP_SHEAR_X: case CDC_OP_SHEAR_Y:
		return linspace(0.0, wide ? 0.99 : 0.3, nbins, bin);
	case CDC_OP_TRANSLATE_X:
		return linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * w, nbins, bin);
	case CDC_OP_TRANSLATE_Y:
		return linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * h, nbins, bin);
	case CDC_OP_ROTATE:
		return linspace(0.0, wide ? 135.0 : 30.0, nbins, bin);
	case CDC_OP_BRIGHTNESS: case CDC_OP_COLOR: case CDC_OP_CONTRAST: case CDC_OP_SHARPNESS:
		return linspace(0.0, wide ? 0.99 : 0.9, nbins, bin);
	case CDC_OP_POSTERIZE: {
		/* 8 - (arange(n) / ((n - 1) / k)).round().int(), k = 6 wide, else 4 */
		float q = (float)bin / (float)((double)(nbins - 1) / (wide ? 6.0 : 4.0));
		return 8.0 - (double)nearbyintf(q);
	}
	case CDC_OP_SOLARIZE:
		return linspace(255.0, 0.0, nbins, bin);
	default:
		return 0.0;
	}
}

/* ---- the pipeline ---- */

static double uniform01(uint64_t *s)  /* [0, 1) */
{
	return (double)(mix_next(s) >> 11) * 0x1.0p-53;
}

static double uniform(uint64_t *s, double lo, double hi)
{
	return lo + (hi - lo) * uniform01(s);
}

static uint32_t below(uint64_t *s, uint32_t n)  /* uniform in [0, n), n >= 1 */
{
	return (uint32_t)(((mix_next(s) >> 32) * (uint64_t)n) >> 32);
}

static double normal(uint64_t *s)  /* Box-Muller */
{
	double u = 1.0 - uniform01(s), v = uniform01(s);

	return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* ColorJitter's adjustments with brightness and contrast kept as one pending table: both map
 * each value alone, so a run of them is one table, composed as they come (contrast's mean is
 * taken over the pixels as the pending table makes them), and applied on the way into the next
 * saturation pass, or at the end. The same values as applying each in turn; fewer passes. */

INLINE void saturation_lut_x(const struct cdc_img *im, size_t XS, const uint8_t *lut,
			     const uint8_t *sat, const float *const *gt)
{
	uint8_t *p0 = im->px, *p1 = im->px + im->cs, *p2 = im->px + 2 * im->cs;
	size_t n = npix(im);
	const float *gr = gt[0], *gg = gt[1], *gb = gt[2];

	for (size_t i = 0; i < n; i++) {
		unsigned a = lut[p0[i * XS]], b = lut[p1[i * XS]], c = lut[p2[i * XS]];
		const uint8_t *row = sat + ((unsigned)(int)((gr[a] + gg[b]) + gb[c]) << 8);
		p0[i * XS] = row[a];
		p1[i * XS] = row[b];
		p2[i * XS] = row[c];
	}
}

/* Saturation through a 256 x 256 table of the blend of a value with its pixel's gray (built in
 * @scratch, 64 KiB), the values first mapped by @lut (a pending brightness or contrast): a
 * lookup a value instead of the float blend, which does not vectorise on interleaved pixels. */
static void saturation_table(const struct cdc_img *im, float r, float r1, const uint8_t *lut,
			     uint8_t *scratch)
{
	uint8_t *sat = scratch;
	float rv[256];

	for (unsigned v = 0; v < 256; v++)
		rv[v] = r * (float)v;
	for (unsigned g = 0; g < 256; g++) {
		float rg = r1 * (float)g;  /* blend's two products, then their sum */
		uint8_t *row = sat + (g << 8);
		for (unsigned v = 0; v < 256; v++) {
			float x = rv[v] + rg;
			x = x > 0.0f ? x : 0.0f;
			x = x < 255.0f ? x : 255.0f;
			row[v] = (uint8_t)(int)x;
		}
	}
	struct gray_tab t;
	gray_tab_init(&t);
	const float *gt[3] = { t.r, t.g, t.b };
	EACH_LAYOUT(saturation_lut_x, im, lut, sat, gt);
}

INLINE uint64_t gray_sum_lut_x(const struct cdc_img *im, size_t XS, const uint8_t *lut,
			       const struct gray_tab *t)
{
	const uint8_t *p0 = im->px, *p1 = im->px + im->cs, *p2 = im->px + 2 * im->cs;
	size_t n = npix(im);
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += (uint32_t)(int)((t->r[lut[p0[i * XS]]] + t->g[lut[p1[i * XS]]]) +
				       t->b[lut[p2[i * XS]]]);
	return sum;
}

static void jitter(const struct cdc_aug *a, const struct cdc_img *im, uint64_t *s,
		   uint8_t *scratch)
{
	unsigned order[4] = {0, 1, 2, 3};
	double f[4];
	uint8_t lut[256], t[256];
	int pending = 0;

	/* ColorJitter.get_params: a random order, then each factor */
	for (unsigned i = 3; i > 0; i--) {
		unsigned k = below(s, i + 1), tmp = order[i];
		order[i] = order[k], order[k] = tmp;
	}
	for (int i = 0; i < 4; i++)
		f[i] = a->jitter_on[i] ? uniform(s, a->jitter_lo[i], a->jitter_hi[i]) : 0.0;
	for (unsigned v = 0; v < 256; v++)
		lut[v] = (uint8_t)v;
	for (int i = 0; i < 4; i++) {
		unsigned k = order[i];
		if (!a->jitter_on[k])
			continue;
		float r = (float)f[k], r1 = (float)(1.0 - f[k]);
		if (k == CDC_JITTER_BRIGHTNESS || k == CDC_JITTER_CONTRAST) {
			float other = 0.0f;  /* brightness blends with 0 */
			if (k == CDC_JITTER_CONTRAST) {
				uint64_t n = npix(im);
				if (!n)
					continue;
				struct gray_tab gt;
				gray_tab_init(&gt);
				uint64_t sum = EACH_LAYOUT(gray_sum_lut_x, im, lut, &gt);
				other = (float)sum / (float)n;  /* torch.mean, as cdc_aug_contrast */
			}
			for (unsigned v = 0; v < 256; v++)
				t[v] = blend(r, r1, (float)v, other);
			for (unsigned v = 0; v < 256; v++)
				lut[v] = t[lut[v]];
			pending = 1;
		} else if (k == CDC_JITTER_SATURATION && scratch) {
			saturation_table(im, r, r1, lut, scratch);
			for (unsigned v = 0; v < 256; v++)
				lut[v] = (uint8_t)v;
			pending = 0;
		} else {
			if (pending)
				map_lut1(im, lut);
			for (unsigned v = 0; v < 256; v++)
				lut[v] = (uint8_t)v;
			pending = 0;
			if (k == CDC_JITTER_SATURATION)
				cdc_aug_saturation(im, f[k]);
			else
				cdc_aug_hue(im, f[k]);
		}
	}
	if (pending)
		map_lut1(im, lut);
}

/* AutoAugmentPolicy.IMAGENET: 25 sub-policies of two (op, probability, magnitude bin or -1). */
static const struct {
	uint8_t op;
	uint8_t p10;   /* probability x 10 */
	int8_t bin;
} imagenet[25][2] = {
	{{CDC_OP_POSTERIZE, 4, 8}, {CDC_OP_ROTATE, 6, 9}},
	{{CDC_OP_SOLARIZE, 6, 5}, {CDC_OP_AUTOCONTRAST, 6, -1}},
	{{CDC_OP_EQUALIZE, 8, -1}, {CDC_OP_EQUALIZE, 6, -1}},
	{{CDC_OP_POSTERIZE, 6, 7}, {CDC_OP_POSTERIZE, 6, 6}},
	{{CDC_OP_EQUALIZE, 4, -1}, {CDC_OP_SOLARIZE, 2, 4}},
	{{CDC_OP_EQUALIZE, 4, -1}, {CDC_OP_ROTATE, 8, 8}},
	{{CDC_OP_SOLARIZE, 6, 3}, {CDC_OP_EQUALIZE, 6, -1}},
	{{CDC_OP_POSTERIZE, 8, 5}, {CDC_OP_EQUALIZE, 10, -1}},
	{{CDC_OP_ROTATE, 2, 3}, {CDC_OP_SOLARIZE, 6, 8}},
	{{CDC_OP_EQUALIZE, 6, -1}, {CDC_OP_POSTERIZE, 4, 6}},
	{{CDC_OP_ROTATE, 8, 8}, {CDC_OP_COLOR, 4, 0}},
	{{CDC_OP_ROTATE, 4, 9}, {CDC_OP_EQUALIZE, 6, -1}},
	{{CDC_OP_EQUALIZE, 0, -1}, {CDC_OP_EQUALIZE, 8, -1}},
	{{CDC_OP_INVERT, 6, -1}, {CDC_OP_EQUALIZE, 10, -1}},
	{{CDC_OP_COLOR, 6, 4}, {CDC_OP_CONTRAST, 10, 8}},
	{{CDC_OP_ROTATE, 8, 8}, {CDC_OP_COLOR, 10, 2}},
	{{CDC_OP_COLOR, 8, 8}, {CDC_OP_SOLARIZE, 8, 7}},
	{{CDC_OP_SHARPNESS, 4, 7}, {CDC_OP_INVERT, 6, -1}},
	{{CDC_OP_SHEAR_X, 6, 5}, {CDC_OP_EQUALIZE, 10, -1}},
	{{CDC_OP_COLOR, 4, 0}, {CDC_OP_EQUALIZE, 6, -1}},
	{{CDC_OP_EQUALIZE, 4, -1}, {CDC_OP_SOLARIZE, 2, 4}},
	{{CDC_OP_SOLARIZE, 6, 5}, {CDC_OP_AUTOCONTRAST, 6, -1}},
	{{CDC_OP_INVERT, 6, -1}, {CDC_OP_EQUALIZE, 10, -1}},
	{{CDC_OP_COLOR, 6, 4}, {CDC_OP_CONTRAST, 10, 8}},
	{{CDC_OP_EQUALIZE, 8, -1}, {CDC_OP_EQUALIZE, 6, -1}},
};

int cdc_aug_imagenet_policy(unsigned i, unsigned k, enum cdc_aug_op *op, double *p, int *bin)
{
	if (i >= 25 || k >= 2)
		return -1;
	*op = (enum cdc_aug_op)imagenet[i][k].op;
	*p = imagenet[i][k].p10 / 10.0;
	*bin = imagenet[i][k].bin;
	return 0;
}

static int is_signed(enum cdc_aug_op op)
{
	return op >= CDC_OP_SHEAR_X && op <= CDC_OP_SHARPNESS;
}

static void autoaug(const struct cdc_aug *a, const struct cdc_img *im, uint64_t *s,
		    uint8_t *scratch)
{
	/* RandAugment and TrivialAugmentWide draw from the 14 ops up to Equalize */
	const unsigned nops = CDC_OP_EQUALIZE + 1;

	if (a->autoaug == CDC_AUTO_RAND) {
		for (unsigned i = 0; i < a->num_ops; i++) {
			enum cdc_aug_op op = (enum cdc_aug_op)below(s, nops);
			double mag = cdc_aug_magnitude(CDC_SPACE_RAND, op, a->magnitude, a->bins,
						       im->h, im->w);
			if (is_signed(op) && below(s, 2))
				mag = -mag;
			cdc_aug_apply_op(im, op, mag, scratch);
		}
	} else if (a->autoaug == CDC_AUTO_WIDE) {
		enum cdc_aug_op op = (enum cdc_aug_op)below(s, nops);
		double mag = cdc_aug_magnitude(CDC_SPACE_WIDE, op, below(s, a->bins), a->bins,
					       im->h, im->w);
		if (is_signed(op) && below(s, 2))
			mag = -mag;
		cdc_aug_apply_op(im, op, mag, scratch);
	} else if (a->autoaug == CDC_AUTO_IMAGENET) {
		unsigned id = below(s, 25);
		for (int k = 0; k < 2; k++) {
			double prob = uniform01(s);
			int neg = below(s, 2) == 0;
			enum cdc_aug_op op = (enum cdc_aug_op)imagenet[id][k].op;
			if (!(prob <= imagenet[id][k].p10 / 10.0))
				continue;
			double mag = imagenet[id][k].bin < 0 ? 0.0 :
				cdc_aug_magnitude(CDC_SPACE_AUTO, op, (unsigned)imagenet[id][k].bin,
						  10, im->h, im->w);
			if (is_signed(op) && neg)
				mag = -mag;
			cdc_aug_apply_op(im, op, mag, scratch);
		}
	}
}

static void erase(const struct cdc_aug *a, const struct cdc_img *im, uint64_t *s)
{
	if (!(uniform01(s) < a->erase_p))
		return;
	double area = (double)im->h * im->w;
	double lr0 = log(a->erase_ratio[0]), lr1 = log(a->erase_ratio[1]);

	for (int tries = 0; tries < 10; tries++) {  /* RandomErasing.get_params */
		double ea = area * uniform(s, a->erase_scale[0], a->erase_scale[1]);
		double ar = exp(uniform(s, lr0, lr1));
		double fh = nearbyint(sqrt(ea * ar)), fw = nearbyint(sqrt(ea / ar));
		if (!(fh < im->h && fw < im->w))
			continue;
		uint32_t h = (uint32_t)fh, w = (uint32_t)fw;
		uint32_t i = below(s, im->h - h + 1), j = below(s, im->w - w + 1);
		if (a->erase_fill == CDC_ERASE_CONST) {
			cdc_aug_erase(im, i, j, h, w, a->erase_rgb);
			return;
		}
		for (uint32_t y = i; y < i + h; y++)
			for (uint32_t x = j; x < j + w; x++) {
				uint8_t rgb[3];
				for (int c = 0; c < 3; c++) {
					double v = nearbyint(a->erase_mean[c] +
							     a->erase_std[c] * normal(s));
					rgb[c] = v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
				}
				cdc_aug_erase(im, y, x, 1, 1, rgb);
			}
		return;
	}
}

int cdc_aug_active(const struct cdc_aug *a)
{
	return a->jitter_on[0] || a->jitter_on[1] || a->jitter_on[2] || a->jitter_on[3] ||
	       a->autoaug != CDC_AUTO_NONE || a->erase_p > 0.0;
}

#define CHECK(cond, ...) do { if (!(cond)) { snprintf(why, whylen, __VA_ARGS__); \
	return -EINVAL; } } while (0)

int cdc_aug_check(const struct cdc_aug *a, char *why, size_t whylen)
{
	static const char *jn[4] = {"brightness", "contrast", "saturation", "hue"};

	for (int i = 0; i < 4; i++) {
		if (!a->jitter_on[i])
			continue;
		double lo = a->jitter_lo[i], hi = a->jitter_hi[i];
		double min = i == CDC_JITTER_HUE ? -0.5 : 0.0, max = i == CDC_JITTER_HUE ? 0.5 : 16.0;
		CHECK(lo >= min && hi <= max && lo <= hi, "jitter %s: range %g..%g outside %g..%g "
		      "or reversed", jn[i], lo, hi, min, max);
	}
	CHECK(a->autoaug <= CDC_AUTO_IMAGENET, "autoaugment: unknown kind %u", (unsigned)a->autoaug);
	if (a->autoaug == CDC_AUTO_RAND || a->autoaug == CDC_AUTO_WIDE)
		CHECK(a->bins >= 2 && a->bins <= CDC_BINS_MAX, "autoaugment: bins %u outside 2..%u",
		      a->bins, CDC_BINS_MAX);
	if (a->autoaug == CDC_AUTO_RAND) {
		CHECK(a->num_ops >= 1 && a->num_ops <= CDC_RAND_OPS_MAX,
		      "randaugment: num_ops %u outside 1..%u", a->num_ops, CDC_RAND_OPS_MAX);
		CHECK(a->magnitude < a->bins, "randaugment: magnitude %u not below bins %u",
		      a->magnitude, a->bins);
	}
	CHECK(a->erase_p >= 0.0 && a->erase_p <= 1.0, "erase: p %g outside 0..1", a->erase_p);
	if (a->erase_p > 0.0) {
		CHECK(a->erase_scale[0] > 0.0 && a->erase_scale[0] <= a->erase_scale[1] &&
		      a->erase_scale[1] <= 1.0, "erase: scale %g..%g not within (0, 1] in order",
		      a->erase_scale[0], a->erase_scale[1]);
		CHECK(a->erase_ratio[0] > 0.0 && a->erase_ratio[0] <= a->erase_ratio[1] &&
		      a->erase_ratio[1] <= 100.0, "erase: ratio %g..%g not within (0, 100] in "
		      "order", a->erase_ratio[0], a->erase_ratio[1]);
		CHECK(a->erase_fill <= CDC_ERASE_RANDOM, "erase: unknown fill %u",
		      (unsigned)a->erase_fill);
		for (int c = 0; c < 3 && a->erase_fill == CDC_ERASE_RANDOM; c++)
			CHECK(a->erase_mean[c] >= 0.0 && a->erase_mean[c] <= 255.0 &&
			      a->erase_std[c] >= 0.0 && a->erase_std[c] <= 255.0,
			      "erase: mean/std of channel %d outside 0..255", c);
	}
	return 0;
}

void cdc_aug_run(const struct cdc_aug *a, const struct cdc_img *im, uint64_t key, uint8_t *scratch)
{
	uint64_t s = mix3(key, 0x4155474dull /* "AUGM" */, 0);

	if (a->jitter_on[0] || a->jitter_on[1] || a->jitter_on[2] || a->jitter_on[3])
		jitter(a, im, &s, cdc_aug_scratch(im) >= 65536 ? scratch : NULL);
	autoaug(a, im, &s, scratch);
	if (a->erase_p > 0.0)
		erase(a, im, &s);
}
