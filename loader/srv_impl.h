/* srv_impl.h - the server's shared state, private to loader/srv_*.c (public interface: srv.h).
 *
 * The server is one struct srv, split by role over seven files that form a star around the
 * first: each uses srv_core.c, and the calls between the others go one way only (no circle), as
 * listed (measured: docs/ARCHITECTURE.md, the server core):
 *   srv_core.c     the centre: notices, waking the control loop, the per-uid accounts (connections,
 *                  jobs, memory, admin answers and budget), peer groups and who may see a job.
 *                  Calls no other srv file.
 *   srv_att.c      attachments (one connection's ring): the live set the workers pick from, the
 *                  retire, the burial, the released step and the empty time. Uses core.
 *   srv_workers.c  the worker pool: which (ring, step) to fill next, the tasks, the fill and the
 *                  publish. Uses core, att.
 *   srv_conn.c     connections: the listening socket, accept and peer checks, reading and vetting
 *                  a message, sending answers and errors, closing. Uses core, att.
 *   srv_snap.c     the counters copied into a struct srv_snapshot (srv.h), for srv_admin.c, a
 *                  rank's CTL_STATS and the metrics file (loader/metrics.c). Uses core, att.
 *   srv_jobs.c     the job registry, ranks, job opens (opener threads), resume, a rank's stats,
 *                  linger and housekeeping. Uses core, att, conn, snap.
 *   srv_admin.c    loaderctl's answers, rendered as text or JSON from a snapshot. Uses core, conn,
 *                  jobs, snap.
 *   srv_loop.c     the control loop (epoll) and the dispatch of events and messages, the work
 *                  between event batches, the lifecycle (srv_create, srv_run, srv_stop,
 *                  srv_destroy). Uses the others; none uses it.
 *
 * Threads and the lock: the control thread (srv_run), the workers and the opener threads (one
 * per job open in progress, detached; s->openers counts them) share everything below under
 * s->mu, except what a field says otherwise. Functions here that say "under mu" expect the caller
 * to hold it. Nothing a client controls is done under the lock at a cost it chooses: a job open
 * (index, ring) runs on its opener thread without it; rings are unmapped and jobs closed after
 * the control loop let go of it (srv_loop.c, srv_job_close_all); answers are rendered under it
 * within a per-uid budget (srv_admin.c). Only the control thread frees a job (housekeeping), an
 * att or a conn (srv_loop.c, after each epoll batch), and srv_destroy's caller once the workers
 * and the openers are done.
 *
 * Steps and tasks (srv_workers.c): a worker that finds no task opens the next free (ring, step):
 * under mu it picks it, takes its slot (ring_prod_begin) and an open_step from s->step_pool; it
 * lets go of mu while ops->step_open draws the step into the open_step (which only it knows of
 * then), and takes mu again to put it on s->tasks, the FIFO of open steps that still have samples
 * to hand out. Workers take tasks (a range of samples) from the head, the step opened earliest
 * first, whatever ring it belongs to; a worker holds at most two, the one it fills and the one it
 * fills next, and fills every task it took. Under mu: the queue, the pool, and an open_step's
 * next, out, abandoned, first_ns, work_ns and phase_ns. Without mu, a worker owns the samples
 * [begin, end) of the task it fills: their payload in the slot and their entries in the step's
 * arrays (st.ids, flags, labels); everything else in the open_step is read-only for it. The
 * worker that ends the last task of a step (next == count, out == 0; the step is off the queue
 * then) owns the whole open_step: it copies the arrays into the slot and publishes without mu,
 * then gives the open_step back to the pool under mu.
 *
 * Ownership: s->jobs owns its jobs; a job owns its ranks array and ops->job_open's state. A conn
 * is owned by s->conns, and once closed by s->conn_grave. An att is referenced by its conn and
 * its rank while attached, and by every open step of its ring (a->refs); the last of them to let
 * go moves it to s->att_grave, which owns it until the control loop frees it. An open_req is
 * owned by its opener thread, then by s->opened until srv_open_finish; its conn is kept (on the
 * grave if closed) until then. */
#ifndef LOADERD_SRV_IMPL_H
#define LOADERD_SRV_IMPL_H
#include "common/clk.h"
#include "loader/demand.h"
#include "loader/shares.h"
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
struct open_req;

