/* test_trn_ckpt.c - the trainer's checkpoint files (trainer/ckpt.c): a save loads back byte for
 * byte; the newest is the one loaded and only the newest two are kept; an empty or missing
 * directory has none; an interrupted save's temporary file is not a checkpoint; a truncated,
 * damaged, foreign or other-version file is refused with the file and the fault named. A split
 * seed (version 2) of TRN_CKPT_SPLIT_MAX bytes loads back byte for byte, one more is refused, a
 * damaged one fails the checksum; a version 1 file (no seed) still loads, one that claims a
 * seed is corrupt. */
#include "trainer/ckpt.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <xxhash.h>
#include "tests/tmpdir.h"

#define N 1000

static char dir[64];
static float params[N], mom[N];
static uint8_t token[LDC_TOKEN_SIZE];

static int setup(void **state)
{
	(void)state;
	for (int i = 0; i < N; i++)
		params[i] = (float)i * 0.5f - 7, mom[i] = (float)i * -0.25f;
	for (unsigned i = 0; i < LDC_TOKEN_SIZE; i++)
		token[i] = (uint8_t)(i * 7);
	return tmpdir_create(dir, sizeof(dir), "test_trn_ckpt");
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

static void save(uint64_t step)
{
	struct trn_ckpt c = { .step = step, .world = 2, .seed = 9, .n = N, .token = token,
			      .token_len = LDC_TOKEN_SIZE, .params = params, .mom = mom };
	char path[4096], why[4352];

	if (trn_ckpt_save(dir, &c, path, sizeof(path), why, sizeof(why)) < 0)
		fail_msg("save: %s", why);
}

/* Load the newest: expect @ret and, for an error, @needle in the reason. */
static int load(int ret, const char *needle, struct trn_ckpt *c)
{
	uint8_t tok[LDC_TOKEN_SIZE];
	char path[4096], why[4352] = "";
	int r = trn_ckpt_load_newest(dir, c, tok, path, sizeof(path), why, sizeof(why));

	if (r != ret || (needle && !strstr(why, needle)))
		fail_msg("expected %d with '%s'; got %d: '%s'", ret, needle ? needle : "", r, why);
	if (r == 1)  /* the token as saved (before version 3: its first LDC_TOKEN_SIZE_V1 bytes) */
		assert_memory_equal(c->token, token, c->token_len);
	if (r == 1)
		c->token = NULL;  /* it pointed into tok */
	return r;
}

/* The path of step @step's file. */
static const char *file_of(uint64_t step)
{
	static char p[128];

	snprintf(p, sizeof(p), "%s/ckpt-%016llu.ldck", dir, (unsigned long long)step);
	return p;
}

static void patch(uint64_t step, long off, const void *bytes, size_t n)
{
	FILE *f = fopen(file_of(step), "r+b");

	assert_non_null(f);
	assert_int_equal(fseek(f, off, SEEK_SET), 0);
	assert_int_equal(fwrite(bytes, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static void test_ckpt_save_load_roundtrip(void **state)
{
	(void)state;
	struct trn_ckpt c;

	save(12);
	load(1, NULL, &c);
	assert_int_equal(c.step, 12);
	assert_int_equal(c.world, 2);
	assert_int_equal(c.seed, 9);
	assert_int_equal(c.n, N);
	assert_int_equal(c.token_len, LDC_TOKEN_SIZE);
	assert_memory_equal(c.params, params, sizeof(params));
	assert_memory_equal(c.mom, mom, sizeof(mom));
	free(c.params);
	free(c.mom);
}

static void test_ckpt_none_in_empty_or_missing_dir(void **state)
{
	(void)state;
	struct trn_ckpt c;
	char missing[128];

	load(0, NULL, &c);
	snprintf(missing, sizeof(missing), "%s/nope", dir);
	uint8_t tok[LDC_TOKEN_SIZE];
	char path[4096], why[256];
	assert_int_equal(trn_ckpt_load_newest(missing, &c, tok, path, sizeof(path), why, sizeof(why)), 0);
}

static void test_ckpt_newest_loaded_two_kept(void **state)
{
	(void)state;
	struct trn_ckpt c;

	save(2);
	save(10);
	save(4);  /* names sort by step, not by time */
	save(6);
	assert_int_equal(access(file_of(2), F_OK), -1);
	assert_int_equal(access(file_of(4), F_OK), -1);
	assert_int_equal(access(file_of(6), F_OK), 0);
	assert_int_equal(access(file_of(10), F_OK), 0);
	load(1, NULL, &c);
	assert_int_equal(c.step, 10);
	free(c.params);
	free(c.mom);
}

static void test_ckpt_interrupted_save_is_not_a_checkpoint(void **state)
{
	(void)state;
	struct trn_ckpt c;
	char tmp[256];

	save(3);
	snprintf(tmp, sizeof(tmp), "%s.tmp.4242", file_of(99));
	FILE *f = fopen(tmp, "wb");
	assert_non_null(f);
	fputs("half a checkpoint", f);
	fclose(f);
	load(1, NULL, &c);
	assert_int_equal(c.step, 3);
	free(c.params);
	free(c.mom);
}

static void test_ckpt_damaged_refused(void **state)
{
	(void)state;
	struct trn_ckpt c;
	uint8_t x = 0x5a;
	uint32_t v = 7;
	uint64_t huge = 1ull << 40;

	save(5);
	patch(5, sizeof(struct trn_ckpt_hdr) + 100, &x, 1);  /* a parameter's byte */
	load(-EBADMSG, "ckpt-0000000000000005.ldck: checksum mismatch", &c);

	save(5);
	assert_int_equal(truncate(file_of(5), 4000), 0);
	load(-EBADMSG, "truncated or extended: 4000 bytes", &c);
	assert_int_equal(truncate(file_of(5), 10), 0);
	load(-EBADMSG, "truncated: 10 bytes", &c);

	save(5);
	patch(5, 8, &v, sizeof(v));
	load(-EPROTO, "checkpoint version 7", &c);

	save(5);
	patch(5, 0, "NOTACKPT", 8);
	load(-EBADMSG, "not a trainer checkpoint", &c);

	save(5);
	patch(5, offsetof(struct trn_ckpt_hdr, n), &huge, sizeof(huge));
	load(-EBADMSG, "corrupt header", &c);
}

static void save_split(uint64_t step, const uint8_t *split, uint32_t len, int ret)
{
	struct trn_ckpt c = { .step = step, .world = 2, .seed = 9, .n = N, .token = token,
			      .token_len = LDC_TOKEN_SIZE, .params = params, .mom = mom,
			      .split = split, .split_len = len };
	char path[4096], why[4352] = "";

	if (trn_ckpt_save(dir, &c, path, sizeof(path), why, sizeof(why)) != ret)
		fail_msg("save with a split seed of %u bytes: want %d: %s", len, ret, why);
}

/* Rewrite step @step's file as version @v with split_len @split_len, checksum made whole. Before
 * version 3 the header is TRN_CKPT_HDR_V2 bytes: the token's room ends 8 bytes sooner, and
 * token_len becomes @token_len. */
static void rewrite_old(uint64_t step, uint32_t v, uint32_t split_len, uint32_t token_len)
{
	FILE *f = fopen(file_of(step), "r+b");
	struct stat sb;

	assert_non_null(f);
	assert_int_equal(fstat(fileno(f), &sb), 0);
	uint8_t *b = malloc((size_t)sb.st_size);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
	size_t size = (size_t)sb.st_size;
	if (v < 3) {
		uint32_t hsz = TRN_CKPT_HDR_V2;
		memmove(b + hsz, b + sizeof(struct trn_ckpt_hdr), size - sizeof(struct trn_ckpt_hdr));
		size -= sizeof(struct trn_ckpt_hdr) - hsz;
		uint64_t fsz = size;
		memcpy(b + offsetof(struct trn_ckpt_hdr, hdr_size), &hsz, 4);
		memcpy(b + offsetof(struct trn_ckpt_hdr, file_size), &fsz, 8);
		memcpy(b + offsetof(struct trn_ckpt_hdr, token_len), &token_len, 4);
	}
	memcpy(b + offsetof(struct trn_ckpt_hdr, version), &v, 4);
	memcpy(b + offsetof(struct trn_ckpt_hdr, split_len), &split_len, 4);
	uint64_t sum = XXH3_64bits(b, size - 8);
	memcpy(b + size - 8, &sum, 8);
	fclose(f);
	f = fopen(file_of(step), "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, size, f), size);
	assert_int_equal(fclose(f), 0);
	free(b);
}

static void rewrite_as(uint64_t step, uint32_t v, uint32_t split_len)
{
	rewrite_old(step, v, split_len, LDC_TOKEN_SIZE_V1);
}

static void test_ckpt_split_seed_roundtrip_bounds_and_version_1(void **state)
{
	(void)state;
	struct trn_ckpt c;
	static uint8_t split[TRN_CKPT_SPLIT_MAX + 1];

	for (size_t i = 0; i < sizeof(split); i++)
		split[i] = (uint8_t)(i * 7 + 1);
	save_split(3, split, TRN_CKPT_SPLIT_MAX, 0);  /* exactly the limit */
	load(1, NULL, &c);
	assert_int_equal(c.split_len, TRN_CKPT_SPLIT_MAX);
	assert_memory_equal(c.split, split, TRN_CKPT_SPLIT_MAX);
	assert_memory_equal(c.params, params, sizeof(params));
	free((void *)c.split);
	free(c.params);
	free(c.mom);
	save_split(4, split, TRN_CKPT_SPLIT_MAX + 1, -EINVAL);  /* one past */
	assert_int_equal(access(file_of(4), F_OK), -1);

	uint8_t x = 0xff;
	save_split(5, split, 100, 0);
	patch(5, sizeof(struct trn_ckpt_hdr) + 2 * sizeof(params) + 50, &x, 1);
	load(-EBADMSG, "checksum mismatch", &c);

	/* version 1: no seed (the field was reserved); one that claims a seed is corrupt */
	save(6);
	rewrite_as(6, 1, 0);
	load(1, NULL, &c);
	assert_int_equal(c.step, 6);
	assert_int_equal(c.split_len, 0);
	assert_null(c.split);
	free(c.params);
	free(c.mom);
	save_split(7, split, 8, 0);
	rewrite_as(7, 1, 8);
	load(-EBADMSG, "corrupt header", &c);
}

/* Version 2 files (a 168-byte header, room for a version 1 token of 104 bytes) still load, the
 * token and the split seed byte for byte; one that claims a longer token is corrupt. A version 3
 * file holds a whole version 2 token (LDC_TOKEN_SIZE). */
static void test_ckpt_version_2_header_loads(void **state)
{
	(void)state;
	struct trn_ckpt c;
	static uint8_t split[40];

	for (size_t i = 0; i < sizeof(split); i++)
		split[i] = (uint8_t)(i * 3 + 5);
	save_split(8, split, sizeof(split), 0);
	load(1, NULL, &c);
	assert_int_equal(c.token_len, LDC_TOKEN_SIZE);
	free((void *)c.split);
	free(c.params);
	free(c.mom);
	rewrite_old(8, 2, sizeof(split), LDC_TOKEN_SIZE_V1);
	load(1, NULL, &c);
	assert_int_equal(c.step, 8);
	assert_int_equal(c.token_len, LDC_TOKEN_SIZE_V1);
	assert_int_equal(c.split_len, sizeof(split));
	assert_memory_equal(c.split, split, sizeof(split));
	assert_memory_equal(c.params, params, sizeof(params));
	assert_memory_equal(c.mom, mom, sizeof(mom));
	free((void *)c.split);
	free(c.params);
	free(c.mom);
	save_split(9, split, sizeof(split), 0);
	rewrite_old(9, 2, sizeof(split), LDC_TOKEN_SIZE_V1 + 1);  /* one past its room */
	load(-EBADMSG, "corrupt header", &c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ckpt_save_load_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ckpt_none_in_empty_or_missing_dir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ckpt_newest_loaded_two_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ckpt_interrupted_save_is_not_a_checkpoint, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_ckpt_damaged_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ckpt_split_seed_roundtrip_bounds_and_version_1,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_ckpt_version_2_header_loads, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
