/* srv_jobs.c - the server's job registry. It owns
 *   - s->jobs: jobs by owner and name, their ranks (struct rank_state), linger and forgetting;
 *   - job opens (CTL_JOB_OPEN): the checks on the control thread, then an opener thread per
 *     open (ops->job_open for a new job, the ring's creation), then the attach, which makes the
 *     connection's att (srv_att.c) and tells the client (CTL_JOB_OK) or why not;
 *   - a rank's stats (CTL_STATS) and housekeeping: rates, hostile consumers, failed and idle
 *     jobs, idle connections.
 *
 * DESIGN
 * A job is known by its owner's uid and its name (a name is per owner; who else may see and join
 * it: ctl.h, enum ctl_share); each of its ranks is either attached (a live connection, a ring and
 * a doorbell: an att) or detached with a resume step. One att = one connection's ring: it is
 * created here on CTL_JOB_OPEN and retired when the connection goes (srv_att.c).
 *
 * A consumer whose words break the state machine is dropped with an error message: the workers
 * notice (-EBADMSG from ring_prod_poll), mark the att hostile and wake the control loop, whose
 * housekeeping does the dropping. A job with no rank attached lingers for opts.linger_ms, then
 * is forgotten.
 *
 * Threads: everything here runs under s->mu, on the control thread, except the opener threads
 * (opener_main), which take it around what they share. It uses srv_core.c, srv_att.c,
 * srv_conn.c (to answer and close) and srv_snap.c (a rank's figures). */
#include "loader/srv_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- jobs ---- */

struct job *srv_job_find(struct srv *s, uid_t owner, const char *name)
{
	for (struct job *j = s->jobs; j; j = j->next)
		if (j->uid == owner && !strcmp(j->name, name))
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
	struct uid_use *u = srv_uid(s, j->uid);
	if (u && u->jobs)
		u->jobs--;
	srv_mem_add(s, j->uid, -(int64_t)(j->mem_table + j->mem_state));
	j->mem_table = j->mem_state = 0;
	srv_fds_add(s, j->uid, -(int64_t)j->fds);
	j->fds = 0;
	/* Closed by srv_job_close_all, without the lock: freeing a large index takes a while. */
	j->next = s->job_grave;
	s->job_grave = j;
}

void srv_job_close_all(struct srv *s, struct job *dead)
{
	while (dead) {
		struct job *j = dead;
		dead = j->next;
		srv_stream_stop(j->stream);  /* before the set it attaches to goes */
		j->stream = NULL;
		if (s->ops.job_close)
			s->ops.job_close(s->ops.ctx, j->state);
		free(j->ranks);
		free(j->s3_files);
		ldr_split_log_fini(&j->split);
		free(j->split_ns);
		free(j->split_have);
		free(j->split_w);
		free(j->seed_ns);
		free(j);
	}
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
	if (a->balance != b->balance)
		return "balance";
	if (a->share != b->share || a->share_gid != b->share_gid)
		return "share (the owner's opens must all share it, or none, with one group)";
	if (a->weight != b->weight)
		return "weight";
	if (a->block != b->block)
		return "block (records per block of block sampling)";
	if (a->window != b->window)
		return "window (blocks per window of block sampling)";
	if (memcmp(a, b, sizeof(*a)))
		return "on_bad or slots";
	return NULL;
}

/* Under mu (the uid's count of descriptors): close and uncount @r's shards. */
static void req_drop_shards(struct srv *s, struct open_req *r)
{
	for (uint32_t i = 0; i < r->nshards; i++)
		if (r->shard_fds[i] >= 0)  /* job_open takes those it keeps */
			close(r->shard_fds[i]);
	srv_fds_add(s, r->uid, -(int64_t)r->shards_charge);
	r->shards_charge = 0;
	free(r->shard_fds);
	r->shard_fds = NULL;
	r->nshards = 0;
}

/* Under mu. */
static void req_free(struct srv *s, struct open_req *r)
{
	srv_s3_wipe(&r->s3, &r->s3_len);
	if (r->fd >= 0)
		close(r->fd);
	req_drop_shards(s, r);
	if (r->stream_fd >= 0)
		close(r->stream_fd);
	if (r->bell >= 0)
		close(r->bell);
	ring_destroy(r->ring);
	free(r);
}

/* Under mu. The ring of @r's rank, as the job now stands (its info is known). */
static void req_desc(struct srv *s, struct open_req *r)
{
	struct job *j = r->job;
	struct rank_state *rs = &j->ranks[r->spec.rank];
	struct ring_desc *d = &r->d;

	*d = j->info.ring;
	d->slots = r->spec.slots ? r->spec.slots : s->opts.default_slots;
	d->rank = r->spec.rank;
	d->world = r->spec.world;
	d->job_id = j->id;
	d->first_step = rs->started ? rs->resume : r->spec.start_epoch * j->info.steps_per_epoch;
	d->steps_total = j->steps_total;
	if (d->steps_total && d->first_step > d->steps_total)
		d->first_step = d->steps_total;
	d->steps_per_epoch = j->info.steps_per_epoch;
}

#define FAIL_REQ(r, err, ...) ((r)->ret = -(err), snprintf((r)->why, sizeof((r)->why), __VA_ARGS__))

/* Under mu. A start position (CTL_START_AT) checked against the job as it now stands: the
 * dataset's identity when the client names one (from a resume token), the step within the epoch
 * and the job's end. 0 with r->d.first_step set to it, whatever the rank's resume step was (the
 * client's checkpoint decides what was consumed), or -EINVAL with the reason in @r. Nothing
 * before it is filled: the sampler computes any step directly. */
