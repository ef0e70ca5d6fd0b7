/* test_args.c - common/args.c: every parser takes the spellings it documents and refuses empty,
 * signed, spaced, junk-suffixed, out-of-range and overflowing values without writing *out; the
 * option tables (arg_parse, arg_help) take each kind exactly at its bounds and refuse it one past
 * them, naming the option, the value and the range, and --help shows every row with its default. */
#include "common/args.h"

#include <errno.h>
#include <getopt.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#define U64_SENTINEL 0x5a5a5a5a5a5a5a5aull

/* Refused, and *out left alone. */
static void u64_bad(const char *s, uint64_t lo, uint64_t hi)
{
	uint64_t v = U64_SENTINEL;

	if (arg_u64(s, lo, hi, &v) != -EINVAL)
		fail_msg("arg_u64(\"%s\", %llu, %llu) was accepted", s, (unsigned long long)lo,
			 (unsigned long long)hi);
	assert_true(v == U64_SENTINEL);
}

static void test_args_u64_valid_and_bounds(void **state)
{
	uint64_t v;

	(void)state;
	assert_int_equal(arg_u64("0", 0, 10, &v), 0);
	assert_true(v == 0);
	assert_int_equal(arg_u64("10", 0, 10, &v), 0);
	assert_true(v == 10);
	assert_int_equal(arg_u64("007", 0, 10, &v), 0);  /* leading zeros: decimal, not octal */
	assert_true(v == 7);
	assert_int_equal(arg_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	u64_bad("11", 0, 10);
	u64_bad("4", 5, 10);
}

static void test_args_u64_garbage_refused(void **state)
{
	static const char *const bad[] = {
		"", " ", " 1", "1 ", "+1", "-1", "-0", "1x", "x1", "0x10", "1.0", "1e3", "1k", "1,000",
		"١", "\t2",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		u64_bad(bad[i], 0, UINT64_MAX);
}

static void test_args_u64_overflow_refused(void **state)
{
	(void)state;
	u64_bad("18446744073709551616", 0, UINT64_MAX);  /* 2^64 */
	u64_bad("99999999999999999999999999", 0, UINT64_MAX);
}

static void test_args_uint_bounds_and_overflow(void **state)
{
	unsigned v = 77;

	(void)state;
	assert_int_equal(arg_uint("1024", 1, 1024, &v), 0);
	assert_int_equal(v, 1024);
	assert_int_equal(arg_uint("4294967295", 0, UINT32_MAX, &v), 0);
	assert_true(v == UINT32_MAX);
	v = 77;
	assert_int_equal(arg_uint("0", 1, 1024, &v), -EINVAL);
	assert_int_equal(arg_uint("1025", 1, 1024, &v), -EINVAL);
	assert_int_equal(arg_uint("4294967296", 0, UINT32_MAX, &v), -EINVAL);
	assert_int_equal(arg_uint("", 0, 10, &v), -EINVAL);
	assert_int_equal(arg_uint("-1", 0, UINT32_MAX, &v), -EINVAL);
	assert_int_equal(v, 77);
}

static void test_args_bytes_suffixes(void **state)
{
	static const struct { const char *s; uint64_t v; } ok[] = {
		{ "0", 0 }, { "512", 512 }, { "512B", 512 }, { "1k", 1024 }, { "1K", 1024 },
		{ "1KiB", 1024 }, { "1KB", 1024 }, { "3m", 3ull << 20 }, { "3MiB", 3ull << 20 }, { "2G", 2ull << 30 },
		{ "2g", 2ull << 30 }, { "1T", 1ull << 40 }, { "1TiB", 1ull << 40 },
		{ "16777215T", 16777215ull << 40 },
	};
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 0;
		if (arg_bytes(ok[i].s, 0, UINT64_MAX, &v) != 0 || v != ok[i].v)
			fail_msg("arg_bytes(\"%s\") gave %llu, expected %llu", ok[i].s,
				 (unsigned long long)v, (unsigned long long)ok[i].v);
	}
}

static void test_args_bytes_garbage_bounds_overflow(void **state)
{
	static const char *const bad[] = {
		"", "K", "1kb", "1Ki", "1iB", "1P", "1 K", " 1K", "-1K", "+1", "1.5G", "1GG",
		"1Bx", "0x1", "16777216T", "18446744073709551616", "18014398509481984K",
	};
	uint64_t v = U64_SENTINEL;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (arg_bytes(bad[i], 0, UINT64_MAX, &v) != -EINVAL)
			fail_msg("arg_bytes(\"%s\") was accepted: %llu", bad[i], (unsigned long long)v);
	assert_true(v == U64_SENTINEL);
	/* bounds apply after the suffix */
	assert_int_equal(arg_bytes("1K", 1025, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(arg_bytes("2K", 0, 2047, &v), -EINVAL);
	assert_int_equal(arg_bytes("2K", 0, 2048, &v), 0);
	assert_true(v == 2048);
}

static void test_args_double_valid_bounds_garbage(void **state)
{
	static const char *const bad[] = {
		"", " ", "x", "1x", "1.5s", "nan", "NaN", "inf", "-inf", "1e999", "0x", "1 ", "--1",
	};
	double v = 0;

	(void)state;
	assert_int_equal(arg_double("0.25", 0, 1, &v), 0);
	assert_true(v == 0.25);
	assert_int_equal(arg_double("1e-3", 0, 1, &v), 0);
	assert_true(v == 1e-3);
	assert_int_equal(arg_double("-2.5", -3, 0, &v), 0);
	assert_true(v == -2.5);
	assert_int_equal(arg_double("1", 1, 1, &v), 0);  /* both bounds inclusive */
	v = 42;
	assert_int_equal(arg_double("1.0001", 0, 1, &v), -EINVAL);
	assert_int_equal(arg_double("-0.1", 0, 1, &v), -EINVAL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (arg_double(bad[i], -1e300, 1e300, &v) != -EINVAL)
			fail_msg("arg_double(\"%s\") was accepted: %g", bad[i], v);
	assert_true(v == 42);
}

static void test_args_size2_forms_and_limits(void **state)
{
	static const char *const bad[] = {
		"", "x", "0x5", "5x0", "5x", "x5", "5x5x5", "-5", "5 x 5", "5X-5", "2049", "2049x1",
		"1x2049", "99999999999999999999", "5x99999999999999999999",
	};
	uint32_t h = 9, w = 9;

	(void)state;
	assert_int_equal(arg_size2("224", 2048, &h, &w), 0);
	assert_int_equal(h, 224);
	assert_int_equal(w, 224);
	assert_int_equal(arg_size2("0", 2048, &h, &w), 0);  /* "as stored" */
	assert_int_equal(h, 0);
	assert_int_equal(w, 0);
	assert_int_equal(arg_size2("480x640", 2048, &h, &w), 0);
	assert_int_equal(h, 480);
	assert_int_equal(w, 640);
	assert_int_equal(arg_size2("2048X1", 2048, &h, &w), 0);
	assert_int_equal(h, 2048);
	assert_int_equal(w, 1);
	h = w = 9;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (arg_size2(bad[i], 2048, &h, &w) != -EINVAL)
			fail_msg("arg_size2(\"%s\") was accepted: %ux%u", bad[i], h, w);
	assert_int_equal(h, 9);
	assert_int_equal(w, 9);
}

/* arg_bad_value names the option and the value, on stderr, and returns the usage status 2. */
static void test_args_bad_value_names_option_and_value(void **state)
{
	static const struct option opts[] = {
		{ "workers", required_argument, NULL, 'w' },
		{ "mem-limit", required_argument, NULL, 'm' },
		{ NULL, 0, NULL, 0 },
	};
	char buf[256] = "";
	int p[2], saved;

	(void)state;
	assert_int_equal(pipe(p), 0);
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	dup2(p[1], STDERR_FILENO);
	int rc = arg_bad_value(opts, 'm', "12Q");
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(p[1]);
	ssize_t n = read(p[0], buf, sizeof(buf) - 1);
	close(p[0]);
	assert_int_equal(rc, 2);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_non_null(strstr(buf, "--mem-limit: bad value '12Q'"));
}

/* ---- option tables ---- */

/* The targets of a table with one row of each kind. */
struct topts {
	unsigned u;
	uint64_t big;
	uint64_t bytes;
	unsigned pct;
	double d;
	int mode;
	const char *path;
	int yes;
	unsigned chosen;           /* a default the caller fills (def_doc) */
};

static const char *const mode_names[] = { "auto", "buffered", "pread", NULL };

static int parse_yes(const char *s, void *target)
{
	if (strcmp(s, "yes"))
		return -EINVAL;
	*(int *)target = 1;
	return 0;
}

#define TAT(field, type) ARG_AT(struct topts, field, type)

static const struct arg_opt trows[] = {
	{ .kind = ARG_HEADING, .help = "kinds:" },
	{ "count", 'c', ARG_UINT, TAT(u, unsigned), .lo = 2, .hi = 10, .def = "4",
	  .help = "a count" },
	{ "big", 0, ARG_U64, TAT(big, uint64_t), .lo = 0, .hi = 1ull << 40, .def = "0",
	  .help = "a large count" },
	{ "size", 0, ARG_BYTES, TAT(bytes, uint64_t), .lo = 1, .hi = 64ull << 20, .def = "1M",
	  .help = "a size" },
	{ "share", 0, ARG_PERCENT, TAT(pct, unsigned), .lo = 1, .hi = 100, .def = "100",
	  .help = "a share" },
	{ "every", 0, ARG_DOUBLE, TAT(d, double), .dlo = 0.1, .dhi = 5, .meta = "SECONDS",
	  .def = "0.5", .help = "an interval" },
	{ "mode", 0, ARG_ENUM, TAT(mode, int), .choices = mode_names, .meta = "MODE",
	  .def = "buffered", .help = "a mode" },
	{ "file", 0, ARG_PATH, TAT(path, const char *), .def_doc = "none", .help = "a file" },
	{ "agree", 0, ARG_CUSTOM, TAT(yes, int), .parse = parse_yes, .allowed = "the word yes",
	  .def_doc = "no", .help = "a custom parser" },
	{ "chosen", 0, ARG_UINT, TAT(chosen, unsigned), .lo = 1, .hi = 99, .def_doc = "the host's",
	  .help = "a default the caller chooses, and a help text long enough to be wrapped at the "
		  "hundredth column by arg_help, twice over: words words words words words words "
		  "words words words words words words words words words words words words words" },
	{ "help", 'h', ARG_HELP, .help = "this text" },
};

static const struct arg_table ttable = {
	.prog = "tprog",
	.intro = "usage: tprog [options]\n",
	.outro = "Exit status: 0.\n",
	.opts = trows,
	.n_opts = sizeof(trows) / sizeof(trows[0]),
};

/* Run arg_parse over @words (a NULL-terminated list, argv[0] added) into *o, the caller's default
 * for "chosen" set first; stderr and stdout of the call land in @err and @out (may be NULL).
 * Returns what arg_parse returned. */
static int parse_words(const struct arg_table *t, const char *const *words, struct topts *o,
		       char *err, size_t errlen, char *out, size_t outlen)
{
	char *argv[32] = { (char *)"tprog" };
	int argc = 1, ret, pe[2], po[2], save_e, save_o;
	ssize_t n;

	for (; words[argc - 1]; argc++)
		argv[argc] = (char *)words[argc - 1];
	*o = (struct topts){ .chosen = 7 };
	assert_int_equal(pipe(pe), 0);
	assert_int_equal(pipe(po), 0);
	fflush(stderr);
	fflush(stdout);
	save_e = dup(STDERR_FILENO);
	save_o = dup(STDOUT_FILENO);
	dup2(pe[1], STDERR_FILENO);
	dup2(po[1], STDOUT_FILENO);
	ret = arg_parse(t, argc, argv, o);
	fflush(stderr);
	fflush(stdout);
	dup2(save_e, STDERR_FILENO);
	dup2(save_o, STDOUT_FILENO);
	close(save_e);
	close(save_o);
	close(pe[1]);
	close(po[1]);
	n = read(pe[0], err ? err : (char[256]){ 0 }, err ? errlen - 1 : 255);
	if (err)
		err[n > 0 ? n : 0] = '\0';
	n = read(po[0], out ? out : (char[256]){ 0 }, out ? outlen - 1 : 255);
	if (out)
		out[n > 0 ? n : 0] = '\0';
	close(pe[0]);
	close(po[0]);
	return ret;
}

static void test_args_table_defaults_applied(void **state)
{
	static const char *const none[] = { NULL };
	struct topts o;

	(void)state;
	assert_int_equal(parse_words(&ttable, none, &o, NULL, 0, NULL, 0), 1);
	assert_int_equal(o.u, 4);
	assert_true(o.big == 0);
	assert_true(o.bytes == 1u << 20);
	assert_int_equal(o.pct, 100);
	assert_true(o.d == 0.5);
	assert_int_equal(o.mode, 1);
	assert_null(o.path);
	assert_int_equal(o.yes, 0);
	assert_int_equal(o.chosen, 7);  /* the caller's default, untouched */
}

/* Each kind exactly at its bounds (taken) and one past them (refused, naming the option, the
 * value and the range, the target left at its default). */
static void test_args_table_each_kind_at_bounds(void **state)
{
	static const struct {
		const char *opt, *value;
		size_t off;       /* the target, to compare */
		int size;         /* 4: unsigned/int, 8: uint64_t, 'd': double, 'p': pointer */
		double want;      /* when taken */
		const char *why;  /* when refused: the range the message states; NULL: taken */
	} cases[] = {
		{ "--count", "2", offsetof(struct topts, u), 4, 2, NULL },
		{ "--count", "10", offsetof(struct topts, u), 4, 10, NULL },
		{ "--count", "1", offsetof(struct topts, u), 4, 0, "(2..10)" },
		{ "--count", "11", offsetof(struct topts, u), 4, 0, "(2..10)" },
		{ "--big", "0", offsetof(struct topts, big), 8, 0, NULL },
		{ "--big", "1099511627776", offsetof(struct topts, big), 8, 1099511627776.0, NULL },
		{ "--big", "1099511627777", offsetof(struct topts, big), 8, 0, "(0..1099511627776)" },
		{ "--size", "1", offsetof(struct topts, bytes), 8, 1, NULL },
		{ "--size", "64M", offsetof(struct topts, bytes), 8, 64 << 20, NULL },
		{ "--size", "67108864", offsetof(struct topts, bytes), 8, 64 << 20, NULL },
		{ "--size", "0", offsetof(struct topts, bytes), 8, 0, "(1..64M, suffix K, M, G or T)" },
		{ "--size", "67108865", offsetof(struct topts, bytes), 8, 0, "(1..64M," },
		{ "--size", "65537K", offsetof(struct topts, bytes), 8, 0, "(1..64M," },
		{ "--share", "1", offsetof(struct topts, pct), 4, 1, NULL },
		{ "--share", "100", offsetof(struct topts, pct), 4, 100, NULL },
		{ "--share", "0", offsetof(struct topts, pct), 4, 0, "(1..100 percent)" },
		{ "--share", "101", offsetof(struct topts, pct), 4, 0, "(1..100 percent)" },
		{ "--every", "0.1", offsetof(struct topts, d), 'd', 0.1, NULL },
		{ "--every", "5", offsetof(struct topts, d), 'd', 5, NULL },
		{ "--every", "0.0999", offsetof(struct topts, d), 'd', 0, "(0.1..5)" },
		{ "--every", "5.001", offsetof(struct topts, d), 'd', 0, "(0.1..5)" },
		{ "--mode", "auto", offsetof(struct topts, mode), 4, 0, NULL },
		{ "--mode", "pread", offsetof(struct topts, mode), 4, 2, NULL },
		{ "--mode", "PREAD", offsetof(struct topts, mode), 4, 0,
		  "(one of auto, buffered or pread)" },
		{ "--mode", "buf", offsetof(struct topts, mode), 4, 0, "(one of" },
		{ "--mode", "", offsetof(struct topts, mode), 4, 0, "(one of" },
		{ "--file", "x", offsetof(struct topts, path), 'p', 0, NULL },
		{ "--file", "", offsetof(struct topts, path), 'p', 0, "(a path, not empty)" },
		{ "--agree", "yes", offsetof(struct topts, yes), 4, 1, NULL },
		{ "--agree", "no", offsetof(struct topts, yes), 4, 0, "(the word yes)" },
	};
	struct topts o, def;

	(void)state;
	assert_int_equal(parse_words(&ttable, (const char *const[]){ NULL }, &def, NULL, 0, NULL,
				     0), 1);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *words[] = { cases[i].opt, cases[i].value, NULL };
		char err[512], want[256];
		int ret = parse_words(&ttable, words, &o, err, sizeof(err), NULL, 0);
		const char *t = (const char *)&o + cases[i].off;
		const char *d = (const char *)&def + cases[i].off;
		size_t size = cases[i].size == 'd' ? sizeof(double) : cases[i].size == 'p' ?
			      sizeof(char *) : (size_t)cases[i].size;

		if (!cases[i].why) {
			double got = cases[i].size == 4 ? (double)*(const unsigned *)t :
				     cases[i].size == 8 ? (double)*(const uint64_t *)t :
				     cases[i].size == 'd' ? *(const double *)t : 0;
			if (ret != 3 || err[0])
				fail_msg("%s %s: refused (%d): %s", cases[i].opt, cases[i].value, ret,
					 err);
			if (cases[i].size == 'p' ? strcmp(*(const char *const *)t, cases[i].value) :
			    got != cases[i].want)
				fail_msg("%s %s: got %g, expected %g", cases[i].opt, cases[i].value,
					 got, cases[i].want);
			continue;
		}
		snprintf(want, sizeof(want), "tprog: %s: bad value '%s' %s", cases[i].opt,
			 cases[i].value, cases[i].why);
		if (ret != -EINVAL || !strstr(err, want))
			fail_msg("%s %s: returned %d, said \"%s\", expected \"%s\"", cases[i].opt,
				 cases[i].value, ret, err, want);
		if (memcmp(t, d, size))
			fail_msg("%s %s: refused, but the target changed", cases[i].opt,
				 cases[i].value);
	}
}

/* --name=value, unique prefixes, short names, a later occurrence winning; the table parses again
 * from the start on a second call (getopt's state reset). */
static void test_args_table_spellings(void **state)
{
	struct topts o;

	(void)state;
	assert_int_equal(parse_words(&ttable, (const char *const[]){ "--count=9", "--sha", "50",
				     "-c", "3", "--count", "5", NULL }, &o, NULL, 0, NULL, 0), 8);
	assert_int_equal(o.u, 5);
	assert_int_equal(o.pct, 50);
	assert_int_equal(parse_words(&ttable, (const char *const[]){ "-c3", NULL }, &o, NULL, 0,
				     NULL, 0), 2);
	assert_int_equal(o.u, 3);
}

/* Usage errors: each says what is wrong, names the word and returns -EINVAL. */
static void test_args_table_usage_errors(void **state)
{
	static const struct { const char *words[4]; const char *says; } cases[] = {
		{ { "--nope", "1", NULL }, "tprog: --nope: no such option" },
		{ { "--s", "1", NULL }, "tprog: --s: no such option, or not a unique prefix" },
		{ { "-x", NULL }, "tprog: -x: no such option" },
		{ { "--count", NULL }, "tprog: --count: needs a value" },
		{ { "-c", NULL }, "tprog: -c: needs a value" },
		{ { "--count", "3", "extra", NULL }, "tprog: unexpected argument 'extra'" },
		{ { "--help=x", NULL }, "tprog: --help=x: takes no value" },
	};
	struct topts o;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[512];
		int ret = parse_words(&ttable, cases[i].words, &o, err, sizeof(err), NULL, 0);
		if (ret != -EINVAL || !strstr(err, cases[i].says))
			fail_msg("case %zu: returned %d, said \"%s\", expected \"%s\"", i, ret, err,
				 cases[i].says);
	}
}

/* A table that takes operands returns the first one's index. */
static void test_args_table_operands(void **state)
{
	struct arg_table t = ttable;
	struct topts o;

	(void)state;
	t.operands = 1;
	assert_int_equal(parse_words(&t, (const char *const[]){ "--count", "3", "a.dpk", NULL }, &o,
				     NULL, 0, NULL, 0), 3);
	assert_int_equal(o.u, 3);
}

/* --help: -ECANCELED, on stdout, every row with its value's name, range and default (the caller's
 * chosen value for a def_doc row), wrapped within 100 columns. */
static void test_args_table_help_lists_every_row(void **state)
{
	static const char *const want[] = {
		"usage: tprog [options]\n", "\nkinds:\n", "  -c, --count N ", "(2..10; default 4)",
		"--big N ", "(0..1099511627776; default 0)", "--size BYTES ",
		"(1..64M, suffix K, M, G or T; default 1M)", "--share PERCENT ",
		"(1..100 percent; default 100)", "--every SECONDS ", "(0.1..5; default 0.5)",
		"--mode MODE ", "(one of auto, buffered or pread; default buffered)", "--file PATH ",
		"a file (default: none)", "--agree N ", "(the word yes; default: no)", "--chosen N ",
		"(1..99; default: the host's, here 7)", "  -h, --help ", "Exit status: 0.\n",
	};
	char out[8192];
	struct topts o;

	(void)state;
	assert_int_equal(parse_words(&ttable, (const char *const[]){ "--help", NULL }, &o, NULL, 0,
				     out, sizeof(out)), -ECANCELED);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!strstr(out, want[i]))
			fail_msg("--help lacks \"%s\":\n%s", want[i], out);
	for (const char *line = out; *line;) {
		size_t len = strcspn(line, "\n");
		if (len >= 100)
			fail_msg("a --help line of %zu columns: %.*s", len, (int)len, line);
		line += len + (line[len] == '\n');
	}
	/* the long help text was wrapped onto lines of its own, at the help column */
	assert_non_null(strstr(out, "\n                       "));
	/* -h too */
	assert_int_equal(parse_words(&ttable, (const char *const[]){ "-h", NULL }, &o, NULL, 0,
				     out, sizeof(out)), -ECANCELED);
	assert_non_null(strstr(out, "--chosen N"));
}

static void test_args_fmt_bytes_exact_units(void **state)
{
	static const struct { uint64_t v; const char *s; } cases[] = {
		{ 0, "0" }, { 1, "1" }, { 1023, "1023" }, { 1024, "1K" }, { 1025, "1025" },
		{ 1536, "1536" }, { 1536ull << 10, "1536K" },
		{ 64ull << 20, "64M" }, { (64ull << 20) + 1024, "65537K" }, { 1ull << 40, "1T" },
		{ 1ull << 50, "1024T" }, { UINT64_MAX, "18446744073709551615" },
	};
	char buf[32];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		arg_fmt_bytes(buf, sizeof(buf), cases[i].v);
		if (strcmp(buf, cases[i].s))
			fail_msg("arg_fmt_bytes(%llu) = \"%s\", expected \"%s\"",
				 (unsigned long long)cases[i].v, buf, cases[i].s);
		/* and arg_bytes reads it back */
		uint64_t back = 0;
		assert_int_equal(arg_bytes(buf, 0, UINT64_MAX, &back), 0);
		assert_true(back == cases[i].v);
	}
}

