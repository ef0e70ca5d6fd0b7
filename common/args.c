/* args.c - strict parsing of command-line values, and the option tables built on it (args.h). */
#include "common/args.h"

#include "common/log.h"

#include <errno.h>
#include <assert.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
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

/* ---- option tables ---- */

#define HELP_COL 23    /* where an option's help text starts */
#define HELP_WIDTH 100 /* --help lines are shorter than this */

int arg_fmt_bytes(char *buf, size_t size, uint64_t v)
{
	static const char unit[] = "TGMK";

	for (int i = 0; i < 4; i++) {
		unsigned shift = 10u * (unsigned)(4 - i);
		if (v && v % (1ull << shift) == 0)
			return snprintf(buf, size, "%llu%c", (unsigned long long)(v >> shift), unit[i]);
	}
	return snprintf(buf, size, "%llu", (unsigned long long)v);
}

/* A row the parsers can use: the table's author's mistakes, caught on the first run. */
static void check_row(const struct arg_opt *o)
{
	if (o->kind == ARG_HEADING) {
		assert(o->help);
		return;
	}
	assert(o->name && o->name[0]);
	assert(o->help);
	switch (o->kind) {
	case ARG_UINT:
		assert(o->lo <= o->hi && o->hi <= UINT_MAX);
		break;
	case ARG_PERCENT:
		assert(o->lo <= o->hi && o->hi <= 100);
		break;
	case ARG_U64:
	case ARG_BYTES:
		assert(o->lo <= o->hi);
		break;
	case ARG_DOUBLE:
		assert(o->dlo <= o->dhi);
		break;
	case ARG_ENUM:
		assert(o->choices && o->choices[0]);
		break;
	case ARG_CUSTOM:
		assert(o->parse && o->allowed);
		break;
	default:
		break;
	}
}

/* Parse @s into the target of @o in @base. 0, or -EINVAL with the target untouched. */
static int set_value(const struct arg_opt *o, const char *s, void *base)
{
	void *t = (char *)base + o->off;

	switch (o->kind) {
	case ARG_UINT:
	case ARG_PERCENT:
		return arg_uint(s, (unsigned)o->lo, (unsigned)o->hi, t);
	case ARG_U64:
		return arg_u64(s, o->lo, o->hi, t);
	case ARG_BYTES:
		return arg_bytes(s, o->lo, o->hi, t);
	case ARG_DOUBLE:
		return arg_double(s, o->dlo, o->dhi, t);
	case ARG_ENUM:
		for (int i = 0; o->choices[i]; i++)
			if (!strcmp(s, o->choices[i])) {
				*(int *)t = i;
				return 0;
			}
		return -EINVAL;
	case ARG_PATH:
		if (!*s)
			return -EINVAL;
		*(const char **)t = s;
		return 0;
	case ARG_CUSTOM:
		return o->parse(s, t) < 0 ? -EINVAL : 0;
	case ARG_FLAG:
		*(int *)t = 1;
		return 0;
	default:
		return -EINVAL;
	}
}

/* "1..1024", "one of auto, buffered or pread", ...: what @o takes, for errors and --help; "" for
 * a kind that takes anything (ARG_HELP). */
static void allowed(const struct arg_opt *o, char *buf, size_t size)
{
	char a[32], b[32];
	size_t n = 0;

	buf[0] = '\0';
	switch (o->kind) {
	case ARG_UINT:
	case ARG_PERCENT:
	case ARG_U64:
		if (o->hi == UINT64_MAX)
			snprintf(buf, size, "at least %llu", (unsigned long long)o->lo);
		else
			snprintf(buf, size, "%llu..%llu%s", (unsigned long long)o->lo,
				 (unsigned long long)o->hi, o->kind == ARG_PERCENT ? " percent" : "");
		break;
	case ARG_BYTES:
		arg_fmt_bytes(a, sizeof(a), o->lo);
		arg_fmt_bytes(b, sizeof(b), o->hi);
		if (o->hi == UINT64_MAX)
			snprintf(buf, size, "at least %s, suffix K, M, G or T", a);
		else
			snprintf(buf, size, "%s..%s, suffix K, M, G or T", a, b);
		break;
	case ARG_DOUBLE:
		snprintf(buf, size, "%g..%g", o->dlo, o->dhi);
		break;
	case ARG_ENUM:
		n = (size_t)snprintf(buf, size, "one of");
		for (int i = 0; o->choices[i] && n < size; i++)
			n += (size_t)snprintf(buf + n, size - n, "%s %s", i == 0 ? "" :
					      o->choices[i + 1] ? "," : " or", o->choices[i]);
		break;
	case ARG_PATH:
		snprintf(buf, size, "a path, not empty");
		break;
	case ARG_CUSTOM:
		snprintf(buf, size, "%s", o->allowed);
		break;
	default:
		break;
	}
}

