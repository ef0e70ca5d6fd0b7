/* test_srv.c - the server core (loader/srv.h), the client API (shm/ldc.h) and the control protocol
 * (shm/ctl.h) end to end, with real processes and real sockets, on the harness of
 * tests/srv_harness.h: a server forked into a child with a pattern filler whose every byte the
 * consumers check, and teardown that leaves no process behind, also when a test fails.
 *
 * What it covers: (1) a bounded job read in full and correct, stats mid-job, start epochs; (2)
 * ranks read concurrently, and a stalled rank does not hold up another; (3) a consumer that dies
 * or closes holding slots: they are reclaimed and it resumes at its first unreleased step; after
 * the end it gets ENODATA; an idle job is forgotten after the linger time; (4) a producer that
 * dies: a blocked acquire returns EPIPE; (5) consumers that corrupt their ring's state words are
 * dropped, with or without a release; (6) malformed packets, bad fields, fds other than one
 * regular file with a job open, stats before open and a second open are refused with CTL_ERROR,
 * and the server goes on; (7) job
 * rules: a spec mismatch is EEXIST, job_open's and the fill's errors reach the client, the ring
 * memory limit, its message and its release on detach; (8) the socket: mode 0600, a stale socket
 * replaced, a live one refused, a regular file or another program's socket kept, a path too long,
 * a missing socket, a peer of another uid refused; (9) SIGTERM: a blocked client is told, the
 * server exits 0 and removes its socket; (10) timeouts and misuse of ldc; and resources: no fd
 * leak, and a doorbell event queued behind its connection's hang-up in one epoll batch (once a
 * use after free; an att is now buried until the batch is done, see srv_jobs.c).
 *
 * Tests named after a bug or gap that was fixed say so ("Regression:"); they keep it fixed. */
#include "tests/srv_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* ---- 1. the happy path ---- */

static void test_srv_job_bounded_read_all_correct(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("happy", "pattern:480", 8, 0, 1, 2);
	struct ldc_info in;
	struct ldc_batch b;
	struct ctl_stats st;

	j.crop_h = 6;
	j.crop_w = 5;
	j.seed = 42;
	open_ok(c, &j, &in);
	assert_string_equal(ldc_error(c), "");
	assert_true(in.job_id >= 1);
	assert_int_equal(in.first_step, 0);
	assert_int_equal(in.steps_per_epoch, 60);
	assert_int_equal(in.steps_total, 120);
	assert_int_equal(in.samples, 480);
	const struct ring_hdr *h = in.ring;
	assert_memory_equal(h->magic, RING_MAGIC, 8);
	assert_int_equal(h->batch, 8);
	assert_int_equal(h->sample_bytes, 6 * 5 * 3);
	assert_int_equal(h->ndim, 3);
	assert_int_equal(h->shape[0], 6);
	assert_int_equal(h->shape[1], 5);
	assert_int_equal(h->shape[2], 3);
	assert_int_equal(h->shape[3], 0);
	assert_int_equal(h->layout, RING_LAYOUT_NHWC);
	assert_int_equal(h->dtype, RING_DTYPE_U8);
	assert_int_equal(h->slots, 4);
	assert_int_equal(h->rank, 0);
	assert_int_equal(h->world, 1);
	assert_int_equal(h->job_id, in.job_id);
	assert_int_equal(h->first_step, 0);
	assert_int_equal(h->steps_total, 120);
	assert_int_equal(h->steps_per_epoch, 60);
	assert_non_null(ldc_ring_base(c));
	assert_int_equal(ldc_ring_size(c), h->total_size);

	/* Every batch in order, every byte right; the last one says so. */
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 120);
	assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), -ENODATA);
	assert_has(ldc_error(c), "end of job");
	assert_has(ldc_error(c), "120");
	assert_int_equal(ldc_acquire(c, 0, &b), -ENODATA);

	wait_published(c, 120, &st);  /* counted just after the publish: may lag the batch */
	assert_int_equal(st.job_id, in.job_id);
	assert_int_equal(st.published, 120);
	assert_int_equal(st.samples, 120 * 8);
	assert_int_equal(st.released, 120);
	assert_int_equal(st.occupancy, 0);
	assert_int_equal(st.attaches, 1);
	assert_int_equal(st.ranks_attached, 1);
	assert_int_equal(st.slots, 4);
	assert_int_equal(st.workers, 2); /* the harness's default */
	assert_int_equal(st.bad_records, 0);
	assert_int_equal(st.phase_ns[0], 120); /* the filler reports 1 ns of I/O per step */
	assert_int_equal(st.phase_ns[1], 240); /* and 2 ns of decode */
	assert_true(st.fill_ns > 0);
	cli_close(c);
}

/* Stats in the middle of a job: what is published, held and released. */
static void test_ldc_stats_mid_job(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("mid", "pattern:1000", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b[3];
	struct ctl_stats st;

	j.slots = 6;
	open_ok(c, &j, &in);
	assert_int_equal(in.steps_total, 0);
	assert_int_equal(in.ring->slots, 6);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 10);
	for (int i = 0; i < 3; i++)
		assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b[i]), 0);
	/* Held 10, 11, 12: the producer can fill up to step 15 and no further. */
	wait_published(c, 16, &st);
	assert_int_equal(st.published, 16);
	assert_int_equal(st.released, 10);
	assert_int_equal(st.occupancy, 6);
	assert_int_equal(st.slots, 6);
	assert_int_equal(st.samples, 16 * 4);
	for (int i = 0; i < 3; i++)
		assert_int_equal(ldc_release(c, &b[i]), 0);
	cli_close(c);
}

static void test_srv_job_start_epoch_offsets_steps(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("epoch2", "pattern:40", 4, 0, 1, 1);
	struct ldc_info in;
	struct ldc_batch b;

	j.start_epoch = 2;
	open_ok(c, &j, &in);
	assert_int_equal(in.steps_per_epoch, 10);
	assert_int_equal(in.first_step, 20);
	assert_int_equal(in.steps_total, 30);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 20, 30);  /* epoch 2, step_in_epoch 0..9, the last flagged */
	assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), -ENODATA);
	cli_close(c);
}

/* A start position: the ring begins there, and nothing before it is filled (published counts
 * every step the workers filled for this rank). */
static void test_srv_job_start_at_fills_nothing_before(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("at", "pattern:40", 4, 0, 1, 3);
	struct ldc_info in;
	struct ldc_batch b;
	struct ctl_stats st;

	j.start_at = 1;
	j.at_epoch = 1;
	j.at_step = 7;
	open_ok(c, &j, &in);
	assert_int_equal(in.first_step, 17);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 17, 30);
	assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), -ENODATA);
	assert_int_equal(ldc_stats(c, &st), 0);
	assert_int_equal(st.published, 13);
	assert_int_equal(st.samples, 13 * 4);
	cli_close(c);

	/* out of range: a step past the epoch, a position past the job's end */
	j = mkjob("at2", "pattern:40", 4, 0, 1, 3);
	j.start_at = 1;
	j.at_step = 10;
	open_fails(&j, -EINVAL, "at_step 10 is not below the 10 steps of an epoch");
	j.at_epoch = 3;
	j.at_step = 1;
	open_fails(&j, -EINVAL, "past the job's end");
}

/* Step arithmetic (issue 23, item 7): every position a job open makes, its first step and its end
 * (start_epoch, epochs) or a start AT, is at most CTL_STEP_LIMIT; at the limit the job serves,
 * one past it the open is refused naming the field. Regression: a start at step 2^64 - 1 was
 * accepted and the next step wrapped to 0 (the log blamed the consumer), and start_epoch 2^63 of
 * a 2-step epoch became epoch 0. Epochs of 1 step (pattern:4) and of 2 (pattern:8), batch 4. */
