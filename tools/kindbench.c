/* kindbench - the decode cost of each record kind: samples per CPU-second of one thread decoding
 * RandomResizedCrop windows (torchvision's scale and ratio, codec/decode.h) of a dataset's
 * records, resized to the crop size, exactly as a loaderd worker does (kind row's decode), with
 * the records already in memory: the CPU cost of the decode alone, no I/O, no ring.
 * One line per kind present in each dataset given; docs/BENCHMARKS.md has the figures. */
#include "common/log.h"
#include "formats/dpk.h"
#include "codec/decode.h"
#include "codec/kind.h"
#include "codec/kind_load.h"
#include "codec/kind_pack.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
	"usage: kindbench [--crop N] [--seconds S] D.dpk...\n"
	"\n"
	"For each dataset and each record kind in it: one thread decodes RandomResizedCrop windows of\n"
	"its records (held in memory) resized to N x N (default 224) for S CPU-seconds (default 3),\n"
	"and prints\n"
	"  kindbench: FILE kind=KIND records=R mean_pixels=P samples_per_cpu_s=X\n";

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bench(const char *path, unsigned kind, struct dpk *d, unsigned crop_side, double secs)
{
	uint64_t n = dpk_count(d), m = 0;
	const struct cdc_kind *k = cdc_kind_get(kind);
	uint8_t **recs = calloc(n, sizeof(*recs));
	uint64_t *ids = calloc(n, sizeof(*ids));
	uint8_t *dst = malloc((size_t)crop_side * crop_side * 3);
	struct cdc_decoder *dec = NULL;
	double pixels = 0;
	int ret = -ENOMEM;

	if (!recs || !ids || !dst || cdc_decoder_create(&dec) < 0)
		goto out;
	for (uint64_t i = 0; i < n; i++) {
		const struct dpk_entry *e = dpk_entry_get(d, i);
		if (e->kind != kind)
			continue;
		recs[m] = malloc(e->length);
		if (!recs[m])
			goto out;
		ssize_t got = dpk_read(d, i, recs[m], e->length);
		if (got < 0) {
			ret = (int)got;
			LOG_ERROR("%s: sample %" PRIu64 ": %s", path, i, strerror(-ret));
			goto out;
		}
		pixels += (double)e->shape[0] * e->shape[1];
		ids[m++] = i;
	}
	struct cdc_out o = { .h = crop_side, .w = crop_side };
	uint64_t done = 0;
	char why[256];
	double t0 = cpu_s(), t;
	do {
		for (int rep = 0; rep < 8; rep++, done++) {
			const struct dpk_entry *e = dpk_entry_get(d, ids[done % m]);
			struct cdc_crop c;
			cdc_crop_random(e->shape[1], e->shape[0], done * 0x9E3779B97F4A7C15ull, &c);
			if (k->load->decode(dec, e, recs[done % m], &c, &o, dst, why, sizeof(why)) < 0) {
				LOG_ERROR("%s: sample %" PRIu64 ": %s", path, ids[done % m], why);
				ret = -EBADMSG;
				goto out;
			}
		}
		t = cpu_s() - t0;
	} while (t < secs);
	printf("kindbench: %s kind=%s records=%" PRIu64 " mean_pixels=%.0f samples_per_cpu_s=%.0f\n",
	       path, k->name, m, pixels / m, done / t);
	ret = 0;
out:
	for (uint64_t i = 0; recs && i < m; i++)
		free(recs[i]);
	free(recs);
	free(ids);
	free(dst);
	cdc_decoder_destroy(dec);
	return ret;
}

int main(int argc, char **argv)
{
	unsigned side = 224;
	double secs = 3;
	int i = 1, status = 0;

	log_prog = "kindbench";
	for (; i < argc && argv[i][0] == '-'; i += 2) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage, stdout);
			return 0;
		}
		if (i + 1 >= argc)
			break;
		if (!strcmp(argv[i], "--crop"))
			side = (unsigned)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--seconds"))
			secs = strtod(argv[i + 1], NULL);
		else
			break;
	}
	if (i >= argc || side == 0 || side > 4096 || !(secs > 0)) {
		fputs(usage, stderr);
		return 2;
	}
	for (; i < argc; i++) {
		struct dpk *d;
		char err[256];
		if (dpk_open(argv[i], 0, &d, err, sizeof(err)) < 0) {
			LOG_ERROR("%s: %s", argv[i], err);
			return 1;
		}
		if (dpk_shard_path(d, 0)) {  /* it walks one file's index */
			LOG_ERROR("%s is a set of shards: give one of its .dpk files", argv[i]);
			dpk_close(d);
			return 1;
		}
		for (unsigned k = 1; k <= DPK_KIND_MAX; k++)
			if ((dpk_header_get(d)->kinds >> k & 1) && cdc_kind_get(k) &&
			    bench(argv[i], k, d, side, secs) < 0)
				status = 1;
		dpk_close(d);
	}
	return status;
}
