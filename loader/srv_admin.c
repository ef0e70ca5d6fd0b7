/* srv_admin.c - loaderctl's answers (CTL_ADMIN): daemon status, the jobs, per-rank stats, and
 * stopping a job, rendered as text for people or as JSON for programs.
 *
 * Threads: srv_on_admin runs on the control thread; under s->mu it charges the uid's budget
 * (--admin-share, every verb) and copies what the answer needs into a snapshot (srv_snap.c: a
 * summary of each job for status and jobs, and for stats the attached ranks of the jobs asked
 * for and the last few to detach: O(attached ranks), never O(world)); it
 * lets go of the lock while it renders that copy into memory that this file allocates, then
 * srv_conn_send_text sends it in CTL_ADMIN_TEXT chunks as fast as the client reads them and frees
 * it. It changes nothing but a stopped job's failure fields.
 *
 * It owns the rendering only; it uses srv_core.c (the uid's budget), srv_jobs.c (the job asked
 * for), srv_snap.c (the copy) and srv_conn.c (to answer). Nothing calls it but the control loop's
 * dispatch (srv_loop.c). */
#include "loader/srv_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* An answer being built: @p (@len bytes used of @cap) grows as put() needs; @oom once it could
 * not, after which put() does nothing and the answer is an error. */
struct text {
	char *p;
	size_t len, cap;
	int oom;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;

	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0 || t->oom)
			return;
		if (t->p && t->len + (size_t)n < t->cap) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = (t->cap + (size_t)n + 1) * 2;
		char *q = realloc(t->p, cap);
		if (!q) {
			t->oom = 1;
			return;
		}
		t->p = q;
		t->cap = cap;
	}
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void put_json_str(struct text *t, const char *s)
{
	put(t, "\"");
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			put(t, "\\%c", ch);
		else if (ch < 0x20)
			put(t, "\\u%04x", ch);
		else
			put(t, "%c", ch);
	}
	put(t, "\"");
}

/* Text for people: a client's bytes (a dataset path) with control characters and backslashes
 * escaped, so that they cannot move the cursor or forge lines. */
static void put_text_str(struct text *t, const char *s)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch < 0x20 || ch == 0x7f || ch == '\\')
			put(t, "\\x%02x", ch);
		else
			put(t, "%c", ch);
	}
}

/* A rank's mean batch latency (first task taken to publish) in ms, or "-" before its first
 * publish. Below 0.1 ms (small records from memory: a few microseconds) with 4 decimals, so that
 * it does not read as 0. */
static const char *latency_ms(char *buf, size_t len, const struct srv_rank_snap *rs)
{
	if (!rs->published)
		return "-";
	double ms = rs->latency_ns * 1e-6 / rs->published;
	snprintf(buf, len, ms < 0.1 ? "%.4f ms" : "%.2f ms", ms);
	return buf;
}

