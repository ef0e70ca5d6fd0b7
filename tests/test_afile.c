/* test_afile.c - common/afile.c, the temp-file-then-rename writer of dpk files and dsgen output:
 * the target appears whole on commit, is untouched (and no temporary is left) on every failure,
 * and fsync (file, then directory) happens unless AFILE_NO_SYNC. Faults come from --wrap. */
/* link: -Wl,--wrap=fsync -Wl,--wrap=rename */
#include "common/afile.h"
#include "common/fdio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

int __real_fsync(int fd);
int __real_rename(const char *from, const char *to);

static int fsync_calls, fsync_fail_errno, rename_fail_errno;

int __wrap_fsync(int fd)
{
	fsync_calls++;
	if (fsync_fail_errno) {
		errno = fsync_fail_errno;
		return -1;
	}
	return __real_fsync(fd);
}

int __wrap_rename(const char *from, const char *to)
{
	if (rename_fail_errno) {
		errno = rename_fail_errno;
		return -1;
	}
	return __real_rename(from, to);
}

struct fx {
	char dir[64];
	char out[128];
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_afile.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->out, sizeof(f->out), "%s/out.bin", f->dir);
	fsync_calls = fsync_fail_errno = rename_fail_errno = 0;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	DIR *d = opendir(f->dir);
	struct dirent *e;
	char p[512];

	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", f->dir, e->d_name);
		if (unlink(p) < 0)
			rmdir(p);
	}
	if (d)
		closedir(d);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* Number of entries in @dir other than . and .. */
static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

static void assert_file_is(const char *path, const char *want)
{
	char buf[256];
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_memory_equal(buf, want, (size_t)n);
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(fd_write_all(fd, text, strlen(text)), 0);
	close(fd);
}

static void test_afile_commit_renames_and_syncs(void **state)
{
	struct fx *f = *state;
	struct afile a;

	assert_int_equal(afile_open(&a, f->out, 0), 0);
	assert_non_null(strstr(a.tmp, "out.bin.tmp."));
	assert_int_equal(access(f->out, F_OK), -1);  /* nothing at the target while writing */
	assert_int_equal(fd_write_all(a.fd, "hello", 5), 0);
	assert_int_equal(afile_commit(&a), 0);
	assert_int_equal(fsync_calls, 2);            /* the file, then its directory */
	assert_int_equal(afile_commit(&a), -EBADF);  /* once only */
	afile_close(&a);
	assert_file_is(f->out, "hello");
	assert_int_equal(entries(f->dir), 1);        /* no temporary left */
}

static void test_afile_no_sync_skips_fsync(void **state)
{
	struct fx *f = *state;
	struct afile a;

	assert_int_equal(afile_open(&a, f->out, AFILE_NO_SYNC), 0);
	assert_int_equal(fd_write_all(a.fd, "x", 1), 0);
	assert_int_equal(afile_commit(&a), 0);
	afile_close(&a);
	assert_int_equal(fsync_calls, 0);
	assert_file_is(f->out, "x");
}

static void test_afile_close_without_commit_leaves_nothing(void **state)
{
	struct fx *f = *state;
	struct afile a;

	assert_int_equal(afile_open(&a, f->out, 0), 0);
	assert_int_equal(fd_write_all(a.fd, "partial", 7), 0);
	afile_close(&a);
	assert_int_equal(entries(f->dir), 0);
	afile_close(&a);  /* twice is harmless */
}

static void test_afile_failed_fsync_keeps_old_target(void **state)
{
	struct fx *f = *state;
	struct afile a;

	write_file(f->out, "old");
	assert_int_equal(afile_open(&a, f->out, 0), 0);
	assert_int_equal(fd_write_all(a.fd, "new", 3), 0);
	fsync_fail_errno = EIO;
	assert_int_equal(afile_commit(&a), -EIO);
	afile_close(&a);
	assert_file_is(f->out, "old");
	assert_int_equal(entries(f->dir), 1);
}

static void test_afile_failed_rename_leaves_no_out(void **state)
{
	struct fx *f = *state;
	struct afile a;

	assert_int_equal(afile_open(&a, f->out, 0), 0);
	assert_int_equal(fd_write_all(a.fd, "data", 4), 0);
	rename_fail_errno = EXDEV;
	assert_int_equal(afile_commit(&a), -EXDEV);
	assert_int_equal(access(a.tmp, F_OK), 0);  /* still there until close */
	afile_close(&a);
	assert_int_equal(access(f->out, F_OK), -1);
	assert_int_equal(entries(f->dir), 0);
}

static void test_afile_open_refuses_existing_temp(void **state)
{
	struct fx *f = *state;
	struct afile a;
	char tmp[256];

	/* Another writer's temporary (same path and pid) is neither reused nor removed. */
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", f->out, (int)getpid());
	write_file(tmp, "theirs");
	assert_int_equal(afile_open(&a, f->out, 0), -EEXIST);
	afile_close(&a);
	assert_file_is(tmp, "theirs");
	assert_int_equal(access(f->out, F_OK), -1);
}

static void test_afile_open_missing_dir_fails(void **state)
{
	struct fx *f = *state;
	struct afile a;
	char path[256];

	snprintf(path, sizeof(path), "%s/no/such/out", f->dir);
	assert_int_equal(afile_open(&a, path, 0), -ENOENT);
	assert_int_equal(a.fd, -1);
	afile_close(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_afile_commit_renames_and_syncs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_afile_no_sync_skips_fsync, setup, teardown),
		cmocka_unit_test_setup_teardown(test_afile_close_without_commit_leaves_nothing, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_afile_failed_fsync_keeps_old_target, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_afile_failed_rename_leaves_no_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_afile_open_refuses_existing_temp, setup, teardown),
		cmocka_unit_test_setup_teardown(test_afile_open_missing_dir_fails, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
