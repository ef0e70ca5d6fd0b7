/* proc.c - cores, stop signals and readiness lines (see proc.h). */
#include "common/proc.h"

#include "common/clk.h"
#include "common/fdio.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

unsigned proc_cpu_count(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

void proc_on_stop_signals(void (*fn)(int), unsigned flags)
{
	struct sigaction sa = { .sa_handler = fn };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (flags & PROC_SIG_HUP)
		sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

void proc_ignore_terminal_signals(void)
{
	static const int sigs[] = { SIGHUP, SIGTSTP, SIGTTIN, SIGTTOU };

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_IGN);
}

int proc_wait_ready(int fd, int timeout_ms, char *line, size_t n)
{
	uint64_t deadline = clk_now_ns() + (uint64_t)timeout_ms * 1000000u;
	size_t len = 0;

	for (;;) {
		int64_t left = (int64_t)(deadline - clk_now_ns()) / 1000000;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char c;

		if ((int64_t)(deadline - clk_now_ns()) <= 0)
			return -ETIMEDOUT;
		int r = poll(&p, 1, left > 0 ? (int)left : 1);
		if (r < 0)
			return -errno;
		if (r == 0)
			continue;
		/* A byte at a time: the line is short, and nothing after it may be consumed. */
		ssize_t got = read(fd, &c, 1);
		if (got < 0) {
			if (errno == EAGAIN)
				continue;
			return -errno;
		}
		if (got == 0)
			return -ECHILD;
		if (c == '\n')
			break;
		if (n && len + 1 < n)
			line[len++] = c;
	}
	if (n)
		line[len] = '\0';
	return 0;
}

double proc_cpu_seconds(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long ut, st;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fd_fopen_read(path);
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Fields after the command name (which may hold spaces): state is field 3, utime 14. */
	const char *p = strrchr(buf, ')');
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}
