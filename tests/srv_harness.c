/* srv_harness.c - the server test harness (see srv_harness.h): a pattern-filling srv in a forked
 * child, clients through ldc and raw ctl packets, and the bookkeeping that lets srvh_teardown
 * leave no process, fd or directory behind. Single-threaded but for signal_later's helper thread;
 * the forked server's threads are srv's own. */
#include "tests/srv_harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define TRACK_MAX 32             /* children, clients and fds recorded at once */

/* ---- time, bookkeeping ---- */

int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char g_dir[64];
char g_sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
static pid_t g_pids[TRACK_MAX];
static struct ldc *g_cli[TRACK_MAX];
static int g_fds[TRACK_MAX];
struct ring *g_ring;
static pthread_t g_thread;
static int g_thread_on;

static void pid_track(pid_t pid)
{
	for (int i = 0; i < TRACK_MAX; i++)
		if (!g_pids[i]) {
			g_pids[i] = pid;
			return;
		}
	kill(pid, SIGKILL);
	fail_msg("too many children");
}

static void pid_forget(pid_t pid)
{
	for (int i = 0; i < TRACK_MAX; i++)
		if (g_pids[i] == pid)
			g_pids[i] = 0;
}

void fd_track(int fd)
{
	for (int i = 0; i < TRACK_MAX; i++)
		if (g_fds[i] < 0) {
			g_fds[i] = fd;
			return;
		}
	close(fd);
	fail_msg("too many fds");
}

void fd_close(int fd)
{
	for (int i = 0; i < TRACK_MAX; i++)
		if (g_fds[i] == fd)
			g_fds[i] = -1;
	close(fd);
}

static void cli_track(struct ldc *c)
{
	for (int i = 0; i < TRACK_MAX; i++)
		if (!g_cli[i]) {
			g_cli[i] = c;
			return;
		}
	ldc_close(c);
	fail_msg("too many clients");
}

void cli_close(struct ldc *c)
{
	for (int i = 0; i < TRACK_MAX; i++)
		if (g_cli[i] == c)
			g_cli[i] = NULL;
	ldc_close(c);
}

/* Wait up to @ms for @pid to end. 0 (and *status), -ETIMEDOUT, or -errno. */
int pid_reap(pid_t pid, int ms, int *status)
{
	int64_t end = mono_ms() + ms;

	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r == pid) {
			pid_forget(pid);
			return 0;
		}
		if (r < 0 && errno != EINTR)
			return -errno;
		if (mono_ms() >= end)
			return -ETIMEDOUT;
		usleep(2000);
	}
}

void assert_alive(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, WNOHANG) == pid) {
		pid_forget(pid);
		fail_msg("the server died: %s %d", WIFSIGNALED(st) ? "signal" : "exit status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	}
}

/* A forked child must not keep the parent's connections open (the server would not see them hang
 * up) nor anything else: keep stdio and @keep. */
void close_fds_except(int keep)
{
	if (keep > 3)
		close_range(3, (unsigned)keep - 1, 0);
	close_range((unsigned)keep + 1, ~0u, 0);
}

/* Delayed signal from a helper thread, for "while the consumer is blocked". */
struct delayed {
	pid_t pid;
	int sig, delay_ms;
	int64_t sent_ms;
};
static struct delayed g_delayed;

static void *delayed_main(void *p)
{
	struct delayed *d = p;

	usleep((useconds_t)d->delay_ms * 1000);
	d->sent_ms = mono_ms();
	kill(d->pid, d->sig);
	return NULL;
}

void signal_later(pid_t pid, int sig, int delay_ms)
{
	g_delayed = (struct delayed){ .pid = pid, .sig = sig, .delay_ms = delay_ms };
	assert_int_equal(pthread_create(&g_thread, NULL, delayed_main, &g_delayed), 0);
	g_thread_on = 1;
}

/* Join the helper; when the signal went out (monotonic ms). */
int64_t signal_joined(void)
{
	pthread_join(g_thread, NULL);
	g_thread_on = 0;
	return g_delayed.sent_ms;
}

/* ---- the pattern ---- */

uint64_t pat_id(uint32_t rank, uint64_t step, uint32_t i)
{
	return step * 100003ull + i * 17ull + rank * 1000000007ull;
}

uint8_t pat_flag(uint64_t step, uint32_t i)
{
	return (step + i) % 5 == 0 ? RING_SAMPLE_SUBSTITUTED : 0;
}

uint8_t pat_byte(uint32_t rank, uint64_t step, uint32_t i, uint64_t j)
{
	return (uint8_t)(step * 31 + i * 7 + j * 13 + (j >> 8) + rank * 101);
}

/* ---- the test server (runs in a forked child) ---- */

enum pat_kind { PAT_PATTERN, PAT_FAIL, PAT_BADMSG, PAT_SLOW, PAT_HEAVY };

atomic_ulong *pat_heavy_samples;

/* Shared with the forked servers (start_server), so that a test reads what they filled. */
__attribute__((constructor)) static void heavy_counter_init(void)
{
	void *p = mmap(NULL, sizeof(atomic_ulong), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		       -1, 0);
	static atomic_ulong local;

	pat_heavy_samples = p == MAP_FAILED ? &local : p;
}

/* @ms of this thread's CPU: a record that costs that much to decode. */
static void spin_cpu_ms(uint64_t ms)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	do
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) < (int64_t)ms * 1000000);
}

