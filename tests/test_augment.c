/* test_augment.c - the per-sample augmentations (codec/augment.c) by what each op must do,
 * worked out by hand here (torchvision's pixel-for-pixel comparison is python/tests/
 * test_augment.py): the identity factors, the ends of each range, clamping, the degenerate
 * channels of autocontrast and equalize, the affine warps on a labelled grid, NCHW equal to NHWC,
 * the pipeline's draws a function of the key alone (resume, ranks), each random choice reached,
 * and cdc_aug_check's every bound at its limit and one past it. Seeded tests print their seed. */
#include "codec/augment.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "tests/test_util.h"

#define H 13
#define W 17
#define N (H * W * 3)

static uint8_t scratch[N];

static void random_image(uint8_t *px, uint64_t *x)
{
	for (int i = 0; i < N; i++)
		px[i] = (uint8_t)test_xorshift(x);
}

static void hwc(struct cdc_img *im, uint8_t *px)
{
	cdc_img_hwc(im, px, H, W);
}

static uint8_t at(const uint8_t *px, int y, int x, int c)
{
	return px[(y * W + x) * 3 + c];
}

static void test_augment_brightness_identity_zero_and_clamp(void **state)
{
	uint8_t a[N], b[N];
	struct cdc_img im;
	uint64_t x = test_xorshift_init(test_seed("brightness", "TEST_AUGMENT_SEED"));

	(void)state;
	random_image(a, &x);
	memcpy(b, a, N);
	hwc(&im, b);
	cdc_aug_brightness(&im, 1.0);
	assert_memory_equal(a, b, N);
	cdc_aug_brightness(&im, 2.0);
	for (int i = 0; i < N; i++)
		assert_int_equal(b[i], a[i] * 2 > 255 ? 255 : a[i] * 2);
	cdc_aug_brightness(&im, 0.0);
	for (int i = 0; i < N; i++)
		assert_int_equal(b[i], 0);
}

static void test_augment_saturation_zero_is_gray(void **state)
{
	uint8_t a[N];
	struct cdc_img im;
	uint64_t x = test_xorshift_init(test_seed("saturation", "TEST_AUGMENT_SEED"));

	(void)state;
	random_image(a, &x);
	a[0] = 200, a[1] = 100, a[2] = 50;  /* 0.2989 * 200 + 0.587 * 100 + 0.114 * 50 = 124.18 */
	hwc(&im, a);
	cdc_aug_saturation(&im, 0.0);
	assert_int_equal(a[0], 124);
	for (int i = 0; i < N; i += 3) {
		assert_int_equal(a[i], a[i + 1]);
		assert_int_equal(a[i], a[i + 2]);
	}
}

static void test_augment_contrast_zero_is_mean(void **state)
{
	uint8_t a[N];
	struct cdc_img im;

	(void)state;
	for (int i = 0; i < N; i += 3)  /* gray 10 and 30 in equal numbers, plus one more 10 */
		a[i] = a[i + 1] = a[i + 2] = (i / 3) % 2 ? 30 : 10;
	hwc(&im, a);
	cdc_aug_contrast(&im, 0.0);
	/* the mean of gray (9 and 29 after truncating 0.2989 x + 0.587 x + 0.114 x) is
	 * (111 * 9 + 110 * 29) / 221 = 18.95..., truncated */
	for (int i = 0; i < N; i++)
		assert_int_equal(a[i], 18);
}

static void test_augment_hue_half_turns_red_to_cyan(void **state)
{
	uint8_t a[N];
	struct cdc_img im;

	(void)state;
	for (int i = 0; i < N; i += 3)
		a[i] = 255, a[i + 1] = 0, a[i + 2] = 0;
	a[3] = a[4] = a[5] = 90;  /* a gray pixel keeps its value */
	hwc(&im, a);
	cdc_aug_hue(&im, 0.5);
	assert_int_equal(a[0], 0);
	assert_int_equal(a[1], 255);
	assert_int_equal(a[2], 255);
	assert_int_equal(a[3], 90);
	assert_int_equal(a[5], 90);
	cdc_aug_hue(&im, -0.5);
	assert_int_equal(a[0], 255);
	assert_int_equal(a[1], 0);
}

