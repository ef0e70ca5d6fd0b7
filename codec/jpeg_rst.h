/* jpeg_rst.h - restart-indexed JPEG records (DPK_KIND_JPEG_RST): the lossless rewrite that dpack
 * makes of a JPEG with --restart-width (before jpeg+idx, codec/jpeg_idx.h, it was the default)
 * (baseline, one interleaved scan, optimised Huffman tables, a restart marker
 * every few MCUs so that every MCU row starts a segment), and the splice that loaderd makes of one
 * for a crop window: a small valid JPEG of the stored header and only the restart segments that
 * cover the window plus a margin, so that only those are entropy-decoded. Pure functions over
 * bytes; the stored bytes are untrusted (a checksum says they are what dpack wrote, not that dpack
 * wrote them), so every offset is checked. Thread-safe. */
#ifndef LOADERD_JPEG_RST_H
#define LOADERD_JPEG_RST_H
#include <stddef.h>
#include <stdint.h>

#include "formats/dpk.h"

/* The restart geometry of a record, from its markers up to the scan. */
struct cdc_rst_info {
	uint32_t width, height;     /* pixels, from SOF */
	uint32_t mcu_w, mcu_h;      /* MCU size in pixels: 8 x max sampling factor (8 x 8 for grey) */
	uint32_t mcus_x, mcus_y;    /* MCU columns and rows */
	uint32_t interval;          /* MCUs per restart segment (DRI); divides mcus_x */
	uint32_t segs_x;            /* segments per MCU row = mcus_x / interval */
	size_t sof_at;              /* offset of the SOF's height field (Y, X follow: 4 bytes) */
	size_t scan_at;             /* offset of the first entropy-coded byte (after SOS) */
	unsigned hmax, vmax;        /* the largest sampling factors */
};

/* What of a record a window needs: segments [seg_x0, seg_x1) of MCU rows [row0, row1). */
struct cdc_rst_plan {
	uint32_t row0, row1;
	uint32_t seg_x0, seg_x1;
	uint32_t x, y;              /* the splice's top-left in the record's pixels (MCU-aligned) */
	uint32_t w, h;              /* the splice's size in pixels */
	int whole;                  /* the plan is the whole record: decode it as stored */
};

/* The marker segment of a JPEG header that starts at *pos (after SOI, fill bytes allowed): its
 * marker *m, payload @*p of *n bytes; *pos moves past it. 0, or -EBADMSG with @why when the
 * header ends, a marker that has no place in a header comes (SOI, EOI, RST, TEM), or the
 * segment runs past @len. Shared by the jpeg+rst and jpeg+idx parsers. */
int cdc_jpeg_segment(const uint8_t *jpg, size_t len, size_t *pos, unsigned *m, const uint8_t **p,
		     size_t *n, char *why, size_t whylen);
/* Fill in @g's MCU size and counts from its width, height and largest sampling factors (a
 * one-component scan is not interleaved: its MCU is one block). */
void cdc_jpeg_geometry(struct cdc_rst_info *g, unsigned ncomp);

/* Parse the record @jpg[0, len) up to its scan. Returns 0; -ENOTSUP for a JPEG that is not
 * spliceable (progressive or arithmetic, several scans, no DRI, a restart interval that does not
 * divide the MCU row); -EBADMSG for a malformed header. @why gets the reason. */
int cdc_rst_parse(const uint8_t *jpg, size_t len, struct cdc_rst_info *info, char *why,
		  size_t whylen);
/* Plan the splice for the source window (x, y, w, h) (inside the image): its MCU rows and
 * segment columns, widened by one MCU on each side where the image is chroma-subsampled in that
 * direction, so that fancy upsampling inside the window sees the same neighbours as in a full
 * decode. */
void cdc_rst_plan(const struct cdc_rst_info *info, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
		  struct cdc_rst_plan *plan);
/* An upper bound on the splice's size for a record of @len bytes. */
size_t cdc_rst_splice_bound(size_t len);
/* Write the splice of @plan into @out (at least cdc_rst_splice_bound() bytes): the header with
 * the SOF resized, the planned segments with their restart markers renumbered, EOI. Returns its
 * length, or -EBADMSG with @why when the entropy data is not a sequence of correctly numbered
 * restart segments as far as the plan needs. Reads only inside @jpg[0, len). */
long cdc_rst_splice(const uint8_t *jpg, size_t len, const struct cdc_rst_info *info,
		    const struct cdc_rst_plan *plan, uint8_t *out, char *why, size_t whylen);

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

#endif
