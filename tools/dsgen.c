/* dsgen.c - deterministic generator of ImageNet-like test data for the tests and benchmarks:
 * an ImageFolder tree of JPEGs, the same images as one WebDataset tar shard, or a CIFAR-like
 * pair of .npy arrays. The same arguments give byte-identical output on the same machine,
 * whatever --jobs is: every image draws from its own PRNG stream keyed by (seed, class, index).
 *
 * Content: class c of K has a base colour whose hue sits at c/K on the colour circle (saturation
 * alternating between two levels by parity of c), and stripes whose orientation and period also
 * depend on c. Each image adds random stripe phase, small hue/saturation/orientation/period
 * jitter, brightness jitter and pixel noise. Nothing depends on the position in the image, so a
 * random-resized crop of any scale keeps the class's mean colour, and colour alone separates
 * classes after downsampling to 16x16 (texture does not survive that; it is there for models
 * that look at full resolution). Colour gets crowded beyond a few dozen classes: the mean colour
 * of a random crop picks the right class 100% of the time with K = 10, ~50% with K = 100.
 *
 * DESIGN (threads): J workers claim image numbers from a counter under one mutex and render and
 * compress them with their own TurboJPEG handle and buffers. For imagefolder each worker writes
 * its own files. For wds the main thread writes the tar in sample order: a worker hands its JPEG
 * over by swapping buffers with slot (s % window); workers may run at most `window` samples
 * ahead of the writer, which bounds memory whatever the shard size. One condition variable
 * serves both waits (room in the window, slot ready); every change is broadcast. The first error
 * is kept in pool.err and stops everybody.
 */
#include "common/afile.h"
#include "common/args.h"
#include "common/fdio.h"
#include "common/log.h"
#include "common/mix.h"
#include "common/proc.h"
#include "common/tjcheck.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <turbojpeg.h>
#include <unistd.h>

#define EXIT_USAGE 2

#define SIDE_MAX 8192             /* pixels; one RGB buffer of SIDE_MAX^2*3 per worker */
#define CLASSES_MAX 1000000u      /* class names are n%08u */
#define IMAGES_MAX 100000000ull   /* image numbers are uint32 */
#define NPY_COUNT_MAX (1ull << 31) /* npy records: labels are held as uint32 while drawn */
#define JOBS_MAX 1024
#define NPY_SIDE_MAX 4096

/* ---- PRNG: splitmix64 to derive keys, xoshiro256** for the streams ---- */

struct rng {
	uint64_t s[4];
};

/* Independent stream for (seed, domain, a, b): the domain keeps image, order and label streams
 * apart even where their indices coincide. */
static void rng_init(struct rng *r, uint64_t seed, uint64_t domain, uint64_t a, uint64_t b)
{
	const uint64_t golden = MIX_GOLDEN;
	uint64_t k = mix64(seed + golden);

	k = mix64(k ^ (domain * golden));
	k = mix64(k ^ (a + golden));
	k = mix64(k ^ (b * golden + 1));
	for (int i = 0; i < 4; i++) {
		k += golden;
		r->s[i] = mix64(k);
	}
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

/* Uniform in [0, 1). */
static double rng_unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1p-53;
}

static double rng_range(struct rng *r, double lo, double hi)
{
	return lo + (hi - lo) * rng_unit(r);
}

/* Uniform integer in [lo, hi] (Lemire's multiply; the bias for ranges this small is nil). */
static uint32_t rng_int(struct rng *r, uint32_t lo, uint32_t hi)
{
	uint64_t span = (uint64_t)hi - lo + 1;

	return lo + (uint32_t)(((rng_next(r) >> 32) * span) >> 32);
}

static void shuffle_u32(uint32_t *v, size_t n, struct rng *r)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)(((rng_next(r) >> 11) * (uint64_t)i) >> 53);
		uint32_t t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

enum { DOM_IMAGE = 1, DOM_ORDER, DOM_NPY_LABELS, DOM_NPY_IMAGE };

/* ---- image content ---- */

#define LUT_BITS 10
static int32_t sin_lut[1 << LUT_BITS];  /* sin * 1024; filled once by main before any thread */

static void sin_lut_init(void)
{
	for (int i = 0; i < (1 << LUT_BITS); i++)
		sin_lut[i] = (int32_t)lround(sin(2.0 * M_PI * i / (1 << LUT_BITS)) * 1024.0);
}

/* Everything about one image, drawn from its stream before rendering. The pixel loop is pure
 * integer arithmetic so that the output does not hinge on floating-point contraction. */
struct img_params {
	int w, h;                 /* pixels */
	int quality;              /* 75..95 */
	int subsamp;              /* TJSAMP_420 or TJSAMP_444 */
	int progressive;          /* 0/1 */
	int32_t base[3];          /* RGB base colour, Q8 (0..255*256) */
	int32_t amp;              /* stripe contrast, Q10 (< 1024) */
	uint32_t fx, fy;          /* stripe phase step per pixel in x and y, 2^32 = one period */
	uint32_t ph0;             /* stripe phase at (0, 0) */
	int32_t noise;            /* uniform pixel noise amplitude, +-levels */
};

