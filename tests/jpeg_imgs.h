/* jpeg_imgs.h - what the JPEG window suites (test_jpeg_rst.c, test_jpeg_idx.c, test_decode.c)
 * share: a generated image with edges and noise, or a real photograph Debian ships, compressed by
 * TurboJPEG (or as shipped, or losslessly cropped) and fully decoded at every DCT scale (the
 * reference), and the check that a decoded window's crop pixels equal that reference; the image
 * set both splice suites decode, with its setup and teardown, and what they do alike to each
 * record their builder makes (cdc_idx_build, cdc_rst_rewrite). Header-only (each suite is one
 * binary); include after <cmocka.h> and <turbojpeg.h>. */
#ifndef LOADERD_JPEG_IMGS_H
#define LOADERD_JPEG_IMGS_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/decode.h"
#include "codec/jpeg_build.h"
#include "tests/test_util.h"

/* Texture with edges and noise, so that any difference in upsampling or IDCT shows. */
static inline uint8_t *jpeg_img_pixels(int w, int h, int comps, uint64_t seed)
{
	uint8_t *p = malloc((size_t)w * h * comps);
	uint64_t x = seed | 1;

	assert_non_null(p);
	for (int y = 0; y < h; y++)
		for (int i = 0; i < w; i++)
			for (int c = 0; c < comps; c++) {
				int v = (i * (3 + c) + y * (5 - c)) % 256;
				if (((i / 7) + (y / 5) + c) % 3 == 0)
					v = 255 - v;
				v += (int)(test_xorshift(&x) % 41) - 20;
				p[((size_t)y * w + i) * comps + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
	return p;
}

struct img {
	char name[64];
	unsigned char *jpg;   /* the original (tjFree) */
	unsigned long len;
	int w, h;
	uint8_t *full[4];     /* full decode of the original at 1/1, 1/2, 1/4, 1/8, RGB (free) */
	int fw[4], fh[4];
};

/* The reference: @m's JPEG fully decoded at every scale. */
static inline void jpeg_img_full_decode(tjhandle tjd, struct img *m)
{
	for (int s = 0; s < 4; s++) {
		tjscalingfactor sf = { 1, 1 << s };
		m->fw[s] = TJSCALED(m->w, sf);
		m->fh[s] = TJSCALED(m->h, sf);
		m->full[s] = malloc((size_t)m->fw[s] * m->fh[s] * 3);
		assert_non_null(m->full[s]);
		if (tjDecompress2(tjd, m->jpg, m->len, m->full[s], m->fw[s], 0, m->fh[s], TJPF_RGB, 0))
			fail_msg("%s: %s", m->name, tjGetErrorStr2(tjd));
	}
}

/* A @w x @h image with chroma subsampling @samp (TJSAMP_*), quality 90, and its reference. */
static inline void jpeg_img_make(tjhandle tjd, struct img *m, int w, int h, int samp,
				 int progressive, uint64_t seed)
{
	tjhandle c = tjInitCompress();
	int gray = samp == TJSAMP_GRAY;
	uint8_t *px = jpeg_img_pixels(w, h, gray ? 1 : 3, seed);

	assert_non_null(c);
	snprintf(m->name, sizeof(m->name), "%dx%d samp %d%s", w, h, samp,
		 progressive ? " progressive" : "");
	m->w = w;
	m->h = h;
	m->jpg = NULL;  /* TurboJPEG allocates it (a non-NULL pointer would be reallocated) */
	if (tjCompress2(c, px, w, 0, h, gray ? TJPF_GRAY : TJPF_RGB, &m->jpg, &m->len, samp, 90,
			progressive ? TJFLAG_PROGRESSIVE : 0))
		fail_msg("%s: %s", m->name, tjGetErrorStr2(c));
	free(px);
	tjDestroy(c);
	jpeg_img_full_decode(tjd, m);
}

/* One generated image of a suite's set: jpeg_img_make's size, chroma subsampling (TJSAMP_*) and
 * progressive flag, and what the suite does with it after (@variant, the suite's own; 0: nothing). */
struct jpeg_img_spec {
	int w, h, samp, progressive;
	int variant;
};

/* The images both splice suites (test_jpeg_rst.c, test_jpeg_idx.c) begin their set with: sizes
 * that are and are not multiples of the MCU, 1x1, 4:2:0, 4:2:2, 4:4:4, 4:4:0, grey, progressive. */
#define JPEG_IMG_SET_SPLICE						\
	{ 333, 517, TJSAMP_420, 0, 0 },  { 640, 480, TJSAMP_420, 0, 0 },	\
	{ 517, 333, TJSAMP_422, 0, 0 },  { 301, 299, TJSAMP_444, 0, 0 },	\
	{ 333, 211, TJSAMP_GRAY, 0, 0 }, { 419, 287, TJSAMP_420, 1, 0 },	\
	{ 287, 419, TJSAMP_422, 1, 0 },  { 250, 190, TJSAMP_444, 1, 0 },	\
	{ 203, 177, TJSAMP_GRAY, 1, 0 }, { 277, 263, TJSAMP_440, 0, 0 },	\
	{ 17, 9, TJSAMP_420, 0, 0 },     { 1, 1, TJSAMP_420, 0, 0 },		\
	{ 1031, 97, TJSAMP_420, 0, 0 }   /* a row of 65 MCUs: 5 x 13 */
enum { JPEG_IMG_SET_SPLICE_N = 13 };

/* A suite's group setup: its TurboJPEG decompressor in *tjd, its decoder in *dec and @imgs[i]
 * made from @set[i] with seed i + 1, for i < @n. Undo with jpeg_imgs_teardown. */
static inline void jpeg_imgs_setup(tjhandle *tjd, struct cdc_decoder **dec, struct img *imgs,
				   const struct jpeg_img_spec *set, int n)
{
	*tjd = tjInitDecompress();
	assert_non_null(*tjd);
	assert_int_equal(cdc_decoder_create(dec), 0);
	for (int i = 0; i < n; i++)
		jpeg_img_make(*tjd, &imgs[i], set[i].w, set[i].h, set[i].samp, set[i].progressive,
			      (uint64_t)i + 1);
}

/* Photographs: mate-backgrounds (scripts/deps.sh installs it). 4:2:0, 4:2:2 and 4:4:4, baseline
 * and progressive, 1280 to 2560 px wide. */
#define JPEG_IMG_PHOTO_DIR "/usr/share/backgrounds/mate/"

/* The photograph @file (under JPEG_IMG_PHOTO_DIR), as shipped when @w is 0, else losslessly cut
 * to its @w x @h region at @x, @y (multiples of its MCU; @w, @h anything), with TurboJPEG's
 * lossless transform @options (TJXOPT_GRAY: its luma only; TJXOPT_PROGRESSIVE); then, when
 * @samp >= 0, decoded and compressed again with that subsampling (TJSAMP_*), quality 90; and its
 * reference. Fails the test, naming the file, where it cannot be read. */
static inline void jpeg_img_photo(tjhandle tjd, struct img *m, const char *file, int x, int y,
				  int w, int h, int options, int samp)
{
	char path[256];
	FILE *f;
	long n = 0;
	unsigned char *buf;
	int ss, cs;

	snprintf(path, sizeof(path), "%s%s", JPEG_IMG_PHOTO_DIR, file);
	f = fopen(path, "rb");
	if (!f)
		fail_msg("%s: cannot open (the photographs come from the Debian package "
			 "mate-backgrounds: run scripts/deps.sh)", path);
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET))
		fail_msg("%s: cannot size", path);
	buf = tjAlloc((int)n);
	assert_non_null(buf);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n)
		fail_msg("%s: short read", path);
	fclose(f);
	if (w == 0) {
		m->jpg = buf;
		m->len = (unsigned long)n;
	} else {
		tjhandle tx = tjInitTransform();
		tjtransform t = { .r = { x, y, w, h }, .op = TJXOP_NONE,
				  .options = TJXOPT_CROP | options };
		assert_non_null(tx);
		m->jpg = NULL;
		if (tjTransform(tx, buf, (unsigned long)n, 1, &m->jpg, &m->len, &t, 0))
			fail_msg("%s: lossless crop: %s", path, tjGetErrorStr2(tx));
		tjDestroy(tx);
		tjFree(buf);
	}
	if (tjDecompressHeader3(tjd, m->jpg, m->len, &m->w, &m->h, &ss, &cs))
		fail_msg("%s: %s", path, tjGetErrorStr2(tjd));
	if (samp >= 0) {
		tjhandle tc = tjInitCompress();
		uint8_t *px = malloc((size_t)m->w * m->h * 3);
		unsigned char *re = NULL;
		assert_non_null(tc);
		assert_non_null(px);
		if (tjDecompress2(tjd, m->jpg, m->len, px, m->w, 0, m->h, TJPF_RGB, 0))
			fail_msg("%s: %s", path, tjGetErrorStr2(tjd));
		if (tjCompress2(tc, px, m->w, 0, m->h, TJPF_RGB, &re, &m->len, samp, 90, 0))
			fail_msg("%s: re-encode: %s", path, tjGetErrorStr2(tc));
		tjFree(m->jpg);
		m->jpg = re;
		ss = samp;
		free(px);
		tjDestroy(tc);
	}
	snprintf(m->name, sizeof(m->name), "%.24s %dx%d samp %d%s", file, m->w, m->h, ss,
		 options & TJXOPT_PROGRESSIVE ? " progressive" : "");
	jpeg_img_full_decode(tjd, m);
}

