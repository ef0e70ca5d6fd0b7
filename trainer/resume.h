/* resume.h - the trainer's side of exactly-once: start from a checkpoint (--resume), write one
 * every N optimizer steps and on SIGTERM/SIGINT (--checkpoint-dir, --checkpoint-every), and log
 * the stream of batches the rank trained on (--log-consumed).
 *
 * What makes a resumed run end with the same bytes as an uninterrupted one: a checkpoint is
 * taken only after an optimizer step, and holds everything the rest of the run depends on: the
 * parameters, the momentum, and the step, whose batches loaderd recomputes from the resume token
 * (the sampler, the crops and flips and the substitutes of bad records are functions of (seed,
 * epoch, sample), not of history). Gradients are overwritten by the first micro-step after an
 * optimizer step, so they need no saving.
 *
 * Collective: every rank calls each function, in the same order (rank 0 reads and writes the
 * files; MPI carries what the others need). Errors end the job (trn_die). */
#ifndef LOADERD_TRN_RESUME_H
#define LOADERD_TRN_RESUME_H
#include <stdint.h>

#include "trainer/data.h"
#include "trainer/loop.h"
#include "trainer/opts.h"

struct trn_resume;

/* Before the data opens: with --resume, rank 0 loads the newest checkpoint of --checkpoint-dir
 * and every rank learns where to start: *start is set and 1 returned, or 0 for a fresh start
 * (no --resume, or no checkpoint yet). Installs the stop-signal handler with --checkpoint-dir.
 * *out is NULL when none of the options is given. */
int trn_resume_open(const struct trn_opts *o, int rank, int world, struct trn_start *start,
		    struct trn_resume **out);
/* After the model is made: the checkpoint's parameters and momentum replace the initial ones on
 * every rank; opens the --log-consumed file and notes where this run starts. NULL @r: no-op. */
void trn_resume_begin(struct trn_resume *r, struct trn_train *t);
/* After micro-step @micro trained on @b: log it, and after an optimizer step write a checkpoint
 * when one is due or a stop signal came to any rank. Returns 1 when the run must stop here (a
 * stop signal; its checkpoint is written), else 0. NULL @r: 0. */
int trn_resume_step(struct trn_resume *r, struct trn_train *t, uint64_t micro,
		    const struct trn_batch *b);
void trn_resume_close(struct trn_resume *r);  /* NULL ok */

#endif
