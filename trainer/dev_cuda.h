/* dev_cuda.h - internals of the CUDA device (dev_cuda.cu) shared with the NCCL backend
 * (coll_nccl.cu), which enqueues its collectives on the device's comm stream. CUDA C++ only:
 * everything above the device layer uses dev.h. */
#ifndef LOADERD_TRN_DEV_CUDA_H
#define LOADERD_TRN_DEV_CUDA_H
#ifndef __CUDACC__
#error "dev_cuda.h is for the .cu files; C code uses trainer/dev.h"
#endif
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>

#include "trainer/dev.h"

struct cuda_impl {
	int sms;                            /* multiprocessors: caps grid sizes */
	cudaStream_t s[TRN_STREAMS];        /* non-blocking: no implicit sync with the legacy stream */
	cudaEvent_t ev[TRN_EVENTS_MAX];     /* the caller's events, timing disabled */
	cublasHandle_t blas;
	/* softmax_xent's scratch: [0] weight sum, [1..3] loss, correct, bad labels, then three
	 * per-row arrays of xent_rows_cap doubles each (loss, correct, bad). Grows on demand (rows
	 * are fixed by the batch size, so it is allocated once). */
	double *xent;
	size_t xent_rows_cap;
	double *xent_host;                  /* pinned, 3 doubles: the totals copied back */
};

/* The CUDA stream behind @stream (TRN_STREAM_*) of a device opened by trn_dev_cuda_open(), or
 * NULL when @d is not a CUDA device or @stream is out of range. Borrowed: the device owns it. */
cudaStream_t trn_dev_cuda_stream(struct trn_dev *d, int stream);

/* The one CHECK for CUDA runtime codes: on failure, writes the native name and message, the call
 * and file:line into @buf (a char array: its sizeof is taken) and evaluates to -ENOMEM (out of
 * memory) or -EIO; on success to 0. An expression, so it serves `return`, `if (...) goto` and
 * functions that return NULL alike. */
#define CUDA_CHECK(buf, call) trn_cuda_check((buf), sizeof(buf), (call), #call, __FILE__, __LINE__)

static inline int trn_cuda_check(char *buf, size_t len, cudaError_t e, const char *what,
				 const char *file, int line)
{
	if (e == cudaSuccess)
		return 0;
	snprintf(buf, len, "%s: %s (%s) at %s:%d", what, cudaGetErrorString(e), cudaGetErrorName(e),
		 file, line);
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

#endif