static void test_srv_job_step_limit_exact(void **state)
{
	const uint64_t L = CTL_STEP_LIMIT;
	static const struct {
		const char *ds;
		uint64_t start_epoch;
		uint32_t epochs;
		int at;                   /* start AT (at_epoch, at_step) */
		uint64_t at_epoch, at_step;
		uint64_t first, total;    /* when it opens: first step, steps_total */
		const char *needle;       /* else: the refusal */
	} cases[] = {
		/* unbounded from start_epoch: the first step at the limit serves */
		{ "pattern:4", L, 0, 0, 0, 0, L, 0, NULL },
		{ "pattern:4", L + 1, 0, 0, 0, 0, 0, 0, "start_epoch: 4611686018427387905" },
		{ "pattern:8", L / 2, 0, 0, 0, 0, L, 0, NULL },
		{ "pattern:8", L / 2 + 1, 0, 0, 0, 0, 0, 0, "start_epoch: 2305843009213693953 of 2 "
		  "steps starts at step" },
		/* bounded: the end at the limit serves */
		{ "pattern:4", L - 1, 1, 0, 0, 0, L - 1, L, NULL },
		{ "pattern:4", L - 1, 2, 0, 0, 0, 0, 0, "start_epoch: 4611686018427387903 (+ 2 epochs)" },
		{ "pattern:8", L / 2 - 1, 1, 0, 0, 0, L - 2, L, NULL },
		{ "pattern:8", L / 2, 1, 0, 0, 0, 0, 0, "start_epoch: 2305843009213693952 + 1 epochs "
		  "of 2 steps end at step" },
		{ "pattern:8", 1ull << 63, 1, 0, 0, 0, 0, 0, "start_epoch: 9223372036854775808" },
		/* start AT */
		{ "pattern:8", 0, 0, 1, L / 2, 0, L, 0, NULL },
		{ "pattern:8", 0, 0, 1, L / 2, 1, 0, 0, "at_epoch: epoch 2305843009213693952 step 1 of "
		  "2-step epochs is past the step limit" },
		{ "pattern:4", 0, 0, 1, L, 0, L, 0, NULL },
		{ "pattern:4", 0, 0, 1, L + 1, 0, 0, 0, "at_epoch: 4611686018427387905 is past" },
		{ "pattern:4", 0, 0, 1, UINT64_MAX, 0, 0, 0, "at_epoch: 18446744073709551615 is past" },
	};

	(void)state;
	start_server(NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[32];
		snprintf(name, sizeof(name), "lim%zu", i);
		struct ldc_job j = mkjob(name, cases[i].ds, 4, 0, 1, cases[i].epochs);
		j.start_epoch = cases[i].start_epoch;
		j.start_at = cases[i].at;
		j.at_epoch = cases[i].at_epoch;
		j.at_step = cases[i].at_step;
		if (cases[i].needle) {
			open_fails(&j, -EINVAL, cases[i].needle);
			continue;
		}
		struct ldc *c = cli_connect();
		struct ldc_info in;
		open_ok(c, &j, &in);
		assert_int_equal(in.first_step, cases[i].first);
		assert_int_equal(in.steps_total, cases[i].total);
		struct expect e = expect_of(&in, 0);
		uint64_t to = cases[i].total ? cases[i].total : cases[i].first + 2;
		consume_ok(c, &e, cases[i].first, to);  /* the steps after it do not wrap */
		/* ldc_token makes a token for a position at the limit, none past it */
		uint8_t tok[LDC_TOKEN_SIZE];
		assert_int_equal(ldc_token(c, L, tok, sizeof(tok)), LDC_TOKEN_SIZE);
		assert_int_equal(ldc_token(c, L + 1, tok, sizeof(tok)), -EINVAL);
		assert_has(ldc_error(c), "step 4611686018427387905 is past the step limit");
		cli_close(c);
	}
}

/* A rank that comes back with a position starts there, not where loaderd last saw it: its
 * checkpoint is the authority on what was consumed. */
static void test_srv_job_start_at_overrides_reattach_resume(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("back", "pattern:40", 4, 0, 1, 2);
	struct ldc_info in;

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 6);
	cli_close(c);
	c = cli_connect();
	j.start_at = 1;
	j.at_step = 3;
	open_ok(c, &j, &in);
	assert_int_equal(in.first_step, 3);
	consume_ok(c, &e, 3, 8);
	cli_close(c);
	c = cli_connect();
	j.start_at = 0;  /* without one: where loaderd saw the rank last */
	j.at_step = 0;
	open_ok(c, &j, &in);
	assert_int_equal(in.first_step, 8);
	cli_close(c);
}

/* ldc_token at step S, then a fresh job (another name, as after a daemon restart) opened with it
 * starts at S; tokens that do not fit are refused, naming the field. */
static void test_srv_token_resumes_a_fresh_job(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("tok", "pattern:40", 4, 0, 1, 2);
	struct ldc_info in;
	uint8_t tok[LDC_TOKEN_SIZE + 8];
	struct ldc_token t;
	char why[256];

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 3);
	assert_int_equal(ldc_token(c, 1, tok, 8), -ENOSPC);
	assert_int_equal(ldc_token(c, LDC_TOKEN_NEXT, tok, sizeof(tok)), LDC_TOKEN_SIZE);
	assert_int_equal(ldc_token_parse(tok, LDC_TOKEN_SIZE, &t, why, sizeof(why)), 0);
	assert_int_equal(t.epoch, 0);
	assert_int_equal(t.step, 3);
	assert_int_equal(ldc_token(c, 13, tok, sizeof(tok)), LDC_TOKEN_SIZE);
	assert_memory_equal(t.dataset, in.dataset_id, sizeof(t.dataset));
	cli_close(c);

	c = cli_connect();
	struct ldc_job k = mkjob("tok-after-restart", "pattern:40", 4, 0, 1, 2);
	k.token = tok;
	k.token_len = LDC_TOKEN_SIZE;
	open_ok(c, &k, &in);
	assert_int_equal(in.first_step, 13);
	consume_ok(c, &e, 13, 20);
	cli_close(c);

	k.job = "tok-world";
	k.world = 2;
	open_fails(&k, -EINVAL, "resume token: world: the token is for 1 ranks, this job has 2");
	k = mkjob("tok-data", "pattern:80", 4, 0, 1, 2);
	k.token = tok;
	k.token_len = LDC_TOKEN_SIZE;
	open_fails(&k, -EINVAL, "resume token: dataset: this dataset is not the one");
	k.dataset = "pattern:40";
	k.token_len = LDC_TOKEN_SIZE - 1;
	open_fails(&k, -EBADMSG, "resume token: truncated");
	k.token_len = LDC_TOKEN_SIZE;
	tok[20] ^= 1;
	open_fails(&k, -EBADMSG, "resume token: checksum");
}

/* ---- 2. ranks ---- */

struct rank_arg {
	const char *job, *dataset;
	uint32_t batch, rank, world, epochs, slots, crop;
};

static int child_read_rank(const void *argp, int out)
{
	const struct rank_arg *a = argp;
	struct ldc_job j = mkjob(a->job, a->dataset, a->batch, a->rank, a->world, a->epochs);
	struct ldc_info in;
	struct ldc_batch b;
	struct ldc *c;
	char msg[512];
	int r;

	j.slots = a->slots;
	j.crop_h = j.crop_w = a->crop;
	if (ldc_connect(g_sock, &c, msg, sizeof(msg))) {
		dprintf(out, "rank %u: %s", a->rank, msg);
		return 1;
	}
	r = ldc_open(c, &j, &in);
	if (r)
		msg_bad(msg, sizeof(msg), "open: %s", ldc_error(c));
	else if (in.first_step != 0 || in.steps_total == 0 || in.ring->rank != a->rank)
		r = msg_bad(msg, sizeof(msg), "first_step %" PRIu64 " steps_total %" PRIu64,
			in.first_step, in.steps_total);
	if (r == 0) {
		struct expect e = expect_of(&in, a->rank);
		r = consume(c, &e, 0, in.steps_total, msg, sizeof(msg));
	}
	if (r == 0 && (r = ldc_acquire(c, ACQUIRE_MS, &b)) != -ENODATA)
		r = msg_bad(msg, sizeof(msg), "after the last step: %d %s", r, ldc_error(c));
	else if (r == -ENODATA)
		r = 0;
	if (r == 0)
		snprintf(msg, sizeof(msg), "ok %" PRIu64, in.steps_total);
	dprintf(out, "%s", msg);
	ldc_close(c);
	return r ? 1 : 0;
}

static void test_srv_ranks_read_concurrently(void **state)
{
	(void)state;
	start_server(NULL);
	struct rank_arg a[2] = {
		{ "duo", "pattern:4096", 16, 0, 2, 2, 8, 8 },
		{ "duo", "pattern:4096", 16, 1, 2, 2, 8, 8 },
	};
	pid_t pid[2];
	int rfd[2], st;
	char out[600];

	for (int i = 0; i < 2; i++)
		pid[i] = spawn_child(child_read_rank, &a[i], &rfd[i]);
	for (int i = 0; i < 2; i++) {
		child_wait(pid[i], rfd[i], 20000, out, sizeof(out), &st);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			fail_msg("rank %d: %s", i, out);
		assert_string_equal(out, "ok 256");  /* 4096 / (16 * 2) = 128 steps, 2 epochs */
	}
}

/* One worker only: a rank that stops consuming must not take it from the other rank. */
static void test_srv_rank_stalled_does_not_block_other(void **state)
{
	(void)state;
	start_server(&(struct tsrv){ .workers = 1 });
	struct ldc *c0 = cli_connect(), *c1 = cli_connect();
	struct ldc_job j0 = mkjob("stall", "pattern:800", 8, 0, 2, 1);
	struct ldc_job j1 = mkjob("stall", "pattern:800", 8, 1, 2, 1);
	struct ldc_info in0, in1;
	struct ldc_batch b;
	struct ctl_stats st;

	open_ok(c0, &j0, &in0);
	open_ok(c1, &j1, &in1);
	assert_int_equal(in0.job_id, in1.job_id);
	assert_int_equal(in0.steps_total, 50);
	struct expect e0 = expect_of(&in0, 0), e1 = expect_of(&in1, 1);
	char msg[512];
	assert_int_equal(ldc_acquire(c0, ACQUIRE_MS, &b), 0);
	if (check_batch(&b, 0, &e0, msg, sizeof(msg)))
		fail_msg("%s", msg);
	/* rank 0 holds step 0 and takes nothing more; rank 1 reads its whole job */
	consume_ok(c1, &e1, 0, 50);
	wait_published(c0, 4, &st);
	assert_int_equal(st.published, 4);   /* its ring is full and stays so */
	assert_int_equal(st.released, 0);
	assert_int_equal(st.occupancy, 4);
	assert_int_equal(st.ranks_attached, 2);
	wait_published(c1, 50, &st);  /* counted just after the publish: may lag the batch */
	assert_int_equal(st.published, 50);
	/* and rank 0 can still finish */
	assert_int_equal(ldc_release(c0, &b), 0);
	consume_ok(c0, &e0, 1, 50);
	assert_int_equal(ldc_acquire(c0, ACQUIRE_MS, &b), -ENODATA);
	assert_int_equal(ldc_acquire(c1, ACQUIRE_MS, &b), -ENODATA);
	cli_close(c0);
	cli_close(c1);
}

