/* srv_workers.c - the server's worker pool: which (ring, step) to open next, the tasks a step is
 * cut into, their fills through ops->fill, and the publish (see srv_impl.h for the shared state
 * and the lock rules).
 *
 * DESIGN
 * Self-sizing (loader/demand.c decides, this file does): a worker that looks for work feeds the
 * controller what it sees of every attached ring (the consumer's released step, the steps it
 * holds, those ahead of it, ready or filling; latency and worker time per step, averaged here in
 * step_done), and opens a step only on the ring dm_pick names: one below its target (steps ahead
 * = rate x latency, plus margins), the rings still in time before the late ones, weighted; among
 * the ranks of the job so chosen, the emptiest ring (ring_in gives each ring its job as its
 * group: one rank that eats all it gets would otherwise starve the others, issue 31); a ring a
 * ring's depth ahead of its job's slowest rank that eats (dm_paces_job, dm_ahead: job->pace_rel,
 * pick's scratch) waits for it, and s->recheck_ns wakes the workers when that rank would count as
 * paused (no doorbell rings then). Only
 * s->cap workers (dm_active_cap: what the demand needs, at most s->ceiling) hold tasks at once,
 * and only while the CPU budget (s->budget, fed by each task's and open's thread CPU time, the
 * clock read once per window of them: cpu_clock.h) is
 * positive; the others sleep on s->cv: untimed when the cap holds them (a worker that lets go of
 * its last task signals one), timed when the budget does (until it has refilled). No worker
 * spins: a full ring or a ring at its target gives them nothing to do, and the doorbell of a
 * release wakes them to look again.
 *
 * Every worker can fill every ring. A step is opened once: a worker that finds no task to take
 * picks the next (ring, step) as above (ring_prod_poll, then ring_prod_begin, under s->mu), draws the step's sample ids, flags and labels with
 * ops->step_open into private memory of the server (struct open_step, from s->step_pool; never
 * read back from shared memory), and queues the step on s->tasks. The step's samples are handed
 * out as tasks of task_size() samples (4 to 8), cut to about a slice of worker time by the job's
 * measured time per sample (task_cut: SRV_SLICE_NS, one sample at least): workers take the next
 * task of the open step whose uid, then job, used the least worker time lately (the earliest
 * opened among equals), whatever ring it belongs to, so one ring can keep every core busy, a
 * batch is ready after batch / workers decode times, not batch, and a job of costly records
 * holds a worker for one record at a time, not a batch of them (fair by cost: task_step,
 * task_next, docs/TUNING.md). Rings take turns
 * because steps are opened in the controller's order (round-robin among equals: s->rr) and served
 * in the order they were opened; the cost of a pick does not grow with the world sizes of the
 * jobs (a pick looks at the queue's head, or at the attached rings only).
 *
 * Each task decodes its samples straight into their places in the slot (ops->fill, without the
 * lock); a substituted sample rewrites only its own entries of the step's arrays. The worker that
 * ends the last task of a step copies ids, flags and labels into the slot, accounts the step
 * (fill_ns: worker time over its open and its tasks; latency: from its first task to the publish)
 * and publishes. A failed open or task fails the job as a failed fill always did: the step is
 * abandoned (its remaining tasks are not handed out, it is not published). So are the steps of
 * a ring that was retired or turned hostile; other open steps of a failed job are finished, so
 * that every step before the failed one is published (no new step of it is opened).
 *
 * Reads overlap decode: a worker takes the task it will fill next (the next queued one, else the
 * first of a step it opens then) before it fills the current one, and tells the fill
 * (srv_fill.next_step), which starts that task's reads before it decodes; a task taken is
 * always filled, even when its step was abandoned meanwhile, so reads started for it are always
 * collected by the fill they were started for.
 *
 * An open step holds a reference on its att (a->refs) until it is done, so that a concurrent
 * detach cannot unmap the ring under its tasks; the last reference out of a retired att frees it
 * (srv_att_free). When there is no task and no free slot anywhere, workers sleep on s->cv.
 *
 * What wakes them is the doorbell: an eventfd sent with the ring; the client writes it after each
 * release (the ring's futex word cannot be waited on by a thread that serves many rings). The
 * control loop polls all doorbells with the sockets and broadcasts s->cv. A consumer that never
 * rings only stalls its own ring; any other ring keeps its workers. A worker that queues a step
 * wakes as many sleeping workers as it has tasks for.
 *
 * Threads: opts.workers threads (a ceiling), started by srv_create and joined by srv_destroy. Each owns the
 * per-worker state ops->worker_init made for it, and the samples of the task it took.
 *
 * It owns s->tasks, s->step_pool, the worker threads, the busy time, the budget and the
 * controller's fields of each att (srv_impl.h); it reads s->live
 * (srv_att.c keeps it) and uses srv_core.c and srv_att.c only. */
#include "common/log.h"
#include "loader/srv_impl.h"

#include "common/proc.h"
#include "loader/cpu_clock.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(DM_WEIGHT_MAX == CTL_WEIGHT_MAX, "demand.h's weights are the job option's");

/* This worker's charges of its thread CPU time (what the budget and a job's "CPU given" count; a
 * worker waiting on a read uses none), the clock read once per window of units (cpu_clock.h). */
static _Thread_local struct ldr_cpu_clock cpu_clk;

/* Under mu. @cpu ns of this worker's CPU went to @o: charge the budget and the job. */
static void charge(struct srv *s, struct open_step *o, int64_t cpu)
{
	o->cpu_ns += (uint64_t)cpu;
	o->a->job->cpu_ns += (uint64_t)cpu;
	dm_bucket_charge(&s->budget, cpu);
}

/* Worker time used lately halves every SRV_USE_HALF_NS: what fair-by-cost compares. */
#define SRV_USE_HALF_NS 1000000000ll

static double use_at(double use, int64_t at, int64_t now)
{
	return now > at ? use * exp2(-(double)(now - at) / SRV_USE_HALF_NS) : use;
}

/* Under mu. @ns of worker time (wall: its reads, its decode) went to @j's records: charged to the
 * job and to its owner's account, for fair-by-cost (task_take, task_next). */
void srv_use_charge(struct srv *s, struct job *j, int64_t ns)
{
	int64_t now = now_ns();
	struct uid_use *u = srv_uid(s, j->uid);

	j->use = use_at(j->use, j->use_ns, now) + (double)ns;
	j->use_ns = now;
	if (u) {
		u->use = use_at(u->use, u->use_ns, now) + (double)ns;
		u->use_ns = now;
		u->work_ns += (uint64_t)ns;
	}
}

