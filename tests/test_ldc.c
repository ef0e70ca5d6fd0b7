/* test_ldc.c - the client (shm/ldc.c) against a fake loaderd that answers with crafted numbers.
 * The fake is a unix socket of the test's own: the client's connection waits in its backlog, the
 * test accepts it and queues the answer (a job reply with a crafted ring memfd and a doorbell, a
 * stats reply) before the client asks, so one thread plays both sides. Each field of the job
 * reply, of the ring's header, of a slot's header and of the stats reply is set at its limit
 * (accepted) and one past it (refused with -EBADMSG and a message naming the field): one table
 * row per case. Regression: a job reply with steps_per_epoch 0 was accepted and ldc_token then
 * divided by it (SIGFPE). Also ldc_detach: the held batch keeps its bytes after the hang-up, and
 * ldc_close unmaps the ring. */
#include "shm/ldc.h"
#include "tests/fake_listen.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define JOB_ID 77u
#define BATCH 4u
#define SPE 10u        /* steps per epoch */
#define SAMPLES 100u
#define FIRST 25u      /* start at epoch 2, step 5 */
#define TOTAL 40u      /* (start_epoch 1 + epochs 3) x SPE */

static struct fake_listen g_fl = { .lfd = -1 };
static char g_dataset[128];

struct fake {
	struct ldc_job job;       /* what the client asks for */
	struct ctl_job_ok ok;     /* what the fake answers */
	struct ring_desc d;       /* the ring it sends */
	struct ring *ring;        /* its producer side */
	struct ldc *c;
	int sfd;                  /* the fake's end of the connection */
};

