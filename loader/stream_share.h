/* stream_share.h - the node cache's bytes shared among every streamed job of the node by their
 * future (loaderd --cache-stream; srv_stream.c, docs/STREAMING.md). No locks, no I/O, no clock:
 * tests/test_stream_share.c drives it alone.
 *
 * Each stream's plan (stream_plan.h) leaves a curve: by the end of round r of its walk (round 0:
 * the steps being filled now; round t: each rank's step t after its next), the bytes of the
 * distinct shards the job reads; its first point is the walk's first step alone. Its job's rate
 * (rounds a second, measured by its stream as its consumers take steps) puts the rounds on one
 * clock. The share is Belady's across jobs: every job is granted its first point (its floor:
 * without it nothing moves, whatever it costs), then the
 * curves' increments in the order of their time ahead (round r > 0: (r + lead) / rate, lead
 * being the steps a rank has opened beyond what its consumer took; round 0's after the floor,
 * steps its consumers take between now and lead / rate: (lead / 2) / rate, so that a slow
 * consumer's ring of opened steps does not come before a fast job's next rounds), the soonest first, while the node's capacity has room: the first increment that does
 * not fit gets what is left and the share ends there (the water level: every job holds what it
 * reads before that time). Past a uid's capacity the same, for that uid's jobs alone: its job
 * gets what the uid has left, and the other uids' go on. A job whose rate is not known yet (it
 * has not moved) is put on the clock of the fastest known, so that a job just started is not
 * starved by one that runs; with no rate known, rounds are compared as they are. */
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
	double lead;                  /* steps a rank has opened beyond its consumer's, >= 0 */
	const struct sshare_pt *pt;   /* npt points, rounds not decreasing; pt[0]: the floor if
				       * its round is 0 */
	uint32_t npt;                 /* 0: no curve yet (granted nothing beyond 0) */
	/* out */
	uint64_t grant;               /* its bytes of the cache */
};

/* One event of the merge: scratch of SSHARE_POINTS per job. */
struct sshare_ev {
	double t;
	uint32_t job, q;
};

/* The room kept within @bound for one more open beside the streams (a manifest and a shard:
 * @want, two of the largest shards being read), at most a quarter of @bound: one uid's set of a
 * huge shard must not leave every other uid's stream its floor alone. */
uint64_t sshare_reserve(uint64_t want, uint64_t bound);

/* Grant @n jobs their share of @cap bytes, each uid at most @cap_uid (0: no bound but @cap).
 * @ev: scratch, n * SSHARE_POINTS. */
void sshare_run(struct sshare_job *jobs, uint32_t n, uint64_t cap, uint64_t cap_uid,
		struct sshare_ev *ev);

#endif
