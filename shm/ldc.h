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
 * caller serialises them). */
#ifndef LOADERD_LDC_H
#define LOADERD_LDC_H
#include <stddef.h>
#include <stdint.h>
/* Relative to this file, not to -I.: the same lines work in the tree (shm/) and installed
 * (include/loaderd/, where a client writes #include <loaderd/ldc.h>). */
#include "ctl.h"
#include "ring.h"
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
	uint64_t start_epoch;
};

struct ldc_info {
	uint64_t job_id;
	uint64_t first_step;      /* where this rank starts: > 0 when it resumes */
	uint64_t steps_total;     /* 0 = unbounded */
	uint64_t steps_per_epoch;
	uint64_t samples;
	const struct ring_hdr *ring;  /* layout of the slots: shape, dtype, layout, sample_bytes */
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
};

/* The socket loaderd listens on when not told otherwise: $XDG_RUNTIME_DIR/loaderd.sock, else
 * /tmp/loaderd-UID.sock. Writes it to @buf (@n bytes, truncated if too small) and returns @buf. */
char *ldc_default_socket(char *buf, size_t n);
/* Connect to loaderd at @socket_path. 0 or -errno, with the reason in @err. */
int ldc_connect(const char *socket_path, struct ldc **out, char *err, size_t errlen);
/* Open (or join, or resume) a job as one of its ranks and map its ring. 0 or -errno. */
int ldc_open(struct ldc *c, const struct ldc_job *job, struct ldc_info *info);
/* The next batch in step order, waiting up to @timeout_ms (< 0: no limit; the wait still ends
 * within about 100 ms of the daemon going away). 0; -ENODATA at the end of the job; -ETIMEDOUT;
 * -EPIPE when loaderd exited, was killed or dropped this client (ldc_error says which). */
int ldc_acquire(struct ldc *c, int timeout_ms, struct ldc_batch *b);
/* Give @b back to the daemon. 0 or -errno (-EINVAL: not held). */
int ldc_release(struct ldc *c, const struct ldc_batch *b);
/* This rank's counters. 0 or -errno. */
int ldc_stats(struct ldc *c, struct ctl_stats *st);
void ldc_close(struct ldc *c);  /* NULL ok; held batches are released by the daemon */

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
void *ldc_ring_base(const struct ldc *c);   /* the whole mapping, e.g. for cudaHostRegister */
size_t ldc_ring_size(const struct ldc *c);

#ifdef __cplusplus
}
#endif
#endif
