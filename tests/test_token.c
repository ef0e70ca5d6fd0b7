/* test_token.c - resume tokens (shm/token.h) as untrusted input: a sealed token parses back to
 * itself; truncated, too long, not-a-token, other-version, altered and inconsistent tokens are
 * refused with a reason naming the field; a token for another dataset or job shape does not match
 * and the reason names the field. Every byte flip of a sealed token is refused. Version 1 tokens
 * (before block and window) still parse, as the geometry their jobs ran with. */
#include "shm/ctl.h"
#include "shm/token.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

static struct ldc_token good(void)
{
	struct ldc_token t;

	memset(&t, 0, sizeof(t));
	t.seed = 7;
	t.epoch = 3;
	t.step = 41;
	for (unsigned i = 0; i < LDC_TOKEN_ID_SIZE; i++)
		t.dataset[i] = (uint8_t)(0xa0 + i);
	t.samples = 100000;
	t.steps_per_epoch = 782;
	t.world = 2;
	t.batch = 64;
	t.sampling = CTL_SAMPLE_SHUFFLE;
	t.tail = CTL_TAIL_MASK;
	t.transforms = CTL_TF_RANDOM_RESIZED_CROP | CTL_TF_HFLIP;
	t.crop_h = t.crop_w = 64;
	ldc_token_seal(&t);
	return t;
}

/* Parse @len bytes of @t; expect @err and @needle in the reason. */
static void refused(const void *t, size_t len, int err, const char *needle)
{
	struct ldc_token out;
	char why[256] = "";
	int ret = ldc_token_parse(t, len, &out, why, sizeof(why));

	if (ret != err || !strstr(why, needle))
		fail_msg("expected %d with '%s'; got %d: '%s'", err, needle, ret, why);
}

static void test_token_seal_parse_roundtrip(void **state)
{
	(void)state;
	struct ldc_token t = good(), out;
	char why[256];

	assert_int_equal(ldc_token_parse(&t, sizeof(t), &out, why, sizeof(why)), 0);
	assert_memory_equal(&t, &out, sizeof(t));
	assert_int_equal(ldc_token_match(&out, &t, why, sizeof(why)), 0);
	assert_int_equal(sizeof(t), LDC_TOKEN_SIZE);
}

static void test_token_truncated_refused(void **state)
{
	(void)state;
	struct ldc_token t = good();

	refused(&t, 0, -EBADMSG, "truncated: 0 bytes");
	refused(NULL, 0, -EBADMSG, "truncated");
	refused(&t, 7, -EBADMSG, "truncated: 7 bytes");
	refused(&t, LDC_TOKEN_SIZE - 1, -EBADMSG, "truncated: 111 of its 112 bytes");
}

static void test_token_too_long_refused(void **state)
{
	(void)state;
	uint8_t buf[LDC_TOKEN_SIZE + 8] = { 0 };
	struct ldc_token t = good();

	memcpy(buf, &t, sizeof(t));
	refused(buf, sizeof(buf), -EBADMSG, "length: 120 bytes given");
}

static void test_token_not_a_token_refused(void **state)
{
	(void)state;
	struct ldc_token t = good();

	t.magic ^= 1;
	refused(&t, sizeof(t), -EBADMSG, "magic");
	refused("{\"epoch\": 3, \"step\": 41}", 25, -EBADMSG, "magic");
}

static void test_token_wrong_version_refused(void **state)
{
	(void)state;
	struct ldc_token t = good();

	t.version = 3;
	t.check = 0;  /* a newer token: its version is read before anything else */
	refused(&t, sizeof(t), -EPROTO, "version: 3; this build reads versions 1 and 2");
	t.version = 0;
	refused(&t, sizeof(t), -EPROTO, "version: 0");
	refused(&t, 8, -EPROTO, "version");
}

static void test_token_wrong_length_field_refused(void **state)
{
	(void)state;
	struct ldc_token t = good();

	t.length = 96;
	refused(&t, sizeof(t), -EBADMSG, "length: the header says 96 bytes");
}

static void test_token_tampered_refused(void **state)
{
	(void)state;
	struct ldc_token t = good();

	t.step = 40;  /* moved back a step by hand */
	refused(&t, sizeof(t), -EBADMSG, "checksum: the token was altered or damaged");
	t = good();
	t.world = 4;
	refused(&t, sizeof(t), -EBADMSG, "checksum");
}

