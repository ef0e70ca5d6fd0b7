/* test_resize_filter.c - the filtered resize (codec/resize_filter.c) by what it must do, worked
 * out here (torchvision's values, within 1, are python/tests/test_augment.py's): a flat image
 * stays flat under every filter (the weights sum to 1), the same size is the identity, a 2:1
 * antialiased shrink is the stretched triangle's weighted mean, the taps never leave the window,
 * flip and NCHW are the plain output rearranged, and the workspace grows with the window's width,
 * not its area. Through the decoder: a raw record resized with filter 2 equals the function. */
#include "codec/resize_filter.h"
#include "codec/decode.h"

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

static _Alignas(16) uint8_t work[1 << 20];

static const struct cdc_resize kinds[] = {
	{ CDC_FILTER_BILINEAR, 0, 0, 0, 0, 0 }, { CDC_FILTER_BILINEAR, 1, 0, 0, 0, 0 },
	{ CDC_FILTER_BICUBIC, 0, 0, 0, 0, 0 }, { CDC_FILTER_BICUBIC, 1, 0, 0, 0, 0 },
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static void run(struct cdc_resize r, const uint8_t *src, uint32_t w, uint32_t h, double x0,
		double y0, double sw, double sh, uint8_t *dst)
{
	assert_true(cdc_resize_filter_need(&r, sw, sh) <= sizeof(work));
	cdc_resize_filter(src, w, h, (size_t)w * 3, x0, y0, sw, sh, &r, dst, work);
}

static void test_resize_filter_flat_stays_flat(void **state)
{
	static uint8_t src[60 * 50 * 3], dst[77 * 23 * 3];

	(void)state;
	memset(src, 173, sizeof(src));
	for (size_t k = 0; k < NKINDS; k++) {
		struct cdc_resize r = kinds[k];
		r.out_h = 23, r.out_w = 77;  /* a shrink one way, an enlargement the other */
		run(r, src, 50, 60, 3.0, 5.0, 40.0, 50.0, dst);
		for (size_t i = 0; i < sizeof(dst); i++)
			if (dst[i] != 173)
				fail_msg("filter %d aa %d: value %u at %zu", r.filter, r.antialias,
					 dst[i], i);
	}
}

static void test_resize_filter_same_size_is_identity(void **state)
{
	static uint8_t src[31 * 29 * 3], dst[31 * 29 * 3];
	uint64_t x = test_xorshift_init(test_seed("identity", "TEST_RESIZE_SEED"));

	(void)state;
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)test_xorshift(&x);
	for (size_t k = 0; k < NKINDS; k++) {
		struct cdc_resize r = kinds[k];
		r.out_h = 31, r.out_w = 29;
		run(r, src, 29, 31, 0, 0, 29, 31, dst);
		assert_memory_equal(src, dst, sizeof(src));
	}
}

static void test_resize_filter_antialiased_halving_is_the_triangle_mean(void **state)
{
	/* one row of 8 pixels to 4, bilinear antialiased: scale 2, support 2; output 0 centred at
	 * 1: taps 0, 1, 2 with the triangle at (j + 0.5 - 1) / 2 = 0.25, 0.25, 0.75: weights 0.75,
	 * 0.75, 0.25 over 1.75. Output 1 centred at 3: taps 1..4, 0.25 0.75 0.75 0.25 over 2. */
	uint8_t src[8 * 3], dst[4 * 3];
	const uint8_t v[8] = { 0, 70, 140, 210, 10, 90, 30, 255 };

	(void)state;
	for (int i = 0; i < 8; i++)
		src[3 * i] = src[3 * i + 1] = src[3 * i + 2] = v[i];
	struct cdc_resize r = { CDC_FILTER_BILINEAR, 1, 1, 4, 0, 0 };
	run(r, src, 8, 1, 0, 0, 8, 1, dst);
	assert_int_equal(dst[0], (int)lrint((0.75 * 0 + 0.75 * 70 + 0.25 * 140) / 1.75));
	assert_int_equal(dst[3], (int)lrint((0.25 * 70 + 0.75 * 140 + 0.75 * 210 + 0.25 * 10) / 2));
	/* not antialiased: the plain bilinear at 2 * (i + 0.5) - 0.5 = 0.5: (0 + 70) / 2 */
	r.antialias = 0;
	run(r, src, 8, 1, 0, 0, 8, 1, dst);
	assert_int_equal(dst[0], 35);
	assert_int_equal(dst[3], 175);  /* (140 + 210) / 2 */
}

