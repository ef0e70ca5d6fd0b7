/* gpu_mlp.c - the mlp's forward and backward through the DDP core on the GPU (cuBLAS, the device
 * kernels, NCCL on the comm stream) against the same on the host device (OpenBLAS, the MPI
 * backend), step by step (issue 7: "the mlp's cuBLAS forward/backward matches the host
 * implementation to tolerance"; gpu_ops.c checks the ops one by one).
 *
 * One singleton MPI rank. Both sides build mlp:hidden=96 on 40x40x3 images (pooled by 3 to
 * 13x13x3: a pool that does not divide the side), 10 classes, batch 24, with small DDP buckets
 * (several allreduces start during backward), the same seed, and train 6 SGD steps (lr 0.05,
 * momentum 0.9) on the same seeded batches: weights 1 with every fifth sample 0 (tail padding),
 * the last batch short (20 of 24). Checked:
 *   - the initial parameters are equal bit for bit (init is deterministic and copied over);
 *   - every step: the loss sum within 1e-5 relative, the correct count within 1 (a near tie can
 *     go either way under another summation order);
 *   - after step 1: the gradients within 1e-4 relative L2 distance;
 *   - after step 6: the parameters within 1e-4 relative L2, and moved from the initial ones
 *     (by more than 1e-3 relative: the comparison is not between two untouched copies). */
#include "tests/gpu_util.h"
#include "trainer/coll.h"
#include "trainer/ddp.h"
#include "trainer/dev.h"
#include "trainer/model.h"

#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#define SIDE 40
#define CLASSES 10
#define BATCH 24
#define STEPS 6

struct side {
	struct trn_dev *dev;
	struct trn_coll *coll;
	struct trn_model *m;
	struct trn_ddp *ddp;
	float *params, *grads, *mom;  /* device */
	size_t total;
};

static void side_open(struct side *s, struct trn_dev *dev, struct trn_coll *coll)
{
	const struct trn_model_shape shp = { .h = SIDE, .w = SIDE, .c = 3, .nchw = 0,
					     .classes = CLASSES, .batch = BATCH };
	const size_t *sizes;
	char err[256];
	int np;

	s->dev = dev;
	s->coll = coll;
	if (trn_model_create("mlp:hidden=96", dev, &shp, &s->m, err, sizeof(err)) < 0)
		harness_die("%s: mlp: %s", dev->ops->name, err);
	np = s->m->ops->params(s->m, &sizes);
	/* 0.1 MiB buckets, the first 0.01 MiB: W1 alone, the rest split: several allreduces */
	if (trn_ddp_create(coll, dev, sizes, np, 100u << 10, 10u << 10, 1, &s->ddp) < 0)
		harness_die("%s: no bucket plan", dev->ops->name);
	s->total = trn_ddp_total(s->ddp);
	s->params = dev->ops->alloc(dev, s->total * sizeof(float));
	s->grads = dev->ops->alloc(dev, s->total * sizeof(float));
	s->mom = dev->ops->alloc(dev, s->total * sizeof(float));
	if (!s->params || !s->grads || !s->mom)
		harness_die("%s: alloc: %s", dev->ops->name, dev->err);
	if (s->m->ops->init(s->m, s->params, trn_ddp_offsets(s->ddp), 7) < 0 ||
	    trn_ddp_broadcast(s->ddp, s->params) < 0)
		harness_die("%s: init / broadcast: %s %s", dev->ops->name, dev->err,
			    trn_ddp_error(s->ddp));
}

static void side_close(struct side *s)
{
	s->dev->ops->free(s->dev, s->params);
	s->dev->ops->free(s->dev, s->grads);
	s->dev->ops->free(s->dev, s->mom);
	s->m->ops->destroy(s->m);
	trn_ddp_destroy(s->ddp);
}

/* One micro-step (= one optimizer step: accum 1) on host inputs. 0 or -errno (message printed). */
static int side_step(struct side *s, uint64_t step, const uint8_t *img, const int64_t *lab,
		     const float *w, int count, double out[2])
{
	struct trn_dev *d = s->dev;
	uint8_t *di = dev_put(d, img, (size_t)BATCH * SIDE * SIDE * 3);
	int64_t *dl = dev_put(d, lab, (size_t)BATCH * sizeof(int64_t));
	float *dw = dev_put(d, w, (size_t)BATCH * sizeof(float));
	int sync, acc, ret;

	trn_ddp_begin(s->ddp, step, &sync, &acc);
	ret = s->m->ops->step(s->m, di, dl, dw, count, s->params, s->grads, trn_ddp_offsets(s->ddp),
			      acc, s->ddp, out);
	if (ret == 0)
		ret = d->ops->sync(d, TRN_STREAM_COMPUTE);
	if (ret == 0)
		ret = trn_ddp_step(s->ddp, s->params, s->grads, s->mom, 0.05f, 0.9f);
	if (ret == 0)
		ret = d->ops->sync(d, TRN_STREAM_COMPUTE);
	if (ret < 0)
		printf("#   %s step %" PRIu64 ": %s %s\n", d->ops->name, step, d->err,
		       trn_ddp_error(s->ddp));
	d->ops->free(d, di);
	d->ops->free(d, dl);
	d->ops->free(d, dw);
	return ret;
}

