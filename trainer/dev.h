/* dev.h - the trainer's device layer: one interface, two implementations. CUDA (dev_cuda.cu:
 * streams, events, cudaHostRegister, cudaMemcpyAsync, cuBLAS, a few kernels) and host (dev_host.c:
 * the same calls on the CPU with OpenBLAS; streams run inline, so events are complete when
 * recorded). Everything above this header is device-agnostic.
 *
 * Streams are small integers (TRN_STREAM_*), events are indices into a per-device pool. Matrices
 * are row-major float32. All calls return 0 or -errno and never log; the device's err field
 * (struct trn_dev) has the native message of the last failure. Threads: one thread per device. */
#ifndef LOADERD_TRN_DEV_H
#define LOADERD_TRN_DEV_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

enum trn_stream { TRN_STREAM_COPY = 0, TRN_STREAM_COMPUTE = 1, TRN_STREAM_COMM = 2, TRN_STREAMS = 3 };
#define TRN_EVENTS_MAX 64

struct trn_dev;

struct trn_dev_ops {
	const char *name;                  /* "host" or "cuda" */
	void (*close)(struct trn_dev *d);
	/* Device memory (zeroed). NULL on failure. */
	void *(*alloc)(struct trn_dev *d, size_t bytes);
	void (*free)(struct trn_dev *d, void *p);
	/* Pin host memory (the ring mapping) once, so copies from it are DMA. */
	int (*host_register)(struct trn_dev *d, void *p, size_t n);
	void (*host_unregister)(struct trn_dev *d, void *p);
	int (*copy_h2d)(struct trn_dev *d, int stream, void *dst, const void *src, size_t n);
	int (*copy_d2h)(struct trn_dev *d, int stream, void *dst, const void *src, size_t n);
	int (*event_record)(struct trn_dev *d, int ev, int stream);
	int (*stream_wait)(struct trn_dev *d, int stream, int ev);  /* stream waits for ev */
	int (*event_sync)(struct trn_dev *d, int ev);                /* host waits for ev */
	int (*event_done)(struct trn_dev *d, int ev);                /* 1 done, 0 not, <0 error */
	int (*sync)(struct trn_dev *d, int stream);
	/* C = alpha * op(A) op(B) + beta * C, op = transpose when ta/tb. m x n result, k inner. */
	int (*gemm)(struct trn_dev *d, int stream, int ta, int tb, int m, int n, int k, float alpha,
		    const float *A, const float *B, float beta, float *C);
	/* uint8 images (count x h x w x c, NHWC, or c x h x w when nchw) -> float features
	 * (count x (h/pool) x (w/pool) x c), average-pooled by @pool and scaled to [-1, 1]. */
	int (*pool_u8)(struct trn_dev *d, int stream, const uint8_t *src, int count, int h, int w, int c,
		       int nchw, int pool, float *dst);
	/* y[i][j] = relu(y[i][j] + b[j]) over rows x cols; relu=0: bias only. */
	int (*bias_act)(struct trn_dev *d, int stream, float *y, const float *b, int rows, int cols, int relu);
	/* dy[i] *= (y[i] > 0) */
	int (*relu_bwd)(struct trn_dev *d, int stream, float *dy, const float *y, size_t n);
	/* db[j] (+)= sum_i dy[i][j]; accumulate when acc. */
	int (*col_sum)(struct trn_dev *d, int stream, const float *dy, int rows, int cols, float *db, int acc);
	/* Softmax cross-entropy over rows of logits with labels; per-sample weights (NULL: 1).
	 * Writes dlogits = (softmax - onehot) * w / sum(w); adds the loss sum and the count of
	 * correct predictions (weighted samples only) into out[0] and out[1] on the host. */
	int (*softmax_xent)(struct trn_dev *d, int stream, const float *logits, const int64_t *labels,
			    const float *w, int rows, int cols, float *dlogits, double out[2]);
	/* SGD with momentum: m = mu*m + scale*g; p -= lr*m. */
	int (*sgd)(struct trn_dev *d, int stream, float *p, const float *g, float *m, size_t n, float lr,
		   float mu, float scale);
	/* x *= a */
	int (*scale)(struct trn_dev *d, int stream, float *x, size_t n, float a);
};

struct trn_dev {
	const struct trn_dev_ops *ops;
	int ordinal;                   /* GPU index; 0 on the host */
	char err[256];                 /* the last failure, native message included */
	void *impl;
};

/* Open the host device. 0 or -ENOMEM. */
int trn_dev_host_open(struct trn_dev **out);
/* Open GPU @local_rank (mod the device count). -ENODEV (with err) when CUDA was not built in or no
 * GPU is visible. */
int trn_dev_cuda_open(int local_rank, struct trn_dev **out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
