/* ldaug.c - loaderd's per-sample augmentations (codec/augment.h) on raw images, outside the daemon:
 * for comparing them with torchvision (python/tests/test_augment.py) and for timing them
 * (tools/bench/augment_cost.py). Images are raw uint8 RGB, HxWx3, row-major.
 *
 *   ldaug op NAME MAGNITUDE H W [chw]     one op (torchvision's name, e.g. ShearX, or Hue,
 *                                         Saturation, Erase) on stdin, the result on stdout
 *   ldaug resize FILTER AA OH OW H W [X Y CW CH]
 *                                         the crop (X, Y, CW, CH; default the whole image)
 *                                         resized to OH x OW (FILTER bilinear or bicubic, AA 0
 *                                         or 1) as torchvision's F.resized_crop
 *   ldaug spec SPEC                       the CTL_AUGMENT body of SPEC (ldcat --augment), hex
 *   ldaug run SPEC KEY H W [chw]          a job's per-sample ops (SPEC) on one image, drawn
 *                                         from KEY, stdin to stdout
 *   ldaug bench SPEC N H W [REPEAT]       the per-sample ops on N images from stdin, REPEAT
 *                                         times each (keys 0, 1, ...): CPU-seconds per 1,000
 *   ldaug bench-op NAME MAGNITUDE N H W [REPEAT]
 *                                         one op (as `op`) on N images: CPU-s per 1,000
 *   ldaug policy                          AutoAugment's ImageNet policy as loaderd has it (JSON)
 *   ldaug mags SPACE NBINS H W            the magnitude bins of every op of SPACE (rand, wide,
 *                                         auto), one JSON line on stdout
 *
 * Every mode ends on one JSON line on stderr. */
#include "codec/augment.h"
#include "codec/resize_filter.h"
#include "loader/job_aug.h"
#include "shm/ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2
#define SIDE_MAX 8192u

static void usage(void)
{
	fprintf(stderr,
"usage: ldaug op NAME MAGNITUDE H W [chw]   one op on a raw HxWx3 image from stdin, to stdout\n"
"  NAME: a RandAugment op (Identity ShearX ShearY TranslateX TranslateY Rotate Brightness Color\n"
"  Contrast Sharpness Posterize Solarize AutoContrast Equalize Invert, magnitude as torchvision's\n"
"  _apply_op takes it), or Hue (adjust_hue's factor), Saturation, Erase (MAGNITUDE i,j,h,w,v)\n"
"       ldaug mags SPACE NBINS H W           the magnitude bins of SPACE (rand, wide, auto)\n"
"       ldaug resize FILTER AA OH OW H W [X Y CW CH]   a crop resized (bilinear|bicubic, AA 0|1)\n"
"       ldaug spec SPEC                       the CTL_AUGMENT body of SPEC, in hex\n"
"       ldaug run SPEC KEY H W [chw]          a job's per-sample ops on one image\n"
"       ldaug bench SPEC N H W [REPEAT]       their cost on N images: CPU-s per 1,000\n"
"       ldaug bench-op NAME MAGNITUDE N H W [REPEAT]   one op's cost on N images\n");
}

static int read_all(int fd, uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = read(fd, p, n);
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		p += r, n -= (size_t)r;
	}
	return 0;
}

