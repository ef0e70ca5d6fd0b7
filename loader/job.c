/* job.c - a loaderd job on one dataset, and the fill of one slot (see job.h).
 *
 * DESIGN
 * A step is opened once (step_open): the sampler writes its sample ids and flags into the
 * server's private arrays for the step. The server cuts it into tasks of a few samples that any
 * worker fills (fill): the worker's reader brings the task's records in with one batched
 * submission; each record's checksum is checked, then it is decoded into its place in the slot's
 * payload, and its label set. The server copies ids, flags and labels into the slot once every
 * task is done. Shared memory is write-only for the producer: the consumer can write into
 * its slots at any time (a bug, or malice), so nothing read back from them may steer a worker (an
 * id read back twice could change in between and send the checksum past its record's buffer).
 * Pixels are not staged: the decoders only write the payload, never read it.
 *
 * A record that fails its checksum or its decode is never delivered. With the default policy it is
 * replaced by the sample at the next position of the epoch's order (then the one after, ...), read
 * and decoded on the spot, and flagged RING_SAMPLE_SUBSTITUTED; that choice depends only on (seed,
 * epoch, position), so every run and every rank makes the same one and batch counts stay equal.
 * With --on-bad fail the job stops with the sample id. Either way the sample id is logged.
 *
 * Memory: a record's size is the client's choice (a sparse file of 512 MiB records costs it
 * nothing). Records above cfg->max_record refuse the job at open, naming the sample; reads check
 * it again. What a worker makes for one large record (the reader's big buffer, the substitute
 * buffer) is freed after the task, and the job's memory (srv_job_info.mem_bytes) counts its
 * index and the most its records can make the workers hold at once, against --mem-limit. */
#include "loader/job.h"
#include "common/clk.h"
#include "common/log.h"
#include "loader/decode.h"
#include "loader/kind.h"
#include "loader/sampler.h"
#include "loader/shares.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUBSTITUTE_TRIES 16
#define READ_MAX 1024              /* records per reader call */

struct job {
	struct dpk *d;
	int fd;                    /* the dataset, as the client passed it (our dup) */
	int fd_direct;             /* O_DIRECT fd of the same file, or -1 */
	struct ldr_sampler smp;
	struct ctl_job_open spec;
	struct ldr_out out;        /* output size (0x0 = records as stored), layout */
	uint64_t max_pixels;       /* per record (ldr_config) */
	uint64_t max_record;       /* stored bytes per record (ldr_config) */
	uint64_t sample_bytes;
	int rrc;                   /* RandomResizedCrop, else center crop */
	int hflip;
};

struct worker {
	struct ldr_reader *rd;
	struct ldr_decoder *dec;
	uint8_t *sub;              /* a substitute record's bytes */
	size_t sub_cap;
	const uint8_t *bufs[READ_MAX];
	int errs[READ_MAX];
	/* Reads started for the task this worker fills next (reader half pf_half), when pf_n: the
	 * dataset and the ids they are for. */
	const struct dpk *pf_d;
	uint64_t pf_ids[READ_MAX];
	uint32_t pf_n;             /* records the reads cover (the leading ones that fit) */
	uint32_t pf_asked;         /* of pf_ids */
	unsigned pf_half;
	unsigned half;             /* the reader half the current records are in */
};

/* ---- job open ---- */

/* Can record @i be delivered as j->out asks (its kind's verdict)? 0, or -EINVAL with @why. */
static int accepts(struct job *j, uint64_t i, char *why, size_t whylen)
{
	const struct dpk_entry *e = dpk_entry_get(j->d, i);
	const struct ldr_kind *k = ldr_kind_get(e->kind);
	char reason[200];

	if (!k)
		snprintf(reason, sizeof(reason), "sample %" PRIu64 ": record kind %s has no decoder in "
			 "this build", i, dpk_kind_name(e->kind));
	if (!k || k->accepts(e, i, &j->out, reason, sizeof(reason)) < 0) {
		snprintf(why, whylen, "dataset %s %s", j->spec.dataset, reason);
		return -EINVAL;
	}
	return 0;
}

static uint64_t max_record(const struct ldr_config *cfg)
{
	return cfg->max_record ? cfg->max_record : LDR_MAX_RECORD_DEFAULT;
}

