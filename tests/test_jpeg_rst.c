/* test_jpeg_rst.c - restart-indexed JPEG records (codec/jpeg_rst.h): dpack's rewrite is lossless
 * (a full decode of the rewrite equals a full decode of the original, every pixel), and the window
 * that loaderd decodes from a splice equals the same window of a full decode of the original at
 * the same DCT scale (1, 1/2, 1/4, 1/8), maximum absolute difference 0, for every image of a
 * generated set (sizes that are and are not multiples of the MCU, 4:4:4, 4:2:2, 4:2:0, 4:4:0,
 * grey, progressive inputs), several restart widths and many random windows each. Broken restart
 * segments give -EBADMSG with a reason, never a read outside the record (ASan in `make test`).
 * Seeded tests print their seed. */
#include "codec/decode.h"
#include "codec/jpeg_build.h"
#include "codec/jpeg_rst.h"

#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>
#include <cmocka.h>

#include "tests/jpeg_imgs.h"
#include "tests/test_util.h"

/* A xorshift state from TEST_JPEG_RST_SEED or the clock; the seed is printed for replay. */
static uint64_t seeded(const char *test)
{
	return test_xorshift_init(test_seed(test, "TEST_JPEG_RST_SEED"));
}

enum { NIMG = JPEG_IMG_SET_SPLICE_N };
static struct img imgs[NIMG];
static struct cdc_decoder *dec;
static tjhandle tjd;

static int setup(void **state)
{
	static const struct jpeg_img_spec set[NIMG] = { JPEG_IMG_SET_SPLICE };

	(void)state;
	jpeg_imgs_setup(&tjd, &dec, imgs, set, NIMG);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	jpeg_imgs_teardown(tjd, dec, imgs, NIMG);
	return 0;
}

static uint8_t *rewrite(const struct img *m, unsigned seg_px, size_t *len)
{
	return jpeg_img_record(cdc_rst_rewrite, DPK_KIND_JPEG_RST, "rewrite", m, seg_px, len);
}

static const unsigned widths[] = { 0, 16, 64, 128 };  /* restart segment widths, pixels */

/* A full decode of the rewrite is the full decode of the original, at every scale; its header
 * parses with every MCU row whole segments. */
static void test_rst_rewrite_lossless(void **state)
{
	(void)state;
	for (int i = 0; i < NIMG; i++)
		for (size_t k = 0; k < sizeof(widths) / sizeof(widths[0]); k++) {
			const struct img *m = &imgs[i];
			struct cdc_rst_info info;
			char why[160];
			size_t len;
			uint8_t *r = rewrite(m, widths[k], &len);

			assert_int_equal(cdc_rst_parse(r, len, &info, why, sizeof(why)), 0);
			assert_int_equal(info.width, m->w);
			assert_int_equal(info.height, m->h);
			assert_int_equal(info.mcus_x % info.interval, 0);
			if (widths[k] == 0)
				assert_int_equal(info.segs_x, 1);
			else
				assert_true(info.interval * info.mcu_w <= widths[k] ||
					    info.interval == 1);
			jpeg_img_check_full_decode(tjd, m, r, len, widths[k], "rewrite");
			free(r);
		}
}

/* Random windows at random scales: every crop pixel equals the full decode's. */
static void test_rst_window_equals_full_decode(void **state)
{
	uint64_t x = seeded("test_rst_window_equals_full_decode");
	unsigned scales = 0, spliced = 0;

	(void)state;
	for (int i = 0; i < NIMG; i++)
		for (size_t k = 0; k < sizeof(widths) / sizeof(widths[0]); k++) {
			const struct img *m = &imgs[i];
			size_t len;
			uint8_t *r = rewrite(m, widths[k], &len);

			spliced += jpeg_img_random_windows(cdc_jpeg_rst_window, dec, m, r, len,
							   widths[k], 40, &x, &scales);
			free(r);
		}
	printf("%u windows spliced of %d\n", spliced, NIMG * 4 * 40);
	assert_int_equal(scales, 1 | 2 | 4 | 8);
	assert_true(spliced > NIMG * 40);
}

/* The old path on a record without restart markers, and the new one on its rewrite, decode the
 * same crops to outputs that differ only where the old path's cropped decode differs at window
 * edges: the mean stays within the reference tolerance. The new path is also taken by
 * cdc_decode_jpeg_rst on a JPEG without restart markers (a fallback, not an error). */
static void test_rst_decode_fallback_and_output(void **state)
{
	static uint8_t a[224 * 224 * 3], b[224 * 224 * 3];
	struct cdc_out o = { .h = 224, .w = 224, .nchw = 0, .flip = 1 };
	char why[256];

	(void)state;
	for (int i = 0; i < NIMG; i++) {
		const struct img *m = &imgs[i];
		size_t len;
		uint8_t *r = rewrite(m, 64, &len);
		struct cdc_crop c = { (uint32_t)m->w / 4, (uint32_t)m->h / 5, (uint32_t)m->w / 2 + 1,
				      (uint32_t)m->h / 3 + 1 };

		if (cdc_decode_jpeg_rst(dec, m->jpg, m->len, &c, &o, a, why, sizeof(why)))
			fail_msg("%s: fallback: %s", m->name, why);
		if (cdc_decode_jpeg(dec, m->jpg, m->len, &c, &o, b, why, sizeof(why)))
			fail_msg("%s: %s", m->name, why);
		assert_memory_equal(a, b, sizeof(a));
		if (cdc_decode_jpeg_rst(dec, r, len, &c, &o, a, why, sizeof(why)))
			fail_msg("%s: rst: %s", m->name, why);
		double e = jpeg_img_mean_abs_diff(a, b, sizeof(a));
		if (e > 1.5)
			fail_msg("%s: new and old path differ by %.2f on average", m->name, e);
		free(r);
	}
}

