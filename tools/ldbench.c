/* ldbench.c - how fast does loaderd feed one consumer, against the full-decode ceiling?
 *
 * Two figures from one run on the same records:
 *   ceiling   single-core libjpeg-turbo full-size decode rate (tjDecompress2 to RGB, flags 0) of
 *             up to --ceiling-records JPEG records spread over the dataset, times --workers: what
 *             N decode threads would reach if every sample were decoded at full size. Measured
 *             first, in this process, before loaderd starts, so nothing else competes for the CPU.
 *   loaderd   a private loaderd (--workers N) is started on a socket in a temporary directory and
 *             a job (RandomResizedCrop + flip to --crop, batch B, one rank, unbounded epochs) is
 *             drained through the client API as fast as the ring delivers; a warm-up is excluded.
 * loaderd decodes only the crop window at a reduced DCT scale, so the ratio can exceed 1.
 * The last line is machine-readable: "ldbench: samples_per_s=X ceiling_per_s=Y ratio=Z
 * samples_per_cpu_s=C latency_ms=L" (L: the mean time from a step's first decode to its publish,
 * from loaderd's stats; C: 0 when /proc does not say).
 *
 * Both rates are wall-clock. On a host where other work competes for the cores they are low and
 * noisy, so ldbench also prints the same comparison per CPU-second: decodes per CPU-second of the
 * ceiling loop (CLOCK_THREAD_CPUTIME_ID) against samples per CPU-second of loaderd over the window
 * (/proc/PID/stat utime + stime), which other load does not move.
 *
 * loaderd runs in its own process group (a Ctrl-C reaches ldbench, which then stops it), dies with
 * ldbench (PR_SET_PDEATHSIG), and is stopped with SIGTERM, then SIGKILL after 5 s, on every path. */
#include "common/args.h"
#include "common/mix.h"
#include "common/clk.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/tjcheck.h"
#include "formats/dpk.h"
#include "codec/decode.h"
#include "loader/job.h"
#include "codec/kind_load.h"
#include "loader/sampler.h"
#include "shm/ldc.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#define EXIT_USAGE 2
#define START_TIMEOUT_MS 10000
#define STOP_TIMEOUT_MS 5000
#define BATCH_TIMEOUT_MS 30000    /* no batch for this long: loaderd is stuck */
#define SEED 1

struct opts {
	const char *dataset;
	const char *loaderd;      /* NULL: next to our own executable */
	const char *io;           /* loaderd --io, or NULL */
	unsigned workers, batch;
	unsigned slots;           /* ring depth; 0: loaderd's default */
	unsigned task_samples;    /* loaderd --task-samples; 0: loaderd's default */
	uint32_t crop_h, crop_w;
	double seconds, warmup;
	unsigned ceil_records;
	double ceil_seconds;
};

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
	g_stop = sig;
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: ldbench --dataset D.dpk [--workers N] [--batch B] [--crop 224] [--seconds S] [options]\n"
"\n"
"Measures, in one run, (1) the single-core full-size libjpeg-turbo decode rate of the dataset's\n"
"JPEG records (tjDecompress2 to RGB) times N: the full-decode ceiling of N decode threads; then\n"
"(2) starts a private loaderd with --workers N and drains one rank of a RandomResizedCrop + flip\n"
"job through the client API as fast as it delivers. The last line is\n"
"  ldbench: samples_per_s=X ceiling_per_s=Y ratio=Z samples_per_cpu_s=C latency_ms=L\n"
"\n"
"options:\n"
"  --dataset D.dpk        packed dataset with JPEG records (required)\n"
"  --workers N            loaderd decode threads, and the ceiling's multiplier (default: all\n"
"                         cores, here %u)\n"
"  --batch B              samples per step (default 64)\n"
"  --slots N              ring depth (default: loaderd's, 4)\n"
"  --task-samples N       passed to loaderd --task-samples (samples per task)\n"
"  --crop HxW | N         output size (default 224)\n"
"  --seconds S            measured drain time (default 10)\n"
"  --warmup S             drain time before measuring, excluded (default 1; at least 2 steps)\n"
"  --ceiling-records R    JPEG records decoded for the ceiling (default 200)\n"
"  --ceiling-seconds S    time spent measuring the ceiling (default 3)\n"
"  --loaderd PATH         the daemon (default: loaderd next to this program)\n"
"  --io MODE              passed to loaderd --io (auto, direct, buffered, pread)\n"
"  --help                 this text\n"
"Exit status: 0 measured, 1 runtime error (loaderd's log is shown), 2 bad usage.\n",
		proc_cpu_count());
}

