/* srv.h - loaderd's server core, the producer side of the control protocol (shm/ctl.h): listens
 * on the unix socket, checks peers, keeps jobs and their ranks, creates one ring per attached
 * rank, runs the worker threads that fill slots through a callback, reclaims a rank's ring when
 * its consumer dies, and answers loaderctl. It knows nothing of datasets or decoding: loaderd is
 * this plus the callbacks of loader/job.h (sampler, readers, decoders); tests use it with a
 * pattern filler (tests/srv_harness.h), and drive the callbacks without it, one step at a time
 * (tests/step_fill.h). The implementation is split by role over loader/srv_*.c (the map in
 * loader/srv_impl.h).
 *
 * Threads: srv_run() is the control loop (one thread, the caller's); srv_create() starts the
 * worker threads, which call ops->step_open and ops->fill. Callbacks may run on any of these
 * threads at once; the tasks of one step (disjoint sample ranges of one slot) may be filled by
 * several workers at once. */
#ifndef LOADERD_SRV_H
#define LOADERD_SRV_H
#include "shm/ctl.h"
#include "shm/ring.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

struct srv;

/* Phases of a fill whose time the server adds up per rank and reports (CTL_STATS, loaderctl):
 * the callbacks name them (struct srv_ops), the server knows only their index. */
#define SRV_PHASES_MAX CTL_PHASES_MAX

struct srv_phase {
	const char *name;          /* [a-z_]+: loaderctl's JSON key is "<name>_s"; NULL = unused */
	const char *doing;         /* its text: "fill time 1.00 s: 20% <doing>, ..." */
};

/* What a job's callbacks tell the server about it. */
struct srv_job_info {
	struct ring_desc ring;     /* slots, batch, sample_bytes, shape, ndim, dtype, layout */
	uint64_t steps_per_epoch;  /* >= 1 */
	uint64_t samples;          /* samples in the dataset */
	uint8_t dataset_id[CTL_DATASET_ID_SIZE]; /* the dataset's identity (dpk_identity); all zero:
						  * unknown, and start positions are not checked
						  * against it */
	char io[64];               /* how its records are read ("page cache (98.4% resident)"):
				    * loaderctl stats' "io"; "" = not said */
	uint64_t mem_bytes;        /* memory the job makes loaderd hold besides rings and rank
				    * tables: its index, the buffers workers may hold for its
				    * records (counted against opts.mem_limit, its uid's share) */
	uint32_t fds;              /* descriptors the job makes loaderd hold (its dataset's files,
				    * their O_DIRECT twins): counted against opts.max_fds and its
				    * uid's opts.max_fds_uid while the job lives */
	/* A streamed set (srv_dataset.stream; docs/STREAMING.md): its shards, and each shard's
	 * file size from the manifest (stream_shards entries, the job's memory, valid while the
	 * job lives: the stream's byte budget). 0 and NULL when not streamed. */
	uint32_t stream_shards;
	const uint64_t *shard_bytes;
};

/* A step, as the callbacks see it. The server takes its ring slot, then asks ops->step_open once
 * for what the whole step holds (the sampler's ids, flags and labels, the sample count), and cuts
 * it into tasks of a few samples that any worker fills (ops->fill), several at once; the worker
 * that completes the last task copies ids, flags and labels into the slot and publishes. The
 * arrays are the server's private memory (never the slot's: shared memory is write-only for the
 * producer), batch entries each. */
