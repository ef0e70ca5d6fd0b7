/* test_fdio.c - common/fdio.c: fd_write_all delivers every byte through a pipe far larger than
 * its buffer, resumes after short writes and EINTR, and turns a closed reader and a write that
 * takes nothing into errors. Faults come from --wrap=write. fd_fopen_read reads a file, reports a
 * missing one, and never makes a terminal the controlling terminal of a session leader that
 * opens it (issue 36: a pty as a dataset file became loaderd's), where a plain open does. */
/* link: -Wl,--wrap=write */
#include "common/fdio.h"
#include "common/mix.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

ssize_t __real_write(int fd, const void *buf, size_t n);

/* Fault plan for the next writes: 0 = real write; > 0 = write at most that many bytes;
 * -1 = EINTR; -2 = return 0. */
static int plan[8], planned, calls;

ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
	int p = calls < planned ? plan[calls] : 0;

	calls++;
	if (p == -1) {
		errno = EINTR;
		return -1;
	}
	if (p == -2)
		return 0;
	return __real_write(fd, buf, p > 0 && (size_t)p < n ? (size_t)p : n);
}

static void set_plan(int n, const int *p)
{
	if (n)
		memcpy(plan, p, sizeof(int) * (size_t)n);
	planned = n;
	calls = 0;
}

struct drain {
	int fd;
	uint8_t *buf;
	size_t len, got;
};

static void *drain_main(void *arg)
{
	struct drain *d = arg;
	ssize_t n;

	while (d->got < d->len && (n = read(d->fd, d->buf + d->got, d->len - d->got)) > 0)
		d->got += (size_t)n;
	return NULL;
}

static void test_fdio_write_all_pipe_larger_than_buffer(void **state)
{
	size_t len = 4u << 20;  /* 64 x a default pipe buffer: many short writes */
	uint8_t *src = malloc(len), *dst = malloc(len);
	uint64_t s = 1;
	int p[2];
	pthread_t th;

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	for (size_t i = 0; i < len; i++)
		src[i] = (uint8_t)mix_next(&s);
	assert_int_equal(pipe(p), 0);
	struct drain d = { .fd = p[0], .buf = dst, .len = len };
	assert_int_equal(pthread_create(&th, NULL, drain_main, &d), 0);
	set_plan(0, NULL);
	assert_int_equal(fd_write_all(p[1], src, len), 0);
	close(p[1]);
	pthread_join(th, NULL);
	close(p[0]);
	assert_true(d.got == len);
	assert_memory_equal(src, dst, len);
	free(src);
	free(dst);
}

static void test_fdio_write_all_short_writes_and_eintr(void **state)
{
	static const int faults[] = { 3, -1, 1, -1, -1, 2 };
	char buf[32] = "";
	int p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	set_plan(6, faults);
	assert_int_equal(fd_write_all(p[1], "0123456789", 10), 0);
	assert_int_equal(calls, 7);  /* 3 + 1 + 2 bytes, three EINTRs, then the last 4 */
	close(p[1]);
	assert_int_equal(read(p[0], buf, sizeof(buf)), 10);
	assert_memory_equal(buf, "0123456789", 10);
	close(p[0]);
}

static void test_fdio_write_all_zero_write_is_eio(void **state)
{
	static const int faults[] = { 2, -2 };
	int p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	set_plan(2, faults);
	assert_int_equal(fd_write_all(p[1], "abcdef", 6), -EIO);
	close(p[0]);
	close(p[1]);
}

static void test_fdio_write_all_closed_reader_is_epipe(void **state)
{
	int p[2];

	(void)state;
	signal(SIGPIPE, SIG_IGN);
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	set_plan(0, NULL);
	assert_int_equal(fd_write_all(p[1], "x", 1), -EPIPE);
	close(p[1]);
	assert_int_equal(fd_write_all(-1, "x", 1), -EBADF);
	assert_int_equal(fd_write_all(-1, "", 0), 0);  /* nothing to write: no call */
}

static void test_fdio_fopen_read_file_and_missing(void **state)
{
	char path[] = "/tmp/test_fdio.XXXXXX", line[16] = "";
	int fd = mkstemp(path);
	FILE *f;

	(void)state;
	assert_true(fd >= 0);
	set_plan(0, NULL);
	assert_int_equal(fd_write_all(fd, "17\n", 3), 0);
	close(fd);
	f = fd_fopen_read(path);
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));
	assert_string_equal(line, "17\n");
	assert_true(fcntl(fileno(f), F_GETFD) & FD_CLOEXEC);
	fclose(f);
	unlink(path);
	errno = 0;
	assert_null(fd_fopen_read(path));
	assert_int_equal(errno, ENOENT);
}

/* In a child that is a session leader with no terminal: open the pty @name with fd_fopen_read
 * (@plain: with open and no O_NOCTTY instead). Exit 0: the open worked and /dev/tty then has no
 * terminal behind it (ENXIO); 1: the pty became the controlling terminal; 2: an open failed. */
static int ctty_after_open(const char *name, int plain)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		setsid();
		if (plain ? open(name, O_RDONLY) < 0 : fd_fopen_read(name) == NULL)
			_exit(2);
		int t = open("/dev/tty", O_RDONLY | O_NOCTTY);
		_exit(t >= 0 ? 1 : errno == ENXIO ? 0 : 2);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void test_fdio_fopen_read_takes_no_terminal(void **state)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY);

	(void)state;
	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 || !ptsname(m)) {
		if (m >= 0)
			close(m);
		skip();  /* no pty here (no devpts) */
	}
	char name[64];
	snprintf(name, sizeof(name), "%s", ptsname(m));
	/* the control: a plain open does take it, so the check below can fail */
	assert_int_equal(ctty_after_open(name, 1), 1);
	assert_int_equal(ctty_after_open(name, 0), 0);
	close(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fdio_write_all_pipe_larger_than_buffer),
		cmocka_unit_test(test_fdio_write_all_short_writes_and_eintr),
		cmocka_unit_test(test_fdio_write_all_zero_write_is_eio),
		cmocka_unit_test(test_fdio_write_all_closed_reader_is_epipe),
		cmocka_unit_test(test_fdio_fopen_read_file_and_missing),
		cmocka_unit_test(test_fdio_fopen_read_takes_no_terminal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