static int parse_side(const char *s, uint32_t *out)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (*s < '0' || *s > '9' || *end || v < 1 || v > SIDE_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* The image from stdin into @px in the layout of @im (HWC or CHW). */
static int load(const struct cdc_img *im, int chw)
{
	size_t n = (size_t)im->h * im->w * 3;
	uint8_t *tmp = malloc(n);
	int ret = tmp ? read_all(0, tmp, n) : -ENOMEM;

	if (ret == 0 && chw) {
		for (size_t i = 0; i < (size_t)im->h * im->w; i++)
			for (int c = 0; c < 3; c++)
				im->px[c * im->cs + i] = tmp[i * 3 + c];
	} else if (ret == 0) {
		memcpy(im->px, tmp, n);
	}
	free(tmp);
	return ret;
}

static int store(const struct cdc_img *im, int chw)
{
	size_t n = (size_t)im->h * im->w * 3;
	uint8_t *tmp = malloc(n);

	if (!tmp)
		return -ENOMEM;
	for (size_t i = 0; i < (size_t)im->h * im->w; i++)
		for (int c = 0; c < 3; c++)
			tmp[i * 3 + c] = chw ? im->px[c * im->cs + i] : im->px[i * 3 + c];
	size_t w = fwrite(tmp, 1, n, stdout);
	free(tmp);
	return w == n && fflush(stdout) == 0 ? 0 : -EIO;
}

static int op_main(int argc, char **argv)
{
	struct cdc_img im;
	uint32_t h, w;
	int chw = argc > 6 && !strcmp(argv[6], "chw");

	if (argc < 6 || parse_side(argv[4], &h) < 0 || parse_side(argv[5], &w) < 0) {
		usage();
		return EXIT_USAGE;
	}
	const char *name = argv[2];
	double mag = strtod(argv[3], NULL);
	uint8_t *px = malloc((size_t)h * w * 3), *scratch = malloc((size_t)h * w * 3);
	if (!px || !scratch) {
		fprintf(stderr, "ldaug: out of memory\n");
		return 1;
	}
	if (chw)
		cdc_img_chw(&im, px, h, w);
	else
		cdc_img_hwc(&im, px, h, w);
	if (load(&im, chw) < 0) {
		fprintf(stderr, "ldaug: stdin: fewer than %u x %u x 3 bytes\n", h, w);
		return 1;
	}
	int known = 1;
	if (!strcmp(name, "Hue")) {
		cdc_aug_hue(&im, mag);
	} else if (!strcmp(name, "Saturation")) {
		cdc_aug_saturation(&im, mag);
	} else if (!strcmp(name, "Erase")) {
		unsigned i, j, eh, ew, v;
		if (sscanf(argv[3], "%u,%u,%u,%u,%u", &i, &j, &eh, &ew, &v) != 5 || v > 255 ||
		    i > h || j > w || eh > h - i || ew > w - j) {
			fprintf(stderr, "ldaug: Erase wants i,j,h,w,v inside the image\n");
			return EXIT_USAGE;
		}
		uint8_t rgb[3] = { (uint8_t)v, (uint8_t)v, (uint8_t)v };
		cdc_aug_erase(&im, i, j, eh, ew, rgb);
	} else {
		int op;
		for (op = 0; op < CDC_OPS && strcmp(cdc_aug_op_names[op], name); op++)
			;
		if (op == CDC_OPS)
			known = 0;
		else
			cdc_aug_apply_op(&im, (enum cdc_aug_op)op, mag, scratch);
	}
	if (!known) {
		fprintf(stderr, "ldaug: unknown op %s\n", name);
		usage();
		return EXIT_USAGE;
	}
	if (store(&im, chw) < 0) {
		fprintf(stderr, "ldaug: stdout: write failed\n");
		return 1;
	}
	fprintf(stderr, "{\"op\": \"%s\", \"magnitude\": %.17g, \"h\": %u, \"w\": %u}\n", name, mag,
		h, w);
	free(px);
	free(scratch);
	return 0;
}

static int mags_main(int argc, char **argv)
{
	static const char *spaces[] = { "rand", "wide", "auto" };
	uint32_t h, w, nbins;
	int sp;

	for (sp = 0; sp < 3 && argc > 2 && strcmp(argv[2], spaces[sp]); sp++)
		;
	if (argc < 6 || sp == 3 || parse_side(argv[3], &nbins) < 0 || nbins > CDC_BINS_MAX ||
	    nbins < 2 || parse_side(argv[4], &h) < 0 || parse_side(argv[5], &w) < 0) {
		usage();
		return EXIT_USAGE;
	}
	printf("{");
	for (int op = 0; op < CDC_OPS; op++) {
		printf("%s\"%s\": [", op ? ", " : "", cdc_aug_op_names[op]);
		for (uint32_t b = 0; b < nbins; b++)
			printf("%s%.17g", b ? ", " : "",
			       cdc_aug_magnitude((enum cdc_aug_space)sp, (enum cdc_aug_op)op, b, nbins,
						 h, w));
		printf("]");
	}
	printf("}\n");
	return 0;
}

static int resize_main(int argc, char **argv)
{
	struct cdc_resize r = { 0 };
	struct cdc_img im;
	uint32_t h, w;
	double x = 0, y = 0, cw, ch;

	if (argc < 8 || (strcmp(argv[2], "bilinear") && strcmp(argv[2], "bicubic")) ||
	    parse_side(argv[4], &r.out_h) < 0 || parse_side(argv[5], &r.out_w) < 0 ||
	    parse_side(argv[6], &h) < 0 || parse_side(argv[7], &w) < 0) {
		usage();
		return EXIT_USAGE;
	}
	r.filter = strcmp(argv[2], "bicubic") ? CDC_FILTER_BILINEAR : CDC_FILTER_BICUBIC;
	r.antialias = !strcmp(argv[3], "1");
	cw = w, ch = h;
	if (argc >= 12) {
		x = strtod(argv[8], NULL), y = strtod(argv[9], NULL);
		cw = strtod(argv[10], NULL), ch = strtod(argv[11], NULL);
		if (!(x >= 0 && y >= 0 && cw >= 1 && ch >= 1 && x + cw <= w && y + ch <= h)) {
			fprintf(stderr, "ldaug: the crop is not inside the image\n");
			return EXIT_USAGE;
		}
	}
	uint8_t *px = malloc((size_t)h * w * 3), *out = malloc((size_t)r.out_h * r.out_w * 3);
	void *work = aligned_alloc(16, (cdc_resize_filter_need(&r, cw, ch) + 15) / 16 * 16);
	if (!px || !out || !work) {
		fprintf(stderr, "ldaug: out of memory\n");
		return 1;
	}
	cdc_img_hwc(&im, px, h, w);
	if (load(&im, 0) < 0) {
		fprintf(stderr, "ldaug: stdin: fewer than %u x %u x 3 bytes\n", h, w);
		return 1;
	}
	cdc_resize_filter(px, w, h, (size_t)w * 3, x, y, cw, ch, &r, out, work);
	cdc_img_hwc(&im, out, r.out_h, r.out_w);
	if (store(&im, 0) < 0)
		return 1;
	fprintf(stderr, "{\"resize\": \"%s\", \"antialias\": %d}\n", argv[2], r.antialias);
	free(px), free(out), free(work);
	return 0;
}

/* SPEC as a job's augmentations (what loaderd makes of a CTL_AUGMENT). 0, or EXIT_USAGE. */
static int job_spec(const char *spec, struct ctl_augment *w, struct ldr_aug *a)
{
	char why[CTL_TEXT_MAX];

	if (ctl_augment_parse(spec, w, why, sizeof(why)) < 0 ||
	    ldr_aug_init(a, w, 1, why, sizeof(why)) < 0) {
		fprintf(stderr, "ldaug: %s\n", why);
		return EXIT_USAGE;
	}
	return 0;
}

static int spec_main(int argc, char **argv)
{
	struct ctl_augment w;
	struct ldr_aug a;

	if (argc < 3) {
		usage();
		return EXIT_USAGE;
	}
	if (job_spec(argv[2], &w, &a))
		return EXIT_USAGE;
	for (size_t i = 0; i < sizeof(w); i++)
		printf("%02x", ((const uint8_t *)&w)[i]);
	printf("\n");
	fprintf(stderr, "{\"digest\": %u}\n", ctl_augment_digest(&w));
	return 0;
}

static int run_main(int argc, char **argv)
{
	struct ctl_augment w;
	struct ldr_aug a;
	struct cdc_img im;
	struct cdc_out o = { 0 };
	uint32_t h, w_;
	int chw = argc > 6 && !strcmp(argv[6], "chw");

	if (argc < 6 || parse_side(argv[4], &h) < 0 || parse_side(argv[5], &w_) < 0) {
		usage();
		return EXIT_USAGE;
	}
	if (job_spec(argv[2], &w, &a))
		return EXIT_USAGE;
	uint64_t key = strtoull(argv[3], NULL, 0);
	uint8_t *px = malloc((size_t)h * w_ * 3), *scratch = NULL;
	size_t cap = 0;
	if (!px)
		return 1;
	o.h = h, o.w = w_, o.nchw = chw;
	if (chw)
		cdc_img_chw(&im, px, h, w_);
	else
		cdc_img_hwc(&im, px, h, w_);
	if (load(&im, chw) < 0) {
		fprintf(stderr, "ldaug: stdin: fewer than %u x %u x 3 bytes\n", h, w_);
		return 1;
	}
	if (ldr_aug_pixels(&a, key, &o, px, &scratch, &cap) < 0 || store(&im, chw) < 0)
		return 1;
	fprintf(stderr, "{\"run\": \"%s\", \"key\": %llu}\n", argv[2], (unsigned long long)key);
	free(px);
	free(scratch);
	return 0;
}

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bench_main(int argc, char **argv)
{
	struct ctl_augment w;
	struct ldr_aug a;
	struct cdc_out o = { 0 };
	uint32_t n, h, w_, rep = 1;

	if (argc < 6 || parse_side(argv[3], &n) < 0 || parse_side(argv[4], &h) < 0 ||
	    parse_side(argv[5], &w_) < 0 || (argc > 6 && parse_side(argv[6], &rep) < 0)) {
		usage();
		return EXIT_USAGE;
	}
	if (job_spec(argv[2], &w, &a))
		return EXIT_USAGE;
	size_t one = (size_t)h * w_ * 3;
	uint8_t *all = malloc(one * n), *px = malloc(one), *scratch = NULL;
	size_t cap = 0;
	if (!all || !px || read_all(0, all, one * n) < 0) {
		fprintf(stderr, "ldaug: stdin: fewer than %u images of %u x %u x 3 bytes\n", n, h, w_);
		return 1;
	}
	o.h = h, o.w = w_;
	uint64_t sum = 0;
	double copy = 0, t0 = cpu_s();
	for (uint32_t r = 0; r < rep; r++)
		for (uint32_t i = 0; i < n; i++) {
			double c0 = cpu_s();
			memcpy(px, all + one * i, one);  /* the decode's output, fresh each time */
			copy += cpu_s() - c0;
			if (ldr_aug_pixels(&a, (uint64_t)r * n + i, &o, px, &scratch, &cap) < 0)
				return 1;
			sum += px[(i * 7919) % one];
		}
	double t = cpu_s() - t0 - copy;
	printf("{\"spec\": \"%s\", \"samples\": %llu, \"h\": %u, \"w\": %u, "
	       "\"cpu_s_per_1000\": %.4f, \"check\": %llu}\n", argv[2],
	       (unsigned long long)n * rep, h, w_, t / ((double)n * rep) * 1000.0,
	       (unsigned long long)sum);
	free(all), free(px), free(scratch);
	return 0;
}

static int bench_op_main(int argc, char **argv)
{
	struct cdc_img im;
	uint32_t n, h, w, rep = 1;
	int op;

	if (argc < 7 || parse_side(argv[4], &n) < 0 || parse_side(argv[5], &h) < 0 ||
	    parse_side(argv[6], &w) < 0 || (argc > 7 && parse_side(argv[7], &rep) < 0)) {
		usage();
		return EXIT_USAGE;
	}
	for (op = 0; op < CDC_OPS && strcmp(cdc_aug_op_names[op], argv[2]); op++)
		;
	if (op == CDC_OPS) {
		fprintf(stderr, "ldaug: unknown op %s\n", argv[2]);
		return EXIT_USAGE;
	}
	double mag = strtod(argv[3], NULL);
	size_t one = (size_t)h * w * 3;
	uint8_t *all = malloc(one * n), *px = malloc(one), *scratch = malloc(one);
	if (!all || !px || !scratch || read_all(0, all, one * n) < 0) {
		fprintf(stderr, "ldaug: stdin: fewer than %u images of %u x %u x 3 bytes\n", n, h, w);
		return 1;
	}
	cdc_img_hwc(&im, px, h, w);
	uint64_t sum = 0;
	double copy = 0, t0 = cpu_s();
	for (uint32_t r = 0; r < rep; r++)
		for (uint32_t i = 0; i < n; i++) {
			double c0 = cpu_s();
			memcpy(px, all + one * i, one);
			copy += cpu_s() - c0;
			cdc_aug_apply_op(&im, (enum cdc_aug_op)op, mag, scratch);
			sum += px[(i * 7919) % one];
		}
	double t = cpu_s() - t0 - copy;
	printf("{\"op\": \"%s\", \"magnitude\": %g, \"samples\": %llu, \"cpu_s_per_1000\": "
	       "%.4f, \"check\": %llu}\n", argv[2], mag, (unsigned long long)n * rep,
	       t / ((double)n * rep) * 1000.0, (unsigned long long)sum);
	free(all), free(px), free(scratch);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "policy")) {  /* AutoAugment's ImageNet policy, JSON */
		enum cdc_aug_op op;
		double p;
		int bin;
		printf("[");
		for (unsigned i = 0; cdc_aug_imagenet_policy(i, 0, &op, &p, &bin) == 0; i++)
			for (unsigned k = 0; k < 2; k++) {
				cdc_aug_imagenet_policy(i, k, &op, &p, &bin);
				printf("%s[\"%s\", %g, %d]", i || k ? ", " : "",
				       cdc_aug_op_names[op], p, bin);
			}
		printf("]\n");
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "bench-op"))
		return bench_op_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "spec"))
		return spec_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "run"))
		return run_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "bench"))
		return bench_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "resize"))
		return resize_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "mags"))
		return mags_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "op"))
		return op_main(argc, argv);
	usage();
	return EXIT_USAGE;
}
