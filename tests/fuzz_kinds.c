/* fuzz_kinds.c - libFuzzer target for the record kinds of image files decoded whole
 * (codec/kind_image.h: jpeg+cmyk, png, webp, pnm, bmp, tiff) and for the probe that picks a
 * kind by a file's bytes: the input is a file. cdc_kind_probe must refuse it cleanly or give a
 * shape; then (up to 2^20 pixels, a worker's bound) dpack's whole-decode check, the "as stored"
 * decode and a crop must each succeed or fail with a reason, never read or write outside their
 * buffers (ASan), never trust the header over the index's shape. */
#include "formats/dpk.h"
#include "codec/decode.h"
#include "codec/kind.h"
#include "codec/kind_load.h"
#include "codec/kind_pack.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_PIXELS (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct cdc_decoder *d;
	struct dpk_record r = { 0 };
	char why[256];

	if (!d) {
		if (cdc_decoder_create(&d) < 0)
			abort();
		cdc_decoder_limit(d, FUZZ_MAX_PIXELS);
	}
	if (cdc_kind_probe(data, size, &r, why, sizeof(why)) < 0)
		return 0;
	const struct cdc_kind *k = cdc_kind_get(r.kind);
	/* only the whole-image kinds (the JPEG kinds have fuzz_jpeg_idx and the field fuzzers) */
	if (!k || r.kind < DPK_KIND_JPEG_CMYK || !k->pack || !k->pack->repack)
		return 0;
	uint64_t px = (uint64_t)r.shape[0] * r.shape[1];
	if (px > FUZZ_MAX_PIXELS)
		return 0;
	uint8_t *copy = NULL;
	size_t clen = 0;
	int checked = k->pack->repack(data, size, NULL, &r, &copy, &clen, why, sizeof(why)) == 0;
	if (checked && r.kind != k->kind) {
		/* repacked into another kind (jpeg+cmyk into jpeg+idx+cmyk): loaderd decodes that
		 * record, whole and cropped, exactly sized */
		uint8_t *out = malloc(px * 3), small[7 * 5 * 3];
		struct dpk_entry e = { .length = clen, .raw_size = px * 3, .kind = (uint8_t)r.kind,
				       .ndim = 3, .shape = { r.shape[0], r.shape[1], 3, 0 } };
		struct cdc_crop c = { r.shape[1] / 2, r.shape[0] / 3, (r.shape[1] + 1) / 2,
				      r.shape[0] - r.shape[0] / 3 };
		if (!out || cdc_kind_load(r.kind)->decode(d, &e, copy, &(struct cdc_crop){ 0 },
							  &(struct cdc_out){ 0 }, out, why,
							  sizeof(why)) != 0 ||
		    cdc_kind_load(r.kind)->decode(d, &e, copy, &c, &(struct cdc_out){ .h = 7, .w = 5 },
						  small, why, sizeof(why)) != 0)
			abort();
		free(out);
		r.kind = (uint8_t)k->kind;
	}
	free(copy);
	/* the stored bytes exactly as given: a record in an exactly sized buffer */
	uint8_t *rec = malloc(size ? size : 1), *out = malloc(px * 3);
	if (!rec || !out)
		abort();
	memcpy(rec, data, size);
	struct dpk_entry e = { .length = size, .raw_size = px * 3, .kind = (uint8_t)r.kind,
			       .ndim = 3, .shape = { r.shape[0], r.shape[1], 3, 0 } };
	struct cdc_out o = { 0 };
	struct cdc_crop c = { 0 };
	int ret = k->load->decode(d, &e, rec, &c, &o, out, why, sizeof(why));
	if (checked && ret != 0)  /* what dpack accepted, loaderd decodes */
		abort();
	struct cdc_out o2 = { .h = 7, .w = 5 };
	uint8_t small[7 * 5 * 3];
	c = (struct cdc_crop){ r.shape[1] / 2, r.shape[0] / 3, (r.shape[1] + 1) / 2,
			       r.shape[0] - r.shape[0] / 3 };
	ret = k->load->decode(d, &e, rec, &c, &o2, small, why, sizeof(why));
	if (checked && ret != 0)
		abort();
	/* an index that lies about the size: refused, never trusted */
	if (r.shape[1] > 1) {
		e.shape[1] = r.shape[1] - 1;
		e.raw_size = (uint64_t)e.shape[0] * e.shape[1] * 3;
		if (k->load->decode(d, &e, rec, &(struct cdc_crop){ 0 }, &o, out, why, sizeof(why)) == 0)
			abort();
	}
	free(rec);
	free(out);
	return 0;
}
