/* resume.c - checkpoints, resume and the consumed-stream log of a trainer rank (resume.h). */
#include "trainer/resume.h"

#include "common/log.h"
#include "common/proc.h"
#include "trainer/ckpt.h"
#include "trainer/fatal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct trn_resume {
	const struct trn_opts *o;
	int rank, world;
	struct trn_ckpt ck;          /* rank 0, when resuming: what was loaded */
	uint8_t tok[LDC_TOKEN_SIZE];
	int resumed;
	int log_fd;                  /* --log-consumed, or -1 */
	/* Balanced shares: the split seed this run started from (every rank: CTL_SPLIT_SEED body,
	 * split_len bytes), or NULL; its header, for the reports released before this run. */
	uint8_t *split;
	uint32_t split_len;
	struct ctl_split seed;
	int split_warned;
	char *line;                  /* one log line: "step S N id ... .\n" */
	size_t line_cap;
};

static volatile sig_atomic_t g_stop;

static void on_stop(int sig)
{
	(void)sig;
	g_stop = 1;
}

int trn_resume_open(const struct trn_opts *o, int rank, int world, struct trn_start *start,
		    struct trn_resume **out)
{
	char path[4096], why[4352];
	struct trn_resume *r;

	*out = NULL;
	if (!o->ckpt_dir && !o->log_consumed)
		return 0;
	r = calloc(1, sizeof(*r));
	if (!r)
		trn_die("out of memory");
	r->o = o;
	r->rank = rank;
	r->world = world;
	r->log_fd = -1;
	*out = r;
	if (o->ckpt_dir)
		proc_on_stop_signals(on_stop, 0);
	if (!o->resume)
		return 0;

	/* Rank 0 decides; the others learn the step and the token. */
	uint64_t hdr[4] = { 0, 0, 0, 0 };  /* found, step, token length, split seed length */
	uint32_t seed_len = 0;
	double latest = 0;
	if (rank == 0) {
		int ret = trn_ckpt_load_newest(o->ckpt_dir, &r->ck, r->tok, path, sizeof(path), why,
					       sizeof(why));
		if (ret < 0)
			trn_die("--resume: %s%s", why, ret == -EBADMSG ? " (remove it to resume from "
				"the checkpoint before it)" : "");
		if (ret == 1) {
			if (r->ck.world != (uint64_t)world)
				trn_die("--resume: %s was written by %" PRIu64 " ranks; this run has %d",
					path, r->ck.world, world);
			if (r->ck.seed != o->seed)
				trn_die("--resume: %s was written with --seed %" PRIu64 "; this run has "
					"%" PRIu64, path, r->ck.seed, o->seed);
			LOG_INFO("resuming from %s at step %" PRIu64, path, r->ck.step);
			hdr[0] = 1, hdr[1] = r->ck.step, hdr[2] = r->ck.token_len;
			hdr[3] = r->ck.split_len;
		} else {
			LOG_INFO("--resume: no checkpoint in %s; starting from step 0", o->ckpt_dir);
		}
	}
	MPI_Bcast(hdr, 4, MPI_UINT64_T, 0, MPI_COMM_WORLD);
	MPI_Bcast(r->tok, LDC_TOKEN_SIZE, MPI_BYTE, 0, MPI_COMM_WORLD);
	if (!hdr[0])
		return 0;
	r->resumed = 1;
	if (hdr[3]) {
		/* the file's checksum held; ctl_check_split bounds it before anything reads it */
		char why2[CTL_TEXT_MAX];
		r->split_len = (uint32_t)hdr[3];
		r->split = malloc(r->split_len);
		if (!r->split)
			trn_die("out of memory");
		if (r->rank == 0)
			memcpy(r->split, r->ck.split, r->split_len);
		MPI_Bcast(r->split, (int)r->split_len, MPI_BYTE, 0, MPI_COMM_WORLD);
		if (r->split_len < sizeof(r->seed) + (size_t)world * 8u)
			trn_die("--resume: the checkpoint's split seed is %u bytes, too short",
				r->split_len);
		memcpy(&r->seed, r->split, sizeof(r->seed));
		seed_len = r->split_len - (uint32_t)world * 8u;
		if (ctl_check_split(r->split, seed_len, 1, why2, sizeof(why2)) < 0)
			trn_die("--resume: the checkpoint's %s", why2);
		memcpy(&latest, r->split + seed_len + (size_t)rank * 8u, sizeof(latest));
		if (r->seed.world != (uint32_t)world || r->seed.from != hdr[1])
			trn_die("--resume: the checkpoint's split seed is for world %u at step %" PRIu64
				"; the checkpoint is at step %" PRIu64, r->seed.world, r->seed.from,
				hdr[1]);
	}
	*start = (struct trn_start){ .step = hdr[1], .token = hdr[2] ? r->tok : NULL,
				     .token_len = (uint32_t)hdr[2], .split = r->split,
				     .split_len = seed_len, .report = latest };
	return 1;
}

