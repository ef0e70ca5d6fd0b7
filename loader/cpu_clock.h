/* cpu_clock.h - a worker's CPU time, charged per unit of work with few reads of the thread clock.
 * CLOCK_THREAD_CPUTIME_ID has no vDSO path: each read is a system call that takes the run-queue
 * lock, as dear as a small record's copy. One thread per struct; not thread-safe. */
#ifndef LOADERD_CPU_CLOCK_H
#define LOADERD_CPU_CLOCK_H
#include <stdint.h>

#define LDR_CPU_CLOCK_UNITS 8            /* units a window at most */
#define LDR_CPU_CLOCK_WINDOW_NS 1000000  /* wall ns a window at most */

struct ldr_cpu_clock {
	int64_t mark;     /* this thread's CPU time at the last read, ns */
	int64_t mark_ns;  /* the caller's wall clock then */
	int64_t est;      /* ns charged beyond the CPU read so far (>= 0): estimates since the
			   * last read, plus an overestimate carried from before */
	int64_t wall;     /* wall ns of the units since the last read */
	double ratio;     /* CPU per wall ns of the units of the last window, 0..2 */
	int units;        /* units since the last read */
	uint64_t reads;   /* thread clock reads since init */
};

/* This thread's CPU time, ns. */
int64_t ldr_thread_cpu_ns(void);
/* Start counting at wall time @now_ns (any monotonic clock, the same for every call). */
void ldr_cpu_clock_init(struct ldr_cpu_clock *c, int64_t now_ns);
/* The CPU ns to charge to a unit of work (a task, a step open) that took @dt_ns of wall time and
 * ended at @now_ns. The thread clock is read at the end of every LDR_CPU_CLOCK_UNITS-th unit, or
 * of the first one LDR_CPU_CLOCK_WINDOW_NS or more after the last read; a unit in between is
 * charged @dt_ns times the last window's CPU/wall ratio, and the read charges what the window
 * used less those estimates (never below 0: an overestimate is carried as c->est). So the sum
 * of all charges is always the CPU read at the last read (c->mark, less the start) plus c->est;
 * the work between two units counts with the one after it. */
int64_t ldr_cpu_clock_lap(struct ldr_cpu_clock *c, int64_t dt_ns, int64_t now_ns);

#endif
