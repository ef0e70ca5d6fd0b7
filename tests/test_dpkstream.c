/* test_dpkstream.c - a set streamed (formats/dpk.h, dpk_open_pending; docs/STREAMING.md): opened
 * with every shard pending, sample -> shard known from the manifest alone; shards attached from
 * descriptors and checked against their lines and the template (the first attached, whose class
 * table and aux names the set keeps after it is detached); holds that keep a shard from detach;
 * the accessors refusing a pending shard's samples; and readers on threads holding, reading and
 * releasing while another thread detaches and attaches (run under TSan by make test-tsan). */
#include "formats/dpk.h"
#include "formats/dpkset.h"
#include "tests/set_fixture.h"
#include "tests/tmpdir.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

static char dir[64];
static const char *const classes2[] = { "cat", "dog" };

static int setup(void **state)
{
	(void)state;
	return tmpdir_create(dir, sizeof(dir), "test_dpkstream");
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

static const struct setfx two = { classes2, 2, 1, ~0u };

/* The set s.dpks: a.dpk (3 samples: 0..2), b.dpk (1: 3), c.dpk (4: 4..7); records of raw 4x4
 * bytes all (sample id), label id % 2 of classes cat and dog, aux field "caption" one byte (id). */
static void make_set(void)
{
	static const char *const names[] = { "a.dpk", "b.dpk", "c.dpk" };
	static const unsigned counts[] = { 3, 1, 4 };
	uint8_t ids[3][DPK_IDENTITY_SIZE];

	for (unsigned i = 0, base = 0; i < 3; base += counts[i++])
		setfx_shard(dir, names[i], counts[i], base, &two, ids[i]);
	setfx_manifest(dir, "s.dpks", 3, names, counts, ids);
}

/* Sample @i of the set read through @d: its entry, record and aux field checked. */
static void check_sample(const struct dpk *d, uint64_t i)
{
	struct dpk_entry e;
	char err[256];
	uint8_t buf[16], aux[16];

	assert_int_equal(dpk_entry_load(d, i, &e, err, sizeof(err)), 0);
	assert_int_equal(e.label, (int64_t)(i % 2));
	assert_int_equal(dpk_read_entry(d, &e, buf, sizeof(buf)), 16);
	for (int k = 0; k < 16; k++)
		assert_int_equal(buf[k], i);
	assert_true(dpk_entry_fd(d, &e) >= 0);
	assert_int_equal(dpk_aux_read(d, i, &e, aux, sizeof(aux), err, sizeof(err)), 5);
	assert_int_equal(aux[4], i);
}

static void test_dpkstream_open_pending_knows_samples(void **state)
{
	struct dpk *d, *whole;
	char err[512];
	uint8_t id[DPK_IDENTITY_SIZE], idw[DPK_IDENTITY_SIZE];
	static const struct { uint64_t i; uint32_t k; } where[] = {
		{ 0, 0 }, { 2, 0 }, { 3, 1 }, { 4, 2 }, { 7, 2 },
	};

	(void)state;
	make_set();
	int fd = setfx_open(dir, "s.dpks");
	assert_int_equal(dpk_open_pending(fd, DPK_OPEN_MAP, &d, err, sizeof(err)), 0);
	assert_true(dpk_streamed(d));
	assert_int_equal(dpk_count(d), 8);
	assert_int_equal(dpk_shard_count(d), 3);
	/* the set's identity (the resume token's) is the one the whole set has */
	char p[128];
	snprintf(p, sizeof(p), "%s/s.dpks", dir);
	assert_int_equal(dpk_open(p, 0, &whole, err, sizeof(err)), 0);
	assert_false(dpk_streamed(whole));
	dpk_identity(d, id);
	dpk_identity(whole, idw);
	assert_memory_equal(id, idw, sizeof(id));
	dpk_close(whole);
	for (size_t r = 0; r < sizeof(where) / sizeof(where[0]); r++)
		assert_int_equal(dpk_shard_find(d, where[r].i), where[r].k);
	/* nothing is here: every accessor refuses, naming the shard */
	struct dpk_entry e = { 0 };
	uint8_t buf[16];
	for (uint32_t k = 0; k < 3; k++) {
		assert_false(dpk_shard_attached(d, k));
		assert_null(dpk_shard(d, k));
		assert_int_equal(dpk_shard_hold(d, k), -EAGAIN);
		e.reserved = k;
		assert_int_equal(dpk_read_entry(d, &e, buf, sizeof(buf)), -EAGAIN);
		assert_int_equal(dpk_entry_fd(d, &e), -1);
	}
	assert_int_equal(dpk_shard_hold(d, 3), -ERANGE);  /* one past the last */
	assert_int_equal(dpk_entry_load(d, 7, &e, err, sizeof(err)), -EAGAIN);
	assert_non_null(strstr(err, "sample 7 (shard c.dpk): the shard is not here yet"));
	assert_int_equal(dpk_entry_load(d, 8, &e, err, sizeof(err)), -ERANGE);
	assert_int_equal(dpk_direct_open(d), -ENOTSUP);
	dpk_close(d);
	close(fd);
	/* only a manifest streams */
	fd = setfx_open(dir, "a.dpk");
	d = (struct dpk *)1;
	assert_int_equal(dpk_open_pending(fd, 0, &d, err, sizeof(err)), -EINVAL);
	assert_null(d);
	assert_non_null(strstr(err, "not a set's manifest"));
	close(fd);
}

static void test_dpkstream_attach_checks_and_reads(void **state)
{
	struct dpk *d;
	char err[512];

	(void)state;
	make_set();
	int mfd = setfx_open(dir, "s.dpks");
	assert_int_equal(dpk_open_pending(mfd, DPK_OPEN_MAP, &d, err, sizeof(err)), 0);
	/* the wrong file for its line (b.dpk's one sample for a.dpk's three), even as template */
	int fd = setfx_open(dir, "b.dpk");
	assert_int_equal(dpk_shard_attach(d, 0, fd, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "s.dpks line 2: shard a.dpk does not match its line"));
	assert_int_equal(fcntl(fd, F_GETFD), -1);  /* taken over: closed on failure too */
	assert_false(dpk_shard_attached(d, 0));
	/* the last shard exactly, then one past it */
	assert_int_equal(dpk_shard_attach(d, 2, setfx_open(dir, "c.dpk"), err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 3, setfx_open(dir, "c.dpk"), err, sizeof(err)), -ERANGE);
	fd = setfx_open(dir, "c.dpk");
	assert_int_equal(dpk_shard_attach(d, 2, fd, err, sizeof(err)), -EEXIST);
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	/* the template's class table and aux names are the set's */
	assert_int_equal(dpk_class_count(d), 2);
	assert_string_equal(dpk_class_name(d, 1), "dog");
	assert_null(dpk_class_name(d, 2));
	assert_int_equal(dpk_aux_fields(d), 1);
	assert_string_equal(dpk_aux_name(d, 0), "caption");
	assert_int_equal(dpk_count(d), 8);  /* the set's, not the template's */
	assert_int_equal(dpk_shard_hold(d, 2), 0);
	for (uint64_t i = 4; i < 8; i++)
		check_sample(d, i);
	dpk_shard_release(d, 2);
	struct dpk_entry e;
	assert_int_equal(dpk_entry_load(d, 3, &e, err, sizeof(err)), -EAGAIN);
	assert_int_equal(dpk_shard_attach(d, 1, setfx_open(dir, "b.dpk"), err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 0, setfx_open(dir, "a.dpk"), err, sizeof(err)), 0);
	for (uint64_t i = 0; i < 8; i++)
		check_sample(d, i);
	assert_int_equal(dpk_fds(d), 3);  /* each attached shard's descriptor, the set's own */
	dpk_close(d);
	close(mfd);
	/* a set opened whole: always here, nothing to pin, nothing to attach or detach */
	mfd = setfx_open(dir, "s.dpks");
	assert_int_equal(dpk_open_fd(mfd, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_hold(d, 2), 0);
	assert_int_equal(dpk_shard_hold(d, 3), -ERANGE);
	dpk_shard_release(d, 2);
	assert_true(dpk_shard_attached(d, 2));
	assert_int_equal(dpk_shard_detach(d, 2), -EINVAL);
	assert_int_equal(dpk_shard_attach(d, 2, setfx_open(dir, "c.dpk"), err, sizeof(err)), -EINVAL);
	dpk_close(d);
	close(mfd);
}

static void test_dpkstream_detach_waits_for_pins(void **state)
{
	struct dpk *d;
	char err[512];
	uint8_t x[DPK_IDENTITY_SIZE];
	static const char *const one[] = { "cat" };

	(void)state;
	make_set();
	int mfd = setfx_open(dir, "s.dpks");
	assert_int_equal(dpk_open_pending(mfd, DPK_OPEN_MAP, &d, err, sizeof(err)), 0);
	int fd = setfx_open(dir, "b.dpk");
	assert_int_equal(dpk_shard_attach(d, 1, fd, err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_hold(d, 1), 0);
	assert_int_equal(dpk_shard_hold(d, 1), 0);
	assert_int_equal(dpk_shard_detach(d, 1), -EBUSY);
	dpk_shard_release(d, 1);
	assert_int_equal(dpk_shard_detach(d, 1), -EBUSY);  /* one pin left */
	check_sample(d, 3);
	dpk_shard_release(d, 1);
	assert_int_equal(dpk_shard_detach(d, 1), 0);
	assert_int_equal(fcntl(fd, F_GETFD), -1);  /* its descriptor closed: its blocks can go */
	assert_int_equal(dpk_fds(d), 0);
	assert_int_equal(dpk_shard_detach(d, 1), -ENOENT);
	assert_int_equal(dpk_shard_detach(d, 0), -ENOENT);
	assert_int_equal(dpk_shard_detach(d, 3), -ERANGE);
	assert_int_equal(dpk_shard_hold(d, 1), -EAGAIN);
	assert_false(dpk_shard_attached(d, 1));
	/* the template gone, the set keeps its class table and aux names and checks against them */
	assert_string_equal(dpk_class_name(d, 0), "cat");
	assert_string_equal(dpk_aux_name(d, 0), "caption");
	setfx_shard(dir, "x.dpk", 3, 0, &(struct setfx){ one, 1, 1, ~0u }, x);  /* a.dpk's records, another class table */
	/* x.dpk in a.dpk's place: a.dpk's line names another identity */
	assert_int_equal(dpk_shard_attach(d, 0, setfx_open(dir, "x.dpk"), err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "s.dpks line 2: shard a.dpk has identity"));
	/* attached again: the same shard reads as before */
	assert_int_equal(dpk_shard_attach(d, 1, setfx_open(dir, "b.dpk"), err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_hold(d, 1), 0);
	check_sample(d, 3);
	dpk_shard_release(d, 1);
	dpk_close(d);  /* with a shard attached: closed with the set */
	close(mfd);
}

/* A set whose first shard has another class table than the one that became the template. */
static void test_dpkstream_refuses_other_classes_than_template(void **state)
{
	struct dpk *d;
	char err[512];
	uint8_t ids[2][DPK_IDENTITY_SIZE];
	static const char *const one[] = { "cat" };
	static const char *const names[] = { "x.dpk", "b.dpk" };
	static const unsigned counts[] = { 3, 1 };

	(void)state;
	setfx_shard(dir, "b.dpk", 1, 3, &two, ids[1]);
	setfx_shard(dir, "x.dpk", 3, 0, &(struct setfx){ one, 1, 1, ~0u }, ids[0]);
	setfx_manifest(dir, "t.dpks", 2, names, counts, ids);
	int mfd = setfx_open(dir, "t.dpks");
	assert_int_equal(dpk_open_pending(mfd, 0, &d, err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_attach(d, 1, setfx_open(dir, "b.dpk"), err, sizeof(err)), 0);
	assert_int_equal(dpk_shard_detach(d, 1), 0);  /* the template's table outlives it */
	assert_int_equal(dpk_shard_attach(d, 0, setfx_open(dir, "x.dpk"), err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "t.dpks line 2: shard x.dpk has other class names than shard "
			       "b.dpk"));
	assert_false(dpk_shard_attached(d, 0));
	dpk_close(d);
	close(mfd);
}

/* ---- readers against a detacher ---- */

enum { READERS = 3, ROUNDS = 300 };

struct race {
	struct dpk *d;
	atomic_int stop;
	atomic_long reads, refused, bad;
};

static void *reader(void *arg)
{
	struct race *r = arg;
	uint64_t x = (uint64_t)(uintptr_t)&x;

	while (!atomic_load(&r->stop)) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t i = (x >> 33) % 8;
		uint32_t k = dpk_shard_find(r->d, i);
		if (dpk_shard_hold(r->d, k) < 0) {
			atomic_fetch_add(&r->refused, 1);
			continue;
		}
		struct dpk_entry e;
		uint8_t buf[16];
		/* held: every read succeeds, whatever the detacher does meanwhile */
		if (dpk_entry_load(r->d, i, &e, NULL, 0) < 0 ||
		    dpk_read_entry(r->d, &e, buf, sizeof(buf)) != 16 || buf[15] != i)
			atomic_fetch_add(&r->bad, 1);
		else
			atomic_fetch_add(&r->reads, 1);
		dpk_shard_release(r->d, k);
	}
	return NULL;
}

static void test_dpkstream_readers_never_see_a_detach(void **state)
{
	static const char *const names[] = { "a.dpk", "b.dpk", "c.dpk" };
	struct race r = { 0 };
	pthread_t t[READERS];
	char err[512];
	long detached = 0, busy = 0;

	(void)state;
	make_set();
	int mfd = setfx_open(dir, "s.dpks");
	assert_int_equal(dpk_open_pending(mfd, DPK_OPEN_MAP, &r.d, err, sizeof(err)), 0);
	for (uint32_t k = 0; k < 3; k++)  /* attached before the set is shared */
		assert_int_equal(dpk_shard_attach(r.d, k, setfx_open(dir, names[k]), err, sizeof(err)), 0);
	for (int n = 0; n < READERS; n++)
		assert_int_equal(pthread_create(&t[n], NULL, reader, &r), 0);
	for (int round = 0; round < ROUNDS; round++) {
		uint32_t k = (uint32_t)round % 3;
		int ret = dpk_shard_detach(r.d, k);
		if (ret == -EBUSY) {
			busy++;
			continue;
		}
		assert_int_equal(ret, 0);
		detached++;
		usleep(100);
		ret = dpk_shard_attach(r.d, k, setfx_open(dir, names[k]), err, sizeof(err));
		assert_int_equal(ret, 0);
	}
	atomic_store(&r.stop, 1);
	for (int n = 0; n < READERS; n++)
		pthread_join(t[n], NULL);
	printf("# %ld reads, %ld refused (pending), %ld detaches, %ld busy\n",
	       atomic_load(&r.reads), atomic_load(&r.refused), detached, busy);
	assert_int_equal(atomic_load(&r.bad), 0);
	assert_true(detached > 0);
	assert_true(atomic_load(&r.reads) > 0);
	dpk_close(r.d);
	close(mfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dpkstream_open_pending_knows_samples, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dpkstream_attach_checks_and_reads, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dpkstream_detach_waits_for_pins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpkstream_refuses_other_classes_than_template,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpkstream_readers_never_see_a_detach, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