/* A flag: 0 unless given, 1 when given (also twice), and a value for it is refused by name. */
static void test_args_table_flag(void **state)
{
	static const struct arg_opt rows[] = {
		{ "fixed", 0, ARG_FLAG, TAT(yes, int), .def_doc = "off", .help = "a flag" },
		{ "n", 0, ARG_UINT, TAT(u, unsigned), .lo = 1, .hi = 9, .def = "3",
		  .help = "a count" },
	};
	static const struct arg_table t = { .prog = "fprog", .intro = "usage: fprog\n",
					    .opts = rows, .n_opts = 2 };
	const char *const none[] = { "--n", "4", NULL }, *const given[] = { "--fixed", NULL },
		   *const twice[] = { "--fixed", "--n", "5", "--fixed", NULL },
		   *const valued[] = { "--fixed=1", NULL };
	struct topts o;
	char err[512];

	(void)state;
		assert_int_equal(parse_words(&t, none, &o, err, sizeof(err), NULL, 0), 3);
	assert_int_equal(o.yes, 0);
	assert_int_equal(o.u, 4);
		assert_int_equal(parse_words(&t, given, &o, err, sizeof(err), NULL, 0), 2);
	assert_int_equal(o.yes, 1);
	assert_int_equal(o.u, 3);
		assert_int_equal(parse_words(&t, twice, &o, err, sizeof(err), NULL, 0), 5);
	assert_int_equal(o.yes, 1);
	assert_int_equal(o.u, 5);
		assert_int_equal(parse_words(&t, valued, &o, err, sizeof(err), NULL, 0), -EINVAL);
	assert_int_equal(o.yes, 0);
	assert_non_null(strstr(err, "--fixed=1: takes no value"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_args_u64_valid_and_bounds),
		cmocka_unit_test(test_args_u64_garbage_refused),
		cmocka_unit_test(test_args_u64_overflow_refused),
		cmocka_unit_test(test_args_uint_bounds_and_overflow),
		cmocka_unit_test(test_args_bytes_suffixes),
		cmocka_unit_test(test_args_bytes_garbage_bounds_overflow),
		cmocka_unit_test(test_args_double_valid_bounds_garbage),
		cmocka_unit_test(test_args_size2_forms_and_limits),
		cmocka_unit_test(test_args_bad_value_names_option_and_value),
		cmocka_unit_test(test_args_table_defaults_applied),
		cmocka_unit_test(test_args_table_each_kind_at_bounds),
		cmocka_unit_test(test_args_table_flag),
		cmocka_unit_test(test_args_table_spellings),
		cmocka_unit_test(test_args_table_usage_errors),
		cmocka_unit_test(test_args_table_operands),
		cmocka_unit_test(test_args_table_help_lists_every_row),
		cmocka_unit_test(test_args_fmt_bytes_exact_units),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