struct conn {
	struct ev ev;
	int fd;
	pid_t pid;
	uid_t uid;
	struct att *att;         /* NULL until CTL_JOB_OPEN succeeds */
	int64_t since_ns;        /* accepted at (the idle timeout counts from here) */
	struct open_req *opening; /* a job open in progress on an opener thread; the control
				  * loop keeps the conn until it is finished (srv_open_finish) */
	int closed;              /* closed: events still queued for it are ignored */
	int counted;             /* closed while its opener ran: still counted in --max-conns and
				  * --max-conns-per-uid until it is freed (reap), so that clients that
				  * hang up never leave a uid more opens in flight than its conns */
	char *out;               /* an answer being sent (srv_conn_send_text), NULL when none */
	void *seed;              /* a CTL_SPLIT_SEED body (checked), for its job open; malloc'd */
	struct ctl_augment aug;  /* a CTL_AUGMENT body (checked), for its job open; zero: none */
	int has_aug;             /* one came (at most one, before the job open) */
	int *shard_fds;          /* CTL_SHARD_FDS received for its job open: shards_got of
				  * shards_total (malloc'd) */
	uint32_t shards_got, shards_total;
	char *s3;                /* a CTL_S3_OPEN body (checked) for its job open, credentials
				  * included: wiped when freed (srv_s3_wipe); NULL when none */
	size_t s3_len;
	uint64_t shards_charge;  /* descriptors reserved in its uid's fds for the set from its
				  * first batch: what the job will hold, 2 x total + 2 */
	size_t seed_len;
	size_t out_len, out_off; /* its bytes, and how many are sent */
	struct conn *next;
};

/* A CTL_JOB_OPEN being served off the control thread (srv_jobs.c). Owned by its opener thread
 * until it is put on s->opened; then by the control thread, which finishes and frees it. */
struct open_req {
	struct srv *srv;
	struct conn *conn;
	struct job *job;
	struct ctl_job_open spec;
	int fd;                  /* the client's dataset fd, or -1; closed when the req is freed */
	uint64_t shards_charge;  /* the conn's reservation for them, in the uid's fds until then */
	int *shard_fds;          /* a set's shards the client opened (nshards), closed likewise;
				  * counted in the uid's fds until then */
	uint32_t nshards;
	char *s3;                /* the conn's CTL_S3_OPEN body: the opener has ldfetch fetch the
				  * dataset (srv_fetch.c); wiped once sent, or when freed */
	size_t s3_len;
	int stream_fd;           /* ldfetch's socket of a streamed set (srv_fetch.c: shard 0 and the
				  * manifest came, the rest are to be streamed), else -1: the
				  * creator's becomes its job's stream, a later rank's is closed */
	int creator;             /* this request made the job: it runs ops->job_open */
	struct ring_desc d;
	struct ring *ring;       /* made by the opener thread */
	int bell;
	uint64_t bytes;          /* ring memory reserved in s->mem_used (and the uid's) */
	int ret;
	char why[CTL_TEXT_MAX];
	uid_t uid;               /* the client's */
	struct open_req *next;
};

struct job;

/* A step being filled: its slot is taken (ring_prod_begin), its sampler output drawn, and its
 * samples are handed out as tasks (srv_workers.c; the rules at the top of this file). */
struct open_step {
	struct att *a;           /* holds a reference (a->refs) until the step is done */
	uint64_t step;
	struct ring_slot slot;
	struct srv_step st;      /* the arrays hold cap entries */
	uint32_t cap;
	uint32_t task;           /* samples per task */
	uint32_t next;           /* first sample not handed out yet */
	unsigned out;            /* tasks taken and not done */
	int abandoned;           /* a task failed, or the ring is going: hand out no more, and do
				  * not publish */
	int64_t first_ns;        /* when its first task was taken: its latency counts from here */
	int64_t open_ns;         /* when it was picked: the controller's latency counts from here
				  * (it includes the wait for a worker behind other steps' tasks) */
	uint64_t work_ns;        /* worker time spent on it: open and tasks */
	uint64_t cpu_ns;         /* worker thread CPU spent on it: open and tasks */
	uint64_t phase_ns[SRV_PHASES_MAX];
	uint32_t *shares;        /* balanced shares: 2 x shares_cap (weights copied, split scratch) */
	uint32_t shares_cap;
	int opened;              /* ops->step_open answered 0: ops->step_release is owed */
	struct open_step *next_open;  /* on s->tasks, a job's parked list, s->reopen, or on
				       * s->step_pool */
};

