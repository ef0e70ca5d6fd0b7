/* test_dpk.c - the packed format: round trips, random access, and every kind of corruption
 * (truncation, flipped bytes, hostile index entries) giving -EBADMSG or -EPROTO, never a crash.
 * Fault injection: write() is wrapped to fail with ENOSPC after a set number of calls. */
/* link: -Wl,--wrap=write */
#include "formats/dpk.h"
#include "tests/tmpdir.h"

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
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>
#include <cmocka.h>

/* ---- write() fault injection ---- */

ssize_t __real_write(int fd, const void *buf, size_t n);
static int write_fail_after = -1;  /* -1: never; else the number of calls that still succeed */

ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
	if (write_fail_after == 0) {
		errno = ENOSPC;
		return -1;
	}
	if (write_fail_after > 0)
		write_fail_after--;
	return __real_write(fd, buf, n);
}

/* ---- helpers ---- */

static char dir[64];
static char path[128];

static int setup(void **state)
{
	(void)state;
	assert_int_equal(tmpdir_create(dir, sizeof(dir), "test_dpk"), 0);
	snprintf(path, sizeof(path), "%s/d.dpk", dir);
	write_fail_after = -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((seed * 131 + i * 7 + (i >> 5)) & 0xff);
}

/* What the stored bytes of a raw or raw+zstd record decode to (@cap >= raw_size): the bytes the
 * writer was given back, or -EBADMSG when the frame does not hold exactly raw_size bytes. The
 * daemon decodes records in codec/decode.c; formats/ only stores them, so the test decodes
 * here to check that what it stored is what comes back. */
static ssize_t stored_decode(const struct dpk_entry *e, const void *src, void *dst, size_t cap)
{
	assert_true(cap >= e->raw_size);
	if (e->kind == DPK_KIND_RAW) {
		memcpy(dst, src, e->raw_size);
		return (ssize_t)e->raw_size;
	}
	assert_int_equal(e->kind, DPK_KIND_RAW_ZSTD);
	if (ZSTD_getFrameContentSize(src, e->length) != e->raw_size)
		return -EBADMSG;
	size_t n = ZSTD_decompress(dst, e->raw_size, src, e->length);
	return ZSTD_isError(n) || n != e->raw_size ? -EBADMSG : (ssize_t)n;
}

/* A dataset of @n samples cycling through the three kinds; sample i has label i % 3 and
 * content fill(..., i). Returns the bytes of the original (decoded) tensors in *raw. */