struct pat_job {
	enum pat_kind kind;
	uint64_t samples, arg, spe, sample_bytes;
	uint32_t batch, world;
};

static int parse_u64(const char *s, const char *prefix, uint64_t *v)
{
	size_t n = strlen(prefix);
	char *end;

	if (strncmp(s, prefix, n) || !s[n])
		return 0;
	errno = 0;
	*v = strtoull(s + n, &end, 10);
	return !*end && !errno;
}

int pat_job_open(void *ctx, const struct ctl_job_open *spec, const struct srv_dataset *ds,
		 void **job, struct srv_job_info *info, char *why, size_t whylen)
{
	struct pat_job pj = { .samples = 1000, .batch = spec->batch, .world = spec->world };

	(void)ctx, (void)ds;  /* "pattern:N" names no file: clients send none */
	if (parse_u64(spec->dataset, "pattern:", &pj.samples))
		pj.kind = PAT_PATTERN;
	else if (parse_u64(spec->dataset, "fail:", &pj.arg))
		pj.kind = PAT_FAIL;
	else if (parse_u64(spec->dataset, "badmsg:", &pj.arg))
		pj.kind = PAT_BADMSG;
	else if (parse_u64(spec->dataset, "slow:", &pj.arg))
		pj.kind = PAT_SLOW;
	else if (parse_u64(spec->dataset, "heavy:", &pj.arg))
		pj.kind = PAT_HEAVY, pj.samples = 1u << 20;
	else if (parse_u64(spec->dataset, "slowopen:", &pj.arg))
		usleep((useconds_t)pj.arg * 1000);  /* a dataset on a hung file system */
	else {
		snprintf(why, whylen, "no such dataset: %s", spec->dataset);
		return -ENOENT;
	}
	uint64_t per = (uint64_t)spec->batch * spec->world;
	if (pj.samples < per) {
		snprintf(why, whylen, "%" PRIu64 " samples are fewer than one global batch of %"
			 PRIu64, pj.samples, per);
		return -EINVAL;
	}
	pj.spe = pj.samples / per;
	memset(info, 0, sizeof(*info));
	info->ring.batch = spec->batch;
	info->ring.dtype = RING_DTYPE_U8;
	if (spec->crop_h) {
		info->ring.ndim = 3;
		info->ring.sample_bytes = (uint64_t)spec->crop_h * spec->crop_w * 3;
		if (spec->transforms & CTL_TF_NCHW) {
			info->ring.layout = RING_LAYOUT_NCHW;
			info->ring.shape[0] = 3;
			info->ring.shape[1] = spec->crop_h;
			info->ring.shape[2] = spec->crop_w;
		} else {
			info->ring.layout = RING_LAYOUT_NHWC;
			info->ring.shape[0] = spec->crop_h;
			info->ring.shape[1] = spec->crop_w;
			info->ring.shape[2] = 3;
		}
	} else {
		info->ring.layout = RING_LAYOUT_RAW;
		info->ring.ndim = 1;
		info->ring.shape[0] = 64;
		info->ring.sample_bytes = 64;
	}
	pj.sample_bytes = info->ring.sample_bytes;
	info->steps_per_epoch = pj.spe;
	info->samples = pj.samples;
	/* An identity per dataset name, as dpk_identity is per content: "pattern:40" is another
	 * dataset than "pattern:80" for resume tokens. */
	for (size_t i = 0; spec->dataset[i] && i < 2 * sizeof(info->dataset_id); i++)
		info->dataset_id[i % sizeof(info->dataset_id)] ^= (uint8_t)(spec->dataset[i] + i);
	struct pat_job *p = malloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	*p = pj;
	*job = p;
	return 0;
}

