/* test_trn_report.c - the trainer's report (trainer/report.c) on constructed step tables: each
 * verdict, the thresholds' boundaries (a cause at exactly lost_min is named, just below it is
 * not; a straggler at exactly imbalance_min and straggler_steps is, just below is not), a
 * straggler whose wait shows in the other ranks' allreduce, the warm-up left out, the rates and
 * AU, and the JSON (escaped strings, the keys ldprobe reads). Pure: no MPI, no device. */
#include "trainer/report.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define RANKS_MAX 4
#define STEPS_MAX 64

/* A constructed job: per rank a step table; steps start every `period` ns (a step's phases
 * that sum to less leave a gap, which counts in the step time). */
struct job {
	int ranks;
	long steps, warmup;
	uint64_t period;
	struct trn_step rec[RANKS_MAX][STEPS_MAX];
	struct trn_rank_run run[RANKS_MAX];
};

static void job_init(struct job *j, int ranks, long steps, uint64_t period)
{
	memset(j, 0, sizeof(*j));
	j->ranks = ranks;
	j->steps = steps;
	j->period = period;
	for (int r = 0; r < ranks; r++)
		for (long s = 0; s < steps; s++)
			j->rec[r][s].start_ns = 1000000 + (uint64_t)s * period;
}

/* Every step of rank @r (-1: every rank) spends @ns in phase @p. */
static void set_all(struct job *j, int r, int p, uint64_t ns)
{
	for (int x = 0; x < j->ranks; x++)
		for (long s = 0; s < j->steps; s++)
			if (r < 0 || x == r)
				j->rec[x][s].ns[p] = ns;
}

/* The measured runs, as the loop makes them: warm-up left out, totals over the measured steps,
 * batch 10, wall = the measured steps' span. */
static void job_runs(struct job *j)
{
	for (int r = 0; r < j->ranks; r++) {
		struct trn_rank_run *run = &j->run[r];
		memset(run, 0, sizeof(*run));
		trn_rank_run_window(run, j->rec[r], j->steps, j->warmup);
		for (long s = 0; s < run->n_steps; s++)
			for (int p = 0; p < TRN_PH_N; p++)
				run->sum_ns[p] += run->steps[s].ns[p];
		run->samples = 10 * (uint64_t)run->n_steps;
		run->wall_ns = (uint64_t)run->n_steps * j->period;
	}
}

static enum trn_verdict judge(struct job *j, const struct trn_report_limits *lim,
			      struct trn_report *rep)
{
	job_runs(j);
	assert_int_equal(trn_report_compute(j->run, j->ranks, NULL, lim, rep), 0);
	return rep->verdict;
}

static enum trn_verdict verdict_of(struct job *j)
{
	struct trn_report rep;
	enum trn_verdict v = judge(j, NULL, &rep);

	trn_report_fini(&rep);
	return v;
}

static void test_report_compute_limited(void **state)
{
	struct job j;
	struct trn_report rep;

	(void)state;
	job_init(&j, 2, 20, 1000);
	set_all(&j, -1, TRN_PH_COMPUTE, 900);
	set_all(&j, -1, TRN_PH_OPT, 100);
	assert_int_equal(judge(&j, NULL, &rep), TRN_COMPUTE_LIMITED);
	assert_string_equal(trn_verdict_name(rep.verdict), "compute-limited");
	assert_float_equal(rep.au, 0.9, 1e-9);
	assert_float_equal(rep.share[TRN_PH_OPT], 0.1, 1e-9);
	/* 10 samples per 1000 ns per rank = 1e7/s, x 2 ranks */
	assert_float_equal(rep.rank_samples_per_s, 1e7, 1e-3);
	assert_float_equal(rep.samples_per_s, 2e7, 1e-3);
	assert_float_equal(rep.step_ms, 1e-3, 1e-12);
	assert_int_equal(rep.steps_compared, 20);
	trn_report_fini(&rep);
}

