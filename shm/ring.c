/* ring.c - the batch ring: memfd-backed slots, one futex word per slot.
 *
 * DESIGN
 * Slot i serves steps first_step + i, first_step + i + slots, ...; the k-th of those is lap k. The
 * state word of slot i is (lap << 2) | state and moves through
 *
 *     (k, FREE) -producer-> (k, FILLING) -producer-> (k, READY) -consumer-> (k, HELD)
 *               -consumer-> (k + 1, FREE)
 *
 * so a word alone says which step the slot holds and who owns it: no separate head/tail indices
 * that the two sides could disagree about, and producers can publish out of order while the
 * consumer, which waits on the word of the step it wants, still takes steps strictly in order.
 * The lap is kept modulo 2^30; the producer never runs more than one lap ahead of the consumer,
 * so the comparison is exact.
 *
 * Memory order: the producer's publish is a release store of (k, READY) that pairs with the
 * consumer's acquire load in ring_cons_acquire (the consumer sees the whole batch); the consumer's
 * release of (k + 1, FREE) pairs with the producer's acquire load in ring_prod_poll (the producer
 * does not overwrite bytes the consumer is still reading).
 *
 * Wakeups are futex wakes on the shared word (not FUTEX_PRIVATE: the two sides are different
 * processes). A wait always has a timeout path; the caller (ldc.c) uses it to check that the peer
 * is still there (loaderd's server polls instead and learns of a peer's death from its socket). */
#include "shm/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HUGE_PAGE (2ull << 20)
#define WORD_STRIDE 64u  /* one cache line per state word: no false sharing between slots */

struct ring {
	struct ring_hdr h;  /* private copy: the producer never reads the shared one back */
	char aux_names[RING_AUX_FIELDS_MAX][RING_AUX_NAME_MAX + 1];  /* private, checked */
	uint8_t *base;
	size_t size;
	int fd;
	atomic_int shut;
};

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* Fill the derived fields of @h from slots, batch, sample_bytes and huge. */
static int compute_layout(struct ring_hdr *h)
{
	uint64_t page = h->huge ? HUGE_PAGE : 4096;

	if (h->slots == 0 || h->slots > RING_SLOTS_MAX || h->batch == 0 || h->batch > RING_BATCH_MAX ||
	    h->sample_bytes == 0 || h->sample_bytes > RING_SLOT_SIZE_MAX)
		return -EINVAL;
	uint64_t flags_off = sizeof(struct ring_slot_hdr);
	uint64_t labels_off = align_up(flags_off + h->batch, 8);
	uint64_t ids_off = labels_off + 8ull * h->batch;
	uint64_t aux_off = 0, aux_end = ids_off + 8ull * h->batch;
	if (h->aux_fields > RING_AUX_FIELDS_MAX || (!h->aux_fields && h->aux_stride) ||
	    (h->aux_fields && (h->aux_stride < 4 * h->aux_fields || h->aux_stride % 8 ||
			       h->aux_stride > RING_AUX_STRIDE_MAX)))
		return -EINVAL;
	if (h->aux_fields) {
		aux_off = align_up(aux_end, 8);
		aux_end = aux_off + align_up(4ull * h->batch, 8) + (uint64_t)h->aux_stride * h->batch;
	}
	uint64_t payload_off = align_up(aux_end, RING_PAYLOAD_ALIGN);
	if (payload_off > UINT32_MAX)
		return -E2BIG;
	if (h->sample_bytes > (RING_SLOT_SIZE_MAX - payload_off) / h->batch)
		return -E2BIG;
	uint64_t slot_size = align_up(payload_off + h->sample_bytes * h->batch, 4096);
	uint64_t slots_offset = align_up(RING_HEADER_SIZE + (uint64_t)WORD_STRIDE * h->slots, page);
	if (slot_size > (RING_TOTAL_SIZE_MAX - slots_offset) / h->slots)
		return -E2BIG;
	h->header_size = RING_HEADER_SIZE;
	h->states_offset = RING_HEADER_SIZE;
	h->slots_offset = slots_offset;
	h->slot_size = slot_size;
	h->flags_off = (uint32_t)flags_off;
	h->labels_off = (uint32_t)labels_off;
	h->ids_off = (uint32_t)ids_off;
	h->payload_off = (uint32_t)payload_off;
	h->aux_off = (uint32_t)aux_off;
	h->total_size = align_up(slots_offset + slot_size * h->slots, page);
	return 0;
}

