/* idx_edit.c - jpeg+idx records taken apart and put back together (see idx_edit.h). The stream is
 * written as docs/FORMAT.md ("jpeg+idx") lays it out; nothing here checks what it writes. */
#include "tests/idx_edit.h"

#include "codec/jpeg_idx.h"
#include "common/bytes.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

static size_t varint(uint8_t *o, uint32_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		o[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	o[n++] = (uint8_t)v;
	return n;
}

static uint32_t zigzag(int64_t v)
{
	return (uint32_t)(v < 0 ? ((uint64_t)(-(v + 1)) << 1) | 1 : (uint64_t)v << 1);
}

int idx_edit_load(const uint8_t *rec, size_t len, struct idx_edit *e)
{
	struct cdc_idx_info *info = malloc(sizeof(*info));
	char why[160];

	memset(e, 0, sizeof(*e));
	if (!info || cdc_idx_parse(rec, len, info, why, sizeof(why)) < 0) {
		free(info);
		return -1;
	}
	const struct cdc_rst_info *g = &info->geo;
	e->jpg = rec;
	e->jpeg_len = (uint32_t)info->jpeg_len;
	e->scan_at = (uint32_t)g->scan_at;
	e->K = g->interval;
	e->ncomp = info->ncomp;
	e->npoints = info->npoints;
	e->segs_x = g->segs_x;
	e->rows = g->mcus_y + 1;
	e->bit = calloc(e->npoints, sizeof(*e->bit));
	e->pred = calloc((size_t)e->npoints * IDX_EDIT_COMP, sizeof(*e->pred));
	e->dir = malloc(e->rows * sizeof(*e->dir));
	int ok = e->bit && e->pred && e->dir;
	for (uint32_t k = 0; ok && k < e->npoints; k++) {
		struct cdc_idx_point pt;
		ok = cdc_idx_point(rec, info, k / g->segs_x, k % g->segs_x, &pt, why,
				   sizeof(why)) == 0;
		e->bit[k] = pt.bit;
		for (unsigned c = 0; c < IDX_EDIT_COMP; c++)
			e->pred[IDX_EDIT_COMP * k + c] = pt.pred[c];
	}
	for (uint32_t r = 0; ok && r < e->rows; r++)
		e->dir[r] = -1;
	free(info);
	if (!ok) {
		idx_edit_free(e);
		return -1;
	}
	return 0;
}

int idx_edit_store(const struct idx_edit *e, uint8_t **out, size_t *len)
{
	size_t dirlen = 4 * (size_t)e->rows;
	size_t cap = e->jpeg_len + dirlen + (size_t)e->npoints * 25 + e->extra + 32;
	uint8_t *o = calloc(1, cap);

	if (!o || !e->segs_x)
		goto fail;
	memcpy(o, e->jpg, e->jpeg_len);
	uint8_t *dir = o + e->jpeg_len, *s = dir + dirlen;
	size_t n = 0;
	for (uint32_t k = 0; k < e->npoints; k++) {
		int first = k % e->segs_x == 0;
		uint32_t r = k / e->segs_x;
		if (first && r < e->rows)
			put_le32(dir + 4 * r, e->dir[r] < 0 ? (uint32_t)n : (uint32_t)e->dir[r]);
		n += varint(s + n, e->bit[k] - (first ? 0 : e->bit[k - 1]));
		for (uint32_t c = 0; c < e->ncomp && c < IDX_EDIT_COMP; c++)
			n += varint(s + n, zigzag((int64_t)e->pred[IDX_EDIT_COMP * k + c] -
						  (first ? 0 : e->pred[IDX_EDIT_COMP * (k - 1) + c])));
	}
	for (uint32_t r = (e->npoints + e->segs_x - 1) / e->segs_x; r < e->rows; r++)
		put_le32(dir + 4 * r, e->dir[r] < 0 ? (uint32_t)n : (uint32_t)e->dir[r]);
	n += e->extra;
	size_t tablen = dirlen + n;
	uint8_t *f = s + n;
	put_le32(f, (uint32_t)tablen);
	put_le32(f + 4, e->jpeg_len);
	put_le32(f + 8, e->scan_at);
	f[12] = (uint8_t)e->K;
	f[13] = (uint8_t)(e->K >> 8);
	f[14] = (uint8_t)e->ncomp;
	put_le32(f + 16, e->npoints);
	put_le32(f + 20, (uint32_t)XXH3_64bits(f, 20));
	f[24] = CDC_IDX_VERSION;
	memcpy(f + 26, "JPGIDX", 6);
	*out = o;
	*len = (size_t)(f + CDC_IDX_FOOTER - o);
	return 0;
fail:
	free(o);
	return -1;
}

void idx_edit_free(struct idx_edit *e)
{
	free(e->bit);
	free(e->pred);
	free(e->dir);
	memset(e, 0, sizeof(*e));
}
