/* test_kind_image.c - the record kinds of image files decoded whole (codec/kind_image.h): each
 * file is made here by its format's own encoder (libpng, libwebp, TurboJPEG) or byte by byte
 * (Netpbm, BMP), and decoded "as stored" to exactly the RGB PIL's convert("RGB") gives, by PIL's
 * rules written out independently here (16-bit samples keep their high byte, 16-bit grey clips at
 * 255, palettes and tRNS, CMYK inverted as Adobe writes it); a crop equals the same crop of that
 * reference through cdc_decode_raw; 1x1, odd sizes and interlacing; the decoder's pixel bound at
 * exactly the image and one pixel below; a file that is not what the index says is -EBADMSG.
 * (tests/it_imagefolder.sh compares with PIL itself.) */
#include "formats/dpk.h"
#include "codec/decode.h"
#include "codec/kind.h"
#include "codec/kind_load.h"
#include "codec/kind_pack.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <webp/decode.h>
#include <webp/encode.h>
#include <cmocka.h>

static uint8_t *noise(size_t n, uint64_t seed)
{
	uint8_t *p = malloc(n ? n : 1);
	uint64_t x = seed * 0x9E3779B97F4A7C15ull | 1;

	assert_non_null(p);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		p[i] = (uint8_t)(x >> 24);
	}
	return p;
}

/* Probe, check (dpack's repack) and decode @f as stored: the kind must be @kind and the shape
 * @w x @h x 3; returns the RGB (free) and fills @e. */
static uint8_t *decode_whole(const uint8_t *f, size_t len, unsigned kind, uint32_t w, uint32_t h,
			     struct dpk_entry *e)
{
	struct dpk_record r = { 0 };
	char why[256] = "";
	uint8_t *copy = NULL;
	size_t clen = 0;

	if (cdc_kind_probe(f, len, &r, why, sizeof(why)) < 0)
		fail_msg("probe: %s", why);
	assert_int_equal(r.kind, kind);
	assert_int_equal(r.shape[0], h);
	assert_int_equal(r.shape[1], w);
	assert_int_equal(r.shape[2], 3);
	const struct cdc_kind *k = cdc_kind_get(kind);
	if (k->pack->repack(f, len, NULL, &r, &copy, &clen, why, sizeof(why)) < 0)
		fail_msg("check: %s", why);
	if (kind == DPK_KIND_JPEG_CMYK) {  /* indexed: tests/test_jpeg_cmyk_idx.c */
		assert_int_equal(r.kind, DPK_KIND_JPEG_IDX_CMYK);
	} else {
		assert_int_equal(clen, len);
		assert_memory_equal(copy, f, len);
	}
	free(copy);
	memset(e, 0, sizeof(*e));
	e->kind = (uint8_t)kind;
	e->length = len;
	e->ndim = 3;
	e->shape[0] = h, e->shape[1] = w, e->shape[2] = 3;
	e->raw_size = (uint64_t)w * h * 3;

	struct cdc_decoder *d;
	struct cdc_out o = { 0 };
	struct cdc_crop c = { 0 };
	uint8_t *rgb = malloc(e->raw_size);
	assert_int_equal(cdc_decoder_create(&d), 0);
	assert_non_null(rgb);
	if (k->load->decode(d, e, f, &c, &o, rgb, why, sizeof(why)) < 0)
		fail_msg("decode: %s", why);
	cdc_decoder_destroy(d);
	return rgb;
}

/* The crop path: a window resized to 19 x 23 equals the same window of @ref resized. */
static void check_crop(const uint8_t *f, const struct dpk_entry *e, const uint8_t *ref)
{
	uint32_t h = e->shape[0], w = e->shape[1];
	struct cdc_crop c = { w / 3, h / 4, w - w / 3, h / 2 ? h / 2 : 1 };
	struct cdc_out o = { .h = 19, .w = 23 };
	uint8_t got[19 * 23 * 3], want[19 * 23 * 3];
	struct cdc_decoder *d;
	char why[256];

	assert_int_equal(cdc_decoder_create(&d), 0);
	if (cdc_kind_load(e->kind)->decode(d, e, f, &c, &o, got, why, sizeof(why)) < 0)
		fail_msg("crop decode: %s", why);
	assert_int_equal(cdc_decode_raw(d, ref, h, w, 3, &c, &o, want), 0);
	assert_memory_equal(got, want, sizeof(got));
	cdc_decoder_destroy(d);
}

