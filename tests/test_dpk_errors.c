/* test_dpk_errors.c - every refusal of dpk_open, one table row each: a valid dataset is written,
 * one field of its header, class table or index is edited and the section's checksum made right
 * again (so that the check under test, not the checksum, must catch it), and dpk_open must refuse
 * it with the errno and the message that names the fault (and the sample). Each bound is tried at
 * its limit (accepted) and one past it (refused) where the format has one. */
#include "formats/dpk.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <cmocka.h>

#include "tests/tmpdir.h"

#define NREC 4
#define REC_BYTES 12   /* raw 3 x 4 */

static char dir[64], path[160];

static int setup(void **state)
{
	(void)state;
	if (tmpdir_create(dir, sizeof(dir), "test_dpk_errors") < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/d.dpk", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

/* The dataset every row edits: NREC raw records (kind RAW) of 3 x 4, labels alternating 0 and 1,
 * classes "a" and "bb". */
static void write_good(void)
{
	static const char *const names[] = { "a", "bb" };
	struct dpk_writer *w;
	uint8_t data[REC_BYTES];

	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_set_classes(w, names, 2), 0);
	for (unsigned i = 0; i < NREC; i++) {
		struct dpk_record r = { .kind = DPK_KIND_RAW, .label = i % 2, .data = data,
					.length = sizeof(data), .shape = { 3, 4 }, .ndim = 2 };
		memset(data, (int)i + 1, sizeof(data));
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
}

/* The whole file, to edit in memory. */
struct image {
	uint8_t *b;
	size_t n;
	struct dpk_header *h;  /* into b */
};

static void image_load(struct image *im)
{
	struct stat st;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	im->n = (size_t)st.st_size;
	im->b = malloc(im->n + 4096);
	assert_non_null(im->b);
	assert_int_equal(pread(fd, im->b, im->n, 0), (ssize_t)im->n);
	close(fd);
	im->h = (struct dpk_header *)im->b;
}

static struct dpk_entry *entry(struct image *im, unsigned i)
{
	return (struct dpk_entry *)(im->b + im->h->index_offset) + i;
}

/* Make every checksum right again, write the file, dpk_open it. */
static int image_open(struct image *im, char *err, size_t errlen)
{
	struct dpk_header *h = im->h;
	struct dpk *d = NULL;

	if (h->index_offset + h->index_size <= im->n)
		h->index_xxh3 = XXH3_64bits(im->b + h->index_offset, h->index_size);
	if (h->classes_offset + h->classes_size <= im->n)
		h->classes_xxh3 = XXH3_64bits(im->b + h->classes_offset, h->classes_size);
	h->header_xxh3 = XXH3_64bits(h, offsetof(struct dpk_header, header_xxh3));
	int fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, im->b, im->n), (ssize_t)im->n);
	close(fd);
	err[0] = '\0';
	int ret = dpk_open(path, 0, &d, err, errlen);
	if (ret < 0)
		assert_null(d);
	dpk_close(d);
	return ret;
}

/* ---- the rows ---- */

typedef void (*edit_fn)(struct image *im);

static void e_header_size(struct image *im) { im->h->header_size = 512; }
static void e_entry_size(struct image *im) { im->h->entry_size = 63; }
static void e_index_size(struct image *im) { im->h->index_size -= sizeof(struct dpk_entry); }
static void e_data_size(struct image *im) { im->h->data_size += 1; }
static void e_classes_size_short(struct image *im)
{
	/* 2 classes need at least 8 bytes (two lengths): 7 is one short */
	uint64_t d = im->h->classes_size - 7;
	im->h->classes_size = 7;
	im->h->data_size += d;  /* the sections still tile the file */
	im->h->classes_offset += d;
}
static void e_kinds_unknown(struct image *im) { im->h->kinds |= 1u << (DPK_KIND_MAX + 1); }
static void e_kinds_bit0(struct image *im) { im->h->kinds |= 1u; }
/* version 1: the bytes version 2 gives to features and the aux section are reserved */
static void e_reserved0(struct image *im) { im->h->features = 1; }
static void e_reserved3(struct image *im) { im->h->aux_max = 1; }
static void e_kinds_mismatch(struct image *im) { im->h->kinds |= 1u << DPK_KIND_JPEG; }
static void e_version(struct image *im) { im->h->version = DPK_VERSION + 1; }

