/* test_jpeg_cmyk_idx.c - 4-component JPEGs indexed (DPK_KIND_JPEG_IDX_CMYK, codec/kind_jpeg_cmyk.c):
 * dpack's repack of a jpeg+cmyk file makes a jpeg+idx+cmyk record (baseline bytes kept,
 * progressive ones transcoded losslessly), and every window that loaderd decodes from its
 * bit-level splice equals, byte for byte, the same window of the whole-decode path (jpeg+cmyk)
 * on the original file: CMYK and YCCK, with and without the Adobe marker, sampling 4:4:4, PIL's
 * 4:2:0 and 4:2:2 (C subsampled, M, Y, K whole), YCCK 4:2:0 and 4:2:2 with K whole, 4:4:0, and
 * 4:1:1, baseline and progressive, sizes on and off the MCU grid, 1x1, crops at every edge and
 * corner, random RandomResizedCrop windows, at every DCT scale (1, 1/2, 1/4, 1/8: each is hit),
 * "as stored" too. Only the crop's MCUs are decoded: a record whose scan is destroyed below a
 * crop still gives that crop's pixels. With TEST_CMYK_PHOTOS set to a directory of JPEGs (real
 * photographs converted to CMYK by PIL: tests/it_cmyk_idx.sh makes them), the same on each of
 * them; without it that case is skipped. Seeded tests print their seed. */
#include "codec/decode.h"
#include "codec/jpeg_hdr.h"
#include "codec/jpeg_idx.h"
#include "codec/kind.h"
#include "codec/kind_load.h"
#include "codec/kind_pack.h"

#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/cmyk_jpeg.h"
#include "tests/test_util.h"

static struct cdc_decoder *dec;
static unsigned den_hits[9];    /* decodes at each DCT scale denominator */

static int setup(void **state)
{
	(void)state;
	return cdc_decoder_create(&dec);
}

static int teardown(void **state)
{
	(void)state;
	cdc_decoder_destroy(dec);
	return 0;
}

static void entry_for(struct dpk_entry *e, unsigned kind, size_t len, uint32_t w, uint32_t h)
{
	memset(e, 0, sizeof(*e));
	e->kind = (uint8_t)kind;
	e->length = len;
	e->ndim = 3;
	e->shape[0] = h, e->shape[1] = w, e->shape[2] = 3;
	e->raw_size = (uint64_t)w * h * 3;
}

/* Decode @src as @e's kind into a fresh buffer (free()); fails the test, naming @what. */
static uint8_t *decode(const char *what, const struct dpk_entry *e, const uint8_t *src,
		       const struct cdc_crop *c, const struct cdc_out *o)
{
	size_t n = o->h ? (size_t)o->h * o->w * 3 : e->raw_size;
	uint8_t *px = malloc(n);
	char why[256] = "";

	assert_non_null(px);
	if (cdc_kind_load(e->kind)->decode(dec, e, src, c, o, px, why, sizeof(why)) < 0)
		fail_msg("%s: %s decode of %ux%u+%u+%u to %ux%u: %s", what,
			 cdc_kind_get(e->kind)->name, c->w, c->h, c->x, c->y, o->w, o->h, why);
	return px;
}

/* The window @c at output sizes that reach every DCT scale the crop allows: the indexed record
 * and the whole decode of the original file agree byte for byte. */
static void compare_crop(const char *name, const struct dpk_entry *eo, const uint8_t *file,
			 const struct dpk_entry *ei, const uint8_t *rec, const struct cdc_crop *c)
{
	/* output = crop / div; 0: 224 x 224 (upscaled where the crop is smaller: the resize then
	 * reads the pixel around the crop) */
	static const unsigned div[] = { 1, 2, 3, 5, 9, 17, 0 };

	for (size_t i = 0; i < sizeof(div) / sizeof(div[0]); i++) {
		struct cdc_out o = { .h = 224, .w = 224, .nchw = 0, .flip = (int)(i & 1) };
		if (div[i]) {
			o.h = c->h / div[i] ? c->h / div[i] : 1;
			o.w = c->w / div[i] ? c->w / div[i] : 1;
		}
		den_hits[cdc_jpeg_scale(c, o.h, o.w)]++;
		uint8_t *want = decode(name, eo, file, c, &o), *got = decode(name, ei, rec, c, &o);
		size_t n = (size_t)o.h * o.w * 3;
		if (memcmp(got, want, n)) {
			size_t k = 0;
			while (got[k] == want[k])
				k++;
			fail_msg("%s: crop %ux%u+%u+%u to %ux%u (1/%u): byte %zu is %u, whole decode %u",
				 name, c->w, c->h, c->x, c->y, o.w, o.h, cdc_jpeg_scale(c, o.h, o.w), k,
				 got[k], want[k]);
		}
		free(want);
		free(got);
	}
}