static int setup(void **state)
{
	(void)state;
	if (fake_listen_open(&g_fl, "test_ldc") < 0)
		return -1;
	snprintf(g_dataset, sizeof(g_dataset), "%s/data.dpk", g_fl.dir);
	int fd = open(g_dataset, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return fake_listen_close(&g_fl);
}

/* The job and the consistent answer to it that the cases then bend. */
static void fake_init(struct fake *f)
{
	memset(f, 0, sizeof(*f));
	f->sfd = -1;
	f->job = (struct ldc_job){ .job = "j", .dataset = g_dataset, .batch = BATCH, .crop_h = 8,
				   .crop_w = 6, .seed = 1, .rank = 1, .world = 2, .slots = 4,
				   .epochs = 3, .start_epoch = 1, .start_at = 1, .at_epoch = 2,
				   .at_step = 5 };
	f->ok = (struct ctl_job_ok){ .job_id = JOB_ID, .first_step = FIRST, .steps_total = TOTAL,
				     .steps_per_epoch = SPE, .samples = SAMPLES };
	f->d = (struct ring_desc){ .slots = 4, .batch = BATCH, .sample_bytes = 8 * 6 * 3,
				   .shape = { 8, 6, 3 }, .ndim = 3, .dtype = RING_DTYPE_U8,
				   .layout = RING_LAYOUT_NHWC, .rank = 1, .world = 2, .job_id = JOB_ID,
				   .first_step = FIRST, .steps_total = TOTAL, .steps_per_epoch = SPE };
}

/* Connect, queue the job reply with the ring and a doorbell, then let the client open. The
 * client's return value. */
static int fake_open(struct fake *f)
{
	char err[256];
	struct ldc_info info;

	assert_int_equal(ldc_connect(g_fl.sock, &f->c, err, sizeof(err)), 0);
	f->sfd = accept4(g_fl.lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(f->sfd >= 0);
	assert_int_equal(ring_create(&f->d, RING_CREATE_NO_HUGE, &f->ring), 0);
	int fds[2] = { ring_fd(f->ring), eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) };
	assert_true(fds[1] >= 0);
	assert_int_equal(ctl_send(f->sfd, CTL_JOB_OK, &f->ok, sizeof(f->ok), fds, 2), 0);
	close(fds[1]);
	return ldc_open(f->c, &f->job, &info);
}

static void fake_close(struct fake *f)
{
	ldc_close(f->c);
	ring_destroy(f->ring);
	if (f->sfd >= 0)
		close(f->sfd);
	f->c = NULL;
	f->ring = NULL;
	f->sfd = -1;
}

/* Expect @ret from the client: 0 when @needle is NULL, else -EBADMSG with @needle in its error. */
static void expect(struct fake *f, const char *what, int ret, const char *needle)
{
	const char *msg = ldc_error(f->c);

	if (!needle && ret != 0)
		fail_msg("%s: refused (%d): %s", what, ret, msg);
	if (needle && ret != -EBADMSG)
		fail_msg("%s: %d, expected -EBADMSG (%s)", what, ret, msg);
	if (needle && !strstr(msg, needle))
		fail_msg("%s: \"%s\" lacks \"%s\"", what, msg, needle);
}

/* ---- the job reply and the ring's header ---- */

enum field {
	F_SAMPLES, F_SPE, F_TOTAL, F_FIRST, F_RESERVED, F_UNBOUNDED_TOTAL, F_DEFAULT_FIRST,
	F_UNBOUNDED_FIRST,
	R_FIRST, R_RANK, R_SPE, R_TOTAL, R_JOB_ID, R_BATCH, R_SLOTS, R_DEFAULT_SLOTS, R_WIDTH,
	R_NCHW
};

struct open_case {
	const char *what;
	enum field f;
	uint64_t v;
	const char *needle;       /* NULL: accepted */
};

static const struct open_case open_cases[] = {
	{ "samples 0", F_SAMPLES, 0, "samples" },
	{ "samples = steps per epoch", F_SAMPLES, SPE, NULL },
	{ "samples < steps per epoch", F_SAMPLES, SPE - 1, "steps_per_epoch" },
	/* the regression: a division by zero in ldc_token */
	{ "steps_per_epoch 0", F_SPE, 0, "steps_per_epoch" },
	{ "steps_per_epoch 1", F_SPE, 1, NULL },
	{ "steps_per_epoch = samples", F_SPE, SAMPLES, NULL },
	{ "steps_per_epoch > samples", F_SPE, SAMPLES + 1, "steps_per_epoch" },
	{ "steps_total exact", F_TOTAL, TOTAL, NULL },
	{ "steps_total + 1", F_TOTAL, TOTAL + 1, "steps_total" },
	{ "steps_total - 1", F_TOTAL, TOTAL - 1, "steps_total" },
	{ "unbounded: steps_total 0", F_UNBOUNDED_TOTAL, 0, NULL },
	{ "unbounded: steps_total 1", F_UNBOUNDED_TOTAL, 1, "steps_total" },
	{ "first_step as asked", F_FIRST, FIRST, NULL },
	{ "first_step + 1", F_FIRST, FIRST + 1, "first_step" },
	{ "first_step - 1", F_FIRST, FIRST - 1, "first_step" },
	{ "default start: first_step = steps_total", F_DEFAULT_FIRST, TOTAL, NULL },
	{ "default start: first_step past the end", F_DEFAULT_FIRST, TOTAL + 1, "first_step" },
	{ "unbounded: first_step at the step limit", F_UNBOUNDED_FIRST, CTL_STEP_LIMIT, NULL },
	{ "unbounded: first_step past the step limit", F_UNBOUNDED_FIRST, CTL_STEP_LIMIT + 1,
	  "step limit" },
	{ "reserved 1", F_RESERVED, 1, "reserved" },
	{ "ring first_step + 1", R_FIRST, FIRST + 1, "ring first_step" },
	{ "ring rank 0", R_RANK, 0, "ring rank" },
	{ "ring steps_per_epoch + 1", R_SPE, SPE + 1, "ring steps_per_epoch" },
	{ "ring steps_per_epoch 0", R_SPE, 0, "ring steps_per_epoch" },
	{ "ring steps_total + 1", R_TOTAL, TOTAL + 1, "ring steps_total" },
	{ "ring steps_total 0", R_TOTAL, 0, "ring steps_total" },
	{ "ring job_id + 1", R_JOB_ID, JOB_ID + 1, "ring job_id" },
	{ "ring batch + 1", R_BATCH, BATCH + 1, "ring batch" },
	{ "ring batch - 1", R_BATCH, BATCH - 1, "ring batch" },
	{ "ring slots as asked", R_SLOTS, 4, NULL },
	{ "ring slots + 1", R_SLOTS, 5, "ring slots" },
	{ "default slots: ring of 2", R_DEFAULT_SLOTS, 2, NULL },
	{ "default slots: ring of 1", R_DEFAULT_SLOTS, 1, "ring slots" },
	{ "ring width + 1", R_WIDTH, 7, "ring shape" },
	{ "ring NCHW for an NHWC job", R_NCHW, 0, "ring shape" },
};

static void apply(struct fake *f, const struct open_case *k)
{
	uint64_t v = k->v;

	switch (k->f) {
	case F_SAMPLES:
		f->ok.samples = v;
		break;
	case F_SPE:  /* and what follows from it, so that only steps_per_epoch is on trial */
		f->ok.steps_per_epoch = f->d.steps_per_epoch = v;
		f->ok.steps_total = f->d.steps_total = 4 * v;
		f->ok.first_step = f->d.first_step = 2 * v + 5;
		if (v && v <= 5) {
			f->job.at_step = 0;
			f->ok.first_step = f->d.first_step = 2 * v;
		}
		break;
	case F_TOTAL:
		f->ok.steps_total = f->d.steps_total = v;
		break;
	case F_UNBOUNDED_TOTAL:
		f->job.epochs = 0;
		f->ok.steps_total = f->d.steps_total = v;
		if (v)
			f->ok.first_step = f->d.first_step = v;  /* a ring's start is within its end */
		break;
	case F_FIRST:
		f->ok.first_step = f->d.first_step = v;
		break;
	case F_DEFAULT_FIRST:
		f->job.start_at = 0;
		f->ok.first_step = v;
		f->d.first_step = v > TOTAL ? TOTAL : v;  /* the ring refuses a start past its end */
		break;
	case F_UNBOUNDED_FIRST:
		f->job.epochs = 0;
		f->job.start_at = 0;
		f->ok.steps_total = f->d.steps_total = 0;
		f->ok.first_step = f->d.first_step = v;
		break;
	case F_RESERVED:
		f->ok.reserved[0] = v;
		break;
	case R_FIRST:
		f->d.first_step = v;
		break;
	case R_RANK:
		f->d.rank = (uint32_t)v;
		break;
	case R_SPE:
		f->d.steps_per_epoch = v;
		break;
	case R_TOTAL:
		f->d.steps_total = v;
		break;
	case R_JOB_ID:
		f->d.job_id = v;
		break;
	case R_BATCH:
		f->d.batch = (uint32_t)v;
		break;
	case R_SLOTS:
		f->d.slots = (uint32_t)v;
		break;
	case R_DEFAULT_SLOTS:
		f->job.slots = 0;
		f->d.slots = (uint32_t)v;
		break;
	case R_WIDTH:
		f->d.shape[1] = (uint32_t)v;
		f->d.sample_bytes = 8 * v * 3;
		break;
	case R_NCHW:
		f->d.layout = RING_LAYOUT_NCHW;
		f->d.shape[0] = 3, f->d.shape[1] = 8, f->d.shape[2] = 6;
		break;
	}
}

static void test_ldc_open_checks_every_field_of_the_reply(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(open_cases) / sizeof(open_cases[0]); i++) {
		const struct open_case *k = &open_cases[i];
		struct fake f;
		char tok[LDC_TOKEN_SIZE];

		fake_init(&f);
		apply(&f, k);
		expect(&f, k->what, fake_open(&f), k->needle);
		/* refused: no job, so nothing to divide by; accepted: a token of the step asked */
		int n = ldc_token(f.c, LDC_TOKEN_NEXT, tok, sizeof(tok));
		if (k->needle)
			assert_int_equal(n, -EINVAL);
		else
			assert_int_equal(n, LDC_TOKEN_SIZE);
		fake_close(&f);
	}
}

