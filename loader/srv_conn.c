/* srv_conn.c - the server's connections: the listening socket, accepting a client (its peer
 * credentials checked before any byte of it is parsed, the connection limits), reading one
 * message (the descriptor rules and the protocol's refusals), sending an answer of any size or
 * an error, and closing. What a message asks for is not known here: the control loop's dispatch
 * (srv_loop.c) hands it to srv_jobs.c or srv_admin.c, which answer through this file.
 *
 * DESIGN
 * Nothing a client sends is parsed before its peer credentials are checked (SO_PEERCRED,
 * SO_PEERGROUPS). Peer death is learned from the kernel: the connection hangs up (EPOLLHUP/
 * EPOLLRDHUP, or recv returns 0), and the connection's att is retired (srv_att.c). A closed conn
 * is buried, not freed, until the end of the event batch, since a later event of the same batch
 * may point at it (the control loop frees it). An answer is sent as the socket takes it: a client
 * that does not read stalls only itself, and the bytes it leaves queued count against its uid.
 *
 * Ownership: s->conns owns the open connections; each conn owns its socket fd. The server owns
 * the listening socket (the control loop closes it and removes its file).
 *
 * Threads: the control thread only; under s->mu except where a function says otherwise. It uses
 * srv_core.c and srv_att.c only. */
#include "loader/srv_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- closing, answering ---- */

/* Under mu. c->out is sent or dropped: it no longer counts against its uid. */
static void out_forget(struct srv *s, struct conn *c)
{
	struct uid_use *u = c->out ? srv_uid(s, c->uid) : NULL;

	if (u)
		u->out -= c->out_len;
}

void srv_conn_close(struct srv *s, struct conn *c)
{
	struct conn **pp;

	if (c->att)
		srv_att_retire(s, c->att);
	epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->closed = 1;
	if (c->opening) {
		c->counted = 1;  /* its opener thread runs on (a fetch may never end): counted still */
	} else {
		struct uid_use *u = srv_uid(s, c->uid);
		if (u && u->conns)
			u->conns--;
		s->nconns--;
	}
	out_forget(s, c);
	free(c->out);
	c->out = NULL;
	free(c->seed);
	c->seed = NULL;
	srv_s3_wipe(&c->s3, &c->s3_len);
	srv_conn_drop_shards(s, c);
	for (pp = &s->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	c->next = s->conn_grave;  /* freed by the control loop, after the event batch */
	s->conn_grave = c;
}

void srv_conn_drop_shards(struct srv *s, struct conn *c)
{
	for (uint32_t i = 0; i < c->shards_got; i++)
		close(c->shard_fds[i]);
	srv_fds_add(s, c->uid, -(int64_t)c->shards_charge);
	c->shards_charge = 0;
	free(c->shard_fds);
	c->shard_fds = NULL;
	c->shards_got = c->shards_total = 0;
}

static void want_out(struct srv *s, struct conn *c, int on)
{
	struct epoll_event ee = { .events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0),
				  .data.ptr = &c->ev };

	epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ee);
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
	out_forget(s, c);
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
	out_forget(s, c);
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

/* ---- accepting ---- */

/* Anyone with --all-users; else the owner, root, or (when configured) a member of the group.
 * Checked before any byte is parsed. */
static int peer_allowed(struct srv *s, int fd, pid_t *pid, uid_t *uid)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return 0;
	*pid = cr.pid;
	*uid = cr.uid;
	if (s->opts.all_users || cr.uid == 0 || cr.uid == geteuid())
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
 * of spinning; the control loop puts it back (srv_conn_accept_resume). */
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

void srv_conn_accept_resume(struct srv *s)
{
	struct epoll_event ee = { .events = EPOLLIN, .data.ptr = &s->lev };

	if (s->accept_paused_until && now_ns() >= s->accept_paused_until) {
		s->accept_paused_until = 0;
		epoll_ctl(s->ep, EPOLL_CTL_MOD, s->lfd, &ee);
	}
}

void srv_conn_accept(struct srv *s)
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

/* ---- reading ---- */

void srv_conn_writable(struct srv *s, struct conn *c)
{
	pthread_mutex_lock(&s->mu);
	int64_t t0 = (int64_t)clk_thread_ns();  /* charged: the control thread's CPU, not the
						  * time it waited for the lock or a core */
	uid_t uid = c->uid;
	conn_flush(s, c);
	struct uid_use *u = srv_uid(s, uid);
	if (u)
		srv_admin_charge(s, u, (int64_t)clk_thread_ns() - t0);
	pthread_mutex_unlock(&s->mu);
}

ssize_t srv_conn_recv(struct conn *c, void *buf, uint16_t *type, int *fds, int *nfds)
{
	/* Descriptors come with a job open (the dataset) and with CTL_SHARD_FDS (a batch of
	 * shards), each opened by the client with its own rights; srv_conn_vet refuses them with
	 * any other message, and the caller closes what was not taken over. */
	return ctl_recv_fds(c->fd, buf, type, fds, CTL_FDS_BATCH, nfds);
}

int srv_conn_vet(struct srv *s, struct conn *c, ssize_t n, uint16_t type, int nfds)
{
	if (n == -EAGAIN) {
		/* spurious */
	} else if (n >= 0 && nfds > 1 && type == CTL_JOB_OPEN) {
		srv_conn_fail(s, c, EBADMSG, "a job open carries one file descriptor (the "
			      "dataset), not %d", nfds);
	} else if (n >= 0 && nfds > 0 && type != CTL_JOB_OPEN && type != CTL_SHARD_FDS) {
		srv_conn_fail(s, c, EBADMSG, "a client may send file descriptors only with a "
			      "job open or a batch of shards");
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
	} else {
		return 1;
	}
	return 0;
}

/* ---- the listening socket ---- */

int srv_conn_listen(struct srv *s, char *why, size_t whylen)
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
	if (chmod(sa.sun_path, s->opts.all_users ? 0666 : s->opts.group == (gid_t)-1 ? 0600 : 0660) < 0 ||
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