/* The file @f (a 4-component JPEG): repacked as dpack does (index columns of @col_px), the record
 * is jpeg+idx+cmyk, keeps a baseline file's bytes, and its windows (edges, corners, @nrand random
 * ones) equal the whole decode's; "as stored" too. */
static void check_file(const char *name, const uint8_t *f, size_t len, unsigned col_px, int nrand,
		       uint64_t *x)
{
	struct dpk_record r = { 0 };
	struct cdc_repack_opts opt = { 0, col_px };
	uint8_t *rec;
	size_t rlen;
	char why[256] = "";
	static struct cdc_idx_info info;

	if (cdc_kind_probe(f, len, &r, why, sizeof(why)) < 0)
		fail_msg("%s: probe: %s", name, why);
	assert_int_equal(r.kind, DPK_KIND_JPEG_CMYK);
	uint32_t h = r.shape[0], w = r.shape[1];
	if (cdc_kind_pack(DPK_KIND_JPEG_CMYK)->repack(f, len, &opt, &r, &rec, &rlen, why,
							sizeof(why)) < 0)
		fail_msg("%s: repack: %s", name, why);
	if (r.kind != DPK_KIND_JPEG_IDX_CMYK)
		fail_msg("%s: repacked as %s, not jpeg+idx+cmyk", name, cdc_kind_get(r.kind)->name);
	if (cdc_idx_parse(rec, rlen, &info, why, sizeof(why)) < 0)
		fail_msg("%s: the record does not parse: %s", name, why);
	assert_int_equal(info.ncomp, 4);
	assert_int_equal(info.geo.width, w);
	assert_int_equal(info.geo.height, h);
	struct dpk_entry eo, ei;
	entry_for(&eo, DPK_KIND_JPEG_CMYK, len, w, h);
	entry_for(&ei, DPK_KIND_JPEG_IDX_CMYK, rlen, w, h);
	/* as stored: the whole RGB image */
	struct cdc_crop none = { 0 };
	struct cdc_out whole = { 0 };
	uint8_t *a = decode(name, &eo, f, &none, &whole), *b = decode(name, &ei, rec, &none, &whole);
	assert_memory_equal(a, b, eo.raw_size);
	free(a);
	free(b);
	/* edges and corners, then random windows */
	uint32_t w3 = w / 3 ? w / 3 : 1, h3 = h / 3 ? h / 3 : 1;
	const struct cdc_crop fixed[] = {
		{ 0, 0, w, h },                       /* the whole image */
		{ 0, 0, w3, h3 },                     /* top left */
		{ w - w3, h - h3, w3, h3 },           /* bottom right */
		{ w - w3, 0, w3, h },                 /* the right edge, full height */
		{ 0, h - h3, w, h3 },                 /* the bottom edge, full width */
		{ w / 2, h / 2, 1, 1 },               /* one pixel */
		{ w - 1, h - 1, 1, 1 },               /* the last pixel */
		{ w / 4, h / 4, w / 2 ? w / 2 : 1, h / 2 ? h / 2 : 1 },
	};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		compare_crop(name, &eo, f, &ei, rec, &fixed[i]);
	for (int t = 0; t < nrand; t++) {
		struct cdc_crop c;
		cdc_crop_random(w, h, test_xorshift(x), &c);
		compare_crop(name, &eo, f, &ei, rec, &c);
	}
	free(rec);
}

#define HV(a, b, c, d, e, f, g, i) { { a, b }, { c, d }, { e, f }, { g, i } }