struct srv_step {
	void *job;                 /* what job_open returned */
	uint32_t rank, world;
	uint64_t epoch, step_in_epoch;
	uint32_t count;            /* out of step_open: samples in the step (<= batch) */
	uint32_t slot_flags;       /* out of step_open: RING_SLOT_* (the server sets RING_SLOT_LAST
				    * itself) */
	uint64_t *ids;             /* step_open writes [0, count); a fill rewrites its own range
				    * (a substituted sample) and nothing else */
	uint8_t *flags;            /* RING_SAMPLE_*, the same way */
	int64_t *labels;           /* the same way */
	/* Balanced shares (spec.balance; docs/RING.md): NULL for an even split, else the weights
	 * in force at this step (world entries, loader/shares.h), and @split, world entries of
	 * scratch. step_open then draws this rank's part of the global step (ldr_shares_split). */
	const uint32_t *weights;
	uint32_t *split;
	uint32_t cap;              /* samples the slot holds (the ring's batch) */
	uint32_t global_count;     /* out of step_open: samples of the global step, all ranks */
	uint32_t global_offset;    /* out of step_open: this rank's first entry in it */
	/* A streamed set (docs/STREAMING.md): with step_open's -EAGAIN, a shard the step reads that
	 * is not attached yet (nothing is held then); with 0, the shards the step holds until
	 * ops->step_release (held[0, nheld), written by step_open; held has cap entries, the
	 * server's memory). nheld 0 on a set that is not streamed. */
	uint32_t wait_shard;
	uint32_t *held;
	uint32_t nheld;
};

/* A task: samples [begin, end) of a step, as the fill callback sees it. */
struct srv_fill {
	struct srv_step *step;     /* shared by the tasks of the step: a fill touches only
				    * entries [begin, end) of its arrays */
	uint32_t begin, end;
	struct ring_slot *slot;    /* the step's slot: the fill writes the payload of its samples
				    * only, and never reads shared memory */
	/* The task this worker fills next, when it has taken it already (next_step NULL: none):
	 * the fill may start reading its records now, so that they arrive while this task
	 * decodes. The server always fills that task next on this worker, with this worker state. */
	struct srv_step *next_step;
	uint32_t next_begin, next_end;
	uint64_t phase_ns[SRV_PHASES_MAX]; /* out, optional: where the time went (ops->phases) */
	uint64_t bad;              /* out: records found bad while filling */
	uint64_t bad_ids[8];       /* out: the first of them (for stats) */
	uint32_t nbad_ids;
	char why[CTL_TEXT_MAX];    /* out: message when the callback fails */
};

/* A job's dataset as its client passed it: every descriptor opened by the client with its own
 * rights (SCM_RIGHTS) and checked by the server to be a regular file opened for reading; fd is
 * borrowed (dup it to keep it), shards may be taken over. */
struct srv_dataset {
	int fd;                    /* the .dpk or the manifest; -1 when the client sent none */
	int *shards;               /* a manifest's shards, in its order (CTL_SHARD_FDS); job_open
				    * may take one over (it then sets its entry to -1), and the
				    * server closes the others after it */
	uint32_t nshards;          /* 0 when none came; with stream, the manifest's shard count */
	int stream;                /* 1: a streamed set (docs/STREAMING.md): fd is the manifest,
				    * shards has an entry per shard of it, -1 for each not delivered
				    * yet (shard 0 always is): job_open opens it pending, attaches
				    * those that came (taking them over) and the stream attaches the
				    * others later (ops->shard_attach) */
	uid_t uid;                 /* the client's: what a job holds is never shared across uids */
	const struct ctl_augment *aug; /* the job's augmentations (CTL_AUGMENT, checked field by
				    * field); NULL when none came */
};

