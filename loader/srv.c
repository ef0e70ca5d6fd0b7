/* srv.c - loaderd's server core: control loop, jobs, attachments and producer threads (see srv.h).
 *
 * DESIGN
 * A job is known by its name; each of its ranks is either attached (a live connection, a ring and
 * a doorbell) or detached with a resume step. One attachment ("att") = one connection's ring: it
 * is created on CTL_JOB_OPEN and retired when the connection goes, never reused, so a dead or
 * hostile consumer's memory is never handed to the next one.
 *
 * Workers pick work under s->mu: for each live att in round-robin order, the next step to produce
 * is taken when ring_prod_poll() says its slot is free. A worker then fills and publishes without
 * the lock, holding a reference on the att so that a concurrent detach cannot unmap the ring
 * under it. When no slot is free anywhere, workers sleep on s->cv.
 *
 * What wakes them is the doorbell: an eventfd sent with the ring; the client writes it after each
 * release (the ring's futex word cannot be waited on by a thread that serves many rings). The
 * control loop polls all doorbells with the sockets and broadcasts s->cv. A consumer that never
 * rings only stalls its own ring; any other ring keeps its workers.
 *
 * Peer death is learned from the kernel: the connection hangs up (EPOLLHUP/EPOLLRDHUP, or recv
 * returns 0). The att is retired; its resume step is the first step the consumer had not
 * released, read from the state words by ring_prod_scan() (or, if the words are garbage, the last
 * step the producer itself saw released). A consumer whose words break the state machine is
 * dropped with an error message: the workers notice (-EBADMSG from ring_prod_poll), mark the att
 * hostile and wake the control loop, which does the dropping. */
#include "loader/srv.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

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
	struct att *grave_next;  /* buried: freed after the current event batch */
};

struct rank_state {
	struct att *att;         /* NULL when detached */
	int started;             /* attached at least once: resume from @resume */
	uint64_t resume;
	uint64_t published, samples, fill_ns, io_ns, decode_ns;
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
	struct att *att_grave;        /* retired atts whose memory waits for reap() */
	struct conn *conn_grave;
	uint64_t next_job_id;
	uint64_t mem_used;
	unsigned rr;                  /* round-robin start for workers */
	int64_t start_ns;
	int64_t rate_ns;              /* last rate snapshot */
	uint64_t busy_ns, busy_snap;  /* worker time spent filling, all jobs */
	double busy_share;            /* of the workers, over the last snapshot interval */
	atomic_int stop;
	int workers_stop;             /* under mu */
	pthread_t *threads;
	unsigned nthreads;
	int ran;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void notice(struct srv *s, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void notice(struct srv *s, int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!s->ops.notice)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	s->ops.notice(s->ops.ctx, level, msg);
}

static void wake_control(struct srv *s)
{
	uint64_t one = 1;

	(void)!write(s->wake, &one, sizeof(one));
}

/* ---- attachments ---- */

/* Under mu. An att that no worker holds any more is buried, not freed: an epoll batch that the
 * control loop is still walking may hold an event for its doorbell. reap() frees it after the
 * batch; until then its fd stays open, so the number cannot be reused under that event. */
static void att_free(struct srv *s, struct att *a)
{
	s->mem_used -= a->bytes;
	a->job->atts--;
	a->job = NULL;
	a->grave_next = s->att_grave;
	s->att_grave = a;
}

/* Under mu, on the control thread, between event batches. */
static void reap(struct srv *s)
{
	while (s->att_grave) {
		struct att *a = s->att_grave;
		s->att_grave = a->grave_next;
		if (a->bell >= 0)
			close(a->bell);
		ring_destroy(a->ring);
		free(a);
	}
	while (s->conn_grave) {
		struct conn *c = s->conn_grave;
		s->conn_grave = c->next;
		free(c);
	}
}

/* Under mu. The first step the consumer of @a has not released, read from the state words. With
 * garbage in them the scan still stops at the first step not cleanly released; never below what
 * the producer itself saw released (a->floor). */
static uint64_t att_released(const struct att *a)
{
	uint64_t frontier;
	int ret = ring_prod_scan(a->ring, a->first, a->next, &frontier);

	if (ret < 0 && ret != -EBADMSG)
		return a->floor;
	return frontier > a->floor ? frontier : a->floor;
}

/* Under mu. Detach @a from its rank and connection; free it now or when its last worker is done. */
static void att_retire(struct srv *s, struct att *a)
{
	struct rank_state *rs = &a->job->ranks[a->rank];

	if (a->dead)
		return;
	a->dead = 1;
	rs->resume = att_released(a);
	rs->att = NULL;
	if (--a->job->attached == 0)
		a->job->idle_since_ns = now_ns();
	epoll_ctl(s->ep, EPOLL_CTL_DEL, a->bell, NULL);
	ring_shutdown(a->ring);
	if (a->conn)
		a->conn->att = NULL;
	a->conn = NULL;
	if (a->refs == 0)
		att_free(s, a);
}

/* ---- connections ---- */

static void conn_close(struct srv *s, struct conn *c)
{
	struct conn **pp;

	if (c->att)
		att_retire(s, c->att);
	epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->closed = 1;
	for (pp = &s->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	c->next = s->conn_grave;  /* freed by reap(), after the event batch */
	s->conn_grave = c;
}

/* Tell the client why, then close. */
static void conn_fail(struct srv *s, struct conn *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void conn_fail(struct srv *s, struct conn *c, int err, const char *fmt, ...)
{
	struct ctl_error e;
	va_list ap;

	memset(&e, 0, sizeof(e));
	e.err = err < 0 ? -err : err;
	va_start(ap, fmt);
	vsnprintf(e.text, sizeof(e.text), fmt, ap);
	va_end(ap);
	(void)ctl_send(c->fd, CTL_ERROR, &e, sizeof(e), NULL, 0);
	notice(s, 1, "client pid %d: %s", (int)c->pid, e.text);
	conn_close(s, c);
}

/* Owner, root, or (when configured) a member of the group. Checked before any byte is parsed. */
static int peer_allowed(struct srv *s, int fd, pid_t *pid)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return 0;
	*pid = cr.pid;
	if (cr.uid == 0 || cr.uid == geteuid())
		return 1;
	if (s->opts.group == (gid_t)-1)
		return 0;
	if (cr.gid == s->opts.group)
		return 1;
	gid_t groups[256];
	len = sizeof(groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return 0;
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == s->opts.group)
			return 1;
	return 0;
}

static void on_accept(struct srv *s)
{
	for (;;) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		pid_t pid = 0;

		if (fd < 0)
			return;  /* EAGAIN, or a transient error: epoll tells us again */
		if (!peer_allowed(s, fd, &pid)) {
			notice(s, 1, "refused a client (pid %d): not the owner, root or the allowed group",
			       (int)pid);
			close(fd);
			continue;
		}
		struct conn *c = calloc(1, sizeof(*c));
		struct epoll_event ee = { .events = EPOLLIN | EPOLLRDHUP };
		if (!c) {
			close(fd);
			continue;
		}
		c->ev.kind = EV_CONN;
		c->ev.p = c;
		c->fd = fd;
		c->pid = pid;
		ee.data.ptr = &c->ev;
		if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ee) < 0) {
			close(fd);
			free(c);
			continue;
		}
		pthread_mutex_lock(&s->mu);
		c->next = s->conns;
		s->conns = c;
		pthread_mutex_unlock(&s->mu);
	}
}