/* ---- PNG, written by libpng ---- */

struct membuf {
	uint8_t *p;
	size_t n, cap;
};

static void mem_write(png_structp png, png_bytep data, size_t n)
{
	struct membuf *m = png_get_io_ptr(png);

	if (m->n + n > m->cap) {
		m->cap = (m->n + n) * 2;
		m->p = realloc(m->p, m->cap);
		assert_non_null(m->p);
	}
	memcpy(m->p + m->n, data, n);
	m->n += n;
}

static void mem_flush(png_structp png)
{
	(void)png;
}

/* A PNG of @w x @h of colour type @ct at @depth from @rows (PNG's own sample layout). */
static uint8_t *png_make(uint32_t w, uint32_t h, int ct, int depth, int interlace,
			 const uint8_t *rows, const png_color *pal, int npal, const uint8_t *trns,
			 int ntrns, size_t *len)
{
	struct membuf m = { 0 };
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png_create_info_struct(png);
	size_t rb;

	assert_non_null(info);
	if (setjmp(png_jmpbuf(png)))
		fail_msg("libpng write failed");
	png_set_write_fn(png, &m, mem_write, mem_flush);
	png_set_IHDR(png, info, w, h, depth, ct,
		     interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
		     PNG_FILTER_TYPE_DEFAULT);
	if (pal)
		png_set_PLTE(png, info, pal, npal);
	if (trns)
		png_set_tRNS(png, info, trns, ntrns, NULL);
	png_write_info(png, info);
	rb = png_get_rowbytes(png, info);
	png_bytep *rp = malloc(h * sizeof(*rp));
	assert_non_null(rp);
	for (uint32_t y = 0; y < h; y++)
		rp[y] = (png_bytep)rows + y * rb;
	png_write_image(png, rp);
	png_write_end(png, NULL);
	png_destroy_write_struct(&png, &info);
	free(rp);
	*len = m.n;
	return m.p;
}

static void png_case(uint32_t w, uint32_t h, int ct, int depth, int interlace, uint64_t seed)
{
	int ch = ct == PNG_COLOR_TYPE_RGB ? 3 : ct == PNG_COLOR_TYPE_RGBA ? 4 :
		 ct == PNG_COLOR_TYPE_GA ? 2 : 1;
	size_t rb = ((size_t)w * ch * depth + 7) / 8;
	uint8_t *rows = noise(rb * h, seed), *want = malloc((size_t)w * h * 3);
	png_color pal[16];
	uint8_t trns[4] = { 0, 128, 255, 7 };
	size_t len;

	assert_non_null(want);
	for (int i = 0; i < 16; i++)
		pal[i] = (png_color){ (png_byte)(i * 16), (png_byte)(255 - i * 7), (png_byte)(i * i) };
	if (ct == PNG_COLOR_TYPE_PALETTE)  /* 4-bit indices into the 16 entries */
		assert_int_equal(depth, 4);
	if (ct == PNG_COLOR_TYPE_GRAY && depth == 16)  /* some above 255, some below */
		for (size_t i = 0; i < rb * h; i += 2)
			rows[i] &= 1;
	uint8_t *f = png_make(w, h, ct, depth, interlace, rows,
			      ct == PNG_COLOR_TYPE_PALETTE ? pal : NULL, 16,
			      ct == PNG_COLOR_TYPE_PALETTE ? trns : NULL, 4, &len);
	/* PIL's convert("RGB") of it, by PIL's rules */
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++) {
			const uint8_t *r = rows + y * rb;
			uint8_t *o = want + ((size_t)y * w + x) * 3;
			int bs = depth / 8;  /* bytes a sample, 0 below 8 bits */
			if (ct == PNG_COLOR_TYPE_PALETTE) {
				unsigned i = (r[x / 2] >> (x % 2 ? 0 : 4)) & 15;
				o[0] = pal[i].red, o[1] = pal[i].green, o[2] = pal[i].blue;
			} else if (ct == PNG_COLOR_TYPE_GRAY && depth == 1) {
				o[0] = o[1] = o[2] = (r[x / 8] >> (7 - x % 8)) & 1 ? 255 : 0;
			} else if (ct == PNG_COLOR_TYPE_GRAY && depth == 16) {
				unsigned v = (unsigned)r[2 * x] << 8 | r[2 * x + 1];
				o[0] = o[1] = o[2] = v > 255 ? 255 : (uint8_t)v;
			} else if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GA) {
				o[0] = o[1] = o[2] = r[(size_t)x * ch * bs];  /* high byte */
			} else {
				for (int c = 0; c < 3; c++)
					o[c] = r[((size_t)x * ch + c) * bs];  /* high byte */
			}
		}
	struct dpk_entry e;
	uint8_t *got = decode_whole(f, len, DPK_KIND_PNG, w, h, &e);
	assert_memory_equal(got, want, (size_t)w * h * 3);
	check_crop(f, &e, want);
	free(got);
	free(want);
	free(rows);
	free(f);
}

