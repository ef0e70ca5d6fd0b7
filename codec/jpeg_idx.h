/* jpeg_idx.h - bit-indexed JPEG records (DPK_KIND_JPEG_IDX): a baseline JPEG without restart
 * markers followed by a stored index of where every K-th MCU of every MCU row starts in the
 * entropy-coded data and what the DC predictions are there (docs/FORMAT.md, "jpeg+idx"), and the
 * splice that loaderd makes of one for a crop window: a small valid JPEG of the stored header and
 * the bits of the MCUs that cover the window plus a margin, joined at bit level, with the first DC
 * difference of each component in each joined row re-coded. No restart markers, so libjpeg-turbo
 * keeps its fast Huffman path. Pure functions over bytes; every offset in a record is checked
 * (the stored bytes are untrusted). Thread-safe. */
#ifndef LOADERD_JPEG_IDX_H
#define LOADERD_JPEG_IDX_H
#include <stddef.h>
#include <stdint.h>

#include "formats/dpk.h"
#include "codec/jpeg_rst.h"

/* Index column width that dpack aims for, in pixels (measured: docs/BENCHMARKS.md). */
#define CDC_IDX_WIDTH_DEFAULT 64u

#define CDC_IDX_FOOTER 32u        /* bytes of the footer at the end of a record */
#define CDC_IDX_VERSION 1u
/* Zero bytes after a splice's EOI: libjpeg-turbo decodes an MCU on its slow Huffman path while
 * fewer than 512 bytes a block of an MCU (at most 10) are left in its buffer, so without them
 * the last few KB of every splice would take it. Decoders ignore data after EOI. */
#define CDC_IDX_SPLICE_TAIL 5120u

/* One Huffman table: the decoder's lookahead and canonical limits, and the encoder's codes. */
#define CDC_IDX_LOOK 9
#define CDC_IDX_ACFAST 12
struct cdc_huff {
	uint16_t look[1u << CDC_IDX_LOOK]; /* (code length << 8) | symbol; 0: a longer code */
	int32_t maxcode[18];      /* the largest code of each length, -1 if none */
	int32_t valoff[18];       /* index into vals of a code of each length, minus the code */
	uint8_t vals[256];
	uint16_t ehufco[256];     /* the code of each symbol ... */
	uint8_t ehufsi[256];      /* ... and its length; 0: the table has no code for it */
	int defined;
	/* AC tables, built for dpack's index pass only: a code and its extra bits in one step where
	 * both fit CDC_IDX_ACFAST bits: bits 0-4 the bits they take, bits 5-9 how far the
	 * coefficient index moves (0: end of block); 0: take the long way */
	uint16_t acfast[1u << CDC_IDX_ACFAST];
};

/* A parsed jpeg+idx record (or, at pack time, a JPEG being indexed). */
struct cdc_idx_info {
	struct cdc_rst_info geo;  /* size, MCU geometry, sof_at, scan_at; interval = K (MCUs per
				   * index column), segs_x = index columns per MCU row */
	unsigned ncomp;           /* components in the scan: 1 or 3 */
	unsigned nblocks[3];      /* blocks of each scan component in an MCU */
	const struct cdc_huff *dc[3], *ac[3]; /* each scan component's tables (into huff[]) */
	struct cdc_huff huff[8];  /* DC 0..3, AC 0..3 */
	size_t jpeg_len;          /* bytes of the JPEG, SOI to EOI */
	size_t eoi_at;            /* offset of the EOI marker that ends the scan (records) */
	const uint8_t *rows;      /* records: the row directory (mcus_y + 1 u32) ... */
	const uint8_t *stream;    /* ... and the point stream it indexes */
	uint32_t stream_len;
	uint32_t npoints;         /* geo.mcus_y * geo.segs_x + 1 */
	unsigned entry_size;      /* the index pass's fixed-size entries: 4 + 2 * ncomp */
	int fast;                 /* build the acfast tables (the index pass) */
};

/* Parse the record @rec[0, len): its footer, its JPEG header up to the scan and its index's row
 * directory (the points are checked where they are read). Returns 0; -EBADMSG (with the reason
 * in @why) when any of it is damaged. */
int cdc_idx_parse(const uint8_t *rec, size_t len, struct cdc_idx_info *info, char *why,
		  size_t whylen);

/* An index point: the state before an MCU is decoded. */
struct cdc_idx_point {
	uint32_t bit;             /* bit offset from the first entropy-coded byte (stored bytes) */
	int pred[3];              /* each scan component's DC prediction */
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

/* dpack's conversion: JPEG @jpg[0, len) (probed into @r) as a jpeg+idx record, index columns of
 * about @col_px pixels (0: one per MCU row). A JPEG that is baseline Huffman, 8-bit, one
 * interleaved scan of 1 or 3 components, no restart interval, with complete DC tables is kept
 * byte for byte up to its EOI; any other is first transcoded losslessly (standard tables).
 * On success *out (free()) holds *outlen bytes and @r's kind and flags say what it became
 * (DPK_KIND_JPEG_IDX; DPK_KIND_JPEG, the bytes as they are, for a JPEG the index cannot describe,
 * e.g. CMYK). Returns 0, -EBADMSG (with @why: the data is corrupt) or -ENOMEM. */
int cdc_idx_build(const uint8_t *jpg, size_t len, unsigned col_px, struct dpk_record *r,
		  uint8_t **out, size_t *outlen, char *why, size_t whylen);

#endif
