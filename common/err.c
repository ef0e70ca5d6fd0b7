/* err.c - the error-message helper (err.h). */
#include "common/err.h"

#include <stdio.h>

int err_vset(char *buf, size_t len, int ret, const char *fmt, va_list ap)
{
	if (buf && len)
		vsnprintf(buf, len, fmt, ap);
	return ret;
}

int err_set(char *buf, size_t len, int ret, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vset(buf, len, ret, fmt, ap);
	va_end(ap);
	return ret;
}
