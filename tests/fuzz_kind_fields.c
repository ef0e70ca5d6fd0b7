/* fuzz_kind_fields.c - structure-aware libFuzzer target for the load side of every record kind
 * decoded whole (codec/kind_load.h: bmp in its OS/2 and V3 forms with and without a palette,
 * pnm P4/P5/P6, png, tiff, webp, jpeg+cmyk) and of raw tensors. Valid records of each are made
 * here once, by hand or by the format's own encoder (never through dpack's probe); the input
 * picks one and a list of edits, each a header field (the file's own: sides, bits, sizes,
 * offsets, counts; or the index entry's shape and stored length) set to a boundary value, a
 * value from the input, or the field with one bit flipped. Then the kind's decode runs as
 * loaderd's fill calls it, "as stored" into an output of exactly the entry's raw size and
 * cropped (a centre crop resized to 7 x 5), under a worker's pixel bound. It must succeed or
 * refuse with a reason, never read or write outside its buffers (ASan) or compute with a value
 * it has not bounded (UBSan, fatal in the fuzz build). The index entries obey what formats/dpk_index.c
 * checks of them at load (sides, shape product, a raw record's length), as the fill's do. */
#include "formats/dpk.h"
#include "codec/decode.h"
#include "codec/kind_load.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tiffio.h>
#include <turbojpeg.h>
#include <webp/encode.h>
#include <zlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_PIXELS (1u << 20)
#define REC_MAX 4096

/* A header field: at @off, @width bytes (1, 2, 4), big-endian or not. */
struct field {
	uint16_t off;
	uint8_t width, be;
};

enum base_id { B_BMP3, B_BMP8, B_BMP_OS2, B_PNM4, B_PNM5, B_PNM6, B_PNG, B_TIFF, B_WEBP,
	       B_CMYK, B_RAW, B_N };

struct base {
	unsigned kind;
	uint8_t rec[REC_MAX];
	size_t len;
	uint32_t h, w;
	struct field f[16];
	unsigned nf;
	int png;             /* IHDR edits re-seal its CRC (so that libpng reads the field) */
};

static struct base bases[B_N];

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v), put16(p + 2, v >> 16); }
static void put32be(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static void add(struct base *b, uint16_t off, uint8_t width, uint8_t be)
{
	b->f[b->nf++] = (struct field){ off, width, be };
}

static void pattern(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 37 + seed * 11 + (i / 7) * 5);
}

/* BMP: a V3 (40-byte) header, 5 x 3, 24 bits or 8 with 256 palette entries; or OS/2, 24 bits. */
static void make_bmp(struct base *b, int os2, unsigned bits)
{
	uint32_t w = 5, h = 3, hs = os2 ? 12 : 40, npal = bits == 8 ? 256 : 0;
	uint32_t stride = ((w * bits + 31) / 32) * 4, off = 14 + hs + npal * (os2 ? 3 : 4);

	b->kind = DPK_KIND_BMP, b->w = w, b->h = h;
	b->len = off + stride * h;
	memset(b->rec, 0, b->len);
	pattern(b->rec + 14 + hs, b->len - 14 - hs, bits);
	b->rec[0] = 'B', b->rec[1] = 'M';
	put32(b->rec + 2, (uint32_t)b->len);
	put32(b->rec + 10, off);
	put32(b->rec + 14, hs);
	add(b, 2, 4, 0), add(b, 10, 4, 0), add(b, 14, 4, 0);
	if (os2) {
		put16(b->rec + 18, w), put16(b->rec + 20, h), put16(b->rec + 22, 1);
		put16(b->rec + 24, bits);
		add(b, 18, 2, 0), add(b, 20, 2, 0), add(b, 22, 2, 0), add(b, 24, 2, 0);
		return;
	}
	put32(b->rec + 18, w), put32(b->rec + 22, h), put16(b->rec + 26, 1);
	put16(b->rec + 28, bits), put32(b->rec + 46, npal);
	add(b, 18, 4, 0), add(b, 22, 4, 0), add(b, 26, 2, 0), add(b, 28, 2, 0);
	add(b, 30, 4, 0), add(b, 46, 4, 0), add(b, 54, 4, 0), add(b, 58, 4, 0);
}

/* Netpbm: the fields are the numbers of its text header, kept apart and written out anew. */
struct pnm_fields {
	uint32_t v[4];       /* type, w, h, maxval */
};