static void hsv_to_rgb(double h, double s, double v, double rgb[3])
{
	double hh = (h - floor(h)) * 6.0;
	int i = (int)hh % 6;
	double f = hh - floor(hh);
	double p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
	const double tab[6][3] = { { v, t, p }, { q, v, p }, { p, v, t },
				   { p, q, v }, { t, p, v }, { v, p, q } };

	memcpy(rgb, tab[i], sizeof(tab[i]));
}

/* Draw the class- and image-dependent parameters. @scale stretches the stripe period (1 at
 * ImageNet size; smaller for CIFAR-size arrays). */
static void params_draw(struct img_params *p, struct rng *r, uint32_t c, uint32_t k, int w, int h,
			double scale)
{
	/* Class constants: golden-ratio and sqrt(2) sequences spread orientation and period
	 * evenly for any K, and unlike hue they do not follow class order. */
	double cls_theta = M_PI * fmod(c * 0.6180339887498949 + 0.1, 1.0);
	double cls_period = 6.0 + 14.0 * fmod(c * 0.4142135623730951 + 0.25, 1.0);
	double cls_sat = (c & 1) ? 0.85 : 0.55;
	double rgb[3];

	p->w = w;
	p->h = h;
	p->quality = (int)rng_int(r, 75, 95);
	p->subsamp = rng_unit(r) < 0.2 ? TJSAMP_444 : TJSAMP_420;
	p->progressive = rng_unit(r) < 0.05;

	/* Hue jitter stays within +-15% of the class spacing so neighbours' hues never overlap. */
	double hue = (c + rng_range(r, -0.15, 0.15)) / k;
	double sat = cls_sat + rng_range(r, -0.05, 0.05);
	double val = 0.7 * rng_range(r, 0.85, 1.15);

	hsv_to_rgb(hue, sat, val, rgb);
	for (int i = 0; i < 3; i++)
		p->base[i] = (int32_t)lround(rgb[i] * 255.0 * 256.0);

	double theta = cls_theta + rng_range(r, -0.05, 0.05);
	double period = cls_period * rng_range(r, 0.9, 1.1) * scale;

	if (period < 3.0)
		period = 3.0;  /* below that the stripes alias into noise */
	p->amp = (int32_t)lround(rng_range(r, 0.15, 0.3) * 1024.0);
	p->fx = (uint32_t)(int64_t)llround(cos(theta) / period * 4294967296.0);
	p->fy = (uint32_t)(int64_t)llround(sin(theta) / period * 4294967296.0);
	p->ph0 = (uint32_t)(rng_next(r) >> 32);
	p->noise = (int32_t)rng_int(r, 3, 10);
}

/* Render @p into @rgb (w*h*3 bytes, RGB, C order); noise comes from @r. @row is scratch of
 * render_scratch(w) bytes. Three passes per row (stripes, noise bytes, mix) keep the PRNG's
 * serial dependency chain out of the pixel arithmetic (a third faster than one pass). */
static void render(const struct img_params *p, struct rng *r, uint8_t *rgb, void *row)
{
	int32_t *mrow = row;                           /* per-pixel modulation, Q10 */
	uint8_t *nrow = (uint8_t *)(mrow + p->w);      /* 3 random bytes per pixel */
	const int32_t noise = p->noise, nspan = 2 * noise + 1;
	const int32_t b0 = p->base[0], b1 = p->base[1], b2 = p->base[2];
	const int w = p->w, amp = p->amp;
	const uint32_t fx = p->fx;
	const size_t nbytes = (size_t)w * 3;

	for (int y = 0; y < p->h; y++) {
		uint8_t *out = rgb + (size_t)y * nbytes;
		uint32_t ph = p->ph0 + (uint32_t)y * p->fy;

		/* amp < 1024 keeps m positive, so the shifts below never see a negative. */
		for (int x = 0; x < w; x++, ph += fx)
			mrow[x] = (1024 * 1024 + amp * sin_lut[ph >> (32 - LUT_BITS)]) >> 10;
		for (size_t i = 0; i < nbytes; i += 8) {
			uint64_t bits = rng_next(r);

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
			bits = __builtin_bswap64(bits);   /* same bytes as on little-endian */
#endif
			memcpy(nrow + i, &bits, 8);        /* the scratch has 8 bytes of slack */
		}
		/* base (Q8, < 2^16) * m (Q10, < 2^11) fits int32; >> 18 is back to 0..255. */
		for (int x = 0; x < w; x++) {
			int32_t m = mrow[x], n0 = nrow[3 * x], n1 = nrow[3 * x + 1],
				n2 = nrow[3 * x + 2];
			int32_t v0 = ((b0 * m) >> 18) + ((n0 * nspan) >> 8) - noise;
			int32_t v1 = ((b1 * m) >> 18) + ((n1 * nspan) >> 8) - noise;
			int32_t v2 = ((b2 * m) >> 18) + ((n2 * nspan) >> 8) - noise;

			out[3 * x] = (uint8_t)(v0 < 0 ? 0 : v0 > 255 ? 255 : v0);
			out[3 * x + 1] = (uint8_t)(v1 < 0 ? 0 : v1 > 255 ? 255 : v1);
			out[3 * x + 2] = (uint8_t)(v2 < 0 ? 0 : v2 > 255 ? 255 : v2);
		}
	}
}

/* Bytes of scratch render() needs for a row of @w pixels. */
static size_t render_scratch(size_t w)
{
	return w * (sizeof(int32_t) + 3) + 8;
}

