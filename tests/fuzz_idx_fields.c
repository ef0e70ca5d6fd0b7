/* fuzz_idx_fields.c - structure-aware libFuzzer target for jpeg+idx records (codec/jpeg_idx.h):
 * the input does not supply a record but edits the index fields of a valid one (tests/idx_edit.h),
 * so that every run reaches the checks of the index and the splice instead of dying at the footer.
 * Byte 0 picks the image and the index column width; then each 5-byte op sets or moves one field:
 * a point's bit offset (absolute, relative, or that of another point), a DC prediction, a row's
 * directory entry, the column width, the component or point count, bytes after the stream. The
 * record is rebuilt with a valid footer check, then parsed; when it parses, splices of a set of
 * plans must stay inside cdc_idx_splice_bound() (an exact-size buffer under ASan) and windows
 * must decode or be refused with -EBADMSG (cdc_decode_jpeg_idx; for the 4-component images,
 * jpeg+idx+cmyk's decode, codec/kind_jpeg_cmyk.c). */
#include "codec/decode.h"
#include "codec/jpeg_build.h"
#include "codec/jpeg_idx.h"
#include "codec/jpeg_rst.h"
#include "codec/kind_load.h"
#include "tests/fuzz_jpeg_fields.h"
#include "tests/idx_edit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* jpeg+idx+cmyk's decode (codec/kind_jpeg_cmyk.c) as a fuzz_decode_fn: the entry says the
 * image's size (cmyk_w x cmyk_h) as dpack wrote it; the window is clipped into the image, as a
 * job's crops are. */
static uint32_t cmyk_w, cmyk_h;
static int cmyk_idx_decode(struct cdc_decoder *d, const uint8_t *rec, size_t len,
			   const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst,
			   char *why, size_t whylen)
{
	struct dpk_entry e = { .kind = DPK_KIND_JPEG_IDX_CMYK, .length = len, .ndim = 3,
			       .shape = { cmyk_h, cmyk_w, 3 },
			       .raw_size = (uint64_t)cmyk_w * cmyk_h * 3 };
	struct cdc_crop c = *crop;

	if (c.x >= cmyk_w)
		c.x = cmyk_w - 1;
	if (c.y >= cmyk_h)
		c.y = cmyk_h - 1;
	if (c.w > cmyk_w - c.x)
		c.w = cmyk_w - c.x;
	if (c.h > cmyk_h - c.y)
		c.h = cmyk_h - c.y;
	return cdc_kind_load(DPK_KIND_JPEG_IDX_CMYK)->decode(d, &e, rec, &c, o, dst, why, whylen);
}

/* The records: each JPEG indexed at three column widths, made on the first call. */
static const uint8_t *record(unsigned sel, size_t *len)
{
	static uint8_t *rec[FUZZ_NJPEG][3];
	static size_t rlen[FUZZ_NJPEG][3];
	static const unsigned cols[3] = { 0, 8, 16 };
	unsigned i = sel % FUZZ_NJPEG, c = (sel / FUZZ_NJPEG) % 3;

	if (!rec[i][c]) {
		const struct fuzz_jpeg *j = &fuzz_jpegs()[i];
		struct dpk_record r = { .kind = j->cmyk ? DPK_KIND_JPEG_CMYK : DPK_KIND_JPEG };
		char why[160];
		if (cdc_idx_build(j->jpg, j->len, cols[c], &r, &rec[i][c], &rlen[i][c], why,
				  sizeof(why)) ||
		    r.kind != (j->cmyk ? DPK_KIND_JPEG_IDX_CMYK : DPK_KIND_JPEG_IDX))
			abort();
	}
	*len = rlen[i][c];
	return rec[i][c];
}

/* Plans over the record's grid, each spliced into an exact-size buffer. */
static void splice_plans(const uint8_t *rec, const struct cdc_idx_info *info, uint32_t sel)
{
	uint32_t W = info->geo.width, H = info->geo.height;
	const uint32_t win[5][4] = {
		{ 0, 0, W, H }, { 0, 0, (W + 1) / 2, (H + 1) / 2 }, { W / 3, H / 3, W / 3 + 1, H / 3 + 1 },
		{ 0, H / 2, W - W / 4, H - H / 2 }, { sel % W, (sel >> 8) % H, 1, 1 },
	};
	for (int k = 0; k < 5; k++) {
		struct cdc_rst_plan plan;
		uint32_t w = win[k][2] ? win[k][2] : 1, h = win[k][3] ? win[k][3] : 1;
		cdc_rst_plan(&info->geo, win[k][0], win[k][1], w, h, &plan);
		size_t bound = cdc_idx_splice_bound(info, &plan);
		uint8_t *out = malloc(bound);
		char why[160];
		if (!out)
			return;
		long n = cdc_idx_splice(rec, info, &plan, out, why, sizeof(why));
		if (n > (long)bound || (n < 0 && n != -EBADMSG))
			abort();
		free(out);
	}
}

