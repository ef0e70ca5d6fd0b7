/* jpeg_idx.h - bit-indexed JPEG records (DPK_KIND_JPEG_IDX): a baseline JPEG without restart
 * markers followed by a stored index of where every K-th MCU of every MCU row starts in the
 * entropy-coded data and what the DC predictions are there (docs/FORMAT.md, "jpeg+idx"), and the
 * splice that loaderd makes of one for a crop window (1 or 3 components: DPK_KIND_JPEG_IDX; 4, CMYK
 * or YCCK: DPK_KIND_JPEG_IDX_CMYK, codec/kind_jpeg_cmyk.c): a small valid JPEG of the stored header and
 * the bits of the MCUs that cover the window plus a margin, joined at bit level, with the first DC
 * difference of each component in each joined row re-coded. No restart markers, so libjpeg-turbo
 * keeps its fast Huffman path. Pure functions over bytes; every offset in a record is checked
 * (the stored bytes are untrusted). Thread-safe. */
#ifndef LOADERD_JPEG_IDX_H
#define LOADERD_JPEG_IDX_H
#include <stddef.h>
#include <stdint.h>

#include "codec/jpeg_hdr.h"
#include "codec/jpeg_rst.h"

/* Zero bytes after a splice's EOI: libjpeg-turbo decodes an MCU on its slow Huffman path while
 * fewer than 512 bytes a block of an MCU (at most 10) are left in its buffer, so without them
 * the last few KB of every splice would take it. Decoders ignore data after EOI. */
#define CDC_IDX_SPLICE_TAIL 5120u


/* Parse the record @rec[0, len): its footer, its JPEG header up to the scan and its index's row
 * directory (the points are checked where they are read). Returns 0; -EBADMSG (with the reason
 * in @why) when any of it is damaged. */
int cdc_idx_parse(const uint8_t *rec, size_t len, struct cdc_idx_info *info, char *why,
		  size_t whylen);

/* An index point: the state before an MCU is decoded. */
struct cdc_idx_point {
	uint32_t bit;             /* bit offset from the first entropy-coded byte (stored bytes) */
	int pred[CDC_IDX_COMP_MAX]; /* each scan component's DC prediction (ncomp of them) */
};
/* Point (@r, @j) of a parsed record (@j up to geo.segs_x: the next row's first point, or after
 * the last row the final point). Returns 0, or -EBADMSG with @why when the stream is damaged or
 * the point lies outside the scan or on a stuffed byte. */
int cdc_idx_point(const uint8_t *rec, const struct cdc_idx_info *info, uint32_t r, uint32_t j,
		  struct cdc_idx_point *pt, char *why, size_t whylen);
/* An upper bound on the splice's size for @info and @plan. */
size_t cdc_idx_splice_bound(const struct cdc_idx_info *info, const struct cdc_rst_plan *plan);
/* Write the splice of @plan (from cdc_rst_plan(&info->geo, ...)) into @out (at least
 * cdc_idx_splice_bound() bytes): the header with the SOF resized, the planned MCUs of each
 * planned row joined at bit level, EOI, CDC_IDX_SPLICE_TAIL zero bytes. Returns its length (the
 * tail included), or -EBADMSG with @why when the entropy
 * data or the index is damaged as far as the plan needs. Reads only inside @rec's JPEG. */
long cdc_idx_splice(const uint8_t *rec, const struct cdc_idx_info *info,
		    const struct cdc_rst_plan *plan, uint8_t *out, char *why, size_t whylen);

#endif