/* ---- the ceiling: full-size decode on one core ---- */

struct ceiling {
	unsigned records;         /* records decoded */
	uint64_t decodes;         /* timed decodes */
	double seconds;
	double per_s;             /* decodes per second on one core */
	double cpu_seconds;       /* CPU time of the timed loop (less than seconds on a busy host) */
	double per_cpu_s;         /* decodes per CPU-second: independent of other load */
	double mpix_per_s;
	double mean_w, mean_h;
};

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time (user + system) of process @pid so far, in seconds; < 0 when unknown. */
static int measure_ceiling(const struct dpk *d, const struct opts *o, struct ceiling *out)
{
	uint64_t n = dpk_count(d), njpeg = 0;
	uint8_t **recs = NULL, *dst = NULL;
	size_t *lens = NULL, dst_cap = 0;
	int *ws = NULL, *hs = NULL;
	unsigned r = 0;
	tjhandle tj = NULL;
	int ret = 0;

	memset(out, 0, sizeof(*out));
	for (uint64_t i = 0; i < n; i++)
		njpeg += !!(dpk_kind_info(dpk_entry_get(d, i)->kind)->flags & DPK_KF_JPEG);
	if (njpeg == 0) {
		LOG_ERROR("%s holds no JPEG records: the full-decode ceiling needs JPEGs", o->dataset);
		return -EINVAL;
	}
	unsigned want = njpeg < o->ceil_records ? (unsigned)njpeg : o->ceil_records;
	recs = calloc(want, sizeof(*recs));
	lens = calloc(want, sizeof(*lens));
	ws = calloc(want, sizeof(*ws));
	hs = calloc(want, sizeof(*hs));
	tj = tjInitDecompress();
	if (!recs || !lens || !ws || !hs || !tj) {
		LOG_ERROR("ceiling: %s", tj ? "out of memory" : tjGetErrorStr2(NULL));
		ret = -ENOMEM;
		goto out;
	}
	/* Records spread evenly over the JPEGs of the dataset: the k-th pick is JPEG number
	 * k * njpeg / want, so the sizes are representative of the whole. */
	uint64_t seen = 0, next = 0;
	for (uint64_t i = 0; i < n && r < want; i++) {
		const struct dpk_entry *e = dpk_entry_get(d, i);
		if (!(dpk_kind_info(e->kind)->flags & DPK_KF_JPEG))
			continue;
		if (seen++ != next)
			continue;
		next = (uint64_t)(r + 1) * njpeg / want;
		recs[r] = malloc(e->length);
		if (!recs[r]) {
			ret = -ENOMEM;
			LOG_ERROR("ceiling: out of memory");
			goto out;
		}
		ssize_t got = dpk_read(d, i, recs[r], e->length);
		if (got < 0) {
			LOG_ERROR("ceiling: sample %" PRIu64 ": %s", i, got == -EBADMSG ?
				  "checksum mismatch" : strerror((int)-got));
			free(recs[r]);
			recs[r] = NULL;
			continue;
		}
		lens[r] = (size_t)got;
		int ss, cs;
		TJCHECK(tjDecompressHeader3(tj, recs[r], (unsigned long)lens[r], &ws[r], &hs[r], &ss, &cs),
			tj, ret, out);
		size_t need = (size_t)ws[r] * (size_t)hs[r] * 3;
		if (need > dst_cap) {
			uint8_t *p = realloc(dst, need);
			if (!p) {
				ret = -ENOMEM;
				LOG_ERROR("ceiling: out of memory");
				goto out;
			}
			dst = p, dst_cap = need;
		}
		out->mean_w += ws[r];
		out->mean_h += hs[r];
		r++;
	}
	if (r == 0) {
		LOG_ERROR("ceiling: no JPEG record of %s could be read", o->dataset);
		ret = -EBADMSG;
		goto out;
	}
	out->records = r;
	out->mean_w /= r;
	out->mean_h /= r;

	/* Warm-up (excluded): caches, branch predictors, the CPU's clock. */
	for (unsigned k = 0; k < r && k < 20; k++)
		TJCHECK(tjDecompress2(tj, recs[k], (unsigned long)lens[k], dst, ws[k], 0, hs[k],
				      TJPF_RGB, 0), tj, ret, out);
	double c0 = thread_cpu_s();
	uint64_t t0 = clk_now_ns(), t, pixels = 0;
	unsigned k = 0;
	do {
		TJCHECK(tjDecompress2(tj, recs[k], (unsigned long)lens[k], dst, ws[k], 0, hs[k],
				      TJPF_RGB, 0), tj, ret, out);
		pixels += (uint64_t)ws[k] * (uint64_t)hs[k];
		out->decodes++;
		k = k + 1 == r ? 0 : k + 1;
		t = clk_now_ns();
	} while ((double)(t - t0) * 1e-9 < o->ceil_seconds && !g_stop);
	out->seconds = (double)(t - t0) * 1e-9;
	out->cpu_seconds = thread_cpu_s() - c0;
	out->per_s = (double)out->decodes / out->seconds;
	out->per_cpu_s = out->cpu_seconds > 0 ? (double)out->decodes / out->cpu_seconds : 0;
	out->mpix_per_s = (double)pixels / out->seconds * 1e-6;
out:
	if (tj)
		tjDestroy(tj);
	for (unsigned i = 0; recs && i < want; i++)
		free(recs[i]);
	free(recs);
	free(lens);
	free(ws);
	free(hs);
	free(dst);
	return ret;
}

