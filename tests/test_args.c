/* test_args.c - common/args.c: every parser takes the spellings it documents and refuses empty,
 * signed, spaced, junk-suffixed, out-of-range and overflowing values without writing *out. */
#include "common/args.h"

#include <errno.h>
#include <getopt.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
