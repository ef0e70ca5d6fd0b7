/* test_jpeg_idx.c - bit-indexed JPEG records (codec/jpeg_idx.h): dpack's index pass keeps a
 * baseline JPEG byte for byte and transcodes any other losslessly (a full decode of the record
 * equals a full decode of the original, every pixel), and the window that loaderd decodes from a
 * bit-level splice equals the same window of a full decode of the original at the same DCT scale
 * (1, 1/2, 1/4, 1/8), maximum absolute difference 0, for every image of a generated set (sizes
 * that are and are not multiples of the MCU, 1x1, 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, grey,
 * progressive inputs, inputs with restart markers, inputs with optimised Huffman tables whose
 * DC tables lack categories), several index widths and many random windows each. A damaged
 * footer, index or scan gives -EBADMSG with a reason, never a read outside the record (ASan in
 * `make test`).
 * Seeded tests print their seed. */
#include "codec/decode.h"
#include "codec/jpeg_build.h"
#include "codec/jpeg_idx.h"
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
#include <jpeglib.h>
#include <xxhash.h>
#include <cmocka.h>

#include "codec/kind.h"
#include "codec/kind_load.h"
#include "tests/cmyk_jpeg.h"
#include "tests/idx_edit.h"
#include "tests/jpeg_imgs.h"
#include "tests/test_util.h"

static uint64_t seeded(const char *test)
{
	return test_xorshift_init(test_seed(test, "TEST_JPEG_IDX_SEED"));
}

/* How an input is made from TurboJPEG's output before dpack sees it. */
enum variant { V_PLAIN, V_OPTIMIZED, V_RESTART, V_OPT_RESTART };

enum { NIMG = 19 };
static struct img imgs[NIMG];
static int kept[NIMG];          /* dpack keeps the input's bytes */
static int optimized[NIMG];     /* optimised tables: some DC category has no code, so transcoded */
static struct cdc_decoder *dec;
static tjhandle tjd;

/* Replace @m's JPEG with its lossless transcode for @v (the reference pixels stay valid). */
static void make_variant(struct img *m, enum variant v)
{
	static const char *const names[] = { "", " optimized", " restart", " optimized+restart" };
	uint8_t *out;
	size_t len;
	char why[160];

	if (v == V_PLAIN)
		return;
	if (cdc_jpeg_transcode(m->jpg, m->len, v == V_OPTIMIZED || v == V_OPT_RESTART,
			       v == V_OPTIMIZED ? -1 : 16, &out, &len, why, sizeof(why)))
		fail_msg("%s: transcode: %s", m->name, why);
	unsigned char *j = tjAlloc((int)len);
	assert_non_null(j);
	memcpy(j, out, len);
	free(out);
	tjFree(m->jpg);
	m->jpg = j;
	m->len = len;
	strncat(m->name, names[v], sizeof(m->name) - strlen(m->name) - 1);
}