static void test_report_loader_limited(void **state)
{
	struct job j;
	struct trn_report rep;

	(void)state;
	job_init(&j, 2, 20, 1000);
	set_all(&j, -1, TRN_PH_COMPUTE, 500);
	set_all(&j, 0, TRN_PH_DATA, 300);
	set_all(&j, 1, TRN_PH_DATA, 100);
	set_all(&j, -1, TRN_PH_COPY, 100);
	set_all(&j, 0, TRN_PH_OPT, 100);
	set_all(&j, 1, TRN_PH_OPT, 300);
	assert_int_equal(judge(&j, NULL, &rep), TRN_LOADER_LIMITED);
	/* the worst rank's data wait + copy, per step */
	assert_float_equal(rep.loader, 0.4, 1e-9);
	assert_string_equal(trn_verdict_name(rep.verdict), "loader-limited");
	trn_report_fini(&rep);
}

static void test_report_communication_limited(void **state)
{
	struct job j;
	struct trn_report rep;

	(void)state;
	job_init(&j, 2, 20, 1000);
	set_all(&j, -1, TRN_PH_COMPUTE, 500);
	set_all(&j, 0, TRN_PH_COMM, 400);
	set_all(&j, 1, TRN_PH_COMM, 300);
	set_all(&j, 0, TRN_PH_OPT, 100);
	set_all(&j, 1, TRN_PH_OPT, 200);
	assert_int_equal(judge(&j, NULL, &rep), TRN_COMM_LIMITED);
	/* the least exposed rank's allreduce: the transfer itself */
	assert_float_equal(rep.comm, 0.3, 1e-9);
	assert_string_equal(trn_verdict_name(rep.verdict), "communication-limited");
	trn_report_fini(&rep);
}

/* Rank 1 computes 3x as long; rank 0 waits for it in the allreduce. The wait is not the network:
 * the least exposed rank (1) has none. */
static void test_report_straggler_limited(void **state)
{
	struct job j;
	struct trn_report rep;

	(void)state;
	job_init(&j, 2, 20, 1000);
	set_all(&j, 0, TRN_PH_COMPUTE, 300);
	set_all(&j, 0, TRN_PH_COMM, 600);
	set_all(&j, 1, TRN_PH_COMPUTE, 900);
	set_all(&j, -1, TRN_PH_OPT, 100);
	assert_int_equal(judge(&j, NULL, &rep), TRN_STRAGGLER_LIMITED);
	assert_int_equal(rep.slow_rank, 1);
	assert_int_equal(rep.fast_rank, 0);
	assert_float_equal(rep.imbalance, 3.0, 1e-9);
	assert_float_equal(rep.slow_consistency, 1.0, 1e-9);
	assert_float_equal(rep.straggler, 0.6, 1e-9);
	assert_float_equal(rep.comm, 0.0, 1e-9);
	assert_float_equal(rep.wait_for_slow, 0.6, 1e-9);
	trn_report_fini(&rep);
}

/* A cause at exactly lost_min (10%) is named; at 9% it is not. */
static void test_report_lost_min_boundary(void **state)
{
	struct job j;

	(void)state;
	job_init(&j, 1, 10, 100);
	set_all(&j, -1, TRN_PH_DATA, 10);
	set_all(&j, -1, TRN_PH_COMPUTE, 90);
	assert_int_equal(verdict_of(&j), TRN_LOADER_LIMITED);
	set_all(&j, -1, TRN_PH_DATA, 9);
	set_all(&j, -1, TRN_PH_COMPUTE, 91);
	assert_int_equal(verdict_of(&j), TRN_COMPUTE_LIMITED);
	job_init(&j, 1, 10, 100);
	set_all(&j, -1, TRN_PH_COMM, 10);
	set_all(&j, -1, TRN_PH_COMPUTE, 90);
	assert_int_equal(verdict_of(&j), TRN_COMM_LIMITED);
	set_all(&j, -1, TRN_PH_COMM, 9);
	set_all(&j, -1, TRN_PH_COMPUTE, 91);
	assert_int_equal(verdict_of(&j), TRN_COMPUTE_LIMITED);
}

/* Rank 1's compute exactly imbalance_min (1.5x) rank 0's: a straggler; 1.49x: not. */
static void test_report_imbalance_boundary(void **state)
{
	struct job j;
	struct trn_report rep;

	(void)state;
	job_init(&j, 2, 10, 300);
	set_all(&j, 0, TRN_PH_COMPUTE, 200);
	set_all(&j, 0, TRN_PH_COMM, 100);
	set_all(&j, 1, TRN_PH_COMPUTE, 300);
	assert_int_equal(judge(&j, NULL, &rep), TRN_STRAGGLER_LIMITED);
	assert_float_equal(rep.imbalance, 1.5, 1e-12);
	trn_report_fini(&rep);
	set_all(&j, 1, TRN_PH_COMPUTE, 298);
	assert_int_equal(judge(&j, NULL, &rep), TRN_COMPUTE_LIMITED);
	assert_true(rep.imbalance < 1.5);
	trn_report_fini(&rep);
}

