/* test_job.c - loader/job.c through its ops (ldr_job_ops), without a server: small .dpk files
 * made here with the formats/ writer (JPEGs from TurboJPEG, raw and zstd tensors), jobs opened
 * on them and steps filled into a slot in memory. Checks the ring shape a job announces, ids,
 * labels and decoded pixels (against a plain tjDecompress2 of the same record, cropped), a bad
 * record (checksum or decode) substituted by the next sample and flagged with its sample id, the
 * fail policy naming the sample, and bad job specs refused with a message naming the field. */
#include "formats/dpk.h"
#include "loader/job.h"
#include "codec/kind.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <turbojpeg.h>
#include <zstd.h>
#include <cmocka.h>

#include "tests/step_fill.h"
#include "tests/tmpdir.h"

#define SIDE 64   /* images are SIDE x SIDE; a 56 x 56 center crop of them is exactly 1:1 */
#define OUT 56
#define OFF ((SIDE - OUT) / 2)
#define NJPEG 6

static char dir[64];

static uint8_t px(unsigned i, unsigned y, unsigned x, unsigned c)
{
	return (uint8_t)(x * 3 + y * 5 + c * 40 + i * 17);
}

static void path_of(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

/* Image @i as RGB, SIDE x SIDE. Caller frees. */
static uint8_t *image(unsigned i)
{
	uint8_t *p = malloc(SIDE * SIDE * 3);

	assert_non_null(p);
	for (unsigned y = 0; y < SIDE; y++)
		for (unsigned x = 0; x < SIDE; x++)
			for (unsigned c = 0; c < 3; c++)
				p[(y * SIDE + x) * 3 + c] = px(i, y, x, c);
	return p;
}

/* Image @i as a 4:4:4 JPEG (tjFree the buffer). */
static uint8_t *jpeg(unsigned i, unsigned long *len)
{
	tjhandle tj = tjInitCompress();
	uint8_t *rgb = image(i), *buf = NULL;

	assert_non_null(tj);
	if (tjCompress2(tj, rgb, SIDE, 0, SIDE, TJPF_RGB, &buf, len, TJSAMP_444, 95, 0) != 0)
		fail_msg("tjCompress2: %s", tjGetErrorStr2(tj));
	tjDestroy(tj);
	free(rgb);
	return buf;
}

static void add(struct dpk_writer *w, enum dpk_kind kind, int64_t label, const void *data,
		uint64_t len, uint32_t h, uint32_t wd, uint32_t c)
{
	struct dpk_record r = { .kind = kind, .label = label, .data = data, .length = len,
				.shape = { h, wd, c }, .ndim = c ? 3 : 2 };

	assert_int_equal(dpk_writer_add(w, &r), 0);
}

/* jpeg.dpk: NJPEG JPEGs, label 100 + i. With @bad_decode, record 3 is not a JPEG (its checksum is
 * right: it fails at decode). */
static void write_jpegs(const char *name, int bad_decode)
{
	struct dpk_writer *w;
	char p[128];

	path_of(p, sizeof(p), name);
	assert_int_equal(dpk_writer_create(p, DPK_WRITE_NO_SYNC, &w), 0);
	for (unsigned i = 0; i < NJPEG; i++) {
		unsigned long len;
		uint8_t *j = jpeg(i, &len);
		if (bad_decode && i == 3)
			memset(j + 2, 0x5a, len - 2);
		add(w, DPK_KIND_JPEG, 100 + i, j, len, SIDE, SIDE, 3);
		tjFree(j);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
}

/* @name: 4 tensors h x w x c (c = 0: 2-d h x w) of image(i)'s bytes, raw and zstd in turn,
 * label 10 + i; with @odd_shape, sample 1 is w x h. */
static void write_tensors(const char *name, uint32_t h, uint32_t wd, uint32_t c, int odd_shape)
{
	struct dpk_writer *w;
	char p[128];

	path_of(p, sizeof(p), name);
	assert_int_equal(dpk_writer_create(p, DPK_WRITE_NO_SYNC, &w), 0);
	for (unsigned i = 0; i < 4; i++) {
		uint8_t *t = image(i), z[SIDE * SIDE * 4];
		size_t n = (size_t)h * wd * (c ? c : 1);
		uint32_t hh = odd_shape && i == 1 ? wd : h, ww = odd_shape && i == 1 ? h : wd;
		if (i % 2 == 0) {
			add(w, DPK_KIND_RAW, 10 + i, t, n, hh, ww, c);
		} else {
			size_t zn = ZSTD_compress(z, sizeof(z), t, n, 3);
			assert_false(ZSTD_isError(zn));
			add(w, DPK_KIND_RAW_ZSTD, 10 + i, z, zn, hh, ww, c);
		}
		free(t);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
}

/* zeros.dpk: one zstd tensor of 128 x 128 x 4 zero bytes: a few bytes stored, 64 KiB held once
 * decompressed. */
static void write_zeros(const char *name)
{
	static uint8_t t[128 * 128 * 4];
	uint8_t z[1024];
	struct dpk_writer *w;
	char p[128];

	path_of(p, sizeof(p), name);
	assert_int_equal(dpk_writer_create(p, DPK_WRITE_NO_SYNC, &w), 0);
	size_t zn = ZSTD_compress(z, sizeof(z), t, sizeof(t), 3);
	assert_false(ZSTD_isError(zn));
	add(w, DPK_KIND_RAW_ZSTD, 1, z, zn, 128, 128, 4);
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
}

static int setup(void **state)
{
	(void)state;
	assert_int_equal(tmpdir_create(dir, sizeof(dir), "test_job"), 0);
	write_jpegs("jpeg.dpk", 0);
	write_tensors("img.dpk", SIDE, SIDE, 3, 0);
	write_tensors("t2d.dpk", 5, 7, 0, 0);
	write_tensors("mixed.dpk", 5, 7, 0, 1);
	write_zeros("zeros.dpk");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

/* ---- a job and a slot, without a server ---- */

struct t {
	struct ldr_config cfg;
	struct srv_ops ops;
	void *job, *worker;
	struct srv_job_info info;
	struct ring_slot slot;
	uint32_t count;           /* samples in the step t_fill filled */
	char why[CTL_TEXT_MAX];
};

static struct ctl_job_open spec_for(const char *name, uint32_t batch, uint32_t crop)
{
	struct ctl_job_open s;

	memset(&s, 0, sizeof(s));
	snprintf(s.job, sizeof(s.job), "test");
	path_of(s.dataset, sizeof(s.dataset), name);
	s.batch = batch;
	s.crop_h = s.crop_w = crop;
	s.world = 1;
	s.sampling = CTL_SAMPLE_SEQUENTIAL;
	return s;
}

/* job_open as the server calls it, with @cfg (NULL: the defaults) and augmentations @aug (NULL:
 * none). */
static int t_open_aug(struct t *t, const struct ctl_job_open *spec, const struct ldr_config *cfg,
		      const struct ctl_augment *aug);
static int t_open_cfg(struct t *t, const struct ctl_job_open *spec, const struct ldr_config *cfg)
{
	return t_open_aug(t, spec, cfg, NULL);
}

static int t_open_aug(struct t *t, const struct ctl_job_open *spec, const struct ldr_config *cfg,
		      const struct ctl_augment *aug)
{
	memset(t, 0, sizeof(*t));
	t->cfg.io = LDR_IO_AUTO;
	if (cfg)
		t->cfg = *cfg;
	ldr_job_ops(&t->cfg, &t->ops);
	/* As the server does: the client's fd, borrowed by job_open. */
	int fd = open(spec->dataset, O_RDONLY | O_CLOEXEC);
	struct srv_dataset ds = { .fd = fd, .uid = getuid(), .aug = aug };
	int ret = t->ops.job_open(t->ops.ctx, spec, &ds, &t->job, &t->info, t->why, sizeof(t->why));
	if (fd >= 0)
		close(fd);
	return ret;
}

static int t_open(struct t *t, const struct ctl_job_open *spec)
{
	return t_open_cfg(t, spec, NULL);
}

static void t_start(struct t *t, const struct ctl_job_open *spec)
{
	int ret = t_open(t, spec);

	if (ret < 0)
		fail_msg("job_open: %s", t->why);
	t->worker = t->ops.worker_init(t->ops.ctx, 0);
	assert_non_null(t->worker);
	uint32_t b = t->info.ring.batch;
	t->slot.ids = calloc(b, sizeof(uint64_t));
	t->slot.labels = calloc(b, sizeof(int64_t));
	t->slot.flags = calloc(b, 1);
	t->slot.payload = calloc(b, t->info.ring.sample_bytes);
	assert_true(t->slot.ids && t->slot.labels && t->slot.flags && t->slot.payload);
}

/* Fill @step as the server would, in tasks of 3 samples (a batch of 4 is cut in two: a
 * substitute's choice must not depend on the task that takes the sample). */
static int t_fill(struct t *t, uint64_t step, struct srv_fill *f)
{
	struct srv_step st = { .job = t->job, .world = 1, .step_in_epoch = step };

	memset(t->slot.flags, 0, t->info.ring.batch);
	int ret = step_fill(&t->ops, t->worker, &st, t->info.ring.batch, 3, &t->slot, f);
	t->count = st.count;
	return ret;
}

static void t_stop(struct t *t)
{
	t->ops.worker_fini(t->ops.ctx, t->worker);
	t->ops.job_close(t->ops.ctx, t->job);
	free(t->slot.ids);
	free(t->slot.labels);
	free(t->slot.flags);
	free(t->slot.payload);
}

/* Sample @id of jpeg.dpk decoded by tjDecompress2 at full size, then the 56 x 56 center window:
 * what a 56 x 56 center crop must deliver (the crop is the window, 1:1, no resize). */
static void expect_jpeg(unsigned id, uint8_t *out)
{
	unsigned long len;
	uint8_t *j = jpeg(id, &len), full[SIDE * SIDE * 3];
	tjhandle tj = tjInitDecompress();

	assert_non_null(tj);
	if (tjDecompress2(tj, j, len, full, SIDE, 0, SIDE, TJPF_RGB, 0) != 0)
		fail_msg("tjDecompress2: %s", tjGetErrorStr2(tj));
	for (unsigned y = 0; y < OUT; y++)
		memcpy(out + y * OUT * 3, full + ((y + OFF) * SIDE + OFF) * 3, OUT * 3);
	tjDestroy(tj);
	tjFree(j);
}

static void check_jpeg_sample(const struct t *t, unsigned i)
{
	uint8_t want[OUT * OUT * 3];
	const uint8_t *got = (const uint8_t *)t->slot.payload + (size_t)i * OUT * OUT * 3;

	expect_jpeg((unsigned)t->slot.ids[i], want);
	for (size_t k = 0; k < sizeof(want); k++)
		if (got[k] != want[k])
			fail_msg("sample %llu byte %zu: %u, want %u", (unsigned long long)t->slot.ids[i], k,
				 got[k], want[k]);
}

/* ---- cases ---- */

static void test_job_open_announces_ring_shape(void **state)
{
	struct ctl_job_open s = spec_for("jpeg.dpk", 4, OUT);
	struct t t;

	(void)state;
	assert_int_equal(t_open(&t, &s), 0);
	assert_int_equal(t.info.samples, NJPEG);
	assert_int_equal(t.info.steps_per_epoch, 2);  /* 6 samples, batch 4 */
	assert_int_equal(t.info.ring.batch, 4);
	assert_int_equal(t.info.ring.ndim, 3);
	assert_int_equal(t.info.ring.layout, RING_LAYOUT_NHWC);
	assert_int_equal(t.info.ring.shape[0], OUT);
	assert_int_equal(t.info.ring.shape[2], 3);
	assert_int_equal(t.info.ring.sample_bytes, OUT * OUT * 3);
	t.ops.job_close(t.ops.ctx, t.job);

	s.transforms = CTL_TF_NCHW;
	s.crop_w = 48;
	assert_int_equal(t_open(&t, &s), 0);
	assert_int_equal(t.info.ring.layout, RING_LAYOUT_NCHW);
	assert_int_equal(t.info.ring.shape[0], 3);
	assert_int_equal(t.info.ring.shape[1], OUT);
	assert_int_equal(t.info.ring.shape[2], 48);
	t.ops.job_close(t.ops.ctx, t.job);

	s = spec_for("t2d.dpk", 2, 0);  /* as stored: the tensors' own shape */
	assert_int_equal(t_open(&t, &s), 0);
	assert_int_equal(t.info.ring.ndim, 2);
	assert_int_equal(t.info.ring.shape[0], 5);
	assert_int_equal(t.info.ring.shape[1], 7);
	assert_int_equal(t.info.ring.layout, RING_LAYOUT_RAW);
	assert_int_equal(t.info.ring.sample_bytes, 35);
	t.ops.job_close(t.ops.ctx, t.job);
}

/* JPEG records decoded into the slot equal a plain full-size decode, cropped. */
static void test_job_fill_jpeg_matches_tjdecompress(void **state)
{
	struct ctl_job_open s = spec_for("jpeg.dpk", 4, OUT);
	struct srv_fill f;
	struct t t;

	(void)state;
	t_start(&t, &s);
	for (uint64_t step = 0; step < 2; step++) {
		assert_int_equal(t_fill(&t, step, &f), 0);
		assert_int_equal(t.count, step ? 2 : 4);  /* one rank: the last batch is short */
		assert_int_equal(f.bad, 0);
		for (unsigned i = 0; i < t.count; i++) {
			uint64_t want = step * 4 + i;  /* sequential */
			assert_int_equal(t.slot.ids[i], want);
			assert_int_equal(t.slot.labels[i], 100 + (int64_t)want);
			assert_int_equal(t.slot.flags[i] & RING_SAMPLE_SUBSTITUTED, 0);
			check_jpeg_sample(&t, i);
		}
	}
	t_stop(&t);
}

/* Raw and zstd tensors: as stored byte for byte, and HxWx3 ones cropped like images. */
static void test_job_fill_raw_and_zstd(void **state)
{
	struct ctl_job_open s = spec_for("t2d.dpk", 4, 0);
	struct srv_fill f;
	struct t t;

	(void)state;
	t_start(&t, &s);
	assert_int_equal(t_fill(&t, 0, &f), 0);
	assert_int_equal(t.count, 4);
	for (unsigned i = 0; i < 4; i++) {
		uint8_t *want = image(i);
		assert_int_equal(t.slot.ids[i], i);
		assert_int_equal(t.slot.labels[i], 10 + i);
		assert_memory_equal((uint8_t *)t.slot.payload + i * 35, want, 35);
		free(want);
	}
	t_stop(&t);

	s = spec_for("img.dpk", 4, OUT);
	t_start(&t, &s);
	assert_int_equal(t_fill(&t, 0, &f), 0);
	for (unsigned i = 0; i < 4; i++) {
		const uint8_t *got = (const uint8_t *)t.slot.payload + (size_t)i * OUT * OUT * 3;
		for (unsigned y = 0; y < OUT; y++)
			for (unsigned x = 0; x < OUT; x++)
				for (unsigned c = 0; c < 3; c++)
					if (got[(y * OUT + x) * 3 + c] != px(i, y + OFF, x + OFF, c))
						fail_msg("sample %u (%s) at %u,%u,%u", i, i % 2 ? "zstd" : "raw",
							 y, x, c);
	}
	t_stop(&t);
}

/* Flip one stored byte of record @id of @name on disk (its checksum then fails). */
static void corrupt(const char *name, uint64_t id)
{
	struct dpk *d;
	char p[128], err[256];
	uint8_t b;

	path_of(p, sizeof(p), name);
	assert_int_equal(dpk_open(p, 0, &d, err, sizeof(err)), 0);
	off_t off = (off_t)(dpk_entry_get(d, id)->offset + dpk_entry_get(d, id)->length / 2);
	dpk_close(d);
	int fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= 0xff;
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

/* Record 1 fails its checksum, record 3 its decode: each is replaced by the next sample of the
 * order, flagged, counted and named; the rest of the batch is untouched. */
static void test_job_bad_records_substituted_and_flagged(void **state)
{
	struct ctl_job_open s = spec_for("bad.dpk", 4, OUT);
	struct srv_fill f;
	struct t t;

	(void)state;
	write_jpegs("bad.dpk", 1);
	corrupt("bad.dpk", 1);
	t_start(&t, &s);
	assert_int_equal(t_fill(&t, 0, &f), 0);  /* ids 0, 1, 2, 3 */
	assert_int_equal(t.count, 4);
	assert_int_equal(f.bad, 2);
	assert_int_equal(f.nbad_ids, 2);
	assert_int_equal(f.bad_ids[0], 1);
	assert_int_equal(f.bad_ids[1], 3);
	assert_int_equal(t.slot.ids[1], 2);  /* sequential: the sample at position 1 + 1 */
	assert_int_equal(t.slot.labels[1], 102);
	assert_int_equal(t.slot.ids[3], 4);
	assert_int_equal(t.slot.labels[3], 104);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(t.slot.flags[i] & RING_SAMPLE_SUBSTITUTED,
				 i % 2 ? RING_SAMPLE_SUBSTITUTED : 0);
		check_jpeg_sample(&t, i);
	}

	assert_int_equal(t_fill(&t, 1, &f), 0);  /* ids 4, 5: good */
	assert_int_equal(t.count, 2);
	assert_int_equal(f.bad, 0);
	assert_int_equal(t.slot.flags[0] | t.slot.flags[1], 0);
	t_stop(&t);

	s.batch = 2;
	s.on_bad = CTL_BAD_FAIL;  /* the job stops, naming the sample */
	t_start(&t, &s);
	assert_int_equal(t_fill(&t, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.why, "sample 1: checksum mismatch (policy: fail)"));
	assert_int_equal(t_fill(&t, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.why, "sample 3: "));
	t_stop(&t);
}

static void expect_refused(const struct ctl_job_open *s, const char *needle)
{
	struct t t;

	assert_true(t_open(&t, s) < 0);
	assert_null(t.job);
	if (!strstr(t.why, needle))
		fail_msg("refusal '%s' does not say '%s'", t.why, needle);
}

/* Specs the dataset cannot serve are refused, and the message names what to change. */
static void test_job_open_refuses_bad_specs(void **state)
{
	struct ctl_job_open s;

	(void)state;
	s = spec_for("none.dpk", 4, OUT);
	expect_refused(&s, "none.dpk: ");
	s = spec_for("jpeg.dpk", 4, 0);
	expect_refused(&s, "holds JPEG records: give a crop size (e.g. 224x224)");
	s = spec_for("t2d.dpk", 4, OUT);
	expect_refused(&s, "t2d.dpk sample 0: a 2-d raw tensor cannot be cropped (HxWx3 images only)");
	s = spec_for("mixed.dpk", 4, 0);
	expect_refused(&s, "sample 1 has another shape than sample 0; give a crop size to resize");
	s = spec_for("jpeg.dpk", 4, OUT);
	s.world = 7;
	s.rank = 1;
	s.tail = CTL_TAIL_DROP;
	expect_refused(&s, "has 6 samples: too few for 7 ranks with tail policy drop");
}

/* --max-record (issue 23: one sparse record of 512 MiB made every worker hold it): a dataset
 * whose largest record is exactly the limit opens; one byte less and it is refused at open with
 * the sample and the option named. A worker whose limit is below a record (the index is the
 * client's) does not read it: the sample is substituted. The job's memory counts its index and,
 * per worker, two reader buffers for its largest record when that does not fit half an arena. */
static void test_job_max_record_at_and_past_limit(void **state)
{
	struct ctl_job_open s = spec_for("img.dpk", 4, OUT);
	struct ldr_config cfg = { .io = LDR_IO_AUTO };
	char want[160];
	struct srv_fill f;
	struct t t;
	uint64_t big = SIDE * SIDE * 3;  /* records 0 and 2 are raw: the largest */

	(void)state;
	cfg.max_record = big;
	if (t_open_cfg(&t, &s, &cfg) < 0)
		fail_msg("at the limit: %s", t.why);
	uint64_t base = t.info.mem_bytes;
	assert_true(base >= 4 * sizeof(struct dpk_entry));
	t.ops.job_close(t.ops.ctx, t.job);
	cfg.max_record = big - 1;
	assert_int_equal(t_open_cfg(&t, &s, &cfg), -EFBIG);
	assert_null(t.job);
	snprintf(want, sizeof(want), "sample 0 is a record of %llu bytes, above the limit of %llu "
		 "(loaderd --max-record)", (unsigned long long)big, (unsigned long long)big - 1);
	if (!strstr(t.why, want))
		fail_msg("refusal '%s' does not say '%s'", t.why, want);

	/* the workers' share: 3 workers with arenas whose halves (4 KiB) the records do not fit */
	cfg.max_record = 0;
	cfg.arena_bytes = 8u << 10;
	cfg.workers = 1;
	assert_int_equal(t_open_cfg(&t, &s, &cfg), 0);
	uint64_t one = t.info.mem_bytes;
	t.ops.job_close(t.ops.ctx, t.job);
	cfg.workers = 3;
	assert_int_equal(t_open_cfg(&t, &s, &cfg), 0);
	assert_int_equal(t.info.mem_bytes - one, 2 * 2 * ldr_reader_extra(8u << 10, big));
	assert_true(one - base == 2 * ldr_reader_extra(8u << 10, big));
	t.ops.job_close(t.ops.ctx, t.job);

	/* per read: the job opened with the limit at the record, its worker below it */
	cfg = (struct ldr_config){ .io = LDR_IO_AUTO, .max_record = big };
	t_open_cfg(&t, &s, &cfg);
	assert_non_null(t.job);
	t.cfg.max_record = big - 1;  /* what worker_init reads */
	t.worker = t.ops.worker_init(t.ops.ctx, 0);
	assert_non_null(t.worker);
	uint32_t b = t.info.ring.batch;
	t.slot.ids = calloc(b, sizeof(uint64_t));
	t.slot.labels = calloc(b, sizeof(int64_t));
	t.slot.flags = calloc(b, 1);
	t.slot.payload = calloc(b, t.info.ring.sample_bytes);
	assert_int_equal(t_fill(&t, 0, &f), 0);
	assert_int_equal(f.bad, 2);  /* 0 and 2 were not read; 1 and 3 stand in */
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(!!(t.slot.flags[i] & RING_SAMPLE_SUBSTITUTED), i % 2 == 0);
	t_stop(&t);

	/* a compressed record counts at its decompressed size: 64 KiB at the limit, one byte over */
	s = spec_for("zeros.dpk", 1, 0);
	cfg = (struct ldr_config){ .io = LDR_IO_AUTO, .max_record = 128 * 128 * 4 };
	if (t_open_cfg(&t, &s, &cfg) < 0)
		fail_msg("zstd at the limit: %s", t.why);
	t.ops.job_close(t.ops.ctx, t.job);
	cfg.max_record = 128 * 128 * 4 - 1;
	assert_int_equal(t_open_cfg(&t, &s, &cfg), -EFBIG);
	if (!strstr(t.why, "sample 0 is a record of 65536 bytes decompressed, above the limit of "
			   "65535 (loaderd --max-record)"))
		fail_msg("zstd refusal '%s'", t.why);
}

/* Augmentations (CTL_AUGMENT): each worker holds one sample's copy for them, counted in the
 * job's memory (workers x sample bytes); a resize filter alone needs none; records delivered as
 * stored have nothing to augment and are refused, naming augment. */
static void test_job_augment_memory_and_refusal(void **state)
{
	struct ctl_job_open s = spec_for("img.dpk", 4, OUT);
	struct ldr_config cfg = { .io = LDR_IO_AUTO, .workers = 3 };
	struct ctl_augment aug, interp;
	char why[256];
	struct t t;

	(void)state;
	assert_int_equal(ctl_augment_parse("jitter=0.4,randaugment", &aug, why, sizeof(why)), 0);
	assert_int_equal(ctl_augment_parse("interp=bicubic,antialias", &interp, why, sizeof(why)), 0);
	assert_int_equal(t_open_aug(&t, &s, &cfg, NULL), 0);
	uint64_t base = t.info.mem_bytes;
	t.ops.job_close(t.ops.ctx, t.job);
	assert_int_equal(t_open_aug(&t, &s, &cfg, &aug), 0);
	assert_int_equal(t.info.mem_bytes - base, 3ull * OUT * OUT * 3);
	t.ops.job_close(t.ops.ctx, t.job);
	assert_int_equal(t_open_aug(&t, &s, &cfg, &interp), 0);
	assert_int_equal(t.info.mem_bytes, base);
	t.ops.job_close(t.ops.ctx, t.job);
	s = spec_for("zeros.dpk", 1, 0);  /* as stored */
	assert_int_equal(t_open_aug(&t, &s, &cfg, &aug), -EINVAL);
	assert_non_null(strstr(t.why, "augment: the records are delivered as stored"));
	assert_int_equal(t_open_aug(&t, &s, &cfg, &interp), -EINVAL);
	assert_int_equal(t_open_aug(&t, &s, &cfg, NULL), 0);
	t.ops.job_close(t.ops.ctx, t.job);
}

/* Two jobs on one file share its index: the second is charged none of it, both deliver the same
 * samples; a copy of the file elsewhere (another inode) is a dataset of its own, charged again. */
static void test_job_two_jobs_share_one_index(void **state)
{
	struct ctl_job_open s = spec_for("img.dpk", 4, OUT);
	struct ctl_job_open c = spec_for("imgcopy.dpk", 4, OUT);
	struct srv_fill f;
	struct t a, b, o;
	char cmd[2 * sizeof(s.dataset) + 8];

	(void)state;
	t_start(&a, &s);
	t_start(&b, &s);
	uint64_t index = 4 * sizeof(struct dpk_entry);
	assert_true(a.info.mem_bytes >= b.info.mem_bytes + index);
	assert_int_equal(t_fill(&a, 0, &f), 0);
	assert_int_equal(t_fill(&b, 0, &f), 0);
	assert_memory_equal(a.slot.payload, b.slot.payload, 4 * a.info.ring.sample_bytes);
	assert_memory_equal(a.info.dataset_id, b.info.dataset_id, sizeof(a.info.dataset_id));
	snprintf(cmd, sizeof(cmd), "cp %s %s", s.dataset, c.dataset);
	assert_int_equal(system(cmd), 0);
	t_start(&o, &c);
	assert_int_equal(o.info.mem_bytes, a.info.mem_bytes);
	assert_memory_equal(o.info.dataset_id, a.info.dataset_id, sizeof(a.info.dataset_id));
	t_stop(&o);
	/* the first job gone, the second still reads through the shared index */
	t_stop(&a);
	assert_int_equal(t_fill(&b, 0, &f), 0);
	assert_int_equal(f.bad, 0);
	t_stop(&b);
	/* all gone: the next job maps it again and is charged for it */
	t_start(&a, &s);
	assert_true(a.info.mem_bytes >= b.info.mem_bytes + index);
	t_stop(&a);
}

/* Open img.dpk with @cfg and return what --io auto chose (info.io), the job closed again. */
static void io_chosen(const struct ldr_config *cfg, char *io, size_t len)
{
	struct ctl_job_open s = spec_for("img.dpk", 4, OUT);
	struct t t;

	if (t_open_cfg(&t, &s, cfg) < 0)
		fail_msg("job_open: %s", t.why);
	snprintf(io, len, "%s", t.info.io);
	t.ops.job_close(t.ops.ctx, t.job);
}

/* Evict img.dpk from the page cache (it was written with fsync: clean), or read it all in. */
static void img_cache(int in)
{
	char p[128], buf[65536];

	path_of(p, sizeof(p), "img.dpk");
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fdatasync(fd), 0);
	if (in)
		while (read(fd, buf, sizeof(buf)) > 0)
			;
	else
		assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
}

/* --io auto: records in the page cache are read through it; evicted ones too while they fit half
 * the cache budget (at exactly half, and not one byte of budget less), else with O_DIRECT. The
 * choice is what the job reports (loaderctl stats' "io"). */
static void test_job_io_auto_follows_residency(void **state)
{
	struct ldr_config cfg = { .io = LDR_IO_AUTO };
	char p[128], io[64], err[256];
	struct dpk *d;

	(void)state;
	path_of(p, sizeof(p), "img.dpk");
	assert_int_equal(dpk_open(p, 0, &d, err, sizeof(err)), 0);
	uint64_t data = dpk_header_get(d)->data_size;
	dpk_close(d);

	img_cache(0);
	cfg.cache_bytes = 2 * data - 2;  /* half is one byte short of the records */
	io_chosen(&cfg, io, sizeof(io));
	if (strncmp(io, "O_DIRECT (", 10))
		fail_msg("evicted, larger than half the budget: %s", io);
	cfg.cache_bytes = 2 * data;      /* exactly half */
	img_cache(0);                    /* (the open before read its header, and ahead) */
	io_chosen(&cfg, io, sizeof(io));
	if (!strstr(io, "page cache (fits half of"))
		fail_msg("evicted, fits: %s", io);
	img_cache(1);
	cfg.cache_bytes = 2 * data - 2;
	io_chosen(&cfg, io, sizeof(io));
	if (strcmp(io, "memory (100.0% resident, mapped)"))
		fail_msg("resident: %s", io);
	cfg.io = LDR_IO_BUFFERED;
	io_chosen(&cfg, io, sizeof(io));
	assert_string_equal(io, "page cache (--io buffered)");
	cfg.io = LDR_IO_DIRECT;
	io_chosen(&cfg, io, sizeof(io));
	assert_string_equal(io, "O_DIRECT (--io direct)");
}

/* Write @text to dir/@rel, making its folders. */
static void put_file(const char *rel, const char *text)
{
	char p[512], cmd[600];

	path_of(p, sizeof(p), rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", p);
	assert_int_equal(system(cmd), 0);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* --io auto's budget: the lowest memory limit on the cgroup's path and its parents, v2 or v1;
 * "max", v1's "unlimited" and missing files are no limit; a limit at the RAM is no lower. */
static void test_job_memory_budget_from_cgroups(void **state)
{
	char pc[128], root[128];
	const uint64_t phys = 1000000;

	(void)state;
	path_of(pc, sizeof(pc), "cg/self");
	path_of(root, sizeof(root), "cg/fs");
	assert_int_equal(ldr_memory_budget(pc, root, phys), phys);  /* no /proc/self/cgroup */
	put_file("cg/self", "0::/a/b\n");
	assert_int_equal(ldr_memory_budget(pc, root, phys), phys);  /* no files */
	put_file("cg/fs/a/b/memory.max", "max\n");
	assert_int_equal(ldr_memory_budget(pc, root, phys), phys);
	put_file("cg/fs/a/memory.max", "999999\n");                 /* a parent's, one below */
	assert_int_equal(ldr_memory_budget(pc, root, phys), 999999);
	put_file("cg/fs/a/memory.max", "1000000\n");                /* at the RAM: no lower */
	assert_int_equal(ldr_memory_budget(pc, root, phys), phys);
	put_file("cg/fs/a/b/memory.max", "5000\n");
	put_file("cg/fs/a/memory.max", "6000\n");
	assert_int_equal(ldr_memory_budget(pc, root, phys), 5000);
	put_file("cg/fs/a/memory.max", "4000\n");
	assert_int_equal(ldr_memory_budget(pc, root, phys), 4000);
	/* v1: the memory controller's line, alone or with others; other controllers' ignored */
	put_file("cg/self", "4:cpu,cpuacct:/x\n3:memory:/p/q\n0::/\n");
	put_file("cg/fs/memory/p/q/memory.limit_in_bytes", "9223372036854771712\n");
	assert_int_equal(ldr_memory_budget(pc, root, phys), phys);
	put_file("cg/fs/memory/p/memory.limit_in_bytes", "70000\n");
	assert_int_equal(ldr_memory_budget(pc, root, phys), 70000);
	put_file("cg/fs/cpu,cpuacct/x/memory.limit_in_bytes", "10\n");
	put_file("cg/fs/memory/x/memory.limit_in_bytes", "10\n");
	assert_int_equal(ldr_memory_budget(pc, root, phys), 70000);
	put_file("cg/self", "7:blkio,memory:/p/q\n");
	put_file("cg/fs/memory/p/q/memory.limit_in_bytes", "60000\n");
	assert_int_equal(ldr_memory_budget(pc, root, phys), 60000);
	put_file("cg/fs/memory/memory.limit_in_bytes", "50000\n");  /* the hierarchy's root too */
	assert_int_equal(ldr_memory_budget(pc, root, phys), 50000);
	put_file("cg/fs/memory.limit_in_bytes", "10\n");          /* above the root: not read */
	assert_int_equal(ldr_memory_budget(pc, root, phys), 50000);
	put_file("cg/self", "garbage\n3:memory\n::\n");  /* no path: no limit */
	assert_int_equal(ldr_memory_budget(pc, root, phys), phys);
}

/* A worker that could not start makes its fills fail with a message, not a crash. */
static void test_job_fill_without_worker_fails(void **state)
{
	struct ctl_job_open s = spec_for("jpeg.dpk", 4, OUT);
	struct srv_fill f;
	struct t t;

	(void)state;
	t_start(&t, &s);
	t.ops.worker_fini(t.ops.ctx, t.worker);
	t.worker = NULL;
	assert_int_equal(t_fill(&t, 0, &f), -ENOMEM);
	assert_non_null(strstr(f.why, "worker could not start"));
	t_stop(&t);
}

/* The heap in use (arena and mmapped chunks); 0 where a sanitizer's allocator stands in. */
static size_t heap_in_use(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* What a worker still holds after a task and its fill of @s with augmentations @aug (or none):
 * its heap before worker_fini less after. */
static size_t worker_keeps(const struct ctl_job_open *s, const struct ctl_augment *aug)
{
	struct ldr_config cfg = { .io = LDR_IO_AUTO, .workers = 1 };
	struct srv_fill f;
	struct t t;

	if (t_open_aug(&t, s, &cfg, aug) < 0)
		fail_msg("job_open: %s", t.why);
	t.worker = t.ops.worker_init(t.ops.ctx, 0);
	assert_non_null(t.worker);
	uint32_t b = t.info.ring.batch;
	t.slot.ids = calloc(b, sizeof(uint64_t));
	t.slot.labels = calloc(b, sizeof(int64_t));
	t.slot.flags = calloc(b, 1);
	t.slot.payload = calloc(b, t.info.ring.sample_bytes);
	assert_true(t.slot.ids && t.slot.labels && t.slot.flags && t.slot.payload);
	assert_int_equal(t_fill(&t, 0, &f), 0);
	size_t before = heap_in_use();
	t.ops.worker_fini(t.ops.ctx, t.worker);
	size_t after = heap_in_use();
	t.worker = NULL;
	t.ops.job_close(t.ops.ctx, t.job);
	free(t.slot.ids);
	free(t.slot.labels);
	free(t.slot.flags);
	free(t.slot.payload);
	return before > after ? before - after : 0;
}

/* The augmentations' copy of a large crop is freed after the task, as the substitute buffer is:
 * the job's charge for it (workers x sample bytes) ends with the job, the workers outlive it. A
 * 1024 x 1024 crop (3 MiB a copy): the worker keeps no more with augmentations than without. */
static void test_job_augment_copy_freed_after_task(void **state)
{
	struct ctl_job_open s = spec_for("img.dpk", 1, 1024);
	struct ctl_augment aug;
	char why[256];

	(void)state;
	if (!heap_in_use()) {
		skip();  /* a sanitizer's allocator: mallinfo2 says nothing */
	}
	assert_int_equal(ctl_augment_parse("randaugment", &aug, why, sizeof(why)), 0);
	size_t plain = worker_keeps(&s, NULL), augmented = worker_keeps(&s, &aug);
	if (augmented > plain + (1u << 20))
		fail_msg("a worker keeps %zu bytes after an augmented task, %zu after a plain one",
			 augmented, plain);
}

/* A worker's decoded pixels are counted in the job's memory: for each worker, the largest image
 * of the dataset (SIDE x SIDE here, the walk's) at LDR_DECODE_PX_BYTES a pixel, beside its
 * reader's buffers; a dataset of raw tensors has none. */
static void test_job_decode_scratch_counted(void **state)
{
	struct ctl_job_open s = spec_for("jpeg.dpk", 4, OUT);
	struct ldr_config cfg = { .io = LDR_IO_AUTO, .arena_bytes = 8u << 10, .workers = 1 };
	struct t t;
	char err[256];
	struct dpk *d;
	uint64_t big = 0;

	(void)state;
	assert_int_equal(dpk_open(s.dataset, 0, &d, err, sizeof(err)), 0);
	for (uint64_t i = 0; i < dpk_count(d); i++) {
		struct dpk_entry e;
		assert_int_equal(dpk_entry_load(d, i, &e, err, sizeof(err)), 0);
		big = e.length > big ? e.length : big;
		assert_int_equal(e.shape[0] * e.shape[1], SIDE * SIDE);
	}
	dpk_close(d);
	assert_int_equal(t_open_cfg(&t, &s, &cfg), 0);
	uint64_t one = t.info.mem_bytes;
	t.ops.job_close(t.ops.ctx, t.job);
	cfg.workers = 3;
	assert_int_equal(t_open_cfg(&t, &s, &cfg), 0);
	assert_int_equal(t.info.mem_bytes - one,
			 2 * (2 * ldr_reader_extra(8u << 10, big) +
			      (uint64_t)SIDE * SIDE * LDR_DECODE_PX_BYTES));
	t.ops.job_close(t.ops.ctx, t.job);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_job_open_announces_ring_shape),
		cmocka_unit_test(test_job_decode_scratch_counted),
		cmocka_unit_test(test_job_fill_jpeg_matches_tjdecompress),
		cmocka_unit_test(test_job_fill_raw_and_zstd),
		cmocka_unit_test(test_job_bad_records_substituted_and_flagged),
		cmocka_unit_test(test_job_open_refuses_bad_specs),
		cmocka_unit_test(test_job_augment_memory_and_refusal),
		cmocka_unit_test(test_job_augment_copy_freed_after_task),
		cmocka_unit_test(test_job_two_jobs_share_one_index),
		cmocka_unit_test(test_job_io_auto_follows_residency),
		cmocka_unit_test(test_job_memory_budget_from_cgroups),
		cmocka_unit_test(test_job_fill_without_worker_fails),
		cmocka_unit_test(test_job_max_record_at_and_past_limit),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