/* Class table: [u32 1]["a"][u32 2]["bb"] then zero padding. */
static uint8_t *classes(struct image *im) { return im->b + im->h->classes_offset; }
static void e_class_len_past_table(struct image *im)
{
	uint32_t n = (uint32_t)im->h->classes_size;
	memcpy(classes(im) + 5, &n, 4);
}
static void e_class_len_nul(struct image *im) { classes(im)[4] = 'a'; classes(im)[9] = 0; }
static void e_class_padding(struct image *im) { classes(im)[im->h->classes_size - 1] = 1; }
static void e_class_count_more(struct image *im)
{
	/* as many classes as the table has 4-byte lengths (allowed by the header check): past the
	 * two names, the zero padding reads as empty names until the table runs out */
	im->h->class_count = (uint32_t)(im->h->classes_size / 4);
}
static void e_entry_ndim0(struct image *im) { entry(im, 1)->ndim = 0; }
static void e_entry_dim_past_ndim(struct image *im) { entry(im, 1)->shape[3] = 1; }
static void e_entry_dim_zero(struct image *im) { entry(im, 1)->shape[0] = 0; }
static void e_entry_dim_max(struct image *im)
{
	entry(im, 1)->shape[0] = DPK_DIM_MAX + 1;
}
static void e_entry_kind0(struct image *im) { entry(im, 1)->kind = 0; }
static void e_entry_kind_max(struct image *im) { entry(im, 1)->kind = DPK_KIND_MAX + 1; }
static void e_entry_subsamp_raw(struct image *im) { entry(im, 1)->subsamp = DPK_SUB_420; }
static void e_entry_raw_size(struct image *im) { entry(im, 1)->raw_size += 1; }
static void e_entry_len0(struct image *im) { entry(im, 1)->length = 0; }
static void e_entry_overflow(struct image *im) { entry(im, 3)->offset = UINT64_MAX - 4; }
static void e_entry_overlap(struct image *im) { entry(im, 2)->offset -= 1; }
static void e_entry_past_data(struct image *im)
{
	struct dpk_entry *e = entry(im, 3);
	/* a raw record's length is its raw size: grow the shape with it */
	e->shape[1] = 5;
	e->raw_size = 15;
	e->length = 15;
}
static void e_entry_raw_len(struct image *im)
{
	entry(im, 3)->length = REC_BYTES - 1;  /* stays inside the data, but is not the tensor */
}
static void e_entry_label_neg(struct image *im) { entry(im, 0)->label = -1; }
static void e_entry_label_past(struct image *im) { entry(im, 0)->label = 2; }
static void e_entry_reserved(struct image *im) { entry(im, 2)->reserved = 1; }
static void e_entry_flags(struct image *im) { entry(im, 2)->flags = 0x2; }
/* At the limit: accepted. */
static void e_entry_label_last(struct image *im) { entry(im, 0)->label = 1; }
static void e_entry_progressive(struct image *im) { entry(im, 2)->flags = DPK_F_PROGRESSIVE; }

