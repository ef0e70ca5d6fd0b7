/* test_kind.c - the record-kind tables: every kind of formats/dpk.h has its formats/ row
 * (dpk_kind_info) and its codec row (cdc_kinds[], codec/kind.h) with the operations a job needs,
 * under the same name; values that are no kind are refused everywhere, by name; the pack-time
 * probe finds a JPEG's kind and shape and refuses other files with the closest kind's reason.
 * The image kinds' pixels: tests/test_kind_image.c. */
#include "formats/dpk.h"
#include "codec/kind.h"
#include "codec/kind_load.h"
#include "codec/kind_pack.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <turbojpeg.h>
#include <cmocka.h>

#include "tests/tmpdir.h"

static void test_kind_every_kind_has_both_rows(void **state)
{
	unsigned n = 0;

	(void)state;
	for (unsigned k = DPK_KIND_JPEG; k <= DPK_KIND_MAX; k++) {
		const struct dpk_kind_info *fi = dpk_kind_info(k);
		const struct cdc_kind *lk = cdc_kind_get(k);

		if (!fi || !lk)
			fail_msg("kind %u: no %s row", k, fi ? "codec/kind.c" : "formats/dpk_index.c");
		assert_ptr_equal(lk, &cdc_kinds[k]);
		assert_int_equal(lk->kind, k);
		assert_string_equal(lk->name, fi->name);
		assert_string_equal(dpk_kind_name(k), fi->name);
		assert_ptr_equal(cdc_kind_find(fi->name), lk);
		assert_non_null(lk->load);
		assert_ptr_equal(cdc_kind_load(k), lk->load);
		assert_ptr_equal(cdc_kind_pack(k), lk->pack);
		assert_non_null(lk->load->accepts);
		assert_non_null(lk->load->decode);
		if (lk->pack) {  /* made from files: a probe and extensions, both */
			assert_non_null(lk->pack->probe);
			assert_non_null(lk->pack->exts);
		}
		n++;
	}
	assert_int_equal(n, DPK_KIND_MAX);
	assert_string_equal(cdc_kind_get(DPK_KIND_JPEG)->name, "jpeg");
	assert_string_equal(cdc_kind_get(DPK_KIND_RAW)->name, "raw");
	assert_string_equal(cdc_kind_get(DPK_KIND_RAW_ZSTD)->name, "raw+zstd");
	assert_string_equal(cdc_kind_get(DPK_KIND_JPEG_RST)->name, "jpeg+rst");
	assert_string_equal(cdc_kind_get(DPK_KIND_JPEG_IDX)->name, "jpeg+idx");
	/* every JPEG kind is a whole JPEG file; dpack repacks plain JPEGs into jpeg+idx (or, when
	 * asked, jpeg+rst) */
	assert_true(dpk_kind_info(DPK_KIND_JPEG)->flags & DPK_KF_JPEG);
	assert_true(dpk_kind_info(DPK_KIND_JPEG_RST)->flags & DPK_KF_JPEG);
	assert_true(dpk_kind_info(DPK_KIND_JPEG_IDX)->flags & DPK_KF_JPEG);
	assert_false(dpk_kind_info(DPK_KIND_RAW)->flags & DPK_KF_JPEG);
	assert_non_null(cdc_kind_pack(DPK_KIND_JPEG)->repack);
	assert_null(cdc_kind_pack(DPK_KIND_JPEG_RST));
	assert_null(cdc_kind_pack(DPK_KIND_JPEG_IDX));
	assert_null(cdc_kind_pack(DPK_KIND_RAW));
	/* the image files decoded whole: made from files, checked by a whole decode at pack time */
	const unsigned whole[] = { DPK_KIND_JPEG_CMYK, DPK_KIND_PNG, DPK_KIND_WEBP, DPK_KIND_PNM,
				   DPK_KIND_BMP, DPK_KIND_TIFF };
	const char *const names[] = { "jpeg+cmyk", "png", "webp", "pnm", "bmp", "tiff" };
	for (size_t i = 0; i < 6; i++) {
		assert_string_equal(cdc_kind_get(whole[i])->name, names[i]);
		assert_non_null(cdc_kind_pack(whole[i])->probe);
		assert_non_null(cdc_kind_pack(whole[i])->repack);
		assert_int_equal(dpk_kind_info(whole[i])->flags, DPK_KF_IMAGE);
	}
	/* CMYK indexed: made by jpeg+cmyk's repack, from no file of its own; RGB as jpeg+cmyk */
	assert_string_equal(cdc_kind_get(DPK_KIND_JPEG_IDX_CMYK)->name, "jpeg+idx+cmyk");
	assert_null(cdc_kind_pack(DPK_KIND_JPEG_IDX_CMYK));
	assert_non_null(cdc_kind_load(DPK_KIND_JPEG_IDX_CMYK)->decode);
	assert_int_equal(dpk_kind_info(DPK_KIND_JPEG_IDX_CMYK)->flags, DPK_KF_IMAGE);
}

