/* dev_host.c - the host device: the device layer on the CPU. GEMMs go to OpenBLAS; the rest are
 * plain loops. Streams execute inline, so a recorded event is complete at once and waits return
 * immediately; the trainer's pipeline logic (copy stream, events, early slot release) runs
 * unchanged, which is what the tests exercise. */
#include "trainer/dev.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void host_close(struct trn_dev *d)
{
	free(d);
}

static void *host_alloc(struct trn_dev *d, size_t bytes)
{
	(void)d;
	return calloc(1, bytes ? bytes : 1);
}

static void host_free(struct trn_dev *d, void *p)
{
	(void)d;
	free(p);
}

static int host_register(struct trn_dev *d, void *p, size_t n)
{
	(void)d, (void)p, (void)n;
	return 0;
}

static void host_unregister(struct trn_dev *d, void *p)
{
	(void)d, (void)p;
}

static int host_copy(struct trn_dev *d, int stream, void *dst, const void *src, size_t n)
{
	(void)d, (void)stream;
	memcpy(dst, src, n);
	return 0;
}

static int ev_ok(struct trn_dev *d, int ev)
{
	(void)d;
	return ev >= 0 && ev < TRN_EVENTS_MAX ? 0 : -EINVAL;
}

static int host_event_record(struct trn_dev *d, int ev, int stream)
{
	(void)stream;
	return ev_ok(d, ev);
}

static int host_stream_wait(struct trn_dev *d, int stream, int ev)
{
	(void)stream;
	return ev_ok(d, ev);
}

static int host_event_sync(struct trn_dev *d, int ev)
{
	return ev_ok(d, ev);
}

static int host_event_done(struct trn_dev *d, int ev)
{
	return ev_ok(d, ev) < 0 ? -EINVAL : 1;
}

static int host_sync(struct trn_dev *d, int stream)
{
	(void)d, (void)stream;
	return 0;
}

static int host_gemm(struct trn_dev *d, int stream, int ta, int tb, int m, int n, int k, float alpha,
		     const float *A, const float *B, float beta, float *C)
{
	(void)d, (void)stream;
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
		    k, alpha, A, ta ? m : k, B, tb ? k : n, beta, C, n);
	return 0;
}

static int host_pool_u8(struct trn_dev *d, int stream, const uint8_t *src, int count, int h, int w,
			int c, int nchw, int pool, float *dst)
{
	int oh = h / pool, ow = w / pool;
	const float norm = 2.0f / (255.0f * (float)(pool * pool));

	(void)d, (void)stream;
	if (pool < 1 || oh < 1 || ow < 1)
		return -EINVAL;
	for (int s = 0; s < count; s++) {
		const uint8_t *img = src + (size_t)s * h * w * c;
		float *out = dst + (size_t)s * oh * ow * c;
		for (int y = 0; y < oh; y++)
			for (int x = 0; x < ow; x++)
				for (int ch = 0; ch < c; ch++) {
					uint32_t sum = 0;
					for (int dy = 0; dy < pool; dy++)
						for (int dx = 0; dx < pool; dx++) {
							int yy = y * pool + dy, xx = x * pool + dx;
							sum += nchw ? img[((size_t)ch * h + yy) * w + xx]
								    : img[((size_t)yy * w + xx) * c + ch];
						}
					out[((size_t)y * ow + x) * c + ch] = (float)sum * norm - 1.0f;
				}
	}
	return 0;
}

static int host_bias_act(struct trn_dev *d, int stream, float *y, const float *b, int rows, int cols,
			 int relu)
{
	(void)d, (void)stream;
	for (int i = 0; i < rows; i++)
		for (int j = 0; j < cols; j++) {
			float v = y[(size_t)i * cols + j] + b[j];
			y[(size_t)i * cols + j] = relu && v < 0 ? 0 : v;
		}
	return 0;
}

static int host_relu_bwd(struct trn_dev *d, int stream, float *dy, const float *y, size_t n)
{
	(void)d, (void)stream;
	for (size_t i = 0; i < n; i++)
		if (y[i] <= 0)
			dy[i] = 0;
	return 0;
}

static int host_col_sum(struct trn_dev *d, int stream, const float *dy, int rows, int cols, float *db,
			int acc)
{
	(void)d, (void)stream;
	if (!acc)
		memset(db, 0, sizeof(float) * (size_t)cols);
	for (int i = 0; i < rows; i++)
		for (int j = 0; j < cols; j++)
			db[j] += dy[(size_t)i * cols + j];
	return 0;
}

static int host_softmax_xent(struct trn_dev *d, int stream, const float *logits, const int64_t *labels,
			     const float *w, int rows, int cols, float *dl, double out[2])
{
	double wsum = 0;

	(void)d, (void)stream;
	for (int i = 0; i < rows; i++)
		wsum += w ? w[i] : 1.0;
	for (int i = 0; i < rows; i++) {
		const float *z = logits + (size_t)i * cols;
		float *g = dl + (size_t)i * cols;
		float mx = z[0], wi = w ? w[i] : 1.0f;
		int arg = 0;
		for (int j = 1; j < cols; j++)
			if (z[j] > mx)
				mx = z[j], arg = j;
		double sum = 0;
		for (int j = 0; j < cols; j++)
			sum += exp((double)(z[j] - mx));
		int64_t y = labels[i];
		if (y < 0 || y >= cols)
			return -EINVAL;
		for (int j = 0; j < cols; j++) {
			double p = exp((double)(z[j] - mx)) / sum;
			g[j] = wsum > 0 ? (float)((p - (j == y)) * wi / wsum) : 0.0f;
		}
		if (wi > 0) {
			out[0] += wi * (log(sum) - (double)(z[y] - mx));
			out[1] += arg == y;
		}
	}
	return 0;
}

static int host_sgd(struct trn_dev *d, int stream, float *p, const float *g, float *m, size_t n,
		    float lr, float mu, float scale)
{
	(void)d, (void)stream;
	for (size_t i = 0; i < n; i++) {
		m[i] = mu * m[i] + scale * g[i];
		p[i] -= lr * m[i];
	}
	return 0;
}

static int host_scale(struct trn_dev *d, int stream, float *x, size_t n, float a)
{
	(void)d, (void)stream;
	for (size_t i = 0; i < n; i++)
		x[i] *= a;
	return 0;
}

static const struct trn_dev_ops host_ops = {
	.name = "host",
	.close = host_close,
	.alloc = host_alloc,
	.free = host_free,
	.host_register = host_register,
	.host_unregister = host_unregister,
	.copy_h2d = host_copy,
	.copy_d2h = host_copy,
	.event_record = host_event_record,
	.stream_wait = host_stream_wait,
	.event_sync = host_event_sync,
	.event_done = host_event_done,
	.sync = host_sync,
	.gemm = host_gemm,
	.pool_u8 = host_pool_u8,
	.bias_act = host_bias_act,
	.relu_bwd = host_relu_bwd,
	.col_sum = host_col_sum,
	.softmax_xent = host_softmax_xent,
	.sgd = host_sgd,
	.scale = host_scale,
};

int trn_dev_host_open(struct trn_dev **out)
{
	struct trn_dev *d = calloc(1, sizeof(*d));

	*out = NULL;
	if (!d)
		return -ENOMEM;
	d->ops = &host_ops;
	*out = d;
	return 0;
}
