/* test_ctl_shard_list.c - the CTL_SHARD_WANT / CTL_SHARD_DROP body (shm/ctl.c,
 * ctl_check_shard_list) as hostile input: a list of CTL_SHARD_LIST_MAX indices is taken and one
 * more refused, an index at the set's last shard taken and one at its count refused, a shard named
 * twice (anywhere in the list), a set reserved field, a length one short or one long of what the
 * count says, and a body shorter than its head are refused, each naming the field. And one shard
 * delivered on a stream (ctl_check_shard_one): its index at the set's last shard taken and at its
 * count refused, a total other than the set's, 0 or past CTL_SHARDS_MAX refused (any total up to
 * it taken while the set's is not known), a count or a number of descriptors other than 1, a set
 * reserved field and a body of another length refused. */
#include "shm/ctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

/* A body of @n indices i * @step (mod @total) into @buf; its length. */
static size_t list(uint32_t *buf, uint32_t n, uint32_t total, uint32_t step)
{
	struct ctl_shard_list h = { .count = n };
	memcpy(buf, &h, sizeof(h));
	for (uint32_t i = 0; i < n; i++)
		buf[2 + i] = (i * step) % total;
	return sizeof(h) + (size_t)n * 4u;
}

static int check(const void *b, size_t len, uint32_t total, char *why)
{
	const uint32_t *idx = NULL;
	uint32_t count = 12345;
	int ret = ctl_check_shard_list(b, len, total, &idx, &count, why, CTL_TEXT_MAX);
	if (ret == 0) {
		assert_ptr_equal(idx, (const uint32_t *)b + 2);
		assert_int_equal(count, ((const uint32_t *)b)[0]);
	}
	return ret;
}

static int one(uint32_t first, uint32_t total, uint32_t count, uint32_t reserved, size_t len,
	       int nfds, uint32_t set, uint32_t *k)
{
	struct ctl_shard_fds b = { first, total, count, reserved };
	char buf[sizeof(b) + 1] = { 0 }, why[CTL_TEXT_MAX] = "";
	uint32_t said = 0;
	memcpy(buf, &b, sizeof(b));
	*k = 99999;
	int ret = ctl_check_shard_one(buf, len, nfds, set, k, &said, why, sizeof(why));
	if (ret == 0)
		assert_int_equal(said, total);
	else
		assert_true(why[0] != '\0');
	return ret;
}

static void test_one_shard(void **state)
{
	(void)state;
	uint32_t k;
	const size_t L = sizeof(struct ctl_shard_fds);

	assert_int_equal(one(7, 8, 1, 0, L, 1, 8, &k), 0);
	assert_int_equal(k, 7);
	assert_int_equal(one(8, 8, 1, 0, L, 1, 8, &k), -EINVAL);          /* index at the count */
	assert_int_equal(one(0, 9, 1, 0, L, 1, 8, &k), -EINVAL);          /* another set's total */
	assert_int_equal(one(0, CTL_SHARDS_MAX, 1, 0, L, 1, 0, &k), 0);   /* the open: any total */
	assert_int_equal(one(0, CTL_SHARDS_MAX + 1, 1, 0, L, 1, 0, &k), -EINVAL);
	assert_int_equal(one(0, 0, 1, 0, L, 1, 0, &k), -EINVAL);
	assert_int_equal(one(0, 8, 0, 0, L, 1, 8, &k), -EINVAL);          /* count 0, 2 */
	assert_int_equal(one(0, 8, 2, 0, L, 1, 8, &k), -EINVAL);
	assert_int_equal(one(0, 8, 1, 0, L, 0, 8, &k), -EINVAL);          /* descriptors 0, 2 */
	assert_int_equal(one(0, 8, 1, 0, L, 2, 8, &k), -EINVAL);
	assert_int_equal(one(0, 8, 1, 1, L, 1, 8, &k), -EINVAL);          /* reserved */
	assert_int_equal(one(0, 8, 1, 0, L - 1, 1, 8, &k), -EINVAL);      /* length */
	assert_int_equal(one(0, 8, 1, 0, L + 1, 1, 8, &k), -EINVAL);
}

