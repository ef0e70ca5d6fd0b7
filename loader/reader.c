/* reader.c - batched record reads with io_uring, pread fallback (see reader.h).
 *
 * DESIGN
 * A fill asks for a batch of records at once. They are laid out back to back in the worker's
 * arena (4 KiB aligned, registered with io_uring once so the kernel need not pin pages per read),
 * one SQE each, submitted together; completions are reaped in any order and short reads are
 * resubmitted for the remainder. With O_DIRECT each read covers the record's block-aligned extent
 * (dpk_extent_align) and bypasses the page cache, so a dataset larger than memory does not evict
 * the trainer's pages. If the file system refuses O_DIRECT (EINVAL), the reader falls back to the
 * buffered fd for good.
 *
 * Transient errors are not bad records: a read that fails with EIO, EAGAIN, ENOMEM, ECANCELED or
 * EINTR is tried again, up to RETRY_MAX times, after a pause that doubles each time (1 ms .. 16
 * ms; one pause per round of completions, not per read), and a short read resumes where it
 * stopped. Only an error that persists past that, or the end of the file, reaches the caller, so
 * the records that get substituted are those whose bytes are bad, the same in every run. */
#include "loader/reader.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_DEPTH 64u
#define BLOCK 4096u
#define RETRY_MAX 5          /* tries after the first, per read */
#define RETRY_PAUSE_US 1000  /* the first pause; doubled for each further try */

struct req {
	uint8_t *buf;       /* where the read goes (aligned) */
	uint64_t off;       /* file offset of buf[0] */
	uint64_t need;      /* bytes that must arrive: skip + record length */
	uint64_t len;       /* bytes asked for (>= need; aligned with O_DIRECT) */
	uint64_t done;
	uint64_t skip;      /* record starts at buf + skip */
	int fd;
	int err;
	int fixed;          /* buf lies in the registered arena */
	int tries;          /* transient failures so far (<= RETRY_MAX) */
	int retry;          /* waiting for its pause, then to be submitted again */
};

struct ldr_reader {
	enum ldr_io mode;
	struct io_uring ring;
	int have_ring;
	int registered;
	int direct_broken;  /* O_DIRECT refused once: buffered from now on */
	uint8_t *arena;
	size_t arena_size;
	uint8_t *big;       /* for a record larger than the arena */
	size_t big_size;
	struct req *reqs;
	uint32_t nreq_cap;
};

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

int ldr_reader_create(enum ldr_io mode, size_t arena_bytes, struct ldr_reader **out)
{
	struct ldr_reader *r = calloc(1, sizeof(*r));

	*out = NULL;
	if (!r)
		return -ENOMEM;
	r->mode = mode;
	r->arena_size = align_up(arena_bytes < BLOCK ? BLOCK : arena_bytes, BLOCK);
	r->arena = aligned_alloc(BLOCK, r->arena_size);
	r->nreq_cap = 1024;
	r->reqs = calloc(r->nreq_cap, sizeof(*r->reqs));
	if (!r->arena || !r->reqs) {
		ldr_reader_destroy(r);
		return -ENOMEM;
	}
	if (mode != LDR_IO_PREAD && io_uring_queue_init(QUEUE_DEPTH, &r->ring, 0) == 0) {
		struct iovec iov = { r->arena, r->arena_size };
		r->have_ring = 1;
		/* Registration pins the arena; it can fail under a low RLIMIT_MEMLOCK: plain reads. */
		r->registered = io_uring_register_buffers(&r->ring, &iov, 1) == 0;
	}
	*out = r;
	return 0;
}

void ldr_reader_destroy(struct ldr_reader *r)
{
	if (!r)
		return;
	if (r->have_ring)
		io_uring_queue_exit(&r->ring);
	free(r->arena);
	free(r->big);
	free(r->reqs);
	free(r);
}

const char *ldr_reader_path(const struct ldr_reader *r, int fd_direct)
{
	if (!r->have_ring)
		return "pread";
	if (fd_direct >= 0 && r->mode == LDR_IO_AUTO && !r->direct_broken)
		return "io_uring+O_DIRECT";
	return "io_uring";
}

static void prep(struct ldr_reader *r, struct req *q, unsigned idx)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	uint64_t left = q->len - q->done;
	unsigned want = left > (1u << 30) ? (1u << 30) : (unsigned)left;  /* one SQE: < 4 GiB */

	/* The caller never has more than QUEUE_DEPTH in flight, so there is always an SQE. */
	if (q->fixed && r->registered)
		io_uring_prep_read_fixed(sqe, q->fd, q->buf + q->done, want, q->off + q->done, 0);
	else
		io_uring_prep_read(sqe, q->fd, q->buf + q->done, want, q->off + q->done);
	io_uring_sqe_set_data64(sqe, idx);
}

static int transient(int err)
{
	return err == -EIO || err == -EAGAIN || err == -ENOMEM || err == -ECANCELED || err == -EINTR;
}

static void pause_for(int tries)
{
	struct timespec ts = { 0, (long)RETRY_PAUSE_US * 1000 << (tries > 4 ? 4 : tries - 1) };

	nanosleep(&ts, NULL);
}

