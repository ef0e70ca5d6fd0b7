/* test_decode.c - crop windows (RandomResizedCrop and the evaluation center crop), the DCT scale
 * choice, and decode correctness: JPEGs made here with TurboJPEG (4:4:4, 4:2:0, 4:2:2
 * progressive, grayscale; sizes that are not multiples of the MCU) are decoded cropped, scaled
 * and resized by cdc_decode_jpeg and compared with a full-size tjDecompress2 followed by a plain
 * bilinear crop+resize written here. Flip and NCHW are checked exactly against the plain output.
 * The window that cdc_jpeg_window decodes (plain JPEG records: dpack --keep-jpeg) equals a full
 * decode at its DCT scale byte for byte, on generated images and on real photographs (every
 * subsampling, progressive, odd sizes, windows at every edge and every scale).
 * Truncated, corrupt and non-JPEG input gives -EBADMSG and leaves the decoder usable. Raw
 * tensors and zstd records too. Seeded tests print their seed. */
#include "codec/decode.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>
#include <zstd.h>
#include <cmocka.h>
#include "tests/test_util.h"
#include "tests/jpeg_imgs.h"


/* A xorshift state from TEST_DECODE_SEED or the clock; the seed is printed for replay. */
static uint64_t seeded(const char *test)
{
	return test_xorshift_init(test_seed(test, "TEST_DECODE_SEED"));
}

/* ---- crop windows ---- */

static void check_window(uint32_t w, uint32_t h, const struct cdc_crop *c, const char *what,
			 uint64_t key)
{
	if (c->w < 1 || c->h < 1 || c->x > w || c->y > h || c->w > w - c->x ||
	    c->h > h - c->y)
		fail_msg("%s %ux%u key %" PRIu64 ": window %u,%u %ux%u not inside the image", what,
			 w, h, key, c->x, c->y, c->w, c->h);
}

static void test_crop_random_window_inside_image(void **state)
{
	static const uint32_t fixed[][2] = { { 1, 1 }, { 2, 300 }, { 300, 2 }, { 5000, 20 },
					     { 20, 5000 }, { 500, 400 }, { 3, 3 }, { 7, 1000 },
					     { 1, 2 }, { 2, 1 }, { 8192, 8192 } };
	uint64_t x = seeded("test_crop_random_window_inside_image");

	(void)state;
	for (int i = 0; i < 300; i++) {
		uint32_t w, h;
		if (i < (int)(sizeof(fixed) / sizeof(fixed[0]))) {
			w = fixed[i][0];
			h = fixed[i][1];
		} else {
			/* sizes spread over orders of magnitude, tiny ones included */
			w = 1 + (uint32_t)(test_xorshift(&x) % (1u << (test_xorshift(&x) % 13)));
			h = 1 + (uint32_t)(test_xorshift(&x) % (1u << (test_xorshift(&x) % 13)));
		}
		for (int k = 0; k < 100; k++) {
			uint64_t key = test_xorshift(&x);
			struct cdc_crop a, b;

			cdc_crop_random(w, h, key, &a);
			check_window(w, h, &a, "crop_random", key);
			cdc_crop_random(w, h, key, &b);
			if (memcmp(&a, &b, sizeof(a)) != 0)
				fail_msg("%ux%u key %" PRIu64 ": two calls differ", w, h, key);
		}
	}
}

static void test_crop_random_distribution(void **state)
{
	const uint32_t w = 500, h = 400;
	double sum = 0, lo = 1, hi = 0;
	int small = 0, large = 0, tall = 0, wide = 0, fallback = 0, left = 0, top = 0;
	int distinct_x = 0;
	uint8_t seen_x[500] = { 0 };

	(void)state;
	for (uint64_t key = 0; key < 2000; key++) {
		struct cdc_crop c;
		cdc_crop_random(w, h, key * 0x2545f4914f6cdd1dull, &c);
		check_window(w, h, &c, "crop_random", key);
		double frac = (double)c.w * c.h / ((double)w * h);
		if (c.w == w && c.h == h) {
			/* torchvision's fallback: the whole image (its ratio 1.25 is in range) */
			fallback++;
		} else {
			/* rounding w and h to pixels moves the ratio a little past the bounds */
			if ((c.w + 0.5) / (c.h - 0.5) < 3.0 / 4.0 ||
			    (c.w - 0.5) / (c.h + 0.5) > 4.0 / 3.0)
				fail_msg("key %" PRIu64 ": %ux%u has aspect %.3f", key, c.w, c.h,
					 (double)c.w / c.h);
			if (frac < 0.08 - 0.01)
				fail_msg("key %" PRIu64 ": area fraction %.4f", key, frac);
			tall += (double)c.w / c.h < 0.85;
			wide += (double)c.w / c.h > 1.2;
		}
		sum += frac;
		lo = frac < lo ? frac : lo;
		hi = frac > hi ? frac : hi;
		small += frac < 0.3;
		large += frac > 0.7;
		left += c.x + c.w / 2.0 < w / 2.0;
		top += c.y + c.h / 2.0 < h / 2.0;
		distinct_x += !seen_x[c.x];
		seen_x[c.x] = 1;
	}
	double mean = sum / 2000;
	printf("area fraction mean %.3f min %.3f max %.3f, %d fallbacks, %d tall %d wide\n", mean,
	       lo, hi, fallback, tall, wide);
	assert_true(mean > 0.4 && mean < 0.7);
	assert_true(lo < 0.1);
	assert_true(hi > 0.9);
	assert_true(small > 200 && large > 200);  /* ~24% and ~33% for U(0.08, 1) */
	assert_true(tall > 100 && wide > 100);    /* log-uniform ratio: ~27% each side */
	assert_true(fallback < 200);              /* a 500x400 image rarely rejects 10 draws */
	assert_true(left > 800 && left < 1200);   /* positions uniform: centers either side */
	assert_true(top > 800 && top < 1200);
	assert_true(distinct_x > 200);
}

/* Aspect ratios far outside [3/4, 4/3] never fit: torchvision's fallback takes the whole image
 * clamped to the ratio range, centered. */
/* A crop's expected x, y, w, h; -1: not checked. */
struct crop_want {
	int64_t x, y, w, h;
};

/* @c against @want; @what names the case when a field differs. */
static void expect_crop(const struct cdc_crop *c, struct crop_want want, const char *what)
{
	const int64_t got[4] = { c->x, c->y, c->w, c->h };
	const int64_t exp[4] = { want.x, want.y, want.w, want.h };

	for (int i = 0; i < 4; i++) {
		if (exp[i] < 0)
			continue;
		if (got[i] != exp[i])
			print_error("%s: %c is %" PRId64 ", want %" PRId64 "\n", what, "xywh"[i],
				    got[i], exp[i]);
		assert_int_equal(got[i], exp[i]);
	}
}

/* Aspect ratios far outside [3/4, 4/3] never fit: torchvision's fallback takes the whole image
 * clamped to the ratio range, centered. */