static void test_count_at_and_past_the_max(void **state)
{
	uint32_t buf[CTL_MSG_MAX / 4 + 4];
	char why[CTL_TEXT_MAX];
	(void)state;
	assert_true(sizeof(struct ctl_hdr) + list(buf, CTL_SHARD_LIST_MAX, 65536, 1) <= CTL_MSG_MAX);
	assert_int_equal(check(buf, list(buf, CTL_SHARD_LIST_MAX, 65536, 1), 65536, why), 0);
	size_t n = list(buf, CTL_SHARD_LIST_MAX + 1, 65536, 1);
	assert_int_equal(check(buf, n, 65536, why), -EINVAL);
	assert_non_null(strstr(why, "count 1001, above CTL_SHARD_LIST_MAX (1000)"));
	/* an empty list is a list (nothing wanted) */
	assert_int_equal(check(buf, list(buf, 0, 1, 1), 1, why), 0);
}

static void test_index_at_and_past_the_set(void **state)
{
	uint32_t buf[16];
	char why[CTL_TEXT_MAX];
	(void)state;
	size_t n = list(buf, 3, 8, 1);
	buf[2 + 2] = 7;  /* the last shard of 8 */
	assert_int_equal(check(buf, n, 8, why), 0);
	buf[2 + 2] = 8;
	assert_int_equal(check(buf, n, 8, why), -EINVAL);
	assert_non_null(strstr(why, "index 2 is shard 8: the set has 8 shards"));
	buf[2 + 2] = UINT32_MAX;
	assert_int_equal(check(buf, n, 8, why), -EINVAL);
	assert_non_null(strstr(why, "is shard 4294967295"));
}

static void test_a_shard_twice(void **state)
{
	uint32_t buf[CTL_MSG_MAX / 4];
	char why[CTL_TEXT_MAX];
	(void)state;
	/* first and last of a full list: the sort finds them however far apart */
	size_t n = list(buf, CTL_SHARD_LIST_MAX, 65536, 3);
	assert_int_equal(check(buf, n, 65536, why), 0);
	buf[2 + CTL_SHARD_LIST_MAX - 1] = buf[2];
	assert_int_equal(check(buf, n, 65536, why), -EINVAL);
	assert_non_null(strstr(why, "names shard 0 twice"));
	n = list(buf, 2, 4, 1);
	buf[3] = buf[2] = 3;
	assert_int_equal(check(buf, n, 4, why), -EINVAL);
	assert_non_null(strstr(why, "names shard 3 twice"));
}

static void test_reserved_and_lengths(void **state)
{
	uint32_t buf[16];
	char why[CTL_TEXT_MAX];
	(void)state;
	size_t n = list(buf, 3, 8, 1);
	buf[1] = 1;
	assert_int_equal(check(buf, n, 8, why), -EINVAL);
	assert_non_null(strstr(why, "reserved field set (1)"));
	buf[1] = 0;
	assert_int_equal(check(buf, n, 8, why), 0);
	assert_int_equal(check(buf, n - 1, 8, why), -EINVAL);
	assert_non_null(strstr(why, "of 19 bytes whose count 3 says 20"));
	assert_int_equal(check(buf, n + 1, 8, why), -EINVAL);
	assert_non_null(strstr(why, "of 21 bytes whose count 3 says 20"));
	assert_int_equal(check(buf, 7, 8, why), -EINVAL);
	assert_non_null(strstr(why, "of 7 bytes, shorter than its 8-byte head"));
	assert_int_equal(check(buf, 0, 8, why), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_shard),
		cmocka_unit_test(test_count_at_and_past_the_max),
		cmocka_unit_test(test_index_at_and_past_the_set),
		cmocka_unit_test(test_a_shard_twice),
		cmocka_unit_test(test_reserved_and_lengths),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
