/* test_metrics.c - the metrics file (loader/metrics.c) and the snapshot it renders (srv_snapshot_take,
 * loader/srv_snap.c): label values escaped per the exposition format, every line of the output
 * well-formed, the file replaced whole; and, with a real server core in this process (the pattern
 * filler of tests/srv_harness.h, whose phase times are exact), the snapshot's counters against what
 * a consumer read, the batch latency sum (growing, its mean within the wall time), and the ring's
 * empty time on a slow producer against a slow consumer. The Prometheus parser's view of a real
 * loaderd's file is tests/it_metrics.sh. */
#include "loader/metrics.h"
#include "loader/srv.h"
#include "loader/srv_impl.h"
#include "tests/srv_harness.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* ---- escaping ---- */

static void test_metrics_escape_backslash_quote_newline(void **state)
{
	char out[64];

	(void)state;
	assert_int_equal(ldr_metrics_escape("plain-job_1.x", out, sizeof(out)), 13);
	assert_string_equal(out, "plain-job_1.x");
	assert_int_equal(ldr_metrics_escape("a\\b\"c\nd", out, sizeof(out)), 10);
	assert_string_equal(out, "a\\\\b\\\"c\\nd");
	/* a tab and other bytes pass as they are: the format escapes only these three */
	assert_int_equal(ldr_metrics_escape("t\tu\xc3\xa9", out, sizeof(out)), 5);
	assert_string_equal(out, "t\tu\xc3\xa9");
	assert_int_equal(ldr_metrics_escape("", out, sizeof(out)), 0);
	assert_string_equal(out, "");
}

static void test_metrics_escape_short_buffer_keeps_whole_escapes(void **state)
{
	char out[8];

	(void)state;
	memset(out, 'X', sizeof(out));
	/* "ab" fits, then "\\\"" would need bytes 2..3 and the NUL at 4: cap 4 stops before it */
	assert_int_equal(ldr_metrics_escape("ab\"cd", out, 4), 6);
	assert_string_equal(out, "ab");
	assert_int_equal(ldr_metrics_escape("ab\"cd", out, 5), 6);
	assert_string_equal(out, "ab\\\"");
	assert_int_equal(ldr_metrics_escape("abc", NULL, 0), 3);
}

/* ---- rendering ---- */

/* Every line is a HELP or TYPE comment or one sample "name{labels} value", the labels a
 * comma-separated list of name="escaped value". */
static void assert_well_formed(const char *text)
{
	regex_t re;
	const char *pat =
		"^(# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*"
		"|[a-zA-Z_:][a-zA-Z0-9_:]*"
		"(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\[\\\\\"n])*\""
		"(,[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\[\\\\\"n])*\")*\\})? "
		"[0-9]+(\\.[0-9]+)?)$";
	char line[8192];

	assert_int_equal(regcomp(&re, pat, REG_EXTENDED | REG_NOSUB), 0);
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		assert_non_null(nl);  /* the last line ends in a newline too */
		size_t n = (size_t)(nl - p);
		assert_true(n < sizeof(line));
		memcpy(line, p, n);
		line[n] = '\0';
		if (regexec(&re, line, 0, NULL, 0) != 0)
			fail_msg("not a valid exposition line: %s", line);
		p = nl + 1;
	}
	regfree(&re);
}

