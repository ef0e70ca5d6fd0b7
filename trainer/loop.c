/* loop.c - the training loop (loop.h). Injected faults for the diagnosis tests live here too:
 * a straggler (--inject-slow-rank: this rank's compute takes F times as long), a slow network
 * (--inject-comm-delay-ms: every allreduce ends X ms later, in full view), and a crash at an exact
 * step for the resume tests (--inject-kill-at: SIGKILL while the step's batch is held). */
#include "trainer/loop.h"

#include "common/clk.h"
#include "common/log.h"
#include "trainer/fatal.h"
#include "trainer/resume.h"

#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };

	nanosleep(&ts, NULL);
}

/* Default: 10% of the steps, at most 20; never all of them. */
static long warmup_steps(const struct trn_opts *o, uint64_t micro_total, int rank)
{
	long warmup = o->warmup >= 0 ? o->warmup : (long)fmin(20, (double)micro_total / 10);

	if ((uint64_t)warmup >= micro_total && micro_total > 0) {
		if (rank == 0)
			LOG_WARN("--warmup %ld leaves no step to measure; measuring all %" PRIu64,
				 warmup, micro_total);
		warmup = 0;
	}
	return warmup;
}

/* Forward, backward and the DDP step of one micro-step; its compute, exposed allreduce and
 * optimizer times into @r. out[0] += loss, out[1] += correct. */
static void step(struct trn_train *t, uint64_t micro, const struct trn_batch *b, struct trn_step *r,
		 double out[2])
{
	const struct trn_opts *o = t->o;
	struct trn_dev *dev = t->dev;
	int sync, acc;

	trn_ddp_begin(t->ddp, micro, &sync, &acc);
	trn_ddp_set_weight(t->ddp, (float)b->valid);
	uint64_t t0 = clk_now_ns();
	if (t->m->ops->step(t->m, b->img, b->lab, b->wt, b->count, t->params, t->grads,
			    trn_ddp_offsets(t->ddp), acc, t->ddp, out) < 0)
		trn_die("step %" PRIu64 ": %s", micro, dev->err[0] ? dev->err : trn_ddp_error(t->ddp));
	if (dev->ops->sync(dev, TRN_STREAM_COMPUTE) < 0)
		trn_die("device: %s", dev->err);
	r->ns[TRN_PH_COMPUTE] = clk_now_ns() - t0;
	if (t->rank == o->slow_rank && o->slow_factor > 1) {
		/* an injected straggler: as if this device were F times slower */
		uint64_t extra = (uint64_t)((o->slow_factor - 1) * (double)r->ns[TRN_PH_COMPUTE]);
		sleep_ns(extra);
		r->ns[TRN_PH_COMPUTE] += extra;
	}
	struct trn_ddp_stats st0, st1;
	trn_ddp_get_stats(t->ddp, &st0);
	t0 = clk_now_ns();
	if (trn_ddp_step(t->ddp, t->params, t->grads, t->mom, o->lr, o->momentum) < 0)
		trn_die("%s", trn_ddp_error(t->ddp));
	if (dev->ops->sync(dev, TRN_STREAM_COMPUTE) < 0)
		trn_die("device: %s", dev->err);
	trn_ddp_get_stats(t->ddp, &st1);
	if (sync && o->comm_delay_ms > 0) {
		/* an injected slow network: the allreduce ends this much later, in full view */
		uint64_t t1 = clk_now_ns();
		sleep_ns((uint64_t)(o->comm_delay_ms * 1e6));
		st1.exposed_ns += clk_now_ns() - t1;
	}
	uint64_t opt = clk_now_ns() - t0, exposed = st1.exposed_ns - st0.exposed_ns;
	r->ns[TRN_PH_COMM] = exposed;
	r->ns[TRN_PH_OPT] = opt > exposed ? opt - exposed : 0;
}

void trn_train_run(struct trn_train *t)
{
	const struct trn_opts *o = t->o;
	uint64_t start = t->data->first_step, t_begin = 0, micro;
	uint64_t micro_total = t->data->micro_total, todo = micro_total > start ? micro_total - start : 0;
	double win_loss = 0, win_correct = 0, win_n = 0;
	struct trn_rank_run *run = &t->run;

	t->warmup = warmup_steps(o, todo, t->rank);
	t->rec = calloc((size_t)(todo < TRN_STEPS_RECORDED_MAX ? todo : TRN_STEPS_RECORDED_MAX) + 1,
			sizeof(*t->rec));
	if (!t->rec)
		trn_die("out of memory");
	*run = (struct trn_rank_run){ 0 };
	t->t_first = clk_now_ns();
	/* micro counts from the job's start (one ring step each), so that a resumed run accumulates
	 * and logs as the uninterrupted one; i counts this process's steps, for the figures. */
	for (micro = start; micro < micro_total; micro++) {
		uint64_t i = micro - start;
		struct trn_step r = { .start_ns = clk_now_ns() };
		struct trn_batch b;
		double out[2] = { 0, 0 };

		if (i == (uint64_t)t->warmup)
			t_begin = r.start_ns;
		if (!trn_data_next(t->data, &r.ns[TRN_PH_DATA], &r.ns[TRN_PH_COPY], &b))
			break;  /* end of the job */
		if (b.step != micro)
			trn_die("loaderd delivered step %" PRIu64 " for micro-step %" PRIu64, b.step, micro);
		if (t->rank == o->kill_rank && micro == (uint64_t)o->kill_step)
			raise(SIGKILL);
		step(t, micro, &b, &r, out);
		if (o->report_ns > 0)  /* fixed speeds: the injected factor on the slow rank */
			trn_data_report(t->data, (uint64_t)(o->report_ns * (double)b.count *
				(t->rank == o->slow_rank ? o->slow_factor : 1)), b.count);
		else
			trn_data_report(t->data, r.ns[TRN_PH_COMPUTE], b.count);
		trn_data_consumed(t->data);
		if ((long)i >= t->warmup) {
			for (int p = 0; p < TRN_PH_N; p++)
				run->sum_ns[p] += r.ns[p];
			run->samples += (uint64_t)b.count;
		}
		if (i < TRN_STEPS_RECORDED_MAX)
			t->rec[i] = r;
		win_loss += out[0];
		win_correct += out[1];
		win_n += b.valid;  /* loss and accuracy count weighted samples only */
		if (o->log_every && (micro + 1) % (uint64_t)o->log_every == 0) {
			double tot[3] = { win_loss, win_correct, win_n }, all[3];
			MPI_Allreduce(tot, all, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
			if (t->rank == 0)
				LOG_INFO("step %" PRIu64 ": loss %.4f, accuracy %.3f (chance %.3f)", micro + 1,
					 all[0] / all[2], all[1] / all[2], 1.0 / t->data->classes);
			win_loss = win_correct = win_n = 0;
		}
		if (trn_resume_step(t->resume, t, micro, &b)) {
			micro++;
			break;  /* a stop signal: checkpointed after this step */
		}
	}
	uint64_t t_end = clk_now_ns();
	t->ran = micro - start;
	if (!t_begin)
		t_begin = t->t_first;  /* too few steps for a warm-up */
	t->n_rec = (long)(t->ran < TRN_STEPS_RECORDED_MAX ? t->ran : TRN_STEPS_RECORDED_MAX);
	run->wall_ns = t_end - t_begin;
	trn_rank_run_window(run, t->rec, t->n_rec, t->warmup);
}
