/* test_proc.c - common/proc.c: the --ready-fd waiter takes one line and stops there, reports a
 * writer that closed without a line (loaderd exited) and a silent one (timeout), and the core
 * count is sane. The last case runs the real loaderd when it is built. */
#include "common/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

static void test_proc_wait_ready_one_line(void **state)
{
	char line[64];
	int p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "READY socket=/x pid=1\nmore", 26), 26);
	assert_int_equal(proc_wait_ready(p[0], 1000, line, sizeof(line)), 0);
	assert_string_equal(line, "READY socket=/x pid=1");
	char rest[8];
	assert_int_equal(read(p[0], rest, sizeof(rest)), 4);  /* nothing after the line was read */
	close(p[0]);
	close(p[1]);
}

static void test_proc_wait_ready_truncates_long_line(void **state)
{
	char line[6];
	int p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "READY socket=/long\n", 19), 19);
	assert_int_equal(proc_wait_ready(p[0], 1000, line, sizeof(line)), 0);
	assert_string_equal(line, "READY");
	close(p[0]);
	close(p[1]);
}

static void test_proc_wait_ready_eof_is_echild(void **state)
{
	char line[64];
	int p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "READ", 4), 4);  /* died mid-line */
	close(p[1]);
	assert_int_equal(proc_wait_ready(p[0], 1000, line, sizeof(line)), -ECHILD);
	close(p[0]);
}

static void test_proc_wait_ready_timeout(void **state)
{
	char line[64];
	int p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(proc_wait_ready(p[0], 50, line, sizeof(line)), -ETIMEDOUT);
	close(p[0]);
	close(p[1]);
}

static void test_proc_cpu_count_sane(void **state)
{
	unsigned n = proc_cpu_count();
	long online = sysconf(_SC_NPROCESSORS_ONLN);

	(void)state;
	assert_true(n >= 1);
	if (online > 0)
		assert_true(n <= (unsigned)online);
}

/* loaderd --ready-fd: the line comes once it serves, and names the socket and the pid. */
static void test_proc_loaderd_ready_fd(void **state)
{
	const char *build = getenv("BUILD");
	char exe[PATH_MAX], dir[] = "/tmp/test_proc.XXXXXX", sock[128], line[256], want[256];
	int p[2], status;

	(void)state;
	snprintf(exe, sizeof(exe), "%s/bin/loaderd", build && *build ? build : "build");
	if (access(exe, X_OK) < 0)
		skip();  /* the unit tests may run before the programs are linked */
	assert_non_null(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/s.sock", dir);
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, STDERR_FILENO);
		dup2(p[1], 3);
		execl(exe, exe, "--socket", sock, "--workers", "1", "--ready-fd", "3", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	int ret = proc_wait_ready(p[0], 10000, line, sizeof(line));
	close(p[0]);
	kill(pid, SIGTERM);
	waitpid(pid, &status, 0);
	rmdir(dir);
	assert_int_equal(ret, 0);
	snprintf(want, sizeof(want), "READY socket=%s pid=%d", sock, (int)pid);
	assert_string_equal(line, want);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proc_wait_ready_one_line),
		cmocka_unit_test(test_proc_wait_ready_truncates_long_line),
		cmocka_unit_test(test_proc_wait_ready_eof_is_echild),
		cmocka_unit_test(test_proc_wait_ready_timeout),
		cmocka_unit_test(test_proc_cpu_count_sane),
		cmocka_unit_test(test_proc_loaderd_ready_fd),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
