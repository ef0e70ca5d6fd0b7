/* check.c - dpack verify (recompute every record checksum, in parallel, reading contiguous runs
 * of records with one pread) and dpack inspect (counts, classes, kinds, histograms; text or
 * JSON). */
#include "common/args.h"
#include "common/clk.h"
#include "common/log.h"
#include "common/proc.h"
#include "formats/dpk.h"
#include "tools/dpack/dpack.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- verify ---- */

#define VERIFY_CHUNK 256            /* records a worker claims at once */
#define VERIFY_SPAN_MAX (32u << 20) /* read a chunk in one pread when it spans at most this */

struct verify {
	const struct dpk *d;
	uint64_t next;              /* next record to claim; under lock */
	pthread_mutex_t lock;
	uint64_t *bad;              /* bad sample ids; under lock */
	uint64_t nbad, capbad;
	int io_err;                 /* first -errno from a read; under lock */
};

static void add_bad(struct verify *v, uint64_t id)
{
	pthread_mutex_lock(&v->lock);
	if (v->nbad == v->capbad) {
		uint64_t cap = v->capbad ? v->capbad * 2 : 64;
		uint64_t *t = realloc(v->bad, cap * sizeof(*t));
		if (!t) {
			pthread_mutex_unlock(&v->lock);
			abort();  /* cannot report what we found: do not pretend the file is clean */
		}
		v->bad = t;
		v->capbad = cap;
	}
	v->bad[v->nbad++] = id;
	pthread_mutex_unlock(&v->lock);
}

#define BAD_AUX (1ull << 63)    /* a bad id's mark: its aux fields, not its record, are bad */

/* Records [@a, @b)'s aux fields read and checked (dpk_aux_read): a bad one is added, marked. */
static int verify_aux(struct verify *v, uint64_t a, uint64_t b, uint8_t *abuf)
{
	for (uint64_t i = a; i < b && abuf; i++) {
		ssize_t r = dpk_aux_read(v->d, i, dpk_entry_get(v->d, i), abuf, DPK_AUX_RECORD_MAX,
					 NULL, 0);
		if (r == -EBADMSG) {
			add_bad(v, i | BAD_AUX);
		} else if (r < 0) {
			pthread_mutex_lock(&v->lock);
			v->io_err = (int)r;
			pthread_mutex_unlock(&v->lock);
			return -1;
		}
	}
	return 0;
}