static inline void jpeg_img_free(struct img *m)
{
	tjFree(m->jpg);
	for (int s = 0; s < 4; s++)
		free(m->full[s]);
}

/* Frees what jpeg_imgs_setup made. */
static inline void jpeg_imgs_teardown(tjhandle tjd, struct cdc_decoder *dec, struct img *imgs,
				      int n)
{
	for (int i = 0; i < n; i++)
		jpeg_img_free(&imgs[i]);
	cdc_decoder_destroy(dec);
	tjDestroy(tjd);
}

/* The crop's pixels of @win (at its scale) against the full decode of the original. */
static inline void jpeg_img_check_window(const struct img *m, const struct cdc_crop *c,
					 const struct cdc_window *win, const char *what)
{
	int s = __builtin_ctz(win->den);
	uint32_t x0 = c->x / win->den, y0 = c->y / win->den;
	uint32_t x1 = (c->x + c->w + win->den - 1) / win->den;
	uint32_t y1 = (c->y + c->h + win->den - 1) / win->den;

	if (x1 > (uint32_t)m->fw[s])
		x1 = (uint32_t)m->fw[s];
	if (y1 > (uint32_t)m->fh[s])
		y1 = (uint32_t)m->fh[s];
	if (x0 < win->ox || y0 < win->oy || x1 > win->ox + win->w || y1 > win->oy + win->h)
		fail_msg("%s: window %u,%u+%ux%u does not hold the crop [%u,%u)x[%u,%u)", what,
			 win->ox, win->oy, win->w, win->h, x0, x1, y0, y1);
	for (uint32_t y = y0; y < y1; y++) {
		const uint8_t *got = win->px + win->stride * (y - win->oy) + (size_t)(x0 - win->ox) * 3;
		const uint8_t *want = m->full[s] + ((size_t)y * m->fw[s] + x0) * 3;
		for (uint32_t b = 0; b < (x1 - x0) * 3; b++)
			if (got[b] != want[b])
				fail_msg("%s scale 1/%u: pixel %u,%u channel %u is %u, full decode %u",
					 what, win->den, x0 + b / 3, y, b % 3, got[b], want[b]);
	}
}

