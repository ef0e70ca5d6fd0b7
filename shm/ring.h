/* ring.h - batch ring in shared memory: one per (job, rank). Several producer threads fill slots
 * and may finish out of order; the one consumer takes them strictly in step order and releases
 * each one explicitly. Backed by a sealed memfd, so it cannot be resized under either side and
 * leaves no name behind. Spec of the layout: docs/RING.md.
 *
 * Slot ownership (docs/RING.md): the producer owns a slot from the moment it is free for a step until
 * it publishes; the consumer owns it from acquire until release. Each slot has one 32-bit state
 * word, (lap << 2) | state, where lap = (step - first_step) / slots. Waiting is a futex wait on that
 * word; publishing and releasing wake it.
 *
 * The producer never trusts shared memory: it keeps its own copy of the layout and only reads the
 * state words, which it validates (ring_prod_poll, ring_prod_scan return -EBADMSG on any value a
 * well-behaved consumer could not have written). */
#ifndef LOADERD_RING_H
#define LOADERD_RING_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define RING_MAGIC "LDRING\0\1"
#define RING_VERSION 1u
#define RING_HEADER_SIZE 4096u
#define RING_SLOTS_MAX 1024u
#define RING_BATCH_MAX 65536u
#define RING_SLOT_SIZE_MAX (1ull << 32)    /* 4 GiB per slot */
#define RING_TOTAL_SIZE_MAX (1ull << 37)   /* 128 GiB per ring */
#define RING_PAYLOAD_ALIGN 4096u           /* payload start in a slot: GPU DMA friendly */
#define RING_LAP_MASK 0x3fffffffu
/* Aux fields (a caption, metadata: docs/RING.md "Aux fields"): per sample a blob of at most
 * aux_stride bytes, laid out as on disk (u32 length of each field, then the bytes). */
#define RING_AUX_FIELDS_MAX 8u
#define RING_AUX_NAME_MAX 64u
#define RING_AUX_STRIDE_MAX 262144u        /* = DPK_AUX_RECORD_MAX */
#define RING_AUX_NAMES_AT 512u             /* the names in the header page: u8 length, bytes */

enum ring_state { RING_FREE = 0, RING_FILLING = 1, RING_READY = 2, RING_HELD = 3 };
enum ring_dtype { RING_DTYPE_U8 = 1 };
enum ring_layout { RING_LAYOUT_RAW = 0, RING_LAYOUT_NHWC = 1, RING_LAYOUT_NCHW = 2 };

/* Per-sample flags in a slot. */
#define RING_SAMPLE_SUBSTITUTED 0x01u /* the record was bad; another sample took its place */
#define RING_SAMPLE_PADDING 0x02u     /* tail padding: weight 0 (tail policy "mask") */
#define RING_SAMPLE_REPEATED 0x04u    /* tail padding that repeats a sample (tail policy "pad") */

/* Slot flags. */
#define RING_SLOT_LAST 0x01u          /* the last step of the job */

/* Ring header, at offset 0 of the mapping, written once by the producer before the fd is shared.
 * All offsets are from the start of the mapping (slots_offset) or of a slot (the *_off fields). */
struct ring_hdr {
	char magic[8];
	uint32_t version;
	uint32_t header_size;     /* RING_HEADER_SIZE */
	uint64_t total_size;      /* bytes of the mapping (= the memfd's size) */
	uint64_t states_offset;   /* state word of slot i at states_offset + 64 * i */
	uint64_t slots_offset;    /* slot i at slots_offset + slot_size * i; 4 KiB aligned */
	uint64_t slot_size;       /* bytes per slot, a multiple of 4096 */
	uint32_t slots;           /* 1..RING_SLOTS_MAX */
	uint32_t batch;           /* samples per slot, 1..RING_BATCH_MAX */
	uint64_t sample_bytes;    /* payload bytes per sample */
	uint32_t shape[4];        /* per-sample shape (NHWC: H, W, C; NCHW: C, H, W), 0 past ndim */
	uint8_t ndim;             /* 0..4 */
	uint8_t dtype;            /* enum ring_dtype */
	uint8_t layout;           /* enum ring_layout */
	uint8_t huge;             /* 1 when backed by huge pages */
	uint32_t flags_off;       /* u8 flags[batch] (RING_SAMPLE_*) */
	uint32_t labels_off;      /* i64 labels[batch] */
	uint32_t ids_off;         /* u64 sample ids[batch] */
	uint32_t payload_off;     /* batch * sample_bytes, RING_PAYLOAD_ALIGN aligned */
	uint32_t rank;
	uint32_t world;
	uint32_t reserved0;
	uint64_t job_id;
	uint64_t first_step;      /* the ring's step 0: slot of step s is (s - first_step) % slots */
	uint64_t steps_total;     /* steps in the job (all epochs); 0 = unbounded */
	uint64_t steps_per_epoch; /* 0 = unknown */
	uint32_t aux_off;         /* u32 aux_len[batch], then batch x aux_stride bytes at
				   * aux_off + align8(4 x batch): sample j's blob at j x aux_stride */
	uint32_t aux_fields;      /* 0..RING_AUX_FIELDS_MAX; 0: no aux area (aux_off 0) */
	uint32_t aux_stride;      /* bytes a sample's blob may take, a multiple of 8, <= STRIDE_MAX */
	uint32_t reserved1;
	uint64_t reserved[2];
};
_Static_assert(sizeof(struct ring_hdr) == 176, "ring_hdr is shared memory");
_Static_assert(offsetof(struct ring_hdr, aux_off) == 144, "ring_hdr is shared memory");
_Static_assert(offsetof(struct ring_hdr, slot_size) == 40, "ring_hdr is shared memory");
_Static_assert(offsetof(struct ring_hdr, flags_off) == 84, "ring_hdr is shared memory");
_Static_assert(offsetof(struct ring_hdr, job_id) == 112, "ring_hdr is shared memory");
_Static_assert(offsetof(struct ring_hdr, first_step) == 120, "ring_hdr is shared memory");

