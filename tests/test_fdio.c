/* test_fdio.c - common/fdio.c: fd_write_all delivers every byte through a pipe far larger than
 * its buffer, resumes after short writes and EINTR, and turns a closed reader and a write that
 * takes nothing into errors. Faults come from --wrap=write. */
/* link: -Wl,--wrap=write */
#include "common/fdio.h"
#include "common/mix.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fdio_write_all_pipe_larger_than_buffer),
		cmocka_unit_test(test_fdio_write_all_short_writes_and_eintr),
		cmocka_unit_test(test_fdio_write_all_zero_write_is_eio),
		cmocka_unit_test(test_fdio_write_all_closed_reader_is_epipe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
