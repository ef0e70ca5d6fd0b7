/* decode.c - dpack decode: one sample's pixels as loaderd decodes them "as stored" (an image
 * kind's whole RGB image, a raw tensor's bytes), for comparing a packed dataset with another
 * reader (tests/it_imagefolder.sh compares every kind with PIL's convert("RGB")). */
#include "common/args.h"
#include "common/log.h"
#include "formats/dpk.h"
#include "codec/kind.h"
#include "codec/kind_load.h"
#include "tools/dpack/dpack.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char decode_usage[] =
	"usage: dpack decode D.dpk INDEX\n"
	"\n"
	"Write sample INDEX decoded as loaderd decodes it with --crop 0 to stdout: an image record's\n"
	"whole RGB image (H x W x 3 bytes), a raw tensor's bytes; a JPEG record (which has no such\n"
	"form) is decoded whole and resized to its own size (H x W x 3).\n"
	"One line goes to stderr: KIND label LABEL shape HxWxC.\n";

int dpack_decode_main(int argc, char **argv)
{
	struct dpk *d = NULL;
	struct cdc_decoder *dec = NULL;
	uint8_t *src = NULL, *dst = NULL;
	char err[256];
	uint64_t i;
	int status = 1;

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		fputs(decode_usage, stdout);
		return 0;
	}
	if (argc != 3) {
		fputs(decode_usage, stderr);
		return 2;
	}
	char *end;
	errno = 0;
	i = strtoull(argv[2], &end, 10);
	if (errno || end == argv[2] || *end || argv[2][0] == '-') {
		LOG_ERROR("INDEX: '%s' is not a number", argv[2]);
		return 2;
	}
	int ret = dpk_open(argv[1], 0, &d, err, sizeof(err));
	if (ret < 0) {
		LOG_ERROR("%s: %s", argv[1], err);
		return 1;
	}
	struct dpk_entry ent;  /* loaded: a set of shards has no whole index (formats/dpk.h) */
	const struct dpk_entry *e = &ent;
	if (dpk_entry_load(d, i, &ent, err, sizeof(err)) < 0) {
		LOG_ERROR("%s: %s", argv[1], err);
		goto out;
	}
	const struct cdc_kind *k = cdc_kind_get(e->kind);
	struct cdc_out o = { 0 };
	struct cdc_crop crop = { 0 };
	/* JPEG kinds have no "as stored" form: the whole image, resized to its own size. */
	if (k && k->load->accepts(e, i, &o, err, sizeof(err)) < 0 && e->ndim == 3) {
		o = (struct cdc_out){ .h = e->shape[0], .w = e->shape[1] };
		crop = (struct cdc_crop){ 0, 0, e->shape[1], e->shape[0] };
	}
	size_t out_size = o.h ? (size_t)o.h * o.w * 3 : e->raw_size;
	if (!k || k->load->accepts(e, i, &o, err, sizeof(err)) < 0) {
		LOG_ERROR("%s: sample %" PRIu64 ": %s", argv[1], i,
			  k ? err : "a record kind this build does not know");
		goto out;
	}
	src = malloc(e->length);
	dst = malloc(out_size ? out_size : 1);
	if (!src || !dst || cdc_decoder_create(&dec) < 0) {
		LOG_ERROR("out of memory");
		goto out;
	}
	ssize_t n = dpk_read(d, i, src, e->length);
	if (n < 0) {
		LOG_ERROR("%s: sample %" PRIu64 ": %s", argv[1], i, strerror((int)-n));
		goto out;
	}
	ret = k->load->decode(dec, e, src, &crop, &o, dst, err, sizeof(err));
	if (ret < 0) {
		LOG_ERROR("%s: sample %" PRIu64 " (%s): %s", argv[1], i, k->name, err);
		goto out;
	}
	fprintf(stderr, "%s label %" PRId64, k->name, e->label);
	if (o.h)
		fprintf(stderr, " shape %ux%ux3", o.h, o.w);
	else
		for (unsigned j = 0; j < e->ndim; j++)
			fprintf(stderr, "%s%u", j ? "x" : " shape ", e->shape[j]);
	fputc('\n', stderr);
	if (fwrite(dst, 1, out_size, stdout) != out_size || fflush(stdout) != 0) {
		LOG_ERROR("stdout: %s", strerror(errno));
		goto out;
	}
	status = 0;
out:
	cdc_decoder_destroy(dec);
	free(src);
	free(dst);
	dpk_close(d);
	return status;
}