static const struct cmyk_spec specs[] = {
	{ "CMYK 4:4:4 Adobe", 203, 150, 0, 1, 0, HV(1, 1, 1, 1, 1, 1, 1, 1) },
	{ "CMYK 4:4:4 no Adobe", 64, 48, 0, 0, 0, HV(1, 1, 1, 1, 1, 1, 1, 1) },
	{ "CMYK PIL 4:2:0", 211, 157, 0, 1, 0, HV(2, 2, 1, 1, 1, 1, 1, 1) },
	{ "CMYK PIL 4:2:2", 160, 97, 0, 1, 0, HV(2, 1, 1, 1, 1, 1, 1, 1) },
	{ "YCCK 4:2:0", 199, 141, 1, 1, 0, HV(2, 2, 1, 1, 1, 1, 2, 2) },
	{ "YCCK 4:2:2", 128, 128, 1, 1, 0, HV(2, 1, 1, 1, 1, 1, 2, 1) },
	{ "YCCK 4:4:0", 90, 131, 1, 1, 0, HV(1, 2, 1, 1, 1, 1, 1, 2) },
	{ "YCCK 4:1:1", 250, 70, 1, 1, 0, HV(4, 1, 1, 1, 1, 1, 4, 1) },
	{ "CMYK 4:4:4 progressive", 150, 113, 0, 1, 1, HV(1, 1, 1, 1, 1, 1, 1, 1) },
	{ "YCCK 4:2:0 progressive", 177, 133, 1, 1, 1, HV(2, 2, 1, 1, 1, 1, 2, 2) },
	{ "CMYK 1x1", 1, 1, 0, 1, 0, HV(1, 1, 1, 1, 1, 1, 1, 1) },
	{ "YCCK 4:2:0 17x9", 17, 9, 1, 1, 0, HV(2, 2, 1, 1, 1, 1, 2, 2) },
};

/* Every variant, index columns of one MCU and of 64 px, windows equal to the whole decode's;
 * every DCT scale is reached. */
static void test_cmyk_idx_windows_equal_whole_decode(void **state)
{
	uint64_t x = test_xorshift_init(test_seed("test_cmyk_idx_windows_equal_whole_decode",
						  "TEST_CMYK_IDX_SEED"));

	(void)state;
	memset(den_hits, 0, sizeof(den_hits));
	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		const struct cmyk_spec *s = &specs[i];
		uint8_t *px = cmyk_jpeg_pattern(s->w, s->h, i + 1), *f;
		size_t len;
		cmyk_jpeg_make(s, px, &f, &len);
		check_file(s->name, f, len, 8, 12, &x);
		check_file(s->name, f, len, 64, 12, &x);
		free(f);
		free(px);
	}
	for (unsigned den = 1; den <= 8; den *= 2)
		if (!den_hits[den])
			fail_msg("no window was decoded at 1/%u", den);
	printf("windows at 1/1 1/2 1/4 1/8: %u %u %u %u\n", den_hits[1], den_hits[2], den_hits[4],
	       den_hits[8]);
}

/* Only the crop's MCUs are entropy-decoded: with the scan below the first rows destroyed, a crop
 * of the top rows still decodes to the intact record's pixels (the whole-decode path does not). */
static void test_cmyk_idx_decodes_only_the_crop(void **state)
{
	const struct cmyk_spec *s = &specs[2];  /* PIL 4:2:0: 16-px MCU rows */
	uint8_t *px = cmyk_jpeg_pattern(s->w, s->h, 7), *f, *rec;
	size_t len, rlen;
	struct dpk_record r = { 0 };
	struct cdc_repack_opts opt = { 0, 64 };
	char why[256];
	static struct cdc_idx_info info;

	(void)state;
	cmyk_jpeg_make(s, px, &f, &len);
	assert_int_equal(cdc_kind_probe(f, len, &r, why, sizeof(why)), 0);
	assert_int_equal(cdc_kind_pack(DPK_KIND_JPEG_CMYK)->repack(f, len, &opt, &r, &rec, &rlen,
								   why, sizeof(why)), 0);
	assert_int_equal(cdc_idx_parse(rec, rlen, &info, why, sizeof(why)), 0);
	struct dpk_entry ei, ed;
	entry_for(&ei, DPK_KIND_JPEG_IDX_CMYK, rlen, s->w, s->h);
	struct cdc_crop c = { 20, 0, 40, 16 };   /* MCU row 0 (+1 of margin) */
	struct cdc_out o = { .h = 16, .w = 40, .nchw = 0, .flip = 0 };
	uint8_t *want = decode("intact", &ei, rec, &c, &o);
	/* rows 3.. of the scan: 0xFF 0xD9 ... (a marker), so nothing past row 2 decodes */
	struct cdc_idx_point pt;
	assert_int_equal(cdc_idx_point(rec, &info, 3, 0, &pt, why, sizeof(why)), 0);
	uint8_t *bad = malloc(rlen);
	assert_non_null(bad);
	memcpy(bad, rec, rlen);
	size_t from = info.geo.scan_at + pt.bit / 8 + 2;
	assert_true(from + 16 < info.eoi_at);
	memset(bad + from, 0xFF, info.eoi_at - from);
	entry_for(&ed, DPK_KIND_JPEG_IDX_CMYK, rlen, s->w, s->h);
	uint8_t *got = decode("destroyed below the crop", &ed, bad, &c, &o);
	assert_memory_equal(got, want, (size_t)o.h * o.w * 3);
	/* a crop of the destroyed rows is refused by the splice, naming the damage */
	struct cdc_crop low = { 20, 100, 40, 40 };
	uint8_t out[16 * 40 * 3];
	int ret = cdc_kind_load(DPK_KIND_JPEG_IDX_CMYK)->decode(dec, &ed, bad, &low, &o, out, why,
								  sizeof(why));
	if (ret != -EBADMSG || !strstr(why, "JPEG index"))
		fail_msg("a crop of destroyed rows: %d (%s), want -EBADMSG naming the index", ret, why);
	free(got);
	free(want);
	free(bad);
	free(rec);
	free(f);
	free(px);
}

