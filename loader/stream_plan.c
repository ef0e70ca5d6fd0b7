/* stream_plan.c - one plan of a streamed set: see stream_plan.h. */
#include "loader/stream_plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* qsort_r: the most recently used first. */
static int more_recent(const void *a, const void *b, void *arg)
{
	const int64_t *used = arg;
	int64_t x = used[*(const uint32_t *)a], y = used[*(const uint32_t *)b];

	return x > y ? -1 : x < y;
}

/* The curve: @bytes by the end of round @r, if more than the last point's (the first always). */
static void curve_add(struct splan *p, uint64_t r, uint64_t bytes)
{
	if (!p->curve || (p->ncurve && p->curve[p->ncurve - 1].bytes >= bytes))
		return;
	if (p->ncurve > 1 && p->curve[p->ncurve - 1].round == r) {  /* the floor stays apart */
		p->curve[p->ncurve - 1].bytes = bytes;
		return;
	}
	if (p->ncurve == SSHARE_POINTS) {  /* thinned: round 0, then the later of each pair */
		uint32_t w = 1;
		for (uint32_t q = 2; q < p->ncurve; q += 2)
			p->curve[w++] = p->curve[q];
		p->ncurve = w;
	}
	p->curve[p->ncurve++] = (struct sshare_pt){ r, bytes };
}

int splan_run(struct splan *p)
{
	uint32_t n = 0, n0 = 0, cap = p->list_max;
	uint64_t ahead = p->limit / 2, bytes = 0, t = 0, tstop = p->horizon;
	int full = 0;

	p->nwant = p->nlet = p->nkept = p->ncurve = 0;
	memset(p->seen, 0, p->total);
	/* the near future, into want[0, n): fetched ahead (those not here) */
	for (; p->units0 + p->units && !full && t < p->horizon; t++) {
		uint32_t units = t == 0 ? p->units0 : p->units;
		for (uint32_t i = 0; i < units && !full; i++) {
			uint32_t m = p->shards(p->arg, t, i, p->seen, p->want + n, cap - n);
			uint64_t add = 0;
			for (uint32_t q = n; q < n + m; q++)
				add += p->bytes[p->want[q]];
			if (n == 0 && add > p->whole) {
				p->fail_t = t;
				p->fail_i = i;
				p->fail_shards = m;
				p->fail_bytes = add;
				return -EFBIG;
			}
			/* not this step: far enough ahead; in round 0 (the steps open now and each
			 * rank's next: their consumers wait on them) only past what may be held */
			if (n && bytes + add > (t == 0 ? p->whole : ahead)) {
				for (uint32_t q = n; q < n + m; q++)
					p->seen[p->want[q]] = 0;
				full = 1;
				tstop = t;
				break;
			}
			bytes += add;
			n += m;
			if (t == 0 && i == 0)  /* the floor: the first step alone */
				curve_add(p, 0, bytes);
			full = n == p->total || n == cap;
		}
		if (t == 0)
			n0 = n;
		if (!full || tstop != t)  /* the round is whole */
			curve_add(p, t, bytes);
	}
	if (p->lru)  /* read now */
		for (uint32_t q = 0; q < n0; q++)
			if (p->attached[p->want[q]])
				p->used_ns[p->want[q]] = p->now;
	/* the others here, into order[0, nr), the first to keep first */
	uint32_t nr = 0, left = 0;
	uint64_t cum = bytes;  /* the curve's bytes */
	for (uint32_t k = 0; k < p->total; k++)
		left += p->attached[k] && !p->seen[k];
	for (uint64_t u = 0, r = tstop; ((!p->lru && left) || (p->curve && cum <= p->curve_until)) &&
	     p->units && r < p->horizon && u < p->horizon; r++) {
		uint32_t units = r == 0 ? p->units0 : p->units;
		for (uint32_t i = 0; i < units; i++, u++) {
			uint32_t m = p->shards(p->arg, r, i, p->seen, p->let, cap);
			for (uint32_t q = 0; q < m; q++) {
				cum += p->bytes[p->let[q]];
				if (p->attached[p->let[q]]) {
					p->order[nr++] = p->let[q];
					left--;
				}
			}
			if (!left && !(p->curve && cum <= p->curve_until))
				break;
		}
		curve_add(p, r, cum);
	}
	for (uint32_t k = 0; k < p->total && left; k++)  /* not met: the farthest, or lru's */
		if (p->attached[k] && !p->seen[k]) {
			p->order[nr++] = k;
			left--;
		}
	if (p->lru)
		qsort_r(p->order, nr, sizeof(*p->order), more_recent, p->used_ns);
	/* wanted: the near future's shards not here, soonest first */
	for (uint32_t q = 0; q < n; q++)
		if (!p->attached[p->want[q]])
			p->want[p->nwant++] = p->want[q];
	/* kept while they fit, in order; the rest let go */
	uint64_t room = p->units0 + p->units && !p->lean && p->limit > bytes ? p->limit - bytes : 0;
	for (uint32_t c = 0; c < nr; c++) {
		uint32_t k = p->order[c];
		if (p->bytes[k] <= room) {
			room -= p->bytes[k];
			p->nkept++;
			continue;
		}
		room = 0;  /* in order: nothing after it is kept */
		if (p->now - p->at_ns[k] < p->grace_ns)
			p->nkept++;  /* just came: its step may be about to hold it */
		else if (p->nlet < cap)
			p->let[p->nlet++] = k;
	}
	return 0;
}
