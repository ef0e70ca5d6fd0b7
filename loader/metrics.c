/* metrics.c - the metrics file: a snapshot of the server's counters (srv_snapshot_take) rendered in
 * the Prometheus text exposition format, written to a temporary file beside the target and renamed
 * over it (common/afile.h: PATH.tmp.PID; node_exporter's textfile collector reads only *.prom
 * files, and a reader sees the old file or the new one, never a part). The file is not fsynced:
 * it is rewritten every few seconds, and a crash loses nothing a scrape would miss.
 *
 * DESIGN
 * One thread of its own, so that a slow or full file system delays only the metrics: it takes a
 * snapshot (the server lock is held for the copy only, in srv_snap.c), renders it and writes the
 * file without any lock, then sleeps for the interval on a condition variable that
 * ldr_metrics_stop signals. The last write happens in ldr_metrics_stop, after the thread is
 * joined, so the file ends with the counters of the shutdown. Failures are logged when they start
 * and when they end, not every interval.
 *
 * Names follow Prometheus conventions: counters end in _total, times are in seconds, sizes in
 * bytes, shares are _ratio gauges. Per-rank families cover the ranks the snapshot lists: the
 * attached ones and the last few of each job to detach (srv_snap.c), so that a file costs
 * O(attached ranks) whatever the jobs' world sizes; label values are escaped (backslash, double quote, newline) by ldr_metrics_escape. */
#include "common/afile.h"
#include "common/fdio.h"
#include "common/log.h"
#include "loader/metrics.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- rendering ---- */

size_t ldr_metrics_escape(const char *in, char *out, size_t cap)
{
	size_t n = 0;

	for (; *in; in++) {
		const char *rep = *in == '\\' ? "\\\\" : *in == '"' ? "\\\"" : *in == '\n' ? "\\n" : NULL;
		size_t k = rep ? 2 : 1;
		if (n + k < cap)
			memcpy(out + n, rep ? rep : in, k);
		else if (n < cap)
			cap = n + 1;  /* stop here: no half of an escape */
		n += k;
	}
	if (cap)
		out[n < cap ? n : cap - 1] = '\0';
	return n;
}

/* A label value: the escape of a job name or dataset path (< CTL_PATH_MAX bytes) fits. */
struct lv {
	char s[2 * CTL_PATH_MAX];
};

