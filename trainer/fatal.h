/* fatal.h - the trainer's fatal error: say it, then take the whole job down. */
#ifndef LOADERD_TRN_FATAL_H
#define LOADERD_TRN_FATAL_H

/* Print "trainer: rank R: error: MSG" and end the job: MPI_Abort when there are several ranks, so
 * that no rank waits forever for this one. Needs MPI initialised. */
void trn_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