static void test_crop_random_fallback_extreme_aspect(void **state)
{
	static const struct {
		uint32_t w, h;
		struct crop_want want;
	} cases[] = {
		{ 5000, 20, { (5000 - 27) / 2, 0, 27, 20 } },  /* w: round(20 * 4/3) */
		{ 2, 300, { 0, (300 - 3) / 2, 2, 3 } },        /* h: round(2 / (3/4)) */
		{ 1, 1, { 0, 0, 1, 1 } },
	};
	struct cdc_crop c;
	char what[64];

	(void)state;
	for (uint64_t key = 0; key < 50; key++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			cdc_crop_random(cases[i].w, cases[i].h, key, &c);
			snprintf(what, sizeof(what), "crop_random(%u, %u, key %" PRIu64 ")",
				 cases[i].w, cases[i].h, key);
			expect_crop(&c, cases[i].want, what);
		}
}

static void test_crop_center_eval_semantics(void **state)
{
	static const struct {
		uint32_t w, h, oh, ow;
		struct crop_want want;
	} cases[] = {
		/* Resize(256) makes 500x375 into 341.3x256; CenterCrop(224) sees 224 * 375/256 =
		 * 328.1 */
		{ 500, 375, 224, 224, { (500 - 328) / 2, (375 - 328) / 2, 328, 328 } },
		{ 375, 500, 224, 224, { 23, 86, 328, 328 } },
		/* an image already 256 on its short side: exactly the 224 center */
		{ 256, 300, 224, 224, { 16, 38, 224, 224 } },
		/* tiny images: at least one pixel, never past the edge */
		{ 10, 10, 224, 224, { 0, 0, 9, 9 } },
		{ 1, 1, 224, 224, { -1, -1, 1, 1 } },
		/* non-square output: the shorter output side sets the resize (floor(224 / 0.875) =
		 * 256); w: 320 * 375/256 = 468.75 */
		{ 500, 375, 224, 320, { 15, -1, 469, 328 } },
		/* clamped to the image */
		{ 100, 1000, 224, 448, { 0, -1, 100, -1 } },
	};
	struct cdc_crop c;
	char what[64];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cdc_crop_center(cases[i].w, cases[i].h, cases[i].oh, cases[i].ow, &c);
		snprintf(what, sizeof(what), "crop_center(%u, %u, %u, %u)", cases[i].w, cases[i].h,
			 cases[i].oh, cases[i].ow);
		expect_crop(&c, cases[i].want, what);
	}
	check_window(100, 1000, &c, "crop_center", 0);  /* the last row's crop */
	for (uint32_t w = 1; w < 3000; w += 37)
		for (uint32_t h = 1; h < 3000; h += 91) {
			cdc_crop_center(w, h, 224, 224, &c);
			check_window(w, h, &c, "crop_center", 0);
			/* centered to the pixel */
			assert_true(c.x == (w - c.w) / 2 && c.y == (h - c.h) / 2);
		}
}

static void test_jpeg_scale_largest_covering(void **state)
{
	static const struct { uint32_t w, h, oh, ow; unsigned den; } cases[] = {
		{ 1792, 1792, 224, 224, 8 }, { 1791, 1792, 224, 224, 4 },
		{ 1792, 1791, 224, 224, 4 }, { 896, 5000, 224, 224, 4 },
		{ 895, 5000, 224, 224, 2 },  { 448, 448, 224, 224, 2 },
		{ 447, 448, 224, 224, 1 },   { 224, 224, 224, 224, 1 },
		{ 10, 10, 224, 224, 1 },     { 2560, 1792, 224, 320, 8 },
		{ 2559, 1792, 224, 320, 4 }, { 1, 1, 1, 1, 1 },
		{ 8, 8, 1, 1, 8 },           { 100000, 3, 1, 1, 2 },
	};
	uint64_t x = seeded("test_jpeg_scale_largest_covering");

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cdc_crop c = { 0, 0, cases[i].w, cases[i].h };
		assert_int_equal(cdc_jpeg_scale(&c, cases[i].oh, cases[i].ow), cases[i].den);
	}
	for (int i = 0; i < 100000; i++) {
		struct cdc_crop c;
		c.x = (uint32_t)(test_xorshift(&x) % 100);
		c.y = (uint32_t)(test_xorshift(&x) % 100);
		c.w = 1 + (uint32_t)(test_xorshift(&x) % 4000);
		c.h = 1 + (uint32_t)(test_xorshift(&x) % 4000);
		uint32_t oh = 1 + (uint32_t)(test_xorshift(&x) % 600);
		uint32_t ow = 1 + (uint32_t)(test_xorshift(&x) % 600);
		unsigned den = cdc_jpeg_scale(&c, oh, ow);
		assert_true(den == 1 || den == 2 || den == 4 || den == 8);
		/* covers the output at this scale, and the next one up does not */
		if (den > 1)
			assert_true(c.w >= ow * den && c.h >= oh * den);
		if (den < 8)
			assert_false(c.w >= ow * 2 * den && c.h >= oh * 2 * den);
	}
}

/* ---- JPEG decode ---- */

/* A smooth pattern (gradients plus a slow wave) so that DCT scaling artefacts stay small. */
static uint8_t *make_image(int w, int h, int gray)
{
	uint8_t *p = malloc((size_t)w * h * (gray ? 1 : 3));

	assert_non_null(p);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			double fx = w > 1 ? (double)x / (w - 1) : 0;
			double fy = h > 1 ? (double)y / (h - 1) : 0;
			double wave = sin(x / 40.0) * cos(y / 55.0);
			if (gray) {
				double v = 40 + 85 * fx + 85 * fy + 20 * wave;
				p[(size_t)y * w + x] = (uint8_t)lround(v);
			} else {
				uint8_t *q = p + ((size_t)y * w + x) * 3;
				q[0] = (uint8_t)lround(30 + 190 * fx);
				q[1] = (uint8_t)lround(30 + 190 * fy);
				q[2] = (uint8_t)lround(128 + 60 * wave);
			}
		}
	return p;
}

struct jpg {
	unsigned char *buf;  /* tjFree() */
	unsigned long len;
	int w, h;
	uint8_t *rgb;        /* tjDecompress2 at full size, RGB; free() */
	const char *name;
};

static struct jpg make_jpeg(int w, int h, int samp, int progressive, const char *name)
{
	tjhandle c = tjInitCompress(), d = tjInitDecompress();
	int gray = samp == TJSAMP_GRAY;
	uint8_t *px = make_image(w, h, gray);
	struct jpg j = { NULL, 0, w, h, NULL, name };

	assert_non_null(c);
	assert_non_null(d);
	if (tjCompress2(c, px, w, 0, h, gray ? TJPF_GRAY : TJPF_RGB, &j.buf, &j.len, samp, 95,
			progressive ? TJFLAG_PROGRESSIVE : 0) != 0)
		fail_msg("tjCompress2 %s: %s", name, tjGetErrorStr2(c));
	j.rgb = malloc((size_t)w * h * 3);
	assert_non_null(j.rgb);
	if (tjDecompress2(d, j.buf, j.len, j.rgb, w, 0, h, TJPF_RGB, 0) != 0)
		fail_msg("tjDecompress2 %s: %s", name, tjGetErrorStr2(d));
	free(px);
	tjDestroy(c);
	tjDestroy(d);
	return j;
}

static void free_jpeg(struct jpg *j)
{
	tjFree(j->buf);
	free(j->rgb);
}

