/* dev_cuda.cu - the CUDA device: dev.h on one GPU. Three non-blocking streams (copy, compute,
 * comm), a fixed pool of events, cudaHostRegister for the ring mapping, cudaMemcpyAsync, cuBLAS
 * for the GEMMs and a few small kernels for the rest. dev_host.c is the semantics reference: the
 * elementwise kernels round like it does (no fused multiply-add, so results match it bit for bit);
 * GEMMs and reductions agree to float rounding only, since their summation order differs.
 *
 * Everything is asynchronous on the given stream except softmax_xent, which copies its loss and
 * accuracy back and synchronizes that stream: once per step, at the end of forward. Threads: one
 * host thread per device (cudaSetDevice is per thread; the cuBLAS handle is rebound to the
 * caller's stream on every call). */
#include "trainer/dev_cuda.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 256       /* threads per block of the elementwise and row kernels; a power of two */
#define COLS_X 32       /* col_sum: columns per block (one warp wide: coalesced row reads) */
#define COLS_Y 8        /* col_sum: row lanes per block, summed in shared memory */

/* The one CHECK for cuBLAS status codes, the twin of CUDA_CHECK (dev_cuda.h): native name and
 * message, the call and file:line into d->err; evaluates to -EIO on failure, else 0. */
#define CUBLAS_CHECK(d, call) cublas_check((d), (call), #call, __FILE__, __LINE__)

static int cublas_check(struct trn_dev *d, cublasStatus_t st, const char *what, const char *file,
			int line)
{
	if (st == CUBLAS_STATUS_SUCCESS)
		return 0;
	snprintf(d->err, sizeof(d->err), "%s: %s (%s) at %s:%d", what, cublasGetStatusString(st),
		 cublasGetStatusName(st), file, line);
	return st == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

static struct cuda_impl *impl(struct trn_dev *d)
{
	return (struct cuda_impl *)d->impl;
}

static int inval(struct trn_dev *d, const char *what)
{
	snprintf(d->err, sizeof(d->err), "%s", what);
	return -EINVAL;
}

/* 0 and the CUDA stream, or -EINVAL for a stream index out of range (0 is a valid cudaStream_t,
 * the legacy stream, so NULL cannot signal it). */
static int stream_get(struct trn_dev *d, int stream, cudaStream_t *s)
{
	if (stream < 0 || stream >= TRN_STREAMS)
		return inval(d, "stream index out of range (TRN_STREAM_*)");
	*s = impl(d)->s[stream];
	return 0;
}

static int event_get(struct trn_dev *d, int ev, cudaEvent_t *e)
{
	if (ev < 0 || ev >= TRN_EVENTS_MAX)
		return inval(d, "event index out of range [0, TRN_EVENTS_MAX)");
	*e = impl(d)->ev[ev];
	return 0;
}

/* Blocks for a grid-stride loop over @n items: enough to fill every SM, no more. */
static unsigned grid_for(struct trn_dev *d, size_t n)
{
	size_t b = (n + BLOCK - 1) / BLOCK, cap = (size_t)impl(d)->sms * 16;

	return (unsigned)(b < 1 ? 1 : b < cap ? b : cap);
}

/* A kernel launch reports its own errors through cudaGetLastError(), which also returns older
 * non-sticky ones (a failed cudaMalloc, say) that were already reported by their own calls.
 * Clearing first keeps those from being blamed on this launch; sticky errors (a fault on the
 * device) cannot be cleared and still surface. */
static void launch_begin(void)
{
	(void)cudaGetLastError();
}

/* ---- kernels ---------------------------------------------------------------------------- */

/* __fmul_rn/__fadd_rn keep nvcc from contracting into FMA, so the results round like the host's
 * (gcc -std=c11 does not contract either). */

static __global__ void k_pool_u8(const uint8_t *src, int h, int w, int c, int nchw, int pool,
				 int oh, int ow, float norm, size_t total, float *dst)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t t = i;
		int ch = (int)(t % c);
		t /= c;
		int x = (int)(t % ow);
		t /= ow;
		int y = (int)(t % oh);
		size_t s = t / oh;
		const uint8_t *img = src + s * h * w * c;
		uint32_t sum = 0;
		for (int dy = 0; dy < pool; dy++)
			for (int dx = 0; dx < pool; dx++) {
				int yy = y * pool + dy, xx = x * pool + dx;
				sum += nchw ? img[((size_t)ch * h + yy) * w + xx]
					    : img[((size_t)yy * w + xx) * c + ch];
			}
		dst[i] = __fsub_rn(__fmul_rn((float)sum, norm), 1.0f);
	}
}

