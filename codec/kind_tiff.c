/* kind_tiff.c - TIFF records (DPK_KIND_TIFF): the file as it was, decoded with libtiff to the RGB
 * that PIL's convert("RGB") gives for the TIFFs photographs come as: 8-bit samples, one image
 * plane (contiguous), in strips, grey (1 or 2 samples; min-is-white inverted, as PIL's "L;I") or
 * RGB (3 or 4 samples; a 4th, alpha or not, dropped), any compression libtiff reads but JPEG's
 * YCbCr. Only the first image of a multi-page file, as PIL opens it; the orientation tag is not
 * applied (PIL does not either). Refused at pack time (-ENOTSUP): tiles, planar files, other bit
 * depths, palette, CMYK, YCbCr, Lab: PIL converts those with its own rules (16-bit grey clips,
 * 16-bit colormaps are cut to 8 bits otherwise than libtiff does) that this kind does not copy.
 * Scanlines are decoded down to the crop's bottom only. */
#include "codec/kind_image.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>

struct tif_src {
	const uint8_t *p;
	size_t len, off;
};

static tmsize_t mem_read(thandle_t h, void *buf, tmsize_t n)
{
	struct tif_src *s = h;
	size_t left = s->off < s->len ? s->len - s->off : 0;
	size_t k = (size_t)n < left ? (size_t)n : left;

	memcpy(buf, s->p + s->off, k);
	s->off += k;
	return (tmsize_t)k;
}

static tmsize_t mem_write(thandle_t h, void *buf, tmsize_t n)
{
	(void)h, (void)buf, (void)n;
	return -1;
}

static toff_t mem_seek(thandle_t h, toff_t off, int whence)
{
	struct tif_src *s = h;
	uint64_t base = whence == SEEK_CUR ? s->off : whence == SEEK_END ? s->len : 0;

	if (off > UINT64_MAX - base)
		return (toff_t)-1;
	s->off = (size_t)(base + off);  /* past the end: reads return 0 bytes */
	return s->off;
}

static int mem_close(thandle_t h)
{
	(void)h;
	return 0;
}

static toff_t mem_size(thandle_t h)
{
	return ((struct tif_src *)h)->len;
}

/* libtiff reports through process-wide handlers: silenced once (the reason comes from the call;
 * nothing may print from a worker thread). */
static void quiet(const char *module, const char *fmt, va_list ap)
{
	(void)module, (void)fmt, (void)ap;
}

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static void quiet_init(void)
{
	TIFFSetErrorHandler(quiet);
	TIFFSetWarningHandler(quiet);
}

struct tif_info {
	uint32_t w, h;
	uint16_t spp, photometric;
};

/* Open @buf and check it is a TIFF this kind takes. Returns the handle, or NULL with the error
 * in *ret (-EBADMSG or -ENOTSUP) and @why. */
static TIFF *tif_open(struct tif_src *s, struct tif_info *ti, int *ret, char *why, size_t whylen)
{
	uint16_t bps = 0, planar = PLANARCONFIG_CONTIG;

	pthread_once(&quiet_once, quiet_init);
	TIFF *t = TIFFClientOpen("record", "rm", s, mem_read, mem_write, mem_seek, mem_close,
				 mem_size, NULL, NULL);
	*ret = -EBADMSG;
	if (!t) {
		snprintf(why, whylen, "TIFF header or first directory unreadable");
		return NULL;
	}
	ti->w = ti->h = 0;
	ti->spp = 0;
	TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &ti->w);
	TIFFGetField(t, TIFFTAG_IMAGELENGTH, &ti->h);
	TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &bps);
	TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &ti->spp);
	TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar);
	if (!TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &ti->photometric))
		ti->photometric = 0xFFFF;
	if (ti->w == 0 || ti->w > 65535 || ti->h == 0 || ti->h > 65535) {
		snprintf(why, whylen, "TIFF %s %u (1..65535)", ti->w == 0 || ti->w > 65535 ?
			 "width" : "height", ti->w == 0 || ti->w > 65535 ? ti->w : ti->h);
		TIFFClose(t);
		return NULL;
	}
	*ret = -ENOTSUP;
	int grey = ti->photometric == PHOTOMETRIC_MINISBLACK ||
		   ti->photometric == PHOTOMETRIC_MINISWHITE;
	if (TIFFIsTiled(t))
		snprintf(why, whylen, "tiled TIFF (only strips)");
	else if (bps != 8)
		snprintf(why, whylen, "TIFF at %u bits a sample (only 8)", bps);
	else if (planar != PLANARCONFIG_CONTIG && ti->spp > 1)
		snprintf(why, whylen, "planar TIFF (only contiguous samples)");
	else if (!(grey && (ti->spp == 1 || ti->spp == 2)) &&
		 !(ti->photometric == PHOTOMETRIC_RGB && (ti->spp == 3 || ti->spp == 4)))
		snprintf(why, whylen, "TIFF photometric %u with %u samples (only grey or RGB)",
			 ti->photometric, ti->spp);
	else if (TIFFScanlineSize(t) != (tmsize_t)ti->w * ti->spp)
		snprintf(why, whylen, "TIFF scanline of %lld bytes for %u pixels",
			 (long long)TIFFScanlineSize(t), ti->w);
	else
		return *ret = 0, t;
	TIFFClose(t);
	return NULL;
}