/* ---- options ---- */

enum mode { MODE_FOLDER, MODE_WDS, MODE_NPY };

struct opts {
	enum mode mode;
	const char *out[2];        /* OUT_DIR | OUT.tar | IMAGES.npy, LABELS.npy */
	uint64_t classes, per_class, seed, min_side, max_side, jobs;
	uint64_t count, height, width, channels;
};

#define M_IMG ((1u << MODE_FOLDER) | (1u << MODE_WDS))
#define M_NPY (1u << MODE_NPY)
#define M_ALL (M_IMG | M_NPY)

struct optdef {
	const char *name;
	size_t off;                /* offsetof(struct opts, field) */
	uint64_t min, max;
	unsigned modes;            /* bit per enum mode */
};

static const struct optdef optdefs[] = {
	{ "classes", offsetof(struct opts, classes), 1, CLASSES_MAX, M_ALL },
	{ "per-class", offsetof(struct opts, per_class), 1, IMAGES_MAX, M_IMG },
	{ "seed", offsetof(struct opts, seed), 0, UINT64_MAX, M_ALL },
	{ "min-side", offsetof(struct opts, min_side), 1, SIDE_MAX, M_IMG },
	{ "max-side", offsetof(struct opts, max_side), 1, SIDE_MAX, M_IMG },
	{ "jobs", offsetof(struct opts, jobs), 1, JOBS_MAX, M_IMG },
	{ "count", offsetof(struct opts, count), 1, NPY_COUNT_MAX, M_NPY },
	{ "height", offsetof(struct opts, height), 1, NPY_SIDE_MAX, M_NPY },
	{ "width", offsetof(struct opts, width), 1, NPY_SIDE_MAX, M_NPY },
	{ "channels", offsetof(struct opts, channels), 1, 3, M_NPY },
};

static const char *const mode_names[] = { "imagefolder", "wds", "npy" };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: dsgen imagefolder OUT_DIR [options]\n"
		"       dsgen wds OUT.tar [options]\n"
		"       dsgen npy IMAGES.npy LABELS.npy [options]\n"
		"\n"
		"Writes ImageNet-like test data, deterministically: the same arguments give\n"
		"byte-identical output (whatever --jobs is).\n"
		"  imagefolder  OUT_DIR/nCCCCCCCC/nCCCCCCCC_I.JPEG (creates OUT_DIR if missing)\n"
		"  wds          the same images as one WebDataset tar: sample_NNNNNN.jpg and .cls\n"
		"               (class index, decimal + newline), classes interleaved\n"
		"  npy          IMAGES.npy uint8 (N, H, W, C) and LABELS.npy int64 (N,)\n"
		"\n"
		"imagefolder and wds options:\n"
		"  --classes K      number of classes, 1..%u (default 10)\n"
		"  --per-class N    images per class (default 20)\n"
		"  --seed S         any unsigned 64-bit integer (default 1)\n"
		"  --min-side PX    smallest width/height, 1..%d (default 300)\n"
		"  --max-side PX    largest width/height, 1..%d (default 900)\n"
		"  --jobs J         worker threads, 1..%d (default: all cores, here %u)\n"
		"npy options:\n"
		"  --count N        number of images, 1..%llu (default 1000)\n"
		"  --height H       image height, 1..%d (default 32)\n"
		"  --width W        image width, 1..%d (default 32)\n"
		"  --channels C     1 (grey) or 3 (RGB) (default 3)\n"
		"  --classes K      number of classes, 1..%u (default 10)\n"
		"  --seed S         any unsigned 64-bit integer (default 1)\n"
		"Options take their value as '--opt V' or '--opt=V'. --help prints this.\n"
		"Exit status: 0 ok, 1 runtime error (named path and reason), 2 bad usage.\n",
		CLASSES_MAX, SIDE_MAX, SIDE_MAX, JOBS_MAX, proc_cpu_count(), NPY_COUNT_MAX, NPY_SIDE_MAX,
		NPY_SIDE_MAX, CLASSES_MAX);
}

/* arg_u64, and a message that names the option. */
static int parse_u64(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	if (arg_u64(s, min, max, out) == 0)
		return 0;
	LOG_ERROR("--%s: '%s' is not an integer in %" PRIu64 "..%" PRIu64, name, s, min, max);
	return -EINVAL;
}