struct srv_ops {
	void *ctx;
	struct srv_phase phases[SRV_PHASES_MAX];  /* what srv_fill.phase_ns[i] measures */
	/* Validate @spec (already checked field by field) and describe the job, from the files in
	 * @ds. Runs on a thread of its own, without the server lock, so it may take long (read an
	 * index) and delays only this client. Returns 0 and a job handle in *job, or -errno with a
	 * message in @why that the client will see. */
	int (*job_open)(void *ctx, const struct ctl_job_open *spec, const struct srv_dataset *ds,
			void **job, struct srv_job_info *info, char *why, size_t whylen);
	void (*job_close)(void *ctx, void *job);
	/* Per-worker state, made on the worker's own thread. Optional (NULL). */
	void *(*worker_init)(void *ctx, unsigned index);
	void (*worker_fini)(void *ctx, void *worker);
	/* Open a step: set st->count, st->slot_flags and entries [0, count) of st->ids, flags and
	 * labels (the sampler's draw). Runs on one worker, without the server lock. 0, or -errno
	 * with @why set: the job fails and its clients are told why. A streamed set may answer
	 * -EAGAIN with st->wait_shard (a shard the step reads is pending; nothing held): the server
	 * parks the step (its slot stays taken, no worker waits) and calls step_open for it again
	 * after srv_shard_ready (the draw is a pure function of the step). */
	int (*step_open)(void *ctx, void *worker, struct srv_step *st, char *why, size_t whylen);
	/* Optional. Called once for each step step_open opened with 0, after the step was published
	 * or abandoned (never while a fill of it runs), without the server lock: let go of what
	 * step_open held for it (a streamed set's shards, st->held). */
	void (*step_release)(void *ctx, void *worker, struct srv_step *st);
	/* A streamed set's stream (loader/srv_fetch.c's stream thread), without the server lock;
	 * optional (NULL: no streaming). Attach shard @k of @job's set from @fd (taken over in every
	 * case): the shard's checks, then its records' bound and verdicts (its samples only), before
	 * any step can hold it; a shard that fails them is detached again. 0 (then call
	 * srv_shard_ready), or -errno with @why naming the shard (and the sample). */
	int (*shard_attach)(void *ctx, void *job, uint32_t k, int fd, char *why, size_t whylen);
	/* Detach shard @k of @job's set: 0, -EBUSY while a step holds it, -ENOENT when pending. */
	int (*shard_detach)(void *ctx, void *job, uint32_t k);
	/* The distinct shards read by steps [from, from + nsteps) of rank @rank (an even split:
	 * balanced shares are ignored for this forecast), appended to @out in first-use order,
	 * skipping those @seen marks (a byte per shard, set for each appended); stops at @max
	 * entries. Returns the count appended. O(nsteps x batch). */
	uint32_t (*stream_future)(void *ctx, void *job, uint32_t rank, uint64_t from,
				  uint64_t nsteps, uint8_t *seen, uint32_t *out, uint32_t max);
	/* Fill samples [f->begin, f->end) of f->step into the slot's payload. Tasks of one step may
	 * run on several workers at once. 0, or -errno with f->why set: the job fails as above. */
	int (*fill)(void *ctx, void *worker, struct srv_fill *f);
	/* Something the operator should hear about (a client dropped, a job failed). Optional. */
	void (*notice)(void *ctx, int level, const char *msg);  /* level: 0 error, 1 warn, 2 info */
};

/* How a streamed set's shards are fetched and let go (loaderd --cache-evict; srv_stream.c). */
enum srv_evict {
	SRV_EVICT_FUTURE, /* ahead in the samplers' order, the farthest-needed let go first */
	SRV_EVICT_LRU,    /* fetched ahead the same way, the least recently read let go */
};