void trn_resume_begin(struct trn_resume *r, struct trn_train *t)
{
	struct trn_dev *dev = t->dev;
	size_t total = trn_ddp_total(t->ddp);

	if (!r)
		return;
	if (r->resumed) {
		uint64_t n = r->rank == 0 ? r->ck.n : 0;
		MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
		if (n != total)
			trn_die("--resume: the checkpoint holds %" PRIu64 " parameters; this model has "
				"%zu (another --model or --crop?)", n, total);
		if (r->rank == 0 &&
		    (dev->ops->copy_h2d(dev, TRN_STREAM_COMPUTE, t->params, r->ck.params,
					total * sizeof(float)) < 0 ||
		     dev->ops->copy_h2d(dev, TRN_STREAM_COMPUTE, t->mom, r->ck.mom,
					total * sizeof(float)) < 0 ||
		     dev->ops->sync(dev, TRN_STREAM_COMPUTE) < 0))
			trn_die("device: %s", dev->err);
		if (trn_ddp_broadcast(t->ddp, t->params) < 0 || trn_ddp_broadcast(t->ddp, t->mom) < 0)
			trn_die("%s", trn_ddp_error(t->ddp));
		free(r->ck.params);
		free(r->ck.mom);
		r->ck.params = r->ck.mom = NULL;
	}
	if (r->o->log_consumed) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.%d", r->o->log_consumed, r->rank);
		r->log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (r->log_fd < 0)
			trn_die("--log-consumed %s: %s", path, strerror(errno));
		r->line_cap = (size_t)r->o->batch * 21 + 64;
		r->line = malloc(r->line_cap);
		if (!r->line)
			trn_die("out of memory");
		int n = snprintf(r->line, r->line_cap, "resume %" PRIu64 "\n", t->data->first_step);
		if (write(r->log_fd, r->line, (size_t)n) != n)
			trn_die("--log-consumed %s: %s", path, strerror(errno));
	}
}

/* One line per batch, written with one write(): a process killed in the middle leaves at most a
 * line without its final " ." that a reader drops. */
static void log_batch(struct trn_resume *r, const struct trn_batch *b)
{
	int n = b->ids ? b->count : 0;  /* --synthetic: no sample ids */
	size_t len = (size_t)snprintf(r->line, r->line_cap, "step %" PRIu64 " %d", b->step, n);

	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(r->line + len, r->line_cap - len, " %" PRIu64, b->ids[i]);
	len += (size_t)snprintf(r->line + len, r->line_cap - len, " .\n");
	if (write(r->log_fd, r->line, len) != (ssize_t)len)
		trn_die("--log-consumed: %s", strerror(errno));
}

/* This rank's report that came with the release of step @s (< @next), which the split of the
 * update at @k takes: this run's own, or the seed's for a step before this run began. */
static double report_of(const struct trn_resume *r, const struct trn_data *d, uint64_t k,
			int64_t s)
{
	if (s < 0)
		return 0;  /* before the job: no release, no report */
	if ((uint64_t)s >= d->first_step)
		return trn_data_report_of(d, (uint64_t)s);
	uint64_t k1 = (r->seed.from / CTL_SPLIT_EVERY + 1) * CTL_SPLIT_EVERY;
	if (!r->split || k < k1 || (k - k1) / CTL_SPLIT_EVERY >= r->seed.nrows)
		return 0;  /* not recorded: loaderd took none either */
	double v;
	size_t off = sizeof(r->seed) + ((size_t)r->world * 4u + 7u) / 8u * 8u +
		     ((k - k1) / CTL_SPLIT_EVERY * (size_t)r->world + (size_t)r->rank) * 8u;
	memcpy(&v, r->split + off, sizeof(v));
	return v;
}

/* Balanced shares: the split seed for a checkpoint at @next (CTL_SPLIT_SEED body, shm/ctl.h)
 * into @buf (TRN_CKPT_SPLIT_MAX bytes): loaderd's weights in force at @next and every rank's
 * reports of the updates whose reports were released before @next. Collective. Its length, or
 * 0 when there is none to save (no --balance; the world does not fit one message; loaderd no
 * longer knows the step: warned). */
