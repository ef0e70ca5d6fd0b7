/* cmyk_jpeg.h - 4-component JPEGs for the tests, written with libjpeg itself so that every
 * variant the jpeg+cmyk kinds meet can be made: CMYK or YCCK, with or without the Adobe marker,
 * any sampling factors (PIL's CMYK 4:2:0 subsamples C and leaves M, Y and K whole, which
 * TurboJPEG's API cannot name), baseline or progressive. */
#ifndef LOADERD_CMYK_JPEG_H
#define LOADERD_CMYK_JPEG_H
#include <stddef.h>
#include <stdint.h>

struct cmyk_spec {
	const char *name;
	uint32_t w, h;
	int ycck;            /* stored as YCCK (else CMYK) */
	int adobe;           /* write the APP14 Adobe marker (YCCK needs it to be read as YCCK) */
	int progressive;
	uint8_t hv[4][2];    /* each component's sampling factors (h, v) */
};

/* @px (w x h x 4, CMYK as stored) compressed as @s says, quality 90, into *out (free()),
 * *len bytes. Aborts on a libjpeg error (a test's own input). */
void cmyk_jpeg_make(const struct cmyk_spec *s, const uint8_t *px, uint8_t **out, size_t *len);
/* A w x h x 4 test pattern (gradients, edges and noise) from @seed (free()). */
uint8_t *cmyk_jpeg_pattern(uint32_t w, uint32_t h, uint64_t seed);

#endif