static __global__ void k_bias_act(float *y, const float *b, int cols, size_t total, int relu)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = __fadd_rn(y[i], b[i % cols]);
		y[i] = relu && v < 0 ? 0.0f : v;
	}
}

static __global__ void k_relu_bwd(float *dy, const float *y, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		if (y[i] <= 0)
			dy[i] = 0;
}

/* Block (COLS_X, COLS_Y): lane x owns a column, the COLS_Y lanes of y split its rows; a fixed
 * shared-memory sum, so the result is deterministic. */
static __global__ void k_col_sum(const float *dy, int rows, int cols, float *db, int acc)
{
	__shared__ float part[COLS_Y][COLS_X + 1];
	int j = blockIdx.x * COLS_X + threadIdx.x;
	float s = 0;

	if (j < cols)
		for (int i = threadIdx.y; i < rows; i += COLS_Y)
			s += dy[(size_t)i * cols + j];
	part[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && j < cols) {
		float t = acc ? db[j] : 0.0f;
		for (int k = 0; k < COLS_Y; k++)
			t += part[k][threadIdx.x];
		db[j] = t;
	}
}

/* Sum of @v over the block (blockDim.x == BLOCK); every thread gets it. @sh: BLOCK doubles. */
static __device__ double block_sum(double v, double *sh)
{
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int s = BLOCK / 2; s > 0; s >>= 1) {
		if ((int)threadIdx.x < s)
			sh[threadIdx.x] += sh[threadIdx.x + s];
		__syncthreads();
	}
	double r = sh[0];
	__syncthreads();
	return r;
}

/* One block: the weight sum into *wsum. */
static __global__ void k_wsum(const float *w, int rows, double *wsum)
{
	__shared__ double sh[BLOCK];
	double s = 0;

	for (int i = threadIdx.x; i < rows; i += BLOCK)
		s += w[i];
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		*wsum = s;
}

/* One block per row: max and argmax (the first index holding the max, as on the host), the sum
 * of exponentials in double, the gradient, and the row's loss, hit and bad-label flag. @wsum_dev
 * is read when @w is given, else @wsum_rows (the row count) is the weight sum. */
static __global__ void k_xent_rows(const float *logits, const int64_t *labels, const float *w,
			    const double *wsum_dev, double wsum_rows, int cols, float *dl,
			    double *row_loss, double *row_hit, double *row_bad)
{
	__shared__ float smx[BLOCK];
	__shared__ int sarg[BLOCK];
	__shared__ double sh[BLOCK];
	const int i = blockIdx.x, t = threadIdx.x;
	const float *z = logits + (size_t)i * cols;
	float *g = dl + (size_t)i * cols;

	/* arg == cols marks "no element seen" (threads past the last column). */
	float mx = t < cols ? z[t] : 0.0f;
	int arg = t < cols ? t : cols;
	for (int j = t + BLOCK; j < cols; j += BLOCK)
		if (z[j] > mx)
			mx = z[j], arg = j;
	smx[t] = mx;
	sarg[t] = arg;
	__syncthreads();
	for (int s = BLOCK / 2; s > 0; s >>= 1) {
		if (t < s) {
			float a = smx[t], b = smx[t + s];
			int ia = sarg[t], ib = sarg[t + s];
			/* Larger value wins; on a tie the lower index, as the host's strict '>'. */
			if (ia == cols || (ib != cols && (b > a || (!(a > b) && ib < ia))))
				smx[t] = b, sarg[t] = ib;
		}
		__syncthreads();
	}
	mx = smx[0];
	arg = sarg[0];

	double sum = 0;
	for (int j = t; j < cols; j += BLOCK)
		sum += exp((double)(z[j] - mx));
	sum = block_sum(sum, sh);

	const int64_t y = labels[i];
	if (y < 0 || y >= cols) {  /* uniform across the block: no barrier follows */
		if (t == 0)
			row_loss[i] = 0, row_hit[i] = 0, row_bad[i] = 1;
		return;
	}
	const double ws = w ? *wsum_dev : wsum_rows;
	const float wi = w ? w[i] : 1.0f;
	for (int j = t; j < cols; j += BLOCK) {
		double p = exp((double)(z[j] - mx)) / sum;
		g[j] = ws > 0 ? (float)((p - (j == y)) * wi / ws) : 0.0f;
	}
	if (t == 0) {
		row_loss[i] = wi > 0 ? wi * (log(sum) - (double)(z[y] - mx)) : 0.0;
		row_hit[i] = wi > 0 && arg == y;
		row_bad[i] = 0;
	}
}

