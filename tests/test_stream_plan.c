/* test_stream_plan.c - one plan of a streamed set (loader/stream_plan.h) on a scripted future:
 * half the budget fetched ahead, a step's shards whole or not at all, at the bound and one past;
 * round 0 (the steps consumers wait on) past the half, within whole, at that bound and one past;
 * the first step taken whatever it costs, and failing (named) only past what the cache may hold,
 * at that bound and one past; the rest of the budget keeps the shards here in the order of their
 * next use (Belady's), or with lru the most recently read, at the bound of the room and one past,
 * nothing kept after the first that does not fit; a shard just attached never let go, at the
 * grace's bound; lean (wanted shards not coming): nothing kept for later; nobody reading:
 * everything let go; a unit past the job's end skipped; the curve left for the node's share: the
 * distinct shards' bytes by round, the walk going on until they pass curve_until (at it and one
 * past), thinned past SSHARE_POINTS rounds. */
#include "loader/stream_plan.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define TOTAL 8
#define ROUNDS 8
#define UNITS 2
#define END 0xff  /* a unit's list ends */

/* The script: the shards unit i of round t reads (END-terminated; an empty list: past the end). */
struct script {
	uint8_t sh[ROUNDS][UNITS][4];
	unsigned calls;
};

static uint32_t shards(void *arg, uint64_t t, uint32_t i, uint8_t *seen, uint32_t *out,
		       uint32_t max)
{
	struct script *s = arg;
	uint32_t n = 0;

	s->calls++;
	if (t >= ROUNDS || i >= UNITS)
		return 0;
	for (int q = 0; q < 4 && s->sh[t][i][q] != END && n < max; q++) {
		uint8_t k = s->sh[t][i][q];
		if (!seen[k]) {
			seen[k] = 1;
			out[n++] = k;
		}
	}
	return n;
}

struct fixture {
	struct script sc;
	uint8_t attached[TOTAL], seen[TOTAL];
	uint64_t bytes[TOTAL];
	int64_t at_ns[TOTAL], used_ns[TOTAL];
	uint32_t order[TOTAL], want[16], let[16];
	struct splan p;
};

/* One rank (one unit a round), shards of 10 bytes. Rounds 0..5 read 0, 1, 2, 5, 3, 4; 0, 3, 4, 5
 * and 6 are here (6 read by no step), attached long ago. */
static void setup(struct fixture *f, uint64_t limit)
{
	static const uint8_t seq[] = { 0, 1, 2, 5, 3, 4 };

	memset(f, 0, sizeof(*f));
	memset(f->sc.sh, END, sizeof(f->sc.sh));
	for (unsigned t = 0; t < sizeof(seq); t++)
		f->sc.sh[t][0][0] = seq[t];
	for (unsigned k = 0; k < TOTAL; k++)
		f->bytes[k] = 10;
	f->attached[0] = f->attached[3] = f->attached[4] = f->attached[5] = f->attached[6] = 1;
	f->p = (struct splan){ .total = TOTAL, .attached = f->attached, .bytes = f->bytes,
			       .limit = limit, .whole = 1000, .at_ns = f->at_ns, .now = 1000000,
			       .grace_ns = 100, .units0 = 1, .units = 1, .horizon = ROUNDS,
			       .shards = shards, .arg = &f->sc, .list_max = 16,
			       .used_ns = f->used_ns, .seen = f->seen, .order = f->order,
			       .want = f->want, .let = f->let };
}

static void expect_list(const uint32_t *got, uint32_t n, const uint32_t *want, uint32_t wn)
{
	assert_int_equal(n, wn);
	for (uint32_t q = 0; q < n; q++)
		assert_int_equal(got[q], want[q]);
}

/* limit 60: ahead 30 takes rounds 0-2 (0, 1, 2: 30 bytes, exactly half); the room left, 30,
 * keeps 5, 3, 4, the order of their next reads; 6, read by no step, goes. */