void pat_job_close(void *ctx, void *job)
{
	(void)ctx;
	free(job);
}

static void *pat_worker_init(void *ctx, unsigned index)
{
	unsigned *w = malloc(sizeof(*w));

	(void)ctx;
	if (w)
		*w = index;
	return w;
}

static void pat_worker_fini(void *ctx, void *worker)
{
	(void)ctx;
	free(worker);
}

int pat_step_open(void *ctx, void *worker, struct srv_step *st, char *why, size_t whylen)
{
	const struct pat_job *pj = st->job;
	uint64_t step = st->epoch * pj->spe + st->step_in_epoch;

	(void)ctx;
	if (!worker || st->step_in_epoch >= pj->spe || st->world != pj->world ||
	    st->rank >= pj->world) {
		snprintf(why, whylen, "srv handed the filler an inconsistent step %" PRIu64, step);
		return -EPROTO;
	}
	for (uint32_t i = 0; i < pj->batch; i++) {
		st->labels[i] = (int64_t)(step * pj->batch + i);
		st->ids[i] = pat_id(st->rank, step, i);
		st->flags[i] = pat_flag(step, i);
	}
	st->count = pj->batch;
	st->slot_flags = PAT_SLOT_FLAG | RING_SLOT_LAST;  /* LAST is srv's: it must clear it here */
	return 0;
}

int pat_fill(void *ctx, void *worker, struct srv_fill *f)
{
	const struct srv_step *st = f->step;
	const struct pat_job *pj = st->job;
	struct ring_slot *s = f->slot;
	uint64_t step = s->step;

	(void)ctx;
	if (!worker || st->epoch * pj->spe + st->step_in_epoch != step ||
	    s->hdr->epoch != st->epoch || s->hdr->step_in_epoch != st->step_in_epoch ||
	    f->begin >= f->end || f->end > st->count) {
		snprintf(f->why, sizeof(f->why), "srv handed the filler an inconsistent step %"
			 PRIu64, step);
		return -EPROTO;
	}
	if (pj->kind == PAT_FAIL && step == pj->arg) {
		snprintf(f->why, sizeof(f->why), "injected failure at step %" PRIu64, step);
		return -EIO;
	}
	if (pj->kind == PAT_BADMSG && step == pj->arg)
		return -EBADMSG;
	if (pj->kind == PAT_SLOW && f->begin == 0)
		usleep((useconds_t)pj->arg * 1000);  /* once per step */
	for (uint32_t i = f->begin; i < f->end; i++) {
		uint8_t *p = (uint8_t *)s->payload + i * pj->sample_bytes;
		if (pj->kind == PAT_HEAVY) {  /* every sample */
			spin_cpu_ms(pj->arg);
			atomic_fetch_add(pat_heavy_samples, 1);
		}
		for (uint64_t j = 0; j < pj->sample_bytes; j++)
			p[j] = pat_byte(st->rank, step, i, j);
	}
	if (f->begin == 0) {  /* per step */
		f->phase_ns[0] = 1;
		f->phase_ns[1] = 2;
	}
	return 0;
}

static void pat_notice(void *ctx, int level, const char *msg)
{
	(void)ctx;
	if (getenv("TEST_SRV_VERBOSE"))
		fprintf(stderr, "  srv[%d] %s\n", level, msg);
	if (strstr(msg, "job sleepnotice ") && strstr(msg, " attached"))
		usleep(500 * 1000);
}

struct ready_msg {
	int ret;
	char why[256];
};

static struct srv *g_child_srv;