static size_t pnm_write(uint8_t *out, const struct pnm_fields *p, const uint8_t *px, size_t n)
{
	int k = p->v[0] == 4 ? snprintf((char *)out, 64, "P%u %u %u\n", p->v[0] % 10, p->v[1], p->v[2]) :
		snprintf((char *)out, 64, "P%u %u %u %u\n", p->v[0] % 10, p->v[1], p->v[2], p->v[3]);
	if (n > REC_MAX - (size_t)k)
		n = REC_MAX - (size_t)k;
	memcpy(out + k, px, n);
	return (size_t)k + n;
}

static uint8_t pnm_px[3][5 * 3 * 3];
static const struct pnm_fields pnm_base[3] = { { { 4, 5, 3, 1 } }, { { 5, 5, 3, 255 } },
					      { { 6, 5, 3, 255 } } };
static const size_t pnm_px_len[3] = { 3, 15, 45 };

static void make_pnm(struct base *b, int t)
{
	pattern(pnm_px[t], sizeof(pnm_px[t]), (unsigned)t);
	b->kind = DPK_KIND_PNM, b->w = 5, b->h = 3;
	b->len = pnm_write(b->rec, &pnm_base[t], pnm_px[t], pnm_px_len[t]);
}

static size_t png_chunk(uint8_t *at, const char *type, const uint8_t *d, uint32_t n)
{
	put32be(at, n);
	memcpy(at + 4, type, 4);
	if (n)
		memcpy(at + 8, d, n);
	put32be(at + 8 + n, (uint32_t)crc32(0, at + 4, n + 4));
	return 12 + n;
}

/* PNG: 8-bit RGB 5 x 3, by zlib and hand (IHDR fields at 16..28). */
static void make_png(struct base *b)
{
	uint8_t raw[3 * 16], ihdr[13] = { 0 }, z[256];
	uLongf zn = sizeof(z);

	pattern(raw, sizeof(raw), 7);
	for (int y = 0; y < 3; y++)
		raw[y * 16] = (uint8_t)y;  /* filters none, sub, up */
	if (compress(z, &zn, raw, sizeof(raw)) != Z_OK)
		abort();
	b->kind = DPK_KIND_PNG, b->w = 5, b->h = 3, b->png = 1;
	memcpy(b->rec, "\x89PNG\r\n\x1a\n", 8);
	put32be(ihdr, 5), put32be(ihdr + 4, 3);
	ihdr[8] = 8, ihdr[9] = 2;
	size_t n = 8 + png_chunk(b->rec + 8, "IHDR", ihdr, 13);
	n += png_chunk(b->rec + n, "IDAT", z, (uint32_t)zn);
	n += png_chunk(b->rec + n, "IEND", NULL, 0);
	b->len = n;
	add(b, 16, 4, 1), add(b, 20, 4, 1), add(b, 24, 1, 0), add(b, 25, 1, 0);
	add(b, 26, 1, 0), add(b, 27, 1, 0), add(b, 28, 1, 0), add(b, 33, 4, 1);
}

/* TIFF: little-endian, one strip of 5 x 3 RGB, uncompressed; the fields are its tags' values
 * and counts, the directory's offset and its entry count. */
static void make_tiff(struct base *b)
{
	static const uint16_t tags[][3] = {  /* tag, type (3 short, 4 long), value */
		{ 256, 4, 5 }, { 257, 4, 3 }, { 258, 3, 8 }, { 259, 3, 1 }, { 262, 3, 2 },
		{ 273, 4, 0 }, { 277, 3, 3 }, { 278, 4, 3 }, { 279, 4, 45 }, { 284, 3, 1 },
	};
	const unsigned n = sizeof(tags) / sizeof(tags[0]);
	uint32_t ifd = 8, data = ifd + 2 + n * 12 + 4;

	b->kind = DPK_KIND_TIFF, b->w = 5, b->h = 3;
	memset(b->rec, 0, data);
	memcpy(b->rec, "II*\0", 4);
	put32(b->rec + 4, ifd);
	put16(b->rec + ifd, n);
	add(b, 4, 4, 0), add(b, (uint16_t)ifd, 2, 0);
	for (unsigned i = 0; i < n; i++) {
		uint8_t *e = b->rec + ifd + 2 + i * 12;
		put16(e, tags[i][0]), put16(e + 2, tags[i][1]), put32(e + 4, 1);
		put32(e + 8, tags[i][0] == 273 ? data : tags[i][2]);
		if (b->nf < 15)
			add(b, (uint16_t)(ifd + 2 + i * 12 + 8), 4, 0);
	}
	add(b, (uint16_t)(ifd + 2 + 1 * 12 + 4), 4, 0);  /* the height's count */
	pattern(b->rec + data, 45, 3);
	b->len = data + 45;
}

