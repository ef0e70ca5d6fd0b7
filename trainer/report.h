/* report.h - the trainer's report: from every rank's step table, the per-rank and per-phase
 * figures (data wait, exposed copy, compute, exposed allreduce, optimizer), AU, samples/s and the
 * verdict (loader-, compute-, communication- or straggler-limited), judged against ONE threshold
 * table. The same figures are printed for people (trn_report_print) and written as JSON for tools
 * (trn_report_write_json; ldprobe reads only that). Pure: no MPI, no device; rank 0 calls it with
 * the step tables gathered from every rank (steps.h). */
#ifndef LOADERD_TRN_REPORT_H
#define LOADERD_TRN_REPORT_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum trn_phase { TRN_PH_DATA, TRN_PH_COPY, TRN_PH_COMPUTE, TRN_PH_COMM, TRN_PH_OPT, TRN_PH_N };
/* Short names (JSON keys): data, copy, compute, comm, opt. */
extern const char *const trn_phase_key[TRN_PH_N];

/* One micro-step of one rank. */
struct trn_step {
	uint64_t start_ns;         /* CLOCK_MONOTONIC at the step's start (only differences count) */
	uint64_t ns[TRN_PH_N];     /* time in each phase */
};

/* One rank's measured run (warm-up left out). */
struct trn_rank_run {
	const struct trn_step *steps;  /* the recorded measured steps, in order (may be fewer than
	                                  the measured ones: recording is capped) */
	long n_steps;
	uint64_t sum_ns[TRN_PH_N];     /* every measured step */
	uint64_t samples;              /* samples of the measured steps */
	uint64_t wall_ns;              /* from the first measured step's start to the end */
};

/* Point @run's steps at the measured part of a rank's step table @rec of @n recorded steps: the
 * first @warmup left out (all of them when warmup >= n). Totals are the caller's. */
void trn_rank_run_window(struct trn_rank_run *run, const struct trn_step *rec, long n, long warmup);

/* The thresholds of the verdict: the one table. A cause is named when it costs at least
 * lost_min of the step time; a straggler also needs its compute imbalance_min times the fastest
 * rank's and to be the slowest in straggler_steps of the steps (contention that moves around is
 * not a straggler). */
struct trn_report_limits {
	double lost_min;
	double imbalance_min;
	double straggler_steps;
};
extern const struct trn_report_limits trn_report_limits_default;

enum trn_verdict { TRN_LOADER_LIMITED, TRN_COMM_LIMITED, TRN_STRAGGLER_LIMITED,
		   TRN_COMPUTE_LIMITED };
const char *trn_verdict_name(enum trn_verdict v);   /* "loader-limited", ... */

/* Per-rank figures. Shares are of the rank's step time; gap = time in no phase. */
struct trn_rank_fig {
	double share[TRN_PH_N], gap;   /* from the recorded steps */
	double step_ms, compute_ms;    /* per step, from the recorded steps */
	double samples_per_s;          /* samples / wall */
	double au;                     /* compute / wall, every measured step */
};

/* What the run was; copied into the report as is. Strings are borrowed. */
struct trn_run_info {
	const char *device, *backend, *model;
	int world, batch, accum, crop, classes, synthetic;
	uint64_t steps, warmup;        /* micro-steps run, of which warm-up */
	uint64_t params;               /* gradient floats */
	int buckets;
	double bucket_mb, first_bucket_mb;
};

struct trn_report {
	struct trn_run_info run;
	struct trn_report_limits limits;
	int ranks;
	struct trn_rank_fig *rank;     /* [ranks] */
	long steps_compared;           /* recorded steps every rank has (0: averages only) */
	double wall_s;                 /* rank 0's measured wall time */
	double share[TRN_PH_N], gap;   /* the average rank, every measured step */
	double au;                     /* average rank's compute / wall */
	double samples_per_s;          /* the job: the slowest rank's rate x ranks */
	double rank_samples_per_s;     /* the slowest rank's */
	double step_ms, compute_ms;    /* per step, mean over ranks */
	/* the causes, as shares of the step time */
	double loader;                 /* per step, the worst rank's data wait + exposed copy */
	double comm;                   /* per step, the least exposed rank's allreduce */
	double straggler;              /* per step, the slowest rank's compute beyond the others'
	                                  median; 0 unless the straggler limits hold */
	int slow_rank, fast_rank;      /* most and least compute per step */
	double imbalance;              /* their compute ratio (>= 1) */
	double slow_consistency;       /* share of the steps in which slow_rank was the slowest */
	double wait_for_slow;          /* the other ranks' exposed allreduce share */
	enum trn_verdict verdict;
};

/* Compute the report of @nranks ranks' runs with @lim (NULL: the defaults). 0, -EINVAL (no
 * rank) or -ENOMEM. Free with trn_report_fini(). */
int trn_report_compute(const struct trn_rank_run *runs, int nranks, const struct trn_run_info *run,
		       const struct trn_report_limits *lim, struct trn_report *rep);
void trn_report_fini(struct trn_report *rep);

/* The human-readable report (README "Reading the report"); its last line is
 * "trainer: samples_per_s=X au=Y verdict=Z". */
void trn_report_print(const struct trn_report *rep, FILE *f);
/* The report as one JSON object (schema in the README). 0 or -errno. */
int trn_report_write_json(const struct trn_report *rep, FILE *f);
/* Write it to @path (temporary file, then rename). 0 or -errno. */
int trn_report_save_json(const struct trn_report *rep, const char *path);

#endif