/* Under mu. How much @j's owner, then @j (by its weight), used lately, at @now: lower goes first. */
struct use_key {
	double uid, job;
};

static struct use_key use_key(struct srv *s, struct job *j, int64_t now)
{
	struct uid_use *u = srv_uid(s, j->uid);

	return (struct use_key){ .uid = u ? use_at(u->use, u->use_ns, now) : 0,
				 .job = use_at(j->use, j->use_ns, now) /
					(j->spec.weight ? j->spec.weight : DM_WEIGHT_DEFAULT) };
}

static int use_less(struct use_key a, struct use_key b)
{
	return a.uid < b.uid || (a.uid == b.uid && a.job < b.job);
}

/* Under mu. Balanced shares: every rank has given its report for the pending update: new weights
 * from the previous ones and the reports (raw: ldr_shares_update clamps), recorded from
 * split_due on; the next update is pending. Wakes the workers the gate held back. */
static void split_decide(struct srv *s, struct job *j)
{
	uint32_t world = j->spec.world;
	const uint32_t *prev = ldr_split_log_last(&j->split);
	struct ldr_shares_note nt;
	uint64_t step = j->split_due;

	if (!prev)
		ldr_shares_even(world, j->split_w);
	ldr_shares_update(world, prev ? prev : j->split_w, j->split_ns, j->split_w, &nt);
	if ((nt.nonsense || nt.clamped) && j->split_noted++ % 100 == 0)
		LOG_WARN("job %s step %llu: balanced shares: %u rank(s) reported a compute time that "
			 "is not a number or negative (ignored), %u one outside [%g, %g] ns per sample "
			 "(clamped)", j->name, (unsigned long long)step, nt.nonsense, nt.clamped,
			 LDR_SHARES_NS_MIN, LDR_SHARES_NS_MAX);
	ldr_split_log_push(&j->split, step, j->split_w);  /* above every entry */
	j->split_due = step + LDR_SHARES_EVERY;
	j->split_got = 0;
	memset(j->split_have, 0, world);
	pthread_cond_broadcast(&s->cv);
}

/* Under mu. Rank @r's report for the update at @k that came with the release of a step before
 * the split seed (its ring is gone): the job's seed's (a job created from one), else that of
 * the seed @a (@r's attachment, NULL ok) opened with on a job loaderd held (raw:
 * ldr_shares_update clamps), or 0 (none) when neither holds it (no seed, or the report came
 * after the seed's step). */
static double seed_report(const struct job *j, const struct att *a, uint64_t k, uint32_t r)
{
	if (k % LDR_SHARES_EVERY)
		return 0;
	if (j->seed_ns && k >= j->seed_k1 && (k - j->seed_k1) / LDR_SHARES_EVERY < j->seed_rows)
		return j->seed_ns[(k - j->seed_k1) / LDR_SHARES_EVERY * j->spec.world + r];
	if (a && a->seed_ns && k >= a->seed_k1 &&
	    (k - a->seed_k1) / LDR_SHARES_EVERY < a->seed_rows)
		return a->seed_ns[(k - a->seed_k1) / LDR_SHARES_EVERY];
	return 0;
}

/* The first update (a multiple of LDR_SHARES_EVERY) at or after @k that lies in the report rows
 * of a seed whose first update is @k1 (@rows of them), or UINT64_MAX when none does. */
static uint64_t seed_next(uint64_t k, uint64_t k1, uint32_t rows)
{
	if (!rows || k > k1 + (uint64_t)(rows - 1) * LDR_SHARES_EVERY)
		return UINT64_MAX;
	return k > k1 ? k : k1;
}

/* Under mu, after split_decide: move the pending update past the ones no rank can report for.
 * When every rank is attached past the pending update's report step (a job opened, or resumed,
 * at a later step), the updates up to the first one whose report step a rank will still open
 * have none but a seed's; and an update without any report leaves valid weights as they are
 * (ldr_shares_update keeps every weight, normalise has nothing to move), so recording it changes
 * no split. The pending update becomes at once the first of: the update whose report step
 * (k - LDR_SHARES_EVERY) the least advanced rank opens, and the first update some seed (the
 * job's, a rank's) has a report row for. O(world), whatever the steps in between: a job opened
 * at step 10^12 decides no 2.5 x 10^11 empty updates under the lock (issue 36). */
static void split_skip(struct job *j)
{
	uint32_t world = j->spec.world;
	uint64_t least = UINT64_MAX, k;

	for (uint32_t q = 0; q < world; q++) {
		const struct att *qa = j->ranks[q].att;
		if (!qa || qa->dead)
			return;  /* it gives its report, or "none", when it attaches */
		if (qa->next < least)
			least = qa->next;
	}
	if (least <= j->split_due - LDR_SHARES_EVERY)
		return;  /* that rank opens the report step */
	/* least <= CTL_STEP_LIMIT + the steps of a job: no wrap */
	k = (least + LDR_SHARES_EVERY - 1) / LDR_SHARES_EVERY * LDR_SHARES_EVERY + LDR_SHARES_EVERY;
	uint64_t t = seed_next(j->split_due, j->seed_k1, j->seed_ns ? j->seed_rows : 0);
	if (t < k)
		k = t;
	for (uint32_t q = 0; q < world; q++) {
		const struct att *qa = j->ranks[q].att;
		t = seed_next(j->split_due, qa->seed_k1, qa->seed_ns ? qa->seed_rows : 0);
		if (t < k)
			k = t;
	}
	if (k > j->split_due)
		j->split_due = k;
}

/* Under mu. Balanced shares: rank @r's report for the pending update (j->split_due) is @ns (the
 * first one counts); when every rank has given one, the update is decided. A rank attached past
 * the next update's report step (a job resumed at a later step) will never open that step: it
 * gives "none" (0) at once, or its seed's report. The updates that only such ranks give
 * "none" for are skipped (split_skip), so this loop decides at most the updates a seed has
 * rows for, and one more: a bound of the seeds' size (CTL_MSG_MAX), not of any step. */
static void split_record(struct srv *s, struct job *j, uint32_t r, double ns)
{
	uint32_t world = j->spec.world;

	if (j->split_have[r])
		return;
	j->split_have[r] = 1;
	j->split_ns[r] = ns;
	j->split_got++;
	while (j->split_got == world) {
		split_decide(s, j);
		split_skip(j);
		for (uint32_t q = 0; q < world; q++) {
			struct att *qa = j->ranks[q].att;
			if (qa && !qa->dead && qa->next > j->split_due - LDR_SHARES_EVERY) {
				j->split_have[q] = 1;
				j->split_ns[q] = seed_report(j, qa, j->split_due, q);
				j->split_got++;
			}
		}
	}
}

