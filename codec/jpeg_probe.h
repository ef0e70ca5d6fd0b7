/* jpeg_probe.h - parse a JPEG's markers up to its first scan: dimensions, components, chroma
 * subsampling, progressive or not; and check that the scan data is not truncated. Used by dpack at
 * pack time so that the loader can plan crops from the index without touching the file. */
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

/* Probe the JPEG in @buf[0, len). Returns 0, -EBADMSG when it is not a JPEG or is truncated or
 * malformed, -ENOTSUP for a JPEG that the decoder path does not take (lossless, hierarchical,
 * 12-bit, CMYK, DNL height). @err (may be NULL) gets the reason. Reads only inside @buf. */
int cdc_jpeg_probe(const void *buf, size_t len, struct cdc_jpeg_info *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