static uint32_t split_seed(struct trn_resume *r, struct trn_data *d, uint64_t next, uint8_t *buf)
{
	if (!r->o->balance || !d->rep_hist)
		return 0;
	uint32_t slots = d->info.ring->slots, world = (uint32_t)r->world;
	uint32_t rows = CTL_SPLIT_ROWS(next, slots);
	size_t len = CTL_SPLIT_SIZE(world, rows) + (size_t)world * 8u;  /* + the latest reports */
	if (len > TRN_CKPT_SPLIT_MAX) {
		if (r->rank == 0 && !r->split_warned++)
			LOG_WARN("balanced shares: a split seed for %u ranks does not fit a checkpoint "
				 "(%zu bytes, at most %u): a resume on a loaderd that lost the job "
				 "splits evenly from its step", world, len, TRN_CKPT_SPLIT_MAX);
		return 0;
	}
	uint64_t k1 = (next / CTL_SPLIT_EVERY + 1) * CTL_SPLIT_EVERY;
	double mine[TRN_CKPT_SPLIT_MAX / 8], *all = NULL;
	uint32_t per = rows + 1;
	for (uint32_t i = 0; i < rows; i++) {
		uint64_t k = k1 + (uint64_t)i * CTL_SPLIT_EVERY;
		mine[i] = report_of(r, d, k, (int64_t)k - (int64_t)CTL_SPLIT_EVERY - (int64_t)slots);
	}
	mine[rows] = d->report;
	if (r->rank == 0 && !(all = malloc((size_t)per * world * sizeof(*all))))
		trn_die("out of memory");
	MPI_Gather(mine, (int)per, MPI_DOUBLE, all, (int)per, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	if (r->rank != 0)
		return 0;
	struct ctl_split h = { .from = next, .world = world, .slots = slots, .nrows = rows };
	memset(buf, 0, len);
	memcpy(buf, &h, sizeof(h));
	if (trn_data_split_weights(d, next, (uint32_t *)(void *)(buf + sizeof(h)), world) != 1) {
		LOG_WARN("balanced shares: loaderd does not know the weights of step %" PRIu64 ": the "
			 "checkpoint has no split seed", next);
		free(all);
		return 0;
	}
	double *rep = (double *)(void *)(buf + sizeof(h) + ((size_t)world * 4u + 7u) / 8u * 8u);
	for (uint32_t i = 0; i <= rows; i++)  /* gathered by rank; the row after: latest reports */
		for (uint32_t q = 0; q < world; q++)
			rep[(size_t)i * world + q] = all[(size_t)q * per + i];
	free(all);
	return (uint32_t)len;
}

/* Rank 0 writes the checkpoint whose next step is @next; every rank has the same parameters and
 * momentum, so nobody else needs to. */
static void save(struct trn_resume *r, struct trn_train *t, uint64_t next)
{
	struct trn_dev *dev = t->dev;
	size_t total = trn_ddp_total(t->ddp);
	uint8_t tok[LDC_TOKEN_SIZE];
	char path[4096], why[4352];

	static uint8_t split[TRN_CKPT_SPLIT_MAX];  /* rank 0's, one save at a time */
	uint32_t toklen = trn_data_token(t->data, next, tok);
	uint32_t split_len = t->data->synthetic ? 0 : split_seed(r, t->data, next, split);
	if (r->rank != 0)
		return;
	float *p = malloc(total * sizeof(float)), *m = malloc(total * sizeof(float));
	if (!p || !m)
		trn_die("out of memory for a checkpoint of %zu parameters", total);
	if (dev->ops->copy_d2h(dev, TRN_STREAM_COMPUTE, p, t->params, total * sizeof(float)) < 0 ||
	    dev->ops->copy_d2h(dev, TRN_STREAM_COMPUTE, m, t->mom, total * sizeof(float)) < 0 ||
	    dev->ops->sync(dev, TRN_STREAM_COMPUTE) < 0)
		trn_die("device: %s", dev->err);
	struct trn_ckpt c = { .step = next, .world = (uint64_t)r->world, .seed = r->o->seed,
			      .n = total, .token = toklen ? tok : NULL, .token_len = toklen,
			      .params = p, .mom = m, .split = split_len ? split : NULL,
			      .split_len = split_len };
	if (trn_ckpt_save(r->o->ckpt_dir, &c, path, sizeof(path), why, sizeof(why)) < 0)
		trn_die("checkpoint: %s", why);
	free(p);
	free(m);
}

int trn_resume_step(struct trn_resume *r, struct trn_train *t, uint64_t micro,
		    const struct trn_batch *b)
{
	const struct trn_opts *o;

	if (!r)
		return 0;
	o = r->o;
	if (r->log_fd >= 0)
		log_batch(r, b);
	if (!o->ckpt_dir || (micro + 1) % (uint64_t)o->accum != 0)
		return 0;  /* checkpoints only between optimizer steps */
	/* A stop signal may reach the ranks at different steps: they agree on the first step after
	 * which any rank has seen one, so that every rank stops after the same step. */
	int mine = g_stop, any = 0;
	MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	uint64_t opt_steps = (micro + 1) / (uint64_t)o->accum;
	if (any || (o->ckpt_every && opt_steps % (uint64_t)o->ckpt_every == 0))
		save(r, t, micro + 1);
	if (any && r->rank == 0)
		LOG_INFO("stopped by a signal after step %" PRIu64 "; checkpoint written to %s",
			 micro, o->ckpt_dir);
	return any;
}

void trn_resume_close(struct trn_resume *r)
{
	if (!r)
		return;
	if (r->log_fd >= 0)
		close(r->log_fd);
	free(r->line);
	free(r->split);
	free((void *)r->ck.split);
	free(r->ck.params);
	free(r->ck.mom);
	free(r);
}