/* ---- jobs ---- */

static struct job *job_find(struct srv *s, const char *name)
{
	for (struct job *j = s->jobs; j; j = j->next)
		if (!strcmp(j->name, name))
			return j;
	return NULL;
}

static void job_free(struct srv *s, struct job *j)
{
	struct job **pp;

	for (pp = &s->jobs; *pp; pp = &(*pp)->next)
		if (*pp == j) {
			*pp = j->next;
			break;
		}
	if (s->ops.job_close)
		s->ops.job_close(s->ops.ctx, j->state);
	free(j->ranks);
	free(j);
}

/* The first field where two job specs differ, for the error message. */
static const char *spec_diff(const struct ctl_job_open *a, const struct ctl_job_open *b)
{
	if (strcmp(a->dataset, b->dataset))
		return "dataset";
	if (a->batch != b->batch)
		return "batch";
	if (a->world != b->world)
		return "world";
	if (a->seed != b->seed)
		return "seed";
	if (a->crop_h != b->crop_h || a->crop_w != b->crop_w)
		return "crop";
	if (a->transforms != b->transforms)
		return "transforms";
	if (a->sampling != b->sampling)
		return "sampling";
	if (a->tail != b->tail)
		return "tail";
	if (a->epochs != b->epochs || a->start_epoch != b->start_epoch)
		return "epochs";
	if (memcmp(a, b, sizeof(*a)))
		return "on_bad or slots";
	return NULL;
}

