/* model.c - mlp and synthetic models (see model.h). */
#include "trainer/model.h"

#include "common/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEV(m) ((m)->dev)
#define CALL(m, op, ...) ((m)->dev->ops->op((m)->dev, __VA_ARGS__))
#define TRY(x) do { int ret_ = (x); if (ret_ < 0) return ret_; } while (0)

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Uniform in [-a, a), deterministic in (seed, i). */
static float urand(uint64_t seed, uint64_t i, float a)
{
	return (float)((double)(mix(seed ^ mix(i)) >> 11) * (2.0 / 9007199254740992.0) - 1.0) * a;
}

/* Fill device memory @dst (n floats) with uniform values, through a host staging buffer. */
static int fill_uniform(struct trn_model *m, float *dst, size_t n, uint64_t seed, float a)
{
	float *h = malloc(n * sizeof(float));

	if (!h)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		h[i] = a == 0 ? 0 : urand(seed, i, a);
	int ret = CALL(m, copy_h2d, TRN_STREAM_COMPUTE, dst, h, n * sizeof(float));
	if (ret == 0)
		ret = CALL(m, sync, TRN_STREAM_COMPUTE);
	free(h);
	return ret;
}

/* ---- mlp ---- */

struct mlp {
	int pool, in, hidden;
	size_t sizes[4];           /* W1 in x hidden, b1, W2 hidden x classes, b2 */
	float *x, *h, *z, *dz, *dh;
};

static int mlp_params(struct trn_model *m, const size_t **sizes)
{
	struct mlp *p = m->impl;

	*sizes = p->sizes;
	return 4;
}

static int mlp_init(struct trn_model *m, float *params, const size_t *offs, uint64_t seed)
{
	struct mlp *p = m->impl;

	/* He-uniform for the weights, zero biases. */
	TRY(fill_uniform(m, params + offs[0], p->sizes[0], seed * 4 + 0, sqrtf(6.0f / (float)p->in)));
	TRY(fill_uniform(m, params + offs[1], p->sizes[1], 0, 0));
	TRY(fill_uniform(m, params + offs[2], p->sizes[2], seed * 4 + 2, sqrtf(6.0f / (float)p->hidden)));
	return fill_uniform(m, params + offs[3], p->sizes[3], 0, 0);
}

static int mlp_step(struct trn_model *m, const uint8_t *images, const int64_t *labels, const float *w,
		    int count, float *params, float *grads, const size_t *offs, int acc,
		    struct trn_ddp *ddp, double out[2])
{
	struct mlp *p = m->impl;
	const struct trn_model_shape *s = &m->shape;
	const int C = s->classes, H = p->hidden, I = p->in, S = TRN_STREAM_COMPUTE;
	float *W1 = params + offs[0], *b1 = params + offs[1], *W2 = params + offs[2], *b2 = params + offs[3];
	float *gW1 = grads + offs[0], *gb1 = grads + offs[1], *gW2 = grads + offs[2], *gb2 = grads + offs[3];

	/* forward */
	TRY(CALL(m, pool_u8, S, images, count, s->h, s->w, s->c, s->nchw, p->pool, p->x));
	TRY(CALL(m, gemm, S, 0, 0, count, H, I, 1.0f, p->x, W1, 0.0f, p->h));
	TRY(CALL(m, bias_act, S, p->h, b1, count, H, 1));
	TRY(CALL(m, gemm, S, 0, 0, count, C, H, 1.0f, p->h, W2, 0.0f, p->z));
	TRY(CALL(m, bias_act, S, p->z, b2, count, C, 0));
	TRY(CALL(m, softmax_xent, S, p->z, labels, w, count, C, p->dz, out));
	/* backward, last layer first; each gradient is handed to DDP as soon as it exists */
	TRY(CALL(m, col_sum, S, p->dz, count, C, gb2, acc));
	TRY(trn_ddp_ready(ddp, 3, grads));
	TRY(CALL(m, gemm, S, 1, 0, H, C, count, 1.0f, p->h, p->dz, acc ? 1.0f : 0.0f, gW2));
	TRY(trn_ddp_ready(ddp, 2, grads));
	TRY(trn_ddp_progress(ddp));
	TRY(CALL(m, gemm, S, 0, 1, count, H, C, 1.0f, p->dz, W2, 0.0f, p->dh));
	TRY(CALL(m, relu_bwd, S, p->dh, p->h, (size_t)count * H));
	TRY(CALL(m, col_sum, S, p->dh, count, H, gb1, acc));
	TRY(trn_ddp_ready(ddp, 1, grads));
	TRY(trn_ddp_progress(ddp));
	TRY(CALL(m, gemm, S, 1, 0, I, H, count, 1.0f, p->x, p->dh, acc ? 1.0f : 0.0f, gW1));
	return trn_ddp_ready(ddp, 0, grads);
}