static int check_shape(const struct ring_hdr *h)
{
	uint64_t n = 1;

	if (h->ndim > 4 || h->dtype != RING_DTYPE_U8 || h->layout > RING_LAYOUT_NCHW)
		return -EINVAL;
	for (unsigned i = 0; i < 4; i++) {
		if (i < h->ndim) {
			/* a product that wraps could pass for sample_bytes */
			if (h->shape[i] == 0 || __builtin_mul_overflow(n, (uint64_t)h->shape[i], &n))
				return -EINVAL;
		} else if (h->shape[i]) {
			return -EINVAL;  /* entries past ndim are zero, ndim 0 included */
		}
	}
	if (h->ndim == 0)
		return h->layout == RING_LAYOUT_RAW ? 0 : -EINVAL;
	if ((h->layout != RING_LAYOUT_RAW && h->ndim != 3) || n != h->sample_bytes)
		return -EINVAL;
	return 0;
}

/* @populate: MAP_POPULATE (the consumer; huge pages come from the memfd itself). The producer of
 * a normal-page ring maps without it, asks for transparent huge pages, then populates: populating
 * first would fault in 4 KiB pages before the advice could take effect. */
static int map_fd(struct ring *r, size_t size, int populate)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0),
		       r->fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	r->base = p;
	r->size = size;
	return 0;
}

/* A sealed memfd of @size, mapped. Huge pages first unless told not to; any failure there (no
 * pages reserved, not enough free) falls back to normal pages. */
static int make_backing(struct ring *r, const char *name, unsigned flags)
{
	const unsigned seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	int ret;

	if (!(flags & RING_CREATE_NO_HUGE)) {
		struct ring_hdr h = r->h;
		h.huge = 1;
		if (compute_layout(&h) == 0) {
			r->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
			if (r->fd >= 0 && ftruncate(r->fd, (off_t)h.total_size) == 0 &&
			    fcntl(r->fd, F_ADD_SEALS, seals) == 0 && map_fd(r, h.total_size, 1) == 0) {
				r->h = h;
				return 0;
			}
			if (r->fd >= 0)
				close(r->fd);
		}
	}
	r->h.huge = 0;
	ret = compute_layout(&r->h);
	if (ret < 0)
		return ret;
	r->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (r->fd < 0)
		return -errno;
	if (ftruncate(r->fd, (off_t)r->h.total_size) < 0 || fcntl(r->fd, F_ADD_SEALS, seals) < 0) {
		ret = -errno;
		goto fail;
	}
	ret = map_fd(r, r->h.total_size, 0);
	if (ret < 0)
		goto fail;
	(void)madvise(r->base, r->size, MADV_HUGEPAGE);  /* transparent huge pages, where enabled */
	if (madvise(r->base, r->size, MADV_POPULATE_WRITE) < 0)
		memset(r->base, 0, r->size);  /* kernels before 5.14: fault every page in by hand */
	return 0;
fail:
	close(r->fd);
	r->fd = -1;
	return ret;
}