static void test_kind_unknown_refused(void **state)
{
	const unsigned bad[] = { 0, DPK_KIND_MAX + 1, 255, 1u << 20 };

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_null(dpk_kind_info(bad[i]));
		assert_null(cdc_kind_get(bad[i]));
		assert_null(cdc_kind_pack(bad[i]));
		assert_null(cdc_kind_load(bad[i]));
		assert_string_equal(dpk_kind_name(bad[i]), "?");
	}
	assert_null(cdc_kind_find("gif"));
	assert_null(cdc_kind_find(""));
	assert_null(cdc_kind_find("JPEG"));
}

/* The writer refuses a record of no kind; a file whose index holds one is refused at open with
 * the sample and the reason. */
static void test_kind_unknown_in_a_file_refused_by_name(void **state)
{
	char dir[64], path[96], err[256];
	uint8_t data[6] = { 1, 2, 3, 4, 5, 6 };
	struct dpk_record r = { .kind = DPK_KIND_RAW, .data = data, .length = 6, .shape = { 6 },
				.ndim = 1 };
	struct dpk_writer *w;
	struct dpk *d;

	(void)state;
	assert_int_equal(tmpdir_create(dir, sizeof(dir), "test_kind"), 0);
	snprintf(path, sizeof(path), "%s/k.dpk", dir);
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	r.kind = (enum dpk_kind)(DPK_KIND_MAX + 1);
	assert_int_equal(dpk_writer_add(w, &r), -EINVAL);
	dpk_writer_destroy(w);

	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	r.kind = DPK_KIND_RAW;
	assert_int_equal(dpk_writer_add(w, &r), 0);
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	/* the kind byte of entry 0, patched; the index checksum is skipped so the entry is judged */
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	off_t at = (off_t)(dpk_header_get(d)->index_offset + offsetof(struct dpk_entry, kind));
	dpk_close(d);
	FILE *f = fopen(path, "r+b");
	assert_non_null(f);
	assert_int_equal(fseeko(f, at, SEEK_SET), 0);
	assert_int_equal(fputc(DPK_KIND_MAX + 1, f), DPK_KIND_MAX + 1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(dpk_open(path, DPK_OPEN_NO_INDEX_CHECK, &d, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "sample 0: unknown record kind"));
	assert_int_equal(tmpdir_remove(dir), 0);
}

/* dpack's probe: a JPEG file becomes a JPEG record with its shape from the frame header; other
 * bytes are refused with the reason of the kind that came closest. */
static void test_kind_probe(void **state)
{
	uint8_t rgb[24 * 40 * 3] = { 0 }, *jpg = NULL;
	unsigned long len = 0;
	struct dpk_record r;
	char why[256];
	tjhandle tj = tjInitCompress();

	(void)state;
	assert_non_null(tj);
	assert_int_equal(tjCompress2(tj, rgb, 40, 0, 24, TJPF_RGB, &jpg, &len, TJSAMP_420, 90,
				     TJFLAG_PROGRESSIVE), 0);
	memset(&r, 0, sizeof(r));
	assert_int_equal(cdc_kind_probe(jpg, len, &r, why, sizeof(why)), 0);
	assert_int_equal(r.kind, DPK_KIND_JPEG);
	assert_int_equal(r.ndim, 3);
	assert_int_equal(r.shape[0], 24);
	assert_int_equal(r.shape[1], 40);
	assert_int_equal(r.shape[2], 3);
	assert_int_equal(r.subsamp, DPK_SUB_420);
	assert_int_equal(r.flags, DPK_F_PROGRESSIVE);

	/* truncated: a JPEG, damaged: the JPEG probe's own reason */
	assert_int_equal(cdc_kind_probe(jpg, len / 2, &r, why, sizeof(why)), -EBADMSG);
	assert_non_null(strstr(why, "truncated"));
	/* a PNG signature cut short: the PNG probe's reason */
	static const uint8_t png[] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0 };
	assert_int_equal(cdc_kind_probe(png, sizeof(png), &r, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "PNG without an IHDR chunk first (10 bytes)");
	/* no kind's magic: the first probe's reason */
	static const uint8_t text[] = "not an image\n";
	assert_int_equal(cdc_kind_probe(text, sizeof(text), &r, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "not a JPEG (no SOI marker)");
	assert_int_equal(cdc_kind_probe(png, 0, &r, why, sizeof(why)), -EBADMSG);
	tjFree(jpg);
	tjDestroy(tj);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kind_every_kind_has_both_rows),
		cmocka_unit_test(test_kind_unknown_refused),
		cmocka_unit_test(test_kind_unknown_in_a_file_refused_by_name),
		cmocka_unit_test(test_kind_probe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