/* The reference: bilinear sample of the full-size image at the centers of the output pixels
 * mapped into the crop (half-pixel convention, clamped at the image edges), NHWC, in double. */
static void ref_resize(const uint8_t *img, int w, int h, const struct cdc_crop *c, uint32_t oh,
		       uint32_t ow, double *out)
{
	for (uint32_t oy = 0; oy < oh; oy++) {
		double sy = c->y + (oy + 0.5) * c->h / oh - 0.5;
		sy = sy < 0 ? 0 : sy > h - 1 ? h - 1 : sy;
		int y0 = (int)sy, y1 = y0 + 1 < h ? y0 + 1 : y0;
		double fy = sy - y0;
		for (uint32_t ox = 0; ox < ow; ox++) {
			double sx = c->x + (ox + 0.5) * c->w / ow - 0.5;
			sx = sx < 0 ? 0 : sx > w - 1 ? w - 1 : sx;
			int x0 = (int)sx, x1 = x0 + 1 < w ? x0 + 1 : x0;
			double fx = sx - x0;
			for (int ch = 0; ch < 3; ch++) {
				double a = img[((size_t)y0 * w + x0) * 3 + ch];
				double b = img[((size_t)y0 * w + x1) * 3 + ch];
				double cc = img[((size_t)y1 * w + x0) * 3 + ch];
				double dd = img[((size_t)y1 * w + x1) * 3 + ch];
				double top = a * (1 - fx) + b * fx, bot = cc * (1 - fx) + dd * fx;
				out[((size_t)oy * ow + ox) * 3 + ch] = top * (1 - fy) + bot * fy;
			}
		}
	}
}

/* Per-channel mean absolute error of NHWC @got against @want; returns the worst channel. */
static double mae(const uint8_t *got, const double *want, uint32_t oh, uint32_t ow)
{
	double e[3] = { 0, 0, 0 };

	for (size_t i = 0; i < (size_t)oh * ow; i++)
		for (int ch = 0; ch < 3; ch++)
			e[ch] += fabs(got[i * 3 + ch] - want[i * 3 + ch]);
	double worst = 0;
	for (int ch = 0; ch < 3; ch++)
		worst = e[ch] / ((double)oh * ow) > worst ? e[ch] / ((double)oh * ow) : worst;
	return worst;
}

static struct cdc_decoder *dec;
static char why[256];

static int setup_decoder(void **state)
{
	(void)state;
	return cdc_decoder_create(&dec);
}

static int teardown_decoder(void **state)
{
	(void)state;
	cdc_decoder_destroy(dec);
	dec = NULL;
	return 0;
}

static double worst_mae;

/* Decodes @c of @j to oh x ow and checks it against the reference; returns the DCT scale. */
static unsigned check_decode(const struct jpg *j, struct cdc_crop c, uint32_t oh, uint32_t ow)
{
	struct cdc_out o = { .h = oh, .w = ow, .nchw = 0, .flip = 0 };
	uint8_t *got = malloc((size_t)oh * ow * 3);
	double *want = malloc(sizeof(double) * oh * ow * 3);
	unsigned den = cdc_jpeg_scale(&c, oh, ow);
	int ret;

	assert_non_null(got);
	assert_non_null(want);
	why[0] = 0;
	ret = cdc_decode_jpeg(dec, j->buf, j->len, &c, &o, got, why, sizeof(why));
	if (ret != 0)
		fail_msg("%s crop %u,%u %ux%u -> %ux%u: %d %s", j->name, c.x, c.y, c.w, c.h, oh, ow,
			 ret, why);
	ref_resize(j->rgb, j->w, j->h, &c, oh, ow, want);
	double e = mae(got, want, oh, ow);
	if (e > worst_mae)
		worst_mae = e;
	if (e >= 6)
		fail_msg("%s crop %u,%u %ux%u -> %ux%u (scale 1/%u): mean abs error %.2f", j->name,
			 c.x, c.y, c.w, c.h, oh, ow, den, e);
	free(got);
	free(want);
	return den;
}

/* The test images, made once for the whole binary (group setup). */
enum { NIMG = 8, BIG420 = 6, BIG444 = 7 };
static struct jpg imgs[NIMG];

static int make_images(void **state)
{
	(void)state;
	imgs[0] = make_jpeg(640, 480, TJSAMP_444, 0, "640x480 4:4:4");
	imgs[1] = make_jpeg(640, 480, TJSAMP_420, 0, "640x480 4:2:0");
	imgs[2] = make_jpeg(333, 517, TJSAMP_444, 0, "333x517 4:4:4");
	imgs[3] = make_jpeg(333, 517, TJSAMP_420, 0, "333x517 4:2:0");
	imgs[4] = make_jpeg(333, 517, TJSAMP_GRAY, 0, "333x517 gray");
	imgs[5] = make_jpeg(517, 333, TJSAMP_422, 1, "517x333 4:2:2 progressive");
	imgs[BIG420] = make_jpeg(1901, 1803, TJSAMP_420, 0, "1901x1803 4:2:0");
	imgs[BIG444] = make_jpeg(1901, 1803, TJSAMP_444, 0, "1901x1803 4:4:4");
	return 0;
}

static int free_images(void **state)
{
	(void)state;
	for (int i = 0; i < NIMG; i++)
		free_jpeg(&imgs[i]);
	return 0;
}

/* Training and evaluation crops of every image kind: full, center, random, at each edge, and
 * non-square outputs. */
static void test_decode_jpeg_matches_reference(void **state)
{
	unsigned used = 0;

	(void)state;
	worst_mae = 0;
	for (int i = 0; i < NIMG; i++) {
		const struct jpg *j = &imgs[i];
		uint32_t w = (uint32_t)j->w, h = (uint32_t)j->h;
		struct cdc_crop c;

		used |= check_decode(j, (struct cdc_crop){ 0, 0, w, h }, 224, 224);
		cdc_crop_center(w, h, 224, 224, &c);
		used |= check_decode(j, c, 224, 224);
		for (uint64_t key = 1; key <= 8; key++) {
			cdc_crop_random(w, h, key * 7919 + (uint64_t)i, &c);
			used |= check_decode(j, c, 224, 224);
		}
		/* edges: right/bottom (x + w == W), left/top, one column/row at the edge */
		used |= check_decode(j, (struct cdc_crop){ w - 200, h - 150, 200, 150 }, 224, 224);
		used |= check_decode(j, (struct cdc_crop){ 0, 0, 131, 97 }, 224, 224);
		used |= check_decode(j, (struct cdc_crop){ w - 1, 0, 1, h / 2 }, 224, 224);
		used |= check_decode(j, (struct cdc_crop){ 0, h - 1, w / 3, 1 }, 224, 224);
		used |= check_decode(j, (struct cdc_crop){ w - 17, h - 9, 17, 9 }, 64, 32);
		/* non-square outputs, small outputs (large shrink: scale 1/8 on small images) */
		used |= check_decode(j, (struct cdc_crop){ 5, 3, w - 10, h - 7 }, 160, 256);
		used |= check_decode(j, (struct cdc_crop){ 0, 0, w, h }, 40, 40);
		used |= check_decode(j, (struct cdc_crop){ w / 3, h / 5, w - w / 3, h - h / 5 }, 37,
				     29);
	}
	printf("worst per-channel mean abs error %.2f\n", worst_mae);
	assert_int_equal(used, 1 | 2 | 4 | 8);
}