/* A splice record builder: cdc_idx_build or cdc_rst_rewrite. */
typedef int (*jpeg_img_record_fn)(const uint8_t *jpg, size_t len, unsigned px,
				  struct dpk_record *r, uint8_t **out, size_t *outlen, char *why,
				  size_t whylen);

/* @m's record from @fn at width @px (free()), *len bytes; @fn must say it is of @kind, baseline.
 * A failure names @m and @what (the builder). */
static inline uint8_t *jpeg_img_record(jpeg_img_record_fn fn, unsigned kind, const char *what,
				       const struct img *m, unsigned px, size_t *len)
{
	struct dpk_record r = { .kind = DPK_KIND_JPEG, .flags = DPK_F_PROGRESSIVE };
	uint8_t *out;
	char why[256];

	if (fn(m->jpg, m->len, px, &r, &out, len, why, sizeof(why)) != 0)
		fail_msg("%s: %s: %s", m->name, what, why);
	assert_int_equal(r.kind, kind);
	assert_int_equal(r.flags, 0);
	return out;
}

/* The record @r[0, len) of @m at width @width, fully decoded by TurboJPEG at every DCT scale,
 * equals the reference; a failure names @m, the width, the scale and @what (the record). */
static inline void jpeg_img_check_full_decode(tjhandle tjd, const struct img *m, const uint8_t *r,
					      size_t len, unsigned width, const char *what)
{
	for (int s = 0; s < 4; s++) {
		uint8_t *px = malloc((size_t)m->fw[s] * m->fh[s] * 3);
		assert_non_null(px);
		if (tjDecompress2(tjd, r, len, px, m->fw[s], 0, m->fh[s], TJPF_RGB, 0))
			fail_msg("%s: %s", m->name, tjGetErrorStr2(tjd));
		if (memcmp(px, m->full[s], (size_t)m->fw[s] * m->fh[s] * 3))
			fail_msg("%s width %u scale 1/%d: %s decodes differently", m->name, width,
				 1 << s, what);
		free(px);
	}
}