/* ---- 3. a consumer dies holding slots ---- */

#define RE_JOB(rank) mkjob("re", "pattern:640", 8, (rank), 2, 2)  /* 40 steps/epoch, 80 in all */

/* Read steps 0..4, acquire 5, 6, 7, release 5 only, say so, and die by SIGKILL. */
static int child_hold_and_die(const void *arg, int out)
{
	struct ldc_job j = RE_JOB(0);
	struct ldc_batch b[3];
	struct ldc_info in;
	struct ldc *c = NULL;
	char msg[512];

	(void)arg;
	if (ldc_connect(g_sock, &c, msg, sizeof(msg)) || ldc_open(c, &j, &in)) {
		dprintf(out, "open failed: %s", c ? ldc_error(c) : msg);
		return 1;
	}
	struct expect e = expect_of(&in, 0);
	if (consume(c, &e, 0, 5, msg, sizeof(msg))) {
		dprintf(out, "%s", msg);
		return 1;
	}
	for (int i = 0; i < 3; i++)
		if (ldc_acquire(c, ACQUIRE_MS, &b[i]) ||
		    check_batch(&b[i], 5 + i, &e, msg, sizeof(msg))) {
			dprintf(out, "step %d: %s %s", 5 + i, msg, ldc_error(c));
			return 1;
		}
	if (ldc_release(c, &b[0])) {
		dprintf(out, "release: %s", ldc_error(c));
		return 1;
	}
	dprintf(out, "released 0..5, holding 6 7");
	raise(SIGKILL);
	return 1;
}

static void test_srv_consumer_sigkill_reattach_resumes(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	int rfd, st;
	char out[600];

	/* Rank 1 starts in this process; rank 0 in a child that dies holding steps 6 and 7. */
	pid_t child = spawn_child(child_hold_and_die, NULL, &rfd);
	struct ldc *c1 = cli_connect();
	struct ldc_job j1 = RE_JOB(1);
	struct ldc_info in1, in0;
	struct ldc_batch b;
	struct ctl_stats s;

	open_ok(c1, &j1, &in1);
	struct expect e1 = expect_of(&in1, 1);
	consume_ok(c1, &e1, 0, 10);
	child_wait(child, rfd, 10000, out, sizeof(out), &st);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		fail_msg("the rank 0 child did not die as planned: %s", out);
	assert_string_equal(out, "released 0..5, holding 6 7");

	/* The other rank goes on. */
	consume_ok(c1, &e1, 10, 40);
	assert_alive(srv);

	/* A new rank 0 resumes at the first step the dead one had not released. */
	struct ldc *c0 = cli_connect();
	struct ldc_job j0 = RE_JOB(0);
	open_ok(c0, &j0, &in0);
	assert_int_equal(in0.job_id, in1.job_id);
	assert_int_equal(in0.first_step, 6);
	assert_int_equal(in0.ring->first_step, 6);
	assert_int_equal(in0.steps_total, 80);
	struct expect e0 = expect_of(&in0, 0);
	consume_ok(c0, &e0, 6, 80);  /* contiguous: nothing lost after 5, nothing again before 6 */
	assert_int_equal(ldc_acquire(c0, ACQUIRE_MS, &b), -ENODATA);
	assert_int_equal(ldc_stats(c0, &s), 0);
	assert_int_equal(s.attaches, 2);
	assert_int_equal(s.released, 80);
	consume_ok(c1, &e1, 40, 80);
	assert_int_equal(ldc_acquire(c1, ACQUIRE_MS, &b), -ENODATA);
	cli_close(c0);
	cli_close(c1);
	stop_server(srv);
}

/* A clean close with held batches resumes at the first one not released. */
static void test_ldc_close_holding_resumes_at_first_unreleased(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("closer", "pattern:1000", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b[2];

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 7);
	assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b[0]), 0);
	assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b[1]), 0);
	cli_close(c);  /* holding 7 and 8 */
	c = cli_connect();
	open_ok(c, &j, &in);
	assert_int_equal(in.first_step, 7);
	consume_ok(c, &e, 7, 15);
	cli_close(c);
}

static void test_srv_reattach_after_end_gets_enodata(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("done", "pattern:40", 4, 0, 1, 1);
	struct ldc_info in;
	struct ldc_batch b;

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 10);
	cli_close(c);
	c = cli_connect();
	open_ok(c, &j, &in);
	assert_int_equal(in.first_step, 10);
	assert_int_equal(in.steps_total, 10);
	assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), -ENODATA);
	cli_close(c);
}

/* A job with no rank attached is forgotten after the linger time: its name is free again and a
 * rank that comes back starts afresh. */
static void test_srv_job_forgotten_after_linger(void **state)
{
	(void)state;
	start_server(&(struct tsrv){ .linger_ms = 100 });
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("brief", "pattern:1000", 4, 0, 1, 0), j2 = j;
	struct ldc_info in;

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 5);
	cli_close(c);
	/* Until it is forgotten, other parameters are refused; then they make a new job. */
	j2.batch = 8;
	int64_t end = mono_ms() + 3000;
	for (;;) {
		c = cli_connect();
		int r = ldc_open(c, &j2, &in);
		if (r == 0)
			break;
		if (r != -EEXIST || mono_ms() > end)
			fail_msg("reopening a lingering job: %d %s", r, ldc_error(c));
		cli_close(c);
		usleep(50 * 1000);
	}
	assert_int_equal(in.first_step, 0);
	assert_int_equal(in.ring->batch, 8);
	e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 3);
	cli_close(c);
}

/* ---- 4. the producer dies ---- */

static void test_ldc_producer_sigkill_acquire_epipe(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("victim", "pattern:1000", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch held[4], b;
	char msg[512];

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &held[i]), 0);
	/* Step 4 cannot come: we hold all 4 slots. Kill the daemon while we wait for it. */
	signal_later(srv, SIGKILL, 300);
	int r = ldc_acquire(c, -1, &b);
	int64_t back = mono_ms();
	int64_t sent = signal_joined();
	assert_int_equal(r, -EPIPE);
	assert_has(ldc_error(c), "exited or was killed");
	if (back - sent >= 3000)
		fail_msg("ldc_acquire noticed the dead daemon after %" PRId64 " ms", back - sent);
	/* What was published stays readable. */
	for (int i = 0; i < 4; i++)
		if (check_batch(&held[i], (uint64_t)i, &e, msg, sizeof(msg)))
			fail_msg("after the daemon died: %s", msg);
	assert_int_equal(ldc_acquire(c, 0, &b), -EPIPE);
	int st;
	assert_int_equal(pid_reap(srv, 3000, &st), 0);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	cli_close(c);
}

/* ---- 5. a hostile consumer ---- */

static void test_srv_hostile_consumer_dropped(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("evil", "pattern:1000", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b0, b;

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b0), 0);
	wait_ring_full(ldc_ring_base(c), in.ring);  /* wait for step 3; step 0's word is ours */

	/* Garbage in the state words of slots 1..3 and in every slot header, then release step 0:
	 * the doorbell sends a worker to fill step 4, then to look at step 5's word. */
	char *base = ldc_ring_base(c);
	const struct ring_hdr *h = in.ring;
	for (uint32_t i = 0; i < h->slots; i++) {
		if (i)
			__atomic_store_n((uint32_t *)(base + h->states_offset + 64 * i),
					 0xdeadbeefu ^ i, __ATOMIC_RELEASE);
		memset(base + h->slots_offset + h->slot_size * i, 0xa5,
		       sizeof(struct ring_slot_hdr));
	}
	assert_int_equal(ldc_release(c, &b0), 0);
	int r = ldc_acquire(c, 3000, &b);
	if (r != -EPIPE)
		fail_msg("the corrupting client was not dropped: %d %s", r, ldc_error(c));
	assert_has(ldc_error(c), "dropped");
	assert_has(ldc_error(c), "corrupted");
	cli_close(c);
	assert_alive(srv);

	/* Another job works, and the rank resumes at the first step it had not released. */
	assert_serves("after-evil");
	c = cli_connect();
	open_ok(c, &j, &in);
	assert_int_equal(in.first_step, 1);
	consume_ok(c, &e, 1, 9);
	cli_close(c);
	stop_server(srv);
}

/* The same, but the consumer corrupts its words and never releases anything, as a hostile (or
 * broken) consumer would. Regression: srv once read a ring's words only when a worker looked for
 * work in it, and a full ring only after a doorbell; with none, the corruption went unnoticed and
 * the client's ldc_acquire(-1) waited forever. Housekeeping now sweeps every attached ring. */