/* Under mu. Handle CTL_JOB_OPEN from @c. On failure the connection is closed with the reason. */
static void on_job_open(struct srv *s, struct conn *c, const struct ctl_job_open *spec)
{
	char why[CTL_TEXT_MAX];
	struct ctl_job_open key = *spec;
	struct job *j;
	int ret;

	if (c->att) {
		conn_fail(s, c, EINVAL, "this connection already has a job");
		return;
	}
	if (ctl_check_job_open(spec, why, sizeof(why)) < 0) {
		conn_fail(s, c, EINVAL, "job open: %s", why);
		return;
	}
	key.rank = 0;
	j = job_find(s, spec->job);
	if (j) {
		const char *d = spec_diff(&j->spec, &key);
		if (d) {
			conn_fail(s, c, EEXIST, "job %s exists with another %s", spec->job, d);
			return;
		}
		if (j->failed) {
			conn_fail(s, c, j->fail_err, "job %s failed: %s", j->name, j->fail_msg);
			return;
		}
		if (j->ranks[spec->rank].att) {
			conn_fail(s, c, EBUSY, "rank %u of job %s is attached (pid %d)", spec->rank,
				  spec->job, (int)j->ranks[spec->rank].att->conn->pid);
			return;
		}
	} else {
		j = calloc(1, sizeof(*j));
		if (j)
			j->ranks = calloc(spec->world, sizeof(*j->ranks));
		if (!j || !j->ranks) {
			free(j);
			conn_fail(s, c, ENOMEM, "out of memory for job %s", spec->job);
			return;
		}
		why[0] = '\0';
		ret = s->ops.job_open(s->ops.ctx, spec, &j->state, &j->info, why, sizeof(why));
		if (ret == 0 && j->info.steps_per_epoch == 0)
			ret = -EINVAL, snprintf(why, sizeof(why), "the job has no steps");
		if (ret < 0) {
			free(j->ranks);
			free(j);
			conn_fail(s, c, ret, "job %s: %s", spec->job, why[0] ? why : strerror(-ret));
			return;
		}
		snprintf(j->name, sizeof(j->name), "%s", spec->job);
		j->spec = key;
		j->id = ++s->next_job_id;
		if (spec->epochs)
			j->steps_total = (spec->start_epoch + spec->epochs) * j->info.steps_per_epoch;
		j->next = s->jobs;
		s->jobs = j;
	}

	struct rank_state *rs = &j->ranks[spec->rank];
	struct ring_desc d = j->info.ring;
	d.slots = spec->slots ? spec->slots : s->opts.default_slots;
	d.rank = spec->rank;
	d.world = spec->world;
	d.job_id = j->id;
	d.first_step = rs->started ? rs->resume : spec->start_epoch * j->info.steps_per_epoch;
	d.steps_total = j->steps_total;
	if (d.steps_total && d.first_step > d.steps_total)
		d.first_step = d.steps_total;
	d.steps_per_epoch = j->info.steps_per_epoch;

	uint64_t bytes;
	ret = ring_size(&d, &bytes);
	if (ret < 0) {
		conn_fail(s, c, ret, "job %s: ring of %u slots x %u samples x %llu bytes: %s", j->name,
			  d.slots, d.batch, (unsigned long long)d.sample_bytes, strerror(-ret));
		goto drop_idle;
	}
	if (s->opts.mem_limit && s->mem_used + bytes > s->opts.mem_limit) {
		conn_fail(s, c, ENOMEM,
			  "job %s rank %u needs %llu KiB of ring memory; limit %llu KiB, %llu KiB in use",
			  j->name, spec->rank, (unsigned long long)(bytes >> 10),
			  (unsigned long long)(s->opts.mem_limit >> 10),
			  (unsigned long long)(s->mem_used >> 10));
		goto drop_idle;
	}
	struct att *a = calloc(1, sizeof(*a));
	if (!a) {
		conn_fail(s, c, ENOMEM, "out of memory");
		goto drop_idle;
	}
	a->bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ret = a->bell < 0 ? -errno : ring_create(&d, s->opts.ring_flags, &a->ring);
	if (ret < 0) {
		if (a->bell >= 0)
			close(a->bell);
		free(a);
		conn_fail(s, c, ret, "job %s rank %u: creating the ring: %s", j->name, spec->rank,
			  strerror(-ret));
		goto drop_idle;
	}
	a->bytes = ring_header(a->ring)->total_size;
	s->mem_used += a->bytes;
	j->atts++;
	a->bell_ev.kind = EV_BELL;
	a->bell_ev.p = a;
	a->job = j;
	a->rank = spec->rank;
	a->conn = c;
	a->first = a->next = a->floor = d.first_step;

	struct ctl_job_ok ok = { .job_id = j->id, .first_step = d.first_step,
				 .steps_total = j->steps_total,
				 .steps_per_epoch = j->info.steps_per_epoch,
				 .samples = j->info.samples };
	int fds[2] = { ring_fd(a->ring), a->bell };
	struct epoll_event ee = { .events = EPOLLIN, .data.ptr = &a->bell_ev };
	ret = ctl_send(c->fd, CTL_JOB_OK, &ok, sizeof(ok), fds, 2);
	if (ret == 0 && epoll_ctl(s->ep, EPOLL_CTL_ADD, a->bell, &ee) < 0)
		ret = -errno;
	a->dead = 1;  /* not attached yet: att_free alone undoes it */
	if (ret < 0) {
		att_free(s, a);
		notice(s, 1, "client pid %d went away while opening job %s", (int)c->pid, j->name);
		conn_close(s, c);
		goto drop_idle;
	}
	a->dead = 0;
	c->att = a;
	rs->att = a;
	rs->started = 1;
	rs->attaches++;
	j->attached++;
	notice(s, 2, "job %s rank %u/%u attached (pid %d) at step %llu, ring %llu MiB%s", j->name,
	       a->rank, spec->world, (int)c->pid, (unsigned long long)d.first_step,
	       (unsigned long long)(a->bytes >> 20), ring_header(a->ring)->huge ? " (huge pages)" : "");
	pthread_cond_broadcast(&s->cv);
	return;
drop_idle:
	if (j->attached == 0 && j->idle_since_ns == 0)
		j->idle_since_ns = now_ns();
}

