/* test_oom.c - out of memory on the paths that allocate on a client's behalf: the dataset reader
 * and writer (formats/dpk_*.c), ring create and attach (shm/ring.c), the client API (shm/ldc.c) and
 * the server core's job open, attach, snapshot and admin answer (loader/srv_*.c), and the record
 * reader's arena and its buffer for a record larger than half of it (loader/reader.c). malloc, calloc,
 * realloc, aligned_alloc and strdup are wrapped (--wrap: only the calls of loaderd's own objects,
 * not libc's or cmocka's) so that the N-th allocation after arming fails; each case runs its
 * operation with N = 1, 2, ... until a run makes no failing allocation, and every run before
 * must end in a clean error: -ENOMEM (or the documented consequence) with a message that says
 * so, nothing half-made handed out, no fd left open and, in the ASan build, no leak. Each case
 * also asserts how many allocation points it went through, so that it cannot pass by missing
 * them. The server cases run the server core in this process on a thread (the pattern filler of
 * tests/srv_harness.h); the allocations of the test's own thread (the client) are not counted. */
/* link: -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc -Wl,--wrap=aligned_alloc -Wl,--wrap=strdup */
#include "formats/dpk.h"
#include "loader/reader.h"
#include "loader/srv.h"
#include "shm/ldc.h"
#include "shm/ring.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/srv_harness.h"
#include "tests/tmpdir.h"

/* ---- the fault plan ---- */

static atomic_int armed;           /* count and fail allocations */
static atomic_long seen;           /* allocations counted since arming */
static atomic_long fail_at;        /* the one that fails (1-based) */
static atomic_int fired;           /* it happened */
static _Thread_local int exempt;   /* this thread's allocations are not counted */

static int should_fail(void)
{
	if (!atomic_load(&armed) || exempt)
		return 0;
	if (atomic_fetch_add(&seen, 1) + 1 != atomic_load(&fail_at))
		return 0;
	atomic_store(&fired, 1);
	return 1;
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n) { return should_fail() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return should_fail() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return should_fail() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t align, size_t n)
{
	return should_fail() ? NULL : __real_aligned_alloc(align, n);
}
char *__wrap_strdup(const char *s) { return should_fail() ? NULL : __real_strdup(s); }

static void arm(long n)
{
	atomic_store(&seen, 0);
	atomic_store(&fired, 0);
	atomic_store(&fail_at, n);
	atomic_store(&armed, 1);
}

/* Disarm; did the planned failure happen? */
static int disarm(void)
{
	atomic_store(&armed, 0);
	return atomic_load(&fired);
}

static int count_own_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* What one run of an operation says: its result and message. */
struct outcome {
	int ret;
	char msg[512];
};

typedef void (*op_fn)(struct outcome *o);
/* @check: is @o right for a run in which an allocation failed? (fails the test if not) */
typedef void (*check_fn)(long n, const struct outcome *o);

static int g_fd_check = 1;  /* 0 where the server runs in this process: its fds come and go */

/* Run @op with the n-th counted allocation failing, n = 1, 2, ..., until a run makes no failing
 * allocation: that run must succeed (ret 0), the others pass @check; no run leaves an fd (unless
 * g_fd_check is 0). Returns the number of allocations that were made to fail. */
static long each_alloc_fails(op_fn op, check_fn check)
{
	long n;

	for (n = 1; n < 10000; n++) {
		struct outcome o = { .ret = 1 };
		int fds = count_own_fds();

		arm(n);
		op(&o);
		int hit = disarm();
		if (g_fd_check && count_own_fds() != fds)
			fail_msg("allocation %ld failing: %d fds before, %d after", n, fds,
				 count_own_fds());
		if (!hit) {
			if (o.ret != 0)
				fail_msg("no allocation failed, yet %d: %s", o.ret, o.msg);
			print_message("%ld allocations made to fail in turn, then success\n", n - 1);
			return n - 1;
		}
		check(n, &o);
	}
	fail_msg("still allocating after %ld allocations", n);
	return -1;
}

static void check_enomem(long n, const struct outcome *o)
{
	if (o->ret != -ENOMEM)
		fail_msg("allocation %ld failing: %d (%s), expected -ENOMEM", n, o->ret, o->msg);
	if (!strstr(o->msg, "memory"))
		fail_msg("allocation %ld failing: the message \"%s\" does not say memory", n, o->msg);
}

