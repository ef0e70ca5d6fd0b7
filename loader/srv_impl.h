/* srv_impl.h - the server's shared state, private to loader/srv_*.c (public interface: srv.h).
 *
 * The server is one struct srv, split by role over four files:
 *   srv_conn.c     the control loop (epoll), the listening socket, peer checks, connections, and
 *                  the lifecycle (srv_create, srv_run, srv_stop, srv_destroy)
 *   srv_jobs.c     the job registry, ranks and attachments, resume, linger and housekeeping
 *   srv_workers.c  the worker pool: which (ring, step) to fill next, the fill and the publish
 *   srv_snap.c     the counters copied into a struct srv_snapshot (srv.h), for srv_admin.c and
 *                  the metrics file (loader/metrics.c)
 *   srv_admin.c    loaderctl's answers, rendered as text or JSON from a snapshot
 *
 * Threads and the lock: the control thread (srv_run) and the workers share everything below under
 * s->mu, except what a field says otherwise. Functions here that say "under mu" expect the caller
 * to hold it. Only the control thread frees a job (housekeeping), an att or a conn (srv_reap,
 * after each epoll batch), and srv_destroy's caller once the workers are joined.
 *
 * Ownership: s->jobs owns its jobs; a job owns its ranks array and ops->job_open's state. A conn
 * is owned by s->conns, and once closed by s->conn_grave. An att is referenced by its conn and
 * its rank while attached, and by every worker filling one of its slots (a->refs); the last of
 * them to let go moves it to s->att_grave, which owns it until srv_reap() frees it. */
#ifndef LOADERD_SRV_IMPL_H
#define LOADERD_SRV_IMPL_H
#include "common/clk.h"
#include "loader/srv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

/* What an epoll event's data.ptr points at. */
enum ev_kind { EV_LISTEN, EV_WAKE, EV_CONN, EV_BELL };

struct ev {
	enum ev_kind kind;
	void *p;
};

struct att;

struct conn {
	struct ev ev;
	int fd;
	pid_t pid;
	struct att *att;         /* NULL until CTL_JOB_OPEN succeeds */
	int closed;              /* closed: events still queued for it are ignored */
	struct conn *next;
};

struct job;

/* One attachment: one connection's ring. Never reused (srv_jobs.c). */
struct att {
	struct ev bell_ev;
	struct job *job;
	uint32_t rank;
	struct ring *ring;
	int bell;                /* doorbell eventfd (our end) */
	struct conn *conn;       /* NULL once retired */
	unsigned refs;           /* workers filling a slot of this ring */
	int dead;                /* retired: take no more steps */
	int hostile;             /* a worker saw an illegal state word */
	uint64_t first, next;    /* first step of this ring; next step to hand to a worker */
	uint64_t floor;          /* every step below it is known released */
	uint64_t bytes;          /* ring memory, for the limit */
	int64_t empty_since;     /* ns: since when the ring holds no batch for the consumer; 0 = it
				  * does (srv_att_check_empty, srv_att_published) */
	uint64_t empty_step;     /* the step whose publish ends that */
	struct att *grave_next;  /* buried: freed after the current event batch */
};

struct rank_state {
	struct att *att;         /* NULL when detached */
	int started;             /* attached at least once: resume from @resume */
	uint64_t resume;
	uint64_t published, samples, fill_ns;
	uint64_t phase_ns[SRV_PHASES_MAX];  /* of fill_ns, per ops->phases */
	uint64_t empty_ns;       /* closed intervals of att->empty_since, all attaches */
	uint64_t rate_samples;   /* samples at the last rate snapshot */
	double rate;             /* samples/s over the last snapshot interval */
	uint32_t attaches;
};

struct job {
	char name[CTL_JOB_NAME_MAX];
	struct ctl_job_open spec;     /* rank zeroed: what every rank must agree on */
	uint64_t id;
	void *state;                  /* ops->job_open's handle */
	struct srv_job_info info;
	uint64_t steps_total;         /* 0 = unbounded */
	struct rank_state *ranks;     /* world entries */
	unsigned attached;
	unsigned atts;                /* att objects alive (attached or retired with a worker in) */
	int64_t idle_since_ns;        /* when the last rank detached */
	int failed;                   /* a fill failed: fail_msg goes to every rank */
	char fail_msg[CTL_TEXT_MAX];
	int fail_err;
	uint64_t bad;
	uint64_t bad_ids[16];         /* the most recent, for stats */
	unsigned nbad_ids;            /* total ever recorded (index mod 16) */
	struct job *next;
};