/* The mean absolute difference of @a and @b, @n bytes each. */
static inline double jpeg_img_mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	double e = 0;

	for (size_t k = 0; k < n; k++)
		e += abs(a[k] - b[k]);
	return e / n;
}

/* A copy of the record @r[0, len) (free()) with 1 to 8 bytes, drawn from @x, set to values
 * drawn from @x. */
static inline uint8_t *jpeg_img_damaged(const uint8_t *r, size_t len, uint64_t *x)
{
	uint8_t *bad = malloc(len);

	assert_non_null(bad);
	memcpy(bad, r, len);
	int n = 1 + (int)(test_xorshift(x) % 8);
	for (int k = 0; k < n; k++)
		bad[test_xorshift(x) % len] = (uint8_t)test_xorshift(x);
	return bad;
}

/* A record decoder: cdc_decode_jpeg_rst or cdc_decode_jpeg_idx. */
typedef int (*jpeg_img_decode_fn)(struct cdc_decoder *d, const uint8_t *rec, size_t len,
				  const struct cdc_crop *crop, const struct cdc_out *o,
				  uint8_t *dst, char *why, size_t whylen);

/* @fn with @dec refuses the damaged record @r[0, len), cropped to @c, with -EBADMSG and a reason
 * that begins with @prefix, holds at least 12 characters and, where @reason is not NULL, holds
 * @reason. It decodes an exact-size copy, so that ASan sees any read past the record. A failure
 * names @what. */
static inline void jpeg_img_expect_bad(jpeg_img_decode_fn fn, struct cdc_decoder *dec,
				       const uint8_t *r, size_t len, const struct cdc_crop *c,
				       const char *prefix, const char *what, const char *reason)
{
	struct cdc_out o = { .h = 32, .w = 32, .nchw = 0, .flip = 0 };
	static uint8_t out[32 * 32 * 3];
	char why[256] = "";
	uint8_t *copy = malloc(len ? len : 1);

	assert_non_null(copy);
	memcpy(copy, r, len);
	int ret = fn(dec, copy, len, c, &o, out, why, sizeof(why));
	if (ret != -EBADMSG)
		fail_msg("%s: %d, want -EBADMSG", what, ret);
	if (strncmp(why, prefix, strlen(prefix)) || strlen(why) < 12)
		fail_msg("%s: no reason (\"%s\")", what, why);
	if (reason && !strstr(why, reason))
		fail_msg("%s: \"%s\" does not say \"%s\"", what, why, reason);
	free(copy);
}