static int start_at(struct open_req *r)
{
	static const uint8_t zero[CTL_DATASET_ID_SIZE];
	const struct ctl_job_open *spec = &r->spec;
	struct job *j = r->job;
	uint64_t spe = j->info.steps_per_epoch;

	if (memcmp(spec->dataset_id, zero, sizeof(zero)) &&
	    memcmp(j->info.dataset_id, zero, sizeof(zero)) &&
	    memcmp(spec->dataset_id, j->info.dataset_id, sizeof(zero))) {
		FAIL_REQ(r, EINVAL, "job %s: resume token: dataset: this dataset is not the one the "
			 "token was made for (its index and checksums differ)", j->name);
		return -EINVAL;
	}
	if (spec->at_step >= spe) {
		FAIL_REQ(r, EINVAL, "job %s: start: at_step %llu is not below the %llu steps of an "
			 "epoch", j->name, (unsigned long long)spec->at_step, (unsigned long long)spe);
		return -EINVAL;
	}
	/* at_step < spe <= samples <= CTL_STEP_LIMIT (the sampler's bound): no underflow */
	if (spec->at_epoch > (CTL_STEP_LIMIT - spec->at_step) / spe) {
		FAIL_REQ(r, EINVAL, "job %s: start: at_epoch: epoch %llu step %llu of %llu-step epochs "
			 "is past the step limit %llu", j->name, (unsigned long long)spec->at_epoch,
			 (unsigned long long)spec->at_step, (unsigned long long)spe,
			 (unsigned long long)CTL_STEP_LIMIT);
		return -EINVAL;
	}
	if (j->steps_total && spec->at_epoch * spe + spec->at_step > j->steps_total) {
		FAIL_REQ(r, EINVAL, "job %s: start: epoch %llu step %llu is past the job's end (%llu "
			 "steps)", j->name, (unsigned long long)spec->at_epoch,
			 (unsigned long long)spec->at_step, (unsigned long long)j->steps_total);
		return -EINVAL;
	}
	r->d.first_step = spec->at_epoch * spe + spec->at_step;
	return 0;
}

/* The job's steps, now that the steps of an epoch are known: its first step and its end within
 * CTL_STEP_LIMIT (ctl.h), so that no step number computed from them wraps. 0, or -EINVAL with
 * the field in @why. */
static int steps_check(const struct ctl_job_open *spec, const struct srv_job_info *info,
		       char *why, size_t whylen)
{
	uint64_t spe = info->steps_per_epoch;

	if (spe == 0) {
		snprintf(why, whylen, "the job has no steps");
		return -EINVAL;
	}
	/* ctl_check_job_open bounded start_epoch + epochs by CTL_STEP_LIMIT: the sum is exact */
	uint64_t epochs = spec->start_epoch + spec->epochs, at;
	if (epochs > CTL_STEP_LIMIT / spe) {
		/* the step exactly (a double rounds 2^62 + 16 to 2^62, the limit itself) */
		char step[32] = "past 2^64";
		if (!__builtin_mul_overflow(epochs, spe, &at))
			snprintf(step, sizeof(step), "%llu", (unsigned long long)at);
		if (spec->epochs)
			snprintf(why, whylen, "start_epoch: %llu + %u epochs of %llu steps end at step "
				 "%s, past the step limit %llu", (unsigned long long)spec->start_epoch,
				 spec->epochs, (unsigned long long)spe, step,
				 (unsigned long long)CTL_STEP_LIMIT);
		else
			snprintf(why, whylen, "start_epoch: %llu of %llu steps starts at step %s, past "
				 "the step limit %llu", (unsigned long long)spec->start_epoch,
				 (unsigned long long)spe, step, (unsigned long long)CTL_STEP_LIMIT);
		return -EINVAL;
	}
	return 0;
}

/* An opener thread: the job's open (when this request made the job) and the ring's creation, both
 * without the lock: a dataset on a slow or hung file system, or a large ring to populate, delays
 * only this client. */
