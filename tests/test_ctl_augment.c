/* test_ctl_augment.c - the CTL_AUGMENT body (shm/ctl_augment.c) as hostile input: each field at
 * its limit is taken and one past it refused naming the field; the text spec's items, their
 * defaults and its refusals; the digest (0 only for no augmentation). Table-driven. */
#include "shm/ctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#define M CTL_AUG_ONE

static struct ctl_augment base(void)
{
	struct ctl_augment a;
	char why[256];

	assert_int_equal(ctl_augment_parse("jitter=0.4:0.4:0.4:0.1,randaugment=2:9,erase=0.25",
					   &a, why, sizeof(why)), 0);
	return a;
}

static void test_ctl_augment_fields_at_and_past_their_limits(void **state)
{
	static const struct {
		int field;
		int64_t ok, bad;      /* the value at the limit, and one past it */
		const char *needle;
	} rows[] = {
		{ 0, M * 16, M * 16 + 1, "jitter brightness" },   /* jitter_hi[0] */
		{ 1, 0, -1, "jitter brightness" },                /* jitter_lo[0] */
		{ 2, M / 2, M / 2 + 1, "jitter hue" },            /* jitter_hi[3] */
		{ 3, -M / 2, -M / 2 - 1, "jitter hue" },          /* jitter_lo[3] */
		{ 4, 8, 9, "num_ops: 9 outside 1..8" },
		{ 5, 1, 0, "num_ops: 0" },
		{ 6, 64, 65, "bins: 65 outside 2..64" },
		{ 7, 2, 1, "bins: 1" },
		{ 8, 30, 31, "magnitude: 31 not below bins 31" },
		{ 9, M, M + 1, "erase_p" },
		{ 10, M, M + 1, "erase_scale" },                  /* erase_scale[1] */
		{ 11, 1, 0, "erase_scale" },                      /* erase_scale[0] */
		{ 12, 100 * M, 100 * M + 1, "erase_ratio" },      /* erase_ratio[1] */
		{ 13, 1, 0, "erase_ratio" },                      /* erase_ratio[0] */
		{ 14, 1, 2, "erase_fill" },
		{ 15, 255 * M, 255 * M + 1, "erase_mean" },
		{ 16, 3, 4, "interp" },
		{ 17, 0, 1, "erase_rgb[3]" },
		{ 18, 0, 1, "reserved" },
		{ 19, 3, 4, "autoaug" },
		{ 20, 0xf, 0x1f, "jitter: unknown bits" },
	};
	char why[256];

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		for (int past = 0; past < 2; past++) {
			struct ctl_augment a = base();
			int64_t v = past ? rows[i].bad : rows[i].ok;
			switch (rows[i].field) {
			case 0: a.jitter_hi[0] = (int32_t)v; break;
			case 1: a.jitter_lo[0] = (int32_t)v; break;
			case 2: a.jitter_hi[3] = (int32_t)v; break;
			case 3: a.jitter_lo[3] = (int32_t)v; break;
			case 4: a.num_ops = (uint32_t)v; break;
			case 5: a.num_ops = (uint32_t)v; break;
			case 6: a.bins = (uint32_t)v; break;
			case 7: a.bins = (uint32_t)v, a.magnitude = 0; break;
			case 8: a.magnitude = (uint32_t)v; break;
			case 9: a.erase_p = (uint32_t)v; break;
			case 10: a.erase_scale[1] = (uint32_t)v; break;
			case 11: a.erase_scale[0] = (uint32_t)v; break;
			case 12: a.erase_ratio[1] = (uint32_t)v; break;
			case 13: a.erase_ratio[0] = (uint32_t)v; break;
			case 14: a.erase_fill = (uint32_t)v; break;
			case 15: a.erase_mean[2] = (uint32_t)v; break;
			case 16: a.interp = (uint32_t)v; break;
			case 17: a.erase_rgb[3] = (uint8_t)v; break;
			case 18: a.reserved[2] = (uint32_t)v; break;
			case 19: a.autoaug = (uint32_t)v, a.num_ops = 0, a.magnitude = 0,
				 a.bins = 0; break;
			case 20: a.jitter = (uint32_t)v; break;
			}
			int ret = ctl_check_augment(&a, sizeof(a), why, sizeof(why));
			if (!past && ret != 0)
				fail_msg("row %zu: %lld at the limit refused: %s", i, (long long)v, why);
			if (past && (ret != -EINVAL || !strstr(why, rows[i].needle)))
				fail_msg("row %zu: %lld past the limit: %d '%s', want '%s'", i,
					 (long long)v, ret, ret ? why : "", rows[i].needle);
		}
}

