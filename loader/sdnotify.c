/* sdnotify.c - readiness for a service manager: systemd's notify protocol spoken directly, so that
 * loaderd needs no libsystemd. The protocol is one datagram of "KEY=VALUE" lines to the
 * AF_UNIX socket in $NOTIFY_SOCKET; systemd checks the sender's pid (NotifyAccess=main). */
#include "loader/sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int ldr_sd_notify(const char *state)
{
	const char *e = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n;

	if (!e || !*e)
		return 0;
	if (e[0] != '/' && e[0] != '@')
		return -EAFNOSUPPORT;  /* e.g. vsock: addresses of newer systemd versions */
	n = strlen(e);
	if (n >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, e, n);
	if (e[0] == '@')
		sa.sun_path[0] = '\0';  /* abstract namespace: the length says where the name ends */
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (e[0] == '/'));
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	ssize_t sent = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
	int ret = sent < 0 ? -errno : 1;
	close(fd);
	return ret;
}