static void test_augment_posterize_solarize_invert(void **state)
{
	uint8_t a[N];
	struct cdc_img im;

	(void)state;
	for (int i = 0; i < N; i++)
		a[i] = (uint8_t)(i * 37);
	uint8_t b[N];
	memcpy(b, a, N);
	hwc(&im, b);
	cdc_aug_posterize(&im, 8);
	assert_memory_equal(a, b, N);
	cdc_aug_posterize(&im, 3);
	for (int i = 0; i < N; i++)
		assert_int_equal(b[i], a[i] & 0xe0);
	cdc_aug_posterize(&im, 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(b[i], 0);
	memcpy(b, a, N);
	cdc_aug_solarize(&im, 128.0);  /* >= threshold inverts: 128 -> 127, 127 stays */
	for (int i = 0; i < N; i++)
		assert_int_equal(b[i], a[i] >= 128 ? 255 - a[i] : a[i]);
	memcpy(b, a, N);
	cdc_aug_apply_op(&im, CDC_OP_INVERT, 0.0, scratch);
	for (int i = 0; i < N; i++)
		assert_int_equal(b[i], 255 - a[i]);
}

static void test_augment_autocontrast_stretches_each_channel(void **state)
{
	uint8_t a[N];
	struct cdc_img im;

	(void)state;
	for (int i = 0; i < N; i += 3) {
		a[i] = (uint8_t)(50 + (i / 3) % 101);  /* 50..150 */
		a[i + 1] = 77;                          /* constant: left as it is */
		a[i + 2] = (uint8_t)((i / 3) % 256);
	}
	hwc(&im, a);
	cdc_aug_autocontrast(&im);
	for (int i = 0; i < N; i += 3) {
		/* (v - 50) * (255 / 100), truncated */
		unsigned want = (unsigned)(((float)(i / 3 % 101)) * (255.0f / 100.0f));
		assert_int_equal(a[i], want);
		assert_int_equal(a[i + 1], 77);
	}
}

static void test_augment_equalize_two_levels_and_flat(void **state)
{
	uint8_t a[N];
	struct cdc_img im;

	(void)state;
	/* channel 0: 3 levels; channel 1: constant (step 0: unchanged) */
	for (int i = 0; i < N; i += 3) {
		int k = i / 3;
		a[i] = k < 100 ? 10 : k < 200 ? 20 : 30;
		a[i + 1] = 5;
		a[i + 2] = 5;
	}
	hwc(&im, a);
	cdc_aug_equalize(&im);
	/* hist: 100 x 10, 100 x 20, 21 x 30; step = (100 + 100) / 255 = 0; unchanged */
	assert_int_equal(a[0], 10);
	assert_int_equal(a[150 * 3], 20);
	assert_int_equal(a[1], 5);
}

static void test_augment_equalize_spreads_levels(void **state)
{
	enum { EH = 32, EW = 32 };
	uint8_t a[EH * EW * 3];
	struct cdc_img im;

	(void)state;
	/* 1024 pixels: 512 of level 0, 256 of level 1, 256 of level 2. step = (512 + 256) // 255 = 3;
	 * lut[0] = 0, lut[1] = (512 + 1) // 3 = 171, lut[2] = (768 + 1) // 3 = 256 -> 255 */
	for (int i = 0; i < EH * EW; i++)
		for (int c = 0; c < 3; c++)
			a[i * 3 + c] = i < 512 ? 0 : i < 768 ? 1 : 2;
	cdc_img_hwc(&im, a, EH, EW);
	cdc_aug_equalize(&im);
	assert_int_equal(a[0], 0);
	assert_int_equal(a[600 * 3], 171);
	assert_int_equal(a[900 * 3 + 2], 255);
}

static void test_augment_sharpness_one_identity_zero_blurs_interior(void **state)
{
	uint8_t a[N], b[N];
	struct cdc_img im;

	(void)state;
	memset(a, 0, N);
	a[(6 * W + 8) * 3] = 130;  /* an impulse in channel 0 */
	memcpy(b, a, N);
	hwc(&im, b);
	cdc_aug_sharpness(&im, 1.0, scratch);
	assert_memory_equal(a, b, N);
	cdc_aug_sharpness(&im, 0.0, scratch);
	assert_int_equal(at(b, 6, 8, 0), 50);  /* 130 * 5 / 13 */
	assert_int_equal(at(b, 5, 8, 0), 10);  /* 130 / 13 */
	assert_int_equal(at(b, 4, 8, 0), 0);
	/* the border keeps its pixels */
	memset(a, 200, N);
	memcpy(b, a, N);
	cdc_aug_sharpness(&im, 0.0, scratch);
	assert_memory_equal(a, b, N);
}

static void test_augment_affine_translate_and_rotate(void **state)
{
	uint8_t a[N], b[N];
	struct cdc_img im;
	uint64_t x = test_xorshift_init(test_seed("affine", "TEST_AUGMENT_SEED"));

	(void)state;
	random_image(a, &x);
	memcpy(b, a, N);
	hwc(&im, b);
	cdc_aug_apply_op(&im, CDC_OP_TRANSLATE_X, 3.9, scratch);  /* int(3.9) = 3 pixels right */
	for (int y = 0; y < H; y++)
		for (int xx = 0; xx < W; xx++)
			for (int c = 0; c < 3; c++)
				assert_int_equal(at(b, y, xx, c), xx < 3 ? 0 : at(a, y, xx - 3, c));
	memcpy(b, a, N);
	cdc_aug_apply_op(&im, CDC_OP_TRANSLATE_Y, -2.0, scratch);  /* 2 rows up */
	for (int y = 0; y < H; y++)
		for (int c = 0; c < 3; c++)
			assert_int_equal(at(b, y, 5, c), y >= H - 2 ? 0 : at(a, y + 2, 5, c));
	/* a 90-degree turn of a square image is a transpose and a mirror: counter-clockwise, the
	 * output's (y, x) is the input's (x, n - 1 - y) */
	enum { S = 9 };
	uint8_t q[S * S * 3], r[S * S * 3];
	struct cdc_img sq;
	for (int i = 0; i < S * S * 3; i++)
		q[i] = (uint8_t)(i * 7 + 1);
	memcpy(r, q, sizeof(q));
	cdc_img_hwc(&sq, r, S, S);
	cdc_aug_apply_op(&sq, CDC_OP_ROTATE, 90.0, scratch);
	for (int y = 0; y < S; y++)
		for (int xx = 0; xx < S; xx++)
			assert_int_equal(r[(y * S + xx) * 3], q[(xx * S + (S - 1 - y)) * 3]);
	memcpy(r, q, sizeof(q));
	cdc_aug_apply_op(&sq, CDC_OP_ROTATE, 0.0, scratch);
	assert_memory_equal(q, r, sizeof(q));
}

static void test_augment_nchw_equals_nhwc(void **state)
{
	uint8_t a[N], b[N], c[N];
	struct cdc_img ih, ic;
	uint8_t sc[N];
	uint64_t x = test_xorshift_init(test_seed("nchw", "TEST_AUGMENT_SEED"));

	(void)state;
	for (int op = 0; op < CDC_OPS; op++) {
		random_image(a, &x);
		memcpy(b, a, N);
		for (int i = 0; i < H * W; i++)
			for (int k = 0; k < 3; k++)
				c[k * H * W + i] = a[i * 3 + k];
		hwc(&ih, b);
		cdc_img_chw(&ic, c, H, W);
		double mag = op == CDC_OP_POSTERIZE ? 5.0 : op == CDC_OP_SOLARIZE ? 100.0 :
			     op == CDC_OP_TRANSLATE_X || op == CDC_OP_TRANSLATE_Y ? -4.0 :
			     op == CDC_OP_ROTATE ? 17.0 : 0.37;
		cdc_aug_apply_op(&ih, (enum cdc_aug_op)op, mag, scratch);
		cdc_aug_apply_op(&ic, (enum cdc_aug_op)op, mag, sc);
		for (int i = 0; i < H * W; i++)
			for (int k = 0; k < 3; k++)
				if (c[k * H * W + i] != b[i * 3 + k])
					fail_msg("%s: NCHW differs at pixel %d channel %d",
						 cdc_aug_op_names[op], i, k);
	}
}

static void test_augment_magnitudes_are_torchvisions_bins(void **state)
{
	(void)state;
	/* RandAugment, 31 bins, bin 9: 0.3 * 9 / 30, 30 * 9 / 30, posterize 8 - round(9 / 7.5) */
	assert_true(fabs(cdc_aug_magnitude(CDC_SPACE_RAND, CDC_OP_SHEAR_X, 9, 31, 224, 224) -
			 0.09) < 1e-6);
	assert_true(fabs(cdc_aug_magnitude(CDC_SPACE_RAND, CDC_OP_ROTATE, 9, 31, 224, 224) -
			 9.0) < 1e-5);
	assert_true(cdc_aug_magnitude(CDC_SPACE_RAND, CDC_OP_POSTERIZE, 9, 31, 224, 224) == 7.0);
	assert_true(cdc_aug_magnitude(CDC_SPACE_RAND, CDC_OP_SOLARIZE, 0, 31, 224, 224) == 255.0);
	assert_true(cdc_aug_magnitude(CDC_SPACE_RAND, CDC_OP_SOLARIZE, 30, 31, 224, 224) == 0.0);
	/* translate follows the image: 150 / 331 of its width, height */
	assert_true(fabs(cdc_aug_magnitude(CDC_SPACE_RAND, CDC_OP_TRANSLATE_X, 30, 31, 100, 331) -
			 150.0) < 1e-4);
	assert_true(fabs(cdc_aug_magnitude(CDC_SPACE_RAND, CDC_OP_TRANSLATE_Y, 30, 31, 662, 5) -
			 300.0) < 1e-4);
	/* TrivialAugmentWide: wider ranges, posterize down to 2 */
	assert_true(fabs(cdc_aug_magnitude(CDC_SPACE_WIDE, CDC_OP_ROTATE, 30, 31, 9, 9) - 135.0) <
		    1e-4);
	assert_true(cdc_aug_magnitude(CDC_SPACE_WIDE, CDC_OP_POSTERIZE, 30, 31, 9, 9) == 2.0);
	assert_true(cdc_aug_magnitude(CDC_SPACE_RAND, CDC_OP_IDENTITY, 5, 31, 9, 9) == 0.0);
}

static void set_default(struct cdc_aug *a)
{
	memset(a, 0, sizeof(*a));
	for (int i = 0; i < 3; i++)
		a->jitter_on[i] = 1, a->jitter_lo[i] = 0.6, a->jitter_hi[i] = 1.4;
	a->autoaug = CDC_AUTO_RAND;
	a->num_ops = 2, a->magnitude = 9, a->bins = 31;
	a->erase_p = 0.5;
	a->erase_scale[0] = 0.02, a->erase_scale[1] = 0.33;
	a->erase_ratio[0] = 0.3, a->erase_ratio[1] = 3.3;
}

static void test_augment_run_is_a_function_of_the_key(void **state)
{
	struct cdc_aug a;
	uint8_t src[N], one[N], two[N];
	struct cdc_img im;
	uint64_t x = test_xorshift_init(test_seed("run", "TEST_AUGMENT_SEED"));
	int differ = 0;

	(void)state;
	set_default(&a);
	random_image(src, &x);
	for (uint64_t key = 0; key < 40; key++) {
		memcpy(one, src, N);
		memcpy(two, src, N);
		hwc(&im, one);
		cdc_aug_run(&a, &im, key, scratch);
		hwc(&im, two);
		memset(scratch, 0xa5, sizeof(scratch));  /* scratch contents never leak through */
		cdc_aug_run(&a, &im, key, scratch);
		assert_memory_equal(one, two, N);
		memcpy(two, src, N);
		cdc_aug_run(&a, &im, key + 1000, scratch);
		differ += memcmp(one, two, N) != 0;
	}
	assert_true(differ >= 38);
}

static void test_augment_run_reaches_every_op_and_erase(void **state)
{
	/* TrivialAugmentWide with one op a sample: over many keys the output of each op is seen
	 * (identified by comparing with each op applied alone at every bin and sign). */
	struct cdc_aug a;
	uint8_t src[N], out[N], ref[N];
	struct cdc_img im;
	int seen[CDC_OPS] = {0};
	uint64_t x = test_xorshift_init(test_seed("reach", "TEST_AUGMENT_SEED"));

	(void)state;
	memset(&a, 0, sizeof(a));
	a.autoaug = CDC_AUTO_WIDE;
	a.bins = 4;
	random_image(src, &x);
	for (uint64_t key = 0; key < 400; key++) {
		memcpy(out, src, N);
		hwc(&im, out);
		cdc_aug_run(&a, &im, key, scratch);
		for (int op = 0; op <= CDC_OP_EQUALIZE; op++)
			for (unsigned b = 0; b < 4; b++)
				for (int sg = -1; sg <= 1; sg += 2) {
					memcpy(ref, src, N);
					hwc(&im, ref);
					double m = cdc_aug_magnitude(CDC_SPACE_WIDE,
								     (enum cdc_aug_op)op, b, 4, H, W);
					cdc_aug_apply_op(&im, (enum cdc_aug_op)op, sg * m, scratch);
					if (!memcmp(ref, out, N))
						seen[op] = 1;
				}
	}
	for (int op = 0; op <= CDC_OP_EQUALIZE; op++)
		if (!seen[op])
			fail_msg("TrivialAugmentWide never chose %s in 400 samples",
				 cdc_aug_op_names[op]);
	/* RandomErasing p 1: every sample has a rectangle of the fill colour */
	memset(&a, 0, sizeof(a));
	a.erase_p = 1.0;
	a.erase_scale[0] = 0.1, a.erase_scale[1] = 0.2;
	a.erase_ratio[0] = 1.0, a.erase_ratio[1] = 1.0;
	a.erase_rgb[0] = 1, a.erase_rgb[1] = 2, a.erase_rgb[2] = 3;
	memset(src, 200, N);
	int firsts[50], distinct = 0;
	for (uint64_t key = 0; key < 50; key++) {
		int n = 0;
		firsts[key] = -1;
		memcpy(out, src, N);
		hwc(&im, out);
		cdc_aug_run(&a, &im, key, scratch);
		for (int i = 0; i < N; i += 3)
			if (out[i] == 1 && out[i + 1] == 2 && out[i + 2] == 3) {
				n++;
				if (firsts[key] < 0)
					firsts[key] = i;
			}
		int seen_before = 0;
		for (uint64_t k = 0; k < key; k++)
			seen_before |= firsts[k] == firsts[key];
		distinct += !seen_before;
		/* area 0.1..0.2 of 221, square: a side of round(sqrt(22..44)) = 5..7 */
		assert_true(n >= 25 && n <= 49);
	}
	assert_true(distinct >= 20);  /* the rectangle is placed anywhere it fits */
	/* value='random' after Normalize: per pixel N(mean, std) in levels, rounded, clamped */
	a.erase_fill = CDC_ERASE_RANDOM;
	a.erase_scale[0] = 0.5, a.erase_scale[1] = 0.5;
	const double mean[3] = { 60.0, 128.0, 250.0 }, sd[3] = { 8.0, 20.0, 8.0 };
	for (int c = 0; c < 3; c++)
		a.erase_mean[c] = mean[c], a.erase_std[c] = sd[c];
	double sum[3] = { 0 }, sq[3] = { 0 };
	int n = 0, clamped = 0;
	for (uint64_t key = 0; key < 20; key++) {
		memset(out, 0, N);
		hwc(&im, out);
		cdc_aug_run(&a, &im, key, scratch);
		for (int i = 0; i < N; i += 3) {
			if (!out[i] && !out[i + 1] && !out[i + 2])
				continue;
			n++;
			clamped += out[i + 2] == 255;
			for (int c = 0; c < 3; c++)
				sum[c] += out[i + c], sq[c] += (double)out[i + c] * out[i + c];
		}
	}
	/* 20 rectangles of about half of 221 pixels */
	assert_true(n >= 20 * 90 && n <= 20 * 130);
	for (int c = 0; c < 2; c++) {
		double m = sum[c] / n, v = sq[c] / n - m * m;
		assert_true(fabs(m - mean[c]) < 2.0);
		assert_true(fabs(sqrt(v) - sd[c]) < 0.15 * sd[c]);
	}
	assert_true(clamped > n / 5);  /* 250 + 8 N(0, 1) above 255 about a quarter of the time */
}

/* ColorJitter as the pipeline runs it (brightness and contrast folded into one table, applied
 * inside the saturation pass through a 256 x 256 table) equals the four ops applied one after
 * the other in the drawn order: the draws are repeated here from their documented recipe
 * (splitmix64 from mix3(key, "AUGM", 0); an order by Fisher-Yates, then the four factors). */
static void test_augment_jitter_fused_equals_sequential(void **state)
{
	enum { JH = 160, JW = 150, JN = JH * JW * 3 };  /* a scratch of 64 KiB or more: fused */
	static uint8_t src[JN], got[JN], want[JN], sc[JN];
	struct cdc_aug a;
	struct cdc_img im;
	uint64_t x = test_xorshift_init(test_seed("jitter", "TEST_AUGMENT_SEED"));

	(void)state;
	memset(&a, 0, sizeof(a));
	for (int i = 0; i < 4; i++)
		a.jitter_on[i] = 1, a.jitter_lo[i] = 0.5, a.jitter_hi[i] = 1.6;
	a.jitter_lo[3] = -0.2, a.jitter_hi[3] = 0.2;
	for (int i = 0; i < JN; i++)
		src[i] = (uint8_t)test_xorshift(&x);
	for (uint64_t key = 0; key < 48; key++) {
		a.jitter_on[3] = key % 3 == 0;  /* with and without hue */
		a.jitter_on[1] = key % 5 != 1;
		memcpy(got, src, JN);
		cdc_img_hwc(&im, got, JH, JW);
		cdc_aug_run(&a, &im, key, sc);
		uint64_t st = mix3(key, 0x4155474dull, 0);
		unsigned order[4] = {0, 1, 2, 3};
		for (unsigned i = 3; i > 0; i--) {
			unsigned k = (unsigned)(((mix_next(&st) >> 32) * (uint64_t)(i + 1)) >> 32);
			unsigned t = order[i];
			order[i] = order[k], order[k] = t;
		}
		double f[4];
		for (int i = 0; i < 4; i++)
			f[i] = a.jitter_on[i] ? a.jitter_lo[i] + (a.jitter_hi[i] - a.jitter_lo[i]) *
				((double)(mix_next(&st) >> 11) * 0x1.0p-53) : 0.0;
		memcpy(want, src, JN);
		cdc_img_hwc(&im, want, JH, JW);
		for (int i = 0; i < 4; i++) {
			unsigned k = order[i];
			if (!a.jitter_on[k])
				continue;
			if (k == 0)
				cdc_aug_brightness(&im, f[k]);
			else if (k == 1)
				cdc_aug_contrast(&im, f[k]);
			else if (k == 2)
				cdc_aug_saturation(&im, f[k]);
			else
				cdc_aug_hue(&im, f[k]);
		}
		if (memcmp(got, want, JN))
			fail_msg("key %llu: the fused ColorJitter differs from the ops in turn",
				 (unsigned long long)key);
		/* and NCHW gives the same pixels */
		static uint8_t chw[JN];
		for (int i = 0; i < JH * JW; i++)
			for (int c = 0; c < 3; c++)
				chw[c * JH * JW + i] = src[i * 3 + c];
		cdc_img_chw(&im, chw, JH, JW);
		cdc_aug_run(&a, &im, key, sc);
		for (int i = 0; i < JH * JW; i++)
			for (int c = 0; c < 3; c++)
				if (chw[c * JH * JW + i] != got[i * 3 + c])
					fail_msg("key %llu: NCHW differs at pixel %d",
						 (unsigned long long)key, i);
	}
}

/* Is @out one of the results of applying ops @ops[0..n) (each: an op of 14 or the ImageNet
 * policy's, with a magnitude of either sign) to @src? Tries every op and sign at each step. */
static int one_of(const uint8_t *src, const uint8_t *out, int steps, enum cdc_aug_space sp,
		  unsigned bin, unsigned bins, int may_skip)
{
	uint8_t a[N], b[N];
	struct cdc_img im;
	static uint8_t sc[N];

	if (!memcmp(src, out, N) && (steps == 0 || may_skip))
		return 1;
	if (steps == 0)
		return 0;
	for (int op = 0; op < CDC_OPS; op++) {
		if (sp != CDC_SPACE_AUTO && op == CDC_OP_INVERT)
			continue;
		double m = cdc_aug_magnitude(sp, (enum cdc_aug_op)op, bin, bins, H, W);
		for (int sg = 0; sg < (m != 0.0 ? 2 : 1); sg++) {
			memcpy(a, src, N);
			hwc(&im, a);
			cdc_aug_apply_op(&im, (enum cdc_aug_op)op, sg ? -m : m, sc);
			memcpy(b, a, N);
			if (one_of(b, out, steps - 1, sp, bin, bins, may_skip))
				return 1;
		}
	}
	return 0;
}

/* RandAugment(2, m) applies two of its ops at magnitude m, each of either sign; AutoAugment's
 * ImageNet policy applies, of one sub-policy, each op or not (its own magnitude bin). */
static void test_augment_randaugment_and_autoaugment_outputs(void **state)
{
	struct cdc_aug a;
	uint8_t src[N], out[N];
	struct cdc_img im;
	uint64_t x = test_xorshift_init(test_seed("rand-auto", "TEST_AUGMENT_SEED"));
	int changed = 0;

	(void)state;
	random_image(src, &x);
	memset(&a, 0, sizeof(a));
	a.autoaug = CDC_AUTO_RAND, a.num_ops = 2, a.magnitude = 9, a.bins = 31;
	for (uint64_t key = 0; key < 6; key++) {
		memcpy(out, src, N);
		hwc(&im, out);
		cdc_aug_run(&a, &im, key, scratch);
		if (!one_of(src, out, 2, CDC_SPACE_RAND, 9, 31, 0))
			fail_msg("key %llu: not two RandAugment ops at magnitude 9",
				 (unsigned long long)key);
	}
	a.autoaug = CDC_AUTO_IMAGENET, a.num_ops = 0, a.magnitude = 0, a.bins = 0;
	for (uint64_t key = 0; key < 40; key++) {
		memcpy(out, src, N);
		hwc(&im, out);
		cdc_aug_run(&a, &im, key, scratch);
		changed += memcmp(out, src, N) != 0;
		int found = 0;
		/* the policy's ops at their bins: any op, any of the 10 bins, up to two steps */
		for (unsigned bin = 0; bin < 10 && !found; bin++)
			found = one_of(src, out, 2, CDC_SPACE_AUTO, bin, 10, 1);
		if (!found) {
			/* two ops at two different bins: the first at bin b1, the second at b2 */
			for (int op = 0; op < CDC_OPS && !found; op++)
				for (unsigned b1 = 0; b1 < 10 && !found; b1++)
					for (int sg = 0; sg < 2 && !found; sg++) {
						uint8_t t[N];
						memcpy(t, src, N);
						hwc(&im, t);
						double m = cdc_aug_magnitude(CDC_SPACE_AUTO,
									     (enum cdc_aug_op)op,
									     b1, 10, H, W);
						cdc_aug_apply_op(&im, (enum cdc_aug_op)op,
								 sg ? -m : m, scratch);
						for (unsigned b2 = 0; b2 < 10 && !found; b2++)
							found = one_of(t, out, 1, CDC_SPACE_AUTO,
								       b2, 10, 0);
					}
		}
		if (!found)
			fail_msg("key %llu: not the ImageNet policy's ops", (unsigned long long)key);
	}
	/* about half: a sub-policy's ops each apply with their probability, and on 221 pixels of
	 * noise Equalize (step 0) and AutoContrast (full range) leave the image as it is */
	assert_true(changed >= 10);
}

static void test_augment_check_bounds(void **state)
{
	struct cdc_aug a;
	char why[200];

	(void)state;
	set_default(&a);
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), 0);
	a.jitter_lo[0] = 0.0, a.jitter_hi[0] = 16.0;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), 0);
	a.jitter_hi[0] = 16.01;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "brightness"));
	a.jitter_hi[0] = 1.4, a.jitter_lo[0] = -0.01;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	a.jitter_lo[0] = NAN;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	a.jitter_lo[0] = 0.6;
	a.jitter_on[3] = 1, a.jitter_lo[3] = -0.5, a.jitter_hi[3] = 0.5;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), 0);
	a.jitter_hi[3] = 0.51;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "hue"));
	a.jitter_hi[3] = 0.5;
	a.num_ops = CDC_RAND_OPS_MAX;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), 0);
	a.num_ops = CDC_RAND_OPS_MAX + 1;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "num_ops"));
	a.num_ops = 0;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	a.num_ops = 2;
	a.magnitude = 30;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), 0);
	a.magnitude = 31;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "magnitude"));
	a.magnitude = 0;
	a.bins = CDC_BINS_MAX;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), 0);
	a.bins = CDC_BINS_MAX + 1;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	a.bins = 1;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	a.bins = 31;
	a.autoaug = (enum cdc_auto)4;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	a.autoaug = CDC_AUTO_IMAGENET;
	a.erase_p = 1.0;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), 0);
	a.erase_p = 1.001;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "erase: p"));
	a.erase_p = 0.5;
	a.erase_scale[1] = 1.0;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), 0);
	a.erase_scale[1] = 1.001;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	a.erase_scale[1] = 0.33, a.erase_scale[0] = 0.0;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	a.erase_scale[0] = 0.02;
	a.erase_ratio[1] = 100.0;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), 0);
	a.erase_ratio[1] = 100.01;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "ratio"));
	a.erase_ratio[1] = 3.3;
	a.erase_fill = CDC_ERASE_RANDOM;
	a.erase_mean[2] = 255.0, a.erase_std[2] = 255.0;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), 0);
	a.erase_std[2] = 255.5;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
	a.erase_std[2] = 1.0;
	a.erase_fill = (enum cdc_erase_fill)2;
	assert_int_equal(cdc_aug_check(&a, why, sizeof(why)), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_augment_brightness_identity_zero_and_clamp),
		cmocka_unit_test(test_augment_saturation_zero_is_gray),
		cmocka_unit_test(test_augment_contrast_zero_is_mean),
		cmocka_unit_test(test_augment_hue_half_turns_red_to_cyan),
		cmocka_unit_test(test_augment_posterize_solarize_invert),
		cmocka_unit_test(test_augment_autocontrast_stretches_each_channel),
		cmocka_unit_test(test_augment_equalize_two_levels_and_flat),
		cmocka_unit_test(test_augment_equalize_spreads_levels),
		cmocka_unit_test(test_augment_sharpness_one_identity_zero_blurs_interior),
		cmocka_unit_test(test_augment_affine_translate_and_rotate),
		cmocka_unit_test(test_augment_nchw_equals_nhwc),
		cmocka_unit_test(test_augment_magnitudes_are_torchvisions_bins),
		cmocka_unit_test(test_augment_run_is_a_function_of_the_key),
		cmocka_unit_test(test_augment_run_reaches_every_op_and_erase),
		cmocka_unit_test(test_augment_jitter_fused_equals_sequential),
		cmocka_unit_test(test_augment_randaugment_and_autoaugment_outputs),
		cmocka_unit_test(test_augment_check_bounds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