static int setup(void **state)
{
	static const struct jpeg_img_spec set[NIMG] = {
		JPEG_IMG_SET_SPLICE,
		{ 512, 384, TJSAMP_420, 0, V_PLAIN },
		{ 500, 375, TJSAMP_420, 0, V_OPTIMIZED }, { 355, 240, TJSAMP_GRAY, 0, V_OPTIMIZED },
		{ 320, 241, TJSAMP_422, 0, V_RESTART },   { 407, 300, TJSAMP_444, 0, V_OPT_RESTART },
		{ 350, 203, TJSAMP_411, 0, V_PLAIN },     /* MCUs 32 px wide */
	};

	(void)state;
	_Static_assert(V_PLAIN == 0, "the shared set's rows are variant 0");
	jpeg_imgs_setup(&tjd, &dec, imgs, set, NIMG);
	for (int i = 0; i < NIMG; i++) {
		make_variant(&imgs[i], (enum variant)set[i].variant);
		kept[i] = !set[i].progressive && set[i].variant == V_PLAIN;
		optimized[i] = set[i].variant == V_OPTIMIZED;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	jpeg_imgs_teardown(tjd, dec, imgs, NIMG);
	return 0;
}

static uint8_t *build(const struct img *m, unsigned col_px, size_t *len)
{
	return jpeg_img_record(cdc_idx_build, DPK_KIND_JPEG_IDX, "index", m, col_px, len);
}

static const unsigned widths[] = { 0, 8, 64, 128 };  /* index column widths, pixels */

/* The record parses, is a JPEG whose full decode is the original's at every scale, keeps a
 * baseline input's bytes, and has an index of the expected shape. */
static void test_idx_build_lossless(void **state)
{
	(void)state;
	for (int i = 0; i < NIMG; i++)
		for (size_t k = 0; k < sizeof(widths) / sizeof(widths[0]); k++) {
			const struct img *m = &imgs[i];
			static struct cdc_idx_info info;
			char why[160];
			size_t len;
			uint8_t *r = build(m, widths[k], &len);

			if (cdc_idx_parse(r, len, &info, why, sizeof(why)))
				fail_msg("%s width %u: parse: %s", m->name, widths[k], why);
			assert_int_equal(info.geo.width, m->w);
			assert_int_equal(info.geo.height, m->h);
			if (widths[k] == 0)
				assert_int_equal(info.geo.segs_x, 1);
			else
				assert_true(info.geo.interval * info.geo.mcu_w <= widths[k] ||
					    info.geo.interval == 1);
			if (kept[i])
				assert_memory_equal(r, m->jpg, m->len);
			else if (optimized[i])
				assert_true(len < m->len || memcmp(r, m->jpg, m->len) != 0);
			jpeg_img_check_full_decode(tjd, m, r, len, widths[k], "record");
			free(r);
		}
}

/* A JPEG that must be transcoded is indexed from the coefficients the transcode encoded, not by
 * walking its output: the record equals, byte for byte, the one the walk makes of the transcode's
 * output (a baseline JPEG with standard tables, which the index takes as it is), for every image
 * of the set made non-indexable by a restart interval (every geometry: grey, 4:4:4 to 4:1:1,
 * sizes off the MCU, 1x1), the progressive ones as they are, and every index width. */
static void test_idx_transcode_indexed_from_coefficients(void **state)
{
	(void)state;
	for (int i = 0; i < NIMG; i++) {
		for (int rst = 0; rst < 2; rst++) {
			struct img in = imgs[i];
			uint8_t *rj = NULL, *tc;
			size_t rjlen, tclen;
			char why[160];

			if (rst) {  /* a restart interval: the index takes none, so transcoded */
				if (cdc_jpeg_transcode(imgs[i].jpg, imgs[i].len, 0, 16, &rj, &rjlen, why,
						       sizeof(why)))
					fail_msg("%s: restart variant: %s", imgs[i].name, why);
				in.jpg = rj;
				in.len = rjlen;
			} else if (kept[i]) {
				continue;  /* indexed as it is: not this path */
			}
			if (cdc_jpeg_transcode(in.jpg, in.len, 0, -1, &tc, &tclen, why, sizeof(why)))
				fail_msg("%s: transcode: %s", in.name, why);
			struct img walked = in;
			walked.jpg = tc;
			walked.len = tclen;
			for (size_t k = 0; k < sizeof(widths) / sizeof(widths[0]); k++) {
				size_t alen, blen;
				uint8_t *a = build(&in, widths[k], &alen);
				uint8_t *b = build(&walked, widths[k], &blen);

				if (alen != blen || memcmp(a, b, alen))
					fail_msg("%s%s width %u: the index from the coefficients (%zu bytes) "
						 "is not the walked one (%zu bytes)", in.name,
						 rst ? " restart" : "", widths[k], alen, blen);
				free(a);
				free(b);
			}
			free(tc);
			free(rj);
		}
	}
}

/* Random windows at random scales: every crop pixel equals the full decode's. */
static void test_idx_window_equals_full_decode(void **state)
{
	uint64_t x = seeded("test_idx_window_equals_full_decode");
	unsigned scales = 0, spliced = 0, n = 0;

	(void)state;
	for (int i = 0; i < NIMG; i++)
		for (size_t k = 0; k < sizeof(widths) / sizeof(widths[0]); k++) {
			const struct img *m = &imgs[i];
			size_t len;
			uint8_t *r = build(m, widths[k], &len);

			spliced += jpeg_img_random_windows(cdc_jpeg_idx_window, dec, m, r, len,
							   widths[k], 60, &x, &scales);
			n += 60;
			free(r);
		}
	printf("%u windows spliced of %u\n", spliced, n);
	assert_int_equal(scales, 1 | 2 | 4 | 8);
	assert_true(spliced > n / 3);
}

/* The output path (window, resize, flip) equals cdc_decode_jpeg's on the original where the
 * window is the whole image, and stays close elsewhere. */
static void test_idx_decode_output(void **state)
{
	static uint8_t a[224 * 224 * 3], b[224 * 224 * 3];
	struct cdc_out o = { .h = 224, .w = 224, .nchw = 0, .flip = 1 };
	char why[256];

	(void)state;
	for (int i = 0; i < NIMG; i++) {
		const struct img *m = &imgs[i];
		size_t len;
		uint8_t *r = build(m, 64, &len);
		struct cdc_crop all = { 0, 0, (uint32_t)m->w, (uint32_t)m->h };
		struct cdc_crop c = { (uint32_t)m->w / 4, (uint32_t)m->h / 5, (uint32_t)m->w / 2 + 1,
				      (uint32_t)m->h / 3 + 1 };

		if (cdc_decode_jpeg_idx(dec, r, len, &all, &o, a, why, sizeof(why)))
			fail_msg("%s: idx: %s", m->name, why);
		if (cdc_decode_jpeg(dec, m->jpg, m->len, &all, &o, b, why, sizeof(why)))
			fail_msg("%s: %s", m->name, why);
		assert_memory_equal(a, b, sizeof(a));
		if (cdc_decode_jpeg_idx(dec, r, len, &c, &o, a, why, sizeof(why)))
			fail_msg("%s: idx: %s", m->name, why);
		if (cdc_decode_jpeg(dec, m->jpg, m->len, &c, &o, b, why, sizeof(why)))
			fail_msg("%s: %s", m->name, why);
		double e = jpeg_img_mean_abs_diff(a, b, sizeof(a));
		if (e > 1.5)
			fail_msg("%s: idx and plain decode differ by %.2f on average", m->name, e);
		free(r);
	}
}

/* Recompute the footer's check after an edit of it, so that deeper checks are reached. */
static void reseal(uint8_t *r, size_t len)
{
	uint8_t *f = r + len - CDC_IDX_FOOTER;
	uint32_t h = (uint32_t)XXH3_64bits(f, 20);

	for (int k = 0; k < 4; k++)
		f[20 + k] = (uint8_t)(h >> (8 * k));
}

/* The byte offset of point (@r, @j) of the record @rec. */
static size_t point_at(const uint8_t *rec, const struct cdc_idx_info *info, uint32_t r, uint32_t j)
{
	struct cdc_idx_point pt;
	char why[160];

	if (cdc_idx_point(rec, info, r, j, &pt, why, sizeof(why)))
		fail_msg("point %u,%u: %s", r, j, why);
	return info->geo.scan_at + (pt.bit >> 3);
}

/* The offset in @rec of the first byte of point (@r, @j)'s varints (j < columns). */
static size_t point_bytes(const uint8_t *rec, const struct cdc_idx_info *info, uint32_t r,
			  uint32_t j)
{
	const uint8_t *d = info->rows + 4 * (size_t)r;
	size_t at = (size_t)(info->stream - rec) + (d[0] | (size_t)d[1] << 8 | (size_t)d[2] << 16);

	for (uint32_t k = 0; k < j * (1 + info->ncomp); k++)
		while (rec[at++] & 0x80)
			;
	return at;
}

static void expect_bad(const uint8_t *r, size_t len, const struct cdc_crop *c, const char *what,
		       const char *reason)
{
	jpeg_img_expect_bad(cdc_decode_jpeg_idx, dec, r, len, c, "JPEG", what, reason);
}

/* Footer, index and scan damage inside what a window needs: -EBADMSG, naming it. */
static void test_idx_damage_rejected(void **state)
{
	const struct img *m = &imgs[1];  /* 640x480 4:2:0: 30 rows of 40 MCUs */
	static struct cdc_idx_info info;
	struct cdc_crop c = { 300, 200, 100, 100 };
	char why[160];
	size_t len;
	uint8_t *r = build(m, 64, &len), *bad = malloc(len + 8);

	(void)state;
	assert_non_null(bad);
	assert_int_equal(cdc_idx_parse(r, len, &info, why, sizeof(why)), 0);
	size_t tab = info.jpeg_len, foot = len - CDC_IDX_FOOTER;

	memcpy(bad, r, len);
	bad[len - 1] ^= 1;
	expect_bad(bad, len, &c, "magic", "magic");
	memcpy(bad, r, len);
	bad[foot + 24] = 2;
	expect_bad(bad, len, &c, "version", "version");
	memcpy(bad, r, len);
	bad[foot + 4] ^= 4;
	expect_bad(bad, len, &c, "JPEG length", "lengths");
	memcpy(bad, r, len);
	bad[foot + 16] ^= 1;
	expect_bad(bad, len, &c, "point count, check not updated", "check");
	memcpy(bad, r, len);
	bad[foot + 16] ^= 1;
	reseal(bad, len);
	expect_bad(bad, len, &c, "point count", "index size");
	memcpy(bad, r, len);
	bad[foot + 12] ^= 1;
	reseal(bad, len);
	expect_bad(bad, len, &c, "column width", "index size");
	/* two rows of the directory swapped */
	memcpy(bad, r, len);
	memcpy(bad + tab + 4 * 13, r + tab + 4 * 14, 4);
	memcpy(bad + tab + 4 * 14, r + tab + 4 * 13, 4);
	expect_bad(bad, len, &c, "row directory", "directory");
	/* a point that does not move (delta 0) */
	memcpy(bad, r, len);
	bad[point_bytes(r, &info, 14, 4)] = 0;
	expect_bad(bad, len, &c, "zero delta", "order");
	/* a row start past the scan */
	memcpy(bad, r, len);
	memset(bad + point_bytes(r, &info, 14, 0), 0xFF, 4);
	bad[point_bytes(r, &info, 14, 0) + 4] = 0x0F;
	expect_bad(bad, len, &c, "point past the scan", "outside");
	/* a varint that runs on past five bytes */
	memcpy(bad, r, len);
	memset(bad + point_bytes(r, &info, 14, 0), 0xFF, 6);
	expect_bad(bad, len, &c, "varint too long", "stream");
	/* the first point not at the scan's start (a window from row 0) */
	memcpy(bad, r, len);
	bad[point_bytes(r, &info, 0, 0)] = 1;
	struct cdc_crop top = { 0, 0, 100, 100 };
	expect_bad(bad, len, &top, "first point", "start");
	/* a marker inside the scan, in a row the window needs (between two of its points) */
	memcpy(bad, r, len);
	size_t at = point_at(r, &info, 14, 4), at2 = point_at(r, &info, 14, 5);
	bad[(at + at2) / 2] = 0xFF;
	bad[(at + at2) / 2 + 1] = 0xD3;
	expect_bad(bad, len, &c, "marker in the scan", "marker");
	/* bad Huffman codes at a row's start: all-ones bits */
	memcpy(bad, r, len);
	for (int k = 0; k < 6; k++) {
		bad[at + 2 * k] = 0xFF;
		bad[at + 2 * k + 1] = 0x00;
	}
	expect_bad(bad, len, &c, "bad code", NULL);
	/* truncated: the footer is gone */
	const size_t cuts[] = { 0, 1, 20, info.geo.scan_at, tab, len - 1 };
	for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
		char what[64];
		snprintf(what, sizeof(what), "cut at %zu of %zu", cuts[k], len);
		expect_bad(r, cuts[k], &c, what, NULL);
	}
	free(bad);
	free(r);
}