static float *download(struct side *s, const float *dptr)
{
	float *h = xmalloc(s->total * sizeof(float));

	dev_get(s->dev, h, dptr, s->total * sizeof(float));
	return h;
}

int main(int argc, char **argv)
{
	struct trn_dev *gd, *hd;
	struct trn_coll *gc = NULL, *hc = NULL;
	struct side g, h;
	struct gpu_rng rng;
	char err[512] = "";
	int ret;

	argc = gpu_open("gpu_mlp", argc, argv, &gd);
	if (argc > 1) {
		fprintf(stderr, "usage: gpu_mlp [--self-check]\n");
		return 2;
	}
	rng.s = g_seed;
	MPI_Init(&argc, &argv);
	if (trn_dev_host_open(&hd) < 0 || trn_coll_mpi_open(&hc) < 0)
		harness_die("out of memory");
	ret = g_self ? trn_coll_mpi_open(&gc) : trn_coll_nccl_open(gd, &gc, err, sizeof(err));
	if (!CHECK(ret == 0, "%s communicator opens (%d%s%s)", g_self ? "MPI" : "NCCL", ret,
		   ret ? ": " : "", err)) {
		MPI_Finalize();
		return gpu_done("gpu_mlp");
	}
	side_open(&g, gd, gc);
	side_open(&h, hd, hc);
	CHECK(g.total == h.total, "same parameter count on both (%zu, %zu)", g.total, h.total);
	printf("# mlp:hidden=96 on %dx%dx3, %d classes: %zu parameters\n", SIDE, SIDE, CLASSES, h.total);

	float *init_g = download(&g, g.params), *init_h = download(&h, h.params);
	CHECK(same_floats("initial parameters", init_g, init_h, h.total),
	      "initial parameters equal bit for bit");

	uint8_t *img = xmalloc((size_t)BATCH * SIDE * SIDE * 3);
	int64_t lab[BATCH];
	float w[BATCH];
	int loss_ok = 1, hit_ok = 1, run_ok = 1;
	double worst_loss = 0;
	for (int step = 0; step < STEPS && run_ok; step++) {
		int count = step == STEPS - 1 ? 20 : BATCH;
		for (int i = 0; i < BATCH; i++) {
			lab[i] = (int64_t)(rng_next(&rng) % CLASSES);
			w[i] = i % 5 == 4 ? 0.0f : 1.0f;
			/* class-dependent mean, so that the steps go somewhere */
			for (int p = 0; p < SIDE * SIDE * 3; p++)
				img[(size_t)i * SIDE * SIDE * 3 + p] =
					(uint8_t)(30 + 18 * lab[i] + (int)(rng_next(&rng) % 60));
		}
		double og[2] = { 0, 0 }, oh[2] = { 0, 0 };
		int rg = side_step(&g, (uint64_t)step, img, lab, w, count, og);
		int rh = side_step(&h, (uint64_t)step, img, lab, w, count, oh);
		if (rg || rh) {
			run_ok = 0;
			break;
		}
		double e = fabs(og[0] - oh[0]) / fmax(fabs(oh[0]), 1e-30);
		worst_loss = fmax(worst_loss, e);
		printf("#   step %d (%d samples): loss sum %.9g vs host %.9g, correct %.0f vs %.0f\n",
		       step + 1, count, og[0], oh[0], og[1], oh[1]);
		loss_ok &= e <= 1e-5;
		hit_ok &= fabs(og[1] - oh[1]) <= 1;
		if (step == 0) {
			float *gg = download(&g, g.grads), *gh = download(&h, h.grads);
			double r = rel_l2(gg, gh, h.total);
			CHECK(all_finite(gg, g.total) && r <= 1e-4, "step 1: gradients within 1e-4 relative "
			      "L2 of the host's (%.3g)", r);
			free(gg);
			free(gh);
		}
	}
	CHECK(run_ok, "%d steps ran on both devices", STEPS);
	CHECK(loss_ok, "every step's loss sum within 1e-5 relative of the host's (worst %.3g)",
	      worst_loss);
	CHECK(hit_ok, "every step's correct count within 1 of the host's");
	{
		float *pg = download(&g, g.params), *ph = download(&h, h.params);
		double r = rel_l2(pg, ph, h.total), moved = rel_l2(ph, init_h, h.total);
		CHECK(all_finite(pg, g.total) && r <= 1e-4, "after %d steps: parameters within 1e-4 "
		      "relative L2 of the host's (%.3g)", STEPS, r);
		CHECK(moved > 1e-3, "  and they moved from the initial ones (%.3g relative)", moved);
		free(pg);
		free(ph);
	}
	free(init_g);
	free(init_h);
	free(img);
	side_close(&g);
	side_close(&h);
	gc->ops->close(gc);
	hc->ops->close(hc);
	gd->ops->close(gd);
	hd->ops->close(hd);
	MPI_Finalize();
	return gpu_done("gpu_mlp");
}