static void write_dataset(uint64_t n)
{
	static const char *const classes[] = { "cat", "dog", "bird \"quoted\"" };
	struct dpk_writer *w;
	uint8_t buf[4096], z[8192];

	assert_int_equal(dpk_writer_create(path, 0, &w), 0);
	assert_int_equal(dpk_writer_set_classes(w, classes, 3), 0);
	for (uint64_t i = 0; i < n; i++) {
		struct dpk_record r = { .label = (int64_t)(i % 3) };
		uint32_t h = 4 + (uint32_t)(i % 13), wd = 5 + (uint32_t)(i % 7);
		size_t len = (size_t)h * wd * 3;

		fill(buf, len, i);
		r.ndim = 3;
		r.shape[0] = h;
		r.shape[1] = wd;
		r.shape[2] = 3;
		switch (i % 3) {
		case 0:  /* the format stores JPEG bytes as they are; content is opaque here */
			r.kind = DPK_KIND_JPEG;
			r.subsamp = DPK_SUB_420;
			r.flags = (i % 2) ? DPK_F_PROGRESSIVE : 0;
			r.data = buf;
			r.length = len / 2 + 1;
			break;
		case 1:
			r.kind = DPK_KIND_RAW;
			r.data = buf;
			r.length = len;
			break;
		default: {
			size_t zn = ZSTD_compress(z, sizeof(z), buf, len, 3);
			assert_false(ZSTD_isError(zn));
			r.kind = DPK_KIND_RAW_ZSTD;
			r.data = z;
			r.length = zn;
		}
		}
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
}

static off_t file_size(void)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

static void flip(off_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= 0x5a;
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

static int open_err(unsigned flags, char *err, size_t len)
{
	struct dpk *d = NULL;
	int ret = dpk_open(path, flags, &d, err, len);

	if (ret == 0)
		dpk_close(d);
	else
		assert_null(d);
	return ret;
}

static struct dpk_header read_header(void)
{
	struct dpk_header h;
	int fd = open(path, O_RDONLY);

	assert_int_equal(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	return h;
}

/* Write @h over the file's header, its checksum re-sealed. */
static void write_header(struct dpk_header *h)
{
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	h->header_xxh3 = XXH3_64bits(h, offsetof(struct dpk_header, header_xxh3));
	assert_int_equal(pwrite(fd, h, sizeof(*h), 0), (ssize_t)sizeof(*h));
	close(fd);
}

/* Overwrite index entry @i, then re-seal the index and header checksums so that only the
 * entry validation can catch it (a hostile or buggy writer, not bit rot). */
static void forge_entry(uint64_t i, void (*mutate)(struct dpk_entry *, const struct dpk_header *))
{
	struct dpk_header h = read_header();
	int fd = open(path, O_RDWR);
	uint8_t *index = malloc(h.index_size);
	struct dpk_entry e;

	assert_non_null(index);
	assert_int_equal(pread(fd, index, h.index_size, (off_t)h.index_offset), (ssize_t)h.index_size);
	memcpy(&e, index + i * sizeof(e), sizeof(e));
	mutate(&e, &h);
	memcpy(index + i * sizeof(e), &e, sizeof(e));
	h.index_xxh3 = XXH3_64bits(index, h.index_size);
	h.header_xxh3 = XXH3_64bits(&h, offsetof(struct dpk_header, header_xxh3));
	assert_int_equal(pwrite(fd, index, h.index_size, (off_t)h.index_offset), (ssize_t)h.index_size);
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	free(index);
}

/* ---- round trip ---- */

static void test_dpk_roundtrip_all_kinds(void **state)
{
	struct dpk *d;
	char err[256];
	uint8_t buf[8192], dec[8192], want[4096];

	(void)state;
	write_dataset(30);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_count(d), 30);
	assert_int_equal(dpk_class_count(d), 3);
	assert_string_equal(dpk_class_name(d, 0), "cat");
	assert_string_equal(dpk_class_name(d, 2), "bird \"quoted\"");
	assert_null(dpk_class_name(d, 3));
	assert_null(dpk_entry_get(d, 30));
	assert_int_equal(dpk_header_get(d)->kinds, (1u << 1) | (1u << 2) | (1u << 3));
	for (uint64_t i = 0; i < 30; i++) {
		const struct dpk_entry *e = dpk_entry_get(d, i);
		uint32_t h = 4 + (uint32_t)(i % 13), wd = 5 + (uint32_t)(i % 7);
		size_t len = (size_t)h * wd * 3;

		assert_non_null(e);
		assert_int_equal(e->label, (int64_t)(i % 3));
		assert_int_equal(e->shape[0], h);
		assert_int_equal(e->shape[1], wd);
		assert_int_equal(e->raw_size, len);
		fill(want, len, i);
		ssize_t n = dpk_read(d, i, buf, sizeof(buf));
		assert_int_equal(n, (ssize_t)e->length);
		switch (e->kind) {
		case DPK_KIND_JPEG:
			assert_int_equal(e->subsamp, DPK_SUB_420);
			assert_int_equal(e->flags, (i % 2) ? DPK_F_PROGRESSIVE : 0);
			assert_memory_equal(buf, want, len / 2 + 1);
			break;
		case DPK_KIND_RAW:
		case DPK_KIND_RAW_ZSTD:
			assert_int_equal(stored_decode(e, buf, dec, sizeof(dec)), (ssize_t)len);
			assert_memory_equal(dec, want, len);
			break;
		default:
			fail_msg("sample %llu has kind %u", (unsigned long long)i, e->kind);
		}
	}
	assert_int_equal(dpk_read(d, 0, buf, 1), -ENOSPC);
	assert_int_equal(dpk_read(d, 30, buf, sizeof(buf)), -ERANGE);
	dpk_close(d);
	dpk_close(NULL);
}

static void test_dpk_random_access(void **state)
{
	struct dpk *d;
	char err[256];
	uint8_t buf[8192], dec[8192], want[4096];
	uint64_t seed = (uint64_t)time(NULL);

	(void)state;
	printf("seed %llu\n", (unsigned long long)seed);
	rng_state = seed;
	write_dataset(3000);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	for (int k = 0; k < 5000; k++) {
		uint64_t i = rnd() % 3000;
		const struct dpk_entry *e = dpk_entry_get(d, i);

		assert_int_equal(dpk_read(d, i, buf, sizeof(buf)), (ssize_t)e->length);
		fill(want, e->raw_size, i);
		if (e->kind != DPK_KIND_JPEG) {
			assert_int_equal(stored_decode(e, buf, dec, sizeof(dec)), (ssize_t)e->raw_size);
			assert_memory_equal(dec, want, e->raw_size);
		} else {
			assert_memory_equal(buf, want, e->length);
		}
	}
	dpk_close(d);
}

static void test_dpk_empty_dataset(void **state)
{
	struct dpk_writer *w;
	struct dpk *d;
	char err[256];

	(void)state;
	assert_int_equal(dpk_writer_create(path, 0, &w), 0);
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_count(d), 0);
	assert_int_equal(dpk_class_count(d), 0);
	dpk_close(d);
}

/* ---- corruption ---- */

static void test_dpk_truncate_every_16th(void **state)
{
	char err[256];

	(void)state;
	write_dataset(200);
	off_t size = file_size();
	for (int k = 15; k >= 0; k--) {
		assert_int_equal(truncate(path, size * k / 16), 0);
		assert_int_equal(open_err(0, err, sizeof(err)), -EBADMSG);
		assert_true(strlen(err) > 0);
	}
}

static void test_dpk_flip_each_header_byte(void **state)
{
	char err[256];

	(void)state;
	write_dataset(10);
	for (off_t off = 0; off < DPK_HEADER_SIZE; off++) {
		flip(off);
		int ret = open_err(0, err, sizeof(err));
		if (off >= (off_t)offsetof(struct dpk_header, version) && off < 12)
			assert_int_equal(ret, -EPROTO);
		else
			assert_int_equal(ret, -EBADMSG);
		flip(off);
	}
	assert_int_equal(open_err(0, err, sizeof(err)), 0);
}

static void test_dpk_flip_index_byte(void **state)
{
	char err[256];

	(void)state;
	write_dataset(100);
	struct dpk_header h = read_header();
	for (uint64_t k = 0; k < 64; k++) {
		off_t off = (off_t)(h.index_offset + (k * 101) % h.index_size);
		flip(off);
		assert_int_equal(open_err(0, err, sizeof(err)), -EBADMSG);
		assert_non_null(strstr(err, "index checksum"));
		flip(off);
	}
	/* Class table too. */
	flip((off_t)h.classes_offset + 5);
	assert_int_equal(open_err(0, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "class table"));
}

static void test_dpk_flip_record_byte(void **state)
{
	struct dpk *d;
	char err[256];
	uint8_t buf[8192];

	(void)state;
	write_dataset(50);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	const struct dpk_entry *e = dpk_entry_get(d, 17);
	off_t off = (off_t)(e->offset + e->length / 2);
	dpk_close(d);
	flip(off);
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);  /* index is fine */
	for (uint64_t i = 0; i < 50; i++)
		assert_int_equal(dpk_read(d, i, buf, sizeof(buf)) == -EBADMSG, i == 17);
	dpk_close(d);
}