/* A --coverage build writes its counters at exit(), which _exit() skips: a forked child writes
 * them first (`make coverage` would otherwise miss all the server does in start_server's child).
 * Weak: NULL in a build without --coverage. */
extern void __gcov_dump(void) __attribute__((weak));

static void child_exit(int status)
{
	if (__gcov_dump)
		__gcov_dump();
	_exit(status);
}

static void child_on_sigterm(int sig)
{
	(void)sig;
	srv_stop(g_child_srv);
}

/* Fork a server on @path. Returns its pid with srv_create's result in *ret and *why; the child
 * exits 0 after SIGTERM (srv_stop, srv_run, srv_destroy), 3 if srv_create failed. */
pid_t spawn_server(const char *path, const struct tsrv *cfg, int *ret, char *why,
			  size_t whylen)
{
	struct ready_msg msg = { .ret = -EIO, .why = "the server child said nothing" };
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct srv_opts o = { .socket_path = path,
				      .workers = cfg->workers ? cfg->workers : 2,
				      .default_slots = cfg->slots, .mem_limit = cfg->mem_limit,
				      .group = (gid_t)-1, .ring_flags = cfg->ring_flags,
				      .linger_ms = cfg->linger_ms, .balance = cfg->balance };
		struct srv_ops ops = { .job_open = pat_job_open, .job_close = pat_job_close,
				       .worker_init = pat_worker_init,
				       .worker_fini = pat_worker_fini,
				       .step_open = pat_step_open, .fill = pat_fill,
				       .notice = pat_notice,
				       .phases = { { "io", "reading" }, { "decode", "decoding" } } };
		struct ready_msg m;

		close(p[0]);
		close_fds_except(p[1]);
		memset(&m, 0, sizeof(m));
		m.ret = srv_create(&o, &ops, &g_child_srv, m.why, sizeof(m.why));
		if (m.ret == 0) {
			struct sigaction sa = { .sa_handler = child_on_sigterm };
			sigaction(SIGTERM, &sa, NULL);
		}
		(void)!write(p[1], &m, sizeof(m));
		close(p[1]);
		if (m.ret < 0)
			child_exit(3);
		int r = srv_run(g_child_srv);
		srv_destroy(g_child_srv);
		child_exit(r == 0 ? 0 : 4);
	}
	pid_track(pid);
	close(p[1]);
	struct pollfd pf = { .fd = p[0], .events = POLLIN };
	if (poll(&pf, 1, 5000) == 1 && read(p[0], &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
		msg.ret = -EIO;
	/* Wait for the child to close its end too, so that its fd count is settled. */
	char eof;
	if (msg.ret == 0 && (poll(&pf, 1, 5000) != 1 || read(p[0], &eof, 1) != 0))
		msg.ret = -EIO;
	close(p[0]);
	*ret = msg.ret;
	snprintf(why, whylen, "%s", msg.why);
	return pid;
}

pid_t start_server(const struct tsrv *cfg)
{
	static const struct tsrv dflt;
	char why[256];
	int ret;
	pid_t pid = spawn_server(g_sock, cfg ? cfg : &dflt, &ret, why, sizeof(why));

	if (ret < 0)
		fail_msg("srv_create: %d %s", ret, why);
	return pid;
}

/* SIGTERM the server and expect a clean exit 0 within 5 s. */
void stop_server(pid_t pid)
{
	int st;

	assert_int_equal(kill(pid, SIGTERM), 0);
	if (pid_reap(pid, 5000, &st) < 0)
		fail_msg("the server did not exit within 5 s of SIGTERM");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("the server ended with %s %d", WIFSIGNALED(st) ? "signal" : "exit status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/* ---- consumers (no cmocka here: also used in forked children) ---- */

int msg_bad(char *msg, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
	return -1;
}

struct expect expect_of(const struct ldc_info *in, uint32_t rank)
{
	struct expect e = { .rank = rank, .batch = in->ring->batch,
			    .sample_bytes = in->ring->sample_bytes, .spe = in->steps_per_epoch,
			    .steps_total = in->steps_total };
	return e;
}

/* Is @b step @step of the pattern, every byte of it? */
int check_batch(const struct ldc_batch *b, uint64_t step, const struct expect *e, char *msg,
		       size_t len)
{
	uint32_t flags = PAT_SLOT_FLAG;

	if (e->steps_total && step + 1 == e->steps_total)
		flags |= RING_SLOT_LAST;
	if (b->step != step)
		return msg_bad(msg, len, "got step %" PRIu64 ", want %" PRIu64, b->step, step);
	if (b->epoch != step / e->spe || b->step_in_epoch != step % e->spe)
		return msg_bad(msg, len, "step %" PRIu64 ": epoch %" PRIu64 " step_in_epoch %" PRIu64
			   ", want %" PRIu64 " %" PRIu64, step, b->epoch, b->step_in_epoch,
			   step / e->spe, step % e->spe);
	if (b->count != e->batch || b->flags != flags || b->sample_bytes != e->sample_bytes)
		return msg_bad(msg, len, "step %" PRIu64 ": count %u flags 0x%x sample_bytes %" PRIu64
			   ", want %u 0x%x %" PRIu64, step, b->count, b->flags, b->sample_bytes,
			   e->batch, flags, e->sample_bytes);
	if ((uintptr_t)b->data % RING_PAYLOAD_ALIGN)
		return msg_bad(msg, len, "step %" PRIu64 ": payload not 4 KiB aligned", step);
	for (uint32_t i = 0; i < b->count; i++) {
		const uint8_t *p = (const uint8_t *)b->data + i * b->sample_bytes;
		if (b->labels[i] != (int64_t)(step * e->batch + i) ||
		    b->ids[i] != pat_id(e->rank, step, i) ||
		    b->sample_flags[i] != pat_flag(step, i))
			return msg_bad(msg, len, "step %" PRIu64 " sample %u: label %" PRId64
				   " id %" PRIu64 " flags 0x%x", step, i, b->labels[i], b->ids[i],
				   b->sample_flags[i]);
		for (uint64_t j = 0; j < b->sample_bytes; j++)
			if (p[j] != pat_byte(e->rank, step, i, j))
				return msg_bad(msg, len, "step %" PRIu64 " sample %u byte %" PRIu64
					   ": 0x%02x, want 0x%02x", step, i, j, p[j],
					   pat_byte(e->rank, step, i, j));
	}
	return 0;
}

/* Acquire, check and release steps [from, to) in order. */
int consume(struct ldc *c, const struct expect *e, uint64_t from, uint64_t to, char *msg,
		   size_t len)
{
	for (uint64_t s = from; s < to; s++) {
		struct ldc_batch b;
		int r = ldc_acquire(c, ACQUIRE_MS, &b);
		if (r)
			return msg_bad(msg, len, "step %" PRIu64 ": ldc_acquire %d: %s", s, r,
				   ldc_error(c));
		if (check_batch(&b, s, e, msg, len))
			return -1;
		r = ldc_release(c, &b);
		if (r)
			return msg_bad(msg, len, "step %" PRIu64 ": ldc_release %d: %s", s, r,
				   ldc_error(c));
	}
	return 0;
}

struct ldc_job mkjob(const char *name, const char *dataset, uint32_t batch, uint32_t rank,
			    uint32_t world, uint32_t epochs)
{
	struct ldc_job j = { .job = name, .dataset = dataset, .batch = batch, .rank = rank,
			     .world = world, .epochs = epochs };
	return j;
}

pid_t spawn_child(child_fn fn, const void *arg, int *rfd)
{
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		close_fds_except(p[1]);
		child_exit(fn(arg, p[1]));
	}
	pid_track(pid);
	close(p[1]);
	fd_track(p[0]);
	*rfd = p[0];
	return pid;
}

/* Read what the child wrote until it closes the pipe, then reap it; within @ms in all. */
void child_wait(pid_t pid, int rfd, int ms, char *out, size_t len, int *status)
{
	int64_t end = mono_ms() + ms;
	size_t got = 0;

	for (;;) {
		struct pollfd pf = { .fd = rfd, .events = POLLIN };
		int64_t left = end - mono_ms();
		if (left <= 0 || poll(&pf, 1, (int)left) != 1)
			fail_msg("child %d did not finish within %d ms (said \"%.*s\")", (int)pid,
				 ms, (int)got, out);
		ssize_t n = read(rfd, out + got, len - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == len - 1)
			break;
	}
	out[got] = '\0';
	fd_close(rfd);
	if (pid_reap(pid, (int)(end - mono_ms() > 0 ? end - mono_ms() : 0) + 1, status) < 0)
		fail_msg("child %d did not exit (said \"%s\")", (int)pid, out);
}

/* ---- this process as a client ---- */

struct ldc *cli_connect(void)
{
	struct ldc *c;
	char err[256];
	int r = ldc_connect(g_sock, &c, err, sizeof(err));

	if (r)
		fail_msg("ldc_connect: %d %s", r, err);
	cli_track(c);
	return c;
}

void open_ok(struct ldc *c, const struct ldc_job *j, struct ldc_info *in)
{
	int r = ldc_open(c, j, in);

	if (r)
		fail_msg("ldc_open(%s rank %u): %d %s", j->job, j->rank, r, ldc_error(c));
}

void consume_ok(struct ldc *c, const struct expect *e, uint64_t from, uint64_t to)
{
	char msg[512];

	if (consume(c, e, from, to, msg, sizeof(msg)))
		fail_msg("%s", msg);
}

/* A fresh client can open @job and read correct batches: the server is up and serving. */
void assert_serves(const char *job)
{
	struct ldc *c = cli_connect();
	struct ldc_job j = mkjob(job, "pattern:1000", 4, 0, 1, 0);
	struct ldc_info in;

	open_ok(c, &j, &in);
	struct expect e = expect_of(&in, 0);
	consume_ok(c, &e, in.first_step, in.first_step + 6);
	cli_close(c);
}

/* Expect the next ldc_open on a new connection to fail with @err and a message with @needle. */
void open_fails(const struct ldc_job *j, int err, const char *needle)
{
	struct ldc *c = cli_connect();
	struct ldc_info in;
	int r = ldc_open(c, j, &in);

	if (r != err)
		fail_msg("ldc_open(%s rank %u): %d (%s), want %d", j->job, j->rank, r, ldc_error(c),
			 err);
	assert_has(ldc_error(c), needle);
	cli_close(c);
}

/* ---- raw protocol ---- */

int raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 5 };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	fd_track(fd);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g_sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		fail_msg("connect %s: %s", g_sock, strerror(errno));
	/* A reply that never comes fails the test instead of hanging it. */
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	return fd;
}