static void test_ctl_augment_consistency_refusals(void **state)
{
	struct ctl_augment a;
	char why[256];

	(void)state;
	a = base();
	assert_int_equal(ctl_check_augment(&a, sizeof(a) - 1, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "127 bytes"));
	memset(&a, 0, sizeof(a));
	assert_int_equal(ctl_check_augment(&a, sizeof(a), why, sizeof(why)), 0);  /* none */
	a.jitter_hi[1] = 5;  /* a range without its bit */
	assert_int_equal(ctl_check_augment(&a, sizeof(a), why, sizeof(why)), -EINVAL);
	memset(&a, 0, sizeof(a));
	a.bins = 31;  /* bins without a binned auto-augment */
	assert_int_equal(ctl_check_augment(&a, sizeof(a), why, sizeof(why)), -EINVAL);
	memset(&a, 0, sizeof(a));
	a.erase_scale[0] = 1;  /* erasing's fields with erase_p 0 */
	assert_int_equal(ctl_check_augment(&a, sizeof(a), why, sizeof(why)), -EINVAL);
	memset(&a, 0, sizeof(a));
	a.antialias = 1;  /* antialias without a filter */
	assert_int_equal(ctl_check_augment(&a, sizeof(a), why, sizeof(why)), -EINVAL);
	a.interp = CTL_INTERP_RANDOM;
	assert_int_equal(ctl_check_augment(&a, sizeof(a), why, sizeof(why)), 0);
	a = base();
	a.jitter_lo[0] = a.jitter_hi[0] + 1;  /* reversed */
	assert_int_equal(ctl_check_augment(&a, sizeof(a), why, sizeof(why)), -EINVAL);
}

static void test_ctl_augment_parse_items(void **state)
{
	struct ctl_augment a;
	char why[256];

	(void)state;
	/* torchvision's scalar: brightness 0.4 -> 0.6..1.4; 1.5 -> 0..2.5; hue 0.1 -> -0.1..0.1 */
	assert_int_equal(ctl_augment_parse("jitter=0.4:1.5:0:0.1", &a, why, sizeof(why)), 0);
	assert_int_equal(a.jitter, 0xbu);
	assert_int_equal(a.jitter_lo[0], 600000);
	assert_int_equal(a.jitter_hi[0], 1400000);
	assert_int_equal(a.jitter_lo[1], 0);
	assert_int_equal(a.jitter_hi[1], 2500000);
	assert_int_equal(a.jitter_lo[3], -100000);
	assert_int_equal(a.jitter_hi[3], 100000);
	assert_int_equal(ctl_augment_parse("saturation=0.5:2", &a, why, sizeof(why)), 0);
	assert_int_equal(a.jitter, 0x4u);
	assert_int_equal(a.jitter_hi[2], 2000000);
	/* defaults: RandAugment 2, 9, 31; TrivialAugmentWide 31; RandomErasing's */
	assert_int_equal(ctl_augment_parse("randaugment", &a, why, sizeof(why)), 0);
	assert_true(a.autoaug == CTL_AUTO_RAND && a.num_ops == 2 && a.magnitude == 9 &&
		    a.bins == 31);
	assert_int_equal(ctl_augment_parse("trivialaugment", &a, why, sizeof(why)), 0);
	assert_true(a.autoaug == CTL_AUTO_WIDE && a.bins == 31);
	assert_int_equal(ctl_augment_parse("autoaugment=imagenet,erase", &a, why, sizeof(why)), 0);
	assert_true(a.autoaug == CTL_AUTO_IMAGENET && a.erase_p == 500000 &&
		    a.erase_scale[0] == 20000 && a.erase_scale[1] == 330000 &&
		    a.erase_ratio[0] == 300000 && a.erase_ratio[1] == 3300000);
	assert_int_equal(ctl_augment_parse("erase=0.25,erase_value=random", &a, why, sizeof(why)),
			 0);
	assert_int_equal(a.erase_fill, 1);
	assert_int_equal(a.erase_mean[0], 123675000);  /* 0.485 x 255 */
	assert_int_equal(ctl_augment_parse("erase=0.25,erase_value=1:2:3,interp=random,antialias",
					   &a, why, sizeof(why)), 0);
	assert_true(a.erase_rgb[2] == 3 && a.interp == CTL_INTERP_RANDOM && a.antialias == 1);
	/* erase=0 is off, with nothing of it left */
	assert_int_equal(ctl_augment_parse("erase=0", &a, why, sizeof(why)), 0);
	struct ctl_augment zero;
	memset(&zero, 0, sizeof(zero));
	assert_memory_equal(&a, &zero, sizeof(a));
	assert_int_equal(ctl_augment_digest(&a), 0);
	static const char *const bad[] = {
		"jitter=nan", "jitter=0.4:0.4:0.4:0.6", "jitter=-1", "brightness=2:1", "hue=1",
		"randaugment=2:9:31:4", "randaugment=2.5", "randaugment=9", "randaugment,trivialaugment",
		"autoaugment=cifar10", "erase=1.5", "erase=0.5:0.1", "erase_value=1:2:3",
		"erase=0.5,erase_value=256", "interp=nearest", "antialias", "antialias=1", "flip",
		"trivialaugment=1", "jitter=1e99",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (ctl_augment_parse(bad[i], &a, why, sizeof(why)) != -EINVAL)
			fail_msg("'%s' taken", bad[i]);
	assert_int_equal(ctl_augment_parse("jitter=0.4", &a, why, sizeof(why)), 0);
	assert_int_not_equal(ctl_augment_digest(&a), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ctl_augment_fields_at_and_past_their_limits),
		cmocka_unit_test(test_ctl_augment_consistency_refusals),
		cmocka_unit_test(test_ctl_augment_parse_items),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
