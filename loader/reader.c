/* reader.c - batched record reads with io_uring, pread fallback (see reader.h).
 *
 * DESIGN
 * A fill asks for a set of records at once. They are laid out back to back in one half of the
 * worker's arena (4 KiB aligned, registered with io_uring once so the kernel need not pin pages
 * per read), one SQE each, submitted together; completions are reaped in any order and short
 * reads are resubmitted for the remainder. The arena has two halves so that two sets can be in
 * flight: a worker submits the reads of its next task (ldr_reader_submit) before it decodes the
 * current one, and collects them (ldr_reader_complete) when it gets to it, so reads leave the
 * critical path. Completions are tagged with their half; waiting for one half reaps the other's
 * on the way, and at most QUEUE_DEPTH reads of both are in the ring at once. With O_DIRECT each
 * read covers the record's block-aligned extent (dpk_extent_align) and bypasses the page cache,
 * so a dataset larger than memory does not evict the trainer's pages. If the file system refuses
 * O_DIRECT (EINVAL), the reader falls back to the buffered fd for good.
 *
 * Transient errors are not bad records: a read that fails with EIO, EAGAIN, ENOMEM, ECANCELED or
 * EINTR is tried again, up to RETRY_MAX times, after a pause that doubles each time (1 ms .. 16
 * ms; one pause per round of completions of a half, not per read), and a short read resumes where
 * it stopped. Only an error that persists past that, or the end of the file, reaches the caller, so
 * the records that get substituted are those whose bytes are bad, the same in every run.
 *
 * Memory: the arena is the reader's for good; a record larger than a half goes to that half's
 * big buffer, which is made for it and freed again by ldr_reader_trim once the half's records
 * are used, so one outlier does not leave a worker holding its size. A record longer than the
 * limit (ldr_reader_limit) is not read at all: -EFBIG, whatever the index says.
 *
 * A dataset whose data section is mapped (the job found it in the page cache: DPK_OPEN_MAP_DATA)
 * is not read but copied from the mapping into the same places, at submit, by the worker: no
 * syscall and no page-cache lookup a record (what bounds small records' rate otherwise). A page
 * evicted since is faulted in on the spot; a truncated file is the dpk guard's -EBADMSG. */
#include "loader/reader.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_DEPTH 64u
#define BLOCK 4096u
#define PREFETCH_AHEAD 8u    /* entries of a plan fetched ahead of their load */
#define COPY_AHEAD 2u        /* records of a mapped dataset whose first bytes are fetched ahead */
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
	struct dpk_entry e; /* the record's entry, as loaded and checked once (dpk_entry_load): the
			     * read and its user go by this copy, whatever the file holds later */
};

/* One half of the arena and the reads that go into it: a set of reads in flight. */
struct half {
	uint8_t *base;      /* arena + index * half size */
	size_t size;
	uint8_t *big;       /* for a record larger than the half */
	size_t big_size;
	struct req *reqs;   /* nreq_cap */
	uint32_t n;         /* reads planned */
	uint32_t next;      /* first read not submitted yet */
	uint32_t inflight;  /* of this half, in the ring now */
	uint32_t waiting;   /* reads waiting for their pause, then to go again */
	int paused;         /* paused for those already (until one of them is submitted) */
	int pending;        /* submitted and not completed */
	int direct;         /* planned on the O_DIRECT fd */
	int copy;           /* copied from the dataset's mapped data section (dpk_record_copy) at
			     * submit: the dataset is in the page cache, no syscall a record */
	const struct dpk *d;   /* what was asked, for a fallback to buffered reads */
	const uint64_t *ids;
	uint32_t asked;
};