static void test_kind_png_every_colour_type(void **state)
{
	(void)state;
	png_case(37, 23, PNG_COLOR_TYPE_RGB, 8, 0, 1);
	png_case(37, 23, PNG_COLOR_TYPE_RGB, 16, 0, 2);
	png_case(31, 17, PNG_COLOR_TYPE_RGBA, 8, 0, 3);
	png_case(31, 17, PNG_COLOR_TYPE_RGBA, 16, 0, 4);
	png_case(29, 13, PNG_COLOR_TYPE_GRAY, 8, 0, 5);
	png_case(29, 13, PNG_COLOR_TYPE_GRAY, 16, 0, 6);
	png_case(29, 13, PNG_COLOR_TYPE_GRAY, 1, 0, 7);
	png_case(29, 13, PNG_COLOR_TYPE_GA, 8, 0, 8);
	png_case(29, 13, PNG_COLOR_TYPE_GA, 16, 0, 9);
	png_case(33, 21, PNG_COLOR_TYPE_PALETTE, 4, 0, 10);
}

static void test_kind_png_interlaced_and_1x1(void **state)
{
	(void)state;
	png_case(37, 23, PNG_COLOR_TYPE_RGB, 8, 1, 11);
	png_case(9, 5, PNG_COLOR_TYPE_GRAY, 16, 1, 12);
	png_case(33, 21, PNG_COLOR_TYPE_PALETTE, 4, 1, 13);
	png_case(1, 1, PNG_COLOR_TYPE_RGB, 8, 0, 14);
	png_case(1, 1, PNG_COLOR_TYPE_PALETTE, 4, 1, 15);
}

/* The decoder's pixel bound: at exactly the image's pixels it decodes, one below it refuses
 * before allocating; an index that says another size than the file is -EBADMSG. */