/* The crop windows loaderd draws in epoch 0 (the key is mix3(seed, epoch, id), as in
 * loader/job.c), and the DCT scale each one gets: how much less work than a full decode. */
static void crop_profile(const struct dpk *d, const struct opts *o)
{
	uint64_t n = dpk_count(d), cnt[4] = { 0 }, njpeg = 0;
	double frac = 0;

	for (uint64_t i = 0; i < n; i++) {
		const struct dpk_entry *e = dpk_entry_get(d, i);
		const struct cdc_kind_load *k = cdc_kind_load(e->kind);
		if (!k || !k->scale)
			continue;
		struct cdc_crop c;
		struct cdc_out out = { .h = o->crop_h, .w = o->crop_w };
		cdc_crop_random(e->shape[1], e->shape[0], mix3(SEED, 0, i), &c);
		unsigned den = k->scale(&c, &out);
		cnt[den == 1 ? 0 : den == 2 ? 1 : den == 4 ? 2 : 3]++;
		frac += (double)c.w * c.h / ((double)den * den) / ((double)e->shape[0] * e->shape[1]);
		njpeg++;
	}
	if (!njpeg)
		return;
	printf("ldbench: crop-aware decode, epoch 0 as loaderd draws it: DCT scale 1/1 %.0f%%, "
	       "1/2 %.0f%%, 1/4 %.0f%%, 1/8 %.0f%%; window pixels at that scale = %.1f%% of a full "
	       "decode on average\n", 100.0 * cnt[0] / njpeg, 100.0 * cnt[1] / njpeg,
	       100.0 * cnt[2] / njpeg, 100.0 * cnt[3] / njpeg, 100.0 * frac / njpeg);
}

/* ---- loaderd ---- */

struct daemon {
	pid_t pid;                /* 0 when not running */
	char dir[PATH_MAX / 2];   /* private temporary directory, "" when none */
	char sock[PATH_MAX];
	char log[PATH_MAX];
};

static void show_log(const struct daemon *dm)
{
	char line[1024];
	FILE *f = dm->log[0] ? fopen(dm->log, "r") : NULL;

	if (!f)
		return;
	fprintf(stderr, "ldbench: loaderd's log (%s):\n", dm->log);
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "  %s", line);
	fclose(f);
}