static void test_srv_hostile_consumer_dropped_without_release(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("evil2", "pattern:1000", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b;

	open_ok(c, &j, &in);
	wait_ring_full(ldc_ring_base(c), in.ring);
	usleep(200 * 1000);  /* the workers have looked at step 4, found it taken, and sleep */
	char *base = ldc_ring_base(c);
	const struct ring_hdr *h = in.ring;
	for (uint32_t i = 0; i < h->slots; i++) {
		__atomic_store_n((uint32_t *)(base + h->states_offset + 64 * i), 0xdeadbeefu ^ i,
				 __ATOMIC_RELEASE);
		memset(base + h->slots_offset + h->slot_size * i, 0xa5,
		       sizeof(struct ring_slot_hdr));
	}
	int r = ldc_acquire(c, 2000, &b);
	if (r != -EPIPE)
		fail_msg("the corrupting client was not dropped: %d %s", r, ldc_error(c));
	assert_has(ldc_error(c), "corrupted");
	cli_close(c);
	assert_alive(srv);
}

/* ---- 6. bad messages ---- */

static void test_srv_ctl_bad_framing_refused(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	static char pkt[2 * CTL_MSG_MAX];
	struct ctl_job_open m;
	size_t n;

	good_open(&m, "framing");
	send_refused("garbage", "\x01\x02\x03\x04garbage", 11, EBADMSG, "malformed");
	n = make_pkt(pkt, 0x12345678u, CTL_VERSION, CTL_STATS_REQ, 16, 0, NULL, 0);
	send_refused("wrong magic", pkt, n, EBADMSG, "malformed");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION + 1, CTL_JOB_OPEN, 16 + sizeof(m), 0, &m,
		     sizeof(m));
	send_refused("wrong version", pkt, n, EPROTO, "version");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, CTL_STATS_REQ, 100, 0, NULL, 0);
	send_refused("length longer than the packet", pkt, n, EBADMSG, "malformed");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, CTL_JOB_OPEN, 16, 0, &m, sizeof(m));
	send_refused("length shorter than the packet", pkt, n, EBADMSG, "malformed");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, CTL_STATS_REQ, 16, 7, NULL, 0);
	send_refused("reserved header field", pkt, n, EBADMSG, "malformed");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, 0x7fff, 16, 0, NULL, 0);
	send_refused("unknown type", pkt, n, EBADMSG, "malformed");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, 0, 16, 0, NULL, 0);
	send_refused("type 0", pkt, n, EBADMSG, "malformed");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, CTL_JOB_OK, 16 + 64, 0, pkt + 1024, 64);
	send_refused("server-only type from a client", pkt, n, EBADMSG, "unexpected message type");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, CTL_JOB_OPEN, 16 + sizeof(m) - 4, 0, &m,
		     sizeof(m) - 4);
	send_refused("JOB_OPEN body too short", pkt, n, EBADMSG, "unexpected");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, CTL_JOB_OPEN, 16 + CTL_JOB_OPEN_SIZE_V2 - 1, 0,
		     &m, CTL_JOB_OPEN_SIZE_V2 - 1);
	send_refused("JOB_OPEN body a byte short of the older form", pkt, n, EBADMSG, "unexpected");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, CTL_JOB_OPEN, 16 + sizeof(m) + 8, 0, &m,
		     sizeof(m));
	memset(pkt + n, 0, 8);
	send_refused("JOB_OPEN body too long", pkt, n + 8, EBADMSG, "unexpected");
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, CTL_STATS_REQ, 16 + 8, 0, &m, 8);
	send_refused("STATS_REQ with a body", pkt, n, EBADMSG, "unexpected");
	memset(pkt, 0, sizeof(pkt));
	n = make_pkt(pkt, CTL_MAGIC, CTL_VERSION, CTL_JOB_OPEN, 2 * CTL_MSG_MAX, 0, &m, sizeof(m));
	send_refused("packet larger than CTL_MSG_MAX", pkt, 2 * CTL_MSG_MAX, EBADMSG, "malformed");
	assert_alive(srv);
	assert_serves("after-framing");
	stop_server(srv);
}

/* Regression: a zero-length packet was read as end of file (ctl_recv returned -EPIPE for n == 0),
 * so srv closed the connection without the CTL_ERROR every other bad packet gets. */
static void test_srv_ctl_empty_packet_refused(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);

	send_refused("empty packet", "", 0, EBADMSG, "malformed");
	assert_alive(srv);
	assert_serves("after-empty");
}

