/* coll_nccl.cu - the NCCL collective backend: ncclBroadcast and in-place ncclAllReduce (ncclAvg,
 * so c->averages is 1) on device memory, enqueued on the CUDA device's comm stream. Rank and world
 * come from MPI_COMM_WORLD; rank 0 makes the NCCL unique id and MPI_Bcast carries it to the others
 * (one rank makes its own and needs no MPI traffic).
 *
 * A request is an event recorded on the comm stream right after its allreduce: test polls it,
 * wait polls it until done. Ordering against backward is the caller's (ddp.c records an event on
 * the compute stream and makes the comm stream wait for it before each bucket). Waits poll
 * rather than block in cudaEventSynchronize so that they can also poll ncclCommGetAsyncError: when
 * a peer dies, NCCL reports it there while the collective's kernel spins on the GPU forever, and
 * the only way out is to see the error and abort the communicator (close does, after a failure).
 * Threads: one host thread per communicator, the device's. */
#include "trainer/coll.h"
#include "trainer/dev_cuda.h"

#include <errno.h>
/* The C API only: the deprecated MPI C++ bindings warn under -Wextra and need libmpi_cxx. */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct nccl_impl {
	struct trn_dev *dev;                  /* borrowed; must outlive the communicator */
	int ordinal;                          /* dev's GPU, kept for close */
	ncclComm_t comm;
	cudaStream_t s;                       /* the device's comm stream (borrowed) */
	cudaEvent_t done[TRN_COLL_REQS];      /* per request: recorded after its allreduce */
	unsigned char used[TRN_COLL_REQS];    /* 1 while the request id is handed out */
	cudaEvent_t before[2];                /* bcast: the copy and compute streams' work so far */
	cudaEvent_t bcast_done;
	int failed;                           /* a collective failed: close aborts, calls refuse */
};

/* The one CHECK for NCCL codes: the native message, NCCL's last error text (it says which peer or
 * transport), the call and file:line into c->err; marks the communicator failed so that close
 * aborts it. Evaluates to -EIO on failure, else 0. */
#define NCCL_CHECK(c, call) nccl_check((c), (call), #call, __FILE__, __LINE__)

static int nccl_check(struct trn_coll *c, ncclResult_t r, const char *what, const char *file,
		      int line)
{
	struct nccl_impl *m = (struct nccl_impl *)c->impl;

	if (r == ncclSuccess)
		return 0;
	m->failed = 1;
	const char *last = ncclGetLastError(m->comm);
	snprintf(c->err, sizeof(c->err), "%s: %s%s%s at %s:%d", what, ncclGetErrorString(r),
		 last && *last ? " - " : "", last ? last : "", file, line);
	return -EIO;
}

static struct nccl_impl *impl(struct trn_coll *c)
{
	return (struct nccl_impl *)c->impl;
}

static int refuse_failed(struct trn_coll *c)
{
	/* c->err still holds the first failure; say so rather than overwrite it. */
	if (!c->err[0])
		snprintf(c->err, sizeof(c->err), "an earlier NCCL collective failed");
	return -EIO;
}

/* 1 when @e has completed, 0 when not yet and !@block, or -errno. Between queries, NCCL's
 * asynchronous error is checked: a dead peer shows there, never in the event. */
static int poll_event(struct trn_coll *c, cudaEvent_t e, int block)
{
	struct nccl_impl *m = impl(c);
	ncclResult_t async;
	int ret;

	for (;;) {
		cudaError_t st = cudaEventQuery(e);
		if (st == cudaSuccess)
			return 1;
		if (st != cudaErrorNotReady) {
			m->failed = 1;
			return CUDA_CHECK(c->err, st);
		}
		if ((ret = NCCL_CHECK(c, ncclCommGetAsyncError(m->comm, &async))) < 0)
			return ret;
		if (async != ncclSuccess && async != ncclInProgress)
			return nccl_check(c, async, "NCCL collective (ncclCommGetAsyncError)", __FILE__,
					  __LINE__);
		if (!block)
			return 0;
		sched_yield();
	}
}

