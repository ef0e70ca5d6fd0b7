/* data.c - the trainer's data path (data.h): the loaderd job of this rank, the prefetch of ring
 * batches onto the device, and the synthetic batch. Also where the class count is decided, once:
 * --classes, else the dataset's (its class table, else the largest label + 1), else 10. */
#include "trainer/data.h"

#include "common/clk.h"
#include "common/fieldesc.h"
#include "common/log.h"
#include "formats/dpk.h"
#include "s3/s3.h"
#include "trainer/fatal.h"

#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Steps of reports kept beyond the ring's slots: the 4 of an update and the batches released
 * ahead of the one computed (prefetch). */
#define REPORTS_BACK (CTL_SPLIT_EVERY + TRN_PREFETCH_MAX + 2)
#define WEIGHTS_MAX 65536   /* host weight staging per buffer: --batch is at most this */

/* Classes as the model needs them: @want (--classes), else the class table, else (WebDataset,
 * npy) the largest label + 1; at least 2. A dataset without labels (image-text pairs) is refused:
 * the models here are classifiers. */
static int dataset_classes(const char *path, int want)
{
	struct dpk *dp;
	char err[512];
	int classes;

	if (dpk_open(path, DPK_OPEN_NO_INDEX_CHECK, &dp, err, sizeof(err)) < 0)
		trn_die("dataset %s: %s", path, err);
	if (!dpk_has_labels(dp))
		trn_die("dataset %s has no labels (dpack pack --no-labels): the trainer's models are "
			"classifiers", path);
	classes = want ? want : (int)dpk_class_count(dp);
	if (classes < 2 && !want) {
		int64_t mx = 0;
		struct dpk_entry e;  /* loaded: a set of shards has no whole index (formats/dpk.h) */
		for (uint64_t i = 0; i < dpk_count(dp); i++)
			if (dpk_entry_load(dp, i, &e, NULL, 0) == 0 && e.label > mx)
				mx = e.label;
		classes = (int)mx + 1 < 2 ? 2 : (int)mx + 1;
	}
	dpk_close(dp);
	return classes;
}

