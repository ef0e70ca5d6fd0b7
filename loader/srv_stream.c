/* srv_stream.c - a set of shards streamed through the node cache (loaderd --cache-stream;
 * docs/STREAMING.md): one thread per streamed job owns the job's socket to its ldfetch child. It
 * attaches each shard ldfetch delivers (ops->shard_attach) and wakes the steps that wait on it
 * (srv_shard_ready), and it plans (stream_plan.h, the policy): from where each attached rank
 * of the job stands, the shards its next steps read (ops->stream_future), half the stream's
 * byte budget (its share of the node cache among every streamed job, stream_share.h, from the
 * curves and rates their plans publish) fetched ahead, the other half keeping shards already
 * here for their next use, the soonest-needed first (Belady's order over the known future;
 * loaderd --cache-evict lru, for comparisons: the most recently read first). Those to fetch are sent as the wanted list
 * (CTL_SHARD_WANT, soonest first); those that lost their place are detached and sent as dropped
 * (CTL_SHARD_DROP), which lets ldfetch evict them, never one a step in flight holds (its detach
 * answers -EBUSY; it is tried again at the next plan). Nobody reading (the job lingers after
 * its ranks left, or waits for them), it wants nothing and lets everything go, which stays
 * cached until another open needs the room.
 *
 * DESIGN. The thread never holds s->mu across a call into the job (shard_attach reads a shard's
 * index; stream_future runs the sampler) or a send: under mu it copies the ranks' positions
 * only. The work of a plan is bounded by loaderd's numbers, not a client's: at most
 * STREAM_RANKS ranks, STREAM_HORIZON steps ahead (the walk for the shards kept: STREAM_HORIZON
 * steps of all ranks together), STREAM_WALK_DRAWS samples drawn in all, CTL_SHARD_LIST_MAX
 * shards listed, and a plan
 * at most every STREAM_PLAN_NS unless a shard arrived. */
#include "loader/cpu_clock.h"
#include "loader/srv_impl.h"
#include "loader/stream_plan.h"
#include "loader/stream_share.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define STREAM_RANKS 256u           /* attached ranks of one job a plan looks at */
#define STREAM_GRACE_NS 50000000ll  /* a shard just attached is not let go this soon */
#define STREAM_PARKED 256u          /* parked steps of one job a plan looks at */
#define STREAM_HORIZON 4096u        /* steps ahead of each rank a plan looks at, at most */
#define STREAM_PLAN_NS 100000000ll  /* between plans while nothing arrives (ranks moved) */
#define STREAM_IDLE_NS 1000000000ll /* between plans when nothing moved */
#define STREAM_WALK_DRAWS (1u << 18) /* samples a plan's walk draws at most (a few ms) */
#define STREAM_STARVE_NS 500000000ll /* wanted shards and none came this long: keep nothing */
#define STREAM_RATE_NS 250000000ll  /* a job's rate measured over at least this */
#define STREAM_SHARE_MAX 64u        /* streams the node's share looks at (ldfetch has 16 places) */
#define STREAM_CURVE_NS 500000000ll /* between the walks for a curve (they go farther) */

