/* main.c - trainer: one rank of data-parallel training. Launched alone or by mpirun/srun; takes
 * batches from its loaderd ring (or makes a synthetic batch once), copies them to the device while
 * the previous step computes, averages gradients with the DDP core, and attributes every step's
 * time: data wait, exposed copy, compute, exposed allreduce, optimizer.
 *
 * This file is the driver over the units: opts (command line), registry (device and backend by
 * name), resume (checkpoints and the consumed log), data (loaderd ring or synthetic batch,
 * prefetch), loop (the steps), steps (gather and trace) and report (figures, verdict, JSON). */
#include "common/log.h"
#include "trainer/s3data.h"
#include "trainer/coll.h"
#include "trainer/data.h"
#include "trainer/ddp.h"
#include "trainer/dev.h"
#include "trainer/fatal.h"
#include "trainer/loop.h"
#include "trainer/model.h"
#include "trainer/opts.h"
#include "trainer/registry.h"
#include "trainer/report.h"
#include "trainer/resume.h"
#include "trainer/steps.h"

#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model, its DDP core and the flat parameter, gradient and momentum buffers, initialised
 * and broadcast from rank 0. */
static void model_open(struct trn_train *t, const struct trn_opts *o, struct trn_coll *coll)
{
	struct trn_dev *dev = t->dev;
	struct trn_model_shape shp = { .h = o->crop, .w = o->crop, .c = 3, .nchw = t->data->nchw,
				       .classes = t->data->classes, .batch = t->data->batch };
	const size_t *sizes;
	char err[512];

	if (trn_model_create(o->model, dev, &shp, &t->m, err, sizeof(err)) < 0)
		trn_die("%s", err);
	int np = t->m->ops->params(t->m, &sizes);
	if (trn_ddp_create(coll, dev, sizes, np, (size_t)(o->bucket_mb * 1048576.0),
			   (size_t)(o->first_bucket_mb * 1048576.0), o->accum, &t->ddp) < 0)
		trn_die("DDP: no bucket plan for bucket caps of %g MiB (first %g MiB): each must hold a "
			"float", o->bucket_mb, o->first_bucket_mb);
	if (o->balance && trn_ddp_weighted(t->ddp) < 0)
		trn_die("%s", trn_ddp_error(t->ddp));
	size_t total = trn_ddp_total(t->ddp);
	t->params = dev->ops->alloc(dev, total * sizeof(float));
	t->grads = dev->ops->alloc(dev, total * sizeof(float));
	t->mom = dev->ops->alloc(dev, total * sizeof(float));
	if (!t->params || !t->grads || !t->mom)
		trn_die("out of device memory for %zu parameters", total);
	if (t->m->ops->init(t->m, t->params, trn_ddp_offsets(t->ddp), o->seed) < 0)
		trn_die("initialising the model: %s", dev->err);
	if (trn_ddp_broadcast(t->ddp, t->params) < 0)
		trn_die("%s", trn_ddp_error(t->ddp));
}

/* --dump-params: the final parameters, float32, in forward order. */
static void dump_params(const struct trn_train *t, const char *path)
{
	struct trn_dev *dev = t->dev;
	size_t total = trn_ddp_total(t->ddp);
	const size_t *sizes, *offs = trn_ddp_offsets(t->ddp);
	int np = t->m->ops->params(t->m, &sizes);
	float *h = malloc(total * sizeof(float));
	FILE *f = fopen(path, "wb");

	if (!h || !f)
		trn_die("--dump-params %s: %s", path, strerror(errno));
	if (dev->ops->copy_d2h(dev, TRN_STREAM_COMPUTE, h, t->params, total * sizeof(float)) < 0 ||
	    dev->ops->sync(dev, TRN_STREAM_COMPUTE) < 0)
		trn_die("device: %s", dev->err);
	for (int p = 0; p < np; p++)
		fwrite(h + offs[p], sizeof(float), sizes[p], f);
	if (fclose(f) != 0)
		trn_die("--dump-params %s: write failed", path);
	free(h);
}