/* Records that lie: a jpeg+idx+cmyk record of 3 components, one whose entry says another size. */
static void test_cmyk_idx_refuses_mismatches(void **state)
{
	const struct cmyk_spec *s = &specs[0];
	uint8_t *px = cmyk_jpeg_pattern(s->w, s->h, 3), *f, *rec, out[8 * 8 * 3];
	size_t len, rlen;
	struct dpk_record r = { 0 };
	struct cdc_repack_opts opt = { 0, 64 };
	struct dpk_entry e;
	struct cdc_crop c = { 0, 0, 50, 50 };
	struct cdc_out o = { .h = 8, .w = 8, .nchw = 0, .flip = 0 };
	char why[256];

	(void)state;
	cmyk_jpeg_make(s, px, &f, &len);
	assert_int_equal(cdc_kind_probe(f, len, &r, why, sizeof(why)), 0);
	assert_int_equal(cdc_kind_pack(DPK_KIND_JPEG_CMYK)->repack(f, len, &opt, &r, &rec, &rlen,
								   why, sizeof(why)), 0);
	entry_for(&e, DPK_KIND_JPEG_IDX_CMYK, rlen, s->w, s->h - 1);
	assert_int_equal(cdc_kind_load(e.kind)->decode(dec, &e, rec, &c, &o, out, why, sizeof(why)),
			 -EBADMSG);
	assert_string_equal(why, "JPEG is 203 x 150, the index says 203 x 149");
	/* a record that is not indexed at all (the file as it was) */
	entry_for(&e, DPK_KIND_JPEG_IDX_CMYK, len, s->w, s->h);
	assert_int_equal(cdc_kind_load(e.kind)->decode(dec, &e, f, &c, &o, out, why, sizeof(why)),
			 -EBADMSG);
	assert_non_null(strstr(why, "JPEG index: "));
	free(rec);
	free(f);
	free(px);
}

/* Real photographs converted to CMYK by PIL (TEST_CMYK_PHOTOS: tests/it_cmyk_idx.sh). */
static void test_cmyk_idx_photos(void **state)
{
	const char *dir = getenv("TEST_CMYK_PHOTOS");
	uint64_t x = test_xorshift_init(test_seed("test_cmyk_idx_photos", "TEST_CMYK_IDX_SEED"));
	int n = 0;

	(void)state;
	if (!dir || !*dir) {
		printf("TEST_CMYK_PHOTOS not set (tests/it_cmyk_idx.sh sets it): skipped\n");
		skip();
	}
	DIR *d = opendir(dir);
	if (!d)
		fail_msg("%s: cannot open", dir);
	struct dirent *de;
	while ((de = readdir(d))) {
		char path[1024];
		if (!strstr(de->d_name, ".jpg"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		FILE *fp = fopen(path, "rb");
		if (!fp)
			fail_msg("%s: cannot open", path);
		fseek(fp, 0, SEEK_END);
		long len = ftell(fp);
		fseek(fp, 0, SEEK_SET);
		uint8_t *f = malloc((size_t)len);
		assert_non_null(f);
		assert_int_equal(fread(f, 1, (size_t)len, fp), (size_t)len);
		fclose(fp);
		check_file(de->d_name, f, (size_t)len, 64, 6, &x);
		free(f);
		n++;
	}
	closedir(d);
	if (n == 0)
		fail_msg("%s holds no .jpg", dir);
	printf("%d photographs: every window equal\n", n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cmyk_idx_windows_equal_whole_decode),
		cmocka_unit_test(test_cmyk_idx_decodes_only_the_crop),
		cmocka_unit_test(test_cmyk_idx_refuses_mismatches),
		cmocka_unit_test(test_cmyk_idx_photos),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