static void test_future_keeps_soonest(void **state)
{
	struct fixture f;
	(void)state;

	setup(&f, 60);
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.want, f.p.nwant, (uint32_t[]){ 1, 2 }, 2);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 6 }, 1);
	assert_int_equal(f.p.nkept, 3);
	/* 6 read after 4: met last by the walk, and the room (30) is full before it */
	f.sc.sh[6][0][0] = 6;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 6 }, 1);
	/* 6 read before 3 and 4: 5 and 6 kept, then 3; 4 goes */
	setup(&f, 60);
	f.sc.sh[3][0][0] = 6;
	f.sc.sh[4][0][0] = 5;
	f.sc.sh[5][0][0] = 3;
	f.sc.sh[6][0][0] = 4;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 4 }, 1);
}

/* The half at its bound: limit 59 (ahead 29) leaves round 2 out (20 + 10 > 29): only 1 is
 * fetched ahead; 2 is then neither wanted nor here. The room, 39, keeps 5, 3, 4 (30). */
static void test_ahead_bound(void **state)
{
	struct fixture f;
	(void)state;

	setup(&f, 59);
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.want, f.p.nwant, (uint32_t[]){ 1 }, 1);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 6 }, 1);
	/* a step's shards whole: round 1 reads 1 and 7 (20 bytes) past ahead 29 with round 0's 10
	 * (30 > 29): neither wanted; at limit 60 (ahead 30) both */
	setup(&f, 59);
	f.sc.sh[1][0][1] = 7;
	assert_int_equal(splan_run(&f.p), 0);
	assert_int_equal(f.p.nwant, 0);
	setup(&f, 60);
	f.sc.sh[1][0][1] = 7;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.want, f.p.nwant, (uint32_t[]){ 1, 7 }, 2);
}

/* The room at its bound: 4 takes 11, so after 5 and 3 (20 of 30) it does not fit (31 > 30): it
 * goes, and 6 after it though it would fit (nothing after the first that does not is kept).
 * With 4 at 10 and 3 at 10, the room exactly full keeps all three. */
static void test_room_bound(void **state)
{
	struct fixture f;
	(void)state;

	setup(&f, 60);
	f.bytes[4] = 11;
	f.bytes[6] = 1;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 4, 6 }, 2);
	assert_int_equal(f.p.nkept, 2);
	setup(&f, 60);
	f.bytes[6] = 0;  /* fits in nothing */
	assert_int_equal(splan_run(&f.p), 0);
	assert_int_equal(f.p.nlet, 0);
	assert_int_equal(f.p.nkept, 4);
}

/* lru: the same shards here kept by their last read, most recent first: 6 (read at 900), 5 (500),
 * 3 (400) kept; 4 (300) goes. Round 0's shard (0, here) is marked read now. */
static void test_lru_keeps_recent(void **state)
{
	struct fixture f;
	(void)state;

	setup(&f, 60);
	f.p.lru = 1;
	f.used_ns[6] = 900, f.used_ns[5] = 500, f.used_ns[3] = 400, f.used_ns[4] = 300;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.want, f.p.nwant, (uint32_t[]){ 1, 2 }, 2);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 4 }, 1);
	assert_true(f.used_ns[0] == f.p.now);
	assert_true(f.used_ns[6] == 900);  /* not read by round 0: unchanged */
	/* the future's policy on the same: 6 goes (no step reads it) */
	f.p.lru = 0;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 6 }, 1);
}

/* The first step is taken whatever the half says; past what the cache may hold for the stream
 * (whole) the plan fails, naming the unit, its shards and bytes; at exactly whole it is taken. */
static void test_first_step(void **state)
{
	struct fixture f;
	(void)state;

	setup(&f, 10);  /* ahead 5: less than one shard */
	f.sc.sh[0][0][1] = 1;
	f.sc.sh[0][0][2] = 2;
	f.p.whole = 30;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.want, f.p.nwant, (uint32_t[]){ 1, 2 }, 2);
	f.p.whole = 29;
	assert_int_equal(splan_run(&f.p), -EFBIG);
	assert_int_equal(f.p.fail_t, 0);
	assert_int_equal(f.p.fail_i, 0);
	assert_int_equal(f.p.fail_shards, 3);
	assert_int_equal(f.p.fail_bytes, 30);
}

