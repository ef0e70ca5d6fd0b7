/* jpeg_build.h - what dpack does to a JPEG (the pack side of the codec): the jpeg+idx index pass
 * (codec/jpeg_idx_build.c), the jpeg+rst restart rewrite and the lossless transcode under both
 * (codec/jpeg_rst_build.c). What loaderd does with the records they make is in codec/jpeg_idx.h
 * and codec/jpeg_rst.h; what both sides share in codec/jpeg_hdr.h. Thread-safe. */
#ifndef LOADERD_JPEG_BUILD_H
#define LOADERD_JPEG_BUILD_H
#include <stddef.h>
#include <stdint.h>

#include "formats/dpk.h"

/* Index column width that dpack aims for, in pixels (measured: docs/BENCHMARKS.md). */
#define CDC_IDX_WIDTH_DEFAULT 64u

/* dpack's conversion: JPEG @jpg[0, len) (probed into @r) as a jpeg+idx record, index columns of
 * about @col_px pixels (0: one per MCU row). A JPEG that is baseline Huffman, 8-bit, one
 * interleaved scan of 1, 3 or 4 components, no restart interval, with complete DC tables is kept
 * byte for byte up to its EOI; any other is first transcoded losslessly (standard tables).
 * On success *out (free()) holds *outlen bytes and @r's kind and flags say what it became
 * (DPK_KIND_JPEG_IDX; DPK_KIND_JPEG_IDX_CMYK for 4 components, CMYK or YCCK; @r's kind
 * unchanged, the bytes as they are, for a JPEG the index cannot describe even transcoded).
 * Returns 0, -EBADMSG (with @why: the data is corrupt) or -ENOMEM. */
int cdc_idx_build(const uint8_t *jpg, size_t len, unsigned col_px, struct dpk_record *r,
		  uint8_t **out, size_t *outlen, char *why, size_t whylen);

/* Restart segment width that dpack aims for, in pixels (measured: docs/BENCHMARKS.md). */
#define CDC_RST_WIDTH_DEFAULT 64u

/* dpack's rewrite: JPEG @jpg[0, len) (already probed into @r) re-entropy-coded losslessly as a
 * baseline JPEG with optimised Huffman tables and restart segments of the largest divisor of the
 * MCU row that is at most @seg_px pixels wide (0: one segment per MCU row). On success *out
 * (free()) holds *outlen bytes and @r's kind and flags say DPK_KIND_JPEG_RST, baseline. Returns
 * 0, -EBADMSG (libjpeg's message in @why: the data is corrupt) or -ENOMEM. */
int cdc_rst_rewrite(const uint8_t *jpg, size_t len, unsigned seg_px, struct dpk_record *r,
		    uint8_t **out, size_t *outlen, char *why, size_t whylen);

/* The lossless transcode under both rewrites: JPEG @jpg[0, len) re-entropy-coded as one baseline
 * scan (the same DCT coefficients), with optimised Huffman tables when @optimize (else libjpeg's
 * standard ones), restart segments as cdc_rst_rewrite() for @seg_px >= 0, none for -1. Returns 0
 * with *out (free()), *outlen bytes; -EBADMSG (libjpeg's message in @why) or -ENOMEM. */
int cdc_jpeg_transcode(const uint8_t *jpg, size_t len, int optimize, long seg_px, uint8_t **out,
		       size_t *outlen, char *why, size_t whylen);

/* The DCT coefficients of a transcode, lent to cdc_jpeg_transcode_coefs()'s callback. */
#define CDC_COEFS_MAX 4
struct cdc_coefs {
	unsigned ncomp;                 /* components, in the scan's order: 1..CDC_COEFS_MAX */
	uint32_t wblocks[CDC_COEFS_MAX], hblocks[CDC_COEFS_MAX]; /* each one's blocks (no padding) */
	unsigned h[CDC_COEFS_MAX], v[CDC_COEFS_MAX];             /* each one's sampling factors */
	/* Block row @brow (< hblocks[ci]) of component @ci: wblocks[ci] blocks of 64 quantized
	 * coefficients in natural (not zigzag) order; valid until the next call */
	const int16_t *(*row)(const struct cdc_coefs *c, unsigned ci, uint32_t brow);
	void *priv;                     /* the transcode's */
};

/* cdc_jpeg_transcode(@jpg, @len, standard tables, no restarts) that also calls @fn(@arg, the
 * output, its length, its coefficients) before it frees the coefficients, so that the caller can
 * read them instead of decoding what was just encoded. Returns 0 with *out (free()), *outlen
 * bytes; @fn's negative return (*out freed); -EBADMSG (libjpeg's message in @why) or -ENOMEM. */
int cdc_jpeg_transcode_coefs(const uint8_t *jpg, size_t len, uint8_t **out, size_t *outlen,
			     int (*fn)(void *arg, const uint8_t *out, size_t outlen,
				       const struct cdc_coefs *c),
			     void *arg, char *why, size_t whylen);

#endif
