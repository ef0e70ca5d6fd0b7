/* gpu_util.h - shared by the GPU tests (tests/gpu_*.c, run by `make test-gpu`, never by `make
 * test`): open the CUDA device or skip, TAP-style checks, a seeded generator, and moving buffers
 * to and from a device. Header-only (static functions): each test is one .c file.
 *
 * Plain checks rather than cmocka: the GPU machine gets these binaries from scripts/gpu-bundle.sh
 * and has no cmocka, and every check here compares data, so one counter and a message suffice.
 *
 * Every test takes --self-check: the host device (and the MPI backend) stand in for CUDA (and
 * NCCL), so that the test's own logic, shapes and comparisons can be exercised on a machine
 * without a GPU. It checks the test, not the GPU. Without it and without a GPU (or in a build
 * without CUDA) the test prints one line and exits 77 (skip).
 *
 * GPU_TEST_SEED (default 1) seeds the inputs; every test prints it. */
#ifndef LOADERD_GPU_UTIL_H
#define LOADERD_GPU_UTIL_H
#include "trainer/dev.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPU_EXIT_SKIP 77

static int g_checks, g_fails, g_self;
static uint64_t g_seed = 1;

/* One numbered check: "ok N - what" or "not ok N - what (file:line)". Returns @ok. */
#define CHECK(ok, ...) check_at(!!(ok), __FILE__, __LINE__, __VA_ARGS__)

__attribute__((format(printf, 4, 5)))
static inline int check_at(int ok, const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	g_checks++;
	g_fails += !ok;
	printf("%s %d - ", ok ? "ok" : "not ok", g_checks);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	if (!ok)
		printf(" (%s:%d)", file, line);
	printf("\n");
	fflush(stdout);
	return ok;
}

/* A failure of the harness itself (allocation, a device call the test relies on to set up):
 * not a finding about the data, so no point going on. */
__attribute__((format(printf, 1, 2), noreturn))
static inline void harness_die(const char *fmt, ...)
{
	va_list ap;

	printf("not ok - harness: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

/* Summary line and exit status: 0 when every check passed. */
static inline int gpu_done(const char *name)
{
	printf("# %s: %d checks, %d failed%s\n", name, g_checks, g_fails,
	       g_self ? " (--self-check: host device for CUDA; the GPU was not tested)" : "");
	return g_fails ? 1 : 0;
}

/* ---- seeded inputs: splitmix64 ---- */

struct gpu_rng {
	uint64_t s;
};

static inline uint64_t rng_next(struct gpu_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline float rng_uniform(struct gpu_rng *r, float lo, float hi)
{
	return lo + (hi - lo) * (float)((double)(rng_next(r) >> 11) * 0x1.0p-53);
}

static inline void fill_uniform(struct gpu_rng *r, float *x, size_t n, float lo, float hi)
{
	for (size_t i = 0; i < n; i++)
		x[i] = rng_uniform(r, lo, hi);
}

static inline void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		harness_die("out of host memory (%zu bytes)", n);
	return p;
}

/* ---- setup ---- */

/* Take --self-check out of argv (the rest stay in order for the test; returns the new argc) and
 * open the device under test into *out: GPU 0, or the host device with --self-check. Exits 77
 * with one line when there is no GPU or no CUDA in this build, 1 on another failure. */
static inline int gpu_open(const char *name, int argc, char **argv, struct trn_dev **out)
{
	char err[512];
	const char *s = getenv("GPU_TEST_SEED");
	int n = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--self-check"))
			g_self = 1;
		else
			argv[n++] = argv[i];
	}
	argv[n] = NULL;
	if (s && *s)
		g_seed = strtoull(s, NULL, 0);
	if (g_self) {
		if (trn_dev_host_open(out) < 0)
			harness_die("out of memory opening the host device");
		printf("# %s --self-check: the host device stands in for CUDA; this checks the test, "
		       "not the GPU\n", name);
	} else {
		int ret = trn_dev_cuda_open(0, out, err, sizeof(err));
		if (ret == -ENODEV) {
			printf("# skip: %s: %s\n", name, err);
			exit(GPU_EXIT_SKIP);
		}
		if (ret < 0) {
			printf("not ok - %s: opening the CUDA device: %s\n", name, err);
			exit(1);
		}
		printf("# %s: CUDA device %d\n", name, (*out)->ordinal);
	}
	printf("# seed %" PRIu64 " (GPU_TEST_SEED)\n", g_seed);
	return n;
}

/* ---- device buffers: uploads on the copy stream, downloads on the compute stream (where the
 * ops run, so a download is ordered after them); both wait until done ---- */

static inline void *dev_put(struct trn_dev *d, const void *host, size_t n)
{
	void *p = d->ops->alloc(d, n);

	if (!p)
		harness_die("%s: alloc %zu bytes: %s", d->ops->name, n, d->err);
	if (n && (d->ops->copy_h2d(d, TRN_STREAM_COPY, p, host, n) < 0 ||
		  d->ops->sync(d, TRN_STREAM_COPY) < 0))
		harness_die("%s: upload %zu bytes: %s", d->ops->name, n, d->err);
	return p;
}

static inline void dev_get(struct trn_dev *d, void *host, const void *dptr, size_t n)
{
	if (n && (d->ops->copy_d2h(d, TRN_STREAM_COMPUTE, host, dptr, n) < 0 ||
		  d->ops->sync(d, TRN_STREAM_COMPUTE) < 0))
		harness_die("%s: download %zu bytes: %s", d->ops->name, n, d->err);
}

/* ---- comparisons ---- */

/* Bit-for-bit equality of @n floats; on a difference, prints the first and the count. */
static inline int same_floats(const char *what, const float *got, const float *ref, size_t n)
{
	size_t bad = 0, first = 0;
	double mx = 0;

	for (size_t i = 0; i < n; i++)
		if (memcmp(&got[i], &ref[i], sizeof(float)) != 0) {
			if (!bad++)
				first = i;
			double d = fabs((double)got[i] - (double)ref[i]);
			if (d > mx || d != d)
				mx = d;
		}
	if (bad)
		printf("#   %s: %zu of %zu differ, first [%zu] %.9g vs %.9g, max |diff| %.3g\n", what, bad,
		       n, first, (double)got[first], (double)ref[first], mx);
	return bad == 0;
}

/* Relative L2 distance ||a - b|| / ||b|| (0 when both are zero). */
static inline double rel_l2(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - (double)b[i];
		num += d * d;
		den += (double)b[i] * (double)b[i];
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline int all_finite(const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return 0;
	return 1;
}

#endif