static void test_token_every_byte_flip_refused(void **state)
{
	(void)state;
	struct ldc_token t = good();
	uint8_t b[sizeof(t)];
	struct ldc_token out;
	char why[256];

	for (size_t i = 0; i < sizeof(b); i++)
		for (int bit = 0; bit < 8; bit++) {
			memcpy(b, &t, sizeof(b));
			b[i] ^= (uint8_t)(1u << bit);
			if (ldc_token_parse(b, sizeof(b), &out, why, sizeof(why)) == 0)
				fail_msg("byte %zu bit %d flipped: accepted", i, bit);
		}
}

/* Tokens as the version 1 code wrote them (104 bytes: seed 7, epoch 3 step 41, 2 ranks, batch
 * 64, sampling shuffle and block): they parse, into the version 2 layout, with the geometry a
 * version 1 job ran with (block 64, window 16 in block mode; 0 otherwise). */
static const uint8_t v1_shuffle[LDC_TOKEN_SIZE_V1] = {
	0x4c, 0x54, 0x4b, 0x31, 0x01, 0x00, 0x68, 0x00, 0x07, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x29, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa0, 0xa1, 0xa2, 0xa3,
	0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
	0xa0, 0x86, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x03, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00,
	0x40, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x91, 0xa7, 0xf9, 0x4d, 0x4e, 0x52, 0x4d, 0x4c,
};
static const uint8_t v1_block[LDC_TOKEN_SIZE_V1] = {
	0x4c, 0x54, 0x4b, 0x31, 0x01, 0x00, 0x68, 0x00, 0x07, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x29, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa0, 0xa1, 0xa2, 0xa3,
	0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
	0xa0, 0x86, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x03, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,
	0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00,
	0x40, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x45, 0x3a, 0x59, 0x72, 0x0f, 0x4f, 0x97, 0x1b,
};

static void test_token_version_1_parses(void **state)
{
	(void)state;
	struct ldc_token out, want = good();
	char why[256] = "";
	uint8_t b[LDC_TOKEN_SIZE_V1];

	assert_int_equal(ldc_token_parse(v1_shuffle, sizeof(v1_shuffle), &out, why, sizeof(why)), 0);
	assert_int_equal(out.version, LDC_TOKEN_VERSION);
	assert_int_equal(out.length, LDC_TOKEN_SIZE);
	assert_memory_equal(&out, &want, sizeof(out));  /* = the version 2 token of the same job */
	assert_int_equal(ldc_token_parse(v1_block, sizeof(v1_block), &out, why, sizeof(why)), 0);
	assert_int_equal(out.sampling, CTL_SAMPLE_BLOCK);
	assert_int_equal(out.block, CTL_BLOCK_DEFAULT);
	assert_int_equal(out.window, CTL_WINDOW_DEFAULT);
	assert_int_equal(out.epoch, 3);
	assert_int_equal(out.step, 41);
	/* re-sealed as version 2, it parses back to itself */
	struct ldc_token again;
	assert_int_equal(ldc_token_parse(&out, sizeof(out), &again, why, sizeof(why)), 0);
	assert_memory_equal(&out, &again, sizeof(out));
	/* its own length only; damaged, refused */
	refused(v1_block, sizeof(v1_block) - 1, -EBADMSG, "truncated: 103 of its 104 bytes");
	refused(v1_block, LDC_TOKEN_SIZE, -EBADMSG, "length: 112 bytes given, the token has 104");
	for (size_t i = 8; i < sizeof(b); i++) {
		memcpy(b, v1_block, sizeof(b));
		b[i] ^= 0x10;
		refused(b, sizeof(b), -EBADMSG, "");
	}
	memcpy(b, v1_block, sizeof(b));
	b[6] = 112;  /* a version 1 header that claims version 2's length */
	refused(b, sizeof(b), -EBADMSG, "length: the header says 112 bytes; a version 1 token has 104");
}

/* Block sampling's geometry is part of the job's shape: a token for other values does not match,
 * and the reason names the field; tokens carry them within the protocol's bounds. */