static int aux_name_ok(const char *s, size_t n)
{
	if (n < 1 || n > RING_AUX_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}

/* The names' bytes in the header page: for each field, its length (u8) and its bytes. */
static size_t aux_names_put(uint8_t *page, const char names[][RING_AUX_NAME_MAX + 1], uint32_t n)
{
	size_t at = RING_AUX_NAMES_AT;

	for (uint32_t k = 0; k < n; k++) {
		size_t l = strlen(names[k]);
		page[at] = (uint8_t)l;
		memcpy(page + at + 1, names[k], l);
		at += 1 + l;
	}
	return at;
}

/* The header for @d with normal pages, validated. */
static int header_from_desc(const struct ring_desc *d, struct ring_hdr *h)
{
	int ret;

	memset(h, 0, sizeof(*h));
	memcpy(h->magic, RING_MAGIC, 8);
	h->version = RING_VERSION;
	h->slots = d->slots;
	h->batch = d->batch;
	h->sample_bytes = d->sample_bytes;
	memcpy(h->shape, d->shape, sizeof(h->shape));
	h->ndim = d->ndim;
	h->dtype = d->dtype;
	h->layout = d->layout;
	h->rank = d->rank;
	h->world = d->world;
	h->job_id = d->job_id;
	h->first_step = d->first_step;
	h->steps_total = d->steps_total;
	h->steps_per_epoch = d->steps_per_epoch;
	h->aux_fields = d->aux_fields;
	h->aux_stride = d->aux_stride;
	ret = check_shape(h);
	for (uint32_t k = 0; ret == 0 && k < d->aux_fields && k < RING_AUX_FIELDS_MAX; k++)
		if (!aux_name_ok(d->aux_names[k], strnlen(d->aux_names[k], RING_AUX_NAME_MAX + 1)))
			ret = -EINVAL;
	if (ret == 0 && (d->world == 0 || d->rank >= d->world))
		ret = -EINVAL;
	if (ret == 0 && d->steps_total && d->first_step > d->steps_total)
		ret = -EINVAL;
	return ret < 0 ? ret : compute_layout(h);
}

int ring_size(const struct ring_desc *d, uint64_t *bytes)
{
	struct ring_hdr h;
	int ret = header_from_desc(d, &h);

	*bytes = ret < 0 ? 0 : h.total_size;
	return ret;
}

int ring_create(const struct ring_desc *d, unsigned flags, struct ring **out)
{
	struct ring *r;
	char name[64];
	int ret;

	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->fd = -1;
	ret = header_from_desc(d, &r->h);
	if (ret < 0)
		goto fail;
	snprintf(name, sizeof(name), "loaderd-ring-j%llu-r%u", (unsigned long long)d->job_id, d->rank);
	ret = make_backing(r, name, flags);
	if (ret < 0)
		goto fail;
	/* The memfd reads as zeros: every state word starts as (lap 0, FREE). */
	memcpy(r->base, &r->h, sizeof(r->h));
	for (uint32_t k = 0; k < r->h.aux_fields; k++)
		memcpy(r->aux_names[k], d->aux_names[k], RING_AUX_NAME_MAX + 1);
	aux_names_put(r->base, d->aux_names, r->h.aux_fields);
	*out = r;
	return 0;
fail:
	free(r);
	return ret;
}

int ring_attach(int fd, struct ring **out)
{
	struct ring *r;
	struct ring_hdr h;
	struct stat st;
	int ret, seals;

	*out = NULL;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size < (off_t)RING_HEADER_SIZE)
		return -EBADMSG;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return errno == EINVAL ? -EPERM : -errno;
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
		return -EPERM;  /* the producer could resize it under us: SIGBUS */
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		return -EBADMSG;
	if (memcmp(h.magic, RING_MAGIC, 8))
		return -EBADMSG;
	if (h.version != RING_VERSION)
		return -EPROTO;
	struct ring_hdr want = h;
	if (h.huge > 1 || check_shape(&h) < 0 || compute_layout(&want) < 0 ||
	    memcmp(&want, &h, sizeof(h)) || h.total_size != (uint64_t)st.st_size ||
	    h.world == 0 || h.rank >= h.world || (h.steps_total && h.first_step > h.steps_total) ||
	    h.reserved0 || h.reserved1 || h.reserved[0] || h.reserved[1])
		return -EBADMSG;
	/* the rest of the header page: the aux names, each checked, then zeros */
	uint8_t page[RING_HEADER_SIZE];
	char names[RING_AUX_FIELDS_MAX][RING_AUX_NAME_MAX + 1];
	size_t at = RING_AUX_NAMES_AT;
	if (pread(fd, page, sizeof(page), 0) != (ssize_t)sizeof(page))
		return -EBADMSG;
	memset(names, 0, sizeof(names));
	for (uint32_t k = 0; k < h.aux_fields; k++) {
		size_t l = page[at];
		if (!aux_name_ok((const char *)page + at + 1, l))
			return -EBADMSG;
		memcpy(names[k], page + at + 1, l);
		at += 1 + l;
	}
	for (size_t k = sizeof(h); k < sizeof(page); k++)
		if ((k < RING_AUX_NAMES_AT || k >= at) && page[k])
			return -EBADMSG;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->h = h;
	memcpy(r->aux_names, names, sizeof(names));
	r->fd = fd;
	ret = map_fd(r, h.total_size, 1);
	if (ret < 0) {
		free(r);
		return ret;
	}
	*out = r;
	return 0;
}