/* A shard attached less than grace_ns ago is not let go (its step may be about to hold it);
 * at exactly grace_ns it is. Nobody reading (no unit): everything here goes. */
static void test_grace_and_nobody(void **state)
{
	struct fixture f;
	(void)state;

	setup(&f, 60);
	f.at_ns[6] = f.p.now - f.p.grace_ns + 1;
	assert_int_equal(splan_run(&f.p), 0);
	assert_int_equal(f.p.nlet, 0);
	f.at_ns[6] = f.p.now - f.p.grace_ns;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 6 }, 1);

	/* lean: nothing kept for later, the near future still wanted and its shard here kept */
	setup(&f, 60);
	f.p.lean = 1;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.want, f.p.nwant, (uint32_t[]){ 1, 2 }, 2);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 5, 3, 4, 6 }, 4);

	setup(&f, 60);
	f.p.units0 = f.p.units = 0;
	assert_int_equal(splan_run(&f.p), 0);
	assert_int_equal(f.p.nwant, 0);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 0, 3, 4, 5, 6 }, 5);
	assert_int_equal(f.sc.calls, 0);
}

/* Parked steps come first in round 0 (two units there, one after); a unit past the job's end
 * (an empty list) is skipped and the walk goes on. */
static void test_units_and_end(void **state)
{
	struct fixture f;
	(void)state;

	setup(&f, 60);
	f.p.units0 = 2;
	f.sc.sh[0][1][0] = 7;  /* round 0's second unit: a rank's next step after a parked one */
	f.sc.sh[1][0][0] = END;  /* round 1: past the end */
	assert_int_equal(splan_run(&f.p), 0);
	/* ahead 30: 0 and 7 (round 0), round 1 nothing, 2 (round 2): 30 */
	expect_list(f.p.want, f.p.nwant, (uint32_t[]){ 7, 2 }, 2);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 6 }, 1);
}

/* Round 0 (the steps open now, each rank's next) is wanted whole past the half, within whole:
 * limit 20 (ahead 10), round 0 reads 0 (here) and 7 (20 bytes in all): 7 wanted; round 1's 1
 * is not (30 > 10). With whole 19, 7 is past it: not wanted (the first unit alone fits). */
static void test_round0_past_half(void **state)
{
	struct fixture f;
	(void)state;

	setup(&f, 20);
	f.p.units0 = 2;
	f.sc.sh[0][1][0] = 7;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.want, f.p.nwant, (uint32_t[]){ 7 }, 1);
	f.p.whole = 20;
	assert_int_equal(splan_run(&f.p), 0);
	expect_list(f.p.want, f.p.nwant, (uint32_t[]){ 7 }, 1);
	f.p.whole = 19;
	assert_int_equal(splan_run(&f.p), 0);
	assert_int_equal(f.p.nwant, 0);
}

/* The curve: 10 bytes a round for rounds 0-5, whatever is here; a shard read again adds nothing;
 * with nothing here to keep, the walk goes on for it only until its bytes pass curve_until. */
