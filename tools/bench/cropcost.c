/* cropcost.c - issue 15's callgrind figure: decode N samples of a .dpk the way a loaderd job does
 * (RandomResizedCrop window from the sample's key, the record's kind's decode, 224x224 RGB output,
 * horizontal flip), one thread, nothing else; run it under callgrind and divide the instruction
 * count by N. Sample i uses record i mod count and key mix64(i). Not built by make:
 *   cc -O2 -g -I. -D_GNU_SOURCE tools/bench/cropcost.c build/lib/libcodec.a \
 *      build/lib/libformats.a build/lib/libcommon.a -lturbojpeg -ljpeg -lzstd -lxxhash -lm \
 *      -o build/cropcost
 *   valgrind --tool=callgrind build/cropcost FILE.dpk 200
 * With a third argument "full", each sample is a full-size tjDecompress2 of the record instead
 * (the ceiling's work). */
#include "common/mix.h"
#include "formats/dpk.h"
#include "codec/decode.h"
#include "codec/kind_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

int main(int argc, char **argv)
{
	struct dpk *d;
	struct cdc_decoder *dec;
	char err[256];
	static uint8_t out[224 * 224 * 3];
	struct cdc_out o = { .h = 224, .w = 224, .nchw = 0, .flip = 1 };

	if (argc < 3) {
		fprintf(stderr, "usage: cropcost FILE.dpk N [full]\n");
		return 2;
	}
	if (dpk_open(argv[1], 0, &d, err, sizeof(err)) < 0 || cdc_decoder_create(&dec) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	int full = argc > 3 && !strcmp(argv[3], "full");
	tjhandle tj = tjInitDecompress();
	long n = atol(argv[2]);
	uint64_t count = dpk_count(d);
	uint8_t *buf = NULL, *px = NULL;
	size_t cap = 0, pxcap = 0;
	for (long i = 0; i < n; i++) {
		const struct dpk_entry *e = dpk_entry_get(d, (uint64_t)i % count);
		if (e->length > cap) {
			cap = e->length;
			buf = realloc(buf, cap);
		}
		if (dpk_read(d, (uint64_t)i % count, buf, cap) < 0)
			return 1;
		uint32_t h = e->shape[0], w = e->shape[1];
		if (full) {
			if ((size_t)w * h * 3 > pxcap) {
				pxcap = (size_t)w * h * 3;
				px = realloc(px, pxcap);
			}
			if (tjDecompress2(tj, buf, e->length, px, (int)w, 0, (int)h, TJPF_RGB, 0))
				return 1;
			continue;
		}
		struct cdc_crop c;
		cdc_crop_random(w, h, mix64((uint64_t)i), &c);
		if (cdc_kind_load(e->kind)->decode(dec, e, buf, &c, &o, out, err, sizeof(err)) < 0) {
			fprintf(stderr, "sample %ld: %s\n", i, err);
			return 1;
		}
	}
	free(buf);
	free(px);
	tjDestroy(tj);
	cdc_decoder_destroy(dec);
	dpk_close(d);
	return 0;
}