/* One block: the per-row results into tot[0..2] (loss, hits, bad labels), in a fixed order. */
static __global__ void k_xent_total(const double *row_loss, const double *row_hit,
				    const double *row_bad, int rows, double *tot)
{
	__shared__ double sh[BLOCK];
	double l = 0, h = 0, b = 0;

	for (int i = threadIdx.x; i < rows; i += BLOCK)
		l += row_loss[i], h += row_hit[i], b += row_bad[i];
	l = block_sum(l, sh);
	h = block_sum(h, sh);
	b = block_sum(b, sh);
	if (threadIdx.x == 0)
		tot[0] = l, tot[1] = h, tot[2] = b;
}

static __global__ void k_sgd(float *p, const float *g, float *m, size_t n, float lr, float mu,
			     float scale)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float mi = __fadd_rn(__fmul_rn(mu, m[i]), __fmul_rn(scale, g[i]));
		m[i] = mi;
		p[i] = __fsub_rn(p[i], __fmul_rn(lr, mi));
	}
}

static __global__ void k_scale(float *x, size_t n, float a)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		x[i] = __fmul_rn(x[i], a);
}

/* ---- ops -------------------------------------------------------------------------------- */

static void cuda_close(struct trn_dev *d)
{
	struct cuda_impl *c;

	if (!d)
		return;
	c = impl(d);
	if (c) {
		/* Drain first: buffers below may still be read by queued work. Errors are ignored:
		 * there is nothing left to report them to. Close the NCCL backend before this. */
		cudaSetDevice(d->ordinal);
		cudaDeviceSynchronize();
		if (c->blas)
			cublasDestroy(c->blas);
		cudaFree(c->xent);
		cudaFreeHost(c->xent_host);
		for (int i = 0; i < TRN_EVENTS_MAX; i++)
			if (c->ev[i])
				cudaEventDestroy(c->ev[i]);
		for (int i = 0; i < TRN_STREAMS; i++)
			if (c->s[i])
				cudaStreamDestroy(c->s[i]);
		free(c);
	}
	free(d);
}

static void *cuda_alloc(struct trn_dev *d, size_t bytes)
{
	void *p = NULL;

	if (CUDA_CHECK(d->err, cudaMalloc(&p, bytes ? bytes : 1)) < 0)
		return NULL;
	/* Our streams are non-blocking: they do not wait for the legacy stream. Zero on it and
	 * wait for just that, so the memory is zero for every stream without draining them. */
	if (CUDA_CHECK(d->err, cudaMemsetAsync(p, 0, bytes, cudaStreamLegacy)) < 0 ||
	    CUDA_CHECK(d->err, cudaStreamSynchronize(cudaStreamLegacy)) < 0) {
		cudaFree(p);
		return NULL;
	}
	return p;
}

static void cuda_free(struct trn_dev *d, void *p)
{
	if (p)
		(void)CUDA_CHECK(d->err, cudaFree(p));
}

static int cuda_host_register(struct trn_dev *d, void *p, size_t n)
{
	if (!p || n == 0)
		return 0;  /* nothing to pin (cudaHostRegister rejects it; the host accepts it) */
	return CUDA_CHECK(d->err, cudaHostRegister(p, n, cudaHostRegisterDefault));
}

static void cuda_host_unregister(struct trn_dev *d, void *p)
{
	if (!p)
		return;
	/* A copy still in flight from these pages would lose its pinning under it. */
	(void)CUDA_CHECK(d->err, cudaDeviceSynchronize());
	(void)CUDA_CHECK(d->err, cudaHostUnregister(p));
}

static int copy(struct trn_dev *d, int stream, void *dst, const void *src, size_t n,
		enum cudaMemcpyKind kind)
{
	cudaStream_t s;
	int ret = stream_get(d, stream, &s);

	if (ret < 0 || n == 0)
		return ret;
	return CUDA_CHECK(d->err, cudaMemcpyAsync(dst, src, n, kind, s));
}