/* Is every record within cfg->max_record? Then 0 and the memory the job makes loaderd hold
 * besides rings (its index, and what the workers may hold at once for its largest record: each
 * worker's two reader halves and its substitute buffer) in *mem; else -EFBIG with @why naming
 * the first sample above it. Before anything reads a record. */
static int records_bounded(const struct ldr_config *cfg, struct job *j, uint64_t *mem, char *why,
			   size_t whylen)
{
	const struct dpk_header *h = dpk_header_get(j->d);
	uint64_t n = dpk_count(j->d), big = 0;

	for (uint64_t i = 0; i < n; i++) {
		const struct dpk_entry *e = dpk_entry_get(j->d, i);
		/* a compressed tensor is held whole once decompressed (the decoder's scratch) */
		int z = e->kind == DPK_KIND_RAW_ZSTD && e->raw_size > e->length;
		uint64_t len = z ? e->raw_size : e->length;
		if (len > j->max_record) {
			snprintf(why, whylen, "dataset %s: sample %llu is a record of %llu bytes%s, "
				 "above the limit of %llu (loaderd --max-record)", j->spec.dataset,
				 (unsigned long long)i, (unsigned long long)len,
				 z ? " decompressed" : "", (unsigned long long)j->max_record);
			return -EFBIG;
		}
		big = len > big ? len : big;
	}
	size_t arena = cfg->arena_bytes ? cfg->arena_bytes : LDR_ARENA_DEFAULT;
	uint64_t per_worker = 2 * ldr_reader_extra(arena, big) + (big > LDR_SUB_KEEP ? big : 0);
	*mem = sizeof(*j) + h->index_size + h->classes_size +
	       (uint64_t)h->class_count * sizeof(char *) +
	       (uint64_t)(cfg->workers ? cfg->workers : 1) * per_worker;
	return 0;
}

static int job_open(void *ctx, const struct ctl_job_open *spec, int fd, void **out,
		    struct srv_job_info *info, char *why, size_t whylen)
{
	const struct ldr_config *cfg = ctx;
	struct job *j = calloc(1, sizeof(*j));
	char err[256];
	int ret;

	*out = NULL;
	if (!j)
		return -ENOMEM;
	j->fd_direct = -1;
	j->fd = -1;
	j->spec = *spec;
	j->max_pixels = cfg->max_pixels ? cfg->max_pixels : LDR_MAX_PIXELS_DEFAULT;
	j->max_record = max_record(cfg);
	/* The client opened the dataset with its own rights (ldc_open): loaderd never opens a path
	 * a client names, so it reads nothing that client could not read itself. */
	if (fd < 0) {
		snprintf(why, whylen, "dataset %s: the client did not pass it open (clients open the "
			 "dataset themselves and send the descriptor; ldc_open does)", spec->dataset);
		ret = -EBADF;
		goto fail;
	}
	j->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (j->fd < 0) {
		ret = -errno;
		snprintf(why, whylen, "dataset %s: %s", spec->dataset, strerror(-ret));
		goto fail;
	}
	ret = dpk_open_fd(j->fd, 0, &j->d, err, sizeof(err));
	if (ret < 0) {
		snprintf(why, whylen, "dataset %s: %s", spec->dataset, err);
		goto fail;
	}
	ret = records_bounded(cfg, j, &info->mem_bytes, why, whylen);
	if (ret < 0)
		goto fail;
	uint64_t n = dpk_count(j->d);
	ret = ldr_sampler_init(&j->smp, n, spec->world, spec->batch, (enum ldr_sampling)spec->sampling,
			       (enum ldr_tail)spec->tail, spec->seed, 0, 0);
	if (ret < 0) {
		snprintf(why, whylen, "dataset %s has %" PRIu64 " samples: too few for %u ranks%s",
			 spec->dataset, n, spec->world,
			 spec->tail == CTL_TAIL_DROP ? " with tail policy drop" : "");
		goto fail;
	}

