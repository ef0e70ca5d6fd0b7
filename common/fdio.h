/* fdio.h - whole-buffer I/O on file descriptors, for the tools and for formats/ (it never logs),
 * and a daemon's fopen.
 * The kernel may take fewer bytes than asked (a pipe, a socket, a signal, a full disk): these loop
 * until all of it is written or an error stops them. */
#ifndef LOADERD_FDIO_H
#define LOADERD_FDIO_H
#include <stddef.h>
#include <stdio.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Write all @len bytes of @buf to @fd, retrying short writes and EINTR. Returns 0 or -errno
 * (-EIO if the kernel takes 0 bytes). On a pipe whose reader is gone: -EPIPE (SIGPIPE too, unless
 * it is ignored). */
int fd_write_all(int fd, const void *buf, size_t len);

/* fopen(@path, "re") for a daemon: opened with O_NOCTTY, so that a terminal at @path never becomes
 * the caller's controlling terminal (stdio's fopen cannot ask for that). NULL with errno set. */
FILE *fd_fopen_read(const char *path);

#ifdef __cplusplus
}
#endif
#endif
