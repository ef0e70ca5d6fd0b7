/* test_kind_load.c - every header check of the whole-image kinds' load paths (codec/kind_bmp.c,
 * kind_pnm.c, kind_png.c, kind_jpeg_cmyk.c, the shared kind_image.c) and of the raw kinds, on
 * records placed in a .dpk by hand (formats/dpk.h's writer, never dpack's probe, which would have
 * refused them first) and loaded as loaderd's fill does: dpk_open, dpk_entry_load, dpk_read_entry,
 * dpk_record_check, then the kind's decode (codec/kind_load.h), as stored and cropped. Each bound
 * is tested at its limit and one past it, and each case sits at both ends of the index (sample 0
 * and the last sample, a good record between them). */
#include "formats/dpk.h"
#include "codec/decode.h"
#include "codec/kind.h"
#include "codec/kind_load.h"
#include "tests/tmpdir.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <cmocka.h>

/* link: -lz */

static char dir[128], path[200];

static int setup(void **state)
{
	(void)state;
	if (tmpdir_create(dir, sizeof(dir), "test_kind_load") < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/hand.dpk", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

static void put16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

static void put32be(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* ---- the load path over a hand-made .dpk ---- */

/* A record as the index will describe it: @kind, the stored bytes, H x W x 3. */
struct rec {
	unsigned kind;
	const uint8_t *p;
	size_t len;
	uint32_t h, w;
};

/* The dataset [@r, a good 2x2 raw record, @r]: the case at sample 0 and at the last sample. */
static void write_case(const struct rec *r)
{
	static const uint8_t good[2 * 2 * 3] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
	struct dpk_writer *w;

	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	for (int i = 0; i < 3; i++) {
		struct dpk_record d = { .kind = r->kind, .data = r->p, .length = r->len, .ndim = 3,
					.shape = { r->h, r->w, 3 } };
		if (i == 1)
			d = (struct dpk_record){ .kind = DPK_KIND_RAW, .data = good,
						 .length = sizeof(good), .ndim = 3,
						 .shape = { 2, 2, 3 } };
		assert_int_equal(dpk_writer_add(w, &d), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
}

/* Sample @i of the file loaded as the fill does, decoded as stored (@oh == 0) or its whole image
 * cropped and resized to @oh x @oh, under the pixel bound @max (0: none). The decode's result,
 * its reason in @why. The output buffer is exactly the size the job would give. */
static int load_one(uint64_t i, uint32_t oh, uint64_t max, char *why, size_t whylen)
{
	struct dpk *d;
	struct dpk_entry e;
	char err[256];

	if (dpk_open(path, DPK_OPEN_READ_INDEX, &d, err, sizeof(err)) < 0)
		fail_msg("open: %s", err);
	if (dpk_entry_load(d, i, &e, err, sizeof(err)) < 0)
		fail_msg("entry %llu: %s", (unsigned long long)i, err);
	uint8_t *src = malloc(e.length);
	assert_non_null(src);
	assert_int_equal(dpk_read_entry(d, &e, src, e.length), (ssize_t)e.length);
	assert_int_equal(dpk_record_check(&e, src), 0);
	dpk_close(d);

	struct cdc_decoder *dec;
	assert_int_equal(cdc_decoder_create(&dec), 0);
	if (max)
		cdc_decoder_limit(dec, max);
	const struct cdc_kind_load *k = cdc_kind_load(e.kind);
	assert_non_null(k);
	struct cdc_out o = { .h = oh, .w = oh };
	struct cdc_crop c = { 0, 0, e.shape[1], e.shape[0] };
	size_t n = oh ? (size_t)oh * oh * 3 : e.raw_size;
	uint8_t *dst = malloc(n);
	assert_non_null(dst);
	why[0] = '\0';
	int ret = k->accepts(&e, i, &o, why, whylen);
	if (ret == 0)
		ret = k->decode(dec, &e, src, &c, &o, dst, why, whylen);
	free(dst);
	free(src);
	cdc_decoder_destroy(dec);
	return ret;
}

/* @r at both ends of a hand-made .dpk, decoded as stored and cropped to 3 x 3: each must give
 * @want, and a refusal's reason must contain @msg. */
static void expect(const struct rec *r, uint64_t max, int want, const char *msg)
{
	char why[256];

	write_case(r);
	for (uint64_t i = 0; i < 3; i += 2)
		for (uint32_t oh = 0; oh <= 3; oh += 3) {
			int ret = load_one(i, oh, max, why, sizeof(why));
			if (ret != want || (want && !strstr(why, msg)))
				fail_msg("sample %llu (%s): %d \"%s\", expected %d \"%s\"",
					 (unsigned long long)i, oh ? "cropped" : "as stored", ret, why,
					 want, want ? msg : "");
		}
}

/* ---- BMP ---- */

/* An OS/2 BMP (12-byte core header): @w x @h (16-bit fields), 24 bits a pixel, its rows after
 * the header, @extra bytes of pixels (0..255). 26 + 8 = 34 bytes for 1 x 2. */
static size_t bmp_os2(uint8_t *f, uint32_t w, uint32_t h, unsigned bits, size_t pixels)
{
	memset(f, 0, 26 + pixels);
	f[0] = 'B', f[1] = 'M';
	put32(f + 2, (uint32_t)(26 + pixels));
	put32(f + 10, 26);
	put32(f + 14, 12);
	put16(f + 18, w);
	put16(f + 20, h);
	put16(f + 22, 1);
	put16(f + 24, bits);
	for (size_t i = 0; i < pixels; i++)
		f[26 + i] = (uint8_t)(i * 29 + 3);
	return 26 + pixels;
}

/* The record of the report: 34 bytes, OS/2 header, width 0, indexed as 1 x 1 (the index's
 * sides are at least 1). It killed loaderd with SIGFPE (the row stride, 0, divided the stored
 * size on the way to the mismatch's message). */
static void test_bmp_os2_width_0_and_1(void **state)
{
	uint8_t f[64];

	(void)state;
	size_t len = bmp_os2(f, 0, 2, 24, 8);
	assert_int_equal(len, 34);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "BMP width 0");
	len = bmp_os2(f, 1, 2, 24, 8);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 2, 1 }, 0, 0, "");
	/* height 0 and 1 */
	len = bmp_os2(f, 1, 0, 24, 8);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "BMP height 0");
	len = bmp_os2(f, 1, 1, 24, 8);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, 0, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_bmp_os2_width_0_and_1, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