/* Returns 0, 1 when --help was printed, or -EINVAL after logging what was wrong. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	int npos = 0, want, i = 2;
	int only_pos = 0;

	*o = (struct opts){ .classes = 10, .per_class = 20, .seed = 1, .min_side = 300,
			    .max_side = 900, .jobs = proc_cpu_count(), .count = 1000, .height = 32,
			    .width = 32, .channels = 3 };
	for (int j = 1; j < argc; j++) {
		if (!strcmp(argv[j], "--"))
			break;
		if (!strcmp(argv[j], "--help") || !strcmp(argv[j], "-h")) {
			usage(stdout);
			return 1;
		}
	}
	if (argc < 2) {
		LOG_ERROR("missing mode (imagefolder, wds or npy); see dsgen --help");
		return -EINVAL;
	}
	for (o->mode = 0; o->mode < 3; o->mode++)
		if (!strcmp(argv[1], mode_names[o->mode]))
			break;
	if (o->mode == 3) {
		LOG_ERROR("unknown mode '%s' (imagefolder, wds or npy); see dsgen --help", argv[1]);
		return -EINVAL;
	}
	want = o->mode == MODE_NPY ? 2 : 1;

	for (; i < argc; i++) {
		const char *a = argv[i];

		if (only_pos || a[0] != '-' || a[1] == '\0') {
			if (npos == want) {
				LOG_ERROR("%s: unexpected argument '%s'", mode_names[o->mode], a);
				return -EINVAL;
			}
			o->out[npos++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_pos = 1;
			continue;
		}

		const char *name = a + 2, *val = strchr(a, '=');
		size_t len = val ? (size_t)(val - name) : strlen(name);
		const struct optdef *d = NULL;

		if (a[1] == '-') {
			for (size_t k = 0; k < sizeof(optdefs) / sizeof(optdefs[0]); k++)
				if (strlen(optdefs[k].name) == len &&
				    !strncmp(optdefs[k].name, name, len))
					d = &optdefs[k];
		}
		if (!d || !(d->modes & (1u << o->mode))) {
			LOG_ERROR("%s: unknown option '%s'; see dsgen --help", mode_names[o->mode],
				  a);
			return -EINVAL;
		}
		if (val) {
			val++;
		} else if (i + 1 < argc) {
			val = argv[++i];
		} else {
			LOG_ERROR("--%s: missing value", d->name);
			return -EINVAL;
		}
		if (parse_u64(d->name, val, d->min, d->max, (uint64_t *)((char *)o + d->off)))
			return -EINVAL;
	}
	if (npos < want) {
		LOG_ERROR("%s: missing %s; see dsgen --help", mode_names[o->mode],
			  o->mode == MODE_FOLDER ? "OUT_DIR" : o->mode == MODE_WDS ? "OUT.tar" :
			  npos == 0 ? "IMAGES.npy and LABELS.npy" : "LABELS.npy");
		return -EINVAL;
	}
	if (o->mode != MODE_NPY && o->min_side > o->max_side) {
		LOG_ERROR("--min-side %" PRIu64 " is larger than --max-side %" PRIu64,
			  o->min_side, o->max_side);
		return -EINVAL;
	}
	if (o->mode != MODE_NPY && o->classes * o->per_class > IMAGES_MAX) {
		LOG_ERROR("--classes %" PRIu64 " x --per-class %" PRIu64
			  " is more than %llu images", o->classes, o->per_class, IMAGES_MAX);
		return -EINVAL;
	}
	if (o->mode == MODE_NPY && o->channels == 2) {
		LOG_ERROR("--channels: '2' is not supported (1 or 3)");
		return -EINVAL;
	}
	return 0;
}

/* ---- output files ---- */

/* A file written beside PATH and renamed over it on commit (common/afile.h, not synced: test
 * data), so that a failed run never leaves a truncated PATH that a later test could mistake for
 * data. Buffered: the JPEGs and npy rows arrive in pieces far smaller than a good write size. */
struct outfile {
	struct afile a;
	char *buf;                 /* OUT_BUF bytes */
	size_t used;
	uint64_t size;             /* bytes written so far */
};

#define OUT_BUF (1u << 20)

/* Returns 0 or -errno (logged, naming the path). */
static int out_open(struct outfile *f, const char *path)
{
	int ret;

	*f = (struct outfile){ .a.fd = -1 };
	f->buf = malloc(OUT_BUF);
	ret = f->buf ? afile_open(&f->a, path, AFILE_NO_SYNC) : -ENOMEM;
	if (ret < 0) {
		LOG_ERROR("%s: %s", path, strerror(-ret));
		free(f->buf);
		f->buf = NULL;
	}
	return ret;
}

static int out_flush(struct outfile *f)
{
	int ret = fd_write_all(f->a.fd, f->buf, f->used);

	if (ret < 0)
		LOG_ERROR("%s: %s", f->a.tmp, strerror(-ret));
	f->used = 0;
	return ret;
}

/* Returns 0 or -errno (logged). */
static int out_write(struct outfile *f, const void *data, size_t len)
{
	const char *p = data;
	int ret;

	f->size += len;
	while (len) {
		size_t n = OUT_BUF - f->used < len ? OUT_BUF - f->used : len;

		memcpy(f->buf + f->used, p, n);
		f->used += n;
		p += n;
		len -= n;
		if (f->used == OUT_BUF) {
			ret = out_flush(f);
			if (ret < 0)
				return ret;
		}
	}
	return 0;
}

/* Drop the temporary file unless committed; safe after a failed out_open or out_commit. */
static void out_abort(struct outfile *f)
{
	afile_close(&f->a);
	free(f->buf);
	f->buf = NULL;
}

/* Flush and rename the temporary file over PATH. Returns 0 or -errno (logged; the temporary
 * file is then still there for out_abort to remove). */
static int out_commit(struct outfile *f)
{
	int ret = out_flush(f);

	if (ret < 0)
		return ret;
	ret = afile_commit(&f->a);
	if (ret < 0)
		LOG_ERROR("%s: %s", f->a.path, strerror(-ret));
	return ret;
}