static void test_metrics_render_escapes_labels_and_is_well_formed(void **state)
{
	struct srv_rank_snap ranks[2] = {
		{ .rank = 0, .attached = 1, .started = 1, .published = 7, .samples = 28,
		  .fill_ns = 3000000000u, .phase_ns = { 1500000000u, 1250000001u },
		  .latency_ns = 3500000001u, .empty_ns = 42, .slots = 4, .occupancy = 3 },
		{ .rank = 1 },  /* never attached: left out */
	};
	struct srv_job_snap job = { .name = "we\"ird\\job\n", .dataset = "/d/\"x\"\\y\nz.dpk",
				    .uid = 1234, .world = 2, .batch = 4, .bad = 5, .ranks = ranks,
				    .nranks = 2 };
	struct srv_snapshot snap = { .uptime_ns = 12500000000, .workers = 3, .busy_ns = 1,
				     .busy_share = 0.25, .mem_used = 1 << 20, .clients = 2,
				     .ranks_attached = 1, .njobs = 1, .jobs = &job,
				     .phases = { { "io", "reading" }, { "decode", "decoding" } } };
	char *text;
	size_t len;

	(void)state;
	assert_int_equal(ldr_metrics_render(&snap, &text, &len), 0);
	assert_int_equal(strlen(text), len);
	assert_well_formed(text);
	const char *lbl = "{job=\"we\\\"ird\\\\job\\n\",uid=\"1234\",rank=\"0\"}";
	char want[256];
	snprintf(want, sizeof(want), "\nloaderd_steps_total%s 7\n", lbl);
	assert_has(text, want);
	snprintf(want, sizeof(want), "\nloaderd_samples_total%s 28\n", lbl);
	assert_has(text, want);
	assert_has(text, "\nloaderd_job_info{job=\"we\\\"ird\\\\job\\n\",uid=\"1234\","
		   "dataset=\"/d/\\\"x\\\"\\\\y\\nz.dpk\"} 1\n");
	assert_has(text, "\nloaderd_fill_seconds_total{job=\"we\\\"ird\\\\job\\n\",uid=\"1234\","
		   "rank=\"0\",phase=\"io\"} 1.500000000\n");
	assert_has(text, "phase=\"decode\"} 1.250000001\n");
	assert_has(text, "\nloaderd_ring_occupancy_ratio{job=\"we\\\"ird\\\\job\\n\",uid=\"1234\","
		   "rank=\"0\"} 0.750000\n");
	assert_has(text, "\nloaderd_ring_empty_seconds_total{job=\"we\\\"ird\\\\job\\n\",uid=\"1234\","
		   "rank=\"0\"} 0.000000042\n");
	assert_has(text, "\nloaderd_batch_latency_seconds_total{job=\"we\\\"ird\\\\job\\n\",uid=\"1234\","
		   "rank=\"0\"} 3.500000001\n");
	assert_has(text, "# TYPE loaderd_batch_latency_seconds_total counter\n");
	assert_has(text, "\nloaderd_bad_records_total{job=\"we\\\"ird\\\\job\\n\",uid=\"1234\"} 5\n");
	assert_has(text, "\nloaderd_uptime_seconds 12.500000000\n");
	assert_has(text, "# TYPE loaderd_samples_total counter\n");
	assert_has(text, "# TYPE loaderd_ring_memory_bytes gauge\nloaderd_ring_memory_bytes 1048576\n");
	assert_null(strstr(text, "rank=\"1\""));
	free(text);
}

static void test_metrics_write_replaces_the_file_whole(void **state)
{
	char dir[] = "/tmp/test_metrics.XXXXXX", path[256], buf[64];

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/m.prom", dir);
	assert_int_equal(ldr_metrics_write(path, "a 1\n", 4), 0);
	assert_int_equal(ldr_metrics_write(path, "b 2\nc 3\n", 8), 0);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	assert_string_equal(buf, "b 2\nc 3\n");
	/* nothing but the file is left beside it */
	DIR *d = opendir(dir);
	struct dirent *e;
	int others = 0;
	while ((e = readdir(d)))
		others += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "m.prom");
	closedir(d);
	assert_int_equal(others, 0);
	/* a directory that does not exist: an error, not a crash */
	snprintf(path, sizeof(path), "%s/no/m.prom", dir);
	assert_int_equal(ldr_metrics_write(path, "a 1\n", 4), -ENOENT);
	snprintf(path, sizeof(path), "%s/m.prom", dir);
	unlink(path);
	rmdir(dir);
}

/* ---- a real server core in this process ---- */

static struct srv *g_srv;
static pthread_t g_run;

static void *run_main(void *p)
{
	srv_run(p);
	return NULL;
}

