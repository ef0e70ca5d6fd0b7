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
#include "loader/job.h"
#include "tests/tmpdir.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <webp/encode.h>
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

/* A BMP with a 40-byte (or @hsize-byte) info header: @w x @h (h < 0: top-down), @bits, @npal
 * palette entries of 4 bytes (written; the header's count is @clr_used), then @pixels bytes. */
static size_t bmp_v3(uint8_t *f, uint32_t hsize, int32_t w, int32_t h, unsigned bits,
		     unsigned npal, uint32_t clr_used, size_t pixels)
{
	uint32_t off = 14 + hsize + npal * 4;

	memset(f, 0, off + pixels);
	f[0] = 'B', f[1] = 'M';
	put32(f + 2, (uint32_t)(off + pixels));
	put32(f + 10, off);
	put32(f + 14, hsize);
	put32(f + 18, (uint32_t)w);
	put32(f + 22, (uint32_t)h);
	put16(f + 26, 1);
	put16(f + 28, bits);
	put32(f + 46, clr_used);
	for (unsigned i = 0; i < npal * 4; i++)
		f[14 + hsize + i] = (uint8_t)(i * 7 + 1);
	for (size_t i = 0; i < pixels; i++)
		f[off + i] = (uint8_t)(i * 29 + 3);
	return off + pixels;
}

static void test_bmp_sides_at_65535_and_past(void **state)
{
	static uint8_t f[14 + 40 + 8 + 8192 + 16];

	(void)state;
	/* 1 bit a pixel: a 65535-pixel row is 8192 bytes */
	size_t len = bmp_v3(f, 40, 65535, 1, 1, 2, 0, 8192);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 65535 }, 0, 0, "");
	len = bmp_v3(f, 40, 65536, 1, 1, 2, 0, 8192);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 65535 }, 0, -EBADMSG, "BMP width 65536");
	len = bmp_v3(f, 40, 0, 1, 1, 2, 0, 8);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "BMP width 0");
	len = bmp_v3(f, 40, -1, 1, 1, 2, 0, 8);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "BMP width -1");
	/* 2^31 - 1 wide: a stride of 2^28 bytes that must not be computed into an offset */
	len = bmp_v3(f, 40, INT32_MAX, 1, 24, 0, 0, 8);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "BMP width 2147483647");
	/* heights: top-down 1, and INT32_MIN (whose negation overflows 32 bits) */
	len = bmp_v3(f, 40, 1, -1, 24, 0, 0, 4);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, 0, "");
	len = bmp_v3(f, 40, 1, INT32_MIN, 24, 0, 0, 4);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "BMP height 2147483648");
	len = bmp_v3(f, 40, 1, 0, 24, 0, 0, 4);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "BMP height 0");
	/* 65535 rows of 4 bytes (1 bit a pixel), then 65536 */
	uint8_t *g = malloc(14 + 40 + 8 + 65536 * 4);
	assert_non_null(g);
	len = bmp_v3(g, 40, 1, 65535, 1, 2, 0, 65535 * 4);
	expect(&(struct rec){ DPK_KIND_BMP, g, len, 65535, 1 }, 0, 0, "");
	len = bmp_v3(g, 40, 1, -65536, 1, 2, 0, 65536 * 4);
	expect(&(struct rec){ DPK_KIND_BMP, g, len, 65535, 1 }, 0, -EBADMSG, "BMP height 65536");
	free(g);
}

static void test_bmp_info_header_size(void **state)
{
	uint8_t f[256];

	(void)state;
	size_t len = bmp_v3(f, 40, 1, 1, 24, 0, 0, 4);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, 0, "");
	len = bmp_v3(f, 39, 1, 1, 24, 0, 0, 4);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "info header of 39 bytes");
	len = bmp_os2(f, 1, 1, 24, 4);
	put32(f + 14, 13);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "info header of 13 bytes");
	/* V5 (124 bytes): its masks inside the header, as a V3's after it */
	len = bmp_v3(f, 124, 1, 1, 24, 0, 0, 4);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, 0, "");
	/* a header that ends exactly at the file's end (the row read from inside it), and one
	 * byte past it */
	len = bmp_v3(f, 40, 1, 1, 24, 0, 0, 4);
	put32(f + 14, (uint32_t)(len - 14));
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, 0, "");
	put32(f + 14, (uint32_t)(len - 13));
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "runs past the file's");
	put32(f + 14, UINT32_MAX);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, -EBADMSG, "info header of 4294967295");
}