/* Crops chosen to force each DCT scale, on 4:2:0 and 4:4:4, at offsets that are and are not
 * multiples of the iMCU, and touching the right and bottom edges. */
static void test_decode_jpeg_each_dct_scale(void **state)
{
	const struct jpg *big = &imgs[BIG420], *big444 = &imgs[BIG444];
	static const struct { struct cdc_crop c; unsigned den; } cases[] = {
		{ { 0, 0, 1792, 1792 }, 8 },     { { 109, 11, 1792, 1792 }, 8 },
		{ { 1901 - 1800, 1803 - 1795, 1800, 1795 }, 8 },
		{ { 0, 0, 896, 896 }, 4 },       { { 1005, 907, 896, 896 }, 4 },
		{ { 33, 700, 1200, 1103 }, 4 },  { { 1901 - 1000, 1803 - 900, 1000, 900 }, 4 },
		{ { 0, 0, 448, 448 }, 2 },       { { 1901 - 500, 1803 - 460, 500, 460 }, 2 },
		{ { 777, 555, 450, 700 }, 2 },   { { 16, 16, 447, 600 }, 1 },
		{ { 1901 - 300, 1803 - 300, 300, 300 }, 1 },
		{ { 901, 3, 200, 100 }, 1 },
	};

	(void)state;
	worst_mae = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(check_decode(big, cases[i].c, 224, 224), cases[i].den);
		assert_int_equal(check_decode(big444, cases[i].c, 224, 224), cases[i].den);
	}
	printf("worst per-channel mean abs error %.2f\n", worst_mae);
}

/* ---- window pixels: cdc_jpeg_window against a full decode at the same DCT scale ---- */

/* Windows of @m decoded by cdc_jpeg_window: @tries random ones (jpeg_img_random_windows), and at
 * each DCT scale a random one moved to touch each edge, then the whole image: every crop pixel
 * must equal the full decode's. Or-s the scales seen into *scales and the (scale, edge) pairs
 * into *edges (bit 4 * log2(scale) + edge). */
static void check_full_decode_windows(const struct img *m, int tries, uint64_t *x,
				      unsigned *scales, unsigned *edges)
{
	const uint32_t W = (uint32_t)m->w, H = (uint32_t)m->h;

	jpeg_img_random_windows(cdc_jpeg_window, dec, m, m->jpg, m->len, 0, tries, x, scales);
	for (unsigned s = 0; s < 4; s++)
		for (unsigned e = 0; e <= 4; e++) {
			struct cdc_crop c = { 0, 0, W, H };
			struct cdc_window win;
			char what[192];
			uint32_t oh, ow;

			if (e < 4) {  /* e == 4: the whole image */
				cdc_crop_random(W, H, test_xorshift(x), &c);
				jpeg_img_snap(&c, e, W, H);
			}
			jpeg_img_out_size(&c, s, &oh, &ow);
			snprintf(what, sizeof(what), "%.63s edge %u crop %u,%u %ux%u", m->name, e,
				 c.x, c.y, c.w, c.h);
			if (cdc_jpeg_window(dec, m->jpg, m->len, &c, oh, ow, &win, why, sizeof(why)))
				fail_msg("%s: %s", what, why);
			if (e < 4)
				*edges |= 1u << (4 * __builtin_ctz(win.den) + e);
			*scales |= win.den;
			jpeg_img_check_window(m, &c, &win, what);
		}
}

/* Generated images of every subsampling, baseline and progressive, sizes that are not multiples
 * of the MCU, down to 1x1 (seed: the row's index + 1). */
static const struct jpeg_img_spec window_set[] = {
	{ 333, 517, TJSAMP_420, 0, 0 },  { 640, 480, TJSAMP_420, 0, 0 },  { 517, 333, TJSAMP_422, 0, 0 },
	{ 301, 299, TJSAMP_444, 0, 0 },  { 333, 211, TJSAMP_GRAY, 0, 0 }, { 419, 287, TJSAMP_420, 1, 0 },
	{ 287, 419, TJSAMP_422, 1, 0 },  { 250, 190, TJSAMP_444, 1, 0 },  { 203, 177, TJSAMP_GRAY, 1, 0 },
	{ 277, 263, TJSAMP_440, 0, 0 },  { 301, 203, TJSAMP_411, 0, 0 },  { 17, 9, TJSAMP_420, 0, 0 },
	{ 5, 3, TJSAMP_422, 0, 0 },      { 1, 1, TJSAMP_420, 0, 0 },      { 1031, 97, TJSAMP_422, 0, 0 },
};

static void make_window_img(tjhandle tjd, struct img *m, size_t i)
{
	jpeg_img_make(tjd, m, window_set[i].w, window_set[i].h, window_set[i].samp,
		      window_set[i].progressive, (uint64_t)i + 1);
}

/* Real photographs (mate-backgrounds; issue 23 measured a quarter of their RandomResizedCrop
 * windows off, by up to 35): two as shipped (4:2:2 baseline, 4:2:0 progressive, 1600 px and
 * more), lossless cuts of others to odd sizes (4:2:0, 4:2:2 and 4:4:4, baseline and progressive;
 * grey from their luma; a 17x9 piece; strips one MCU row or column wide and more), and cuts
 * compressed again as 4:4:0, 4:1:1 and 4:2:0. */
static const struct { const char *file; int x, y, w, h, options, samp; } photo_set[] = {
	{ "nature/Dune.jpg", 0, 0, 0, 0, 0, -1 },
	{ "nature/FreshFlower.jpg", 0, 0, 0, 0, 0, -1 },
	{ "nature/RainDrops.jpg", 800, 304, 333, 517, 0, -1 },
	{ "nature/Wood.jpg", 512, 640, 517, 333, 0, -1 },
	{ "nature/Storm.jpg", 320, 400, 419, 287, TJXOPT_PROGRESSIVE, -1 },
	{ "desktop/GreenTraditional.jpg", 800, 400, 299, 301, 0, -1 },
	{ "desktop/GreenTraditional.jpg", 96, 64, 501, 375, TJXOPT_PROGRESSIVE, -1 },
	{ "nature/LadyBird.jpg", 1024, 640, 401, 299, TJXOPT_GRAY, -1 },
	{ "nature/YellowFlower.jpg", 1200, 800, 203, 177, TJXOPT_GRAY | TJXOPT_PROGRESSIVE, -1 },
	{ "nature/Garden.jpg", 1600, 960, 17, 9, 0, -1 },
	{ "nature/Aqua.jpg", 0, 736, 1031, 97, 0, -1 },
	{ "nature/Blinds.jpg", 960, 0, 97, 1031, 0, -1 },
	{ "nature/TwoWings.jpg", 640, 320, 277, 263, 0, TJSAMP_440 },
	{ "nature/Garden.jpg", 320, 480, 301, 203, 0, TJSAMP_411 },
	{ "nature/FreshFlower.jpg", 480, 320, 500, 375, 0, TJSAMP_420 },
};

static void make_photo_img(tjhandle tjd, struct img *m, size_t i)
{
	jpeg_img_photo(tjd, m, photo_set[i].file, photo_set[i].x, photo_set[i].y, photo_set[i].w,
		       photo_set[i].h, photo_set[i].options, photo_set[i].samp);
}

