/* test_srv_refusals.c - refusals of the server core (loader/srv_*.c) that a client meets and no
 * other suite provokes, each with its errno and the words the client reads: a rank that is
 * attached already, start positions at the end of the job and one past it, a second job on one
 * connection, stats before any job, augmentations (CTL_AUGMENT) sent twice, after the job open,
 * hostile, or other than the job's. Through the public API (shm/ldc.h) or raw
 * control packets, against the real server core with the pattern filler (tests/srv_harness.h). */
#include "shm/ctl.h"
#include "shm/ldc.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/srv_harness.h"

/* Rank 0 of job "busy" is attached: a second client for rank 0 is EBUSY naming the holder's
 * pid; rank 1 of the same job is still free. */
static void test_srv_rank_attached_is_ebusy(void **state)
{
	(void)state;
	pid_t pid = start_server(NULL);
	struct ldc *a = cli_connect();
	struct ldc_info in;
	struct ldc_job j = mkjob("busy", "pattern:64", 4, 0, 2, 0);
	char needle[64];

	open_ok(a, &j, &in);
	snprintf(needle, sizeof(needle), "rank 0 of job busy is attached (pid %d)", (int)getpid());
	open_fails(&j, -EBUSY, needle);
	j.rank = 1;
	struct ldc *b = cli_connect();
	open_ok(b, &j, &in);
	cli_close(b);
	cli_close(a);
	stop_server(pid);
}

/* A start position: the job's last step and its end (nothing left: the first acquire says so)
 * are accepted; the step count of an epoch as at_step, and one step past the end, are refused,
 * naming the field. 16 samples, batch 4: 4 steps an epoch; 2 epochs, 8 steps. */
static void test_srv_start_at_bounds(void **state)
{
	static const struct {
		uint64_t epoch, step;
		int err;
		const char *needle;
	} cases[] = {
		{ 1, 3, 0, NULL },
		{ 2, 0, 0, NULL },
		{ 0, 4, -EINVAL, "at_step 4 is not below the 4 steps" },
		{ 2, 1, -EINVAL, "past the job's end" },
	};
	(void)state;
	pid_t pid = start_server(NULL);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		char name[16];
		snprintf(name, sizeof(name), "s%zu", k);
		struct ldc_job j = mkjob(name, "pattern:16", 4, 0, 1, 2);
		j.start_at = 1;
		j.at_epoch = cases[k].epoch;
		j.at_step = cases[k].step;
		if (cases[k].err) {
			open_fails(&j, cases[k].err, cases[k].needle);
			continue;
		}
		struct ldc *c = cli_connect();
		struct ldc_info in;
		struct ldc_batch b;
		uint64_t first = cases[k].epoch * 4 + cases[k].step;
		open_ok(c, &j, &in);
		assert_int_equal(in.first_step, first);
		for (uint64_t step = first; step < 8; step++) {
			assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), 0);
			assert_int_equal(b.step, step);
			assert_int_equal(ldc_release(c, &b), 0);
		}
		assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), -ENODATA);
		cli_close(c);
	}
	stop_server(pid);
}

/* Raw protocol: a second JOB_OPEN on a connection that has its job, and STATS_REQ on one that has
 * none, are refused (EINVAL) and the connection closed. */
static void test_srv_one_job_per_connection(void **state)
{
	(void)state;
	pid_t pid = start_server(NULL);
	struct ring *ring;
	int bell;
	int fd = raw_open("first", &ring, &bell);
	struct ctl_job_open m;

	ring_destroy(ring);
	close(bell);
	good_open(&m, "second");
	assert_int_equal(ctl_send(fd, CTL_JOB_OPEN, &m, sizeof(m), NULL, 0), 0);
	expect_refused(fd, "a second job", EINVAL, "this connection already has a job");
	fd = raw_connect();
	assert_int_equal(ctl_send(fd, CTL_STATS_REQ, NULL, 0, NULL, 0), 0);
	expect_refused(fd, "stats without a job", EINVAL, "stats before a job was opened");
	assert_alive(pid);
	stop_server(pid);
}

/* CTL_AUGMENT: once, before the job open, checked field by field; the ranks of a job send the
 * same (a rank with other augmentations, or none, is EEXIST naming "augment"). */
static void test_srv_augment_refusals(void **state)
{
	(void)state;
	pid_t pid = start_server(NULL);
	struct ctl_augment a, b;
	char why[256];
	struct ring *ring;
	int bell;

	assert_int_equal(ctl_augment_parse("jitter=0.4,erase=0.25", &a, why, sizeof(why)), 0);
	int fd = raw_connect();
	assert_int_equal(ctl_send(fd, CTL_AUGMENT, &a, sizeof(a), NULL, 0), 0);
	assert_int_equal(ctl_send(fd, CTL_AUGMENT, &a, sizeof(a), NULL, 0), 0);
	expect_refused(fd, "augment twice", EINVAL, "augmentations come once");
	fd = raw_connect();
	b = a;
	b.erase_p = CTL_AUG_ONE + 1;
	assert_int_equal(ctl_send(fd, CTL_AUGMENT, &b, sizeof(b), NULL, 0), 0);
	expect_refused(fd, "a hostile augment", EINVAL, "augment: erase_p");
	fd = raw_connect();
	assert_int_equal(ctl_send(fd, CTL_AUGMENT, &a, sizeof(a) - 4, NULL, 0), 0);
	expect_refused(fd, "a short augment", EINVAL, "augment: 124 bytes");
	fd = raw_open("augd", &ring, &bell);  /* the job, without augmentations */
	ring_destroy(ring);
	close(bell);
	assert_int_equal(ctl_send(fd, CTL_AUGMENT, &a, sizeof(a), NULL, 0), 0);
	expect_refused(fd, "augment after the open", EINVAL, "augmentations come once, before");
	/* rank 1 of job "aug2" with augmentations: rank 0 opened it with none; then with
	 * the same as rank 0's: taken */
	struct ldc *c0 = cli_connect(), *c = cli_connect();
	struct ldc_info in;
	struct ldc_job j0 = mkjob("aug2", "pattern:64", 4, 0, 2, 0);
	struct ldc_job j = mkjob("aug2", "pattern:64", 4, 1, 2, 0);
	assert_int_equal(ldc_open(c0, &j0, &in), 0);
	assert_int_equal(ldc_augment(c, &a), 0);
	assert_int_equal(ldc_open(c, &j, &in), -EEXIST);
	assert_non_null(strstr(ldc_error(c), "another augment"));
	cli_close(c);
	c = cli_connect();
	assert_int_equal(ldc_open(c, &j, &in), 0);
	cli_close(c);
	cli_close(c0);
	assert_alive(pid);
	stop_server(pid);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_srv_rank_attached_is_ebusy, srvh_setup,
						srvh_teardown),
		cmocka_unit_test_setup_teardown(test_srv_start_at_bounds, srvh_setup, srvh_teardown),
		cmocka_unit_test_setup_teardown(test_srv_one_job_per_connection, srvh_setup,
						srvh_teardown),
		cmocka_unit_test_setup_teardown(test_srv_augment_refusals, srvh_setup, srvh_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
