/* args.c - strict parsing of command-line values (see args.h). */
#include "common/args.h"

#include "common/log.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Leading digits of @s as a number; *end after them. strtoull alone would take spaces and signs. */
static int digits(const char *s, unsigned long long *v, char **end)
{
	if (s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	*v = strtoull(s, end, 10);
	return errno ? -EINVAL : 0;
}

int arg_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (digits(s, &v, &end) < 0 || *end || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

int arg_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	uint64_t v;

	if (arg_u64(s, lo, hi, &v) < 0)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

int arg_bytes(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (digits(s, &v, &end) < 0)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	}
	if (shift)
		end++;
	if (shift && !strcmp(end, "iB"))
		end += 2;
	else if (!strcmp(end, "B"))
		end += 1;
	if (*end || v > (UINT64_MAX >> shift))
		return -EINVAL;
	v <<= shift;
	if (v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

int arg_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || !(v >= lo && v <= hi))
		return -EINVAL;
	*out = v;
	return 0;
}

int arg_size2(const char *s, uint32_t max, uint32_t *h, uint32_t *w)
{
	unsigned long long a, b;
	char *end;

	if (digits(s, &a, &end) < 0 || a > max)
		return -EINVAL;
	if (*end == '\0') {
		*h = *w = (uint32_t)a;
		return 0;
	}
	if ((*end != 'x' && *end != 'X') || a == 0 ||
	    digits(end + 1, &b, &end) < 0 || *end || b == 0 || b > max)
		return -EINVAL;
	*h = (uint32_t)a;
	*w = (uint32_t)b;
	return 0;
}

int arg_bad_value(const struct option *opts, int c, const char *value)
{
	const char *name = "?";

	for (const struct option *o = opts; o->name; o++)
		if (o->val == c)
			name = o->name;
	fprintf(stderr, "%s: --%s: bad value '%s' (see --help)\n", log_prog, name, value);
	return 2;
}
