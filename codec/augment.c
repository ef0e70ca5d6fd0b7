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

#define PX(im, y, x) ((im)->px + (size_t)(y) * (im)->ys + (size_t)(x) * (im)->xs)

/* (ratio * a + (1 - ratio) * b).clamp(0, 255).to(uint8): float32, truncated. */
static inline uint8_t blend(float r, float r1, float a, float b)
{
	float v = r * a + r1 * b;

	if (!(v > 0.0f))
		return 0;
	if (v >= 255.0f)
		return 255;
	return (uint8_t)v;
}

/* rgb_to_grayscale(img).to(uint8): (0.2989 r + 0.587 g + 0.114 b) in float32, truncated. */
static inline uint8_t gray(const uint8_t *p, size_t cs)
{
	float v = 0.2989f * (float)p[0] + 0.587f * (float)p[cs] + 0.114f * (float)p[2 * cs];

	return (uint8_t)v;
}

void cdc_aug_brightness(const struct cdc_img *im, double factor)
{
	float r = (float)factor;
	uint8_t lut[256];

	/* _blend(img, zeros): (1 - r) * 0 adds 0 (or -0: the same sum) */
	for (unsigned v = 0; v < 256; v++)
		lut[v] = blend(r, (float)(1.0 - factor), (float)v, 0.0f);
	for (uint32_t y = 0; y < im->h; y++)
		for (uint32_t x = 0; x < im->w; x++) {
			uint8_t *p = PX(im, y, x);
			for (int c = 0; c < 3; c++)
				p[c * im->cs] = lut[p[c * im->cs]];
		}
}

void cdc_aug_contrast(const struct cdc_img *im, double factor)
{
	uint64_t sum = 0;
	uint64_t n = (uint64_t)im->h * im->w;

	if (!n)
		return;
	for (uint32_t y = 0; y < im->h; y++)
		for (uint32_t x = 0; x < im->w; x++)
			sum += gray(PX(im, y, x), im->cs);
	/* torch.mean in float32: the sum (exact below 2^24) divided by the count */
	float mean = (float)sum / (float)n;
	float r = (float)factor, r1 = (float)(1.0 - factor);
	uint8_t lut[256];

	for (unsigned v = 0; v < 256; v++)
		lut[v] = blend(r, r1, (float)v, mean);
	for (uint32_t y = 0; y < im->h; y++)
		for (uint32_t x = 0; x < im->w; x++) {
			uint8_t *p = PX(im, y, x);
			for (int c = 0; c < 3; c++)
				p[c * im->cs] = lut[p[c * im->cs]];
		}
}

void cdc_aug_saturation(const struct cdc_img *im, double factor)
{
	float r = (float)factor, r1 = (float)(1.0 - factor);

	for (uint32_t y = 0; y < im->h; y++)
		for (uint32_t x = 0; x < im->w; x++) {
			uint8_t *p = PX(im, y, x);
			float g = (float)gray(p, im->cs);
			for (int c = 0; c < 3; c++)
				p[c * im->cs] = blend(r, r1, (float)p[c * im->cs], g);
		}
}

/* torch.remainder(a, 1.0) for float32 */
static inline float rem1(float a)
{
	float m = fmodf(a, 1.0f);

	if (m != 0.0f && m < 0.0f)
		m += 1.0f;
	return m;
}

static inline uint8_t to_u8(float v)  /* (v * 255.0).to(uint8), v in [0, 1] */
{
	float s = v * 255.0f;

	return s <= 0.0f ? 0 : s >= 255.0f ? 255 : (uint8_t)s;
}

