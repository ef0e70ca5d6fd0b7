/* step_fill.h - drive a server's callbacks (struct srv_ops, loader/srv.h) for one step on the
 * calling thread, without a server: what a test of the callbacks themselves (loader/job.c) needs.
 * tests/step_fill.c; tests/module.mk links it into every test (libtests.a).
 *
 * The callbacks are the seam: the server's worker pool (loader/srv_workers.c) opens a step with
 * ops->step_open, cuts it into tasks that ops->fill fills (telling each fill the task that comes
 * next on its worker, so that its reads can start), and copies the step's ids, flags and labels
 * into the slot. step_fill does the same in that order on one thread, so a test sees what a
 * worker would hand the callbacks; the pool's locking, queueing and publishing are not here (the
 * real server is tested through tests/srv_harness.h). */
#ifndef LOADERD_TESTS_STEP_FILL_H
#define LOADERD_TESTS_STEP_FILL_H
#include "loader/srv.h"

#include <stdint.h>

/* Fill a whole step with @ops and worker state @worker: step_open, then fills over tasks of @task
 * samples (0 = the whole step), then ids, flags and labels copied into @slot. @st's job, rank,
 * world, epoch and step_in_epoch are the caller's; its arrays are allocated here (batch @batch
 * entries; st->held too) and freed before return, after ops->step_release (when step_open
 * answered 0: a streamed set's shards are let go, as the server does after the publish). -EAGAIN
 * with st->wait_shard as step_open answered it. @out sums the tasks' phase_ns and bad counts (its step,
 * begin, end are unused). 0 or the first failure's -errno with out->why; -EPROTO when step_open
 * drew more than @batch samples. */
int step_fill(const struct srv_ops *ops, void *worker, struct srv_step *st, uint32_t batch,
	      uint32_t task, struct ring_slot *slot, struct srv_fill *out);

#endif