struct srv_stream {
	struct srv *s;
	struct job *j;
	int fd;                    /* the job's socket to its ldfetch child */
	pthread_t th;
	_Atomic int stop;
	uint32_t total;            /* shards in the set */
	uint8_t *attached;         /* total: attached by this stream */
	uint8_t *seen;             /* total: a plan's scratch */
	int64_t *at_ns;            /* total: when each was attached */
	int64_t *used_ns;          /* total: when a plan last wanted each, attached (lru) */
	uint32_t *order;           /* total: a plan's scratch */
	uint64_t *csize;           /* total: each shard's bytes in the cache (whole blocks): the
				    * job's estimate, then the store's (CTL_SHARD_SIZES) */
	uint64_t big;              /* the largest of them (set_sizes) */
	uint32_t *list;            /* CTL_SHARD_LIST_MAX: a plan's future order */
	uint32_t *sent;            /* the wanted list last sent */
	uint32_t nsent;
	uint32_t nranks;
	uint32_t rank[STREAM_RANKS];
	uint64_t from[STREAM_RANKS];
	uint32_t nparked;
	uint32_t pk_rank[STREAM_PARKED];
	uint64_t pk_step[STREAM_PARKED];
	uint64_t moved;            /* sum of the positions at the last plan */
	int64_t plan_ns;           /* when the last plan ran */
	int dirty;                 /* a shard arrived since */
	int64_t in_ns;             /* when a shard last arrived (or the stream started) */
	uint64_t fetched, dropped; /* shards attached and detached, for the log */
	/* the node's share (stream_share.h): the rate and the curve its last plan left, and its
	 * largest shard, published under s->mu for the other streams' plans */
	uint64_t adv;              /* the steps its ranks' consumers took, summed (positions) */
	double lead;               /* steps a rank has opened beyond its consumer's, on average */
	uint64_t rate_adv;         /* ... when the rate was last measured */
	uint32_t rate_nranks;
	int64_t rate_ns;
	double rate;               /* the job's rounds a second (0: not known yet) */
	struct sshare_pt curve[SSHARE_POINTS];
	uint32_t ncurve;
	int64_t curve_ns;          /* when the last curve was walked */
	uint64_t pub_big;
	uint64_t grant;            /* its budget at the last plan (for the log) */
	uint64_t pub_grant;        /* its share at the node's last share (any stream's plan), and
				    * the shards here, under s->mu for status */
	uint32_t pub_here;
	struct sshare_ev *ev;      /* the share's scratch: STREAM_SHARE_MAX * SSHARE_POINTS */
	char why[CTL_TEXT_MAX];    /* a plan's failure */
	size_t bytes;              /* its memory, charged to the job's uid */
};

/* Tell ldfetch a list (CTL_SHARD_WANT or CTL_SHARD_DROP). 0 or -errno. */
static int send_list(struct srv_stream *st, uint16_t type, const uint32_t *idx, uint32_t n)
{
	char msg[CTL_MSG_MAX];
	struct ctl_shard_list l = { .count = n };

	if (n > CTL_SHARD_LIST_MAX)
		n = l.count = CTL_SHARD_LIST_MAX;
	memcpy(msg, &l, sizeof(l));
	memcpy(msg + sizeof(l), idx, (size_t)n * sizeof(*idx));
	return ctl_send(st->fd, type, msg, sizeof(l) + (size_t)n * sizeof(*idx), NULL, 0);
}

/* Under mu. What the job's steps need next: its parked steps (opened, each waiting on a shard),
 * the soonest first, then where each attached rank stands: the first step not opened yet.
 * Returns a sum that changes when any of it does. */
static uint64_t positions(struct srv_stream *st)
{
	struct srv *s = st->s;
	uint64_t sum = 0;

	st->nparked = 0;
	/* woken and about to be opened again first (their shard came), then those waiting */
	for (int l = 0; l < 2; l++)
		for (struct open_step *o = l ? st->j->parked : s->reopen;
		     o && st->nparked < STREAM_PARKED; o = o->next_open) {
			if (o->a->job != st->j)
				continue;
			st->pk_rank[st->nparked] = o->a->rank;
			st->pk_step[st->nparked++] = o->step;
			sum += o->step + 1;
		}
	/* soonest first: the step a rank's consumer waits on before the later ones (a step woken
	 * and parked again goes to the list's end) */
	for (uint32_t i = 1; i < st->nparked; i++)
		for (uint32_t q = i; q > 0 && (st->pk_step[q] < st->pk_step[q - 1] ||
					      (st->pk_step[q] == st->pk_step[q - 1] &&
					       st->pk_rank[q] < st->pk_rank[q - 1])); q--) {
			uint64_t ts = st->pk_step[q];
			uint32_t tr = st->pk_rank[q];
			st->pk_step[q] = st->pk_step[q - 1], st->pk_rank[q] = st->pk_rank[q - 1];
			st->pk_step[q - 1] = ts, st->pk_rank[q - 1] = tr;
		}
	uint64_t lead = 0;

	st->nranks = 0;
	st->adv = 0;
	for (unsigned k = 0; k < s->nlive && st->nranks < STREAM_RANKS; k++) {
		struct att *a = s->live[k];
		if (a->job != st->j || a->dead || a->hostile)
			continue;
		st->rank[st->nranks] = a->rank;
		st->from[st->nranks++] = a->next;
		sum += (a->next + 1) << 20;
		st->adv += a->floor;  /* taken by its consumer */
		lead += a->next > a->floor ? a->next - a->floor : 0;
	}
	st->lead = st->nranks ? (double)lead / st->nranks : 0;
	return sum;
}

