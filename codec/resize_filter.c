/* resize_filter.c - the separable filtered resize (see resize_filter.h).
 *
 * Per output column (then row) a run of consecutive source taps and their weights, as torch
 * computes them: antialiased, the filter is stretched by the shrink factor (support = 1 for
 * bilinear, 2 for bicubic with a = -0.5, times the factor), centred at scale * (i + 0.5), the taps
 * that fall outside the window dropped and the weights renormalised (torch's
 * _compute_indices_weights_aa, PIL's resample); not antialiased, bilinear is the same with the
 * factor 1, and bicubic is upsample_bicubic2d's four taps with a = -0.75, clamped to the window's
 * edge (a clamped tap's weight goes to the edge pixel, so the run stays consecutive). Vertical
 * pass first, into one float32 row of the window's width (torch goes horizontal first, into whole
 * rows: the same sums in another order, and memory that grows with the window's height times the
 * output's width), then horizontal, then clamp and round half to even, as torchvision rounds a
 * float result back to uint8. */
#include "codec/resize_filter.h"

#include <math.h>
#include <string.h>

struct taps {
	int32_t *first;   /* per output: the first source index (in the window) */
	int32_t *count;   /* per output: taps used (<= k) */
	float *w;         /* per output: k weights */
	uint32_t k;
};

static float filt(enum cdc_filter f, float x)
{
	if (x < 0.0f)
		x = -x;
	if (f == CDC_FILTER_BICUBIC) {
		const float a = -0.5f;
		if (x < 1.0f)
			return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
		if (x < 2.0f)
			return (((x - 5.0f) * x + 8.0f) * x - 4.0f) * a;
		return 0.0f;
	}
	return x < 1.0f ? 1.0f - x : 0.0f;
}

static uint32_t ntaps(const struct cdc_resize *r, double len, uint32_t out)
{
	double scale = len / out;
	double support = (r->filter == CDC_FILTER_BICUBIC ? 2.0 : 1.0) *
			 (r->antialias && scale >= 1.0 ? scale : 1.0);

	return (uint32_t)ceil(support) * 2 + 2;
}

/* The window's source span [lo, hi) along one axis, clipped to @n. */
static void span(double x0, double len, uint32_t n, uint32_t *lo, uint32_t *hi)
{
	double a = floor(x0), b = ceil(x0 + len);

	*lo = a < 0 ? 0 : a > n - 1 ? n - 1 : (uint32_t)a;
	*hi = b > n ? n : b <= *lo ? *lo + 1 : (uint32_t)b;
}

static void make_taps(const struct cdc_resize *r, double off, double len, uint32_t n,
		      uint32_t out, struct taps *t)
{
	float scale = (float)(len / out);
	int cubic = r->filter == CDC_FILTER_BICUBIC;

	for (uint32_t i = 0; i < out; i++) {
		float *w = t->w + (size_t)i * t->k;
		memset(w, 0, t->k * sizeof(*w));
		if (cubic && !r->antialias) {  /* upsample_bicubic2d, a = -0.75, clamped taps */
			const float a = -0.75f;
			float real = (float)off + scale * ((float)i + 0.5f) - 0.5f;
			float fx = floorf(real), tt = real - fx;
			float c[4];
			float x1 = tt + 1.0f, x2 = 2.0f - tt;
			c[0] = ((a * x1 - 5.0f * a) * x1 + 8.0f * a) * x1 - 4.0f * a;
			c[1] = ((a + 2.0f) * tt - (a + 3.0f)) * tt * tt + 1.0f;
			c[2] = ((a + 2.0f) * (1.0f - tt) - (a + 3.0f)) * (1.0f - tt) * (1.0f - tt) + 1.0f;
			c[3] = ((a * x2 - 5.0f * a) * x2 + 8.0f * a) * x2 - 4.0f * a;
			int64_t base = (int64_t)fx - 1;
			int64_t lo = base < 0 ? 0 : base > (int64_t)n - 1 ? (int64_t)n - 1 : base;
			int64_t hi = base + 3 < 0 ? 0 : base + 3 > (int64_t)n - 1 ? (int64_t)n - 1 :
				     base + 3;
			t->first[i] = (int32_t)lo;
			t->count[i] = (int32_t)(hi - lo + 1);
			for (int q = 0; q < 4; q++) {
				int64_t at = base + q;
				at = at < 0 ? 0 : at > (int64_t)n - 1 ? (int64_t)n - 1 : at;
				w[at - lo] += c[q];
			}
			continue;
		}
		float support = (cubic ? 2.0f : 1.0f) * (r->antialias && scale >= 1.0f ? scale : 1.0f);
		float invscale = r->antialias && scale >= 1.0f ? 1.0f / scale : 1.0f;
		float center = (float)off + scale * ((float)i + 0.5f);
		float a = center - support + 0.5f, b = center + support + 0.5f;
		int64_t xmin = a < 0.0f ? 0 : (int64_t)a;
		int64_t xmax = b < 0.0f ? 0 : (int64_t)b;
		if (xmax > (int64_t)n)
			xmax = n;
		if (xmin > (int64_t)n - 1)
			xmin = (int64_t)n - 1;
		int64_t cnt = xmax - xmin;
		if (cnt < 1)
			cnt = 1;
		if (cnt > (int64_t)t->k)
			cnt = t->k;
		float total = 0.0f;
		for (int64_t j = 0; j < cnt; j++) {
			w[j] = filt(r->filter, ((float)(j + xmin) - center + 0.5f) * invscale);
			total += w[j];
		}
		if (total != 0.0f)
			for (int64_t j = 0; j < cnt; j++)
				w[j] /= total;
		else
			w[0] = 1.0f;
		t->first[i] = (int32_t)xmin;
		t->count[i] = (int32_t)cnt;
	}
}

