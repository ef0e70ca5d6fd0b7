/* log.c - one formatted line per call, written with a single write(2) so that lines from several
 * threads never interleave. */
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int log_level = LOG_LVL_INFO;
const char *log_prog = "loaderd";

static const char *const level_names[] = { "error", "warn", "info", "debug" };

int log_level_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, level_names[i]))
			return i;
	if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0')
		return s[0] - '0';
	return -EINVAL;
}

void log_emit(int level, const char *fmt, ...)
{
	char line[2048];
	int n = snprintf(line, sizeof(line), "%s: %s", log_prog,
			 level == LOG_LVL_ERROR ? "error: " : level == LOG_LVL_WARN ? "warning: " : "");
	va_list ap;

	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	n += m;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}