/* Under mu. The stream's budget of attached bytes, less room for one more open beside it (a
 * manifest and a shard: two of the largest shards), so that streams that hold their budgets
 * never refuse the node's next job. @whole: what the cache may hold for it at most.
 *  - future: the node's share (stream_share.h) among every stream being read, from the curves
 *    and rates their last plans published, within --cache-size and each uid's
 *    --cache-size-per-uid.
 *  - lru (or more streams than the share looks at): the cache's, or its uid's, split evenly
 *    among that uid's streams; between uids, ldfetch evicts what no job holds, least recently
 *    used first, as a cache that does not know the future would. */
static uint64_t budget(struct srv_stream *st, uint64_t *whole)
{
	struct srv *s = st->s;
	uint64_t b = s->opts.cache_size, big = 0;
	struct sshare_job sj[STREAM_SHARE_MAX];
	struct srv_stream *who[STREAM_SHARE_MAX];
	unsigned n = 0, nuid = 0, self = 0;

	if (s->opts.cache_size_uid && s->opts.cache_size_uid < b)
		b = s->opts.cache_size_uid;
	*whole = b;
	int found = 0;
	for (struct job *j = s->jobs; j; j = j->next) {  /* streams being read, and its own */
		struct srv_stream *o = j == st->j ? st : j->stream;
		if (!o || (!j->attached && j != st->j))
			continue;
		nuid += j->uid == st->j->uid && j != st->j;
		if (n < STREAM_SHARE_MAX) {
			if (j == st->j)
				self = n, found = 1;
			big = o->pub_big > big ? o->pub_big : big;
			who[n] = o;
			sj[n++] = (struct sshare_job){ .uid = j->uid, .rate = o->rate, .lead = o->lead,
						       .pt = o->curve, .npt = o->ncurve };
		} else {
			n++;
		}
	}
	if (s->opts.cache_evict == SRV_EVICT_LRU || n > STREAM_SHARE_MAX || !found || !st->ev) {
		b /= nuid + 1;
		st->pub_grant = b > 2 * st->pub_big ? b - 2 * st->pub_big : 0;
		return st->pub_grant;
	}
	/* the room for one more open: two of the largest shards, but at most a quarter of the
	 * bound (one uid's set of one huge shard must not leave every other uid its floor alone) */
	uint64_t cap = s->opts.cache_size - sshare_reserve(2 * big, s->opts.cache_size);
	uint64_t cap_uid = 0;
	if (s->opts.cache_size_uid)
		cap_uid = s->opts.cache_size_uid - sshare_reserve(2 * big, s->opts.cache_size_uid);
	sshare_run(sj, n, cap, cap_uid, st->ev);
	for (unsigned k = 0; k < n; k++)  /* for status: the shares as one computation gave them */
		who[k]->pub_grant = sj[k].grant;
	return sj[self].grant;
}

/* Under mu. The job's rate, rounds of its walk a second (a round: each rank one step), from
 * the steps its ranks' consumers took since the last measure. Not lowered while its steps wait
 * on the network (a pace the cache imposes is not the job's own: lowering it would shrink its
 * share and slow it further). */
static void measure_rate(struct srv_stream *st, int64_t now)
{
	if (!st->nranks || st->nranks != st->rate_nranks || st->adv < st->rate_adv) {
		st->rate_nranks = st->nranks;  /* a rank came or went: measured again from here */
		st->rate_adv = st->adv;
		st->rate_ns = now;
		return;
	}
	if (now - st->rate_ns < STREAM_RATE_NS)
		return;
	double inst = (double)(st->adv - st->rate_adv) / st->nranks /
		      ((double)(now - st->rate_ns) / 1e9);
	if (!(st->nparked && inst < st->rate))
		st->rate = st->rate > 0 ? 0.75 * st->rate + 0.25 * inst : inst;
	st->rate_adv = st->adv;
	st->rate_ns = now;
}

/* What a file of @n bytes takes in the cache, which counts allocated blocks. */
static uint64_t blocks(uint64_t n)
{
	return (n + 4095) & ~(uint64_t)4095;
}

/* Shards @first.. take @bytes[0..@n) each (a file's bytes): their room in the cache, and the
 * largest shard's again. Only when sizes come, not at every plan. */
static void set_sizes(struct srv_stream *st, uint32_t first, const uint64_t *bytes, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		st->csize[first + i] = blocks(bytes[i]);
	st->big = 0;
	for (uint32_t k = 0; k < st->total; k++)
		st->big = st->csize[k] > st->big ? st->csize[k] : st->big;
}

