/* loop.h - the training loop of one rank: per micro-step, the next batch (data.h), forward and
 * backward on the device, the DDP step (gradient allreduce overlapped with backward, then SGD),
 * and the time of each phase: data wait, exposed copy, compute, exposed allreduce, optimizer. */
#ifndef LOADERD_TRN_LOOP_H
#define LOADERD_TRN_LOOP_H
#include <stdint.h>

#include "trainer/data.h"
#include "trainer/ddp.h"
#include "trainer/model.h"
#include "trainer/opts.h"
#include "trainer/report.h"

#define TRN_STEPS_RECORDED_MAX 20000   /* steps kept for the report and the trace */

struct trn_train {
	/* in: borrowed */
	const struct trn_opts *o;
	struct trn_dev *dev;
	struct trn_model *m;
	struct trn_ddp *ddp;
	float *params, *grads, *mom;   /* device, the DDP core's flat layout */
	struct trn_data *data;
	int rank;
	/* out */
	long warmup;                   /* micro-steps left out of the figures */
	uint64_t ran;                  /* micro-steps run */
	struct trn_step *rec;          /* the first min(ran, TRN_STEPS_RECORDED_MAX) steps, warm-up
	                                  included; free() it */
	long n_rec;
	uint64_t t_first;              /* the first step's start (ns) */
	struct trn_rank_run run;       /* the measured run: steps = rec + warmup */
};

/* Run the loop to the end of the job or data->micro_total micro-steps. Errors end the job. */
void trn_train_run(struct trn_train *t);

#endif