/* 60 random windows of each of the @n images @make makes, from the seed of @test: each equals
 * the full decode; together they see every DCT scale and every edge. */
static void windows_equal_full_decode(const char *test, size_t n,
				      void (*make)(tjhandle tjd, struct img *m, size_t i))
{
	uint64_t x = seeded(test);
	unsigned scales = 0, edges = 0;
	tjhandle tjd = tjInitDecompress();

	assert_non_null(tjd);
	for (size_t i = 0; i < n; i++) {
		struct img m;
		make(tjd, &m, i);
		check_full_decode_windows(&m, 60, &x, &scales, &edges);
		jpeg_img_free(&m);
	}
	tjDestroy(tjd);
	assert_int_equal(scales, 1 | 2 | 4 | 8);
	assert_int_equal(edges, 0xffff);
}

/* Regression (issue 23, item 8): on generated images of every subsampling (4:4:4, 4:2:2, 4:2:0,
 * 4:4:0, 4:1:1, grey; baseline and progressive; sizes that are not multiples of the MCU, down to
 * 1x1), the plain JPEG path's windows are the full decode's pixels. Its crops used to keep no
 * margin, and fancy upsampling at the crop's edge changed the window's edge columns. */
static void test_decode_jpeg_window_equals_full_decode(void **state)
{
	(void)state;
	windows_equal_full_decode(__func__, sizeof(window_set) / sizeof(window_set[0]),
				  make_window_img);
}

/* The same on the real photographs of photo_set. */
static void test_decode_jpeg_window_equals_full_decode_photos(void **state)
{
	(void)state;
	windows_equal_full_decode(__func__, sizeof(photo_set) / sizeof(photo_set[0]),
				  make_photo_img);
}

static void decode_ok(const struct jpg *j, const struct cdc_crop *c, const struct cdc_out *o,
		      uint8_t *dst)
{
	int ret = cdc_decode_jpeg(dec, j->buf, j->len, c, o, dst, why, sizeof(why));

	if (ret != 0)
		fail_msg("%s: %d %s", j->name, ret, why);
}

enum { FH = 96, FW = 131 };  /* an output that is neither square nor a round size */

/* @flip mirrors @plain, @nchw is @plain transposed, @both is @flip transposed, exactly. */
static void check_flip_nchw(const uint8_t *plain, const uint8_t *flip, const uint8_t *nchw,
			    const uint8_t *both, const char *what)
{
	for (int y = 0; y < FH; y++)
		for (int x = 0; x < FW; x++)
			for (int ch = 0; ch < 3; ch++) {
				uint8_t p = plain[(y * FW + x) * 3 + ch];
				uint8_t m = plain[(y * FW + FW - 1 - x) * 3 + ch];
				if (flip[(y * FW + x) * 3 + ch] != m)
					fail_msg("%s: flip at %d,%d,%d", what, x, y, ch);
				if (nchw[(ch * FH + y) * FW + x] != p)
					fail_msg("%s: nchw at %d,%d,%d", what, x, y, ch);
				if (both[(ch * FH + y) * FW + x] != m)
					fail_msg("%s: flipped nchw at %d,%d,%d", what, x, y, ch);
			}
}

/* Flip mirrors the unflipped output exactly; NCHW holds the same values as NHWC, transposed. */
static void test_decode_jpeg_flip_and_nchw(void **state)
{
	static uint8_t plain[FH * FW * 3], flip[FH * FW * 3], nchw[FH * FW * 3], both[FH * FW * 3];

	(void)state;
	for (int i = 0; i < NIMG; i++) {
		uint32_t w = (uint32_t)imgs[i].w, h = (uint32_t)imgs[i].h;
		const struct cdc_crop crops[] = { { 0, 0, w, h }, { w / 4, h / 3, w / 2, h / 3 },
						  { w - 50, h - 70, 50, 70 } };

		for (size_t k = 0; k < sizeof(crops) / sizeof(crops[0]); k++) {
			struct cdc_out o = { .h = FH, .w = FW, .nchw = 0, .flip = 0 };
			char what[96];

			decode_ok(&imgs[i], &crops[k], &o, plain);
			o.flip = 1;
			decode_ok(&imgs[i], &crops[k], &o, flip);
			o.flip = 0, o.nchw = 1;
			decode_ok(&imgs[i], &crops[k], &o, nchw);
			o.flip = 1;
			decode_ok(&imgs[i], &crops[k], &o, both);
			snprintf(what, sizeof(what), "%s crop %zu", imgs[i].name, k);
			check_flip_nchw(plain, flip, nchw, both, what);
		}
	}
}

/* The stream has the last word on the size: a window planned from a stale index that runs past
 * the image is clipped, one that starts outside it becomes the whole image. */
static void test_decode_jpeg_window_clipped_to_stream(void **state)
{
	const struct jpg *j = &imgs[1];
	static uint8_t a[224 * 224 * 3], b[224 * 224 * 3];
	struct cdc_out o = { .h = 224, .w = 224, .nchw = 0, .flip = 0 };
	struct cdc_crop past = { 600, 100, 500, 1000 }, clipped = { 600, 100, 40, 380 };
	struct cdc_crop outside = { 640, 0, 10, 10 }, whole = { 0, 0, 640, 480 };
	struct cdc_crop huge = { 10, 10, UINT32_MAX, UINT32_MAX }, rest = { 10, 10, 630, 470 };

	(void)state;
	decode_ok(j, &past, &o, a);
	decode_ok(j, &clipped, &o, b);
	assert_memory_equal(a, b, sizeof(a));
	decode_ok(j, &outside, &o, a);
	decode_ok(j, &whole, &o, b);
	assert_memory_equal(a, b, sizeof(a));
	decode_ok(j, &huge, &o, a);
	decode_ok(j, &rest, &o, b);
	assert_memory_equal(a, b, sizeof(a));
}

/* Buffers grow and are reused: decoding a small, a large and the small image again gives the
 * same bytes as a fresh decoder. */
static void test_decode_jpeg_decoder_reuse(void **state)
{
	const struct jpg *small = &imgs[3], *big = &imgs[BIG444];
	static uint8_t first[224 * 224 * 3], again[224 * 224 * 3], tmp[300 * 300 * 3];
	struct cdc_out o = { .h = 224, .w = 224, .nchw = 0, .flip = 0 };
	struct cdc_out o2 = { .h = 300, .w = 300, .nchw = 1, .flip = 1 };
	struct cdc_crop c = { 10, 20, 300, 400 }, cb = { 0, 0, 1901, 1803 };

	(void)state;
	decode_ok(small, &c, &o, first);
	decode_ok(big, &cb, &o2, tmp);
	decode_ok(small, &c, &o, again);
	assert_memory_equal(first, again, sizeof(first));
}

