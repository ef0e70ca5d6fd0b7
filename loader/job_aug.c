/* job_aug.c - a job's augmentations in the fill (see job_aug.h). The wire's fixed point becomes
 * the codec's doubles once, at the job open; the fill only reads them. */
#include "loader/job_aug.h"
#include "common/mix.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double frac(int64_t v)
{
	return (double)v / CTL_AUG_ONE;
}

int ldr_aug_init(struct ldr_aug *a, const struct ctl_augment *w, int cropped, char *why,
		 size_t whylen)
{
	memset(a, 0, sizeof(*a));
	if (!w)
		return 0;
	struct cdc_aug *c = &a->aug;
	for (int i = 0; i < 4; i++) {
		c->jitter_on[i] = !!(w->jitter & 1u << i);
		c->jitter_lo[i] = frac(w->jitter_lo[i]);
		c->jitter_hi[i] = frac(w->jitter_hi[i]);
	}
	c->autoaug = (enum cdc_auto)w->autoaug;  /* the same numbers: _Static_asserts below */
	c->num_ops = w->num_ops;
	c->magnitude = w->magnitude;
	c->bins = w->bins;
	c->erase_p = frac(w->erase_p);
	for (int i = 0; i < 2; i++) {
		c->erase_scale[i] = frac(w->erase_scale[i]);
		c->erase_ratio[i] = frac(w->erase_ratio[i]);
	}
	c->erase_fill = w->erase_fill ? CDC_ERASE_RANDOM : CDC_ERASE_CONST;
	for (int i = 0; i < 3; i++) {
		c->erase_rgb[i] = w->erase_rgb[i];
		c->erase_mean[i] = frac(w->erase_mean[i]);
		c->erase_std[i] = frac(w->erase_std[i]);
	}
	a->interp = w->interp;
	a->antialias = !!w->antialias;
	a->active = cdc_aug_active(c);
	if (!cropped && (a->active || a->interp != CTL_INTERP_FAST)) {
		snprintf(why, whylen, "augment: the records are delivered as stored (no crop size): "
			 "nothing to resize or augment");
		return -EINVAL;
	}
	/* ctl_check_augment bounded every field within what the codec takes */
	int ret = cdc_aug_check(c, why, whylen);
	assert(ret == 0);
	return ret;
}
_Static_assert((int)CDC_AUTO_RAND == (int)CTL_AUTO_RAND &&
	       (int)CDC_AUTO_WIDE == (int)CTL_AUTO_WIDE &&
	       (int)CDC_AUTO_IMAGENET == (int)CTL_AUTO_IMAGENET, "one numbering");
_Static_assert(CDC_BINS_MAX == CTL_AUG_BINS_MAX && CDC_RAND_OPS_MAX == CTL_AUG_OPS_MAX,
	       "one bound");

void ldr_aug_out(const struct ldr_aug *a, uint64_t key, struct cdc_out *o)
{
	switch (a->interp) {
	case CTL_INTERP_BILINEAR:
		o->filter = CDC_FILTER_BILINEAR;
		break;
	case CTL_INTERP_BICUBIC:
		o->filter = CDC_FILTER_BICUBIC;
		break;
	case CTL_INTERP_RANDOM:  /* timm's 'random': bilinear or bicubic, even odds */
		o->filter = mix3(key, 0x494e5450ull /* "INTP" */, 0) & 1 ? CDC_FILTER_BICUBIC :
									   CDC_FILTER_BILINEAR;
		break;
	default:
		o->filter = CDC_FILTER_FAST;
	}
	o->antialias = o->filter != CDC_FILTER_FAST && a->antialias;
}

int ldr_aug_pixels(const struct ldr_aug *a, uint64_t key, const struct cdc_out *o, uint8_t *dst,
		   uint8_t **scratch, size_t *cap)
{
	struct cdc_img im;

	if (!a->active)
		return 0;
	if (o->nchw)
		cdc_img_chw(&im, dst, o->h, o->w);
	else
		cdc_img_hwc(&im, dst, o->h, o->w);
	size_t need = cdc_aug_scratch(&im);
	if (need > *cap) {
		uint8_t *p = realloc(*scratch, need);
		if (!p)
			return -ENOMEM;
		*scratch = p;
		*cap = need;
	}
	cdc_aug_run(&a->aug, &im, key, *scratch);
	return 0;
}