/* Slot header, at the start of each slot; written by the producer before publish. */
struct ring_slot_hdr {
	uint64_t step;            /* global step = epoch * steps_per_epoch + step_in_epoch */
	uint64_t epoch;
	uint64_t step_in_epoch;
	uint32_t count;           /* samples in this batch (<= batch; the rest of the slot is stale) */
	uint32_t flags;           /* RING_SLOT_* */
	uint64_t fill_ns;         /* producer time spent filling, for stats (all workers' tasks) */
	uint64_t latency_ns;      /* from the first task of the step to its publish (0: unknown) */
	/* The split of the global step: its samples, all ranks, are the even split's concatenated
	 * in rank order (rank 0's even batch, then rank 1's, ...); this rank holds entries
	 * [global_offset, global_offset + count) of it. Even splits: world x count and rank x count.
	 * Balanced shares (docs/RING.md): the ranks' counts follow their speeds. */
	uint32_t global_count;    /* samples in the global step, <= world x batch asked for */
	uint32_t global_offset;   /* this rank's first entry; global_offset + count <= global_count */
	/* The one field the CONSUMER writes: while it holds the slot, before releasing it
	 * (ring_cons_report), the bits of a double, its compute time per sample in ns, for balanced
	 * shares; 0 = no report. The producer reads it back when it takes the slot for its next lap
	 * (ring_prod_reclaim_report: the report that came with the release of that step) and treats
	 * it as hostile: any bits at all. */
	uint64_t cons_report;
};
_Static_assert(sizeof(struct ring_slot_hdr) == 64, "ring_slot_hdr is shared memory");
_Static_assert(offsetof(struct ring_slot_hdr, global_count) == 48, "ring_slot_hdr is shared memory");
_Static_assert(offsetof(struct ring_slot_hdr, cons_report) == 56, "ring_slot_hdr is shared memory");

/* What the producer asks for. */
struct ring_desc {
	uint32_t slots, batch;
	uint64_t sample_bytes;
	uint32_t shape[4];
	uint8_t ndim, dtype, layout;
	uint32_t rank, world;
	uint64_t job_id, first_step, steps_total, steps_per_epoch;
	uint32_t aux_fields, aux_stride;   /* 0, 0: no aux area */
	char aux_names[RING_AUX_FIELDS_MAX][RING_AUX_NAME_MAX + 1];
};

/* A view of one slot, valid while the caller owns it. */
struct ring_slot {
	uint64_t step;
	uint32_t index;               /* slot index */
	struct ring_slot_hdr *hdr;
	uint8_t *flags;
	int64_t *labels;
	uint64_t *ids;
	void *payload;                /* batch * sample_bytes, 4 KiB aligned */
	uint32_t *aux_len;            /* batch entries, or NULL (no aux area) */
	uint8_t *aux;                 /* batch x aux_stride bytes, or NULL */
};

struct ring;

#define RING_CREATE_NO_HUGE 0x1u   /* do not try huge pages */

/* Producer: create the memfd, size it, seal it (no shrink, no grow, no further seals), map it and
 * write the header. Huge pages are used when the system has enough free. Returns 0 or -errno
 * (-EINVAL for a bad desc, -E2BIG past RING_TOTAL_SIZE_MAX). Free with ring_destroy(). */
