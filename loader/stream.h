/* stream.h - a step's shards in a streamed set (formats/dpk.h, dpk_open_pending;
 * docs/STREAMING.md): which shards a step's samples fall in, held all or none, so that a step is
 * opened only when every shard it reads is attached and none of them can be detached until the
 * step is done. Pure over formats/: no lock, no log; callable on any thread (the holds are the
 * set's atomics). On a set opened whole or one file every hold succeeds and counts nothing, so a
 * caller needs no second path. */
#ifndef LOADERD_STREAM_H
#define LOADERD_STREAM_H
#include <stdint.h>

#include "formats/dpk.h"

/* Hold every distinct shard of samples @ids[0, n) of @d. 0 with @out[0, *nout) the shards held
 * (distinct, ascending; release them with ldr_step_release when the step is done), or -EAGAIN
 * with *wait a pending shard among them and nothing held, or -ERANGE for an id past the set's
 * count (nothing held). @out has room for @n entries (a step's batch: a step reads at most one
 * shard per sample). O(n log n). */
int ldr_step_hold(struct dpk *d, const uint64_t *ids, uint32_t n, uint32_t *out, uint32_t *nout,
		  uint32_t *wait);
/* Release what ldr_step_hold held: @shards[0, n). */
void ldr_step_release(struct dpk *d, const uint32_t *shards, uint32_t n);

#endif
