/* test_srv_demand.c - self-sizing in the real server core (tests/srv_harness.h: srv with a pattern
 * filler in a forked child): workers sleep while nothing is needed (a full ring, a consumer that
 * stopped), a slow consumer's ring is kept as full as its rate needs, not every slot, and filled
 * whole while that consumer pauses; weights are a job option every rank agrees on. The
 * controller's rules alone are in test_demand.c; speed figures are in tools/bench/selfsize.sh. */
#include "tests/srv_harness.h"

#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cmocka.h>

#define TIDS_MAX 64

/* CPU time of each thread of @pid so far, ns (/proc/PID/task/TID/schedstat: time on a CPU), into
 * tid[] and ns[]; returns how many. */
static unsigned proc_threads_ns(pid_t pid, int *tid, uint64_t *ns)
{
	char path[64];
	unsigned n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	assert_non_null(d);
	for (struct dirent *e; (e = readdir(d)) && n < TIDS_MAX;) {
		if (e->d_name[0] == '.')
			continue;
		char p[300];
		unsigned long long v = 0;
		snprintf(p, sizeof(p), "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;  /* a thread that just ended */
		if (fscanf(f, "%llu", &v) == 1) {
			tid[n] = atoi(e->d_name);
			ns[n++] = v;
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

static void sleep_ms(int ms)
{
	struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000 };
	while (nanosleep(&t, &t) == -1 && errno == EINTR)
		;
}

/* The server's CPU over one second, ns: the threads alive at both ends (an opener thread that
 * ends meanwhile takes its time with it; it is not a worker). */
static uint64_t cpu_over_1s(pid_t pid)
{
	int t0[TIDS_MAX], t1[TIDS_MAX];
	uint64_t c0[TIDS_MAX], c1[TIDS_MAX], sum = 0;
	unsigned n0 = proc_threads_ns(pid, t0, c0);

	sleep_ms(1000);
	unsigned n1 = proc_threads_ns(pid, t1, c1);
	for (unsigned i = 0; i < n1; i++)
		for (unsigned k = 0; k < n0; k++)
			if (t1[i] == t0[k] && c1[i] >= c0[k])
				sum += c1[i] - c0[k];
	return sum;
}

/* Idle: the control loop and the workers asleep. 20 ms of CPU in a second is 2% of a core, far
 * below one worker spinning (1 s) and far above what sleeping threads use. */
#define IDLE_CPU_NS 20000000ull

static void test_srv_demand_idle_consumer_workers_sleep(void **state)
{
	(void)state;
	pid_t srv = start_server(&(struct tsrv){ .workers = 2 });
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("idle", "pattern:100000", 4, 0, 1, 0);
	struct ldc_info in;
	struct ctl_stats st;

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	/* Start-up: no rate yet, the ring fills whole; then nothing to do. */
	wait_published(c, 4, &st);
	uint64_t idle0 = cpu_over_1s(srv);
	assert_int_equal(ldc_stats(c, &st), 0);
	assert_int_equal(st.published, 4);
	/* A consumer that ate fast (a rate is measured), then stopped holding nothing. */
	consume_ok(c, &e, 0, 400);
	sleep_ms(200);
	uint64_t idle1 = cpu_over_1s(srv);
	assert_int_equal(ldc_stats(c, &st), 0);
	assert_true(st.occupancy <= 4);
	if (idle0 > IDLE_CPU_NS || idle1 > IDLE_CPU_NS)
		fail_msg("server CPU over a second while its ring was full: %.1f ms at start-up, "
			 "%.1f ms after a fast consumer stopped (at most %.1f)", idle0 * 1e-6,
			 idle1 * 1e-6, IDLE_CPU_NS * 1e-6);
	/* It serves on: the next steps are all there and right. */
	consume_ok(c, &e, 400, 410);
	cli_close(c);
	stop_server(srv);
}

/* A consumer taking 50 ms a step (20 steps/s) from a 16-slot ring whose steps take well under a
 * millisecond to fill: its target is 1 + ceil(20/s x (1.5 x latency + 5 ms)) = 2 steps, so the
 * ring holds 2 or 3 (the one in hand, the one ahead, one being filled), not 16. Bounded at 8 so
 * that a slow CI machine (a latency of tens of ms) still passes, while "every slot" fails. */
static void test_srv_demand_slow_consumer_ring_not_filled_whole(void **state)
{
	(void)state;
	pid_t srv = start_server(&(struct tsrv){ .workers = 2, .slots = 16 });
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("slow", "pattern:100000", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b;
	struct ctl_stats st;
	char msg[512];
	uint32_t most = 0;

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	for (uint64_t step = 0; step < 60; step++) {
		assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), 0);
		if (check_batch(&b, step, &e, msg, sizeof(msg)))
			fail_msg("%s", msg);
		sleep_ms(50);
		assert_int_equal(ldc_release(c, &b), 0);
		if (step >= 45) {  /* past start-up: the ring starts full and starved (empty until the
				    * first publish) for a second, then drains 1 step per step to its
				    * target: by step ~35 at this pace, later on a slow machine */
			assert_int_equal(ldc_stats(c, &st), 0);
			if (st.occupancy > most)
				most = st.occupancy;
		}
	}
	if (most > 8)
		fail_msg("a 20 steps/s consumer's ring held %u of 16 slots (at most 8)", most);
	/* It pauses (a checkpoint: nothing released for 4 steps' time, 200 ms here): the ring is
	 * filled whole meanwhile, so that it comes back to what fixed workers would have left. */
	int64_t t0 = mono_ms();
	do {
		sleep_ms(50);
		assert_int_equal(ldc_stats(c, &st), 0);
	} while (st.occupancy < 16 && mono_ms() - t0 < 3000);
	if (st.occupancy != 16)
		fail_msg("a paused consumer's ring holds %u of 16 slots after %lld ms", st.occupancy,
			 (long long)(mono_ms() - t0));
	consume_ok(c, &e, 60, 80);
	cli_close(c);
	stop_server(srv);
}

/* Weights are a job option: every rank gives the same, 0 and 1 are the same, and a rank that
 * differs is refused naming the weight; the bounds are checked before (1000 opens, 1001 not). */
static void test_srv_demand_weight_is_a_job_option(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	struct ldc *c0 = cli_connect(), *c1 = cli_connect();
	struct ldc_job j0 = mkjob("weighted", "pattern:1000", 8, 0, 2, 1), j;
	struct ldc_info in;

	j0.weight = 0;
	open_ok(c0, &j0, &in);
	j = j0, j.rank = 1, j.weight = 2;
	open_fails(&j, -EEXIST, "weight");
	j = j0, j.rank = 1, j.weight = 1;  /* 0 = 1 */
	open_ok(c1, &j, &in);
	cli_close(c1);
	cli_close(c0);

	struct ldc *c2 = cli_connect();
	j = mkjob("heavy", "pattern:1000", 8, 0, 1, 1);
	j.weight = CTL_WEIGHT_MAX;
	open_ok(c2, &j, &in);
	cli_close(c2);
	j = mkjob("too-heavy", "pattern:1000", 8, 0, 1, 1);
	j.weight = CTL_WEIGHT_MAX + 1;
	open_fails(&j, -EINVAL, "weight: 1001 is not in 1..1000");
	stop_server(srv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_srv_demand_idle_consumer_workers_sleep,
						srvh_setup, srvh_teardown),
		cmocka_unit_test_setup_teardown(test_srv_demand_slow_consumer_ring_not_filled_whole,
						srvh_setup, srvh_teardown),
		cmocka_unit_test_setup_teardown(test_srv_demand_weight_is_a_job_option,
						srvh_setup, srvh_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