/* The @i-th unit of round @t of a plan's walk: round 0 is the parked steps, then each rank's next
 * step; round t > 0, each rank's step t after its next. */
static void unit(const struct srv_stream *st, uint64_t t, uint32_t i, uint32_t *rank,
		 uint64_t *step)
{
	if (t == 0 && i < st->nparked) {
		*rank = st->pk_rank[i];
		*step = st->pk_step[i];
	} else {
		uint32_t r = t == 0 ? i - st->nparked : i;
		*rank = st->rank[r];
		*step = st->from[r] + t;
	}
}

/* splan_shards_fn over the job's sampler: the unit's step, unless past the job's end. */
struct walk {
	struct srv_stream *st;
	void *state;
	uint64_t steps_total;
	uint64_t draws;            /* samples drawn so far: at most STREAM_WALK_DRAWS, whatever
				    * the batch, the ranks and the set a client chose */
};

static uint32_t walk_shards(void *arg, uint64_t t, uint32_t i, uint8_t *seen, uint32_t *out,
			    uint32_t max)
{
	struct walk *w = arg;
	struct srv *s = w->st->s;
	uint32_t rank;
	uint64_t step;

	unit(w->st, t, i, &rank, &step);
	if ((w->steps_total && step >= w->steps_total) || w->draws >= STREAM_WALK_DRAWS)
		return 0;
	w->draws += w->st->j->spec.batch ? w->st->j->spec.batch : 1;
	return s->ops.stream_future(s->ops.ctx, w->state, rank, step, 1, seen, out, max);
}

/* The curve a plan leaves, published for the other streams' shares (none with lru), and its
 * shards here for status. */
static void publish(struct srv_stream *st, const struct splan *p)
{
	uint32_t here = 0;

	for (uint32_t k = 0; k < st->total; k++)
		here += st->attached[k];
	pthread_mutex_lock(&st->s->mu);
	if (p->curve) {
		memcpy(st->curve, p->curve, (size_t)p->ncurve * sizeof(*st->curve));
		st->ncurve = p->ncurve;
	}
	st->pub_here = here;
	pthread_mutex_unlock(&st->s->mu);
}

void srv_stream_snap(const struct srv_stream *st, struct srv_job_snap *js)
{
	js->streamed = 1;
	js->stream_shards = st->total;
	js->stream_here = st->pub_here;
	js->stream_share = st->pub_grant;
	js->stream_rate = st->rate;
}

