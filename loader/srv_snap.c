/* srv_snap.c - the server's counters, copied: one struct srv_snapshot (srv.h) per request, from
 * which loaderctl's answers (srv_admin.c) and the metrics file (loader/metrics.c) are rendered, and
 * one rank's figures for CTL_STATS (srv_jobs.c). Gathering lives here once, so that every output
 * agrees on what a figure means.
 *
 * Threads: srv_snapshot_take locks s->mu for the copy only (one allocation, then a walk over the
 * jobs and the attached ranks, one state-word scan per attached rank); the caller renders and writes without
 * the lock. srv_snapshot_locked and srv_rank_snap are for callers that hold it already. A summary
 * (no ranks: loaderctl status and jobs) copies per-job figures that are kept up to date as they
 * change (rates by srv_housekeeping, memory as it is reserved and let go, the ranks' sums at each
 * publish), so its cost is the number of jobs, whatever their world sizes. With ranks (loaderctl
 * stats, the metrics file) it lists only the attached ranks, found through s->live, and the last
 * SRV_SNAP_RECENT of each job to detach: O(attached ranks), never O(world). */
#include "loader/srv_impl.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_rank_snap(const struct job *j, uint32_t r, int64_t now, struct srv_rank_snap *out)
{
	const struct rank_state *rs = &j->ranks[r];
	const struct att *a = rs->att;

	memset(out, 0, sizeof(*out));
	out->rank = r;
	out->attached = a != NULL;
	out->started = rs->started;
	out->attaches = rs->attaches;
	out->published = rs->published;
	out->samples = rs->samples;
	out->fill_ns = rs->fill_ns;
	out->latency_ns = rs->latency_ns;
	_Static_assert(sizeof(out->phase_ns) == sizeof(rs->phase_ns), "one slot per phase");
	memcpy(out->phase_ns, rs->phase_ns, sizeof(out->phase_ns));
	out->empty_ns = rs->empty_ns;
	out->rate = rs->rate;
	out->released = rs->resume;
	if (!a)
		return;
	uint64_t rel = srv_att_released(a);
	out->pid = a->conn ? a->conn->pid : 0;
	out->released = rel;
	out->slots = ring_header(a->ring)->slots;
	out->occupancy = (uint32_t)(a->next - rel);
	if (a->empty_since && now > a->empty_since)
		out->empty_ns += (uint64_t)(now - a->empty_since);
}

static int by_rank(const void *x, const void *y)
{
	const struct srv_rank_snap *a = x, *b = y;

	return (a->rank > b->rank) - (a->rank < b->rank);
}

/* Ranks of @j a snapshot lists at most: its attached ones and the recent detaches. */
static size_t listed_max(const struct job *j)
{
	return (size_t)j->attached + (j->nrecent < SRV_SNAP_RECENT ? j->nrecent : SRV_SNAP_RECENT);
}

