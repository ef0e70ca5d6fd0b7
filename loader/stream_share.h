/* stream_share.h - the node cache's bytes shared among every streamed job of the node by their
 * future (loaderd --cache-stream; srv_stream.c, docs/STREAMING.md). No locks, no I/O, no clock:
 * tests/test_stream_share.c drives it alone.
 *
 * Each stream's plan (stream_plan.h) leaves a curve: by the end of round r of its walk (round 0:
 * the steps its consumers wait on; round t: each rank's step t after its next), the bytes of the
 * distinct shards the job reads. Its job's rate (rounds a second, measured by its stream) puts the
 * rounds on one clock: round r is r / rate seconds ahead. The share is Belady's across jobs: every
 * job is granted its round 0 (its floor: without it nothing moves, whatever it costs), then the
 * curves' increments in the order of their time ahead, the soonest first, while the node's
 * capacity and the job's uid's have room; an increment that does not fit ends that job's grant
 * (a grant is its curve's prefix: a job never keeps a later shard for a round it gave up) and the
 * others go on. A job whose rate is not known yet (it has not moved) is put on the clock of the
 * fastest known, so that a job just started is not starved by one that runs; with no rate known,
 * rounds are compared as they are. */
#ifndef LOADER_STREAM_SHARE_H
#define LOADER_STREAM_SHARE_H

#include <stdint.h>

#define SSHARE_POINTS 64u   /* a curve's points at most (stream_plan.c thins longer ones) */

struct sshare_pt {
	uint64_t round;    /* by the end of this round of the job's walk */
	uint64_t bytes;    /* the bytes its distinct shards take (non-decreasing along a curve) */
};

struct sshare_job {
	/* in */
	uint32_t uid;
	double rate;                  /* rounds a second; <= 0 (or not finite): not known */
	const struct sshare_pt *pt;   /* npt points, rounds increasing; pt[0], if any, round 0 */
	uint32_t npt;                 /* 0: no curve yet (granted nothing beyond 0) */
	/* out */
	uint64_t grant;               /* its bytes of the cache */
};

/* One event of the merge: scratch of SSHARE_POINTS per job. */
struct sshare_ev {
	double t;
	uint32_t job, q;
};

/* Grant @n jobs their share of @cap bytes, each uid at most @cap_uid (0: no bound but @cap).
 * @ev: scratch, n * SSHARE_POINTS. */
void sshare_run(struct sshare_job *jobs, uint32_t n, uint64_t cap, uint64_t cap_uid,
		struct sshare_ev *ev);

#endif