/* What one uid holds, for the per-uid limits (srv_jobs.c). One per uid ever seen (a node has
 * few), freed by srv_destroy. */
struct uid_use {
	uid_t uid;
	unsigned conns, jobs;
	uint64_t mem;            /* bytes held for its jobs: rings reserved or attached, rank
				  * tables, job states (srv_mem_add) */
	uint64_t out;            /* bytes of admin answers queued on its connections */
	uint64_t fds;            /* descriptors held for it: shards received, jobs' files
				  * (srv_fds_add) */
	double admin_tokens;     /* ns of control-thread CPU its answers may take now
				  * (opts.admin_share of the time since, up to SRV_ADMIN_BURST_S) */
	int64_t admin_ns;        /* when admin_tokens was last brought up to date */
	double use;              /* worker time its jobs' records took lately (srv_workers.c:
				  * ns, halved every SRV_USE_HALF_NS; at use_ns) */
	int64_t use_ns;
	uint64_t work_ns;        /* worker time its jobs' records took, in all */
	unsigned pick_ix;        /* srv_workers.c pick's scratch (under mu): its index among the
				  * accounts of the attached rings (dm_ring.acct) */
	struct uid_use *next;
};

/* One attachment: one connection's ring. Never reused (srv_jobs.c). */
struct att {
	struct ev bell_ev;
	struct job *job;
	uint32_t rank;
	struct ring *ring;
	int bell;                /* doorbell eventfd (our end) */
	struct conn *conn;       /* NULL once retired */
	unsigned refs;           /* open steps of this ring (struct open_step) */
	int dead;                /* retired: take no more steps */
	int hostile;             /* a worker saw an illegal state word */
	uint64_t first, next;    /* first step of this ring; next step to hand to a worker */
	uint64_t floor;          /* every step below it is known released */
	uint64_t bytes;          /* ring memory, for the limit (and in job->mem_rings) */
	uid_t uid;               /* its client's, for the per-uid memory limit */
	struct uid_use *acct;    /* its job owner's account (srv_workers.c, cached at first pick);
				  * the accounts live until srv_destroy */
	unsigned live;           /* its index in s->live while attached */
	int64_t empty_since;     /* ns: since when the ring holds no batch for the consumer; 0 = it
				  * does (srv_att_check_empty, srv_att_published) */
	uint64_t empty_step;     /* the step whose publish ends that */
	/* Self-sizing (srv_workers.c, loader/demand.h), under mu: */
	struct dm_rate dm;       /* its consumer's releases over time */
	double lat_s;            /* its steps' time from pick to publish, s, averaged */
	double work_step_s;      /* worker time per step (wall, open and tasks), s, averaged */
	uint64_t empty_seen;     /* its rank's empty_ns when last looked at */
	int64_t starved_until;   /* its consumer found it empty: filled whole until then (ns) */
	uint32_t target;         /* steps to keep opened ahead (dm_target), at the last pick */
	struct att *grave_next;  /* buried: freed after the current event batch */
	/* Its rank's column of the split seed it opened with, on a job loaderd held (the job's
	 * own seed_ns is not made from it): its reports of the updates seed_k1 + 4 i (i <
	 * seed_rows), released before its first step in a ring that is gone (raw: hostile). */
	uint64_t seed_k1;
	uint32_t seed_rows;
	double *seed_ns;
};

struct rank_state {
	struct att *att;         /* NULL when detached */
	int pending;             /* an open request for this rank is in progress */
	int started;             /* attached at least once: resume from @resume */
	uint64_t resume;
	uint64_t published, samples, fill_ns;
	uint64_t phase_ns[SRV_PHASES_MAX];  /* of fill_ns, per ops->phases */
	uint64_t latency_ns;     /* sum over published steps: first task taken to publish */
	uint64_t empty_ns;       /* closed intervals of att->empty_since, all attaches */
	uint64_t rate_samples;   /* samples at the last rate snapshot */
	double rate;             /* samples/s over the last snapshot interval */
	uint32_t attaches;
};

/* Detached ranks a snapshot lists per job (the last to detach), besides the attached ones. */
#define SRV_SNAP_RECENT 8

