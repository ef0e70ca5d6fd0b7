/* err.h - the one error-message helper of the libraries below the tools: a caller's buffer gets
 * the reason, the caller gets its -errno back, so that `return err_set(why, whylen, -EBADMSG,
 * "sample %llu: ...", id);` is one line. formats/, codec/ and trainer/ use it; shm/ keeps its own
 * (libldc.so depends on libc alone: shm/ldc.h says so). */
#ifndef LOADERD_ERR_H
#define LOADERD_ERR_H
#include <stdarg.h>
#include <stddef.h>

/* Format the reason into @buf[0, len) (truncated to fit; nothing when @buf is NULL or @len is 0)
 * and return @ret. */
int err_set(char *buf, size_t len, int ret, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The same with a va_list, for helpers that add their own prefix or target. */
int err_vset(char *buf, size_t len, int ret, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

#endif