static void on_stats(struct srv *s, struct conn *c)
{
	struct att *a = c->att;

	if (!a) {
		conn_fail(s, c, EINVAL, "stats before a job was opened");
		return;
	}
	struct rank_state *rs = &a->job->ranks[a->rank];
	struct ctl_stats st = { .job_id = a->job->id, .published = rs->published,
				.samples = rs->samples, .bad_records = a->job->bad,
				.fill_ns = rs->fill_ns, .io_ns = rs->io_ns,
				.decode_ns = rs->decode_ns, .attaches = rs->attaches,
				.ranks_attached = a->job->attached,
				.slots = ring_header(a->ring)->slots };
	uint64_t frontier = att_released(a);
	st.released = frontier;
	st.occupancy = (uint32_t)(a->next - frontier);
	if (ctl_send(c->fd, CTL_STATS, &st, sizeof(st), NULL, 0) < 0)
		conn_close(s, c);
}

/* ---- loaderctl ---- */

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

static void admin_job(struct text *t, struct job *j, int json, int stats)
{
	const struct ctl_job_open *sp = &j->spec;
	uint64_t fill = 0, io = 0, dec = 0;
	double rate = 0;

	for (uint32_t r = 0; r < sp->world; r++) {
		fill += j->ranks[r].fill_ns;
		io += j->ranks[r].io_ns;
		dec += j->ranks[r].decode_ns;
		rate += j->ranks[r].rate;
	}
	unsigned nb = j->nbad_ids < 16 ? j->nbad_ids : 16;
	if (json) {
		put(t, "{\"job\":");
		put_json_str(t, j->name);
		put(t, ",\"id\":%llu,\"dataset\":", (unsigned long long)j->id);
		put_json_str(t, sp->dataset);
		put(t, ",\"world\":%u,\"attached\":%u,\"batch\":%u,\"steps_per_epoch\":%llu,"
		    "\"steps_total\":%llu,\"samples_per_s\":%.1f,\"bad_records\":%llu,\"bad_ids\":[",
		    sp->world, j->attached, sp->batch, (unsigned long long)j->info.steps_per_epoch,
		    (unsigned long long)j->steps_total, rate, (unsigned long long)j->bad);
		for (unsigned b = 0; b < nb; b++)
			put(t, "%s%llu", b ? "," : "", (unsigned long long)j->bad_ids[b]);
		put(t, "],\"failed\":%s", j->failed ? "true" : "false");
		if (stats) {
			put(t, ",\"fill_s\":%.3f,\"io_s\":%.3f,\"decode_s\":%.3f,\"ranks\":[", fill * 1e-9,
			    io * 1e-9, dec * 1e-9);
			for (uint32_t r = 0; r < sp->world; r++) {
				struct rank_state *rs = &j->ranks[r];
				struct att *a = rs->att;
				uint64_t rel = a ? att_released(a) : 0;
				put(t, "%s{\"rank\":%u,\"attached\":%s,\"pid\":%d,\"published\":%llu,"
				    "\"released\":%llu,\"samples\":%llu,\"samples_per_s\":%.1f,"
				    "\"ring_slots\":%u,\"ring_occupancy\":%llu,\"attaches\":%u}",
				    r ? "," : "", r, a ? "true" : "false", a ? (int)a->conn->pid : 0,
				    (unsigned long long)rs->published,
				    (unsigned long long)(a ? rel : rs->resume),
				    (unsigned long long)rs->samples, rs->rate,
				    a ? ring_header(a->ring)->slots : 0,
				    (unsigned long long)(a ? a->next - rel : 0), rs->attaches);
			}
			put(t, "]");
		}
		put(t, "}");
		return;
	}
	put(t, "job %s (id %llu): %s\n  %u/%u ranks attached, batch %u, %llu steps/epoch, "
	    "%.1f samples/s, %llu bad records", j->name, (unsigned long long)j->id, sp->dataset,
	    j->attached, sp->world, sp->batch, (unsigned long long)j->info.steps_per_epoch, rate,
	    (unsigned long long)j->bad);
	if (nb) {
		put(t, " (sample ids:");
		for (unsigned b = 0; b < nb; b++)
			put(t, " %llu", (unsigned long long)j->bad_ids[b]);
		put(t, ")");
	}
	put(t, "%s\n", j->failed ? ", FAILED" : "");
	if (!stats)
		return;
	if (fill)
		put(t, "  fill time %.2f s: %.0f%% reading, %.0f%% decoding\n", fill * 1e-9,
		    100.0 * io / fill, 100.0 * dec / fill);
	for (uint32_t r = 0; r < sp->world; r++) {
		struct rank_state *rs = &j->ranks[r];
		struct att *a = rs->att;
		uint64_t rel = a ? att_released(a) : 0;
		if (a)
			put(t, "  rank %u: pid %d, step %llu, %.1f samples/s, ring %llu/%u slots full\n",
			    r, (int)a->conn->pid, (unsigned long long)rel, rs->rate,
			    (unsigned long long)(a->next - rel), ring_header(a->ring)->slots);
		else
			put(t, "  rank %u: %s, resumes at step %llu\n", r,
			    rs->started ? "detached" : "never attached", (unsigned long long)rs->resume);
	}
}