/* One plan (see the top of the file). 0, or -errno when ldfetch cannot be told. */
static int plan(struct srv_stream *st)
{
	struct srv *s = st->s;
	struct job *j = st->j;
	void *state = j->state;
	uint32_t ndrop = 0;
	int lru = s->opts.cache_evict == SRV_EVICT_LRU;
	int64_t now = now_ns();

	pthread_mutex_lock(&s->mu);
	uint64_t moved = positions(st), steps_total = j->steps_total;
	measure_rate(st, now);
	st->pub_big = st->big;
	uint64_t whole;
	uint64_t limit = budget(st, &whole);
	int first = !lru && st->ncurve == 0;
	int failed = j->failed;
	pthread_mutex_unlock(&s->mu);
	if (failed)
		return -ECANCELED;
	st->moved = moved;
	st->plan_ns = now;
	st->dirty = 0;

	/* What to fetch ahead and what to let go: stream_plan.h */
	struct walk wk = { st, state, steps_total, 0 };
	struct sshare_pt curve[SSHARE_POINTS];
	/* the cache may have no room for what is wanted (ldfetch waits): what is kept for later
	 * yields to it */
	int lean = st->nsent && now - st->in_ns > STREAM_STARVE_NS;
	struct splan p = { .total = st->total, .attached = st->attached, .bytes = st->csize,
			   .limit = limit, .whole = whole, .lru = lru, .at_ns = st->at_ns,
			   .now = now, .grace_ns = STREAM_GRACE_NS,
			   .lean = lean,
			   .units0 = st->nparked + st->nranks, .units = st->nranks,
			   .horizon = STREAM_HORIZON, .shards = walk_shards, .arg = &wk,
			   .list_max = CTL_SHARD_LIST_MAX, .used_ns = st->used_ns, .seen = st->seen,
			   .order = st->order, .want = st->list, .let = st->list + CTL_SHARD_LIST_MAX,
			   /* the walk for a curve goes farther: at most every STREAM_CURVE_NS */
			   .curve = lru || (!first && now - st->curve_ns < STREAM_CURVE_NS) ? NULL : curve,
			   .curve_until = whole };
	if (p.curve)
		st->curve_ns = now;
	if (first) {  /* no curve yet: one walk for it, then the share with it */
		p.limit = 0;
		p.lean = 1;
		if (splan_run(&p) == 0) {
			publish(st, &p);
			pthread_mutex_lock(&s->mu);
			p.limit = budget(st, &whole);
			pthread_mutex_unlock(&s->mu);
		}
		p.lean = lean;
		wk.draws = 0;
	}
	if (!lru && (p.limit > st->grant + st->big || p.limit + st->big < st->grant))
		srv_notice(s, 2, "job %s: its share of the node cache: %llu bytes (%.1f steps a "
			   "second a rank)", j->name, (unsigned long long)p.limit, st->rate);
	st->grant = p.limit;
	if (splan_run(&p) == -EFBIG) {
		uint32_t rank;
		uint64_t step;
		unit(st, p.fail_t, p.fail_i, &rank, &step);
		snprintf(st->why, sizeof(st->why), "step %llu of rank %u reads %u shards (%llu bytes "
			 "in the cache), more than the node cache may hold for it (%llu bytes): read "
			 "it with windowed sampling (--sampling block), or give loaderd a larger "
			 "--cache-size", (unsigned long long)step, rank, p.fail_shards,
			 (unsigned long long)p.fail_bytes, (unsigned long long)whole);
		return -EFBIG;
	}
	publish(st, &p);
	/* Wanted, sent when it changed, and before the drops (ldfetch delivers again a dropped
	 * shard its last list still wants). */
	if (p.nwant != st->nsent || memcmp(st->list, st->sent, (size_t)p.nwant * sizeof(*st->list))) {
		memcpy(st->sent, st->list, (size_t)p.nwant * sizeof(*st->list));
		st->nsent = p.nwant;
		if (send_list(st, CTL_SHARD_WANT, st->list, p.nwant) < 0)
			return -EIO;
	}
	/* Let go: detached first (a step's pin answers -EBUSY: the next plan tries again). */
	uint32_t *let = st->list + CTL_SHARD_LIST_MAX;
	for (uint32_t c = 0; c < p.nlet; c++) {
		uint32_t k = let[c];
		int ret = s->ops.shard_detach(s->ops.ctx, state, k);
		if (ret == 0) {
			st->attached[k] = 0;
			let[ndrop++] = k;
			st->dropped++;
		} else if (ret == -ENOENT) {
			st->attached[k] = 0;  /* not attached after all: nothing to tell */
		}
	}
	if (ndrop && send_list(st, CTL_SHARD_DROP, st->list + CTL_SHARD_LIST_MAX, ndrop) < 0)
		return -EIO;
	return 0;
}