static void test_bmp_bits_and_rows(void **state)
{
	uint8_t f[256];

	(void)state;
	size_t len = bmp_v3(f, 40, 1, 2, 16, 0, 0, 8);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 2, 1 }, 0, -EBADMSG, "at 16 bits a pixel");
	len = bmp_os2(f, 1, 2, 0, 8);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 2, 1 }, 0, -EBADMSG, "at 0 bits a pixel");
	/* 2 rows of 4 bytes: exactly there, then one byte short */
	len = bmp_v3(f, 40, 1, 2, 32, 0, 0, 8);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 2, 1 }, 0, 0, "");
	expect(&(struct rec){ DPK_KIND_BMP, f, len - 1, 2, 1 }, 0, -EBADMSG, "(1 rows stored)");
	/* the data offset at the file's end: no rows */
	put32(f + 10, (uint32_t)len);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 2, 1 }, 0, -EBADMSG, "(0 rows stored)");
	put32(f + 10, UINT32_MAX);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 2, 1 }, 0, -EBADMSG, "(0 rows stored)");
}

/* The colour count: 0 and above 2^bits mean 2^bits entries; the palette must be in the file. */
static void test_bmp_palette_count(void **state)
{
	static uint8_t f[2048];
	uint8_t want[3 * 3];
	char why[256];

	(void)state;
	/* 8 bits: 256 entries written, the count 256, 257 and 2^32 - 1 all read 256 of them */
	static const uint32_t counts[] = { 256, 257, UINT32_MAX, 0 };
	for (int k = 0; k < 4; k++) {
		/* the file ends with the palette: its last entry is the row (a 257th would not fit) */
		size_t len = bmp_v3(f, 40, 3, 1, 8, 256, counts[k], 0);
		put32(f + 10, 14 + 40 + 255 * 4);
		expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 3 }, 0, 0, "");
	}
	/* the pixels: entry 255 is BGRX at 54 + 1020 */
	size_t len = bmp_v3(f, 40, 3, 1, 8, 256, 257, 4);
	f[14 + 40 + 256 * 4] = 255;
	for (int x = 0; x < 3; x++) {
		unsigned i = f[14 + 40 + 256 * 4 + x];
		for (int c = 0; c < 3; c++)
			want[3 * x + c] = f[14 + 40 + i * 4 + 2 - c];
	}
	write_case(&(struct rec){ DPK_KIND_BMP, f, len, 1, 3 });
	{
		struct dpk *d;
		struct dpk_entry e;
		struct cdc_decoder *dec;
		uint8_t got[9];
		assert_int_equal(dpk_open(path, 0, &d, why, sizeof(why)), 0);
		assert_int_equal(dpk_entry_load(d, 2, &e, why, sizeof(why)), 0);
		uint8_t *src = malloc(e.length);
		assert_int_equal(dpk_read_entry(d, &e, src, e.length), (ssize_t)e.length);
		dpk_close(d);
		assert_int_equal(cdc_decoder_create(&dec), 0);
		assert_int_equal(cdc_kind_load(DPK_KIND_BMP)->decode(dec, &e, src, &(struct cdc_crop){ 0 },
								     &(struct cdc_out){ 0 }, got,
								     why, sizeof(why)), 0);
		assert_memory_equal(got, want, sizeof(want));
		cdc_decoder_destroy(dec);
		free(src);
	}
	/* OS/2, 8 bits: 256 entries of 3 bytes from 26 to 794, the row read from inside them;
	 * the file at 794 bytes holds the palette, at 793 it does not */
	len = bmp_os2(f, 1, 1, 8, 768);
	assert_int_equal(len, 794);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, 0, "");
	expect(&(struct rec){ DPK_KIND_BMP, f, len - 1, 1, 1 }, 0, -EBADMSG,
	       "palette of 256 entries cut short");
	/* 4 bits, V3: 16 entries of 4 bytes end at 118 */
	len = bmp_v3(f, 40, 1, 1, 4, 16, 16, 0);
	put32(f + 10, 54);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 1, 1 }, 0, 0, "");
	expect(&(struct rec){ DPK_KIND_BMP, f, len - 1, 1, 1 }, 0, -EBADMSG,
	       "palette of 16 entries cut short");
}

