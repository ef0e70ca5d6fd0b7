/* test_jpeg_probe.c - the pack-time JPEG probe against real JPEGs made by libjpeg-turbo:
 * dimensions, subsampling and progressive flag match what was encoded; truncation anywhere in
 * the file, non-JPEG data and unsupported processes are rejected with the right error. */
#include "formats/dpk.h"
#include "codec/jpeg_probe.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <cmocka.h>

/* Encode a w x h image with the given subsampling (TJSAMP_*) and pixel format. */
static unsigned char *encode(int w, int h, int samp, int pf, int progressive, unsigned long *len)
{
	tjhandle tj = tjInitCompress();
	int ps = tjPixelSize[pf];
	unsigned char *px = malloc((size_t)w * h * ps), *jpeg = NULL;

	assert_non_null(tj);
	assert_non_null(px);
	for (int i = 0; i < w * h * ps; i++)
		px[i] = (unsigned char)(i * 37 + (i / ps / w) * 11);
	int flags = progressive ? TJFLAG_PROGRESSIVE : 0;
	assert_int_equal(tjCompress2(tj, px, w, 0, h, pf, &jpeg, len, samp, 85, flags), 0);
	free(px);
	tjDestroy(tj);
	return jpeg;
}

/* A JPEG encoded at w x h with subsampling @samp (TJSAMP_*), pixel format @pf and @progressive,
 * and what the probe must say of it. */
static const struct probe_case {
	int w, h, samp, pf, progressive;
	unsigned want_sub, comps;
} probe_cases[] = {
		{ 640, 480, TJSAMP_420, TJPF_RGB, 0, DPK_SUB_420, 3 },
		{ 301, 777, TJSAMP_444, TJPF_RGB, 0, DPK_SUB_444, 3 },
		{ 33, 17, TJSAMP_422, TJPF_RGB, 0, DPK_SUB_422, 3 },
		{ 64, 64, TJSAMP_440, TJPF_RGB, 0, DPK_SUB_440, 3 },
		{ 64, 64, TJSAMP_411, TJPF_RGB, 0, DPK_SUB_411, 3 },
		{ 50, 40, TJSAMP_GRAY, TJPF_GRAY, 0, DPK_SUB_GRAY, 1 },
		{ 500, 375, TJSAMP_420, TJPF_RGB, 1, DPK_SUB_420, 3 },
		{ 1, 1, TJSAMP_444, TJPF_RGB, 1, DPK_SUB_444, 3 },
};

static void test_jpeg_probe_subsampling_modes(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(probe_cases) / sizeof(probe_cases[0]); i++) {
		const struct probe_case *c = &probe_cases[i];
		unsigned long len;
		unsigned char *j = encode(c->w, c->h, c->samp, c->pf, c->progressive, &len);
		struct cdc_jpeg_info ji;
		char err[128];

		int ret = cdc_jpeg_probe(j, len, &ji, err, sizeof(err));

		if (ret != 0 || ji.width != (unsigned)c->w || ji.height != (unsigned)c->h ||
		    ji.subsamp != c->want_sub || ji.components != c->comps ||
		    ji.progressive != (unsigned)c->progressive)
			print_error("row %zu (%dx%d samp %d): probe %d (%s): %ux%u sub %u comps %u "
				    "progressive %u\n", i, c->w, c->h, c->samp, ret, ret ? err : "",
				    ji.width, ji.height, ji.subsamp, ji.components, ji.progressive);
		assert_int_equal(ret, 0);
		assert_int_equal(ji.width, c->w);
		assert_int_equal(ji.height, c->h);
		assert_int_equal(ji.subsamp, c->want_sub);
		assert_int_equal(ji.components, c->comps);
		assert_int_equal(ji.progressive, c->progressive);
		tjFree(j);
	}
}

static void test_jpeg_probe_agrees_with_libjpeg_turbo(void **state)
{
	tjhandle tj = tjInitDecompress();

	(void)state;
	for (int k = 0; k < 40; k++) {
		int w = 8 + k * 23 % 300, h = 8 + k * 41 % 300;
		int samps[] = { TJSAMP_420, TJSAMP_444, TJSAMP_422 };
		unsigned long len;
		unsigned char *j = encode(w, h, samps[k % 3], TJPF_RGB, k % 5 == 0, &len);
		struct cdc_jpeg_info ji;
		int tw, th, ts, tc;

		assert_int_equal(cdc_jpeg_probe(j, len, &ji, NULL, 0), 0);
		assert_int_equal(tjDecompressHeader3(tj, j, len, &tw, &th, &ts, &tc), 0);
		assert_int_equal(ji.width, tw);
		assert_int_equal(ji.height, th);
		assert_int_equal(ji.subsamp, ts);  /* enum dpk_subsamp uses TJSAMP_* values */
		tjFree(j);
	}
	tjDestroy(tj);
}

