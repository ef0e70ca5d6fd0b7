/* opts.h - the trainer's command line: every option, its default and its check, and --help. */
#ifndef LOADERD_TRN_OPTS_H
#define LOADERD_TRN_OPTS_H
#include <stdint.h>

#define TRN_PREFETCH_MAX 8

struct trn_opts {
	const char *socket, *dataset, *model, *device, *backend, *trace, *job, *dump, *report_json;
	const char *share_group, *owner;  /* loaderd job sharing (shm/ldc.h); NULL: not asked */
	const char *log_samples;    /* --log-samples PREFIX: rank r writes PREFIX.r */
	int batch, crop, accum, prefetch, classes, slots, warmup, log_every;
	long steps, epochs;        /* one of them; steps default 100 */
	uint64_t seed;
	int synthetic;
	int balance;               /* --balance: shares by speed, weighted gradient averaging */
	uint32_t sampling;         /* --sampling: enum ctl_sampling (default shuffle) */
	uint32_t block, window;    /* --block, --window: block sampling's geometry; 0: default */
	uint32_t window_shards;    /* --window-shards K: a window of K shards (ldc_job) */
	double report_ns;          /* --report-ns: the compute time per sample reported; 0: measured */
	int slow_rank;             /* --inject-slow-rank R:F: rank R computes F times as long */
	double slow_factor;
	double comm_delay_ms;      /* --inject-comm-delay-ms X: each allreduce is X ms slower */
	int kill_rank;             /* --inject-kill-at R:S: rank R SIGKILLs itself at micro-step S */
	long kill_step;
	float lr, momentum;
	double bucket_mb, first_bucket_mb;
	const char *ckpt_dir;      /* --checkpoint-dir: checkpoints here (ckpt.h), also on SIGTERM */
	long ckpt_every;           /* --checkpoint-every N optimizer steps; 0: on SIGTERM only */
	int resume;                /* --resume: from ckpt_dir's newest checkpoint, if any */
	const char *log_consumed;  /* --log-consumed PREFIX: rank r appends its batches to PREFIX.r */
};

/* Parse the command line into @o. On --help (exit 0) or bad usage (exit 2, rank 0 says why)
 * finalises MPI and exits. MPI must be initialised. */
void trn_opts_parse(int argc, char **argv, struct trn_opts *o);

#endif
