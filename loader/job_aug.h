/* job_aug.h - a job's augmentations (CTL_AUGMENT) in the fill: the resize filter each sample's
 * decode takes, and the per-sample ops run on its pixels in the slot after the decode
 * (codec/augment.h). Every draw comes from the sample's key (seed, epoch, id), as the crop's. */
#ifndef LOADERD_JOB_AUG_H
#define LOADERD_JOB_AUG_H
#include <stddef.h>
#include <stdint.h>
#include "codec/augment.h"
#include "codec/decode.h"
#include "codec/resize_filter.h"
#include "shm/ctl.h"

struct ldr_aug {
	int active;                /* pixels to change after the decode (cdc_aug_active) */
	struct cdc_aug aug;
	uint32_t interp;           /* enum ctl_interp */
	int antialias;
};

/* From the wire body @w (checked by ctl_check_augment; NULL: none) for a job whose output is
 * cropped (@cropped) or the records as stored. 0, or -EINVAL with @why (augmentations asked of
 * records delivered as stored). */
int ldr_aug_init(struct ldr_aug *a, const struct ctl_augment *w, int cropped, char *why,
		 size_t whylen);
/* Set @o's resize filter for the sample of @key. */
void ldr_aug_out(const struct ldr_aug *a, uint64_t key, struct cdc_out *o);
/* Run the per-sample ops on the decoded sample @dst (@o's size and layout) of @key. @scratch
 * and @cap are the worker's buffer, grown here (free it with free()). 0 or -ENOMEM. */
int ldr_aug_pixels(const struct ldr_aug *a, uint64_t key, const struct cdc_out *o, uint8_t *dst,
		   uint8_t **scratch, size_t *cap);

#endif
