/* ldc.h - the loaderd client API: what a trainer, a benchmark or a Python binding uses to attach
 * to loaderd and take batches from its ring. One connection = one rank of one job.
 *
 *     struct ldc *c;
 *     ldc_connect("/run/loaderd.sock", &c, err, sizeof(err));
 *     ldc_open(c, &job, &info);
 *     while (ldc_acquire(c, 5000, &b) == 0) { ...use b.data...; ldc_release(c, &b); }
 *     ldc_close(c);
 *
 * Every failing call returns -errno and leaves a sentence in ldc_error(c) that says what happened
 * in words (e.g. "loaderd closed the connection: it exited or was killed"). Not thread-safe: one
 * thread per connection (acquire and release may be called from different threads only if the
 * caller serialises them).
 *
 * shm/ is built into libldc.so, which depends on libc alone (a client links one library and
 * nothing of loaderd's): so shm/ keeps its own small copies of what common/ has for the rest of
 * the tree -- the error message (ldc.c set_err, token.c refuse, ctl.c ctl_error_make) and the
 * monotonic clock (ring.c now_ns) -- and includes nothing of common/ (tests/it_layers.sh). */
#ifndef LOADERD_LDC_H
#define LOADERD_LDC_H
#include <stddef.h>
#include <stdint.h>
/* Relative to this file, not to -I.: the same lines work in the tree (shm/) and installed
 * (include/loaderd/, where a client writes #include <loaderd/ldc.h>). */
