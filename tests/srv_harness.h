/* srv_harness.h - a real loaderd server core (loader/srv.h) with a pattern filler, on a temporary
 * socket, and clients for it: what a test needs to start a server, talk to it through the client
 * API (shm/ldc.h) or raw control packets (shm/ctl.h), check every byte it delivers, and leave no
 * process behind. tests/srv_harness.c; tests/module.mk links it into every test (libtests.a).
 *
 * Fixtures: a cmocka test that uses the harness runs with srvh_setup/srvh_teardown. srvh_setup
 * makes a fresh mkdtemp directory, g_dir, with the socket path g_sock in it. Every child pid,
 * connection and fd that the harness makes (and every fd given to fd_track, and g_ring) is
 * recorded and torn down in srvh_teardown, also when a test fails: children are SIGKILLed and
 * reaped, the directory is removed.
 *
 * The server runs in a forked child (start_server), so that a test can SIGKILL it. Its filler
 * writes a pattern whose every byte check_batch checks:
 *     labels[i] = step * batch + i, ids[i] = pat_id(rank, step, i), flags[i] = pat_flag(step, i),
 *     payload byte j of sample i = pat_byte(rank, step, i, j), slot flags PAT_SLOT_FLAG
 * (the filler also sets RING_SLOT_LAST on every step: srv must own that bit), and reports 1 ns
 * of phase 0 ("io", reading) and 2 ns of phase 1 ("decode", decoding) per step (in the task that
 * holds sample 0; ids, flags and labels come from pat_step_open, the payload from the tasks).
 * The dataset string picks the job: "pattern:N" (N samples; steps per epoch = N / (batch *
 * world)), "fail:K" (the fill of step K fails with a message), "badmsg:K" (the fill of step K
 * returns -EBADMSG and no message), "slow:MS" (every step takes MS ms more, in its first task),
 * "slowopen:MS" (job_open takes MS ms, then a pattern of 1000 samples); anything else is "no such
 * dataset". crop 0
 * gives raw 64-byte samples, else NHWC (or NCHW) crop_h x crop_w x 3. The attach notice of a job
 * named "sleepnotice" sleeps 500 ms on srv's control thread, which lets a test queue events
 * behind it. TEST_SRV_VERBOSE=1 prints the server's notices.
 *
 * Functions that fail the test use cmocka's fail_msg; those marked "no cmocka" return an error
 * with a message instead, so that forked children can use them too. Single-threaded: call from
 * the test's thread only. */
#ifndef LOADERD_TESTS_SRV_HARNESS_H
#define LOADERD_TESTS_SRV_HARNESS_H
#include "loader/srv.h"
#include "shm/ctl.h"
#include "shm/ldc.h"
#include "shm/ring.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/un.h>

#define PAT_SLOT_FLAG 0x80u       /* slot flag the filler sets on every batch */
#define ACQUIRE_MS 5000           /* "the batch should be there": generous on a loaded machine */

/* Fail the test unless @text contains @needle. */
#define assert_has(text, needle) do {						\
	if (!strstr((text), (needle)))						\
		fail_msg("\"%s\" lacks \"%s\"", (text), (needle));		\
} while (0)

extern char g_dir[64];                                              /* the test's directory */
extern char g_sock[sizeof(((struct sockaddr_un *)0)->sun_path)];   /* g_dir/s.sock */
extern struct ring *g_ring;       /* a test's mapped ring: srvh_teardown destroys it */

/* ---- fixtures ---- */

int srvh_setup(void **state);
int srvh_teardown(void **state);

/* ---- time, processes, fds ---- */

int64_t mono_ms(void);  /* CLOCK_MONOTONIC, ms */
/* Torn down by srvh_teardown unless fd_close'd first. */
void fd_track(int fd);
void fd_close(int fd);
void cli_close(struct ldc *c);  /* a client from cli_connect */
/* Wait up to @ms for @pid to end. 0 (and *status), -ETIMEDOUT, or -errno. No cmocka. */
int pid_reap(pid_t pid, int ms, int *status);
/* Fail the test if the server @pid has died. */
void assert_alive(pid_t pid);
/* A forked child must not keep the parent's connections open (the server would not see them hang
 * up) nor anything else: keep stdio and @keep. No cmocka. */
void close_fds_except(int keep);
/* Send @sig to @pid from a helper thread after @delay_ms ("while the consumer is blocked"); one
 * at a time. signal_joined joins the helper and returns when the signal went out (mono_ms). */
void signal_later(pid_t pid, int sig, int delay_ms);
int64_t signal_joined(void);

/* ---- the server ---- */

struct tsrv {
	unsigned workers;         /* default 2 */
	unsigned slots;           /* default_slots; 0 = srv's default */
	uint64_t mem_limit;
	unsigned ring_flags;
	int linger_ms;            /* 0 = srv's default */
	int balance;              /* allow balanced shares (loaderd --balance) */
};