/* Attach to loaderd and open this rank's part of the job at @start. */
static void open_job(struct trn_data *d, const struct trn_opts *o, int rank, int world,
		     const struct trn_start *start)
{
	char sock[256], job[64], err[512];
	const char *socket = o->socket, *name = o->job;

	if (!socket)
		socket = ldc_default_socket(sock, sizeof(sock));
	if (!name) {
		/* A fresh job per launch: rank 0's pid and start time, shared with every rank.
		 * Resuming after a crash is --resume: the checkpoint's token names the step. */
		uint64_t id[2] = { (uint64_t)getpid(), clk_now_ns() };
		MPI_Bcast(id, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
		snprintf(job, sizeof(job), "trainer-%" PRIu64 "-%" PRIx64, id[0], id[1] & 0xffffffffu);
		name = job;
	}
	if (ldc_connect(socket, &d->c, err, sizeof(err)) < 0)
		trn_die("%s", err);
	/* still a URL: loaderd's node cache took it (trn_s3_dataset); offered again on this
	 * connection, which the job opens on */
	if (s3_is_url(o->dataset)) {
		int r = ldc_s3_offer(d->c, o->dataset);
		if (r < 0)
			trn_die("%s", ldc_error(d->c));
		if (r == 1)
			trn_die("%s: loaderd no longer has a node cache (restarted without "
				"--cache-dir?): run again", o->dataset);
	}
	struct ldc_job j = { .job = name, .dataset = o->dataset, .batch = (uint32_t)o->batch,
			     .crop_h = (uint32_t)o->crop, .crop_w = (uint32_t)o->crop,
			     .transforms = CTL_TF_RANDOM_RESIZED_CROP | CTL_TF_HFLIP,
			     .seed = o->seed, .rank = (uint32_t)rank, .world = (uint32_t)world,
			     .tail = CTL_TAIL_MASK, .slots = (uint32_t)o->slots,
			     .epochs = (uint32_t)o->epochs,
			     /* exactly step 0 when not resuming, even if a job of this name lingers */
			     .start_at = 1, .share_group = o->share_group, .owner = o->owner,
			     .balance = o->balance, .sampling = o->sampling, .block = o->block,
			     .window = o->window, .window_shards = o->window_shards };
	if (start && !start->token)
		trn_die("the checkpoint has no loader token (written by a --synthetic run)");
	if (start) {
		j.token = start->token;
		j.token_len = start->token_len;
	}
	/* A checkpoint's split seed: a loaderd that lost the job replays its splits from it. */
	if (start && start->split_len && o->balance &&
	    ldc_split_seed(d->c, start->split, start->split_len) < 0)
		trn_die("the checkpoint's split seed: %s", ldc_error(d->c));
	if (ldc_open(d->c, &j, &d->info) < 0)
		trn_die("loaderd: %s", ldc_error(d->c));
	if (start && d->info.first_step != start->step)
		trn_die("loaderd started at step %" PRIu64 ", the checkpoint is at step %" PRIu64,
			d->info.first_step, start->step);
	d->first_step = d->info.first_step;
	if (start && o->balance && start->report > 0 && ldc_report(d->c, start->report) == 0)
		d->report = start->report;
	if (o->balance) {
		/* the reports that the splits of the next updates take: 4 + slots steps back, and the
		 * steps released ahead of the one computed */
		d->rep_n = d->info.ring->slots + REPORTS_BACK;
		d->rep_hist = calloc(d->rep_n, sizeof(*d->rep_hist));
		if (!d->rep_hist)
			trn_die("out of memory");
	}
	d->sample_bytes = d->info.ring->sample_bytes;
	d->nchw = d->info.ring->layout == RING_LAYOUT_NCHW;
	/* Pin the whole ring once: every copy from a slot is then a DMA. */
	if (d->dev->ops->host_register(d->dev, ldc_ring_base(d->c), ldc_ring_size(d->c)) < 0)
		trn_die("registering the ring with the device: %s", d->dev->err);
	if ((uint32_t)d->depth > d->info.ring->slots) {
		/* holding more batches than the ring has slots would wait for a slot forever */
		if (rank == 0)
			LOG_WARN("--prefetch %d needs %d ring slots; the ring has %u: prefetching %u",
				 o->prefetch, d->depth, d->info.ring->slots, d->info.ring->slots - 1);
		d->depth = (int)d->info.ring->slots;
	}
}

/* The synthetic batch: sample id i*world + rank, label id % classes, pixels with a class-dependent
 * mean so that the mlp can learn it. Made once; every step reuses it. */
static void make_synthetic(struct trn_data *d, int batch, int crop, int rank, int world)
{
	size_t per = (size_t)crop * crop * 3;
	uint8_t *img = malloc(per * (size_t)batch);
	int64_t *lab = malloc(sizeof(int64_t) * (size_t)batch);
	float *w = malloc(sizeof(float) * (size_t)batch);

	if (!img || !lab || !w)
		trn_die("out of memory for the synthetic batch");
	for (int i = 0; i < batch; i++) {
		uint64_t id = (uint64_t)i * (uint64_t)world + (uint64_t)rank;
		lab[i] = (int64_t)(id % (uint64_t)d->classes);
		w[i] = 1.0f;
		uint64_t x = id * 0x9e3779b97f4a7c15ull + 1;
		for (size_t p = 0; p < per; p++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			int ch = (int)(p % 3), base = 40 + (int)((lab[i] * 37 + ch * 71) % 170);
			img[(size_t)i * per + p] = (uint8_t)(base + (int)(x % 40));
		}
	}
	struct trn_dev *dv = d->dev;
	if (dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->img[0], img, per * (size_t)batch) < 0 ||
	    dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->lab[0], lab, sizeof(int64_t) * (size_t)batch) < 0 ||
	    dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->wt[0], w, sizeof(float) * (size_t)batch) < 0 ||
	    dv->ops->sync(dv, TRN_STREAM_COPY) < 0)
		trn_die("device: %s", dv->err);
	free(img);
	free(lab);
	free(w);
}

