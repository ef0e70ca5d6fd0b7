/* ld_real.h - the real daemon (build/bin/loaderd) for tests: a raw-record dataset whose every byte
 * is known, loaderd started on a socket with its log in a file, and stopped. Tests that must
 * exercise loaderd itself (not the server core with a pattern filler, tests/srv_harness.h) use
 * this: tests/test_hostile.c. tests/ld_real.c.
 *
 * The dataset: @n raw records of @side x @side x 3 bytes; byte j of sample i is ld_byte(i, j),
 * its label is ld_label(i). No cmocka here: every function returns an error instead. */
#ifndef LOADERD_TESTS_LD_REAL_H
#define LOADERD_TESTS_LD_REAL_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

static inline uint8_t ld_byte(uint64_t id, uint64_t j)
{
	return (uint8_t)(id * 131u + j * 7u + (id >> 8));
}

static inline int64_t ld_label(uint64_t id)
{
	return (int64_t)(id % 1000u);
}

/* Write the dataset to @path. 0 or -errno. */
int ld_dataset(const char *path, uint64_t n, uint32_t side);
/* The loaderd binary: $BUILD/bin/loaderd (BUILD defaults to "build"). */
const char *ld_bin(void);
/* Start loaderd on @sock with --workers 2 and the NULL-terminated @extra options; stderr goes to
 * @log. Waits for its --ready-fd line (10 s at most). Returns the pid, or -errno. */
pid_t ld_start(const char *sock, const char *log, const char *const *extra);
/* The same with RLIMIT_NOFILE set to @soft and @hard for loaderd (0, 0: inherited). */
pid_t ld_start_nofile(const char *sock, const char *log, const char *const *extra, unsigned soft,
		      unsigned hard);

/* Is @pid alive (not a zombie)? */
int ld_alive(pid_t pid);
/* SIGTERM, then SIGKILL after 5 s; reaps. Returns its wait status, or -1. */
int ld_stop(pid_t pid);
/* Does file @path contain @needle? 1 yes, 0 no. */
int ld_log_has(const char *path, const char *needle);
/* A raw connection to loaderd's @sock (a client speaking the protocol by hand), answers waited
 * for at most @timeout_s. The fd, or -errno. */
int ld_raw_connect(const char *sock, int timeout_s);

#endif
