/* augment.h - per-sample augmentations on uint8 RGB pixels, after the crop, resize and flip:
 * torchvision's ColorJitter, RandAugment, TrivialAugmentWide, AutoAugment (ImageNet policy) and
 * RandomErasing, each op computed the way torchvision's tensor (uint8) implementation computes it
 * (float32 arithmetic, truncation to uint8 where it truncates, round half to even where it
 * rounds), and every random draw taken from one 64-bit key per sample (the job's seed, the epoch
 * and the sample id), so that a resumed run and every rank draw the same values.
 * Pure functions over caller memory; no allocation; thread-safe. Measured differences from
 * torchvision 0.14 are in docs/AUGMENT.md. */
#ifndef LOADERD_AUGMENT_H
#define LOADERD_AUGMENT_H
#include <stddef.h>
#include <stdint.h>

/* An image of 3 channels, contiguous (a decoded sample): channel c of pixel (y, x) is
 * px[y * ys + x * xs + c * cs]; NHWC: xs 3, cs 1, ys 3w; NCHW: xs 1, cs h * w, ys w (made by
 * cdc_img_hwc, cdc_img_chw: the ops take no other layout). */
struct cdc_img {
	uint8_t *px;
	uint32_t h, w;
	size_t xs, ys, cs;
};
void cdc_img_hwc(struct cdc_img *im, uint8_t *px, uint32_t h, uint32_t w);
void cdc_img_chw(struct cdc_img *im, uint8_t *px, uint32_t h, uint32_t w);

/* ---- the ops (torchvision.transforms.functional on a uint8 tensor) ---- */
void cdc_aug_brightness(const struct cdc_img *im, double factor);   /* factor >= 0 */
void cdc_aug_contrast(const struct cdc_img *im, double factor);     /* factor >= 0 */
void cdc_aug_saturation(const struct cdc_img *im, double factor);   /* factor >= 0 */
void cdc_aug_hue(const struct cdc_img *im, double factor);          /* -0.5..0.5 */
void cdc_aug_posterize(const struct cdc_img *im, unsigned bits);    /* 0..8 */
void cdc_aug_solarize(const struct cdc_img *im, double threshold);
void cdc_aug_autocontrast(const struct cdc_img *im);
void cdc_aug_equalize(const struct cdc_img *im);
/* @scratch: cdc_aug_scratch(im) bytes. */
void cdc_aug_sharpness(const struct cdc_img *im, double factor, uint8_t *scratch);
/* An affine warp by the inverse matrix @m (output pixel to input pixel, torchvision's
 * _get_inverse_affine_matrix with the centre at the image's middle), nearest, fill 0. */
void cdc_aug_affine(const struct cdc_img *im, const double m[6], uint8_t *scratch);
/* torchvision's _get_inverse_affine_matrix (angle and shear in degrees). */
void cdc_aug_matrix(double cx, double cy, double angle, double tx, double ty, double scale,
		    double shx, double shy, double m[6]);
/* Fill rows i..i+h-1, columns j..j+w-1 (inside the image) with @rgb. */
void cdc_aug_erase(const struct cdc_img *im, uint32_t i, uint32_t j, uint32_t h, uint32_t w,
		   const uint8_t rgb[3]);
size_t cdc_aug_scratch(const struct cdc_img *im);

/* The RandAugment / TrivialAugmentWide / AutoAugment operations, in torchvision's order. */
enum cdc_aug_op {
	CDC_OP_IDENTITY, CDC_OP_SHEAR_X, CDC_OP_SHEAR_Y, CDC_OP_TRANSLATE_X, CDC_OP_TRANSLATE_Y,
	CDC_OP_ROTATE, CDC_OP_BRIGHTNESS, CDC_OP_COLOR, CDC_OP_CONTRAST, CDC_OP_SHARPNESS,
	CDC_OP_POSTERIZE, CDC_OP_SOLARIZE, CDC_OP_AUTOCONTRAST, CDC_OP_EQUALIZE, CDC_OP_INVERT,
	CDC_OPS
};
extern const char *const cdc_aug_op_names[CDC_OPS];  /* torchvision's names ("ShearX") */
/* Apply @op with @magnitude as torchvision's autoaugment._apply_op does. */
void cdc_aug_apply_op(const struct cdc_img *im, enum cdc_aug_op op, double magnitude,
		      uint8_t *scratch);
enum cdc_aug_space { CDC_SPACE_RAND, CDC_SPACE_WIDE, CDC_SPACE_AUTO };
/* Bin @bin of @nbins of @op's magnitudes in @space for an @h x @w image (torchvision's
 * _augmentation_space, float32 as torch.linspace makes them); 0 for ops without magnitudes. */
double cdc_aug_magnitude(enum cdc_aug_space space, enum cdc_aug_op op, unsigned bin,
			 unsigned nbins, uint32_t h, uint32_t w);

/* Op @k (0, 1) of sub-policy @i (0..24) of AutoAugment's ImageNet policy: its op, probability
 * and magnitude bin (-1: none). 0, or -1 past the table. */
int cdc_aug_imagenet_policy(unsigned i, unsigned k, enum cdc_aug_op *op, double *p, int *bin);

/* ---- the per-sample pipeline ---- */
enum cdc_auto { CDC_AUTO_NONE = 0, CDC_AUTO_RAND = 1, CDC_AUTO_WIDE = 2, CDC_AUTO_IMAGENET = 3 };
enum cdc_erase_fill { CDC_ERASE_CONST = 0, CDC_ERASE_RANDOM = 1 };
#define CDC_BINS_MAX 64u
#define CDC_RAND_OPS_MAX 8u
/* What to do to each sample, in this order: ColorJitter, then the auto-augment, then
 * RandomErasing (torchvision's reference recipe and timm's). Values are checked by the caller
 * (loader: ctl_check_augment); cdc_aug_check() states the bounds. */
struct cdc_aug {
	/* ColorJitter: brightness, contrast, saturation factors drawn in [lo, hi] (lo >= 0), hue
	 * in [lo, hi] within -0.5..0.5; an op is off when its on flag is 0. */
	int jitter_on[4];
	double jitter_lo[4], jitter_hi[4];
	enum cdc_auto autoaug;
	unsigned num_ops;        /* RandAugment: 1..CDC_RAND_OPS_MAX */
	unsigned magnitude;      /* RandAugment: < bins */
	unsigned bins;           /* RandAugment, TrivialAugmentWide: 2..CDC_BINS_MAX */
	/* RandomErasing: p 0..1 (0: off), area fraction scale_lo..scale_hi (0 < lo <= hi <= 1),
	 * aspect ratio ratio_lo..ratio_hi (0 < lo <= hi), the fill: a colour, or per pixel
	 * N(mean, std) in pixel units, clamped and rounded (torchvision's value='random' after
	 * Normalize(mean, std)). */
	double erase_p, erase_scale[2], erase_ratio[2];
	enum cdc_erase_fill erase_fill;
	uint8_t erase_rgb[3];
	double erase_mean[3], erase_std[3];
};
enum { CDC_JITTER_BRIGHTNESS, CDC_JITTER_CONTRAST, CDC_JITTER_SATURATION, CDC_JITTER_HUE };
/* 0, or -EINVAL naming the field in @why. */
int cdc_aug_check(const struct cdc_aug *a, char *why, size_t whylen);
/* Anything to do? */
int cdc_aug_active(const struct cdc_aug *a);
/* Run @a on @im, every draw from @key. @scratch: cdc_aug_scratch(im) bytes. */
void cdc_aug_run(const struct cdc_aug *a, const struct cdc_img *im, uint64_t key, uint8_t *scratch);

#endif