static const struct row {
	const char *name;
	edit_fn edit;
	int err;              /* 0: accepted */
	const char *msg;      /* what the message must contain */
} rows[] = {
	{ "header_size", e_header_size, -EBADMSG, "bad header_size, entry_size or data_offset" },
	{ "entry_size", e_entry_size, -EBADMSG, "bad header_size, entry_size or data_offset" },
	{ "index_size", e_index_size, -EBADMSG, "index size does not match 4 samples" },
	{ "data_size", e_data_size, -EBADMSG, "sections do not tile the file" },
	{ "classes_size below 4 per class", e_classes_size_short, -EBADMSG,
	  "class table size 7 for 2 classes" },
	{ "kinds: a bit past DPK_KIND_MAX", e_kinds_unknown, -EBADMSG, "unknown record kinds" },
	{ "kinds: bit 0 (no kind 0)", e_kinds_bit0, -EBADMSG, "unknown record kinds 0x5" },
	{ "reserved0", e_reserved0, -EBADMSG, "reserved fields are not zero" },
	{ "reserved[3]", e_reserved3, -EBADMSG, "reserved fields are not zero" },
	{ "kinds: one no record has", e_kinds_mismatch, -EBADMSG,
	  "header kinds 0x6 but index has 0x4" },
	{ "version", e_version, -EPROTO, "format version 3; this build reads versions 1 to 2" },
	{ "class name runs past the table", e_class_len_past_table, -EBADMSG,
	  "class 1: bad name length" },
	{ "class name holds a NUL", e_class_len_nul, -EBADMSG, "class 1: bad name length 2" },
	{ "class table padding", e_class_padding, -EBADMSG, "class table padding is not zero" },
	{ "class count past the table", e_class_count_more, -EBADMSG, "class table ends inside class" },
	{ "ndim 0", e_entry_ndim0, -EBADMSG, "sample 1: ndim out of range 1..4" },
	{ "dimension past ndim", e_entry_dim_past_ndim, -EBADMSG,
	  "sample 1: nonzero dimension past ndim" },
	{ "dimension 0", e_entry_dim_zero, -EBADMSG, "sample 1: dimension out of range 1..2^20" },
	{ "dimension 2^20 + 1", e_entry_dim_max, -EBADMSG, "sample 1: dimension out of range" },
	{ "kind 0", e_entry_kind0, -EBADMSG, "sample 1: unknown record kind" },
	{ "kind DPK_KIND_MAX + 1", e_entry_kind_max, -EBADMSG, "sample 1: unknown record kind" },
	{ "subsampling on a raw record", e_entry_subsamp_raw, -EBADMSG,
	  "sample 1: subsampling set on a kind without one" },
	{ "raw_size", e_entry_raw_size, -EBADMSG,
	  "sample 1: raw_size 13 is not the product of its shape" },
	{ "length 0", e_entry_len0, -EBADMSG, "sample 1: absurd length 0" },
	{ "offset + length overflows", e_entry_overflow, -EBADMSG,
	  "sample 3: offset + length overflows" },
	{ "overlap", e_entry_overlap, -EBADMSG, "sample 2: record at" },
	{ "past the data section", e_entry_past_data, -EBADMSG,
	  "sample 3: record [" },
	{ "raw length is not the tensor's", e_entry_raw_len, -EBADMSG,
	  "sample 3: raw record of 11 bytes for shape of 12" },
	{ "label -1", e_entry_label_neg, -EBADMSG, "sample 0: label -1 outside 2 classes" },
	{ "label = class_count", e_entry_label_past, -EBADMSG, "sample 0: label 2 outside 2 classes" },
	{ "label = class_count - 1", e_entry_label_last, 0, "" },
	{ "entry reserved", e_entry_reserved, -EBADMSG, "sample 2: reserved bits set" },
	{ "entry flags: unknown bit", e_entry_flags, -EBADMSG, "sample 2: reserved bits set" },
	{ "entry flags: progressive", e_entry_progressive, 0, "" },
};

static void test_dpk_open_refuses_each_fault(void **state)
{
	(void)state;
	write_good();
	struct image good;
	image_load(&good);
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		const struct row *r = &rows[k];
		struct image im = { .b = malloc(good.n + 4096), .n = good.n };
		char err[256];

		assert_non_null(im.b);
		memcpy(im.b, good.b, good.n);
		im.h = (struct dpk_header *)im.b;
		r->edit(&im);
		int ret = image_open(&im, err, sizeof(err));
		if (ret != r->err || !strstr(err, r->msg))
			fail_msg("%s: %d \"%s\", expected %d \"%s\"", r->name, ret, err, r->err, r->msg);
		free(im.b);
	}
	free(good.b);
}

/* The same with no index checksum check asked for: an edited index whose checksum is wrong is
 * accepted as long as every entry is valid, and refused when one is not. */
static void test_dpk_open_no_index_check_still_checks_entries(void **state)
{
	struct image im;
	struct dpk *d;
	char err[256];

	(void)state;
	write_good();
	image_load(&im);
	entry(&im, 0)->label = 1;  /* valid, but the checksum no longer matches */
	im.h->header_xxh3 = XXH3_64bits(im.h, offsetof(struct dpk_header, header_xxh3));
	int fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, im.b, im.n), (ssize_t)im.n);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "index checksum"));
	assert_int_equal(dpk_open(path, DPK_OPEN_NO_INDEX_CHECK, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_entry_get(d, 0)->label, 1);
	dpk_close(d);
	entry(&im, 0)->label = 5;
	assert_int_equal(pwrite(fd, im.b, im.n, 0), (ssize_t)im.n);
	close(fd);
	assert_int_equal(dpk_open(path, DPK_OPEN_NO_INDEX_CHECK, &d, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "sample 0: label 5 outside 2 classes"));
	free(im.b);
}