static uint64_t mlp_flops(const struct trn_model *m)
{
	const struct mlp *p = m->impl;

	return 3ull * 2 * ((uint64_t)p->in * p->hidden + (uint64_t)p->hidden * m->shape.classes);
}

static void mlp_destroy(struct trn_model *m)
{
	struct mlp *p = m->impl;

	if (p) {
		float *bufs[] = { p->x, p->h, p->z, p->dz, p->dh };
		for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
			if (bufs[i])
				m->dev->ops->free(m->dev, bufs[i]);
		free(p);
	}
	free(m);
}

static const struct trn_model_ops mlp_ops = {
	.name = "mlp", .params = mlp_params, .init = mlp_init, .step = mlp_step,
	.flops_per_sample = mlp_flops, .destroy = mlp_destroy,
};

static int mlp_create(struct trn_model *m, int hidden)
{
	struct mlp *p = calloc(1, sizeof(*p));
	const struct trn_model_shape *s = &m->shape;
	int side = s->h > s->w ? s->h : s->w;

	if (!p)
		return -ENOMEM;
	m->impl = p;
	m->ops = &mlp_ops;
	p->pool = side > 16 ? (side + 15) / 16 : 1;
	if (s->h / p->pool < 1 || s->w / p->pool < 1)
		p->pool = 1;
	p->in = (s->h / p->pool) * (s->w / p->pool) * s->c;
	p->hidden = hidden;
	p->sizes[0] = (size_t)p->in * hidden;
	p->sizes[1] = (size_t)hidden;
	p->sizes[2] = (size_t)hidden * s->classes;
	p->sizes[3] = (size_t)s->classes;
	size_t B = (size_t)s->batch;
	p->x = m->dev->ops->alloc(m->dev, B * p->in * sizeof(float));
	p->h = m->dev->ops->alloc(m->dev, B * hidden * sizeof(float));
	p->dh = m->dev->ops->alloc(m->dev, B * hidden * sizeof(float));
	p->z = m->dev->ops->alloc(m->dev, B * s->classes * sizeof(float));
	p->dz = m->dev->ops->alloc(m->dev, B * s->classes * sizeof(float));
	if (!p->x || !p->h || !p->dh || !p->z || !p->dz)
		return -ENOMEM;
	return 0;
}

/* ---- synthetic ---- */

struct synth {
	int layers, k, rows;       /* L layers of K x K, R rows per sample */
	size_t *sizes;
	float **act;               /* L + 1 activations, batch*R x K */
	float *dact[2];
	uint64_t flops;
};

static int synth_params(struct trn_model *m, const size_t **sizes)
{
	struct synth *p = m->impl;

	*sizes = p->sizes;
	return p->layers;
}

static int synth_init(struct trn_model *m, float *params, const size_t *offs, uint64_t seed)
{
	struct synth *p = m->impl;

	for (int l = 0; l < p->layers; l++)
		TRY(fill_uniform(m, params + offs[l], p->sizes[l], seed * 1000 + (uint64_t)l,
				 1.0f / sqrtf((float)p->k)));
	return 0;
}

static int synth_step(struct trn_model *m, const uint8_t *images, const int64_t *labels, const float *w,
		      int count, float *params, float *grads, const size_t *offs, int acc,
		      struct trn_ddp *ddp, double out[2])
{
	struct synth *p = m->impl;
	const int K = p->k, N = count * p->rows, S = TRN_STREAM_COMPUTE;

	(void)images, (void)labels, (void)w, (void)out;
	/* The input is the first activation as left by init: the work, not the values, matters. */
	for (int l = 0; l < p->layers; l++)
		TRY(CALL(m, gemm, S, 0, 0, N, K, K, 1.0f, p->act[l], params + offs[l], 0.0f, p->act[l + 1]));
	TRY(CALL(m, scale, S, p->act[p->layers], (size_t)N * K, 1e-3f));  /* a stand-in for dL/dy */
	const float *dy = p->act[p->layers];
	for (int l = p->layers - 1; l >= 0; l--) {
		TRY(CALL(m, gemm, S, 1, 0, K, K, N, 1.0f, p->act[l], dy, acc ? 1.0f : 0.0f, grads + offs[l]));
		TRY(trn_ddp_ready(ddp, l, grads));
		TRY(trn_ddp_progress(ddp));
		if (l > 0) {
			float *dx = p->dact[l & 1];
			TRY(CALL(m, gemm, S, 0, 1, N, K, K, 1.0f, dy, params + offs[l], 0.0f, dx));
			dy = dx;
		}
	}
	return 0;
}

static uint64_t synth_flops(const struct trn_model *m)
{
	return 3 * ((const struct synth *)m->impl)->flops;
}