/* A DC table without the category that a re-coded difference needs: -EBADMSG naming it. A grey
 * image, left half 255 and right half 132, at quality 100 (quantisers 1): block DCs 1016 and 32,
 * so the scan codes DC differences of categories 0 and 10 only; a splice that starts in the right
 * half re-codes 32 - 0, category 6, which the record's DC table is then edited not to have. */
static void test_idx_incomplete_dc_table_rejected(void **state)
{
	tjhandle c = tjInitCompress();
	uint8_t px[32 * 64];
	unsigned char *jpg = NULL;
	unsigned long jlen = 0;
	struct dpk_record r = { .kind = DPK_KIND_JPEG };
	uint8_t *rec;
	size_t len;
	char why[256];

	(void)state;
	assert_non_null(c);
	for (int i = 0; i < 32 * 64; i++)
		px[i] = i % 64 < 32 ? 255 : 132;
	if (tjCompress2(c, px, 64, 0, 32, TJPF_GRAY, &jpg, &jlen, TJSAMP_GRAY, 100, 0))
		fail_msg("%s", tjGetErrorStr2(c));
	assert_int_equal(cdc_idx_build(jpg, jlen, 8, &r, &rec, &len, why, sizeof(why)), 0);
	assert_int_equal(r.kind, DPK_KIND_JPEG_IDX);
	/* the DC table 0's symbol 6 becomes 13: same code lengths, so the scan is unchanged */
	size_t at = 0;
	for (size_t i = 2; i + 21 < len && !at; i++)
		if (rec[i] == 0xFF && rec[i + 1] == 0xC4 && rec[i + 4] == 0x00)
			at = i + 5;
	assert_true(at > 0);
	unsigned nsym = 0;
	for (int k = 0; k < 16; k++)
		nsym += rec[at + k];
	int edited = 0;
	for (unsigned k = 0; k < nsym; k++)
		if (rec[at + 16 + k] == 6) {
			rec[at + 16 + k] = 13;
			edited = 1;
		}
	assert_true(edited);
	struct cdc_crop left = { 0, 8, 24, 16 }, right = { 40, 8, 16, 16 };
	struct cdc_out o = { .h = 16, .w = 16, .nchw = 0, .flip = 0 };
	static uint8_t out[16 * 16 * 3];
	/* starting in the left half re-codes 1016 - 0: category 10, which the table has */
	if (cdc_decode_jpeg_idx(dec, rec, len, &left, &o, out, why, sizeof(why)))
		fail_msg("left half: %s", why);
	assert_int_equal(cdc_decode_jpeg_idx(dec, rec, len, &right, &o, out, why, sizeof(why)),
			 -EBADMSG);
	if (!strstr(why, "DC table"))
		fail_msg("reason \"%s\" does not name the DC table", why);
	free(rec);
	tjFree(jpg);
	tjDestroy(c);
}

