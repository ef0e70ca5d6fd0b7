/* test_token.c - resume tokens (shm/token.h) as untrusted input: a sealed token parses back to
 * itself; truncated, too long, not-a-token, other-version, altered and inconsistent tokens are
 * refused with a reason naming the field; a token for another dataset or job shape does not match
 * and the reason names the field. Every byte flip of a sealed token is refused. */
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
	refused(&t, LDC_TOKEN_SIZE - 1, -EBADMSG, "truncated: 103 of its 104 bytes");
}

static void test_token_too_long_refused(void **state)
{
	(void)state;
	uint8_t buf[LDC_TOKEN_SIZE + 8] = { 0 };
	struct ldc_token t = good();

	memcpy(buf, &t, sizeof(t));
	refused(buf, sizeof(buf), -EBADMSG, "length: 112 bytes given");
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

	t.version = 2;
	t.check = 0;  /* a newer token: its version is read before anything else */
	refused(&t, sizeof(t), -EPROTO, "version: 2; this build reads version 1");
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