static void test_jpeg_probe_truncated_anywhere(void **state)
{
	unsigned long len;
	unsigned char *j = encode(200, 150, TJSAMP_420, TJPF_RGB, 0, &len);
	struct cdc_jpeg_info ji;
	char err[128];

	(void)state;
	for (unsigned long cut = 0; cut < len - 1; cut += 1 + cut / 8) {
		int ret = cdc_jpeg_probe(j, cut, &ji, err, sizeof(err));
		assert_int_equal(ret, -EBADMSG);
	}
	assert_int_equal(cdc_jpeg_probe(j, len - 1, &ji, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "truncated"));
	/* Trailing bytes after EOI are tolerated (cameras append data). */
	unsigned char *longer = malloc(len + 100);
	memcpy(longer, j, len);
	memset(longer + len, 0, 100);
	assert_int_equal(cdc_jpeg_probe(longer, len + 100, &ji, err, sizeof(err)), 0);
	free(longer);
	tjFree(j);
}

static unsigned char *encode_cmyk(unsigned long *len)
{
	return encode(40, 30, TJSAMP_444, TJPF_CMYK, 0, len);
}

/* Rewrite the SOF0 marker as SOF3 (lossless): the probe must refuse before the scan. */
static unsigned char *encode_lossless(unsigned long *len)
{
	unsigned char *j = encode(40, 30, TJSAMP_444, TJPF_RGB, 0, len);

	for (unsigned long i = 2; i + 1 < *len; i++)
		if (j[i] == 0xFF && j[i + 1] == 0xC0) {
			j[i + 1] = 0xC3;
			break;
		}
	return j;
}

static const unsigned char png[] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0 };
static const unsigned char soi_only[] = { 0xFF, 0xD8, 0xFF, 0xD9 };
static const unsigned char bad_len[] = { 0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xFF, 0, 0 };

/* An input the probe refuses: @bytes, or what @make encodes (tjFree), and the refusal. */
static const struct refusal {
	const char *name;                       /* the case, as cmocka prints it */
	const unsigned char *bytes;
	size_t len;
	unsigned char *(*make)(unsigned long *len);
	int ret;
	const char *needle;                     /* in the message; NULL: not checked */
} refusals[] = {
	{ "test_jpeg_probe_not_a_jpeg_png", png, sizeof(png), NULL, -EBADMSG, "not a JPEG" },
	{ "test_jpeg_probe_not_a_jpeg_soi_eoi", soi_only, sizeof(soi_only), NULL, -EBADMSG, NULL },
	{ "test_jpeg_probe_not_a_jpeg_bad_length", bad_len, sizeof(bad_len), NULL, -EBADMSG, NULL },
	{ "test_jpeg_probe_not_a_jpeg_empty", (const unsigned char *)"", 0, NULL, -EBADMSG, NULL },
	{ "test_jpeg_probe_cmyk_unsupported", NULL, 0, encode_cmyk, -ENOTSUP, "components" },
	{ "test_jpeg_probe_lossless_unsupported", NULL, 0, encode_lossless, -ENOTSUP, NULL },
};

static void test_jpeg_probe_refused(void **state)
{
	const struct refusal *r = *state;
	unsigned long len = r->len;
	unsigned char *j = r->make ? r->make(&len) : NULL;
	struct cdc_jpeg_info ji;
	char err[128];

	assert_int_equal(cdc_jpeg_probe(j ? j : r->bytes, len, &ji, err, sizeof(err)), r->ret);
	if (r->needle)
		assert_non_null(strstr(err, r->needle));
	tjFree(j);
}

int main(void)
{
	const struct CMUnitTest fixed[] = {
		cmocka_unit_test(test_jpeg_probe_subsampling_modes),
		cmocka_unit_test(test_jpeg_probe_agrees_with_libjpeg_turbo),
		cmocka_unit_test(test_jpeg_probe_truncated_anywhere),
	};
	enum {
		N_FIXED = sizeof(fixed) / sizeof(fixed[0]),
		N_REFUSALS = sizeof(refusals) / sizeof(refusals[0]),
	};
	struct CMUnitTest tests[N_FIXED + N_REFUSALS];

	memcpy(tests, fixed, sizeof(fixed));
	/* One case a row, under the row's name. */
	for (size_t i = 0; i < N_REFUSALS; i++)
		tests[N_FIXED + i] = (struct CMUnitTest){ .name = refusals[i].name,
			.test_func = test_jpeg_probe_refused, .initial_state = (void *)&refusals[i] };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
