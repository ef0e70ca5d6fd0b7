/* ddp.c - bucket plan and the overlapped allreduce (see ddp.h). */
#include "trainer/ddp.h"
#include "common/clk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EV_GRADS 0  /* compute stream -> comm stream: a bucket's gradients are written */

struct trn_ddp {
	struct trn_coll *coll;
	struct trn_dev *dev;
	int np, nb, accum;
	size_t total;
	size_t *offs, *sizes;
	struct trn_bucket *b;
	int *bucket_of;            /* parameter -> bucket */
	int *pending;              /* per bucket: parameters not yet ready this micro-step */
	int *req;                  /* per bucket: request id, -1 when not launched */
	uint8_t *marked;           /* per parameter: gradient marked ready this micro-step */
	int last_launched;         /* bucket index of the last launch this micro-step, or -1 */
	int next;                  /* next bucket to launch */
	int sync, order_ok;
	int weighted;              /* trn_ddp_weighted: a count slot ends bucket 0 */
	size_t cslot;              /* its float index */
	float weight;              /* this micro-step's (trn_ddp_set_weight) */
	struct trn_ddp_stats st;
	char err[300];
};

int trn_bucket_plan(const size_t *sizes, int np, size_t cap_bytes, size_t first_cap_bytes,
		    size_t *offs, struct trn_bucket *b)
{
	size_t off = 0, cap = first_cap_bytes / sizeof(float);
	int nb = 0;

	if (np <= 0 || cap_bytes < sizeof(float) || first_cap_bytes < sizeof(float))
		return -EINVAL;
	for (int p = np - 1; p >= 0; p--) {
		if (sizes[p] == 0)
			return -EINVAL;
		/* Close the open bucket if this parameter would overflow it (a parameter larger than
		 * the cap goes alone). */
		if (nb > 0 && b[nb - 1].n > 0 && b[nb - 1].n + sizes[p] > cap) {
			cap = cap_bytes / sizeof(float);
			nb++;
			b[nb - 1] = (struct trn_bucket){ .off = off, .n = 0, .first = p, .last = p };
		}
		if (nb == 0) {
			nb = 1;
			b[0] = (struct trn_bucket){ .off = 0, .n = 0, .first = p, .last = p };
		}
		offs[p] = off;
		b[nb - 1].n += sizes[p];
		b[nb - 1].last = p;
		off += sizes[p];
	}
	return nb;
}

int trn_ddp_create(struct trn_coll *coll, struct trn_dev *dev, const size_t *sizes, int np,
		   size_t cap_bytes, size_t first_cap_bytes, int accum, struct trn_ddp **out)
{
	struct trn_ddp *d = calloc(1, sizeof(*d));

	*out = NULL;
	if (!d)
		return -ENOMEM;
	d->coll = coll;
	d->dev = dev;
	d->np = np;
	d->accum = accum < 1 ? 1 : accum;
	d->offs = calloc((size_t)np, sizeof(*d->offs));
	d->sizes = calloc((size_t)np, sizeof(*d->sizes));
	d->b = calloc((size_t)np, sizeof(*d->b));
	d->bucket_of = calloc((size_t)np, sizeof(int));
	d->pending = calloc((size_t)np, sizeof(int));
	d->req = calloc((size_t)np, sizeof(int));
	d->marked = calloc((size_t)np, 1);
	if (!d->offs || !d->sizes || !d->b || !d->bucket_of || !d->pending || !d->req || !d->marked) {
		trn_ddp_destroy(d);
		return -ENOMEM;
	}
	memcpy(d->sizes, sizes, sizeof(size_t) * (size_t)np);
	d->nb = trn_bucket_plan(sizes, np, cap_bytes, first_cap_bytes, d->offs, d->b);
	if (d->nb < 0) {
		int ret = d->nb;
		trn_ddp_destroy(d);
		return ret;
	}
	for (int k = 0; k < d->nb; k++) {
		for (int p = d->b[k].last; p <= d->b[k].first; p++)
			d->bucket_of[p] = k;
		d->req[k] = -1;
	}
	for (int p = 0; p < np; p++)
		d->total += sizes[p];
	*out = d;
	return 0;
}