static void mut_past_eof(struct dpk_entry *e, const struct dpk_header *h)
{
	e->offset = h->file_size + 4096;
}

static void mut_overlap(struct dpk_entry *e, const struct dpk_header *h)
{
	(void)h;
	e->offset -= 1;
}

static void mut_overflow(struct dpk_entry *e, const struct dpk_header *h)
{
	(void)h;
	e->length = UINT64_MAX - e->offset + 2;
}

static void mut_absurd_shape(struct dpk_entry *e, const struct dpk_header *h)
{
	(void)h;
	e->shape[0] = 0xffffffffu;
}

static void mut_shape_product(struct dpk_entry *e, const struct dpk_header *h)
{
	(void)h;
	e->shape[0] = 1u << 20;
	e->shape[1] = 1u << 20;
	e->shape[2] = 3;
	e->raw_size = 3ull << 40;
}

static void mut_label(struct dpk_entry *e, const struct dpk_header *h)
{
	e->label = h->class_count;
}

static void mut_kind(struct dpk_entry *e, const struct dpk_header *h)
{
	(void)h;
	e->kind = DPK_KIND_MAX + 1;
}

static void mut_raw_length(struct dpk_entry *e, const struct dpk_header *h)
{
	(void)h;
	e->raw_size += 1;
	e->shape[0] += 1;  /* product no longer matches either */
}

static void test_dpk_hostile_entries_name_the_sample(void **state)
{
	static void (*const muts[])(struct dpk_entry *, const struct dpk_header *) = {
		mut_past_eof, mut_overlap, mut_overflow, mut_absurd_shape, mut_shape_product,
		mut_label, mut_kind, mut_raw_length,
	};
	char err[256];

	(void)state;
	for (size_t m = 0; m < sizeof(muts) / sizeof(muts[0]); m++) {
		write_dataset(40);
		forge_entry(7, muts[m]);  /* sample 7 is raw (7 % 3 == 1) */
		assert_int_equal(open_err(0, err, sizeof(err)), -EBADMSG);
		assert_non_null(strstr(err, "sample 7"));
		assert_int_equal(unlink(path), 0);
	}
}

/* Mapped (DPK_OPEN_MAP) or read an entry at a time (DPK_OPEN_READ_INDEX): open walks nothing,
 * so a forged entry does not fail it; the entry fails its check where it is used, naming the
 * sample, as the whole-index check at open does, and the entries far from it load. */
static const unsigned lazy_flags[] = { DPK_OPEN_MAP, DPK_OPEN_READ_INDEX };

static void test_dpk_mapped_entries_checked_at_use(void **state)
{
	static void (*const muts[])(struct dpk_entry *, const struct dpk_header *) = {
		mut_past_eof, mut_overlap, mut_overflow, mut_absurd_shape, mut_shape_product,
		mut_label, mut_kind, mut_raw_length,
	};
	struct dpk_entry e;
	struct dpk *d;
	char err[256];

	(void)state;
	for (size_t m = 0; m < 2 * sizeof(muts) / sizeof(muts[0]); m++) {
		unsigned fl = lazy_flags[m & 1];
		write_dataset(40);
		forge_entry(7, muts[m / 2]);
		assert_int_equal(dpk_open(path, fl, &d, err, sizeof(err)), 0);
		assert_int_equal(dpk_mapped(d), fl == DPK_OPEN_MAP);
		assert_int_equal(dpk_entries_read(d), fl == DPK_OPEN_READ_INDEX);
		assert_null(dpk_entry_get(d, 7));
		err[0] = '\0';
		assert_int_equal(dpk_entry_load(d, 7, &e, err, sizeof(err)), -EBADMSG);
		assert_non_null(strstr(err, "sample 7"));
		assert_int_equal(e.length, 0);  /* zeroed or the forged copy: never read by */
		assert_int_equal(dpk_entry_load(d, 0, &e, err, sizeof(err)), 0);
		assert_int_equal(dpk_entry_load(d, 39, &e, err, sizeof(err)), 0);
		assert_int_equal(dpk_entry_load(d, 40, &e, err, sizeof(err)), -ERANGE);
		assert_int_equal(dpk_read(d, 7, err, sizeof(err)), -EBADMSG);
		dpk_close(d);
		assert_int_equal(unlink(path), 0);
	}
}

/* A label at the last class loads; one past it does not (the bound, mapped). The overlap check
 * is the neighbour's too: sample 6 ends where 7 now starts, one byte early. */
static void mut_label_last(struct dpk_entry *e, const struct dpk_header *h)
{
	e->label = h->class_count - 1;
}

