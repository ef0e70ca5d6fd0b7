/* reader.h - a worker's record reader: reads a set of records of a .dpk into its arena with one
 * batched io_uring submission (registered buffer; O_DIRECT when the file allows it), or with
 * pread when io_uring is unavailable or the pread path is forced. One per worker thread. */
#ifndef LOADERD_READER_H
#define LOADERD_READER_H
#include <stddef.h>
#include <stdint.h>

#include "formats/dpk.h"

/* AUTO: io_uring, O_DIRECT on the fd_direct a caller passes (loader/job.c passes one only for
 * datasets that do not fit the page cache, and maps resident ones: docs/TUNING.md); DIRECT: the
 * same, the caller always passing it; BUFFERED: io_uring through the page cache; PREAD: no
 * io_uring. */
enum ldr_io { LDR_IO_AUTO = 0, LDR_IO_BUFFERED = 1, LDR_IO_PREAD = 2, LDR_IO_DIRECT = 3 };

struct ldr_reader;

/* @arena_bytes: the arena; one call can bring in half of it (records bigger than that are read
 * alone into a grown buffer). @mode AUTO: io_uring, O_DIRECT where possible; BUFFERED:
 * io_uring through the page cache; PREAD: no io_uring. Returns 0 or -errno. */
int ldr_reader_create(enum ldr_io mode, size_t arena_bytes, struct ldr_reader **out);
void ldr_reader_destroy(struct ldr_reader *r);  /* NULL ok */

/* Read records @ids[0..n) of @d. @fd_direct is an O_DIRECT fd of the same file or -1. Reads as
 * many leading records as fit (at least one) and returns that count k; for each j < k, bufs[j]
 * points to the record's bytes (valid until the next call on the same half) and errs[j] is 0 or
 * the read's -errno (-EBADMSG: the file ended early). The checksum is not checked here. */
int ldr_reader_read(struct ldr_reader *r, const struct dpk *d, int fd_direct, const uint64_t *ids,
		    uint32_t n, const uint8_t **bufs, int *errs);
/* The same in two steps, so that reads overlap other work: two sets may be in flight at once, one
 * per @half (0 or 1) of the arena, each getting half of its bytes. ldr_reader_submit plans the
 * leading records of @ids[0..n) that fit the half (at least one), starts their reads and returns
 * that count without waiting (-EBUSY when the half is still pending); @d and @ids must stay as
 * they are until ldr_reader_complete(@half), which waits for them and returns the count with
 * bufs and errs as ldr_reader_read does (it may differ from submit's when O_DIRECT turned out to
 * be refused; 0 when the half is not pending). The bufs of a half are valid until its next
 * submit. With the pread path, submit only plans and complete reads. ldr_reader_read uses a half
 * that is not pending. ldr_reader_destroy waits for reads in flight. */
int ldr_reader_submit(struct ldr_reader *r, unsigned half, const struct dpk *d, int fd_direct,
		      const uint64_t *ids, uint32_t n);
int ldr_reader_complete(struct ldr_reader *r, unsigned half, const uint8_t **bufs, int *errs);
/* Record @j of @half's last completed set: its index entry, loaded and checked once when the read
 * was planned (dpk_entry_load); what the read went by, so the checksum and decode must go by it
 * too. Zeroed when that check failed (errs[j] -EBADMSG). Valid as bufs are. */
const struct dpk_entry *ldr_reader_entry(const struct ldr_reader *r, unsigned half, uint32_t j);
/* Records longer than @max_record bytes (by the index) are not read: their errs entry is
 * -EFBIG, and no buffer is sized for them. 0: no limit (the default). */
void ldr_reader_limit(struct ldr_reader *r, uint64_t max_record);
/* Free the buffers made for records larger than a half (see ldr_reader_create) of every half
 * that is not pending: its bufs are no longer valid. Call once the records are used, so that an
 * outlier does not leave the reader holding its size. */
void ldr_reader_trim(struct ldr_reader *r);
/* Bytes the reader holds beyond its arena now (the buffers ldr_reader_trim frees). */
size_t ldr_reader_held(const struct ldr_reader *r);
/* Bytes beyond its arena that a reader of @arena_bytes may hold for one half to read a record of
 * @length (0 when it fits a half); at most two halves hold one each. */
uint64_t ldr_reader_extra(size_t arena_bytes, uint64_t length);
/* Which path it is using now: "io_uring+O_DIRECT", "io_uring", "pread". */
const char *ldr_reader_path(const struct ldr_reader *r, int fd_direct);

#endif