	struct ring_desc *rd = &info->ring;
	memset(rd, 0, sizeof(*rd));
	rd->batch = spec->batch;
	rd->dtype = RING_DTYPE_U8;
	if (spec->crop_h) {
		j->out.h = spec->crop_h;
		j->out.w = spec->crop_w;
		j->out.nchw = !!(spec->transforms & CTL_TF_NCHW);
		j->rrc = !!(spec->transforms & CTL_TF_RANDOM_RESIZED_CROP);
		j->hflip = !!(spec->transforms & CTL_TF_HFLIP);
		j->sample_bytes = (uint64_t)spec->crop_h * spec->crop_w * 3;
		rd->ndim = 3;
		rd->layout = j->out.nchw ? RING_LAYOUT_NCHW : RING_LAYOUT_NHWC;
		if (j->out.nchw) {
			rd->shape[0] = 3, rd->shape[1] = spec->crop_h, rd->shape[2] = spec->crop_w;
		} else {
			rd->shape[0] = spec->crop_h, rd->shape[1] = spec->crop_w, rd->shape[2] = 3;
		}
		for (uint64_t i = 0; i < n; i++)
			if ((ret = accepts(j, i, why, whylen)) < 0)
				goto fail;
	} else {
		/* Records as stored: every one must be a tensor of the same shape. */
		const struct dpk_entry *e0 = dpk_entry_get(j->d, 0);
		for (uint64_t i = 0; i < n; i++) {
			const struct dpk_entry *e = dpk_entry_get(j->d, i);
			if ((ret = accepts(j, i, why, whylen)) < 0)
				goto fail;
			if (e->ndim != e0->ndim || memcmp(e->shape, e0->shape, sizeof(e->shape))) {
				snprintf(why, whylen, "dataset %s: sample %" PRIu64 " has another shape "
					 "than sample 0; give a crop size to resize", spec->dataset, i);
				ret = -EINVAL;
				goto fail;
			}
		}
		j->sample_bytes = e0->raw_size;
		rd->ndim = e0->ndim;
		memcpy(rd->shape, e0->shape, sizeof(rd->shape));
		rd->layout = e0->ndim == 3 && e0->shape[2] <= 4 ? RING_LAYOUT_NHWC : RING_LAYOUT_RAW;
	}
	rd->sample_bytes = j->sample_bytes;
	info->steps_per_epoch = j->smp.steps;
	info->samples = n;
	_Static_assert(CTL_DATASET_ID_SIZE == DPK_IDENTITY_SIZE, "one identity");
	dpk_identity(j->d, info->dataset_id);

	/* O_DIRECT when the file system allows it (tmpfs does not: open fails with EINVAL). The
	 * same file, reopened through /proc: not the path, which may name another file by now. */
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", j->fd);
	j->fd_direct = open(self, O_RDONLY | O_DIRECT | O_CLOEXEC);
	*out = j;
	return 0;
fail:
	dpk_close(j->d);
	if (j->fd >= 0)
		close(j->fd);
	free(j);
	return ret;
}

static void job_close(void *ctx, void *p)
{
	struct job *j = p;

	(void)ctx;
	if (!j)
		return;
	if (j->fd_direct >= 0)
		close(j->fd_direct);
	dpk_close(j->d);
	close(j->fd);
	free(j);
}

/* ---- workers ---- */

static uint64_t max_pixels(const struct ldr_config *cfg)
{
	return cfg->max_pixels ? cfg->max_pixels : LDR_MAX_PIXELS_DEFAULT;
}

static void *worker_init(void *ctx, unsigned index)
{
	const struct ldr_config *cfg = ctx;
	struct worker *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	if (ldr_reader_create(cfg->io, cfg->arena_bytes ? cfg->arena_bytes : LDR_ARENA_DEFAULT,
			      &w->rd) < 0 ||
	    ldr_decoder_create(&w->dec) < 0) {
		LOG_ERROR("worker %u: cannot set up its reader or decoder", index);
		ldr_reader_destroy(w->rd);
		ldr_decoder_destroy(w->dec);
		free(w);
		return NULL;
	}
	ldr_decoder_limit(w->dec, max_pixels(cfg));
	ldr_reader_limit(w->rd, max_record(cfg));
	return w;
}

static void worker_fini(void *ctx, void *p)
{
	struct worker *w = p;

	(void)ctx;
	if (!w)
		return;
	ldr_reader_destroy(w->rd);
	ldr_decoder_destroy(w->dec);
	free(w->sub);
	free(w);
}

/* ---- fill ---- */

