/* test_dpk_aux.c - per-record auxiliary fields of a .dpk (version 2, docs/FORMAT.md "Auxiliary
 * fields"): written and read back byte for byte (non-UTF-8 bytes, empty fields, a field at its
 * bound of DPK_AUX_FIELD_MAX and one past it), a file without them staying version 1, no labels,
 * the identity covering them, and every hand edit of the aux section (offset, length, checksum,
 * field lengths, header bounds, an unknown feature) refused by name, copied and mapped. */
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
static char dir[64], path[160];
static uint8_t big[DPK_AUX_FIELD_MAX + 1];

static int setup(void **state)
{
	(void)state;
	if (tmpdir_create(dir, sizeof(dir), "test_dpk_aux") < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/d.dpk", dir);
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7 + 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

/* Record i's caption and json: 0 "a cat", "{}"; 1 invalid UTF-8, ""; 2 "" (empty), "{\"k\":1}";
 * 3 DPK_AUX_FIELD_MAX bytes (the bound), "x". */
static const uint8_t bad_utf8[] = { 0xff, 0xfe, 'o', 0xc3, 0x28, 0 };
static void caption(unsigned i, const void **p, uint32_t *n)
{
	static const char *const c[] = { "a cat", (const char *)bad_utf8, "", NULL };
	if (i == 3) {
		*p = big;
		*n = DPK_AUX_FIELD_MAX;
		return;
	}
	*p = c[i];
	*n = i == 1 ? sizeof(bad_utf8) : (uint32_t)strlen(c[i]);
}
static const char *const json[] = { "{}", "", "{\"k\":1}", "x" };

static void write_aux(int no_labels)
{
	static const char *const names[] = { "txt", "json" };
	struct dpk_writer *w;
	uint8_t data[12];

	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_set_aux(w, names, 2, no_labels), 0);
	for (unsigned i = 0; i < NREC; i++) {
		struct dpk_record r = { .kind = DPK_KIND_RAW, .label = i, .data = data,
					.length = sizeof(data), .shape = { 3, 4 }, .ndim = 2 };
		memset(data, (int)i + 1, sizeof(data));
		caption(i, &r.aux[0], &r.aux_len[0]);
		r.aux[1] = json[i];
		r.aux_len[1] = (uint32_t)strlen(json[i]);
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
}

static void check_fields(struct dpk *d)
{
	static uint8_t buf[DPK_AUX_RECORD_MAX];
	char err[256];

	assert_int_equal(dpk_aux_fields(d), 2);
	assert_string_equal(dpk_aux_name(d, 0), "txt");
	assert_string_equal(dpk_aux_name(d, 1), "json");
	assert_null(dpk_aux_name(d, 2));
	assert_int_equal(dpk_aux_max(d), 8 + DPK_AUX_FIELD_MAX + 1);
	for (unsigned i = 0; i < NREC; i++) {
		struct dpk_entry e;
		const uint8_t *p;
		const void *want;
		uint32_t n, wn;
		assert_int_equal(dpk_entry_load(d, i, &e, err, sizeof(err)), 0);
		ssize_t len = dpk_aux_read(d, i, &e, buf, sizeof(buf), err, sizeof(err));
		assert_true(len > 0);
		assert_int_equal(dpk_aux_field(buf, (size_t)len, 2, 0, &p, &n), 0);
		caption(i, &want, &wn);
		assert_int_equal(n, wn);
		if (n)
			assert_memory_equal(p, want, n);
		assert_int_equal(dpk_aux_field(buf, (size_t)len, 2, 1, &p, &n), 0);
		assert_int_equal(n, strlen(json[i]));
		assert_memory_equal(p, json[i], n);
		assert_int_equal(dpk_aux_field(buf, (size_t)len, 2, 2, &p, &n), -ERANGE);
		assert_int_equal(dpk_aux_field(buf, (size_t)len - 1, 2, 0, &p, &n), -EBADMSG);
	}
}

static void test_dpk_aux_round_trip(void **state)
{
	struct dpk *d;
	char err[256];

	(void)state;
	write_aux(0);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_header_get(d)->version, 2);
	assert_int_equal(dpk_header_get(d)->features, DPK_FEAT_AUX);
	assert_int_equal(dpk_has_labels(d), 1);
	check_fields(d);
	dpk_close(d);
	/* mapped and read entry by entry: each aux entry read and checked at use */
	assert_int_equal(dpk_open(path, DPK_OPEN_MAP, &d, err, sizeof(err)), 0);
	check_fields(d);
	dpk_close(d);
	assert_int_equal(dpk_open(path, DPK_OPEN_READ_INDEX, &d, err, sizeof(err)), 0);
	check_fields(d);
	dpk_close(d);
}

static void test_dpk_aux_field_bound(void **state)
{
	static const char *const names[] = { "txt" };
	struct dpk_writer *w;
	uint8_t data[1] = { 1 };
	struct dpk_record r = { .kind = DPK_KIND_RAW, .data = data, .length = 1, .shape = { 1 },
				.ndim = 1, .aux = { big }, .aux_len = { DPK_AUX_FIELD_MAX + 1 } };

	(void)state;
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_set_aux(w, names, 1, 0), 0);
	assert_int_equal(dpk_writer_add(w, &r), -EMSGSIZE);  /* one past the bound */
	r.aux_len[0] = DPK_AUX_FIELD_MAX;
	assert_int_equal(dpk_writer_add(w, &r), 0);          /* at it */
	dpk_writer_destroy(w);
	/* names: bad characters, empty, too long, twice, too many */
	static const char *const bad[][2] = { { "a b", NULL }, { "", NULL }, { "x", "x" } };
	char longname[DPK_AUX_NAME_MAX + 2];
	memset(longname, 'n', sizeof(longname));
	longname[DPK_AUX_NAME_MAX + 1] = '\0';
	const char *lp[1] = { longname };
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_set_aux(w, bad[0], 1, 0), -EINVAL);
	assert_int_equal(dpk_writer_set_aux(w, bad[1], 1, 0), -EINVAL);
	assert_int_equal(dpk_writer_set_aux(w, bad[2], 2, 0), -EINVAL);
	assert_int_equal(dpk_writer_set_aux(w, lp, 1, 0), -EINVAL);
	longname[DPK_AUX_NAME_MAX] = '\0';
	assert_int_equal(dpk_writer_set_aux(w, lp, 1, 0), 0);
	const char *nine[DPK_AUX_FIELDS_MAX + 1] = { "a", "b", "c", "d", "e", "f", "g", "h", "i" };
	assert_int_equal(dpk_writer_set_aux(w, nine, DPK_AUX_FIELDS_MAX + 1, 0), -EINVAL);
	assert_int_equal(dpk_writer_set_aux(w, nine, DPK_AUX_FIELDS_MAX, 0), 0);
	dpk_writer_destroy(w);
}