/* One message from ldfetch. 0, or -errno with @why: the stream ends and the job fails. */
static int take(struct srv_stream *st, char *why, size_t whylen)
{
	struct srv *s = st->s;
	char buf[CTL_MSG_MAX];
	uint16_t type;
	int fds[CTL_FDS_BATCH], nfds = 0;

	ssize_t n = ctl_recv_fds(st->fd, buf, &type, fds, CTL_FDS_BATCH, &nfds);
	if (n == -EPIPE) {
		/* A child that exits with our lists unread resets the socket, and the kernel reports
		 * the reset before the message it sent last (its CTL_ERROR): read once more. */
		struct pollfd pf = { .fd = st->fd, .events = POLLIN };
		if (poll(&pf, 1, 0) == 1 && (pf.revents & POLLIN))
			n = ctl_recv_fds(st->fd, buf, &type, fds, CTL_FDS_BATCH, &nfds);
	}
	if (n == -EINTR || n == -EAGAIN)
		return 0;
	if (n < 0) {
		snprintf(why, whylen, "the node cache's fetcher (ldfetch) is gone: %s",
			 strerror((int)-n));
		return -EIO;
	}
	if (type == CTL_ERROR && (size_t)n == sizeof(struct ctl_error) && nfds == 0) {
		struct ctl_error e;
		memcpy(&e, buf, sizeof(e));
		e.text[sizeof(e.text) - 1] = '\0';
		snprintf(why, whylen, "%s", e.text);
		return e.err > 0 && e.err < 4096 ? -e.err : -EIO;
	}
	if (type == CTL_SHARD_SIZES && nfds == 0) {  /* the store's sizes: the plan's bytes */
		struct ctl_shard_sizes h;
		if ((size_t)n >= sizeof(h))
			memcpy(&h, buf, sizeof(h));
		if ((size_t)n < sizeof(h) || h.count == 0 || h.count > CTL_SHARD_SIZES_MAX ||
		    (size_t)n != sizeof(h) + 8 * (size_t)h.count || h.first >= st->total ||
		    h.count > st->total - h.first) {
			snprintf(why, whylen, "the node cache's fetcher sent shard sizes that are not "
				 "this set's %u shards", st->total);
			return -EIO;
		}
		uint64_t z[CTL_SHARD_SIZES_MAX];  /* a lie costs only the plan's budget */
		memcpy(z, buf + sizeof(h), 8 * (size_t)h.count);
		set_sizes(st, h.first, z, h.count);
		st->dirty = 1;
		return 0;
	}
	char w[CTL_TEXT_MAX];
	uint32_t k, said;
	if (type != CTL_SHARD_FDS) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		snprintf(why, whylen, "the node cache's fetcher answered out of turn (message type "
			 "%u, %d descriptors)", type, nfds);
		return -EIO;
	}
	int bad = ctl_check_shard_one(buf, (size_t)n, nfds, st->total, &k, &said, w, sizeof(w)) < 0;
	if (!bad && !srv_fd_regular(fds[0]))
		bad = 1, snprintf(w, sizeof(w), "shard %u: not a regular file", k);
	if (bad) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		snprintf(why, whylen, "the node cache's fetcher sent %.200s", w);
		return -EIO;
	}
	if (st->attached[k]) {  /* delivered twice: already here */
		close(fds[0]);
		return 0;
	}
	int ret = s->ops.shard_attach(s->ops.ctx, st->j->state, k, fds[0], why, whylen);
	if (ret == -EEXIST)
		ret = 0;  /* attached at the job's open (shard 0) */
	if (ret < 0)
		return ret;
	st->attached[k] = 1;
	st->at_ns[k] = st->used_ns[k] = st->in_ns = now_ns();
	st->fetched++;
	st->dirty = 1;
	srv_shard_ready(s, st->j);
	return 0;
}

/* ldfetch's socket could not be written: it may have said why before it went (a failed fetch
 * ends its child). That reason, as take() returns it (< 0, in @why), else 0. */