void trn_data_open(struct trn_data *d, const struct trn_opts *o, struct trn_dev *dev, int rank,
		   int world, const struct trn_start *start)
{
	*d = (struct trn_data){ .dev = dev, .depth = o->prefetch + 1, .synthetic = o->synthetic,
				.batch = o->balance ? (int)CTL_BALANCE_CAP((uint32_t)o->batch) : o->batch,
				.balance = o->balance, .classes = o->classes };
	if (o->dataset && !s3_is_url(o->dataset))  /* a URL (the node cache) came with --classes */
		d->classes = dataset_classes(o->dataset, d->classes);
	else if (!d->classes)
		d->classes = 10;
	/* --steps counts optimizer steps: each is accum micro-steps; --epochs counts ring steps. */
	d->micro_total = (uint64_t)o->steps * (uint64_t)o->accum;
	if (o->synthetic) {
		d->sample_bytes = (size_t)o->crop * o->crop * 3;
		d->first_step = start ? start->step : 0;
	} else {
		open_job(d, o, rank, world, start);
		if (o->epochs)
			d->micro_total = d->info.steps_total;  /* one ring step per micro-step */
	}
	d->hw = calloc((size_t)d->depth * WEIGHTS_MAX, sizeof(float));
	d->hid = calloc((size_t)d->depth * (size_t)d->batch, sizeof(uint64_t));
	if (!d->hid)
		trn_die("out of memory");
	for (int k = 0; k < d->depth; k++) {
		d->img[k] = dev->ops->alloc(dev, d->sample_bytes * (size_t)d->batch);
		d->lab[k] = dev->ops->alloc(dev, sizeof(int64_t) * (size_t)d->batch);
		d->wt[k] = dev->ops->alloc(dev, sizeof(float) * (size_t)d->batch);
		if (!d->img[k] || !d->lab[k] || !d->wt[k] || !d->hw)
			trn_die("out of device memory for %d batches of %d", d->depth, d->batch);
	}
	if (o->synthetic)
		make_synthetic(d, o->batch, o->crop, rank, world);
	if (o->log_samples) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.%d", o->log_samples, rank);
		if (!(d->slog = fopen(path, "w")))
			trn_die("--log-samples %s: %s", path, strerror(errno));
	}
}

/* Acquire the next ring batch and start its copy into device buffer (issued % depth). Returns
 * 1 when a batch was started, 0 at the end of the job. Adds the blocking time to *wait_ns. */
static int issue_next(struct trn_data *d, uint64_t *wait_ns, uint64_t *copy_ns)
{
	int k = (int)(d->issued % (uint64_t)d->depth);
	struct trn_inflight *f = &d->q[k];
	uint64_t t0 = clk_now_ns();
	int ret = ldc_acquire(d->c, 60000, &f->b);

	*wait_ns += clk_now_ns() - t0;
	if (ret == -ENODATA) {
		d->done = 1;
		return 0;
	}
	if (ret < 0)
		trn_die("loaderd: %s", ldc_error(d->c));
	f->held = 1;
	f->count = (int)f->b.count;
	for (uint32_t i = 0; d->slog && i < f->b.count; i++) {
		const struct ldc_batch *b = &f->b;
		fprintf(d->slog, "%" PRIu64 " %" PRIu64 " %" PRId64 " %u", b->step, b->ids[i],
			b->labels[i], (unsigned)b->sample_flags[i]);
		for (uint32_t a = 0; a < b->aux_fields; a++)  /* a caption, metadata: as ldcat */
			fieldesc_put(d->slog, ldc_aux_name(d->c, a),
				     b->aux + b->field_off[i * b->aux_fields + a],
				     b->field_len[i * b->aux_fields + a]);
		putc('\n', d->slog);
	}
	f->ev = k + 1;  /* event 0 belongs to the DDP core */
	f->valid = 0;
	f->step = f->b.step;
	memcpy(d->hid + (size_t)k * (size_t)d->batch, f->b.ids, f->b.count * sizeof(uint64_t));
	for (uint32_t i = 0; i < f->b.count; i++) {
		int pad = !!(f->b.sample_flags[i] & RING_SAMPLE_PADDING);
		d->hw[(size_t)k * WEIGHTS_MAX + i] = pad ? 0.0f : 1.0f;
		f->valid += !pad;
	}
	struct trn_dev *dv = d->dev;
	uint64_t t1 = clk_now_ns();
	/* The copy stream reads the pinned ring slot directly: no staging copy on the host. */
	if (dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->img[k], f->b.data, (size_t)f->count * d->sample_bytes) < 0 ||
	    dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->lab[k], f->b.labels, (size_t)f->count * sizeof(int64_t)) < 0 ||
	    dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->wt[k], d->hw + (size_t)k * WEIGHTS_MAX, (size_t)f->count * sizeof(float)) < 0 ||
	    dv->ops->event_record(dv, f->ev, TRN_STREAM_COPY) < 0)
		trn_die("device: %s", dv->err);
	*copy_ns += clk_now_ns() - t1;  /* issuing only on a GPU; the whole copy on the host */
	d->issued++;
	return 1;
}