/* Rank 0 judges every rank's steps, prints the report and writes --report-json. */
static void report(const struct trn_train *t, const struct trn_opts *o, struct trn_coll *coll,
		   int rank, int world)
{
	struct trn_step *store;
	struct trn_rank_run *runs = trn_steps_gather(&t->run, rank, world, &store);
	const struct trn_bucket *bk;
	struct trn_report rep;
	int ret;

	if (rank != 0)
		return;
	struct trn_run_info info = {
		.device = t->dev->ops->name, .backend = coll->ops->name, .model = o->model,
		.world = world, .batch = o->batch, .accum = o->accum, .crop = o->crop,
		.classes = t->data->classes, .synthetic = o->synthetic, .steps = t->ran,
		.warmup = (uint64_t)t->warmup, .params = trn_ddp_total(t->ddp),
		.buckets = trn_ddp_buckets(t->ddp, &bk), .bucket_mb = o->bucket_mb,
		.first_bucket_mb = o->first_bucket_mb,
	};
	if (trn_report_compute(runs, world, &info, NULL, &rep) < 0)
		trn_die("out of memory for the report");
	if (o->report_json && (ret = trn_report_save_json(&rep, o->report_json)) < 0)
		trn_die("--report-json %s: %s", o->report_json, strerror(-ret));
	trn_report_print(&rep, stdout);
	fflush(stdout);
	trn_report_fini(&rep);
	free(runs);
	free(store);
}

int main(int argc, char **argv)
{
	struct trn_opts o;
	struct trn_data d;
	struct trn_dev *dev;
	struct trn_coll *coll;
	char err[512];
	int rank, world, local_rank = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	log_prog = "trainer";
	trn_opts_parse(argc, argv, &o);

	MPI_Comm local;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
	MPI_Comm_rank(local, &local_rank);
	MPI_Comm_free(&local);
	trn_s3_dataset(&o, local_rank, rank);  /* s3://: the node cache, or the user's cache */

	if (trn_dev_open_named(o.device, local_rank, rank == 0, &dev, err, sizeof(err)) < 0)
		trn_die("--device %s: %s", o.device ? o.device : "auto", err);
	if (trn_coll_open_named(o.backend, dev, &coll, err, sizeof(err)) < 0)
		trn_die("%s", err);
	struct trn_resume *res;
	struct trn_start start;
	int resumed = trn_resume_open(&o, rank, world, &start, &res);
	trn_data_open(&d, &o, dev, rank, world, resumed ? &start : NULL);
	struct trn_train t = { .o = &o, .dev = dev, .data = &d, .rank = rank, .resume = res };
	model_open(&t, &o, coll);
	trn_resume_begin(res, &t);
	if (rank == 0) {
		const struct trn_bucket *bk;
		LOG_INFO("%d ranks, device %s, backend %s, model %s: %zu parameters in %d buckets, "
			 "batch %d x %d ranks%s, %s", world, dev->ops->name, coll->ops->name, o.model,
			 trn_ddp_total(t.ddp), trn_ddp_buckets(t.ddp, &bk), o.batch, world,
			 o.accum > 1 ? " (accumulated)" : "",
			 o.synthetic ? "synthetic data" : "data from loaderd");
	}

	trn_train_run(&t);
	trn_data_close(&d);
	trn_resume_close(res);

	report(&t, &o, coll, rank, world);
	if (o.trace)
		trn_steps_write_trace(o.trace, t.rec, t.n_rec, rank, world);
	if (o.dump && rank == 0)
		dump_params(&t, o.dump);

	free(t.rec);
	dev->ops->free(dev, t.params);
	dev->ops->free(dev, t.grads);
	dev->ops->free(dev, t.mom);
	t.m->ops->destroy(t.m);
	trn_ddp_destroy(t.ddp);
	coll->ops->close(coll);
	dev->ops->close(dev);
	MPI_Finalize();
	return 0;
}
