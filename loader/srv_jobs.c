/* srv_jobs.c - the server's job registry: jobs by name, their ranks, one attachment (att) per
 * connection's ring, resume, linger and housekeeping (see srv_impl.h for the shared state).
 *
 * DESIGN
 * A job is known by its name; each of its ranks is either attached (a live connection, a ring and
 * a doorbell) or detached with a resume step. One attachment ("att") = one connection's ring: it
 * is created on CTL_JOB_OPEN and retired when the connection goes, never reused, so a dead or
 * hostile consumer's memory is never handed to the next one.
 *
 * A retired att's resume step is the first step the consumer had not released, read from the
 * state words by ring_prod_scan() (or, if the words are garbage, the last step the producer itself
 * saw released). A consumer whose words break the state machine is dropped with an error message:
 * the workers notice (-EBADMSG from ring_prod_poll), mark the att hostile and wake the control
 * loop, whose housekeeping does the dropping. A job with no rank attached lingers for
 * opts.linger_ms, then is forgotten.
 *
 * Threads: everything here runs under s->mu; the job open, stats and housekeeping on the control
 * thread, srv_att_free also on a worker (the last one out of a retired att). */
#include "loader/srv_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ---- attachments ---- */

/* Under mu. An att that no worker holds any more is buried, not freed: an epoll batch that the
 * control loop is still walking may hold an event for its doorbell. srv_reap() frees it after the
 * batch; until then its fd stays open, so the number cannot be reused under that event. */
void srv_att_free(struct srv *s, struct att *a)
{
	s->mem_used -= a->bytes;
	a->job->atts--;
	a->job = NULL;
	a->grave_next = s->att_grave;
	s->att_grave = a;
}

/* Under mu, on the control thread, between event batches. */
void srv_reap(struct srv *s)
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
uint64_t srv_att_released(const struct att *a)
{
	uint64_t frontier;
	int ret = ring_prod_scan(a->ring, a->first, a->next, &frontier);

	if (ret < 0 && ret != -EBADMSG)
		return a->floor;
	return frontier > a->floor ? frontier : a->floor;
}

/* Empty time. The server cannot see the consumer wait (a futex wait on a state word) nor acquire;
 * it sees publishes (its own) and releases (the doorbell). So it measures what those two bound:
 * the time during which the consumer held nothing and nothing was ready for it, i.e. from the
 * release that left every published step released to the publish of the next step. For a
 * consumer that asks for its next batch when it releases one, that is its wait. */
static void empty_end(struct att *a, int64_t now)
{
	if (!a->empty_since)
		return;
	if (now > a->empty_since)
		a->job->ranks[a->rank].empty_ns += (uint64_t)(now - a->empty_since);
	a->empty_since = 0;
}

void srv_att_check_empty(struct att *a, int64_t now)
{
	uint64_t rel = srv_att_released(a);

	if (a->empty_since && a->empty_step == rel)
		return;
	empty_end(a, now);
	if ((a->job->steps_total && rel >= a->job->steps_total) ||
	    ring_prod_published(a->ring, rel))
		return;
	a->empty_since = now;
	a->empty_step = rel;
}

void srv_att_published(struct att *a, uint64_t step, int64_t now)
{
	if (a->empty_since && a->empty_step == step)
		empty_end(a, now);
}

/* Under mu. Detach @a from its rank and connection; free it now or when its last worker is done. */
void srv_att_retire(struct srv *s, struct att *a)
{
	struct rank_state *rs = &a->job->ranks[a->rank];

	if (a->dead)
		return;
	a->dead = 1;
	empty_end(a, now_ns());
	rs->resume = srv_att_released(a);
	rs->att = NULL;
	if (--a->job->attached == 0)
		a->job->idle_since_ns = now_ns();
	epoll_ctl(s->ep, EPOLL_CTL_DEL, a->bell, NULL);
	ring_shutdown(a->ring);
	if (a->conn)
		a->conn->att = NULL;
	a->conn = NULL;
	if (a->refs == 0)
		srv_att_free(s, a);
}

/* ---- jobs ---- */

struct job *srv_job_find(struct srv *s, const char *name)
{
	for (struct job *j = s->jobs; j; j = j->next)
		if (!strcmp(j->name, name))
			return j;
	return NULL;
}

