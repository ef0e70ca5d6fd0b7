/* fuzz_jpeg_fields.h - what the structure-aware JPEG fuzz targets (fuzz_idx_fields.c,
 * fuzz_rst_fields.c) share: a few valid JPEGs made once by TurboJPEG (every chroma subsampling,
 * sizes on and off the MCU grid, two with 4 components), a reader of the input's mutation bytes, and the check that
 * runs on every mutated record: every splice plan of a set stays inside its bound (an exact-size
 * buffer, so ASan sees any byte past it) and every window decodes or is refused with -EBADMSG.
 * Header-only: each target is one binary. */
#ifndef LOADERD_FUZZ_JPEG_FIELDS_H
#define LOADERD_FUZZ_JPEG_FIELDS_H
#include "codec/decode.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

enum { FUZZ_NJPEG = 7 };

struct fuzz_jpeg {
	unsigned char *jpg;
	unsigned long len;
	int w, h;
	int cmyk;           /* 4 components (TurboJPEG writes YCCK, K at luma's sampling) */
};

/* The JPEGs: made on the first call, kept for the process. */
static inline const struct fuzz_jpeg *fuzz_jpegs(void)
{
	static struct fuzz_jpeg set[FUZZ_NJPEG];
	static const struct { int w, h, samp, cmyk; } shape[FUZZ_NJPEG] = {
		{ 96, 64, TJSAMP_420, 0 }, { 67, 45, TJSAMP_422, 0 }, { 40, 72, TJSAMP_444, 0 },
		{ 50, 33, TJSAMP_GRAY, 0 }, { 48, 170, TJSAMP_420, 0 },
		{ 56, 40, TJSAMP_420, 1 }, { 33, 47, TJSAMP_444, 1 },
	};

	if (set[0].jpg)
		return set;
	tjhandle tj = tjInitCompress();
	if (!tj)
		abort();
	for (int i = 0; i < FUZZ_NJPEG; i++) {
		int w = shape[i].w, h = shape[i].h, nc = shape[i].cmyk ? 4 : 3;
		unsigned char *px = malloc((size_t)w * h * 4);
		if (!px)
			abort();
		for (int y = 0; y < h; y++)
			for (int x = 0; x < w; x++)
				for (int c = 0; c < nc; c++)
					px[((size_t)y * w + x) * nc + c] =
						(unsigned char)((x * (7 + c) + y * (3 + 2 * c) +
								 ((x / 5 + y / 3) % 2) * 90) & 0xFF);
		if (tjCompress2(tj, px, w, 0, h, shape[i].cmyk ? TJPF_CMYK : TJPF_RGB, &set[i].jpg,
				&set[i].len, shape[i].samp, 85, 0))
			abort();
		set[i].cmyk = shape[i].cmyk;
		set[i].w = w;
		set[i].h = h;
		free(px);
	}
	tjDestroy(tj);
	return set;
}

/* The mutation bytes of an input, read front to back; zeros past the end. */
struct fuzz_in {
	const uint8_t *p, *end;
};

static inline uint32_t fuzz_take(struct fuzz_in *in, unsigned bytes)
{
	uint32_t v = 0;

	for (unsigned i = 0; i < bytes; i++)
		v = v << 8 | (in->p < in->end ? *in->p++ : 0);
	return v;
}

static inline int fuzz_more(const struct fuzz_in *in)
{
	return in->p < in->end;
}

typedef int (*fuzz_decode_fn)(struct cdc_decoder *d, const uint8_t *rec, size_t len,
			      const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst,
			      char *why, size_t whylen);

/* Decode windows of @rec[0, len) (an exact-size copy: ASan sees reads past it) for an image of
 * about @w x @h: the whole, a corner, the middle, one pixel, one drawn by @sel. Each must
 * succeed or fail with -EBADMSG and a reason; anything else aborts. */
static inline void fuzz_decode_windows(fuzz_decode_fn fn, const uint8_t *rec, size_t len, int w,
				       int h, uint32_t sel)
{
	static struct cdc_decoder *dec;
	static uint8_t px[24 * 24 * 3];
	uint32_t W = (uint32_t)w, H = (uint32_t)h;
	const struct cdc_crop win[5] = {
		{ 0, 0, W, H }, { 0, 0, (W + 1) / 2, (H + 1) / 2 }, { W / 3, H / 3, W / 3 + 1, H / 3 + 1 },
		{ W - 1, H - 1, 1, 1 }, { sel % W, (sel >> 8) % H, 1 + (sel >> 16) % W, 1 + (sel >> 24) % H },
	};

	if (!dec) {
		if (cdc_decoder_create(&dec))
			abort();
		cdc_decoder_limit(dec, 1u << 22);
	}
	uint8_t *copy = malloc(len ? len : 1);
	if (!copy)
		return;
	memcpy(copy, rec, len);
	for (int k = 0; k < 5; k++) {
		struct cdc_out o = { .h = 24, .w = 24, .nchw = k & 1, .flip = k == 2 };
		char why[256] = "";
		int ret = fn(dec, copy, len, &win[k], &o, px, why, sizeof(why));
		if (ret != 0 && (ret != -EBADMSG || strlen(why) < 8))
			abort();
	}
	free(copy);
}

#endif
