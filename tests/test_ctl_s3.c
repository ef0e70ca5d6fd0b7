/* test_ctl_s3.c - the CTL_S3_OPEN body (shm/ctl.c, ctl_check_s3_open) as hostile input: each
 * string at its length limit is taken and one past it refused naming the field; lengths that do
 * not add up to the body, a set reserved field, bytes that are not printable ASCII, a URL that is
 * not s3:// and an endpoint that is neither http:// nor https:// are refused; no refusal quotes
 * a credential. Table-driven. */
#include "shm/ctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

/* Build a body from six strings of the given lengths (filled with @fill after the prefix). */
static size_t body(char *out, const char *const pre[6], const size_t len[6], char fill)
{
	struct ctl_s3_open h = { 0 };
	uint16_t *l[6] = { &h.url_len, &h.endpoint_len, &h.region_len, &h.access_len,
			   &h.secret_len, &h.token_len };
	size_t off = sizeof(h);
	for (int i = 0; i < 6; i++) {
		size_t p = strlen(pre[i]) < len[i] ? strlen(pre[i]) : len[i];
		memcpy(out + off, pre[i], p);
		memset(out + off + p, fill, len[i] - p);
		*l[i] = (uint16_t)len[i];
		off += len[i];
	}
	memcpy(out, &h, sizeof(h));
	return off;
}

static const char *const PRE[6] = { "s3://bkt/k", "http://127.0.0.1:9", "us-east-1", "AKIA",
				    "SECRETSECRET", "" };

static void test_ctl_s3_open_lengths_at_and_past_their_limits(void **state)
{
	static const struct {
		int field;
		size_t ok, bad;       /* the length at the limit, and one past it */
		const char *needle;
	} rows[] = {
		{ 0, CTL_S3_URL_MAX, CTL_S3_URL_MAX + 1, "url is 1024 bytes (6..1023)" },
		{ 0, 6, 5, "url is 5 bytes (6..1023)" },
		{ 1, CTL_S3_ENDPOINT_MAX, CTL_S3_ENDPOINT_MAX + 1, "endpoint is 513 bytes" },
		{ 2, CTL_S3_REGION_MAX, CTL_S3_REGION_MAX + 1, "region is 65 bytes" },
		{ 2, 1, 0, "region is 0 bytes" },
		{ 3, CTL_S3_KEY_MAX, CTL_S3_KEY_MAX + 1, "access key id is 129 bytes" },
		{ 4, CTL_S3_KEY_MAX, CTL_S3_KEY_MAX + 1, "secret key is 129 bytes" },
		{ 4, 1, 0, "secret key is 0 bytes" },
		{ 5, CTL_S3_TOKEN_MAX, CTL_S3_TOKEN_MAX + 1, "session token is 2049 bytes" },
	};
	char buf[CTL_MSG_MAX * 2], why[CTL_TEXT_MAX];
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		size_t len[6] = { 10, 18, 9, 4, 12, 0 };
		len[rows[r].field] = rows[r].ok;
		size_t n = body(buf, PRE, len, 'a');
		why[0] = '\0';
		assert_int_equal(ctl_check_s3_open(buf, n, why, sizeof(why)), 0);
		len[rows[r].field] = rows[r].bad;
		n = body(buf, PRE, len, 'a');
		assert_int_equal(ctl_check_s3_open(buf, n, why, sizeof(why)), -EINVAL);
		if (!strstr(why, rows[r].needle))
			fail_msg("row %zu: '%s' lacks '%s'", r, why, rows[r].needle);
		assert_null(strstr(why, "SECRET"));
	}
}

static void test_ctl_s3_open_junk_refused_naming_it(void **state)
{
	char buf[CTL_MSG_MAX], why[CTL_TEXT_MAX];
	const size_t len[6] = { 10, 18, 9, 4, 12, 0 };
	size_t n = body(buf, PRE, len, 'a');
	struct ctl_s3_open h;
	(void)state;

	assert_int_equal(ctl_check_s3_open(buf, n, why, sizeof(why)), 0);
	/* one byte more or less than the lengths say */
	assert_int_equal(ctl_check_s3_open(buf, n + 1, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "add up"));
	assert_int_equal(ctl_check_s3_open(buf, n - 1, why, sizeof(why)), -EINVAL);
	assert_int_equal(ctl_check_s3_open(buf, sizeof(h) - 1, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "header"));
	/* reserved */
	memcpy(&h, buf, sizeof(h));
	h.reserved = 1;
	memcpy(buf, &h, sizeof(h));
	assert_int_equal(ctl_check_s3_open(buf, n, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "reserved"));
	/* a control byte in the secret, a space in the key id (the URL's may be one) */
	static const struct {
		size_t at;
		char c;
		const char *needle;   /* NULL: taken */
	} bytes[] = {
		{ 16 + 10 + 18 + 9 + 4 + 3, '\n', "secret key holds a byte" },
		{ 16 + 10 + 18 + 9 + 1, ' ', "access key id holds a byte" },
		{ 16 + 10 + 18 + 9 + 4 + 3, (char)0x80, "secret key holds a byte" },
		{ 16 + 8, ' ', NULL },
		{ 16 + 8, '\0', "url holds a byte" },
	};
	for (size_t i = 0; i < sizeof(bytes) / sizeof(bytes[0]); i++) {
		n = body(buf, PRE, len, 'a');
		buf[bytes[i].at] = bytes[i].c;
		int ret = ctl_check_s3_open(buf, n, why, sizeof(why));
		if (!bytes[i].needle) {
			assert_int_equal(ret, 0);
			continue;
		}
		assert_int_equal(ret, -EINVAL);
		if (!strstr(why, bytes[i].needle))
			fail_msg("byte %zu: '%s' lacks '%s'", i, why, bytes[i].needle);
	}
	/* not s3://, not http(s):// */
	const char *bad_url[6] = { "s4://bkt/k", PRE[1], PRE[2], PRE[3], PRE[4], PRE[5] };
	n = body(buf, bad_url, len, 'a');
	assert_int_equal(ctl_check_s3_open(buf, n, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "s3://"));
	const char *bad_ep[6] = { PRE[0], "file:///etc/passwd", PRE[2], PRE[3], PRE[4], PRE[5] };
	n = body(buf, bad_ep, len, 'a');
	assert_int_equal(ctl_check_s3_open(buf, n, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "endpoint is neither"));
	const char *https[6] = { PRE[0], "https://s3.example", PRE[2], PRE[3], PRE[4], PRE[5] };
	n = body(buf, https, len, 'a');
	assert_int_equal(ctl_check_s3_open(buf, n, why, sizeof(why)), 0);
}