/* ---- a slot's header, at acquire ---- */

enum slot_field { S_COUNT, S_EPOCH, S_STEP_IN_EPOCH, S_STEP, S_GCOUNT, S_GOFFSET };

struct slot_case {
	const char *what;
	enum slot_field f;
	uint64_t v;
	const char *needle;
};

static const struct slot_case slot_cases[] = {
	{ "count 0", S_COUNT, 0, ": count is" },
	{ "count 1", S_COUNT, 1, NULL },
	{ "count = batch", S_COUNT, BATCH, NULL },
	{ "count = batch + 1", S_COUNT, BATCH + 1, ": count is" },
	{ "epoch right", S_EPOCH, FIRST / SPE, NULL },
	{ "epoch + 1", S_EPOCH, FIRST / SPE + 1, ": epoch is" },
	{ "step_in_epoch right", S_STEP_IN_EPOCH, FIRST % SPE, NULL },
	{ "step_in_epoch + 1", S_STEP_IN_EPOCH, FIRST % SPE + 1, ": step_in_epoch is" },
	{ "step_in_epoch of the epoch before", S_STEP_IN_EPOCH, FIRST % SPE + SPE, ": step_in_epoch is" },
	{ "step + 1", S_STEP, FIRST + 1, ": step is" },
	/* the fake is rank 1 of 2 with even splits: its part is [BATCH, 2 BATCH) of 2 BATCH */
	{ "global_count = world x batch", S_GCOUNT, 2 * BATCH, NULL },
	{ "global_count not a multiple of world", S_GCOUNT, 2 * BATCH + 1, ": global_count is" },
	{ "global_count = world x (batch + 1)", S_GCOUNT, 2 * (BATCH + 1), ": global_count is" },
	{ "global_count 0", S_GCOUNT, 0, ": global_count is" },
	{ "global_count 2^32 - 2", S_GCOUNT, UINT32_MAX - 1, ": global_count is" },
	{ "global_offset = rank x count", S_GOFFSET, BATCH, NULL },
	{ "global_offset of rank 0", S_GOFFSET, 0, ": global_offset is" },
	{ "global_offset + count past the step", S_GOFFSET, BATCH + 1, ": global_offset is" },
	{ "global_offset 2^32 - 1", S_GOFFSET, UINT32_MAX, ": global_offset is" },
};