/* The slowest rank must be the slowest in straggler_steps (75%) of the steps: contention that
 * moves around is not a straggler. */
static void test_report_straggler_consistency(void **state)
{
	static const uint64_t three[4] = { 800, 800, 800, 100 }, two[4] = { 800, 800, 100, 100 };
	struct trn_report_limits half = trn_report_limits_default;
	struct job j;
	struct trn_report rep;

	(void)state;
	job_init(&j, 2, 4, 1000);
	set_all(&j, 0, TRN_PH_COMPUTE, 200);
	for (int s = 0; s < 4; s++)
		j.rec[1][s].ns[TRN_PH_COMPUTE] = three[s];
	assert_int_equal(judge(&j, NULL, &rep), TRN_STRAGGLER_LIMITED);
	assert_float_equal(rep.slow_consistency, 0.75, 1e-12);
	trn_report_fini(&rep);
	for (int s = 0; s < 4; s++)
		j.rec[1][s].ns[TRN_PH_COMPUTE] = two[s];
	assert_int_equal(judge(&j, NULL, &rep), TRN_COMPUTE_LIMITED);
	assert_float_equal(rep.slow_consistency, 0.5, 1e-12);
	assert_true(rep.imbalance >= 1.5 && rep.straggler >= 0.10);
	trn_report_fini(&rep);
	/* the same table under another threshold table: the limits are the report's input */
	half.straggler_steps = 0.5;
	assert_int_equal(judge(&j, &half, &rep), TRN_STRAGGLER_LIMITED);
	assert_float_equal(rep.limits.straggler_steps, 0.5, 0);
	trn_report_fini(&rep);
}

/* Start-up steps that wait for data are left out of the figures. */
static void test_report_warmup_excluded(void **state)
{
	struct job j;
	struct trn_report rep;

	(void)state;
	job_init(&j, 2, 30, 1000);
	set_all(&j, -1, TRN_PH_COMPUTE, 1000);
	for (int r = 0; r < 2; r++)
		for (int s = 0; s < 10; s++)
			j.rec[r][s].ns[TRN_PH_DATA] = 900, j.rec[r][s].ns[TRN_PH_COMPUTE] = 100;
	j.warmup = 10;
	assert_int_equal(judge(&j, NULL, &rep), TRN_COMPUTE_LIMITED);
	assert_int_equal(rep.steps_compared, 20);
	assert_float_equal(rep.au, 1.0, 1e-9);
	trn_report_fini(&rep);
	j.warmup = 0;
	assert_int_equal(judge(&j, NULL, &rep), TRN_LOADER_LIMITED);
	trn_report_fini(&rep);
	/* a warm-up longer than the run leaves no step */
	struct trn_rank_run run;
	trn_rank_run_window(&run, j.rec[0], 30, 40);
	assert_int_equal(run.n_steps, 0);
}

/* Fewer than 2 recorded steps: the verdict comes from the average rank's shares. */
static void test_report_no_steps_uses_totals(void **state)
{
	struct trn_rank_run run[2] = { 0 };
	struct trn_report rep;

	(void)state;
	for (int r = 0; r < 2; r++) {
		run[r].wall_ns = 1000;
		run[r].samples = 10;
		run[r].sum_ns[TRN_PH_DATA] = 500;
		run[r].sum_ns[TRN_PH_COMPUTE] = 400 + 100 * (uint64_t)r;
	}
	assert_int_equal(trn_report_compute(run, 2, NULL, NULL, &rep), 0);
	assert_int_equal(rep.steps_compared, 0);
	assert_int_equal(rep.verdict, TRN_LOADER_LIMITED);
	assert_int_equal(rep.slow_rank, 1);
	assert_float_equal(rep.imbalance, 1.25, 1e-12);
	trn_report_fini(&rep);
	assert_int_equal(trn_report_compute(run, 0, NULL, NULL, &rep), -EINVAL);
	trn_report_fini(&rep);
}