int arg_parse(const struct arg_table *t, int argc, char **argv, void *base)
{
	struct option *lopts = calloc(t->n_opts + 1, sizeof(*lopts));
	char *shorts = malloc(2 * t->n_opts + 2);
	size_t nl = 0, ns = 0;
	int c, ret = 0;

	if (!lopts || !shorts) {
		fprintf(stderr, "%s: out of memory parsing the options\n", t->prog);
		ret = -EINVAL;
		goto out;
	}
	shorts[ns++] = ':';  /* a missing value is ':', not '?': we name the option ourselves */
	for (size_t i = 0; i < t->n_opts; i++) {
		const struct arg_opt *o = &t->opts[i];
		int has_arg = o->kind != ARG_HELP && o->kind != ARG_FLAG;

		check_row(o);
		if (o->kind == ARG_HEADING)
			continue;
		lopts[nl++] = (struct option){ o->name, has_arg ? required_argument : no_argument,
					       NULL, o->short_name ? o->short_name : 256 + (int)i };
		if (o->short_name) {
			shorts[ns++] = o->short_name;
			if (has_arg)
				shorts[ns++] = ':';
		}
		if (o->def && set_value(o, o->def, base) < 0) {
			fprintf(stderr, "%s: --%s: the default '%s' is refused by its own row\n",
				t->prog, o->name, o->def);
			abort();  /* the table is wrong, not the user */
		}
	}
	shorts[ns] = '\0';

	optind = 0;  /* glibc: start over (a second table, or the tests) */
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, lopts, NULL)) != -1) {
		const struct arg_opt *o = NULL;
		char what[256];

		if (c == '?' || c == ':') {
			const char *word = argv[optind - 1];
			if (c == ':')
				fprintf(stderr, "%s: %s: needs a value (see --help)\n", t->prog, word);
			else if (!optopt)
				fprintf(stderr, "%s: %s: no such option, or not a unique prefix of one "
					"(see --help)\n", t->prog, word);
			else if (!strncmp(word, "--", 2))
				fprintf(stderr, "%s: %s: takes no value (see --help)\n", t->prog, word);
			else
				fprintf(stderr, "%s: -%c: no such option (see --help)\n", t->prog,
					optopt);
			ret = -EINVAL;
			goto out;
		}
		for (size_t i = 0; i < t->n_opts && !o; i++)
			if (c >= 256 ? (size_t)(c - 256) == i : t->opts[i].short_name == c)
				o = &t->opts[i];
		assert(o);
		if (o->kind == ARG_HELP) {
			arg_help(t, base, stdout);
			ret = -ECANCELED;
			goto out;
		}
		if (set_value(o, optarg, base) < 0) {
			allowed(o, what, sizeof(what));
			fprintf(stderr, "%s: --%s: bad value '%s' (%s)\n", t->prog, o->name, optarg,
				what);
			ret = -EINVAL;
			goto out;
		}
	}
	if (optind < argc && !t->operands) {
		fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", t->prog, argv[optind]);
		ret = -EINVAL;
		goto out;
	}
	ret = optind;
out:
	free(lopts);
	free(shorts);
	return ret;
}