/* Under mu. loaderctl's requests: answered as text chunks, then an empty chunk. */
static void on_admin(struct srv *s, struct conn *c, const struct ctl_admin *req)
{
	char why[CTL_TEXT_MAX];
	struct text t = { 0 };
	int json = !!(req->flags & CTL_ADMIN_JSON), n = 0;

	if (ctl_check_admin(req, why, sizeof(why)) < 0) {
		conn_fail(s, c, EINVAL, "%s", why);
		return;
	}
	struct job *only = req->job[0] ? job_find(s, req->job) : NULL;
	if (req->job[0] && !only) {
		conn_fail(s, c, ENOENT, "no job named %s", req->job);
		return;
	}
	switch (req->op) {
	case CTL_OP_STATUS: {
		unsigned jobs = 0, clients = 0, attached = 0;
		for (struct job *j = s->jobs; j; j = j->next)
			jobs++, attached += j->attached;
		for (struct conn *k = s->conns; k; k = k->next)
			clients++;
		double up = (double)(now_ns() - s->start_ns) * 1e-9;
		if (json)
			put(&t, "{\"pid\":%d,\"uptime_s\":%.1f,\"workers\":%u,\"workers_busy\":%.3f,"
			    "\"jobs\":%u,\"ranks_attached\":%u,\"clients\":%u,\"ring_bytes\":%llu,"
			    "\"ring_bytes_limit\":%llu,\"socket\":", (int)getpid(), up, s->nthreads,
			    s->busy_share, jobs, attached, clients, (unsigned long long)s->mem_used,
			    (unsigned long long)s->opts.mem_limit);
		else
			put(&t, "loaderd pid %d, up %.0f s, socket %s\n%u workers, %.0f%% busy\n"
			    "%u jobs, %u ranks attached, %u clients\nring memory %llu MiB of %llu MiB\n",
			    (int)getpid(), up, s->path, s->nthreads, 100 * s->busy_share, jobs, attached,
			    clients, (unsigned long long)(s->mem_used >> 20),
			    (unsigned long long)(s->opts.mem_limit >> 20));
		if (json) {
			put_json_str(&t, s->path);
			put(&t, "}\n");
		}
		break;
	}
	case CTL_OP_JOBS:
	case CTL_OP_STATS:
		if (json)
			put(&t, "[");
		for (struct job *j = s->jobs; j; j = j->next) {
			if (only && j != only)
				continue;
			if (json && n++)
				put(&t, ",");
			admin_job(&t, j, json, req->op == CTL_OP_STATS);
		}
		if (json)
			put(&t, "]\n");
		else if (!s->jobs)
			put(&t, "no jobs\n");
		break;
	case CTL_OP_STOP:
		if (!only->failed) {
			only->failed = 1;
			only->fail_err = ECANCELED;
			snprintf(only->fail_msg, sizeof(only->fail_msg), "stopped by loaderctl");
			notice(s, 1, "job %s: stopped by loaderctl (pid %d)", only->name, (int)c->pid);
			wake_control(s);
		}
		put(&t, json ? "{\"stopped\":\"%s\"}\n" : "job %s stopped\n", only->name);
		break;
	}
	if (t.oom) {
		free(t.p);
		conn_fail(s, c, ENOMEM, "out of memory for the answer");
		return;
	}
	int ret = 0;
	const size_t chunk = CTL_MSG_MAX - sizeof(struct ctl_hdr);
	for (size_t off = 0; ret == 0 && off < t.len; off += chunk)
		ret = ctl_send(c->fd, CTL_ADMIN_TEXT, t.p + off, t.len - off < chunk ? t.len - off : chunk,
			       NULL, 0);
	if (ret == 0)
		ret = ctl_send(c->fd, CTL_ADMIN_TEXT, NULL, 0, NULL, 0);
	free(t.p);
	if (ret < 0)
		conn_close(s, c);
}