/* The record's entropy data at the n-th RST marker (n >= 0), or 0 when there are fewer. */
static size_t nth_rst(const uint8_t *r, size_t len, size_t scan, int n)
{
	for (size_t i = scan; i + 1 < len; i++)
		if (r[i] == 0xFF && r[i + 1] >= 0xD0 && r[i + 1] <= 0xD7 && n-- == 0)
			return i;
	return 0;
}

static void expect_bad(const uint8_t *r, size_t len, const struct cdc_crop *c, const char *what)
{
	jpeg_img_expect_bad(cdc_decode_jpeg_rst, dec, r, len, c, "JPEG: ", what, NULL);
}

/* Missing, renumbered and foreign markers, and truncation, inside the segments a window needs:
 * -EBADMSG with a reason. */
static void test_rst_broken_segments_rejected(void **state)
{
	const struct img *m = &imgs[1];  /* 640x480 4:2:0: 30 rows of 40 MCUs */
	struct cdc_rst_info info;
	struct cdc_crop c = { 300, 200, 100, 100 }, all = { 0, 0, 640, 480 };
	char why[160];
	size_t len;
	uint8_t *r = rewrite(m, 64, &len), *bad = malloc(len);

	(void)state;
	assert_non_null(bad);
	assert_int_equal(cdc_rst_parse(r, len, &info, why, sizeof(why)), 0);
	int mid = (int)(info.segs_x * 10 + 2);  /* a marker above the window */
	size_t at = nth_rst(r, len, info.scan_at, mid);
	assert_true(at > 0);

	/* a marker numbered out of sequence */
	memcpy(bad, r, len);
	bad[at + 1] = (uint8_t)(0xD0 + ((bad[at + 1] - 0xD0 + 3) & 7));
	expect_bad(bad, len, &c, "RST renumbered");
	/* a marker removed (two segments run together): the count is off from there on */
	memcpy(bad, r, at);
	memcpy(bad + at, r + at + 2, len - at - 2);
	expect_bad(bad, len - 2, &c, "RST removed");
	/* a foreign marker inside a segment */
	memcpy(bad, r, len);
	bad[at + 1] = 0xC4;
	expect_bad(bad, len, &c, "DHT inside the scan");
	/* EOI early */
	memcpy(bad, r, len);
	bad[at + 1] = 0xD9;
	expect_bad(bad, len, &c, "EOI in the middle");
	/* truncated inside the window's segments, and in the header */
	const size_t cuts[] = { 1, 3, 20, info.scan_at - 1, info.scan_at, at, at + 1, len - 2, len - 1 };
	for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
		char what[64];
		snprintf(what, sizeof(what), "cut at %zu of %zu", cuts[k], len);
		expect_bad(r, cuts[k], cuts[k] >= len - 2 ? &all : &c, what);
	}
	free(bad);
	free(r);
}

/* Random bytes over segments and header: a decode either succeeds or fails with -EBADMSG (or
 * falls back for a header that no longer splices); ASan checks every read. */
static void test_rst_garbage_never_crashes(void **state)
{
	uint64_t x = seeded("test_rst_garbage_never_crashes");
	struct cdc_out o = { .h = 48, .w = 48, .nchw = 0, .flip = 0 };
	static uint8_t out[48 * 48 * 3];
	int failed = 0;

	(void)state;
	for (int i = 0; i < NIMG; i++) {
		const struct img *m = &imgs[i];
		size_t len;
		uint8_t *r = rewrite(m, 32, &len);

		for (int t = 0; t < 30; t++) {
			uint8_t *bad = jpeg_img_damaged(r, len, &x);
			char why[256];
			struct cdc_crop c;

			cdc_crop_random((uint32_t)m->w, (uint32_t)m->h, test_xorshift(&x), &c);
			int ret = cdc_decode_jpeg_rst(dec, bad, len, &c, &o, out, why, sizeof(why));
			if (ret != 0 && ret != -EBADMSG)
				fail_msg("%s: %d", m->name, ret);
			failed += ret != 0;
			free(bad);
		}
		free(r);
	}
	printf("%d of %d damaged records refused\n", failed, NIMG * 30);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rst_rewrite_lossless),
		cmocka_unit_test(test_rst_window_equals_full_decode),
		cmocka_unit_test(test_rst_decode_fallback_and_output),
		cmocka_unit_test(test_rst_broken_segments_rejected),
		cmocka_unit_test(test_rst_garbage_never_crashes),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