/* @phases: the callbacks' names for the phases of a fill (unnamed ones are left out). */
static void admin_job(struct text *t, const struct srv_phase *phases, const struct srv_job_snap *j,
		      int json, int stats)
{
	/* The job's sums, kept as steps are published: the ranks are not walked (a snapshot lists
	 * the attached ones only, srv_snap.c). */
	uint64_t fill = j->fill_ns;
	const uint64_t *phase = j->phase_ns;
	uint32_t others = j->world - j->nranks, never = j->world - j->started;

	if (json) {
		put(t, "{\"job\":");
		put_json_str(t, j->name);
		put(t, ",\"id\":%llu,\"uid\":%u,\"shared_gid\":", (unsigned long long)j->id,
		    (unsigned)j->uid);
		if (j->share == CTL_SHARE_GROUP)
			put(t, "%u,\"dataset\":", (unsigned)j->share_gid);
		else
			put(t, "null,\"dataset\":");
		put_json_str(t, j->dataset);
		put(t, ",\"world\":%u,\"attached\":%u,\"batch\":%u,\"steps_per_epoch\":%llu,"
		    "\"steps_total\":%llu,\"samples_per_s\":%.1f,\"bad_records\":%llu,\"bad_ids\":[",
		    j->world, j->attached, j->batch, (unsigned long long)j->steps_per_epoch,
		    (unsigned long long)j->steps_total, j->rate, (unsigned long long)j->bad);
		for (unsigned b = 0; b < j->nbad_ids; b++)
			put(t, "%s%llu", b ? "," : "", (unsigned long long)j->bad_ids[b]);
		put(t, "],\"failed\":%s,\"demand_samples_per_s\":%.1f,\"target_steps\":%u,"
		    "\"weight\":%u,\"cpu_cores\":%.3f,\"cpu_s\":%.3f,\"published\":%llu,"
		    "\"samples\":%llu,\"ranks_never_attached\":%u", j->failed ? "true" : "false",
		    j->demand, j->target, j->weight, j->cpu, j->cpu_ns * 1e-9,
		    (unsigned long long)j->published, (unsigned long long)j->samples, never);
		if (j->streamed)
			put(t, ",\"stream\":{\"shards\":%u,\"shards_here\":%u,\"cache_share\":%llu,"
			    "\"steps_per_s_per_rank\":%.1f}", j->stream_shards, j->stream_here,
			    (unsigned long long)j->stream_share, j->stream_rate);
		else
			put(t, ",\"stream\":null");
		if (stats) {
			put(t, ",\"io\":");
			put_json_str(t, j->io);
			put(t, ",\"fill_s\":%.3f", fill * 1e-9);
			for (unsigned p = 0; p < SRV_PHASES_MAX; p++)
				if (phases[p].name)
					put(t, ",\"%s_s\":%.3f", phases[p].name, phase[p] * 1e-9);
			put(t, ",\"ranks_not_listed\":%u,\"ranks\":[", others);
			for (uint32_t k = 0; k < j->nranks; k++) {
				const struct srv_rank_snap *rs = &j->ranks[k];
				put(t, "%s{\"rank\":%u,\"attached\":%s,\"pid\":%d,\"published\":%llu,"
				    "\"released\":%llu,\"samples\":%llu,\"samples_per_s\":%.1f,"
				    "\"ring_slots\":%u,\"ring_occupancy\":%u,\"ring_empty_s\":%.3f,"
				    "\"attaches\":%u,\"batch_latency_ms\":",
				    k ? "," : "", rs->rank, rs->attached ? "true" : "false", (int)rs->pid,
				    (unsigned long long)rs->published, (unsigned long long)rs->released,
				    (unsigned long long)rs->samples, rs->rate, rs->slots, rs->occupancy,
				    rs->empty_ns * 1e-9, rs->attaches);
				if (rs->published)
					put(t, "%.3f}", rs->latency_ns * 1e-6 / rs->published);
				else
					put(t, "null}");
			}
			put(t, "]");
		}
		put(t, "}");
		return;
	}
	put(t, "job %s (id %llu, uid %u", j->name, (unsigned long long)j->id, (unsigned)j->uid);
	if (j->share == CTL_SHARE_GROUP)
		put(t, ", shared with gid %u", (unsigned)j->share_gid);
	put(t, "): ");
	put_text_str(t, j->dataset);
	put(t, "\n  %u/%u ranks attached, batch %u, %llu steps/epoch, %.1f samples/s, %llu bad "
	    "records", j->attached, j->world, j->batch, (unsigned long long)j->steps_per_epoch,
	    j->rate, (unsigned long long)j->bad);
	if (j->nbad_ids) {
		put(t, " (sample ids:");
		for (unsigned b = 0; b < j->nbad_ids; b++)
			put(t, " %llu", (unsigned long long)j->bad_ids[b]);
		put(t, ")");
	}
	put(t, "%s\n", j->failed ? ", FAILED" : "");
	put(t, "  demand %.1f samples/s, target %u steps ahead, weight %u, CPU given %.2f cores "
	    "(%.1f s in all)\n", j->demand, j->target, j->weight, j->cpu, j->cpu_ns * 1e-9);
	if (j->streamed)
		put(t, "  streamed through the node cache: %u/%u shards here, its share %llu bytes, "
		    "%.1f steps/s a rank\n", j->stream_here, j->stream_shards,
		    (unsigned long long)j->stream_share, j->stream_rate);
	if (stats && j->io[0])
		put(t, "  reads: %s\n", j->io);
	if (!stats)
		return;
	if (fill) {
		put(t, "  fill time %.2f s", fill * 1e-9);
		for (unsigned p = 0, n = 0; p < SRV_PHASES_MAX; p++)
			if (phases[p].name)
				put(t, "%s %.0f%% %s", n++ ? "," : ":", 100.0 * phase[p] / fill,
				    phases[p].doing ? phases[p].doing : phases[p].name);
		put(t, "\n");
	}
	for (uint32_t k = 0; k < j->nranks; k++) {
		const struct srv_rank_snap *rs = &j->ranks[k];
		char lat[32];
		if (rs->attached)
			put(t, "  rank %u: pid %d, step %llu, %.1f samples/s, ring %u/%u slots full, "
			    "empty %.2f s, batch latency %s\n", rs->rank, (int)rs->pid,
			    (unsigned long long)rs->released, rs->rate, rs->occupancy, rs->slots,
			    rs->empty_ns * 1e-9, latency_ms(lat, sizeof(lat), rs));
		else
			put(t, "  rank %u: detached, resumes at step %llu, batch latency %s\n", rs->rank,
			    (unsigned long long)rs->released, latency_ms(lat, sizeof(lat), rs));
	}
	/* Listing every rank would cost O(world): the others are counted. */
	if (others)
		put(t, "  %u other rank%s not attached (%u never attached)\n", others,
		    others == 1 ? "" : "s", never);
}

