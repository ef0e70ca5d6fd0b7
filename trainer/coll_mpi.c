/* coll_mpi.c - the MPI collective backend: MPI_Bcast and non-blocking MPI_Iallreduce (sum) on
 * host memory. Open MPI progresses non-blocking collectives only inside MPI calls, so the DDP core
 * calls test() between layers of backward; that is what lets buckets overlap it. */
#include "trainer/coll.h"

#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mpi_impl {
	MPI_Request reqs[TRN_COLL_REQS];
	int used[TRN_COLL_REQS];
};

static int mpi_fail(struct trn_coll *c, int rc, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(rc, msg, &len);
	snprintf(c->err, sizeof(c->err), "%s: %.*s", what, len, msg);
	return -EIO;
}

static void mpi_close(struct trn_coll *c)
{
	free(c->impl);
	free(c);
}

static int mpi_bcast(struct trn_coll *c, float *buf, size_t n, int root)
{
	/* MPI counts are int: send in chunks of 1 Gi floats at most. */
	for (size_t off = 0; off < n; off += 1u << 30) {
		size_t k = n - off < (1u << 30) ? n - off : (1u << 30);
		int rc = MPI_Bcast(buf + off, (int)k, MPI_FLOAT, root, MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return mpi_fail(c, rc, "MPI_Bcast");
	}
	return 0;
}

static int mpi_iallreduce(struct trn_coll *c, float *buf, size_t n, int *req)
{
	struct mpi_impl *m = c->impl;
	int i;

	if (n > (size_t)1 << 30)
		return -E2BIG;  /* buckets are far smaller */
	for (i = 0; i < TRN_COLL_REQS && m->used[i]; i++)
		;
	if (i == TRN_COLL_REQS)
		return -EAGAIN;
	int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
				&m->reqs[i]);
	if (rc != MPI_SUCCESS)
		return mpi_fail(c, rc, "MPI_Iallreduce");
	m->used[i] = 1;
	*req = i;
	return 0;
}

static int mpi_test(struct trn_coll *c, int req)
{
	struct mpi_impl *m = c->impl;
	int flag = 0;

	if (req < 0 || req >= TRN_COLL_REQS || !m->used[req])
		return -EINVAL;
	int rc = MPI_Test(&m->reqs[req], &flag, MPI_STATUS_IGNORE);
	if (rc != MPI_SUCCESS)
		return mpi_fail(c, rc, "MPI_Test");
	if (flag)
		m->used[req] = 0;
	return flag;
}

static int mpi_wait(struct trn_coll *c, int req)
{
	struct mpi_impl *m = c->impl;

	if (req < 0 || req >= TRN_COLL_REQS || !m->used[req])
		return -EINVAL;
	int rc = MPI_Wait(&m->reqs[req], MPI_STATUS_IGNORE);
	m->used[req] = 0;
	return rc == MPI_SUCCESS ? 0 : mpi_fail(c, rc, "MPI_Wait");
}

static const struct trn_coll_ops mpi_ops = {
	.name = "mpi",
	.close = mpi_close,
	.bcast = mpi_bcast,
	.iallreduce = mpi_iallreduce,
	.test = mpi_test,
	.wait = mpi_wait,
};

int trn_coll_mpi_open(struct trn_coll **out)
{
	struct trn_coll *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c || !(c->impl = calloc(1, sizeof(struct mpi_impl)))) {
		free(c);
		return -ENOMEM;
	}
	c->ops = &mpi_ops;
	MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &c->world);
	/* Errors come back as codes, not as an abort, so the trainer can say what happened. */
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	*out = c;
	return 0;
}