struct job {
	char name[CTL_JOB_NAME_MAX];
	struct ctl_job_open spec;     /* rank, start and owner_uid zeroed: what every rank must agree
				       * on (share and share_gid: the owner's) */
	struct ctl_augment aug;       /* CTL_AUGMENT (zero: none): every rank must send the same */
	uint64_t id;
	void *state;                  /* ops->job_open's handle */
	struct srv_job_info info;
	uint64_t steps_total;         /* 0 = unbounded */
	struct rank_state *ranks;     /* world entries */
	unsigned attached;
	unsigned atts;                /* att objects alive (attached or retired with a worker in) */
	unsigned pending;             /* open requests for it on opener threads */
	int opening;                  /* ops->job_open runs: info and state are not there yet */
	uid_t uid;                    /* its owner, who made it: the name is this uid's; spec.share
				       * and spec.share_gid say whether others may see and join it */
	dev_t dev;                    /* the dataset file: a joining rank must pass the same one */
	ino_t ino;
	uint64_t *s3_files;           /* through the node cache: each shard's (dev, ino), the
				       * object versions the job reads; a later rank's fetch must
				       * answer the same (s3_nfiles pairs; NULL otherwise) */
	uint32_t s3_nfiles;
	struct srv_stream *stream;    /* a streamed set's (srv_stream.c): its thread and socket to
				       * ldfetch; stopped and freed with the job (NULL otherwise) */
	int64_t idle_since_ns;        /* when the last rank detached */
	int failed;                   /* a fill failed: fail_msg goes to every rank */
	char fail_msg[CTL_TEXT_MAX];
	int fail_err;
	/* Memory it makes loaderd hold, counted in s->mem_used and its uid's (srv_mem_check): */
	uint64_t mem_table;           /* this struct and its ranks array (from the job's creation) */
	uint64_t mem_state;           /* info.mem_bytes (from a successful ops->job_open) */
	uint64_t mem_rings;           /* its atts' rings (a->bytes), attached or retired */
	uint32_t fds;                 /* descriptors it holds (info.fds), in its uid's fds */
	double rate;                  /* samples/s, all ranks, over the last rate interval
				       * (srv_housekeeping keeps it, without walking ranks) */
	uint64_t cpu_ns, cpu_snap;    /* worker thread CPU spent on it; at the last rate interval */
	/* Fair by cost (srv_workers.c), under mu: worker time its records took lately (ns, halved
	 * every SRV_USE_HALF_NS; at use_ns), the worker time a sample of it takes (averaged; 0 =
	 * not known yet), and its open steps on s->tasks. */
	double use;
	int64_t use_ns;
	uint64_t sample_ns;
	unsigned queued;
	/* A streamed set (srv_workers.c), under mu: its steps parked on a pending shard (slot
	 * taken, att referenced, nothing held), in the order they parked, until srv_shard_ready
	 * moves them to s->reopen or they are abandoned (ring retired, job failed). */
	struct open_step *parked, *parked_tail;
	unsigned nparked;
	double cpu_cores;             /* of that, cores over the last rate interval */
	double demand;                /* samples/s its attached consumers eat (dm_rate_peak x batch),
				       * at the last rate interval */
	uint32_t target;              /* steps its attached rings keep opened ahead, then */
	uint64_t pace_rel;            /* pick's scratch (srv_workers.c, under mu): the first step
				       * its slowest eating rank has not released; UINT64_MAX: none */
	/* Balanced shares (spec.balance), under mu: the splits recorded (loader/shares.h); the next
	 * update step (a multiple of LDR_SHARES_EVERY) whose weights are not decided yet: no rank
	 * opens it or a later step until they are; for that update, each rank's report (split_ns)
	 * once it gave it (split_have, split_got ranks); and scratch (world entries each). */
	struct ldr_split_log split;
	uint64_t split_due;
	uint64_t split_noted;         /* updates that ignored or clamped a report (logged: 1st, 100th..) */
	double *split_ns;
	uint8_t *split_have;
	uint32_t split_got;
	uint32_t *split_w;
	/* A job created from a split seed (CTL_SPLIT_SEED: a resumed job whose log a loaderd that
	 * exited lost): the reports of the updates seed_k1 + 4 i (i < seed_rows) released before
	 * the resume step, world each (raw bits: hostile); NULL: none. */
	uint64_t seed_k1;
	uint32_t seed_rows;
	double *seed_ns;
	/* Its ranks' figures summed (srv_workers.c at each publish), so that a snapshot has them
	 * without walking the ranks; and the ranks a snapshot lists besides the attached ones: the
	 * SRV_SNAP_RECENT that detached last (srv_att_retire), so that a snapshot costs O(attached
	 * ranks), never O(world). */
	uint64_t published, samples, fill_ns, latency_ns;
	uint64_t phase_ns[SRV_PHASES_MAX];
	uint32_t started;             /* ranks attached at least once */
	uint32_t recent[SRV_SNAP_RECENT];  /* rank numbers, most recent at (nrecent - 1) mod N */
	unsigned nrecent;             /* detaches ever recorded */
	uint32_t snap_ix;             /* srv_snapshot_locked's scratch (under mu) */
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
	pthread_cond_t open_cv;       /* a job's open finished, or an opener thread ended */
	struct open_req *opened;      /* done by their opener threads, for the control thread */
	unsigned openers;             /* opener threads running */
	struct job *jobs;
	struct conn *conns;
	struct att *att_grave;        /* retired atts whose memory waits for the control loop
				       * (srv_loop.c, after the event batch) */
	struct conn *conn_grave;
	struct job *job_grave;        /* forgotten jobs, for srv_job_close_all */
	uint64_t next_job_id;
	uint64_t mem_used;
	uint64_t fds_used;            /* descriptors held for clients (srv_fds_add) */
	struct uid_use *uids;
	unsigned nconns;              /* open connections */
	int64_t accept_paused_until;  /* out of fds: the listening socket rests until then (ns) */
	unsigned rr;                  /* round-robin start for workers */
	struct open_step *tasks, *tasks_tail;  /* open steps with samples to hand out, FIFO */
	struct open_step *step_pool;  /* done open_steps, for reuse (freed by srv_workers_stop) */
	/* Streamed sets (srv_workers.c): parked steps whose job had a shard attached since, to be
	 * opened again (FIFO, taken before a new pick); the count of attaches (srv_shard_ready), so
	 * that a step_open that answered -EAGAIN after one opens again instead of parking; the
	 * parked steps of all jobs. */
	struct open_step *reopen, *reopen_tail;
	uint64_t shard_gen;
	unsigned nparked;
	struct att **live;            /* attached atts, in no order: what workers pick from */
	unsigned nlive, live_cap;
	int64_t start_ns;
	int64_t rate_ns;              /* last rate snapshot */
	int64_t sweep_ns;             /* last sweep of the state words for hostile consumers */
	uint64_t busy_ns, busy_snap;  /* worker time spent filling, all jobs */
	/* Self-sizing (srv_workers.c): */
	struct dm_bucket budget;      /* opts.cpu_budget cores of worker thread CPU */
	unsigned ceiling;             /* workers that may decode at once: min(opts.workers, the
				       * budget rounded up) */
	unsigned cap;                 /* of those, what the demand needs now (dm_active_cap) */
	unsigned active;              /* workers holding a task now */
	int64_t recheck_ns;           /* when a ring below its slots turns paused (dm_target fills it
				       * whole then) and idle workers should look again; 0 = never */
	struct dm_ring *dm_in;        /* pick's scratch: dm_cap entries */
	double *dm_acct;              /* pick's scratch for dm_shares: dm_cap entries */
	int64_t fair_ns;              /* when a worker last looked for a ring of a job that used
				       * less than the queued steps' (srv_workers.c, task_next) */
	unsigned dm_cap;
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

/* ---- srv_core.c: used by every other file; uses none ---- */

/* Pass a message to ops->notice (level: 0 error, 1 warn, 2 info), control characters escaped
 * (a dataset path is the client's bytes). Any thread. */
void srv_notice(struct srv *s, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Make srv_run's epoll_wait return, so that it runs housekeeping now. Any thread. */
void srv_wake_control(struct srv *s);
/* Under mu. @uid's account, made on first use; NULL when out of memory. */
struct uid_use *srv_uid(struct srv *s, uid_t uid);
/* Under mu. Add @delta bytes of memory held for a job (a ring, a rank table, a job's state) to
 * the total and to @uid's. */
void srv_mem_add(struct srv *s, uid_t uid, int64_t delta);
/* Under mu. May @uid make loaderd hold @bytes more, for @what (e.g. "job x rank 3's ring")?
 * 0, or -ENOMEM with the reason, naming --mem-limit or --mem-share, in @why. */
int srv_mem_check(struct srv *s, uid_t uid, uint64_t bytes, const char *what, char *why,
		  size_t whylen);
/* Under mu. Add @delta descriptors held for @uid (shards received, a job's files). */
void srv_fds_add(struct srv *s, uid_t uid, int64_t delta);
/* Under mu. May @uid make loaderd hold @n more descriptors, for @what? 0, or -EMFILE with the
 * reason, naming --max-fds or --max-fds-per-uid, in @why. */
int srv_fds_check(struct srv *s, uid_t uid, uint64_t n, const char *what, char *why,
		  size_t whylen);
/* Under mu. Reserve, whole, the descriptors a set of @total shards will hold once its job opens
 * (a descriptor and its O_DIRECT twin per file, the manifest's too) for @uid: a set too large is
 * refused before any of it is kept. 0 with the reservation in *charge (given back with
 * srv_fds_add(-charge)), or -EMFILE with the reason in @why. */
/* Is @fd a regular file (fstat)? What the node cache's fetcher passes must be. */
int srv_fd_regular(int fd);
int srv_set_fds_reserve(struct srv *s, uid_t uid, uint32_t total, uint64_t *charge, char *why,
			size_t whylen);
/* Bytes of admin answers one uid may have queued at once (answers it does not read): past it a
 * request is refused with EAGAIN. A world-65,536 job's stats are about 10 MB. */
#define SRV_OUT_UID_MAX (64ull << 20)
/* Seconds of the uid's share it may spend at once (a fresh uid starts with them): at 2%, 40 ms.
 * An answer is never cut: a longer one (10 MB, ~100 ms) is made and the uid then waits it off. */
#define SRV_ADMIN_BURST_S 2.0
/* Under mu. @ns of a loaderd thread's time went to @j (srv_workers.c: its records; srv_stream.c:
 * its stream's plans): charged to the job and its owner's account, for fair-by-cost. */
void srv_use_charge(struct srv *s, struct job *j, int64_t ns);
/* Under mu. Bring @u's admin budget up to date; then charge it @ns (0: only update). */
void srv_admin_charge(struct srv *s, struct uid_use *u, int64_t ns);
/* Is the peer of unix socket @fd a member of group @g (its primary group or one of its
 * supplementary groups when it connected)? 1 or 0. */
int srv_peer_in_group(int fd, gid_t g);
/* May the peer of @c see (admin answers) and join @j? Its owner, root, loaderd's own user, or a
 * member of the group the owner shared it with. */
int srv_job_visible(const struct conn *c, const struct job *j);

/* ---- srv_att.c: uses core ---- */

/* Under mu. Add @a to s->live, the rings workers may pick (srv_att_retire takes it off). 0 or
 * -ENOMEM. */
int srv_live_add(struct srv *s, struct att *a);
/* Under mu. Free @a now that neither a rank nor a worker holds it: buried until the control loop
 * frees it after the event batch. */
void srv_att_free(struct srv *s, struct att *a);
/* Under mu. Detach @a from its rank and connection; freed now or by its last worker. */
void srv_att_retire(struct srv *s, struct att *a);
/* Under mu. The first step @a's consumer has not released (never below a->floor). */
uint64_t srv_att_released(const struct att *a);
/* Under mu, control thread, after @a's consumer rang its doorbell (it released a step): when every
 * published step is released and the next one is not published, the ring is empty from @now. */
void srv_att_check_empty(struct att *a, int64_t now);
/* Under mu, after a worker published @step of @a: ends the empty time that waited for it. */
void srv_att_published(struct att *a, uint64_t step, int64_t now);

/* ---- srv_conn.c: uses core, att ---- */

/* Bind and listen on opts->socket_path (a stale socket from a killed daemon is replaced; a live
 * one is -EADDRINUSE): s->lfd. 0 or -errno with @why. */
int srv_conn_listen(struct srv *s, char *why, size_t whylen);
/* Control thread, without mu. Accept the pending connections: peer checks, then the connection
 * limits; out of descriptors, the listening socket rests a while (srv_conn_accept_resume). */
void srv_conn_accept(struct srv *s);
/* Control thread, without mu, after each event batch: listen again once the rest is over. */
void srv_conn_accept_resume(struct srv *s);
/* Control thread, without mu (takes it). @c's socket takes more: send more of its answer, charged
 * to its uid's admin budget. */
void srv_conn_writable(struct srv *s, struct conn *c);
/* Control thread, without mu. Read one message of @c into @buf (CTL_MSG_MAX bytes): ctl_recv's
 * length or -errno, the type in *type, the descriptors received in @fds (room for CTL_FDS_BATCH;
 * the caller closes those it does not take over), their number in *nfds. A message with more
 * is refused (-EBADMSG), its descriptors closed unread. */
ssize_t srv_conn_recv(struct conn *c, void *buf, uint16_t *type, int *fds, int *nfds);
/* Under mu, control thread. What srv_conn_recv returned (@n, @type, @nfds): 1 when it is a message
 * to answer; else 0, when it was nothing (a spurious wake-up) or @c was closed (the peer went away:
 * its att is retired; a message the protocol refuses: the client is told why). */
int srv_conn_vet(struct srv *s, struct conn *c, ssize_t n, uint16_t type, int nfds);
/* Under mu, control thread. Retire @c's att, close the socket, bury @c (the control loop frees
 * it). */
void srv_conn_close(struct srv *s, struct conn *c);
/* Under mu, control thread. Send @text (@len bytes, takes ownership, malloc'd) to @c as
 * CTL_ADMIN_TEXT chunks and an empty one: as much as the socket takes now, the rest whenever it
 * can take more (EPOLLOUT), so that an answer of any size arrives whole and a client that does
 * not read stalls only itself. */
void srv_conn_send_text(struct srv *s, struct conn *c, char *text, size_t len);
/* Under mu, control thread. Send @c a CTL_ERROR (errno @err, either sign), then close it. */
void srv_conn_fail(struct srv *s, struct conn *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- srv_workers.c: uses core, att ---- */

/* Start opts->workers threads (s->threads, s->nthreads). 0 or -errno with @why; the threads that
 * did start are stopped by srv_workers_stop. */
int srv_workers_start(struct srv *s, char *why, size_t whylen);
/* Tell the workers to stop, shut the attached rings down (ring_shutdown wakes their waiters), and
 * join the workers. */
void srv_workers_stop(struct srv *s);
/* Streamed sets, for the stream thread (srv_fetch.c), without mu (they take it). A shard of @j
 * attached (ops->shard_attach answered 0): every parked step of @j goes to be opened again
 * (ops->step_open anew), and a step_open racing with this one opens again instead of parking.
 * O(parked steps of @j). */
void srv_shard_ready(struct srv *s, struct job *j);
/* The stream of @j ended with @err (either sign) and @why (the store's reason, naming the
 * object): @j fails with it (every rank is told, as a failed fill), its parked steps are
 * abandoned (their slots are not published). */
void srv_job_stream_fail(struct srv *s, struct job *j, int err, const char *why);
/* Under mu, control thread, after each event batch: abandon the parked steps whose ring was
 * retired or turned hostile, or whose job failed (they would wait for a shard forever and keep
 * their att). O(jobs) when any step is parked, else O(1). */
void srv_parked_sweep(struct srv *s);

/* ---- srv_snap.c: uses core, att ---- */

/* Under mu. Rank @r of @j as srv_snapshot reports it, at @now. */
void srv_rank_snap(const struct job *j, uint32_t r, int64_t now, struct srv_rank_snap *out);
/* Under mu. A snapshot of the server: of only job @only when not NULL, of only the jobs @viewer
 * may see when not NULL (srv_job_visible), with their attached ranks (and the last
 * SRV_SNAP_RECENT to detach) when @ranks, else job summaries (ranks NULL). Its cost, time and
 * memory, is O(jobs + attached ranks), never O(world). NULL when out of memory; free with
 * srv_snapshot_free(). */
struct srv_snapshot *srv_snapshot_locked(struct srv *s, const struct job *only,
					 const struct conn *viewer, int ranks);

/* ---- srv_jobs.c: uses core, att, conn, snap ---- */

/* The job @name of uid @owner (names are per owner: ctl.h, enum ctl_share), or NULL. */
struct job *srv_job_find(struct srv *s, uid_t owner, const char *name);
/* Under mu. Unlink @j and bury it on s->job_grave (srv_job_close_all closes and frees it). */
void srv_job_free(struct srv *s, struct job *j);
/* Control thread, without the lock: ops->job_close and free the jobs of a job_grave list that
 * was taken off s->job_grave under the lock. */
void srv_job_close_all(struct srv *s, struct job *dead);
/* Under mu, control thread. CTL_JOB_OPEN from @c with the dataset @fd (-1: none; taken over
 * either way): checks it, then hands it to an opener thread (the conn waits). On failure @c is
 * closed. */
void srv_on_job_open(struct srv *s, struct conn *c, const struct ctl_job_open *spec, int fd);
/* Under mu, control thread. CTL_SHARD_FDS from @c (body @buf, @n bytes) with @nfds descriptors
 * @fds, taken over (set to -1): checked, counted in @c's uid's descriptors and kept on @c for
 * its job open, answered with CTL_SHARD_ACK. On failure @c is closed with the reason. */
void srv_on_shard_fds(struct srv *s, struct conn *c, const void *buf, size_t n, int *fds,
		      int nfds);
/* Under mu. Close and uncount the shards @c received and did not hand to a job open. */
void srv_conn_drop_shards(struct srv *s, struct conn *c);
/* Under mu, control thread: finish the opens the opener threads are done with. */
void srv_open_finish(struct srv *s);
/* Under mu. Wait (up to @ms) for the opener threads to end; 0 or -ETIMEDOUT. */
int srv_open_drain(struct srv *s, int ms);
/* Under mu, control thread. CTL_SPLIT_SEED from @c (@n bytes at @body): kept for its job open.
 * CTL_SPLIT_REQ from @c: the weights in force at a step of its job (CTL_SPLIT). */
void srv_on_split_seed(struct srv *s, struct conn *c, const void *body, size_t n);
/* Under mu, control thread. CTL_S3_OPEN from @c (@n bytes at @body): answered CTL_S3_ACK
 * (EOPNOTSUPP without a cache), checked and kept for its job open (srv_jobs.c). */
void srv_on_s3_open(struct srv *s, struct conn *c, const void *body, size_t n);
/* Wipe and free an s3 body (*p, *len bytes): credentials never outlive their use. NULL ok. */
void srv_s3_wipe(char **p, size_t *len);
/* On an opener thread, without mu: have ldfetch fetch @r's s3 dataset (r->s3, wiped once sent)
 * with its credentials into the node cache, and take the descriptors it answers with as if the
 * client had sent them (r->fd, r->shard_fds, counted in the uid's descriptors as CTL_SHARD_FDS
 * are). 0, or -errno with the reason (the store's, naming the object) in @why. srv_fetch.c. */
int srv_fetch(struct srv *s, struct open_req *r, char *why, size_t whylen);

/* ---- srv_stream.c: a streamed set's thread (docs/STREAMING.md) ---- */
struct srv_stream;
/* Start @j's stream over @fd (taken over: closed on failure) once its job_open succeeded with
 * info.stream_shards shards, those @attached (a byte per shard) attached at the open. Without
 * mu. 0, or -errno with @why. */
int srv_stream_start(struct srv *s, struct job *j, int fd, const uint8_t *attached, char *why,
		     size_t whylen);
/* Stop the thread (joined) and free it; without mu, before the job's ops->job_close. NULL ok. */
void srv_stream_stop(struct srv_stream *st);
/* Under mu: its share of the node cache, rate and shards here, into @js (status). */
void srv_stream_snap(const struct srv_stream *st, struct srv_job_snap *js);
void srv_stream_free(struct srv_stream *st);
/* Under mu, control thread. CTL_AUGMENT from @c (@n bytes at @body): checked, kept for its job
 * open, where it is part of what the job's ranks agree on. */
void srv_on_augment(struct srv *s, struct conn *c, const void *body, size_t n);
void srv_on_split_req(struct srv *s, struct conn *c, const struct ctl_split_req *q);
/* Under mu, control thread. CTL_STATS_REQ from @c: its rank's figures (CTL_STATS). */
void srv_on_stats(struct srv *s, struct conn *c);
/* Under mu, control thread, after each event batch: rates, hostile consumers, failed and idle
 * jobs. */
void srv_housekeeping(struct srv *s);

/* ---- srv_admin.c: uses core, conn, jobs, snap ---- */

/* Under mu, control thread. CTL_ADMIN (loaderctl) from @c: the answer as CTL_ADMIN_TEXT chunks,
 * then an empty one. Lets go of mu while it renders (from a copy); holds it again on return. */
void srv_on_admin(struct srv *s, struct conn *c, const struct ctl_admin *req);

/* srv_loop.c: srv_create, srv_run, srv_stop and srv_destroy (srv.h); uses every file above. */

#endif