struct srv {
	struct srv_opts opts;
	struct srv_ops ops;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int lfd, wake, ep;
	struct ev lev, wev;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *jobs;
	struct conn *conns;
	struct att *att_grave;        /* retired atts whose memory waits for srv_reap() */
	struct conn *conn_grave;
	uint64_t next_job_id;
	uint64_t mem_used;
	unsigned rr;                  /* round-robin start for workers */
	int64_t start_ns;
	int64_t rate_ns;              /* last rate snapshot */
	uint64_t busy_ns, busy_snap;  /* worker time spent filling, all jobs */
	double busy_share;            /* of the workers, over the last snapshot interval */
	atomic_int stop;              /* set by srv_stop (any thread, a signal handler); srv_run reads */
	int workers_stop;             /* under mu */
	pthread_t *threads;
	unsigned nthreads;
	int ran;
};

static inline int64_t now_ns(void)
{
	return (int64_t)clk_now_ns();
}

/* ---- srv_conn.c ---- */

/* Pass a message to ops->notice (level: 0 error, 1 warn, 2 info). Any thread. */
void srv_notice(struct srv *s, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Make srv_run's epoll_wait return, so that it runs housekeeping now. Any thread. */
void srv_wake_control(struct srv *s);
/* Under mu, control thread. Retire @c's att, close the socket, bury @c (srv_reap frees it). */
void srv_conn_close(struct srv *s, struct conn *c);
/* Under mu, control thread. Send @c a CTL_ERROR (errno @err, either sign), then close it. */
void srv_conn_fail(struct srv *s, struct conn *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- srv_jobs.c ---- */

/* Under mu. Free @a now that neither a rank nor a worker holds it (buried until srv_reap). */
void srv_att_free(struct srv *s, struct att *a);
/* Under mu. Detach @a from its rank and connection; freed now or by its last worker. */
void srv_att_retire(struct srv *s, struct att *a);
/* Under mu. The first step @a's consumer has not released (never below a->floor). */
uint64_t srv_att_released(const struct att *a);
/* Under mu, control thread, between event batches: free buried atts and conns. */
void srv_reap(struct srv *s);
/* Under mu. The job named @name, or NULL. */
struct job *srv_job_find(struct srv *s, const char *name);
/* Under mu. Unlink @j, close its state (ops->job_close) and free it. */
void srv_job_free(struct srv *s, struct job *j);
/* Under mu, control thread, after @a's consumer rang its doorbell (it released a step): when every
 * published step is released and the next one is not published, the ring is empty from @now. */
void srv_att_check_empty(struct att *a, int64_t now);
/* Under mu, after a worker published @step of @a: ends the empty time that waited for it. */
void srv_att_published(struct att *a, uint64_t step, int64_t now);
/* Under mu, control thread. CTL_JOB_OPEN, CTL_STATS_REQ from @c; on failure @c is closed. */
void srv_on_job_open(struct srv *s, struct conn *c, const struct ctl_job_open *spec);
void srv_on_stats(struct srv *s, struct conn *c);
/* Under mu, control thread, after each event batch: rates, hostile consumers, failed and idle
 * jobs. */
void srv_housekeeping(struct srv *s);

/* ---- srv_workers.c ---- */

/* Start opts->workers threads (s->threads, s->nthreads). 0 or -errno with @why; the threads that
 * did start are stopped by srv_workers_stop. */
int srv_workers_start(struct srv *s, char *why, size_t whylen);
/* Tell the workers to stop, shut the attached rings down (ring_shutdown wakes their waiters), and
 * join the workers. */
void srv_workers_stop(struct srv *s);

/* ---- srv_snap.c ---- */

/* Under mu. Rank @r of @j as srv_snapshot reports it, at @now. */
void srv_rank_snap(const struct job *j, uint32_t r, int64_t now, struct srv_rank_snap *out);
/* Under mu. A snapshot of the server, of only job @only when not NULL. NULL when out of memory;
 * free with srv_snapshot_free(). */
struct srv_snapshot *srv_snapshot_locked(struct srv *s, const struct job *only);

/* ---- srv_admin.c ---- */

/* Under mu, control thread. CTL_ADMIN (loaderctl) from @c: the answer as CTL_ADMIN_TEXT chunks,
 * then an empty one. */
void srv_on_admin(struct srv *s, struct conn *c, const struct ctl_admin *req);

#endif