static void synth_destroy(struct trn_model *m)
{
	struct synth *p = m->impl;

	if (p) {
		if (p->act)
			for (int l = 0; l <= p->layers; l++)
				if (p->act[l])
					m->dev->ops->free(m->dev, p->act[l]);
		for (int i = 0; i < 2; i++)
			if (p->dact[i])
				m->dev->ops->free(m->dev, p->dact[i]);
		free(p->act);
		free(p->sizes);
		free(p);
	}
	free(m);
}

static const struct trn_model_ops synth_ops = {
	.name = "synthetic", .params = synth_params, .init = synth_init, .step = synth_step,
	.flops_per_sample = synth_flops, .destroy = synth_destroy,
};

static int synth_create(struct trn_model *m, double flops, double params)
{
	struct synth *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	m->impl = p;
	m->ops = &synth_ops;
	p->k = params >= 1024.0 * 1024 ? 1024 : (int)fmax(8, floor(sqrt(params)));
	p->layers = (int)fmax(1, round(params / ((double)p->k * p->k)));
	p->rows = (int)fmax(1, round(flops / (2.0 * p->layers * p->k * p->k)));
	p->flops = (uint64_t)2 * p->layers * p->k * p->k * (uint64_t)p->rows;
	p->sizes = calloc((size_t)p->layers, sizeof(size_t));
	p->act = calloc((size_t)p->layers + 1, sizeof(float *));
	if (!p->sizes || !p->act)
		return -ENOMEM;
	size_t n = (size_t)m->shape.batch * p->rows * p->k;
	for (int l = 0; l < p->layers; l++)
		p->sizes[l] = (size_t)p->k * p->k;
	for (int l = 0; l <= p->layers; l++)
		if (!(p->act[l] = m->dev->ops->alloc(m->dev, n * sizeof(float))))
			return -ENOMEM;
	for (int i = 0; i < 2; i++)
		if (!(p->dact[i] = m->dev->ops->alloc(m->dev, n * sizeof(float))))
			return -ENOMEM;
	return fill_uniform(m, p->act[0], n, 7, 1.0f);
}

/* ---- factory ---- */

static int parse_si(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || v <= 0)
		return -1;
	switch (*end) {
	case 'K': case 'k': v *= 1e3; end++; break;
	case 'M': case 'm': v *= 1e6; end++; break;
	case 'G': case 'g': v *= 1e9; end++; break;
	case 'T': case 't': v *= 1e12; end++; break;
	}
	if (*end && *end != ',')
		return -1;
	*out = v;
	return 0;
}

int trn_model_create(const char *spec, struct trn_dev *dev, const struct trn_model_shape *shape,
		     struct trn_model **out, char *err, size_t errlen)
{
	struct trn_model *m = calloc(1, sizeof(*m));
	int ret;

	*out = NULL;
	if (!m)
		return -ENOMEM;
	m->dev = dev;
	m->shape = *shape;
	if (shape->batch < 1 || shape->h < 1 || shape->w < 1 || shape->c < 1 || shape->classes < 2) {
		snprintf(err, errlen, "model %s: bad input shape %dx%dx%d, %d classes, batch %d", spec,
			 shape->h, shape->w, shape->c, shape->classes, shape->batch);
		free(m);
		return -EINVAL;
	}
	if (!strcmp(spec, "mlp") || !strncmp(spec, "mlp:hidden=", 11)) {
		unsigned hidden = 256;
		if (spec[3] && arg_uint(spec + 11, 1, 65536, &hidden) < 0) {
			snprintf(err, errlen, "model %s: hidden '%s' is not a number in 1..65536", spec,
				 spec + 11);
			free(m);
			return -EINVAL;
		}
		ret = mlp_create(m, (int)hidden);
		if (ret < 0) {
			snprintf(err, errlen, "model %s: out of device memory", spec);
			mlp_destroy(m);
			return ret;
		}
		*out = m;
		return 0;
	}
	double flops = 0, params = 0;
	if (!strcmp(spec, "synthetic:resnet50")) {
		flops = 4.1e9, params = 25.6e6;
	} else if (!strncmp(spec, "synthetic:", 10)) {
		for (const char *p = spec + 10; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL) {
			if (!strncmp(p, "flops=", 6) && parse_si(p + 6, &flops) == 0)
				continue;
			if (!strncmp(p, "params=", 7) && parse_si(p + 7, &params) == 0)
				continue;
			flops = params = 0;
			break;
		}
	}
	if (flops <= 0 || params <= 0 || params > 4e9) {
		snprintf(err, errlen, "unknown model '%s': use mlp, mlp:hidden=N, synthetic:resnet50 or "
			 "synthetic:flops=F,params=P (e.g. flops=4.1G,params=25.6M)", spec);
		free(m);
		return -EINVAL;
	}
	ret = synth_create(m, flops, params);
	if (ret < 0) {
		snprintf(err, errlen, "model %s: out of device memory for batch %d", spec, shape->batch);
		synth_destroy(m);
		return ret;
	}
	*out = m;
	return 0;
}