/* mkdir -p. Returns 0 or -errno (logged, naming the component that failed). */
static int mkdir_p(const char *path)
{
	char *p = strdup(path);
	struct stat st;
	int ret = 0;

	if (!p) {
		LOG_ERROR("%s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char saved = *s;

		*s = '\0';
		if (mkdir(p, 0777) < 0 && errno != EEXIST) {
			ret = -errno;
			LOG_ERROR("%s: cannot create directory: %s", p, strerror(-ret));
			goto out;
		}
		*s = saved;
		if (saved == '\0')
			break;
	}
	if (stat(path, &st) < 0) {
		ret = -errno;
		LOG_ERROR("%s: %s", path, strerror(-ret));
	} else if (!S_ISDIR(st.st_mode)) {
		ret = -ENOTDIR;
		LOG_ERROR("%s: %s", path, strerror(ENOTDIR));
	}
out:
	free(p);
	return ret;
}

/* ---- tar (POSIX ustar) ---- */

struct ustar_hdr {
	char name[100];
	char mode[8];
	char uid[8];
	char gid[8];
	char size[12];
	char mtime[12];
	char chksum[8];
	char typeflag;
	char linkname[100];
	char magic[6];
	char version[2];
	char uname[32];
	char gname[32];
	char devmajor[8];
	char devminor[8];
	char prefix[155];
	char pad[12];
};
_Static_assert(sizeof(struct ustar_hdr) == 512, "ustar header is one block");
_Static_assert(offsetof(struct ustar_hdr, chksum) == 148, "ustar chksum offset");
_Static_assert(offsetof(struct ustar_hdr, magic) == 257, "ustar magic offset");
_Static_assert(offsetof(struct ustar_hdr, prefix) == 345, "ustar prefix offset");

/* Zero-padded octal filling all but the last byte of @field, which stays NUL. */
static void octal(char *field, size_t len, uint64_t v)
{
	field[len - 1] = '\0';
	for (size_t i = len - 1; i-- > 0; v >>= 3)
		field[i] = (char)('0' + (v & 7));
	assert(v == 0);  /* callers check the field is wide enough */
}

static int tar_member(struct outfile *f, const char *name, const void *data, size_t len)
{
	static const char zeros[512];
	struct ustar_hdr h;
	unsigned sum = 0;
	int ret;

	/* 11 octal digits hold 8 GiB - 1; a JPEG is far below that. */
	if (strlen(name) >= sizeof(h.name) || (uint64_t)len >= (1ull << 33)) {
		LOG_ERROR("%s: tar member %s too long for ustar", f->a.path, name);
		return -EOVERFLOW;
	}
	memset(&h, 0, sizeof(h));
	memcpy(h.name, name, strlen(name));
	octal(h.mode, sizeof(h.mode), 0644);
	octal(h.uid, sizeof(h.uid), 0);
	octal(h.gid, sizeof(h.gid), 0);
	octal(h.size, sizeof(h.size), len);
	octal(h.mtime, sizeof(h.mtime), 0);  /* fixed: byte-identical shards across runs */
	h.typeflag = '0';
	memcpy(h.magic, "ustar", 6);
	memcpy(h.version, "00", 2);
	octal(h.devmajor, sizeof(h.devmajor), 0);
	octal(h.devminor, sizeof(h.devminor), 0);
	memset(h.chksum, ' ', sizeof(h.chksum));
	for (size_t i = 0; i < sizeof(h); i++)
		sum += ((const unsigned char *)&h)[i];
	octal(h.chksum, 7, sum);  /* six digits, NUL, then the space already there */

	ret = out_write(f, &h, sizeof(h));
	if (ret < 0)
		return ret;
	ret = out_write(f, data, len);
	if (ret < 0)
		return ret;
	if (len % 512)
		ret = out_write(f, zeros, 512 - len % 512);
	return ret;
}

/* ---- the worker pool ---- */

struct slot {
	unsigned char *jpeg;       /* tjAlloc'd, cap bytes; swapped with the worker's buffer */
	unsigned long cap, len;
	uint32_t cls;
	int ready;                 /* 1 from the worker's deposit until the writer consumed it */
};

struct pool {
	const struct opts *o;
	const uint32_t *order;     /* wds: sample s is image order[s]; NULL: identity */
	size_t n;                  /* images */
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* window room, slot ready, error: always broadcast */
	size_t next;               /* next sample to claim; under lock */
	size_t consumed;           /* wds: samples written to the tar; under lock */
	size_t window;             /* wds: slots; imagefolder: n (no ordering) */
	struct slot *slots;        /* wds only */
	int err;                   /* first -errno; under lock */
	uint64_t bytes;            /* imagefolder: JPEG bytes written; under lock */
};

static void pool_fail(struct pool *p, int err)
{
	pthread_mutex_lock(&p->lock);
	if (!p->err)
		p->err = err;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

struct worker {
	struct pool *pool;
	pthread_t thread;
	tjhandle tj;
	uint8_t *rgb;              /* max_side^2 * 3 bytes */
	void *row;                 /* render_scratch(max_side) bytes */
	unsigned char *jpeg;       /* tjAlloc'd */
	unsigned long cap, len;    /* jpeg capacity and compressed size */
};

/* Render and compress image @id (class id / per_class, index id % per_class) into w->jpeg. */
static int make_jpeg(struct worker *w, uint32_t id)
{
	const struct opts *o = w->pool->o;
	uint32_t c = (uint32_t)(id / o->per_class), idx = (uint32_t)(id % o->per_class);
	struct img_params p;
	struct rng r;
	unsigned long need;
	int width, height, ret = 0;

	rng_init(&r, o->seed, DOM_IMAGE, c, idx);
	width = (int)rng_int(&r, (uint32_t)o->min_side, (uint32_t)o->max_side);
	height = (int)rng_int(&r, (uint32_t)o->min_side, (uint32_t)o->max_side);
	params_draw(&p, &r, c, (uint32_t)o->classes, width, height, 1.0);
	render(&p, &r, w->rgb, w->row);

	/* Size the buffer for the worst case so TurboJPEG never reallocates behind our back
	 * (NOREALLOC) and a buffer's capacity is always known when it changes hands. */
	need = tjBufSize(width, height, p.subsamp);
	assert(need != (unsigned long)-1 && need <= INT_MAX);  /* SIDE_MAX keeps it small */
	if (w->cap < need) {
		tjFree(w->jpeg);
		w->jpeg = tjAlloc((int)need);
		w->cap = w->jpeg ? need : 0;
		if (!w->jpeg) {
			LOG_ERROR("JPEG buffer of %lu bytes: %s", need, strerror(ENOMEM));
			return -ENOMEM;
		}
	}
	/* libjpeg-turbo before 3.1.0 does not reset the Huffman tables in jpeg_set_defaults()
	 * once a handle has optimized them (progressive mode does), so a baseline image
	 * compressed on that handle afterwards uses the previous image's tables: corrupt data
	 * ("bad Huffman code"). Progressive images therefore get a handle of their own, which
	 * also keeps each JPEG a function of its image alone, whatever ran before. */
	tjhandle tj = w->tj;

	if (p.progressive) {
		tj = tjInitCompress();
		if (!tj) {
			LOG_ERROR("tjInitCompress: %s", tjGetErrorStr2(NULL));
			return -ENOMEM;
		}
	}
	w->len = w->cap;
	TJCHECK(tjCompress2(tj, w->rgb, width, 0, height, TJPF_RGB, &w->jpeg, &w->len, p.subsamp,
			    p.quality, TJFLAG_NOREALLOC | (p.progressive ? TJFLAG_PROGRESSIVE : 0)),
		tj, ret, out);
out:
	if (tj != w->tj)
		tjDestroy(tj);
	return ret;
}

/* imagefolder: OUT_DIR/nCCCCCCCC/nCCCCCCCC_I.JPEG through a temporary file and rename. */
static int write_jpeg_file(const struct opts *o, uint32_t id, const void *data, size_t len)
{
	uint32_t c = (uint32_t)(id / o->per_class), idx = (uint32_t)(id % o->per_class);
	char path[PATH_MAX];
	struct afile f;
	int ret;

	if (snprintf(path, sizeof(path), "%s/n%08" PRIu32 "/n%08" PRIu32 "_%" PRIu32 ".JPEG",
		     o->out[0], c, c, idx) >= (int)sizeof(path)) {
		LOG_ERROR("%s/...: %s", o->out[0], strerror(ENAMETOOLONG));
		return -ENAMETOOLONG;
	}
	ret = afile_open(&f, path, AFILE_NO_SYNC);
	if (ret == 0)
		ret = fd_write_all(f.fd, data, len);
	if (ret == 0)
		ret = afile_commit(&f);
	if (ret < 0)
		LOG_ERROR("%s: %s", path, strerror(-ret));
	afile_close(&f);
	return ret;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct pool *p = w->pool;
	size_t side = (size_t)p->o->max_side;
	int ret = 0;

	w->tj = tjInitCompress();
	if (!w->tj) {
		LOG_ERROR("tjInitCompress: %s", tjGetErrorStr2(NULL));
		ret = -ENOMEM;
		goto out;
	}
	w->rgb = malloc(side * side * 3);
	w->row = malloc(render_scratch(side));
	if (!w->rgb || !w->row) {
		ret = -ENOMEM;
		LOG_ERROR("image buffer of %zu bytes: %s", side * side * 3, strerror(ENOMEM));
		goto out;
	}
	for (;;) {
		size_t s;

		pthread_mutex_lock(&p->lock);
		while (!p->err && p->next < p->n && p->next >= p->consumed + p->window)
			pthread_cond_wait(&p->cond, &p->lock);
		if (p->err || p->next >= p->n) {
			pthread_mutex_unlock(&p->lock);
			break;
		}
		s = p->next++;
		pthread_mutex_unlock(&p->lock);

		uint32_t id = p->order ? p->order[s] : (uint32_t)s;

		ret = make_jpeg(w, id);
		if (ret < 0)
			goto out;
		if (!p->slots) {
			ret = write_jpeg_file(p->o, id, w->jpeg, w->len);
			if (ret < 0)
				goto out;
			pthread_mutex_lock(&p->lock);
			p->bytes += w->len;
			pthread_mutex_unlock(&p->lock);
			continue;
		}

		/* Hand the JPEG over by swapping buffers: slot s % window is free because the
		 * writer has consumed sample s - window (we waited for consumed > s - window). */
		struct slot *sl = &p->slots[s % p->window];
		unsigned char *tb;
		unsigned long tc;

		pthread_mutex_lock(&p->lock);
		assert(!sl->ready);
		tb = sl->jpeg;
		tc = sl->cap;
		sl->jpeg = w->jpeg;
		sl->cap = w->cap;
		sl->len = w->len;
		sl->cls = (uint32_t)(id / p->o->per_class);
		sl->ready = 1;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);
		w->jpeg = tb;
		w->cap = tc;
	}
out:
	if (ret < 0)
		pool_fail(p, ret);  /* already logged where it failed */
	tjFree(w->jpeg);
	w->jpeg = NULL;
	free(w->rgb);
	free(w->row);
	w->rgb = NULL;
	w->row = NULL;
	if (w->tj)
		tjDestroy(w->tj);
	w->tj = NULL;
	return NULL;
}

/* wds writer, on the main thread: consume samples in order. Returns 0 or -errno. */
static int wds_write(struct pool *p, struct outfile *f)
{
	for (size_t s = 0; s < p->n; s++) {
		struct slot *sl = &p->slots[s % p->window];
		char name[64], cls[16];
		int ret;

		pthread_mutex_lock(&p->lock);
		while (!p->err && !sl->ready)
			pthread_cond_wait(&p->cond, &p->lock);
		ret = p->err;
		pthread_mutex_unlock(&p->lock);
		if (ret < 0)
			return ret;

		/* The worker does not touch slot s % window again until `consumed` passes s. */
		snprintf(name, sizeof(name), "sample_%06zu.jpg", s);
		ret = tar_member(f, name, sl->jpeg, sl->len);
		if (ret == 0) {
			int n = snprintf(cls, sizeof(cls), "%" PRIu32 "\n", sl->cls);

			snprintf(name, sizeof(name), "sample_%06zu.cls", s);
			ret = tar_member(f, name, cls, (size_t)n);
		}
		if (ret < 0) {
			pool_fail(p, ret);
			return ret;
		}
		pthread_mutex_lock(&p->lock);
		sl->ready = 0;
		p->consumed = s + 1;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);
	}
	return 0;
}

