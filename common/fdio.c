/* fdio.c - whole-buffer I/O on file descriptors (see fdio.h). */
#include "common/fdio.h"

#include <errno.h>
#include <unistd.h>

int fd_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