static void on_conn(struct srv *s, struct conn *c, uint32_t events)
{
	char buf[CTL_MSG_MAX];
	uint16_t type;
	int fds[2], nfds = 0;
	ssize_t n;

	if (c->closed)
		return;  /* closed earlier in this event batch */
	if (events & EPOLLIN) {
		n = ctl_recv(c->fd, buf, &type, fds, &nfds);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		pthread_mutex_lock(&s->mu);
		if (n == -EAGAIN) {
			/* spurious */
		} else if (n >= 0 && nfds > 0) {
			conn_fail(s, c, EBADMSG, "a client may not send file descriptors");
		} else if (n == -EPIPE) {
			struct att *a = c->att;
			if (a) {
				struct job *j = a->job;
				uint32_t rank = a->rank;
				att_retire(s, a);
				uint64_t at = j->ranks[rank].resume;
				if (j->steps_total && at >= j->steps_total)
					notice(s, 2, "job %s rank %u: consumer (pid %d) finished and left",
					       j->name, rank, (int)c->pid);
				else
					notice(s, 1, "job %s rank %u: consumer (pid %d) went away; its slots "
					       "are reclaimed; it resumes at step %llu", j->name, rank,
					       (int)c->pid, (unsigned long long)at);
			}
			conn_close(s, c);
		} else if (n < 0) {
			conn_fail(s, c, n, "bad message: %s", n == -EPROTO ?
				  "protocol version mismatch (this loaderd speaks version 1)" :
				  n == -EBADMSG ? "malformed packet" : strerror((int)-n));
		} else if (type == CTL_JOB_OPEN && (size_t)n == sizeof(struct ctl_job_open)) {
			struct ctl_job_open spec;
			memcpy(&spec, buf, sizeof(spec));
			on_job_open(s, c, &spec);
		} else if (type == CTL_ADMIN && (size_t)n == sizeof(struct ctl_admin) && !c->att) {
			struct ctl_admin req;
			memcpy(&req, buf, sizeof(req));
			on_admin(s, c, &req);
		} else if (type == CTL_STATS_REQ && n == 0) {
			on_stats(s, c);
		} else {
			conn_fail(s, c, EBADMSG, "unexpected message type %u with %zd bytes", type, n);
		}
		pthread_mutex_unlock(&s->mu);
		return;
	}
	if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
		pthread_mutex_lock(&s->mu);
		conn_close(s, c);
		pthread_mutex_unlock(&s->mu);
	}
}

/* Under mu: drop hostile consumers, fail jobs whose fill failed, forget idle jobs. */
static void housekeeping(struct srv *s)
{
	int64_t now = now_ns();

	if (now - s->rate_ns >= 1000000000) {
		double dt = (double)(now - s->rate_ns) * 1e-9;
		for (struct job *j = s->jobs; j; j = j->next)
			for (uint32_t r = 0; r < j->spec.world; r++) {
				struct rank_state *rs = &j->ranks[r];
				rs->rate = (double)(rs->samples - rs->rate_samples) / dt;
				rs->rate_samples = rs->samples;
			}
		s->busy_share = (double)(s->busy_ns - s->busy_snap) * 1e-9 / dt / s->nthreads;
		s->busy_snap = s->busy_ns;
		s->rate_ns = now;
	}

	/* Workers check the words only when they look for work; a consumer that scribbles over a
	 * full ring and never releases would go unnoticed without this sweep. */
	for (struct conn *c = s->conns; c; c = c->next) {
		uint64_t fr;
		if (c->att && !c->att->hostile &&
		    ring_prod_scan(c->att->ring, c->att->first, c->att->next, &fr) == -EBADMSG)
			c->att->hostile = 1;
	}
	for (struct conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		if (c->att && c->att->hostile)
			conn_fail(s, c, EBADMSG, "job %s rank %u: the ring's state words were corrupted "
				  "by the consumer; dropped", c->att->job->name, c->att->rank);
		else if (c->att && c->att->job->failed)
			conn_fail(s, c, c->att->job->fail_err, "job %s failed: %s",
				  c->att->job->name, c->att->job->fail_msg);
	}
	for (struct job *j = s->jobs, *next; j; j = next) {
		next = j->next;
		if (j->attached == 0 && (j->failed ||
		    now - j->idle_since_ns >= (int64_t)s->opts.linger_ms * 1000000)) {
			/* A retired att may still have a worker inside; it holds j through a->job. */
			if (j->atts)
				continue;
			if (!j->failed)
				notice(s, 2, "job %s: no rank attached for %d ms; forgotten", j->name,
				       s->opts.linger_ms);
			job_free(s, j);
		}
	}
}

/* ---- workers ---- */

/* Under mu. The next (att, step) whose slot is free, or NULL. */
static struct att *pick(struct srv *s, uint64_t *step)
{
	unsigned n = 0, start = s->rr++;
	struct att *found = NULL;

	for (struct job *j = s->jobs; j; j = j->next)
		n += j->spec.world;
	if (n == 0)
		return NULL;
	for (unsigned k = 0; k < n && !found; k++) {
		unsigned want = (start + k) % n, idx = 0;
		for (struct job *j = s->jobs; j && !found; j = j->next) {
			if (want >= idx + j->spec.world) {
				idx += j->spec.world;
				continue;
			}
			struct att *a = j->ranks[want - idx].att;
			if (!a || a->dead || a->hostile || j->failed ||
			    (j->steps_total && a->next >= j->steps_total))
				break;
			int ret = ring_prod_poll(a->ring, a->next);
			if (ret < 0) {
				a->hostile = 1;
				wake_control(s);
			} else if (ret == 1) {
				found = a;
			}
			break;
		}
	}
	if (found) {
		struct ring_hdr const *h = ring_header(found->ring);
		*step = found->next++;
		/* Free for *step means the consumer released *step - slots. */
		if (*step >= found->first + h->slots && *step - h->slots + 1 > found->floor)
			found->floor = *step - h->slots + 1;
		found->refs++;
	}
	return found;
}

static uint32_t flags_of(const struct job *j, uint64_t step, uint32_t fill_flags)
{
	uint32_t flags = fill_flags & ~RING_SLOT_LAST;

	if (j->steps_total && step + 1 == j->steps_total)
		flags |= RING_SLOT_LAST;
	return flags;
}

