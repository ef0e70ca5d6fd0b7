/* cmyk_jpeg.c - 4-component JPEGs for the tests (see cmyk_jpeg.h). */
#include "tests/cmyk_jpeg.h"

#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h>

void cmyk_jpeg_make(const struct cmyk_spec *s, const uint8_t *px, uint8_t **out, size_t *len)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr err;
	unsigned char *mem = NULL;
	unsigned long n = 0;

	c.err = jpeg_std_error(&err);  /* errors exit: the test's own input */
	jpeg_create_compress(&c);
	jpeg_mem_dest(&c, &mem, &n);
	c.image_width = s->w;
	c.image_height = s->h;
	c.input_components = 4;
	c.in_color_space = JCS_CMYK;
	jpeg_set_defaults(&c);
	jpeg_set_colorspace(&c, s->ycck ? JCS_YCCK : JCS_CMYK);
	jpeg_set_quality(&c, 90, TRUE);
	c.write_Adobe_marker = s->adobe ? TRUE : FALSE;
	for (int i = 0; i < 4; i++) {
		c.comp_info[i].h_samp_factor = s->hv[i][0];
		c.comp_info[i].v_samp_factor = s->hv[i][1];
	}
	if (s->progressive)
		jpeg_simple_progression(&c);
	jpeg_start_compress(&c, TRUE);
	while (c.next_scanline < c.image_height) {
		JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * s->w * 4);
		jpeg_write_scanlines(&c, &row, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	*out = mem;
	*len = n;
}

uint8_t *cmyk_jpeg_pattern(uint32_t w, uint32_t h, uint64_t seed)
{
	uint8_t *p = malloc((size_t)w * h * 4 + 1);
	uint64_t x = seed * 0x9E3779B97F4A7C15ull | 1;

	if (!p)
		abort();
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t i = 0; i < w; i++)
			for (uint32_t c = 0; c < 4; c++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				unsigned v = i * (3 + c) + y * (5 - c) + ((i / 7 + y / 5) % 2) * 60 +
					     (unsigned)(x >> 59);
				p[((size_t)y * w + i) * 4 + c] = (uint8_t)(c == 3 ? 255 - (v & 127) : v);
			}
	return p;
}