void good_open(struct ctl_job_open *m, const char *job)
{
	memset(m, 0, sizeof(*m));
	snprintf(m->job, sizeof(m->job), "%s", job);
	snprintf(m->dataset, sizeof(m->dataset), "pattern:1000");
	m->batch = 4;
	m->world = 1;
}

size_t make_pkt(void *buf, uint32_t magic, uint16_t version, uint16_t type, uint32_t length,
		       uint32_t reserved, const void *body, size_t blen)
{
	struct ctl_hdr h = { .magic = magic, .version = version, .type = type, .length = length,
			     .reserved = reserved };

	memcpy(buf, &h, sizeof(h));
	if (blen)
		memcpy((char *)buf + sizeof(h), body, blen);
	return sizeof(h) + blen;
}

/* The server answers on @fd with CTL_ERROR (@err, text with @needle), then closes. */
void expect_refused(int fd, const char *what, int err, const char *needle)
{
	char buf[CTL_MSG_MAX];
	uint16_t type = 0;
	struct ctl_error e;
	ssize_t n = ctl_recv(fd, buf, &type, NULL, NULL);

	if (n < 0)
		fail_msg("%s: no reply from the server: %s", what, strerror((int)-n));
	if (type != CTL_ERROR || n != (ssize_t)sizeof(e))
		fail_msg("%s: reply of type %u, %zd bytes; want CTL_ERROR", what, type, n);
	memcpy(&e, buf, sizeof(e));
	if (!memchr(e.text, 0, sizeof(e.text)))
		fail_msg("%s: error text not NUL-terminated", what);
	if (e.err != err || !strstr(e.text, needle))
		fail_msg("%s: error %d \"%s\", want %d with \"%s\"", what, e.err, e.text, err,
			 needle);
	n = ctl_recv(fd, buf, &type, NULL, NULL);
	if (n != -EPIPE)
		fail_msg("%s: the connection stayed open after CTL_ERROR (%zd)", what, n);
}