static void *worker_init(void *ctx, unsigned index)
{
	static unsigned ids[64];

	(void)ctx;
	return &ids[index % 64];  /* pat_fill wants a worker state, any */
}

static int inproc_setup(void **state)
{
	struct srv_opts o = { .workers = 1, .group = (gid_t)-1, .default_slots = 4 };
	struct srv_ops ops = { .job_open = pat_job_open, .job_close = pat_job_close,
			       .worker_init = worker_init, .step_open = pat_step_open, .fill = pat_fill,
			       .phases = { { "io", "reading" }, { "decode", "decoding" } } };
	char why[256];

	srvh_setup(state);
	o.socket_path = g_sock;
	if (srv_create(&o, &ops, &g_srv, why, sizeof(why)) < 0) {
		fprintf(stderr, "srv_create: %s\n", why);
		return -1;
	}
	return pthread_create(&g_run, NULL, run_main, g_srv) == 0 ? 0 : -1;
}

static int inproc_teardown(void **state)
{
	srv_stop(g_srv);
	pthread_join(g_run, NULL);
	srv_destroy(g_srv);
	g_srv = NULL;
	return srvh_teardown(state);
}

static const struct srv_job_snap *find_job(const struct srv_snapshot *s, const char *name)
{
	for (unsigned k = 0; k < s->njobs; k++)
		if (!strcmp(s->jobs[k].name, name))
			return &s->jobs[k];
	fail_msg("no job %s in the snapshot", name);
	return NULL;
}

/* Read @steps steps of @job, sleeping @hold_ms with each batch held; the wall time in ms. */
static int64_t read_steps(const char *job, const char *dataset, uint64_t steps, int hold_ms)
{
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob(job, dataset, 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b;
	char msg[256];

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	int64_t t0 = mono_ms();
	for (uint64_t s = 0; s < steps; s++) {
		assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), 0);
		if (check_batch(&b, s, &e, msg, sizeof(msg)) < 0)
			fail_msg("%s", msg);
		if (hold_ms)
			usleep((useconds_t)hold_ms * 1000);
		assert_int_equal(ldc_release(c, &b), 0);
	}
	int64_t dt = mono_ms() - t0;
	cli_close(c);
	return dt;
}

static void test_metrics_snapshot_counts_what_the_consumer_read(void **state)
{
	struct srv_snapshot *snap;

	(void)state;
	read_steps("counted", "pattern:400", 20, 0);
	assert_int_equal(srv_snapshot_take(g_srv, &snap), 0);
	assert_int_equal(snap->njobs, 1);
	assert_int_equal(snap->workers, 1);
	const struct srv_job_snap *j = find_job(snap, "counted");
	const struct srv_rank_snap *r = &j->ranks[0];
	assert_int_equal(j->world, 1);
	assert_true(r->started);
	assert_int_equal(r->attaches, 1);
	/* the ring runs at most slots steps ahead of the consumer */
	assert_true(r->published >= 20 && r->published <= 20 + 4);
	assert_int_equal(r->samples, r->published * 4);
	assert_int_equal(r->released, 20);
	/* the filler reports exactly 1 ns of io and 2 ns of decode per step */
	assert_int_equal(r->phase_ns[0], r->published);
	assert_int_equal(r->phase_ns[1], 2 * r->published);
	assert_true(r->fill_ns >= 3 * r->published);
	srv_snapshot_free(snap);
}

/* The latency sum (first task taken to publish, per step) grows with the steps published, and
 * its mean is above zero and below the wall time of the reads. */
