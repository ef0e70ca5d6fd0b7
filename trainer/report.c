/* report.c - the trainer's report: figures and verdict from the step tables of every rank, one
 * threshold table, printed for people and written as JSON for ldprobe.
 *
 * Why per step and across ranks: a rank's exposed allreduce includes waiting for peers that were
 * still waiting for data or computing; only the rank that arrives last sees the transfer alone.
 * So each step's loader cost is the worst rank's data wait (+ exposed copy) and its network cost
 * the least exposed rank's allreduce. A straggler is what the slowest rank's compute costs beyond
 * the others' median, named only when it is the same rank step after step. In synchronous DDP
 * every rank runs at the slowest one's pace, so samples/s cannot show a straggler; compute per
 * step can. */
#include "trainer/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const trn_phase_key[TRN_PH_N] = { "data", "copy", "compute", "comm", "opt" };

/* The one table (trainer/report_limits.def): the thresholds and the verdicts' names. */
#define LIMIT(key, value) .key = value,
#define VERDICT(e, name)
const struct trn_report_limits trn_report_limits_default = {
#include "trainer/report_limits.def"
};
#undef LIMIT
#undef VERDICT

#define LIMIT(key, value)
#define VERDICT(e, name) [e] = name,
static const char *const verdict_name[] = {
#include "trainer/report_limits.def"
};
#undef LIMIT
#undef VERDICT

const char *trn_verdict_name(enum trn_verdict v)
{
	return (unsigned)v < sizeof(verdict_name) / sizeof(verdict_name[0]) ? verdict_name[v] : "?";
}