/* The split of an even step for the fake's rank 1 of 2. */
static void split_even(struct ring_slot *s, uint32_t count)
{
	s->hdr->global_count = 2 * count;
	s->hdr->global_offset = count;
}

static void test_ldc_acquire_checks_the_slot_header(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(slot_cases) / sizeof(slot_cases[0]); i++) {
		const struct slot_case *k = &slot_cases[i];
		struct fake f;
		struct ring_slot s;
		struct ldc_batch b;

		fake_init(&f);
		assert_int_equal(fake_open(&f), 0);
		assert_int_equal(ring_prod_begin(f.ring, FIRST, &s), 0);
		s.hdr->epoch = FIRST / SPE;
		s.hdr->step_in_epoch = FIRST % SPE;
		split_even(&s, BATCH);
		ring_prod_publish(f.ring, &s, BATCH, 0);
		switch (k->f) {  /* after the publish, as a hostile server would */
		case S_COUNT:
			s.hdr->count = (uint32_t)k->v;
			if (!k->needle)
				split_even(&s, (uint32_t)k->v);  /* a consistent short step */
			break;
		case S_GCOUNT:
			s.hdr->global_count = (uint32_t)k->v;
			break;
		case S_GOFFSET:
			s.hdr->global_offset = (uint32_t)k->v;
			break;
		case S_EPOCH:
			s.hdr->epoch = k->v;
			break;
		case S_STEP_IN_EPOCH:
			s.hdr->step_in_epoch = k->v;
			break;
		case S_STEP:
			s.hdr->step = k->v;
			break;
		}
		expect(&f, k->what, ldc_acquire(f.c, 1000, &b), k->needle);
		if (!k->needle) {
			assert_int_equal(b.step, FIRST);
			assert_int_equal(b.epoch, FIRST / SPE);
			assert_int_equal(b.step_in_epoch, FIRST % SPE);
			assert_int_equal(b.count, k->f == S_COUNT ? k->v : BATCH);
		} else {  /* the connection is done: no second look at a ring not to be trusted */
			assert_int_equal(ldc_acquire(f.c, 0, &b), -EPIPE);
		}
		fake_close(&f);
	}
}

/* ---- the aux area (docs/RING.md "Aux fields") ---- */

/* Sample j's blob: 2 fields, "txt" of @l0 bytes and "json" of @l1, the blob @len bytes long. */
static void put_blob(const struct fake *f, struct ring_slot *s, uint32_t j, uint32_t l0,
		     uint32_t l1, uint32_t len)
{
	uint8_t *b = s->aux + (size_t)j * f->d.aux_stride;
	memcpy(b, &l0, 4);
	memcpy(b + 4, &l1, 4);
	memset(b + 8, 'a' + (int)j, f->d.aux_stride - 8);
	s->aux_len[j] = len;
}

