/* main.c - loaderd: one per node. Serves jobs over a unix socket; each rank of a job gets its own
 * ring of decoded batches. Stays in the foreground and logs to stderr. */
#include "common/args.h"
#include "common/fdio.h"
#include "common/log.h"
#include "common/proc.h"
#include "loader/job.h"
#include "loader/metrics.h"
#include "loader/sdnotify.h"
#include "shm/ldc.h"
#include "loader/srv.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static struct srv *g_srv;

static void on_signal(int sig)
{
	(void)sig;
	if (g_srv)
		srv_stop(g_srv);  /* async-signal-safe: one eventfd write */
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: loaderd [options]\n"
"\n"
"Serves training jobs from packed datasets (.dpk, made by dpack) over a unix socket. Each rank\n"
"of a job attaches with the client API (shm/ldc.h) and gets its own shared-memory ring.\n"
"Runs in the foreground, logs to stderr; SIGTERM or SIGINT stops it (clients are told).\n"
"Under a service manager that sets $NOTIFY_SOCKET (systemd, Type=notify), loaderd sends it\n"
"READY=1 once serving and STOPPING=1 when it stops.\n"
"\n"
"options:\n"
"  --socket PATH        control socket (default: $XDG_RUNTIME_DIR/loaderd.sock, else\n"
"                       /tmp/loaderd-UID.sock); mode 0600 unless --group is given\n"
"  --workers N          decode threads (default: all cores, here %u)\n"
"  --mem-limit BYTES    memory jobs make loaderd hold: rings, rank tables, indexes, worker\n"
"                       buffers for large records; suffix K, M, G (default: half of RAM)\n"
"  --slots N            ring depth when a client does not ask (default 4)\n"
"  --task-samples N     samples per task: a batch is cut into tasks that any worker fills\n"
"                       (default: batch / (4 x workers), within 4..8)\n"
"  --io MODE            auto (io_uring, O_DIRECT where the file system allows; default),\n"
"                       buffered (io_uring through the page cache), pread (no io_uring)\n"
"  --group NAME         let members of this group connect too (socket mode 0660)\n"
"  --linger SECONDS     keep a job with no rank attached this long (default 60)\n"
"  --balance            allow jobs to ask for balanced shares: each global step's samples\n"
"                       split across ranks by their reported speed (docs/RING.md); a job's\n"
"                       rings then hold up to twice its batch per slot\n"
"\n"
"limits (a client past one is refused with a message naming the option; docs/TUNING.md):\n"
"  --max-conns N        connections at once, all users (default 1024)\n"
"  --max-conns-per-uid N  connections at once per user (default 256)\n"
"  --max-jobs-per-uid N jobs per user (default 64)\n"
"  --max-world N        ranks per job (default and most 65536)\n"
"  --mem-share PERCENT  share of --mem-limit one user's rings may take (default 100)\n"
"  --idle-timeout SECONDS  close a connection that opens no job this long (default 10)\n"
"  --admin-share PERCENT  of the control thread's time one user's loaderctl answers may\n"
"                       take (default 2); past it, every request is refused for a while\n"
"  --max-record BYTES   stored bytes per record, suffix K, M, G (default 64M); a dataset\n"
"                       with a larger record is refused at job open, naming the sample\n"
"  --max-pixels N       pixels per record (height x width), suffix K, M (default 64M);\n"
"                       larger records are refused at job open or substituted as bad\n"
"  --metrics-file PATH  write the counters there in Prometheus text format, rewritten whole\n"
"                       (temporary file, rename) every interval and once at shutdown: for\n"
"                       node_exporter's textfile collector, e.g.\n"
"                       /var/lib/prometheus/node-exporter/loaderd.prom\n"
"  --metrics-interval SECONDS  how often (default 5; decimals allowed, at least 0.1)\n"
"  --log-level LEVEL    error, warn, info (default) or debug\n"
"  --ready-fd N         once serving (socket listening, workers started), write the line\n"
"                       \"READY socket=PATH pid=PID\" to file descriptor N and close it, for\n"
"                       whoever started loaderd to wait on (a pipe; systemd-notify style)\n"
"  --help               this text\n"
"Exit status: 0 stopped by a signal, 1 runtime error, 2 bad usage.\n",
		proc_cpu_count());
}

/* --ready-fd: one line, then close, so that a reader sees the line and then EOF. A reader that
 * went away (EPIPE: SIGPIPE is ignored) is worth a warning, not a stop. */
static void notify_ready(int fd, const char *socket_path)
{
	char line[PATH_MAX + 64];
	int n = snprintf(line, sizeof(line), "READY socket=%s pid=%d\n", socket_path, (int)getpid());
	int ret = fd_write_all(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);

	if (ret < 0)
		LOG_WARN("--ready-fd %d: %s", fd, strerror(-ret));
	close(fd);
}

