/* jpeg_probe.h - the JPEG marker walker that every header parser of the codec uses
 * (cdc_jpeg_segment: the probe below, the jpeg+rst and jpeg+idx parsers), and the pack-time
 * probe over it: dimensions, components, chroma subsampling, progressive or not, and a check that
 * the scan data is not truncated. dpack probes at pack time so that the loader can plan crops from
 * the index without touching the file. Pure functions over bytes; thread-safe. */
#ifndef LOADERD_JPEG_PROBE_H
#define LOADERD_JPEG_PROBE_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

struct cdc_jpeg_info {
	uint32_t width;       /* pixels, 1..65535 */
	uint32_t height;
	uint8_t components;   /* 1 (gray) or 3 (YCbCr) */
	uint8_t subsamp;      /* enum dpk_subsamp */
	uint8_t progressive;  /* 1 for SOF2/SOF10 */
};

/* One marker of a JPEG's header. */
struct cdc_jpeg_seg {
	unsigned m;                 /* the marker's second byte (0xC0: SOF0, 0xDA: SOS, ...) */
	const uint8_t *p;           /* its payload, n bytes; NULL for a standalone marker */
	size_t n;
};

/* The marker at *pos of the JPEG @jpg[0, len) (after SOI; fill bytes skipped) into @s; *pos moves
 * past it. A standalone marker (TEM, RSTn, SOI, EOI) has no payload: the caller decides whether
 * it may stand there. 0, or -EBADMSG with the reason in @why (may be NULL) when the data ends, no
 * marker stands at *pos, or a segment runs past @len. */
int cdc_jpeg_segment(const uint8_t *jpg, size_t len, size_t *pos, struct cdc_jpeg_seg *s,
		     char *why, size_t whylen);
/* The header walk of the jpeg+rst and jpeg+idx parsers: the next marker segment of @jpg[0, len)
 * into @s. *pos is 0 on the first call, which checks the SOI and starts after it. 0, or -EBADMSG
 * with the reason in @why: no SOI ("not a JPEG (no SOI)"), cdc_jpeg_segment's errors, and a
 * standalone marker ("unexpected marker in the header"), which a header they take has none of. */
int cdc_jpeg_header_seg(const uint8_t *jpg, size_t len, size_t *pos, struct cdc_jpeg_seg *s,
			char *why, size_t whylen);
/* Probe the JPEG in @buf[0, len). Returns 0, -EBADMSG when it is not a JPEG or is truncated or
 * malformed, -ENOTSUP for a JPEG that the decoder path does not take (lossless, hierarchical,
 * 12-bit, CMYK, DNL height). @err (may be NULL) gets the reason. Reads only inside @buf. */
int cdc_jpeg_probe(const void *buf, size_t len, struct cdc_jpeg_info *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
