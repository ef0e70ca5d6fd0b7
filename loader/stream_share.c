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

uint64_t sshare_reserve(uint64_t want, uint64_t bound)
{
	return want < bound / 4 ? want : bound / 4;
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
		double lead = isfinite(b->lead) && b->lead > 0 ? b->lead : 0;
		uint32_t q0 = npt && b->pt[0].round == 0;

		b->grant = q0 ? b->pt[0].bytes : 0;
		for (uint32_t q = q0; q < npt; q++)
			ev[nev++] = (struct sshare_ev){ (b->pt[q].round ? b->pt[q].round + lead :
							 lead / 2) / rate, j, q };
	}
	qsort(ev, nev, sizeof(*ev), sooner);
	/* the increments, the soonest first, while they fit. The first that does not fit the node
	 * gets what is left, and nothing later is granted (the water level: everything read before
	 * it is held); one past its uid's bound gets what the uid has left, and ends that uid's. */
	uint8_t done[n ? n : 1];       /* by the first job of each uid */
	uint64_t uid_used[n ? n : 1];
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
	/* A uid's floors count against the node up to its bound only: ldfetch holds no more of
	 * it than that (the rest of its floors wait), so that one uid's many streams do not take
	 * from the other uids what it cannot hold itself. Sums saturate. */
	for (uint32_t j = 0; j < n; j++) {
		uint64_t *u = &uid_used[first[j]];
		*u = *u + jobs[j].grant < *u ? UINT64_MAX : *u + jobs[j].grant;
	}
	for (uint32_t j = 0; j < n; j++) {
		if (first[j] != j)
			continue;
		uint64_t f = uid_used[j] < cap_uid ? uid_used[j] : cap_uid;
		used = used + f < used ? UINT64_MAX : used + f;
	}
	for (uint32_t e = 0; e < nev && used < cap; e++) {
		uint32_t j = ev[e].job, q = ev[e].q, u = first[j];
		struct sshare_job *b = &jobs[j];
		if (done[u])
			continue;
		uint64_t prev = q ? b->pt[q - 1].bytes : 0;
		uint64_t add = b->pt[q].bytes > prev ? b->pt[q].bytes - prev : 0;
		uint64_t room = cap - used, uroom = uid_used[u] < cap_uid ? cap_uid - uid_used[u] : 0;
		if (add > uroom)
			add = uroom, done[u] = 1;
		if (add > room)
			add = room;
		b->grant += add;
		used += add;
		uid_used[u] += add;
	}
}