/* The decoder's pixel bound (loaderd --max-pixels) at exactly the image, and one below it. */
static void test_image_pixel_bound(void **state)
{
	uint8_t f[256];

	(void)state;
	size_t len = bmp_v3(f, 40, 3, 5, 24, 0, 0, 5 * 12);
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 5, 3 }, 15, 0, "");
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 5, 3 }, 14, -EBADMSG,
	       "3 x 5 pixels is more than the bound of 14");
	/* a header that says otherwise than the index is refused, not trusted */
	expect(&(struct rec){ DPK_KIND_BMP, f, len, 5, 2 }, 0, -EBADMSG, "the index says 2 x 5");
}

/* ---- Netpbm ---- */

/* A binary Netpbm file: "P@type @w @h [@maxval]\n" then @pixels bytes. */
static size_t pnm(uint8_t *f, unsigned type, uint32_t w, uint32_t h, uint32_t maxval,
		  size_t pixels)
{
	int n = type == 4 ? sprintf((char *)f, "P4 %u %u\n", w, h) :
		sprintf((char *)f, "P%u %u %u %u\n", type, w, h, maxval);
	for (size_t i = 0; i < pixels; i++)
		f[n + i] = (uint8_t)(i * 13 + 1);
	return (size_t)n + pixels;
}

static void test_pnm_maxval(void **state)
{
	uint8_t f[64];

	(void)state;
	static const struct { uint32_t maxval; int want; const char *msg; } rows[] = {
		{ 0, -EBADMSG, "Netpbm maxval 0 (1..65535)" },
		{ 1, 0, "" },
		{ 255, 0, "" },
		{ 256, -EBADMSG, "Netpbm maxval 256: 16-bit samples" },
		{ 65535, -EBADMSG, "Netpbm maxval 65535: 16-bit samples" },
		{ 65536, -EBADMSG, "Netpbm maxval 65536 (1..65535)" },
		{ UINT32_MAX, -EBADMSG, "Netpbm maxval 4294967295 (1..65535)" },
	};
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		size_t len = pnm(f, 5, 2, 2, rows[k].maxval, 8);
		expect(&(struct rec){ DPK_KIND_PNM, f, len, 2, 2 }, 0, rows[k].want, rows[k].msg);
	}
	/* a number of 2^32 does not fit a field, nor one that would wrap 64 bits to 1 */
	int n = sprintf((char *)f, "P5 2 2 4294967296\n");
	expect(&(struct rec){ DPK_KIND_PNM, f, (size_t)n + 4, 2, 2 }, 0, -EBADMSG,
	       "header damaged or cut short");
	n = sprintf((char *)f, "P5 2 2 18446744073709551617\n");
	expect(&(struct rec){ DPK_KIND_PNM, f, (size_t)n + 4, 2, 2 }, 0, -EBADMSG,
	       "header damaged or cut short");
}

static void test_pnm_sides_and_rows(void **state)
{
	static uint8_t f[64 + 65535 * 3];

	(void)state;
	size_t len = pnm(f, 5, 0, 1, 255, 4);
	expect(&(struct rec){ DPK_KIND_PNM, f, len, 1, 1 }, 0, -EBADMSG, "Netpbm width 0");
	len = pnm(f, 4, 0, 1, 1, 4);
	expect(&(struct rec){ DPK_KIND_PNM, f, len, 1, 1 }, 0, -EBADMSG, "Netpbm width 0");
	len = pnm(f, 5, 1, 0, 255, 4);
	expect(&(struct rec){ DPK_KIND_PNM, f, len, 1, 1 }, 0, -EBADMSG, "Netpbm height 0");
	len = pnm(f, 5, 1, 1, 255, 1);
	expect(&(struct rec){ DPK_KIND_PNM, f, len, 1, 1 }, 0, 0, "");
	/* P6 at 65535 wide: one row of 196605 bytes; 65536 is past an image record's side */
	len = pnm(f, 6, 65535, 1, 255, 65535 * 3);
	expect(&(struct rec){ DPK_KIND_PNM, f, len, 1, 65535 }, 0, 0, "");
	expect(&(struct rec){ DPK_KIND_PNM, f, len - 1, 1, 65535 }, 0, -EBADMSG,
	       "cut short at row 0 of 1");
	len = pnm(f, 6, 65536, 1, 255, 65535 * 3);
	expect(&(struct rec){ DPK_KIND_PNM, f, len, 1, 65535 }, 0, -EBADMSG, "Netpbm width 65536");
	len = pnm(f, 5, 1, 65536, 255, 4);
	expect(&(struct rec){ DPK_KIND_PNM, f, len, 1, 1 }, 0, -EBADMSG, "Netpbm height 65536");
	/* P4: rows of (w + 7) / 8 bytes; 9 x 2 needs 4 */
	len = pnm(f, 4, 9, 2, 1, 4);
	expect(&(struct rec){ DPK_KIND_PNM, f, len, 2, 9 }, 0, 0, "");
	expect(&(struct rec){ DPK_KIND_PNM, f, len - 1, 2, 9 }, 0, -EBADMSG, "cut short at row 1");
	/* the header's end: no whitespace byte after the last number */
	int n = sprintf((char *)f, "P5 1 1 255");
	expect(&(struct rec){ DPK_KIND_PNM, f, (size_t)n, 1, 1 }, 0, -EBADMSG,
	       "header damaged or cut short");
}

