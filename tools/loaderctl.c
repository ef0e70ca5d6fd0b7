/* loaderctl.c - ask a running loaderd what it is doing: status, jobs, per-rank stats, or stop a
 * job. Asks through the client library (ldc_admin in shm/ldc.h) and prints the answer as it is. */
#include "shm/ctl.h"
#include "shm/ldc.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
"usage: loaderctl [--socket PATH] [--json] status|jobs|stats [JOB]|stop JOB\n"
"\n"
"  status     the daemon: pid, uptime, workers, how busy they are and how many the\n"
"             demand needs now, the CPU budget, memory held\n"
"             for jobs, and each job's share (rings, rank table, index and buffers)\n"
"  jobs       per job: dataset, ranks attached, samples/s, bad records; what its consumers\n"
"             eat (demand), the steps kept ready for them (target), weight, CPU given\n"
"  stats      that, and per rank: samples/s, ring occupancy, time the ring sat empty, mean\n"
"             batch latency (first task taken to publish; - before the first), time\n"
"             reading and decoding, bad records with their sample ids\n"
"  stop JOB   end a job: its ranks are told and disconnected\n"
"options:\n"
"  --socket PATH   loaderd's socket (default: $XDG_RUNTIME_DIR/loaderd.sock, else\n"
"                  /tmp/loaderd-UID.sock, as loaderd)\n"
"  --json          machine-readable output\n"
"Exit status: 0 ok, 1 loaderd unreachable or refused, 2 bad usage.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL, *job = NULL;
	char defpath[PATH_MAX], err[CTL_TEXT_MAX + 256], *text;
	uint32_t op;
	int c, json = 0;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': path = optarg; break;
		case 'j': json = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!path)
		path = ldc_default_socket(defpath, sizeof(defpath));
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[optind++];
	if (!strcmp(cmd, "status"))
		op = CTL_OP_STATUS;
	else if (!strcmp(cmd, "jobs"))
		op = CTL_OP_JOBS;
	else if (!strcmp(cmd, "stats"))
		op = CTL_OP_STATS;
	else if (!strcmp(cmd, "stop"))
		op = CTL_OP_STOP;
	else {
		fprintf(stderr, "loaderctl: unknown command '%s' (see --help)\n", cmd);
		return 2;
	}
	if (optind < argc) {
		if (op == CTL_OP_STATUS || strlen(argv[optind]) >= CTL_JOB_NAME_MAX) {
			fprintf(stderr, "loaderctl: unexpected argument '%s'\n", argv[optind]);
			return 2;
		}
		job = argv[optind++];
	}
	if (optind < argc || (op == CTL_OP_STOP && !job)) {
		fprintf(stderr, "loaderctl: %s\n", optind < argc ? "too many arguments" : "stop needs a job name");
		return 2;
	}
	int ret = ldc_admin(path, op, json ? CTL_ADMIN_JSON : 0, job, &text, err, sizeof(err));
	if (ret < 0) {
		fprintf(stderr, "loaderctl: %s\n", err);
		return ret == -ENAMETOOLONG ? 2 : 1;
	}
	fputs(text, stdout);
	free(text);
	return fflush(stdout) == EOF ? 1 : 0;
}