struct worker_arg {
	struct srv *s;
	unsigned index;
};

static void *worker_main(void *p)
{
	struct worker_arg *wa = p;
	struct srv *s = wa->s;
	void *wstate = s->ops.worker_init ? s->ops.worker_init(s->ops.ctx, wa->index) : NULL;
	struct ring_slot slot;
	struct srv_fill f;

	pthread_mutex_lock(&s->mu);
	while (!s->workers_stop) {
		uint64_t step;
		struct att *a = pick(s, &step);
		if (!a) {
			pthread_cond_wait(&s->cv, &s->mu);
			continue;
		}
		struct job *j = a->job;
		int ret = ring_prod_begin(a->ring, step, &slot);
		int begun = ret == 0;
		pthread_mutex_unlock(&s->mu);

		int64_t t0 = now_ns();
		memset(&f, 0, sizeof(f));
		if (ret == 0) {
			f.job = j->state;
			f.rank = a->rank;
			f.world = j->spec.world;
			f.epoch = step / j->info.steps_per_epoch;
			f.step_in_epoch = step % j->info.steps_per_epoch;
			f.slot = &slot;
			slot.hdr->epoch = f.epoch;
			slot.hdr->step_in_epoch = f.step_in_epoch;
			ret = s->ops.fill(s->ops.ctx, wstate, &f);
		}
		int64_t dt = now_ns() - t0;
		if (ret == 0)
			slot.hdr->fill_ns = (uint64_t)dt;

		pthread_mutex_lock(&s->mu);
		struct rank_state *rs = &j->ranks[a->rank];
		j->bad += f.bad;
		for (uint32_t b = 0; b < f.nbad_ids && b < 8; b++)
			j->bad_ids[j->nbad_ids++ % 16] = f.bad_ids[b];
		s->busy_ns += (uint64_t)dt;
		if (ret == 0) {
			/* Counted before the publish, so a consumer that has the step also sees it
			 * in its stats. */
			rs->published++;
			rs->samples += f.count;
			rs->fill_ns += (uint64_t)dt;
			rs->io_ns += f.io_ns;
			rs->decode_ns += f.decode_ns;
			pthread_mutex_unlock(&s->mu);
			ring_prod_publish(a->ring, &slot, f.count, flags_of(j, step, f.slot_flags));
			pthread_mutex_lock(&s->mu);
		} else if (!begun) {
			a->hostile = 1;  /* ring_prod_begin: the consumer rewrote a free word */
			wake_control(s);
		} else if (!j->failed) {
			j->failed = 1;
			j->fail_err = ret < 0 ? -ret : EIO;
			snprintf(j->fail_msg, sizeof(j->fail_msg), "%s",
				 f.why[0] ? f.why : strerror(j->fail_err));
			notice(s, 0, "job %s rank %u step %llu: %s", j->name, a->rank,
			       (unsigned long long)step, j->fail_msg);
			wake_control(s);
		}
		if (--a->refs == 0 && a->dead)
			att_free(s, a);
	}
	pthread_mutex_unlock(&s->mu);
	if (s->ops.worker_fini)
		s->ops.worker_fini(s->ops.ctx, wstate);
	free(wa);
	return NULL;
}

/* ---- socket ---- */