/* ---- PNG, made here chunk by chunk (zlib), so that any IHDR field can be set ---- */

static size_t png_chunk(uint8_t *at, const char *type, const uint8_t *data, uint32_t n)
{
	put32be(at, n);
	memcpy(at + 4, type, 4);
	if (n)
		memcpy(at + 8, data, n);
	put32be(at + 8 + n, (uint32_t)crc32(crc32(0, NULL, 0), at + 4, n + 4));
	return 12 + n;
}

/* An 8-bit RGB PNG whose IHDR says @w x @h, depth @depth and colour type @ct, with @rows x
 * @rowbytes of filter-0 rows as its data (malloc; *len). */
static uint8_t *png_hand(uint32_t w, uint32_t h, unsigned depth, unsigned ct, uint32_t rows,
			 size_t rowbytes, size_t *len)
{
	size_t raw = rows * (rowbytes + 1);
	uLongf zn = compressBound(raw);
	uint8_t *px = calloc(raw ? raw : 1, 1), *z = malloc(zn), *f = malloc(zn + 64);
	uint8_t ihdr[13] = { 0 };

	assert_true(px && z && f);
	for (size_t i = 0; i < raw; i++)
		px[i] = i % (rowbytes + 1) ? (uint8_t)(i * 5) : 0;
	assert_int_equal(compress(z, &zn, px, raw), Z_OK);
	memcpy(f, "\x89PNG\r\n\x1a\n", 8);
	put32be(ihdr, w);
	put32be(ihdr + 4, h);
	ihdr[8] = (uint8_t)depth, ihdr[9] = (uint8_t)ct;
	size_t n = 8 + png_chunk(f + 8, "IHDR", ihdr, 13);
	n += png_chunk(f + n, "IDAT", z, (uint32_t)zn);
	n += png_chunk(f + n, "IEND", NULL, 0);
	free(px);
	free(z);
	*len = n;
	return f;
}

static void test_png_ihdr_fields(void **state)
{
	size_t len;
	uint8_t *f;

	(void)state;
	f = png_hand(1, 2, 8, 2, 2, 3, &len);
	expect(&(struct rec){ DPK_KIND_PNG, f, len, 2, 1 }, 0, 0, "");
	/* the index's width one less: refused before a row is read */
	expect(&(struct rec){ DPK_KIND_PNG, f, len, 2, 2 }, 0, -EBADMSG, "the index says 2 x 2");
	/* cut short inside IDAT */
	expect(&(struct rec){ DPK_KIND_PNG, f, len - 20, 2, 1 }, 0, -EBADMSG, "PNG: ");
	free(f);
	f = png_hand(0, 2, 8, 2, 2, 3, &len);
	expect(&(struct rec){ DPK_KIND_PNG, f, len, 2, 1 }, 0, -EBADMSG, "PNG: ");
	free(f);
	/* 65535 wide (libpng's user limit, set to an image record's side) and one past */
	f = png_hand(65535, 1, 8, 2, 1, 65535 * 3, &len);
	expect(&(struct rec){ DPK_KIND_PNG, f, len, 1, 65535 }, 0, 0, "");
	free(f);
	f = png_hand(65536, 1, 8, 2, 1, 65536 * 3, &len);
	expect(&(struct rec){ DPK_KIND_PNG, f, len, 1, 65535 }, 0, -EBADMSG, "PNG: ");
	free(f);
	/* depth and colour type: 16-bit RGB is taken, 3-bit or colour type 1 are not */
	f = png_hand(1, 1, 16, 2, 1, 6, &len);
	expect(&(struct rec){ DPK_KIND_PNG, f, len, 1, 1 }, 0, 0, "");
	free(f);
	f = png_hand(1, 1, 3, 0, 1, 1, &len);
	expect(&(struct rec){ DPK_KIND_PNG, f, len, 1, 1 }, 0, -EBADMSG, "PNG: ");
	free(f);
	f = png_hand(1, 1, 8, 1, 1, 3, &len);
	expect(&(struct rec){ DPK_KIND_PNG, f, len, 1, 1 }, 0, -EBADMSG, "PNG: ");
	free(f);
}

