/* srv_att.c - attachments: one connection's ring ("att", struct att in srv_impl.h), from the
 * moment srv_jobs.c attaches it until the control loop frees it. It owns
 *   - s->live, the attached rings the workers pick from (srv_live_add; the retire takes an att
 *     off it);
 *   - the retire (srv_att_retire): the rank detaches and keeps its resume step, the doorbell
 *     leaves epoll, the ring is shut down; and the burial once neither a rank nor a worker holds
 *     it (srv_att_free), after which the control loop unmaps and frees it between event batches;
 *   - what the state words say: the first step not released (srv_att_released), and the empty
 *     time of a ring (srv_att_check_empty, srv_att_published).
 *
 * DESIGN
 * An att is never reused: a dead or hostile consumer's ring is never handed to the next one. It
 * is referenced by its conn and its rank while attached, and by every open step of its ring
 * (a->refs, srv_workers.c); the last of them to let go buries it on s->att_grave. Buried, not
 * freed: an epoll batch that the control loop is still walking may hold an event for its
 * doorbell, so its fd stays open (its number cannot be reused under that event) until the loop
 * frees it after the batch (srv_loop.c), without the lock (unmapping a large ring takes a while,
 * and a client chose its size).
 *
 * A retired att's resume step is the first step the consumer had not released, read from the
 * state words by ring_prod_scan() (or, if the words are garbage, the last step the producer itself
 * saw released).
 *
 * Threads: everything here runs under s->mu; srv_att_retire and the empty time on the control
 * thread, srv_att_free also on a worker (the last one out of a retired att), srv_att_published on
 * the worker that published. It uses srv_core.c only. */
#include "loader/srv_impl.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>

/* ---- the live set ---- */

int srv_live_add(struct srv *s, struct att *a)
{
	if (s->nlive == s->live_cap) {
		unsigned cap = s->live_cap ? 2 * s->live_cap : 64;
		struct att **p = realloc(s->live, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		s->live = p;
		s->live_cap = cap;
	}
	a->live = s->nlive;
	s->live[s->nlive++] = a;
	return 0;
}

/* Under mu. Take @a off s->live. */
static void live_del(struct srv *s, struct att *a)
{
	assert(a->live < s->nlive && s->live[a->live] == a);
	s->live[a->live] = s->live[--s->nlive];
	s->live[a->live]->live = a->live;
}

/* ---- burial ---- */

/* Under mu. An att that no worker holds any more is buried, not freed (see the top of this
 * file); the control loop frees it after the event batch. */
void srv_att_free(struct srv *s, struct att *a)
{
	srv_mem_add(s, a->uid, -(int64_t)a->bytes);
	a->job->mem_rings -= a->bytes;
	a->job->atts--;
	a->job = NULL;
	a->grave_next = s->att_grave;
	s->att_grave = a;
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
	live_del(s, a);
	empty_end(a, now_ns());
	rs->resume = srv_att_released(a);
	rs->att = NULL;
	a->job->recent[a->job->nrecent++ % SRV_SNAP_RECENT] = a->rank;  /* listed by snapshots */
	a->job->rate -= rs->rate;  /* it fills no more: its rate is no longer kept */
	rs->rate = 0;
	rs->rate_samples = rs->samples;
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