static void test_curve(void **state)
{
	struct fixture f;
	struct sshare_pt c[SSHARE_POINTS];
	(void)state;

	setup(&f, 60);
	f.p.curve = c;
	f.p.curve_until = 1000;
	f.sc.sh[6][0][0] = 0;  /* read again: no point */
	assert_int_equal(splan_run(&f.p), 0);
	assert_int_equal(f.p.ncurve, 6);
	for (uint32_t q = 0; q < 6; q++) {
		assert_int_equal(c[q].round, q);
		assert_int_equal(c[q].bytes, 10 * (q + 1));
	}
	/* the plan itself is the same with or without the curve */
	expect_list(f.p.want, f.p.nwant, (uint32_t[]){ 1, 2 }, 2);
	expect_list(f.p.let, f.p.nlet, (uint32_t[]){ 6 }, 1);
	/* only 0 here: the walk for the kept stops at once; for the curve at 30 bytes (exactly
	 * curve_until) it goes on, and stops at the first round past it */
	memset(f.attached, 0, sizeof(f.attached));
	f.attached[0] = 1;
	f.p.curve_until = 30;
	assert_int_equal(splan_run(&f.p), 0);
	assert_int_equal(f.p.ncurve, 4);
	assert_int_equal(c[3].bytes, 40);
	f.p.curve_until = 29;
	assert_int_equal(splan_run(&f.p), 0);
	assert_int_equal(f.p.ncurve, 3);
	assert_int_equal(c[2].bytes, 30);
	/* two units in round 0: the floor is the first step alone, then round 0 whole */
	setup(&f, 60);
	f.p.curve = c;
	f.p.curve_until = 1000;
	f.p.units0 = 2;
	f.sc.sh[0][1][0] = 7;
	assert_int_equal(splan_run(&f.p), 0);
	assert_int_equal(c[0].round, 0);
	assert_int_equal(c[0].bytes, 10);
	assert_int_equal(c[1].round, 0);
	assert_int_equal(c[1].bytes, 20);
	assert_int_equal(c[2].round, 1);
	assert_int_equal(c[2].bytes, 30);
	memset(f.attached, 0, sizeof(f.attached));
	f.attached[0] = 1;
	f.p.units0 = 1;
	f.p.curve = NULL;  /* no curve: no walk past the near future */
	f.sc.calls = 0;
	assert_int_equal(splan_run(&f.p), 0);
	assert_int_equal(f.p.ncurve, 0);
	assert_true(f.sc.calls <= 4);
}

/* A walk of 200 rounds, one new shard of a byte each: thinned to at most SSHARE_POINTS points,
 * round 0 first, the last round last, every point exact. */
static uint32_t linear(void *arg, uint64_t t, uint32_t i, uint8_t *seen, uint32_t *out, uint32_t max)
{
	(void)arg;
	(void)i;
	if (t >= 200 || seen[t] || !max)
		return 0;
	seen[t] = 1;
	out[0] = (uint32_t)t;
	return 1;
}

static void test_curve_thinned(void **state)
{
	static uint8_t attached[200], seen[200];
	static uint64_t bytes[200];
	static int64_t at_ns[200], used_ns[200];
	static uint32_t order[200], want[256], let[256];
	struct sshare_pt c[SSHARE_POINTS];
	(void)state;

	for (unsigned k = 0; k < 200; k++)
		bytes[k] = 1;
	struct splan p = { .total = 200, .attached = attached, .bytes = bytes, .limit = 4,
			   .whole = 1000, .at_ns = at_ns, .now = 1, .units0 = 1, .units = 1,
			   .horizon = 4096, .shards = linear, .list_max = 256, .used_ns = used_ns,
			   .seen = seen, .order = order, .want = want, .let = let, .curve = c,
			   .curve_until = 1000 };
	assert_int_equal(splan_run(&p), 0);
	assert_true(p.ncurve > SSHARE_POINTS / 2 && p.ncurve <= SSHARE_POINTS);
	assert_int_equal(c[0].round, 0);
	assert_int_equal(c[p.ncurve - 1].round, 199);
	for (uint32_t q = 0; q < p.ncurve; q++) {
		assert_int_equal(c[q].bytes, c[q].round + 1);
		if (q)
			assert_true(c[q].round > c[q - 1].round);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_future_keeps_soonest),
		cmocka_unit_test(test_ahead_bound),
		cmocka_unit_test(test_room_bound),
		cmocka_unit_test(test_lru_keeps_recent),
		cmocka_unit_test(test_first_step),
		cmocka_unit_test(test_grace_and_nobody),
		cmocka_unit_test(test_units_and_end),
		cmocka_unit_test(test_round0_past_half),
		cmocka_unit_test(test_curve),
		cmocka_unit_test(test_curve_thinned),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