/* imagefolder and wds. Returns 0 or -errno (logged). */
static int gen_images(const struct opts *o)
{
	size_t n = (size_t)(o->classes * o->per_class);
	size_t jobs = o->jobs < n ? (size_t)o->jobs : n;
	struct pool p = { .o = o, .n = n, .window = n };
	struct worker *w = NULL;
	uint32_t *order = NULL;
	struct outfile f = { .a.fd = -1 };
	size_t started = 0;
	int ret;

	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.cond, NULL);
	if (o->mode == MODE_FOLDER) {
		char dir[PATH_MAX];

		ret = mkdir_p(o->out[0]);
		if (ret < 0)
			goto out;
		for (uint32_t c = 0; c < o->classes; c++) {
			if (snprintf(dir, sizeof(dir), "%s/n%08" PRIu32, o->out[0], c) >=
			    (int)sizeof(dir)) {
				ret = -ENAMETOOLONG;
				LOG_ERROR("%s: %s", o->out[0], strerror(-ret));
				goto out;
			}
			if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
				ret = -errno;
				LOG_ERROR("%s: cannot create directory: %s", dir, strerror(-ret));
				goto out;
			}
		}
	} else {
		struct rng r;

		/* A random permutation of all images interleaves the classes; its stream does
		 * not depend on the images' own streams. */
		order = malloc(n * sizeof(*order));
		p.window = 4 * jobs;
		p.slots = calloc(p.window, sizeof(*p.slots));
		if (!order || !p.slots) {
			ret = -ENOMEM;
			LOG_ERROR("%s: %s", o->out[0], strerror(ENOMEM));
			goto out;
		}
		for (size_t i = 0; i < n; i++)
			order[i] = (uint32_t)i;
		rng_init(&r, o->seed, DOM_ORDER, 0, 0);
		shuffle_u32(order, n, &r);
		p.order = order;
		ret = out_open(&f, o->out[0]);
		if (ret < 0)
			goto out;
	}

	w = calloc(jobs, sizeof(*w));
	if (!w) {
		ret = -ENOMEM;
		LOG_ERROR("%s", strerror(ENOMEM));
		goto out;
	}
	for (; started < jobs; started++) {
		w[started].pool = &p;
		ret = -pthread_create(&w[started].thread, NULL, worker_main, &w[started]);
		if (ret < 0) {
			LOG_ERROR("pthread_create: %s", strerror(-ret));
			pool_fail(&p, ret);
			break;
		}
	}
	ret = 0;
	if (o->mode == MODE_WDS && started > 0)
		ret = wds_write(&p, &f);
	for (size_t i = 0; i < started; i++)
		pthread_join(w[i].thread, NULL);
	if (p.err < 0)
		ret = p.err;
	if (ret < 0)
		goto out;

	uint64_t bytes = p.bytes;

	if (o->mode == MODE_WDS) {
		static const char zeros[1024];

		ret = out_write(&f, zeros, sizeof(zeros));  /* end-of-archive: two zero blocks */
		bytes = f.size;
		if (ret == 0)
			ret = out_commit(&f);
		if (ret < 0)
			goto out;
	}
	printf("dsgen: %zu images, %" PRIu64 " classes, %" PRIu64 " bytes in %s\n", n, o->classes,
	       bytes, o->out[0]);