/* Fork a server on @path with @cfg (not NULL). Returns its pid with srv_create's result in *ret and
 * *why; the child exits 0 after SIGTERM (srv_stop, srv_run, srv_destroy), 3 if srv_create
 * failed. */
pid_t spawn_server(const char *path, const struct tsrv *cfg, int *ret, char *why,
		   size_t whylen);
/* spawn_server on g_sock (@cfg NULL: the defaults); fails the test if srv_create failed. */
pid_t start_server(const struct tsrv *cfg);
/* SIGTERM the server and expect a clean exit 0 within 5 s. */
void stop_server(pid_t pid);

/* The pattern filler's callbacks, for a test that runs srv in this process. No cmocka. */
int pat_job_open(void *ctx, const struct ctl_job_open *spec, const struct srv_dataset *ds, void **job,
		 struct srv_job_info *info, char *why, size_t whylen);
void pat_job_close(void *ctx, void *job);
int pat_step_open(void *ctx, void *worker, struct srv_step *st, char *why, size_t whylen);
int pat_fill(void *ctx, void *worker, struct srv_fill *f);
/* "heavy:MS": the pattern, each sample after MS ms of the filling thread's CPU (a record at the
 * pixel bound); *pat_heavy_samples counts those filled, all jobs, in this process and the servers
 * it forks (shared memory). */
extern atomic_ulong *pat_heavy_samples;
/* The pattern itself. */
uint64_t pat_id(uint32_t rank, uint64_t step, uint32_t i);
uint8_t pat_flag(uint64_t step, uint32_t i);
uint8_t pat_byte(uint32_t rank, uint64_t step, uint32_t i, uint64_t j);

/* ---- consumers (no cmocka: also used in forked children) ---- */

/* Format a message into @msg (@len bytes) and return -1. */
int msg_bad(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* What a rank's batches must be. */
struct expect {
	uint32_t rank, batch;
	uint64_t sample_bytes, spe, steps_total;
};

struct expect expect_of(const struct ldc_info *in, uint32_t rank);
/* Is @b step @step of the pattern, every byte of it? 0, or -1 with @msg. */
int check_batch(const struct ldc_batch *b, uint64_t step, const struct expect *e, char *msg,
		size_t len);
/* Acquire, check and release steps [from, to) in order. 0, or -1 with @msg. */
int consume(struct ldc *c, const struct expect *e, uint64_t from, uint64_t to, char *msg,
	    size_t len);
struct ldc_job mkjob(const char *name, const char *dataset, uint32_t batch, uint32_t rank,
		     uint32_t world, uint32_t epochs);

/* A forked consumer: runs @fn, which may write to @out; its return value is the exit status. */
typedef int (*child_fn)(const void *arg, int out);

/* Fork a child running @fn; *rfd reads what it writes. */
pid_t spawn_child(child_fn fn, const void *arg, int *rfd);
/* Read what the child wrote until it closes the pipe, then reap it; within @ms in all. */
void child_wait(pid_t pid, int rfd, int ms, char *out, size_t len, int *status);

/* ---- this process as a client ---- */

struct ldc *cli_connect(void);  /* to g_sock; torn down by srvh_teardown unless cli_close'd */
void open_ok(struct ldc *c, const struct ldc_job *j, struct ldc_info *in);
void consume_ok(struct ldc *c, const struct expect *e, uint64_t from, uint64_t to);
/* A fresh client can open @job and read correct batches: the server is up and serving. */
void assert_serves(const char *job);
/* Expect the next ldc_open on a new connection to fail with @err and a message with @needle. */
void open_fails(const struct ldc_job *j, int err, const char *needle);

/* ---- raw protocol ---- */

/* A connection to g_sock (tracked; 5 s receive timeout). */
int raw_connect(void);
/* A valid CTL_JOB_OPEN for @job: pattern:1000, batch 4, world 1. */
void good_open(struct ctl_job_open *m, const char *job);
/* A packet in @buf: header with these fields, then @blen bytes of @body. Returns its length. */
size_t make_pkt(void *buf, uint32_t magic, uint16_t version, uint16_t type, uint32_t length,
		uint32_t reserved, const void *body, size_t blen);
/* The server answers on @fd with CTL_ERROR (@err, text with @needle), then closes. */
void expect_refused(int fd, const char *what, int err, const char *needle);
/* Send @len bytes of @pkt as one packet on a new connection and expect it refused. */
void send_refused(const char *what, const void *pkt, size_t len, int err, const char *needle);
/* JOB_OPEN on a raw connection; returns the socket, the ring (mapped, when @ring) and the bell. */
int raw_open(const char *job, struct ring **ring, int *bell);
/* Every slot of a fresh ring published (lap 0, READY or already HELD): no worker is inside it. */
void wait_ring_full(void *base, const struct ring_hdr *h);
/* Poll this rank's stats until @n steps are published (3 s at most); then the stats. */
void wait_published(struct ldc *c, uint64_t n, struct ctl_stats *st);
/* Open fds of process @pid, or -1. */
int count_fds(pid_t pid);

#endif
