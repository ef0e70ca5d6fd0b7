/* srv_conn.c - the server's control loop: the listening socket, peer checks, connections and
 * their messages, and the server's lifecycle (srv_create, srv_run, srv_stop, srv_destroy). The
 * shared state is in srv_impl.h; jobs in srv_jobs.c, workers in srv_workers.c, loaderctl's
 * answers in srv_admin.c.
 *
 * DESIGN
 * One thread, srv_run's caller, waits in epoll on the listening socket, a wake eventfd, every
 * connection and every attached ring's doorbell. Each message is handled under s->mu; nothing a
 * client sends is parsed before its peer credentials are checked (SO_PEERCRED, SO_PEERGROUPS).
 * After each batch of events the control loop frees what was buried during it (srv_reap; rings
 * are unmapped without the lock, srv_reap_free) and runs housekeeping; the wake eventfd cuts the
 * wait short when a worker or srv_stop needs that.
 *
 * Peer death is learned from the kernel: the connection hangs up (EPOLLHUP/EPOLLRDHUP, or recv
 * returns 0), and the connection's att is retired (srv_jobs.c). A closed conn is buried, not
 * freed, until the end of the batch, since a later event of the same batch may point at it.
 *
 * Ownership: s->conns owns the open connections; each conn owns its socket fd. The server owns
 * the listening socket and removes its file in srv_destroy. */
#include "loader/srv_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Warnings and info are what clients cause (a refusal, a drop): a client that connects and
 * misbehaves in a loop would otherwise write the log as fast as it can. At most NOTICE_RATE a
 * second (bursts of NOTICE_BURST) pass; the next one that does says how many were left out.
 * Errors always pass. */
#define NOTICE_RATE 100.0
#define NOTICE_BURST 200.0

static int notice_allowed(int level, unsigned *suppressed)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static double tokens = NOTICE_BURST;
	static int64_t last;
	static unsigned dropped;
	int ok;

	pthread_mutex_lock(&mu);
	int64_t now = now_ns();
	tokens += (double)(now - last) * 1e-9 * NOTICE_RATE;
	if (tokens > NOTICE_BURST)
		tokens = NOTICE_BURST;
	last = now;
	ok = level == 0 || tokens >= 1;
	if (ok) {
		tokens -= level == 0 ? 0 : 1;
		*suppressed = dropped;
		dropped = 0;
	} else {
		dropped++;
	}
	pthread_mutex_unlock(&mu);
	return ok;
}

void srv_notice(struct srv *s, int level, const char *fmt, ...)
{
	char msg[512];
	unsigned suppressed = 0;
	va_list ap;

	if (!s->ops.notice || !notice_allowed(level, &suppressed))
		return;
	if (suppressed) {
		char m[96];
		snprintf(m, sizeof(m), "(%u notices about clients left out: more than %.0f a second)",
			 suppressed, NOTICE_RATE);
		s->ops.notice(s->ops.ctx, 1, m);
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	char safe[sizeof(msg) * 4];
	size_t k = 0;
	for (const unsigned char *p = (const unsigned char *)msg; *p && k + 5 < sizeof(safe); p++) {
		if (*p < 0x20 || *p == 0x7f)
			k += (size_t)snprintf(safe + k, sizeof(safe) - k, "\\x%02x", *p);
		else
			safe[k++] = (char)*p;
	}
	safe[k] = '\0';
	s->ops.notice(s->ops.ctx, level, safe);
}

void srv_wake_control(struct srv *s)
{
	uint64_t one = 1;

	(void)!write(s->wake, &one, sizeof(one));
}

/* ---- connections ---- */

void srv_conn_close(struct srv *s, struct conn *c)
{
	struct conn **pp;

	if (c->att)
		srv_att_retire(s, c->att);
	epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->closed = 1;
	struct uid_use *u = srv_uid(s, c->uid);
	if (u && u->conns)
		u->conns--;
	s->nconns--;
	srv_out_forget(s, c);
	free(c->out);
	c->out = NULL;
	for (pp = &s->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	c->next = s->conn_grave;  /* freed by srv_reap(), after the event batch */
	s->conn_grave = c;
}

static void want_out(struct srv *s, struct conn *c, int on)
{
	struct epoll_event ee = { .events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0),
				  .data.ptr = &c->ev };

	epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ee);
}

/* c->out is sent or dropped: it no longer counts against its uid. */
void srv_out_forget(struct srv *s, struct conn *c)
{
	struct uid_use *u = c->out ? srv_uid(s, c->uid) : NULL;

	if (u)
		u->out -= c->out_len;
}