static void nccl_close(struct trn_coll *c)
{
	struct nccl_impl *m;

	if (!c)
		return;
	m = impl(c);
	if (m) {
		cudaSetDevice(m->ordinal);
		if (m->comm) {
			/* Finalize flushes what is in flight; after a failure that could hang on a
			 * dead peer, so abort instead (it also stops the spinning kernels). */
			if (m->failed || ncclCommFinalize(m->comm) != ncclSuccess)
				ncclCommAbort(m->comm);
			else
				ncclCommDestroy(m->comm);
		}
		for (int i = 0; i < TRN_COLL_REQS; i++)
			if (m->done[i])
				cudaEventDestroy(m->done[i]);
		for (int i = 0; i < 2; i++)
			if (m->before[i])
				cudaEventDestroy(m->before[i]);
		if (m->bcast_done)
			cudaEventDestroy(m->bcast_done);
		free(m);
	}
	free(c);
}

/* Blocking. The broadcast is ordered after everything already queued on the device's copy and
 * compute streams (the parameters were just initialised or loaded there), and returns once it
 * completed, so later work on any stream sees the broadcast values. */
static int nccl_bcast(struct trn_coll *c, float *buf, size_t n, int root)
{
	struct nccl_impl *m = impl(c);
	const int from[2] = { TRN_STREAM_COPY, TRN_STREAM_COMPUTE };
	int ret;

	if (m->failed)
		return refuse_failed(c);
	if (root < 0 || root >= c->world) {
		snprintf(c->err, sizeof(c->err), "bcast: root %d outside [0, %d)", root, c->world);
		return -EINVAL;
	}
	for (int i = 0; i < 2; i++)
		if ((ret = CUDA_CHECK(c->err, cudaEventRecord(m->before[i],
							      trn_dev_cuda_stream(m->dev, from[i])))) < 0 ||
		    (ret = CUDA_CHECK(c->err, cudaStreamWaitEvent(m->s, m->before[i], 0))) < 0)
			return ret;
	if ((ret = NCCL_CHECK(c, ncclBroadcast(buf, buf, n, ncclFloat, root, m->comm, m->s))) < 0 ||
	    (ret = CUDA_CHECK(c->err, cudaEventRecord(m->bcast_done, m->s))) < 0)
		return ret;
	ret = poll_event(c, m->bcast_done, 1);
	return ret < 0 ? ret : 0;
}

static int nccl_iallreduce(struct trn_coll *c, float *buf, size_t n, int *req)
{
	struct nccl_impl *m = impl(c);
	int i, ret;

	if (m->failed)
		return refuse_failed(c);
	for (i = 0; i < TRN_COLL_REQS && m->used[i]; i++)
		;
	if (i == TRN_COLL_REQS)
		return -EAGAIN;
	if ((ret = NCCL_CHECK(c, ncclAllReduce(buf, buf, n, ncclFloat, ncclAvg, m->comm, m->s))) < 0 ||
	    (ret = CUDA_CHECK(c->err, cudaEventRecord(m->done[i], m->s))) < 0)
		return ret;
	m->used[i] = 1;
	*req = i;
	return 0;
}

static int req_ok(struct trn_coll *c, int req)
{
	if (req < 0 || req >= TRN_COLL_REQS || !impl(c)->used[req]) {
		snprintf(c->err, sizeof(c->err), "request %d is not in flight", req);
		return -EINVAL;
	}
	return 0;
}

static int nccl_test(struct trn_coll *c, int req)
{
	struct nccl_impl *m = impl(c);
	int ret = req_ok(c, req);

	if (ret < 0)
		return ret;
	ret = poll_event(c, m->done[req], 0);
	if (ret != 0)
		m->used[req] = 0;  /* done, or failed: either way the id is free again */
	return ret;
}

static int nccl_wait(struct trn_coll *c, int req)
{
	struct nccl_impl *m = impl(c);
	int ret = req_ok(c, req);

	if (ret < 0)
		return ret;
	ret = poll_event(c, m->done[req], 1);
	m->used[req] = 0;
	return ret < 0 ? ret : 0;
}