/* Under mu. The job @name as @c sees it: its own, else one it may see (another user's, shared
 * with it; any, for root and the daemon's user); NULL when none. */
static struct job *find_visible(struct srv *s, const struct conn *c, const char *name)
{
	struct job *j = srv_job_find(s, c->uid, name);

	for (struct job *k = s->jobs; !j && k; k = k->next)
		if (!strcmp(k->name, name) && srv_job_visible(c, k))
			j = k;
	return j;
}

/* The daemon, and the memory each job (that @c may see) makes it hold. From a summary snapshot. */
static void admin_status(struct text *t, const struct srv_snapshot *snap, int json)
{
	double up = (double)snap->uptime_ns * 1e-9;

	if (json)
		put(t, "{\"pid\":%d,\"uptime_s\":%.1f,\"workers\":%u,\"workers_busy\":%.3f,"
		    "\"jobs\":%u,\"ranks_attached\":%u,\"clients\":%u,\"ring_bytes\":%llu,"
		    "\"mem_bytes\":%llu,\"ring_bytes_limit\":%llu,\"mem_bytes_limit\":%llu,"
		    "\"cpu_budget\":%.3f,\"workers_needed\":%u,\"socket\":",
		    (int)getpid(), up, snap->workers, snap->busy_share, snap->njobs,
		    snap->ranks_attached, snap->clients, (unsigned long long)snap->mem_rings,
		    (unsigned long long)snap->mem_used, (unsigned long long)snap->mem_limit,
		    (unsigned long long)snap->mem_limit, snap->cpu_budget, snap->active_cap);
	else
		put(t, "loaderd pid %d, up %.0f s, socket %s\n%u workers, %.0f%% busy, %u needed now, "
		    "CPU budget %.2f cores\n"
		    "%u jobs, %u ranks attached, %u clients\nmemory for jobs %llu MiB of %llu MiB "
		    "(rings %llu MiB)\n", (int)getpid(), up, snap->socket, snap->workers,
		    100 * snap->busy_share, snap->active_cap, snap->cpu_budget, snap->njobs,
		    snap->ranks_attached, snap->clients, (unsigned long long)(snap->mem_used >> 20),
		    (unsigned long long)(snap->mem_limit >> 20),
		    (unsigned long long)(snap->mem_rings >> 20));
	if (!json && snap->accept_paused)
		put(t, "not accepting connections for now: out of file descriptors\n");
	if (json) {
		put_json_str(t, snap->socket);
		put(t, ",\"job_memory\":[");
	}
	for (unsigned k = 0; k < snap->njobs; k++) {
		const struct srv_job_snap *j = &snap->jobs[k];
		uint64_t all = j->mem_rings + j->mem_table + j->mem_state;
		if (json) {
			put(t, "%s{\"job\":", k ? "," : "");
			put_json_str(t, j->name);
			put(t, ",\"mem_bytes\":%llu,\"ring_bytes\":%llu,\"rank_table_bytes\":%llu,"
			    "\"index_and_buffers_bytes\":%llu}", (unsigned long long)all,
			    (unsigned long long)j->mem_rings, (unsigned long long)j->mem_table,
			    (unsigned long long)j->mem_state);
		} else {
			put(t, "job %s: memory %llu KiB (rings %llu KiB, rank table %llu KiB, index and "
			    "record buffers %llu KiB)\n", j->name, (unsigned long long)(all >> 10),
			    (unsigned long long)(j->mem_rings >> 10),
			    (unsigned long long)(j->mem_table >> 10),
			    (unsigned long long)(j->mem_state >> 10));
		}
	}
	if (json)
		put(t, "]}\n");
}