static void test_metrics_batch_latency_sum_grows_mean_below_wall(void **state)
{
	struct srv_snapshot *snap[2];
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("lat", "slow:5", 4, 0, 1, 0);
	struct ldc_info in;
	struct ldc_batch b;
	char msg[256];
	int64_t wall[2];

	(void)state;
	int64_t t0 = mono_ms();
	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	for (uint64_t s = 0; s < 20; s++) {
		assert_int_equal(ldc_acquire(c, ACQUIRE_MS, &b), 0);
		if (check_batch(&b, s, &e, msg, sizeof(msg)) < 0)
			fail_msg("%s", msg);
		assert_int_equal(ldc_release(c, &b), 0);
		if (s % 10 == 9) {  /* a snapshot after 10 steps read and after 20 */
			wall[s / 10] = mono_ms() - t0;
			assert_int_equal(srv_snapshot_take(g_srv, &snap[s / 10]), 0);
		}
	}
	cli_close(c);
	const struct srv_rank_snap *r0 = &find_job(snap[0], "lat")->ranks[0];
	const struct srv_rank_snap *r1 = &find_job(snap[1], "lat")->ranks[0];
	assert_true(r0->published >= 10);
	assert_true(r1->published >= 20);
	assert_true(r0->latency_ns > 0);
	assert_true(r1->latency_ns >= r0->latency_ns);
	double m0 = r0->latency_ns * 1e-6 / r0->published, m1 = r1->latency_ns * 1e-6 / r1->published;
	print_message("# mean batch latency %.2f ms (%llu steps in %lld ms), %.2f ms (%llu steps in "
		      "%lld ms)\n", m0, (unsigned long long)r0->published, (long long)wall[0], m1,
		      (unsigned long long)r1->published, (long long)wall[1]);
	/* the filler sleeps 5 ms in each step's first task (slow:5): a batch takes that at least */
	assert_true(m0 >= 4.0 && m0 < (double)wall[0]);
	assert_true(m1 >= 4.0 && m1 < (double)wall[1]);
	srv_snapshot_free(snap[0]);
	srv_snapshot_free(snap[1]);
}

static void test_metrics_empty_time_slow_producer_vs_slow_consumer(void **state)
{
	struct srv_snapshot *snap;

	(void)state;
	/* a producer that takes none, a consumer that holds each batch 30 ms: never empty after the
	 * first step (first: the one worker is not finishing a slow fill of the other job) */
	int64_t busy_ms = read_steps("slowcons", "pattern:400", 10, 30);
	/* a producer that takes 30 ms a step, a consumer that takes none: the ring is empty most of
	 * the time, and the consumer waits that long */
	int64_t slow_ms = read_steps("slowprod", "slow:30", 10, 0);
	assert_int_equal(srv_snapshot_take(g_srv, &snap), 0);
	uint64_t e_slow = find_job(snap, "slowprod")->ranks[0].empty_ns / 1000000;
	uint64_t e_busy = find_job(snap, "slowcons")->ranks[0].empty_ns / 1000000;
	print_message("# slow producer: empty %llu ms of %lld ms; slow consumer: empty %llu ms of "
		      "%lld ms\n", (unsigned long long)e_slow, (long long)slow_ms,
		      (unsigned long long)e_busy, (long long)busy_ms);
	assert_true(e_slow >= 10 * 30 / 2);               /* ten fills of 30 ms, half of it at least */
	assert_true(e_slow <= (uint64_t)slow_ms + 100);   /* detached once read: the count stops */
	assert_true(e_busy * 4 < (uint64_t)busy_ms);      /* the first batch's wait, at most */
	srv_snapshot_free(snap);
}

/* Issue 36: a snapshot (loaderctl stats, the metrics file) copied every rank of every job: one
 * stats of 63 jobs of world 65,536 took loaderd from 24 MB to 688 MB (tools/bench/snapshot.sh).
 * It lists the attached ranks, and the last SRV_SNAP_RECENT to detach: with one rank of a world
 * of 65,536 attached its memory is one rank's, and at SRV_SNAP_RECENT + 1 detaches the first is
 * no longer listed. */
static struct ldc *wide_attach(uint32_t rank)
{
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("wide", "pattern:262144", 4, rank, CTL_WORLD_MAX, 0);
	struct ldc_info in;

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, rank);
	consume_ok(c, &e, 0, 2);
	return c;
}

static struct srv_snapshot *wide_snap(const struct srv_job_snap **j)
{
	struct srv_snapshot *snap;

