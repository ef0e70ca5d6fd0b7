/* idx_edit.h - a jpeg+idx record (codec/jpeg_idx.h) taken apart into its index fields and put
 * back together with the footer's check made anew, so that a test or a fuzz target can change any
 * one field (a point's bit offset or DC predictions, a row start, the column width, the component
 * or point count) and see that the parser refuses it or that the splice stays inside its bound.
 * The checksum of a .dpk record says only that dpack's bytes arrived, not that dpack wrote them:
 * these are the records a hostile dataset holds. */
#ifndef LOADERD_IDX_EDIT_H
#define LOADERD_IDX_EDIT_H
#include <stddef.h>
#include <stdint.h>

#define IDX_EDIT_COMP 4           /* predictions a point holds: CDC_IDX_COMP_MAX */

struct idx_edit {
	const uint8_t *jpg;       /* the record's JPEG (borrowed from the loaded record) */
	uint32_t jpeg_len, scan_at;  /* footer fields */
	uint32_t K, ncomp;        /* footer: MCUs per index column, scan components */
	uint32_t npoints;         /* footer: point count; also the points stored */
	uint32_t segs_x;          /* points per row in the stream (the rest: the final point) */
	uint32_t rows;            /* rows in the directory, the final point's included */
	uint32_t *bit;            /* npoints bit offsets from the scan's first byte */
	int32_t *pred;            /* npoints x IDX_EDIT_COMP DC predictions (ncomp of them used) */
	int32_t *dir;             /* rows entries: -1 computes the row's offset, else stored as is */
	uint32_t extra;           /* bytes of zeros appended to the last row's stream */
};

/* Parse @rec[0, len) and read every point of it into @e (heap). 0, or -1 (the record does not
 * parse). Free with idx_edit_free(). */
int idx_edit_load(const uint8_t *rec, size_t len, struct idx_edit *e);
/* The record @e describes into *out (malloc), *len bytes: the JPEG, the row directory, the point
 * stream (each row's first point absolute, the others as differences), the footer. 0 or -1. */
int idx_edit_store(const struct idx_edit *e, uint8_t **out, size_t *len);
void idx_edit_free(struct idx_edit *e);

#endif
