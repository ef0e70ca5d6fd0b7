/* ctl_augment.c - the CTL_AUGMENT body (shm/ctl.h): its check (hostile input: every field
 * bounded, in order, reserved zero), the text spec that ldcat and the tools take, and the digest
 * the resume token carries. libc only, as all of shm/ (no libm: rounding by hand). */
#include "shm/ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(...) (snprintf(why, whylen, __VA_ARGS__), -EINVAL)

static long long round_ll(double x)  /* |x| < 2^62 */
{
	return (long long)(x >= 0 ? x + 0.5 : x - 0.5);
}

static int whole(double x)  /* an integer in 0..1000 */
{
	return x >= 0 && x <= 1000 && x == (double)(long long)x;
}

static const char *const jitter_names[4] = { "brightness", "contrast", "saturation", "hue" };

int ctl_check_augment(const void *body, size_t len, char *why, size_t whylen)
{
	struct ctl_augment a;

	if (len != sizeof(a))
		return BAD("augment: %zu bytes, not %zu", len, sizeof(a));
	memcpy(&a, body, sizeof(a));
	if (a.jitter & ~0xfu)
		return BAD("augment: jitter: unknown bits 0x%x", a.jitter & ~0xfu);
	for (int i = 0; i < 4; i++) {
		int32_t min = i == 3 ? -CTL_AUG_ONE / 2 : 0;
		int32_t max = i == 3 ? CTL_AUG_ONE / 2 : CTL_AUG_JITTER_MAX;
		if (!(a.jitter & 1u << i)) {
			if (a.jitter_lo[i] || a.jitter_hi[i])
				return BAD("augment: jitter %s: a range without its bit",
					   jitter_names[i]);
			continue;
		}
		if (a.jitter_lo[i] < min || a.jitter_hi[i] > max || a.jitter_lo[i] > a.jitter_hi[i])
			return BAD("augment: jitter %s: range %d..%d (millionths) outside %d..%d or "
				   "reversed", jitter_names[i], a.jitter_lo[i], a.jitter_hi[i], min,
				   max);
	}
	if (a.autoaug > CTL_AUTO_IMAGENET)
		return BAD("augment: autoaug: unknown kind %u", a.autoaug);
	int binned = a.autoaug == CTL_AUTO_RAND || a.autoaug == CTL_AUTO_WIDE;
	if (binned && (a.bins < 2 || a.bins > CTL_AUG_BINS_MAX))
		return BAD("augment: bins: %u outside 2..%u", a.bins, CTL_AUG_BINS_MAX);
	if (!binned && a.bins)
		return BAD("augment: bins: %u without RandAugment or TrivialAugmentWide", a.bins);
	if (a.autoaug == CTL_AUTO_RAND) {
		if (a.num_ops < 1 || a.num_ops > CTL_AUG_OPS_MAX)
			return BAD("augment: num_ops: %u outside 1..%u", a.num_ops, CTL_AUG_OPS_MAX);
		if (a.magnitude >= a.bins)
			return BAD("augment: magnitude: %u not below bins %u", a.magnitude, a.bins);
	} else if (a.num_ops || a.magnitude) {
		return BAD("augment: num_ops, magnitude: set without RandAugment");
	}
	if (a.erase_p > CTL_AUG_ONE)
		return BAD("augment: erase_p: %u above %u", a.erase_p, CTL_AUG_ONE);
	if (a.erase_p) {
		if (a.erase_scale[0] < 1 || a.erase_scale[0] > a.erase_scale[1] ||
		    a.erase_scale[1] > CTL_AUG_ONE)
			return BAD("augment: erase_scale: %u..%u not within 1..%u in order",
				   a.erase_scale[0], a.erase_scale[1], CTL_AUG_ONE);
		if (a.erase_ratio[0] < 1 || a.erase_ratio[0] > a.erase_ratio[1] ||
		    a.erase_ratio[1] > CTL_AUG_RATIO_MAX)
			return BAD("augment: erase_ratio: %u..%u not within 1..%u in order",
				   a.erase_ratio[0], a.erase_ratio[1], CTL_AUG_RATIO_MAX);
		if (a.erase_fill > 1)
			return BAD("augment: erase_fill: unknown fill %u", a.erase_fill);
		for (int c = 0; c < 3; c++)
			if (a.erase_mean[c] > CTL_AUG_LEVEL_MAX || a.erase_std[c] > CTL_AUG_LEVEL_MAX)
				return BAD("augment: erase_mean, erase_std: channel %d above %u", c,
					   CTL_AUG_LEVEL_MAX);
	} else if (a.erase_scale[0] || a.erase_scale[1] || a.erase_ratio[0] || a.erase_ratio[1] ||
		   a.erase_fill || a.erase_rgb[0] || a.erase_rgb[1] || a.erase_rgb[2] ||
		   a.erase_mean[0] || a.erase_mean[1] || a.erase_mean[2] || a.erase_std[0] ||
		   a.erase_std[1] || a.erase_std[2]) {
		return BAD("augment: erase_*: set with erase_p 0");
	}
	if (a.erase_rgb[3])
		return BAD("augment: erase_rgb[3]: not zero");
	if (a.interp > CTL_INTERP_RANDOM)
		return BAD("augment: interp: unknown filter %u", a.interp);
	if (a.antialias > 1 || (a.antialias && a.interp == CTL_INTERP_FAST))
		return BAD("augment: antialias: %u (0 or 1, and only with a filter: interp)",
			   a.antialias);
	for (int i = 0; i < 4; i++)
		if (a.reserved[i])
			return BAD("augment: reserved: not zero");
	return 0;
}