static void *opener_main(void *p)
{
	struct open_req *r = p;
	struct srv *s = r->srv;
	struct job *j = r->job;
	char why[CTL_TEXT_MAX];
	int ret;

	/* An s3:// dataset through the node cache: ldfetch asks the store with this client's own
	 * credentials (every rank's, not only the creator's: the store's answer to each is its
	 * proof) and answers with descriptors, as a client would have sent them. */
	int fetched = 0;
	struct stat fst;
	uint64_t *files = NULL;
	uint32_t nfiles = 0;
	why[0] = '\0';
	if (r->s3) {
		ret = srv_fetch(s, r, why, sizeof(why));
		if (ret == 0 && fstat(r->fd, &fst) < 0)
			ret = -errno;
		/* Streamed: only shard 0 came; each shard is checked against the manifest's line
		 * at its attach, so the manifest's version is the set's. */
		nfiles = r->stream_fd >= 0 ? 0 : r->nshards;
		if (ret == 0 && nfiles && !(files = calloc(nfiles, 2 * sizeof(*files))))
			ret = -ENOMEM;
		for (uint32_t i = 0; ret == 0 && i < nfiles; i++) {
			struct stat sst;
			if (fstat(r->shard_fds[i], &sst) < 0)
				ret = -errno;
			files[2 * i] = (uint64_t)sst.st_dev;
			files[2 * i + 1] = (uint64_t)sst.st_ino;
		}
		fetched = ret == 0 ? 1 : ret;
	}
	uint8_t *came = NULL;  /* a streamed set: the shards that came with the open */
	if (r->creator && fetched > 0 && r->stream_fd >= 0) {
		if (!(came = calloc(r->nshards, 1)))
			fetched = -ENOMEM;
		for (uint32_t i = 0; came && i < r->nshards; i++)
			came[i] = r->shard_fds[i] >= 0;
	}
	if (r->creator) {
		void *state = NULL;
		struct srv_job_info info;
		memset(&info, 0, sizeof(info));
		static const struct ctl_augment none;
		struct srv_dataset ds = { .fd = r->fd, .shards = r->shard_fds,
					  .nshards = r->nshards, .uid = r->uid,
					  .stream = r->stream_fd >= 0,
					  .aug = memcmp(&j->aug, &none, sizeof(none)) ? &j->aug : NULL };
		if (fetched > 0) {
			pthread_mutex_lock(&s->mu);
			j->dev = fst.st_dev;  /* the object versions the job reads (its later ranks') */
			j->ino = fst.st_ino;
			j->s3_files = files;
			j->s3_nfiles = nfiles;
			files = NULL;
			/* counted with the job's table (its shards' descriptors, 2 each, were checked) */
			j->mem_table += (uint64_t)nfiles * 2 * sizeof(*j->s3_files);
			srv_mem_add(s, j->uid, (int64_t)nfiles * 2 * (int64_t)sizeof(*j->s3_files));
			pthread_mutex_unlock(&s->mu);
		}
		ret = fetched < 0 ? fetched :
		      s->ops.job_open(s->ops.ctx, &r->spec, &ds, &state, &info, why, sizeof(why));
		if (ret == 0 && r->spec.balance)
			info.ring.batch = CTL_BALANCE_CAP(r->spec.batch);  /* room for a larger share */
		if (ret == 0 && (ret = steps_check(&r->spec, &info, why, sizeof(why))) < 0 &&
		    s->ops.job_close)
			s->ops.job_close(s->ops.ctx, state);
		if (ret == 0 && r->stream_fd >= 0 && !info.stream_shards) {
			snprintf(why, sizeof(why), "%.160s: the node cache streamed a set the job "
				 "does not read as one", r->spec.dataset);
			ret = -EPROTO;
			if (s->ops.job_close)
				s->ops.job_close(s->ops.ctx, state);
		}
		/* A streamed set's shards come after: it may come to hold every one, as the
		 * reservation of its first batch counted (2 each, and the manifest). */
		if (ret == 0 && info.stream_shards && info.fds < 2 * info.stream_shards + 2)
			info.fds = 2 * info.stream_shards + 2;
		pthread_mutex_lock(&s->mu);
		req_drop_shards(s, r);  /* the job holds its own (info.fds) */
		if (ret == 0) {
			char what[CTL_JOB_NAME_MAX + 64];
			snprintf(what, sizeof(what), "its index and record buffers");
			j->state = state;  /* closed with the job, whatever follows */
			ret = srv_mem_check(s, j->uid, info.mem_bytes, what, why, sizeof(why));
			if (ret == 0) {
				snprintf(what, sizeof(what), "job %s's dataset", j->name);
				ret = srv_fds_check(s, j->uid, info.fds, what, why, sizeof(why));
			}
		}
		if (ret == 0) {
			srv_fds_add(s, j->uid, (int64_t)info.fds);
			j->fds = info.fds;
			srv_mem_add(s, j->uid, (int64_t)info.mem_bytes);
			j->mem_state = info.mem_bytes;
			j->info = info;
			if (r->spec.epochs)
				j->steps_total = (r->spec.start_epoch + r->spec.epochs) * info.steps_per_epoch;
			if (r->stream_fd >= 0) {  /* its thread takes the socket */
				int sfd = r->stream_fd;
				r->stream_fd = -1;
				pthread_mutex_unlock(&s->mu);
				ret = srv_stream_start(s, j, sfd, came, why, sizeof(why));
				pthread_mutex_lock(&s->mu);
			}
		}
		if (ret < 0 && !j->failed) {
			j->failed = 1;
			j->fail_err = -ret;
			snprintf(j->fail_msg, sizeof(j->fail_msg), "%s", why[0] ? why : strerror(-ret));
		}
		j->opening = 0;
		pthread_cond_broadcast(&s->open_cv);
	} else {
		pthread_mutex_lock(&s->mu);
		while (j->opening)
			pthread_cond_wait(&s->open_cv, &s->mu);
		req_drop_shards(s, r);
		if (fetched < 0) {
			FAIL_REQ(r, -fetched, "job %s: %.*s", j->name,
				 (int)(sizeof(r->why) - CTL_JOB_NAME_MAX - 16), why);
			goto done;
		}
		if (fetched > 0 && !j->failed) {
			/* the same object versions as the job's, else named: a job reads one */
			long at = fst.st_dev != j->dev || fst.st_ino != j->ino ? -1 : -2;
			if (at == -2 && j->s3_nfiles != nfiles)
				at = -1;
			for (uint32_t i = 0; at == -2 && i < nfiles; i++)
				if (files[2 * i] != j->s3_files[2 * i] ||
				    files[2 * i + 1] != j->s3_files[2 * i + 1])
					at = (long)i;
			free(files);
			files = NULL;
			if (at != -2) {
				char what[64] = "its manifest (or .dpk)";
				if (at >= 0)
					snprintf(what, sizeof(what), "shard %ld of its manifest", at);
				FAIL_REQ(r, ESTALE, "job %s: %.*s: %s changed in the store since the "
					 "job opened it (another ETag); a job reads one version", j->name,
					 80, r->spec.dataset, what);
				goto done;
			}
		}
	}
	/* under mu */
	if (j->failed) {
		FAIL_REQ(r, j->fail_err ? j->fail_err : EIO, "job %s%s: %.*s", j->name,
			 r->creator ? "" : " failed", (int)(sizeof(r->why) - CTL_JOB_NAME_MAX - 16),
			 j->fail_msg);
		goto done;
	}
	req_desc(s, r);
	if (r->spec.start == CTL_START_AT && start_at(r) < 0)
		goto done;
	uint64_t bytes;
	ret = ring_size(&r->d, &bytes);
	if (ret < 0) {
		FAIL_REQ(r, -ret, "job %s: ring of %u slots x %u samples x %llu bytes: %s", j->name,
			 r->d.slots, r->d.batch, (unsigned long long)r->d.sample_bytes, strerror(-ret));
		goto done;
	}
	char what[CTL_JOB_NAME_MAX + 64];
	snprintf(what, sizeof(what), "job %s rank %u's ring", j->name, r->spec.rank);
	ret = srv_mem_check(s, r->uid, bytes, what, r->why, sizeof(r->why));
	if (ret < 0) {
		r->ret = ret;
		goto done;
	}
	srv_mem_add(s, r->uid, (int64_t)bytes);
	r->bytes = bytes;
	pthread_mutex_unlock(&s->mu);

	r->bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ret = r->bell < 0 ? -errno : ring_create(&r->d, s->opts.ring_flags, &r->ring);
	pthread_mutex_lock(&s->mu);
	if (ret < 0)
		FAIL_REQ(r, -ret, "job %s rank %u: creating the ring: %s", j->name, r->spec.rank,
			 strerror(-ret));
done:
	free(files);
	free(came);
	r->next = s->opened;
	s->opened = r;
	srv_wake_control(s);  /* before openers--: srv_destroy may free s once it is 0 */
	s->openers--;
	pthread_cond_broadcast(&s->open_cv);
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Under mu, control thread. The split seed @c sent before opening @r (CTL_SPLIT_SEED, checked
 * by ctl_check_split): it must be for this job's shape and this rank's first step. A job that
 * no rank has attached to yet (a new one: all its ranks send the same seed, the first to
 * attach seeds it) starts its split log from it: the seed's weights from its step on,
 * the next update the first multiple of LDR_SHARES_EVERY above it, and the seed's reports for
 * the updates whose reports were released before it (seed_report in srv_workers.c). A job that
 * holds a log keeps it; only this rank's column of the seed's reports goes into *@mine (its
 * update *@k1, *@rows of them; NULL when none), for the updates still pending whose report
 * this rank released before its first step, in a ring that is gone (seed_report). 0, or
 * -EINVAL / -ENOMEM with @why. */
static int split_seed_apply(struct job *j, const struct open_req *r, const void *seed,
			    double **mine, uint64_t *k1, uint32_t *rows, char *why, size_t whylen)
{
	struct ctl_split h;
	uint32_t world = r->spec.world;
	int held = 0;

	memcpy(&h, seed, sizeof(h));
	if (!j->spec.balance)
		return snprintf(why, whylen, "job %s: a split seed for a job without balanced "
				"shares", j->name), -EINVAL;
	if (h.world != world || h.slots != r->d.slots || h.from != r->d.first_step)
		return snprintf(why, whylen, "job %s: the split seed is for world %u, %u slots, step "
				"%llu; rank %u opens world %u, %u slots, at step %llu", j->name,
				h.world, h.slots, (unsigned long long)h.from, r->spec.rank, world,
				r->d.slots, (unsigned long long)r->d.first_step), -EINVAL;
	if (j->split.n || j->split_due != LDR_SHARES_EVERY || j->seed_ns)
		held = 1;
	for (uint32_t q = 0; q < world; q++)
		if (j->ranks[q].started)
			held = 1;
	const char *p = (const char *)seed + sizeof(h);
	size_t at = ((size_t)world * 4u + 7u) / 8u * 8u;  /* the reports, after the weights */
	if (held) {
		if (!h.nrows)
			return 0;
		double *ns = malloc((size_t)h.nrows * sizeof(*ns));
		if (!ns)
			return snprintf(why, whylen, "job %s: out of memory for its split seed",
					j->name), -ENOMEM;
		for (uint32_t i = 0; i < h.nrows; i++)
			memcpy(&ns[i], p + at + ((size_t)i * world + r->spec.rank) * sizeof(*ns),
			       sizeof(*ns));
		*mine = ns;
		*k1 = (h.from / LDR_SHARES_EVERY + 1) * LDR_SHARES_EVERY;
		*rows = h.nrows;
		return 0;
	}
	double *ns = malloc(((size_t)h.nrows * world + 1) * sizeof(*ns));
	if (!ns)
		return snprintf(why, whylen, "job %s: out of memory for its split seed", j->name),
			-ENOMEM;
	uint32_t *w = j->split_w;
	memcpy(w, p, (size_t)world * sizeof(*w));
	memcpy(ns, p + at, (size_t)h.nrows * world * sizeof(*ns));
	ldr_split_log_push(&j->split, h.from, w);  /* empty: any step */
	j->split.dropped = 1;  /* the steps before the seed's are not known here */
	j->split_due = (h.from / LDR_SHARES_EVERY + 1) * LDR_SHARES_EVERY;
	j->seed_k1 = j->split_due;
	j->seed_rows = h.nrows;
	j->seed_ns = ns;
	return 0;
}

void srv_on_split_seed(struct srv *s, struct conn *c, const void *body, size_t n)
{
	char why[CTL_TEXT_MAX];

	if (c->att || c->seed) {
		srv_conn_fail(s, c, EINVAL, "a split seed comes once, before the job open");
		return;
	}
	if (ctl_check_split(body, n, 1, why, sizeof(why)) < 0) {
		srv_conn_fail(s, c, EINVAL, "%s", why);
		return;
	}
	c->seed = malloc(n);
	if (!c->seed) {
		srv_conn_fail(s, c, ENOMEM, "out of memory for a split seed");
		return;
	}
	memcpy(c->seed, body, n);
	c->seed_len = n;
}

void srv_on_augment(struct srv *s, struct conn *c, const void *body, size_t n)
{
	char why[CTL_TEXT_MAX];

	if (c->att || c->has_aug) {
		srv_conn_fail(s, c, EINVAL, "augmentations come once, before the job open");
		return;
	}
	if (ctl_check_augment(body, n, why, sizeof(why)) < 0) {
		srv_conn_fail(s, c, EINVAL, "%s", why);
		return;
	}
	memcpy(&c->aug, body, sizeof(c->aug));
	c->has_aug = 1;
}

/* Is the endpoint of the checked CTL_S3_OPEN @body one the node cache fetches from (loaderd
 * --cache-endpoints)? A client names it and ldfetch has the network: an endpoint not listed is
 * left to the client, which fetches with its own rights (logged, with the client's uid). */
static int s3_endpoint_listed(struct srv *s, const void *body)
{
	struct ctl_s3_open h;

	memcpy(&h, body, sizeof(h));
	const char *ep = (const char *)body + sizeof(h) + h.url_len;
	if (ctl_s3_endpoint_listed(s->opts.cache_endpoints, ep, h.endpoint_len))
		return 1;
	srv_notice(s, 2, "an s3 open names the endpoint %.*s, which the node cache does not fetch "
		   "from (loaderd --cache-endpoints): the client fetches itself", (int)h.endpoint_len,
		   ep);
	return 0;
}

void srv_on_s3_open(struct srv *s, struct conn *c, const void *body, size_t n)
{
	char why[CTL_TEXT_MAX];
	struct ctl_s3_ack ack = { .err = 0 };

	if (c->att || c->s3) {
		srv_conn_fail(s, c, EINVAL, "an s3 dataset comes once, before the job open");
		return;
	}
	if (!s->opts.cache) {
		ack.err = EOPNOTSUPP;  /* the client fetches into its user's cache, as without one */
	} else if (ctl_check_s3_open(body, n, why, sizeof(why)) < 0) {
		srv_conn_fail(s, c, EINVAL, "%s", why);
		return;
	} else if (!s3_endpoint_listed(s, body)) {
		ack.err = EPERM;  /* not one to fetch from: the client fetches with its own rights */
	} else if (!(c->s3 = malloc(n))) {
		srv_conn_fail(s, c, ENOMEM, "out of memory for an s3 dataset");
		return;
	} else {
		memcpy(c->s3, body, n);
		c->s3_len = n;
	}
	if (ctl_send(c->fd, CTL_S3_ACK, &ack, sizeof(ack), NULL, 0) < 0)
		srv_conn_close(s, c);
}

void srv_on_split_req(struct srv *s, struct conn *c, const struct ctl_split_req *q)
{
	struct att *a = c->att;
	char buf[CTL_MSG_MAX];
	struct ctl_split h = { .from = q->step };

	if (!a || q->reserved) {
		srv_conn_fail(s, c, EINVAL, "%s", !a ? "split request before a job was opened" :
			      "split request: reserved field is not zero");
		return;
	}
	if (q->step > CTL_STEP_LIMIT) {  /* no position past it exists (ctl.h) */
		srv_conn_fail(s, c, EINVAL, "split request: step %llu is past the step limit %llu",
			      (unsigned long long)q->step, (unsigned long long)CTL_STEP_LIMIT);
		return;
	}
	struct job *j = a->job;
	uint32_t world = j->spec.world;
	if (!j->spec.balance) {
		srv_conn_fail(s, c, EINVAL, "split request: job %s does not balance shares", j->name);
		return;
	}
	if (CTL_SPLIT_SIZE(world, 0) > CTL_MSG_MAX - sizeof(struct ctl_hdr)) {
		srv_conn_fail(s, c, E2BIG, "split request: job %s's %u weights do not fit one "
			      "message", j->name, world);
		return;
	}
	/* Known: decided (below the pending update) and still in the log. */
	const uint32_t *w = NULL;
	if (q->step < j->split_due)
		w = ldr_split_log_known_at(&j->split, q->step, j->split_w);
	if (w) {
		h.world = world;
		memcpy(buf + sizeof(h), w, (size_t)world * sizeof(*w));
	}
	memcpy(buf, &h, sizeof(h));
	if (ctl_send(c->fd, CTL_SPLIT, buf, CTL_SPLIT_SIZE(h.world, 0), NULL, 0) < 0)
		srv_conn_close(s, c);
}

/* Under mu, control thread. Finish @r: attach its ring to its connection, or tell the client why
 * not; then free it. */
static void open_finish(struct srv *s, struct open_req *r)
{
	struct conn *c = r->conn;
	struct job *j = r->job;
	struct rank_state *rs = &j->ranks[r->spec.rank];
	int ret;

	c->opening = NULL;
	rs->pending = 0;
	j->pending--;
	if (r->ret == 0 && r->bytes && !r->ring)
		r->ret = -EIO;
	if (r->ret < 0 || c->closed) {
		srv_mem_add(s, r->uid, -(int64_t)r->bytes);
		if (!c->closed)
			srv_conn_fail(s, c, r->ret, "%s", r->why);
		goto drop_idle;
	}
	double *mine = NULL;
	uint64_t mine_k1 = 0;
	uint32_t mine_rows = 0;
	if (c->seed) {
		char why[CTL_TEXT_MAX];
		ret = split_seed_apply(j, r, c->seed, &mine, &mine_k1, &mine_rows, why, sizeof(why));
		free(c->seed);
		c->seed = NULL;
		if (ret < 0) {
			srv_mem_add(s, r->uid, -(int64_t)r->bytes);
			srv_conn_fail(s, c, -ret, "%s", why);
			goto drop_idle;
		}
	}
	struct att *a = calloc(1, sizeof(*a));
	if (!a) {
		free(mine);
		srv_mem_add(s, r->uid, -(int64_t)r->bytes);
		srv_conn_fail(s, c, ENOMEM, "out of memory");
		goto drop_idle;
	}
	a->seed_ns = mine;  /* freed with a (reap_free) */
	a->seed_k1 = mine_k1;
	a->seed_rows = mine_rows;
	a->ring = r->ring;
	a->bell = r->bell;
	r->ring = NULL;
	r->bell = -1;
	a->bytes = r->bytes;
	a->uid = r->uid;
	j->mem_rings += a->bytes;
	j->atts++;
	a->bell_ev.kind = EV_BELL;
	a->bell_ev.p = a;
	a->job = j;
	a->rank = r->spec.rank;
	a->conn = c;
	a->first = a->next = a->floor = r->d.first_step;
	/* Nothing is published yet: empty until the first step is. */
	if (!r->d.steps_total || r->d.first_step < r->d.steps_total) {
		a->empty_since = now_ns();
		a->empty_step = r->d.first_step;
	}

	struct ctl_job_ok ok = { .job_id = j->id, .first_step = r->d.first_step,
				 .steps_total = j->steps_total,
				 .steps_per_epoch = j->info.steps_per_epoch,
				 .samples = j->info.samples };
	memcpy(ok.dataset_id, j->info.dataset_id, sizeof(ok.dataset_id));
	int fds[2] = { ring_fd(a->ring), a->bell };
	struct epoll_event ee = { .events = EPOLLIN, .data.ptr = &a->bell_ev };
	ret = ctl_send(c->fd, CTL_JOB_OK, &ok, sizeof(ok), fds, 2);
	if (ret == 0 && epoll_ctl(s->ep, EPOLL_CTL_ADD, a->bell, &ee) < 0)
		ret = -errno;
	if (ret == 0)
		ret = srv_live_add(s, a);
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
	j->started += !rs->started;
	rs->started = 1;
	rs->attaches++;
	j->attached++;
	srv_notice(s, 2, "job %s rank %u/%u attached (pid %d) at step %llu, ring %llu MiB%s", j->name,
	       a->rank, r->spec.world, (int)c->pid, (unsigned long long)r->d.first_step,
	       (unsigned long long)(a->bytes >> 20), ring_header(a->ring)->huge ? " (huge pages)" : "");
	pthread_cond_broadcast(&s->cv);
drop_idle:
	if (j->attached == 0 && j->idle_since_ns == 0)
		j->idle_since_ns = now_ns();
	req_free(s, r);
}

void srv_open_finish(struct srv *s)
{
	while (s->opened) {
		struct open_req *r = s->opened;
		s->opened = r->next;
		open_finish(s, r);
	}
}

int srv_open_drain(struct srv *s, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000)
		ts.tv_sec++, ts.tv_nsec -= 1000000000;
	while (s->openers)
		if (pthread_cond_timedwait(&s->open_cv, &s->mu, &ts) == ETIMEDOUT)
			return s->openers ? -ETIMEDOUT : 0;
	return 0;
}

