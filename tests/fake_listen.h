/* fake_listen.h - for cmocka tests that play loaderd to the client library (test_ldc.c,
 * test_ldc_errors.c): a fresh directory under /tmp with a socket s.sock listening in it, of
 * loaderd's type (SOCK_SEQPACKET), and its removal. Header-only, as tmpdir.h. */
#ifndef LOADERD_TESTS_FAKE_LISTEN_H
#define LOADERD_TESTS_FAKE_LISTEN_H
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/tmpdir.h"

struct fake_listen {
	char dir[64];    /* the directory, /tmp/PREFIX.XXXXXX */
	char sock[108];  /* DIR/s.sock, the path a client connects to */
	int lfd;         /* the listening socket: accept4 it to take a client's connection */
};

/* Make @l's directory (named after @prefix) and listen on its s.sock. 0 or -1. */
static inline int fake_listen_open(struct fake_listen *l, const char *prefix)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	l->lfd = -1;
	if (tmpdir_create(l->dir, sizeof(l->dir), prefix) < 0)
		return -1;
	snprintf(l->sock, sizeof(l->sock), "%s/s.sock", l->dir);
	strcpy(sa.sun_path, l->sock);
	l->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (l->lfd < 0 || bind(l->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l->lfd, 8) < 0)
		return -1;
	return 0;
}

/* Close the socket and remove the directory with everything in it. 0 or -1. */
static inline int fake_listen_close(struct fake_listen *l)
{
	if (l->lfd >= 0)
		close(l->lfd);
	l->lfd = -1;
	return tmpdir_remove(l->dir);
}

#endif
