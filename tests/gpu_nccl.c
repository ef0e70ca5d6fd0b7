/* gpu_nccl.c - a one-rank NCCL communicator and its collectives (issue 7), on the CUDA device's
 * comm stream. MPI_Init as a singleton (no mpirun): the NCCL backend bootstraps over
 * MPI_COMM_WORLD and makes its own unique id for one rank.
 *
 * With one rank, the average (ncclAvg) and the broadcast are the identity, so every result can be
 * checked bit for bit against what was put in:
 *   - iallreduce + wait on 1 Mi + 3 floats;
 *   - three allreduces of different sizes in flight at once, completed by polling test();
 *   - TRN_COLL_REQS allreduces in flight, then one more is -EAGAIN; all complete; the ids are free
 *     again afterwards; waiting on an id not in flight is -EINVAL;
 *   - bcast from root 0 of 64 MiB that were copied from pinned host memory on the copy stream just
 *     before, without a sync: the broadcast is ordered after the copy stream's work (coll_nccl.cu
 *     says so), so the buffer read afterwards from the compute stream holds the copied data;
 *   - bcast from root 1 of 1 is -EINVAL.
 * --self-check runs the same on the host device with the MPI backend (which sums; one rank's sum
 * is the identity too). */
#include "tests/gpu_util.h"
#include "trainer/coll.h"
#include "trainer/dev.h"

#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#include <time.h>

static struct gpu_rng g_rng;

/* A device buffer of @n floats holding the seeded values in @host (allocated here). */
static float *buf_make(struct trn_dev *d, size_t n, float **host)
{
	*host = xmalloc(n * sizeof(float));
	fill_uniform(&g_rng, *host, n, -100.0f, 100.0f);
	return dev_put(d, *host, n * sizeof(float));
}