/* Why @fd cannot be read through, or NULL when it can. An O_PATH descriptor needs only search
 * rights on the folders above the file (not read rights on it), and fstat answers through it: it
 * is refused before anything of the file is looked at or said. */
static const char *unreadable(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return "not open";
	if (fl & O_PATH)
		return "O_PATH";
	if ((fl & O_ACCMODE) == O_WRONLY)
		return "write-only";
	return NULL;
}

void srv_on_shard_fds(struct srv *s, struct conn *c, const void *buf, size_t n, int *fds,
		      int nfds)
{
	char why[CTL_TEXT_MAX];
	struct ctl_shard_fds b;

	if (c->att || c->opening) {
		srv_conn_fail(s, c, EINVAL, "shards after the job open");
		return;
	}
	if (ctl_check_shard_fds(buf, n, nfds, c->shards_got, c->shards_total, why,
				sizeof(why)) < 0) {
		srv_conn_fail(s, c, EBADMSG, "%s", why);
		return;
	}
	memcpy(&b, buf, sizeof(b));
	if (!c->shards_got) {
		/* reserved now, whole: while the job opens, its dataset takes these descriptors
		 * over and adds their O_DIRECT twins, all within the reservation (given back when
		 * the connection goes, srv_conn.c) */
		if (srv_set_fds_reserve(s, c->uid, b.total, &c->shards_charge, why,
					sizeof(why)) < 0) {
			srv_conn_fail(s, c, EMFILE, "%s", why);
			return;
		}
		c->shard_fds = malloc((size_t)b.total * sizeof(int));
		if (!c->shard_fds) {
			srv_conn_fail(s, c, ENOMEM, "out of memory for a set of %u shards", b.total);
			return;
		}
		c->shards_total = b.total;
	}
	for (int i = 0; i < nfds; i++) {
		struct stat st;
		const char *no = unreadable(fds[i]);
		/* The client opened each with its own rights; only a regular file is kept. Nothing
		 * of the file is said back but its place in the set. */
		if (no) {
			srv_conn_fail(s, c, EBADF, "shard %u of the set was not opened for reading (%s)",
				      b.first + (uint32_t)i, no);
			return;
		}
		if (fstat(fds[i], &st) < 0 || !S_ISREG(st.st_mode)) {
			srv_conn_fail(s, c, EINVAL, "shard %u of the set is not a regular file",
				      b.first + (uint32_t)i);
			return;  /* the caller closes fds[i..]; those kept go with the conn */
		}
		c->shard_fds[c->shards_got++] = fds[i];
		fds[i] = -1;
	}
	if (ctl_send(c->fd, CTL_SHARD_ACK, &b, sizeof(b), NULL, 0) < 0)
		srv_conn_close(s, c);
}

