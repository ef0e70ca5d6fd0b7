/* stream.c - a step's shards held all or none (loader/stream.h; docs/STREAMING.md, "A job's
 * steps on attached shards"). */
#include "loader/stream.h"

#include <errno.h>
#include <stdlib.h>

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

int ldr_step_hold(struct dpk *d, const uint64_t *ids, uint32_t n, uint32_t *out, uint32_t *nout,
		  uint32_t *wait)
{
	uint64_t count = dpk_count(d);
	uint32_t m = 0;

	*nout = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (ids[i] >= count)
			return -ERANGE;
		out[i] = dpk_shard_find(d, ids[i]);
	}
	qsort(out, n, sizeof(*out), cmp_u32);
	for (uint32_t i = 0; i < n; i++)  /* distinct, in place */
		if (i == 0 || out[i] != out[m - 1])
			out[m++] = out[i];
	for (uint32_t i = 0; i < m; i++) {
		int ret = dpk_shard_hold(d, out[i]);
		if (ret < 0) {
			*wait = out[i];
			ldr_step_release(d, out, i);
			return ret;
		}
	}
	*nout = m;
	return 0;
}

void ldr_step_release(struct dpk *d, const uint32_t *shards, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		dpk_shard_release(d, shards[i]);
}