/* Random bytes anywhere (the check resealed half the time): a decode either succeeds or fails
 * with -EBADMSG; ASan checks every read. */
static void test_idx_garbage_never_crashes(void **state)
{
	uint64_t x = seeded("test_idx_garbage_never_crashes");
	struct cdc_out o = { .h = 48, .w = 48, .nchw = 0, .flip = 0 };
	static uint8_t out[48 * 48 * 3];
	int failed = 0;

	(void)state;
	for (int i = 0; i < NIMG; i++) {
		const struct img *m = &imgs[i];
		size_t len;
		uint8_t *r = build(m, 32, &len);
		for (int t = 0; t < 40; t++) {
			uint8_t *bad = jpeg_img_damaged(r, len, &x);
			char why[256];
			struct cdc_crop c;

			if (t % 2)
				reseal(bad, len);
			cdc_crop_random((uint32_t)m->w, (uint32_t)m->h, test_xorshift(&x), &c);
			int ret = cdc_decode_jpeg_idx(dec, bad, len, &c, &o, out, why, sizeof(why));
			if (ret != 0 && ret != -EBADMSG)
				fail_msg("%s: %d", m->name, ret);
			failed += ret != 0;
			free(bad);
		}
		free(r);
	}
	printf("%d of %d damaged records refused\n", failed, NIMG * 40);
}