/* ---- formats/: the dataset reader and writer ---- */

static char dir[64], path[160];

static int setup_dir(void **state)
{
	(void)state;
	disarm();  /* a failed case may have left it armed */
	if (tmpdir_create(dir, sizeof(dir), "test_oom") < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/d.dpk", dir);
	return 0;
}

static int teardown_dir(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

#define NREC 1500  /* past the writer's first index capacity (1024): its realloc grows */

static const char *const classes[] = { "cat", "dog", "eel" };

/* Write a dataset of NREC raw records with 3 classes to @p; the outcome of the first failing
 * step, with "writer" messages. */
static void write_dataset(const char *p, struct outcome *o)
{
	struct dpk_writer *w = NULL;
	uint8_t data[48];
	int ret = dpk_writer_create(p, DPK_WRITE_NO_SYNC, &w);

	if (ret < 0) {
		assert_null(w);
		snprintf(o->msg, sizeof(o->msg), "dpk_writer_create: %s", strerror(-ret));
		goto out;
	}
	ret = dpk_writer_set_classes(w, classes, 3);
	if (ret < 0) {
		snprintf(o->msg, sizeof(o->msg), "dpk_writer_set_classes: %s", strerror(-ret));
		goto out;
	}
	for (unsigned i = 0; i < NREC && ret == 0; i++) {
		struct dpk_record r = { .kind = DPK_KIND_RAW, .label = i % 3, .data = data,
					.length = sizeof(data), .shape = { 4, 12 }, .ndim = 2 };
		memset(data, (int)i, sizeof(data));
		ret = dpk_writer_add(w, &r);
		if (ret < 0)
			snprintf(o->msg, sizeof(o->msg), "dpk_writer_add %u: %s", i, strerror(-ret));
	}
	if (ret == 0) {
		ret = dpk_writer_finish(w);
		if (ret < 0)
			snprintf(o->msg, sizeof(o->msg), "dpk_writer_finish: %s", strerror(-ret));
	}
out:
	dpk_writer_destroy(w);
	o->ret = ret;
}

static void op_write(struct outcome *o)
{
	unlink(path);
	write_dataset(path, o);
}

/* A failed write leaves nothing: no dataset, no temporary file. */
static void check_write(long n, const struct outcome *o)
{
	check_enomem(n, o);
	DIR *d = opendir(dir);
	struct dirent *e;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			fail_msg("allocation %ld failing (%s): %s is left in the folder", n, o->msg,
				 e->d_name);
	closedir(d);
}

static void test_oom_dpk_writer_leaves_nothing(void **state)
{
	(void)state;
	long points = each_alloc_fails(op_write, check_write);

	/* create: the writer, its buffer, the temporary path; classes; the index and its growth;
	 * finish: the class table's padding */
	assert_true(points >= 5);
	struct dpk *d;
	char err[256];
	assert_int_equal(dpk_open(path, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_count(d), NREC);
	assert_string_equal(dpk_class_name(d, 2), "eel");
	dpk_close(d);
}

static void op_open(struct outcome *o)
{
	struct dpk *d = (struct dpk *)1;

	o->ret = dpk_open(path, 0, &d, o->msg, sizeof(o->msg));
	if (o->ret < 0)
		assert_null(d);
	else
		assert_int_equal(dpk_count(d), NREC);
	dpk_close(o->ret < 0 ? NULL : d);
}

static void test_oom_dpk_open_says_memory(void **state)
{
	struct outcome o;

	(void)state;
	write_dataset(path, &o);
	assert_int_equal(o.ret, 0);
	/* the reader, the header block, the index, the class table's three arrays */
	assert_true(each_alloc_fails(op_open, check_enomem) >= 6);
}

/* ---- loader/reader.c: the arena, its request tables, the buffer for an outsized record ---- */

#define BIG 20000u  /* bytes: more than half of an 8 KiB arena */

static struct dpk *g_rd;

static uint8_t rec_byte(unsigned i, size_t j)
{
	return (uint8_t)(i * 31 + j * 7);
}

static void write_reader_dataset(void)
{
	static uint8_t data[BIG];
	static const uint32_t lens[3] = { 100, BIG, 100 };
	struct dpk_writer *w;
	char err[256];

	assert_int_equal(dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w), 0);
	for (unsigned i = 0; i < 3; i++) {
		for (size_t j = 0; j < lens[i]; j++)
			data[j] = rec_byte(i, j);
		struct dpk_record r = { .kind = DPK_KIND_RAW, .data = data, .length = lens[i],
					.shape = { lens[i] }, .ndim = 1 };
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	assert_int_equal(dpk_open(path, 0, &g_rd, err, sizeof(err)), 0);
}

/* Create a reader and read the three records; a record whose buffer could not be had is -ENOMEM
 * in its errs entry, and the others still arrive, every byte right. */
static void op_reader(struct outcome *o)
{
	struct ldr_reader *r = (struct ldr_reader *)1;
	static const uint64_t ids[3] = { 0, 1, 2 };

	o->ret = ldr_reader_create(LDR_IO_PREAD, 8192, &r);
	if (o->ret < 0) {
		assert_null(r);
		snprintf(o->msg, sizeof(o->msg), "ldr_reader_create: out of memory");
		return;
	}
	for (uint32_t i = 0; i < 3;) {
		const uint8_t *bufs[3];
		int errs[3];
		int k = ldr_reader_read(r, g_rd, -1, ids + i, 3 - i, bufs, errs);

		assert_true(k >= 1);
		for (int j = 0; j < k; j++, i++) {
			if (errs[j] == -ENOMEM) {
				assert_int_equal(i, 1);  /* only the outsized record needs a buffer */
				o->ret = -ENOMEM;
				snprintf(o->msg, sizeof(o->msg), "record %u: out of memory", i);
				continue;
			}
			assert_int_equal(errs[j], 0);
			for (size_t b = 0; b < dpk_entry_get(g_rd, i)->length; b++)
				if (bufs[j][b] != rec_byte(i, b))
					fail_msg("record %u byte %zu wrong", i, b);
		}
	}
	ldr_reader_destroy(r);
}

static void test_oom_reader_buffers(void **state)
{
	(void)state;
	write_reader_dataset();
	/* the reader, its arena, two request tables, the outsized record's buffer */
	assert_int_equal(each_alloc_fails(op_reader, check_enomem), 5);
	dpk_close(g_rd);
	g_rd = NULL;
}

/* ---- shm/: rings ---- */

static const struct ring_desc desc = { .job_id = 7, .rank = 1, .world = 2, .slots = 4,
				       .batch = 8, .sample_bytes = 16 * 16 * 3, .ndim = 3,
				       .shape = { 16, 16, 3 }, .dtype = RING_DTYPE_U8,
				       .layout = RING_LAYOUT_NHWC };

static void op_ring(struct outcome *o)
{
	struct ring *r = (struct ring *)1, *a = (struct ring *)1;

	o->ret = ring_create(&desc, 0, &r);
	if (o->ret < 0) {
		assert_null(r);
		snprintf(o->msg, sizeof(o->msg), "ring_create: out of memory");
		return;
	}
	int fd = dup(ring_fd(r));
	assert_true(fd >= 0);
	o->ret = ring_attach(fd, &a);
	if (o->ret < 0) {
		assert_null(a);
		close(fd);  /* ring_attach takes the fd only on success */
		snprintf(o->msg, sizeof(o->msg), "ring_attach: out of memory");
	} else {
		assert_int_equal(ring_header(a)->slots, 4);
		ring_destroy(a);
	}
	ring_destroy(r);
}

static void test_oom_ring_create_attach(void **state)
{
	(void)state;
	disarm();
	assert_true(each_alloc_fails(op_ring, check_enomem) >= 2);
}

/* ---- the server core in this process, and its clients ---- */

static int setup_harness(void **state)
{
	disarm();
	exempt = 0;
	return srvh_setup(state);
}

static struct srv *g_srv;
static pthread_t g_srv_th;
static int g_srv_fds;  /* this process's fds before the server started */

static void *worker_init(void *ctx, unsigned index)
{
	static unsigned ids[64];

	(void)ctx;
	return &ids[index % 64];  /* no allocation: the filler only wants it non-NULL */
}

static void *srv_thread(void *arg)
{
	(void)arg;
	srv_run(g_srv);
	return NULL;
}

static int setup_srv(void **state)
{
	char why[256];

	disarm();
	exempt = 1;
	g_fd_check = 0;
	if (srvh_setup(state) < 0)
		return -1;
	g_srv_fds = count_own_fds();
	struct srv_opts o = { .socket_path = g_sock, .workers = 2, .group = (gid_t)-1 };
	struct srv_ops ops = { .job_open = pat_job_open, .job_close = pat_job_close,
			       .worker_init = worker_init, .step_open = pat_step_open, .fill = pat_fill,
			       .phases = { { "io", "reading" }, { "decode", "decoding" } } };
	if (srv_create(&o, &ops, &g_srv, why, sizeof(why)) < 0) {
		fprintf(stderr, "srv_create: %s\n", why);
		return -1;
	}
	return pthread_create(&g_srv_th, NULL, srv_thread, NULL) == 0 ? 0 : -1;
}

static int teardown_srv(void **state)
{
	disarm();
	srv_stop(g_srv);
	pthread_join(g_srv_th, NULL);
	srv_destroy(g_srv);
	g_srv = NULL;
	g_fd_check = 1;
	int fds = count_own_fds();
	int ret = srvh_teardown(state);
	/* every fd the server and its clients made, through every failure, is closed again */
	if (fds != g_srv_fds) {
		fprintf(stderr, "the server left %d fds open\n", fds - g_srv_fds);
		return -1;
	}
	return ret;
}

static unsigned g_round;  /* a fresh job name each run */

/* A client's whole session: connect, open a job, stats, its 4 batches checked byte for byte and
 * the end of the job (so that no worker still works for it when the next run begins). */
static void op_client(struct outcome *o)
{
	struct ldc *c = NULL;
	char job[32];

	snprintf(job, sizeof(job), "oom%u", g_round++);
	o->ret = ldc_connect(g_sock, &c, o->msg, sizeof(o->msg));
	if (o->ret < 0) {
		assert_null(c);
		return;
	}
	struct ldc_job j = mkjob(job, "pattern:16", 4, 0, 1, 1);
	struct ldc_info in;
	o->ret = ldc_open(c, &j, &in);
	struct expect e = o->ret == 0 ? expect_of(&in, 0) : (struct expect){ 0 };
	if (o->ret == 0) {
		struct ctl_stats st;
		o->ret = ldc_stats(c, &st);
		if (o->ret == 0)
			assert_int_equal(st.ranks_attached, 1);
	}
	for (uint64_t step = 0; step < 4 && o->ret == 0; step++) {
		struct ldc_batch b;
		o->ret = ldc_acquire(c, ACQUIRE_MS, &b);
		if (o->ret < 0)
			break;
		if (check_batch(&b, step, &e, o->msg, sizeof(o->msg)) < 0)
			fail_msg("step %llu: %s", (unsigned long long)step, o->msg);
		assert_int_equal(ldc_release(c, &b), 0);
	}
	if (o->ret == 0) {
		struct ldc_batch b;
		o->ret = ldc_acquire(c, ACQUIRE_MS, &b);
		if (o->ret == -ENODATA)
			o->ret = 0;
		else if (o->ret == 0)
			fail_msg("a fifth batch in a job of 4 steps");
	}
	if (o->ret < 0 && !o->msg[0])
		snprintf(o->msg, sizeof(o->msg), "%s", ldc_error(c));
	ldc_close(c);
}

/* The client's own allocations fail (the server's are not counted: it runs in a child). */
static void test_oom_client_session(void **state)
{
	(void)state;
	pid_t pid = start_server(NULL);
	exempt = 0;
	long points = each_alloc_fails(op_client, check_enomem);
	/* ldc_connect's handle; ldc_open's user and group look-ups (none: no share) */
	assert_true(points >= 1);
	assert_alive(pid);
	assert_serves("after");
	stop_server(pid);
}

static void op_admin(struct outcome *o)
{
	char *text = NULL;

	o->ret = ldc_admin(g_sock, CTL_OP_STATS, CTL_ADMIN_JSON, NULL, &text, o->msg,
			   sizeof(o->msg));
	if (o->ret == 0) {
		assert_non_null(text);
		assert_has(text, "\"job\":\"one\"");
	} else {
		assert_null(text);
	}
	free(text);
}

/* loaderctl's question through the client API: the answer's buffer fails to grow. */
static void test_oom_client_admin(void **state)
{
	(void)state;
	pid_t pid = start_server(NULL);
	assert_serves("one");
	assert_true(each_alloc_fails(op_admin, check_enomem) >= 1);
	stop_server(pid);
}

/* A failing server-side allocation reaches the client as a clean refusal: ENOMEM with a message
 * that says so, or, when the server could not even keep the connection (its table entry) or the
 * job failed, the connection closed (-EPIPE, the message naming loaderd or memory). Either way the
 * server goes on serving. */
static void check_server_oom(long n, const struct outcome *o)
{
	if (o->ret == -EPIPE) {
		if (!strstr(o->msg, "memory") && !strstr(o->msg, "loaderd"))
			fail_msg("allocation %ld failing: -EPIPE with \"%s\"", n, o->msg);
	} else {
		check_enomem(n, o);
	}
	char job[32];
	snprintf(job, sizeof(job), "still%ld", n);
	disarm();
	exempt = 1;
	assert_serves(job);
}

static void test_oom_server_job_open_attach(void **state)
{
	(void)state;
	exempt = 1;  /* only the server's threads count */
	long points = each_alloc_fails(op_client, check_server_oom);
	/* the connection, the open request, the job and its rank table, the ring, the attach,
	 * a step's arrays */
	assert_true(points >= 5);
	assert_serves("after");
}

static void op_snapshot(struct outcome *o)
{
	struct srv_snapshot *snap = (struct srv_snapshot *)1;

	exempt = 0;  /* srv_snapshot_take runs on this thread */
	o->ret = srv_snapshot_take(g_srv, &snap);
	exempt = 1;
	if (o->ret < 0) {
		assert_null(snap);
		snprintf(o->msg, sizeof(o->msg), "srv_snapshot_take: out of memory");
		return;
	}
	assert_int_equal(snap->njobs, 1);
	assert_string_equal(snap->jobs[0].name, "snap");
	srv_snapshot_free(snap);
}

static void test_oom_server_snapshot(void **state)
{
	(void)state;
	exempt = 1;
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("snap", "pattern:64", 4, 0, 1, 0);
	struct ldc_info in;
	struct ctl_stats st;
	open_ok(c, &j, &in);
	wait_published(c, in.ring->slots, &st);  /* the ring full: its workers wait, allocate nothing */
	assert_int_equal(each_alloc_fails(op_snapshot, check_enomem), 1);
	cli_close(c);
}

static void op_admin_server(struct outcome *o)
{
	char *text = NULL;

	exempt = 1;
	o->ret = ldc_admin(g_sock, CTL_OP_STATS, CTL_ADMIN_JSON, NULL, &text, o->msg,
			   sizeof(o->msg));
	if (o->ret == 0)
		assert_has(text, "\"job\":\"adm\"");
	free(text);
}

/* loaderctl's answer, rendered by the server: its snapshot and text buffer fail. */
static void test_oom_server_admin_answer(void **state)
{
	(void)state;
	exempt = 1;
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob("adm", "pattern:64", 4, 0, 1, 0);
	struct ldc_info in;
	struct ctl_stats st;
	open_ok(c, &j, &in);
	wait_published(c, in.ring->slots, &st);  /* the ring full: its workers wait, allocate nothing */
	assert_true(each_alloc_fails(op_admin_server, check_server_oom) >= 2);
	cli_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_oom_dpk_writer_leaves_nothing, setup_dir,
						teardown_dir),
		cmocka_unit_test_setup_teardown(test_oom_dpk_open_says_memory, setup_dir,
						teardown_dir),
		cmocka_unit_test_setup_teardown(test_oom_reader_buffers, setup_dir, teardown_dir),
		cmocka_unit_test(test_oom_ring_create_attach),
		cmocka_unit_test_setup_teardown(test_oom_client_session, setup_harness,
						srvh_teardown),
		cmocka_unit_test_setup_teardown(test_oom_client_admin, setup_harness, srvh_teardown),
		cmocka_unit_test_setup_teardown(test_oom_server_job_open_attach, setup_srv,
						teardown_srv),
		cmocka_unit_test_setup_teardown(test_oom_server_snapshot, setup_srv, teardown_srv),
		cmocka_unit_test_setup_teardown(test_oom_server_admin_answer, setup_srv,
						teardown_srv),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