/* Under mu. Handle CTL_JOB_OPEN from @c: the checks that cost nothing here, then the rest on an
 * opener thread. On failure the connection is closed with the reason. */
void srv_on_job_open(struct srv *s, struct conn *c, const struct ctl_job_open *spec, int fd)
{
	char why[CTL_TEXT_MAX];
	struct ctl_job_open key = *spec;
	struct stat st;
	struct job *j;
	int ret;

	if (c->att || c->opening) {
		srv_conn_fail(s, c, EINVAL, "this connection already has a job");
		goto close_fd;
	}
	if (ctl_check_job_open(spec, why, sizeof(why)) < 0) {
		srv_conn_fail(s, c, EINVAL, "job open: %s", why);
		goto close_fd;
	}
	if (spec->world > s->opts.max_world) {
		srv_conn_fail(s, c, EINVAL, "job %s: world size %u is above this loaderd's limit %u "
			      "(loaderd --max-world)", spec->job, spec->world, s->opts.max_world);
		goto close_fd;
	}
	if (spec->balance && !s->opts.balance) {
		srv_conn_fail(s, c, EPERM, "job %s: balanced shares: this loaderd does not allow them "
			      "(start it with --balance)", spec->job);
		goto close_fd;
	}
	if (c->shards_got != c->shards_total) {
		srv_conn_fail(s, c, EBADMSG, "job %s: dataset %s: %u of the set's %u shards came "
			      "before the job open", spec->job, spec->dataset, c->shards_got,
			      c->shards_total);
		goto close_fd;
	}
	if (c->s3 && (fd >= 0 || c->shards_total ||
		      strncmp(spec->dataset, c->s3 + sizeof(struct ctl_s3_open),
			      ((const struct ctl_s3_open *)(const void *)c->s3)->url_len) ||
		      spec->dataset[((const struct ctl_s3_open *)(const void *)c->s3)->url_len])) {
		srv_conn_fail(s, c, EINVAL, "job %s: an s3 dataset through the node cache names its "
			      "URL as the dataset, and comes with no descriptor", spec->job);
		goto close_fd;
	}
	/* The client opened the dataset with its own rights; a descriptor that cannot read, a FIFO,
	 * a device or a directory is refused here, before anything reads from it. */
	const char *no = fd >= 0 ? unreadable(fd) : NULL;
	if (no) {
		srv_conn_fail(s, c, EBADF, "job %s: dataset %s was not opened for reading (%s)",
			      spec->job, spec->dataset, no);
		goto close_fd;
	}
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
		srv_conn_fail(s, c, EINVAL, "job %s: dataset %s is not a regular file", spec->job,
			      spec->dataset);
		goto close_fd;
	}
	if (fd < 0)
		memset(&st, 0, sizeof(st));
	/* What the ranks agree on: not their rank, nor where each starts. */
	key.rank = 0;
	key.start = 0;
	key.at_epoch = key.at_step = 0;
	memset(key.dataset_id, 0, sizeof(key.dataset_id));
	if (!key.weight)
		key.weight = 1;  /* 0 means 1 (ctl.h): equal specs */
	ctl_block_defaults(key.sampling, &key.block, &key.window);  /* 0 means the default */
	/* Whose job (ctl.h, enum ctl_share): a name is its owner's. A join finds the owner's job or
	 * nothing, and says the same either way, so that nobody learns another user's job names. */
	uid_t owner = spec->share == CTL_SHARE_JOIN ? (uid_t)spec->owner_uid : c->uid;
	key.owner_uid = 0;
	j = srv_job_find(s, owner, spec->job);
	if (spec->share == CTL_SHARE_JOIN) {
		if (!j || !srv_job_visible(c, j)) {
			srv_conn_fail(s, c, ENOENT, "job %s of uid %u: no such job shared with a group of "
				      "yours (its owner opens it first, shared: ldcat --share-group)",
				      spec->job, (unsigned)owner);
			goto close_fd;
		}
		key.share = j->spec.share;
		key.share_gid = j->spec.share_gid;
	} else if (spec->share == CTL_SHARE_GROUP && c->uid != 0 &&
		   !srv_peer_in_group(c->fd, spec->share_gid)) {
		srv_conn_fail(s, c, EPERM, "job %s: share_gid: uid %u is not a member of group %u, so "
			      "it cannot share a job with it", spec->job, (unsigned)c->uid,
			      spec->share_gid);
		goto close_fd;
	}
	if (j) {
		const char *d = spec_diff(&j->spec, &key);
		/* One who joins another uid's job is served with the owner's files: it need not
		 * be able to open them, but what it opens must be the same file. */
		if (!d && !c->s3 && (fd >= 0 || spec->share != CTL_SHARE_JOIN) &&
		    (st.st_dev != j->dev || st.st_ino != j->ino))
			d = "dataset file (the path names another file now, or another client opened another one)";
		if (!d && memcmp(&j->aug, &c->aug, sizeof(c->aug)))
			d = "augment (every rank sends the same augmentations, or none)";
		if (d) {
			srv_conn_fail(s, c, EEXIST, "job %s exists with another %s", spec->job, d);
			goto close_fd;
		}
		if (j->failed) {
			srv_conn_fail(s, c, j->fail_err, "job %s failed: %s", j->name, j->fail_msg);
			goto close_fd;
		}
		struct rank_state *rs = &j->ranks[spec->rank];
		if (rs->att || rs->pending) {
			if (rs->att)
				srv_conn_fail(s, c, EBUSY, "rank %u of job %s is attached (pid %d)",
					      spec->rank, spec->job, (int)rs->att->conn->pid);
			else
				srv_conn_fail(s, c, EBUSY, "rank %u of job %s is being attached",
					      spec->rank, spec->job);
			goto close_fd;
		}
	}
	struct open_req *r = calloc(1, sizeof(*r));
	if (!r) {
		srv_conn_fail(s, c, ENOMEM, "out of memory for job %s", spec->job);
		goto close_fd;
	}
	r->srv = s;
	r->uid = c->uid;
	r->fd = fd;
	/* A set's shards go with the request (still counted in the uid's descriptors); a rank
	 * that joins an open job, or one that joins another uid's, does not need them. */
	if (c->shards_got && c->shards_got == c->shards_total && !j) {
		r->shard_fds = c->shard_fds;
		r->nshards = c->shards_got;
		r->shards_charge = c->shards_charge;
		c->shard_fds = NULL;
		c->shards_got = c->shards_total = 0;
		c->shards_charge = 0;
	} else {
		srv_conn_drop_shards(s, c);
	}
	r->s3 = c->s3;  /* the opener fetches: its credentials go with the request */
	r->s3_len = c->s3_len;
	c->s3 = NULL;
	c->s3_len = 0;
	r->bell = -1;
	r->stream_fd = -1;
	r->conn = c;
	r->spec = *spec;
	ctl_block_defaults(r->spec.sampling, &r->spec.block, &r->spec.window);
	struct uid_use *u = srv_uid(s, c->uid);
	if (!j && u && u->jobs >= s->opts.max_jobs_uid) {
		free(r);
		srv_conn_fail(s, c, EUSERS, "job %s: uid %u has %u jobs, the limit (loaderd "
			      "--max-jobs-per-uid)", spec->job, (unsigned)c->uid, u->jobs);
		goto close_fd;
	}
	/* A new job's rank table is memory a client chooses (world): counted like its rings. */
	uint64_t table = sizeof(*j) + (uint64_t)spec->world * sizeof(*j->ranks);
	if (spec->balance)  /* the split log and an update's scratch */
		table += (uint64_t)spec->world * ((LDR_SHARES_LOG + 1) * sizeof(uint32_t) +
						  sizeof(double) + 1);
	char what[CTL_JOB_NAME_MAX + 64];
	snprintf(what, sizeof(what), "job %s's table of %u ranks", spec->job, spec->world);
	if (!j && srv_mem_check(s, c->uid, table, what, why, sizeof(why)) < 0) {
		free(r);
		srv_conn_fail(s, c, ENOMEM, "%s", why);
		goto close_fd;
	}
	if (!j) {
		j = calloc(1, sizeof(*j));
		if (j)
			j->ranks = calloc(spec->world, sizeof(*j->ranks));
		if (j && j->ranks && spec->balance &&
		    (ldr_split_log_init(&j->split, spec->world) < 0 ||
		     !(j->split_ns = calloc(spec->world, sizeof(*j->split_ns))) ||
		     !(j->split_have = calloc(spec->world, sizeof(*j->split_have))) ||
		     !(j->split_w = calloc(spec->world, sizeof(*j->split_w))))) {
			free(j->ranks);
			j->ranks = NULL;
		}
		if (!j || !j->ranks) {
			if (j) {
				ldr_split_log_fini(&j->split);
				free(j->split_ns);
				free(j->split_have);
				free(j->split_w);
				free(j);
			}
			free(r);
			srv_conn_fail(s, c, ENOMEM, "out of memory for job %s", spec->job);
			goto close_fd;
		}
		snprintf(j->name, sizeof(j->name), "%s", spec->job);
		j->spec = key;
		j->aug = c->aug;
		j->id = ++s->next_job_id;
		j->opening = 1;
		j->split_due = LDR_SHARES_EVERY;  /* balanced shares: the first update */
		j->uid = c->uid;
		if (u)
			u->jobs++;
		j->mem_table = table;
		srv_mem_add(s, j->uid, (int64_t)table);
		j->dev = st.st_dev;
		j->ino = st.st_ino;
		j->next = s->jobs;
		s->jobs = j;
		r->creator = 1;
	}
	r->job = j;
	j->pending++;
	j->ranks[spec->rank].pending = 1;
	c->opening = r;

	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	/* At most one per connection (--max-conns): keep each small. */
	pthread_attr_setstacksize(&at, 1u << 20);
	ret = pthread_create(&th, &at, opener_main, r);
	pthread_attr_destroy(&at);
	if (ret != 0) {
		/* As if the thread had failed at once: the job (if new) fails, the client is told. */
		FAIL_REQ(r, ret, "job %s: cannot start an opener thread: %s", spec->job, strerror(ret));
		if (r->creator) {
			j->opening = 0;
			j->failed = 1;
			j->fail_err = ret;
			snprintf(j->fail_msg, sizeof(j->fail_msg), "%s", r->why);
		}
		open_finish(s, r);
		return;
	}
	s->openers++;
	return;