void ring_destroy(struct ring *r)
{
	if (!r)
		return;
	if (r->base)
		munmap(r->base, r->size);
	if (r->fd >= 0)
		close(r->fd);
	free(r);
}

/* ---- words and futexes ---- */

static _Atomic uint32_t *word_of(const struct ring *r, uint64_t step)
{
	uint64_t i = (step - r->h.first_step) % r->h.slots;

	return (_Atomic uint32_t *)(void *)(r->base + r->h.states_offset + WORD_STRIDE * i);
}

static uint32_t lap_of(const struct ring *r, uint64_t step)
{
	return (uint32_t)((step - r->h.first_step) / r->h.slots) & RING_LAP_MASK;
}

static uint32_t make_word(uint32_t lap, enum ring_state st)
{
	return ((lap & RING_LAP_MASK) << 2) | (uint32_t)st;
}

static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleep until *w != @seen, a wake, or @deadline_ns (< 0: none). 0 or -ETIMEDOUT. */
static int futex_wait_until(_Atomic uint32_t *w, uint32_t seen, int64_t deadline_ns)
{
	struct timespec ts, *tsp = NULL;

	if (deadline_ns >= 0) {
		int64_t left = deadline_ns - now_ns();
		if (left <= 0)
			return -ETIMEDOUT;
		ts.tv_sec = left / 1000000000;
		ts.tv_nsec = left % 1000000000;
		tsp = &ts;
	}
	if (syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, seen, tsp, NULL, 0) < 0 && errno == ETIMEDOUT)
		return -ETIMEDOUT;
	return 0;  /* woken, value changed (EAGAIN) or signal (EINTR): the caller looks again */
}

static int64_t deadline_of(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : now_ns() + (int64_t)timeout_ms * 1000000;
}

/* ---- producer ---- */

/* Classify the word of @step's slot as seen by the producer: 1 free for @step, 0 the previous lap
 * is still out (with the consumer, or being filled by another producer thread), -EBADMSG. */
static int classify_for_producer(const struct ring *r, uint64_t step, uint32_t w)
{
	uint32_t lap = lap_of(r, step), prev = (lap - 1) & RING_LAP_MASK;

	if (w == make_word(lap, RING_FREE))
		return 1;
	if (step - r->h.first_step >= r->h.slots &&
	    (w == make_word(prev, RING_FILLING) || w == make_word(prev, RING_READY) ||
	     w == make_word(prev, RING_HELD)))
		return 0;
	return -EBADMSG;
}

int ring_prod_poll(struct ring *r, uint64_t step)
{
	if (step < r->h.first_step)
		return -EINVAL;
	/* acquire: pairs with the release store in ring_cons_release */
	uint32_t w = atomic_load_explicit(word_of(r, step), memory_order_acquire);

	return classify_for_producer(r, step, w);
}

/* ring_shutdown() cannot change the shared word, so a waiter that checked the flag just before
 * it was set would sleep through the wake: waits are sliced and the flag is checked again. */
#define SHUTDOWN_SLICE_NS 100000000

int ring_prod_wait(struct ring *r, uint64_t step, int timeout_ms)
{
	if (step < r->h.first_step)
		return -EINVAL;
	_Atomic uint32_t *wp = word_of(r, step);
	int64_t deadline = deadline_of(timeout_ms);

	for (;;) {
		if (atomic_load_explicit(&r->shut, memory_order_acquire))
			return -ESHUTDOWN;
		uint32_t w = atomic_load_explicit(wp, memory_order_acquire);  /* pairs: ring_cons_release */
		int ret = classify_for_producer(r, step, w);
		if (ret != 0)
			return ret < 0 ? ret : 0;
		int64_t slice = now_ns() + SHUTDOWN_SLICE_NS;
		int last = deadline >= 0 && deadline <= slice;
		ret = futex_wait_until(wp, w, last ? deadline : slice);
		if (ret < 0 && last)
			return ret;
	}
}