static void test_dpk_aux_v1_without_features_and_no_labels(void **state)
{
	struct dpk_writer *w;
	struct dpk *d;
	char err[256];
	uint8_t data[1] = { 1 };
	struct dpk_record r = { .kind = DPK_KIND_RAW, .label = 5, .data = data, .length = 1,
				.shape = { 1 }, .ndim = 1 };
	uint8_t id1[DPK_IDENTITY_SIZE], id2[DPK_IDENTITY_SIZE];

	(void)state;
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_add(w, &r), 0);
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_header_get(d)->version, 1);  /* what old readers read */
	assert_int_equal(dpk_aux_fields(d), 0);
	struct dpk_entry e;
	assert_int_equal(dpk_entry_load(d, 0, &e, NULL, 0), 0);
	assert_int_equal(dpk_aux_read(d, 0, &e, err, sizeof(err), NULL, 0), 0);
	dpk_identity(d, id1);
	dpk_close(d);
	/* no labels: version 2, every label -1 */
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_set_aux(w, NULL, 0, 1), 0);
	assert_int_equal(dpk_writer_add(w, &r), 0);
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_header_get(d)->version, 2);
	assert_int_equal(dpk_has_labels(d), 0);
	assert_int_equal(dpk_entry_load(d, 0, &e, NULL, 0), 0);
	assert_int_equal(e.label, -1);
	dpk_identity(d, id2);
	assert_memory_not_equal(id1, id2, sizeof(id1));
	dpk_close(d);
}