static int fetcher_said(struct srv_stream *st, char *why, size_t whylen)
{
	struct pollfd pf = { .fd = st->fd, .events = POLLIN };

	while (poll(&pf, 1, 0) > 0 && (pf.revents & POLLIN)) {
		int ret = take(st, why, whylen);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static void *stream_main(void *p)
{
	struct srv_stream *st = p;
	struct srv *s = st->s;
	char why[CTL_TEXT_MAX] = "";
	int ret = 0;

	while (!atomic_load(&st->stop) && ret == 0) {
		struct pollfd pf = { .fd = st->fd, .events = POLLIN };
		int r = poll(&pf, 1, 20);
		if (r < 0 && errno != EINTR) {
			ret = -errno;
			snprintf(why, sizeof(why), "poll: %s", strerror(errno));
			break;
		}
		if (r > 0 && (ret = take(st, why, sizeof(why))) < 0)
			break;
		int64_t now = now_ns();
		if (st->dirty || now - st->plan_ns >= STREAM_IDLE_NS ||
		    now - st->plan_ns >= STREAM_PLAN_NS) {
			pthread_mutex_lock(&s->mu);
			uint64_t moved = positions(st);
			pthread_mutex_unlock(&s->mu);
			if (st->dirty || moved != st->moved || now - st->plan_ns >= STREAM_IDLE_NS) {
				/* its CPU is the job's, as a worker's: counted for its uid */
				int64_t c0 = ldr_thread_cpu_ns();
				ret = plan(st);
				int64_t c1 = ldr_thread_cpu_ns();
				pthread_mutex_lock(&s->mu);
				if (c1 > c0) {
					st->j->cpu_ns += (uint64_t)(c1 - c0);
					srv_use_charge(s, st->j, c1 - c0);
				}
				pthread_mutex_unlock(&s->mu);
				if (ret == -ECANCELED)
					break;  /* the job failed: its fetcher may go */
				if (ret == -EFBIG)
					snprintf(why, sizeof(why), "%.40s: %.200s",
						 st->j->spec.dataset, st->why);
				else if (ret < 0 && (ret = fetcher_said(st, why, sizeof(why))) >= 0) {
					ret = -EIO;
					snprintf(why, sizeof(why), "the node cache's fetcher (ldfetch) "
						 "is gone: it cannot be told what to fetch");
				}
			}
		}
	}
	if (ret < 0 && ret != -ECANCELED && !atomic_load(&st->stop))
		srv_job_stream_fail(s, st->j, -ret, why);
	srv_notice(s, 2, "job %s: stream ends: %llu shards attached, %llu let go", st->j->name,
		   (unsigned long long)st->fetched, (unsigned long long)st->dropped);
	shutdown(st->fd, SHUT_RDWR);  /* its ldfetch child exits */
	return NULL;
}

int srv_stream_start(struct srv *s, struct job *j, int fd, const uint8_t *attached, char *why,
		     size_t whylen)
{
	uint32_t total = j->info.stream_shards;
	struct srv_stream *st = calloc(1, sizeof(*st));

	if (!st) {
		close(fd);
		return snprintf(why, whylen, "out of memory"), -ENOMEM;
	}
	st->s = s;
	st->j = j;
	st->fd = fd;
	st->total = total;
	st->attached = calloc(2 * (size_t)total, 1);
	st->seen = st->attached ? st->attached + total : NULL;
	st->list = calloc(2 * CTL_SHARD_LIST_MAX, sizeof(*st->list));
	st->sent = calloc(CTL_SHARD_LIST_MAX, sizeof(*st->sent));
	st->at_ns = calloc(total ? total : 1, sizeof(*st->at_ns));
	st->used_ns = calloc(total ? total : 1, sizeof(*st->used_ns));
	st->order = calloc(total ? total : 1, sizeof(*st->order));
	st->csize = calloc(total ? total : 1, sizeof(*st->csize));
	st->ev = calloc(STREAM_SHARE_MAX * SSHARE_POINTS, sizeof(*st->ev));
	if (st->csize)
		set_sizes(st, 0, j->info.shard_bytes, total);
	st->bytes = sizeof(*st) + 30 * (size_t)total + 3 * CTL_SHARD_LIST_MAX * sizeof(uint32_t) +
		    STREAM_SHARE_MAX * SSHARE_POINTS * sizeof(*st->ev);
	if (!st->attached || !st->list || !st->sent || !st->at_ns || !st->used_ns || !st->order ||
	    !st->csize || !st->ev) {
		srv_stream_free(st);
		return snprintf(why, whylen, "out of memory"), -ENOMEM;
	}
	memcpy(st->attached, attached, total);
	st->in_ns = now_ns();
	pthread_mutex_lock(&s->mu);
	int ret = srv_mem_check(s, j->uid, st->bytes, "its stream", why, whylen);
	if (ret == 0) {
		srv_mem_add(s, j->uid, (int64_t)st->bytes);
		j->mem_table += st->bytes;
	}
	pthread_mutex_unlock(&s->mu);
	if (ret < 0) {
		st->bytes = 0;
		srv_stream_free(st);
		return ret;
	}
	pthread_mutex_lock(&s->mu);  /* j->stream is read under mu (budget) */
	ret = pthread_create(&st->th, NULL, stream_main, st);
	if (ret == 0)
		j->stream = st;
	pthread_mutex_unlock(&s->mu);
	if (ret) {
		srv_stream_free(st);
		return snprintf(why, whylen, "starting its stream: %s", strerror(ret)), -ret;
	}
	return 0;
}

void srv_stream_stop(struct srv_stream *st)
{
	if (!st)
		return;
	atomic_store(&st->stop, 1);
	pthread_join(st->th, NULL);
	srv_stream_free(st);
}

/* The memory charged for it goes with the job's table. */
void srv_stream_free(struct srv_stream *st)
{
	if (!st)
		return;
	if (st->fd >= 0)
		close(st->fd);
	free(st->attached);
	free(st->list);
	free(st->sent);
	free(st->at_ns);
	free(st->used_ns);
	free(st->order);
	free(st->csize);
	free(st->ev);
	free(st);
}