/* ---- TIFF, written tag by tag: little-endian, one uncompressed strip ---- */

enum { T_W, T_H, T_BPS, T_COMP, T_PHOTO, T_OFF, T_SPP, T_RPS, T_BYTES, T_PLANAR, T_N };

/* A TIFF whose tags hold @v (T_OFF: computed), then @pixels bytes of samples (malloc, *len). */
static uint8_t *tiff_hand(const uint32_t v[T_N], size_t pixels, size_t *len)
{
	static const uint16_t tag[T_N] = { 256, 257, 258, 259, 262, 273, 277, 278, 279, 284 };
	static const uint16_t type[T_N] = { 4, 4, 3, 3, 3, 4, 3, 4, 4, 3 };
	uint32_t ifd = 8, data = ifd + 2 + T_N * 12 + 4;
	uint8_t *f = calloc(data + pixels + 1, 1);

	assert_non_null(f);
	memcpy(f, "II*\0", 4);
	put32(f + 4, ifd);
	put16(f + ifd, T_N);
	for (unsigned i = 0; i < T_N; i++) {
		uint8_t *e = f + ifd + 2 + i * 12;
		put16(e, tag[i]), put16(e + 2, type[i]), put32(e + 4, 1);
		put32(e + 8, i == T_OFF ? data : v[i]);
	}
	for (size_t i = 0; i < pixels; i++)
		f[data + i] = (uint8_t)(i * 17 + 2);
	*len = data + pixels;
	return f;
}

static void test_tiff_fields(void **state)
{
	uint32_t v[T_N] = { [T_W] = 5, [T_H] = 3, [T_BPS] = 8, [T_COMP] = 1, [T_PHOTO] = 2,
			    [T_SPP] = 3, [T_RPS] = 3, [T_BYTES] = 45, [T_PLANAR] = 1 };
	size_t len;
	uint8_t *f;

	(void)state;
	f = tiff_hand(v, 45, &len);
	expect(&(struct rec){ DPK_KIND_TIFF, f, len, 3, 5 }, 0, 0, "");
	/* the samples one byte short */
	expect(&(struct rec){ DPK_KIND_TIFF, f, len - 1, 3, 5 }, 0, -EBADMSG, "TIFF");
	expect(&(struct rec){ DPK_KIND_TIFF, f, len, 3, 4 }, 0, -EBADMSG, "the index says 4 x 3");
	free(f);
	static const struct { unsigned field; uint32_t val; const char *msg; } rows[] = {
		{ T_W, 0, "TIFF" },
		{ T_W, 65536, "TIFF width 65536 (1..65535)" },
		{ T_H, 65536, "TIFF height 65536 (1..65535)" },
		{ T_W, UINT32_MAX, "TIFF width 4294967295 (1..65535)" },
		{ T_BPS, 16, "TIFF at 16 bits a sample (only 8)" },
		{ T_SPP, 5, "TIFF photometric 2 with 5 samples" },
		{ T_PHOTO, 5, "TIFF photometric 5 with 3 samples" },
	};
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		uint32_t e[T_N];
		memcpy(e, v, sizeof(e));
		e[rows[k].field] = rows[k].val;
		f = tiff_hand(e, 45, &len);
		expect(&(struct rec){ DPK_KIND_TIFF, f, len, 3, 5 }, 0, -EBADMSG, rows[k].msg);
		free(f);
	}
	/* 65535 wide, grey: one row of 65535 bytes */
	v[T_W] = 65535, v[T_H] = 1, v[T_PHOTO] = 1, v[T_SPP] = 1, v[T_RPS] = 1, v[T_BYTES] = 65535;
	f = tiff_hand(v, 65535, &len);
	expect(&(struct rec){ DPK_KIND_TIFF, f, len, 1, 65535 }, 0, 0, "");
	free(f);
}