/* One loaderd serves every client of the node, each with a socket, a ring memfd and a doorbell:
 * take all the descriptors the hard limit allows (the soft default, 1024, is a few hundred
 * ranks). */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			LOG_WARN("cannot raise the open file limit to %llu: %s",
				 (unsigned long long)rl.rlim_max, strerror(errno));
	}
}

static void notice(void *ctx, int level, const char *msg)
{
	(void)ctx;
	LOG_AT(level, "%s", msg);
}

static const struct option long_opts[] = {
	{ "socket", required_argument, NULL, 's' },
	{ "workers", required_argument, NULL, 'w' },
	{ "mem-limit", required_argument, NULL, 'm' },
	{ "slots", required_argument, NULL, 'n' },
	{ "task-samples", required_argument, NULL, 't' },
	{ "io", required_argument, NULL, 'i' },
	{ "group", required_argument, NULL, 'g' },
	{ "linger", required_argument, NULL, 'L' },
	{ "log-level", required_argument, NULL, 'l' },
	{ "max-conns", required_argument, NULL, 'C' },
	{ "max-conns-per-uid", required_argument, NULL, 'U' },
	{ "max-jobs-per-uid", required_argument, NULL, 'J' },
	{ "max-world", required_argument, NULL, 'W' },
	{ "mem-share", required_argument, NULL, 'S' },
	{ "idle-timeout", required_argument, NULL, 'T' },
	{ "max-pixels", required_argument, NULL, 'P' },
	{ "max-record", required_argument, NULL, 'R' },
	{ "admin-share", required_argument, NULL, 'A' },
	{ "metrics-file", required_argument, NULL, 'M' },
	{ "metrics-interval", required_argument, NULL, 'N' },
	{ "ready-fd", required_argument, NULL, 'r' },
	{ "balance", no_argument, NULL, 'B' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Everything the command line decides. so.socket_path points into path: not to be copied. */
struct opts {
	struct srv_opts so;
	struct ldr_config cfg;
	char path[PATH_MAX];
	const char *metrics_path;  /* NULL: no metrics file */
	double metrics_s;          /* metrics interval, seconds */
	unsigned ready_fd;
	int have_ready;            /* --ready-fd given */
};

/* Fill *o from the defaults and the command line. Returns -1 to go on serving, or the exit
 * status to end with (0 after --help, 2 for bad usage; the message is printed). */
static int parse_args(int argc, char **argv, struct opts *o)
{
	unsigned linger = 60, idle = 10;
	int c, lvl;

	*o = (struct opts){ .so.group = (gid_t)-1, .cfg.io = LDR_IO_AUTO, .metrics_s = 5 };
	o->so.workers = proc_cpu_count();
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	o->so.mem_limit = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize / 2 : 0;
	ldc_default_socket(o->path, sizeof(o->path));
	o->so.socket_path = o->path;

	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		switch (c) {
		case 'B':
			o->so.balance = 1;
			break;
		case 's':
			snprintf(o->path, sizeof(o->path), "%s", optarg);
			break;
		case 'w':
			if (arg_uint(optarg, 1, 1024, &o->so.workers) < 0)
				goto bad_value;
			break;
		case 'm':
			if (arg_bytes(optarg, 1, UINT64_MAX, &o->so.mem_limit) < 0)
				goto bad_value;
			break;
		case 'n':
			if (arg_uint(optarg, 2, RING_SLOTS_MAX, &o->so.default_slots) < 0)
				goto bad_value;
			break;
		case 't':
			if (arg_uint(optarg, 1, RING_BATCH_MAX, &o->so.task_samples) < 0)
				goto bad_value;
			break;
		case 'i':
			if (!strcmp(optarg, "auto"))
				o->cfg.io = LDR_IO_AUTO;
			else if (!strcmp(optarg, "buffered"))
				o->cfg.io = LDR_IO_BUFFERED;
			else if (!strcmp(optarg, "pread"))
				o->cfg.io = LDR_IO_PREAD;
			else
				goto bad_value;
			break;
		case 'g': {
			struct group *g = getgrnam(optarg);
			if (!g) {
				fprintf(stderr, "loaderd: --group %s: no such group\n", optarg);
				return 2;
			}
			o->so.group = g->gr_gid;
			break;
		}
		case 'L':
			if (arg_uint(optarg, 1, 86400 * 7, &linger) < 0)
				goto bad_value;
			break;
		case 'C':
			if (arg_uint(optarg, 1, 1u << 20, &o->so.max_conns) < 0)
				goto bad_value;
			break;
		case 'U':
			if (arg_uint(optarg, 1, 1u << 20, &o->so.max_conns_uid) < 0)
				goto bad_value;
			break;
		case 'J':
			if (arg_uint(optarg, 1, 1u << 20, &o->so.max_jobs_uid) < 0)
				goto bad_value;
			break;
		case 'W':
			if (arg_uint(optarg, 1, CTL_WORLD_MAX, &o->so.max_world) < 0)
				goto bad_value;
			break;
		case 'S':
			if (arg_uint(optarg, 1, 100, &o->so.mem_share_uid) < 0)
				goto bad_value;
			break;
		case 'T':
			if (arg_uint(optarg, 1, 86400, &idle) < 0)
				goto bad_value;
			break;
		case 'A':
			if (arg_uint(optarg, 1, 100, &o->so.admin_share) < 0)
				goto bad_value;
			break;
		case 'P':
			if (arg_bytes(optarg, 1, 1ull << 40, &o->cfg.max_pixels) < 0)
				goto bad_value;
			break;
		case 'R':
			if (arg_bytes(optarg, 1, DPK_RECORD_MAX, &o->cfg.max_record) < 0)
				goto bad_value;
			break;
		case 'M':
			if (!*optarg)
				goto bad_value;
			o->metrics_path = optarg;
			break;
		case 'N':
			if (arg_double(optarg, 0.1, 86400, &o->metrics_s) < 0)
				goto bad_value;
			break;
		case 'l':
			lvl = log_level_parse(optarg);
			if (lvl < 0)
				goto bad_value;
			log_level = lvl;
			break;
		case 'r':
			if (arg_uint(optarg, 0, INT_MAX, &o->ready_fd) < 0 ||
			    fcntl((int)o->ready_fd, F_GETFD) < 0)
				goto bad_value;
			/* Not inherited by anything we might start; closed once written. */
			(void)fcntl((int)o->ready_fd, F_SETFD, FD_CLOEXEC);
			o->have_ready = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		continue;
bad_value:
		return arg_bad_value(long_opts, c, optarg);
	}
	if (optind < argc) {
		fprintf(stderr, "loaderd: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	o->cfg.workers = o->so.workers;
	o->so.linger_ms = (int)(linger * 1000u);
	o->so.idle_ms = (int)(idle * 1000u);
	return -1;
}

/* Create the server, start the metrics thread, tell whoever waits that loaderd serves, run until
 * a stop signal, and tear down. Returns the exit status: 0 stopped by a signal, 1 runtime error. */
static int serve(const struct opts *o)
{
	struct ldr_metrics *metrics = NULL;
	struct srv_ops ops;
	char why[512];
	int ret, sd;

	ldr_job_ops(&o->cfg, &ops);
	ops.notice = notice;
	ret = srv_create(&o->so, &ops, &g_srv, why, sizeof(why));
	if (ret < 0) {
		LOG_ERROR("cannot start: %s", why);
		return 1;
	}
	proc_on_stop_signals(on_signal, 0);
	LOG_INFO("serving on %s: %u workers, io %s, ring memory limit %llu MiB", o->path,
		 o->so.workers, o->cfg.io == LDR_IO_PREAD ? "pread" :
		 o->cfg.io == LDR_IO_BUFFERED ? "io_uring (buffered)" :
		 "io_uring (O_DIRECT where possible)", (unsigned long long)(o->so.mem_limit >> 20));
	if (o->metrics_path) {
		ret = ldr_metrics_start(g_srv, o->metrics_path, (unsigned)(o->metrics_s * 1000 + 0.5),
					&metrics);
		if (ret < 0) {
			LOG_ERROR("cannot start the metrics thread: %s", strerror(-ret));
			goto fail_metrics;
		}
		LOG_INFO("metrics: %s every %.1f s", o->metrics_path, o->metrics_s);
	}
	/* The service manager first, so that whoever waits on --ready-fd finds its outcome logged. */
	sd = ldr_sd_notify("READY=1");
	if (sd < 0)
		LOG_WARN("NOTIFY_SOCKET=%s: cannot tell the service manager that loaderd serves: %s",
			 getenv("NOTIFY_SOCKET"), strerror(-sd));
	if (o->have_ready)
		notify_ready((int)o->ready_fd, o->path);
	ret = srv_run(g_srv);
	if (sd > 0)
		ldr_sd_notify("STOPPING=1");
	ldr_metrics_stop(metrics);  /* the final counters, while the server still exists */
	srv_destroy(g_srv);
	if (ret < 0) {
		LOG_ERROR("control loop: %s", strerror(-ret));
		return 1;
	}
	LOG_INFO("stopped");
	return 0;
fail_metrics:
	srv_destroy(g_srv);
	return 1;
}

int main(int argc, char **argv)
{
	struct opts o;
	int ret;

	log_prog = "loaderd";
	ret = parse_args(argc, argv, &o);
	if (ret >= 0)
		return ret;
	raise_nofile();
	return serve(&o);
}
