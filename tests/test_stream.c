/* test_stream.c - a step's shards held all or none (loader/stream.h): a step whose samples fall
 * in a pending shard holds nothing and names the shard it waits for; once that shard is attached
 * (here by the test itself, standing for ldfetch's delivery) the same step holds each of its
 * distinct shards once, and none of them can be detached until the step releases them. */
#include "formats/dpk.h"
#include "formats/dpkset.h"
#include "loader/stream.h"
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

/* Shard @name: @n raw 4x4 records; its identity into @id. */
static void shard(const char *name, unsigned n, uint8_t id[DPK_IDENTITY_SIZE])
{
	char p[128], err[256];
	struct dpk_writer *w;
	struct dpk *d;
	uint8_t buf[16] = { 0 };

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	assert_int_equal(dpk_writer_create(p, DPK_WRITE_NO_SYNC, &w), 0);
	for (unsigned i = 0; i < n; i++) {
		buf[0] = (uint8_t)i;
		struct dpk_record r = { .kind = DPK_KIND_RAW, .data = buf, .length = sizeof(buf),
					.shape = { 4, 4 }, .ndim = 2 };
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	assert_int_equal(dpk_open(p, 0, &d, err, sizeof(err)), 0);
	dpk_identity(d, id);
	dpk_close(d);
}

static int open_in(const char *name)
{
	char p[128];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

/* s.dpks: a.dpk (samples 0..2), b.dpk (3), c.dpk (4..7). */
static void make_set(void)
{
	uint8_t a[DPK_IDENTITY_SIZE], b[DPK_IDENTITY_SIZE], c[DPK_IDENTITY_SIZE];
	char ha[33], hb[33], hc[33], p[128];

	shard("a.dpk", 3, a);
	shard("b.dpk", 1, b);
	shard("c.dpk", 4, c);
	dpkset_hex(a, ha), dpkset_hex(b, hb), dpkset_hex(c, hc);
	snprintf(p, sizeof(p), "%s/s.dpks", dir);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fprintf(f, "dpkset 1\n3 %s a.dpk\n1 %s b.dpk\n4 %s c.dpk\nend 3\n", ha, hb, hc);
	fclose(f);
}

static void test_step_hold_waits_then_holds_all(void **state)
{
	struct dpk *d;
	char err[512];
	uint32_t held[8], n = 99, wait = 99;
	static const uint64_t step[] = { 7, 0, 3, 2, 4 };  /* shards 2, 0, 1, 0, 2 */

	(void)state;
	make_set();
	int mfd = open_in("s.dpks");
	assert_int_equal(dpk_open_pending(mfd, DPK_OPEN_MAP, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 0, open_in("a.dpk"), err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 2, open_in("c.dpk"), err, sizeof(err)), 0);
	/* b.dpk pending: nothing held, shard 1 named */
	assert_int_equal(ldr_step_hold(d, step, 5, held, &n, &wait), -EAGAIN);
	assert_int_equal(wait, 1);
	assert_int_equal(n, 0);
	assert_int_equal(dpk_shard_detach(d, 0), 0);  /* no pin was left behind */
	assert_int_equal(dpk_shard_attach(d, 0, open_in("a.dpk"), err, sizeof(err)), 0);
	/* a step of attached shards only is held meanwhile */
	static const uint64_t other[] = { 7, 4, 5 };
	assert_int_equal(ldr_step_hold(d, other, 3, held, &n, &wait), 0);
	assert_int_equal(n, 1);
	assert_int_equal(held[0], 2);
	assert_int_equal(dpk_shard_detach(d, 2), -EBUSY);
	ldr_step_release(d, held, n);
	/* the delivery: shard 1 attached; the step now holds each of its shards once */
	assert_int_equal(dpk_shard_attach(d, 1, open_in("b.dpk"), err, sizeof(err)), 0);
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
	int mfd = open_in("s.dpks");
	assert_int_equal(dpk_open_pending(mfd, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 0, open_in("a.dpk"), err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 2, open_in("c.dpk"), err, sizeof(err)), 0);
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
	mfd = open_in("s.dpks");
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