static int buf_same(struct trn_dev *d, const float *dbuf, const float *host, size_t n)
{
	float *back = xmalloc(n * sizeof(float));
	int ok;

	for (size_t i = 0; i < n; i++)
		back[i] = NAN;
	dev_get(d, back, dbuf, n * sizeof(float));
	ok = same_floats("collective result", back, host, n);
	free(back);
	return ok;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run(struct trn_dev *d, struct trn_coll *c)
{
	int ret, req;

	CHECK(c->rank == 0 && c->world == 1, "%s: rank %d of %d (a singleton MPI job)", c->ops->name,
	      c->rank, c->world);
	if (!g_self)
		CHECK(c->averages == 1, "nccl: averages in the collective (ncclAvg)");

	/* one allreduce */
	{
		const size_t n = (1u << 20) + 3;
		float *h, *b = buf_make(d, n, &h);
		ret = c->ops->iallreduce(c, b, n, &req);
		if (CHECK(ret == 0, "iallreduce of %zu floats starts (%d%s%s)", n, ret, ret ? ": " : "",
			  c->err)) {
			ret = c->ops->wait(c, req);
			CHECK(ret == 0, "wait on it (%d%s%s)", ret, ret ? ": " : "", c->err);
			CHECK(buf_same(d, b, h, n), "one rank's allreduce leaves the %zu floats as they were",
			      n);
		}
		d->ops->free(d, b);
		free(h);
	}

	/* three in flight, completed by test() */
	{
		const size_t n[3] = { 7, 4099, 1u << 18 };
		float *h[3], *b[3];
		int r[3], done[3] = { 0, 0, 0 }, started = 1, ndone = 0;
		for (int i = 0; i < 3; i++) {
			b[i] = buf_make(d, n[i], &h[i]);
			if (c->ops->iallreduce(c, b[i], n[i], &r[i]) < 0)
				started = 0;
		}
		CHECK(started, "three allreduces (7, 4099, 262144 floats) in flight at once%s%s",
		      started ? "" : ": ", started ? "" : c->err);
		double t0 = now_s();
		int bad = 0;
		while (started && ndone < 3 && now_s() - t0 < 30) {
			for (int i = 0; i < 3; i++)
				if (!done[i]) {
					ret = c->ops->test(c, r[i]);
					if (ret < 0)
						bad = 1, done[i] = 1, ndone++;
					else if (ret == 1)
						done[i] = 1, ndone++;
				}
		}
		CHECK(started && ndone == 3 && !bad, "test() reports each of them done within 30 s "
		      "(%d done%s%s)", ndone, bad ? ", an error: " : "", bad ? c->err : "");
		int same = 1;
		for (int i = 0; i < 3; i++) {
			same &= buf_same(d, b[i], h[i], n[i]);
			d->ops->free(d, b[i]);
			free(h[i]);
		}
		CHECK(same, "and each buffer holds its values");
	}

	/* every request id in use */
	{
		float *h, *b = buf_make(d, 1, &h);
		int r[TRN_COLL_REQS], n = 0, extra;
		while (n < TRN_COLL_REQS && c->ops->iallreduce(c, b, 1, &r[n]) == 0)
			n++;
		CHECK(n == TRN_COLL_REQS, "%d allreduces in flight (TRN_COLL_REQS = %d)", n, TRN_COLL_REQS);
		ret = c->ops->iallreduce(c, b, 1, &extra);
		CHECK(ret == -EAGAIN, "one more is -EAGAIN (%d)", ret);
		if (ret == 0)
			c->ops->wait(c, extra);
		int waited = 0;
		for (int i = 0; i < n; i++)
			waited += c->ops->wait(c, r[i]) == 0;
		CHECK(waited == n, "all %d complete (wait)", n);
		ret = c->ops->iallreduce(c, b, 1, &extra);
		CHECK(ret == 0, "a request id is free again afterwards (%d)", ret);
		if (ret == 0) {
			c->ops->wait(c, extra);
			ret = c->ops->wait(c, extra);
			CHECK(ret == -EINVAL, "waiting on a request no longer in flight is -EINVAL (%d)", ret);
		}
		CHECK(buf_same(d, b, h, 1), "the buffer still holds its value");
		d->ops->free(d, b);
		free(h);
	}

	/* bcast, ordered after the copy stream */
	{
		const size_t n = 16u << 20;  /* floats: 64 MiB */
		float *h = xmalloc(n * sizeof(float)), *b = d->ops->alloc(d, n * sizeof(float));
		if (!b)
			harness_die("alloc: %s", d->err);
		fill_uniform(&g_rng, h, n, -1.0f, 1.0f);
		int pinned = d->ops->host_register(d, h, n * sizeof(float)) == 0;
		CHECK(pinned, "host_register of the 64 MiB source (so that the copy is asynchronous)%s%s",
		      pinned ? "" : ": ", pinned ? "" : d->err);
		if (d->ops->copy_h2d(d, TRN_STREAM_COPY, b, h, n * sizeof(float)) < 0)
			harness_die("copy_h2d: %s", d->err);
		ret = c->ops->bcast(c, b, n, 0);
		CHECK(ret == 0, "bcast of 64 MiB from root 0, right after an unsynchronised copy into it "
		      "(%d%s%s)", ret, ret ? ": " : "", c->err);
		CHECK(buf_same(d, b, h, n), "after bcast returns, the compute stream reads the copied "
		      "data (bcast waited for the copy stream)");
		/* coll_nccl.cu checks the root itself; MPI (--self-check) reports its own error */
		ret = c->ops->bcast(c, b, n, 1);
		CHECK(g_self ? ret < 0 : ret == -EINVAL, "bcast from root 1 of 1 is %s (%d)",
		      g_self ? "an error" : "-EINVAL", ret);
		d->ops->sync(d, TRN_STREAM_COPY);
		if (pinned)
			d->ops->host_unregister(d, h);
		d->ops->free(d, b);
		free(h);
	}
}

int main(int argc, char **argv)
{
	struct trn_dev *d;
	struct trn_coll *c = NULL;
	char err[512] = "";
	int ret;

	argc = gpu_open("gpu_nccl", argc, argv, &d);
	if (argc > 1) {
		fprintf(stderr, "usage: gpu_nccl [--self-check]\n");
		return 2;
	}
	g_rng.s = g_seed;
	MPI_Init(&argc, &argv);
	if (g_self)
		ret = trn_coll_mpi_open(&c);
	else
		ret = trn_coll_nccl_open(d, &c, err, sizeof(err));
	if (CHECK(ret == 0, "%s communicator over a singleton MPI_COMM_WORLD opens (%d%s%s)",
		  g_self ? "MPI" : "NCCL", ret, ret ? ": " : "", err)) {
		run(d, c);
		c->ops->close(c);
	}
	d->ops->close(d);
	MPI_Finalize();
	return gpu_done("gpu_nccl");
}