uint32_t ctl_augment_digest(const struct ctl_augment *a)
{
	static const struct ctl_augment zero;
	const unsigned char *p = (const unsigned char *)a;
	uint32_t h = 2166136261u;  /* FNV-1a */

	if (!memcmp(a, &zero, sizeof(zero)))
		return 0;
	for (size_t i = 0; i < sizeof(*a); i++)
		h = (h ^ p[i]) * 16777619u;
	return h ? h : 1;
}

/* ---- the text spec ---- */

/* @n numbers separated by ':' from @v into @out (at most @max); *@n set. -1 on junk. */
static int numbers(const char *v, double *out, int max, int *n)
{
	*n = 0;
	if (!v || !*v)
		return 0;
	for (;;) {
		char *end;
		if (*n == max)
			return -1;
		double x = strtod(v, &end);
		if (end == v || !(x > -1e9 && x < 1e9))  /* and not NaN */
			return -1;
		out[(*n)++] = x;
		if (*end == '\0')
			return 0;
		if (*end != ':')
			return -1;
		v = end + 1;
	}
}

/* @x in millionths, if it is within [@lo, @hi] (plain numbers); else -1. */
static int micro(double x, double lo, double hi, int32_t *out)
{
	if (!(x >= lo && x <= hi))
		return -1;
	*out = (int32_t)round_ll(x * CTL_AUG_ONE);
	return 0;
}

static int set_jitter(struct ctl_augment *a, int i, const double *v, int n)
{
	double lo, hi;

	if (n == 1) {  /* torchvision's scalar: [max(0, 1 - x), 1 + x], hue [-x, x]; 0 = off */
		if (v[0] == 0.0)
			return 0;
		if (v[0] < 0)
			return -1;
		lo = i == 3 ? -v[0] : (1.0 - v[0] < 0 ? 0 : 1.0 - v[0]);
		hi = i == 3 ? v[0] : 1.0 + v[0];
	} else if (n == 2) {
		lo = v[0], hi = v[1];
	} else {
		return -1;
	}
	a->jitter |= 1u << i;
	double max = i == 3 ? 0.5 : 16.0, min = i == 3 ? -0.5 : 0.0;
	if (micro(lo, min, max, &a->jitter_lo[i]) < 0 || micro(hi, min, max, &a->jitter_hi[i]) < 0)
		return -1;
	return 0;
}