static void test_srv_ctl_bad_job_open_fields_refused(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	static const struct {
		const char *what, *needle;
	} cases[] = {
		{ "rank >= world", "rank: 2 is not below world size 2" },
		{ "batch 0", "batch: 0" },
		{ "job name not NUL-terminated", "job: empty, not NUL-terminated" },
		{ "weight past its limit", "weight: 1001 is not in 1..1000" },
		{ "junk after the dataset's NUL", "dataset: " },
		{ "job name with '/'", "job: only letters" },
		{ "world 0", "world: 0" },
		{ "slots 1", "slots: 1" },
		{ "crop_h without crop_w", "crop: 8x0" },
		{ "unknown transform bit", "transforms: unknown bits 0x100" },
		{ "unknown sampling", "sampling: unknown mode 99" },
		{ "start_epoch past the step limit", "start_epoch: 4611686018427387905" },
		{ "at_epoch 2^64 - 1", "at_epoch: 18446744073709551615 is past the step limit" },
		{ "unknown share mode", "share: unknown mode 3" },
		{ "owner_uid without a join", "owner_uid: for share JOIN only" },
		{ "balance 2", "balance: 0 or 1" },
		{ "block past its limit", "block: 16777217 records is not in 1..16777216" },
		{ "window past its limit", "window: 65537 blocks is not in 1..65536" },
		{ "block with sampling shuffle", "block: for sampling block only" },
		{ "window with sampling sequential", "window: for sampling block only" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ctl_job_open m;
		good_open(&m, "fields");
		switch (i) {
		case 0: m.world = 2; m.rank = 2; break;
		case 1: m.batch = 0; break;
		case 2: memset(m.job, 'a', sizeof(m.job)); break;
		case 3: m.weight = CTL_WEIGHT_MAX + 1; break;
		case 4: m.dataset[sizeof(m.dataset) - 1] = 'x'; break;
		case 5: memset(m.job, 0, sizeof(m.job)); memcpy(m.job, "a/b", 3); break;
		case 6: m.world = 0; break;
		case 7: m.slots = 1; break;
		case 8: m.crop_h = 8; break;
		case 9: m.transforms = 0x100; break;
		case 10: m.sampling = 99; break;
		case 11: m.start_epoch = CTL_STEP_LIMIT + 1; break;
		case 12: m.start = CTL_START_AT; m.at_epoch = UINT64_MAX; break;
		case 13: m.share = 3; break;
		case 14: m.owner_uid = 1000; break;
		case 15: m.balance = 2; break;
		case 16: m.sampling = CTL_SAMPLE_BLOCK; m.block = CTL_BLOCK_MAX + 1; break;
		case 17: m.sampling = CTL_SAMPLE_BLOCK; m.window = CTL_WINDOW_MAX + 1; break;
		case 18: m.block = 64; break;
		case 19: m.sampling = CTL_SAMPLE_SEQUENTIAL; m.window = 16; break;
		}
		int fd = raw_connect();
		assert_int_equal(ctl_send(fd, CTL_JOB_OPEN, &m, sizeof(m), NULL, 0), 0);
		expect_refused(fd, cases[i].what, EINVAL, cases[i].needle);
		fd_close(fd);
	}
	assert_alive(srv);
	assert_serves("fields");  /* none of the refused opens created the job */
	stop_server(srv);
}

/* Open rank @rank of a 2-rank block-mode job @job with geometry (@block, @window), sending
 * @len bytes of the message; returns the connection (the reply not yet read). */
static int geo_open(const char *job, uint32_t rank, uint32_t block, uint32_t window, size_t len)
{
	struct ctl_job_open m;
	int fd = raw_connect();

	good_open(&m, job);
	m.world = 2;
	m.rank = rank;
	m.sampling = CTL_SAMPLE_BLOCK;
	m.block = block;
	m.window = window;
	assert_int_equal(ctl_send(fd, CTL_JOB_OPEN, &m, len, NULL, 0), 0);
	return fd;
}

static void expect_ok(int fd, const char *what)
{
	char buf[CTL_MSG_MAX];
	uint16_t type = 0;
	int fds[2], nfds = 0;
	ssize_t n = ctl_recv(fd, buf, &type, fds, &nfds);

	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (n != (ssize_t)sizeof(struct ctl_job_ok) || type != CTL_JOB_OK)
		fail_msg("%s: reply %zd bytes type %u, want CTL_JOB_OK", what, n, type);
}

/* Block sampling's geometry chosen by the client: each bound taken at its limit; the ranks of a
 * job agree on it (another value refused naming the field; 0 is the default, so the message
 * without the fields, as older clients send it, joins a job opened with 64 x 16 spelled out). */
static void test_srv_ctl_block_geometry_agreed(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	int a = geo_open("geo", 0, CTL_BLOCK_MAX, CTL_WINDOW_MAX, sizeof(struct ctl_job_open));

	expect_ok(a, "block and window at their limits");
	int b = geo_open("geo", 1, CTL_BLOCK_MAX - 1, CTL_WINDOW_MAX, sizeof(struct ctl_job_open));
	expect_refused(b, "another block", EEXIST, "exists with another block");
	fd_close(b);
	b = geo_open("geo", 1, CTL_BLOCK_MAX, 1, sizeof(struct ctl_job_open));
	expect_refused(b, "another window", EEXIST, "exists with another window");
	fd_close(b);
	b = geo_open("geo", 1, 0, 0, CTL_JOB_OPEN_SIZE_V2);
	expect_refused(b, "the defaults", EEXIST, "exists with another block");
	fd_close(b);
	b = geo_open("geo", 1, CTL_BLOCK_MAX, CTL_WINDOW_MAX, sizeof(struct ctl_job_open));
	expect_ok(b, "the same geometry");
	fd_close(b);
	fd_close(a);

	a = geo_open("geo-default", 0, 0, 0, CTL_JOB_OPEN_SIZE_V2);
	expect_ok(a, "the older message (no block, window)");
	b = geo_open("geo-default", 1, CTL_BLOCK_DEFAULT, CTL_WINDOW_DEFAULT,
		     sizeof(struct ctl_job_open));
	expect_ok(b, "the defaults spelled out");
	fd_close(b);
	fd_close(a);
	assert_alive(srv);
	stop_server(srv);
}

static void test_srv_ctl_stats_before_open_refused(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	int fd = raw_connect();

	assert_int_equal(ctl_send(fd, CTL_STATS_REQ, NULL, 0, NULL, 0), 0);
	expect_refused(fd, "stats before open", EINVAL, "before a job");
	fd_close(fd);
	assert_alive(srv);
	assert_serves("after-stats");
}

/* A second JOB_OPEN on a connection is refused, and the first job's rank is detached with it. */
static void test_srv_ctl_second_open_refused(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	struct ctl_job_open m;
	int bell;
	int fd = raw_open("first", NULL, &bell);

	good_open(&m, "second");
	assert_int_equal(ctl_send(fd, CTL_JOB_OPEN, &m, sizeof(m), NULL, 0), 0);
	expect_refused(fd, "second JOB_OPEN", EINVAL, "already has a job");
	fd_close(fd);
	assert_serves("first");  /* rank 0 of "first" is free again (no EBUSY) */
	assert_alive(srv);
}

/* More fds than the server takes: the packet is refused and no fd stays open in the server. */
/* The server's fd count comes back to @before (give it 3 s to settle). */
static void assert_fds_back(pid_t srv, int before)
{
	int64_t end = mono_ms() + 3000;
	int now;

	while ((now = count_fds(srv)) != before && mono_ms() < end)
		usleep(5000);
	assert_int_equal(now, before);
}

/* A message of @type (no body) with @n eventfds, built by hand (ctl_send takes at most
 * CTL_FDS_BATCH): refused with @needle, every fd closed by the server. */
static void many_fds(pid_t srv, int before, uint16_t type, int n, const char *needle)
{
	int fd = raw_connect();
	int fds[CTL_FDS_BATCH + 8];

	assert_true(before > 0);
	assert_true(n <= (int)(sizeof(fds) / sizeof(fds[0])));
	for (int i = 0; i < n; i++) {
		fds[i] = eventfd(0, EFD_CLOEXEC);
		assert_true(fds[i] >= 0);
	}
	struct ctl_hdr h = { .magic = CTL_MAGIC, .version = CTL_VERSION, .type = type,
			     .length = sizeof(h) };
	union {
		char b[CMSG_SPACE((CTL_FDS_BATCH + 8) * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { &h, sizeof(h) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			      .msg_controllen = CMSG_SPACE((size_t)n * sizeof(int)) };
	memset(&u, 0, sizeof(u));
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, (size_t)n * sizeof(int));
	ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	assert_int_equal(sent, sizeof(h));
	expect_refused(fd, "many fds", EBADMSG, needle);
	fd_close(fd);
	assert_fds_back(srv, before);  /* the server closed what it got */
}

/* Descriptors come only with a job open or a shard batch; more than a batch in one message is
 * malformed (the server's control buffer holds a batch and a little more: past that the kernel
 * truncates, and what it passed is closed). */
static void test_srv_ctl_client_many_fds_refused(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	int before = count_fds(srv);
	many_fds(srv, before, CTL_STATS_REQ, 5, "only with a job open or a batch of shards");
	many_fds(srv, before, CTL_SHARD_FDS, CTL_FDS_BATCH + 1, "malformed");
	many_fds(srv, before, CTL_SHARD_FDS, CTL_FDS_BATCH + 5, "malformed");
	/* a batch of exactly CTL_FDS_BATCH passes the framing; its empty body is refused */
	many_fds(srv, before, CTL_SHARD_FDS, CTL_FDS_BATCH, "a shard batch of 0 bytes");
	assert_serves("after-fds");
}

/* A job open carries exactly one fd, the dataset the client opened, and it must be a regular
 * file: an eventfd (as a FIFO, a device or a directory would be) is refused before anything reads
 * it, two fds are refused, an fd with any other message is refused; each is closed by the server.
 * (Before datasets were passed open, any fd was refused: srv once let one through, see git log.)
 * fd_open opens job @job with @fds: refused with a message holding @needle, or accepted when
 * @needle is NULL. */
static void fd_open(const char *job, const int *fds, int nfds, const char *needle)
{
	struct ctl_job_open m;
	char buf[CTL_MSG_MAX];
	uint16_t type = 0;
	int got[2], ngot = 0;
	int fd = raw_connect();

	good_open(&m, job);
	assert_int_equal(ctl_send(fd, CTL_JOB_OPEN, &m, sizeof(m), fds, nfds), 0);
	ssize_t n = ctl_recv(fd, buf, &type, got, &ngot);
	for (int i = 0; i < ngot; i++)
		close(got[i]);
	if (!needle) {  /* accepted */
		assert_int_equal(n, sizeof(struct ctl_job_ok));
		assert_int_equal(type, CTL_JOB_OK);
		fd_close(fd);
		return;
	}
	if (n >= 0 && type == CTL_JOB_OK)
		fail_msg("%s: the server accepted it", job);
	if (n != (ssize_t)sizeof(struct ctl_error) || type != CTL_ERROR)
		fail_msg("%s: reply %zd bytes of type %u, want CTL_ERROR", job, n, type);
	struct ctl_error e;
	memcpy(&e, buf, sizeof(e));
	assert_has(e.text, needle);
	assert_int_equal(ctl_recv(fd, buf, &type, NULL, NULL), -EPIPE);
	fd_close(fd);
}

static void test_srv_ctl_job_open_fds_checked(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	int before = count_fds(srv);
	char path[128];
	int efd = eventfd(0, EFD_CLOEXEC);

	snprintf(path, sizeof(path), "%s/data", g_dir);
	int reg = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(efd >= 0 && reg >= 0);
	int two[2] = { reg, reg };
	fd_open("fd-eventfd", &efd, 1, "is not a regular file");
	fd_open("fd-two", two, 2, "one file descriptor (the dataset), not 2");
	int sfd = raw_connect();
	assert_int_equal(ctl_send(sfd, CTL_STATS_REQ, NULL, 0, &reg, 1), 0);
	expect_refused(sfd, "stats with an fd", EBADMSG, "only with a job open");
	fd_close(sfd);
	fd_open("fd-regular", &reg, 1, NULL);  /* accepted: the pattern filler has no use for it */
	close(efd);
	close(reg);
	assert_fds_back(srv, before);
	assert_alive(srv);
	assert_serves("after-fd");
}

/* A job open that takes long (a dataset on a hung file system) delays only its own client: the
 * server's control loop goes on serving other jobs and loaderctl meanwhile, and the slow client
 * gets its job when the open is done. Regression: the open ran on the control thread under the
 * server lock, so a FIFO as dataset stalled every job on the node. */
static int child_open_slow(const void *arg, int out)
{
	struct ldc_job j = mkjob("slowopen", "slowopen:1500", 4, 0, 1, 1);
	struct ldc_info in;
	struct ldc *c = NULL;
	char msg[512];

	(void)arg;
	int64_t t0 = mono_ms();
	if (ldc_connect(g_sock, &c, msg, sizeof(msg)) || ldc_open(c, &j, &in)) {
		dprintf(out, "open failed: %s", c ? ldc_error(c) : msg);
		return 1;
	}
	struct expect e = expect_of(&in, 0);
	if (consume(c, &e, 0, 3, msg, sizeof(msg))) {
		dprintf(out, "%s", msg);
		return 1;
	}
	dprintf(out, "opened after %lld ms", (long long)(mono_ms() - t0));
	ldc_close(c);
	return 0;
}

static void test_srv_slow_job_open_delays_only_its_client(void **state)
{
	char out[512];
	int rfd, status;

	(void)state;
	start_server(NULL);
	pid_t pid = spawn_child(child_open_slow, NULL, &rfd);
	usleep(200000);  /* the child's open is under way */
	int64_t t0 = mono_ms();
	assert_serves("beside-slow");
	int fd = raw_connect();
	struct ctl_admin a = { .op = CTL_OP_STATUS };
	char buf[CTL_MSG_MAX];
	uint16_t type;
	assert_int_equal(ctl_send(fd, CTL_ADMIN, &a, sizeof(a), NULL, 0), 0);
	assert_true(ctl_recv(fd, buf, &type, NULL, NULL) > 0);
	assert_int_equal(type, CTL_ADMIN_TEXT);
	fd_close(fd);
	int64_t took = mono_ms() - t0;
	if (took >= 1000)
		fail_msg("another client waited %lld ms behind a slow job open", (long long)took);
	child_wait(pid, rfd, 10000, out, sizeof(out), &status);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("slow client: %s", out);
	assert_has(out, "opened after");
}

/* ---- 7. job rules ---- */

static void test_srv_job_spec_mismatch_eexist(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c0 = cli_connect();
	struct ldc_job j0 = mkjob("rules", "pattern:1000", 8, 0, 2, 1), j;
	struct ldc_info in;

	j0.seed = 7;
	open_ok(c0, &j0, &in);

	j = j0, j.rank = 1, j.batch = 16;
	open_fails(&j, -EEXIST, "batch");
	j = j0, j.rank = 1, j.dataset = "pattern:2000";
	open_fails(&j, -EEXIST, "dataset");
	j = j0, j.rank = 1, j.seed = 8;
	open_fails(&j, -EEXIST, "seed");
	j = j0, j.rank = 1, j.world = 4;
	open_fails(&j, -EEXIST, "world");
	j = j0, j.rank = 1, j.epochs = 2;
	open_fails(&j, -EEXIST, "epochs");
	j = j0, j.rank = 1, j.crop_h = j.crop_w = 8;
	open_fails(&j, -EEXIST, "crop");
	j = j0, j.rank = 1, j.sampling = CTL_SAMPLE_SEQUENTIAL;
	open_fails(&j, -EEXIST, "sampling");
	j = j0, j.rank = 1, j.tail = CTL_TAIL_DROP;
	open_fails(&j, -EEXIST, "tail");

	/* The same parameters join; an attached rank is busy. */
	struct ldc *c1 = cli_connect();
	j = j0, j.rank = 1;
	open_ok(c1, &j, &in);
	open_fails(&j, -EBUSY, "attached");
	open_fails(&j0, -EBUSY, "attached");
	cli_close(c1);
	cli_close(c0);
}

static void test_srv_job_open_error_reaches_client(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	struct ldc_job j = mkjob("nods", "nosuch:thing", 4, 0, 1, 0);

	open_fails(&j, -ENOENT, "no such dataset: nosuch:thing");
	j = mkjob("small", "pattern:10", 8, 0, 2, 0);
	open_fails(&j, -EINVAL, "fewer than one global batch");
	assert_alive(srv);
}

/* Parse "KEY<n> <unit>" in @text as bytes; -1 if absent. */
static int64_t amount_after(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	char *end;

	if (!p)
		return -1;
	p += strlen(key);
	unsigned long long v = strtoull(p, &end, 10);
	if (end == p)
		return -1;
	while (*end == ' ')
		end++;
	if (!strncmp(end, "GiB", 3))
		return (int64_t)(v << 30);
	if (!strncmp(end, "MiB", 3))
		return (int64_t)(v << 20);
	if (!strncmp(end, "KiB", 3))
		return (int64_t)(v << 10);
	if (!strncmp(end, "bytes", 5) || *end == 'B')
		return (int64_t)v;
	return -1;
}

/* The refusal says how much the job needs and what the limit is, within a factor of 2. */
static void check_mem_message(const char *text, uint64_t need, uint64_t limit)
{
	int64_t n = amount_after(text, "needs "), l = amount_after(text, "limit ");

	if (n < (int64_t)(need / 2) || n > (int64_t)(need * 2))
		fail_msg("\"%s\": the job needs %" PRIu64 " bytes", text, need);
	if (l < (int64_t)(limit / 2) || l > (int64_t)(limit * 2))
		fail_msg("\"%s\": the limit is %" PRIu64 " bytes", text, limit);
}

static uint64_t ring_bytes(uint32_t slots, uint32_t batch, uint32_t crop)
{
	struct ring_desc d = { .slots = slots, .batch = batch, .dtype = RING_DTYPE_U8, .world = 1 };
	uint64_t bytes;

	if (crop) {
		d.sample_bytes = (uint64_t)crop * crop * 3;
		d.ndim = 3;
		d.layout = RING_LAYOUT_NHWC;
		d.shape[0] = d.shape[1] = crop;
		d.shape[2] = 3;
	} else {
		d.sample_bytes = 64;
		d.ndim = 1;
		d.shape[0] = 64;
	}
	assert_int_equal(ring_size(&d, &bytes), 0);
	return bytes;
}

/* A job @name of batch @batch and @crop px square crops (0: 64-byte samples) on a server whose
 * ring memory limit is @limit bytes: refused with ENOMEM, saying what it needs and the limit. */
static void mem_limit_case(uint64_t limit, const char *name, uint32_t batch, uint32_t crop)
{
	start_server(&(struct tsrv){ .mem_limit = limit, .ring_flags = RING_CREATE_NO_HUGE });
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob(name, "pattern:1000", batch, 0, 1, 0);
	struct ldc_info in;

	j.crop_h = j.crop_w = crop;
	assert_int_equal(ldc_open(c, &j, &in), -ENOMEM);
	check_mem_message(ldc_error(c), ring_bytes(4, batch, crop), limit);
	cli_close(c);
}

static void test_srv_job_mem_limit_enomem(void **state)
{
	(void)state;
	mem_limit_case(1 << 20, "big", 64, 64);
	assert_serves("fits");  /* a 40 KiB ring fits */
}

/* Regression: srv reported the need and the limit in whole MiB, rounded down, so a refused small
 * ring read "needs 0 MiB of ring memory; limit 0 MiB": it did not say how much the job needs. */
static void test_srv_job_mem_limit_message_small_ring(void **state)
{
	(void)state;
	mem_limit_case(16 << 10, "small", 4, 0);
}

/* A ring's memory counts against the limit until its consumer goes, and no longer. */
static void test_srv_job_mem_released_on_detach(void **state)
{
	(void)state;
	uint64_t one = ring_bytes(4, 4, 0);
	start_server(&(struct tsrv){ .mem_limit = one * 3 / 2, .ring_flags = RING_CREATE_NO_HUGE });
	struct ldc *a = cli_connect();
	struct ldc_job ja = mkjob("mem-a", "pattern:1000", 4, 0, 1, 0);
	struct ldc_job jb = mkjob("mem-b", "pattern:1000", 4, 0, 1, 0);
	struct ldc_info in;

	open_ok(a, &ja, &in);
	wait_ring_full(ldc_ring_base(a), in.ring);  /* no worker inside: its memory goes at close */
	open_fails(&jb, -ENOMEM, "needs");
	cli_close(a);
	struct ldc *b = cli_connect();
	open_ok(b, &jb, &in);
	struct expect e = expect_of(&in, 0);
	consume_ok(b, &e, 0, 5);
	cli_close(b);
}

/* A job named @name whose fill fails at step 5 (batch @batch, server @cfg): its client gets
 * steps 0..4, then the reason; the server lives and serves others. */
static void fill_failure_case(const struct tsrv *cfg, const char *name, uint32_t batch)
{
	char after[64];
	pid_t srv = start_server(cfg);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob(name, "fail:5", batch, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b;

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 5);
	int r = ldc_acquire(c, ACQUIRE_MS, &b);
	if (r != -EPIPE)
		fail_msg("step 5 of job %s, whose fill fails there: %d %s", name, r, ldc_error(c));
	assert_has(ldc_error(c), "failed");
	assert_has(ldc_error(c), "injected failure at step 5");
	cli_close(c);
	assert_alive(srv);
	snprintf(after, sizeof(after), "after-%s", name);
	assert_serves(after);
}

/* A fill that fails fails the job: its clients are told why, after the steps before it. */
static void test_srv_job_fill_failure_reported(void **state)
{
	(void)state;
	fill_failure_case(NULL, "failing", 4);
}

/* Regression: a fill callback that returned -EBADMSG without a message (the -errno STYLE.md gives
 * corrupt data) was taken for ring_prod_begin's "the consumer rewrote a free word": srv marked
 * the consumer hostile and dropped it as a ring corrupter, and the job was not marked failed. */
static void test_srv_job_fill_ebadmsg_without_why_is_job_failure(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("badmsg", "badmsg:3", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b;

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 3);
	assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), -EPIPE);
	if (strstr(ldc_error(c), "corrupted"))
		fail_msg("a failing fill was blamed on the consumer: %s", ldc_error(c));
	assert_has(ldc_error(c), "failed");
	cli_close(c);
}

/* ---- 7b. tasks: every worker fills every ring ---- */

/* A batch cut into tasks (64 samples, 4 workers: tasks of 4) that several workers fill at once
 * arrives whole and exact, step after step, through a 2-slot ring; the stats count each step
 * once, with its latency. */
static void test_srv_tasks_many_workers_one_ring_exact(void **state)
{
	(void)state;
	struct tsrv cfg = { .workers = 4, .slots = 2 };
	start_server(&cfg);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("tasks", "pattern:12800", 64, 0, 1, 1);
	struct ldc_info in;
	struct ctl_stats st;

	j.crop_h = 4;
	j.crop_w = 3;
	open_ok(c, &j, &in);
	assert_int_equal(in.ring->slots, 2);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 0, 200);
	assert_int_equal(ldc_stats(c, &st), 0);
	assert_int_equal(st.published, 200);
	assert_int_equal(st.samples, 200 * 64);
	assert_int_equal(st.phase_ns[0], 200);      /* once per step, not per task */
	assert_int_equal(st.phase_ns[1], 400);
	assert_true(st.latency_ns > 0);
	assert_true(st.fill_ns >= 3 * st.published);
	cli_close(c);
}