/* A 2-component JPEG (libjpeg writes them; neither grey, YCbCr nor CMYK) by hand. */
static void two_component_jpeg(unsigned char **jpg, unsigned long *len)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr err;
	uint8_t row[2 * 24];

	c.err = jpeg_std_error(&err);
	jpeg_create_compress(&c);
	*jpg = NULL;
	*len = 0;
	jpeg_mem_dest(&c, jpg, len);
	c.image_width = 24;
	c.image_height = 16;
	c.input_components = 2;
	c.in_color_space = JCS_UNKNOWN;
	jpeg_set_defaults(&c);
	jpeg_start_compress(&c, TRUE);
	for (unsigned y = 0; y < 16; y++) {
		for (unsigned i = 0; i < sizeof(row); i++)
			row[i] = (uint8_t)(i * 5 + y * 3);
		JSAMPROW rp = row;
		jpeg_write_scanlines(&c, &rp, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
}

/* CMYK (4 components) is indexed like the others (DPK_KIND_JPEG_IDX_CMYK, its baseline bytes
 * kept); a JPEG the index cannot describe even after a transcode (2 components) is kept as a
 * plain JPEG; a damaged one is refused with a reason. */
static void test_idx_build_fallbacks(void **state)
{
	tjhandle c = tjInitCompress();
	uint8_t *px = jpeg_img_pixels(40, 30, 4, 7), *out;
	unsigned char *jpg = NULL;
	unsigned long jlen = 0;
	size_t len;
	char why[160];
	struct dpk_record r = { .kind = DPK_KIND_JPEG_CMYK };
	static struct cdc_idx_info info;

	(void)state;
	assert_non_null(c);
	if (tjCompress2(c, px, 40, 0, 30, TJPF_CMYK, &jpg, &jlen, TJSAMP_444, 90, 0))
		fail_msg("CMYK: %s", tjGetErrorStr2(c));
	assert_int_equal(cdc_idx_build(jpg, jlen, 64, &r, &out, &len, why, sizeof(why)), 0);
	assert_int_equal(r.kind, DPK_KIND_JPEG_IDX_CMYK);
	assert_true(len > jlen);
	assert_memory_equal(out, jpg, jlen);
	assert_int_equal(cdc_idx_parse(out, len, &info, why, sizeof(why)), 0);
	assert_int_equal(info.ncomp, 4);
	/* a jpeg+idx job refuses a 4-component index, by name */
	struct cdc_crop cr = { 0, 0, 40, 30 };
	struct cdc_out o = { .h = 8, .w = 8, .nchw = 0, .flip = 0 };
	uint8_t tiny[8 * 8 * 3];
	assert_int_equal(cdc_decode_jpeg_idx(dec, out, len, &cr, &o, tiny, why, sizeof(why)),
			 -EBADMSG);
	assert_non_null(strstr(why, "4 components"));
	free(out);
	tjFree(jpg);
	/* 2 components: stored as it is */
	unsigned char *two;
	unsigned long tlen;
	two_component_jpeg(&two, &tlen);
	r.kind = DPK_KIND_JPEG;
	assert_int_equal(cdc_idx_build(two, tlen, 64, &r, &out, &len, why, sizeof(why)), 0);
	assert_int_equal(r.kind, DPK_KIND_JPEG);
	assert_int_equal(len, tlen);
	assert_memory_equal(out, two, tlen);
	free(out);
	free(two);
	/* a scan cut short */
	const struct img *m = &imgs[1];
	assert_int_equal(cdc_idx_build(m->jpg, m->len / 2, 64, &r, &out, &len, why, sizeof(why)),
			 -EBADMSG);
	assert_true(strlen(why) > 8);
	free(px);
	tjDestroy(c);
}

/* ---- the index checked whole (a hostile dataset's records) ---- */

/* The scan's length in bits: the most any index point may say. */
static uint32_t scan_bits(const struct idx_edit *e)
{
	return (e->jpeg_len - 2 - e->scan_at) * 8;
}

/* The first point of row @r. */
static uint32_t row_first(const struct idx_edit *e, uint32_t r)
{
	return r * e->segs_x;
}

/* A row whose first byte (after moving its start to just past the row above) is not a stuffed
 * 0x00, so that the move is refused or accepted for its order alone. */
static uint32_t row_after_plain_byte(const struct idx_edit *e)
{
	for (uint32_t r = 1; r + 1 < e->rows; r++) {
		size_t at = e->scan_at + ((e->bit[row_first(e, r) - 1] + 1) >> 3);
		if (!(e->jpg[at - 1] == 0xFF && e->jpg[at] == 0))
			return r;
	}
	fail_msg("no row to move");
	return 0;
}

/* The review's record: every row from the second on points near the end of the scan, rising
 * within the row. Before the whole index was checked, a splice of the planned rows copied each
 * row's bits to the end of the scan, far past the splice's bound (a heap overflow). */
static void edit_rows_near_end(struct idx_edit *e)
{
	for (uint32_t r = 1; r + 1 < e->rows; r++)
		for (uint32_t j = 0; j < e->segs_x; j++)
			e->bit[row_first(e, r) + j] = scan_bits(e) - 8 * (e->segs_x - j) - 64;
}

/* Every row from the second on made of true MCU starts (so each decodes) that span most of the
 * scan: rows 1, 4, 7, ... 28's starts as its columns. Planned together, the rows copy the scan
 * many times over. */
static void edit_rows_span_scan(struct idx_edit *e)
{
	uint32_t span[16][1 + IDX_EDIT_COMP];

	assert_true(e->segs_x <= 16);
	for (uint32_t j = 0; j < e->segs_x; j++) {
		uint32_t k = row_first(e, 1 + j * (e->rows - 3) / (e->segs_x - 1));
		span[j][0] = e->bit[k];
		for (int c = 0; c < IDX_EDIT_COMP; c++)
			span[j][1 + c] = (uint32_t)e->pred[IDX_EDIT_COMP * k + c];
	}
	for (uint32_t r = 1; r + 1 < e->rows; r++)
		for (uint32_t j = 0; j < e->segs_x; j++) {
			uint32_t k = row_first(e, r) + j;
			e->bit[k] = span[j][0];
			for (int c = 0; c < IDX_EDIT_COMP; c++)
				e->pred[IDX_EDIT_COMP * k + c] = (int32_t)span[j][1 + c];
		}
}

static void edit_row_at_prev_end(struct idx_edit *e)
{
	uint32_t k = row_first(e, row_after_plain_byte(e));
	uint32_t d = e->bit[k] - e->bit[k - 1];
	for (uint32_t j = 0; j < e->segs_x; j++)  /* the whole row moves: order within it holds */
		e->bit[k + j] -= d;
}

static void edit_row_just_after_prev_end(struct idx_edit *e)
{
	uint32_t k = row_first(e, row_after_plain_byte(e));
	uint32_t d = e->bit[k] - e->bit[k - 1] - 1;
	for (uint32_t j = 0; j < e->segs_x; j++)
		e->bit[k + j] -= d;
}

static void edit_final_at_scan_end(struct idx_edit *e)
{
	e->bit[e->npoints - 1] = scan_bits(e);
}

static void edit_final_past_scan_end(struct idx_edit *e)
{
	e->bit[e->npoints - 1] = scan_bits(e) + 1;
}

static void edit_first_not_zero(struct idx_edit *e)
{
	for (uint32_t k = 0; k < e->segs_x; k++)
		e->bit[k] += 1;
}

static void edit_point_repeats(struct idx_edit *e)
{
	uint32_t k = row_first(e, 14) + 3;
	e->bit[k] = e->bit[k - 1];
}

static void set_pred(struct idx_edit *e, int32_t v)
{
	e->pred[IDX_EDIT_COMP * (row_first(e, 14) + 3)] = v;
}
static void edit_pred_max(struct idx_edit *e) { set_pred(e, 32767); }
static void edit_pred_past_max(struct idx_edit *e) { set_pred(e, 32768); }
static void edit_pred_min(struct idx_edit *e) { set_pred(e, -32768); }
static void edit_pred_past_min(struct idx_edit *e) { set_pred(e, -32769); }

static void edit_stream_trailing_byte(struct idx_edit *e)
{
	e->extra = 1;
}

static void edit_rows_share_start(struct idx_edit *e)
{
	e->dir[14] = 0;
	e->dir[15] = 0;
}

static void edit_none(struct idx_edit *e)
{
	(void)e;
}

static void set_last_pred(struct idx_edit *e, int32_t v)
{
	e->pred[IDX_EDIT_COMP * (row_first(e, 14) + 3) + e->ncomp - 1] = v;
}
static void edit_last_pred_max(struct idx_edit *e) { set_last_pred(e, 32767); }
static void edit_last_pred_past_max(struct idx_edit *e) { set_last_pred(e, 32768); }
static void edit_last_pred_min(struct idx_edit *e) { set_last_pred(e, -32768); }
static void edit_last_pred_past_min(struct idx_edit *e) { set_last_pred(e, -32769); }
static void edit_ncomp_more(struct idx_edit *e) { e->ncomp++; }
static void edit_ncomp_fewer(struct idx_edit *e) { e->ncomp--; }

/* Decode a window of @rec as its kind does (jpeg+idx, or jpeg+idx+cmyk through the kind table). */
static int decode_kind(unsigned kind, const uint8_t *rec, size_t n, uint32_t w, uint32_t h,
		       const struct cdc_crop *c, const struct cdc_out *o, uint8_t *px, char *why,
		       size_t whylen)
{
	if (kind == DPK_KIND_JPEG_IDX)
		return cdc_decode_jpeg_idx(dec, rec, n, c, o, px, why, whylen);
	struct dpk_entry e = { .kind = (uint8_t)kind, .length = n, .ndim = 3,
			       .shape = { h, w, 3 }, .raw_size = (uint64_t)w * h * 3 };
	return cdc_kind_load(kind)->decode(dec, &e, rec, c, o, px, why, whylen);
}

/* Every bound of the index, at its limit (parsed; any window then decodes or is -EBADMSG) and one
 * past it (refused at parse, naming the reason), on the record @r of a 640x480 image indexed as
 * 30 rows of 10 columns (jpeg+idx 4:2:0, or jpeg+idx+cmyk with PIL's 4:2:0 factors). */
static void check_index_bounds(const uint8_t *r, size_t len, unsigned kind, uint32_t w, uint32_t h)
{
	static const struct {
		const char *what;
		void (*edit)(struct idx_edit *e);
		const char *refused;  /* NULL: parses */
	} cases[] = {
		{ "unchanged", edit_none, NULL },
		{ "rows near the end of the scan", edit_rows_near_end, "row above" },
		{ "rows spanning the scan", edit_rows_span_scan, "row above" },
		{ "a row starting where the row above ends", edit_row_at_prev_end, "row above" },
		{ "a row starting one bit after the row above", edit_row_just_after_prev_end, NULL },
		{ "the final point at the scan's end", edit_final_at_scan_end, NULL },
		{ "the final point one bit past the scan", edit_final_past_scan_end, "outside" },
		{ "the first point not at bit 0", edit_first_not_zero, "start" },
		{ "a point that does not move", edit_point_repeats, "order" },
		{ "a prediction of 32767", edit_pred_max, NULL },
		{ "a prediction of 32768", edit_pred_past_max, "prediction" },
		{ "a prediction of -32768", edit_pred_min, NULL },
		{ "a prediction of -32769", edit_pred_past_min, "prediction" },
		{ "the last component's prediction of 32767", edit_last_pred_max, NULL },
		{ "the last component's prediction of 32768", edit_last_pred_past_max, "prediction" },
		{ "the last component's prediction of -32768", edit_last_pred_min, NULL },
		{ "the last component's prediction of -32769", edit_last_pred_past_min, "prediction" },
		{ "a component more in the footer", edit_ncomp_more, "does not match" },
		{ "a component fewer in the footer", edit_ncomp_fewer, "does not match" },
		{ "a byte after the final point", edit_stream_trailing_byte, "more than its points" },
		{ "two rows at one start", edit_rows_share_start, "" },
	};
	static struct cdc_idx_info info;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct idx_edit e;
		uint8_t *rec;
		size_t n;
		char why[160] = "";
		assert_int_equal(idx_edit_load(r, len, &e), 0);
		assert_int_equal(e.segs_x, 10);
		assert_int_equal(e.rows, 31);
		assert_int_equal(e.ncomp, kind == DPK_KIND_JPEG_IDX ? 3 : 4);
		cases[i].edit(&e);
		assert_int_equal(idx_edit_store(&e, &rec, &n), 0);
		int ret = cdc_idx_parse(rec, n, &info, why, sizeof(why));
		if (!cases[i].refused) {
			if (ret != 0)
				fail_msg("%s: refused (%s), want parsed", cases[i].what, why);
			if (cases[i].edit == edit_none) {  /* the editor itself is exact */
				assert_int_equal(n, len);
				assert_memory_equal(rec, r, len);
			}
			/* every window decodes or is refused; never outside a buffer (ASan) */
			uint64_t x = test_xorshift_init(i + 1);
			for (int t = 0; t < 20; t++) {
				struct cdc_crop c;
				struct cdc_out o = { .h = 32, .w = 32, .nchw = 0, .flip = 0 };
				static uint8_t px[32 * 32 * 3];
				cdc_crop_random(w, h, test_xorshift(&x), &c);
				ret = decode_kind(kind, rec, n, w, h, &c, &o, px, why, sizeof(why));
				if (ret != 0 && ret != -EBADMSG)
					fail_msg("%s: decode %d", cases[i].what, ret);
			}
		} else {
			if (ret != -EBADMSG)
				fail_msg("%s: %d, want -EBADMSG", cases[i].what, ret);
			if (!strstr(why, cases[i].refused) || strlen(why) < 12)
				fail_msg("%s: \"%s\" does not say \"%s\"", cases[i].what, why,
					 cases[i].refused);
		}
		free(rec);
		idx_edit_free(&e);
	}
}

