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

#include "codec/jpeg_hdr.h"

/* What of a record a window needs: segments [seg_x0, seg_x1) of MCU rows [row0, row1). */
struct cdc_rst_plan {
	uint32_t row0, row1;
	uint32_t seg_x0, seg_x1;
	uint32_t x, y;              /* the splice's top-left in the record's pixels (MCU-aligned) */
	uint32_t w, h;              /* the splice's size in pixels */
	int whole;                  /* the plan is the whole record: decode it as stored */
};

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

#endif