struct srv_snapshot *srv_snapshot_locked(struct srv *s, const struct job *only,
					 const struct conn *viewer, int ranks)
{
	size_t njobs = 0, nranks = 0;
	int64_t now = now_ns();

#define WANTED(j) ((!only || (j) == only) && (!viewer || srv_job_visible(viewer, (j))))
	/* Never a rank per world entry: only what is attached (the walk is over s->live) and a
	 * few detached ones per job. */
	for (struct job *j = s->jobs; j; j = j->next) {
		j->snap_ix = UINT32_MAX;
		if (WANTED(j)) {
			j->snap_ix = (uint32_t)njobs++;
			nranks += ranks ? listed_max(j) : 0;
		}
	}
	size_t size = sizeof(struct srv_snapshot) + njobs * sizeof(struct srv_job_snap) +
		      nranks * sizeof(struct srv_rank_snap);
	struct srv_snapshot *snap = calloc(1, size);
	if (!snap)
		return NULL;
	snap->bytes = size;
	snap->jobs = (struct srv_job_snap *)(snap + 1);
	struct srv_rank_snap *rank_mem = (struct srv_rank_snap *)(snap->jobs + njobs);

	snap->uptime_ns = now - s->start_ns;
	snap->workers = s->nthreads;
	snap->busy_ns = s->busy_ns;
	snap->busy_share = s->busy_share;
	snap->cpu_budget = s->budget.cores;
	snap->active_cap = s->cap;
	snap->mem_used = s->mem_used;
	snap->mem_limit = s->opts.mem_limit;
	snap->accept_paused = s->accept_paused_until != 0;
	memcpy(snap->phases, s->ops.phases, sizeof(snap->phases));
	snprintf(snap->socket, sizeof(snap->socket), "%s", s->path);
	snap->clients = s->nconns;
	for (const struct job *j = s->jobs; j; j = j->next) {
		snap->ranks_attached += j->attached;
		snap->mem_rings += j->mem_rings;
		if (j->snap_ix == UINT32_MAX)
			continue;
		struct srv_job_snap *js = &snap->jobs[snap->njobs++];
		snprintf(js->name, sizeof(js->name), "%s", j->name);
		snprintf(js->dataset, sizeof(js->dataset), "%s", j->spec.dataset);
		snprintf(js->io, sizeof(js->io), "%s", j->info.io);
		js->id = j->id;
		js->uid = j->uid;
		js->share = j->spec.share;
		js->share_gid = j->spec.share_gid;
		js->world = j->spec.world;
		js->attached = j->attached;
		js->batch = j->spec.batch;
		js->steps_per_epoch = j->info.steps_per_epoch;
		js->steps_total = j->steps_total;
		js->bad = j->bad;
		js->nbad_ids = j->nbad_ids < 16 ? j->nbad_ids : 16;
		memcpy(js->bad_ids, j->bad_ids, sizeof(js->bad_ids));
		js->failed = j->failed;
		js->rate = j->rate;
		js->demand = j->demand;
		js->target = j->target;
		js->weight = j->spec.weight ? j->spec.weight : 1;
		js->cpu = j->cpu_cores;
		js->cpu_ns = j->cpu_ns;
		js->mem_rings = j->mem_rings;
		js->mem_table = j->mem_table;
		js->mem_state = j->mem_state;
		js->started = j->started;
		js->published = j->published;
		js->samples = j->samples;
		js->fill_ns = j->fill_ns;
		js->latency_ns = j->latency_ns;
		memcpy(js->phase_ns, j->phase_ns, sizeof(js->phase_ns));
		if (j->stream)
			srv_stream_snap(j->stream, js);
		if (!ranks)
			continue;
		js->ranks = rank_mem;
		rank_mem += listed_max(j);
		/* The recent detaches that are still detached, each once. */
		unsigned n = j->nrecent < SRV_SNAP_RECENT ? j->nrecent : SRV_SNAP_RECENT;
		for (unsigned k = 0; k < n; k++) {
			uint32_t r = j->recent[(j->nrecent - 1 - k) % SRV_SNAP_RECENT];
			int dup = j->ranks[r].att != NULL;
			for (uint32_t q = 0; q < js->nranks && !dup; q++)
				dup = js->ranks[q].rank == r;
			if (!dup)
				srv_rank_snap(j, r, now, &js->ranks[js->nranks++]);
		}
	}
	if (ranks) {
		for (unsigned k = 0; k < s->nlive; k++) {
			const struct att *a = s->live[k];
			if (a->job->snap_ix == UINT32_MAX)
				continue;
			struct srv_job_snap *js = &snap->jobs[a->job->snap_ix];
			assert(js->nranks < listed_max(a->job));
			srv_rank_snap(a->job, a->rank, now, &js->ranks[js->nranks++]);
		}
		for (unsigned k = 0; k < snap->njobs; k++)
			qsort(snap->jobs[k].ranks, snap->jobs[k].nranks, sizeof(struct srv_rank_snap),
			      by_rank);
	}
#undef WANTED
	return snap;
}

int srv_snapshot_take(struct srv *s, struct srv_snapshot **out)
{
	pthread_mutex_lock(&s->mu);
	*out = srv_snapshot_locked(s, NULL, NULL, 1);
	pthread_mutex_unlock(&s->mu);
	return *out ? 0 : -ENOMEM;
}

void srv_snapshot_free(struct srv_snapshot *snap)
{
	free(snap);
}