static int cuda_copy_h2d(struct trn_dev *d, int stream, void *dst, const void *src, size_t n)
{
	return copy(d, stream, dst, src, n, cudaMemcpyHostToDevice);
}

static int cuda_copy_d2h(struct trn_dev *d, int stream, void *dst, const void *src, size_t n)
{
	return copy(d, stream, dst, src, n, cudaMemcpyDeviceToHost);
}

static int cuda_event_record(struct trn_dev *d, int ev, int stream)
{
	cudaStream_t s;
	cudaEvent_t e;
	int ret;

	if ((ret = event_get(d, ev, &e)) < 0 || (ret = stream_get(d, stream, &s)) < 0)
		return ret;
	return CUDA_CHECK(d->err, cudaEventRecord(e, s));
}

static int cuda_stream_wait(struct trn_dev *d, int stream, int ev)
{
	cudaStream_t s;
	cudaEvent_t e;
	int ret;

	if ((ret = event_get(d, ev, &e)) < 0 || (ret = stream_get(d, stream, &s)) < 0)
		return ret;
	return CUDA_CHECK(d->err, cudaStreamWaitEvent(s, e, 0));
}

static int cuda_event_sync(struct trn_dev *d, int ev)
{
	cudaEvent_t e;
	int ret = event_get(d, ev, &e);

	return ret < 0 ? ret : CUDA_CHECK(d->err, cudaEventSynchronize(e));
}

static int cuda_event_done(struct trn_dev *d, int ev)
{
	cudaEvent_t e;
	int ret = event_get(d, ev, &e);

	if (ret < 0)
		return ret;
	cudaError_t st = cudaEventQuery(e);
	if (st == cudaErrorNotReady)
		return 0;
	ret = CUDA_CHECK(d->err, st);
	return ret < 0 ? ret : 1;
}

static int cuda_sync(struct trn_dev *d, int stream)
{
	cudaStream_t s;
	int ret = stream_get(d, stream, &s);

	return ret < 0 ? ret : CUDA_CHECK(d->err, cudaStreamSynchronize(s));
}

/* Row-major C (m x n) = alpha op(A) op(B) + beta C is, read column-major, C^T = alpha op(B)^T
 * op(A)^T + beta C^T: a row-major buffer read column-major is its transpose. So cuBLAS gets B
 * first, transposed when tb, A second, transposed when ta, dimensions n x m (inner k), and the
 * leading dimensions are the row lengths of the row-major buffers (as in dev_host.c). */
static int cuda_gemm(struct trn_dev *d, int stream, int ta, int tb, int m, int n, int k,
		     float alpha, const float *A, const float *B, float beta, float *C)
{
	struct cuda_impl *c = impl(d);
	cudaStream_t s;
	int ret = stream_get(d, stream, &s);

	if (ret < 0)
		return ret;
	if (m < 0 || n < 0 || k < 0)
		return inval(d, "gemm: negative dimension");
	if (m == 0 || n == 0)
		return 0;
	/* ld >= 1 even for an empty inner dimension (cuBLAS rejects 0). */
	int lda = ta ? m : (k > 0 ? k : 1), ldb = tb ? (k > 0 ? k : 1) : n;
	if ((ret = CUBLAS_CHECK(d, cublasSetStream(c->blas, s))) < 0)
		return ret;
	return CUBLAS_CHECK(d, cublasSgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
					   ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, B, ldb, A,
					   lda, &beta, C, n));
}

static int cuda_pool_u8(struct trn_dev *d, int stream, const uint8_t *src, int count, int h, int w,
			int c, int nchw, int pool, float *dst)
{
	cudaStream_t s;
	int ret = stream_get(d, stream, &s);

	if (ret < 0)
		return ret;
	if (pool < 1 || h / pool < 1 || w / pool < 1 || c < 1 || count < 0)
		return inval(d, "pool_u8: bad shape or pool factor");
	int oh = h / pool, ow = w / pool;
	/* Computed exactly as dev_host.c does, so the kernel's rounding matches it. */
	const float norm = 2.0f / (255.0f * (float)(pool * pool));
	size_t total = (size_t)count * oh * ow * c;
	if (total == 0)
		return 0;
	launch_begin();
	k_pool_u8<<<grid_for(d, total), BLOCK, 0, s>>>(src, h, w, c, nchw, pool, oh, ow, norm, total,
						       dst);
	return CUDA_CHECK(d->err, cudaGetLastError());
}