/* Two rings (two jobs) share the workers: both are served, every byte right, while the other
 * ring's consumer holds its slots. */
static void test_srv_tasks_two_rings_share_workers(void **state)
{
	(void)state;
	struct tsrv cfg = { .workers = 3, .slots = 2 };
	start_server(&cfg);
	struct ldc *c1 = cli_connect(), *c2 = cli_connect();
	struct ldc_job j1 = mkjob("ta", "pattern:3200", 32, 0, 1, 1);
	struct ldc_job j2 = mkjob("tb", "pattern:1600", 16, 0, 1, 1);
	struct ldc_info i1, i2;

	open_ok(c1, &j1, &i1);
	open_ok(c2, &j2, &i2);
	struct expect e1 = expect_of(&i1, 0), e2 = expect_of(&i2, 0);
	for (uint64_t s = 0; s < 100; s += 10) {
		consume_ok(c1, &e1, s, s + 10);
		consume_ok(c2, &e2, s, s + 10);
	}
	cli_close(c1);
	cli_close(c2);
}

/* A consumer that goes while its steps are cut into tasks on every worker: the steps in flight are
 * dropped (their ring is unmapped only after the last task is out), the rank resumes where it
 * stopped, and the server stops cleanly. */
static void test_srv_tasks_detach_mid_step(void **state)
{
	(void)state;
	struct tsrv cfg = { .workers = 4, .slots = 4 };
	pid_t srv = start_server(&cfg);
	struct ldc_job j = mkjob("tdetach", "slow:30", 64, 0, 1, 0);
	struct ldc_info in;

	for (int round = 0; round < 3; round++) {
		struct ldc *c = cli_connect();
		open_ok(c, &j, &in);
		struct expect e = expect_of(&in, 0);
		consume_ok(c, &e, in.first_step, in.first_step + 2);
		cli_close(c);  /* steps first + 2 .. + 5 are being filled */
		assert_alive(srv);
	}
	assert_serves("after-tdetach");
	stop_server(srv);
}

