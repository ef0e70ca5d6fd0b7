/* test_stream.c - a step's shards held all or none (loader/stream.h): a step whose samples fall
 * in a pending shard holds nothing and names the shard it waits for; once that shard is attached
 * (here by the test itself, standing for ldfetch's delivery) the same step holds each of its
 * distinct shards once, and none of them can be detached until the step releases them. */
#include "formats/dpk.h"
#include "formats/dpkset.h"
#include "loader/stream.h"
#include "tests/set_fixture.h"
#include "tests/tmpdir.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

static char dir[64];

static int setup(void **state)
{
	(void)state;
	return tmpdir_create(dir, sizeof(dir), "test_stream");
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

/* s.dpks: a.dpk (samples 0..2), b.dpk (3), c.dpk (4..7). */
static void make_set(void)
{
	static const char *const names[] = { "a.dpk", "b.dpk", "c.dpk" };
	static const unsigned counts[] = { 3, 1, 4 };
	uint8_t ids[3][DPK_IDENTITY_SIZE];

	for (unsigned i = 0, base = 0; i < 3; base += counts[i++])
		setfx_shard(dir, names[i], counts[i], base, NULL, ids[i]);
	setfx_manifest(dir, "s.dpks", 3, names, counts, ids);
}

static void test_step_hold_waits_then_holds_all(void **state)
{
	struct dpk *d;
	char err[512];
	uint32_t held[8], n = 99, wait = 99;
	static const uint64_t step[] = { 7, 0, 3, 2, 4 };  /* shards 2, 0, 1, 0, 2 */

	(void)state;
	make_set();
	int mfd = setfx_open(dir, "s.dpks");
	assert_int_equal(dpk_open_pending(mfd, DPK_OPEN_MAP, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 0, setfx_open(dir, "a.dpk"), err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 2, setfx_open(dir, "c.dpk"), err, sizeof(err)), 0);
	/* b.dpk pending: nothing held, shard 1 named */
	assert_int_equal(ldr_step_hold(d, step, 5, held, &n, &wait), -EAGAIN);
	assert_int_equal(wait, 1);
	assert_int_equal(n, 0);
	assert_int_equal(dpk_shard_detach(d, 0), 0);  /* no pin was left behind */
	assert_int_equal(dpk_shard_attach(d, 0, setfx_open(dir, "a.dpk"), err, sizeof(err)), 0);
	/* a step of attached shards only is held meanwhile */
	static const uint64_t other[] = { 7, 4, 5 };
	assert_int_equal(ldr_step_hold(d, other, 3, held, &n, &wait), 0);
	assert_int_equal(n, 1);
	assert_int_equal(held[0], 2);
	assert_int_equal(dpk_shard_detach(d, 2), -EBUSY);
	ldr_step_release(d, held, n);
	/* the delivery: shard 1 attached; the step now holds each of its shards once */
	assert_int_equal(dpk_shard_attach(d, 1, setfx_open(dir, "b.dpk"), err, sizeof(err)), 0);
	assert_int_equal(ldr_step_hold(d, step, 5, held, &n, &wait), 0);
	assert_int_equal(n, 3);
	for (uint32_t k = 0; k < 3; k++) {
		assert_int_equal(held[k], k);
		assert_int_equal(dpk_shard_detach(d, k), -EBUSY);
	}
	ldr_step_release(d, held, n);
	for (uint32_t k = 0; k < 3; k++)  /* one pin each: released, all detachable */
		assert_int_equal(dpk_shard_detach(d, k), 0);
	dpk_close(d);
	close(mfd);
}

static void test_step_hold_bounds(void **state)
{
	struct dpk *d;
	char err[512];
	uint32_t held[2], n = 99, wait = 99;
	static const uint64_t last[] = { 7 }, past[] = { 0, 8 };

	(void)state;
	make_set();
	int mfd = setfx_open(dir, "s.dpks");
	assert_int_equal(dpk_open_pending(mfd, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 0, setfx_open(dir, "a.dpk"), err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 2, setfx_open(dir, "c.dpk"), err, sizeof(err)), 0);
	assert_int_equal(ldr_step_hold(d, last, 0, held, &n, &wait), 0);  /* an empty step */
	assert_int_equal(n, 0);
	assert_int_equal(ldr_step_hold(d, last, 1, held, &n, &wait), 0);  /* the last sample */
	assert_int_equal(n, 1);
	assert_int_equal(held[0], 2);
	ldr_step_release(d, held, n);
	assert_int_equal(ldr_step_hold(d, past, 2, held, &n, &wait), -ERANGE);  /* one past */
	assert_int_equal(n, 0);
	assert_int_equal(dpk_shard_detach(d, 0), 0);  /* nothing held by the refused step */
	assert_int_equal(dpk_shard_detach(d, 2), 0);
	dpk_close(d);
	close(mfd);
	/* a set opened whole: every step holds (counting nothing), distinct shards still listed */
	mfd = setfx_open(dir, "s.dpks");
	assert_int_equal(dpk_open_fd(mfd, 0, &d, err, sizeof(err)), 0);
	static const uint64_t two[] = { 3, 0 };
	assert_int_equal(ldr_step_hold(d, two, 2, held, &n, &wait), 0);
	assert_int_equal(n, 2);
	assert_int_equal(held[0], 0);
	assert_int_equal(held[1], 1);
	ldr_step_release(d, held, n);
	dpk_close(d);
	close(mfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_step_hold_waits_then_holds_all, setup, teardown),
		cmocka_unit_test_setup_teardown(test_step_hold_bounds, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