/* After a failure the decoder must decode a good image to the same bytes as before. */
static void check_rejected(const uint8_t *bad, size_t len, const struct jpg *good,
			   const uint8_t *good_out, const char *what)
{
	static uint8_t out[224 * 224 * 3];
	struct cdc_crop c = { 0, 0, (uint32_t)good->w, (uint32_t)good->h };
	struct cdc_out o = { .h = 224, .w = 224, .nchw = 0, .flip = 0 };
	int ret;

	why[0] = 0;
	ret = cdc_decode_jpeg(dec, bad, len, &c, &o, out, why, sizeof(why));
	if (ret != -EBADMSG)
		fail_msg("%s (%zu bytes): %d, want -EBADMSG", what, len, ret);
	if (strncmp(why, "JPEG: ", 6) != 0 || strlen(why) < 10)
		fail_msg("%s: no message (\"%s\")", what, why);
	decode_ok(good, &c, &o, out);
	if (memcmp(out, good_out, sizeof(out)) != 0)
		fail_msg("%s: the next good image decodes differently", what);
}

static size_t scan_start(const struct jpg *j)
{
	for (size_t i = 2; i + 4 < j->len; i++)
		if (j->buf[i] == 0xff && j->buf[i + 1] == 0xda)
			return i + 2 + ((size_t)j->buf[i + 2] << 8 | j->buf[i + 3]);
	fail_msg("%s: no SOS", j->name);
	return 0;
}

/* @j decoded whole to 224x224 into @good_out (what check_rejected compares with); returns where
 * its scan data starts, and their length in *data. */
static size_t good_decode(const struct jpg *j, uint8_t *good_out, size_t *data)
{
	struct cdc_crop c = { 0, 0, (uint32_t)j->w, (uint32_t)j->h };
	struct cdc_out o = { .h = 224, .w = 224, .nchw = 0, .flip = 0 };
	size_t sos = scan_start(j);

	decode_ok(j, &c, &o, good_out);
	*data = j->len - sos;
	return sos;
}

static void test_decode_jpeg_truncated_rejected(void **state)
{
	static uint8_t good_out[224 * 224 * 3];

	(void)state;
	for (int i = 0; i < NIMG; i++) {
		const struct jpg *j = &imgs[i];
		size_t data, sos = good_decode(j, good_out, &data);
		const size_t cuts[] = { 0, 1, 2, 3, 20, sos / 2, sos - 1, sos, sos + 1,
					sos + data / 10, sos + data / 2, sos + data * 9 / 10,
					j->len * 95 / 100 };
		char what[96];

		for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
			/* a copy of exactly the cut length, so ASan sees any read past it */
			uint8_t *cut = malloc(cuts[k] ? cuts[k] : 1);
			assert_non_null(cut);
			memcpy(cut, j->buf, cuts[k]);
			snprintf(what, sizeof(what), "%s cut at %zu of %lu", j->name, cuts[k],
				 j->len);
			check_rejected(cut, cuts[k], j, good_out, what);
			free(cut);
		}
	}
}

/* Random bytes over the middle of the entropy-coded data: libjpeg's corrupt-data warnings
 * (bad Huffman code, premature marker) must fail the decode, not fill with grey. */
static void test_decode_jpeg_garbage_entropy_rejected(void **state)
{
	static uint8_t good_out[224 * 224 * 3];
	uint64_t x = seeded("test_decode_jpeg_garbage_entropy_rejected");

	(void)state;
	for (int i = 0; i < NIMG; i++) {
		const struct jpg *j = &imgs[i];
		size_t data, sos = good_decode(j, good_out, &data);
		uint8_t *bad = malloc(j->len);
		char what[96];

		assert_non_null(bad);
		for (int k = 0; k < 10; k++) {
			size_t from = sos + data / 4 + test_xorshift(&x) % (data / 8);
			size_t n = data / 4 + test_xorshift(&x) % (data / 8);
			memcpy(bad, j->buf, j->len);
			for (size_t b = 0; b < n; b++)
				bad[from + b] = (uint8_t)test_xorshift(&x);
			snprintf(what, sizeof(what), "%s garbage at %zu+%zu", j->name, from, n);
			check_rejected(bad, j->len, j, good_out, what);
		}
		free(bad);
	}
}

static void test_decode_jpeg_random_bytes_rejected(void **state)
{
	const struct jpg *j = &imgs[3];
	static uint8_t good_out[224 * 224 * 3];
	struct cdc_crop c = { 0, 0, 333, 517 };
	struct cdc_out o = { .h = 224, .w = 224, .nchw = 0, .flip = 0 };
	uint64_t x = seeded("test_decode_jpeg_random_bytes_rejected");

	(void)state;
	decode_ok(j, &c, &o, good_out);
	for (int k = 0; k < 200; k++) {
		size_t len = 1 + test_xorshift(&x) % 5000;
		uint8_t *p = malloc(len);
		assert_non_null(p);
		for (size_t b = 0; b < len; b++)
			p[b] = (uint8_t)test_xorshift(&x);
		if (k % 2) {
			/* a plausible start: SOI, then garbage */
			p[0] = 0xff;
			if (len > 1)
				p[1] = 0xd8;
		}
		check_rejected(p, len, j, good_out, k % 2 ? "SOI + random bytes" : "random bytes");
		free(p);
	}
}

/* ---- raw tensors ---- */

static void test_decode_raw_copy_as_stored(void **state)
{
	uint8_t src[5 * 7 * 4], dst[5 * 7 * 4 + 1];
	struct cdc_out o = { .h = 0, .w = 0, .nchw = 0, .flip = 0 };
	struct cdc_crop c = { 0, 0, 0, 0 };

	(void)state;
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 13 + 1);
	for (uint32_t ch = 1; ch <= 4; ch++) {
		memset(dst, 0xee, sizeof(dst));
		assert_int_equal(cdc_decode_raw(dec, src, 5, 7, ch, &c, &o, dst), 0);
		assert_memory_equal(dst, src, 5 * 7 * ch);
		assert_int_equal(dst[5 * 7 * ch], 0xee);  /* nothing past it */
	}
	/* a 1-D record (loader passes h = 1) */
	assert_int_equal(cdc_decode_raw(dec, src, 1, 100, 1, &c, &o, dst), 0);
	assert_memory_equal(dst, src, 100);
}

static void test_decode_raw_resize_matches_reference(void **state)
{
	const uint32_t W = 97, H = 61;
	uint8_t *img = make_image(W, H, 0);
	static const struct { struct cdc_crop c; uint32_t oh, ow; } cases[] = {
		{ { 0, 0, 97, 61 }, 224, 224 }, { { 0, 0, 97, 61 }, 30, 50 },
		{ { 10, 5, 40, 30 }, 224, 224 }, { { 96, 0, 1, 61 }, 8, 8 },
		{ { 0, 60, 97, 1 }, 4, 100 },    { { 50, 20, 47, 41 }, 47, 41 },
		{ { 3, 7, 64, 48 }, 17, 231 },
	};

	(void)state;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		uint32_t oh = cases[k].oh, ow = cases[k].ow;
		struct cdc_out o = { .h = oh, .w = ow, .nchw = 0, .flip = 0 };
		uint8_t *got = malloc((size_t)oh * ow * 3);
		double *want = malloc(sizeof(double) * oh * ow * 3), worst = 0;
		assert_non_null(got);
		assert_non_null(want);
		assert_int_equal(cdc_decode_raw(dec, img, H, W, 3, &cases[k].c, &o, got), 0);
		ref_resize(img, (int)W, (int)H, &cases[k].c, oh, ow, want);
		for (size_t i = 0; i < (size_t)oh * ow * 3; i++)
			worst = fabs(got[i] - want[i]) > worst ? fabs(got[i] - want[i]) : worst;
		/* 8-bit fixed-point weights: within rounding of the exact bilinear value */
		if (worst > 1.5 || mae(got, want, oh, ow) > 0.6)
			fail_msg("case %zu: max error %.2f, mean %.2f", k, worst,
				 mae(got, want, oh, ow));
		free(got);
		free(want);
	}
	free(img);
}