static void test_resize_filter_taps_stay_in_the_window(void **state)
{
	/* a window of value 50 inside a frame of 250: nothing of the frame may reach the output */
	static uint8_t src[40 * 40 * 3], dst[9 * 13 * 3];

	(void)state;
	memset(src, 250, sizeof(src));
	for (int y = 10; y < 30; y++)
		for (int x = 7; x < 33; x++)
			memset(src + (y * 40 + x) * 3, 50, 3);
	for (size_t k = 0; k < NKINDS; k++) {
		struct cdc_resize r = kinds[k];
		r.out_h = 9, r.out_w = 13;
		run(r, src, 40, 40, 7, 10, 26, 20, dst);
		for (size_t i = 0; i < sizeof(dst); i++)
			assert_int_equal(dst[i], 50);
	}
}

static void test_resize_filter_flip_and_nchw(void **state)
{
	static uint8_t src[50 * 60 * 3], a[20 * 30 * 3], b[20 * 30 * 3];
	uint64_t x = test_xorshift_init(test_seed("flip", "TEST_RESIZE_SEED"));

	(void)state;
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)test_xorshift(&x);
	for (size_t k = 0; k < NKINDS; k++) {
		struct cdc_resize r = kinds[k];
		r.out_h = 20, r.out_w = 30;
		run(r, src, 60, 50, 1.5, 2.25, 55.0, 40.5, a);
		r.flip = 1, r.nchw = 1;
		run(r, src, 60, 50, 1.5, 2.25, 55.0, 40.5, b);
		for (int y = 0; y < 20; y++)
			for (int xx = 0; xx < 30; xx++)
				for (int c = 0; c < 3; c++)
					assert_int_equal(b[c * 600 + y * 30 + (29 - xx)],
							 a[(y * 30 + xx) * 3 + c]);
	}
}

static void test_resize_filter_workspace_follows_the_width(void **state)
{
	struct cdc_resize r = { CDC_FILTER_BICUBIC, 1, 1, 1, 0, 0 };

	(void)state;
	/* an 8192 x 8192 window to one pixel: the taps (2 x 2 x 8192 each way) and one row */
	size_t n = cdc_resize_filter_need(&r, 8192, 8192);
	assert_true(n < 8192 * 3 * 4 * 4);
	r.out_h = 224, r.out_w = 224;
	assert_true(cdc_resize_filter_need(&r, 448, 448) < 64 * 1024);
}

static void test_resize_filter_through_the_decoder(void **state)
{
	static uint8_t src[64 * 48 * 3], a[24 * 24 * 3], b[24 * 24 * 3];
	struct cdc_decoder *d;
	uint64_t x = test_xorshift_init(test_seed("decoder", "TEST_RESIZE_SEED"));

	(void)state;
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)test_xorshift(&x);
	assert_int_equal(cdc_decoder_create(&d), 0);
	struct cdc_crop crop = { 5, 3, 40, 30 };
	struct cdc_out o = { .h = 24, .w = 24, .filter = CDC_FILTER_BICUBIC, .antialias = 1 };
	assert_int_equal(cdc_decode_raw(d, src, 48, 64, 3, &crop, &o, a), 0);
	struct cdc_resize r = { CDC_FILTER_BICUBIC, 1, 24, 24, 0, 0 };
	run(r, src, 64, 48, 5, 3, 40, 30, b);
	assert_memory_equal(a, b, sizeof(a));
	assert_true(cdc_decoder_held(d) > 0);
	o.filter = CDC_FILTER_FAST;  /* the fast path gives another result on noise */
	assert_int_equal(cdc_decode_raw(d, src, 48, 64, 3, &crop, &o, a), 0);
	assert_true(memcmp(a, b, sizeof(a)) != 0);
	cdc_decoder_destroy(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resize_filter_flat_stays_flat),
		cmocka_unit_test(test_resize_filter_same_size_is_identity),
		cmocka_unit_test(test_resize_filter_antialiased_halving_is_the_triangle_mean),
		cmocka_unit_test(test_resize_filter_taps_stay_in_the_window),
		cmocka_unit_test(test_resize_filter_flip_and_nchw),
		cmocka_unit_test(test_resize_filter_workspace_follows_the_width),
		cmocka_unit_test(test_resize_filter_through_the_decoder),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