struct aux_case {
	const char *what;
	uint32_t l0, l1, len;   /* sample 2's */
	const char *needle;
};

#define STRIDE 65552u  /* 8 + 65536 + 8: a field at its bound fits */
static const struct aux_case aux_cases[] = {
	{ "empty fields", 0, 0, 8, NULL },
	{ "a field at 65536", 65536, 0, 8 + 65536, NULL },
	{ "blob = stride", 65536, 8, STRIDE, NULL },
	{ "blob = stride + 1", 65536, 9, STRIDE + 1, "aux_len[2] 65553 outside 8..65552" },
	{ "blob under the lengths", 0, 0, 7, "aux_len[2] 7 outside" },
	{ "a field at 65537", 65537, 0, 8 + 65537, "aux field txt of 65537 bytes" },
	{ "a field past the blob", 5, 0, 12, "aux field txt of 5 bytes runs past its 12" },
	{ "fields short of the blob", 3, 0, 12, "add up to 11 of its 12 bytes" },
	{ "lengths that wrap", UINT32_MAX, 2, 9, "aux field txt of 4294967295" },
};

static void test_ldc_acquire_checks_the_aux_area(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(aux_cases) / sizeof(aux_cases[0]); i++) {
		const struct aux_case *k = &aux_cases[i];
		struct fake f;
		struct ring_slot s;
		struct ldc_batch b;

		fake_init(&f);
		f.d.aux_fields = 2;
		f.d.aux_stride = STRIDE;
		strcpy(f.d.aux_names[0], "txt");
		strcpy(f.d.aux_names[1], "json");
		assert_int_equal(fake_open(&f), 0);
		assert_string_equal(ldc_aux_name(f.c, 1), "json");
		assert_null(ldc_aux_name(f.c, 2));
		assert_int_equal(ring_prod_begin(f.ring, FIRST, &s), 0);
		s.hdr->epoch = FIRST / SPE;
		s.hdr->step_in_epoch = FIRST % SPE;
		split_even(&s, BATCH);
		for (uint32_t j = 0; j < BATCH; j++)
			put_blob(&f, &s, j, j, 1, 9 + j);
		ring_prod_publish(f.ring, &s, BATCH, 0);
		put_blob(&f, &s, 2, k->l0, k->l1, k->len);  /* after the publish, as a hostile server */
		expect(&f, k->what, ldc_acquire(f.c, 1000, &b), k->needle);
		if (!k->needle) {
			assert_int_equal(b.aux_fields, 2);
			for (uint32_t j = 0; j < BATCH; j++) {
				uint32_t l0 = j == 2 ? k->l0 : j, l1 = j == 2 ? k->l1 : 1;
				assert_int_equal(b.field_len[2 * j], l0);
				assert_int_equal(b.field_len[2 * j + 1], l1);
				assert_int_equal(b.field_off[2 * j], j * STRIDE + 8);
				assert_int_equal(b.field_off[2 * j + 1], j * STRIDE + 8 + l0);
				if (l0)
					assert_int_equal(b.aux[b.field_off[2 * j]], 'a' + j);
			}
		} else {
			assert_int_equal(ldc_acquire(f.c, 0, &b), -EPIPE);
		}
		fake_close(&f);
	}
}

/* ---- the stats reply ---- */

enum stats_field { T_SLOTS, T_OCCUPANCY, T_RANKS, T_JOB_ID, T_RESERVED };

struct stats_case {
	const char *what;
	enum stats_field f;
	uint64_t v;
	const char *needle;
};

static const struct stats_case stats_cases[] = {
	{ "slots as the ring", T_SLOTS, 4, NULL },
	{ "slots + 1", T_SLOTS, 5, "slots" },
	{ "occupancy = slots", T_OCCUPANCY, 4, NULL },
	{ "occupancy = slots + 1", T_OCCUPANCY, 5, "occupancy" },
	{ "ranks_attached = world", T_RANKS, 2, NULL },
	{ "ranks_attached = world + 1", T_RANKS, 3, "ranks_attached" },
	{ "job_id + 1", T_JOB_ID, JOB_ID + 1, "job_id" },
	{ "reserved0 1", T_RESERVED, 1, "reserved" },
};