static const char *lv(struct lv *b, const char *in)
{
	ldr_metrics_escape(in, b->s, sizeof(b->s));
	return b->s;
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Nanoseconds as seconds, exactly. */
static void put_ns(FILE *f, uint64_t ns)
{
	fprintf(f, "%llu.%09llu\n", (unsigned long long)(ns / 1000000000u),
		(unsigned long long)(ns % 1000000000u));
}

/* What a per-rank family reports. */
enum rank_value { RV_U64, RV_U32, RV_NS, RV_ATTACHED, RV_OCCUPANCY_RATIO };

static const struct rank_family {
	const char *name, *type, *help;
	enum rank_value kind;
	size_t off;               /* of the field in struct srv_rank_snap (RV_U64, RV_U32, RV_NS) */
} rank_families[] = {
	{ "loaderd_samples_total", "counter", "Samples published to the rank's ring (all attaches).",
	  RV_U64, offsetof(struct srv_rank_snap, samples) },
	{ "loaderd_steps_total", "counter", "Steps (batches) published to the rank's ring.",
	  RV_U64, offsetof(struct srv_rank_snap, published) },
	{ "loaderd_batch_latency_seconds_total", "counter", "Seconds from a worker taking a batch's "
	  "first task (its reads, then its decode) to the batch's publish, summed over the batches "
	  "published to the rank's ring; / loaderd_steps_total is the mean batch latency.",
	  RV_NS, offsetof(struct srv_rank_snap, latency_ns) },
	{ "loaderd_rank_released_step", "gauge", "The first step the rank's consumer has not "
	  "released; while detached, the step it resumes at.",
	  RV_U64, offsetof(struct srv_rank_snap, released) },
	{ "loaderd_rank_attached", "gauge", "1 while a consumer is attached to the rank, else 0.",
	  RV_ATTACHED, 0 },
	{ "loaderd_rank_attaches_total", "counter", "Times a consumer attached to the rank.",
	  RV_U32, offsetof(struct srv_rank_snap, attaches) },
	{ "loaderd_ring_slots", "gauge", "Slots in the rank's ring (0 while detached).",
	  RV_U32, offsetof(struct srv_rank_snap, slots) },
	{ "loaderd_ring_slots_occupied", "gauge", "Slots of the rank's ring taken for steps the "
	  "consumer has not released: being filled, ready, or held by the consumer.",
	  RV_U32, offsetof(struct srv_rank_snap, occupancy) },
	{ "loaderd_ring_occupancy_ratio", "gauge", "loaderd_ring_slots_occupied / loaderd_ring_slots "
	  "(0 while detached).", RV_OCCUPANCY_RATIO, 0 },
	{ "loaderd_ring_empty_seconds_total", "counter", "Seconds the rank's ring held no batch for "
	  "its consumer: every published step released, the next not yet published. loaderd cannot "
	  "see the consumer's own wait (a futex wait in shared memory, no message to the daemon); "
	  "for a consumer that asks for its next batch when it releases one, this is that wait.",
	  RV_NS, offsetof(struct srv_rank_snap, empty_ns) },
};

/* "{job=\"J\",uid=\"U\",rank=\"R\"" without the closing brace, for a rank family. A job is
 * its owner's name (two users' jobs may share one): job and uid together name it. */
static void rank_labels(FILE *f, const struct srv_job_snap *j, const struct srv_rank_snap *r)
{
	struct lv b;

	fprintf(f, "{job=\"%s\",uid=\"%u\",rank=\"%u\"", lv(&b, j->name), (unsigned)j->uid,
		r->rank);
}

static void render_ranks(FILE *f, const struct srv_snapshot *snap)
{
	for (size_t k = 0; k < sizeof(rank_families) / sizeof(rank_families[0]); k++) {
		const struct rank_family *m = &rank_families[k];
		head(f, m->name, m->type, m->help);
		for (unsigned jx = 0; jx < snap->njobs; jx++) {
			const struct srv_job_snap *j = &snap->jobs[jx];
			for (uint32_t r = 0; r < j->nranks; r++) {
				const struct srv_rank_snap *rs = &j->ranks[r];
				const char *p = (const char *)rs + m->off;
				uint64_t u64;
				uint32_t u32;
				if (!rs->started)
					continue;
				fprintf(f, "%s", m->name);
				rank_labels(f, j, rs);
				fprintf(f, "} ");
				switch (m->kind) {
				case RV_U64:
					memcpy(&u64, p, sizeof(u64));
					fprintf(f, "%llu\n", (unsigned long long)u64);
					break;
				case RV_U32:
					memcpy(&u32, p, sizeof(u32));
					fprintf(f, "%u\n", u32);
					break;
				case RV_NS:
					memcpy(&u64, p, sizeof(u64));
					put_ns(f, u64);
					break;
				case RV_ATTACHED:
					fprintf(f, "%d\n", rs->attached ? 1 : 0);
					break;
				case RV_OCCUPANCY_RATIO:
					fprintf(f, "%.6f\n", rs->slots ? (double)rs->occupancy / rs->slots : 0.0);
					break;
				}
			}
		}
	}
	/* One series per phase of the server's phase table (srv_ops.phases): io, decode. */
	head(f, "loaderd_fill_seconds_total", "counter", "Worker time spent filling the rank's slots, "
	     "by phase of the fill.");
	for (unsigned jx = 0; jx < snap->njobs; jx++) {
		const struct srv_job_snap *j = &snap->jobs[jx];
		for (uint32_t r = 0; r < j->nranks; r++) {
			if (!j->ranks[r].started)
				continue;
			for (unsigned p = 0; p < SRV_PHASES_MAX; p++) {
				if (!snap->phases[p].name)
					continue;
				fprintf(f, "loaderd_fill_seconds_total");
				rank_labels(f, j, &j->ranks[r]);
				fprintf(f, ",phase=\"%s\"} ", snap->phases[p].name);  /* [a-z_]+ (srv.h) */
				put_ns(f, j->ranks[r].phase_ns[p]);
			}
		}
	}
}

static void render_jobs(FILE *f, const struct srv_snapshot *snap)
{
	struct lv b, c;

	head(f, "loaderd_job_info", "gauge", "1 for each job loaderd keeps, with its dataset.");
	for (unsigned k = 0; k < snap->njobs; k++)
		fprintf(f, "loaderd_job_info{job=\"%s\",uid=\"%u\",dataset=\"%s\"} 1\n",
			lv(&b, snap->jobs[k].name), (unsigned)snap->jobs[k].uid,
			lv(&c, snap->jobs[k].dataset));
	head(f, "loaderd_job_world", "gauge", "Ranks in the job.");
	for (unsigned k = 0; k < snap->njobs; k++)
		fprintf(f, "loaderd_job_world{job=\"%s\",uid=\"%u\"} %u\n", lv(&b, snap->jobs[k].name),
			(unsigned)snap->jobs[k].uid, snap->jobs[k].world);
	head(f, "loaderd_job_failed", "gauge", "1 once the job failed (a fill error or loaderctl "
	     "stop), else 0.");
	for (unsigned k = 0; k < snap->njobs; k++)
		fprintf(f, "loaderd_job_failed{job=\"%s\",uid=\"%u\"} %d\n", lv(&b, snap->jobs[k].name),
			(unsigned)snap->jobs[k].uid, snap->jobs[k].failed ? 1 : 0);
	/* Self-sizing (docs/TUNING.md): what the consumers eat, what is kept ready for them, and the
	 * CPU each job was given. */
	head(f, "loaderd_job_demand_samples_per_second", "gauge", "Samples/s the job's attached "
	     "consumers eat (the peak of the last second of consumption); 0 = not measured yet.");
	for (unsigned k = 0; k < snap->njobs; k++)
		fprintf(f, "loaderd_job_demand_samples_per_second{job=\"%s\",uid=\"%u\"} %.3f\n",
			lv(&b, snap->jobs[k].name), (unsigned)snap->jobs[k].uid, snap->jobs[k].demand);
	head(f, "loaderd_job_target_steps", "gauge", "Steps loaderd keeps opened ahead for the job's "
	     "attached rings, all ranks: enough that their consumers never wait.");
	for (unsigned k = 0; k < snap->njobs; k++)
		fprintf(f, "loaderd_job_target_steps{job=\"%s\",uid=\"%u\"} %u\n",
			lv(&b, snap->jobs[k].name), (unsigned)snap->jobs[k].uid, snap->jobs[k].target);
	head(f, "loaderd_job_weight", "gauge", "The job's weight when decode CPU is short.");
	for (unsigned k = 0; k < snap->njobs; k++)
		fprintf(f, "loaderd_job_weight{job=\"%s\",uid=\"%u\"} %u\n",
			lv(&b, snap->jobs[k].name), (unsigned)snap->jobs[k].uid, snap->jobs[k].weight);
	head(f, "loaderd_job_cpu_cores", "gauge", "Cores of worker CPU given to the job over the last "
	     "second.");
	for (unsigned k = 0; k < snap->njobs; k++)
		fprintf(f, "loaderd_job_cpu_cores{job=\"%s\",uid=\"%u\"} %.4f\n",
			lv(&b, snap->jobs[k].name), (unsigned)snap->jobs[k].uid, snap->jobs[k].cpu);
	head(f, "loaderd_job_cpu_seconds_total", "counter", "Worker CPU given to the job.");
	for (unsigned k = 0; k < snap->njobs; k++) {
		fprintf(f, "loaderd_job_cpu_seconds_total{job=\"%s\",uid=\"%u\"} ",
			lv(&b, snap->jobs[k].name), (unsigned)snap->jobs[k].uid);
		put_ns(f, snap->jobs[k].cpu_ns);
	}
	head(f, "loaderd_bad_records_total", "counter", "Records that failed their checksum or "
	     "decode while filling the job's slots, all ranks (loaderd counts them per job).");
	for (unsigned k = 0; k < snap->njobs; k++)
		fprintf(f, "loaderd_bad_records_total{job=\"%s\",uid=\"%u\"} %llu\n",
			lv(&b, snap->jobs[k].name), (unsigned)snap->jobs[k].uid,
			(unsigned long long)snap->jobs[k].bad);
}

static void render_daemon(FILE *f, const struct srv_snapshot *snap)
{
	head(f, "loaderd_uptime_seconds", "gauge", "Seconds since loaderd started.");
	fprintf(f, "loaderd_uptime_seconds ");
	put_ns(f, (uint64_t)(snap->uptime_ns > 0 ? snap->uptime_ns : 0));
	head(f, "loaderd_workers", "gauge", "Worker (fill) threads.");
	fprintf(f, "loaderd_workers %u\n", snap->workers);
	head(f, "loaderd_workers_busy_ratio", "gauge", "Share of the workers' time spent filling, "
	     "over the last second.");
	fprintf(f, "loaderd_workers_busy_ratio %.6f\n", snap->busy_share);
	head(f, "loaderd_workers_busy_seconds_total", "counter", "Worker time spent filling, all "
	     "workers (rate() over it / loaderd_workers is the busy share over any window).");
	fprintf(f, "loaderd_workers_busy_seconds_total ");
	put_ns(f, snap->busy_ns);
	head(f, "loaderd_cpu_budget_cores", "gauge", "Decode CPU the workers may use, all jobs "
	     "(--cpu-budget).");
	fprintf(f, "loaderd_cpu_budget_cores %.3f\n", snap->cpu_budget);
	head(f, "loaderd_workers_needed", "gauge", "Workers the consumers' demand needs decoding at "
	     "once now (at most loaderd_workers and the budget).");
	fprintf(f, "loaderd_workers_needed %u\n", snap->active_cap);
	head(f, "loaderd_ring_memory_bytes", "gauge", "Shared memory in the rings of attached ranks.");
	fprintf(f, "loaderd_ring_memory_bytes %llu\n", (unsigned long long)snap->mem_used);
	head(f, "loaderd_ring_memory_limit_bytes", "gauge", "The ring memory limit (--mem-limit); "
	     "0 = none.");
	fprintf(f, "loaderd_ring_memory_limit_bytes %llu\n", (unsigned long long)snap->mem_limit);
	head(f, "loaderd_connections", "gauge", "Open client connections (ranks and loaderctl).");
	fprintf(f, "loaderd_connections %u\n", snap->clients);
	head(f, "loaderd_jobs", "gauge", "Jobs loaderd keeps (attached, or lingering).");
	fprintf(f, "loaderd_jobs %u\n", snap->njobs);
	head(f, "loaderd_ranks_attached", "gauge", "Ranks with a consumer attached, all jobs.");
	fprintf(f, "loaderd_ranks_attached %u\n", snap->ranks_attached);
}

int ldr_metrics_render(const struct srv_snapshot *snap, char **out, size_t *len)
{
	FILE *f = open_memstream(out, len);

	if (!f)
		return -ENOMEM;
	render_daemon(f, snap);
	render_jobs(f, snap);
	render_ranks(f, snap);
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* ---- the file ---- */

int ldr_metrics_write(const char *path, const char *text, size_t len)
{
	struct afile f;
	/* No fsync: the file is rewritten every few seconds; the rename alone keeps readers safe. */
	int ret = afile_open(&f, path, AFILE_NO_SYNC);

	if (ret < 0)
		return ret;
	/* Readable by the collector whatever loaderd's umask (the service's is 0077): counters only,
	 * no user's paths or data. */
	ret = fchmod(f.fd, 0644) < 0 ? -errno : fd_write_all(f.fd, text, len);
	if (ret == 0)
		ret = afile_commit(&f);
	afile_close(&f);  /* removes the temporary file unless committed */
	return ret;
}

/* ---- the thread ---- */

struct ldr_metrics {
	struct srv *s;
	char *path;
	unsigned interval_ms;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;        /* on CLOCK_MONOTONIC; signalled by ldr_metrics_stop */
	int stop;                 /* under mu */
	int last_err;             /* of the last write: logged when it changes; metrics thread only,
				   * then ldr_metrics_stop's caller after the join */
};

static int write_once(struct ldr_metrics *m)
{
	struct srv_snapshot *snap;
	char *text = NULL;
	size_t len = 0;
	int ret = srv_snapshot_take(m->s, &snap);

	if (ret == 0) {
		ret = ldr_metrics_render(snap, &text, &len);
		srv_snapshot_free(snap);
	}
	if (ret == 0)
		ret = ldr_metrics_write(m->path, text, len);
	free(text);
	if (ret < 0 && ret != m->last_err)
		LOG_WARN("metrics file %s: %s (trying again every %u ms)", m->path, strerror(-ret),
			 m->interval_ms);
	else if (ret == 0 && m->last_err < 0)
		LOG_INFO("metrics file %s: written again", m->path);
	m->last_err = ret;
	return ret;
}

static void *metrics_main(void *p)
{
	struct ldr_metrics *m = p;
	struct timespec due;

	clock_gettime(CLOCK_MONOTONIC, &due);
	pthread_mutex_lock(&m->mu);
	while (!m->stop) {
		pthread_mutex_unlock(&m->mu);
		write_once(m);
		pthread_mutex_lock(&m->mu);
		due.tv_sec += m->interval_ms / 1000;
		due.tv_nsec += (long)(m->interval_ms % 1000) * 1000000;
		if (due.tv_nsec >= 1000000000) {
			due.tv_sec++;
			due.tv_nsec -= 1000000000;
		}
		while (!m->stop && pthread_cond_timedwait(&m->cv, &m->mu, &due) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

int ldr_metrics_start(struct srv *s, const char *path, unsigned interval_ms,
		      struct ldr_metrics **out)
{
	pthread_condattr_t ca;
	int ret;

	*out = NULL;
	if (interval_ms == 0)
		return -EINVAL;
	struct ldr_metrics *m = calloc(1, sizeof(*m));
	if (!m || !(m->path = strdup(path))) {
		free(m);
		return -ENOMEM;
	}
	m->s = s;
	m->interval_ms = interval_ms;
	pthread_mutex_init(&m->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cv, &ca);
	pthread_condattr_destroy(&ca);
	ret = -pthread_create(&m->thread, NULL, metrics_main, m);
	if (ret < 0) {
		pthread_cond_destroy(&m->cv);
		pthread_mutex_destroy(&m->mu);
		free(m->path);
		free(m);
		return ret;
	}
	*out = m;
	return 0;
}

int ldr_metrics_stop(struct ldr_metrics *m)
{
	if (!m)
		return 0;
	pthread_mutex_lock(&m->mu);
	m->stop = 1;
	pthread_cond_signal(&m->cv);  /* pairs with the timed wait in metrics_main */
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->thread, NULL);
	int ret = write_once(m);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	free(m->path);
	free(m);
	return ret;
}
