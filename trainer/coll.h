/* coll.h - collective backends for the DDP core: MPI (Open MPI, non-blocking MPI_Iallreduce on
 * host memory; coll_mpi.c) and NCCL (device memory, on the device's comm stream; coll_nccl.cu).
 * No collective algorithm of our own lives here: each call maps onto the library's.
 *
 * Requests are small integers, at most TRN_COLL_REQS in flight. Returns 0 or -errno; the native
 * error text is in c->err. One thread per communicator. */
#ifndef LOADERD_TRN_COLL_H
#define LOADERD_TRN_COLL_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

#define TRN_COLL_REQS 256

struct trn_coll;
struct trn_dev;

struct trn_coll_ops {
	const char *name;          /* "mpi" or "nccl" */
	void (*close)(struct trn_coll *c);
	/* Blocking broadcast of @n floats from @root (parameters before step 0). */
	int (*bcast)(struct trn_coll *c, float *buf, size_t n, int root);
	/* Start an in-place allreduce of @n floats: the average over ranks when the backend can
	 * (ncclAvg), else the sum (c->averages tells which). Writes the request id to *req. */
	int (*iallreduce)(struct trn_coll *c, float *buf, size_t n, int *req);
	/* 1 when @req has completed (and drives progress), 0 if not yet. */
	int (*test)(struct trn_coll *c, int req);
	int (*wait)(struct trn_coll *c, int req);
};

struct trn_coll {
	const struct trn_coll_ops *ops;
	int rank, world;
	int averages;              /* iallreduce already divides by world */
	char err[256];
	void *impl;
};

/* MPI_COMM_WORLD; MPI must be initialised. */
int trn_coll_mpi_open(struct trn_coll **out);
/* NCCL over the ranks of MPI_COMM_WORLD (unique id broadcast with MPI; made locally for one
 * rank), on @dev's comm stream. -ENODEV when NCCL was not built in. */
int trn_coll_nccl_open(struct trn_dev *dev, struct trn_coll **out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