/* Run reqs[0..n) through io_uring. Each ends with done >= need, or err set. */
static void run_ring(struct ldr_reader *r, struct req *reqs, uint32_t n)
{
	uint32_t next = 0, inflight = 0, waiting = 0;

	while (next < n || inflight || waiting) {
		if (waiting && !inflight) {
			/* Only retries left: pause once for all of them, the longest they need. */
			int most = 0;
			for (uint32_t i = 0; i < next; i++)
				if (reqs[i].retry && reqs[i].tries > most)
					most = reqs[i].tries;
			pause_for(most);
		}
		for (uint32_t i = 0; waiting && i < next && inflight < QUEUE_DEPTH; i++)
			if (reqs[i].retry && (!inflight || reqs[i].tries == 0)) {
				reqs[i].retry = 0;
				waiting--;
				prep(r, &reqs[i], i);
				inflight++;
			}
		while (next < n && inflight < QUEUE_DEPTH) {
			prep(r, &reqs[next], next);
			next++;
			inflight++;
		}
		if (!inflight)
			continue;
		io_uring_submit_and_wait(&r->ring, 1);
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&r->ring, head, cqe) {
			struct req *q = &reqs[cqe->user_data];
			seen++;
			inflight--;
			if (transient(cqe->res) && q->tries < RETRY_MAX) {
				q->tries++;
				q->retry = 1;
				waiting++;
			} else if (cqe->res < 0) {
				q->err = cqe->res;
			} else if (cqe->res == 0) {
				q->err = q->done >= q->need ? 0 : -EBADMSG;  /* end of file */
				q->len = q->done;
			} else {
				q->done += (uint64_t)cqe->res;
				if (q->done < q->need && q->done < q->len) {
					prep(r, q, (unsigned)cqe->user_data);  /* a short read: the rest */
					inflight++;
				}
			}
		}
		io_uring_cq_advance(&r->ring, seen);
	}
	for (uint32_t i = 0; i < n; i++)
		if (!reqs[i].err && reqs[i].done < reqs[i].need)
			reqs[i].err = -EBADMSG;
}

static void run_pread(struct req *reqs, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct req *q = &reqs[i];
		while (!q->err && q->done < q->need) {
			ssize_t k = pread(q->fd, q->buf + q->done, q->len - q->done, (off_t)(q->off + q->done));
			if (k < 0 && transient(-errno) && q->tries < RETRY_MAX) {
				if (errno != EINTR)
					pause_for(++q->tries);
				continue;
			}
			if (k < 0)
				q->err = -errno;
			else if (k == 0)
				q->err = -EBADMSG;
			else
				q->done += (uint64_t)k;
		}
	}
}

/* Lay out requests for ids[0..n) in the arena; returns how many fit (>= 1, the first may go to
 * the big buffer). */
static uint32_t plan(struct ldr_reader *r, const struct dpk *d, int fd, int direct,
		     const uint64_t *ids, uint32_t n)
{
	uint64_t pos = 0;
	uint32_t k;

	if (n > r->nreq_cap)
		n = r->nreq_cap;
	for (k = 0; k < n; k++) {
		const struct dpk_entry *e = dpk_entry_get(d, ids[k]);
		struct req *q = &r->reqs[k];
		struct dpk_extent x;

		memset(q, 0, sizeof(*q));
		if (direct) {
			dpk_extent_align(e, BLOCK, &x);
		} else {
			x.offset = e->offset;
			x.length = e->length;
			x.skip = 0;
		}
		if (pos + x.length > r->arena_size) {
			if (k > 0)
				break;
			/* A record larger than the whole arena: alone, in the big buffer. */
			if (r->big_size < x.length) {
				free(r->big);
				r->big_size = 0;
				r->big = aligned_alloc(BLOCK, align_up(x.length, BLOCK));
				if (!r->big) {
					q->err = -ENOMEM;
					return 1;
				}
				r->big_size = align_up(x.length, BLOCK);
			}
			q->buf = r->big;
		} else {
			q->buf = r->arena + pos;
			q->fixed = 1;
			pos = align_up(pos + x.length, BLOCK);
		}
		q->off = x.offset;
		q->len = x.length;
		q->skip = x.skip;
		q->need = x.skip + e->length;
		q->fd = fd;
	}
	return k;
}

int ldr_reader_read(struct ldr_reader *r, const struct dpk *d, int fd_direct, const uint64_t *ids,
		    uint32_t n, const uint8_t **bufs, int *errs)
{
	int direct = fd_direct >= 0 && r->mode == LDR_IO_AUTO && r->have_ring && !r->direct_broken;
	uint32_t k;

	if (n == 0)
		return 0;
	k = plan(r, d, direct ? fd_direct : dpk_fd(d), direct, ids, n);
	if (r->have_ring) {
		run_ring(r, r->reqs, k);
		if (direct && r->reqs[0].err == -EINVAL) {
			/* The file system does not do O_DIRECT after all: buffered, from now on. */
			r->direct_broken = 1;
			k = plan(r, d, dpk_fd(d), 0, ids, n);
			run_ring(r, r->reqs, k);
		}
	} else {
		run_pread(r->reqs, k);
	}
	for (uint32_t j = 0; j < k; j++) {
		bufs[j] = r->reqs[j].buf + r->reqs[j].skip;
		errs[j] = r->reqs[j].err;
	}
	return (int)k;
}
