/* ddp.h - the DDP core: gradient buckets and their allreduce, overlapped with backward.
 *
 * Parameters and gradients live in flat buffers laid out in REVERSE parameter order (the last
 * parameter first), the order backward produces them; buckets are contiguous ranges of that
 * layout: the first at most first_cap bytes (PyTorch DDP: 1 MiB), the others at most cap bytes
 * (25 MiB); a parameter larger than the cap gets a bucket of its own. Every rank computes the same
 * plan from the same sizes. When backward marks a parameter's gradient ready, each bucket whose
 * parameters are all ready is launched, strictly in bucket index order; the optimizer then waits
 * for each bucket in turn and updates that range, so it never waits for buckets it does not need
 * yet. With accumulation (accum K), only every K-th micro-step launches allreduces. */
#ifndef LOADERD_TRN_DDP_H
#define LOADERD_TRN_DDP_H
#include <stddef.h>
#include <stdint.h>

#include "trainer/coll.h"
#include "trainer/dev.h"

#define TRN_BUCKET_CAP_DEFAULT (25u << 20)
#define TRN_BUCKET_FIRST_DEFAULT (1u << 20)

struct trn_bucket {
	size_t off, n;             /* float range in the flat buffers */
	int first, last;           /* parameter indices it holds: last..first (first >= last) */
};

/* The plan: @sizes[p] floats for parameter p (forward order), @np parameters. Writes each
 * parameter's offset in the flat layout to @offs, the buckets to @b (room for @np), and returns
 * how many buckets, or -EINVAL. Pure: no device, no MPI. */
int trn_bucket_plan(const size_t *sizes, int np, size_t cap_bytes, size_t first_cap_bytes,
		    size_t *offs, struct trn_bucket *b);

struct trn_ddp;

struct trn_ddp_stats {
	uint64_t exposed_ns;       /* time the optimizer waited for allreduces (not hidden) */
	uint64_t launched;         /* allreduces started */
	int last_order_ok;         /* 1 if the last step launched buckets in index order (checked
	                              at each launch) */
};

/* @params, @grads, @mom: device buffers of the flat layout (total floats = sum of sizes).
 * Returns 0 or -errno. */
int trn_ddp_create(struct trn_coll *coll, struct trn_dev *dev, const size_t *sizes, int np,
		   size_t cap_bytes, size_t first_cap_bytes, int accum, struct trn_ddp **out);
void trn_ddp_destroy(struct trn_ddp *d);
/* Weighted averaging, for batches of different sizes on different ranks (balanced shares): the
 * update becomes the even split's on the same global batch, sum over ranks of (weight x the
 * rank's mean gradient) / sum of weights, where a rank's weight is the sum of its samples'
 * weights (trn_ddp_set_weight). The sum and the count travel in ONE allreduce: a slot for the
 * count is added at the end of bucket 0 (the first launched and the first the optimizer waits
 * for), which moves every later bucket one float up; call before the buffers are allocated and
 * the offsets used. Accumulation (accum > 1) is refused (-EINVAL). 0 or -EINVAL. */
int trn_ddp_weighted(struct trn_ddp *d);
/* This micro-step's weight (weighted mode): the sum of the batch's sample weights, >= 0. */
void trn_ddp_set_weight(struct trn_ddp *d, float w);
const size_t *trn_ddp_offsets(const struct trn_ddp *d);  /* per parameter */
int trn_ddp_buckets(const struct trn_ddp *d, const struct trn_bucket **b);
size_t trn_ddp_total(const struct trn_ddp *d);  /* floats in the flat buffers (with the count
						   * slot in weighted mode) */

/* Rank 0's parameters to every rank. */
int trn_ddp_broadcast(struct trn_ddp *d, float *params);
/* Start micro-step @micro (0-based, counting all micro-steps): whether its gradients are
 * allreduced (every accum-th) and whether backward should overwrite (first of a window) or
 * accumulate into the gradient buffer. */
void trn_ddp_begin(struct trn_ddp *d, uint64_t micro, int *sync, int *accumulate);
/* Backward finished parameter @p's gradient in @grads. Launches what is ready, in order. */
int trn_ddp_ready(struct trn_ddp *d, int p, float *grads);
/* Let in-flight allreduces progress (MPI needs calls to progress). */
int trn_ddp_progress(struct trn_ddp *d);
/* After backward: for each bucket in order, wait for its allreduce, then SGD on its range with
 * the gradient divided by world x accum (unless the backend already averaged); weighted: by the
 * allreduced count, read once bucket 0 is in (a count of 0, every sample padding: no update but
 * momentum's decay). When the micro-step does not sync, does nothing. */
int trn_ddp_step(struct trn_ddp *d, float *params, float *grads, float *mom, float lr, float mu);
void trn_ddp_get_stats(const struct trn_ddp *d, struct trn_ddp_stats *st);
const char *trn_ddp_error(const struct trn_ddp *d);

#endif
