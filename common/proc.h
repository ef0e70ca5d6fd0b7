/* proc.h - process-level helpers shared by loaderd and the tools: how many cores we may use, the
 * stop signals, and the readiness line of a daemon started with --ready-fd. */
#ifndef LOADERD_PROC_H
#define LOADERD_PROC_H
#include <stddef.h>
#include <sys/types.h>
#ifdef __cplusplus
extern "C" {
#endif

/* The cores this process may run on (its CPU affinity, else the online count); at least 1. */
unsigned proc_cpu_count(void);

#define PROC_SIG_HUP 0x1u  /* SIGHUP stops us too (a tool on a terminal; not a daemon) */

/* Call @fn on SIGINT and SIGTERM (and SIGHUP with PROC_SIG_HUP), with no other signal blocked
 * and no SA_RESTART, so that a blocking call returns EINTR; ignore SIGPIPE, so that a write to a
 * closed pipe or socket returns EPIPE instead of killing us. @fn must be async-signal-safe. */
void proc_on_stop_signals(void (*fn)(int), unsigned flags);

/* A daemon's answer to the terminal's signals: ignore SIGHUP (a terminal hung up; loaderd has
 * nothing to reload), SIGTSTP, SIGTTIN and SIGTTOU (job control: stop, a background read or
 * write), so that no terminal, and no user who made one reachable, can stop or kill it. Call it
 * before proc_on_stop_signals; without PROC_SIG_HUP there, SIGHUP stays ignored. */
void proc_ignore_terminal_signals(void);

/* CPU time (user + system) process @pid has used so far, in seconds (/proc/PID/stat), or -1. */
double proc_cpu_seconds(pid_t pid);

/* Wait up to @timeout_ms for one line on @fd (the read end of the pipe given to a child as
 * --ready-fd; @fd is read, not closed) and put it, without its newline, in @line (@n bytes,
 * truncated). Returns 0; -ECHILD when the writer closed the pipe (or exited) without a whole
 * line; -ETIMEDOUT; -EINTR when a signal interrupted the wait; other -errno from poll or read. */
int proc_wait_ready(int fd, int timeout_ms, char *line, size_t n);

#ifdef __cplusplus
}
#endif
#endif