static const struct trn_coll_ops nccl_ops = {
	.name = "nccl",
	.close = nccl_close,
	.bcast = nccl_bcast,
	.iallreduce = nccl_iallreduce,
	.test = nccl_test,
	.wait = nccl_wait,
};

/* Rank 0's unique id, with whether it could make one, so that a failure there fails every rank
 * instead of leaving the others in ncclCommInitRank. */
struct id_msg {
	int ok;
	ncclUniqueId id;
};

extern "C" int trn_coll_nccl_open(struct trn_dev *dev, struct trn_coll **out, char *err,
				  size_t errlen)
{
	struct trn_coll *c;
	struct nccl_impl *m;
	struct id_msg msg;
	int inited = 0, ret = 0;

	*out = NULL;
	if (!dev || !trn_dev_cuda_stream(dev, TRN_STREAM_COMM)) {
		snprintf(err, errlen, "the NCCL backend needs the CUDA device (--device cuda)");
		return -EINVAL;
	}
	if (MPI_Initialized(&inited) != MPI_SUCCESS || !inited) {
		snprintf(err, errlen, "the NCCL backend needs MPI initialised (it bootstraps over "
			 "MPI_COMM_WORLD)");
		return -EINVAL;
	}
	c = (struct trn_coll *)calloc(1, sizeof(*c));
	m = (struct nccl_impl *)calloc(1, sizeof(*m));
	if (!c || !m) {
		free(c);
		free(m);
		snprintf(err, errlen, "out of host memory opening the NCCL backend");
		return -ENOMEM;
	}
	c->ops = &nccl_ops;
	c->impl = m;
	c->averages = 1;
	m->dev = dev;
	m->ordinal = dev->ordinal;
	m->s = trn_dev_cuda_stream(dev, TRN_STREAM_COMM);
	MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &c->world);

	if ((ret = CUDA_CHECK(c->err, cudaSetDevice(dev->ordinal))) < 0)
		goto fail;
	for (int i = 0; i < TRN_COLL_REQS; i++)
		if ((ret = CUDA_CHECK(c->err, cudaEventCreateWithFlags(&m->done[i],
								       cudaEventDisableTiming))) < 0)
			goto fail;
	for (int i = 0; i < 2; i++)
		if ((ret = CUDA_CHECK(c->err, cudaEventCreateWithFlags(&m->before[i],
								       cudaEventDisableTiming))) < 0)
			goto fail;
	if ((ret = CUDA_CHECK(c->err, cudaEventCreateWithFlags(&m->bcast_done,
							       cudaEventDisableTiming))) < 0)
		goto fail;

	memset(&msg, 0, sizeof(msg));
	if (c->rank == 0)
		msg.ok = NCCL_CHECK(c, ncclGetUniqueId(&msg.id)) == 0;
	if (c->world > 1) {
		/* Errors come back as codes, not as an abort (as coll_mpi.c sets it). */
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		int rc = MPI_Bcast(&msg, (int)sizeof(msg), MPI_BYTE, 0, MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS) {
			char text[MPI_MAX_ERROR_STRING];
			int len = 0;
			MPI_Error_string(rc, text, &len);
			snprintf(c->err, sizeof(c->err), "MPI_Bcast of the NCCL unique id: %.*s", len,
				 text);
			ret = -EIO;
			goto fail;
		}
	}
	if (!msg.ok) {
		if (c->rank != 0)
			snprintf(c->err, sizeof(c->err), "rank 0 could not make the NCCL unique id");
		ret = -EIO;
		goto fail;
	}
	/* Collective over all ranks; blocks until every rank has joined. */
	if ((ret = NCCL_CHECK(c, ncclCommInitRank(&m->comm, c->world, msg.id, c->rank))) < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	snprintf(err, errlen, "NCCL on rank %d of %d (GPU %d): %s", c->rank, c->world, dev->ordinal,
		 c->err);
	nccl_close(c);
	return ret;
}