static void test_ldc_stats_checks_the_reply(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(stats_cases) / sizeof(stats_cases[0]); i++) {
		const struct stats_case *k = &stats_cases[i];
		struct ctl_stats st = { .job_id = JOB_ID, .slots = 4, .occupancy = 1,
					.ranks_attached = 1, .published = 3 }, got;
		struct fake f;

		fake_init(&f);
		assert_int_equal(fake_open(&f), 0);
		switch (k->f) {
		case T_SLOTS:
			st.slots = (uint32_t)k->v;
			break;
		case T_OCCUPANCY:
			st.occupancy = (uint32_t)k->v;
			break;
		case T_RANKS:
			st.ranks_attached = (uint32_t)k->v;
			break;
		case T_JOB_ID:
			st.job_id = k->v;
			break;
		case T_RESERVED:
			st.reserved0 = (uint32_t)k->v;
			break;
		}
		assert_int_equal(ctl_send(f.sfd, CTL_STATS, &st, sizeof(st), NULL, 0), 0);
		expect(&f, k->what, ldc_stats(f.c, &got), k->needle);
		if (!k->needle)
			assert_int_equal(got.published, 3);
		fake_close(&f);
	}
}

/* ---- ldc_split_weights: a hostile server's CTL_SPLIT ---- */

static const struct split_case {
	const char *what;
	int field;                /* 0 as is; 1 from; 2 world; 3 weight 0; 4 length - 1; 5 nrows;
				     6 slots; 7 the type of the reply */
	int64_t v;
	int ret;
	const char *needle;
} split_cases[] = {
	{ "the weights asked for", 0, 0, 1, NULL },
	{ "world 0: not known", 2, 0, 0, NULL },
	{ "another step", 1, 8, -EBADMSG, "step 8 of world 2, asked for step 7" },
	{ "world 3 in the bytes of 2", 2, 3, -EBADMSG, "not the 40 of world 3" },
	{ "rank 0 one under the floor", 3, CTL_SPLIT_ONE / 8 - 1, -EBADMSG, "weight of rank 0" },
	{ "rank 0 at the floor, the sum one short", 3, CTL_SPLIT_ONE / 8, -EBADMSG, "sum to" },
	{ "a byte short", 4, 0, -EBADMSG, "bytes" },
	{ "rows 1", 5, 1, -EBADMSG, "rows 1" },
	{ "slots 2", 6, 2, -EBADMSG, "slots 2" },
	{ "a stats reply", 7, 0, -EBADMSG, "message type 4" },
};

static void test_ldc_split_weights_checks_the_reply(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(split_cases) / sizeof(split_cases[0]); i++) {
		const struct split_case *k = &split_cases[i];
		struct fake f;
		char buf[64];
		struct ctl_split h = { .from = 7, .world = 2 };
		uint32_t w[2] = { CTL_SPLIT_ONE / 4, CTL_SPLIT_ONE - CTL_SPLIT_ONE / 4 }, got[2];
		size_t len = CTL_SPLIT_SIZE(2, 0);

		fake_init(&f);
		f.job.balance = 1;
		f.d.batch = CTL_BALANCE_CAP(BATCH);
		assert_int_equal(fake_open(&f), 0);
		switch (k->field) {
		case 1: h.from = (uint64_t)k->v; break;
		case 2: h.world = (uint32_t)k->v; len = CTL_SPLIT_SIZE(2, 0); break;
		case 3: w[0] = (uint32_t)k->v; break;
		case 4: len--; break;
		case 5: h.nrows = (uint32_t)k->v; break;
		case 6: h.slots = (uint32_t)k->v; break;
		}
		memcpy(buf, &h, sizeof(h));
		memcpy(buf + sizeof(h), w, sizeof(w));
		if (k->field == 2 && k->v == 0)
			len = sizeof(h);
		if (k->field == 7) {
			struct ctl_stats st = { .job_id = JOB_ID, .slots = 4 };
			assert_int_equal(ctl_send(f.sfd, CTL_STATS, &st, sizeof(st), NULL, 0), 0);
		} else {
			assert_int_equal(ctl_send(f.sfd, CTL_SPLIT, buf, len, NULL, 0), 0);
		}
		int r = ldc_split_weights(f.c, 7, got, 2);
		if (r != k->ret || (k->needle && !strstr(ldc_error(f.c), k->needle)))
			fail_msg("%s: %d (%s), want %d with \"%s\"", k->what, r, ldc_error(f.c),
				 k->ret, k->needle ? k->needle : "");
		if (r == 1)
			assert_memory_equal(got, w, sizeof(w));
		/* what the client asked: CTL_SPLIT_REQ for step 7 */
		char req[CTL_MSG_MAX];
		uint16_t type = 0;
		struct ctl_split_req q;
		assert_true(ctl_recv(f.sfd, req, &type, NULL, NULL) >= 0 && type == CTL_JOB_OPEN);
		assert_int_equal(ctl_recv(f.sfd, req, &type, NULL, NULL), (ssize_t)sizeof(q));
		assert_int_equal(type, CTL_SPLIT_REQ);
		memcpy(&q, req, sizeof(q));
		assert_int_equal(q.step, 7);
		assert_int_equal(q.reserved, 0);
		fake_close(&f);
	}
}

