/* fuzz_rst_fields.c - structure-aware libFuzzer target for jpeg+rst records (codec/jpeg_rst.h):
 * the input does not supply a record but edits the restart structure of a valid one, so that
 * every run reaches the segment walk and the splice. Byte 0 picks the image and the restart
 * width; then each 5-byte op changes one thing: the DRI interval, the frame's height or width, a
 * component's sampling factors, a restart marker (renumbered, made another marker, removed, moved,
 * or a new one inserted), a byte of the scan, or where the record ends. Then, when it parses,
 * splices of a set of plans must stay inside cdc_rst_splice_bound() (an exact-size buffer under
 * ASan), and windows must decode or be refused with -EBADMSG (cdc_decode_jpeg_rst). */
#include "codec/decode.h"
#include "codec/jpeg_build.h"
#include "codec/jpeg_rst.h"
#include "tests/fuzz_jpeg_fields.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { SLACK = 256 };  /* room for inserted markers */

/* The records: each JPEG rewritten at three restart widths, made on the first call. */
static const uint8_t *record(unsigned sel, size_t *len)
{
	static uint8_t *rec[FUZZ_NJPEG][3];
	static size_t rlen[FUZZ_NJPEG][3];
	static const unsigned seg[3] = { 0, 8, 16 };
	unsigned i = sel % FUZZ_NJPEG, c = (sel / FUZZ_NJPEG) % 3;

	if (!rec[i][c]) {
		const struct fuzz_jpeg *j = &fuzz_jpegs()[i];
		struct dpk_record r = { .kind = DPK_KIND_JPEG };
		char why[160];
		if (cdc_rst_rewrite(j->jpg, j->len, seg[c], &r, &rec[i][c], &rlen[i][c], why,
				    sizeof(why)))
			abort();
	}
	*len = rlen[i][c];
	return rec[i][c];
}

/* The offset of the @k-th (mod their count) restart marker of the scan from @scan_at, or 0. */
static size_t nth_marker(const uint8_t *b, size_t len, size_t scan_at, uint32_t k)
{
	size_t count = 0, at = 0;

	for (int pass = 0; pass < 2; pass++) {
		size_t seen = 0;
		for (size_t q = scan_at; q + 1 < len; q++) {
			if (b[q] != 0xFF || b[q + 1] < 0xD0 || b[q + 1] > 0xD7)
				continue;
			if (pass == 1 && seen == k % count)
				return q;
			seen++;
		}
		count = seen;
		if (!count)
			return at;
	}
	return at;
}

static void cut(uint8_t *b, size_t *len, size_t at, size_t n)
{
	if (at + n > *len)
		return;
	memmove(b + at, b + at + n, *len - at - n);
	*len -= n;
}

static void insert(uint8_t *b, size_t *len, size_t cap, size_t at, const uint8_t *p, size_t n)
{
	if (*len + n > cap || at > *len)
		return;
	memmove(b + at + n, b + at, *len - at);
	memcpy(b + at, p, n);
	*len += n;
}

static void apply(uint8_t *b, size_t *len, size_t cap, const struct cdc_rst_info *g, size_t dri,
		  struct fuzz_in *in)
{
	unsigned op = fuzz_take(in, 1);
	uint32_t a = fuzz_take(in, 2), v = fuzz_take(in, 2);
	size_t scan = *len > g->scan_at ? *len - g->scan_at : 1;
	size_t m = nth_marker(b, *len, g->scan_at, a);