/* Check and decode one record's bytes into @dst. 0 or -errno with @why. */
static int decode_one(struct job *j, struct worker *w, uint64_t epoch, uint64_t id,
		      const uint8_t *bytes, uint8_t *dst, uint64_t *decode_ns, char *why, size_t whylen)
{
	const struct dpk_entry *e = dpk_entry_get(j->d, id);
	uint64_t t0 = clk_now_ns();
	struct ldr_crop crop;
	struct ldr_out o = j->out;
	int ret;

	if (dpk_record_check(e, bytes) < 0) {
		snprintf(why, whylen, "checksum mismatch");
		return -EBADMSG;
	}
	uint32_t ih = e->shape[0];  /* JPEG and HxWxC raw alike */
	uint32_t iw = e->shape[1];
	/* Checked at use, not only at open: a record this large is bad, whatever its index says
	 * its kind allows (the decoders check the stream's own size again). */
	if (o.h && (uint64_t)ih * iw > j->max_pixels) {
		snprintf(why, whylen, "%ux%u pixels, above the limit of %llu (loaderd --max-pixels)",
			 ih, iw, (unsigned long long)j->max_pixels);
		return -EBADMSG;
	}
	if (o.h) {
		uint64_t key = ldr_mix(j->spec.seed, epoch, id);
		if (j->rrc)
			ldr_crop_random(iw, ih, key, &crop);
		else
			ldr_crop_center(iw, ih, o.h, o.w, &crop);
		o.flip = j->hflip && (ldr_mix(key, 0x464c4950ull, 0) & 1);
	} else {
		memset(&crop, 0, sizeof(crop));
	}
	/* as stored (o.h == 0), job_open made sure every record has sample_bytes bytes */
	ret = ldr_kind_get(e->kind)->decode(w->dec, e, bytes, &crop, &o, dst, why, whylen);
	*decode_ns += clk_now_ns() - t0;
	return ret;
}

/* Replace the bad sample at position @pos with the next good one of the order; 0 with *id set. */
static int substitute(struct job *j, struct worker *w, uint64_t epoch, uint64_t pos, uint64_t *id,
		      uint8_t *dst, struct srv_fill *f)
{
	char why[CTL_TEXT_MAX];

	for (uint64_t k = 1; k <= SUBSTITUTE_TRIES && k < j->smp.n; k++) {
		uint64_t sid = ldr_sampler_substitute(&j->smp, epoch, pos, k);
		const struct dpk_entry *e = dpk_entry_get(j->d, sid);
		ssize_t n = -EFBIG;  /* above --max-record: job_open saw to it, but the index is the
				      * client's */
		if (e->length <= j->max_record && w->sub_cap < e->length) {
			uint8_t *p = realloc(w->sub, e->length);
			if (!p)
				return -ENOMEM;
			w->sub = p;
			w->sub_cap = e->length;
		}
		if (e->length <= j->max_record) {
			uint64_t t0 = clk_now_ns();
			n = dpk_read(j->d, sid, w->sub, w->sub_cap);
			f->phase_ns[LDR_PHASE_IO] += clk_now_ns() - t0;
		}
		if (n >= 0 && decode_one(j, w, epoch, sid, w->sub, dst, &f->phase_ns[LDR_PHASE_DECODE],
					 why, sizeof(why)) == 0) {
			*id = sid;
			return 0;
		}
		f->bad++;
		if (f->nbad_ids < 8)
			f->bad_ids[f->nbad_ids++] = sid;
		LOG_WARN("job %s: sample %" PRIu64 " is bad too (%s); trying the next",
			 j->spec.job, sid, n < 0 ? strerror((int)-n) : why);
	}
	return -EBADMSG;
}

/* A read ended early: has the file been cut shorter than it was when the job opened it? Then
 * no record past the cut can ever be read again: the job stops with that, not with a string of
 * "bad records" (1 with f->why set, else 0). */
static int truncated(struct job *j, struct srv_fill *f)
{
	struct stat st;
	uint64_t want = dpk_header_get(j->d)->file_size;

	if (fstat(j->fd, &st) < 0 || (uint64_t)st.st_size >= want)
		return 0;
	snprintf(f->why, sizeof(f->why), "dataset %.*s was truncated while the job ran (%lld bytes "
		 "now, %llu when it was opened); the job stops", 120, j->spec.dataset,
		 (long long)st.st_size, (unsigned long long)want);
	return 1;
}

