/* steps.h - every rank's step records, brought together: gathered to rank 0 for the report, and
 * written as one Chrome trace (Perfetto) of every rank. Collective: every rank calls each
 * function, in the same order. Errors end the job (trn_die). */
#ifndef LOADERD_TRN_STEPS_H
#define LOADERD_TRN_STEPS_H
#include <stdint.h>

#include "trainer/report.h"

/* Gather each rank's measured run to rank 0. On rank 0 returns an array of @world runs whose
 * steps point into *@store; elsewhere NULL. free() both. */
struct trn_rank_run *trn_steps_gather(const struct trn_rank_run *mine, int rank, int world,
				      struct trn_step **store);
/* Rank 0 writes the first @n records @rec of every rank to @path, one time origin for all: the
 * earliest first step over ranks. */
void trn_steps_write_trace(const char *path, const struct trn_step *rec, long n, int rank,
			   int world);

#endif
