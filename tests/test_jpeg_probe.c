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

static void check(int w, int h, int samp, int pf, int progressive, unsigned want_sub, unsigned comps)
{
	unsigned long len;
	unsigned char *j = encode(w, h, samp, pf, progressive, &len);
	struct cdc_jpeg_info ji;
	char err[128];

	assert_int_equal(cdc_jpeg_probe(j, len, &ji, err, sizeof(err)), 0);
	assert_int_equal(ji.width, w);
	assert_int_equal(ji.height, h);
	assert_int_equal(ji.subsamp, want_sub);
	assert_int_equal(ji.components, comps);
	assert_int_equal(ji.progressive, progressive);
	tjFree(j);
}

static void test_jpeg_probe_subsampling_modes(void **state)
{
	(void)state;
	check(640, 480, TJSAMP_420, TJPF_RGB, 0, DPK_SUB_420, 3);
	check(301, 777, TJSAMP_444, TJPF_RGB, 0, DPK_SUB_444, 3);
	check(33, 17, TJSAMP_422, TJPF_RGB, 0, DPK_SUB_422, 3);
	check(64, 64, TJSAMP_440, TJPF_RGB, 0, DPK_SUB_440, 3);
	check(64, 64, TJSAMP_411, TJPF_RGB, 0, DPK_SUB_411, 3);
	check(50, 40, TJSAMP_GRAY, TJPF_GRAY, 0, DPK_SUB_GRAY, 1);
	check(500, 375, TJSAMP_420, TJPF_RGB, 1, DPK_SUB_420, 3);
	check(1, 1, TJSAMP_444, TJPF_RGB, 1, DPK_SUB_444, 3);
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

static void test_jpeg_probe_not_a_jpeg(void **state)
{
	static const unsigned char png[] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0 };
	static const unsigned char soi_only[] = { 0xFF, 0xD8, 0xFF, 0xD9 };
	static const unsigned char bad_len[] = { 0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xFF, 0, 0 };
	struct cdc_jpeg_info ji;
	char err[128];

	(void)state;
	assert_int_equal(cdc_jpeg_probe(png, sizeof(png), &ji, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "not a JPEG"));
	assert_int_equal(cdc_jpeg_probe(soi_only, sizeof(soi_only), &ji, err, sizeof(err)), -EBADMSG);
	assert_int_equal(cdc_jpeg_probe(bad_len, sizeof(bad_len), &ji, err, sizeof(err)), -EBADMSG);
	assert_int_equal(cdc_jpeg_probe("", 0, &ji, err, sizeof(err)), -EBADMSG);
}

static void test_jpeg_probe_cmyk_unsupported(void **state)
{
	unsigned long len;
	unsigned char *j = encode(40, 30, TJSAMP_444, TJPF_CMYK, 0, &len);
	struct cdc_jpeg_info ji;
	char err[128];

	(void)state;
	assert_int_equal(cdc_jpeg_probe(j, len, &ji, err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "components"));
	tjFree(j);
}

static void test_jpeg_probe_lossless_unsupported(void **state)
{
	unsigned long len;
	unsigned char *j = encode(40, 30, TJSAMP_444, TJPF_RGB, 0, &len);
	struct cdc_jpeg_info ji;
	char err[128];

	(void)state;
	/* Rewrite the SOF0 marker as SOF3 (lossless): the probe must refuse before the scan. */
	for (unsigned long i = 2; i + 1 < len; i++)
		if (j[i] == 0xFF && j[i + 1] == 0xC0) {
			j[i + 1] = 0xC3;
			break;
		}
	assert_int_equal(cdc_jpeg_probe(j, len, &ji, err, sizeof(err)), -ENOTSUP);
	tjFree(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jpeg_probe_subsampling_modes),
		cmocka_unit_test(test_jpeg_probe_agrees_with_libjpeg_turbo),
		cmocka_unit_test(test_jpeg_probe_truncated_anywhere),
		cmocka_unit_test(test_jpeg_probe_not_a_jpeg),
		cmocka_unit_test(test_jpeg_probe_cmyk_unsupported),
		cmocka_unit_test(test_jpeg_probe_lossless_unsupported),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