/* The sampler's draw for a step, into the server's private arrays; labels are set by the fills
 * (a substitute has its own). */
static int step_open(void *ctx, void *wp, struct srv_step *st, char *why, size_t whylen)
{
	struct job *j = st->job;

	(void)ctx;
	if (!wp) {
		snprintf(why, whylen, "a worker could not start (see loaderd's log)");
		return -ENOMEM;
	}
	uint32_t c = ldr_sampler_count(&j->smp, st->step_in_epoch);

	st->global_count = c * st->world;
	if (!st->weights) {
		st->count = ldr_sampler_batch(&j->smp, st->epoch, st->step_in_epoch, st->rank,
					      st->ids, st->flags);
		st->global_offset = c * st->rank;
		assert(st->count <= j->spec.batch && j->spec.batch <= RING_BATCH_MAX);
		return 0;
	}
	/* Balanced shares: the same global step, cut by the weights in force (loader/shares.h) */
	if (ldr_shares_split(st->world, st->global_count, st->cap, st->weights, st->split, NULL) < 0) {
		snprintf(why, whylen, "no split of %u samples over %u ranks of at most %u",
			 st->global_count, st->world, st->cap);
		return -EINVAL;
	}
	st->global_offset = 0;
	for (uint32_t r = 0; r < st->rank; r++)
		st->global_offset += st->split[r];
	st->count = st->split[st->rank];
	ldr_sampler_range(&j->smp, st->epoch, st->step_in_epoch, st->global_offset, st->count,
			  st->ids, st->flags);
	return 0;
}

/* Sample @i of the step failed to read or decode (@why): substitute it (into @dst, its ids and
 * flags entries) or, with the fail policy or no good substitute, fail with f->why. The choice
 * depends only on (seed, epoch, position of @i), whichever task or worker fills it. */
static int replace_bad(struct job *j, struct worker *w, struct srv_fill *f, uint32_t i,
		       uint8_t *dst, const char *why)
{
	struct srv_step *st = f->step;
	uint64_t id = st->ids[i];

	f->bad++;
	if (f->nbad_ids < 8)
		f->bad_ids[f->nbad_ids++] = id;
	if (j->spec.on_bad == CTL_BAD_FAIL) {
		snprintf(f->why, sizeof(f->why), "sample %" PRIu64 ": %s (policy: fail)", id, why);
		return -EBADMSG;
	}
	uint64_t pos = ldr_sampler_gpos(&j->smp, st->step_in_epoch,
					(uint64_t)st->global_offset + i) % j->smp.n;
	uint64_t sid;
	if (substitute(j, w, st->epoch, pos, &sid, dst, f) < 0) {
		snprintf(f->why, sizeof(f->why), "sample %" PRIu64 ": %s, and no good substitute in "
			 "the next %d", id, why, SUBSTITUTE_TRIES);
		return -EBADMSG;
	}
	LOG_WARN("job %s: sample %" PRIu64 " is bad (%s); substituted by sample %" PRIu64,
		 j->spec.job, id, why, sid);
	st->ids[i] = sid;
	st->flags[i] |= RING_SAMPLE_SUBSTITUTED;
	return 0;
}

/* The records @ids[0..n) from the reads started for them by the fill before (their count, the
 * leading ones that fit), or -1 when none were: then reads started for other records are
 * waited for and dropped. */
static int prefetched(struct worker *w, const struct dpk *d, const uint64_t *ids, uint32_t n)
{
	if (!w->pf_n)
		return -1;
	int match = w->pf_d == d && w->pf_asked <= n &&
		    !memcmp(w->pf_ids, ids, w->pf_asked * sizeof(*ids));
	w->pf_n = 0;
	w->half = w->pf_half;
	int k = ldr_reader_complete(w->rd, w->half, w->bufs, w->errs);
	return match ? k : -1;
}

/* Read @ids[0..n) now (the leading ones that fit; their count), into the half that reads started
 * for the next task do not use. */
static int read_now(struct job *j, struct worker *w, const uint64_t *ids, uint32_t n)
{
	w->half = w->pf_n ? !w->pf_half : 0;
	int k = ldr_reader_submit(w->rd, w->half, j->d, j->fd_direct, ids, n);
	return k <= 0 ? k : ldr_reader_complete(w->rd, w->half, w->bufs, w->errs);
}