static void test_idx_index_checked_whole(void **state)
{
	const struct img *m = &imgs[1];
	size_t len;
	uint8_t *r = build(m, 64, &len);

	(void)state;
	check_index_bounds(r, len, DPK_KIND_JPEG_IDX, (uint32_t)m->w, (uint32_t)m->h);
	free(r);
}

/* The same bounds on a 4-component record (4 predictions a point). */
static void test_idx_index_checked_whole_cmyk(void **state)
{
	static const struct cmyk_spec s = { "CMYK PIL 4:2:0", 640, 480, 0, 1, 0,
					    { { 2, 2 }, { 1, 1 }, { 1, 1 }, { 1, 1 } } };
	uint8_t *px = cmyk_jpeg_pattern(s.w, s.h, 5), *f, *r;
	size_t flen, len;
	char why[160];
	struct dpk_record rec = { .kind = DPK_KIND_JPEG_CMYK };

	(void)state;
	cmyk_jpeg_make(&s, px, &f, &flen);
	assert_int_equal(cdc_idx_build(f, flen, 64, &rec, &r, &len, why, sizeof(why)), 0);
	assert_int_equal(rec.kind, DPK_KIND_JPEG_IDX_CMYK);
	check_index_bounds(r, len, DPK_KIND_JPEG_IDX_CMYK, s.w, s.h);
	free(r);
	free(f);
	free(px);
}