/* ---- WebP: the VP8L header's sides (14 bits each, less one) ---- */

static void test_webp_header_sides(void **state)
{
	uint8_t px[5 * 3 * 3], *out = NULL, f[4096];

	(void)state;
	for (size_t i = 0; i < sizeof(px); i++)
		px[i] = (uint8_t)(i * 23);
	size_t n = WebPEncodeLosslessRGB(px, 5, 3, 15, &out);
	assert_true(n > 30 && n < sizeof(f));
	memcpy(f, out, n);
	WebPFree(out);
	expect(&(struct rec){ DPK_KIND_WEBP, f, n, 3, 5 }, 0, 0, "");
	expect(&(struct rec){ DPK_KIND_WEBP, f, n - 1, 3, 5 }, 0, -EBADMSG, "WebP data damaged");
	expect(&(struct rec){ DPK_KIND_WEBP, f, n, 3, 6 }, 0, -EBADMSG, "the index 6 x 3");
	/* the header claims 16384 x 3 (its largest width): refused before a pixel is written */
	assert_true(memcmp(f + 12, "VP8L", 4) == 0);
	uint32_t bits = (uint32_t)f[21] | (uint32_t)f[22] << 8 | (uint32_t)f[23] << 16 |
			(uint32_t)f[24] << 24;
	put32(f + 21, (bits & ~0x3FFFu) | 0x3FFFu);
	expect(&(struct rec){ DPK_KIND_WEBP, f, n, 3, 5 }, 0, -EBADMSG, "WebP header says 16384 x 3");
}

/* The pixel bound loaderd and dpack share (codec/kind.h), at its default: an 8192 x 8192 PNG
 * passes it (and is then refused for its data: its IDAT holds one row), 8193 x 8192 does not. */
_Static_assert(LDR_MAX_PIXELS_DEFAULT == CDC_MAX_PIXELS_DEFAULT, "one bound for both sides");

static void test_pixel_bound_default(void **state)
{
	size_t len;
	uint8_t *f;

	(void)state;
	assert_false(cdc_pixels_over(8192, 8192, CDC_MAX_PIXELS_DEFAULT));
	assert_true(cdc_pixels_over(8193, 8192, CDC_MAX_PIXELS_DEFAULT));
	assert_true(cdc_pixels_over(8192, 8193, CDC_MAX_PIXELS_DEFAULT));
	assert_false(cdc_pixels_over(65535, 65535, (uint64_t)65535 * 65535));
	f = png_hand(8192, 8192, 8, 2, 1, 8192 * 3, &len);
	expect(&(struct rec){ DPK_KIND_PNG, f, len, 8192, 8192 }, LDR_MAX_PIXELS_DEFAULT, -EBADMSG,
	       "PNG: ");
	free(f);
	f = png_hand(8192, 8193, 8, 2, 1, 8192 * 3, &len);
	expect(&(struct rec){ DPK_KIND_PNG, f, len, 8193, 8192 }, LDR_MAX_PIXELS_DEFAULT, -EBADMSG,
	       "8192 x 8193 pixels is more than the bound of 67108864");
	free(f);
}

/* ---- CMYK JPEG: the index's channel count ---- */

static void test_cmyk_shape_from_the_index(void **state)
{
	uint8_t px[8 * 6 * 4];
	unsigned char *jpg = NULL;
	unsigned long jlen = 0;
	tjhandle tj = tjInitCompress();

	(void)state;
	for (size_t i = 0; i < sizeof(px); i++)
		px[i] = (uint8_t)(i * 11);
	assert_int_equal(tjCompress2(tj, px, 8, 0, 6, TJPF_CMYK, &jpg, &jlen, TJSAMP_444, 90, 0), 0);
	tjDestroy(tj);
	expect(&(struct rec){ DPK_KIND_JPEG_CMYK, jpg, jlen, 6, 8 }, 0, 0, "");
	/* H x W x 1 (a shape the .dpk takes for an image kind): "as stored" would write 3 bytes a
	 * pixel into a buffer of 1 */
	struct dpk_writer *w;
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	struct dpk_record r = { .kind = DPK_KIND_JPEG_CMYK, .data = jpg, .length = jlen, .ndim = 3,
				.shape = { 6, 8, 1 } };
	assert_int_equal(dpk_writer_add(w, &r), 0);
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	char why[256];
	for (uint32_t oh = 0; oh <= 3; oh += 3) {
		assert_int_equal(load_one(0, oh, 0, why, sizeof(why)), -EBADMSG);
		assert_non_null(strstr(why, "H x W x 3, not 3-d x 1"));
	}
	tjFree(jpg);
}