/* Send what the socket takes of c->out; the empty chunk that ends it once all is sent. */
static void conn_flush(struct srv *s, struct conn *c)
{
	const size_t chunk = CTL_MSG_MAX - sizeof(struct ctl_hdr);
	int ret = 0;

	while (ret == 0 && c->out_off <= c->out_len) {
		size_t n = c->out_len - c->out_off < chunk ? c->out_len - c->out_off : chunk;
		ret = ctl_send(c->fd, CTL_ADMIN_TEXT, n ? c->out + c->out_off : NULL, n, NULL, 0);
		if (ret == 0) {
			c->out_off += n ? n : 1;  /* past the end once the empty chunk is out */
			c->since_ns = now_ns();   /* progress: not idle */
		}
	}
	if (ret == -EAGAIN || ret == -EWOULDBLOCK) {
		want_out(s, c, 1);
		return;
	}
	srv_out_forget(s, c);
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_off = 0;
	if (ret < 0)
		srv_conn_close(s, c);  /* the client went away */
	else
		want_out(s, c, 0);
}

void srv_conn_send_text(struct srv *s, struct conn *c, char *text, size_t len)
{
	struct uid_use *u = srv_uid(s, c->uid);

	if (u && u->out + len > SRV_OUT_UID_MAX) {
		free(text);
		srv_conn_fail(s, c, EAGAIN, "uid %u has %llu MiB of answers not yet read; this one "
			      "(%zu KiB) waits until they are", (unsigned)c->uid,
			      (unsigned long long)(u->out >> 20), len >> 10);
		return;
	}
	if (u)
		u->out += len;
	srv_out_forget(s, c);
	free(c->out);
	c->out = text;
	c->out_len = len;
	c->out_off = 0;
	conn_flush(s, c);
}

/* Tell the client why, then close. */
void srv_conn_fail(struct srv *s, struct conn *c, int err, const char *fmt, ...)
{
	struct ctl_error e;
	va_list ap;

	memset(&e, 0, sizeof(e));
	e.err = err < 0 ? -err : err;
	va_start(ap, fmt);
	vsnprintf(e.text, sizeof(e.text), fmt, ap);
	va_end(ap);
	(void)ctl_send(c->fd, CTL_ERROR, &e, sizeof(e), NULL, 0);
	srv_notice(s, 1, "client pid %d: %s", (int)c->pid, e.text);
	srv_conn_close(s, c);
}

int srv_peer_in_group(int fd, gid_t g)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	gid_t groups[256];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return 0;
	if (cr.gid == g)
		return 1;
	len = sizeof(groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return 0;
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == g)
			return 1;
	return 0;
}

/* Owner, root, or (when configured) a member of the group. Checked before any byte is parsed. */
static int peer_allowed(struct srv *s, int fd, pid_t *pid, uid_t *uid)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return 0;
	*pid = cr.pid;
	*uid = cr.uid;
	if (cr.uid == 0 || cr.uid == geteuid())
		return 1;
	return s->opts.group != (gid_t)-1 && srv_peer_in_group(fd, s->opts.group);
}

/* Refuse a connection before it becomes a conn: tell the client why, then close. */
static void refuse(struct srv *s, int fd, pid_t pid, int err, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void refuse(struct srv *s, int fd, pid_t pid, int err, const char *fmt, ...)
{
	struct ctl_error e;
	va_list ap;

	memset(&e, 0, sizeof(e));
	e.err = err;
	va_start(ap, fmt);
	vsnprintf(e.text, sizeof(e.text), fmt, ap);
	va_end(ap);
	(void)ctl_send(fd, CTL_ERROR, &e, sizeof(e), NULL, 0);
	srv_notice(s, 1, "refused a client (pid %d): %s", (int)pid, e.text);
	close(fd);
}

/* Out of descriptors (or memory) for a new connection: the pending one stays in the backlog, so
 * epoll would report the socket readable again at once. Take it out of epoll for a while instead
 * of spinning; srv_run puts it back (accept_resume). */
#define ACCEPT_PAUSE_NS 100000000  /* 100 ms */

static void accept_pause(struct srv *s, int err)
{
	struct epoll_event ee = { .events = 0, .data.ptr = &s->lev };
	static int64_t last_log;
	int64_t now = now_ns();

	epoll_ctl(s->ep, EPOLL_CTL_MOD, s->lfd, &ee);
	s->accept_paused_until = now + ACCEPT_PAUSE_NS;
	if (now - last_log >= 10 * 1000000000ll) {
		last_log = now;
		srv_notice(s, 1, "cannot accept connections: %s; retrying every %d ms", strerror(err),
			   ACCEPT_PAUSE_NS / 1000000);
	}
}

static void accept_resume(struct srv *s)
{
	struct epoll_event ee = { .events = EPOLLIN, .data.ptr = &s->lev };

	if (s->accept_paused_until && now_ns() >= s->accept_paused_until) {
		s->accept_paused_until = 0;
		epoll_ctl(s->ep, EPOLL_CTL_MOD, s->lfd, &ee);
	}
}

static void on_accept(struct srv *s)
{
	for (;;) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		pid_t pid = 0;
		uid_t uid = (uid_t)-1;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				accept_pause(s, errno);
			return;  /* EAGAIN, or a transient error: epoll tells us again */
		}
		if (!peer_allowed(s, fd, &pid, &uid)) {
			srv_notice(s, 1, "refused a client (pid %d): not the owner, root or the allowed group",
			       (int)pid);
			close(fd);
			continue;
		}
		pthread_mutex_lock(&s->mu);
		struct uid_use *u = srv_uid(s, uid);
		unsigned total = s->nconns, mine = u ? u->conns : 0;
		pthread_mutex_unlock(&s->mu);
		if (total >= s->opts.max_conns) {
			refuse(s, fd, pid, EUSERS, "loaderd has %u connections, its limit (loaderd "
			       "--max-conns)", total);
			continue;
		}
		if (!u) {
			refuse(s, fd, pid, ENOMEM, "out of memory for uid %u's connection count",
			       (unsigned)uid);
			continue;
		}
		if (mine >= s->opts.max_conns_uid) {
			refuse(s, fd, pid, EUSERS, "uid %u has %u connections to loaderd, the limit "
			       "(loaderd --max-conns-per-uid)", (unsigned)uid, mine);
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
		c->uid = uid;
		c->since_ns = now_ns();
		ee.data.ptr = &c->ev;
		if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ee) < 0) {
			close(fd);
			free(c);
			continue;
		}
		pthread_mutex_lock(&s->mu);
		c->next = s->conns;
		s->conns = c;
		s->nconns++;
		u->conns++;
		pthread_mutex_unlock(&s->mu);
	}
}