close_fd:
	if (fd >= 0)
		close(fd);
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
				.slots = rs.slots, .occupancy = rs.occupancy,
				.workers = s->nthreads, .latency_ns = rs.latency_ns };
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
		/* Only attached ranks fill (a detached one's rate was zeroed when it left): the walk
		 * is over s->live, whatever the jobs' world sizes. */
		double dt = (double)(now - s->rate_ns) * 1e-9;
		for (struct job *j = s->jobs; j; j = j->next) {
			j->rate = 0;
			j->demand = 0;
			j->target = 0;
			j->cpu_cores = (double)(j->cpu_ns - j->cpu_snap) * 1e-9 / dt;
			j->cpu_snap = j->cpu_ns;
		}
		for (unsigned i = 0; i < s->nlive; i++) {
			struct att *a = s->live[i];
			struct rank_state *rs = &a->job->ranks[a->rank];
			rs->rate = (double)(rs->samples - rs->rate_samples) / dt;
			rs->rate_samples = rs->samples;
			a->job->rate += rs->rate;
			a->job->demand += dm_rate_peak(&a->dm) * a->job->info.ring.batch;
			a->job->target += a->target;
		}
		s->busy_share = (double)(s->busy_ns - s->busy_snap) * 1e-9 / dt / s->nthreads;
		s->busy_snap = s->busy_ns;
		s->rate_ns = now;
	}

	/* Workers check the words only when they look for work; a consumer that scribbles over a
	 * full ring and never releases would go unnoticed without this sweep. It reads up to
	 * slots words per ring, so it runs at most every 100 ms, not after every event batch (a
	 * client with many deep rings would otherwise make every doorbell cost everyone that). */
	if (now - s->sweep_ns >= 100000000) {
		s->sweep_ns = now;
		for (struct conn *c = s->conns; c; c = c->next) {
			uint64_t fr;
			if (c->att && !c->att->hostile &&
			    ring_prod_scan(c->att->ring, c->att->first, c->att->next, &fr) == -EBADMSG)
				c->att->hostile = 1;
		}
	}
	for (struct conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		if (!c->att && !c->opening && now - c->since_ns >= (int64_t)s->opts.idle_ms * 1000000)
			srv_conn_fail(s, c, ETIMEDOUT, "no job opened within %d ms; closed (loaderd "
				      "--idle-timeout)", s->opts.idle_ms);
		else if (c->att && c->att->hostile)
			srv_conn_fail(s, c, EBADMSG, "job %s rank %u: the ring's state words were corrupted "
				  "by the consumer; dropped", c->att->job->name, c->att->rank);
		else if (c->att && c->att->job->failed && c->att->refs == 0)
			/* Once the steps in flight on its ring are done (srv_workers.c finishes them
			 * and wakes us): the steps before the failed one reach the consumer first. */
			srv_conn_fail(s, c, c->att->job->fail_err, "job %s failed: %s",
				  c->att->job->name, c->att->job->fail_msg);
	}
	for (struct job *j = s->jobs, *next; j; j = next) {
		next = j->next;
		if (j->opening || j->pending)
			continue;
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