/* ---- the record bound and the overlap checks at the first and the last entry ----
 * Each edit is made on sample 0 or on the last sample, where the checks' neighbours are the
 * header's end and the data section's end (no entry before or after), and tried the three ways
 * an index is read: copied and checked whole at open, mapped, and read an entry (with its
 * neighbours) at a time; the last two check an entry when it is loaded. */

static void x_first_before_data(struct image *im) { entry(im, 0)->offset -= 1; }
static void x_first_into_next(struct image *im)
{
	struct dpk_entry *e = entry(im, 0);
	/* a raw record's length is its raw size: 13 x 1 */
	e->shape[0] = 13, e->shape[1] = 1;
	e->raw_size = e->length = 13;
}
static void x_first_len_max(struct image *im) { entry(im, 0)->length = DPK_RECORD_MAX; }
static void x_first_len_past(struct image *im) { entry(im, 0)->length = DPK_RECORD_MAX + 1; }
static void x_first_len0(struct image *im) { entry(im, 0)->length = 0; }
static void x_last_into_prev(struct image *im) { entry(im, NREC - 1)->offset -= 1; }
static void x_last_past_data(struct image *im) { entry(im, NREC - 1)->length += 1; }
static void x_last_len_max(struct image *im) { entry(im, NREC - 1)->length = DPK_RECORD_MAX; }
static void x_last_len_past(struct image *im) { entry(im, NREC - 1)->length = DPK_RECORD_MAX + 1; }
static void x_last_len0(struct image *im) { entry(im, NREC - 1)->length = 0; }
static void x_none(struct image *im) { (void)im; }
/* the neighbours' own ends: the second's previous is the first, the one before the last's next
 * is the last */
static void x_second_into_first(struct image *im) { entry(im, 1)->offset -= 1; }
static void x_before_last_into_last(struct image *im)
{
	struct dpk_entry *e = entry(im, NREC - 2);
	e->shape[0] = 13, e->shape[1] = 1;
	e->raw_size = e->length = 13;
}

static const struct end_row {
	const char *name;
	edit_fn edit;
	uint64_t at;            /* the sample loaded (a lazy index checks it when it is loaded) */
	const char *msg;        /* "" : accepted */
	const char *msg_whole;  /* when the copied index's check says it otherwise (NULL: msg) */
} end_rows[] = {
	{ "unedited, first", x_none, 0, "", NULL },
	{ "unedited, last", x_none, NREC - 1, "", NULL },
	{ "unedited, second", x_none, 1, "", NULL },
	{ "unedited, one before the last", x_none, NREC - 2, "", NULL },
	{ "second starts inside the first", x_second_into_first, 1,
	  "sample 1: record at 4107 overlaps the previous one (ends at 4108)", NULL },
	{ "one before the last ends inside the last", x_before_last_into_last, NREC - 2,
	  "sample 2: record [4120, 4133) overlaps the next one (starts at 4132)",
	  "sample 3: record at 4132 overlaps the previous one (ends at 4133)" },
	{ "first starts in the header", x_first_before_data, 0,
	  "sample 0: record at 4095 overlaps the previous one (ends at 4096)", NULL },
	{ "first ends inside the second", x_first_into_next, 0,
	  "sample 0: record [4096, 4109) overlaps the next one (starts at 4108)",
	  "sample 1: record at 4108 overlaps the previous one (ends at 4109)" },
	{ "first of DPK_RECORD_MAX bytes", x_first_len_max, 0,
	  "sample 0: record [4096, 17179873280) runs past the data section", NULL },
	{ "first of DPK_RECORD_MAX + 1 bytes", x_first_len_past, 0,
	  "sample 0: absurd length 17179869185", NULL },
	{ "first of 0 bytes", x_first_len0, 0, "sample 0: absurd length 0", NULL },
	{ "last starts inside the one before", x_last_into_prev, NREC - 1,
	  "sample 3: record at 4131 overlaps the previous one (ends at 4132)", NULL },
	{ "last ends past the data", x_last_past_data, NREC - 1,
	  "sample 3: record [4132, 4145) runs past the data section (ends at 4144)", NULL },
	{ "last of DPK_RECORD_MAX bytes", x_last_len_max, NREC - 1,
	  "sample 3: record [4132, 17179873316) runs past the data section", NULL },
	{ "last of DPK_RECORD_MAX + 1 bytes", x_last_len_past, NREC - 1,
	  "sample 3: absurd length 17179869185", NULL },
	{ "last of 0 bytes", x_last_len0, NREC - 1, "sample 3: absurd length 0", NULL },
};