/* A task that fails (step 5 of 64 samples, cut over 4 workers) fails the job as a failed fill
 * did: the steps before it arrive, then the reason. */
static void test_srv_tasks_failure_fails_job(void **state)
{
	(void)state;
	struct tsrv cfg = { .workers = 4 };
	fill_failure_case(&cfg, "tfail", 64);
}

/* ---- 8. the socket ---- */

static void test_srv_socket_mode_0600(void **state)
{
	struct stat st;

	(void)state;
	start_server(NULL);
	assert_int_equal(lstat(g_sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_uid, geteuid());
}

static void test_srv_socket_stale_replaced(void **state)
{
	struct stat st;
	char why[256];
	int ret, status;

	(void)state;
	pid_t old = start_server(NULL);
	assert_int_equal(kill(old, SIGKILL), 0);
	assert_int_equal(pid_reap(old, 3000, &status), 0);
	assert_int_equal(lstat(g_sock, &st), 0);  /* left behind */
	assert_true(S_ISSOCK(st.st_mode));
	int64_t t0 = mono_ms();
	pid_t srv = spawn_server(g_sock, &(struct tsrv){ 0 }, &ret, why, sizeof(why));
	if (ret)
		fail_msg("a new server on a stale socket: %d %s", ret, why);
	assert_true(mono_ms() - t0 < 3000);
	assert_serves("fresh");
	stop_server(srv);
}

static void test_srv_socket_live_eaddrinuse(void **state)
{
	struct srv_opts o = { .socket_path = g_sock, .workers = 1, .group = (gid_t)-1 };
	struct srv_ops ops = { .job_open = pat_job_open, .job_close = pat_job_close,
			       .step_open = pat_step_open, .fill = pat_fill };
	struct srv *s2 = NULL;
	struct stat st;
	char why[256] = "";

	(void)state;
	pid_t srv = start_server(NULL);
	int r = srv_create(&o, &ops, &s2, why, sizeof(why));
	if (r == 0) {
		srv_destroy(s2);
		fail_msg("a second server took a live socket");
	}
	assert_int_equal(r, -EADDRINUSE);
	assert_null(s2);
	assert_has(why, "another loaderd");
	assert_int_equal(lstat(g_sock, &st), 0);
	assert_serves("still-first");
	stop_server(srv);
}

static void test_srv_socket_regular_file_eexist(void **state)
{
	struct srv_opts o = { .socket_path = g_sock, .workers = 1, .group = (gid_t)-1 };
	struct srv_ops ops = { .job_open = pat_job_open, .step_open = pat_step_open, .fill = pat_fill };
	struct srv *s = NULL;
	char why[256] = "", back[16] = "";

	(void)state;
	FILE *f = fopen(g_sock, "w");
	assert_non_null(f);
	fputs("keep me", f);
	fclose(f);
	int r = srv_create(&o, &ops, &s, why, sizeof(why));
	if (r == 0) {
		srv_destroy(s);
		fail_msg("srv_create replaced a regular file");
	}
	assert_int_equal(r, -EEXIST);
	assert_has(why, "not a socket");
	f = fopen(g_sock, "r");
	assert_non_null(f);
	assert_non_null(fgets(back, sizeof(back), f));
	fclose(f);
	assert_string_equal(back, "keep me");
}

/* Regression: listen_on() probed the path with a SOCK_SEQPACKET connect and unlinked it on any
 * failure. A live socket of another type (another program's SOCK_STREAM socket at a mistyped
 * path) fails with EPROTOTYPE, was taken for stale, and was deleted. */
static void test_srv_socket_foreign_stream_socket_kept(void **state)
{
	struct srv_opts o = { .socket_path = g_sock, .workers = 1, .group = (gid_t)-1 };
	struct srv_ops ops = { .job_open = pat_job_open, .step_open = pat_step_open, .fill = pat_fill };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat before, after;
	struct srv *s = NULL;
	char why[256] = "";

	(void)state;
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	fd_track(lfd);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g_sock);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(lstat(g_sock, &before), 0);
	int r = srv_create(&o, &ops, &s, why, sizeof(why));
	if (r == 0)
		srv_destroy(s);
	if (r == 0 || lstat(g_sock, &after) != 0 || after.st_ino != before.st_ino)
		fail_msg("srv_create replaced a live SOCK_STREAM socket (returned %d)", r);
	assert_true(r == -EADDRINUSE || r == -EEXIST);
}

static void test_srv_socket_path_too_long(void **state)
{
	struct srv_opts o = { .workers = 1, .group = (gid_t)-1 };
	struct srv_ops ops = { .job_open = pat_job_open, .step_open = pat_step_open, .fill = pat_fill };
	struct srv *s = NULL;
	struct ldc *c = NULL;
	char path[200], why[256] = "";

	(void)state;
	memset(path, 'x', sizeof(path) - 1);
	path[0] = '/';
	path[sizeof(path) - 1] = '\0';
	o.socket_path = path;
	assert_int_equal(srv_create(&o, &ops, &s, why, sizeof(why)), -ENAMETOOLONG);
	assert_has(why, "longer");
	assert_int_equal(ldc_connect(path, &c, why, sizeof(why)), -ENAMETOOLONG);
	assert_null(c);
	assert_has(why, "too long");
}

static void test_ldc_connect_missing_socket(void **state)
{
	struct ldc *c = NULL;
	char path[160], err[512] = "";

	(void)state;
	snprintf(path, sizeof(path), "%s/nobody-here.sock", g_dir);
	assert_int_equal(ldc_connect(path, &c, err, sizeof(err)), -ENOENT);
	assert_null(c);
	assert_has(err, path);
	assert_has(err, "is loaderd running");
	/* A socket file with no server behind it (left by a killed daemon) reads the same way. */
	pid_t srv = start_server(NULL);
	kill(srv, SIGKILL);
	int st;
	assert_int_equal(pid_reap(srv, 3000, &st), 0);
	assert_int_equal(ldc_connect(g_sock, &c, err, sizeof(err)), -ECONNREFUSED);
	assert_has(err, "is loaderd running");
}