struct srv_opts {
	const char *socket_path;
	unsigned workers;          /* producer threads, >= 1: a ceiling; how many decode at once
				    * follows the consumers' demand (loader/demand.h) */
	double cpu_budget;         /* cores of worker CPU, all jobs; 0 = the cores of the
				    * affinity mask */
	int fixed_workers;         /* 1: no self-sizing: every worker decodes whenever a slot is
				    * free (as before it; for comparisons) */
	unsigned task_samples;     /* samples per task (0: batch / (4 x workers), within
				    * [SRV_TASK_MIN, SRV_TASK_MAX]) */
	unsigned default_slots;    /* ring depth when the client asks for 0 (default 4) */
	uint64_t mem_limit;        /* bytes of ring memory over all attached ranks; 0 = none */
	gid_t group;               /* (gid_t)-1: socket 0600, owner only; else 0660 and this group */
	int all_users;             /* 1: socket 0666, every uid may connect (group is then -1) */
	unsigned ring_flags;       /* RING_CREATE_* */
	int linger_ms;             /* keep a job with no rank attached this long (default 60000) */
	/* Limits (0 = the default in parentheses). A client past one is refused with a CTL_ERROR
	 * that names the limit and its loaderd option. */
	unsigned max_conns;        /* connections at once, all users (1024) */
	unsigned max_conns_uid;    /* connections at once per uid (256) */
	unsigned max_jobs_uid;     /* jobs per uid (64) */
	unsigned max_world;        /* ranks per job (CTL_WORLD_MAX) */
	unsigned mem_share_uid;    /* percent of mem_limit one uid's rings may take (100) */
	unsigned max_fds;          /* descriptors clients' datasets may make loaderd hold, all
				    * users (RLIMIT_NOFILE / 2) */
	unsigned max_fds_uid;      /* of them, per uid (RLIMIT_NOFILE / 8) */
	int idle_ms;               /* close a connection that opened no job this long (10000) */
	int balance;               /* allow jobs to ask for balanced shares (loaderd --balance) */
	int cache;                 /* 1: a node cache of s3:// datasets (loaderd --cache-dir):
				    * CTL_S3_OPEN is taken and the job open asks ldfetch over
				    * fetch_fd; 0: CTL_S3_OPEN is answered EOPNOTSUPP */
	int fetch_fd;              /* ldfetch's socket (SOCK_SEQPACKET), when cache */
	int cache_stream;          /* 1: sets of shards stream through the cache (loaderd
				    * --cache-stream; srv_stream.c, docs/STREAMING.md) */
	int cache_evict;           /* enum srv_evict (loaderd --cache-evict) */
	uint64_t cache_size;       /* the cache's bytes, and one uid's (--cache-size, -per-uid):
				    * a stream's budget of attached shards */
	uint64_t cache_size_uid;
	const char *cache_endpoints;  /* the endpoints the node cache fetches from, comma-separated
				    * (ctl_s3_endpoint_listed); NULL: AWS's own */
	unsigned admin_share;      /* percent of the control thread's time one uid's loaderctl
				    * answers may take, rendering and sending (2): both hold the
				    * lock the workers need */
};

#define SRV_TASK_MIN 4u
#define SRV_TASK_MAX 8u
/* Fair by cost (srv_workers.c): a task is cut so that its samples take at most about this much
 * worker time (by the job's measured time per sample; one sample at least, and one while it is
 * not known), so that no task holds a worker longer than a slice or one record. */
#define SRV_SLICE_NS 20000000ll

/* Bind and listen on opts->socket_path (a stale socket from a killed daemon is replaced; a live
 * one is -EADDRINUSE) and start the workers. Returns 0 or -errno with a message in @why. */
int srv_create(const struct srv_opts *opts, const struct srv_ops *ops, struct srv **out,
	       char *why, size_t whylen);
/* Serve until srv_stop(). Then tells every client (CTL_ERROR, ESHUTDOWN) and returns 0;
 * srv_destroy() stops the workers and removes the socket file. */
int srv_run(struct srv *s);
/* Ask srv_run to return. Async-signal-safe (one write to an eventfd). */
void srv_stop(struct srv *s);
void srv_destroy(struct srv *s);  /* NULL ok; after srv_run returned or instead of it */

/* ---- a snapshot of the counters: loaderctl's answers (srv_admin.c), the metrics file ---- */

/* One rank of a job. Counters add up over all of the rank's attaches. */
struct srv_rank_snap {
	uint32_t rank;
	int attached;              /* a consumer is attached now */
	int started;               /* attached at least once */
	pid_t pid;                 /* the consumer's, when attached */
	uint32_t attaches;         /* times a consumer attached */
	uint64_t published;        /* steps published to this rank */
	uint64_t samples;          /* samples in them */
	uint64_t released;         /* first step the consumer has not released; detached: where it
				    * resumes */
	uint64_t fill_ns;          /* worker time spent filling this rank's slots */
	uint64_t phase_ns[SRV_PHASES_MAX];  /* of fill_ns, per srv_ops.phases */
	uint64_t latency_ns;       /* sum over its published steps of first task to publish */
	uint64_t empty_ns;         /* time the ring held no batch for its consumer: every published
				    * step released, the next not yet published (srv_jobs.c) */
	uint32_t slots;            /* ring depth; 0 when detached */
	uint32_t occupancy;        /* slots taken for steps not yet released: being filled, ready or
				    * held by the consumer; 0 when detached */
	double rate;               /* samples/s over the last second */
};