/* Under mu. Balanced shares: may @a open its next step? Not from the pending update on, until
 * every rank has given its report for it (split_record). A rank that started past the report
 * step (resumed later) gives "none" here, as it will never open that step. */
static int split_gate(struct srv *s, struct att *a)
{
	struct job *j = a->job;

	if (!j->spec.balance || a->next < j->split_due)
		return 1;
	if (a->next > j->split_due - LDR_SHARES_EVERY && !j->split_have[a->rank])
		split_record(s, j, a->rank, seed_report(j, a, j->split_due, a->rank));
	return a->next < j->split_due;
}

/* Under mu. What the controller needs of @a at @now into *r, and the first step its consumer has
 * not released into *released; updates its rate and starvation. 0 when it cannot take a step at
 * all (gone, failed, done, hostile). */
static int ring_in(struct srv *s, struct att *a, int64_t now, struct dm_ring *r,
		   uint64_t *released)
{
	struct job *j = a->job;
	struct rank_state *rs = &j->ranks[a->rank];

	memset(r, 0, sizeof(*r));
	if (a->dead || a->hostile || j->failed || (j->steps_total && a->next >= j->steps_total) ||
	    !split_gate(s, a))
		return 0;
	int ret = ring_prod_poll(a->ring, a->next);
	if (ret < 0) {
		a->hostile = 1;
		srv_wake_control(s);
		return 0;
	}
	uint64_t rel = srv_att_released(a), taken = rel;
	*released = rel;
	dm_rate_update(&a->dm, now, rel);
	/* The steps the consumer holds (it takes them in order): ahead of it are the rest. */
	const struct ring_hdr *h = ring_header(a->ring);
	while (taken < a->next &&
	       ring_word(a->ring, taken) == (((uint32_t)((taken - a->first) / h->slots) << 2) |
					     RING_HELD))
		taken++;
	r->free_slot = ret == 1;
	r->rate = dm_rate_peak(&a->dm);
	r->lat_s = a->lat_s;
	r->work_step_s = a->work_step_s;
	r->since_release_s = (double)(now - a->dm.release_ns) * 1e-9;
	r->occ = (uint32_t)(a->next - taken);
	r->held = (uint32_t)(taken - rel);
	r->slots = h->slots;
	r->weight = j->spec.weight ? j->spec.weight : DM_WEIGHT_DEFAULT;
	r->group = j->id;  /* dm_pick serves a job's ranks emptiest first */
	/* Its consumer waited on an empty ring since we last looked, or it has nothing ahead
	 * (nothing ready, nothing filling) and has eaten what it holds at its rate (a prefetching
	 * consumer waits holding steps): the target did not cover it. One that holds a step it is
	 * still working on is not waiting, even with nothing ahead yet. */
	if (a->empty_since || rs->empty_ns != a->empty_seen ||
	    (r->rate > 0 && r->occ == 0 && (double)r->held <= r->since_release_s * r->rate))
		a->starved_until = now + DM_STARVED_NS;
	a->empty_seen = rs->empty_ns;
	r->starved = now < a->starved_until;
	if (s->opts.fixed_workers)  /* every slot, served in turn, by every worker */
		r->starved = 1, r->rate = 0;
	a->target = dm_target(r);
	return 1;
}

/* Under mu. The next (att, step) to open, or NULL: the ring the controller picks among those
 * below their target with a free slot (loader/demand.c, dm_pick); also sets s->cap, the workers
 * the demand needs. The cost of a pick grows with the attached rings only, not with the world
 * sizes of the jobs. */
static struct att *pick(struct srv *s, uint64_t *step, const struct use_key *below)
{
	unsigned n = s->nlive, start = s->rr++, m = 0, ahead = 0;
	int64_t now = now_ns(), pause_at = 0;

	if (n > s->dm_cap) {
		struct dm_ring *in = realloc(s->dm_in, 2 * n * sizeof(*in));
		if (!in)
			return NULL;  /* retried at the next wake-up */
		s->dm_in = in;
		double *acct = realloc(s->dm_acct, 2 * n * sizeof(*acct));
		if (!acct)
			return NULL;
		s->dm_acct = acct;
		s->dm_cap = 2 * n;
	}
	/* Each ring's account (its job owner's uid), numbered 0..nacct-1: dm_shares splits the
	 * cores by uid first, so that a job's weight divides its own uid's part only. */
	unsigned nacct = 0;
	for (unsigned k = 0; k < n; k++) {
		struct att *a = s->live[k];
		if (!a->acct)
			a->acct = srv_uid(s, a->job->uid);
		if (a->acct)
			a->acct->pick_ix = UINT_MAX;
	}
	/* Rings that cannot take a step stay in the array (free_slot 0): indices match s->live. */
	s->recheck_ns = 0;
	for (unsigned k = 0; k < n; k++)
		s->live[k]->job->pace_rel = UINT64_MAX;
	for (unsigned k = 0; k < n; k++) {
		struct dm_ring *r = &s->dm_in[k];
		struct job *j = s->live[k]->job;
		uint64_t rel = 0;
		int can = ring_in(s, s->live[k], now, r, &rel);
		struct uid_use *u = s->live[k]->acct;
		if (u && u->pick_ix == UINT_MAX)
			u->pick_ix = nacct++;
		/* no account (out of memory): one of its own */
		r->acct = u ? u->pick_ix : nacct++;
		m += can;
		/* The job's slowest rank that eats (dm_paces_job; one that cannot take a step
		 * paces no one), and when the first of them turns paused. */
		if (can && dm_paces_job(r)) {
			if (rel < j->pace_rel)
				j->pace_rel = rel;
			int64_t at = s->live[k]->dm.release_ns +
				     (int64_t)(dm_pause_after_s(r) * 1e9) + 1000000;
			if (!pause_at || at < pause_at)
				pause_at = at;
		}
		/* A ring short of its slots whose consumer may yet pause: look again then, or it
		 * would stay short until the consumer comes back (no doorbell rings meanwhile). */
		double after = dm_pause_after_s(r);
		if (r->free_slot && r->occ < r->slots && after >= 0 && r->since_release_s <= after) {
			int64_t at = s->live[k]->dm.release_ns + (int64_t)(after * 1e9) + 1000000;
			if (!s->recheck_ns || at < s->recheck_ns)
				s->recheck_ns = at;
		}
	}
	/* A ring's depth past that rank: it waits for it. That rank's next release rings its
	 * doorbell, which wakes the workers to look again; if it pauses instead, nothing rings:
	 * look again then, when it no longer paces. */
	for (unsigned k = 0; k < n; k++) {
		struct att *a = s->live[k];
		s->dm_in[k].ahead = s->dm_in[k].free_slot &&
				    dm_ahead(a->next, a->job->pace_rel, s->dm_in[k].slots);
		ahead += (unsigned)s->dm_in[k].ahead;
	}
	if (ahead && (!s->recheck_ns || pause_at < s->recheck_ns))
		s->recheck_ns = pause_at;
	if (below) {
		/* Looking for a job that used less than @below (task_next): the others, and a job
		 * with a step queued already, want none now (after the bookkeeping above, which is
		 * the same either way). */
		for (unsigned k = 0; k < n; k++) {
			struct job *j = s->live[k]->job;
			if (j->queued || !use_less(use_key(s, j, now), *below))
				s->dm_in[k].free_slot = 0;
		}
	}
	dm_shares(s->dm_in, n, s->ceiling, nacct, s->dm_acct);
	if (!below) {  /* what the demand needs: from every ring, not the few looked for */
		unsigned cap = m ? dm_active_cap(s->dm_in, n, s->ceiling) : s->ceiling;
		if (cap > s->cap)
			pthread_cond_broadcast(&s->cv);  /* workers held back by the old cap */
		s->cap = cap;
	}
	int i = n ? dm_pick(s->dm_in, n, start % n) : -1;
	if (i < 0)
		return NULL;
	struct att *found = s->live[i];
	struct ring_hdr const *h = ring_header(found->ring);
	*step = found->next++;
	/* Free for *step means the consumer released *step - slots. */
	if (*step >= found->first + h->slots && *step - h->slots + 1 > found->floor)
		found->floor = *step - h->slots + 1;
	found->refs++;
	return found;
}