static void test_kind_png_bound_and_lying_index(void **state)
{
	uint8_t *rows = noise(30 * 10 * 3, 16), out[3 * 30 * 10];
	size_t len;
	uint8_t *f = png_make(30, 10, PNG_COLOR_TYPE_RGB, 8, 0, rows, NULL, 0, NULL, 0, &len);
	struct dpk_entry e;
	struct cdc_decoder *d;
	struct cdc_out o = { 0 };
	struct cdc_crop c = { 0 };
	char why[256];

	(void)state;
	free(decode_whole(f, len, DPK_KIND_PNG, 30, 10, &e));
	const struct cdc_kind *k = cdc_kind_get(DPK_KIND_PNG);
	assert_int_equal(cdc_decoder_create(&d), 0);
	cdc_decoder_limit(d, 300);
	assert_int_equal(k->load->decode(d, &e, f, &c, &o, out, why, sizeof(why)), 0);
	cdc_decoder_limit(d, 299);
	assert_int_equal(k->load->decode(d, &e, f, &c, &o, out, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "30 x 10 pixels is more than the bound of 299");
	cdc_decoder_limit(d, 0);
	e.shape[1] = 29;
	assert_int_equal(k->load->decode(d, &e, f, &c, &o, out, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "PNG is 30 x 10, the index says 29 x 10");
	e.shape[1] = 30;
	assert_int_equal(k->load->decode(d, &e, f, &c, &o, out, why, sizeof(why)), 0);
	e.length = len / 2;  /* cut short */
	assert_int_equal(k->load->decode(d, &e, f, &c, &o, out, why, sizeof(why)), -EBADMSG);
	assert_non_null(strstr(why, "PNG: "));
	cdc_decoder_destroy(d);
	free(f);
	free(rows);
}

/* ---- WebP, written by libwebp ---- */

static void test_kind_webp_lossless_and_lossy(void **state)
{
	const uint32_t w = 41, h = 27;
	uint8_t *px = noise(w * h * 3, 20), *f;
	struct dpk_entry e;
	int fw, fh;

	(void)state;
	size_t len = WebPEncodeLosslessRGB(px, (int)w, (int)h, (int)w * 3, &f);
	assert_true(len > 0);
	uint8_t *got = decode_whole(f, len, DPK_KIND_WEBP, w, h, &e);
	assert_memory_equal(got, px, w * h * 3);  /* lossless: the pixels themselves */
	check_crop(f, &e, px);
	free(got);
	WebPFree(f);

	len = WebPEncodeRGB(px, (int)w, (int)h, (int)w * 3, 75, &f);
	assert_true(len > 0);
	uint8_t *ref = WebPDecodeRGB(f, len, &fw, &fh);  /* lossy: libwebp's own whole decode */
	assert_non_null(ref);
	got = decode_whole(f, len, DPK_KIND_WEBP, w, h, &e);
	assert_memory_equal(got, ref, w * h * 3);
	check_crop(f, &e, ref);
	/* cut short: refused at pack time with the reason */
	struct dpk_record r = { 0 };
	uint8_t *copy;
	size_t clen;
	char why[256];
	assert_int_equal(cdc_kind_probe(f, len, &r, why, sizeof(why)), 0);
	assert_int_equal(cdc_kind_pack(DPK_KIND_WEBP)->repack(f, len - 20, NULL, &r, &copy, &clen,
							   why, sizeof(why)), -EBADMSG);
	assert_non_null(strstr(why, "WebP"));
	free(got);
	WebPFree(ref);
	WebPFree(f);
	free(px);
}

/* ---- CMYK and YCCK JPEGs, written by TurboJPEG ---- */

/* PIL: the stored values are Adobe-inverted, C' = 255 - stored; nk = 255 - K'. */
static void pil_cmyk(const uint8_t *cmyk, size_t n, uint8_t *rgb)
{
	for (size_t i = 0; i < n; i++) {
		int nk = cmyk[4 * i + 3];
		for (int c = 0; c < 3; c++) {
			int t = (255 - cmyk[4 * i + c]) * nk + 128;
			rgb[3 * i + c] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
		}
	}
}

static void cmyk_case(int samp, uint64_t seed)
{
	const int w = 45, h = 31;
	uint8_t *src = noise((size_t)w * h * 4, seed), *cm = malloc((size_t)w * h * 4);
	uint8_t *want = malloc((size_t)w * h * 3);
	tjhandle c = tjInitCompress(), dj = tjInitDecompress();
	unsigned char *f = NULL;
	unsigned long len = 0;
	struct dpk_entry e;

	assert_non_null(cm);
	/* TurboJPEG writes 4-component images as YCCK with an Adobe marker */
	assert_int_equal(tjCompress2(c, src, w, 0, h, TJPF_CMYK, &f, &len, samp, 95, 0), 0);
	assert_int_equal(tjDecompress2(dj, f, len, cm, w, 0, h, TJPF_CMYK, 0), 0);
	pil_cmyk(cm, (size_t)w * h, want);
	uint8_t *got = decode_whole(f, len, DPK_KIND_JPEG_CMYK, (uint32_t)w, (uint32_t)h, &e);
	assert_memory_equal(got, want, (size_t)w * h * 3);
	check_crop(f, &e, want);  /* the crop covers most of the image: decoded at scale 1 */
	/* cut short: libjpeg only warns, the pack-time check refuses */
	struct dpk_record r = { 0 };
	uint8_t *copy;
	size_t clen;
	char why[256];
	assert_int_equal(cdc_kind_probe(f, len, &r, why, sizeof(why)), 0);
	assert_int_equal(cdc_kind_pack(DPK_KIND_JPEG_CMYK)->repack(f, len / 2, NULL, &r, &copy,
								   &clen, why, sizeof(why)),
			 -EBADMSG);
	assert_string_equal(why, "JPEG: Premature end of JPEG file");
	/* an index that says another size */
	e.shape[0] = (uint32_t)h - 1;
	e.raw_size = (uint64_t)w * (h - 1) * 3;
	struct cdc_decoder *d;
	struct cdc_out o = { 0 };
	assert_int_equal(cdc_decoder_create(&d), 0);
	assert_int_equal(cdc_kind_load(DPK_KIND_JPEG_CMYK)->decode(d, &e, f, &(struct cdc_crop){ 0 },
								   &o, got, why, sizeof(why)),
			 -EBADMSG);
	assert_string_equal(why, "JPEG is 45 x 31, the index says 45 x 30");
	cdc_decoder_destroy(d);
	free(got);
	free(want);
	free(cm);
	free(src);
	tjFree(f);
	tjDestroy(c);
	tjDestroy(dj);
}

static void test_kind_jpeg_cmyk_as_pil(void **state)
{
	(void)state;
	cmyk_case(TJSAMP_444, 30);
	cmyk_case(TJSAMP_420, 31);
}

/* ---- Netpbm and BMP, written byte by byte ---- */

static void test_kind_pnm_p4_p5_p6(void **state)
{
	const uint32_t w = 11, h = 7;
	uint8_t *px = noise(w * h * 3, 40), f[64 + 11 * 7 * 3], want[11 * 7 * 3];
	struct dpk_entry e;

	(void)state;
	int n = snprintf((char *)f, 64, "P6\n# a comment\n%u %u\n255\n", w, h);
	memcpy(f + n, px, w * h * 3);
	uint8_t *got = decode_whole(f, (size_t)n + w * h * 3, DPK_KIND_PNM, w, h, &e);
	assert_memory_equal(got, px, w * h * 3);
	check_crop(f, &e, px);
	free(got);
	/* P5, maxval 15: round(v / 15 * 255); a sample above maxval clips */
	n = snprintf((char *)f, 64, "P5 %u %u 15\n", w, h);
	for (uint32_t i = 0; i < w * h; i++) {
		uint8_t v = (uint8_t)(i == 5 ? 200 : px[i] % 16);
		f[n + i] = v;
		want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = (uint8_t)(v > 15 ? 255 : v * 17);
	}
	got = decode_whole(f, (size_t)n + w * h, DPK_KIND_PNM, w, h, &e);
	assert_memory_equal(got, want, w * h * 3);
	free(got);
	/* P4: 1 is black; rows padded to a byte */
	n = snprintf((char *)f, 64, "P4 %u %u\n", w, h);
	for (uint32_t y = 0; y < h; y++) {
		f[n + 2 * y] = px[2 * y], f[n + 2 * y + 1] = px[2 * y + 1];
		for (uint32_t x = 0; x < w; x++) {
			int bit = (px[2 * y + x / 8] >> (7 - x % 8)) & 1;
			memset(want + (y * w + x) * 3, bit ? 0 : 255, 3);
		}
	}
	got = decode_whole(f, (size_t)n + 2 * h, DPK_KIND_PNM, w, h, &e);
	assert_memory_equal(got, want, w * h * 3);
	free(got);
	/* the plain forms and 16-bit samples are refused by name; a short file is damage */
	struct dpk_record r;
	char why[256];
	assert_int_equal(cdc_kind_probe((const uint8_t *)"P3 1 1 255\n1 2 3\n", 17, &r, why,
					sizeof(why)), -ENOTSUP);
	assert_string_equal(why, "Netpbm P3 (only the binary P4, P5, P6)");
	assert_int_equal(cdc_kind_probe((const uint8_t *)"P5 1 1 65535\n\0\0", 15, &r, why,
					sizeof(why)), -ENOTSUP);
	assert_int_equal(cdc_kind_probe((const uint8_t *)"P6 2 2 255\nabc", 14, &r, why,
					sizeof(why)), -EBADMSG);
	assert_non_null(strstr(why, "cut short"));
	free(px);
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

/* A BMP with a 40-byte info header: @bits, @h < 0 for top-down, @pal entries of 4 bytes. */
static size_t bmp_make(uint8_t *f, uint32_t w, int32_t h, unsigned bits, const uint8_t *pal,
		       unsigned npal, const uint8_t *rows, size_t stride)
{
	uint32_t ah = (uint32_t)(h < 0 ? -h : h), off = 14 + 40 + npal * 4;

	memset(f, 0, off);
	f[0] = 'B', f[1] = 'M';
	put32(f + 2, off + (uint32_t)(stride * ah));
	put32(f + 10, off);
	put32(f + 14, 40);
	put32(f + 18, w);
	put32(f + 22, (uint32_t)h);
	f[26] = 1, f[28] = (uint8_t)bits;
	put32(f + 46, npal);
	if (npal)
		memcpy(f + 54, pal, npal * 4);
	memcpy(f + off, rows, stride * ah);
	return off + stride * ah;
}

static void test_kind_bmp_24_32_and_palette(void **state)
{
	const uint32_t w = 13, h = 9;
	uint8_t *rows = noise(64 * h, 50), pal[16 * 4], f[2048], want[13 * 9 * 3];
	struct dpk_entry e;

	(void)state;
	/* 24-bit bottom-up, rows padded to 4 bytes (13 x 3 = 39 -> 40) */
	size_t len = bmp_make(f, w, (int32_t)h, 24, NULL, 0, rows, 40);
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++)
			for (int c = 0; c < 3; c++)
				want[(y * w + x) * 3 + c] = rows[(h - 1 - y) * 40 + x * 3 + 2 - c];
	uint8_t *got = decode_whole(f, len, DPK_KIND_BMP, w, h, &e);
	assert_memory_equal(got, want, sizeof(want));
	check_crop(f, &e, want);
	free(got);
	/* 32-bit top-down: the 4th byte dropped */
	len = bmp_make(f, w, -(int32_t)h, 32, NULL, 0, rows, 52);
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++)
			for (int c = 0; c < 3; c++)
				want[(y * w + x) * 3 + c] = rows[y * 52 + x * 4 + 2 - c];
	got = decode_whole(f, len, DPK_KIND_BMP, w, h, &e);
	assert_memory_equal(got, want, sizeof(want));
	free(got);
	/* 4-bit palette of 12 entries: indices 12..15 are black */
	for (int i = 0; i < 16 * 4; i++)
		pal[i] = (uint8_t)(i * 37 + 5);
	len = bmp_make(f, w, (int32_t)h, 4, pal, 12, rows, 8);
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++) {
			unsigned i = (rows[(h - 1 - y) * 8 + x / 2] >> (x % 2 ? 0 : 4)) & 15;
			for (int c = 0; c < 3; c++)
				want[(y * w + x) * 3 + c] = i < 12 ? pal[i * 4 + 2 - c] : 0;
		}
	got = decode_whole(f, len, DPK_KIND_BMP, w, h, &e);
	assert_memory_equal(got, want, sizeof(want));
	free(got);
	/* RLE is refused by name; rows cut short are damage */
	struct dpk_record r;
	char why[256];
	len = bmp_make(f, w, (int32_t)h, 8, pal, 16, rows, 16);
	put32(f + 30, 1);
	assert_int_equal(cdc_kind_probe(f, len, &r, why, sizeof(why)), -ENOTSUP);
	assert_string_equal(why, "BMP compression 1 (only uncompressed)");
	put32(f + 30, 0);
	assert_int_equal(cdc_kind_probe(f, len - 1, &r, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "BMP cut short: 8 of 9 rows");
	free(rows);
}

/* ---- TIFF, written by libtiff ---- */

/* A TIFF of @w x @h, @spp samples of 8 bits from @px (or tiles / 16 bits when asked), read back
 * into memory. */
static uint8_t *tiff_make(uint32_t w, uint32_t h, uint16_t spp, uint16_t photometric,
			  uint16_t compression, int tiled, uint16_t bps, const uint8_t *px, size_t *len)
{
	char path[] = "/tmp/test_kind_image.XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	TIFF *t = TIFFOpen(path, "w");
	assert_non_null(t);
	TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
	TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
	TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, bps);
	TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, spp);
	TIFFSetField(t, TIFFTAG_PHOTOMETRIC, photometric);
	TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
	TIFFSetField(t, TIFFTAG_COMPRESSION, compression);
	if (compression == COMPRESSION_LZW)
		TIFFSetField(t, TIFFTAG_PREDICTOR, PREDICTOR_HORIZONTAL);
	if (spp == 4) {
		uint16_t extra = EXTRASAMPLE_UNASSALPHA;
		TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, &extra);
	}
	if (tiled) {
		TIFFSetField(t, TIFFTAG_TILEWIDTH, 16);
		TIFFSetField(t, TIFFTAG_TILELENGTH, 16);
		uint8_t tile[16 * 16 * 4] = { 0 };
		assert_true(TIFFWriteTile(t, tile, 0, 0, 0, 0) >= 0);
	} else {
		size_t rb = (size_t)w * spp * bps / 8;
		uint8_t *row = malloc(rb);  /* libtiff's predictor differences the row in place */
		assert_non_null(row);
		TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 3);
		for (uint32_t y = 0; y < h; y++) {
			memcpy(row, px + y * rb, rb);
			assert_int_equal(TIFFWriteScanline(t, row, y, 0), 1);
		}
		free(row);
	}
	TIFFClose(t);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	rewind(f);
	uint8_t *b = malloc(*len);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, *len, f), *len);
	fclose(f);
	unlink(path);
	return b;
}