static void test_dpk_mapped_bounds_at_limit(void **state)
{
	struct dpk_entry e;
	struct dpk *d;
	char err[256];

	(void)state;
	for (size_t f = 0; f < 2; f++) {
	unsigned fl = lazy_flags[f];
	write_dataset(20);
	forge_entry(7, mut_label_last);
	assert_int_equal(dpk_open(path, fl, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_entry_load(d, 7, &e, err, sizeof(err)), 0);
	assert_int_equal(e.label, 2);
	dpk_close(d);
	forge_entry(7, mut_label);
	assert_int_equal(dpk_open(path, fl, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_entry_load(d, 7, &e, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "label 3 outside 3 classes"));
	dpk_close(d);
	forge_entry(7, mut_label_last);
	forge_entry(7, mut_overlap);
	assert_int_equal(dpk_open(path, fl, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_entry_load(d, 6, &e, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "sample 6: record"));
	assert_non_null(strstr(err, "overlaps the next one"));
	assert_int_equal(dpk_entry_load(d, 5, &e, err, sizeof(err)), 0);
	dpk_close(d);
	assert_int_equal(unlink(path), 0);
	}
}

/* Mapped, read and copied opens agree on every entry (the first and the last: a read takes the
 * neighbours on one side only) and on the identity. */
static void test_dpk_mapped_matches_copy(void **state)
{
	uint8_t ida[DPK_IDENTITY_SIZE], idb[DPK_IDENTITY_SIZE];
	struct dpk *a, *b, *c;
	struct dpk_entry e;
	char err[256];

	(void)state;
	write_dataset(300);
	assert_int_equal(dpk_open(path, 0, &a, err, sizeof(err)), 0);
	assert_int_equal(dpk_open(path, DPK_OPEN_MAP, &b, err, sizeof(err)), 0);
	assert_int_equal(dpk_open(path, DPK_OPEN_READ_INDEX | DPK_OPEN_MAP, &c, err, sizeof(err)), 0);
	assert_int_equal(dpk_mapped(a), 0);
	assert_int_equal(dpk_mapped(b), 1);
	assert_int_equal(dpk_mapped(c), 0);
	assert_int_equal(dpk_entries_read(b), 0);
	assert_int_equal(dpk_entries_read(c), 1);
	for (uint64_t i = 0; i < 300; i++) {
		assert_int_equal(dpk_entry_load(b, i, &e, err, sizeof(err)), 0);
		assert_memory_equal(&e, dpk_entry_get(a, i), sizeof(e));
		assert_int_equal(dpk_entry_load(c, i, &e, err, sizeof(err)), 0);
		assert_memory_equal(&e, dpk_entry_get(a, i), sizeof(e));
		assert_int_equal(dpk_entry_load(a, i, &e, err, sizeof(err)), 0);
		assert_memory_equal(&e, dpk_entry_get(a, i), sizeof(e));
	}
	assert_int_equal(dpk_entry_load(c, 300, &e, err, sizeof(err)), -ERANGE);
	dpk_identity(a, ida);
	dpk_identity(b, idb);
	assert_memory_equal(ida, idb, sizeof(ida));
	dpk_identity(c, idb);
	assert_memory_equal(ida, idb, sizeof(ida));
	dpk_close(a);
	dpk_close(b);
	dpk_close(c);
}

/* One entry: a read with no neighbour on either side. */
static void test_dpk_read_index_single_entry(void **state)
{
	struct dpk_entry e;
	struct dpk *a, *c;
	char err[256];

	(void)state;
	write_dataset(1);
	assert_int_equal(dpk_open(path, 0, &a, err, sizeof(err)), 0);
	assert_int_equal(dpk_open(path, DPK_OPEN_READ_INDEX, &c, err, sizeof(err)), 0);
	assert_int_equal(dpk_entry_load(c, 0, &e, err, sizeof(err)), 0);
	assert_memory_equal(&e, dpk_entry_get(a, 0), sizeof(e));
	assert_int_equal(dpk_entry_load(c, 1, &e, err, sizeof(err)), -ERANGE);
	dpk_close(a);
	dpk_close(c);
}

/* An index read an entry at a time, the file cut short under it: entries past the cut load as
 * -EBADMSG naming the sample and the truncation (no mapping, so no SIGBUS), those before it load. */
static void test_dpk_read_index_truncated(void **state)
{
	struct dpk *d;
	struct dpk_entry e;
	char err[256];

	(void)state;
	write_dataset(3000);
	struct dpk_header h = read_header();
	assert_int_equal(dpk_open(path, DPK_OPEN_READ_INDEX, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_entry_load(d, 2999, &e, err, sizeof(err)), 0);
	/* cut just after entry 100's end: 100 still has its next neighbour's offset missing */
	assert_int_equal(truncate(path, (off_t)(h.index_offset + 101 * sizeof(e))), 0);
	assert_int_equal(dpk_entry_load(d, 99, &e, err, sizeof(err)), 0);
	assert_int_equal(dpk_entry_load(d, 100, &e, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "sample 100: the file ends before its index entry"));
	assert_int_equal(e.length, 0);
	assert_int_equal(dpk_entry_load(d, 2999, &e, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "sample 2999"));
	dpk_close(d);
}

/* DPK_OPEN_MAP maps an index of exactly DPK_INDEX_MAP_MAX bytes and reads one an entry larger (a
 * sparse file: the header says so, the pages are never touched). */
static void test_dpk_map_index_max(void **state)
{
	(void)state;
	for (int over = 0; over < 2; over++) {
		uint64_t n = DPK_INDEX_MAP_MAX / sizeof(struct dpk_entry) + (uint64_t)over;
		struct dpk_header h;
		struct dpk *d;
		char err[256];
		write_dataset(1);
		h = read_header();
		/* grow the index to n entries: the data section and the classes stay, the index is
		 * zeros past entry 0 (loads of them would fail; open reads none) */
		h.count = n;
		h.index_size = n * sizeof(struct dpk_entry);
		h.file_size = h.index_offset + h.index_size;
		write_header(&h);
		assert_int_equal(truncate(path, (off_t)h.file_size), 0);
		assert_int_equal(dpk_open(path, DPK_OPEN_MAP, &d, err, sizeof(err)), 0);
		assert_int_equal(dpk_mapped(d), !over);
		assert_int_equal(dpk_entries_read(d), over);
		dpk_close(d);
		assert_int_equal(unlink(path), 0);
	}
}

/* Issue 36: the guard's table (DPK_GUARD_SLOTS mappings) is one for the process, shared by every
 * user of the daemon; each user's mappings are charged to it. At its limit (2: one file, index and
 * data) a user's next file is opened unmapped (a copy and reads), while another user still maps;
 * closing gives the slots back. dpk_guard_held counts exactly. */
static void test_dpk_guard_slots_per_owner_at_limit_and_one_past(void **state)
{
	struct dpk *a, *b, *c, *d;
	char err[256];
	const unsigned flags = DPK_OPEN_MAP | DPK_OPEN_MAP_DATA;

	(void)state;
	write_dataset(100);
	unsigned before = dpk_guard_held(4242);
	dpk_guard_owner(4242, before + 2);
	assert_int_equal(dpk_open(path, flags, &a, err, sizeof(err)), 0);
	assert_true(dpk_mapped(a) && dpk_data_mapped(a));   /* at the limit: 2 held */
	assert_int_equal(dpk_guard_held(4242), before + 2);
	assert_int_equal(dpk_open(path, flags, &b, err, sizeof(err)), 0);
	assert_false(dpk_mapped(b));                         /* one past: refused, copied */
	assert_false(dpk_data_mapped(b));
	assert_int_equal(dpk_guard_held(4242), before + 2);
	struct dpk_entry e;
	assert_int_equal(dpk_entry_load(b, 99, &e, err, sizeof(err)), 0);  /* and it serves */
	dpk_guard_owner(4243, 2);                            /* another user maps */
	assert_int_equal(dpk_open(path, flags, &c, err, sizeof(err)), 0);
	assert_true(dpk_mapped(c) && dpk_data_mapped(c));
	assert_int_equal(dpk_guard_held(4243), 2);
	dpk_close(a);                                        /* the first user's slots come back */
	assert_int_equal(dpk_guard_held(4242), before);
	dpk_guard_owner(4242, before + 2);
	assert_int_equal(dpk_open(path, flags, &d, err, sizeof(err)), 0);
	assert_true(dpk_mapped(d) && dpk_data_mapped(d));
	dpk_guard_owner(-1, 0);
	dpk_close(b);
	dpk_close(c);
	dpk_close(d);
	assert_int_equal(dpk_guard_held(4242), before);
	assert_int_equal(dpk_guard_held(4243), 0);
}

/* A file truncated under its mapped index: its loads fail with -EBADMSG naming the truncation
 * (the SIGBUS guard), the process lives, and another mapped dataset goes on loading. */
static void test_dpk_mapped_truncated_no_sigbus(void **state)
{
	char other[160];
	struct dpk *d, *o;
	struct dpk_entry e;
	char err[256];

	(void)state;
	snprintf(other, sizeof(other), "%s/o.dpk", dir);
	write_dataset(3000);  /* an index of 47 pages */
	assert_int_equal(rename(path, other), 0);
	write_dataset(3000);
	struct dpk_header h = read_header();
	assert_int_equal(dpk_open(path, DPK_OPEN_MAP, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_open(other, DPK_OPEN_MAP, &o, err, sizeof(err)), 0);
	assert_int_equal(dpk_entry_load(d, 2999, &e, err, sizeof(err)), 0);
	assert_int_equal(truncate(path, (off_t)h.index_offset + 4096 * 3), 0);
	int failed = 0;
	for (uint64_t i = 0; i < 3000; i++) {
		int ret = dpk_entry_load(d, i, &e, err, sizeof(err));
		assert_true(ret == 0 || ret == -EBADMSG);
		failed += ret < 0;
	}
	assert_true(failed >= 3000 - 4 * 4096 / 64);  /* all past the cut (and the page before) */
	assert_int_equal(dpk_entry_load(d, 2999, &e, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "truncated while its index was mapped"));
	for (uint64_t i = 0; i < 3000; i++)
		assert_int_equal(dpk_entry_load(o, i, &e, err, sizeof(err)), 0);
	dpk_close(d);
	dpk_close(o);
}

/* The data section mapped (DPK_OPEN_MAP_DATA): records copy out byte for byte; a record of a file
 * cut short under the mapping copies as -EBADMSG, and the process lives. */
static void test_dpk_mapped_data_copy_and_truncation(void **state)
{
	uint8_t buf[8192], want[8192];
	struct dpk_entry e;
	struct dpk *d, *c;
	char err[256];

	(void)state;
	write_dataset(600);
	assert_int_equal(dpk_open(path, 0, &c, err, sizeof(err)), 0);
	assert_int_equal(dpk_open(path, DPK_OPEN_MAP | DPK_OPEN_MAP_DATA, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_data_mapped(d), 1);
	assert_int_equal(dpk_data_mapped(c), 0);
	for (uint64_t i = 0; i < 600; i++) {
		assert_int_equal(dpk_entry_load(d, i, &e, err, sizeof(err)), 0);
		ssize_t n = dpk_record_copy(d, &e, buf, sizeof(buf));
		assert_int_equal(n, (ssize_t)e.length);
		assert_int_equal(dpk_read(c, i, want, sizeof(want)), n);
		assert_memory_equal(buf, want, (size_t)n);
		assert_int_equal(dpk_record_check(&e, buf), 0);
	}
	assert_int_equal(dpk_record_copy(c, dpk_entry_get(c, 0), buf, sizeof(buf)), -EINVAL);
	assert_int_equal(dpk_entry_load(d, 599, &e, err, sizeof(err)), 0);
	assert_int_equal(dpk_record_copy(d, &e, buf, e.length - 1), -ENOSPC);
	assert_int_equal(truncate(path, DPK_HEADER_SIZE + 4096), 0);
	assert_int_equal(dpk_record_copy(d, &e, buf, sizeof(buf)), -EBADMSG);
	dpk_close(d);
	dpk_close(c);
}

/* @n 1-byte raw records (record i is i * 7, label i % 2) into @file, with classes "a" and "bb" (11
 * bytes: the index is padded to its alignment), after dpk_writer_expect(n, n) when @expect. */
static void write_ones(const char *file, uint64_t n, int expect)
{
	static const char *const classes[] = { "a", "bb" };
	struct dpk_writer *w;

	assert_int_equal(dpk_writer_create(file, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_set_classes(w, classes, 2), 0);
	if (expect)
		assert_int_equal(dpk_writer_expect(w, n, n), 0);
	for (uint64_t i = 0; i < n; i++) {
		uint8_t b = (uint8_t)(i * 7);
		struct dpk_record r = { .kind = DPK_KIND_RAW, .label = (int64_t)(i % 2),
					.data = &b, .length = 1, .ndim = 1, .shape = { 1 } };
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
}

/* The writer keeps 65,536 index entries in memory and spills older ones to a file of its own
 * (formats/dpk.c IDX_CHUNK), or, when told the layout (dpk_writer_expect), straight to their
 * place in the output: at exactly that count nothing spills, one past it one chunk does, and
 * two chunks and one; each file opens with its index checksum and every entry right, and the
 * two ways give the same bytes. */
static void test_dpk_writer_index_spills_at_chunk(void **state)
{
	static const uint64_t counts[] = { 65536, 65537, 2 * 65536 + 1 };
	char err[256], other[160], cmd[400];

	(void)state;
	snprintf(other, sizeof(other), "%s/expected.dpk", dir);
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		struct dpk *d;

		write_ones(path, counts[c], 0);
		write_ones(other, counts[c], 1);
		snprintf(cmd, sizeof(cmd), "cmp -s %s %s", path, other);
		if (system(cmd) != 0)
			fail_msg("count %llu: dpk_writer_expect changed the file",
				 (unsigned long long)counts[c]);
		assert_int_equal(dpk_open(other, 0, &d, err, sizeof(err)), 0);
		assert_int_equal(dpk_count(d), counts[c]);
		for (uint64_t i = 0; i < counts[c]; i++) {
			const struct dpk_entry *e = dpk_entry_get(d, i);
			uint8_t b;
			if (e->offset != DPK_HEADER_SIZE + i || e->label != (int64_t)(i % 2))
				fail_msg("count %llu: entry %llu wrong", (unsigned long long)counts[c],
					 (unsigned long long)i);
			assert_int_equal(dpk_read(d, i, &b, 1), 1);
			assert_int_equal(b, (uint8_t)(i * 7));
		}
		dpk_close(d);
		assert_int_equal(unlink(path), 0);
		assert_int_equal(unlink(other), 0);
	}
}

/* dpk_writer_expect's figures are held to: a record past the count, or bytes past the data size,
 * are refused (the last that fits is not); a finish short of them fails and leaves no file;
 * classes after it, a second call, or a call after the first record are refused. */
static void test_dpk_writer_expect_bounds(void **state)
{
	static const char *const one[] = { "x" };
	uint8_t buf[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct dpk_record r = { .kind = DPK_KIND_RAW, .data = buf, .length = 4, .ndim = 1,
				.shape = { 4 } };
	struct dpk_record big = { .kind = DPK_KIND_RAW, .data = buf, .length = 5, .ndim = 1,
				  .shape = { 5 } };
	struct dpk_writer *w;

	(void)state;
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_expect(w, 2, 8), 0);
	assert_int_equal(dpk_writer_expect(w, 2, 8), -EINVAL);
	assert_int_equal(dpk_writer_set_classes(w, one, 1), -EINVAL);
	assert_int_equal(dpk_writer_add(w, &r), 0);
	assert_int_equal(dpk_writer_add(w, &big), -EINVAL);  /* 4 + 5 > 8 */
	assert_int_equal(dpk_writer_add(w, &r), 0);          /* 8: exactly */
	assert_int_equal(dpk_writer_add(w, &r), -EINVAL);    /* a third record */
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	struct dpk *d;
	char err[256];
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_count(d), 2);
	dpk_close(d);
	assert_int_equal(unlink(path), 0);

	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_expect(w, 3, 12), 0);
	assert_int_equal(dpk_writer_add(w, &r), 0);
	assert_int_equal(dpk_writer_add(w, &r), 0);
	assert_int_equal(dpk_writer_finish(w), -EINVAL);  /* one record short */
	dpk_writer_destroy(w);
	assert_int_equal(access(path, F_OK), -1);

	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_add(w, &r), 0);
	assert_int_equal(dpk_writer_expect(w, 1, 4), -EINVAL);  /* after a record */
	dpk_writer_destroy(w);
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_expect(w, UINT64_MAX / 64, 4), -EINVAL);  /* an index too big */
	assert_int_equal(dpk_writer_expect(w, 1, UINT64_MAX - 100), -EINVAL); /* data too big */
	assert_int_equal(dpk_writer_expect(w, 1, 4), 0);
	dpk_writer_destroy(w);
}

static void test_dpk_version_is_eproto(void **state)
{
	char err[256];

	(void)state;
	write_dataset(3);
	struct dpk_header h = read_header();
	h.version = 3;
	h.header_xxh3 = XXH3_64bits(&h, offsetof(struct dpk_header, header_xxh3));
	int fd = open(path, O_RDWR);
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	assert_int_equal(open_err(0, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "version 3"));
}

static void test_dpk_count_overflow_rejected(void **state)
{
	char err[256];

	(void)state;
	write_dataset(3);
	struct dpk_header h = read_header();
	h.count = (1ull << 58) + 3;  /* count * 64 wraps to index_size's value */
	h.header_xxh3 = XXH3_64bits(&h, offsetof(struct dpk_header, header_xxh3));
	int fd = open(path, O_RDWR);
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	assert_int_equal(open_err(0, err, sizeof(err)), -EBADMSG);
}

static void test_dpk_not_a_dpk(void **state)
{
	char err[256];
	char junk[8192];

	(void)state;
	memset(junk, 'x', sizeof(junk));
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	assert_int_equal(open_err(0, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "magic"));
	unlink(path);
	assert_int_equal(open_err(0, err, sizeof(err)), -ENOENT);
}

/* ---- the index is 64-byte aligned; the class table pads to it with zeros only ---- */

/* Rewrite the class table's padding byte at @at (relative to classes_offset) to @val, then
 * re-seal the class and header checksums so that only the padding rule can catch it. */
static void forge_class_byte(uint64_t at, uint8_t val)
{
	struct dpk_header h = read_header();
	int fd = open(path, O_RDWR);
	uint8_t *t = malloc(h.classes_size);

	assert_non_null(t);
	assert_int_equal(pread(fd, t, h.classes_size, (off_t)h.classes_offset), (ssize_t)h.classes_size);
	t[at] = val;
	h.classes_xxh3 = XXH3_64bits(t, h.classes_size);
	h.header_xxh3 = XXH3_64bits(&h, offsetof(struct dpk_header, header_xxh3));
	assert_int_equal(pwrite(fd, t, h.classes_size, (off_t)h.classes_offset), (ssize_t)h.classes_size);
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	free(t);
}

static void test_dpk_index_aligned_and_padding_checked(void **state)
{
	char err[256];
	uint64_t padded = 0;

	(void)state;
	/* The names take 4+3 + 4+3 + 4+15 = 33 bytes; whatever the record bytes end on, the
	 * writer pads so the index starts on a 64-byte boundary. */
	for (uint64_t n = 1; n <= 7; n++) {
		write_dataset(n);
		struct dpk_header h = read_header();
		assert_int_equal(h.index_offset % DPK_INDEX_ALIGN, 0);
		assert_true(h.classes_size >= 33 && h.classes_size < 33 + DPK_INDEX_ALIGN);
		assert_int_equal(open_err(0, err, sizeof(err)), 0);
		if (h.classes_size > 33 && !padded)
			padded = n;
	}
	assert_true(padded > 0);

	/* A non-zero byte in the padding is refused, though every checksum matches. */
	write_dataset(padded);
	struct dpk_header h = read_header();
	forge_class_byte(h.classes_size - 1, 0x20);
	assert_int_equal(open_err(0, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "padding"));

	/* A file whose index is moved off alignment (8 bytes appended, the table grown to cover
	 * them) still tiles and checksums, and is refused by name. */
	write_dataset(padded);
	h = read_header();
	h.file_size += 8;
	h.index_offset += 8;
	h.classes_size += 8;
	h.header_xxh3 = XXH3_64bits(&h, offsetof(struct dpk_header, header_xxh3));
	int fd = open(path, O_RDWR);
	assert_int_equal(ftruncate(fd, (off_t)h.file_size), 0);
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	assert_int_equal(open_err(0, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "aligned"));
}

/* ---- large files: a record past 4 GiB in a sparse file ---- */

static void test_dpk_offsets_past_4gib(void **state)
{
	struct dpk_header h = { 0 };
	struct dpk_entry e[2];
	uint8_t a[100], b[300], buf[512];
	struct dpk *d;
	char err[256];

	(void)state;
	fill(a, sizeof(a), 1);
	fill(b, sizeof(b), 2);
	memset(e, 0, sizeof(e));
	for (int k = 0; k < 2; k++) {
		e[k].kind = DPK_KIND_RAW;
		e[k].ndim = 1;
		e[k].label = k;
	}
	e[0].offset = DPK_HEADER_SIZE;
	e[0].length = e[0].raw_size = e[0].shape[0] = sizeof(a);
	e[0].xxh3 = XXH3_64bits(a, sizeof(a));
	e[1].offset = (5ull << 30) + 7;  /* 5 GiB + 7: not block aligned */
	e[1].length = e[1].raw_size = e[1].shape[0] = sizeof(b);
	e[1].xxh3 = XXH3_64bits(b, sizeof(b));
	memcpy(h.magic, DPK_MAGIC, 8);
	h.version = DPK_VERSION;
	h.header_size = DPK_HEADER_SIZE;
	h.entry_size = sizeof(struct dpk_entry);
	h.count = 2;
	h.data_offset = DPK_HEADER_SIZE;
	h.data_size = e[1].offset + e[1].length - DPK_HEADER_SIZE;
	h.classes_offset = e[1].offset + e[1].length;
	/* No class names: the table is only the zero padding that aligns the index. */
	h.classes_size = (DPK_INDEX_ALIGN - h.classes_offset % DPK_INDEX_ALIGN) % DPK_INDEX_ALIGN;
	h.index_offset = h.classes_offset + h.classes_size;
	h.index_size = sizeof(e);
	h.file_size = h.index_offset + h.index_size;
	uint8_t zeros[DPK_INDEX_ALIGN] = { 0 };
	h.classes_xxh3 = XXH3_64bits(zeros, h.classes_size);
	h.index_xxh3 = XXH3_64bits(e, sizeof(e));
	h.kinds = 1u << DPK_KIND_RAW;
	h.header_xxh3 = XXH3_64bits(&h, offsetof(struct dpk_header, header_xxh3));

	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	if (ftruncate(fd, (off_t)h.file_size) < 0) {
		close(fd);
		skip();  /* file system without large sparse files */
	}
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	assert_int_equal(pwrite(fd, a, sizeof(a), (off_t)e[0].offset), (ssize_t)sizeof(a));
	assert_int_equal(pwrite(fd, b, sizeof(b), (off_t)e[1].offset), (ssize_t)sizeof(b));
	assert_int_equal(pwrite(fd, e, sizeof(e), (off_t)h.index_offset), (ssize_t)sizeof(e));
	close(fd);

	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_read(d, 1, buf, sizeof(buf)), (ssize_t)sizeof(b));
	assert_memory_equal(buf, b, sizeof(b));
	struct dpk_extent x;
	dpk_extent_align(dpk_entry_get(d, 1), 4096, &x);
	assert_int_equal(x.offset, 5ull << 30);
	assert_int_equal(x.skip, 7);
	assert_int_equal(x.length, 4096);
	dpk_close(d);
}

static void test_dpk_extent_align(void **state)
{
	struct dpk_entry e = { .offset = 4096 + 100, .length = 5000 };
	struct dpk_extent x;

	(void)state;
	dpk_extent_align(&e, 4096, &x);
	assert_int_equal(x.offset, 4096);
	assert_int_equal(x.skip, 100);
	assert_int_equal(x.length, 8192);  /* [4096, 12288) covers [4196, 9196) */
	dpk_extent_align(&e, 512, &x);
	assert_int_equal(x.offset, 4096);
	assert_int_equal(x.length, 5120);
	e.offset = 8192;
	e.length = 4096;
	dpk_extent_align(&e, 4096, &x);
	assert_int_equal(x.offset, 8192);
	assert_int_equal(x.length, 4096);
	assert_int_equal(x.skip, 0);
}

/* ---- writer ---- */

static void test_dpk_writer_enospc_leaves_nothing(void **state)
{
	struct dpk_writer *w;
	static uint8_t big[6 << 20];  /* larger than the write buffer: written directly */
	struct dpk_record r = { .kind = DPK_KIND_RAW, .ndim = 2, .data = big };
	struct stat st;
	char tmp[256];

	(void)state;
	r.length = sizeof(big);
	r.shape[0] = 6;
	r.shape[1] = 1 << 20;
	assert_int_equal(dpk_writer_create(path, 0, &w), 0);
	snprintf(tmp, sizeof(tmp), "%s", dpk_writer_tmp_path(w));
	assert_int_equal(stat(tmp, &st), 0);
	write_fail_after = 2;  /* the header block's flush and one direct write succeed */
	assert_int_equal(dpk_writer_add(w, &r), 0);
	assert_int_equal(dpk_writer_add(w, &r), -ENOSPC);
	assert_int_equal(dpk_writer_add(w, &r), -EINVAL);  /* sticky */
	assert_int_equal(dpk_writer_finish(w), -EINVAL);
	write_fail_after = -1;
	dpk_writer_destroy(w);
	assert_int_equal(stat(tmp, &st), -1);
	assert_int_equal(stat(path, &st), -1);
}

static void test_dpk_writer_enospc_at_finish(void **state)
{
	struct dpk_writer *w;
	uint8_t small[64] = { 1 };
	struct dpk_record r = { .kind = DPK_KIND_RAW, .ndim = 1, .data = small, .length = 64 };
	struct stat st;

	(void)state;
	r.shape[0] = 64;
	write_dataset(5);  /* an older dataset at the path must survive a failed rewrite */
	off_t before = file_size();
	assert_int_equal(dpk_writer_create(path, 0, &w), 0);
	assert_int_equal(dpk_writer_add(w, &r), 0);
	write_fail_after = 0;
	assert_int_equal(dpk_writer_finish(w), -ENOSPC);
	write_fail_after = -1;
	dpk_writer_destroy(w);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, before);
	char err[256];
	assert_int_equal(open_err(0, err, sizeof(err)), 0);
}

static void test_dpk_writer_rejects_bad_records(void **state)
{
	struct dpk_writer *w;
	uint8_t data[16] = { 0 };
	struct dpk_record r = { .kind = DPK_KIND_RAW, .ndim = 1, .data = data, .length = 16 };

	(void)state;
	r.shape[0] = 15;  /* raw length must equal the product of the shape */
	assert_int_equal(dpk_writer_create(path, 0, &w), 0);
	assert_int_equal(dpk_writer_add(w, &r), -EINVAL);
	r.shape[0] = 16;
	r.ndim = 0;
	assert_int_equal(dpk_writer_add(w, &r), -EINVAL);
	r.ndim = 1;
	r.kind = 7;
	assert_int_equal(dpk_writer_add(w, &r), -EINVAL);
	r.kind = DPK_KIND_JPEG;  /* JPEG needs H x W x C */
	assert_int_equal(dpk_writer_add(w, &r), -EINVAL);
	r.kind = DPK_KIND_RAW;
	assert_int_equal(dpk_writer_add(w, &r), 0);
	char longname[DPK_CLASS_NAME_MAX + 2];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	const char *names[] = { longname };
	assert_int_equal(dpk_writer_set_classes(w, names, 1), -EINVAL);
	dpk_writer_destroy(w);  /* never finished: nothing at path */
	struct stat st;
	assert_int_equal(stat(path, &st), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dpk_roundtrip_all_kinds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_random_access, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_empty_dataset, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_truncate_every_16th, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_flip_each_header_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_flip_index_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_flip_record_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_hostile_entries_name_the_sample, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_mapped_entries_checked_at_use, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_mapped_bounds_at_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_mapped_matches_copy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_guard_slots_per_owner_at_limit_and_one_past, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dpk_mapped_truncated_no_sigbus, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_read_index_single_entry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_read_index_truncated, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_map_index_max, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_mapped_data_copy_and_truncation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_writer_index_spills_at_chunk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_writer_expect_bounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_version_is_eproto, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_count_overflow_rejected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_not_a_dpk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_offsets_past_4gib, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_index_aligned_and_padding_checked, setup, teardown),
		cmocka_unit_test(test_dpk_extent_align),
		cmocka_unit_test_setup_teardown(test_dpk_writer_enospc_leaves_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_writer_enospc_at_finish, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpk_writer_rejects_bad_records, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