	assert_int_equal(srv_snapshot_take(g_srv, &snap), 0);
	assert_int_equal(snap->njobs, 1);
	*j = find_job(snap, "wide");
	assert_non_null(*j);
	assert_int_equal((*j)->world, CTL_WORLD_MAX);
	return snap;
}

static void test_metrics_snapshot_lists_attached_ranks_not_world(void **state)
{
	const size_t fixed = sizeof(struct srv_snapshot) + sizeof(struct srv_job_snap);
	const struct srv_job_snap *j;
	struct srv_snapshot *snap;

	(void)state;
	struct ldc *c7 = wide_attach(7);
	snap = wide_snap(&j);
	assert_int_equal(j->nranks, 1);
	assert_int_equal(j->ranks[0].rank, 7);
	assert_true(j->ranks[0].attached);
	assert_int_equal(snap->bytes, fixed + sizeof(struct srv_rank_snap));
	srv_snapshot_free(snap);

	struct ldc *c3 = wide_attach(3);  /* listed by rank number */
	snap = wide_snap(&j);
	assert_int_equal(j->nranks, 2);
	assert_int_equal(j->ranks[0].rank, 3);
	assert_int_equal(j->ranks[1].rank, 7);
	assert_int_equal(j->started, 2);
	assert_int_equal(j->samples, j->ranks[0].samples + j->ranks[1].samples);
	assert_int_equal(j->fill_ns, j->ranks[0].fill_ns + j->ranks[1].fill_ns);
	assert_int_equal(snap->bytes, fixed + 2 * sizeof(struct srv_rank_snap));
	srv_snapshot_free(snap);
	cli_close(c3);
	cli_close(c7);

	/* Detached, 3 first, then 7; then n more. Listed: the last SRV_SNAP_RECENT to detach; at
	 * the limit (2 + n == SRV_SNAP_RECENT) 3 still is, one past it no longer. */
	for (unsigned n = 0; n < SRV_SNAP_RECENT; n++) {
		for (int i = 0; i < 1000; i++) {  /* the control thread sees the hang-up */
			snap = wide_snap(&j);
			int done = j->attached == 0;
			srv_snapshot_free(snap);
			if (done)
				break;
			usleep(2000);
		}
		snap = wide_snap(&j);
		unsigned want = 2 + n < SRV_SNAP_RECENT ? 2 + n : SRV_SNAP_RECENT;
		int has3 = 0, has7 = 0;
		assert_int_equal(j->nranks, want);
		assert_int_equal(snap->bytes, fixed + want * sizeof(struct srv_rank_snap));
		for (uint32_t k = 0; k < j->nranks; k++) {
			assert_false(j->ranks[k].attached);
			assert_true(k == 0 || j->ranks[k - 1].rank < j->ranks[k].rank);
			has3 |= j->ranks[k].rank == 3;
			has7 |= j->ranks[k].rank == 7;
		}
		assert_int_equal(has3, 2 + n <= SRV_SNAP_RECENT);
		assert_true(has7);
		assert_int_equal(j->started, 2 + n);
		srv_snapshot_free(snap);
		if (n + 1 < SRV_SNAP_RECENT)
			cli_close(wide_attach(100 + n));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metrics_escape_backslash_quote_newline),
		cmocka_unit_test(test_metrics_escape_short_buffer_keeps_whole_escapes),
		cmocka_unit_test(test_metrics_render_escapes_labels_and_is_well_formed),
		cmocka_unit_test(test_metrics_write_replaces_the_file_whole),
		cmocka_unit_test_setup_teardown(test_metrics_snapshot_counts_what_the_consumer_read,
						inproc_setup, inproc_teardown),
		cmocka_unit_test_setup_teardown(test_metrics_batch_latency_sum_grows_mean_below_wall,
						inproc_setup, inproc_teardown),
		cmocka_unit_test_setup_teardown(test_metrics_empty_time_slow_producer_vs_slow_consumer,
						inproc_setup, inproc_teardown),
		cmocka_unit_test_setup_teardown(test_metrics_snapshot_lists_attached_ranks_not_world,
						inproc_setup, inproc_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