/* The resize's bytes, pinned: FNV-1a over the outputs of 4,000 random-resized crops of a noise
 * image (28x28, flip and NCHW alternating) and of crops whose blend weights fall exactly on a
 * half (1 px to 256 wide, 128 high: lround's ties), as the resize of 702bddc made them: a
 * faster path for small crops must give the same bytes (issue 31). Any change of a weight or a
 * rounding changes the sum (ties rounded down instead: it fails). */
#define PINNED_RESIZE_SUM 0xec61447dc739f7c0ull  /* made by the resize of 702bddc */
static void test_decode_raw_resize_bytes_pinned(void **state)
{
	enum { W = 32, H = 32 };
	static uint8_t img[W * H * 3], out[256 * 256 * 3];
	static const struct { struct cdc_crop c; uint32_t oh, ow; } ties[] = {
		{ { 1, 0, 1, 2 }, 2, 256 },   { { 0, 1, 2, 1 }, 128, 2 },
		{ { 5, 7, 1, 1 }, 128, 256 }, { { 0, 0, 32, 32 }, 224, 224 },
		{ { 3, 7, 20, 9 }, 17, 231 }, { { 31, 31, 1, 1 }, 64, 128 },
	};
	uint64_t x = 0x9e3779b97f4a7c15ull, sum = 0xcbf29ce484222325ull;

	(void)state;
	for (size_t i = 0; i < sizeof(img); i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		img[i] = (uint8_t)(x >> 32);
	}
	for (uint64_t key = 0; key < 4000 + sizeof(ties) / sizeof(ties[0]); key++) {
		struct cdc_crop c;
		struct cdc_out o = { .h = 28, .w = 28, .nchw = (int)(key >> 1 & 1), .flip = (int)(key & 1) };
		if (key < 4000) {
			cdc_crop_random(W, H, key * 0x2545f4914f6cdd1dull, &c);
		} else {
			c = ties[key - 4000].c;
			o.h = ties[key - 4000].oh;
			o.w = ties[key - 4000].ow;
		}
		assert_int_equal(cdc_decode_raw(dec, img, H, W, 3, &c, &o, out), 0);
		for (size_t i = 0; i < (size_t)o.h * o.w * 3; i++)
			sum = (sum ^ out[i]) * 0x100000001b3ull;
	}
	assert_int_equal(sum, PINNED_RESIZE_SUM);
}

static void test_decode_raw_identity_and_flip(void **state)
{
	const uint32_t W = 33, H = 21;
	uint8_t src[33 * 21 * 3], out[33 * 21 * 3], fl[33 * 21 * 3];
	struct cdc_crop c = { 0, 0, W, H };
	struct cdc_out o = { .h = H, .w = W, .nchw = 0, .flip = 0 };

	(void)state;
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 97 + (i >> 4));  /* not smooth: any blending would show */
	assert_int_equal(cdc_decode_raw(dec, src, H, W, 3, &c, &o, out), 0);
	assert_memory_equal(out, src, sizeof(src));
	o.flip = 1;
	assert_int_equal(cdc_decode_raw(dec, src, H, W, 3, &c, &o, fl), 0);
	for (uint32_t y = 0; y < H; y++)
		for (uint32_t x = 0; x < W; x++)
			assert_memory_equal(fl + (y * W + x) * 3, src + (y * W + W - 1 - x) * 3, 3);
	/* a 1:1 sub-window is a plain copy of it, NCHW transposed */
	struct cdc_crop sub = { 5, 4, 20, 10 };
	struct cdc_out os = { .h = 10, .w = 20, .nchw = 1, .flip = 0 };
	assert_int_equal(cdc_decode_raw(dec, src, H, W, 3, &sub, &os, out), 0);
	for (uint32_t y = 0; y < 10; y++)
		for (uint32_t x = 0; x < 20; x++)
			for (uint32_t ch = 0; ch < 3; ch++)
				assert_int_equal(out[(ch * 10 + y) * 20 + x],
						 src[((y + 4) * W + x + 5) * 3 + ch]);
}

static void test_decode_raw_invalid(void **state)
{
	uint8_t src[16 * 16 * 4], dst[8 * 8 * 3];
	struct cdc_out o = { .h = 8, .w = 8, .nchw = 0, .flip = 0 };
	struct cdc_crop ok = { 0, 0, 16, 16 };
	static const struct cdc_crop bad[] = {
		{ 1, 0, 16, 16 }, { 0, 1, 16, 16 }, { 0, 0, 17, 16 }, { 0, 0, 16, 17 },
		{ 16, 0, 1, 1 },  { 0, 16, 1, 1 },  { 0, 0, 0, 5 },   { 0, 0, 5, 0 },
		{ 15, 15, 2, 1 },
	};

	(void)state;
	memset(src, 7, sizeof(src));
	assert_int_equal(cdc_decode_raw(dec, src, 16, 16, 3, &ok, &o, dst), 0);
	assert_int_equal(cdc_decode_raw(dec, src, 16, 16, 1, &ok, &o, dst), -EINVAL);
	assert_int_equal(cdc_decode_raw(dec, src, 16, 16, 4, &ok, &o, dst), -EINVAL);
	assert_int_equal(cdc_decode_raw(dec, src, 16, 16, 2, &ok, &o, dst), -EINVAL);
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
		if (cdc_decode_raw(dec, src, 16, 16, 3, &bad[k], &o, dst) != -EINVAL)
			fail_msg("crop %u,%u %ux%u of 16x16 accepted", bad[k].x, bad[k].y, bad[k].w,
				 bad[k].h);
}

/* Regression (decode.c, cdc_decode_raw): the bounds check adds crop->x + crop->w in uint32_t,
 * so a window whose end wraps past 2^32 passes it and is "resized" from clamped edge pixels
 * instead of being refused with -EINVAL. */
static void test_decode_raw_crop_overflow_rejected(void **state)
{
	uint8_t src[16 * 16 * 3], dst[8 * 8 * 3];
	struct cdc_out o = { .h = 8, .w = 8, .nchw = 0, .flip = 0 };
	static const struct cdc_crop bad[] = {
		{ UINT32_MAX, 0, 2, 16 }, { 0, UINT32_MAX, 16, 2 }, { 1, 0, UINT32_MAX, 16 },
		{ 0, 8, 16, UINT32_MAX - 7 },
	};

	(void)state;
	memset(src, 7, sizeof(src));
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		int ret = cdc_decode_raw(dec, src, 16, 16, 3, &bad[k], &o, dst);
		if (ret != -EINVAL)
			fail_msg("crop %u,%u %ux%u of 16x16: %d, want -EINVAL (x + w wraps in "
				 "uint32_t)", bad[k].x, bad[k].y, bad[k].w, bad[k].h, ret);
	}
}

