/* test_reader.c - loader/reader.c: a worker's batched record reads. Each case runs on the three
 * paths (io_uring with O_DIRECT, io_uring through the page cache, pread; io_uring degrades to
 * pread where the kernel refuses it, and the path used is printed): exact bytes for records
 * asked in any order and repeated, batches larger than the queue depth and than the arena, a
 * record larger than the arena, a file cut short after open (-EBADMSG for the records past the
 * end), a closed fd (-EBADF, not garbage), the record-size limit (--max-record) at and past it,
 * and an outlier's buffer let go after use. */
#include "formats/dpk.h"
#include "loader/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/tmpdir.h"

#define NREC 300          /* more than the reader's queue depth (64) */
#define BIG_REC 3         /* this record is larger than the small arena */

static char dir[64];
static char path[128];
static uint64_t lens[NREC];

static uint8_t byte_at(uint64_t rec, uint64_t i)
{
	return (uint8_t)(rec * 151 + i * 7 + (i >> 8));
}

/* Record i: a 1-d raw tensor of lens[i] bytes, byte j = byte_at(i, j); lengths straddle the
 * 4 KiB blocks O_DIRECT reads (1 byte .. ~13 KiB, and 64 KiB for BIG_REC). */
static int setup(void **state)
{
	struct dpk_writer *w;
	uint8_t *buf = malloc(64 << 10);

	(void)state;
	assert_non_null(buf);
	assert_int_equal(tmpdir_create(dir, sizeof(dir), "test_reader"), 0);
	snprintf(path, sizeof(path), "%s/r.dpk", dir);
	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	for (uint64_t i = 0; i < NREC; i++) {
		lens[i] = i == BIG_REC ? 64u << 10 : 1 + (i * 2654435761u) % 13000;
		for (uint64_t j = 0; j < lens[i]; j++)
			buf[j] = byte_at(i, j);
		struct dpk_record r = { .kind = DPK_KIND_RAW, .label = (int64_t)i, .data = buf,
					.length = lens[i], .shape = { (uint32_t)lens[i] }, .ndim = 1 };
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	free(buf);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

static const enum ldr_io modes[] = { LDR_IO_AUTO, LDR_IO_BUFFERED, LDR_IO_PREAD };

/* Read ids[0..n) through @r, batch after batch, and check every record's bytes (or, where
 * @want_err is nonzero, that records from id @bad_from on fail with it). */
static void read_all_check(struct ldr_reader *r, const struct dpk *d, int fd_direct,
			   const uint64_t *ids, uint32_t n, uint64_t bad_from, int want_err,
			   unsigned *calls)
{
	const uint8_t *bufs[NREC];
	int errs[NREC];

	*calls = 0;
	for (uint32_t i = 0; i < n;) {
		int k = ldr_reader_read(r, d, fd_direct, ids + i, n - i, bufs, errs);
		assert_true(k >= 1 && (uint32_t)k <= n - i);
		(*calls)++;
		for (int q = 0; q < k; q++, i++) {
			uint64_t id = ids[i];
			if (want_err && id >= bad_from) {
				assert_int_equal(errs[q], want_err);
				continue;
			}
			if (errs[q] != 0)
				fail_msg("record %llu: %s", (unsigned long long)id, strerror(-errs[q]));
			for (uint64_t j = 0; j < lens[id]; j++)
				if (bufs[q][j] != byte_at(id, j))
					fail_msg("record %llu byte %llu: %u, want %u", (unsigned long long)id,
						 (unsigned long long)j, bufs[q][j], byte_at(id, j));
		}
	}
}

/* Run @body once per path over a reader of @arena bytes, on the dataset and its O_DIRECT fd; then
 * once more on the dataset opened with its index and data mapped (the path of a dataset found in
 * the page cache: records copied from the mapping, loader/reader.c). */
static void each_mode(size_t arena, void (*body)(struct ldr_reader *r, const struct dpk *d,
						 int fd_direct))
{
	struct dpk *d;
	char err[256];

	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	int fd_direct = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		struct ldr_reader *r;

		assert_int_equal(ldr_reader_create(modes[m], arena, &r), 0);
		printf("mode %d: %s\n", (int)modes[m], ldr_reader_path(r, fd_direct));
		body(r, d, fd_direct);
		ldr_reader_destroy(r);
	}
	if (fd_direct >= 0)
		close(fd_direct);
	dpk_close(d);

	struct ldr_reader *r;
	assert_int_equal(dpk_open(path, DPK_OPEN_MAP | DPK_OPEN_MAP_DATA, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_data_mapped(d), 1);
	assert_int_equal(ldr_reader_create(LDR_IO_AUTO, arena, &r), 0);
	body(r, d, -1);
	if (strcmp(ldr_reader_path(r, -1), "mapped"))
		fail_msg("path %s, want mapped", ldr_reader_path(r, -1));
	ldr_reader_destroy(r);
	dpk_close(d);
}

static void exact_bytes(struct ldr_reader *r, const struct dpk *d, int fd_direct)
{
	uint64_t ids[NREC];
	unsigned calls;

	for (uint32_t i = 0; i < NREC; i++)
		ids[i] = i;
	read_all_check(r, d, fd_direct, ids, NREC, 0, 0, &calls);
	assert_int_equal(calls, 1);  /* 300 records > queue depth 64, one call */
	for (uint32_t i = 0; i < NREC; i++)
		ids[i] = (NREC - 1 - i) / 2 * 2;  /* 298, 298, 296, 296, ... */
	read_all_check(r, d, fd_direct, ids, NREC, 0, 0, &calls);
	assert_int_equal(calls, 1);
}

/* Every record, in order, then backwards with repeats: one call each when the arena holds them. */
static void test_reader_exact_bytes_any_order(void **state)
{
	(void)state;
	each_mode(16u << 20, exact_bytes);
}

static void small_arena(struct ldr_reader *r, const struct dpk *d, int fd_direct)
{
	uint64_t ids[NREC];
	const uint8_t *bufs[4];
	int errs[4];
	unsigned calls;

	for (uint32_t i = 0; i < NREC; i++)
		ids[i] = i;
	read_all_check(r, d, fd_direct, ids, NREC, 0, 0, &calls);
	assert_true(calls > 10);
	/* the big record goes to a buffer of its own when it leads a call, else it waits for the
	 * next call */
	uint64_t two[2] = { BIG_REC, 0 };
	assert_int_equal(ldr_reader_read(r, d, fd_direct, two, 2, bufs, errs), 2);
	assert_int_equal(errs[0], 0);
	assert_int_equal(errs[1], 0);
	assert_int_equal(bufs[0][lens[BIG_REC] - 1], byte_at(BIG_REC, lens[BIG_REC] - 1));
	assert_int_equal(bufs[1][0], byte_at(0, 0));
	two[0] = 0, two[1] = BIG_REC;
	assert_int_equal(ldr_reader_read(r, d, fd_direct, two, 2, bufs, errs), 1);
	assert_int_equal(ldr_reader_read(r, d, fd_direct, two, 0, bufs, errs), 0);
}

/* Check records ids[0..k) as one reader call returned them. */
static void check_got(const uint64_t *ids, int k, const uint8_t **bufs, const int *errs)
{
	for (int q = 0; q < k; q++) {
		uint64_t id = ids[q];
		if (errs[q] != 0)
			fail_msg("record %llu: %s", (unsigned long long)id, strerror(-errs[q]));
		for (uint64_t j = 0; j < lens[id]; j++)
			if (bufs[q][j] != byte_at(id, j))
				fail_msg("record %llu byte %llu wrong", (unsigned long long)id,
					 (unsigned long long)j);
	}
}

static void two_halves(struct ldr_reader *r, const struct dpk *d, int fd_direct)
{
	uint64_t a[100], b[100];
	const uint8_t *ba[100], *bb[100];
	int ea[100], eb[100];

	for (uint32_t i = 0; i < 100; i++) {
		a[i] = i;
		b[i] = NREC - 1 - i;
	}
	/* both halves in flight at once (more than the queue depth between them), completed in
	 * the other order */
	assert_int_equal(ldr_reader_submit(r, 0, d, fd_direct, a, 100), 100);
	assert_int_equal(ldr_reader_submit(r, 1, d, fd_direct, b, 100), 100);
	assert_int_equal(ldr_reader_submit(r, 1, d, fd_direct, a, 10), -EBUSY);
	assert_int_equal(ldr_reader_complete(r, 1, bb, eb), 100);
	check_got(b, 100, bb, eb);
	/* a plain read while half 0 is pending takes half 1, and leaves half 0's reads whole */
	int k = ldr_reader_read(r, d, fd_direct, b + 50, 20, bb, eb);
	assert_int_equal(k, 20);
	check_got(b + 50, k, bb, eb);
	assert_int_equal(ldr_reader_complete(r, 0, ba, ea), 100);
	check_got(a, 100, ba, ea);
	assert_int_equal(ldr_reader_complete(r, 0, ba, ea), 0);  /* not pending */
	/* left in flight: ldr_reader_destroy waits for it */
	assert_int_equal(ldr_reader_submit(r, 1, d, fd_direct, a, 100), 100);
}

/* Two halves of the arena in flight at once, on every path: each half's records arrive whole,
 * whatever order they are completed in. */
static void test_reader_submit_complete_two_halves(void **state)
{
	(void)state;
	each_mode(16u << 20, two_halves);
}

/* A 16 KiB arena: batches are cut where the arena is full (several calls), and the 64 KiB record
 * is read into a buffer of its own. */
static void test_reader_small_arena_splits_batches(void **state)
{
	(void)state;
	each_mode(16u << 10, small_arena);
}

/* The file is cut short under an open dataset, in the middle of record @cut (its fd is made to
 * point at a truncated copy; the index stays mapped from the whole file): that record and every
 * later one fails with -EBADMSG (the file ended early); those before it read back exactly. */
static void test_reader_short_file_is_ebadmsg(void **state)
{
	uint64_t ids[NREC];
	const uint64_t cut = 200;
	char short_path[160], cmd[400];

	(void)state;
	for (uint32_t i = 0; i < NREC; i++)
		ids[i] = i;
	snprintf(short_path, sizeof(short_path), "%s/short.dpk", dir);
	snprintf(cmd, sizeof(cmd), "cp %s %s", path, short_path);
	assert_int_equal(system(cmd), 0);
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		struct ldr_reader *r;
		struct dpk *d;
		char err[256];
		unsigned calls;

		int fd = open(path, O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		assert_int_equal(dpk_open_fd(fd, 0, &d, err, sizeof(err)), 0);
		const struct dpk_entry *e = dpk_entry_get(d, cut);
		assert_int_equal(truncate(short_path, (off_t)(e->offset + e->length / 2)), 0);
		int sfd = open(short_path, O_RDONLY | O_CLOEXEC);
		assert_true(sfd >= 0);
		assert_int_equal(dup2(sfd, fd), fd);
		close(sfd);
		int fd_direct = open(short_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
		assert_int_equal(ldr_reader_create(modes[m], 16u << 20, &r), 0);
		read_all_check(r, d, fd_direct, ids, NREC, cut, -EBADMSG, &calls);
		ldr_reader_destroy(r);
		if (fd_direct >= 0)
			close(fd_direct);
		dpk_close(d);
		close(fd);
	}
}

/* The dataset's fd is closed under the reader (and an O_DIRECT fd that is not open is given):
 * every record reports -EBADF; nothing is delivered as data. */
static void test_reader_closed_fd_is_ebadf(void **state)
{
	uint64_t ids[100];

	(void)state;
	for (uint32_t i = 0; i < 100; i++)
		ids[i] = i;
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		struct ldr_reader *r;
		struct dpk *d;
		char err[256];
		unsigned calls;

		assert_int_equal(ldr_reader_create(modes[m], 16u << 20, &r), 0);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		assert_int_equal(dpk_open_fd(fd, 0, &d, err, sizeof(err)), 0);
		close(fd);  /* the index stays mapped; reads of records must fail */
		read_all_check(r, d, -1, ids, 100, 0, -EBADF, &calls);
		if (modes[m] == LDR_IO_AUTO)  /* the O_DIRECT fd given is not open either */
			read_all_check(r, d, fd, ids, 100, 0, -EBADF, &calls);
		ldr_reader_destroy(r);
		dpk_close(d);
	}
}

/* --max-record as the reader enforces it: a record of exactly the limit is read, one byte over
 * it fails with -EFBIG, and the records beside it read exactly. */
static void limit_at_and_past(struct ldr_reader *r, const struct dpk *d, int fd_direct)
{
	const uint64_t ids[3] = { BIG_REC - 1, BIG_REC, BIG_REC + 1 };
	const uint8_t *bufs[3];
	int errs[3];
	unsigned calls;

	ldr_reader_limit(r, lens[BIG_REC]);
	read_all_check(r, d, fd_direct, ids, 3, 0, 0, &calls);
	ldr_reader_trim(r);
	ldr_reader_limit(r, lens[BIG_REC] - 1);
	for (uint32_t i = 0; i < 3;) {
		int k = ldr_reader_read(r, d, fd_direct, ids + i, 3 - i, bufs, errs);
		assert_true(k >= 1);
		for (int q = 0; q < k; q++, i++) {
			assert_int_equal(errs[q], ids[i] == BIG_REC ? -EFBIG : 0);
			if (ids[i] != BIG_REC)
				assert_int_equal(bufs[q][lens[ids[i]] - 1], byte_at(ids[i], lens[ids[i]] - 1));
		}
	}
	ldr_reader_trim(r);
	assert_int_equal(ldr_reader_held(r), 0);
	ldr_reader_limit(r, 0);
}

static void test_reader_max_record_at_and_past_limit(void **state)
{
	(void)state;
	each_mode(16u << 10, limit_at_and_past);
}

/* A record larger than a half of the arena gets a buffer of its own; once its half's records are
 * used, ldr_reader_trim lets it go: an outlier does not leave the reader holding its size. A
 * half still pending keeps its buffer until it completes. */
static void trim_after_outlier(struct ldr_reader *r, const struct dpk *d, int fd_direct)
{
	const uint64_t big = BIG_REC, small = 0;
	const uint8_t *bufs[1];
	int errs[1];

	assert_int_equal(ldr_reader_held(r), 0);
	assert_int_equal(ldr_reader_read(r, d, fd_direct, &big, 1, bufs, errs), 1);
	assert_int_equal(errs[0], 0);
	assert_true(ldr_reader_held(r) >= lens[BIG_REC]);
	assert_true(ldr_reader_held(r) <= ldr_reader_extra(16u << 10, lens[BIG_REC]));
	ldr_reader_trim(r);
	assert_int_equal(ldr_reader_held(r), 0);
	/* one half pending with the outlier, the other read and trimmed: the pending one stays */
	assert_int_equal(ldr_reader_submit(r, 1, d, fd_direct, &big, 1), 1);
	assert_int_equal(ldr_reader_read(r, d, fd_direct, &small, 1, bufs, errs), 1);
	ldr_reader_trim(r);
	assert_true(ldr_reader_held(r) >= lens[BIG_REC]);
	assert_int_equal(ldr_reader_complete(r, 1, bufs, errs), 1);
	assert_int_equal(errs[0], 0);
	assert_int_equal(bufs[0][lens[BIG_REC] - 1], byte_at(BIG_REC, lens[BIG_REC] - 1));
	ldr_reader_trim(r);
	assert_int_equal(ldr_reader_held(r), 0);
	/* a record that fits a half needs nothing beyond the arena */
	assert_int_equal(ldr_reader_extra(16u << 10, 4096), 0);
}

static void test_reader_trim_lets_outlier_buffer_go(void **state)
{
	(void)state;
	each_mode(16u << 10, trim_after_outlier);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reader_exact_bytes_any_order),
		cmocka_unit_test(test_reader_small_arena_splits_batches),
		cmocka_unit_test(test_reader_submit_complete_two_halves),
		cmocka_unit_test(test_reader_short_file_is_ebadmsg),
		cmocka_unit_test(test_reader_closed_fd_is_ebadf),
		cmocka_unit_test(test_reader_max_record_at_and_past_limit),
		cmocka_unit_test(test_reader_trim_lets_outlier_buffer_go),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
