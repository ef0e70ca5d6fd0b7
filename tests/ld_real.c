/* ld_real.c - the real daemon for tests (see ld_real.h). */
#include "tests/ld_real.h"
#include "common/proc.h"
#include "formats/dpk.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/time.h>
#include <unistd.h>

int ld_dataset(const char *path, uint64_t n, uint32_t side)
{
	size_t len = (size_t)side * side * 3;
	uint8_t *buf = malloc(len);
	struct dpk_writer *w = NULL;
	int ret = buf ? dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w) : -ENOMEM;

	for (uint64_t i = 0; ret == 0 && i < n; i++) {
		for (size_t j = 0; j < len; j++)
			buf[j] = ld_byte(i, j);
		struct dpk_record r = { .kind = DPK_KIND_RAW, .label = ld_label(i), .data = buf,
					.length = len, .shape = { side, side, 3 }, .ndim = 3 };
		ret = dpk_writer_add(w, &r);
	}
	if (ret == 0)
		ret = dpk_writer_finish(w);
	dpk_writer_destroy(w);
	free(buf);
	return ret;
}

const char *ld_bin(void)
{
	static char path[512];
	const char *b = getenv("BUILD");

	snprintf(path, sizeof(path), "%s/bin/loaderd", b && *b ? b : "build");
	return path;
}

pid_t ld_start(const char *sock, const char *log, const char *const *extra)
{
	return ld_start_nofile(sock, log, extra, 0, 0);
}

pid_t ld_start_nofile(const char *sock, const char *log, const char *const *extra, unsigned soft,
		      unsigned hard)
{
	const char *argv[40] = { ld_bin(), "--socket", sock, "--workers", "2", "--ready-fd" };
	char fdarg[16], line[256];
	int argc = 7, ready[2];

	if (pipe2(ready, O_CLOEXEC) < 0)
		return -errno;
	snprintf(fdarg, sizeof(fdarg), "%d", ready[1]);
	argv[6] = fdarg;
	for (; extra && *extra && argc < 38; extra++)
		argv[argc++] = *extra;
	argv[argc] = NULL;
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		fcntl(ready[1], F_SETFD, 0);  /* the one fd loaderd inherits */
		if (hard) {
			struct rlimit rl = { soft, hard };
			setrlimit(RLIMIT_NOFILE, &rl);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(ready[1]);
	int ret = proc_wait_ready(ready[0], 10000, line, sizeof(line));
	close(ready[0]);
	if (ret < 0) {
		ld_stop(pid);
		return ret;
	}
	return pid;
}

int ld_alive(pid_t pid)
{
	int st;

	return pid > 0 && waitpid(pid, &st, WNOHANG) == 0;
}

int ld_stop(pid_t pid)
{
	int st = -1;

	if (pid <= 0)
		return -1;
	kill(pid, SIGTERM);
	for (int i = 0; i < 500; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return st;
		struct timespec ts = { 0, 10 * 1000000 };
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	return waitpid(pid, &st, 0) == pid ? st : -1;
}

int ld_log_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	char line[2048];
	int found = 0;

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	if (f)
		fclose(f);
	return found;
}

int ld_raw_connect(const char *sock, int timeout_s)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = timeout_s };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}