/* ---- zstd ---- */

static void test_decode_zstd_roundtrip(void **state)
{
	static const size_t sizes[] = { 0, 1, 100, 4096, 150001, 1 << 20 };
	uint64_t x = 12345;

	(void)state;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (int random = 0; random < 2; random++) {
			size_t n = sizes[k], cap = ZSTD_compressBound(n);
			uint8_t *raw = malloc(n ? n : 1), *z = malloc(cap);
			assert_non_null(raw);
			assert_non_null(z);
			for (size_t i = 0; i < n; i++)
				raw[i] = random ? (uint8_t)test_xorshift(&x) : (uint8_t)(i / 100);
			size_t zn = ZSTD_compress(z, cap, raw, n, 3);
			assert_false(ZSTD_isError(zn));
			why[0] = 0;
			const uint8_t *got = cdc_decode_zstd(dec, z, zn, n, why, sizeof(why));
			if (!got)
				fail_msg("%zu bytes: %s", n, why);
			assert_memory_equal(got, raw, n);
			free(raw);
			free(z);
		}
}

static void zstd_fails(const uint8_t *z, size_t zn, size_t raw, const char *what)
{
	why[0] = 0;
	if (cdc_decode_zstd(dec, z, zn, raw, why, sizeof(why)) != NULL)
		fail_msg("%s: accepted", what);
	if (strncmp(why, "zstd: ", 6) != 0 || strlen(why) < 10)
		fail_msg("%s: no message (\"%s\")", what, why);
}

static void test_decode_zstd_wrong_size_and_garbage(void **state)
{
	uint8_t raw[10000], z[11000], junk[3000];
	uint64_t x = seeded("test_decode_zstd_wrong_size_and_garbage");
	size_t zn;

	(void)state;
	for (size_t i = 0; i < sizeof(raw); i++)
		raw[i] = (uint8_t)(i * 7 / 13);
	zn = ZSTD_compress(z, sizeof(z), raw, sizeof(raw), 3);
	assert_false(ZSTD_isError(zn));
	zstd_fails(z, zn, sizeof(raw) - 1, "raw size one short");
	zstd_fails(z, zn, sizeof(raw) + 1, "raw size one long");
	zstd_fails(z, zn, 0, "raw size 0");
	zstd_fails(z, zn - 1, sizeof(raw), "truncated frame");
	zstd_fails(z, 0, sizeof(raw), "empty input");
	for (int k = 0; k < 50; k++) {
		size_t n = 1 + test_xorshift(&x) % sizeof(junk);
		for (size_t i = 0; i < n; i++)
			junk[i] = (uint8_t)test_xorshift(&x);
		if (k % 2) {  /* a real frame header, then garbage */
			memcpy(junk, z, n < 12 ? n : 12);
		}
		zstd_fails(junk, n, sizeof(raw), "garbage");
	}
	/* still usable */
	const uint8_t *got = cdc_decode_zstd(dec, z, zn, sizeof(raw), why, sizeof(why));
	assert_non_null(got);
	assert_memory_equal(got, raw, sizeof(raw));
}

/* The loader's path for compressed tensors: zstd into the scratch buffer, then resized from
 * there by the same decoder. */
static void test_decode_zstd_then_raw(void **state)
{
	const uint32_t W = 64, H = 48;
	uint8_t *img = make_image(W, H, 0), z[16384], a[32 * 32 * 3], b[32 * 32 * 3];
	struct cdc_crop c = { 4, 2, 50, 40 };
	struct cdc_out o = { .h = 32, .w = 32, .nchw = 1, .flip = 1 };
	size_t zn = ZSTD_compress(z, sizeof(z), img, (size_t)W * H * 3, 1);

	(void)state;
	assert_false(ZSTD_isError(zn));
	const uint8_t *raw = cdc_decode_zstd(dec, z, zn, (size_t)W * H * 3, why, sizeof(why));
	assert_non_null(raw);
	assert_int_equal(cdc_decode_raw(dec, raw, H, W, 3, &c, &o, a), 0);
	assert_int_equal(cdc_decode_raw(dec, img, H, W, 3, &c, &o, b), 0);
	assert_memory_equal(a, b, sizeof(a));
	free(img);
}

/* An outlier's buffer is let go after it: a buffer of exactly @keep bytes stays, one byte more
 * goes (issue 23: one record made every worker hold its size forever); then the decoder works as
 * before. The scratch of a fresh decoder after a zstd tensor of N bytes is exactly N. */
static void test_decoder_trim_lets_outlier_go(void **state)
{
	enum { N = 3 << 20 };
	struct cdc_decoder *d;
	uint8_t *raw = calloc(1, N), z[4096];

	(void)state;
	assert_non_null(raw);
	raw[N / 2] = 7;
	size_t zn = ZSTD_compress(z, sizeof(z), raw, N, 3);
	assert_false(ZSTD_isError(zn));
	assert_int_equal(cdc_decoder_create(&d), 0);
	assert_int_equal(cdc_decoder_held(d), 0);
	assert_non_null(cdc_decode_zstd(d, z, zn, N, why, sizeof(why)));
	assert_int_equal(cdc_decoder_held(d), N);
	cdc_decoder_trim(d, N);  /* at the limit: kept */
	assert_int_equal(cdc_decoder_held(d), N);
	cdc_decoder_trim(d, N - 1);  /* one past it: let go */
	assert_int_equal(cdc_decoder_held(d), 0);
	const uint8_t *got = cdc_decode_zstd(d, z, zn, N, why, sizeof(why));
	assert_non_null(got);
	assert_memory_equal(got, raw, N);
	cdc_decoder_trim(d, 0);
	assert_int_equal(cdc_decoder_held(d), 0);
	cdc_decoder_destroy(d);
	free(raw);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup_decoder, teardown_decoder)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_crop_random_window_inside_image),
		T(test_crop_random_distribution),
		T(test_crop_random_fallback_extreme_aspect),
		T(test_crop_center_eval_semantics),
		T(test_jpeg_scale_largest_covering),
		T(test_decode_jpeg_matches_reference),
		T(test_decode_jpeg_each_dct_scale),
		T(test_decode_jpeg_flip_and_nchw),
		T(test_decode_jpeg_window_clipped_to_stream),
		T(test_decode_jpeg_decoder_reuse),
		T(test_decode_jpeg_window_equals_full_decode),
		T(test_decode_jpeg_window_equals_full_decode_photos),
		T(test_decode_jpeg_truncated_rejected),
		T(test_decode_jpeg_garbage_entropy_rejected),
		T(test_decode_jpeg_random_bytes_rejected),
		T(test_decode_raw_copy_as_stored),
		T(test_decode_raw_resize_matches_reference),
		T(test_decode_raw_resize_bytes_pinned),
		T(test_decode_raw_identity_and_flip),
		T(test_decode_raw_invalid),
		T(test_decode_raw_crop_overflow_rejected),
		T(test_decode_zstd_roundtrip),
		T(test_decode_zstd_wrong_size_and_garbage),
		T(test_decode_zstd_then_raw),
		T(test_decoder_trim_lets_outlier_go),
	};

	return cmocka_run_group_tests(tests, make_images, free_images);
}