struct srv_job_snap {
	char name[CTL_JOB_NAME_MAX];
	char dataset[CTL_PATH_MAX];
	char io[64];               /* srv_job_info.io */
	uint64_t id;
	uid_t uid;                 /* the user whose client opened it: its owner */
	uint32_t share;            /* enum ctl_share: CTL_SHARE_GROUP: shared with share_gid */
	gid_t share_gid;
	uint32_t world, attached, batch;
	uint64_t steps_per_epoch;
	uint64_t steps_total;      /* 0 = unbounded */
	uint64_t bad;              /* bad records found while filling, all ranks */
	uint64_t bad_ids[16];      /* some of them (the most recent 16) */
	unsigned nbad_ids;         /* entries of bad_ids in use */
	int failed;
	double rate;               /* samples/s over the last second, all ranks */
	double demand;             /* samples/s the consumers eat (peak of the last second of
				    * consumption, all attached ranks; 0 = not measured yet) */
	uint32_t target;           /* steps kept opened ahead, all attached ranks (self-sizing) */
	uint32_t weight;           /* its weight, 1..CTL_WEIGHT_MAX */
	double cpu;                /* cores of worker CPU given to it over the last second */
	uint64_t cpu_ns;           /* worker CPU given to it since it opened */
	uint64_t mem_rings;        /* bytes of its ranks' rings */
	uint64_t mem_table;        /* bytes of its rank table */
	uint64_t mem_state;        /* bytes of its index and the worker buffers for its records */
	uint32_t started;          /* ranks attached at least once */
	uint64_t published, samples;  /* all ranks, all attaches */
	uint64_t fill_ns, latency_ns;
	uint64_t phase_ns[SRV_PHASES_MAX];
	/* A set streamed through the node cache (--cache-stream): its shards, those here at its
	 * last plan, its share of the cache's bytes (stream_share.h; with --cache-evict lru its
	 * uid's even split) and its rate (steps a second a rank, 0: not measured yet). */
	int streamed;
	uint32_t stream_shards, stream_here;
	uint64_t stream_share;
	double stream_rate;
	/* Not every rank: the attached ones and the last few to detach (SRV_SNAP_RECENT), nranks
	 * entries by rank number, in the snapshot's memory (NULL in a summary), so that a snapshot
	 * costs O(attached ranks) whatever the world (a world of 65,536 is 10 MB of ranks). */
	struct srv_rank_snap *ranks;
	uint32_t nranks;
};

struct srv_snapshot {
	int64_t uptime_ns;
	unsigned workers;
	uint64_t busy_ns;          /* worker time spent filling since start, all workers */
	double busy_share;         /* of the workers' time, over the last second */
	double cpu_budget;         /* cores (--cpu-budget) */
	unsigned active_cap;       /* workers the demand needs now, of the ceiling */
	uint64_t mem_used;         /* bytes held for jobs: rings, rank tables, job states */
	uint64_t mem_rings;        /* of those, the rings of attached ranks */
	uint64_t mem_limit;        /* 0 = none */
	int accept_paused;         /* out of descriptors: not accepting connections for now */
	unsigned clients;          /* open connections (ranks and loaderctl) */
	unsigned ranks_attached;
	unsigned njobs;
	struct srv_job_snap *jobs; /* njobs entries */
	size_t bytes;              /* the snapshot's memory, all in one allocation */
	struct srv_phase phases[SRV_PHASES_MAX];  /* srv_ops.phases (static strings) */
	char socket[sizeof(((struct sockaddr_un *)0)->sun_path)];  /* the socket's path */
};

/* Copy every counter of @s, under its lock, held only for the copy. Any thread, but not one that
 * holds the server's lock (a callback). Returns 0 or -ENOMEM; free *out with
 * srv_snapshot_free(). */
int srv_snapshot_take(struct srv *s, struct srv_snapshot **out);
void srv_snapshot_free(struct srv_snapshot *snap);  /* NULL ok */

#endif