static void test_dpk_aux_identity_covers_fields(void **state)
{
	struct dpk *d;
	char err[256];
	uint8_t a[DPK_IDENTITY_SIZE], b[DPK_IDENTITY_SIZE];

	(void)state;
	write_aux(0);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	dpk_identity(d, a);
	dpk_close(d);
	/* the same records, one json byte different ("{}" -> "{]"): another identity */
	static const char *const names[] = { "txt", "json" };
	struct dpk_writer *w;
	uint8_t data[12];
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_set_aux(w, names, 2, 0), 0);
	for (unsigned i = 0; i < NREC; i++) {
		struct dpk_record r = { .kind = DPK_KIND_RAW, .label = i, .data = data,
					.length = sizeof(data), .shape = { 3, 4 }, .ndim = 2 };
		memset(data, (int)i + 1, sizeof(data));
		caption(i, &r.aux[0], &r.aux_len[0]);
		r.aux[1] = i ? json[i] : "{]";
		r.aux_len[1] = (uint32_t)strlen(r.aux[1]);
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	dpk_identity(d, b);
	dpk_close(d);
	assert_memory_not_equal(a, b, sizeof(a));
}

/* ---- hand edits ---- */

struct image {
	uint8_t *b;
	size_t n;
	struct dpk_header *h;
};

static void load(struct image *im)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	im->n = (size_t)st.st_size;
	im->b = malloc(im->n);
	assert_int_equal(pread(fd, im->b, im->n, 0), (ssize_t)im->n);
	close(fd);
	im->h = (struct dpk_header *)(void *)im->b;
}

static uint64_t names_size(const struct image *im)
{
	return im->h->aux_size - NREC * sizeof(struct dpk_aux_entry);
}
static struct dpk_aux_entry *aent(struct image *im, unsigned i)
{
	return (struct dpk_aux_entry *)(void *)(im->b + im->h->aux_offset + names_size(im)) + i;
}
static uint8_t *blob(struct image *im, unsigned i) { return im->b + aent(im, i)->offset; }
static void reblob(struct image *im, unsigned i)
{
	aent(im, i)->xxh3 = XXH3_64bits(blob(im, i), aent(im, i)->length);
}

static void store(struct image *im, int fix_aux)
{
	if (fix_aux)
		im->h->aux_xxh3 = XXH3_64bits(im->b + im->h->aux_offset, im->h->aux_size);
	im->h->header_xxh3 = XXH3_64bits(im->h, offsetof(struct dpk_header, header_xxh3));
	int fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, im->b, im->n), (ssize_t)im->n);
	close(fd);
}

typedef void (*edit_fn)(struct image *im);
static void x_offset(struct image *im) { aent(im, 1)->offset += 1; }
static void x_len_past_max(struct image *im) { aent(im, 1)->length = im->h->aux_max + 1; }
static void x_len_short(struct image *im) { aent(im, 1)->length = 7; }
static void x_reserved(struct image *im) { aent(im, 1)->reserved = 1; }
static void x_checksum(struct image *im) { blob(im, 2)[8] ^= 1; }
static void x_field_len_sum(struct image *im)
{
	uint32_t l = 1;  /* caption "" of record 2 says 1 byte: the sum no longer fits */
	memcpy(blob(im, 2), &l, 4);
	reblob(im, 2);
}
static void x_field_past_bound(struct image *im)
{
	/* record 3: txt at DPK_AUX_FIELD_MAX + 1 and json 0 (the sum still fits) */
	uint32_t l0 = DPK_AUX_FIELD_MAX + 1, l1 = 0;
	memcpy(blob(im, 3), &l0, 4);
	memcpy(blob(im, 3) + 4, &l1, 4);
	reblob(im, 3);
}
static void x_aux_max_past(struct image *im) { im->h->aux_max = DPK_AUX_RECORD_MAX + 1; }
static void x_aux_fields_9(struct image *im) { im->h->aux_fields = DPK_AUX_FIELDS_MAX + 1; }
static void x_feature_unknown(struct image *im) { im->h->features |= 0x4; }
static void x_feature_dropped(struct image *im) { im->h->features = 0; }
static void x_name(struct image *im) { im->b[im->h->aux_offset + 4] = ' '; }
static void x_aux_size(struct image *im) { im->h->aux_size -= 1; }
static void x_section_sum(struct image *im) { aent(im, 0)->reserved = 0; im->h->aux_xxh3 ^= 1; }
static void x_label_no_labels(struct image *im) { im->h->features |= DPK_FEAT_NO_LABELS; }