/* Give back ring slots whose copies have completed: the slot returns to loaderd as soon as the
 * bytes are on the device, not after the step. */
static void release_copied(struct trn_data *d)
{
	for (int k = 0; k < d->depth; k++) {
		struct trn_inflight *f = &d->q[k];
		if (f->held && d->dev->ops->event_done(d->dev, f->ev) == 1) {
			if (ldc_release(d->c, &f->b) < 0)
				trn_die("loaderd: %s", ldc_error(d->c));
			if (d->rep_hist)
				d->rep_hist[f->b.step % d->rep_n] = d->report;
			f->held = 0;
		}
	}
}

int trn_data_next(struct trn_data *d, uint64_t *wait_ns, uint64_t *copy_ns, struct trn_batch *b)
{
	struct trn_dev *dev = d->dev;

	if (d->synthetic) {
		*b = (struct trn_batch){ d->img[0], d->lab[0], d->wt[0], d->batch, d->batch,
					 d->first_step + d->consumed, NULL };
		return 1;
	}
	/* keep `prefetch` copies in flight ahead of this step */
	while (!d->done && d->issued < d->consumed + (uint64_t)d->depth) {
		release_copied(d);  /* slots whose bytes are on the device already */
		issue_next(d, wait_ns, copy_ns);
	}
	if (d->consumed == d->issued)
		return 0;  /* end of the job */
	int k = (int)(d->consumed % (uint64_t)d->depth);
	uint64_t t0 = clk_now_ns();
	/* exposed copy: how long compute would wait for this batch's bytes */
	if (dev->ops->event_sync(dev, d->q[k].ev) < 0 ||
	    dev->ops->stream_wait(dev, TRN_STREAM_COMPUTE, d->q[k].ev) < 0)
		trn_die("device: %s", dev->err);
	*copy_ns += clk_now_ns() - t0;
	release_copied(d);
	*b = (struct trn_batch){ d->img[k], d->lab[k], d->wt[k], d->q[k].count, d->q[k].valid,
				 d->q[k].step, d->hid + (size_t)k * (size_t)d->batch };
	return 1;
}

void trn_data_consumed(struct trn_data *d)
{
	d->consumed++;
}

uint32_t trn_data_token(struct trn_data *d, uint64_t step, uint8_t *buf)
{
	if (d->synthetic)
		return 0;
	int n = ldc_token(d->c, step, buf, LDC_TOKEN_SIZE);
	if (n < 0)
		trn_die("loaderd: %s", ldc_error(d->c));
	return (uint32_t)n;
}

void trn_data_close(struct trn_data *d)
{
	struct trn_dev *dev = d->dev;

	for (int k = 0; k < d->depth && d->c; k++)
		if (d->q[k].held)
			ldc_release(d->c, &d->q[k].b);
	if (d->c) {
		dev->ops->host_unregister(dev, ldc_ring_base(d->c));
		ldc_close(d->c);
		d->c = NULL;
	}
	if (d->slog && fclose(d->slog) != 0)
		trn_die("--log-samples: write failed: %s", strerror(errno));
	d->slog = NULL;
	free(d->hw);
	free(d->hid);
	free(d->rep_hist);
	d->rep_hist = NULL;
	for (int k = 0; k < d->depth; k++) {
		dev->ops->free(dev, d->img[k]);
		dev->ops->free(dev, d->lab[k]);
		dev->ops->free(dev, d->wt[k]);
	}
}

void trn_data_report(struct trn_data *d, uint64_t compute_ns, int count)
{
	/* a rank that cannot report keeps its share; nothing to stop the run for */
	if (d->balance && count > 0 && compute_ns > 0 &&
	    ldc_report(d->c, (double)compute_ns / count) == 0)
		d->report = (double)compute_ns / count;
}

double trn_data_report_of(const struct trn_data *d, uint64_t step)
{
	return d->rep_hist ? d->rep_hist[step % d->rep_n] : 0;
}

int trn_data_split_weights(struct trn_data *d, uint64_t step, uint32_t *w, uint32_t world)
{
	int ret = ldc_split_weights(d->c, step, w, world);
	if (ret < 0)
		trn_die("loaderd: %s", ldc_error(d->c));
	return ret;
}
