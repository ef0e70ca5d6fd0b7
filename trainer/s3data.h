/* s3data.h - the trainer's s3:// datasets (s3data.c). */
#ifndef LOADERD_TRN_S3DATA_H
#define LOADERD_TRN_S3DATA_H
#include "trainer/opts.h"

/* When o->dataset is an s3:// URL: leave it so when loaderd's node cache takes it (with
 * --classes, not --synthetic: open_job then offers it again on the job's own connection), else
 * make it local in the user's cache and point o->dataset at the local copy (collective: every rank
 * calls it). Exits through trn_die on a refusal, naming it. */
void trn_s3_dataset(struct trn_opts *o, int local_rank, int rank);

#endif