	switch (op % 10) {
	case 0:  /* the restart interval */
		if (dri) {
			b[dri] = (uint8_t)(v >> 8);
			b[dri + 1] = (uint8_t)v;
		}
		break;
	case 1:  /* height, then width: small, zero or large */
	case 2: {
		size_t at = g->sof_at + (op % 10 == 2 ? 2 : 0);
		uint32_t n = v & 0x8000 ? v : v % 300;
		b[at] = (uint8_t)(n >> 8);
		b[at + 1] = (uint8_t)n;
		break;
	}
	case 3:  /* a component's sampling factors (the byte after its id) */
		b[g->sof_at + 5 + 3 * (a % 3) + 1] = (uint8_t)v;
		break;
	case 4:  /* a marker renumbered or made another marker */
		if (m)
			b[m + 1] = v & 0x100 ? (uint8_t)(0xC0 + v % 64) : (uint8_t)(0xD0 + v % 8);
		break;
	case 5:  /* a marker removed */
		if (m)
			cut(b, len, m, 2);
		break;
	case 6: {  /* a marker inserted */
		uint8_t mk[2] = { 0xFF, (uint8_t)(0xD0 + v % 8) };
		insert(b, len, cap, g->scan_at + a % scan, mk, 2);
		break;
	}
	case 7:  /* a marker moved */
		if (m) {
			uint8_t mk[2] = { b[m], b[m + 1] };
			cut(b, len, m, 2);
			size_t to = m + (size_t)(int16_t)v;
			if (to >= g->scan_at && to <= *len)
				insert(b, len, cap, to, mk, 2);
		}
		break;
	case 8:  /* a byte of the scan */
		b[g->scan_at + a % scan] = (uint8_t)v;
		break;
	default:  /* the record cut short */
		*len = g->scan_at + (a % scan);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, data + size };
	unsigned sel = fuzz_take(&in, 1);
	size_t len;
	const uint8_t *good = record(sel, &len);
	const struct fuzz_jpeg *j = &fuzz_jpegs()[sel % FUZZ_NJPEG];
	struct cdc_rst_info g, info;
	char why[160];

	if (j->cmyk) {
		/* a 4-component record (dpack makes none; a hostile dataset may): the splice parser
		 * refuses it, the decode falls back to the whole JPEG, which fails or succeeds */
		if (cdc_rst_parse(good, len, &g, why, sizeof(why)) != -ENOTSUP)
			abort();
		uint8_t *rec = malloc(len);
		if (!rec)
			return 0;
		memcpy(rec, good, len);
		for (int ops = 0; ops < 8 && fuzz_more(&in); ops++) {
			uint32_t at = fuzz_take(&in, 2);
			rec[at % len] ^= (uint8_t)fuzz_take(&in, 1);
		}
		fuzz_decode_windows(cdc_decode_jpeg_rst, rec, len, j->w, j->h,
				    (uint32_t)(size * 2654435761u));
		free(rec);
		return 0;
	}
	if (cdc_rst_parse(good, len, &g, why, sizeof(why)))
		abort();  /* what dpack makes must parse */
	size_t cap = len + SLACK, dri = 0;
	for (size_t q = 2; q + 5 < g.scan_at; q++)
		if (good[q] == 0xFF && good[q + 1] == 0xDD && good[q + 2] == 0 && good[q + 3] == 4)
			dri = q + 4;
	uint8_t *b = malloc(cap);
	if (!b)
		return 0;
	memcpy(b, good, len);
	for (int ops = 0; ops < 8 && fuzz_more(&in); ops++)
		apply(b, &len, cap, &g, dri, &in);
	uint8_t *rec = malloc(len ? len : 1);  /* exact size: ASan sees reads past the record */
	if (rec) {
		memcpy(rec, b, len);
		if (cdc_rst_parse(rec, len, &info, why, sizeof(why)) == 0) {
			uint32_t W = info.width, H = info.height;
			const uint32_t win[4][4] = {
				{ 0, 0, W, H }, { 0, 0, (W + 1) / 2, (H + 1) / 2 },
				{ W / 3, H / 3, W / 3 + 1, H / 3 + 1 }, { W - 1, H / 2, 1, H - H / 2 },
			};
			for (int k = 0; k < 4; k++) {
				struct cdc_rst_plan plan;
				cdc_rst_plan(&info, win[k][0], win[k][1], win[k][2] ? win[k][2] : 1,
					     win[k][3] ? win[k][3] : 1, &plan);
				size_t bound = cdc_rst_splice_bound(len);
				uint8_t *out = malloc(bound);
				if (!out)
					break;
				long n = cdc_rst_splice(rec, len, &info, &plan, out, why, sizeof(why));
				if (n > (long)bound || (n < 0 && n != -EBADMSG))
					abort();
				free(out);
			}
		}
		fuzz_decode_windows(cdc_decode_jpeg_rst, rec, len, j->w, j->h,
				    (uint32_t)(size * 2654435761u));
		free(rec);
	}
	free(b);
	return 0;
}
