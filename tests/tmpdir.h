/* tmpdir.h - for cmocka tests: a fresh directory under /tmp for a test's files, and its removal
 * with everything in it. Header-only: each tests/test_NAME.c is one binary. */
#ifndef LOADERD_TESTS_TMPDIR_H
#define LOADERD_TESTS_TMPDIR_H
#include <stdio.h>
#include <stdlib.h>

/* Make /tmp/@prefix.XXXXXX into @dir (@len bytes). 0 or -1. */
static inline int tmpdir_create(char *dir, size_t len, const char *prefix)
{
	snprintf(dir, len, "/tmp/%s.XXXXXX", prefix);
	return mkdtemp(dir) ? 0 : -1;
}

/* rm -rf @dir. 0 or -1. */
static inline int tmpdir_remove(const char *dir)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

#endif