static void on_conn(struct srv *s, struct conn *c, uint32_t events)
{
	char buf[CTL_MSG_MAX];
	uint16_t type;
	int fds[2], nfds = 0;
	ssize_t n;

	if (c->closed)
		return;  /* closed earlier in this event batch */
	if ((events & EPOLLOUT) && c->out) {
		pthread_mutex_lock(&s->mu);
		int64_t t0 = now_ns();
		uid_t uid = c->uid;
		conn_flush(s, c);
		struct uid_use *u = srv_uid(s, uid);
		if (u)
			srv_admin_charge(s, u, now_ns() - t0);
		pthread_mutex_unlock(&s->mu);
		if (c->closed)
			return;
	}
	if (events & EPOLLIN) {
		n = ctl_recv(c->fd, buf, &type, fds, &nfds);
		/* Only a job open carries a descriptor: exactly one, the dataset the client opened
		 * with its own rights. Any other fd is closed unread. */
		int dataset_fd = -1;
		if (n >= 0 && type == CTL_JOB_OPEN && nfds == 1)
			dataset_fd = fds[0];
		else
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
		pthread_mutex_lock(&s->mu);
		if (n == -EAGAIN) {
			/* spurious */
		} else if (n >= 0 && nfds > 1) {
			srv_conn_fail(s, c, EBADMSG, "a job open carries one file descriptor (the "
				      "dataset), not %d", nfds);
		} else if (n >= 0 && nfds > 0 && type != CTL_JOB_OPEN) {
			srv_conn_fail(s, c, EBADMSG, "a client may send a file descriptor only with a "
				      "job open");
		} else if (n >= 0 && c->opening) {
			srv_conn_fail(s, c, EBADMSG, "message type %u while its job is being opened",
				      type);
		} else if (n == -EPIPE) {
			struct att *a = c->att;
			if (a) {
				struct job *j = a->job;
				uint32_t rank = a->rank;
				srv_att_retire(s, a);
				uint64_t at = j->ranks[rank].resume;
				if (j->steps_total && at >= j->steps_total)
					srv_notice(s, 2, "job %s rank %u: consumer (pid %d) finished and left",
					       j->name, rank, (int)c->pid);
				else
					srv_notice(s, 1, "job %s rank %u: consumer (pid %d) went away; its slots "
					       "are reclaimed; it resumes at step %llu", j->name, rank,
					       (int)c->pid, (unsigned long long)at);
			}
			srv_conn_close(s, c);
		} else if (n < 0) {
			srv_conn_fail(s, c, n, "bad message: %s", n == -EPROTO ?
				  "protocol version mismatch (this loaderd speaks version 1)" :
				  n == -EBADMSG ? "malformed packet" : strerror((int)-n));
		} else if (type == CTL_JOB_OPEN && (size_t)n == sizeof(struct ctl_job_open)) {
			struct ctl_job_open spec;
			memcpy(&spec, buf, sizeof(spec));
			srv_on_job_open(s, c, &spec, dataset_fd);
			dataset_fd = -1;  /* taken over */
		} else if (type == CTL_ADMIN && c->out) {
			srv_conn_fail(s, c, EBUSY, "one request at a time: the last answer is still "
				      "being sent");
		} else if (type == CTL_ADMIN && (size_t)n == sizeof(struct ctl_admin) && !c->att) {
			struct ctl_admin req;
			memcpy(&req, buf, sizeof(req));
			srv_on_admin(s, c, &req);
		} else if (type == CTL_STATS_REQ && n == 0) {
			srv_on_stats(s, c);
		} else {
			srv_conn_fail(s, c, EBADMSG, "unexpected message type %u with %zd bytes", type, n);
		}
		if (dataset_fd >= 0)
			close(dataset_fd);
		pthread_mutex_unlock(&s->mu);
		return;
	}
	if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
		pthread_mutex_lock(&s->mu);
		srv_conn_close(s, c);
		pthread_mutex_unlock(&s->mu);
	}
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
	    !ops->step_open || !ops->fill || opts->default_slots == 1 ||
	    opts->default_slots > RING_SLOTS_MAX) {
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
	if (!s->opts.max_conns)
		s->opts.max_conns = 1024;
	if (!s->opts.max_conns_uid)
		s->opts.max_conns_uid = 256;
	if (!s->opts.max_jobs_uid)
		s->opts.max_jobs_uid = 64;
	if (!s->opts.max_world || s->opts.max_world > CTL_WORLD_MAX)
		s->opts.max_world = CTL_WORLD_MAX;
	if (!s->opts.mem_share_uid || s->opts.mem_share_uid > 100)
		s->opts.mem_share_uid = 100;
	if (s->opts.idle_ms <= 0)
		s->opts.idle_ms = 10000;
	if (!s->opts.admin_share || s->opts.admin_share > 100)
		s->opts.admin_share = 2;
	s->lfd = s->wake = s->ep = -1;
	s->start_ns = s->rate_ns = now_ns();
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_cond_init(&s->open_cv, NULL);
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
	ret = srv_workers_start(s, why, whylen);
	if (ret < 0)
		goto fail;
	*out = s;
	return 0;
fail:
	srv_destroy(s);
	return ret;
}