static int find_loaderd(const struct opts *o, char *path, size_t cap)
{
	char self[PATH_MAX];

	if (o->loaderd) {
		snprintf(path, cap, "%s", o->loaderd);
	} else {
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n < 0) {
			LOG_ERROR("/proc/self/exe: %s; give --loaderd PATH", strerror(errno));
			return -errno;
		}
		self[n] = '\0';
		snprintf(path, cap, "%s/loaderd", dirname(self));
	}
	if (access(path, X_OK) < 0) {
		int err = errno;
		LOG_ERROR("loaderd %s: %s%s", path, strerror(err), o->loaderd ? "" :
			  " (build it, or give --loaderd PATH)");
		return -err;
	}
	return 0;
}

/* Start loaderd and connect to it. 0 with *out connected, or -errno after logging why. */
static int daemon_start(struct daemon *dm, const struct opts *o, const char *exe, struct ldc **out)
{
	const char *tmp = getenv("TMPDIR");
	char workers[16], tasks[16], err[512];
	pid_t parent = getpid();

	int len = snprintf(dm->dir, sizeof(dm->dir), "%s/ldbench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (len < 0 || (size_t)len >= sizeof(dm->dir)) {
		LOG_ERROR("TMPDIR %s is too long", tmp);
		dm->dir[0] = '\0';
		return -ENAMETOOLONG;
	}
	if (!mkdtemp(dm->dir)) {
		int e = errno;
		LOG_ERROR("mkdtemp %s: %s", dm->dir, strerror(e));
		dm->dir[0] = '\0';
		return -e;
	}
	snprintf(dm->sock, sizeof(dm->sock), "%s/s.sock", dm->dir);
	snprintf(dm->log, sizeof(dm->log), "%s/loaderd.log", dm->dir);
	int logfd = open(dm->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (logfd < 0 || nullfd < 0) {
		int e = errno;
		LOG_ERROR("%s: %s", dm->log, strerror(e));
		if (logfd >= 0)
			close(logfd);
		if (nullfd >= 0)
			close(nullfd);
		return -e;
	}
	/* loaderd writes one line on the pipe (its fd 3) once it serves: --ready-fd. */
	int ready[2];
	if (pipe2(ready, O_CLOEXEC) < 0) {
		int e = errno;
		LOG_ERROR("pipe: %s", strerror(e));
		close(logfd);
		close(nullfd);
		return -e;
	}
	snprintf(workers, sizeof(workers), "%u", o->workers);
	snprintf(tasks, sizeof(tasks), "%u", o->task_samples);
	const char *argv[] = { exe, "--socket", dm->sock, "--workers", workers, "--ready-fd", "3",
			       "--task-samples", tasks, o->io ? "--io" : NULL, o->io, NULL };
	if (!o->task_samples) {  /* loaderd's default: leave the option out */
		argv[7] = o->io ? "--io" : NULL;
		argv[8] = o->io;
		argv[9] = NULL;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		LOG_ERROR("fork: %s", strerror(e));
		close(logfd);
		close(nullfd);
		close(ready[0]);
		close(ready[1]);
		return -e;
	}
	if (pid == 0) {
		/* Own process group: a terminal's Ctrl-C reaches ldbench, which stops us in order. */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
		dup2(nullfd, STDIN_FILENO);
		dup2(logfd, STDOUT_FILENO);
		dup2(logfd, STDERR_FILENO);
		/* dup2 clears close-on-exec; a pipe end that is fd 3 already keeps it unless told. */
		if (ready[1] == 3)
			fcntl(3, F_SETFD, 0);
		else
			dup2(ready[1], 3);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		execv(exe, (char *const *)argv);
		dprintf(STDERR_FILENO, "ldbench: exec %s: %s\n", exe, strerror(errno));
		_exit(127);
	}
	dm->pid = pid;
	close(logfd);
	close(nullfd);
	close(ready[1]);

	/* Wait for the ready line; a daemon that exits meanwhile closes the pipe: EOF at once. */
	char line[PATH_MAX + 64];
	int ret;
	while ((ret = proc_wait_ready(ready[0], START_TIMEOUT_MS, line, sizeof(line))) == -EINTR &&
	       !g_stop)
		;
	close(ready[0]);
	if (ret == -ECHILD) {
		int status;
		if (waitpid(pid, &status, 0) == pid) {
			dm->pid = 0;
			LOG_ERROR("loaderd exited before serving (%s %d)", WIFEXITED(status) ?
				  "status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) :
				  WTERMSIG(status));
		} else {
			LOG_ERROR("loaderd closed its --ready-fd without saying it serves");
		}
		return -ECHILD;
	}
	if (ret < 0) {
		LOG_ERROR("%s", g_stop ? "interrupted while waiting for loaderd" :
			  ret == -ETIMEDOUT ? "loaderd did not serve within 10 s" : strerror(-ret));
		return ret;
	}
	ret = ldc_connect(dm->sock, out, err, sizeof(err));
	if (ret < 0)
		LOG_ERROR("%s", err);
	return ret;
}

/* SIGTERM, wait up to 5 s, then SIGKILL; remove the temporary directory unless @keep_log (then
 * only the socket goes, and the caller shows and removes the log). Returns
 * loaderd's exit status (0 clean), or -1 when it had to be killed or was already gone. */
static int daemon_stop(struct daemon *dm, int keep_log)
{
	int rc = -1, status;

	if (dm->pid > 0) {
		kill(dm->pid, SIGTERM);
		uint64_t deadline = clk_now_ns() + (uint64_t)STOP_TIMEOUT_MS * 1000000u;
		pid_t w;
		while ((w = waitpid(dm->pid, &status, WNOHANG)) == 0 && clk_now_ns() < deadline)
			usleep(10000);
		if (w == 0) {
			LOG_WARN("loaderd (pid %d) did not stop within %d s of SIGTERM; killing it",
				 (int)dm->pid, STOP_TIMEOUT_MS / 1000);
			kill(dm->pid, SIGKILL);
			while (waitpid(dm->pid, &status, 0) < 0 && errno == EINTR)
				;
		} else if (w == dm->pid && WIFEXITED(status)) {
			rc = WEXITSTATUS(status);
		}
		dm->pid = 0;
	}
	if (dm->dir[0]) {
		unlink(dm->sock);   /* loaderd removes it; not after SIGKILL */
		if (!keep_log) {
			unlink(dm->log);
			rmdir(dm->dir);
			dm->dir[0] = '\0';
		}
	}
	return rc;
}

/* The next batch; waits in short slices so that a signal to ldbench is seen. Adds the time spent
 * waiting to *wait_ns. 0 or -errno. */
static int take(struct ldc *c, struct ldc_batch *b, uint64_t *wait_ns)
{
	uint64_t t0 = clk_now_ns();
	int waited = 0, ret;

	while ((ret = ldc_acquire(c, 200, b)) == -ETIMEDOUT) {
		waited += 200;
		if (g_stop)
			return -EINTR;
		if (waited >= BATCH_TIMEOUT_MS) {
			LOG_ERROR("no batch from loaderd for %d s", BATCH_TIMEOUT_MS / 1000);
			return ret;
		}
	}
	*wait_ns += clk_now_ns() - t0;
	if (ret < 0)
		LOG_ERROR("%s", ldc_error(c));
	return ret;
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* What one loaderd run measured, for the last line. */
struct result {
	double rate;              /* samples/s, wall clock */
	double per_cpu_s;         /* samples per CPU-second of loaderd (0: unknown) */
	double latency_ms;        /* mean per-batch latency: first task taken to publish */
};

static int bench_loaderd(const struct opts *o, const char *exe, const struct ceiling *ce,
			 struct result *res)
{
	struct daemon dm = { 0 };
	struct ldc *c = NULL;
	struct ldc_info info;
	struct ldc_batch b;
	struct ctl_stats s0, s1;
	char dpath[PATH_MAX];
	int ret;

	if (!realpath(o->dataset, dpath)) {
		ret = -errno;
		LOG_ERROR("%s: %s", o->dataset, strerror(-ret));
		return ret;
	}
	ret = daemon_start(&dm, o, exe, &c);
	if (ret < 0)
		goto fail;
	struct ldc_job job = {
		.job = "ldbench", .dataset = dpath, .batch = o->batch, .crop_h = o->crop_h,
		.crop_w = o->crop_w, .transforms = CTL_TF_RANDOM_RESIZED_CROP | CTL_TF_HFLIP,
		.seed = SEED, .rank = 0, .world = 1, .sampling = CTL_SAMPLE_SHUFFLE,
		.tail = CTL_TAIL_PAD, .on_bad = CTL_BAD_SUBSTITUTE, .epochs = 0, .slots = o->slots,
	};
	ret = ldc_open(c, &job, &info);
	if (ret < 0) {
		LOG_ERROR("%s", ldc_error(c));
		goto fail;
	}
	printf("ldbench: loaderd %s (pid %d): %u workers%s%s, task samples %u (0: default); job: "
	       "batch %u, RandomResizedCrop %ux%u + flip, shuffle, unbounded epochs, ring %u slots of "
	       "%.1f MiB\n", exe, (int)dm.pid, o->workers, o->io ? ", io " : "", o->io ? o->io : "",
	       o->task_samples, o->batch,
	       o->crop_h, o->crop_w, info.ring->slots, (double)info.ring->slot_size / (1 << 20));

	/* Warm-up, excluded: workers start, page cache, ring fills once. */
	uint64_t t0 = clk_now_ns(), wsteps = 0, wsamples = 0, wait_ns = 0;
	while (((double)(clk_now_ns() - t0) * 1e-9 < o->warmup || wsteps < 2) && !g_stop) {
		if ((ret = take(c, &b, &wait_ns)) < 0)
			goto fail;
		wsteps++;
		wsamples += b.count;
		ldc_release(c, &b);
	}
	if ((ret = ldc_stats(c, &s0)) < 0) {
		LOG_ERROR("%s", ldc_error(c));
		goto fail;
	}
	double cpu0 = proc_cpu_seconds(dm.pid);
	uint64_t t1 = clk_now_ns(), t2, steps = 0, samples = 0;
	wait_ns = 0;
	do {
		if ((ret = take(c, &b, &wait_ns)) < 0)
			goto fail;
		steps++;
		samples += b.count;
		ldc_release(c, &b);
		t2 = clk_now_ns();
	} while ((double)(t2 - t1) * 1e-9 < o->seconds && !g_stop);
	if (g_stop) {
		ret = -EINTR;
		LOG_ERROR("interrupted");
		goto fail;
	}
	double cpu1 = proc_cpu_seconds(dm.pid);
	if ((ret = ldc_stats(c, &s1)) < 0) {
		LOG_ERROR("%s", ldc_error(c));
		goto fail;
	}
	double dt = (double)(t2 - t1) * 1e-9;
	res->rate = (double)samples / dt;
	printf("ldbench: warm-up %.1f s, %" PRIu64 " steps, %" PRIu64 " samples (excluded)\n",
	       (double)(t1 - t0) * 1e-9, wsteps, wsamples);
	printf("ldbench: drained %" PRIu64 " steps, %" PRIu64 " samples in %.2f s: %.1f samples/s, "
	       "%.1f steps/s (crop-aware decode to %ux%u)\n", steps, samples, dt, res->rate,
	       (double)steps / dt, o->crop_h, o->crop_w);
	uint64_t fill = s1.fill_ns - s0.fill_ns, pub = s1.published - s0.published;
	uint64_t io = s1.phase_ns[LDR_PHASE_IO] - s0.phase_ns[LDR_PHASE_IO];
	uint64_t dec = s1.phase_ns[LDR_PHASE_DECODE] - s0.phase_ns[LDR_PHASE_DECODE];
	uint64_t other = fill > io + dec ? fill - io - dec : 0;
	printf("ldbench: loaderd stats over the window: %" PRIu64 " steps filled, %.2f ms per step "
	       "(%.1f us per sample); of fill time: io %.1f%%, decode %.1f%%, other %.1f%%; "
	       "workers busy %.0f%% of %u x %.2f s\n", pub, pub ? (double)fill / pub * 1e-6 : 0.0,
	       pub ? (double)fill / pub / o->batch * 1e-3 : 0.0, pct(io, fill), pct(dec, fill),
	       pct(other, fill), pct(fill, (uint64_t)(dt * 1e9) * o->workers), o->workers, dt);
	uint64_t lat = s1.latency_ns - s0.latency_ns;
	res->latency_ms = pub ? (double)lat / pub * 1e-6 : 0.0;
	printf("ldbench: per-batch latency (first decode of a step to its publish): mean %.2f ms "
	       "over %" PRIu64 " steps of %u samples (fill time per step %.2f ms)\n", res->latency_ms,
	       pub, o->batch, pub ? (double)fill / pub * 1e-6 : 0.0);
	printf("ldbench: this consumer waited for a batch %.0f%% of the window (%s); bad records %"
	       PRIu64 "\n", pct(wait_ns, t2 - t1), wait_ns * 2 >= t2 - t1 ?
	       "loaderd is the limit" : "the consumer is the limit", s1.bad_records);
	if (cpu0 >= 0 && cpu1 > cpu0 && ce->per_cpu_s > 0) {
		double spc = (double)samples / (cpu1 - cpu0);
		res->per_cpu_s = spc;
		printf("ldbench: per CPU-second (whatever else runs on the host): loaderd %.1f samples "
		       "using %.2f CPU-s (%.0f%% of %u cores' time), full decode %.1f/CPU-s: ratio %.2f\n",
		       spc, cpu1 - cpu0, 100.0 * (cpu1 - cpu0) / dt / o->workers, o->workers,
		       ce->per_cpu_s, spc / ce->per_cpu_s);
	}
	ldc_close(c);
	c = NULL;
	int rc = daemon_stop(&dm, 0);
	if (rc != 0)
		LOG_WARN("loaderd did not exit cleanly (%s)", rc < 0 ? "killed" : "non-zero status");
	return 0;
fail:
	ldc_close(c);
	if (dm.pid > 0 || dm.dir[0]) {
		daemon_stop(&dm, 1);
		if (!g_stop)
			show_log(&dm);
		if (dm.dir[0]) {
			unlink(dm.log);
			rmdir(dm.dir);
		}
	}
	return ret < 0 ? ret : -EIO;
}

int main(int argc, char **argv)
{
	enum { O_DATASET = 256, O_WORKERS, O_BATCH, O_CROP, O_SECONDS, O_WARMUP, O_CREC, O_CSEC,
	       O_LOADERD, O_IO, O_SLOTS, O_TASKS };
	static const struct option lopts[] = {
		{ "dataset", required_argument, NULL, O_DATASET },
		{ "workers", required_argument, NULL, O_WORKERS },
		{ "batch", required_argument, NULL, O_BATCH },
		{ "slots", required_argument, NULL, O_SLOTS },
		{ "task-samples", required_argument, NULL, O_TASKS },
		{ "crop", required_argument, NULL, O_CROP },
		{ "seconds", required_argument, NULL, O_SECONDS },
		{ "warmup", required_argument, NULL, O_WARMUP },
		{ "ceiling-records", required_argument, NULL, O_CREC },
		{ "ceiling-seconds", required_argument, NULL, O_CSEC },
		{ "loaderd", required_argument, NULL, O_LOADERD },
		{ "io", required_argument, NULL, O_IO },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = {
		.workers = proc_cpu_count(), .batch = 64, .crop_h = 224, .crop_w = 224,
		.seconds = 10, .warmup = 1, .ceil_records = 200, .ceil_seconds = 3,
	};
	char exe[PATH_MAX], err[512];
	int c;

	log_prog = "ldbench";
	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case O_DATASET: o.dataset = optarg; break;
		case O_WORKERS: bad = arg_uint(optarg, 1, 1024, &o.workers); break;
		case O_BATCH: bad = arg_uint(optarg, 1, RING_BATCH_MAX, &o.batch); break;
		case O_SLOTS: bad = arg_uint(optarg, 2, RING_SLOTS_MAX, &o.slots); break;
		case O_TASKS: bad = arg_uint(optarg, 1, RING_BATCH_MAX, &o.task_samples); break;
		case O_CROP: bad = arg_size2(optarg, CTL_CROP_MAX, &o.crop_h, &o.crop_w) < 0 || o.crop_h == 0; break;
		case O_SECONDS: bad = arg_double(optarg, 0.1, 86400, &o.seconds); break;
		case O_WARMUP: bad = arg_double(optarg, 0, 86400, &o.warmup); break;
		case O_CREC: bad = arg_uint(optarg, 1, 100000, &o.ceil_records); break;
		case O_CSEC: bad = arg_double(optarg, 0.1, 86400, &o.ceil_seconds); break;
		case O_LOADERD: o.loaderd = optarg; break;
		case O_IO:
			o.io = optarg;
			bad = strcmp(optarg, "auto") && strcmp(optarg, "direct") &&
			      strcmp(optarg, "buffered") && strcmp(optarg, "pread");
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			fprintf(stderr, "ldbench: see --help\n");
			return EXIT_USAGE;
		}
		if (bad)
			return arg_bad_value(lopts, c, optarg);
	}
	if (optind < argc) {
		fprintf(stderr, "ldbench: unexpected argument '%s' (see --help)\n", argv[optind]);
		return EXIT_USAGE;
	}
	if (!o.dataset) {
		fprintf(stderr, "ldbench: --dataset is required (see --help)\n");
		return EXIT_USAGE;
	}
	proc_on_stop_signals(on_signal, PROC_SIG_HUP);
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (find_loaderd(&o, exe, sizeof(exe)) < 0)
		return 1;
	struct dpk *d;
	if (dpk_open(o.dataset, 0, &d, err, sizeof(err)) < 0) {
		LOG_ERROR("dataset %s: %s", o.dataset, err);
		return 1;
	}
	if (dpk_shard_path(d, 0)) {  /* its ceiling walks one file's index */
		LOG_ERROR("dataset %s is a set of shards: give ldbench one of its .dpk files", o.dataset);
		dpk_close(d);
		return 1;
	}
	printf("ldbench: dataset %s: %" PRIu64 " samples\n", o.dataset, dpk_count(d));

	struct ceiling ce;
	if (measure_ceiling(d, &o, &ce) < 0) {
		dpk_close(d);
		return 1;
	}
	double ceiling = ce.per_s * o.workers;
	printf("ldbench: full-size decode (tjDecompress2, RGB) on one core, measured before loaderd "
	       "starts: %u records, mean %.0fx%.0f px, %" PRIu64 " decodes in %.2f s = %.1f/s "
	       "(%.1f Mpx/s)\n", ce.records, ce.mean_w, ce.mean_h, ce.decodes, ce.seconds, ce.per_s,
	       ce.mpix_per_s);
	printf("ldbench: full-decode ceiling = %.1f/s x %u workers = %.1f samples/s\n", ce.per_s,
	       o.workers, ceiling);
	if (ce.cpu_seconds < 0.9 * ce.seconds)
		LOG_WARN("the decode loop got %.0f%% of a core: the host is busy, and wall-clock rates "
			 "(the ceiling and loaderd's) are low and noisy; see the per-CPU-second line",
			 100.0 * ce.cpu_seconds / ce.seconds);
	crop_profile(d, &o);
	dpk_close(d);
	if (g_stop) {
		LOG_ERROR("interrupted");
		return 1;
	}

	struct result res = { 0 };
	if (bench_loaderd(&o, exe, &ce, &res) < 0)
		return 1;
	if (g_stop) {
		LOG_ERROR("interrupted");
		return 1;
	}
	printf("ldbench: samples_per_s=%.1f ceiling_per_s=%.1f ratio=%.2f samples_per_cpu_s=%.1f "
	       "latency_ms=%.2f\n", res.rate, ceiling, ceiling > 0 ? res.rate / ceiling : 0.0,
	       res.per_cpu_s, res.latency_ms);
	return 0;
}