/* Open the file written by image_open's way with @flags and load sample @at: the error's message
 * into @err ("" when it loads). */
static void load_at(unsigned flags, uint64_t at, char *err, size_t errlen)
{
	struct dpk *d = NULL;

	err[0] = '\0';
	if (dpk_open(path, flags, &d, err, errlen) < 0)
		return;
	struct dpk_entry e;
	dpk_entry_load(d, at, &e, err, errlen);
	dpk_close(d);
}

static void test_dpk_bounds_at_first_and_last_entry(void **state)
{
	static const unsigned modes[] = { 0, DPK_OPEN_MAP, DPK_OPEN_READ_INDEX };

	(void)state;
	write_good();
	struct image good;
	image_load(&good);
	for (size_t k = 0; k < sizeof(end_rows) / sizeof(end_rows[0]); k++) {
		const struct end_row *r = &end_rows[k];
		struct image im = { .b = malloc(good.n + 4096), .n = good.n };
		char err[256];

		assert_non_null(im.b);
		memcpy(im.b, good.b, good.n);
		im.h = (struct dpk_header *)im.b;
		r->edit(&im);
		image_open(&im, err, sizeof(err));  /* writes the file */
		for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
			const char *want = !modes[m] && r->msg_whole ? r->msg_whole : r->msg;
			load_at(modes[m], r->at, err, sizeof(err));
			if (*want ? !strstr(err, want) : *err != '\0')
				fail_msg("%s (open flags %u): \"%s\", expected \"%s\"", r->name,
					 modes[m], err, want);
		}
		free(im.b);
	}
	free(good.b);
}

/* Not a file: a folder is -EINVAL, a missing path the open's -ENOENT, each with its message. */
static void test_dpk_open_not_a_file(void **state)
{
	struct dpk *d = (struct dpk *)1;
	char err[256] = "";

	(void)state;
	assert_int_equal(dpk_open(dir, 0, &d, err, sizeof(err)), -EINVAL);
	assert_null(d);
	assert_string_equal(err, "not a regular file");
	char missing[200];
	snprintf(missing, sizeof(missing), "%s/none.dpk", dir);
	assert_int_equal(dpk_open(missing, 0, &d, err, sizeof(err)), -ENOENT);
	assert_null(d);
	assert_non_null(strstr(err, "No such file"));  /* the caller names the path */
}

/* The names of every subsampling and kind, and "?" one past the known ones. */
static void test_dpk_names(void **state)
{
	static const struct { unsigned v; const char *name; } subs[] = {
		{ DPK_SUB_444, "4:4:4" }, { DPK_SUB_422, "4:2:2" }, { DPK_SUB_420, "4:2:0" },
		{ DPK_SUB_GRAY, "gray" }, { DPK_SUB_440, "4:4:0" }, { DPK_SUB_411, "4:1:1" },
		{ DPK_SUB_OTHER, "other" }, { DPK_SUB_411 + 1, "?" }, { 254, "?" },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		assert_string_equal(dpk_subsamp_name(subs[i].v), subs[i].name);
	assert_string_equal(dpk_kind_name(DPK_KIND_JPEG_IDX), "jpeg+idx");
	assert_string_equal(dpk_kind_name(DPK_KIND_MAX + 1), "?");
	assert_string_equal(dpk_kind_name(0), "?");
	assert_null(dpk_kind_info(DPK_KIND_MAX + 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dpk_open_refuses_each_fault, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_open_no_index_check_still_checks_entries,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_open_not_a_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_bounds_at_first_and_last_entry, setup,
						teardown),
		cmocka_unit_test(test_dpk_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