static int listen_on(struct srv *s, char *why, size_t whylen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, ret;

	if (strlen(s->opts.socket_path) >= sizeof(sa.sun_path)) {
		snprintf(why, whylen, "socket path %s is longer than %zu bytes", s->opts.socket_path,
			 sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, s->opts.socket_path);
	snprintf(s->path, sizeof(s->path), "%s", s->opts.socket_path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		goto sys;
	if (lstat(sa.sun_path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			close(fd);
			snprintf(why, whylen, "%s exists and is not a socket", sa.sun_path);
			return -EEXIST;
		}
		int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		int rc = probe < 0 ? -1 : connect(probe, (struct sockaddr *)&sa, sizeof(sa));
		int e = rc < 0 ? errno : 0;
		if (probe >= 0)
			close(probe);
		if (rc == 0) {
			close(fd);
			snprintf(why, whylen, "another loaderd is serving %s", sa.sun_path);
			return -EADDRINUSE;
		}
		if (e != ECONNREFUSED) {
			/* a live socket of another kind (EPROTOTYPE), or one we may not probe */
			close(fd);
			snprintf(why, whylen, "%s is a socket in use by another program (%s); not "
				 "replacing it", sa.sun_path, strerror(e));
			return -EADDRINUSE;
		}
		unlink(sa.sun_path);  /* nobody listens: left by a daemon that was killed */
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto sys;
	/* Nobody can connect before listen(), so tightening the mode here leaves no window. */
	if (chmod(sa.sun_path, s->opts.group == (gid_t)-1 ? 0600 : 0660) < 0 ||
	    (s->opts.group != (gid_t)-1 && chown(sa.sun_path, (uid_t)-1, s->opts.group) < 0))
		goto sys_unlink;
	if (listen(fd, 128) < 0)
		goto sys_unlink;
	s->lfd = fd;
	return 0;
sys_unlink:
	ret = -errno;
	unlink(sa.sun_path);
	goto out;
sys:
	ret = -errno;
out:
	snprintf(why, whylen, "%s: %s", sa.sun_path, strerror(-ret));
	if (fd >= 0)
		close(fd);
	return ret;
}

/* ---- lifecycle ---- */

int srv_create(const struct srv_opts *opts, const struct srv_ops *ops, struct srv **out,
	       char *why, size_t whylen)
{
	struct srv *s;
	int ret;

	*out = NULL;
	if (!opts->socket_path || opts->workers == 0 || opts->workers > 1024 || !ops->job_open ||
	    !ops->fill || opts->default_slots == 1 || opts->default_slots > RING_SLOTS_MAX) {
		snprintf(why, whylen, "bad server options");
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->opts = *opts;
	s->ops = *ops;
	if (!s->opts.default_slots)
		s->opts.default_slots = 4;
	if (s->opts.linger_ms <= 0)
		s->opts.linger_ms = 60000;
	s->lfd = s->wake = s->ep = -1;
	s->start_ns = s->rate_ns = now_ns();
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	ret = listen_on(s, why, whylen);
	if (ret < 0)
		goto fail;
	s->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->ep = epoll_create1(EPOLL_CLOEXEC);
	if (s->wake < 0 || s->ep < 0) {
		ret = -errno;
		snprintf(why, whylen, "eventfd/epoll: %s", strerror(-ret));
		goto fail;
	}
	s->lev = (struct ev){ EV_LISTEN, NULL };
	s->wev = (struct ev){ EV_WAKE, NULL };
	struct epoll_event e1 = { .events = EPOLLIN, .data.ptr = &s->lev };
	struct epoll_event e2 = { .events = EPOLLIN, .data.ptr = &s->wev };
	if (epoll_ctl(s->ep, EPOLL_CTL_ADD, s->lfd, &e1) < 0 ||
	    epoll_ctl(s->ep, EPOLL_CTL_ADD, s->wake, &e2) < 0) {
		ret = -errno;
		snprintf(why, whylen, "epoll: %s", strerror(-ret));
		goto fail;
	}
	s->threads = calloc(opts->workers, sizeof(pthread_t));
	if (!s->threads) {
		ret = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < opts->workers; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		ret = -ENOMEM;
		if (wa) {
			wa->s = s;
			wa->index = i;
			ret = -pthread_create(&s->threads[i], NULL, worker_main, wa);
		}
		if (ret < 0) {
			free(wa);
			snprintf(why, whylen, "starting worker %u: %s", i, strerror(-ret));
			goto fail;
		}
		s->nthreads++;
	}
	*out = s;
	return 0;
fail:
	srv_destroy(s);
	return ret;
}

void srv_stop(struct srv *s)
{
	atomic_store(&s->stop, 1);  /* pairs with the load in srv_run */
	uint64_t one = 1;
	(void)!write(s->wake, &one, sizeof(one));
}

int srv_run(struct srv *s)
{
	struct epoll_event evs[64];

	s->ran = 1;
	while (!atomic_load(&s->stop)) {
		int n = epoll_wait(s->ep, evs, 64, 500);
		if (n < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; i < n; i++) {
			struct ev *e = evs[i].data.ptr;
			uint64_t v;
			switch (e->kind) {
			case EV_LISTEN:
				on_accept(s);
				break;
			case EV_WAKE:
				(void)!read(s->wake, &v, sizeof(v));
				break;
			case EV_CONN:
				on_conn(s, e->p, evs[i].events);
				break;
			case EV_BELL:
				pthread_mutex_lock(&s->mu);
				/* retired earlier in this batch: buried, not freed, so this is safe */
				if (!((struct att *)e->p)->dead)
					(void)!read(((struct att *)e->p)->bell, &v, sizeof(v));
				pthread_cond_broadcast(&s->cv);
				pthread_mutex_unlock(&s->mu);
				break;
			}
		}
		pthread_mutex_lock(&s->mu);
		reap(s);
		housekeeping(s);
		pthread_mutex_unlock(&s->mu);
	}
	pthread_mutex_lock(&s->mu);
	while (s->conns)
		conn_fail(s, s->conns, ESHUTDOWN, "loaderd is shutting down");
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void srv_destroy(struct srv *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->workers_stop = 1;
	pthread_cond_broadcast(&s->cv);
	for (struct conn *c = s->conns; c; c = c->next)
		if (c->att)
			ring_shutdown(c->att->ring);
	pthread_mutex_unlock(&s->mu);
	for (unsigned i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	free(s->threads);
	while (s->conns)
		conn_close(s, s->conns);
	reap(s);
	while (s->jobs)
		job_free(s, s->jobs);
	reap(s);
	if (s->lfd >= 0) {
		close(s->lfd);
		unlink(s->path);
	}
	if (s->wake >= 0)
		close(s->wake);
	if (s->ep >= 0)
		close(s->ep);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}