/* The node cache's endpoints (loaderd --cache-endpoints): listed ones only, spelled as the
 * operator may (case, a trailing slash), never a longer or shorter host or port; by default
 * AWS's, a region of 1..32 characters. */
static void test_ctl_s3_endpoint_listed(void **state)
{
	static const struct {
		const char *list, *ep;
		int want;
	} rows[] = {
		{ "http://10.0.0.5:9000", "http://10.0.0.5:9000", 1 },
		{ "http://10.0.0.5:9000", "http://10.0.0.5:9000/", 1 },
		{ "http://10.0.0.5:9000/", "HTTP://10.0.0.5:9000", 1 },
		{ "http://10.0.0.5:9000", "http://10.0.0.5:900", 0 },
		{ "http://10.0.0.5:9000", "http://10.0.0.5:90001", 0 },
		{ "http://10.0.0.5:9000", "https://10.0.0.5:9000", 0 },
		{ "http://10.0.0.5:9000", "http://10.0.0.5:9000/x", 0 },
		{ "http://a:1,https://minio.example", "https://minio.example", 1 },
		{ "http://a:1,https://minio.example", "http://a:1", 1 },
		{ "http://a:1,https://minio.example", "http://a", 0 },
		{ "http://a:1,https://minio.example", "https://minio.example.evil", 0 },
		{ NULL, "https://s3.amazonaws.com", 1 },
		{ NULL, "https://s3.amazonaws.com/", 1 },
		{ NULL, "https://s3.eu-west-1.amazonaws.com", 1 },
		{ NULL, "https://s3.a.amazonaws.com", 1 },
		{ NULL, "https://s3.abcdefghijklmnopqrstuvwxyz012345.amazonaws.com", 1 }, /* 32 */
		{ NULL, "https://s3.abcdefghijklmnopqrstuvwxyz0123456.amazonaws.com", 0 }, /* 33 */
		{ NULL, "https://s3..amazonaws.com", 0 },
		{ NULL, "http://s3.amazonaws.com", 0 },
		{ NULL, "https://s3.amazonaws.com.evil.example", 0 },
		{ NULL, "https://s3.x.y.amazonaws.com", 0 },
		{ NULL, "https://s3.evil/x.amazonaws.com", 0 },
		{ NULL, "http://169.254.169.254", 0 },
		{ NULL, "http://127.0.0.1:9000", 0 },
	};
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++)
		if (ctl_s3_endpoint_listed(rows[r].list, rows[r].ep, strlen(rows[r].ep)) !=
		    rows[r].want)
			fail_msg("row %zu: %s in %s: want %d", r, rows[r].ep,
				 rows[r].list ? rows[r].list : "(AWS's)", rows[r].want);
}

static void test_ctl_s3_endpoints_check(void **state)
{
	static const struct {
		const char *list, *needle;  /* NULL needle: taken */
	} rows[] = {
		{ "http://10.0.0.5:9000", NULL },
		{ "HTTPS://minio.example/,http://[::1]:9000", NULL },
		{ "", "an empty list" },
		{ "ftp://h", "'ftp://h' is neither" },
		{ "http://", "is not http(s)://HOST[:PORT]" },
		{ "http://h/path", "is not http(s)://HOST[:PORT]" },
		{ "http://u@h", "is not http(s)://HOST[:PORT]" },
		{ "http://h?q", "is not http(s)://HOST[:PORT]" },
		{ "http://h,", "ends on a comma" },
		{ "http://h,,http://g", "'' is neither" },
	};
	char why[CTL_TEXT_MAX], big[CTL_S3_ENDPOINT_MAX + 16];
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		why[0] = '\0';
		int ret = ctl_s3_endpoints_check(rows[r].list, why, sizeof(why));
		if (!rows[r].needle ? ret != 0 : ret != -EINVAL || !strstr(why, rows[r].needle))
			fail_msg("row %zu '%s': %d '%s'", r, rows[r].list, ret, why);
	}
	/* an entry at the endpoint's length limit, and one past it */
	memcpy(big, "http://", 7);
	memset(big + 7, 'h', CTL_S3_ENDPOINT_MAX - 7);
	big[CTL_S3_ENDPOINT_MAX] = '\0';
	assert_int_equal(ctl_s3_endpoints_check(big, why, sizeof(why)), 0);
	big[CTL_S3_ENDPOINT_MAX] = 'h';
	big[CTL_S3_ENDPOINT_MAX + 1] = '\0';
	assert_int_equal(ctl_s3_endpoints_check(big, why, sizeof(why)), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ctl_s3_open_lengths_at_and_past_their_limits),
		cmocka_unit_test(test_ctl_s3_open_junk_refused_naming_it),
		cmocka_unit_test(test_ctl_s3_endpoint_listed),
		cmocka_unit_test(test_ctl_s3_endpoints_check),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