/* Send @len bytes of @pkt as one packet on a new connection and expect it refused. */
void send_refused(const char *what, const void *pkt, size_t len, int err, const char *needle)
{
	int fd = raw_connect();

	if (send(fd, pkt, len, MSG_NOSIGNAL) != (ssize_t)len)
		fail_msg("%s: send: %s", what, strerror(errno));
	expect_refused(fd, what, err, needle);
	fd_close(fd);
}

/* JOB_OPEN on a raw connection; returns the socket, the ring (mapped, when @ring) and the bell. */
int raw_open(const char *job, struct ring **ring, int *bell)
{
	struct ctl_job_open m;
	char buf[CTL_MSG_MAX];
	uint16_t type = 0;
	int fds[2], nfds = 0;
	int fd = raw_connect();

	good_open(&m, job);
	assert_int_equal(ctl_send(fd, CTL_JOB_OPEN, &m, sizeof(m), NULL, 0), 0);
	ssize_t n = ctl_recv(fd, buf, &type, fds, &nfds);
	if (n != (ssize_t)sizeof(struct ctl_job_ok) || type != CTL_JOB_OK || nfds != 2)
		fail_msg("job %s: reply %zd bytes type %u with %d fds", job, n, type, nfds);
	*bell = fds[1];
	fd_track(fds[1]);
	if (!ring) {
		close(fds[0]);
		return fd;
	}
	int r = ring_attach(fds[0], ring);
	if (r) {
		close(fds[0]);
		fail_msg("ring_attach: %s", strerror(-r));
	}
	return fd;
}