static int tiff_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	struct tif_src s = { buf, len, 0 };
	struct tif_info ti;
	int ret;

	if (len < 4 || (memcmp(buf, "II*\0", 4) != 0 && memcmp(buf, "MM\0*", 4) != 0))
		return -ENOMSG;
	TIFF *t = tif_open(&s, &ti, &ret, why, whylen);
	if (!t)
		return ret;
	TIFFClose(t);
	return cdc_image_record(DPK_KIND_TIFF, ti.w, ti.h, r, why, whylen);
}

static int tiff_pixels(const uint8_t *src, size_t len, uint32_t w, uint32_t h, uint32_t rows,
		       uint8_t *rgb, char *why, size_t whylen)
{
	struct tif_src s = { src, len, 0 };
	struct tif_info ti;
	uint8_t *line = NULL;
	int ret;
	TIFF *t = tif_open(&s, &ti, &ret, why, whylen);

	if (!t)
		return -EBADMSG;
	ret = -EBADMSG;
	if (ti.w != w || ti.h != h) {
		snprintf(why, whylen, "TIFF is %u x %u, the index says %u x %u", ti.w, ti.h, w, h);
		goto out;
	}
	/* One scanline buffer a record: libtiff allocates its own strip buffers at open anyway. */
	line = malloc((size_t)w * ti.spp);
	if (!line) {
		snprintf(why, whylen, "out of memory for a %u-pixel scanline", w);
		ret = -ENOMEM;
		goto out;
	}
	uint8_t inv = ti.photometric == PHOTOMETRIC_MINISWHITE ? 0xFF : 0;
	for (uint32_t y = 0; y < rows; y++) {
		uint8_t *o = rgb + (size_t)y * w * 3;
		if (TIFFReadScanline(t, line, y, 0) < 0) {
			snprintf(why, whylen, "TIFF data damaged or cut short at row %u", y);
			goto out;
		}
		for (uint32_t x = 0; x < w; x++) {
			const uint8_t *p = line + (size_t)x * ti.spp;
			if (ti.spp <= 2)
				o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = p[0] ^ inv;
			else
				o[3 * x] = p[0], o[3 * x + 1] = p[1], o[3 * x + 2] = p[2];
		}
	}
	ret = 0;
out:
	free(line);
	TIFFClose(t);
	return ret;
}

static int tiff_decode(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		       const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		       size_t whylen)
{
	return cdc_image_decode(tiff_pixels, d, e, src, crop, o, dst, why, whylen);
}

static int tiff_repack(const uint8_t *buf, size_t len, const struct cdc_repack_opts *opt,
		       struct dpk_record *r, uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	(void)opt;
	return cdc_image_check(tiff_pixels, buf, len, r, out, outlen, why, whylen);
}

static const char *const tiff_exts[] = { ".tif", ".tiff", NULL };

const struct cdc_kind_pack cdc_tiff_pack = {
	.exts = tiff_exts,
	.probe = tiff_probe,
	.repack = tiff_repack,
};

const struct cdc_kind_load cdc_tiff_load = {
	.accepts = cdc_image_accepts,
	.decode = tiff_decode,
};