static uint32_t flags_of(const struct job *j, uint64_t step, uint32_t fill_flags)
{
	uint32_t flags = fill_flags & ~RING_SLOT_LAST;

	if (j->steps_total && step + 1 == j->steps_total)
		flags |= RING_SLOT_LAST;
	return flags;
}

/* Samples per task for a step of @count: opts.task_samples, else about four tasks per worker,
 * within [SRV_TASK_MIN, SRV_TASK_MAX]. Fewer, larger tasks cost less locking and make larger
 * read submissions; more, smaller ones spread a batch over more workers and shorten the wait
 * for its last task (at 2 workers and batch 256, tasks of 8 gave a batch latency 20-30% below
 * tasks of 32 for the same samples per CPU-second: docs/BENCHMARKS.md). */
static uint32_t task_size(const struct srv *s, uint32_t count)
{
	uint32_t t = s->opts.task_samples;

	if (!t) {
		uint32_t per = 4 * s->opts.workers;
		t = (count + per - 1) / per;
		if (t < SRV_TASK_MIN)
			t = SRV_TASK_MIN;
		if (t > SRV_TASK_MAX)
			t = SRV_TASK_MAX;
	}
	return t;
}

/* Under mu. An open_step from the pool, or a new one; NULL when out of memory. */
static struct open_step *step_get(struct srv *s)
{
	struct open_step *o = s->step_pool;

	if (o) {
		s->step_pool = o->next_open;
		return o;
	}
	return calloc(1, sizeof(*o));
}

/* Under mu. Back to the pool, arrays kept. */
static void step_put(struct srv *s, struct open_step *o)
{
	o->next_open = s->step_pool;
	s->step_pool = o;
}

static void step_free(struct open_step *o)
{
	free(o->st.ids);
	free(o->st.flags);
	free(o->st.labels);
	free(o->st.held);
	free(o->shares);
	free(o);
}

/* Without mu (the opener owns @o). Room for @batch samples in o->st's arrays. 0 or -ENOMEM. */
static int step_arrays(struct open_step *o, uint32_t batch)
{
	if (o->cap >= batch)
		return 0;
	free(o->st.ids);
	free(o->st.flags);
	free(o->st.labels);
	free(o->st.held);
	o->st.ids = calloc(batch, sizeof(*o->st.ids));
	o->st.flags = calloc(batch, sizeof(*o->st.flags));
	o->st.labels = calloc(batch, sizeof(*o->st.labels));
	o->st.held = calloc(batch, sizeof(*o->st.held));
	o->cap = o->st.ids && o->st.flags && o->st.labels && o->st.held ? batch : 0;
	return o->cap ? 0 : -ENOMEM;
}

/* Under mu. Should @o's samples still be filled? Not when a task of it failed, its ring is going,
 * or the server stops. A step of a job that failed at another step is finished and published,
 * as a fill in progress always was: every step before the failed one reaches the consumer. */
static int step_stale(const struct srv *s, const struct open_step *o)
{
	return o->abandoned || o->a->dead || o->a->hostile || s->workers_stop;
}

static void parked_abandon(struct srv *s, struct job *j, int all);

/* Under mu. Fail @j with @ret and @why (the first failure only): every rank is told. Its parked
 * steps are abandoned: no shard attach reopens a step of a failed job. */
static void fail_job(struct srv *s, struct job *j, uint32_t rank, uint64_t step, int ret,
		     const char *why)
{
	if (j->failed)
		return;
	j->failed = 1;
	j->fail_err = ret < 0 ? -ret : EIO;
	snprintf(j->fail_msg, sizeof(j->fail_msg), "%s", why[0] ? why : strerror(j->fail_err));
	srv_notice(s, 0, "job %s rank %u step %llu: %s", j->name, rank, (unsigned long long)step,
		   j->fail_msg);
	parked_abandon(s, j, 1);
	srv_wake_control(s);
}

/* Without mu. What ops->step_open held for @o (a streamed set's shards), let go once. */
static void step_release(struct srv *s, void *wstate, struct open_step *o)
{
	if (o->opened && s->ops.step_release)
		s->ops.step_release(s->ops.ctx, wstate, &o->st);
	o->opened = 0;
	o->st.nheld = 0;
}

/* Under mu; may let go of it for the publish, and for ops->step_release (1 when it did: lists
 * walked before may have changed). Every task of @o is done: publish it (unless it was
 * abandoned), release what its open held, drop its att reference and give it back to the pool.
 * @wstate: the calling worker's state (NULL: not a worker). */
