/* stream_plan.h - one plan of a set streamed through the node cache (loaderd --cache-stream;
 * srv_stream.c, docs/STREAMING.md): from the sampler's future, which shards to fetch ahead and
 * which of those already here to let go. No locks, no I/O, no clock: the future comes through a
 * callback, the times from the caller, so that tests/test_stream_plan.c drives it alone.
 *
 * The policy. The future is walked in rounds: round 0 is the steps being filled now (the parked
 * ones, then each rank's next), round t each rank's step t after its next; each unit is one
 * step, whose shards are taken whole or not at all.
 *  - Half the budget fetches ahead: the shards of the walk's first units, in first-use order,
 *    until their bytes would pass limit / 2; but every unit of round 0 (steps whose consumers
 *    wait now) while they fit in @whole, and the first unit whatever it costs (without it
 *    nothing moves), unless it alone exceeds @whole: then the plan fails (-EFBIG), the step
 *    named. The caller lists round 0's parked steps soonest first.
 *  - The rest of the budget keeps shards already here for a later use. future: in the order the
 *    walk, going on, meets them (the soonest next use first: Belady's order), up to @horizon
 *    more units, then those it did not meet; lru: the most recently used first (@used_ns, set to
 *    @now for those the steps being filled read).
 *  - Kept in that order while their bytes fit; every shard after the first that does not fit is
 *    let go, except one attached less than @grace_ns ago. With no unit at all (nobody reads),
 *    or @lean (the caller saw wanted shards not come: the cache may lack the room), nothing is
 *    kept for later.
 *  - With @curve, the walk also leaves the job's curve for stream_share.h: the first step's
 *    bytes (round 0, the floor), then by the end of each round the bytes of the distinct shards
 *    read so far (whether here or not); the walk goes on for it until those bytes pass
 *    @curve_until (no share could be larger) or the horizon. Past SSHARE_POINTS rounds the curve is thinned: every
 *    other point after round 0 goes, the later of each pair kept (its bytes counted a little
 *    later than they are read). */
#ifndef LOADER_STREAM_PLAN_H
#define LOADER_STREAM_PLAN_H

#include <stdint.h>

#include "loader/stream_share.h"

/* The shards unit @i of round @t reads that @seen has not marked: marked, and appended to @out
 * (at most @max). 0 for a unit past the job's end. */
typedef uint32_t (*splan_shards_fn)(void *arg, uint64_t t, uint32_t i, uint8_t *seen, uint32_t *out,
				    uint32_t max);

struct splan {
	/* in */
	uint32_t total;            /* shards in the set */
	const uint8_t *attached;   /* total: here (attached) */
	const uint64_t *bytes;     /* total: what each takes in the cache */
	uint64_t limit;            /* the stream's budget of bytes here */
	uint64_t whole;            /* what the cache may hold for it at most (one step's bound) */
	int lru;                   /* keep by recency, not by the future */
	int lean;                  /* keep nothing for later (wanted shards are not coming) */
	const int64_t *at_ns;      /* total: when each was attached */
	int64_t now, grace_ns;
	uint32_t units0, units;    /* units in round 0, in each later round (0, 0: nobody reads) */
	uint64_t horizon;          /* rounds ahead at most; the walk for the kept, units at most */
	splan_shards_fn shards;
	void *arg;
	uint32_t list_max;         /* capacity of want and let (CTL_SHARD_LIST_MAX) */
	/* in and out */
	int64_t *used_ns;          /* total: lru: when each was last read */
	/* scratch: seen (total), order (total); out: want and let (list_max each) */
	uint8_t *seen;
	uint32_t *order;
	uint32_t *want, nwant;     /* not here, to fetch, soonest first */
	uint32_t *let, nlet;       /* here, to let go, in the order they lost their place */
	uint32_t nkept;            /* here and kept (for the log and the tests) */
	/* out, with @curve (SSHARE_POINTS): the job's curve */
	struct sshare_pt *curve;
	uint32_t ncurve;
	uint64_t curve_until;
	/* out, on -EFBIG: the unit that cannot fit */
	uint64_t fail_t;
	uint32_t fail_i, fail_shards;
	uint64_t fail_bytes;
};

/* One plan. 0, or -EFBIG (fail_*). */
int splan_run(struct splan *p);

#endif