int ring_create(const struct ring_desc *d, unsigned flags, struct ring **out);
/* Consumer: validate and map a ring received as @fd (MAP_SHARED | MAP_POPULATE). Takes ownership
 * of @fd on success. Returns 0, -EBADMSG (not a ring / inconsistent header), -EPROTO (version),
 * -EPERM (not sealed against resizing). */
int ring_attach(int fd, struct ring **out);
void ring_destroy(struct ring *r);  /* NULL ok; unmaps and closes */
/* Bytes of shared memory ring_create(@d) would take with normal pages, without creating it
 * (for memory accounting). 0 or -EINVAL / -E2BIG as ring_create. */
int ring_size(const struct ring_desc *d, uint64_t *bytes);

/* Producer side. */
/* Is the slot of @step free for it? 1 yes, 0 not yet (the consumer holds the previous lap),
 * -EBADMSG the state word holds something no consumer may write. Never blocks. Producers take
 * steps in order: step s + slots is polled only after step s was begun. */
int ring_prod_poll(struct ring *r, uint64_t step);
/* Wait (futex) until the slot of @step is free. 0, -ETIMEDOUT, -EBADMSG, -ESHUTDOWN after
 * ring_shutdown(). @timeout_ms < 0 waits without limit. */
int ring_prod_wait(struct ring *r, uint64_t step, int timeout_ms);
/* Take the free slot of @step (marks it FILLING) and return a view of it. -EBADMSG if it was not
 * free (call poll or wait first). */
int ring_prod_begin(struct ring *r, uint64_t step, struct ring_slot *out);
/* Publish: hdr->step and count are set here; the store is a release that pairs with the
 * acquire load in ring_cons_acquire. Wakes a waiting consumer. */
void ring_prod_publish(struct ring *r, struct ring_slot *s, uint32_t count, uint32_t slot_flags);
/* First step in [from, to) that the consumer has not released, or @to if all are. Validates every
 * word it reads; -EBADMSG names nothing (the caller knows the peer), and *frontier is then the
 * first step that is not cleanly released (a garbage word counts as not released). Used to
 * reclaim and resume. */
int ring_prod_scan(struct ring *r, uint64_t from, uint64_t to, uint64_t *frontier);
/* Wake every waiter and make ring_prod_wait return -ESHUTDOWN from now on. */
void ring_shutdown(struct ring *r);

/* Right after ring_prod_begin(@s->step) succeeded: the report the consumer left in that slot with
 * its release of step @s->step - slots (raw bits from shared memory, so NaN, negative, zero or
 * absurd; the caller clamps: loader/shares.c), and clears the field for this lap. 0 when that
 * step was not in this ring (a fresh ring, or before first_step), or the slot header names
 * another step. Read once; the acquire of ring_prod_begin pairs with ring_cons_release. */
double ring_prod_reclaim_report(struct ring *r, const struct ring_slot *s);

/* Consumer side. */
/* Report this consumer's compute time per sample (@ns_per_sample, > 0 and finite, else
 * -EINVAL) with held step @step (else -EINVAL), for balanced shares: one store into its slot
 * header's cons_report, which ring_cons_release(@step) publishes; the producer reads it when it
 * takes the slot again. 0 or -EINVAL. */
int ring_cons_report(struct ring *r, uint64_t step, double ns_per_sample);
/* Wait until @step is published, then take it. 0, -ETIMEDOUT, -EBADMSG (the slot's header
 * names another step: the slot is then held, and the ring is not to be trusted), -ENODATA
 * (@step is past steps_total), -EINVAL (before first_step). @timeout_ms < 0 waits without
 * limit. A step the caller already holds is not published again: asking for it times out. */
int ring_cons_acquire(struct ring *r, uint64_t step, int timeout_ms, struct ring_slot *out);
/* Give @step back to the producer. -EINVAL if it is not held. Wakes a waiting producer. */
int ring_cons_release(struct ring *r, uint64_t step);

/* Queries. */
const struct ring_hdr *ring_header(const struct ring *r);  /* the private copy, validated */
int ring_fd(const struct ring *r);
/* Aux field @k's name (checked at attach: 1..64 bytes of [A-Za-z0-9_.-]), or NULL past the last. */
const char *ring_aux_name(const struct ring *r, uint32_t k);
void *ring_base(const struct ring *r);      /* the mapping, ring_header()->total_size bytes */
/* The state word of @step's slot as (lap, state), for stats and tests. */
uint32_t ring_word(const struct ring *r, uint64_t step);
/* Producer, for stats: 1 when @step (>= first_step) is published and not released (ready, or
 * held by the consumer), else 0. One load of its state word; never blocks. */
int ring_prod_published(const struct ring *r, uint64_t step);

#ifdef __cplusplus
}
#endif
#endif
