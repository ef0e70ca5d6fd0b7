/* test_jsonf.c - formats/jsonf.c (json-c), the value of a top-level key of a JSON object (dpack
 * --field NAME=json:KEY): strings unescaped (every escape, \u to UTF-8 of 1..4 bytes, surrogate
 * pairs, a lone surrogate as U+FFFD, bytes that are not UTF-8 kept), other values as json-c writes
 * them, nested keys of the same name not taken, the last of two members, nesting at its bound
 * and one past, and what is not one JSON object refused. */
#include "formats/jsonf.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

struct row {
	const char *json;
	size_t len;           /* 0: strlen */
	const char *key;
	int ret;
	const char *want;     /* when found */
	size_t want_len;      /* 0: strlen(want) */
};

#define S(x) x, sizeof(x) - 1
static const struct row rows[] = {
	{ "{\"caption\": \"a cat\"}", 0, "caption", 1, "a cat", 0 },
	{ "  {\"a\":1,\"caption\" :\t\"x\"\n}", 0, "caption", 1, "x", 0 },
	{ "{\"c\": \"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}", 0, "c", 1, "\"\\/\b\f\n\r\t", 0 },
	{ "{\"c\": \"\\u0041\\u00e9\\u2603\"}", 0, "c", 1, "A\xc3\xa9\xe2\x98\x83", 0 },
	{ "{\"c\": \"\\ud83d\\ude00\"}", 0, "c", 1, "\xf0\x9f\x98\x80", 0 },
	{ "{\"c\": \"\\ud83d x\"}", 0, "c", 1, "\xef\xbf\xbd x", 0 },   /* a lone surrogate: U+FFFD */
	{ S("{\"c\": \"\xff\xfe\"}"), "c", 1, "\xff\xfe", 0 },
	{ "{\"c\": \"\"}", 0, "c", 1, "", 0 },
	{ "{\"n\": -12.5e3, \"c\": 1}", 0, "n", 1, "-12.5e3", 0 },
	{ "{\"o\": {\"c\": [1, \"]\"]}, \"c\": true}", 0, "o", 1, "{\"c\":[1,\"]\"]}", 0 },
	{ "{\"o\": {\"c\": \"inner\"}, \"c\": null}", 0, "c", 1, "null", 0 },
	{ "{\"o\": {\"c\": \"inner\"}}", 0, "c", 0, NULL, 0 },            /* nested: not top level */
	{ "{\"c\": \"first\", \"c\": \"second\"}", 0, "c", 1, "second", 0 },
	{ "{\"cap\": \"x\"}", 0, "c", 0, NULL, 0 },
	{ "{}", 0, "c", 0, NULL, 0 },
	{ "[\"c\", 1]", 0, "c", -EBADMSG, NULL, 0 },
	{ "", 0, "c", -EBADMSG, NULL, 0 },
	{ "{\"c\": \"open", 0, "c", -EBADMSG, NULL, 0 },
	{ "{\"c\": \"bad \\x\"}", 0, "c", -EBADMSG, NULL, 0 },
	{ "{\"c\": \"\\u12g4\"}", 0, "c", -EBADMSG, NULL, 0 },
	{ "{\"a\": }", 0, "c", -EBADMSG, NULL, 0 },
	{ "{\"a\" 1}", 0, "c", -EBADMSG, NULL, 0 },
	{ "{\"a\": [1, 2}", 0, "c", -EBADMSG, NULL, 0 },
	{ "{\"a\": 1", 0, "c", -EBADMSG, NULL, 0 },
	{ S("{\"a\": 1, \"c\": \"x\0y\"}"), "c", -EBADMSG, NULL, 0 },   /* a raw NUL: not JSON */
	{ "{\"a\": 1, \"c\": \"x\\u0000y\"}", 0, "c", 1, "x\0y", 3 },      /* an escaped one */
	{ "{\"c\": 1} x", 0, "c", -EBADMSG, NULL, 0 },                /* text after the object */
	{ "{\"c\": 1} \n", 0, "c", 1, "1", 0 },                       /* white space after it */
};

static void test_jsonf_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		uint8_t *v = NULL;
		uint32_t n = 0;
		size_t len = r->len ? r->len : strlen(r->json);
		int ret = jsonf_get((const uint8_t *)r->json, len, r->key, &v, &n);
		if (ret != r->ret)
			fail_msg("row %zu (%s): %d, expected %d", i, r->json, ret, r->ret);
		if (ret == 1) {
			size_t wl = r->want_len ? r->want_len : strlen(r->want);
			if (n != wl || memcmp(v, r->want, wl))
				fail_msg("row %zu (%s): got %u bytes \"%.*s\"", i, r->json, n, (int)n, v);
		}
		free(v);
	}
}

/* {"a": [[...]], "c": "ok"} with @depth brackets: jsonf_get's answer for "c". */
static int nested(size_t depth)
{
	size_t n = 0;
	char *j = malloc(2 * depth + 32);
	uint8_t *v = NULL;
	uint32_t vl = 0;

	assert_non_null(j);
	n += (size_t)sprintf(j, "{\"a\": ");
	memset(j + n, '[', depth);
	n += depth;
	memset(j + n, ']', depth);
	n += depth;
	n += (size_t)sprintf(j + n, ", \"c\": \"ok\"}");
	int ret = jsonf_get((const uint8_t *)j, n, "c", &v, &vl);
	if (ret == 1)
		assert_int_equal(vl, 2);
	free(v);
	free(j);
	return ret;
}

/* Nesting is bounded: 63 arrays inside the object (64 levels) are read, one more is refused,
 * and 100,000 are refused without a deep recursion. */
static void test_jsonf_deep_nesting(void **state)
{
	(void)state;
	assert_int_equal(nested(1), 1);
	assert_int_equal(nested(63), 1);
	assert_int_equal(nested(64), -EBADMSG);
	assert_int_equal(nested(100000), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jsonf_table),
		cmocka_unit_test(test_jsonf_deep_nesting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