void cdc_aug_hue(const struct cdc_img *im, double factor)
{
	float hf = (float)factor;

	for (uint32_t y = 0; y < im->h; y++)
		for (uint32_t x = 0; x < im->w; x++) {
			uint8_t *p = PX(im, y, x);
			/* _rgb2hsv */
			float r = (float)p[0] / 255.0f, g = (float)p[im->cs] / 255.0f;
			float b = (float)p[2 * im->cs] / 255.0f;
			float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
			int eqc = maxc == minc;
			float cr = maxc - minc;
			float s = cr / (eqc ? 1.0f : maxc);
			float crd = eqc ? 1.0f : cr;
			float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
			float hr = (maxc == r) ? (bc - gc) : 0.0f;
			float hg = (maxc == g && maxc != r) ? (2.0f + rc - bc) : 0.0f;
			float hb = (maxc != g && maxc != r) ? (4.0f + gc - rc) : 0.0f;
			float h = fmodf(((hr + hg) + hb) / 6.0f + 1.0f, 1.0f);
			float v = maxc;
			/* the shift, then _hsv2rgb */
			h = rem1(h + hf);
			float i = floorf(h * 6.0f);
			float f = h * 6.0f - i;
			int ii = ((int)i % 6 + 6) % 6;
			float pp = fminf(fmaxf(v * (1.0f - s), 0.0f), 1.0f);
			float q = fminf(fmaxf(v * (1.0f - s * f), 0.0f), 1.0f);
			float t = fminf(fmaxf(v * (1.0f - s * (1.0f - f)), 0.0f), 1.0f);
			float o[3];
			switch (ii) {
			case 0: o[0] = v, o[1] = t, o[2] = pp; break;
			case 1: o[0] = q, o[1] = v, o[2] = pp; break;
			case 2: o[0] = pp, o[1] = v, o[2] = t; break;
			case 3: o[0] = pp, o[1] = q, o[2] = v; break;
			case 4: o[0] = t, o[1] = pp, o[2] = v; break;
			default: o[0] = v, o[1] = pp, o[2] = q; break;
			}
			for (int c = 0; c < 3; c++)
				p[c * im->cs] = to_u8(o[c]);
		}
}

static void map_lut(const struct cdc_img *im, const uint8_t lut[3][256])
{
	for (uint32_t y = 0; y < im->h; y++)
		for (uint32_t x = 0; x < im->w; x++) {
			uint8_t *p = PX(im, y, x);
			for (int c = 0; c < 3; c++)
				p[c * im->cs] = lut[c][p[c * im->cs]];
		}
}

void cdc_aug_posterize(const struct cdc_img *im, unsigned bits)
{
	uint8_t lut[3][256];
	unsigned mask = bits >= 8 ? 0xffu : (0xffu << (8 - bits)) & 0xffu;

	for (unsigned v = 0; v < 256; v++)
		lut[0][v] = lut[1][v] = lut[2][v] = (uint8_t)(v & mask);
	map_lut(im, lut);
}

void cdc_aug_solarize(const struct cdc_img *im, double threshold)
{
	uint8_t lut[3][256];
	float t = (float)threshold;

	for (unsigned v = 0; v < 256; v++)
		lut[0][v] = lut[1][v] = lut[2][v] = (float)v >= t ? (uint8_t)(255 - v) : (uint8_t)v;
	map_lut(im, lut);
}

static void invert(const struct cdc_img *im)
{
	uint8_t lut[3][256];

	for (unsigned v = 0; v < 256; v++)
		lut[0][v] = lut[1][v] = lut[2][v] = (uint8_t)(255 - v);
	map_lut(im, lut);
}

