/* fuzz_jpeg_idx.c - libFuzzer target for bit-indexed JPEG records (codec/jpeg_idx.h). The first
 * input byte picks the mode: even, the rest is a record: cdc_idx_parse must refuse it cleanly or
 * give an index whose splices (every plan the second byte and the image's grid select) stay
 * inside their bound; odd, the rest is a JPEG: cdc_idx_build must refuse it or make a record that
 * parses and splices. Never a read or write outside the buffers (ASan). */
#include "codec/jpeg_build.h"
#include "codec/jpeg_idx.h"
#include "codec/jpeg_rst.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A few plans over the record's grid: the whole image, a corner, the middle, one MCU. */
static void splice_some(const uint8_t *rec, size_t len, unsigned sel)
{
	static struct cdc_idx_info info;
	char why[160];

	if (cdc_idx_parse(rec, len, &info, why, sizeof(why)) != 0)
		return;
	uint32_t W = info.geo.width, H = info.geo.height;
	const uint32_t win[4][4] = {
		{ 0, 0, W, H }, { 0, 0, (W + 1) / 2, (H + 1) / 2 },
		{ W / 3, H / 3, W / 3 + 1, H / 3 + 1 }, { (sel * 7) % W, (sel * 13) % H, 1, 1 },
	};
	for (int k = 0; k < 4; k++) {
		struct cdc_rst_plan plan;
		uint32_t x = win[k][0], y = win[k][1], w = win[k][2], h = win[k][3];
		if (x + w > W)
			w = W - x;
		if (y + h > H)
			h = H - y;
		cdc_rst_plan(&info.geo, x, y, w, h, &plan);
		size_t bound = cdc_idx_splice_bound(&info, &plan);
		uint8_t *out = malloc(bound);
		if (!out)
			return;
		long n = cdc_idx_splice(rec, &info, &plan, out, why, sizeof(why));
		if (n > (long)bound)
			abort();
		free(out);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	/* an exact-size copy, so that ASan sees any read past the end */
	uint8_t *buf = malloc(size - 1);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size - 1);
	if (data[0] % 2 == 0) {
		splice_some(buf, size - 1, data[0]);
	} else {
		struct dpk_record r = { .kind = DPK_KIND_JPEG };
		uint8_t *rec;
		size_t len;
		char why[160];
		if (cdc_idx_build(buf, size - 1, 8u * (data[0] >> 1), &r, &rec, &len, why,
				  sizeof(why)) == 0) {
			if (r.kind == DPK_KIND_JPEG_IDX) {
				static struct cdc_idx_info info;
				if (cdc_idx_parse(rec, len, &info, why, sizeof(why)) != 0)
					abort();  /* what dpack makes must parse */
				splice_some(rec, len, data[0]);
			}
			free(rec);
		}
	}
	free(buf);
	return 0;
}
