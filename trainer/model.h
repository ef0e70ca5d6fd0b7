/* model.h - the trainer's models, on the device layer:
 *   mlp           a real model that learns: the crop average-pooled to at most 16x16, one hidden
 *                 layer with ReLU, softmax cross-entropy; parameters W1, b1, W2, b2.
 *   synthetic     real work with a known profile: L layers of K x K weights, each applied to R
 *                 rows per sample (as a convolution reuses its weights over positions), so that a
 *                 forward pass costs F FLOPs per sample and the gradient has P parameters; e.g.
 *                 resnet50 = 4.1 GFLOPs, 25.6 M parameters.
 * Parameters live in the DDP core's flat layout (ddp.h): the model addresses parameter p at
 * params + offs[p]. Backward marks each gradient ready as soon as it is written. */
#ifndef LOADERD_TRN_MODEL_H
#define LOADERD_TRN_MODEL_H
#include <stddef.h>
#include <stdint.h>

#include "trainer/ddp.h"
#include "trainer/dev.h"

struct trn_model_shape {
	int h, w, c, nchw;         /* input sample (uint8) */
	int classes;
	int batch;                 /* the most samples in one step */
};

struct trn_model;

struct trn_model_ops {
	const char *name;
	/* Sizes of the parameters in forward order; returns how many. */
	int (*params)(struct trn_model *m, const size_t **sizes);
	/* Deterministic initial values into @params (device, flat layout at @offs). */
	int (*init)(struct trn_model *m, float *params, const size_t *offs, uint64_t seed);
	/* Forward and backward of @count samples (device pointers). Gradients go to @grads
	 * (accumulated when @accumulate), each marked ready on @ddp the moment it is written.
	 * out[0] += loss sum, out[1] += correct predictions. */
	int (*step)(struct trn_model *m, const uint8_t *images, const int64_t *labels, const float *w,
		    int count, float *params, float *grads, const size_t *offs, int accumulate,
		    struct trn_ddp *ddp, double out[2]);
	uint64_t (*flops_per_sample)(const struct trn_model *m);  /* forward + backward */
	void (*destroy)(struct trn_model *m);
};

struct trn_model {
	const struct trn_model_ops *ops;
	struct trn_dev *dev;
	struct trn_model_shape shape;
	char err[256];
	void *impl;
};

/* @spec: "mlp", "mlp:hidden=N", "synthetic:resnet50", "synthetic:flops=F,params=P" (F, P may
 * carry K/M/G suffixes). 0 or -EINVAL with the reason in @err. */
int trn_model_create(const char *spec, struct trn_dev *dev, const struct trn_model_shape *shape,
		     struct trn_model **out, char *err, size_t errlen);

#endif