/* Every slot of a fresh ring published (lap 0, READY or already HELD): no worker is inside it. */
void wait_ring_full(void *base, const struct ring_hdr *h)
{
	int64_t end = mono_ms() + 3000;

	for (;;) {
		uint32_t i;
		for (i = 0; i < h->slots; i++) {
			uint32_t *w = (uint32_t *)((char *)base + h->states_offset + 64 * i);
			uint32_t v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
			if (v != (uint32_t)RING_READY && v != (uint32_t)RING_HELD)
				break;
		}
		if (i == h->slots)
			return;
		if (mono_ms() > end)
			fail_msg("the ring was not full within 3 s (slot %u)", i);
		usleep(1000);
	}
}

/* Poll this rank's stats until @n steps are published (3 s at most); then the stats. */
void wait_published(struct ldc *c, uint64_t n, struct ctl_stats *st)
{
	int64_t end = mono_ms() + 3000;

	for (;;) {
		int r = ldc_stats(c, st);
		if (r)
			fail_msg("ldc_stats: %d %s", r, ldc_error(c));
		if (st->published >= n)
			return;
		if (mono_ms() > end)
			fail_msg("only %" PRIu64 " of %" PRIu64 " steps published within 3 s",
				 st->published, n);
		usleep(2000);
	}
}

int count_fds(pid_t pid)
{
	char path[64];
	struct dirent *de;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* ---- fixtures ---- */

int srvh_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/test_srv.XXXXXX");
	if (!mkdtemp(g_dir))
		return -1;
	snprintf(g_sock, sizeof(g_sock), "%s/s.sock", g_dir);
	for (int i = 0; i < TRACK_MAX; i++) {
		g_pids[i] = 0;
		g_cli[i] = NULL;
		g_fds[i] = -1;
	}
	g_ring = NULL;
	return 0;
}

int srvh_teardown(void **state)
{
	char cmd[128];

	(void)state;
	if (g_thread_on) {
		pthread_join(g_thread, NULL);
		g_thread_on = 0;
	}
	for (int i = 0; i < TRACK_MAX; i++) {
		if (g_cli[i])
			ldc_close(g_cli[i]);
		if (g_fds[i] >= 0)
			close(g_fds[i]);
		g_cli[i] = NULL;
		g_fds[i] = -1;
	}
	ring_destroy(g_ring);
	g_ring = NULL;
	for (int i = 0; i < TRACK_MAX; i++)
		if (g_pids[i]) {
			kill(g_pids[i], SIGKILL);
			while (waitpid(g_pids[i], NULL, 0) < 0 && errno == EINTR)
				;
			g_pids[i] = 0;
		}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
	return system(cmd) == 0 ? 0 : -1;
}