void trn_rank_run_window(struct trn_rank_run *run, const struct trn_step *rec, long n, long warmup)
{
	long skip = warmup < 0 ? 0 : warmup < n ? warmup : n;

	run->steps = rec + skip;
	run->n_steps = n - skip;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median of @n values (sorts them). 0 when n == 0. */
static double median(double *v, int n)
{
	if (n == 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Per-rank figures over every measured step (totals), and the average rank. */
static void totals(const struct trn_rank_run *runs, int nranks, struct trn_report *rep)
{
	double slowest = INFINITY, sum_share = 0, samples = 0, max_wall = 0;

	for (int r = 0; r < nranks; r++) {
		const struct trn_rank_run *x = &runs[r];
		struct trn_rank_fig *f = &rep->rank[r];
		double wall = (double)x->wall_ns * 1e-9, tot = 0;

		f->samples_per_s = wall > 0 ? (double)x->samples / wall : 0;
		samples += (double)x->samples;
		max_wall = fmax(max_wall, wall);
		for (int p = 0; p < TRN_PH_N; p++) {
			double s = wall > 0 ? (double)x->sum_ns[p] * 1e-9 / wall : 0;
			rep->share[p] += s / nranks;
			tot += s;
		}
		f->au = wall > 0 ? (double)x->sum_ns[TRN_PH_COMPUTE] * 1e-9 / wall : 0;
		sum_share += tot;
		if (f->samples_per_s < slowest)
			slowest = f->samples_per_s;
	}
	rep->gap = fmax(0, 1 - sum_share / nranks);
	rep->au = rep->share[TRN_PH_COMPUTE];
	rep->rank_samples_per_s = slowest;
	/* Synchronous data parallelism runs at the slowest rank's pace: every rank's samples over
	 * the longest wall. With even splits that is the slowest rank's rate x ranks; with balanced
	 * shares the ranks' batches differ, and the slow rank's rate would understate the job. */
	rep->samples_per_s = max_wall > 0 ? samples / max_wall : 0;
	rep->wall_s = (double)runs[0].wall_ns * 1e-9;
}

/* Per-rank figures from the recorded steps that every rank has (the first @n). Returns the mean
 * wall time over ranks, in ns. */
static double per_rank_steps(const struct trn_rank_run *runs, int nranks, long n,
			     struct trn_report *rep)
{
	double mean_wall = 0;

	for (int r = 0; r < nranks; r++) {
		const struct trn_step *s = runs[r].steps, *last = &s[n - 1];
		struct trn_rank_fig *f = &rep->rank[r];
		double sums[TRN_PH_N] = { 0 }, all = 0, wall;

		for (long i = 0; i < n; i++)
			for (int p = 0; p < TRN_PH_N; p++)
				sums[p] += (double)s[i].ns[p];
		for (int p = 0; p < TRN_PH_N; p++)
			all += sums[p];
		wall = (double)(last->start_ns - s[0].start_ns);
		for (int p = 0; p < TRN_PH_N; p++)
			wall += (double)last->ns[p];
		wall = fmax(fmax(wall, all), 1);
		for (int p = 0; p < TRN_PH_N; p++)
			f->share[p] = sums[p] / wall;
		f->gap = fmax(0, 1 - all / wall);
		f->step_ms = wall / (double)n * 1e-6;
		f->compute_ms = sums[TRN_PH_COMPUTE] / (double)n * 1e-6;
		mean_wall += wall / nranks;
	}
	return mean_wall;
}

/* The causes, step by step across ranks (see the top of the file). */
static int causes_from_steps(const struct trn_rank_run *runs, int nranks, long n,
			     struct trn_report *rep)
{
	double *cs = calloc((size_t)nranks, sizeof(*cs));
	double loader = 0, comm = 0, strag = 0, mean_wall;
	long slowest_steps = 0;

	if (!cs)
		return -ENOMEM;
	mean_wall = per_rank_steps(runs, nranks, n, rep);
	for (int r = 0; r < nranks; r++) {
		if (rep->rank[r].compute_ms > rep->rank[rep->slow_rank].compute_ms)
			rep->slow_rank = r;
		if (rep->rank[r].compute_ms < rep->rank[rep->fast_rank].compute_ms)
			rep->fast_rank = r;
	}
	for (long i = 0; i < n; i++) {
		double worst_data = 0, least_comm = INFINITY;
		int worst = 0;

		for (int r = 0; r < nranks; r++) {
			const struct trn_step *s = &runs[r].steps[i];
			worst_data = fmax(worst_data, (double)(s->ns[TRN_PH_DATA] + s->ns[TRN_PH_COPY]));
			least_comm = fmin(least_comm, (double)s->ns[TRN_PH_COMM]);
			cs[r] = (double)s->ns[TRN_PH_COMPUTE];
			if (cs[r] > cs[worst])
				worst = r;
		}
		loader += worst_data;
		comm += least_comm;
		slowest_steps += cs[rep->slow_rank] >= cs[worst];
		if (nranks > 1) {
			double top = cs[worst];
			cs[worst] = cs[nranks - 1];
			strag += top - median(cs, nranks - 1);
		}
	}
	free(cs);
	rep->loader = loader / mean_wall;
	rep->comm = comm / mean_wall;
	rep->straggler = strag / mean_wall;
	rep->slow_consistency = (double)slowest_steps / (double)n;
	rep->step_ms = mean_wall / (double)n * 1e-6;
	for (int r = 0; r < nranks; r++)
		rep->compute_ms += rep->rank[r].compute_ms / nranks;
	return 0;
}

/* Too few recorded steps to compare ranks step by step: the average rank's shares. */
static void causes_from_totals(const struct trn_rank_run *runs, int nranks, struct trn_report *rep)
{
	for (int r = 0; r < nranks; r++) {
		double c = (double)runs[r].sum_ns[TRN_PH_COMPUTE];
		if (c > (double)runs[rep->slow_rank].sum_ns[TRN_PH_COMPUTE])
			rep->slow_rank = r;
		if (c < (double)runs[rep->fast_rank].sum_ns[TRN_PH_COMPUTE])
			rep->fast_rank = r;
		for (int p = 0; p < TRN_PH_N; p++)
			rep->rank[r].share[p] = runs[r].wall_ns ?
				(double)runs[r].sum_ns[p] / (double)runs[r].wall_ns : 0;
	}
	rep->loader = rep->share[TRN_PH_DATA] + rep->share[TRN_PH_COPY];
	rep->comm = rep->share[TRN_PH_COMM];
	rep->straggler = 0;
	rep->slow_consistency = 0;
}

/* The verdict: the largest cause, if it costs at least lost_min; else compute-limited. Ties go
 * to the loader, then the network. */
static enum trn_verdict judge(const struct trn_report *rep)
{
	const struct trn_report_limits *l = &rep->limits;
	double strag = rep->imbalance >= l->imbalance_min &&
		       rep->slow_consistency >= l->straggler_steps ? rep->straggler : 0;
	enum trn_verdict v = TRN_LOADER_LIMITED;
	double worst = rep->loader;

	if (rep->comm > worst)
		v = TRN_COMM_LIMITED, worst = rep->comm;
	if (strag > worst)
		v = TRN_STRAGGLER_LIMITED, worst = strag;
	return worst >= l->lost_min ? v : TRN_COMPUTE_LIMITED;
}

int trn_report_compute(const struct trn_rank_run *runs, int nranks, const struct trn_run_info *run,
		       const struct trn_report_limits *lim, struct trn_report *rep)
{
	long n = -1;

	memset(rep, 0, sizeof(*rep));
	if (nranks < 1 || !runs)
		return -EINVAL;
	rep->rank = calloc((size_t)nranks, sizeof(*rep->rank));
	if (!rep->rank)
		return -ENOMEM;
	rep->ranks = nranks;
	rep->run = run ? *run : (struct trn_run_info){ 0 };
	rep->limits = lim ? *lim : trn_report_limits_default;
	totals(runs, nranks, rep);
	for (int r = 0; r < nranks; r++)
		n = n < 0 || runs[r].n_steps < n ? runs[r].n_steps : n;
	if (n >= 2) {
		rep->steps_compared = n;
		if (causes_from_steps(runs, nranks, n, rep) < 0) {
			trn_report_fini(rep);
			return -ENOMEM;
		}
	} else {
		causes_from_totals(runs, nranks, rep);
	}
	double cs = n >= 2 ? rep->rank[rep->slow_rank].compute_ms :
		    (double)runs[rep->slow_rank].sum_ns[TRN_PH_COMPUTE];
	double cf = n >= 2 ? rep->rank[rep->fast_rank].compute_ms :
		    (double)runs[rep->fast_rank].sum_ns[TRN_PH_COMPUTE];
	rep->imbalance = cf > 0 ? cs / cf : 1;
	if (nranks > 1) {
		for (int r = 0; r < nranks; r++)
			if (r != rep->slow_rank)
				rep->wait_for_slow += rep->rank[r].share[TRN_PH_COMM] / (nranks - 1);
	}
	rep->verdict = judge(rep);
	return 0;
}

void trn_report_fini(struct trn_report *rep)
{
	if (!rep)
		return;
	free(rep->rank);
	rep->rank = NULL;
}

void trn_report_print(const struct trn_report *rep, FILE *f)
{
	const struct trn_run_info *ri = &rep->run;

	fprintf(f, "trainer: %d ranks x batch %d, %llu steps (%llu warm-up left out), %.2f s\n",
		rep->ranks, ri->batch, (unsigned long long)ri->steps, (unsigned long long)ri->warmup,
		rep->wall_s);
	fprintf(f, "  time per step: data wait %.1f%%, exposed copy %.1f%%, compute %.1f%%, "
		"exposed allreduce %.1f%%, optimizer %.1f%%\n", 100 * rep->share[TRN_PH_DATA],
		100 * rep->share[TRN_PH_COPY], 100 * rep->share[TRN_PH_COMPUTE],
		100 * rep->share[TRN_PH_COMM], 100 * rep->share[TRN_PH_OPT]);
	if (rep->ranks > 1)
		fprintf(f, "  slowest rank %d: compute %.2fx the fastest rank's (rank %d); "
			"%.1f samples/s per rank\n", rep->slow_rank, rep->imbalance, rep->fast_rank,
			rep->rank_samples_per_s);
	fprintf(f, "  accelerator utilisation (compute / wall, warm-up excluded) %.2f\n", rep->au);
	fprintf(f, "trainer: samples_per_s=%.1f au=%.3f verdict=%s\n", rep->samples_per_s, rep->au,
		trn_verdict_name(rep->verdict));
}

/* ---- JSON ---- */

/* A JSON string: quotes, backslashes and control characters escaped; NULL is null. */
static void json_str(FILE *f, const char *s)
{
	if (!s) {
		fputs("null", f);
		return;
	}
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", f);
		else if (*p == '\t')
			fputs("\\t", f);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/* A JSON number: NaN and infinities (not JSON) are null. */
static void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.6g", v);
	else
		fputs("null", f);
}

/* A small JSON writer: values in nested objects and arrays, the commas placed for the caller.
 * The top level has one member per line. */
struct jw {
	FILE *f;
	int depth;
	int first;                 /* nothing written yet at this depth */
};

/* Before a value: the separator, and "key": inside an object (@key NULL inside an array). */
static void jw_key(struct jw *w, const char *key)
{
	if (w->depth > 0)
		fputs(w->first ? (w->depth == 1 ? "\n  " : "") : (w->depth == 1 ? ",\n  " : ", "), w->f);
	w->first = 0;
	if (key) {
		json_str(w->f, key);
		fputs(": ", w->f);
	}
}

static void jw_open(struct jw *w, const char *key, char c)
{
	jw_key(w, key);
	fputc(c, w->f);
	w->depth++;
	w->first = 1;
}

static void jw_close(struct jw *w, char c)
{
	w->depth--;
	fputs(w->depth == 0 ? "\n" : "", w->f);
	fputc(c, w->f);
	w->first = 0;
}

static void jw_num(struct jw *w, const char *key, double v)
{
	jw_key(w, key);
	json_num(w->f, v);
}

static void jw_str(struct jw *w, const char *key, const char *s)
{
	jw_key(w, key);
	json_str(w->f, s);
}

static void jw_shares(struct jw *w, const char *key, const double share[TRN_PH_N], double gap)
{
	jw_open(w, key, '{');
	for (int p = 0; p < TRN_PH_N; p++)
		jw_num(w, trn_phase_key[p], share[p]);
	jw_num(w, "gap", gap);
	jw_close(w, '}');
}

int trn_report_write_json(const struct trn_report *rep, FILE *f)
{
	const struct trn_run_info *ri = &rep->run;
	struct jw w = { .f = f };

	jw_open(&w, NULL, '{');
	jw_str(&w, "schema", "loaderd-trainer-report/1");
	jw_str(&w, "verdict", trn_verdict_name(rep->verdict));
	jw_str(&w, "device", ri->device);
	jw_str(&w, "backend", ri->backend);
	jw_str(&w, "model", ri->model);
	jw_key(&w, "synthetic");
	fputs(ri->synthetic ? "true" : "false", f);
	jw_num(&w, "ranks", rep->ranks);
	jw_num(&w, "batch", ri->batch);
	jw_num(&w, "accum", ri->accum);
	jw_num(&w, "crop", ri->crop);
	jw_num(&w, "classes", ri->classes);
	jw_num(&w, "params", (double)ri->params);
	jw_num(&w, "buckets", ri->buckets);
	jw_num(&w, "bucket_mb", ri->bucket_mb);
	jw_num(&w, "first_bucket_mb", ri->first_bucket_mb);
	jw_num(&w, "steps", (double)ri->steps);
	jw_num(&w, "warmup", (double)ri->warmup);
	jw_num(&w, "steps_compared", (double)rep->steps_compared);
	jw_num(&w, "wall_s", rep->wall_s);
	jw_num(&w, "samples_per_s", rep->samples_per_s);
	jw_num(&w, "rank_samples_per_s", rep->rank_samples_per_s);
	jw_num(&w, "au", rep->au);
	jw_num(&w, "step_ms", rep->step_ms);
	jw_num(&w, "compute_ms", rep->compute_ms);
	jw_shares(&w, "shares", rep->share, rep->gap);
	jw_open(&w, "causes", '{');
	jw_num(&w, "loader", rep->loader);
	jw_num(&w, "comm", rep->comm);
	jw_num(&w, "straggler", rep->straggler);
	jw_close(&w, '}');
	jw_open(&w, "straggler", '{');
	jw_num(&w, "slow_rank", rep->slow_rank);
	jw_num(&w, "fast_rank", rep->fast_rank);
	jw_num(&w, "imbalance", rep->imbalance);
	jw_num(&w, "consistency", rep->slow_consistency);
	jw_num(&w, "wait_for_slow", rep->wait_for_slow);
	jw_close(&w, '}');
	jw_open(&w, "thresholds", '{');
	jw_num(&w, "lost_min", rep->limits.lost_min);
	jw_num(&w, "imbalance_min", rep->limits.imbalance_min);
	jw_num(&w, "straggler_steps", rep->limits.straggler_steps);
	jw_close(&w, '}');
	jw_open(&w, "per_rank", '[');
	for (int r = 0; r < rep->ranks; r++) {
		const struct trn_rank_fig *x = &rep->rank[r];
		jw_open(&w, NULL, '{');
		jw_num(&w, "rank", r);
		jw_shares(&w, "shares", x->share, x->gap);
		jw_num(&w, "step_ms", x->step_ms);
		jw_num(&w, "compute_ms", x->compute_ms);
		jw_num(&w, "samples_per_s", x->samples_per_s);
		jw_num(&w, "au", x->au);
		jw_close(&w, '}');
	}
	jw_close(&w, ']');
	jw_close(&w, '}');
	fputc('\n', f);
	return ferror(f) ? -EIO : 0;
}

int trn_report_save_json(const struct trn_report *rep, const char *path)
{
	char tmp[4096];
	FILE *f;
	int ret;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	ret = trn_report_write_json(rep, f);
	if (fclose(f) != 0 && ret == 0)
		ret = -errno;
	if (ret == 0 && rename(tmp, path) != 0)
		ret = -errno;
	if (ret < 0)
		unlink(tmp);
	return ret;
}