/* The splice on its own, given an index that the whole-index check would refuse (rows of true
 * MCUs that each span most of the scan): each row is measured against what is left of the buffer before a bit is
 * copied, so it refuses the plan instead of writing past the bound (an exact-size buffer: ASan). */
static void splice_bounded(const uint8_t *r, size_t len, uint32_t w, uint32_t h)
{
	static struct cdc_idx_info info;
	struct idx_edit e;
	size_t n;
	uint8_t *rec;
	char why[160] = "";

	assert_int_equal(cdc_idx_parse(r, len, &info, why, sizeof(why)), 0);
	assert_int_equal(idx_edit_load(r, len, &e), 0);
	edit_rows_span_scan(&e);
	assert_int_equal(idx_edit_store(&e, &rec, &n), 0);
	/* the parsed geometry of the good record, the index of the bad one */
	info.rows = rec + info.jpeg_len;
	info.stream = info.rows + 4 * (size_t)e.rows;
	info.stream_len = (uint32_t)(n - CDC_IDX_FOOTER - info.jpeg_len - 4 * (size_t)e.rows);
	struct cdc_rst_plan plan;
	cdc_rst_plan(&info.geo, 0, 0, w - 100, h, &plan);
	assert_false(plan.whole);
	size_t bound = cdc_idx_splice_bound(&info, &plan);
	uint8_t *out = malloc(bound);
	assert_non_null(out);
	long ret = cdc_idx_splice(rec, &info, &plan, out, why, sizeof(why));
	if (ret != -EBADMSG || !strstr(why, "more bits than the scan"))
		fail_msg("splice: %ld (%s), want -EBADMSG for rows over the bound", ret, why);
	free(out);
	free(rec);
	idx_edit_free(&e);
}

