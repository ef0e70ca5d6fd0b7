/* main.c - loaderd: one per node. Serves jobs over a unix socket; each rank of a job gets its own
 * ring of decoded batches. Stays in the foreground and logs to stderr. */
#include "common/args.h"
#include "common/fdio.h"
#include "common/log.h"
#include "common/proc.h"
#include "loader/job.h"
#include "loader/metrics.h"
#include "loader/sdnotify.h"
#include "shm/ctl.h"
#include "shm/ldc.h"
#include "loader/srv.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static struct srv *g_srv;

static void on_signal(int sig)
{
	(void)sig;
	if (g_srv)
		srv_stop(g_srv);  /* async-signal-safe: one eventfd write */
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

/* Everything the command line decides: the targets of the option table below. */
struct opts {
	struct srv_opts so;        /* so.socket_path: set from socket after parsing */
	struct ldr_config cfg;     /* cfg.io, cfg.workers: set from io, so.workers after parsing */
	char path[PATH_MAX];       /* the default socket path; not to be copied (socket may point
				    * here) */
	const char *socket;        /* --socket */
	const char *cache_dir;     /* --cache-dir: the node cache of s3:// datasets; NULL: none */
	uint64_t cache_size;       /* --cache-size (0: a quarter of the free space at start) */
	uint64_t cache_uid;        /* --cache-size-per-uid (0: half of cache_size) */
	int io;                    /* --io: index in io_names, the same as enum ldr_io */
	unsigned linger_s, idle_s; /* --linger, --idle-timeout: seconds */
	const char *metrics_path;  /* NULL: no metrics file */
	double metrics_s;          /* metrics interval, seconds */
	int log_level;             /* --log-level */
	int ready_fd;              /* --ready-fd; -1: none */
};

static const char *const io_names[] = { "auto", "buffered", "pread", "direct", NULL };
static const char *const evict_names[] = { "future", "lru", NULL };  /* enum srv_evict */
_Static_assert(LDR_IO_AUTO == 0 && LDR_IO_BUFFERED == 1 && LDR_IO_PREAD == 2 &&
	       LDR_IO_DIRECT == 3,
	       "io_names is indexed by enum ldr_io");
/* Defaults spelled in the table that the code below the daemon also knows. */
_Static_assert(CTL_WORLD_MAX == 65536, "--max-world's default in the table");
_Static_assert(LDR_MAX_RECORD_DEFAULT == 64ull << 20, "--max-record's default in the table");
_Static_assert(LDR_MAX_PIXELS_DEFAULT == 64ull << 20, "--max-pixels's default in the table");

static int parse_group(const char *s, void *target)
{
	struct group *g = getgrnam(s);

	if (!g)
		return -EINVAL;
	*(gid_t *)target = g->gr_gid;
	return 0;
}

static int parse_level(const char *s, void *target)
{
	int lvl = log_level_parse(s);

	if (lvl < 0)
		return -EINVAL;
	*(int *)target = lvl;
	return 0;
}

static int parse_ready_fd(const char *s, void *target)
{
	unsigned fd;

	if (arg_uint(s, 0, INT_MAX, &fd) < 0 || fcntl((int)fd, F_GETFD) < 0)
		return -EINVAL;
	/* Not inherited by anything we might start; closed once written. */
	(void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	*(int *)target = (int)fd;
	return 0;
}

#define AT(field, type) ARG_AT(struct opts, field, type)

/* loaderd's options, in --help's order. A new option is one row here and, when it is a limit or
 * a tuning knob, one line in docs/TUNING.md (tests/it_options.sh checks both ways). */
static const struct arg_opt opt_rows[] = {
	{ .kind = ARG_HEADING, .help = "options:" },
	{ "socket", 0, ARG_PATH, AT(socket, const char *),
	  .def_doc = "$XDG_RUNTIME_DIR/loaderd.sock, else /tmp/loaderd-UID.sock",
	  .help = "control socket; mode 0600 unless --group or --all-users is given" },
	{ "workers", 0, ARG_UINT, AT(so.workers, unsigned), .lo = 1, .hi = 1024,
	  .def_doc = "all cores",
	  .help = "decode threads at most; how many decode at once follows what the consumers eat "
		  "(docs/TUNING.md)" },
	{ "cpu-budget", 0, ARG_DOUBLE, AT(so.cpu_budget, double), .dlo = 0.01, .dhi = 1024,
	  .meta = "CORES", .def_doc = "the cores of the affinity mask",
	  .help = "decode CPU of the whole daemon, all jobs, e.g. 1.5; when short, the rings about "
		  "to run dry first" },
	{ "balance", 0, ARG_FLAG, AT(so.balance, int), .def_doc = "off",
	  .help = "allow jobs to ask for balanced shares: each global step's samples split across "
		  "ranks by their reported speed (docs/RING.md); a job's rings then hold up to "
		  "twice its batch per slot" },
	{ "fixed-workers", 0, ARG_FLAG, AT(so.fixed_workers, int), .def_doc = "off",
	  .help = "no self-sizing: every worker decodes whenever a slot is free (the behaviour "
		  "before it, for comparisons)" },
	{ "mem-limit", 0, ARG_BYTES, AT(so.mem_limit, uint64_t), .lo = 1, .hi = UINT64_MAX,
	  .def_doc = "half of its memory (the cgroup's limit, else RAM)",
	  .help = "memory jobs make loaderd hold: rings, rank tables, indexes, worker buffers for "
		  "large records" },
	{ "slots", 0, ARG_UINT, AT(so.default_slots, unsigned), .lo = 2, .hi = RING_SLOTS_MAX,
	  .def = "4", .help = "ring depth when a client does not ask" },
	{ "task-samples", 0, ARG_UINT, AT(so.task_samples, unsigned), .lo = 1,
	  .hi = RING_BATCH_MAX, .def_doc = "batch / (4 x workers), within 4..8",
	  .help = "samples per task: a batch is cut into tasks that any worker fills" },
	{ "io", 0, ARG_ENUM, AT(io, int), .choices = io_names, .meta = "MODE", .def = "auto",
	  .help = "auto: per dataset, from memory when it is in the page cache, through the page "
		  "cache when it fits half the memory, else O_DIRECT (docs/TUNING.md); buffered: "
		  "io_uring through the page cache; pread: no io_uring; direct: io_uring, O_DIRECT "
		  "where the file system allows" },
	{ "group", 0, ARG_CUSTOM, AT(so.group, gid_t), .parse = parse_group, .meta = "NAME",
	  .allowed = "a group of this host", .def_doc = "none, owner only",
	  .help = "let members of this group connect too: socket mode 0660" },
	{ "all-users", 0, ARG_FLAG, AT(so.all_users, int), .def_doc = "off, owner only",
	  .help = "let every user of this host connect: socket mode 0666 (the system service's "
		  "way: each user is served only its own jobs, within its own limits)" },
	{ "linger", 0, ARG_UINT, AT(linger_s, unsigned), .lo = 1, .hi = 86400 * 7,
	  .meta = "SECONDS", .def = "60", .help = "keep a job with no rank attached this long" },

	{ .kind = ARG_HEADING,
	  .help = "limits (a client past one is refused with a message naming the option; "
		  "docs/TUNING.md):" },
	{ "max-conns", 0, ARG_UINT, AT(so.max_conns, unsigned), .lo = 1, .hi = 1u << 20,
	  .def = "1024", .help = "connections at once, all users" },
	{ "max-conns-per-uid", 0, ARG_UINT, AT(so.max_conns_uid, unsigned), .lo = 1,
	  .hi = 1u << 20, .def = "256", .help = "connections at once per user" },
	{ "max-jobs-per-uid", 0, ARG_UINT, AT(so.max_jobs_uid, unsigned), .lo = 1, .hi = 1u << 20,
	  .def = "64", .help = "jobs per user" },
	{ "max-fds", 0, ARG_UINT, AT(so.max_fds, unsigned), .lo = 16, .hi = 1u << 30,
	  .def_doc = "half of RLIMIT_NOFILE", .help = "descriptors all users' datasets may make "
	  "loaderd hold (a .dpk: 2 to 4; a set: about 2 per shard)" },
	{ "max-fds-per-uid", 0, ARG_UINT, AT(so.max_fds_uid, unsigned), .lo = 8, .hi = 1u << 30,
	  .def_doc = "an eighth of RLIMIT_NOFILE", .help = "of them, per user" },
	{ "max-world", 0, ARG_UINT, AT(so.max_world, unsigned), .lo = 1, .hi = CTL_WORLD_MAX,
	  .def = "65536", .help = "ranks per job" },
	{ "mem-share", 0, ARG_PERCENT, AT(so.mem_share_uid, unsigned), .lo = 1, .hi = 100,
	  .def = "100", .help = "share of --mem-limit that one user's jobs may make loaderd hold" },
	{ "idle-timeout", 0, ARG_UINT, AT(idle_s, unsigned), .lo = 1, .hi = 86400,
	  .meta = "SECONDS", .def = "10", .help = "close a connection that opens no job this long" },
	{ "admin-share", 0, ARG_PERCENT, AT(so.admin_share, unsigned), .lo = 1, .hi = 100,
	  .def = "2",
	  .help = "of the control thread's time, what one user's loaderctl answers may take; past "
		  "it, every request is refused for a while" },
	{ "max-record", 0, ARG_BYTES, AT(cfg.max_record, uint64_t), .lo = 1, .hi = DPK_RECORD_MAX,
	  .def = "64M",
	  .help = "bytes per record, stored or (a zstd tensor) decompressed: a dataset with a "
		  "larger record is refused at job open, naming the sample" },
	{ "max-pixels", 0, ARG_BYTES, AT(cfg.max_pixels, uint64_t), .lo = 1, .hi = 1ull << 40,
	  .meta = "N", .def = "64M",
	  .help = "pixels per record (height x width): larger records are refused at job open or "
		  "substituted as bad" },

	{ .kind = ARG_HEADING, .help = "the node cache of s3:// datasets (docs/S3.md):" },
	{ "cache-dir", 0, ARG_PATH, AT(cache_dir, const char *), .def_doc = "none: clients fetch "
	  "into their users' caches",
	  .help = "keep s3:// datasets here, whole shards, shared by every job of the node: "
		  "ldfetch (beside loaderd) fetches with each job's own credentials, and serves a uid "
		  "cached bytes only after the store accepted its own request. Made 0700; refused "
		  "when another user owns it or group or others may write it" },
	{ "cache-size", 0, ARG_BYTES, AT(cache_size, uint64_t), .lo = 1, .hi = UINT64_MAX,
	  .def_doc = "a quarter of the free space of its file system at start",
	  .help = "bytes the cache's objects may take, objects in use by running jobs included" },
	{ "cache-size-per-uid", 0, ARG_BYTES, AT(cache_uid, uint64_t), .lo = 1, .hi = UINT64_MAX,
	  .def_doc = "half of --cache-size",
	  .help = "of them, what one user's running jobs may hold" },
	{ "cache-stream", 0, ARG_FLAG, AT(so.cache_stream, int), .def_doc = "off: sets are fetched whole",
	  .help = "stream a set of shards through the cache instead of fetching it whole before "
		  "its job starts: steps are filled as their shards arrive, shards are fetched in the "
		  "order the jobs' samplers will read them and the farthest-needed are let go first, "
		  "so a set larger than the cache can be read (docs/STREAMING.md)" },
	{ "cache-evict", 0, ARG_ENUM, AT(so.cache_evict, int), .choices = evict_names,
	  .meta = "POLICY", .def = "future",
	  .help = "with --cache-stream: future: fetch ahead in the samplers' order and let go the "
		  "farthest-needed (Belady's policy over the known future); lru: fetch ahead the same "
		  "way and let go the least recently read, as a cache that does not know the future "
		  "does (for comparisons)" },
	{ "cache-endpoints", 0, ARG_PATH, AT(so.cache_endpoints, const char *), .meta = "LIST",
	  .def_doc = "AWS's own: https://s3.amazonaws.com, https://s3.REGION.amazonaws.com",
	  .help = "the stores the node cache fetches from, comma-separated, each "
		  "http(s)://HOST[:PORT] (MinIO, Ceph RGW, R2...): a client names its endpoint and "
		  "ldfetch has loaderd's network, so any other is left to the client, which fetches "
		  "into its user's cache with its own rights" },

	{ .kind = ARG_HEADING, .help = "watching it, starting it:" },
	{ "metrics-file", 0, ARG_PATH, AT(metrics_path, const char *), .def_doc = "none",
	  .help = "write the counters there in Prometheus text format, rewritten whole (temporary "
		  "file, rename) every interval and once at shutdown: for node_exporter's textfile "
		  "collector, e.g. /var/lib/prometheus/node-exporter/loaderd.prom" },
	{ "metrics-interval", 0, ARG_DOUBLE, AT(metrics_s, double), .dlo = 0.1, .dhi = 86400,
	  .meta = "SECONDS", .def = "5", .help = "how often, in seconds, decimals allowed" },
	{ "log-level", 0, ARG_CUSTOM, AT(log_level, int), .parse = parse_level, .meta = "LEVEL",
	  .allowed = "error, warn, info or debug, or 0..3", .def = "info",
	  .help = "what to log" },
	{ "ready-fd", 0, ARG_CUSTOM, AT(ready_fd, int), .parse = parse_ready_fd,
	  .allowed = "an open file descriptor", .def_doc = "none",
	  .help = "once serving (socket listening, workers started), write the line \"READY "
		  "socket=PATH pid=PID\" to file descriptor N and close it, for whoever started "
		  "loaderd to wait on (a pipe; systemd-notify style)" },
	{ "help", 'h', ARG_HELP, .help = "this text" },
};

static const struct arg_table opt_table = {
	.prog = "loaderd",
	.intro =
"usage: loaderd [options]\n"
"\n"
"Serves training jobs from packed datasets (.dpk, made by dpack) over a unix socket. Each rank\n"
"of a job attaches with the client API (shm/ldc.h) and gets its own shared-memory ring.\n"
"Runs in the foreground, logs to stderr; SIGTERM or SIGINT stops it (clients are told);\n"
"SIGHUP, SIGTSTP, SIGTTIN and SIGTTOU are ignored.\n"
"Under a service manager that sets $NOTIFY_SOCKET (systemd, Type=notify), loaderd sends it\n"
"READY=1 once serving and STOPPING=1 when it stops.\n",
	.outro = "\nExit status: 0 stopped by a signal, 1 runtime error, 2 bad usage.\n",
	.opts = opt_rows,
	.n_opts = sizeof(opt_rows) / sizeof(opt_rows[0]),
};

/* Fill *o from the defaults and the command line. Returns -1 to go on serving, or the exit
 * status to end with (0 after --help, 2 for bad usage; the message is printed). */
static int parse_args(int argc, char **argv, struct opts *o)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	int ret;

	/* The defaults that depend on the host; the table sets the others. */
	*o = (struct opts){ .so.group = (gid_t)-1, .ready_fd = -1 };
	o->so.workers = proc_cpu_count();
	/* half of what loaderd may use: its cgroup's memory limit where one is lower than the RAM
	 * (ring pages are charged there, and the kernel kills past it) */
	o->so.mem_limit = pages > 0 && psize > 0 ?
		ldr_memory_budget("/proc/self/cgroup", "/sys/fs/cgroup",
				  (uint64_t)pages * (uint64_t)psize) / 2 : 0;
	ldc_default_socket(o->path, sizeof(o->path));
	o->socket = o->path;

	ret = arg_parse(&opt_table, argc, argv, o);
	if (ret == -ECANCELED)
		return 0;
	if (ret < 0)
		return 2;
	if (o->so.all_users && o->so.group != (gid_t)-1) {
		fprintf(stderr, "loaderd: --all-users and --group: one or the other (--all-users lets "
			"every user in, --group the members of one group)\n");
		return 2;
	}
	o->so.socket_path = o->socket;
	o->cfg.io = (enum ldr_io)o->io;
	o->cfg.workers = o->so.workers;
	o->so.linger_ms = (int)(o->linger_s * 1000u);
	o->so.idle_ms = (int)(o->idle_s * 1000u);
	log_level = o->log_level;
	return -1;
}

/* --cache-dir: the folder (made 0700; one of another owner, or that group or others may write,
 * is refused) and ldfetch, beside loaderd's own binary, started with one end of a socketpair as
 * its descriptor 3. 0 or -1 (logged). */
static int start_cache(struct opts *o)
{
	struct stat st;
	struct statvfs vs;
	char exe[PATH_MAX], prog[PATH_MAX + 16], why[CTL_TEXT_MAX];
	int sv[2];

	if (mkdir(o->cache_dir, 0700) < 0 && errno != EEXIST) {
		LOG_ERROR("--cache-dir %s: %s", o->cache_dir, strerror(errno));
		return -1;
	}
	if (lstat(o->cache_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		LOG_ERROR("--cache-dir %s: not a directory", o->cache_dir);
		return -1;
	}
	if (st.st_uid != geteuid() || (st.st_mode & 022)) {
		LOG_ERROR("--cache-dir %s: owned by uid %u, mode %03o: it must be loaderd's own (uid "
			  "%u) and writable by no one else", o->cache_dir, (unsigned)st.st_uid,
			  (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
		return -1;
	}
	if ((st.st_mode & 0777) != 0700 && chmod(o->cache_dir, 0700) < 0) {
		LOG_ERROR("--cache-dir %s: chmod 0700: %s", o->cache_dir, strerror(errno));
		return -1;
	}
	if (!o->cache_size) {
		if (statvfs(o->cache_dir, &vs) < 0) {
			LOG_ERROR("--cache-dir %s: %s", o->cache_dir, strerror(errno));
			return -1;
		}
		o->cache_size = (uint64_t)vs.f_bavail * vs.f_frsize / 4;
		if (!o->cache_size)
			o->cache_size = 1;
	}
	if (!o->cache_uid)
		o->cache_uid = o->cache_size / 2 ? o->cache_size / 2 : 1;
	if (o->so.cache_endpoints &&
	    ctl_s3_endpoints_check(o->so.cache_endpoints, why, sizeof(why)) < 0) {
		LOG_ERROR("--cache-endpoints: %s", why);
		return -1;
	}
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		LOG_ERROR("--cache-dir: cannot tell where loaderd's binary is (to start ldfetch)");
		return -1;
	}
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	snprintf(prog, sizeof(prog), "%s/ldfetch", exe);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		LOG_ERROR("--cache-dir: socketpair: %s", strerror(errno));
		return -1;
	}
	char size[32], uid[32];
	snprintf(size, sizeof(size), "%llu", (unsigned long long)o->cache_size);
	snprintf(uid, sizeof(uid), "%llu", (unsigned long long)o->cache_uid);
	pid_t pid = fork();
	if (pid == 0) {
		/* descriptor 3 is its socket to loaderd; everything else loaderd holds is CLOEXEC */
		if ((sv[1] == 3 ? fcntl(3, F_SETFD, 0) : dup2(sv[1], 3)) < 0)
			_exit(127);
		char *argv[] = { "ldfetch", (char *)o->cache_dir, size, uid, NULL };
		execv(prog, argv);
		fprintf(stderr, "loaderd: cannot run %s: %s\n", prog, strerror(errno));
		_exit(127);
	}
	close(sv[1]);
	if (pid < 0) {
		LOG_ERROR("--cache-dir: fork: %s", strerror(errno));
		close(sv[0]);
		return -1;
	}
	o->so.cache = 1;
	o->so.fetch_fd = sv[0];
	o->so.cache_size = o->cache_size;
	o->so.cache_size_uid = o->cache_uid;
	LOG_INFO("node cache %s: %llu bytes, %llu per uid, fetched by %s (pid %d) from %s",
		 o->cache_dir, (unsigned long long)o->cache_size, (unsigned long long)o->cache_uid,
		 prog, (int)pid, o->so.cache_endpoints ? o->so.cache_endpoints :
		 "AWS's endpoints (--cache-endpoints)");
	return 0;
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
	LOG_INFO("serving on %s: %u workers, io %s, ring memory limit %llu MiB", o->socket,
		 o->so.workers, o->cfg.io == LDR_IO_PREAD ? "pread" :
		 o->cfg.io == LDR_IO_BUFFERED ? "io_uring (buffered)" :
		 o->cfg.io == LDR_IO_DIRECT ? "io_uring (O_DIRECT where possible)" :
		 "auto (per dataset: memory, page cache or O_DIRECT)",
		 (unsigned long long)(o->so.mem_limit >> 20));
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
	if (o->ready_fd >= 0)
		notify_ready(o->ready_fd, o->socket);
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
	/* First: a terminal's hang-up or job control must not stop or kill a daemon, whether it was
	 * started from one or a user made one reachable to it. And every open loaderd makes carries
	 * O_NOCTTY (scripts/check_noctty.sh), so that, as a session leader (under systemd, or
	 * setsid), it never acquires a controlling terminal. */
	proc_ignore_terminal_signals();
	ret = parse_args(argc, argv, &o);
	if (ret >= 0)
		return ret;
	raise_nofile();
	if (o.so.cache_endpoints && !o.cache_dir) {
		LOG_ERROR("--cache-endpoints without --cache-dir: there is no node cache to fetch");
		return 2;
	}
	if (o.so.cache_evict != SRV_EVICT_FUTURE && !o.so.cache_stream) {
		LOG_ERROR("--cache-evict without --cache-stream: a set fetched whole is never evicted "
			  "while its job reads it");
		return 2;
	}
	if (o.so.cache_stream && !o.cache_dir) {
		LOG_ERROR("--cache-stream without --cache-dir: there is no node cache to stream through");
		return 2;
	}
	if (o.cache_dir && start_cache(&o) < 0)
		return 1;
	return serve(&o);
}