static int cuda_bias_act(struct trn_dev *d, int stream, float *y, const float *b, int rows,
			 int cols, int relu)
{
	cudaStream_t s;
	int ret = stream_get(d, stream, &s);

	if (ret < 0)
		return ret;
	if (rows < 0 || cols < 0)
		return inval(d, "bias_act: negative shape");
	size_t total = (size_t)rows * cols;
	if (total == 0)
		return 0;
	launch_begin();
	k_bias_act<<<grid_for(d, total), BLOCK, 0, s>>>(y, b, cols, total, relu);
	return CUDA_CHECK(d->err, cudaGetLastError());
}

static int cuda_relu_bwd(struct trn_dev *d, int stream, float *dy, const float *y, size_t n)
{
	cudaStream_t s;
	int ret = stream_get(d, stream, &s);

	if (ret < 0 || n == 0)
		return ret;
	launch_begin();
	k_relu_bwd<<<grid_for(d, n), BLOCK, 0, s>>>(dy, y, n);
	return CUDA_CHECK(d->err, cudaGetLastError());
}

static int cuda_col_sum(struct trn_dev *d, int stream, const float *dy, int rows, int cols,
			float *db, int acc)
{
	cudaStream_t s;
	int ret = stream_get(d, stream, &s);

	if (ret < 0)
		return ret;
	if (rows < 0 || cols < 0)
		return inval(d, "col_sum: negative shape");
	if (cols == 0)
		return 0;
	/* rows == 0 still runs: it zeroes db unless acc, as the host does. */
	launch_begin();
	unsigned blocks = (unsigned)((cols + COLS_X - 1) / COLS_X);
	k_col_sum<<<blocks, dim3(COLS_X, COLS_Y), 0, s>>>(dy, rows, cols, db, acc);
	return CUDA_CHECK(d->err, cudaGetLastError());
}

/* Grow the scratch to @rows per-row entries. Only softmax_xent uses it, and it synchronizes its
 * stream before returning, so nothing in flight reads the old buffer. */
static int xent_reserve(struct trn_dev *d, int rows)
{
	struct cuda_impl *c = impl(d);
	double *p = NULL;
	int ret;

	if ((size_t)rows <= c->xent_rows_cap)
		return 0;
	if ((ret = CUDA_CHECK(d->err, cudaMalloc(&p, sizeof(double) * (4 + 3 * (size_t)rows)))) < 0)
		return ret;
	cudaFree(c->xent);
	c->xent = p;
	c->xent_rows_cap = (size_t)rows;
	return 0;
}

static int cuda_softmax_xent(struct trn_dev *d, int stream, const float *logits,
			     const int64_t *labels, const float *w, int rows, int cols, float *dl,
			     double out[2])
{
	struct cuda_impl *c = impl(d);
	cudaStream_t s;
	int ret = stream_get(d, stream, &s);

	if (ret < 0)
		return ret;
	if (rows < 0 || cols < 1)
		return inval(d, "softmax_xent: bad shape");
	if (rows == 0)
		return 0;
	if ((ret = xent_reserve(d, rows)) < 0)
		return ret;
	double *wsum = c->xent, *tot = c->xent + 1, *row = c->xent + 4;
	size_t cap = c->xent_rows_cap;

	launch_begin();
	if (w)
		k_wsum<<<1, BLOCK, 0, s>>>(w, rows, wsum);
	k_xent_rows<<<(unsigned)rows, BLOCK, 0, s>>>(logits, labels, w, wsum, (double)rows, cols, dl,
						      row, row + cap, row + 2 * cap);
	k_xent_total<<<1, BLOCK, 0, s>>>(row, row + cap, row + 2 * cap, rows, tot);
	if ((ret = CUDA_CHECK(d->err, cudaGetLastError())) < 0)
		return ret;
	/* The step's one host synchronization: the loss and hit count are needed on the host. */
	if ((ret = CUDA_CHECK(d->err, cudaMemcpyAsync(c->xent_host, tot, 3 * sizeof(double),
						     cudaMemcpyDeviceToHost, s))) < 0 ||
	    (ret = CUDA_CHECK(d->err, cudaStreamSynchronize(s))) < 0)
		return ret;
	if (c->xent_host[2] > 0) {
		snprintf(d->err, sizeof(d->err), "softmax_xent: %.0f label(s) outside [0, %d)",
			 c->xent_host[2], cols);
		return -EINVAL;
	}
	out[0] += c->xent_host[0];
	out[1] += c->xent_host[1];
	return 0;
}