static void slot_view(const struct ring *r, uint64_t step, struct ring_slot *out)
{
	uint32_t i = (uint32_t)((step - r->h.first_step) % r->h.slots);
	uint8_t *s = r->base + r->h.slots_offset + r->h.slot_size * i;

	out->step = step;
	out->index = i;
	out->hdr = (struct ring_slot_hdr *)(void *)s;
	out->flags = s + r->h.flags_off;
	out->labels = (int64_t *)(void *)(s + r->h.labels_off);
	out->ids = (uint64_t *)(void *)(s + r->h.ids_off);
	out->payload = s + r->h.payload_off;
	out->aux_len = r->h.aux_fields ? (uint32_t *)(void *)(s + r->h.aux_off) : NULL;
	out->aux = r->h.aux_fields ? s + r->h.aux_off + align_up(4ull * r->h.batch, 8) : NULL;
}

const char *ring_aux_name(const struct ring *r, uint32_t k)
{
	return k < r->h.aux_fields ? r->aux_names[k] : NULL;
}

int ring_prod_begin(struct ring *r, uint64_t step, struct ring_slot *out)
{
	uint32_t lap = lap_of(r, step), want = make_word(lap, RING_FREE);

	if (step < r->h.first_step || (r->h.steps_total && step >= r->h.steps_total))
		return -EINVAL;
	/* acquire on success: pairs with ring_cons_release, as in ring_prod_poll */
	if (!atomic_compare_exchange_strong_explicit(word_of(r, step), &want,
						     make_word(lap, RING_FILLING),
						     memory_order_acquire, memory_order_relaxed))
		return -EBADMSG;
	slot_view(r, step, out);
	return 0;
}

void ring_prod_publish(struct ring *r, struct ring_slot *s, uint32_t count, uint32_t slot_flags)
{
	_Atomic uint32_t *wp = word_of(r, s->step);

	if (count > r->h.batch)
		count = r->h.batch;  /* a caller bug; never let the consumer read past the slot */
	s->hdr->step = s->step;
	s->hdr->count = count;
	s->hdr->flags = slot_flags;
	/* release: pairs with the acquire load in ring_cons_acquire */
	atomic_store_explicit(wp, make_word(lap_of(r, s->step), RING_READY), memory_order_release);
	futex_wake(wp);
}

int ring_prod_scan(struct ring *r, uint64_t from, uint64_t to, uint64_t *frontier)
{
	uint64_t lo = from;

	*frontier = to;
	if (to < from || from < r->h.first_step)
		return -EINVAL;
	/* Steps below to - slots were released already: their slots hold later steps now. */
	if (to - from > r->h.slots)
		lo = to - r->h.slots;
	for (uint64_t s = lo; s < to; s++) {
		uint32_t lap = lap_of(r, s);
		uint32_t w = atomic_load_explicit(word_of(r, s), memory_order_acquire);

		if (w == make_word(lap + 1, RING_FREE))
			continue;
		if (w != make_word(lap, RING_FILLING) && w != make_word(lap, RING_READY) &&
		    w != make_word(lap, RING_HELD)) {
			if (*frontier == to)
				*frontier = s;  /* garbage counts as not released */
			return -EBADMSG;
		}
		if (*frontier == to)
			*frontier = s;
	}
	return 0;
}

void ring_shutdown(struct ring *r)
{
	atomic_store_explicit(&r->shut, 1, memory_order_release);  /* pairs: ring_prod_wait */
	for (uint32_t i = 0; i < r->h.slots; i++)
		futex_wake(word_of(r, r->h.first_step + i));
}

/* ---- consumer ---- */