static void apply(struct idx_edit *e, struct fuzz_in *in)
{
	unsigned op = fuzz_take(in, 1);
	uint32_t a = fuzz_take(in, 2), v = fuzz_take(in, 2);
	uint32_t k = e->npoints ? a % e->npoints : 0, scan = (e->jpeg_len - 2 - e->scan_at) * 8;

	if (!e->npoints && (op % 12 < 4 || op % 12 >= 10))
		return;  /* no point left to edit */
	switch (op % 12) {
	case 0: e->bit[k] = (uint32_t)((uint64_t)v * (scan + 16) / 0xFFFF); break;
	case 1: e->bit[k] += (uint32_t)(int16_t)v; break;
	case 2: e->bit[k] = e->bit[v % e->npoints]; break;
	case 3: e->pred[IDX_EDIT_COMP * k + v % IDX_EDIT_COMP] = (int16_t)fuzz_take(in, 2) * (v & 0x100 ? 2 : 1); break;
	case 4: e->dir[a % e->rows] = (int32_t)(v % 0x8000) - (v & 0x8000 ? 0 : 1); break;
	case 5: e->K = v % 8; break;
	case 6: e->ncomp = v % 6; break;
	case 7: e->npoints = e->npoints ? e->npoints - 1 - v % (e->npoints < 4 ? e->npoints : 4) : 0; break;
	case 8: e->extra = v % 4; break;
	case 10:  /* row a takes row v's points */
	case 11: {  /* row a's points spread over the whole scan: true MCU starts, far apart */
		uint32_t r = a % e->rows, src = v % e->rows;
		for (uint32_t j = 0; j < e->segs_x && r * e->segs_x + j < e->npoints; j++) {
			uint32_t from = op % 12 == 10 ? src * e->segs_x + j
						      : (uint32_t)((uint64_t)j * (e->npoints - 1) / e->segs_x);
			if (from >= e->npoints)
				break;
			e->bit[r * e->segs_x + j] = e->bit[from];
			memcpy(&e->pred[IDX_EDIT_COMP * (r * e->segs_x + j)], &e->pred[IDX_EDIT_COMP * from],
			       IDX_EDIT_COMP * sizeof(int32_t));
		}
		break;
	}
	default: {  /* a whole row moved by one signed amount */
		uint32_t r = a % e->rows, d = (uint32_t)(int16_t)v;
		for (uint32_t j = 0; j < e->segs_x && r * e->segs_x + j < e->npoints; j++)
			e->bit[r * e->segs_x + j] += d;
	}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct cdc_idx_info info;
	struct fuzz_in in = { data, data + size };
	unsigned sel = fuzz_take(&in, 1);
	size_t len, n;
	const uint8_t *good = record(sel, &len);
	const struct fuzz_jpeg *j = &fuzz_jpegs()[sel % FUZZ_NJPEG];
	struct idx_edit e;
	uint8_t *rec;
	char why[160];

	if (idx_edit_load(good, len, &e))
		abort();  /* what dpack makes must parse */
	for (int ops = 0; ops < 8 && fuzz_more(&in); ops++)
		apply(&e, &in);
	if (idx_edit_store(&e, &rec, &n) == 0) {
		uint8_t *copy = malloc(n);  /* exact size: ASan sees reads past the record */
		if (copy) {
			memcpy(copy, rec, n);
			if (cdc_idx_parse(copy, n, &info, why, sizeof(why)) == 0)
				splice_plans(copy, &info, (uint32_t)sel * 2654435761u);
			free(copy);
		}
		cmyk_w = (uint32_t)j->w;
		cmyk_h = (uint32_t)j->h;
		fuzz_decode_windows(j->cmyk ? cmyk_idx_decode : cdc_decode_jpeg_idx, rec, n, j->w,
				    j->h, (uint32_t)(size * 2654435761u));
		free(rec);
	}
	idx_edit_free(&e);
	return 0;
}