static const struct row {
	const char *name;
	edit_fn edit;
	int fix_aux;          /* recompute the aux section's checksum after the edit */
	int at_open;          /* refused by a copied open (else only at dpk_aux_read) */
	int err;
	const char *msg;
} rows[] = {
	{ "aux offset", x_offset, 1, 1, -EBADMSG, "sample 1: aux fields at" },
	{ "aux length past aux_max", x_len_past_max, 1, 1, -EBADMSG, "sample 1: aux fields of" },
	{ "aux length under 4 x fields", x_len_short, 1, 1, -EBADMSG, "outside 8.." },
	{ "aux entry reserved", x_reserved, 1, 1, -EBADMSG, "sample 1: aux entry: reserved" },
	{ "blob checksum", x_checksum, 1, 0, -EBADMSG, "sample 2: aux fields checksum mismatch" },
	{ "field lengths", x_field_len_sum, 1, 0, -EBADMSG, "sample 2: aux field lengths add up" },
	{ "field past bound", x_field_past_bound, 1, 0, -EBADMSG, "aux field txt of 65537 bytes" },
	{ "aux_max past bound", x_aux_max_past, 1, 1, -EBADMSG, "aux_max 262145" },
	{ "9 fields", x_aux_fields_9, 1, 1, -EBADMSG, "header: 9 aux fields" },
	{ "unknown feature", x_feature_unknown, 1, 1, -EPROTO, "unknown features 0x4" },
	{ "feature bit dropped", x_feature_dropped, 1, 1, -EBADMSG, "without the aux feature" },
	{ "field name", x_name, 1, 1, -EBADMSG, "aux field 0: bad name" },
	{ "aux size", x_aux_size, 1, 1, -EBADMSG, "sections do not tile" },
	{ "aux section checksum", x_section_sum, 0, 1, -EBADMSG, "aux section checksum mismatch" },
	{ "labels in a no-label set", x_label_no_labels, 1, 1, -EBADMSG, "sample 0: label 0" },
};

static void test_dpk_aux_edits_refused(void **state)
{
	static uint8_t buf[DPK_AUX_RECORD_MAX + 16];

	(void)state;
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		const struct row *r = &rows[k];
		struct image im;
		struct dpk *d;
		char err[256] = "";
		write_aux(0);
		load(&im);
		r->edit(&im);
		store(&im, r->fix_aux);
		free(im.b);
		print_message("row %s\n", r->name);
		for (int mapped = 0; mapped < 2; mapped++) {
			int ret = dpk_open(path, mapped ? DPK_OPEN_MAP : 0, &d, err, sizeof(err));
			if (ret == 0) {
				/* refused at use: the entry of each record, then its blob */
				for (unsigned i = 0; ret == 0 && i < NREC; i++) {
					struct dpk_entry e;
					ret = dpk_entry_load(d, i, &e, err, sizeof(err));
					ssize_t n = ret ? ret : dpk_aux_read(d, i, &e, buf, sizeof(buf),
									    err, sizeof(err));
					ret = n < 0 ? (int)n : 0;
				}
				dpk_close(d);
				if (!mapped)
					assert_false(r->at_open);
			}
			if (mapped && r->fix_aux == 0)
				continue;  /* a mapped open does not hash the section (dpack verify does) */
			if (ret != r->err || !strstr(err, r->msg))
				fail_msg("row %s (%s): %d \"%s\"", r->name, mapped ? "mapped" : "copied",
					 ret, err);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dpk_aux_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_aux_field_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_aux_v1_without_features_and_no_labels, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dpk_aux_identity_covers_fields, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_aux_edits_refused, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