/* @text from column @at (past the option's name), word by word, wrapped to HELP_COL. */
static void put_wrapped(FILE *f, const char *text, int at)
{
	int first = 1;

	for (const char *p = text; *p;) {
		while (*p == ' ')
			p++;
		size_t len = strcspn(p, " ");
		if (!len)
			break;
		if (!first && at + 1 + (int)len >= HELP_WIDTH) {
			fprintf(f, "\n%*s", HELP_COL, "");
			at = HELP_COL;
		} else if (!first) {
			fputc(' ', f);
			at++;
		}
		fwrite(p, 1, len, f);
		at += (int)len;
		p += len;
		first = 0;
	}
	fputc('\n', f);
}

/* snprintf at *n of @buf, *n advanced and kept within @size (a long text is cut, not overrun). */
static void append(char *buf, size_t size, size_t *n, const char *fmt, ...)
{
	va_list ap;
	int r;

	if (*n >= size - 1)
		return;
	va_start(ap, fmt);
	r = vsnprintf(buf + *n, size - *n, fmt, ap);
	va_end(ap);
	if (r > 0)
		*n = *n + (size_t)r < size - 1 ? *n + (size_t)r : size - 1;
}

/* The value @base holds for @o, when the kind can print it and it is not zero or NULL. */
static int current(const struct arg_opt *o, const void *base, char *buf, size_t size)
{
	const void *t = (const char *)base + o->off;

	switch (o->kind) {
	case ARG_UINT:
	case ARG_PERCENT:
		return *(const unsigned *)t ? snprintf(buf, size, "%u", *(const unsigned *)t) : 0;
	case ARG_U64:
		return *(const uint64_t *)t ?
			snprintf(buf, size, "%llu", (unsigned long long)*(const uint64_t *)t) : 0;
	case ARG_BYTES:
		return *(const uint64_t *)t ? arg_fmt_bytes(buf, size, *(const uint64_t *)t) : 0;
	case ARG_DOUBLE:
		return *(const double *)t ? snprintf(buf, size, "%g", *(const double *)t) : 0;
	case ARG_PATH:
		return *(const char *const *)t ? snprintf(buf, size, "%s", *(const char *const *)t) : 0;
	default:
		return 0;
	}
}

void arg_help(const struct arg_table *t, const void *base, FILE *f)
{
	fputs(t->intro, f);
	for (size_t i = 0; i < t->n_opts; i++) {
		const struct arg_opt *o = &t->opts[i];
		char line[2048], what[256], here[256];
		const char *meta = o->meta;
		size_t n;
		int at;

		if (o->kind == ARG_HEADING) {
			fprintf(f, "\n%s\n", o->help);
			continue;
		}
		if (!meta)
			meta = o->kind == ARG_BYTES ? "BYTES" : o->kind == ARG_PERCENT ? "PERCENT" :
			       o->kind == ARG_PATH ? "PATH" :
			       o->kind == ARG_HELP || o->kind == ARG_FLAG ? "" :
			       o->kind == ARG_ENUM ? "WORD" : "N";
		if (o->short_name)
			at = fprintf(f, "  -%c, --%s%s%s", o->short_name, o->name, *meta ? " " : "", meta);
		else
			at = fprintf(f, "  --%s%s%s", o->name, *meta ? " " : "", meta);
		at += fprintf(f, "%*s", at <= HELP_COL - 2 ? HELP_COL - at : 2, "");

		if (o->kind == ARG_PATH)
			what[0] = '\0';  /* "not empty" goes without saying in --help */
		else
			allowed(o, what, sizeof(what));
		int has_def = o->def || o->def_doc;
		int has_here = !o->def && base && current(o, base, here, sizeof(here)) > 0;
		n = 0;
		append(line, sizeof(line), &n, "%s", o->help);
		if (what[0] || has_def)
			append(line, sizeof(line), &n, " (%s%s", what, what[0] && has_def ? "; " : "");
		if (o->def)
			append(line, sizeof(line), &n, "default %s", o->def);
		else if (o->def_doc)
			append(line, sizeof(line), &n, "default: %s%s%s", o->def_doc,
			       has_here ? ", here " : "", has_here ? here : "");
		if (what[0] || has_def)
			append(line, sizeof(line), &n, ")");
		put_wrapped(f, line, at);
	}
	if (t->outro)
		fputs(t->outro, f);
}