/* Start reading the records of the task this worker fills next (f->next_*), into the other half
 * of the reader, so that they arrive while this task decodes. */
static void prefetch(struct worker *w, const struct srv_fill *f)
{
	const struct srv_step *nst = f->next_step;
	const struct job *nj = nst->job;
	uint32_t n = f->next_end - f->next_begin;

	if (n > READ_MAX)
		n = READ_MAX;
	memcpy(w->pf_ids, nst->ids + f->next_begin, n * sizeof(*w->pf_ids));
	int k = ldr_reader_submit(w->rd, !w->half, nj->d, nj->fd_direct, w->pf_ids, n);
	if (k > 0) {
		w->pf_d = nj->d;
		w->pf_n = (uint32_t)k;
		w->pf_asked = n;
		w->pf_half = !w->half;
	}
}

/* Samples [f->begin, f->end) of the step: read, check and decode each into its place in the
 * slot's payload; its label (and, when substituted, its id and flags) into the step's arrays.
 * The first records come from the reads the fill before started for them, if any; once they are
 * in, the reads of the next task start (f->next_step), before any decoding. */
static int fill_task(struct worker *w, struct srv_fill *f)
{
	struct srv_step *st = f->step;
	struct job *j = st->job;
	uint8_t *payload = f->slot->payload;
	char why[160];  /* leaves room for the sample id in f->why */

	for (uint32_t i = f->begin; i < f->end;) {
		uint64_t t0 = clk_now_ns();
		uint32_t want = f->end - i > READ_MAX ? READ_MAX : f->end - i;
		int k = i == f->begin ? prefetched(w, j->d, st->ids + i, want) : -1;
		if (k <= 0)
			k = read_now(j, w, st->ids + i, want);
		if (k <= 0) {  /* cannot be: a reader half is always free here */
			snprintf(f->why, sizeof(f->why), "reader: %s", strerror(k < 0 ? -k : EIO));
			return k < 0 ? k : -EIO;
		}
		if (i == f->begin && f->next_step && f->next_end > f->next_begin)
			prefetch(w, f);
		f->phase_ns[LDR_PHASE_IO] += clk_now_ns() - t0;
		for (int q = 0; q < k; q++, i++) {
			uint8_t *dst = payload + (size_t)i * j->sample_bytes;
			int ret = w->errs[q];
			if (ret == -EBADMSG && truncated(j, f))
				return -EBADMSG;
			if (ret < 0)
				snprintf(why, sizeof(why), "read: %.100s", strerror(-ret));
			else
				ret = decode_one(j, w, st->epoch, st->ids[i], w->bufs[q], dst,
						 &f->phase_ns[LDR_PHASE_DECODE], why, sizeof(why));
			if (ret < 0 && (ret = replace_bad(j, w, f, i, dst, why)) < 0)
				return ret;
			st->labels[i] = dpk_entry_get(j->d, st->ids[i])->label;
		}
	}
	return 0;
}

/* A task, then what it made for large records is let go (the reads of the next task, if any,
 * stay in flight): a worker holds an outlier's size only while it fills it. */
static int fill(void *ctx, void *wp, struct srv_fill *f)
{
	struct worker *w = wp;

	(void)ctx;
	if (!w) {
		snprintf(f->why, sizeof(f->why), "a worker could not start (see loaderd's log)");
		return -ENOMEM;
	}
	int ret = fill_task(w, f);
	ldr_reader_trim(w->rd);
	ldr_decoder_trim(w->dec, LDR_DEC_KEEP);
	if (w->sub_cap > LDR_SUB_KEEP) {
		free(w->sub);
		w->sub = NULL;
		w->sub_cap = 0;
	}
	return ret;
}

void ldr_job_ops(const struct ldr_config *cfg, struct srv_ops *ops)
{
	memset(ops, 0, sizeof(*ops));
	ops->ctx = (void *)cfg;
	ops->job_open = job_open;
	ops->job_close = job_close;
	ops->worker_init = worker_init;
	ops->worker_fini = worker_fini;
	ops->step_open = step_open;
	ops->fill = fill;
	ops->phases[LDR_PHASE_IO] = (struct srv_phase){ "io", "reading" };
	ops->phases[LDR_PHASE_DECODE] = (struct srv_phase){ "decode", "decoding" };
}
