/* srv_loop.c - the server's control loop and its lifecycle (srv_create, srv_run, srv_stop,
 * srv_destroy). It owns the epoll set and the wake eventfd, what each event goes to, the dispatch
 * of a client's message to the file that answers it (srv_jobs.c, srv_admin.c), and the work
 * between two event batches: finishing job opens, freeing what was buried during the batch,
 * housekeeping.
 *
 * DESIGN
 * One thread, srv_run's caller, waits in epoll on the listening socket, the wake eventfd, every
 * connection and every attached ring's doorbell. Each message is handled under s->mu, once
 * srv_conn.c has read it and vetted it. After each batch of events the loop frees what was
 * buried during it (reap: conns and atts; rings are unmapped without the lock, reap_free) and
 * runs housekeeping; the wake eventfd (srv_wake_control, srv_core.c) cuts the wait short when a
 * worker, an opener thread or srv_stop needs that.
 *
 * This file is the top of the server core: it calls the others, none calls it (the map in
 * srv_impl.h). */
#include "loader/srv_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ---- between event batches ---- */

/* Under mu, on the control thread, between event batches: free the buried conns (those an opener
 * thread still points at wait for it), and take the buried atts off s->att_grave for
 * reap_free. */
static struct att *reap(struct srv *s)
{
	struct att *dead = s->att_grave;

	s->att_grave = NULL;
	for (struct conn **pp = &s->conn_grave; *pp;) {
		struct conn *c = *pp;
		if (c->opening) {  /* its opener thread still points at it */
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		if (c->counted) {  /* closed while its opener ran: uncounted now it has ended */
			struct uid_use *u = srv_uid(s, c->uid);
			if (u && u->conns)
				u->conns--;
			s->nconns--;
		}
		free(c->out);
		free(c);
	}
	return dead;
}

/* Control thread, without the lock (unmapping a large ring takes a while, and a client chose its
 * size), before the next event batch: close and free the atts reap() returned. */
static void reap_free(struct att *dead)
{
	while (dead) {
		struct att *a = dead;
		dead = a->grave_next;
		if (a->bell >= 0)
			close(a->bell);
		ring_destroy(a->ring);
		free(a->seed_ns);
		free(a);
	}
}

/* ---- events ---- */

/* Under mu. A message @c may send (srv_conn_vet passed it), to the file that answers it. The
 * dataset descriptor @*fd of a job open is taken over (set to -1). */
static void dispatch(struct srv *s, struct conn *c, const char *buf, ssize_t n, uint16_t type,
		     int *fds, int nfds)
{
	if (type == CTL_JOB_OPEN && ((size_t)n == sizeof(struct ctl_job_open) ||
				     (size_t)n == CTL_JOB_OPEN_SIZE_V2)) {
		struct ctl_job_open spec;  /* the shorter form: block and window 0 (ctl.h) */
		memset(&spec, 0, sizeof(spec));
		memcpy(&spec, buf, (size_t)n);
		srv_on_job_open(s, c, &spec, nfds == 1 ? fds[0] : -1);
		if (nfds == 1)
			fds[0] = -1;  /* taken over */
	} else if (type == CTL_SHARD_FDS) {
		srv_on_shard_fds(s, c, buf, (size_t)n, fds, nfds);
	} else if (type == CTL_ADMIN && c->out) {
		srv_conn_fail(s, c, EBUSY, "one request at a time: the last answer is still "
			      "being sent");
	} else if (type == CTL_ADMIN && (size_t)n == sizeof(struct ctl_admin) && !c->att) {
		struct ctl_admin req;
		memcpy(&req, buf, sizeof(req));
		srv_on_admin(s, c, &req);
	} else if (type == CTL_SPLIT_SEED) {
		srv_on_split_seed(s, c, buf, (size_t)n);
	} else if (type == CTL_AUGMENT) {
		srv_on_augment(s, c, buf, (size_t)n);
	} else if (type == CTL_S3_OPEN) {
		srv_on_s3_open(s, c, buf, (size_t)n);
		explicit_bzero((char *)buf, (size_t)n);  /* credentials: kept once, in c->s3 */
	} else if (type == CTL_SPLIT_REQ && (size_t)n == sizeof(struct ctl_split_req)) {
		struct ctl_split_req q;
		memcpy(&q, buf, sizeof(q));
		srv_on_split_req(s, c, &q);
	} else if (type == CTL_STATS_REQ && n == 0) {
		srv_on_stats(s, c);
	} else {
		srv_conn_fail(s, c, EBADMSG, "unexpected message type %u with %zd bytes", type, n);
	}
}

static void on_conn(struct srv *s, struct conn *c, uint32_t events)
{
	char buf[CTL_MSG_MAX];
	uint16_t type;
	int fds[CTL_FDS_BATCH], nfds = 0;

	if (c->closed)
		return;  /* closed earlier in this event batch */
	if ((events & EPOLLOUT) && c->out) {
		srv_conn_writable(s, c);
		if (c->closed)
			return;
	}
	if (events & EPOLLIN) {
		ssize_t n = srv_conn_recv(c, buf, &type, fds, &nfds);
		pthread_mutex_lock(&s->mu);
		if (srv_conn_vet(s, c, n, type, nfds))
			dispatch(s, c, buf, n, type, fds, nfds);
		for (int i = 0; i < nfds; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		pthread_mutex_unlock(&s->mu);
		return;
	}
	if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
		pthread_mutex_lock(&s->mu);
		srv_conn_close(s, c);
		pthread_mutex_unlock(&s->mu);
	}
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
	struct rlimit nofile = { 1024, 1024 };
	(void)getrlimit(RLIMIT_NOFILE, &nofile);
	unsigned fd_room = nofile.rlim_cur > (1u << 30) ? 1u << 30 : (unsigned)nofile.rlim_cur;
	if (!s->opts.max_fds)
		s->opts.max_fds = fd_room / 2 > 64 ? fd_room / 2 : 64;
	if (!s->opts.max_fds_uid)
		s->opts.max_fds_uid = fd_room / 8 > 16 ? fd_room / 8 : 16;
	if (s->opts.idle_ms <= 0)
		s->opts.idle_ms = 10000;
	if (!s->opts.admin_share || s->opts.admin_share > 100)
		s->opts.admin_share = 2;
	s->lfd = s->wake = s->ep = -1;
	s->start_ns = s->rate_ns = now_ns();
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_cond_init(&s->open_cv, NULL);
	ret = srv_conn_listen(s, why, whylen);
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
				srv_conn_accept(s);
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
		srv_conn_accept_resume(s);
		pthread_mutex_lock(&s->mu);
		srv_open_finish(s);
		srv_parked_sweep(s);  /* before reap: it may bury atts */
		struct att *dead = reap(s);
		srv_housekeeping(s);
		struct job *gone = s->job_grave;
		s->job_grave = NULL;
		pthread_mutex_unlock(&s->mu);
		reap_free(dead);
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
	reap_free(reap(s));
	while (s->jobs)
		srv_job_free(s, s->jobs);
	srv_job_close_all(s, s->job_grave);
	s->job_grave = NULL;
	reap_free(reap(s));
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