/* ---- ldc_detach ---- */

/* Mappings of this process whose name holds @name (/proc/self/maps). */
static int mappings(const char *name)
{
	FILE *fp = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp))
		n += strstr(line, name) != NULL;
	fclose(fp);
	return n;
}

static void test_ldc_detach_keeps_the_held_batch_until_close(void **state)
{
	char name[64], buf[CTL_MSG_MAX];
	struct ring_slot s;
	struct ldc_batch b;
	struct fake f;
	uint16_t type;

	(void)state;
	fake_init(&f);
	snprintf(name, sizeof(name), "loaderd-ring-j%u-r1", JOB_ID);
	int before = mappings(name);  /* 0, unless a failed case above left its fake behind */
	assert_int_equal(fake_open(&f), 0);
	assert_int_equal(mappings(name), before + 2);  /* the fake's and the client's */
	assert_int_equal(ring_prod_begin(f.ring, FIRST, &s), 0);
	s.hdr->epoch = FIRST / SPE;
	s.hdr->step_in_epoch = FIRST % SPE;
	memset(s.payload, 0xa5, BATCH * f.d.sample_bytes);
	split_even(&s, BATCH);
	ring_prod_publish(f.ring, &s, BATCH, 0);
	assert_int_equal(ldc_acquire(f.c, 1000, &b), 0);

	ldc_detach(f.c);
	ldc_detach(f.c);  /* a second call does nothing */
	/* the fake sees the hang-up (its job open came first) */
	assert_true(ctl_recv(f.sfd, buf, &type, NULL, NULL) >= 0 && type == CTL_JOB_OPEN);
	assert_int_equal(ctl_recv(f.sfd, buf, &type, NULL, NULL), -EPIPE);
	assert_int_equal(ldc_acquire(f.c, -1, &b), -EPIPE);
	assert_int_equal(ldc_release(f.c, &b), -EPIPE);
	struct ctl_stats st;
	assert_int_equal(ldc_stats(f.c, &st), -EPIPE);
	/* the batch is still mapped, with its bytes */
	assert_non_null(ldc_ring_base(f.c));
	assert_int_equal(mappings(name), before + 2);
	for (uint64_t i = 0; i < BATCH * b.sample_bytes; i++)
		if (((uint8_t *)b.data)[i] != 0xa5)
			fail_msg("byte %llu of the held batch changed", (unsigned long long)i);
	ldc_close(f.c);
	f.c = NULL;
	assert_int_equal(mappings(name), before + 1);  /* ldc_close unmapped the client's */
	fake_close(&f);
	assert_int_equal(mappings(name), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ldc_open_checks_every_field_of_the_reply),
		cmocka_unit_test(test_ldc_acquire_checks_the_slot_header),
		cmocka_unit_test(test_ldc_acquire_checks_the_aux_area),
		cmocka_unit_test(test_ldc_stats_checks_the_reply),
		cmocka_unit_test(test_ldc_split_weights_checks_the_reply),
		cmocka_unit_test(test_ldc_detach_keeps_the_held_batch_until_close),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