void srv_job_free(struct srv *s, struct job *j)
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
void srv_on_job_open(struct srv *s, struct conn *c, const struct ctl_job_open *spec)
{
	char why[CTL_TEXT_MAX];
	struct ctl_job_open key = *spec;
	struct job *j;
	int ret;

	if (c->att) {
		srv_conn_fail(s, c, EINVAL, "this connection already has a job");
		return;
	}
	if (ctl_check_job_open(spec, why, sizeof(why)) < 0) {
		srv_conn_fail(s, c, EINVAL, "job open: %s", why);
		return;
	}
	key.rank = 0;
	j = srv_job_find(s, spec->job);
	if (j) {
		const char *d = spec_diff(&j->spec, &key);
		if (d) {
			srv_conn_fail(s, c, EEXIST, "job %s exists with another %s", spec->job, d);
			return;
		}
		if (j->failed) {
			srv_conn_fail(s, c, j->fail_err, "job %s failed: %s", j->name, j->fail_msg);
			return;
		}
		if (j->ranks[spec->rank].att) {
			srv_conn_fail(s, c, EBUSY, "rank %u of job %s is attached (pid %d)", spec->rank,
				  spec->job, (int)j->ranks[spec->rank].att->conn->pid);
			return;
		}
	} else {
		j = calloc(1, sizeof(*j));
		if (j)
			j->ranks = calloc(spec->world, sizeof(*j->ranks));
		if (!j || !j->ranks) {
			free(j);
			srv_conn_fail(s, c, ENOMEM, "out of memory for job %s", spec->job);
			return;
		}
		why[0] = '\0';
		ret = s->ops.job_open(s->ops.ctx, spec, &j->state, &j->info, why, sizeof(why));
		if (ret == 0 && j->info.steps_per_epoch == 0)
			ret = -EINVAL, snprintf(why, sizeof(why), "the job has no steps");
		if (ret < 0) {
			free(j->ranks);
			free(j);
			srv_conn_fail(s, c, ret, "job %s: %s", spec->job, why[0] ? why : strerror(-ret));
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
		srv_conn_fail(s, c, ret, "job %s: ring of %u slots x %u samples x %llu bytes: %s", j->name,
			  d.slots, d.batch, (unsigned long long)d.sample_bytes, strerror(-ret));
		goto drop_idle;
	}
	if (s->opts.mem_limit && s->mem_used + bytes > s->opts.mem_limit) {
		srv_conn_fail(s, c, ENOMEM,
			  "job %s rank %u needs %llu KiB of ring memory; limit %llu KiB, %llu KiB in use",
			  j->name, spec->rank, (unsigned long long)(bytes >> 10),
			  (unsigned long long)(s->opts.mem_limit >> 10),
			  (unsigned long long)(s->mem_used >> 10));
		goto drop_idle;
	}
	struct att *a = calloc(1, sizeof(*a));
	if (!a) {
		srv_conn_fail(s, c, ENOMEM, "out of memory");
		goto drop_idle;
	}
	a->bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ret = a->bell < 0 ? -errno : ring_create(&d, s->opts.ring_flags, &a->ring);
	if (ret < 0) {
		if (a->bell >= 0)
			close(a->bell);
		free(a);
		srv_conn_fail(s, c, ret, "job %s rank %u: creating the ring: %s", j->name, spec->rank,
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
	/* Nothing is published yet: empty until the first step is. */
	if (!d.steps_total || d.first_step < d.steps_total) {
		a->empty_since = now_ns();
		a->empty_step = d.first_step;
	}

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
		srv_att_free(s, a);
		srv_notice(s, 1, "client pid %d went away while opening job %s", (int)c->pid, j->name);
		srv_conn_close(s, c);
		goto drop_idle;
	}
	a->dead = 0;
	c->att = a;
	rs->att = a;
	rs->started = 1;
	rs->attaches++;
	j->attached++;
	srv_notice(s, 2, "job %s rank %u/%u attached (pid %d) at step %llu, ring %llu MiB%s", j->name,
	       a->rank, spec->world, (int)c->pid, (unsigned long long)d.first_step,
	       (unsigned long long)(a->bytes >> 20), ring_header(a->ring)->huge ? " (huge pages)" : "");
	pthread_cond_broadcast(&s->cv);
	return;
drop_idle:
	if (j->attached == 0 && j->idle_since_ns == 0)
		j->idle_since_ns = now_ns();
}

void srv_on_stats(struct srv *s, struct conn *c)
{
	struct att *a = c->att;

	if (!a) {
		srv_conn_fail(s, c, EINVAL, "stats before a job was opened");
		return;
	}
	struct srv_rank_snap rs;
	srv_rank_snap(a->job, a->rank, now_ns(), &rs);
	struct ctl_stats st = { .job_id = a->job->id, .published = rs.published,
				.released = rs.released, .samples = rs.samples,
				.bad_records = a->job->bad, .fill_ns = rs.fill_ns,
				.attaches = rs.attaches, .ranks_attached = a->job->attached,
				.slots = rs.slots, .occupancy = rs.occupancy };
	_Static_assert(sizeof(st.phase_ns) == sizeof(rs.phase_ns), "one slot per phase");
	memcpy(st.phase_ns, rs.phase_ns, sizeof(st.phase_ns));
	if (ctl_send(c->fd, CTL_STATS, &st, sizeof(st), NULL, 0) < 0)
		srv_conn_close(s, c);
}

/* Under mu: drop hostile consumers, fail jobs whose fill failed, forget idle jobs. */
void srv_housekeeping(struct srv *s)
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
			srv_conn_fail(s, c, EBADMSG, "job %s rank %u: the ring's state words were corrupted "
				  "by the consumer; dropped", c->att->job->name, c->att->rank);
		else if (c->att && c->att->job->failed)
			srv_conn_fail(s, c, c->att->job->fail_err, "job %s failed: %s",
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
				srv_notice(s, 2, "job %s: no rank attached for %d ms; forgotten", j->name,
				       s->opts.linger_ms);
			srv_job_free(s, j);
		}
	}
}