static int step_done(struct srv *s, void *wstate, struct open_step *o)
{
	struct att *a = o->a;
	struct job *j = a->job;
	int unlocked = 0;

	if (!o->abandoned) {
		struct rank_state *rs = &j->ranks[a->rank];
		uint32_t n = o->st.count;
		uint32_t flags = flags_of(j, o->step, o->st.slot_flags);
		int64_t now = now_ns();
		uint64_t latency = o->first_ns ? (uint64_t)(now - o->first_ns) : 0;
		/* Counted before the publish, so a consumer that has the step also sees it in its
		 * stats. */
		rs->published++;
		rs->samples += n;
		rs->fill_ns += o->work_ns;
		rs->latency_ns += latency;
		j->published++;
		j->samples += n;
		j->fill_ns += o->work_ns;
		j->latency_ns += latency;
		/* Averaged over about 8 steps: what the targets and the cap are made of. */
		double pl = (double)(now - o->open_ns) * 1e-9;
		a->lat_s = a->lat_s ? 0.875 * a->lat_s + 0.125 * pl : pl;
		a->work_step_s = a->work_step_s ?
			0.875 * a->work_step_s + 0.125 * (double)o->work_ns * 1e-9 :
			(double)o->work_ns * 1e-9;
		for (unsigned k = 0; k < SRV_PHASES_MAX; k++) {
			rs->phase_ns[k] += o->phase_ns[k];
			j->phase_ns[k] += o->phase_ns[k];
		}
		pthread_mutex_unlock(&s->mu);
		/* Write-only: the consumer may have scribbled on these; they are overwritten from
		 * the step's private arrays, never read. */
		memcpy(o->slot.ids, o->st.ids, n * sizeof(*o->st.ids));
		memcpy(o->slot.flags, o->st.flags, n * sizeof(*o->st.flags));
		memcpy(o->slot.labels, o->st.labels, n * sizeof(*o->st.labels));
		o->slot.hdr->fill_ns = o->work_ns;
		o->slot.hdr->global_count = o->st.global_count;
		o->slot.hdr->global_offset = o->st.global_offset;
		o->slot.hdr->latency_ns = latency;
		ring_prod_publish(a->ring, &o->slot, n, flags);
		step_release(s, wstate, o);
		pthread_mutex_lock(&s->mu);
		unlocked = 1;
		srv_att_published(a, o->step, now_ns());
	} else if (o->opened) {
		pthread_mutex_unlock(&s->mu);
		step_release(s, wstate, o);
		pthread_mutex_lock(&s->mu);
		unlocked = 1;
	}
	if (--a->refs == 0 && a->dead)
		srv_att_free(s, a);
	else if (a->refs == 0 && j->failed)
		srv_wake_control(s);  /* its consumer waits for this to hear of the failure */
	step_put(s, o);
	return unlocked;
}

/* Under mu. Abandon @j's parked steps: every one (@all), else those whose ring is gone or
 * hostile (or all of them when @j failed). A parked step holds nothing (its open answered
 * -EAGAIN): step_done keeps the lock. */
static void parked_abandon(struct srv *s, struct job *j, int all)
{
	struct open_step *o = j->parked, *prev = NULL, *next;

	for (; o; o = next) {
		next = o->next_open;
		if (!all && !j->failed && !step_stale(s, o)) {
			prev = o;
			continue;
		}
		if (prev)
			prev->next_open = next;
		else
			j->parked = next;
		if (j->parked_tail == o)
			j->parked_tail = prev;
		j->nparked--;
		s->nparked--;
		o->abandoned = 1;
		step_done(s, NULL, o);
	}
}

/* Under mu. @o's open answered -EAGAIN: it waits on its job's parked list, its slot taken. */
static void step_park(struct srv *s, struct open_step *o)
{
	struct job *j = o->a->job;

	o->next_open = NULL;
	if (j->parked_tail)
		j->parked_tail->next_open = o;
	else
		j->parked = o;
	j->parked_tail = o;
	j->nparked++;
	s->nparked++;
}