static int cuda_sgd(struct trn_dev *d, int stream, float *p, const float *g, float *m, size_t n,
		    float lr, float mu, float scale)
{
	cudaStream_t s;
	int ret = stream_get(d, stream, &s);

	if (ret < 0 || n == 0)
		return ret;
	launch_begin();
	k_sgd<<<grid_for(d, n), BLOCK, 0, s>>>(p, g, m, n, lr, mu, scale);
	return CUDA_CHECK(d->err, cudaGetLastError());
}

static int cuda_scale(struct trn_dev *d, int stream, float *x, size_t n, float a)
{
	cudaStream_t s;
	int ret = stream_get(d, stream, &s);

	if (ret < 0 || n == 0)
		return ret;
	launch_begin();
	k_scale<<<grid_for(d, n), BLOCK, 0, s>>>(x, n, a);
	return CUDA_CHECK(d->err, cudaGetLastError());
}

static const struct trn_dev_ops cuda_ops = {
	.name = "cuda",
	.close = cuda_close,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.copy_h2d = cuda_copy_h2d,
	.copy_d2h = cuda_copy_d2h,
	.event_record = cuda_event_record,
	.stream_wait = cuda_stream_wait,
	.event_sync = cuda_event_sync,
	.event_done = cuda_event_done,
	.sync = cuda_sync,
	.gemm = cuda_gemm,
	.pool_u8 = cuda_pool_u8,
	.bias_act = cuda_bias_act,
	.relu_bwd = cuda_relu_bwd,
	.col_sum = cuda_col_sum,
	.softmax_xent = cuda_softmax_xent,
	.sgd = cuda_sgd,
	.scale = cuda_scale,
};

cudaStream_t trn_dev_cuda_stream(struct trn_dev *d, int stream)
{
	if (!d || d->ops != &cuda_ops || stream < 0 || stream >= TRN_STREAMS)
		return NULL;
	return impl(d)->s[stream];
}

extern "C" int trn_dev_cuda_open(int local_rank, struct trn_dev **out, char *err, size_t errlen)
{
	struct trn_dev *d;
	struct cuda_impl *c;
	int count = 0, ret;

	*out = NULL;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		snprintf(err, errlen, "no CUDA GPU is visible to this process (cudaGetDeviceCount: %s); "
			 "check the driver and CUDA_VISIBLE_DEVICES, or use --device host",
			 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return -ENODEV;
	}
	d = (struct trn_dev *)calloc(1, sizeof(*d));
	c = (struct cuda_impl *)calloc(1, sizeof(*c));
	if (!d || !c) {
		free(d);
		free(c);
		snprintf(err, errlen, "out of host memory opening the CUDA device");
		return -ENOMEM;
	}
	d->ops = &cuda_ops;
	d->impl = c;
	d->ordinal = (local_rank % count + count) % count;
	if ((ret = CUDA_CHECK(d->err, cudaSetDevice(d->ordinal))) < 0 ||
	    (ret = CUDA_CHECK(d->err, cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount,
							     d->ordinal))) < 0)
		goto fail;
	for (int i = 0; i < TRN_STREAMS; i++)
		if ((ret = CUDA_CHECK(d->err, cudaStreamCreateWithFlags(&c->s[i],
									cudaStreamNonBlocking))) < 0)
			goto fail;
	for (int i = 0; i < TRN_EVENTS_MAX; i++)
		if ((ret = CUDA_CHECK(d->err, cudaEventCreateWithFlags(&c->ev[i],
								       cudaEventDisableTiming))) < 0)
			goto fail;
	if ((ret = CUBLAS_CHECK(d, cublasCreate(&c->blas))) < 0 ||
	    (ret = CUBLAS_CHECK(d, cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST))) < 0 ||
	    (ret = CUDA_CHECK(d->err, cudaMallocHost((void **)&c->xent_host, 3 * sizeof(double)))) < 0)
		goto fail;
	if (c->sms < 1)
		c->sms = 1;
	*out = d;
	return 0;
fail:
	snprintf(err, errlen, "opening GPU %d: %s", d->ordinal, d->err);
	cuda_close(d);
	return ret;
}
