/* proc.c - cores, stop signals and readiness lines (see proc.h). */
#include "common/proc.h"

#include "common/clk.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
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