/* Under mu. loaderctl's requests: answered as text chunks, then an empty chunk. */
void srv_on_admin(struct srv *s, struct conn *c, const struct ctl_admin *req)
{
	char why[CTL_TEXT_MAX];
	struct text t = { 0 };
	int json = !!(req->flags & CTL_ADMIN_JSON), n = 0, shown = 0;

	if (ctl_check_admin(req, why, sizeof(why)) < 0) {
		srv_conn_fail(s, c, EINVAL, "%s", why);
		return;
	}
	/* Every answer costs the control thread, and its copy holds the lock the workers need:
	 * each uid may take opts.admin_share of that thread's time, whatever it asks, so that a
	 * client asking again and again cannot take the lock from everyone's workers. The copy is
	 * what the answer needs (a summary for status and jobs: a few figures per job, kept up to
	 * date; for stats the attached ranks, not the world); rendering runs without the lock. */
	struct uid_use *u = srv_uid(s, c->uid);
	int64_t t0 = (int64_t)clk_thread_ns();  /* charged: the control thread's CPU, not the
						  * time it waited for the lock or a core */
	if (u) {
		srv_admin_charge(s, u, 0);
		if (u->admin_tokens < 0) {
			srv_conn_fail(s, c, EAGAIN, "uid %u's loaderctl answers take more than %u%% of "
				      "loaderd's control thread (loaderd --admin-share); try again in "
				      "%.0f ms", (unsigned)c->uid, s->opts.admin_share,
				      -u->admin_tokens * 1e-6 * 100 / s->opts.admin_share + 1);
			return;
		}
	}
	/* another user's job, not shared with this one: as if there were none */
	struct job *only = req->job[0] ? find_visible(s, c, req->job) : NULL;
	if (req->job[0] && !only) {
		srv_conn_fail(s, c, ENOENT, "no job named %s", req->job);
		goto charge;
	}
	if (req->op == CTL_OP_STOP && only->uid != c->uid && c->uid != 0 && c->uid != geteuid()) {
		srv_conn_fail(s, c, EPERM, "job %s is uid %u's, shared with this one: only its owner "
			      "stops it", only->name, (unsigned)only->uid);
		goto charge;
	}
	if (req->op == CTL_OP_STOP) {
		if (!only->failed) {
			only->failed = 1;
			only->fail_err = ECANCELED;
			snprintf(only->fail_msg, sizeof(only->fail_msg), "stopped by loaderctl");
			srv_notice(s, 1, "job %s: stopped by loaderctl (pid %d)", only->name, (int)c->pid);
			srv_wake_control(s);
		}
		put(&t, json ? "{\"stopped\":\"%s\"}\n" : "job %s stopped\n", only->name);
		goto send;
	}
	struct srv_snapshot *snap = srv_snapshot_locked(s, req->op == CTL_OP_STATUS ? NULL : only, c,
							req->op == CTL_OP_STATS);
	if (!snap) {
		srv_conn_fail(s, c, ENOMEM, "out of memory for the answer");
		goto charge;
	}
	/* The snapshot is ours: render without the lock. Only this (the control) thread closes or
	 * frees c, and nothing else of the server is read until the lock is held again. */
	pthread_mutex_unlock(&s->mu);
	switch (req->op) {
	case CTL_OP_STATUS:
		admin_status(&t, snap, json);
		break;
	case CTL_OP_JOBS:
	case CTL_OP_STATS:
		if (json)
			put(&t, "[");
		for (unsigned k = 0; k < snap->njobs; k++) {
			shown++;
			if (json && n++)
				put(&t, ",");
			admin_job(&t, snap->phases, &snap->jobs[k], json, req->op == CTL_OP_STATS);
		}
		if (json)
			put(&t, "]\n");
		else if (!shown)
			put(&t, "no jobs\n");
		break;
	}
	srv_snapshot_free(snap);
	pthread_mutex_lock(&s->mu);
send:
	if (t.oom) {
		free(t.p);
		srv_conn_fail(s, c, ENOMEM, "out of memory for the answer");
	} else {
		srv_conn_send_text(s, c, t.p, t.len);
	}
charge:
	if (u)
		srv_admin_charge(s, u, (int64_t)clk_thread_ns() - t0);
}