static int item(struct ctl_augment *a, char *key, const char *val)
{
	double v[6];
	int n;
	int32_t m;

	if (numbers(val, v, 6, &n) < 0 && strcmp(key, "interp") && strcmp(key, "erase_value") &&
	    strcmp(key, "autoaugment"))
		return -1;
	if (!strcmp(key, "jitter")) {
		if (n < 1 || n > 4)
			return -1;
		for (int i = 0; i < n; i++)
			if (set_jitter(a, i, &v[i], 1) < 0)
				return -1;
		return 0;
	}
	for (int i = 0; i < 4; i++)
		if (!strcmp(key, jitter_names[i]))
			return set_jitter(a, i, v, n);
	if (!strcmp(key, "randaugment") || !strcmp(key, "trivialaugment") ||
	    !strcmp(key, "autoaugment")) {
		if (a->autoaug)
			return -1;  /* one of the three */
		if (key[0] == 'r') {
			double d[3] = { 2, 9, 31 };
			if (n > 3)
				return -1;
			for (int i = 0; i < n; i++)
				d[i] = v[i];
			for (int i = 0; i < 3; i++)
				if (!whole(d[i]))
					return -1;
			a->autoaug = CTL_AUTO_RAND;
			a->num_ops = (uint32_t)d[0], a->magnitude = (uint32_t)d[1];
			a->bins = (uint32_t)d[2];
		} else if (key[0] == 't') {
			if (n > 1 || (n && !whole(v[0])))
				return -1;
			a->autoaug = CTL_AUTO_WIDE;
			a->bins = n ? (uint32_t)v[0] : 31;
		} else {
			if (val && strcmp(val, "imagenet"))
				return -1;
			a->autoaug = CTL_AUTO_IMAGENET;
		}
		return 0;
	}
	if (!strcmp(key, "erase")) {
		double d[5] = { 0.5, 0.02, 0.33, 0.3, 3.3 };  /* RandomErasing's defaults */
		if (n > 5 || n == 2 || n == 4)
			return -1;
		for (int i = 0; i < n; i++)
			d[i] = v[i];
		if (micro(d[0], 0, 1, &m) < 0)
			return -1;
		a->erase_p = (uint32_t)m;
		if (micro(d[1], 0, 1, &m) < 0)
			return -1;
		a->erase_scale[0] = (uint32_t)m;
		if (micro(d[2], 0, 1, &m) < 0)
			return -1;
		a->erase_scale[1] = (uint32_t)m;
		if (micro(d[3], 0, 100, &m) < 0)
			return -1;
		a->erase_ratio[0] = (uint32_t)m;
		if (micro(d[4], 0, 100, &m) < 0)
			return -1;
		a->erase_ratio[1] = (uint32_t)m;
		return 0;
	}
	if (!strcmp(key, "erase_value")) {
		/* R:G:B levels; or random, with ImageNet's Normalize mean and std unless
		 * erase_norm says otherwise */
		if (val && !strcmp(val, "random")) {
			static const double mean[3] = { 0.485, 0.456, 0.406 };
			static const double sd[3] = { 0.229, 0.224, 0.225 };
			a->erase_fill = 1;
			for (int c = 0; c < 3; c++) {
				a->erase_mean[c] = (uint32_t)round_ll(mean[c] * 255 * CTL_AUG_ONE);
				a->erase_std[c] = (uint32_t)round_ll(sd[c] * 255 * CTL_AUG_ONE);
			}
			return 0;
		}
		if (numbers(val, v, 3, &n) < 0 || (n != 1 && n != 3))
			return -1;
		for (int c = 0; c < 3; c++) {
			double x = v[n == 1 ? 0 : c];
			if (!whole(x) || x > 255)
				return -1;
			a->erase_rgb[c] = (uint8_t)x;
		}
		return 0;
	}
	if (!strcmp(key, "erase_norm")) {  /* mean:mean:mean:std:std:std, fractions of 255 */
		if (n != 6)
			return -1;
		for (int c = 0; c < 3; c++) {
			if (!(v[c] >= 0 && v[c] <= 1 && v[3 + c] >= 0 && v[3 + c] <= 1))
				return -1;
			a->erase_mean[c] = (uint32_t)round_ll(v[c] * 255 * CTL_AUG_ONE);
			a->erase_std[c] = (uint32_t)round_ll(v[3 + c] * 255 * CTL_AUG_ONE);
		}
		return 0;
	}
	if (!strcmp(key, "interp")) {
		static const char *const names[] = { "fast", "bilinear", "bicubic", "random" };
		for (uint32_t i = 0; i < 4; i++)
			if (val && !strcmp(val, names[i])) {
				a->interp = i;
				return 0;
			}
		return -1;
	}
	if (!strcmp(key, "antialias") && !val) {
		a->antialias = 1;
		return 0;
	}
	return -1;
}

int ctl_augment_parse(const char *spec, struct ctl_augment *out, char *why, size_t whylen)
{
	char buf[512];

	memset(out, 0, sizeof(*out));
	if (strlen(spec) >= sizeof(buf))
		return BAD("augment: the spec is longer than %zu bytes", sizeof(buf) - 1);
	strcpy(buf, spec);
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (eq)
			*eq = '\0';
		if (item(out, tok, eq ? eq + 1 : NULL) < 0)
			return BAD("augment: '%s%s%s': not understood or out of range "
				   "(docs/AUGMENT.md)", tok, eq ? "=" : "", eq ? eq + 1 : "");
	}
	/* erasing's fill: the erase_value/erase_norm items may come before erase itself */
	if (!out->erase_p && (out->erase_fill || out->erase_rgb[0] || out->erase_rgb[1] ||
			      out->erase_rgb[2]))
		return BAD("augment: erase_value without erase");
	if (!out->erase_p) {  /* erase=0: off, with nothing of it left */
		memset(out->erase_scale, 0, sizeof(out->erase_scale));
		memset(out->erase_ratio, 0, sizeof(out->erase_ratio));
		memset(out->erase_mean, 0, sizeof(out->erase_mean));
		memset(out->erase_std, 0, sizeof(out->erase_std));
		out->erase_fill = 0;
	}
	return ctl_check_augment(out, sizeof(*out), why, whylen);
}