void trn_ddp_destroy(struct trn_ddp *d)
{
	if (!d)
		return;
	free(d->offs);
	free(d->sizes);
	free(d->b);
	free(d->bucket_of);
	free(d->pending);
	free(d->req);
	free(d->marked);
	free(d);
}

int trn_ddp_weighted(struct trn_ddp *d)
{
	if (d->accum > 1 || d->weighted) {
		snprintf(d->err, sizeof(d->err), "weighted averaging: not with accumulation");
		return -EINVAL;
	}
	d->weighted = 1;
	d->cslot = d->b[0].off + d->b[0].n;
	d->b[0].n++;
	for (int k = 1; k < d->nb; k++)
		d->b[k].off++;
	for (int p = 0; p < d->np; p++)
		if (d->bucket_of[p] > 0)
			d->offs[p]++;
	d->total++;
	return 0;
}

void trn_ddp_set_weight(struct trn_ddp *d, float w)
{
	d->weight = w > 0 ? w : 0;
}

const size_t *trn_ddp_offsets(const struct trn_ddp *d)
{
	return d->offs;
}

int trn_ddp_buckets(const struct trn_ddp *d, const struct trn_bucket **b)
{
	*b = d->b;
	return d->nb;
}

size_t trn_ddp_total(const struct trn_ddp *d)
{
	return d->total;
}

const char *trn_ddp_error(const struct trn_ddp *d)
{
	return d->err;
}

static int coll_fail(struct trn_ddp *d, int ret, const char *what)
{
	snprintf(d->err, sizeof(d->err), "%s (%s): %s", what, d->coll->ops->name,
		 d->coll->err[0] ? d->coll->err : "failed");
	return ret;
}

int trn_ddp_broadcast(struct trn_ddp *d, float *params)
{
	int ret = d->coll->ops->bcast(d->coll, params, d->total, 0);

	return ret < 0 ? coll_fail(d, ret, "broadcasting rank 0's parameters") : 0;
}

void trn_ddp_begin(struct trn_ddp *d, uint64_t micro, int *sync, int *accumulate)
{
	d->sync = d->accum == 1 || micro % (uint64_t)d->accum == (uint64_t)d->accum - 1;
	*sync = d->sync;
	*accumulate = d->accum > 1 && micro % (uint64_t)d->accum != 0;
	for (int k = 0; k < d->nb; k++)
		d->pending[k] = d->b[k].first - d->b[k].last + 1;
	memset(d->marked, 0, (size_t)d->np);
	d->next = 0;
	d->last_launched = -1;
	d->order_ok = 1;
}