/* WebP: lossless 5 x 3 by libwebp; the fields: RIFF size, the chunk size, the VP8L header. */
static void make_webp(struct base *b)
{
	uint8_t px[5 * 3 * 3], *out = NULL;

	pattern(px, sizeof(px), 9);
	size_t n = WebPEncodeLosslessRGB(px, 5, 3, 15, &out);
	if (!n || n > REC_MAX)
		abort();
	memcpy(b->rec, out, n);
	WebPFree(out);
	b->kind = DPK_KIND_WEBP, b->w = 5, b->h = 3, b->len = n;
	add(b, 4, 4, 0), add(b, 12, 4, 1), add(b, 16, 4, 0), add(b, 20, 1, 0), add(b, 21, 4, 0);
	add(b, 25, 1, 0);
}

/* CMYK JPEG: 9 x 6 by TurboJPEG; the fields: the frame header's precision, sides, component
 * count and the first components' sampling factors and tables. */
static void make_cmyk(struct base *b)
{
	uint8_t px[9 * 6 * 4];
	unsigned char *jpg = NULL;
	unsigned long n = 0;
	tjhandle tj = tjInitCompress();

	pattern(px, sizeof(px), 4);
	if (!tj || tjCompress2(tj, px, 9, 0, 6, TJPF_CMYK, &jpg, &n, TJSAMP_420, 85, 0) || n > REC_MAX)
		abort();
	tjDestroy(tj);
	memcpy(b->rec, jpg, n);
	tjFree(jpg);
	b->kind = DPK_KIND_JPEG_CMYK, b->w = 9, b->h = 6, b->len = n;
	for (size_t i = 2; i + 10 < n; i++)
		if (b->rec[i] == 0xFF && b->rec[i + 1] == 0xC0) {
			uint16_t s = (uint16_t)(i + 4);
			add(b, s, 1, 0), add(b, s + 1, 2, 1), add(b, s + 3, 2, 1);
			add(b, s + 5, 1, 0), add(b, s + 7, 1, 0), add(b, s + 8, 1, 0);
			add(b, s + 10, 1, 0), add(b, s + 11, 1, 0), add(b, (uint16_t)(i + 2), 2, 1);
			break;
		}
}

static void make_bases(void)
{
	make_bmp(&bases[B_BMP3], 0, 24);
	make_bmp(&bases[B_BMP8], 0, 8);
	make_bmp(&bases[B_BMP_OS2], 1, 24);
	for (int t = 0; t < 3; t++)
		make_pnm(&bases[B_PNM4 + t], t);
	make_png(&bases[B_PNG]);
	make_tiff(&bases[B_TIFF]);
	make_webp(&bases[B_WEBP]);
	make_cmyk(&bases[B_CMYK]);
	struct base *r = &bases[B_RAW];
	r->kind = DPK_KIND_RAW, r->h = 4, r->w = 6, r->len = 4 * 6 * 3;
	pattern(r->rec, r->len, 2);
}

/* The input, read front to back; zeros past its end. */
struct in {
	const uint8_t *p, *end;
};

static uint32_t take(struct in *in, unsigned n)
{
	uint32_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v = v << 8 | (in->p < in->end ? *in->p++ : 0);
	return v;
}

static uint32_t edit_value(struct in *in, uint32_t orig, unsigned width)
{
	static const uint32_t edge[] = { 0, 1, 2, 3, 4, 7, 8, 12, 15, 16, 24, 32, 40, 108, 124,
					 255, 256, 257, 65535, 65536, 0x7FFFFFFF, 0x80000000,
					 0xFFFFFFFF };
	uint32_t sel = take(in, 1);

	switch (sel % 4) {
	case 0: return edge[(sel / 4) % (sizeof(edge) / sizeof(edge[0]))];
	case 1: return take(in, width);
	case 2: return orig ^ (1u << (take(in, 1) % (8 * width)));
	default: return orig + (sel & 0x80 ? 1u : -1u);
	}
}

