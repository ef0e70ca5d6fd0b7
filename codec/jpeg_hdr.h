/* jpeg_hdr.h - what the codec's pack side and load side share about a JPEG: the marker walker
 * (codec/jpeg_probe.h: every parser of JPEG headers in the tree walks with cdc_jpeg_segment), the
 * MCU geometry, the Huffman tables, and the header parse that dpack's index pass and loaderd's
 * jpeg+idx parser both run. Pure functions over bytes; every
 * offset is checked (the stored bytes are untrusted). Thread-safe. */
#ifndef LOADERD_JPEG_HDR_H
#define LOADERD_JPEG_HDR_H
#include <stddef.h>
#include <stdint.h>

#include "codec/jpeg_probe.h"

/* A JPEG's geometry, from its markers up to the scan (the restart geometry of a jpeg+rst record;
 * jpeg+idx uses interval and segs_x for its index columns). */
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

/* Fill in @g's MCU size and counts from its width, height and largest sampling factors (a
 * one-component scan is not interleaved: its MCU is one block). */
void cdc_jpeg_geometry(struct cdc_rst_info *g, unsigned ncomp);

#define CDC_IDX_FOOTER 32u        /* bytes of the footer at the end of a jpeg+idx record */
#define CDC_IDX_COMP_MAX 4u       /* scan components an index describes: 1, 3 or 4 (CMYK, YCCK) */
#define CDC_IDX_VERSION 1u

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
	unsigned ncomp;           /* components in the scan: 1, 3 or 4 */
	unsigned nblocks[CDC_IDX_COMP_MAX]; /* blocks of each scan component in an MCU */
	/* each scan component's tables (into huff[]) */
	const struct cdc_huff *dc[CDC_IDX_COMP_MAX], *ac[CDC_IDX_COMP_MAX];
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

/* Parse @jpg[0, len) up to its scan into @info (tables, with the index pass's acfast ones when
 * @fast; geometry). 0; -ENOTSUP: a JPEG the index cannot describe as it is (progressive,
 * arithmetic, restart interval, ...); -EBADMSG: damaged. The reason in @why. */
int cdc_idx_header(const uint8_t *jpg, size_t len, int fast, struct cdc_idx_info *info, char *why,
		   size_t whylen);

#endif