/* ---- raw: the crop's shape check where the shape is used ---- */

static void test_raw_crop_needs_hwc3(void **state)
{
	uint8_t src[4 * 6], dst[2 * 2 * 3];
	struct cdc_decoder *d;
	char why[256];

	(void)state;
	memset(src, 7, sizeof(src));
	assert_int_equal(cdc_decoder_create(&d), 0);
	struct dpk_entry e = { .kind = DPK_KIND_RAW, .length = 24, .raw_size = 24, .ndim = 2,
			       .shape = { 4, 6 } };
	struct cdc_crop c = { 0, 0, 2, 2 };
	struct cdc_out o = { .h = 2, .w = 2 };
	assert_int_equal(cdc_kind_load(DPK_KIND_RAW)->decode(d, &e, src, &c, &o, dst, why,
							     sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "2-d raw tensor cannot be cropped"));
	e.ndim = 3, e.shape[1] = 2, e.shape[2] = 3;  /* 4 x 2 x 3 */
	assert_int_equal(cdc_kind_load(DPK_KIND_RAW)->decode(d, &e, src, &c, &o, dst, why,
							     sizeof(why)), 0);
	e.shape[1] = 3, e.shape[2] = 2;  /* 4 x 3 x 2 */
	assert_int_equal(cdc_kind_load(DPK_KIND_RAW)->decode(d, &e, src, &c, &o, dst, why,
							     sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "3-d raw tensor cannot be cropped"));
	cdc_decoder_destroy(d);
}

/* The shared image decode's own checks of the index (the .dpk reader makes the same ones, so
 * only a direct caller can reach them): H x W x 3, sides 1..65535. */
static void test_image_index_sides(void **state)
{
	uint8_t f[64], dst[3 * 3 * 3];
	struct cdc_decoder *d;
	char why[256];

	(void)state;
	size_t len = pnm(f, 5, 1, 1, 255, 1);
	assert_int_equal(cdc_decoder_create(&d), 0);
	static const struct { uint32_t h, w, c; uint8_t ndim; int want; const char *msg; } rows[] = {
		{ 1, 1, 3, 3, 0, "" },
		{ 1, 0, 3, 3, -EBADMSG, "1..65535" },
		{ 0, 1, 3, 3, -EBADMSG, "1..65535" },
		{ 1, 65536, 3, 3, -EBADMSG, "1..65535" },
		{ 65536, 1, 3, 3, -EBADMSG, "1..65535" },
		{ 1, 1, 1, 3, -EBADMSG, "H x W x 3" },
		{ 1, 1, 3, 2, -EBADMSG, "H x W x 3" },
	};
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		struct dpk_entry e = { .kind = DPK_KIND_PNM, .length = len, .ndim = rows[k].ndim,
				       .shape = { rows[k].h, rows[k].w, rows[k].c },
				       .raw_size = 3 };
		why[0] = '\0';
		int ret = cdc_kind_load(DPK_KIND_PNM)->decode(d, &e, f, &(struct cdc_crop){ 0 },
							     &(struct cdc_out){ 0 }, dst, why,
							     sizeof(why));
		if (ret != rows[k].want || (ret && !strstr(why, rows[k].msg)))
			fail_msg("row %zu: %d \"%s\"", k, ret, why);
	}
	cdc_decoder_destroy(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_bmp_os2_width_0_and_1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bmp_sides_at_65535_and_past, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bmp_info_header_size, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bmp_bits_and_rows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bmp_palette_count, setup, teardown),
		cmocka_unit_test_setup_teardown(test_image_pixel_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pnm_maxval, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pnm_sides_and_rows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_png_ihdr_fields, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pixel_bound_default, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tiff_fields, setup, teardown),
		cmocka_unit_test_setup_teardown(test_webp_header_sides, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cmyk_shape_from_the_index, setup, teardown),
		cmocka_unit_test(test_raw_crop_needs_hwc3),
		cmocka_unit_test(test_image_index_sides),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