/* Root only: another user is kept out by the socket's mode, and by SO_PEERCRED past it. */
static int child_as_nobody(const void *arg, int out)
{
	int expect_eacces = *(const int *)arg;
	struct ldc_job j = mkjob("uid", "pattern:1000", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc *c;
	char err[512];

	if (setgroups(0, NULL) || setgid(65534) || setuid(65534)) {
		dprintf(out, "setuid: %s", strerror(errno));
		return 1;
	}
	int r = ldc_connect(g_sock, &c, err, sizeof(err));
	if (expect_eacces) {
		dprintf(out, "connect %d %s", r, err);
		return r == -EACCES ? 0 : 1;
	}
	if (r) {
		dprintf(out, "connect: %s", err);
		return 1;
	}
	r = ldc_open(c, &j, &in);
	dprintf(out, "open %d %s", r, ldc_error(c));
	ldc_close(c);
	return r == -EPIPE ? 0 : 1;
}

static void test_srv_peer_other_uid_refused(void **state)
{
	char out[600];
	int rfd, st, flag;

	(void)state;
	if (geteuid() != 0)
		skip();
	pid_t srv = start_server(NULL);
	assert_int_equal(chmod(g_dir, 0711), 0);
	flag = 1;
	pid_t child = spawn_child(child_as_nobody, &flag, &rfd);
	child_wait(child, rfd, 5000, out, sizeof(out), &st);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail_msg("uid 65534 on a 0600 socket: %s", out);
	assert_int_equal(chmod(g_sock, 0666), 0);
	flag = 0;
	child = spawn_child(child_as_nobody, &flag, &rfd);
	child_wait(child, rfd, 5000, out, sizeof(out), &st);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail_msg("uid 65534 past the mode: %s", out);
	assert_alive(srv);
	assert_serves("uid");
}

/* ---- 9. SIGTERM ---- */

static void test_srv_sigterm_shuts_down_cleanly(void **state)
{
	struct stat sst;
	int st;

	(void)state;
	pid_t srv = start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("term", "pattern:1000", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch held[4], b;

	open_ok(c, &j, &in);
	for (int i = 0; i < 4; i++)
		assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &held[i]), 0);
	signal_later(srv, SIGTERM, 200);
	int r = ldc_acquire(c, -1, &b);
	int64_t back = mono_ms(), sent = signal_joined();
	assert_int_equal(r, -EPIPE);
	assert_has(ldc_error(c), "loaderd is shutting down");
	assert_true(back - sent < 3000);
	assert_int_equal(pid_reap(srv, 5000, &st), 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("the server ended with %s %d", WIFSIGNALED(st) ? "signal" : "status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	assert_int_equal(lstat(g_sock, &sst), -1);
	assert_int_equal(errno, ENOENT);
	cli_close(c);
}

/* ---- 10. timeouts ---- */

static void test_ldc_acquire_timeout(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("slow", "slow:800", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b;
	char msg[512];

	open_ok(c, &j, &in);
	assert_int_equal(ldc_acquire(c, 0, &b), -ETIMEDOUT);
	int64_t t0 = mono_ms();
	assert_int_equal(ldc_acquire(c, 50, &b), -ETIMEDOUT);
	int64_t dt = mono_ms() - t0;
	assert_has(ldc_error(c), "within 50 ms");
	if (dt < 45 || dt >= 3000)
		fail_msg("ldc_acquire(50 ms) returned after %" PRId64 " ms", dt);
	/* A timeout loses nothing: step 0 still comes, and right. */
	struct expect e = expect_of(&in, 0);
	assert_int_equal(ldc_acquire(c, 10000, &b), 0);
	if (check_batch(&b, 0, &e, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_equal(ldc_release(c, &b), 0);
	cli_close(c);
}

/* ---- client API misuse ---- */

static void test_ldc_misuse_einval(void **state)
{
	(void)state;
	start_server(NULL);
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("misuse", "pattern:1000", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b, fake;
	struct ctl_stats st;

	assert_int_equal(ldc_acquire(c, 0, &b), -EINVAL);
	assert_has(ldc_error(c), "no job");
	assert_int_equal(ldc_stats(c, &st), -EINVAL);
	assert_null(ldc_ring_base(c));
	assert_int_equal(ldc_ring_size(c), 0);
	struct ldc_job badj = j;
	badj.job = "no spaces";
	assert_int_equal(ldc_open(c, &badj, &in), -EINVAL);
	assert_has(ldc_error(c), "job");
	badj = j;
	badj.batch = 0;
	assert_int_equal(ldc_open(c, &badj, &in), -EINVAL);
	assert_has(ldc_error(c), "batch");
	badj = j;
	badj.dataset = NULL;
	assert_int_equal(ldc_open(c, &badj, &in), -EINVAL);
	assert_has(ldc_error(c), "dataset");
	/* The local refusals did not cost the connection. */
	open_ok(c, &j, &in);
	assert_int_equal(ldc_open(c, &j, &in), -EINVAL);
	assert_has(ldc_error(c), "already has a job");
	assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), 0);
	fake = b;
	fake.step = 3;
	assert_int_equal(ldc_release(c, &fake), -EINVAL);
	assert_int_equal(ldc_release(c, &b), 0);
	assert_int_equal(ldc_release(c, &b), -EINVAL);
	assert_has(ldc_error(c), "not held");
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, 1, 6);
	ldc_close(NULL);
	cli_close(c);
}

/* ---- resources ---- */

/* Clients that come and go, well or badly, leave no fd behind in the server. */
static void test_srv_no_fd_leak(void **state)
{
	(void)state;
	pid_t srv = start_server(NULL);
	int before = count_fds(srv), bell;
	struct ldc_batch b;

	assert_true(before > 0);
	for (int i = 0; i < 3; i++) {
		struct ldc *c = cli_connect();
		struct ldc_job j = mkjob(i == 1 ? "leak-b" : "leak-a", "pattern:1000", 4, 0, 1, 0);
		struct ldc_info in;
		open_ok(c, &j, &in);
		assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), 0);
		cli_close(c);  /* holding a batch */
	}
	struct ldc_job j = mkjob("leak-a", "pattern:1000", 8, 0, 1, 0);
	open_fails(&j, -EEXIST, "batch");
	send_refused("garbage", "xx", 2, EBADMSG, "malformed");
	int fd = raw_open("leak-c", NULL, &bell);
	fd_close(fd);
	fd_close(bell);
	assert_fds_back(srv, before);
	assert_alive(srv);
}

/* Regression: srv_run() handles the events of one epoll_wait() in turn, and a connection's
 * hang-up used to free its attachment (att_retire -> att_free) while a doorbell event for that
 * same attachment could still be waiting later in the same batch: EV_BELL then read the freed att
 * (heap use after free; read() on its closed eventfd). Now srv_att_free buries the att and the
 * control loop (srv_loop.c) frees it after the batch. Here the control thread is held for 500 ms
 * in the attach notice of "sleepnotice" while client A hangs up and then rings its doorbell, so
 * both events come out of one epoll_wait, hang-up first; AddressSanitizer would catch a use after
 * free (the server dies). Ordinary clients could hit it too ("release, then exit" while the
 * server is still reporting the previous doorbell: the level-triggered bell is requeued behind
 * the hang-up). */
static void test_srv_bell_after_hangup_same_wakeup(void **state)
{
	(void)state;
	pid_t srv = start_server(&(struct tsrv){ .workers = 1 });
	int bell_a, bell_b;
	int a = raw_open("uaf-a", &g_ring, &bell_a);

	wait_ring_full(ring_base(g_ring), ring_header(g_ring));  /* no worker holds A's ring */
	int b = raw_open("sleepnotice", NULL, &bell_b);
	/* The control thread now sleeps in the notice: queue A's hang-up, then A's doorbell. */
	uint64_t one = 1;
	fd_close(a);
	assert_int_equal(write(bell_a, &one, sizeof(one)), (ssize_t)sizeof(one));
	fd_close(b);
	usleep(700 * 1000);
	assert_alive(srv);
	assert_serves("after-uaf");
	stop_server(srv);
}

#define T(f) cmocka_unit_test_setup_teardown(f, srvh_setup, srvh_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_srv_job_bounded_read_all_correct),
		T(test_ldc_stats_mid_job),
		T(test_srv_job_start_epoch_offsets_steps),
		T(test_srv_job_start_at_fills_nothing_before),
		T(test_srv_job_start_at_overrides_reattach_resume),
		T(test_srv_job_step_limit_exact),
		T(test_srv_token_resumes_a_fresh_job),
		T(test_srv_ranks_read_concurrently),
		T(test_srv_rank_stalled_does_not_block_other),
		T(test_srv_consumer_sigkill_reattach_resumes),
		T(test_ldc_close_holding_resumes_at_first_unreleased),
		T(test_srv_reattach_after_end_gets_enodata),
		T(test_srv_job_forgotten_after_linger),
		T(test_ldc_producer_sigkill_acquire_epipe),
		T(test_srv_hostile_consumer_dropped),
		T(test_srv_hostile_consumer_dropped_without_release),
		T(test_srv_ctl_bad_framing_refused),
		T(test_srv_ctl_empty_packet_refused),
		T(test_srv_ctl_bad_job_open_fields_refused),
		T(test_srv_ctl_block_geometry_agreed),
		T(test_srv_ctl_stats_before_open_refused),
		T(test_srv_ctl_second_open_refused),
		T(test_srv_ctl_client_many_fds_refused),
		T(test_srv_ctl_job_open_fds_checked),
		T(test_srv_slow_job_open_delays_only_its_client),
		T(test_srv_job_spec_mismatch_eexist),
		T(test_srv_job_open_error_reaches_client),
		T(test_srv_job_mem_limit_enomem),
		T(test_srv_job_mem_limit_message_small_ring),
		T(test_srv_job_mem_released_on_detach),
		T(test_srv_job_fill_failure_reported),
		T(test_srv_tasks_many_workers_one_ring_exact),
		T(test_srv_tasks_two_rings_share_workers),
		T(test_srv_tasks_failure_fails_job),
		T(test_srv_tasks_detach_mid_step),
		T(test_srv_job_fill_ebadmsg_without_why_is_job_failure),
		T(test_srv_socket_mode_0600),
		T(test_srv_socket_stale_replaced),
		T(test_srv_socket_live_eaddrinuse),
		T(test_srv_socket_regular_file_eexist),
		T(test_srv_socket_foreign_stream_socket_kept),
		T(test_srv_socket_path_too_long),
		T(test_ldc_connect_missing_socket),
		T(test_srv_peer_other_uid_refused),
		T(test_srv_sigterm_shuts_down_cleanly),
		T(test_ldc_acquire_timeout),
		T(test_ldc_misuse_einval),
		T(test_srv_no_fd_leak),
		T(test_srv_bell_after_hangup_same_wakeup),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
