/* data.h - the trainer's data path: batches from the rank's loaderd ring, copied to the device
 * `prefetch` batches ahead of compute (the copy stream reads the pinned ring slot directly), or
 * one synthetic batch made on the device at start (--synthetic: the compute ceiling).
 *
 * Ownership: a ring slot is held from acquire until its copy has completed, then given back at
 * once, not after the step. Threads: the rank's one thread. Errors end the job (trn_die). */
#ifndef LOADERD_TRN_DATA_H
#define LOADERD_TRN_DATA_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shm/ldc.h"
#include "trainer/dev.h"
#include "trainer/opts.h"

struct trn_inflight {
	struct ldc_batch b;        /* ring slot, held until its copy is done */
	int held;
	int ev;                    /* copy-done event (1..depth; event 0 is the DDP core's) */
	int count;
	int valid;                 /* samples with weight > 0 (not tail padding) */
	uint64_t step;             /* the ring step */
};

struct trn_data {
	struct ldc *c;             /* NULL with --synthetic */
	struct ldc_info info;
	struct trn_dev *dev;
	size_t sample_bytes;
	int depth;                                /* device buffers = prefetch + 1 */
	uint8_t *img[TRN_PREFETCH_MAX + 1];       /* device */
	int64_t *lab[TRN_PREFETCH_MAX + 1];
	float *wt[TRN_PREFETCH_MAX + 1];
	struct trn_inflight q[TRN_PREFETCH_MAX + 1];
	uint64_t issued, consumed;   /* batches whose copy was issued / that were computed */
	float *hw;                   /* host staging for weights */
	uint64_t *hid;               /* host copy of each buffer's sample ids (batch per buffer): the
	                                slot goes back before the step, the ids are logged after */
	FILE *slog;                  /* --log-samples: this rank's PREFIX.RANK, else NULL */
	int synthetic, batch;        /* batch: samples a buffer holds (with --balance, up to twice
	                                --batch: CTL_BALANCE_CAP) */
	int balance;
	int done;                    /* the job has no more steps */
	/* what the data decides for the rest of the trainer */
	int classes;                 /* --classes, else from the dataset (once, here), else 10 */
	int nchw;                    /* the ring's layout */
	uint64_t micro_total;        /* the micro-step to stop before (micro-steps count from the
	                                job's start, one ring step each, across resumes) */
	uint64_t first_step;         /* the ring step this run starts at */
	/* Balanced shares: the report ldc holds now (the one every release carries; 0: none), and
	 * the one each of the last rep_n released steps carried (rep_hist[step % rep_n]). */
	double report;
	double *rep_hist;
	uint32_t rep_n;
};

/* Where a run starts: a checkpoint's step and the loader's resume token for it. */
struct trn_start {
	uint64_t step;
	const uint8_t *token;        /* token_len bytes (shm/token.h), NULL with --synthetic */
	uint32_t token_len;
	const uint8_t *split;        /* the checkpoint's split seed (ckpt.h), split_len bytes, or NULL */
	uint32_t split_len;
	double report;               /* this rank's report at the checkpoint (0: none): the one the
				        releases of the resumed run carry until its first report */
};

/* One batch ready on the device for compute. */
struct trn_batch {
	const uint8_t *img;
	const int64_t *lab;
	const float *wt;
	int count, valid;
	uint64_t step;               /* the ring step (--synthetic: the micro-step) */
	const uint64_t *ids;         /* count sample ids; NULL with --synthetic */
};

/* Set up the data of this rank (@rank of @world): attach to loaderd and open the job at @start
 * (NULL: step 0), or make the synthetic batch; device buffers for @o->prefetch batches. */
void trn_data_open(struct trn_data *d, const struct trn_opts *o, struct trn_dev *dev, int rank,
		   int world, const struct trn_start *start);
/* The loader's resume token for ring step @step into @buf (LDC_TOKEN_SIZE bytes). Its length, or
 * 0 with --synthetic. */
uint32_t trn_data_token(struct trn_data *d, uint64_t step, uint8_t *buf);
/* The next batch: keeps `prefetch` copies in flight, then waits until this one's bytes are on the
 * device (the compute stream waits for its copy). Adds the blocking time to *wait_ns (data wait)
 * and *copy_ns (exposed copy). Returns 1 with *b, or 0 at the end of the job. */
int trn_data_next(struct trn_data *d, uint64_t *wait_ns, uint64_t *copy_ns, struct trn_batch *b);
/* Balanced shares: tell loaderd this rank's compute time for a batch of @count samples (no-op
 * without --balance). */
void trn_data_report(struct trn_data *d, uint64_t compute_ns, int count);
/* Balanced shares: the report the release of @step carried (0: none), for a step among the last
 * rep_n released. */
double trn_data_report_of(const struct trn_data *d, uint64_t step);
/* Balanced shares: the weights loaderd has in force at @step, @world entries into @w. 1, or 0
 * when loaderd does not know them (ldc_split_weights). */
int trn_data_split_weights(struct trn_data *d, uint64_t step, uint32_t *w, uint32_t world);
/* The batch from trn_data_next has been computed. */
void trn_data_consumed(struct trn_data *d);
/* Give back what is held, unpin the ring, detach, free the buffers. */
void trn_data_close(struct trn_data *d);

#endif