struct ldr_reader {
	enum ldr_io mode;
	struct io_uring ring;
	int have_ring;
	int registered;
	int direct_broken;  /* O_DIRECT refused once: buffered from now on */
	uint8_t *arena;
	size_t arena_size;
	uint32_t nreq_cap;
	uint64_t max_record; /* bytes; longer records fail with -EFBIG (0: no limit) */
	uint32_t inflight;  /* reads in the ring, both halves (<= QUEUE_DEPTH) */
	struct half h[2];
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
	r->arena_size = align_up(arena_bytes < 2 * BLOCK ? 2 * BLOCK : arena_bytes, 2 * BLOCK);
	r->arena = aligned_alloc(BLOCK, r->arena_size);
	r->nreq_cap = 1024;
	for (unsigned i = 0; i < 2; i++) {
		r->h[i].size = r->arena_size / 2;
		r->h[i].base = r->arena ? r->arena + i * r->h[i].size : NULL;
		r->h[i].reqs = calloc(r->nreq_cap, sizeof(*r->h[i].reqs));
	}
	if (!r->arena || !r->h[0].reqs || !r->h[1].reqs) {
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

static void settle(struct ldr_reader *r, unsigned hi);

void ldr_reader_destroy(struct ldr_reader *r)
{
	if (!r)
		return;
	/* Reads still in flight write into the arena: let them land before it goes. */
	for (unsigned i = 0; i < 2; i++)
		if (r->h[i].pending)
			settle(r, i);
	if (r->have_ring)
		io_uring_queue_exit(&r->ring);
	free(r->arena);
	for (unsigned i = 0; i < 2; i++) {
		free(r->h[i].big);
		free(r->h[i].reqs);
	}
	free(r);
}

const char *ldr_reader_path(const struct ldr_reader *r, int fd_direct)
{
	if (!r->have_ring)
		return "pread";
	if (r->h[0].copy || r->h[1].copy)
		return "mapped";
	if (fd_direct >= 0 && (r->mode == LDR_IO_AUTO || r->mode == LDR_IO_DIRECT) &&
	    !r->direct_broken)
		return "io_uring+O_DIRECT";
	return "io_uring";
}

/* Put read @idx of half @hi in the ring (not submitted yet). The caller keeps r->inflight below
 * QUEUE_DEPTH, so there is always an SQE. */
static void prep(struct ldr_reader *r, unsigned hi, uint32_t idx)
{
	struct half *h = &r->h[hi];
	struct req *q = &h->reqs[idx];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	uint64_t left = q->len - q->done;
	unsigned want = left > (1u << 30) ? (1u << 30) : (unsigned)left;  /* one SQE: < 4 GiB */

	if (q->fixed && r->registered)
		io_uring_prep_read_fixed(sqe, q->fd, q->buf + q->done, want, q->off + q->done, 0);
	else
		io_uring_prep_read(sqe, q->fd, q->buf + q->done, want, q->off + q->done);
	io_uring_sqe_set_data64(sqe, (uint64_t)hi << 32 | idx);
	r->inflight++;
	h->inflight++;
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

/* Queue the reads of half @hi not submitted yet, as many as the ring takes. */
static void feed(struct ldr_reader *r, unsigned hi)
{
	struct half *h = &r->h[hi];

	while (h->next < h->n && r->inflight < QUEUE_DEPTH) {
		uint32_t i = h->next++;
		if (!h->reqs[i].err)  /* planned with an error (no memory): nothing to read */
			prep(r, hi, i);
	}
}

/* One completion: done, a short read resumed, a transient error to retry, or an error. */
static void reap_one(struct ldr_reader *r, const struct io_uring_cqe *cqe)
{
	unsigned hi = (unsigned)(cqe->user_data >> 32);
	uint32_t idx = (uint32_t)cqe->user_data;
	struct half *h = &r->h[hi];
	struct req *q = &h->reqs[idx];

	r->inflight--;
	h->inflight--;
	if (transient(cqe->res) && q->tries < RETRY_MAX) {
		q->tries++;
		q->retry = 1;
		h->waiting++;
	} else if (cqe->res < 0) {
		q->err = cqe->res;
	} else if (cqe->res == 0) {
		q->err = q->done >= q->need ? 0 : -EBADMSG;  /* end of file */
		q->len = q->done;
	} else {
		q->done += (uint64_t)cqe->res;
		if (q->done < q->need && q->done < q->len)
			prep(r, hi, idx);  /* a short read: the rest */
	}
}

/* Send half @hi's retries once nothing of it is in flight: after one pause for all of them, the
 * longest they need. */
static void retry(struct ldr_reader *r, unsigned hi)
{
	struct half *h = &r->h[hi];

	if (!h->waiting || h->inflight)
		return;
	if (!h->paused) {
		int most = 0;
		for (uint32_t i = 0; i < h->next; i++)
			if (h->reqs[i].retry && h->reqs[i].tries > most)
				most = h->reqs[i].tries;
		pause_for(most);
		h->paused = 1;
	}
	for (uint32_t i = 0; h->waiting && i < h->next && r->inflight < QUEUE_DEPTH; i++)
		if (h->reqs[i].retry) {
			h->reqs[i].retry = 0;
			h->waiting--;
			h->paused = 0;
			prep(r, hi, i);
		}
}

/* Run half @hi's reads to their end (each with done >= need, or err set), reaping the other
 * half's completions on the way. */
static void pump(struct ldr_reader *r, unsigned hi)
{
	struct half *h = &r->h[hi];

	while (h->next < h->n || h->inflight || h->waiting) {
		retry(r, hi);
		feed(r, hi);
		if (!r->inflight)
			continue;
		io_uring_submit_and_wait(&r->ring, 1);
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&r->ring, head, cqe) {
			seen++;
			reap_one(r, cqe);
		}
		io_uring_cq_advance(&r->ring, seen);
	}
	for (uint32_t i = 0; i < h->n; i++)
		if (!h->reqs[i].err && h->reqs[i].done < h->reqs[i].need)
			h->reqs[i].err = -EBADMSG;
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

/* Lay out requests for ids[0..n) in half @h; returns how many fit (>= 1, the first may go to the
 * half's big buffer). */
static uint32_t plan(struct ldr_reader *r, struct half *h, const struct dpk *d, int fd, int direct,
		     const uint64_t *ids, uint32_t n)
{
	uint64_t pos = 0;
	uint32_t k;
	int set = dpk_shard_path(d, 0) != NULL;

	if (n > r->nreq_cap)
		n = r->nreq_cap;
	/* the first ones too: with tasks of ~32 records, a quarter would otherwise miss */
	for (k = 0; k < n && k < PREFETCH_AHEAD; k++)
		dpk_entry_prefetch(d, ids[k]);
	for (k = 0; k < n; k++) {
		struct req *q = &h->reqs[k];
		const struct dpk_entry *e = &q->e;
		struct dpk_extent x;

		memset(q, 0, sizeof(*q));
		if (k + PREFETCH_AHEAD < n)
			dpk_entry_prefetch(d, ids[k + PREFETCH_AHEAD]);
		if (dpk_entry_load(d, ids[k], &q->e, NULL, 0) < 0) {
			q->err = -EBADMSG;  /* a bad entry: nothing is read for it */
			continue;
		}
		if (r->max_record && e->length > r->max_record) {
			/* Checked before any buffer is sized for it: the index is the client's. */
			q->err = -EFBIG;
			continue;
		}
		if (direct) {
			dpk_extent_align(e, BLOCK, &x);
		} else {
			x.offset = e->offset;
			x.length = e->length;
			x.skip = 0;
		}
		if (pos + x.length > h->size) {
			if (k > 0)
				break;
			/* A record larger than the whole half: alone, in the big buffer. */
			if (h->big_size < x.length) {
				free(h->big);
				h->big_size = 0;
				h->big = aligned_alloc(BLOCK, align_up(x.length, BLOCK));
				if (!h->big) {
					q->err = -ENOMEM;
					return 1;
				}
				h->big_size = align_up(x.length, BLOCK);
			}
			q->buf = h->big;
		} else {
			q->buf = h->base + pos;
			q->fixed = 1;
			pos = align_up(pos + x.length, BLOCK);
		}
		q->off = x.offset;
		q->len = x.length;
		q->skip = x.skip;
		q->need = x.skip + e->length;
		/* a set of shards: the record's shard's file (its O_DIRECT fd: dpk_direct_open) */
		q->fd = !set ? fd : direct ? dpk_entry_fd_direct(d, e) : dpk_entry_fd(d, e);
	}
	return k;
}

/* Plan half @hi's reads of h->ids on the O_DIRECT fd when it may be used, else the buffered one. */
static void plan_half(struct ldr_reader *r, unsigned hi, int fd_direct)
{
	struct half *h = &r->h[hi];

	h->direct = fd_direct >= 0 && (r->mode == LDR_IO_AUTO || r->mode == LDR_IO_DIRECT) &&
		    r->have_ring && !r->direct_broken;
	h->copy = !h->direct && r->mode != LDR_IO_PREAD && dpk_data_mapped(h->d);
	h->n = plan(r, h, h->d, h->direct ? fd_direct : dpk_fd(h->d), h->direct, h->ids, h->asked);
	h->next = h->waiting = 0;
	h->paused = 0;
}

/* The copy path: every planned record of half @h from the mapping, now. */
static void copy_half(struct half *h)
{
	/* Records of a shuffled order lie far apart: each would start with a cache (and TLB) miss */
	for (uint32_t k = 0; k < h->n && k < COPY_AHEAD; k++)
		dpk_record_prefetch(h->d, &h->reqs[k].e);
	for (uint32_t k = 0; k < h->n; k++) {
		struct req *q = &h->reqs[k];
		if (k + COPY_AHEAD < h->n)
			dpk_record_prefetch(h->d, &h->reqs[k + COPY_AHEAD].e);
		if (q->err)
			continue;
		ssize_t n = dpk_record_copy(h->d, &q->e, q->buf + q->skip, q->len - q->skip);
		q->err = n < 0 ? (int)n : 0;
		q->done = q->need;
	}
}

int ldr_reader_submit(struct ldr_reader *r, unsigned half, const struct dpk *d, int fd_direct,
		      const uint64_t *ids, uint32_t n)
{
	if (half > 1 || r->h[half].pending)
		return -EBUSY;
	if (n == 0)
		return 0;
	struct half *h = &r->h[half];
	h->d = d;
	h->ids = ids;
	h->asked = n;
	plan_half(r, half, fd_direct);
	h->pending = 1;
	if (h->copy) {
		copy_half(h);
		return (int)h->n;
	}
	if (r->have_ring) {
		feed(r, half);
		if (r->inflight)
			io_uring_submit(&r->ring);
	}
	return (int)h->n;
}

/* Bring half @hi's reads to their end: it is no longer pending. */
static void settle(struct ldr_reader *r, unsigned hi)
{
	struct half *h = &r->h[hi];

	if (h->copy) {
		;  /* done at submit */
	} else if (r->have_ring) {
		pump(r, hi);
		if (h->direct && h->reqs[0].err == -EINVAL) {
			/* The file system does not do O_DIRECT after all: buffered, from now on. */
			r->direct_broken = 1;
			plan_half(r, hi, -1);
			if (h->copy)
				copy_half(h);
			else
				pump(r, hi);
		}
	} else {
		run_pread(h->reqs, h->n);
	}
	h->pending = 0;
}

int ldr_reader_complete(struct ldr_reader *r, unsigned half, const uint8_t **bufs, int *errs)
{
	if (half > 1 || !r->h[half].pending)
		return 0;
	struct half *h = &r->h[half];
	settle(r, half);
	for (uint32_t j = 0; j < h->n; j++) {
		bufs[j] = h->reqs[j].buf + h->reqs[j].skip;
		errs[j] = h->reqs[j].err;
	}
	return (int)h->n;
}

const struct dpk_entry *ldr_reader_entry(const struct ldr_reader *r, unsigned half, uint32_t j)
{
	return &r->h[half & 1].reqs[j].e;
}

void ldr_reader_limit(struct ldr_reader *r, uint64_t max_record)
{
	r->max_record = max_record;
}

void ldr_reader_trim(struct ldr_reader *r)
{
	for (unsigned i = 0; i < 2; i++)
		if (!r->h[i].pending && r->h[i].big) {
			free(r->h[i].big);
			r->h[i].big = NULL;
			r->h[i].big_size = 0;
		}
}

size_t ldr_reader_held(const struct ldr_reader *r)
{
	return r->h[0].big_size + r->h[1].big_size;
}

uint64_t ldr_reader_extra(size_t arena_bytes, uint64_t length)
{
	uint64_t arena = align_up(arena_bytes < 2 * BLOCK ? 2 * BLOCK : arena_bytes, 2 * BLOCK);
	uint64_t x = align_up(length, BLOCK) + BLOCK;  /* the O_DIRECT extent, at worst */

	return x > arena / 2 ? align_up(x, BLOCK) : 0;
}

int ldr_reader_read(struct ldr_reader *r, const struct dpk *d, int fd_direct, const uint64_t *ids,
		    uint32_t n, const uint8_t **bufs, int *errs)
{
	unsigned half = r->h[0].pending ? 1 : 0;
	int k = ldr_reader_submit(r, half, d, fd_direct, ids, n);

	return k <= 0 ? k : ldr_reader_complete(r, half, bufs, errs);
}