static void *verify_worker(void *arg)
{
	struct verify *v = arg;
	uint64_t n = dpk_count(v->d);
	uint8_t *buf = NULL;
	size_t cap = 0;
	uint8_t *abuf = dpk_aux_fields(v->d) ? malloc(DPK_AUX_RECORD_MAX) : NULL;

	if (dpk_aux_fields(v->d) && !abuf)
		abort();

	for (;;) {
		pthread_mutex_lock(&v->lock);
		uint64_t a = v->next, b;
		v->next = a + VERIFY_CHUNK < n ? a + VERIFY_CHUNK : n;
		b = v->next;
		int stop = v->io_err != 0;
		pthread_mutex_unlock(&v->lock);
		if (a >= n || stop)
			break;

		const struct dpk_entry *ea = dpk_entry_get(v->d, a), *eb = dpk_entry_get(v->d, b - 1);
		/* Entries are in file order and do not overlap (checked at open). */
		uint64_t span = eb->offset + eb->length - ea->offset;
		if (span <= VERIFY_SPAN_MAX) {
			if (span > cap) {
				free(buf);
				cap = span;
				buf = malloc(cap);
				if (!buf)
					abort();
			}
			ssize_t r = pread(dpk_fd(v->d), buf, span, (off_t)ea->offset);
			if (r != (ssize_t)span) {
				pthread_mutex_lock(&v->lock);
				v->io_err = r < 0 ? -errno : -EIO;
				pthread_mutex_unlock(&v->lock);
				break;
			}
			for (uint64_t i = a; i < b; i++) {
				const struct dpk_entry *e = dpk_entry_get(v->d, i);
				if (dpk_record_check(e, buf + (e->offset - ea->offset)) < 0)
					add_bad(v, i);
			}
			if (verify_aux(v, a, b, abuf) < 0)
				break;
			continue;
		}
		for (uint64_t i = a; i < b; i++) {
			const struct dpk_entry *e = dpk_entry_get(v->d, i);
			if (e->length > cap) {
				free(buf);
				cap = e->length;
				buf = malloc(cap);
				if (!buf)
					abort();
			}
			ssize_t r = dpk_read(v->d, i, buf, cap);
			if (r == -EBADMSG) {
				add_bad(v, i);
			} else if (r < 0) {
				pthread_mutex_lock(&v->lock);
				v->io_err = (int)r;
				pthread_mutex_unlock(&v->lock);
				break;
			}
		}
		if (verify_aux(v, a, b, abuf) < 0)
			break;
	}
	free(buf);
	free(abuf);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static const char verify_usage[] =
	"usage: dpack verify [--jobs N] D.dpk|SET\n"
	"\n"
	"Check the header, class table and index, then recompute the XXH3-64 of every record.\n"
	"SET (a manifest, docs/FORMAT.md): every shard so, and each shard's count and identity\n"
	"against its manifest line.\n"
	"Exit 0 when clean; 1 with the ids of the bad samples; 2 for usage errors.\n";

int dpack_verify_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "jobs", required_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct verify v = { 0 };
	struct dpk *d = NULL;
	unsigned jobs = proc_cpu_count();
	int c, status = 1;
	char err[512];

	while ((c = getopt_long(argc, argv, "hj:", opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(verify_usage, stdout);
			return 0;
		}
		if (c != 'j') {
			fputs(verify_usage, stderr);
			return 2;
		}
		if (arg_uint(optarg, 1, 1024, &jobs) < 0) {
			LOG_ERROR("--jobs: '%s' is not a number in 1..1024", optarg);
			return 2;
		}
	}
	if (argc - optind != 1) {
		fputs(verify_usage, stderr);
		return 2;
	}
	const char *path = argv[optind];
	double t0 = clk_now_s();
	int ret = dpk_open(path, 0, &d, err, sizeof(err));
	if (ret < 0) {
		LOG_ERROR("%s: %s", path, err);
		return 1;
	}
	/* A set (a manifest): its counts and identities were checked at open, each shard's header,
	 * classes and index too; each shard's records now, one after the other. */
	pthread_t th[1024];
	pthread_mutex_init(&v.lock, NULL);
	uint64_t nbad = 0;
	for (uint32_t k = 0; k < dpk_shard_count(d) && !v.io_err; k++) {
		const char *sp = dpk_shard_path(d, k);
		int nth = 0;
		v.d = dpk_shard(d, k);
		v.next = 0;
		v.nbad = 0;
		for (; nth < (int)jobs; nth++)
			if (pthread_create(&th[nth], NULL, verify_worker, &v) != 0)
				break;
		if (nth == 0)
			verify_worker(&v);
		for (int t = 0; t < nth; t++)
			pthread_join(th[t], NULL);
		if (v.io_err)
			LOG_ERROR("%s%s%s: read error: %s", path, sp ? ": shard " : "", sp ? sp : "",
				  strerror(-v.io_err));
		if (v.nbad)
			qsort(v.bad, v.nbad, sizeof(uint64_t), cmp_u64);
		for (uint64_t i = 0; i < v.nbad; i++) {
			if (v.bad[i] & BAD_AUX) {  /* read again for the reason, in words */
				static uint8_t abuf[DPK_AUX_RECORD_MAX];
				uint64_t id = v.bad[i] & ~BAD_AUX;
				char why[256] = "";
				dpk_aux_read(v.d, id, dpk_entry_get(v.d, id), abuf, sizeof(abuf), why,
					     sizeof(why));
				/* why names the sample in the shard: "sample N: reason" */
				const char *r = strchr(why, ':');
				printf("bad sample %llu: %s%s%s\n",
				       (unsigned long long)(dpk_shard_first(d, k) + id), r ? r + 2 : why,
				       sp ? " of shard " : "", sp ? sp : "");
				continue;
			}
			const struct dpk_entry *e = dpk_entry_get(v.d, v.bad[i]);
			printf("bad sample %llu: checksum mismatch (%s, %llu bytes at offset %llu%s%s)\n",
			       (unsigned long long)(dpk_shard_first(d, k) + v.bad[i]),
			       dpk_kind_name(e->kind), (unsigned long long)e->length,
			       (unsigned long long)e->offset, sp ? " of shard " : "", sp ? sp : "");
		}
		nbad += v.nbad;
	}

	const struct dpk_header *h = dpk_header_get(d);
	if (v.io_err) {
		;  /* said above */
	} else if (nbad) {
		printf("dpack verify: %s: %llu of %llu records bad\n", path,
		       (unsigned long long)nbad, (unsigned long long)h->count);
	} else if (dpk_shard_path(d, 0)) {
		double dt = clk_now_s() - t0;
		printf("dpack verify: %s: %u shards, %llu records OK (%.1f MB, %.0f MB/s)\n", path,
		       dpk_shard_count(d), (unsigned long long)h->count, h->data_size / 1e6,
		       dt > 0 ? h->data_size / dt / 1e6 : 0.0);
		status = 0;
	} else {
		double dt = clk_now_s() - t0;
		printf("dpack verify: %s: %llu records OK (%.1f MB, %.0f MB/s)\n", path,
		       (unsigned long long)h->count, h->data_size / 1e6,
		       dt > 0 ? h->data_size / dt / 1e6 : 0.0);
		status = 0;
	}
	free(v.bad);
	dpk_close(d);
	return status;
}

/* ---- inspect ---- */

#define HIST_BUCKETS 64

struct stats {
	uint64_t kinds[DPK_KIND_MAX + 1];
	uint64_t bytes_total, bytes_min, bytes_max;
	uint64_t bytes_hist[HIST_BUCKETS];      /* bucket k: [2^k, 2^(k+1)) bytes */
	uint64_t images, w_min, w_max, h_min, h_max, w_sum, h_sum;
	uint64_t side_hist[HIST_BUCKETS];       /* bucket k: longer side in [128k, 128(k+1)) */
	uint64_t subsampled;                    /* records of a kind with chroma subsampling */
	uint64_t subsamp[256];
	uint64_t progressive;
	int64_t label_min, label_max;
	uint64_t *class_counts;                 /* class_count entries */
};

static unsigned log2u(uint64_t x)
{
	return x ? 63u - (unsigned)__builtin_clzll(x) : 0;
}

static void collect_file(const struct dpk *d, struct stats *s);

static void collect(const struct dpk *d, struct stats *s)
{
	s->bytes_min = UINT64_MAX;
	s->w_min = s->h_min = UINT64_MAX;
	s->label_min = INT64_MAX;
	s->label_max = INT64_MIN;
	for (uint32_t k = 0; k < dpk_shard_count(d); k++)  /* one file, or a set's shards */
		collect_file(dpk_shard(d, k), s);
}

static void collect_file(const struct dpk *d, struct stats *s)
{
	uint64_t n = dpk_count(d);
	uint32_t nc = dpk_class_count(d);

	for (uint64_t i = 0; i < n; i++) {
		const struct dpk_entry *e = dpk_entry_get(d, i);
		unsigned kf = dpk_kind_info(e->kind)->flags;  /* a known kind: checked at open */

		s->kinds[e->kind]++;
		s->bytes_total += e->length;
		s->bytes_min = e->length < s->bytes_min ? e->length : s->bytes_min;
		s->bytes_max = e->length > s->bytes_max ? e->length : s->bytes_max;
		s->bytes_hist[log2u(e->length)]++;
		if (e->label < s->label_min)
			s->label_min = e->label;
		if (e->label > s->label_max)
			s->label_max = e->label;
		if (nc)
			s->class_counts[e->label]++;  /* in range: checked at open */
		if ((kf & DPK_KF_IMAGE) || e->ndim == 3) {
			uint64_t h = e->shape[0], w = e->shape[1], side = h > w ? h : w;
			s->images++;
			s->h_sum += h;
			s->w_sum += w;
			s->h_min = h < s->h_min ? h : s->h_min;
			s->w_min = w < s->w_min ? w : s->w_min;
			s->h_max = h > s->h_max ? h : s->h_max;
			s->w_max = w > s->w_max ? w : s->w_max;
			s->side_hist[side / 128 < HIST_BUCKETS ? side / 128 : HIST_BUCKETS - 1]++;
		}
		if (kf & DPK_KF_SUBSAMP) {
			s->subsampled++;
			s->subsamp[e->subsamp]++;
			s->progressive += e->flags & DPK_F_PROGRESSIVE;
		}
	}
}

static void json_str(const char *p)
{
	putchar('"');
	for (; *p; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static void print_json(const char *path, const struct dpk *d, const struct stats *s)
{
	const struct dpk_header *h = dpk_header_get(d);
	uint64_t n = h->count;
	const char *sep = "";

	printf("{\n  \"file\": ");
	json_str(path);
	printf(",\n  \"file_size\": %llu,\n  \"version\": %u,\n  \"samples\": %llu,\n",
	       (unsigned long long)h->file_size, h->version, (unsigned long long)n);
	if (dpk_shard_path(d, 0)) {  /* a set: file_size is the shards' sum */
		printf("  \"shards\": [");
		for (uint32_t k = 0; k < dpk_shard_count(d); k++) {
			printf("%s\n    {\"path\": ", k ? "," : "");
			json_str(dpk_shard_path(d, k));
			printf(", \"samples\": %llu, \"first\": %llu, \"file_size\": %llu}",
			       (unsigned long long)dpk_count(dpk_shard(d, k)),
			       (unsigned long long)dpk_shard_first(d, k),
			       (unsigned long long)dpk_header_get(dpk_shard(d, k))->file_size);
		}
		printf("\n  ],\n");
	}
	printf("  \"labels_present\": %s,\n  \"aux_fields\": [", dpk_has_labels(d) ? "true" : "false");
	for (uint32_t k = 0; k < dpk_aux_fields(d); k++) {
		printf("%s", k ? ", " : "");
		json_str(dpk_aux_name(d, k));
	}
	printf("],\n  \"aux_max\": %u,\n", dpk_aux_max(d));
	printf("  \"classes\": [");
	for (uint32_t c = 0; c < h->class_count; c++) {
		printf("%s\n    {\"index\": %u, \"name\": ", c ? "," : "", c);
		json_str(dpk_class_name(d, c));
		printf(", \"samples\": %llu}", (unsigned long long)s->class_counts[c]);
	}
	printf("%s],\n  \"labels\": {\"min\": %lld, \"max\": %lld},\n", h->class_count ? "\n  " : "",
	       n ? (long long)s->label_min : 0, n ? (long long)s->label_max : 0);
	printf("  \"kinds\": {");
	for (unsigned k = 1; k <= DPK_KIND_MAX; k++)
		if (s->kinds[k]) {
			printf("%s\"%s\": %llu", sep, dpk_kind_name(k), (unsigned long long)s->kinds[k]);
			sep = ", ";
		}
	printf("},\n  \"stored_bytes\": {\"total\": %llu, \"min\": %llu, \"max\": %llu, \"mean\": %.1f,\n",
	       (unsigned long long)s->bytes_total, n ? (unsigned long long)s->bytes_min : 0,
	       (unsigned long long)s->bytes_max, n ? (double)s->bytes_total / (double)n : 0.0);
	printf("    \"histogram\": [");
	sep = "";
	for (unsigned k = 0; k < HIST_BUCKETS; k++)
		if (s->bytes_hist[k]) {
			printf("%s{\"min\": %llu, \"max\": %llu, \"count\": %llu}", sep, 1ull << k,
			       (2ull << k) - 1, (unsigned long long)s->bytes_hist[k]);
			sep = ", ";
		}
	printf("]},\n  \"images\": {\"count\": %llu", (unsigned long long)s->images);
	if (s->images) {
		printf(", \"width\": {\"min\": %llu, \"max\": %llu, \"mean\": %.1f}",
		       (unsigned long long)s->w_min, (unsigned long long)s->w_max,
		       (double)s->w_sum / (double)s->images);
		printf(", \"height\": {\"min\": %llu, \"max\": %llu, \"mean\": %.1f}",
		       (unsigned long long)s->h_min, (unsigned long long)s->h_max,
		       (double)s->h_sum / (double)s->images);
		printf(",\n    \"longer_side_histogram\": [");
		sep = "";
		for (unsigned k = 0; k < HIST_BUCKETS; k++)
			if (s->side_hist[k]) {
				printf("%s{\"min\": %u, \"max\": %u, \"count\": %llu}", sep, 128 * k,
				       128 * k + 127, (unsigned long long)s->side_hist[k]);
				sep = ", ";
			}
		printf("]");
	}
	if (s->subsampled) {
		printf(",\n    \"subsampling\": {");
		sep = "";
		for (unsigned k = 0; k < 256; k++)
			if (s->subsamp[k]) {
				printf("%s\"%s\": %llu", sep, dpk_subsamp_name(k), (unsigned long long)s->subsamp[k]);
				sep = ", ";
			}
		printf("}, \"progressive\": %llu", (unsigned long long)s->progressive);
	}
	printf("}\n}\n");
}

static void human(char *buf, size_t len, double b)
{
	const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int k = 0;

	while (b >= 1024 && k < 4)
		b /= 1024, k++;
	snprintf(buf, len, k ? "%.1f %s" : "%.0f %s", b, u[k]);
}

static void bar(uint64_t count, uint64_t max)
{
	int n = max ? (int)(40 * count / max) : 0;

	printf(" %*llu %.*s\n", 9, (unsigned long long)count, n ? n : count ? 1 : 0,
	       "########################################");
}

static void print_text(const char *path, const struct dpk *d, const struct stats *s)
{
	const struct dpk_header *h = dpk_header_get(d);
	uint64_t n = h->count, mx = 0;
	char a[32], b[32], c[32];

	human(a, sizeof(a), (double)h->file_size);
	printf("file         %s (%s, format version %u)\n", path, a, h->version);
	printf("samples      %llu\n", (unsigned long long)n);
	if (dpk_shard_path(d, 0)) {  /* a set: sizes above are the shards' sums */
		printf("shards       %u\n", dpk_shard_count(d));
		for (uint32_t k = 0; k < dpk_shard_count(d); k++) {
			if (k == 20 && dpk_shard_count(d) > 24) {
				printf("  ... %u more\n", dpk_shard_count(d) - 20);
				break;
			}
			human(a, sizeof(a), (double)dpk_header_get(dpk_shard(d, k))->file_size);
			printf("  %5u  %-32s %llu samples from %llu, %s\n", k, dpk_shard_path(d, k),
			       (unsigned long long)dpk_count(dpk_shard(d, k)),
			       (unsigned long long)dpk_shard_first(d, k), a);
		}
	}
	printf("kinds       ");
	for (unsigned k = 1; k <= DPK_KIND_MAX; k++)
		if (s->kinds[k])
			printf(" %s %llu", dpk_kind_name(k), (unsigned long long)s->kinds[k]);
	if (dpk_has_labels(d))
		printf("\nlabels       %lld..%lld\n", n ? (long long)s->label_min : 0,
		       n ? (long long)s->label_max : 0);
	else
		printf("\nlabels       none\n");
	if (dpk_aux_fields(d)) {
		printf("aux fields  ");
		for (uint32_t k = 0; k < dpk_aux_fields(d); k++)
			printf(" %s", dpk_aux_name(d, k));
		printf(" (largest blob %u bytes)\n", dpk_aux_max(d));
	}
	printf("classes      %u\n", h->class_count);
	for (uint32_t k = 0; k < h->class_count; k++) {
		if (k == 20 && h->class_count > 24) {
			printf("  ... %u more\n", h->class_count - 20);
			break;
		}
		printf("  %5u  %-32s %llu\n", k, dpk_class_name(d, k), (unsigned long long)s->class_counts[k]);
	}
	human(a, sizeof(a), (double)s->bytes_total);
	human(b, sizeof(b), n ? (double)s->bytes_min : 0);
	human(c, sizeof(c), (double)s->bytes_max);
	printf("stored       %s in all; min %s, mean %.1f KiB, max %s\n", a, b,
	       n ? (double)s->bytes_total / (double)n / 1024 : 0.0, c);
	for (unsigned k = 0; k < HIST_BUCKETS; k++)
		mx = s->bytes_hist[k] > mx ? s->bytes_hist[k] : mx;
	for (unsigned k = 0; k < HIST_BUCKETS; k++)
		if (s->bytes_hist[k]) {
			human(a, sizeof(a), (double)(1ull << k));
			human(b, sizeof(b), (double)(2ull << k));
			printf("  %9s .. %-9s", a, b);
			bar(s->bytes_hist[k], mx);
		}
	if (s->images) {
		printf("images       %llu; width %llu..%llu (mean %.0f), height %llu..%llu (mean %.0f)\n",
		       (unsigned long long)s->images, (unsigned long long)s->w_min,
		       (unsigned long long)s->w_max, (double)s->w_sum / (double)s->images,
		       (unsigned long long)s->h_min, (unsigned long long)s->h_max,
		       (double)s->h_sum / (double)s->images);
		mx = 0;
		for (unsigned k = 0; k < HIST_BUCKETS; k++)
			mx = s->side_hist[k] > mx ? s->side_hist[k] : mx;
		printf("  longer side:\n");
		for (unsigned k = 0; k < HIST_BUCKETS; k++)
			if (s->side_hist[k]) {
				printf("  %5u .. %-5u px    ", 128 * k, 128 * k + 127);
				bar(s->side_hist[k], mx);
			}
	}
	if (s->subsampled) {
		printf("subsampling ");
		for (unsigned k = 0; k < 256; k++)
			if (s->subsamp[k])
				printf(" %s %llu", dpk_subsamp_name(k), (unsigned long long)s->subsamp[k]);
		printf("; progressive %llu\n", (unsigned long long)s->progressive);
	}
}

static const char inspect_usage[] =
	"usage: dpack inspect [--json] D.dpk|SET\n"
	"\n"
	"Print counts, classes, record kinds, and histograms of stored sizes and image sizes,\n"
	"from the header and index only (run 'dpack verify' to check the records). SET (a\n"
	"manifest): the whole set, its sizes the shards' sums, and each shard.\n";

int dpack_inspect_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'J' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct stats s = { 0 };
	struct dpk *d = NULL;
	int json = 0, c;
	char err[512];

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(inspect_usage, stdout);
			return 0;
		}
		if (c != 'J') {
			fputs(inspect_usage, stderr);
			return 2;
		}
		json = 1;
	}
	if (argc - optind != 1) {
		fputs(inspect_usage, stderr);
		return 2;
	}
	const char *path = argv[optind];
	int ret = dpk_open(path, 0, &d, err, sizeof(err));
	if (ret < 0) {
		LOG_ERROR("%s: %s", path, err);
		return 1;
	}
	s.class_counts = calloc(dpk_class_count(d) + 1, sizeof(uint64_t));
	if (!s.class_counts) {
		dpk_close(d);
		LOG_ERROR("out of memory");
		return 1;
	}
	collect(d, &s);
	if (json)
		print_json(path, d, &s);
	else
		print_text(path, d, &s);
	free(s.class_counts);
	dpk_close(d);
	return 0;
}