out:
	out_abort(&f);
	if (p.slots)
		for (size_t i = 0; i < p.window; i++)
			tjFree(p.slots[i].jpeg);
	free(p.slots);
	free(order);
	free(w);
	pthread_cond_destroy(&p.cond);
	pthread_mutex_destroy(&p.lock);
	return ret;
}

/* ---- npy ---- */

/* npy 1.0 header: magic, version, u16 LE length, dict padded with spaces to end in '\n' at a
 * multiple of 64 bytes (what numpy itself writes, so the data is aligned). */
static int npy_header(struct outfile *f, const char *descr, const char *shape)
{
	char h[256];
	int n = snprintf(h + 10, sizeof(h) - 10,
			 "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
	size_t total;

	assert(n > 0 && (size_t)n < sizeof(h) - 10 - 64);
	total = (10 + (size_t)n + 1 + 63) & ~(size_t)63;
	memcpy(h, "\x93NUMPY\x01\x00", 8);
	h[8] = (char)((total - 10) & 0xff);
	h[9] = (char)((total - 10) >> 8);
	memset(h + 10 + n, ' ', total - 10 - (size_t)n - 1);
	h[total - 1] = '\n';
	return out_write(f, h, total);
}

static int gen_npy(const struct opts *o)
{
	size_t n = (size_t)o->count, h = (size_t)o->height, w = (size_t)o->width;
	size_t ch = (size_t)o->channels, px = h * w;
	uint32_t *labels = malloc(n * sizeof(*labels));
	uint8_t *rgb = malloc(px * 3);
	void *row = malloc(render_scratch(w));
	struct outfile fi = { .a.fd = -1 }, fl = { .a.fd = -1 };
	char shape[128];
	struct rng r;
	int ret;

	if (!labels || !rgb || !row) {
		ret = -ENOMEM;
		LOG_ERROR("%s: %s", o->out[0], strerror(ENOMEM));
		goto out;
	}
	/* Balanced like CIFAR (counts differ by at most one), in random order. */
	for (size_t i = 0; i < n; i++)
		labels[i] = (uint32_t)(i % o->classes);
	rng_init(&r, o->seed, DOM_NPY_LABELS, 0, 0);
	shuffle_u32(labels, n, &r);

	ret = out_open(&fi, o->out[0]);
	if (ret < 0)
		goto out;
	ret = out_open(&fl, o->out[1]);
	if (ret < 0)
		goto out;
	snprintf(shape, sizeof(shape), "(%zu, %zu, %zu, %zu)", n, h, w, ch);
	ret = npy_header(&fi, "|u1", shape);
	if (ret < 0)
		goto out;
	snprintf(shape, sizeof(shape), "(%zu,)", n);
	ret = npy_header(&fl, "<i8", shape);
	if (ret < 0)
		goto out;

	/* Stripe periods shrink with the image (ImageNet crops are ~224 px), floored at 3 px. */
	double scale = (double)(h < w ? h : w) / 224.0;

	for (size_t i = 0; i < n; i++) {
		struct img_params p;
		unsigned char le[8];
		uint64_t v = labels[i];

		rng_init(&r, o->seed, DOM_NPY_IMAGE, i, 0);
		params_draw(&p, &r, labels[i], (uint32_t)o->classes, (int)w, (int)h, scale);
		render(&p, &r, rgb, row);
		if (ch == 1) {
			/* BT.601 luma, in place: pixel k reads bytes 3k.. before writing byte k. */
			for (size_t k = 0; k < px; k++)
				rgb[k] = (uint8_t)((77 * rgb[3 * k] + 150 * rgb[3 * k + 1] +
						    29 * rgb[3 * k + 2]) >> 8);
		}
		ret = out_write(&fi, rgb, px * ch);
		if (ret < 0)
			goto out;
		for (int b = 0; b < 8; b++, v >>= 8)
			le[b] = (unsigned char)(v & 0xff);
		ret = out_write(&fl, le, sizeof(le));
		if (ret < 0)
			goto out;
	}

	uint64_t bytes = fi.size + fl.size;

	ret = out_commit(&fi);
	if (ret < 0)
		goto out;
	ret = out_commit(&fl);
	if (ret < 0) {
		unlink(o->out[0]);  /* images without labels would pass for a dataset */
		goto out;
	}
	printf("dsgen: %zu images, %" PRIu64 " classes, %" PRIu64 " bytes in %s, %s\n", n,
	       o->classes, bytes, o->out[0], o->out[1]);
out:
	out_abort(&fi);
	out_abort(&fl);
	free(rgb);
	free(row);
	free(labels);
	return ret;
}

int main(int argc, char **argv)
{
	struct opts o;
	int ret;

	log_prog = "dsgen";
	ret = parse_args(argc, argv, &o);
	if (ret)
		return ret > 0 ? 0 : EXIT_USAGE;
	sin_lut_init();
	ret = o.mode == MODE_NPY ? gen_npy(&o) : gen_images(&o);
	if (fflush(stdout) == EOF && ret == 0) {
		LOG_ERROR("stdout: %s", strerror(errno));
		ret = -EIO;
	}
	return ret < 0 ? 1 : 0;
}
