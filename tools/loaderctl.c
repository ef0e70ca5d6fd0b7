/* loaderctl.c - ask a running loaderd what it is doing: status, jobs, per-rank stats, or stop a
 * job. Talks the control protocol (shm/ctl.h) on loaderd's socket. */
#include "shm/ctl.h"
#include "shm/ldc.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f,
"usage: loaderctl [--socket PATH] [--json] status|jobs|stats [JOB]|stop JOB\n"
"\n"
"  status     the daemon: pid, uptime, workers and how busy they are, ring memory\n"
"  jobs       one line per job: dataset, ranks attached, samples/s, bad records\n"
"  stats      per job and rank: samples/s, ring occupancy, time reading and decoding,\n"
"             bad records with their sample ids\n"
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
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ctl_admin req;
	const char *path = NULL;
	char defpath[sizeof(sa.sun_path)];
	int c, json = 0;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': path = optarg; break;
		case 'j': json = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!path) {
		path = ldc_default_socket(defpath, sizeof(defpath));
	}
	memset(&req, 0, sizeof(req));
	req.flags = json ? CTL_ADMIN_JSON : 0;
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[optind++];
	if (!strcmp(cmd, "status"))
		req.op = CTL_OP_STATUS;
	else if (!strcmp(cmd, "jobs"))
		req.op = CTL_OP_JOBS;
	else if (!strcmp(cmd, "stats"))
		req.op = CTL_OP_STATS;
	else if (!strcmp(cmd, "stop"))
		req.op = CTL_OP_STOP;
	else {
		fprintf(stderr, "loaderctl: unknown command '%s' (see --help)\n", cmd);
		return 2;
	}
	if (optind < argc) {
		if (req.op == CTL_OP_STATUS || strlen(argv[optind]) >= sizeof(req.job)) {
			fprintf(stderr, "loaderctl: unexpected argument '%s'\n", argv[optind]);
			return 2;
		}
		strcpy(req.job, argv[optind++]);
	}
	if (optind < argc || (req.op == CTL_OP_STOP && !req.job[0])) {
		fprintf(stderr, "loaderctl: %s\n", optind < argc ? "too many arguments" : "stop needs a job name");
		return 2;
	}
	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "loaderctl: socket path %s is too long\n", path);
		return 2;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "loaderctl: cannot reach loaderd at %s: %s\n", path, strerror(errno));
		return 1;
	}
	int ret = ctl_send(fd, CTL_ADMIN, &req, sizeof(req), NULL, 0);
	if (ret < 0) {
		fprintf(stderr, "loaderctl: sending to loaderd: %s\n", strerror(-ret));
		return 1;
	}
	for (;;) {
		char buf[CTL_MSG_MAX];
		uint16_t type;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 10000) <= 0) {
			fprintf(stderr, "loaderctl: loaderd did not answer within 10 s\n");
			return 1;
		}
		ssize_t n = ctl_recv(fd, buf, &type, NULL, NULL);
		if (n < 0) {
			fprintf(stderr, "loaderctl: %s\n", n == -EPIPE ? "loaderd closed the connection" :
				strerror((int)-n));
			return 1;
		}
		if (type == CTL_ERROR && (size_t)n == sizeof(struct ctl_error)) {
			struct ctl_error e;
			memcpy(&e, buf, sizeof(e));
			e.text[sizeof(e.text) - 1] = '\0';
			fprintf(stderr, "loaderctl: loaderd: %s\n", e.text);
			return 1;
		}
		if (type != CTL_ADMIN_TEXT) {
			fprintf(stderr, "loaderctl: unexpected reply type %u\n", type);
			return 1;
		}
		if (n == 0)
			break;
		fwrite(buf, 1, (size_t)n, stdout);
	}
	close(fd);
	return 0;
}
