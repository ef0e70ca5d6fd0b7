/* srv_workers.c - the server's worker pool: which (ring, step) to fill next, the fill through
 * ops->fill, and the publish (see srv_impl.h for the shared state).
 *
 * DESIGN
 * Workers pick work under s->mu: for each live att in round-robin order, the next step to produce
 * is taken when ring_prod_poll() says its slot is free. A worker then fills and publishes without
 * the lock, holding a reference on the att (a->refs) so that a concurrent detach cannot unmap the
 * ring under it; the last worker out of a retired att frees it (srv_att_free). When no slot is
 * free anywhere, workers sleep on s->cv.
 *
 * What wakes them is the doorbell: an eventfd sent with the ring; the client writes it after each
 * release (the ring's futex word cannot be waited on by a thread that serves many rings). The
 * control loop polls all doorbells with the sockets and broadcasts s->cv. A consumer that never
 * rings only stalls its own ring; any other ring keeps its workers.
 *
 * Threads: opts.workers threads, started by srv_create and joined by srv_destroy. Each owns the
 * per-worker state ops->worker_init made for it, and the slot it is filling between
 * ring_prod_begin and ring_prod_publish. */
#include "loader/srv_impl.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void srv_live_del(struct srv *s, struct att *a)
{
	assert(a->live < s->nlive && s->live[a->live] == a);
	s->live[a->live] = s->live[--s->nlive];
	s->live[a->live]->live = a->live;
}

/* Under mu. The next (att, step) whose slot is free, or NULL. Round-robin over the attached
 * rings only: the cost of a pick does not grow with the world sizes of the jobs. */
static struct att *pick(struct srv *s, uint64_t *step)
{
	unsigned n = s->nlive, start = s->rr++;
	struct att *found = NULL;

	for (unsigned k = 0; k < n && !found; k++) {
		struct att *a = s->live[(start + k) % n];
		struct job *j = a->job;
		if (a->dead || a->hostile || j->failed ||
		    (j->steps_total && a->next >= j->steps_total))
			continue;
		int ret = ring_prod_poll(a->ring, a->next);
		if (ret < 0) {
			a->hostile = 1;
			srv_wake_control(s);
		} else if (ret == 1) {
			found = a;
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
			for (unsigned k = 0; k < SRV_PHASES_MAX; k++)
				rs->phase_ns[k] += f.phase_ns[k];
			pthread_mutex_unlock(&s->mu);
			ring_prod_publish(a->ring, &slot, f.count, flags_of(j, step, f.slot_flags));
			pthread_mutex_lock(&s->mu);
			srv_att_published(a, step, now_ns());
		} else if (!begun) {
			a->hostile = 1;  /* ring_prod_begin: the consumer rewrote a free word */
			srv_wake_control(s);
		} else if (!j->failed) {
			j->failed = 1;
			j->fail_err = ret < 0 ? -ret : EIO;
			snprintf(j->fail_msg, sizeof(j->fail_msg), "%s",
				 f.why[0] ? f.why : strerror(j->fail_err));
			srv_notice(s, 0, "job %s rank %u step %llu: %s", j->name, a->rank,
			       (unsigned long long)step, j->fail_msg);
			srv_wake_control(s);
		}
		if (--a->refs == 0 && a->dead)
			srv_att_free(s, a);
	}
	pthread_mutex_unlock(&s->mu);
	if (s->ops.worker_fini)
		s->ops.worker_fini(s->ops.ctx, wstate);
	free(wa);
	return NULL;
}

int srv_workers_start(struct srv *s, char *why, size_t whylen)
{
	int ret;

	s->threads = calloc(s->opts.workers, sizeof(pthread_t));
	if (!s->threads)
		return -ENOMEM;
	for (unsigned i = 0; i < s->opts.workers; i++) {
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
			return ret;
		}
		s->nthreads++;
	}
	return 0;
}

void srv_workers_stop(struct srv *s)
{
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
	s->threads = NULL;
	s->nthreads = 0;
}