static void histograms(const struct cdc_img *im, uint32_t hist[3][256])
{
	memset(hist, 0, sizeof(uint32_t) * 3 * 256);
	for (uint32_t y = 0; y < im->h; y++)
		for (uint32_t x = 0; x < im->w; x++) {
			const uint8_t *p = PX(im, y, x);
			for (int c = 0; c < 3; c++)
				hist[c][p[c * im->cs]]++;
		}
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

static void copy_out(const struct cdc_img *im, uint8_t *scratch)  /* to HWC scratch */
{
	for (uint32_t y = 0; y < im->h; y++)
		for (uint32_t x = 0; x < im->w; x++) {
			const uint8_t *p = PX(im, y, x);
			uint8_t *s = scratch + ((size_t)y * im->w + x) * 3;
			s[0] = p[0], s[1] = p[im->cs], s[2] = p[2 * im->cs];
		}
}

void cdc_aug_sharpness(const struct cdc_img *im, double factor, uint8_t *scratch)
{
	uint32_t h = im->h, w = im->w;
	float r = (float)factor, r1 = (float)(1.0 - factor);

	if (h <= 2 || w <= 2)
		return;
	copy_out(im, scratch);
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++) {
			uint8_t *p = PX(im, y, x);
			const uint8_t *s = scratch + ((size_t)y * w + x) * 3;
			int edge = y == 0 || x == 0 || y == h - 1 || x == w - 1;
			for (int c = 0; c < 3; c++) {
				unsigned blur = s[c];
				if (!edge) {
					/* the 3x3 kernel (1 1 1, 1 5 1, 1 1 1) / 13, rounded: a sum
					 * k / 13 is never a tie, so integers give torch's value */
					size_t rs = (size_t)w * 3;
					unsigned k = 4u * s[c];
					for (int dy = -1; dy <= 1; dy++)
						for (int dx = -1; dx <= 1; dx++)
							k += s[c + dy * (ptrdiff_t)rs + dx * 3];
					blur = (2 * k + 13) / 26;
				}
				p[c * im->cs] = blend(r, r1, (float)s[c], (float)blur);
			}
		}
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

void cdc_aug_affine(const struct cdc_img *im, const double m[6], uint8_t *scratch)
{
	uint32_t h = im->h, w = im->w;
	/* _gen_affine_grid: theta (float32) / (0.5 w, 0.5 h), the base grid at pixel centres */
	float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
	float t0 = (float)m[0] / hw, t1 = (float)m[1] / hw, t2 = (float)m[2] / hw;
	float t3 = (float)m[3] / hh, t4 = (float)m[4] / hh, t5 = (float)m[5] / hh;
	float fw = (float)w, fh = (float)h;

	copy_out(im, scratch);
	for (uint32_t y = 0; y < h; y++) {
		float by = -(float)h * 0.5f + 0.5f + (float)y;
		for (uint32_t x = 0; x < w; x++) {
			float bx = -(float)w * 0.5f + 0.5f + (float)x;
			float gx = bx * t0 + by * t1 + t2;
			float gy = bx * t3 + by * t4 + t5;
			/* grid_sample, align_corners=False, nearest (round half to even) */
			float ix = nearbyintf(((gx + 1.0f) * fw - 1.0f) / 2.0f);
			float iy = nearbyintf(((gy + 1.0f) * fh - 1.0f) / 2.0f);
			uint8_t *p = PX(im, y, x);
			if (ix >= 0.0f && ix < fw && iy >= 0.0f && iy < fh) {
				const uint8_t *s = scratch + ((size_t)iy * w + (size_t)ix) * 3;
				p[0] = s[0], p[im->cs] = s[1], p[2 * im->cs] = s[2];
			} else {
				p[0] = p[im->cs] = p[2 * im->cs] = 0;
			}
		}
	}
}

void cdc_aug_erase(const struct cdc_img *im, uint32_t i, uint32_t j, uint32_t h, uint32_t w,
		   const uint8_t rgb[3])
{
	for (uint32_t y = i; y < i + h && y < im->h; y++)
		for (uint32_t x = j; x < j + w && x < im->w; x++) {
			uint8_t *p = PX(im, y, x);
			p[0] = rgb[0], p[im->cs] = rgb[1], p[2 * im->cs] = rgb[2];
		}
}

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
		cdc_aug_saturation(im, 1.0 + magnitude);
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

static void jitter(const struct cdc_aug *a, const struct cdc_img *im, uint64_t *s)
{
	unsigned order[4] = {0, 1, 2, 3};
	double f[4];

	/* ColorJitter.get_params: a random order, then each factor */
	for (unsigned i = 3; i > 0; i--) {
		unsigned k = below(s, i + 1), t = order[i];
		order[i] = order[k], order[k] = t;
	}
	for (int i = 0; i < 4; i++)
		f[i] = a->jitter_on[i] ? uniform(s, a->jitter_lo[i], a->jitter_hi[i]) : 0.0;
	for (int i = 0; i < 4; i++) {
		unsigned k = order[i];
		if (!a->jitter_on[k])
			continue;
		switch (k) {
		case CDC_JITTER_BRIGHTNESS: cdc_aug_brightness(im, f[k]); break;
		case CDC_JITTER_CONTRAST: cdc_aug_contrast(im, f[k]); break;
		case CDC_JITTER_SATURATION: cdc_aug_saturation(im, f[k]); break;
		default: cdc_aug_hue(im, f[k]); break;
		}
	}
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
		jitter(a, im, &s);
	autoaug(a, im, &s, scratch);
	if (a->erase_p > 0.0)
		erase(a, im, &s);
}