void srv_shard_ready(struct srv *s, struct job *j)
{
	pthread_mutex_lock(&s->mu);
	s->shard_gen++;
	if (j->parked) {
		if (s->reopen_tail)
			s->reopen_tail->next_open = j->parked;
		else
			s->reopen = j->parked;
		s->reopen_tail = j->parked_tail;
		s->nparked -= j->nparked;
		j->parked = j->parked_tail = NULL;
		j->nparked = 0;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
}

void srv_job_stream_fail(struct srv *s, struct job *j, int err, const char *why)
{
	pthread_mutex_lock(&s->mu);
	if (!j->failed) {
		j->failed = 1;
		j->fail_err = err < 0 ? -err : err > 0 ? err : EIO;
		snprintf(j->fail_msg, sizeof(j->fail_msg), "%s",
			 why && why[0] ? why : strerror(j->fail_err));
		srv_notice(s, 0, "job %s: its dataset's stream failed: %s", j->name, j->fail_msg);
		srv_wake_control(s);
	}
	parked_abandon(s, j, 1);  /* also when it had failed before */
	pthread_mutex_unlock(&s->mu);
}

/* Under mu. Abandon the steps to be opened again whose ring is gone or whose job failed (@all:
 * every one). */
static void reopen_abandon(struct srv *s, int all)
{
	struct open_step *o = s->reopen, *prev = NULL, *next;

	for (; o; o = next) {
		next = o->next_open;
		if (!all && !o->a->job->failed && !step_stale(s, o)) {
			prev = o;
			continue;
		}
		if (prev)
			prev->next_open = next;
		else
			s->reopen = next;
		if (s->reopen_tail == o)
			s->reopen_tail = prev;
		o->abandoned = 1;
		step_done(s, NULL, o);
	}
}

void srv_parked_sweep(struct srv *s)
{
	if (s->reopen)
		reopen_abandon(s, 0);
	if (!s->nparked)
		return;
	for (struct job *j = s->jobs; j; j = j->next)
		if (j->parked)
			parked_abandon(s, j, 0);
}

/* Under mu. Take @o off s->tasks; @prev is the step before it (NULL: @o is the head). */
static void tasks_unlink(struct srv *s, struct open_step *prev, struct open_step *o)
{
	if (prev)
		prev->next_open = o->next_open;
	else
		s->tasks = o->next_open;
	if (s->tasks_tail == o)
		s->tasks_tail = prev;
	o->next_open = NULL;
	o->a->job->queued--;
}

/* Under mu. Queue @o, whose samples are to be handed out, and wake workers for its tasks. */
static void tasks_push(struct srv *s, struct open_step *o)
{
	uint32_t ntasks = (o->st.count + o->task - 1) / o->task;

	o->next_open = NULL;
	if (s->tasks_tail)
		s->tasks_tail->next_open = o;
	else
		s->tasks = o;
	s->tasks_tail = o;
	o->a->job->queued++;
	for (uint32_t k = 1; k < ntasks && k < s->opts.workers; k++)
		pthread_cond_signal(&s->cv);
}

/* A task a worker took: samples [begin, end) of an open step. */
struct task {
	struct open_step *o;
	uint32_t begin, end;
};

/* Samples of @o's job that take about SRV_SLICE_NS of worker time, within [1, @o's task size]:
 * one while the time a sample takes is not known. */
static uint32_t task_cut(const struct open_step *o)
{
	uint64_t per = o->a->job->sample_ns;

	if (!per)
		return 1;
	uint64_t n = (uint64_t)SRV_SLICE_NS / per;
	return n < 1 ? 1 : n > o->task ? o->task : (uint32_t)n;
}

/* Under mu. The open step a task is taken from next: of the queued ones, the one whose job's
 * owner, then whose job, used the least worker time lately (fair by cost: a job of records that
 * take seconds each does not keep the workers from a cheap one by having its steps queued
 * first); among equals the earliest opened. NULL when the queue is empty. Steps that should no
 * longer be filled are abandoned on the way (and finished if no task of theirs is out). The queue
 * holds few steps: one is opened when none has a task left (task_next), or for a job that has
 * none queued. */
static struct open_step *task_step(struct srv *s, void *wstate, struct open_step **best_prev)
{
	struct open_step *best = NULL, *prev = NULL, *o, *next;
	struct use_key bk = { 0, 0 };
	int64_t now = now_ns();

	for (o = s->tasks; o; o = next) {
		next = o->next_open;
		if (step_stale(s, o)) {
			o->abandoned = 1;
			o->next = o->st.count;
			tasks_unlink(s, prev, o);
			/* abandoned: lets go of the lock only to release what its open held; the
			 * queue may have changed meanwhile: walk it again (each pass takes one
			 * stale step off it) */
			if (o->out == 0 && step_done(s, wstate, o)) {
				best = prev = NULL;
				next = s->tasks;
			}
			continue;
		}
		struct use_key k = use_key(s, o->a->job, now);
		if (!best || use_less(k, bk)) {
			best = o;
			bk = k;
			*best_prev = prev;
		}
		prev = o;
	}
	return best;
}

/* Under mu. The next task into *t: about a slice of samples (task_cut) of the step task_step
 * chooses. 1 when a task was taken, else 0. */
static int task_take(struct srv *s, void *wstate, struct task *t)
{
	struct open_step *prev = NULL, *o = task_step(s, wstate, &prev);

	if (!o)
		return 0;
	uint32_t n = task_cut(o);
	t->o = o;
	t->begin = o->next;
	t->end = o->st.count - o->next > n ? o->next + n : o->st.count;
	o->next = t->end;
	o->out++;
	if (!o->first_ns)
		o->first_ns = now_ns();
	if (o->next == o->st.count)
		tasks_unlink(s, prev, o);
	return 1;
}

/* Without mu. Fill @t into its slot; @f gets the callback's outputs. @next (NULL: none) is the
 * task this worker fills next: the fill may start its reads now. */
static int task_run(struct srv *s, void *wstate, const struct task *t, const struct task *next,
		    struct srv_fill *f)
{
	memset(f, 0, sizeof(*f));
	f->step = &t->o->st;
	f->begin = t->begin;
	f->end = t->end;
	f->slot = &t->o->slot;
	if (next) {
		f->next_step = &next->o->st;
		f->next_begin = next->begin;
		f->next_end = next->end;
	}
	return s->ops.fill(s->ops.ctx, wstate, f);
}

/* Under mu. A task of @o ended with @ret after @dt ns (@cpu ns of CPU): account it; the last one finishes @o. */
static void task_done(struct srv *s, void *wstate, struct open_step *o, uint32_t t_samples, int ret,
		      const struct srv_fill *f, int64_t dt, int64_t cpu)
{
	struct job *j = o->a->job;

	charge(s, o, cpu);
	srv_use_charge(s, j, dt);
	if (t_samples) {  /* averaged over about 4 tasks */
		uint64_t per = (uint64_t)dt / t_samples;
		j->sample_ns = j->sample_ns ? (3 * j->sample_ns + per) / 4 : per;
		if (!j->sample_ns)
			j->sample_ns = 1;
	}
	j->bad += f->bad;
	for (uint32_t b = 0; b < f->nbad_ids && b < 8; b++)
		j->bad_ids[j->nbad_ids++ % 16] = f->bad_ids[b];
	s->busy_ns += (uint64_t)dt;
	o->work_ns += (uint64_t)dt;
	for (unsigned k = 0; k < SRV_PHASES_MAX; k++)
		o->phase_ns[k] += f->phase_ns[k];
	if (ret < 0) {
		fail_job(s, j, o->a->rank, o->step, ret, f->why);
		o->abandoned = 1;
	}
	/* A step leaves the queue when its last sample is handed out: this one is off it. */
	if (--o->out == 0 && o->next == o->st.count)
		step_done(s, wstate, o);
}

/* Under mu. Balanced shares, when @a opens @step with @report the report its consumer left in the
 * slot with the release of step - slots (ring_prod_reclaim_report): the update pending at
 * split_due takes every rank's report from the step split_due - LDR_SHARES_EVERY - slots, that
 * is the one read when the rank opens split_due - LDR_SHARES_EVERY; so the weights are a pure
 * function of the reports that came with defined steps, whatever the order and the time in which
 * the workers open steps. Then the weights in force at @step go into @o's copy, which step_open
 * reads without the lock. 0 or -ENOMEM. */
static int step_shares(struct srv *s, struct att *a, struct open_step *o, uint64_t step,
		       double report)
{
	struct job *j = a->job;
	uint32_t world = j->spec.world;

	/* The slot of a step in the first lap of this ring held no release: the report of that
	 * step, if any, is the seed's. A rank that started past the pending update's report step
	 * never opens it: its report is the seed's too (or none). */
	if (step < a->first + ring_header(a->ring)->slots)
		report = seed_report(j, a, step + LDR_SHARES_EVERY, a->rank);
	if (step < j->split_due && step + LDR_SHARES_EVERY >= j->split_due)
		split_record(s, j, a->rank, step + LDR_SHARES_EVERY == j->split_due ? report :
			     seed_report(j, a, j->split_due, a->rank));
	if (o->shares_cap < world) {
		free(o->shares);
		o->shares = calloc(2 * (size_t)world, sizeof(*o->shares));
		o->shares_cap = o->shares ? world : 0;
		if (!o->shares)
			return -ENOMEM;
	}
	const uint32_t *w = ldr_split_log_at(&j->split, step);
	if (!w) {
		ldr_shares_even(world, o->shares);  /* before the log: even (a job's first steps) */
		w = o->shares;
	}
	memmove(o->shares, w, world * sizeof(*w));
	o->st.weights = o->shares;
	o->st.split = o->shares + world;
	return 0;
}

/* Under mu; lets go of it while ops->step_open runs. Draw @o (its slot taken, its att
 * referenced) and queue its tasks; or, when a shard it reads is pending (a streamed set's
 * -EAGAIN), park it on its job's list until srv_shard_ready. An attach that came while the open
 * ran (s->shard_gen moved) may have been the shard it waits for, and srv_shard_ready found
 * nothing parked then: it opens again at once instead of parking (no lost wake-up). */
static void step_draw(struct srv *s, void *wstate, struct open_step *o)
{
	struct att *a = o->a;
	struct job *j = a->job;
	uint64_t step = o->step, gen;
	char why[CTL_TEXT_MAX];
	int ret;

	do {
		gen = s->shard_gen;
		pthread_mutex_unlock(&s->mu);
		int64_t t0 = now_ns();
		why[0] = '\0';
		o->st.job = j->state;
		o->st.rank = a->rank;
		o->st.world = j->spec.world;
		o->st.epoch = step / j->info.steps_per_epoch;
		o->st.step_in_epoch = step % j->info.steps_per_epoch;
		o->st.cap = j->info.ring.batch;
		o->st.count = o->st.slot_flags = 0;
		o->st.global_count = o->st.global_offset = 0;
		o->st.wait_shard = 0;
		o->st.nheld = 0;
		o->slot.hdr->epoch = o->st.epoch;
		o->slot.hdr->step_in_epoch = o->st.step_in_epoch;
		ret = step_arrays(o, j->info.ring.batch);
		if (ret < 0)
			snprintf(why, sizeof(why), "out of memory opening a step");
		else
			ret = s->ops.step_open(s->ops.ctx, wstate, &o->st, why, sizeof(why));
		o->opened = ret == 0;
		if (ret == 0 && o->st.count > j->info.ring.batch) {
			snprintf(why, sizeof(why), "the fill drew %u samples for a batch of %u",
				 o->st.count, j->info.ring.batch);
			ret = -EPROTO;
		}
		if (ret == 0 && o->st.global_count == 0) {
			/* a filler that draws even splits only */
			o->st.global_count = o->st.count * o->st.world;
			o->st.global_offset = o->st.count * o->st.rank;
		}
		if (ret == 0 && (o->st.global_offset > o->st.global_count ||
				 o->st.count > o->st.global_count - o->st.global_offset)) {
			snprintf(why, sizeof(why), "the fill drew samples [%u, %u) of a step of %u",
				 o->st.global_offset, o->st.global_offset + o->st.count,
				 o->st.global_count);
			ret = -EPROTO;
		}
		if (ret == -EAGAIN && (!j->info.stream_shards ||
				       o->st.wait_shard >= j->info.stream_shards)) {
			snprintf(why, sizeof(why), "the fill asked to wait for shard %u of a set of %u "
				 "streamed", o->st.wait_shard, j->info.stream_shards);
			ret = -EPROTO;
		}
		int64_t t1 = now_ns(), dt = t1 - t0, dc = ldr_cpu_clock_lap(&cpu_clk, dt, t1);

		pthread_mutex_lock(&s->mu);
		s->busy_ns += (uint64_t)dt;
		o->work_ns += (uint64_t)dt;
		charge(s, o, dc);
		srv_use_charge(s, j, dt);
	} while (ret == -EAGAIN && s->shard_gen != gen && !j->failed && !step_stale(s, o));
	o->task = task_size(s, o->st.count);
	if (ret == -EAGAIN) {
		if (!j->failed && !step_stale(s, o)) {
			step_park(s, o);
			return;
		}
		o->abandoned = 1;  /* nothing to wait for: its ring or its job is gone */
	} else if (ret < 0) {
		fail_job(s, j, a->rank, step, ret, why);
		o->abandoned = 1;
	}
	if (o->abandoned || o->st.count == 0)
		step_done(s, wstate, o);
	else
		tasks_push(s, o);
}

/* Under mu; lets go of it while ops->step_open runs. Open @step of @a (picked, with a reference
 * on @a): take its slot, draw it, and queue its tasks (step_draw). */
static void step_open(struct srv *s, void *wstate, struct att *a, uint64_t step)
{
	struct job *j = a->job;
	struct open_step *o = step_get(s);
	int ret;

	if (!o) {
		fail_job(s, j, a->rank, step, -ENOMEM, "out of memory opening a step");
		if (--a->refs == 0 && a->dead)
			srv_att_free(s, a);
		return;
	}
	memset(&o->st, 0, offsetof(struct srv_step, ids));
	o->st.weights = NULL;
	o->st.split = NULL;
	o->st.global_count = o->st.global_offset = 0;
	o->st.nheld = 0;
	o->a = a;
	o->step = step;
	o->next = o->out = 0;
	o->abandoned = 0;
	o->opened = 0;
	o->first_ns = 0;
	o->open_ns = now_ns();
	o->work_ns = 0;
	o->cpu_ns = 0;
	memset(o->phase_ns, 0, sizeof(o->phase_ns));
	ret = ring_prod_begin(a->ring, step, &o->slot);
	if (ret < 0) {
		a->hostile = 1;  /* ring_prod_begin: the consumer rewrote a free word */
		srv_wake_control(s);
		o->abandoned = 1;
		step_done(s, wstate, o);
		return;
	}
	if (j->spec.balance &&
	    step_shares(s, a, o, step, ring_prod_reclaim_report(a->ring, &o->slot)) < 0) {
		fail_job(s, j, a->rank, step, -ENOMEM, "out of memory opening a step");
		o->abandoned = 1;
		step_done(s, wstate, o);
		return;
	}
	step_draw(s, wstate, o);
}

/* Under mu; may let go of it. A step parked on a shard that has attached since: opened again,
 * unless its ring or its job is gone (then abandoned). 1 when there was one. */
static int step_reopen(struct srv *s, void *wstate)
{
	struct open_step *o = s->reopen;

	if (!o)
		return 0;
	s->reopen = o->next_open;
	if (!s->reopen)
		s->reopen_tail = NULL;
	o->next_open = NULL;
	if (o->a->job->failed || step_stale(s, o)) {
		o->abandoned = 1;
		step_done(s, wstate, o);
	} else {
		step_draw(s, wstate, o);
	}
	return 1;
}

struct worker_arg {
	struct srv *s;
	unsigned index;
};

/* Under mu; may let go of it to open a step. The task to fill after the current one, so that its
 * reads start before the current one decodes: the next queued task, else the first of a step
 * opened now. 1 with *t, or 0 when there is none. */
static int task_next(struct srv *s, void *wstate, struct task *t)
{
	uint64_t step;
	struct open_step *prev;

	/* Fair by cost: steps are queued in the order they were opened, and one is opened when
	 * none has a task left; a job of costly records would keep its steps queued and the
	 * workers to itself. So a ring of a job that used less worker time lately than the
	 * queued one about to be served, and has no step queued, gets its step opened now (pick,
	 * among those only), and goes first (task_step). A look that finds none is not repeated
	 * within a slice (a pick costs the attached rings); one that finds one is, at the next
	 * task: else a worker back from such a ring's task took the costly job's next record, and
	 * the cheap ring got one step per costly record, whatever it had used. */
	/* Steps whose shard may have come first (their slots are taken), until one has tasks */
	while (!s->workers_stop && !s->tasks && step_reopen(s, wstate))
		;
	struct open_step *o = s->workers_stop ? NULL : task_step(s, wstate, &prev);
	int64_t now = now_ns();
	if (o && now - s->fair_ns >= SRV_SLICE_NS) {
		struct use_key k = use_key(s, o->a->job, now);
		struct att *a = pick(s, &step, &k);
		if (a)
			step_open(s, wstate, a, step);
		else
			s->fair_ns = now;
	}
	if (task_take(s, wstate, t))
		return 1;
	if (s->workers_stop)
		return 0;
	struct att *a = pick(s, &step, NULL);
	if (!a)
		return 0;
	step_open(s, wstate, a, step);
	return task_take(s, wstate, t);
}

/* Under mu. May this worker start more work now? Not when the workers already decoding are as
 * many as the demand needs (s->cap), nor while the CPU budget is spent; then *wait_ns > 0 is
 * when the budget allows again (0: until woken). @extra: the worker already holds a task. */
static int may_work(struct srv *s, int extra, int64_t *wait_ns)
{
	*wait_ns = 0;
	if (s->active + !extra > s->cap)
		return 0;
	dm_bucket_refill(&s->budget, now_ns());
	return dm_bucket_ok(&s->budget, wait_ns);
}

/* Under mu: sleep on s->cv, for at most @ns when > 0. */
static void worker_sleep(struct srv *s, int64_t ns)
{
	if (ns <= 0) {
		pthread_cond_wait(&s->cv, &s->mu);
		return;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t t = (int64_t)ts.tv_nsec + ns;
	ts.tv_sec += t / 1000000000;
	ts.tv_nsec = t % 1000000000;
	pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

static void *worker_main(void *p)
{
	struct worker_arg *wa = p;
	struct srv *s = wa->s;
	void *wstate = s->ops.worker_init ? s->ops.worker_init(s->ops.ctx, wa->index) : NULL;
	struct task cur, next;
	int have = 0;
	int64_t wait;
	struct srv_fill f;

	ldr_cpu_clock_init(&cpu_clk, now_ns());
	pthread_mutex_lock(&s->mu);
	for (;;) {
		if (!have) {
			/* A stopping server drains its queue whatever the budget says. */
			if (!s->workers_stop && !may_work(s, 0, &wait)) {
				worker_sleep(s, wait);
				continue;
			}
			have = task_next(s, wstate, &cur);
			if (!have) {
				if (s->workers_stop)
					break;
				/* Nothing to do: until a doorbell, or until a consumer turns paused. */
				int64_t now = now_ns();
				worker_sleep(s, s->recheck_ns > now ? s->recheck_ns - now : 0);
				continue;
			}
			s->active++;
		}
		/* A task taken is always filled, also when its step was abandoned meanwhile: the
		 * fill before it may have started its reads (srv_fill.next_step). */
		/* Not behind a record that takes more than a slice (task_cut makes a task of it
		 * alone), nor one of a job whose cost is not known yet: the next task taken now
		 * would wait that long, and keep other jobs from it. */
		uint64_t per = cur.o->a->job->sample_ns;
		int more = per && per <= (uint64_t)SRV_SLICE_NS &&
			   may_work(s, 1, &wait) && task_next(s, wstate, &next);
		pthread_mutex_unlock(&s->mu);
		int64_t t0 = now_ns();
		int ret = task_run(s, wstate, &cur, more ? &next : NULL, &f);
		int64_t t1 = now_ns(), dt = t1 - t0, dc = ldr_cpu_clock_lap(&cpu_clk, dt, t1);
		pthread_mutex_lock(&s->mu);
		task_done(s, wstate, cur.o, cur.end - cur.begin, ret, &f, dt, dc);
		cur = next;
		have = more;
		if (!have) {
			s->active--;
			pthread_cond_signal(&s->cv);  /* one held back by the cap may go */
		}
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

	double budget = s->opts.cpu_budget > 0 ? s->opts.cpu_budget : (double)proc_cpu_count();
	dm_bucket_init(&s->budget, budget);
	s->ceiling = (unsigned)ceil(budget);
	if (s->ceiling > s->opts.workers)
		s->ceiling = s->opts.workers;
	if (s->ceiling < 1)
		s->ceiling = 1;
	s->cap = s->ceiling;  /* no demand measured yet: fill as fast as the ceiling allows */
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
	/* The workers drained s->tasks on their way out (every queued step was abandoned); the
	 * steps that wait on a shard are abandoned here. */
	pthread_mutex_lock(&s->mu);
	reopen_abandon(s, 1);
	for (struct job *j = s->jobs; j && s->nparked; j = j->next)
		parked_abandon(s, j, 1);
	pthread_mutex_unlock(&s->mu);
	assert(!s->tasks && !s->reopen && !s->nparked);
	while (s->step_pool) {
		struct open_step *o = s->step_pool;
		s->step_pool = o->next_open;
		step_free(o);
	}
	free(s->threads);
	s->threads = NULL;
	free(s->dm_in);
	s->dm_in = NULL;
	free(s->dm_acct);
	s->dm_acct = NULL;
	s->dm_cap = 0;
	s->nthreads = 0;
}
