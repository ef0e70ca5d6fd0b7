/* stream_share.c - the node cache shared among streamed jobs by their future: see
 * stream_share.h. */
#include "loader/stream_share.h"

#include <math.h>
#include <stdlib.h>

/* qsort: the soonest first; at one time, a job's points in their order, jobs in theirs */
static int sooner(const void *a, const void *b)
{
	const struct sshare_ev *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	if (x->job != y->job)
		return x->job < y->job ? -1 : 1;
	return x->q < y->q ? -1 : x->q > y->q;
}

void sshare_run(struct sshare_job *jobs, uint32_t n, uint64_t cap, uint64_t cap_uid,
		struct sshare_ev *ev)
{
	double fastest = 0;
	uint32_t nev = 0;
	uint64_t used = 0;

	if (!cap_uid || cap_uid > cap)
		cap_uid = cap;
	for (uint32_t j = 0; j < n; j++)
		if (isfinite(jobs[j].rate) && jobs[j].rate > fastest)
			fastest = jobs[j].rate;
	/* the floors: round 0, whatever it costs */
	for (uint32_t j = 0; j < n; j++) {
		struct sshare_job *b = &jobs[j];
		uint32_t npt = b->npt < SSHARE_POINTS ? b->npt : SSHARE_POINTS;
		double rate = isfinite(b->rate) && b->rate > 0 ? b->rate : fastest > 0 ? fastest : 1;

		b->grant = npt && b->pt[0].round == 0 ? b->pt[0].bytes : 0;
		used += b->grant;
		for (uint32_t q = 0; q < npt; q++)
			if (b->pt[q].round > 0)
				ev[nev++] = (struct sshare_ev){ (double)b->pt[q].round / rate, j, q };
	}
	qsort(ev, nev, sizeof(*ev), sooner);
	/* the increments, the soonest first, while they fit; one that does not ends its job's */
	uint8_t done[n ? n : 1];
	uint64_t uid_used[n ? n : 1];  /* by the first job of each uid */
	uint32_t first[n ? n : 1];
	for (uint32_t j = 0; j < n; j++) {
		done[j] = 0;
		first[j] = j;
		for (uint32_t i = 0; i < j; i++)
			if (jobs[i].uid == jobs[j].uid) {
				first[j] = first[i];
				break;
			}
		uid_used[j] = 0;
	}
	for (uint32_t j = 0; j < n; j++)
		uid_used[first[j]] += jobs[j].grant;
	for (uint32_t e = 0; e < nev; e++) {
		uint32_t j = ev[e].job, q = ev[e].q;
		struct sshare_job *b = &jobs[j];
		if (done[j])
			continue;
		uint64_t prev = q ? b->pt[q - 1].bytes : 0;
		uint64_t add = b->pt[q].bytes > prev ? b->pt[q].bytes - prev : 0;
		if (add > cap - (used < cap ? used : cap) || used > cap ||
		    uid_used[first[j]] > cap_uid || add > cap_uid - uid_used[first[j]]) {
			done[j] = 1;
			continue;
		}
		b->grant += add;
		used += add;
		uid_used[first[j]] += add;
	}
}