#include "ctl.h"
#include "ring.h"
#include "token.h"
#ifdef __cplusplus
extern "C" {
#endif

struct ldc;

/* A job as the client asks for it. Zero is a sensible default for every field but job, dataset,
 * batch and world. */
struct ldc_job {
	const char *job;          /* name shared by the job's ranks: [A-Za-z0-9._-], < 64 bytes */
	const char *dataset;      /* .dpk path as the daemon sees it */
	uint32_t batch;
	uint32_t crop_h, crop_w;  /* 0, 0: records as stored */
	uint32_t transforms;      /* CTL_TF_* */
	uint64_t seed;
	uint32_t rank, world;
	uint32_t sampling;        /* enum ctl_sampling */
	uint32_t tail;            /* enum ctl_tail */
	uint32_t on_bad;          /* enum ctl_bad */
	uint32_t slots;           /* ring depth; 0 = daemon default */
	uint32_t epochs;          /* 0 = unbounded */
	uint32_t weight;          /* the job's share of decode CPU when loaderd is short of it,
				   * 1..CTL_WEIGHT_MAX; 0 = 1 (docs/TUNING.md, self-sizing) */
	uint64_t start_epoch;     /* first epoch of a fresh job (epochs count from it) */
	/* Where this rank starts. Neither given: a fresh job at start_epoch, or, when the rank
	 * re-attaches to a job loaderd still holds, the first step it had not released. */
	int start_at;             /* 1: exactly step at_step (< steps per epoch) of epoch at_epoch */
	uint64_t at_epoch, at_step;
	const void *token;        /* a resume token (token_len bytes, from ldc_token): start where it
				   * says; refused unless it is intact and made for this dataset and
				   * job shape. Takes precedence over start_at. */
	size_t token_len;
	/* Whose job (ctl.h, enum ctl_share). Neither: this user's own job; no other user sees,
	 * joins or squats it (another user's job of the same name is another job). */
	const char *share_group;  /* this user's job, shared with this group (a name or a number,
				   * one of this user's groups): its members may join it with owner */
	const char *owner;        /* join another user's job that was shared with one of this
				   * user's groups: the owner's user name or uid. Never creates the
				   * job: its owner opens it first */
	/* Balanced shares (docs/RING.md): each global step's samples split across the ranks by
	 * their speed, which each rank reports with ldc_report. Every rank of the job says the
	 * same; loaderd must allow it (--balance). A batch then holds up to twice `batch`. */
	int balance;
	/* Block sampling (sampling CTL_SAMPLE_BLOCK; 0 in the other modes): records per block,
	 * 1..CTL_BLOCK_MAX, and blocks per shuffle window, 1..CTL_WINDOW_MAX; 0 = the default
	 * (CTL_BLOCK_DEFAULT, CTL_WINDOW_DEFAULT). For a set of shards read through a cache
	 * smaller than the set: block = a shard's records, window <= half the cache in shards
	 * (docs/S3.md). Every rank says the same; the resume token records them. */
	uint32_t block, window;
	/* Block sampling over a set of shards (a manifest): a shuffle window of this many shards,
	 * 1..CTL_WINDOW_MAX; 0 = not used. Sets block to the set's largest shard's records and
	 * window to window_shards (block and window must then be 0). With shards of one record
	 * count a block is a shard; dpack --shard-size cuts by bytes, so with shards of about one
	 * size (none under half the largest, the last aside) a block straddles at most two
	 * neighbouring shards and a window reads from at most 2 x window_shards of them. */
	uint32_t window_shards;
};

struct ldc_info {
	uint64_t job_id;
	uint64_t first_step;      /* where this rank starts: > 0 when it resumes */
	uint64_t steps_total;     /* 0 = unbounded */
	uint64_t steps_per_epoch;
	uint64_t samples;
	const struct ring_hdr *ring;  /* layout of the slots: shape, dtype, layout, sample_bytes */
	uint8_t dataset_id[LDC_TOKEN_ID_SIZE];  /* the dataset's identity (dpk_identity) */
};

/* One batch, valid from acquire until release. */
struct ldc_batch {
	uint64_t step, epoch, step_in_epoch;
	uint32_t count;           /* samples; the last batch of a job may be short (tail "drop") */
	uint32_t flags;           /* RING_SLOT_* */
	const uint8_t *sample_flags;  /* count entries, RING_SAMPLE_* */
	const int64_t *labels;    /* count entries */
	const uint64_t *ids;      /* count entries: sample index in the dataset */
	void *data;               /* count * sample_bytes, 4 KiB aligned, in the shared ring */
	uint64_t sample_bytes;
	/* The split of the global step (ring.h, struct ring_slot_hdr): its samples, all ranks, and
	 * this batch's place in them, [global_offset, global_offset + count). Weigh this rank's
	 * gradient by count / global_count for the update of an even split (python loaderd.ddp). */
	uint32_t global_count, global_offset;
	/* Aux fields (a caption, metadata; docs/RING.md "Aux fields"), 0 when the dataset has none:
	 * field k of sample j is field_len[j * aux_fields + k] bytes at aux +
	 * field_off[j * aux_fields + k], in the shared ring (zero-copy, like data). The offsets and
	 * lengths are this client's private copies, read once from the slot and checked (each
	 * sample's inside its own aux_stride bytes, each field at most 65536, adding up). Names:
	 * ldc_aux_name. */
	uint32_t aux_fields, aux_stride;
	const uint8_t *aux;
	const uint32_t *field_off, *field_len;
};

/* The socket loaderd listens on when not told otherwise: $XDG_RUNTIME_DIR/loaderd.sock, else
 * /tmp/loaderd-UID.sock. Writes it to @buf (@n bytes, truncated if too small) and returns @buf. */
char *ldc_default_socket(char *buf, size_t n);
/* Connect to loaderd at @socket_path. 0 or -errno, with the reason in @err. Before anything is
 * sent, the process serving the socket is checked (SO_PEERCRED): root, this user, or the user
 * owning a group-shared socket (loaderd --group) of one of this process's groups; anyone else is
 * -EPERM with a message naming the socket and its owner (a socket squatted in /tmp). */
int ldc_connect(const char *socket_path, struct ldc **out, char *err, size_t errlen);
/* Open (or join, or resume) a job as one of its ranks and map its ring. 0 or -errno; a resume
 * token that is damaged (-EBADMSG), of another version (-EPROTO) or made for another dataset or
 * job shape (-EINVAL) is refused, and ldc_error names the field. Nothing loaderd answers is
 * trusted: every number of its reply and of the ring's header is checked once, here, against
 * the job asked for and against each other (docs/RING.md, "What the client checks"); one out of
 * range is -EBADMSG with ldc_error naming the field. */
int ldc_open(struct ldc *c, const struct ldc_job *job, struct ldc_info *info);
/* The resume token for global step @step (epoch * steps_per_epoch + step in epoch) of the open
 * job: the first step not consumed, i.e. the step after the last batch whose effect is in the
 * checkpoint it is saved with. LDC_TOKEN_NEXT: the next step ldc_acquire would return. Writes
 * LDC_TOKEN_SIZE bytes to @buf (capacity @cap) and returns that count, or -errno (-ENOSPC: @cap
 * too small; -EINVAL: no job open). */
#define LDC_TOKEN_NEXT UINT64_MAX
int ldc_token(struct ldc *c, uint64_t step, void *buf, size_t cap);
/* The next batch in step order, waiting up to @timeout_ms (< 0: no limit; the wait still ends
 * within about 100 ms of the daemon going away). 0; -ENODATA at the end of the job; -ETIMEDOUT;
 * -EPIPE when loaderd exited, was killed or dropped this client, or after ldc_detach (ldc_error
 * says which); -EBADMSG when the slot's header is inconsistent (its step, count, epoch or
 * step_in_epoch, read once: @b holds the values checked), after which the connection is done. */
int ldc_acquire(struct ldc *c, int timeout_ms, struct ldc_batch *b);
/* Give @b back to the daemon. 0 or -errno (-EINVAL: not held). */
int ldc_release(struct ldc *c, const struct ldc_batch *b);
/* Report this rank's compute time per sample (ns, forward + backward, without waiting for
 * data or for other ranks), for balanced shares: the latest report goes with every step
 * released from then on (one store into the slot header before the release), and loaderd's
 * share updates use the reports that came with defined steps (docs/RING.md). 0, or -EINVAL (not
 * a positive finite number, or no job open). */
int ldc_report(struct ldc *c, double ns_per_sample);
/* Balanced shares across a loaderd restart (docs/RING.md, "Balanced shares"): the weights in
 * force at global step @step of the open job, @world (the job's world) entries into @w. 1 when
 * loaderd knows them, 0 when it does not (the step is past the pending update, or older than
 * the split log it keeps), or -errno (-EINVAL: no balanced job open; -EBADMSG: a reply out of
 * range, ldc_error names the field). */
int ldc_split_weights(struct ldc *c, uint64_t step, uint32_t *w, uint32_t world);
/* Before ldc_open: send a split seed (a CTL_SPLIT_SEED body, shm/ctl.h, @len bytes) for the job
 * about to be opened: a job loaderd no longer holds starts its split log from it. Checked here
 * as loaderd checks it (ctl_check_split): 0, or -EINVAL naming the field in ldc_error (-E2BIG:
 * longer than one message). */
int ldc_split_seed(struct ldc *c, const void *body, size_t len);
/* Before ldc_open: the job's per-sample augmentations and resize filter (@a, a CTL_AUGMENT body,
 * shm/ctl.h; docs/AUGMENT.md). Every rank of a job sends the same; they are part of the resume
 * token's job shape. Checked here as loaderd checks it: 0, or -EINVAL naming the field. */
int ldc_augment(struct ldc *c, const struct ctl_augment *a);
/* Before ldc_open on an s3:// dataset: offer it to loaderd's node cache (loaderd --cache-dir;
 * docs/S3.md, "The node cache") with the store's endpoint and region and this user's credentials
 * (read by the caller with its user's rights, s3_cfg_load). 0: taken, ldc_open with the URL as
 * the dataset then has loaderd fetch it with these credentials (its own request to the store:
 * refused when the store refuses this user) and waits for the fetch; 1: this loaderd has no
 * cache (fetch it into the user's cache and open the local copy); -errno with ldc_error. The
 * credentials are wiped from this call's memory once sent. */
struct ldc_s3 {
	const char *url, *endpoint, *region, *access_key, *secret_key, *session_token; /* NULL ok */
};
int ldc_s3_open(struct ldc *c, const struct ldc_s3 *s3);
/* ldc_s3_open with this process's own S3 settings: endpoint, region and credentials read with its
 * user's rights from the places s3/s3cfg.h names (AWS_* variables, ~/.aws/credentials and
 * config), sent, then wiped from memory. What every client calls before ldc_open on an s3://
 * @url (ldcat, the trainer, the Python Loader): 0, open the URL through loaderd's node cache;
 * 1, fetch it into the user's cache and open the local copy: this loaderd has no cache, or
 * LOADERD_S3_CLIENT_FETCH=1 is set (then nothing is read or sent); -errno with ldc_error (no
 * credentials found: -ENOKEY, the variable or file named, never a key). */
int ldc_s3_offer(struct ldc *c, const char *url);
/* This rank's counters. 0 or -errno (-EBADMSG: a field is out of range: job_id, slots,
 * occupancy, ranks_attached or a reserved one; ldc_error names it). */
int ldc_stats(struct ldc *c, struct ctl_stats *st);
/* Let go of the job but keep its ring mapped until ldc_close: hang up on loaderd, which takes
 * this rank's batches back (the rank may then attach again, on another connection, with a ring
 * of its own). The slots this client held keep their bytes: loaderd writes no slot a consumer
 * holds, and drops the ring. Acquire, release and stats then fail with -EPIPE; ldc_token,
 * ldc_ring_base and ldc_ring_size still answer. For a client whose batches outlive the
 * connection (the Python client's arrays). NULL ok; a second call does nothing. */
void ldc_detach(struct ldc *c);
void ldc_close(struct ldc *c);  /* NULL ok; held batches are released by the daemon; unmaps */

/* Ask loaderd at @socket_path an admin question on a connection of its own (what loaderctl
 * shows): @op is a CTL_OP_*, @flags CTL_ADMIN_JSON or 0, @job a job name for CTL_OP_STATS (NULL
 * or "": all jobs) and CTL_OP_STOP (required). On success, 0 and the whole answer, text or JSON,
 * NUL-terminated, in *@text: free() it. Else -errno (-ENAMETOOLONG, -EINVAL for a bad @job, the
 * connect error, -ETIMEDOUT when loaderd does not answer within 10 s, -EPIPE, or loaderd's refusal,
 * e.g. -ENOENT for an unknown job) with the reason in @err. */
int ldc_admin(const char *socket_path, uint32_t op, uint32_t flags, const char *job, char **text,
	      char *err, size_t errlen);

/* Queries. */
const char *ldc_error(const struct ldc *c);  /* the last failure, in words; "" if none */
/* The open job's aux field @k's name, or NULL (none, or past the last). */
const char *ldc_aux_name(const struct ldc *c, uint32_t k);
void *ldc_ring_base(const struct ldc *c);   /* the whole mapping, e.g. for cudaHostRegister */
size_t ldc_ring_size(const struct ldc *c);

#ifdef __cplusplus
}
#endif
#endif