void srv_stop(struct srv *s)
{
	atomic_store(&s->stop, 1);  /* pairs with the load in srv_run */
	srv_wake_control(s);        /* one write(2): async-signal-safe */
}

int srv_run(struct srv *s)
{
	struct epoll_event evs[64];

	s->ran = 1;
	while (!atomic_load(&s->stop)) {
		int n = epoll_wait(s->ep, evs, 64, s->accept_paused_until ? 20 : 500);
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
				if (!((struct att *)e->p)->dead) {
					(void)!read(((struct att *)e->p)->bell, &v, sizeof(v));
					srv_att_check_empty(e->p, now_ns());
				}
				pthread_cond_broadcast(&s->cv);
				pthread_mutex_unlock(&s->mu);
				break;
			}
		}
		accept_resume(s);
		pthread_mutex_lock(&s->mu);
		srv_open_finish(s);
		struct att *dead = srv_reap(s);
		srv_housekeeping(s);
		struct job *gone = s->job_grave;
		s->job_grave = NULL;
		pthread_mutex_unlock(&s->mu);
		srv_reap_free(dead);
		srv_job_close_all(s, gone);
	}
	pthread_mutex_lock(&s->mu);
	while (s->conns)
		srv_conn_fail(s, s->conns, ESHUTDOWN, "loaderd is shutting down");
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void srv_destroy(struct srv *s)
{
	if (!s)
		return;
	srv_workers_stop(s);
	pthread_mutex_lock(&s->mu);
	while (s->conns)
		srv_conn_close(s, s->conns);
	/* An opener thread may be stuck in a dataset on a hung file system: give up on it after a
	 * while, and leave the server's memory to it (the process is about to exit). */
	if (srv_open_drain(s, 5000) < 0) {
		srv_notice(s, 0, "%u job opens still running at exit; not waiting for them",
			   s->openers);
		pthread_mutex_unlock(&s->mu);
		if (s->lfd >= 0)
			unlink(s->path);
		return;
	}
	srv_open_finish(s);
	pthread_mutex_unlock(&s->mu);
	srv_reap_free(srv_reap(s));
	while (s->jobs)
		srv_job_free(s, s->jobs);
	srv_job_close_all(s, s->job_grave);
	s->job_grave = NULL;
	srv_reap_free(srv_reap(s));
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
	pthread_cond_destroy(&s->open_cv);
	free(s->live);
	while (s->uids) {
		struct uid_use *u = s->uids;
		s->uids = u->next;
		free(u);
	}
	free(s);
}