static uint32_t get_field(const uint8_t *p, const struct field *f)
{
	uint32_t v = 0;

	for (unsigned i = 0; i < f->width; i++)
		v |= (uint32_t)p[f->off + i] << (f->be ? 8 * (f->width - 1 - i) : 8 * i);
	return v;
}

static void set_field(uint8_t *p, const struct field *f, uint32_t v)
{
	for (unsigned i = 0; i < f->width; i++)
		p[f->off + i] = (uint8_t)(v >> (f->be ? 8 * (f->width - 1 - i) : 8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct cdc_decoder *d;
	static uint8_t rec[REC_MAX];
	struct in in = { data, data + size };
	char why[256];

	if (!d) {
		make_bases();
		if (cdc_decoder_create(&d) < 0)
			abort();
		cdc_decoder_limit(d, FUZZ_MAX_PIXELS);
	}
	const struct base *b = &bases[take(&in, 1) % B_N];
	size_t len, cut = 0;
	uint32_t h = b->h, w = b->w, c = 3;
	struct pnm_fields pf = b->kind == DPK_KIND_PNM ? pnm_base[b - &bases[B_PNM4]] :
		(struct pnm_fields){ { 0 } };
	memcpy(rec, b->rec, b->len);

	/* the edits: up to 6, each a field (the file's, or the index's: H, W, C, the length) */
	for (unsigned n = take(&in, 1) % 7; n > 0; n--) {
		unsigned nf = b->kind == DPK_KIND_PNM ? 4 : b->nf;
		unsigned which = take(&in, 1) % (nf + 4);
		if (which == nf)
			h = edit_value(&in, h, 4);
		else if (which == nf + 1)
			w = edit_value(&in, w, 4);
		else if (which == nf + 2)
			c = c == 3 ? 1 : 3;
		else if (which == nf + 3)
			cut = take(&in, 2) % b->len;  /* bytes cut off the end */
		else if (b->kind == DPK_KIND_PNM)
			pf.v[which] = edit_value(&in, pf.v[which], 4);
		else
			set_field(rec, &b->f[which], edit_value(&in, get_field(rec, &b->f[which]),
							       b->f[which].width));
	}
	len = b->len;
	if (b->kind == DPK_KIND_PNM) {
		size_t t = (size_t)(b - &bases[B_PNM4]);
		len = pnm_write(rec, &pf, pnm_px[t], pnm_px_len[t]);
	}
	if (b->png)
		put32be(rec + 29, (uint32_t)crc32(0, rec + 12, 17));
	len -= cut < len ? cut : len - 1;

	/* what formats/dpk_index.c lets an entry be (shape_check, the raw length); the rest is skipped */
	if (h == 0 || w == 0 || h > 65535 || w > 65535 || (uint64_t)h * w > FUZZ_MAX_PIXELS)
		return 0;
	struct dpk_entry e = { .length = len, .kind = (uint8_t)b->kind, .ndim = 3,
			       .shape = { h, w, c, 0 }, .raw_size = (uint64_t)h * w * c };
	if (b->kind == DPK_KIND_RAW)
		e.length = len = e.raw_size <= sizeof(rec) ? e.raw_size : 0;
	if (!len)
		return 0;

	/* the stored bytes in a buffer of exactly their length */
	uint8_t *src = malloc(len), *out = malloc(e.raw_size), small[7 * 5 * 3];
	if (!src || !out)
		abort();
	memcpy(src, rec, len);
	const struct cdc_kind_load *k = cdc_kind_load(e.kind);
	struct cdc_out o = { 0 };
	struct cdc_crop crop = { 0 };
	if (k->accepts(&e, 0, &o, why, sizeof(why)) == 0)
		(void)k->decode(d, &e, src, &crop, &o, out, why, sizeof(why));
	o = (struct cdc_out){ .h = 7, .w = 5 };
	cdc_crop_center(w, h, 7, 5, &crop);
	if (k->accepts(&e, 0, &o, why, sizeof(why)) == 0)
		(void)k->decode(d, &e, src, &crop, &o, small, why, sizeof(why));
	free(src);
	free(out);
	return 0;
}