static size_t align16(size_t n)
{
	return (n + 15) & ~(size_t)15;
}

static size_t taps_bytes(uint32_t out, uint32_t k)
{
	return align16((size_t)out * 4) * 2 + align16((size_t)out * k * 4);
}

size_t cdc_resize_filter_need(const struct cdc_resize *r, double sw, double sh)
{
	size_t cols = (size_t)ceil(sw) + 2;

	return taps_bytes(r->out_w, ntaps(r, sw, r->out_w)) +
	       taps_bytes(r->out_h, ntaps(r, sh, r->out_h)) + align16(cols * 3 * sizeof(float));
}

static uint8_t *carve_taps(uint8_t *p, uint32_t out, uint32_t k, struct taps *t)
{
	t->k = k;
	t->first = (int32_t *)(void *)p;
	p += align16((size_t)out * 4);
	t->count = (int32_t *)(void *)p;
	p += align16((size_t)out * 4);
	t->w = (float *)(void *)p;
	return p + align16((size_t)out * k * 4);
}

void cdc_resize_filter(const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t stride,
		       double x0, double y0, double sw, double sh, const struct cdc_resize *r,
		       uint8_t *dst, void *work)
{
	struct taps tx, ty;
	uint32_t xl, xh, yl, yh;
	uint8_t *p = work;

	span(x0, sw, src_w, &xl, &xh);
	span(y0, sh, src_h, &yl, &yh);
	p = carve_taps(p, r->out_w, ntaps(r, sw, r->out_w), &tx);
	p = carve_taps(p, r->out_h, ntaps(r, sh, r->out_h), &ty);
	float *row = (float *)(void *)p;  /* the window's columns, x 3 */
	make_taps(r, x0 - xl, sw, xh - xl, r->out_w, &tx);
	make_taps(r, y0 - yl, sh, yh - yl, r->out_h, &ty);

	/* vertical: the output row's source rows blended over the window's columns, into one
	 * float row; then horizontal, clamp and round */
	const size_t plane = (size_t)r->out_h * r->out_w;
	const size_t n = (size_t)(xh - xl) * 3;
	for (uint32_t oy = 0; oy < r->out_h; oy++) {
		const float *w = ty.w + (size_t)oy * ty.k;
		const uint8_t *s0 = src + stride * (yl + (size_t)ty.first[oy]) + (size_t)xl * 3;
		for (size_t i = 0; i < n; i++)
			row[i] = s0[i] * w[0];
		for (int32_t j = 1; j < ty.count[oy]; j++) {
			const uint8_t *sj = s0 + stride * (size_t)j;
			for (size_t i = 0; i < n; i++)
				row[i] += sj[i] * w[j];
		}
		for (uint32_t i = 0; i < r->out_w; i++) {
			const float *wx = tx.w + (size_t)i * tx.k;
			const float *q = row + (size_t)tx.first[i] * 3;
			float a0 = q[0] * wx[0], a1 = q[1] * wx[0], a2 = q[2] * wx[0];
			for (int32_t j = 1; j < tx.count[i]; j++) {
				a0 += q[3 * j] * wx[j];
				a1 += q[3 * j + 1] * wx[j];
				a2 += q[3 * j + 2] * wx[j];
			}
			uint32_t col = r->flip ? r->out_w - 1 - i : i;
			float v[3] = { a0, a1, a2 };
			for (int c = 0; c < 3; c++) {
				float x = nearbyintf(v[c] < 0.0f ? 0.0f : v[c] > 255.0f ? 255.0f : v[c]);
				if (r->nchw)
					dst[c * plane + (size_t)oy * r->out_w + col] = (uint8_t)x;
				else
					dst[((size_t)oy * r->out_w + col) * 3 + c] = (uint8_t)x;
			}
		}
	}
}