static void test_token_block_geometry(void **state)
{
	(void)state;
	struct ldc_token t = good(), job;
	char why[256] = "";

	t.sampling = CTL_SAMPLE_BLOCK;
	t.block = 500;
	t.window = 8;
	ldc_token_seal(&t);
	job = t;
	assert_int_equal(ldc_token_match(&t, &job, why, sizeof(why)), 0);
	job.block = 64;
	assert_int_equal(ldc_token_match(&t, &job, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "block: the token is for blocks of 500 records, this job's are of 64"));
	job = t;
	job.window = 9;
	assert_int_equal(ldc_token_match(&t, &job, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "window: the token is for windows of 8 blocks, this job's are of 9"));

	static const struct {
		uint32_t sampling, block, window;
		const char *needle;   /* NULL: parses */
	} cases[] = {
		{ CTL_SAMPLE_BLOCK, 1, 1, NULL },
		{ CTL_SAMPLE_BLOCK, CTL_BLOCK_MAX, CTL_WINDOW_MAX, NULL },
		{ CTL_SAMPLE_BLOCK, CTL_BLOCK_MAX + 1, 1, "block: 16777217 is not in 1..16777216" },
		{ CTL_SAMPLE_BLOCK, 1, CTL_WINDOW_MAX + 1, "window: 65537 is not in 1..65536" },
		{ CTL_SAMPLE_BLOCK, 0, 16, "block: 0 is not in 1.." },
		{ CTL_SAMPLE_BLOCK, 64, 0, "window: 0 is not in 1.." },
		{ CTL_SAMPLE_SHUFFLE, 64, 0, "block: 64, not 0, with sampling shuffle" },
		{ CTL_SAMPLE_SEQUENTIAL, 0, 16, "window: 16, not 0, with sampling sequential" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ldc_token u = good(), out;
		u.sampling = cases[i].sampling;
		u.block = cases[i].block;
		u.window = cases[i].window;
		ldc_token_seal(&u);
		if (cases[i].needle)
			refused(&u, sizeof(u), -EBADMSG, cases[i].needle);
		else
			assert_int_equal(ldc_token_parse(&u, sizeof(u), &out, why, sizeof(why)), 0);
	}
}

/* Sealed (checksum right) but inconsistent: a writer's bug, still refused. */
static void test_token_inconsistent_fields_refused(void **state)
{
	(void)state;
	static const struct {
		int field;
		const char *needle;
	} cases[] = {
		{ 0, "step: 782 is not below steps_per_epoch 782" },
		{ 1, "steps_per_epoch: 0" },
		{ 2, "world: 0" },
		{ 3, "batch: 0" },
		{ 4, "sampling: 9" },
		{ 5, "tail: 9" },
		{ 6, "transforms: 0x100" },
		{ 7, "samples: 0" },
		{ 8, "epoch: " },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ldc_token t = good();
		switch (cases[i].field) {
		case 0: t.step = t.steps_per_epoch; break;
		case 1: t.steps_per_epoch = 0; break;
		case 2: t.world = 0; break;
		case 3: t.batch = 0; break;
		case 4: t.sampling = 9; break;
		case 5: t.tail = 9; break;
		case 6: t.transforms = 0x100; break;
		case 7: t.samples = 0; break;
		case 8: t.epoch = UINT64_MAX / 2; break;
		}
		ldc_token_seal(&t);
		refused(&t, sizeof(t), -EBADMSG, cases[i].needle);
	}
}

/* A token's position, epoch * steps_per_epoch + step, is at most CTL_STEP_LIMIT (ctl.h): at the
 * limit it parses, one step past it it is refused naming the field, whatever the epoch's length.
 * Regression: the bound was 2^64 - 1, so a token could name a step whose next step wraps. */
static void test_token_step_limit_exact(void **state)
{
	const uint64_t L = CTL_STEP_LIMIT;
	static const struct {
		uint64_t spe, epoch, step;
		const char *needle;       /* NULL: parses */
	} cases[] = {
		{ 782, (L - 41) / 782, 41, NULL },
		{ 782, (L - 41) / 782 + 1, 41, "epoch: epoch 5897296698756251 step 41 of 782-step" },
		{ 1, L, 0, NULL },
		{ 1, L + 1, 0, "epoch: epoch 4611686018427387905 step 0" },
		{ 1, UINT64_MAX, 0, "past the step limit 4611686018427387904" },
		{ 2, 1ull << 63, 0, "epoch: epoch 9223372036854775808" },
		{ L, 1, 0, NULL },
		{ L, 0, L - 1, NULL },
		{ L, 1, 1, "epoch: epoch 1 step 1" },
		{ L + 1, 0, 0, "steps_per_epoch: 4611686018427387905 is not in 1..4611686018427387904" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ldc_token t = good(), out;
		char why[256] = "";
		t.steps_per_epoch = cases[i].spe;
		t.epoch = cases[i].epoch;
		t.step = cases[i].step;
		ldc_token_seal(&t);
		if (cases[i].needle) {
			refused(&t, sizeof(t), -EBADMSG, cases[i].needle);
		} else if (ldc_token_parse(&t, sizeof(t), &out, why, sizeof(why)) != 0) {
			fail_msg("case %zu: epoch %llu step %llu of %llu: refused: %s", i,
				 (unsigned long long)t.epoch, (unsigned long long)t.step,
				 (unsigned long long)t.steps_per_epoch, why);
		}
	}
}

/* Does @t match @job changed by @edit? Expect -EINVAL naming @needle. */
static void mismatch(const struct ldc_token *job, const char *needle)
{
	struct ldc_token t = good();
	char why[256] = "";
	int ret = ldc_token_match(&t, job, why, sizeof(why));

	if (ret != -EINVAL || !strstr(why, needle))
		fail_msg("expected -EINVAL with '%s'; got %d: '%s'", needle, ret, why);
}

static void test_token_other_job_refused(void **state)
{
	(void)state;
	struct ldc_token j;

	j = good(), j.dataset[5] ^= 1, mismatch(&j, "dataset: the token is for dataset a0a1a2a3a4a5");
	j = good(), j.world = 4, mismatch(&j, "world: the token is for 2 ranks, this job has 4");
	j = good(), j.batch = 32, mismatch(&j, "batch: the token is for batch 64, this job's is 32");
	j = good(), j.seed = 8, mismatch(&j, "seed: the token is for seed 7, this job's is 8");
	j = good(), j.sampling = CTL_SAMPLE_BLOCK, mismatch(&j, "sampling: the token is for shuffle, "
							    "this job's is block");
	j = good(), j.tail = CTL_TAIL_DROP, mismatch(&j, "tail: the token is for tail mask, this "
						     "job's is drop");
	j = good(), j.tail = CTL_TAIL_DROP_LAST, mismatch(&j, "tail: the token is for tail mask, "
							  "this job's is drop_last");
	j = good(), j.transforms = CTL_TF_CENTER_CROP, mismatch(&j, "transforms: the token is for 0x5");
	j = good(), j.crop_w = 32, mismatch(&j, "crop: the token is for 64x64, this job's is 64x32");
	j = good(), j.augment = 0x1234, mismatch(&j, "augment: the token is for none (digest "
						 "00000000), this job has augmentations (00001234)");
	j = good(), j.samples = 99999, mismatch(&j, "samples: the token is for 100000 samples");
	j = good(), j.steps_per_epoch = 781, mismatch(&j, "steps_per_epoch: the token is for 782");
}

static void test_token_match_ignores_position_and_unknowns(void **state)
{
	(void)state;
	struct ldc_token t = good(), j = good();
	char why[256];

	j.epoch = 0, j.step = 0, j.check = 0;
	memset(j.dataset, 0, sizeof(j.dataset));  /* not known yet: loaderd checks it */
	j.samples = j.steps_per_epoch = 0;
	assert_int_equal(ldc_token_match(&t, &j, why, sizeof(why)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_token_seal_parse_roundtrip),
		cmocka_unit_test(test_token_truncated_refused),
		cmocka_unit_test(test_token_too_long_refused),
		cmocka_unit_test(test_token_not_a_token_refused),
		cmocka_unit_test(test_token_wrong_version_refused),
		cmocka_unit_test(test_token_wrong_length_field_refused),
		cmocka_unit_test(test_token_tampered_refused),
		cmocka_unit_test(test_token_every_byte_flip_refused),
		cmocka_unit_test(test_token_inconsistent_fields_refused),
		cmocka_unit_test(test_token_step_limit_exact),
		cmocka_unit_test(test_token_other_job_refused),
		cmocka_unit_test(test_token_match_ignores_position_and_unknowns),
		cmocka_unit_test(test_token_version_1_parses),
		cmocka_unit_test(test_token_block_geometry),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