/* Move the window @c of a @W x @H image to touch edge @e: 0 left, 1 top, 2 right, 3 bottom. */
static inline void jpeg_img_snap(struct cdc_crop *c, unsigned e, uint32_t W, uint32_t H)
{
	if (e == 0)
		c->x = 0;
	else if (e == 1)
		c->y = 0;
	else if (e == 2)
		c->x = W - c->w;
	else
		c->y = H - c->h;
}

/* The output size for the crop @c that makes DCT scale 1/2^@s where the crop allows it. */
static inline void jpeg_img_out_size(const struct cdc_crop *c, unsigned s, uint32_t *oh,
				     uint32_t *ow)
{
	*oh = c->h >> s ? c->h >> s : 1;
	*ow = c->w >> s ? c->w >> s : 1;
}

/* A random window of a @W x @H image: RandomResizedCrop or any rectangle, alternately by @t, the
 * rectangle moved to touch an edge every other time (each edge in turn); an output size in *oh,
 * *ow that makes a random DCT scale where the crop allows it. */
static inline void jpeg_img_random_window(uint64_t *x, int t, uint32_t W, uint32_t H,
					  struct cdc_crop *c, uint32_t *oh, uint32_t *ow)
{
	if (t % 2) {
		cdc_crop_random(W, H, test_xorshift(x), c);
	} else {
		c->w = 1 + (uint32_t)(test_xorshift(x) % W);
		c->h = 1 + (uint32_t)(test_xorshift(x) % H);
		c->x = (uint32_t)(test_xorshift(x) % (W - c->w + 1));
		c->y = (uint32_t)(test_xorshift(x) % (H - c->h + 1));
		if (t % 4 == 2)
			jpeg_img_snap(c, (unsigned)(t / 4) % 4, W, H);
	}
	jpeg_img_out_size(c, (unsigned)(test_xorshift(x) % 4), oh, ow);
}

/* A window decoder: cdc_jpeg_window (plain JPEG), cdc_jpeg_rst_window or cdc_jpeg_idx_window. */
typedef int (*jpeg_img_window_fn)(struct cdc_decoder *d, const uint8_t *rec, size_t len,
				  const struct cdc_crop *crop, uint32_t out_h, uint32_t out_w,
				  struct cdc_window *win, char *why, size_t whylen);

/* @tries random windows (jpeg_img_random_window, from @x) of the record @r[0, len) made of @m
 * with splice width @width px, decoded by @fn with @dec: each must succeed and equal the
 * reference. The DCT scales seen are or-ed into *scales; returns how many windows were spliced
 * (narrower than the image at their scale, or not from its top). */
static inline unsigned jpeg_img_random_windows(jpeg_img_window_fn fn, struct cdc_decoder *dec,
					       const struct img *m, const uint8_t *r, size_t len,
					       unsigned width, int tries, uint64_t *x,
					       unsigned *scales)
{
	unsigned spliced = 0;

	for (int t = 0; t < tries; t++) {
		struct cdc_crop c;
		struct cdc_window win;
		char why[256], what[192];
		uint32_t oh, ow;

		jpeg_img_random_window(x, t, (uint32_t)m->w, (uint32_t)m->h, &c, &oh, &ow);
		snprintf(what, sizeof(what), "%.63s width %u crop %u,%u %ux%u", m->name, width, c.x,
			 c.y, c.w, c.h);
		int ret = fn(dec, r, len, &c, oh, ow, &win, why, sizeof(why));
		if (ret)
			fail_msg("%s: %d %s", what, ret, why);
		*scales |= win.den;
		spliced += win.w < (uint32_t)m->fw[__builtin_ctz(win.den)] || win.oy > 0;
		jpeg_img_check_window(m, &c, &win, what);
	}
	return spliced;
}

#endif