static void test_kind_tiff_grey_rgb_rgba(void **state)
{
	const uint32_t w = 23, h = 11;
	uint8_t *px = noise(w * h * 4 * 2, 60), want[23 * 11 * 3];
	struct dpk_entry e;
	size_t len;

	(void)state;
	/* RGB, LZW with the horizontal predictor */
	uint8_t *f = tiff_make(w, h, 3, PHOTOMETRIC_RGB, COMPRESSION_LZW, 0, 8, px, &len);
	uint8_t *got = decode_whole(f, len, DPK_KIND_TIFF, w, h, &e);
	assert_memory_equal(got, px, w * h * 3);
	check_crop(f, &e, px);
	free(got);
	free(f);
	/* RGBA: the 4th sample dropped, never multiplied in */
	f = tiff_make(w, h, 4, PHOTOMETRIC_RGB, COMPRESSION_PACKBITS, 0, 8, px, &len);
	for (uint32_t i = 0; i < w * h; i++)
		memcpy(want + 3 * i, px + 4 * i, 3);
	got = decode_whole(f, len, DPK_KIND_TIFF, w, h, &e);
	assert_memory_equal(got, want, sizeof(want));
	free(got);
	free(f);
	/* min-is-white grey: inverted, as PIL's "L;I" */
	f = tiff_make(w, h, 1, PHOTOMETRIC_MINISWHITE, COMPRESSION_ADOBE_DEFLATE, 0, 8, px, &len);
	for (uint32_t i = 0; i < w * h; i++)
		want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = (uint8_t)(255 - px[i]);
	got = decode_whole(f, len, DPK_KIND_TIFF, w, h, &e);
	assert_memory_equal(got, want, sizeof(want));
	/* cut short: refused at pack time */
	struct dpk_record r = { 0 };
	uint8_t *copy;
	size_t clen;
	char why[256];
	assert_int_equal(cdc_kind_probe(f, len, &r, why, sizeof(why)), 0);
	free(got);
	free(f);
	f = tiff_make(w, h, 1, PHOTOMETRIC_MINISBLACK, COMPRESSION_NONE, 0, 8, px, &len);
	assert_int_equal(cdc_kind_probe(f, len, &r, why, sizeof(why)), 0);
	/* the strips come first, the directory last: cut the middle of the strips out */
	memmove(f + 8 + 100, f + 8 + 200, len - 208);
	assert_int_equal(cdc_kind_pack(DPK_KIND_TIFF)->repack(f, len - 100, NULL, &r, &copy, &clen,
							   why, sizeof(why)), -EBADMSG);
	free(f);
	/* tiles and 16-bit samples: refused by name */
	f = tiff_make(16, 16, 3, PHOTOMETRIC_RGB, COMPRESSION_NONE, 1, 8, px, &len);
	assert_int_equal(cdc_kind_probe(f, len, &r, why, sizeof(why)), -ENOTSUP);
	assert_string_equal(why, "tiled TIFF (only strips)");
	free(f);
	f = tiff_make(w, h, 1, PHOTOMETRIC_MINISBLACK, COMPRESSION_NONE, 0, 16, px, &len);
	assert_int_equal(cdc_kind_probe(f, len, &r, why, sizeof(why)), -ENOTSUP);
	assert_string_equal(why, "TIFF at 16 bits a sample (only 8)");
	free(f);
	free(px);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kind_png_every_colour_type),
		cmocka_unit_test(test_kind_png_interlaced_and_1x1),
		cmocka_unit_test(test_kind_png_bound_and_lying_index),
		cmocka_unit_test(test_kind_webp_lossless_and_lossy),
		cmocka_unit_test(test_kind_jpeg_cmyk_as_pil),
		cmocka_unit_test(test_kind_pnm_p4_p5_p6),
		cmocka_unit_test(test_kind_bmp_24_32_and_palette),
		cmocka_unit_test(test_kind_tiff_grey_rgb_rgba),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