int ring_cons_acquire(struct ring *r, uint64_t step, int timeout_ms, struct ring_slot *out)
{
	int64_t deadline = deadline_of(timeout_ms);
	_Atomic uint32_t *wp;
	uint32_t ready, w;

	if (step < r->h.first_step)
		return -EINVAL;
	if (r->h.steps_total && step >= r->h.steps_total)
		return -ENODATA;
	wp = word_of(r, step);
	ready = make_word(lap_of(r, step), RING_READY);
	for (;;) {
		w = atomic_load_explicit(wp, memory_order_acquire);  /* pairs: ring_prod_publish */
		if (w == ready)
			break;
		int ret = futex_wait_until(wp, w, deadline);
		if (ret < 0)
			return ret;
	}
	/* Only this process writes READY -> HELD; the CAS guards against two threads of a buggy
	 * caller taking the same step. */
	if (!atomic_compare_exchange_strong_explicit(wp, &ready, make_word(lap_of(r, step), RING_HELD),
						     memory_order_acquire, memory_order_relaxed))
		return -EBUSY;
	slot_view(r, step, out);
	if (out->hdr->step != step || out->hdr->count > r->h.batch)
		return -EBADMSG;
	return 0;
}

int ring_cons_release(struct ring *r, uint64_t step)
{
	uint32_t lap, held;
	_Atomic uint32_t *wp;

	if (step < r->h.first_step)
		return -EINVAL;
	lap = lap_of(r, step);
	held = make_word(lap, RING_HELD);
	wp = word_of(r, step);
	/* release: pairs with the acquire load in ring_prod_poll / ring_prod_wait */
	if (!atomic_compare_exchange_strong_explicit(wp, &held, make_word(lap + 1, RING_FREE),
						     memory_order_release, memory_order_relaxed))
		return -EINVAL;
	futex_wake(wp);
	return 0;
}

/* ---- queries ---- */

const struct ring_hdr *ring_header(const struct ring *r)
{
	return &r->h;
}

int ring_fd(const struct ring *r)
{
	return r->fd;
}

void *ring_base(const struct ring *r)
{
	return r->base;
}

uint32_t ring_word(const struct ring *r, uint64_t step)
{
	return atomic_load_explicit(word_of(r, step), memory_order_acquire);
}

int ring_prod_published(const struct ring *r, uint64_t step)
{
	uint32_t lap = lap_of(r, step);
	/* Pairs with the release store of ring_prod_publish and ring_cons_release. */
	uint32_t w = atomic_load_explicit(word_of(r, step), memory_order_acquire);

	return w == make_word(lap, RING_READY) || w == make_word(lap, RING_HELD);
}

/* A slot header's cons_report, the one field of a slot the consumer writes. Its store comes
 * before the consumer's release CAS and its load after the producer's acquire CAS in
 * ring_prod_begin, so plain relaxed atomics suffice: the state word orders them. */
static _Atomic uint64_t *report_word(const struct ring_slot *s)
{
	return (_Atomic uint64_t *)(void *)((uint8_t *)s->hdr + offsetof(struct ring_slot_hdr,
									  cons_report));
}

int ring_cons_report(struct ring *r, uint64_t step, double ns_per_sample)
{
	struct ring_slot s;
	uint64_t bits;

	if (!isfinite(ns_per_sample) || ns_per_sample <= 0 || step < r->h.first_step ||
	    atomic_load_explicit(word_of(r, step), memory_order_relaxed) !=
	    make_word(lap_of(r, step), RING_HELD))
		return -EINVAL;
	slot_view(r, step, &s);
	memcpy(&bits, &ns_per_sample, sizeof(bits));
	/* published by the release CAS of ring_cons_release */
	atomic_store_explicit(report_word(&s), bits, memory_order_relaxed);
	return 0;
}

double ring_prod_reclaim_report(struct ring *r, const struct ring_slot *s)
{
	uint64_t prev = s->step - r->h.slots, bits;
	double v = 0;

	/* after the acquire CAS of ring_prod_begin: sees what the release of prev stored */
	bits = atomic_exchange_explicit(report_word(s), 0, memory_order_relaxed);
	if (s->step < r->h.first_step + r->h.slots ||
	    __atomic_load_n(&s->hdr->step, __ATOMIC_RELAXED) != prev)
		return 0;
	memcpy(&v, &bits, sizeof(v));
	return v;
}