static void test_idx_splice_bounded_without_check(void **state)
{
	const struct img *m = &imgs[1];
	size_t len;
	uint8_t *r = build(m, 64, &len);

	(void)state;
	splice_bounded(r, len, (uint32_t)m->w, (uint32_t)m->h);
	free(r);
	/* the same with 4 components */
	static const struct cmyk_spec s = { "YCCK 4:2:0", 640, 480, 1, 1, 0,
					    { { 2, 2 }, { 1, 1 }, { 1, 1 }, { 2, 2 } } };
	uint8_t *px = cmyk_jpeg_pattern(s.w, s.h, 9), *f;
	size_t flen;
	char why[160];
	struct dpk_record rec = { .kind = DPK_KIND_JPEG_CMYK };
	cmyk_jpeg_make(&s, px, &f, &flen);
	assert_int_equal(cdc_idx_build(f, flen, 64, &rec, &r, &len, why, sizeof(why)), 0);
	assert_int_equal(rec.kind, DPK_KIND_JPEG_IDX_CMYK);
	splice_bounded(r, len, s.w, s.h);
	free(r);
	free(f);
	free(px);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idx_build_lossless),
		cmocka_unit_test(test_idx_transcode_indexed_from_coefficients),
		cmocka_unit_test(test_idx_window_equals_full_decode),
		cmocka_unit_test(test_idx_decode_output),
		cmocka_unit_test(test_idx_damage_rejected),
		cmocka_unit_test(test_idx_incomplete_dc_table_rejected),
		cmocka_unit_test(test_idx_garbage_never_crashes),
		cmocka_unit_test(test_idx_build_fallbacks),
		cmocka_unit_test(test_idx_index_checked_whole),
		cmocka_unit_test(test_idx_index_checked_whole_cmyk),
		cmocka_unit_test(test_idx_splice_bounded_without_check),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