static char *json_of(const struct trn_report *rep)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	assert_int_equal(trn_report_write_json(rep, f), 0);
	fclose(f);
	return buf;
}

static void test_report_json_fields_and_escaping(void **state)
{
	struct trn_run_info info = { .device = "host", .backend = "mpi",
				     .model = "odd \"name\" \\ with\nnewline\x01", .world = 2,
				     .batch = 10, .classes = 7, .params = 123456, .buckets = 3,
				     .steps = 20, .warmup = 2 };
	struct job j;
	struct trn_report rep;

	(void)state;
	job_init(&j, 2, 20, 1000);
	set_all(&j, -1, TRN_PH_COMPUTE, 500);
	set_all(&j, -1, TRN_PH_DATA, 400);
	set_all(&j, -1, TRN_PH_OPT, 100);
	job_runs(&j);
	assert_int_equal(trn_report_compute(j.run, 2, &info, NULL, &rep), 0);
	char *s = json_of(&rep);
	assert_non_null(strstr(s, "\"schema\": \"loaderd-trainer-report/1\""));
	assert_non_null(strstr(s, "\"verdict\": \"loader-limited\""));
	assert_non_null(strstr(s, "\"model\": \"odd \\\"name\\\" \\\\ with\\nnewline\\u0001\""));
	assert_non_null(strstr(s, "\"classes\": 7"));
	assert_non_null(strstr(s, "\"params\": 123456"));
	assert_non_null(strstr(s, "\"buckets\": 3"));
	assert_non_null(strstr(s, "\"thresholds\": {\"lost_min\": 0.1, \"imbalance_min\": 1.5, "
			       "\"straggler_steps\": 0.75}"));
	assert_non_null(strstr(s, "\"causes\": {\"loader\": 0.4, "));
	assert_non_null(strstr(s, "{\"rank\": 1, \"shares\": {\"data\": 0.4, \"copy\": 0, "
			       "\"compute\": 0.5"));
	/* no raw control character inside: every string was escaped */
	for (const char *p = s; *p; p++)
		assert_true(*p == '\n' || (unsigned char)*p >= 0x20);
	/* balanced braces and brackets, outside strings */
	int depth = 0, in_str = 0;
	for (const char *p = s; *p; p++) {
		if (in_str) {
			if (*p == '\\')
				p++;
			else if (*p == '"')
				in_str = 0;
			continue;
		}
		in_str = *p == '"';
		depth += (*p == '{' || *p == '[') - (*p == '}' || *p == ']');
		assert_true(depth >= 0);
	}
	assert_int_equal(depth, 0);
	free(s);
	trn_report_fini(&rep);
}

static void test_report_print_last_line(void **state)
{
	struct trn_run_info info = { .batch = 10, .steps = 20, .warmup = 0 };
	struct job j;
	struct trn_report rep;
	char *buf = NULL;
	size_t len = 0;

	(void)state;
	job_init(&j, 2, 20, 1000);
	set_all(&j, -1, TRN_PH_COMPUTE, 800);
	job_runs(&j);
	assert_int_equal(trn_report_compute(j.run, 2, &info, NULL, &rep), 0);
	FILE *f = open_memstream(&buf, &len);
	trn_report_print(&rep, f);
	fclose(f);
	assert_non_null(strstr(buf, "trainer: 2 ranks x batch 10, 20 steps (0 warm-up left out)"));
	assert_non_null(strstr(buf, "  time per step: data wait 0.0%, exposed copy 0.0%, compute 80.0%"));
	assert_non_null(strstr(buf, "  slowest rank "));
	assert_non_null(strstr(buf, "\ntrainer: samples_per_s=20000000.0 au=0.800 "
			       "verdict=compute-limited\n"));
	free(buf);
	trn_report_fini(&rep);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_report_compute_limited),
		cmocka_unit_test(test_report_loader_limited),
		cmocka_unit_test(test_report_communication_limited),
		cmocka_unit_test(test_report_straggler_limited),
		cmocka_unit_test(test_report_lost_min_boundary),
		cmocka_unit_test(test_report_imbalance_boundary),
		cmocka_unit_test(test_report_straggler_consistency),
		cmocka_unit_test(test_report_warmup_excluded),
		cmocka_unit_test(test_report_no_steps_uses_totals),
		cmocka_unit_test(test_report_json_fields_and_escaping),
		cmocka_unit_test(test_report_print_last_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