int trn_ddp_ready(struct trn_ddp *d, int p, float *grads)
{
	if (p < 0 || p >= d->np) {
		snprintf(d->err, sizeof(d->err), "parameter %d marked ready: there are %d", p, d->np);
		return -EINVAL;
	}
	if (d->marked[p]) {
		/* Caught here, not when the bucket's count runs out: the bucket must not start
		 * before its other parameters are written. */
		snprintf(d->err, sizeof(d->err), "parameter %d marked ready twice in one micro-step", p);
		return -EINVAL;
	}
	d->marked[p] = 1;
	int k = d->bucket_of[p];
	d->pending[k]--;
	if (!d->sync)
		return 0;
	/* Launch in index order: bucket k only after 0..k-1, on every rank the same sequence, so
	 * that collectives match across ranks. */
	while (d->next < d->nb && d->pending[d->next] == 0) {
		struct trn_bucket *b = &d->b[d->next];
		int ret = 0;
		if (d->weighted) {
			/* the rank's share of the sum: its mean gradient times its weight; bucket 0
			 * also carries the weight itself (the count), summed by the same allreduce */
			size_t n = d->next == 0 ? b->n - 1 : b->n;
			ret = d->dev->ops->scale(d->dev, TRN_STREAM_COMPUTE, grads + b->off, n, d->weight);
			if (ret == 0 && d->next == 0)
				ret = d->dev->ops->copy_h2d(d->dev, TRN_STREAM_COMPUTE, grads + d->cslot,
							    &d->weight, sizeof(float));
		}
		if (ret == 0)
			ret = d->dev->ops->event_record(d->dev, EV_GRADS, TRN_STREAM_COMPUTE);
		if (ret == 0)
			ret = d->dev->ops->stream_wait(d->dev, TRN_STREAM_COMM, EV_GRADS);
		if (ret < 0) {
			snprintf(d->err, sizeof(d->err), "ordering the allreduce after backward: %s",
				 d->dev->err);
			return ret;
		}
		ret = d->coll->ops->iallreduce(d->coll, grads + b->off, b->n, &d->req[d->next]);
		if (ret < 0)
			return coll_fail(d, ret, "starting a bucket's allreduce");
		d->st.launched++;
		/* The invariant every rank relies on, checked at each launch: index order. */
		if (d->next != d->last_launched + 1)
			d->order_ok = 0;
		d->last_launched = d->next;
		d->next++;
	}
	return 0;
}

int trn_ddp_progress(struct trn_ddp *d)
{
	for (int k = 0; k < d->next; k++)
		if (d->req[k] >= 0) {
			int ret = d->coll->ops->test(d->coll, d->req[k]);
			if (ret < 0)
				return coll_fail(d, ret, "allreduce");
			if (ret == 1)
				d->req[k] = -2;  /* done; nothing left to wait for */
		}
	return 0;
}

int trn_ddp_step(struct trn_ddp *d, float *params, float *grads, float *mom, float lr, float mu)
{
	if (!d->sync)
		return 0;
	if (d->next != d->nb) {
		snprintf(d->err, sizeof(d->err), "step with %d of %d buckets launched: backward did not "
			 "mark every parameter ready", d->next, d->nb);
		return -EINVAL;
	}
	float scale = 1.0f / (float)d->accum;
	if (!d->coll->averages)
		scale /= (float)d->coll->world;
	for (int k = 0; k < d->nb; k++) {
		struct trn_bucket *b = &d->b[k];
		if (d->req[k] >= 0) {
			uint64_t t0 = clk_now_ns();
			int ret = d->coll->ops->wait(d->coll, d->req[k]);
			d->st.exposed_ns += clk_now_ns() - t0;
			if (ret < 0)
				return coll_fail(d, ret, "allreduce");
		}
		d->req[k] = -1;
		size_t n = b->n;
		if (d->weighted && k == 0) {
			float count = 0;
			int ret = d->dev->ops->copy_d2h(d->dev, TRN_STREAM_COMPUTE, &count,
							grads + d->cslot, sizeof(count));
			if (ret == 0)
				ret = d->dev->ops->sync(d->dev, TRN_STREAM_COMPUTE);
			if (ret < 0) {
				snprintf(d->err, sizeof(d->err), "reading the summed count: %s", d->dev->err);
				return ret;
			}
			/* a backend that averages (NCCL) divides sum and count alike: same ratio */
			scale = count > 0 ? 1.0f / count : 0.0f;
			n--;  /* the count slot is no parameter */
		}
		int ret = d->dev->ops->sgd(d->dev, TRN_STREAM_COMPUTE, params + b->off, grads + b->off,
					   mom + b->off, n, lr, mu, scale);
		if (ret < 0) {
			snprintf(d->err, sizeof(d->err), "optimizer: %s", d->dev->err);
			return ret;
		}
	}
	d->st.last_order_ok = d->order_ok;
	return 0;
}

void trn_ddp_get_stats(const struct trn_ddp *d, struct trn_ddp_stats *st)
{
	*st = d->st;
}
