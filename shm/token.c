/* token.c - resume tokens: seal, parse and match (see token.h). Every refusal names the field it
 * stopped at, because the person reading it is deciding whether a checkpoint is usable. */
#include "shm/token.h"
#include "shm/ctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int refuse(char *why, size_t whylen, int ret, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int refuse(char *why, size_t whylen, int ret, const char *fmt, ...)
{
	va_list ap;

	if (why && whylen) {
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return ret;
}

/* 64-bit checksum of the bytes before t->check: each little-endian word folded in with the
 * splitmix64 finaliser. Not cryptographic (neither is XXH3): it catches damage and casual edits.
 * Written out here, not taken from xxhash or common/mix.h, because the client library is shm/
 * alone and links libc only (python/setup.py builds it from shm/ and nothing else). */
static uint64_t checksum_of(const void *bytes, size_t len)
{
	const uint8_t *p = bytes;
	uint64_t h = 0x6c6f61646572ull;  /* "loader" */

	for (size_t i = 0; i < len; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x9e3779b97f4a7c15ull;
		h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
		h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
		h ^= h >> 31;
	}
	return h;
}

static uint64_t checksum(const struct ldc_token *t)
{
	return checksum_of(t, offsetof(struct ldc_token, check));
}

void ldc_token_seal(struct ldc_token *t)
{
	t->magic = LDC_TOKEN_MAGIC;
	t->version = LDC_TOKEN_VERSION;
	t->length = LDC_TOKEN_SIZE;
	t->check = checksum(t);
}

int ldc_token_parse(const void *buf, size_t len, struct ldc_token *out, char *why, size_t whylen)
{
	struct ldc_token t;

	/* The header first, so that a newer token is "another version", not "too long". */
	if (!buf || len < 8)
		return refuse(why, whylen, -EBADMSG, "resume token: truncated: %zu bytes", len);
	memcpy(&t, buf, 8);
	if (t.magic != LDC_TOKEN_MAGIC)
		return refuse(why, whylen, -EBADMSG, "resume token: magic: these bytes are not a "
			      "loaderd resume token");
	if (t.version != LDC_TOKEN_VERSION && t.version != 1)
		return refuse(why, whylen, -EPROTO, "resume token: version: %u; this build reads "
			      "versions 1 and %u", t.version, LDC_TOKEN_VERSION);
	size_t size = t.version == 1 ? LDC_TOKEN_SIZE_V1 : LDC_TOKEN_SIZE;
	if (t.length != size)
		return refuse(why, whylen, -EBADMSG, "resume token: length: the header says %u bytes; "
			      "a version %u token has %zu", t.length, t.version, size);
	if (len < size)
		return refuse(why, whylen, -EBADMSG, "resume token: truncated: %zu of its %zu bytes",
			      len, size);
	if (len > size)
		return refuse(why, whylen, -EBADMSG, "resume token: length: %zu bytes given, the token "
			      "has %zu", len, size);
	if (t.version == 1) {
		/* The same fields up to `augment`, then the check: block and window are what a
		 * version 1 token's job ran with, the only geometry there was. */
		uint64_t check;
		memset(&t, 0, sizeof(t));
		memcpy(&t, buf, offsetof(struct ldc_token, block));
		memcpy(&check, (const uint8_t *)buf + offsetof(struct ldc_token, block), 8);
		if (checksum_of(buf, offsetof(struct ldc_token, block)) != check)
			return refuse(why, whylen, -EBADMSG, "resume token: checksum: the token was "
				      "altered or damaged");
		ctl_block_defaults(t.sampling, &t.block, &t.window);
		t.version = LDC_TOKEN_VERSION;
		t.length = LDC_TOKEN_SIZE;
		t.check = checksum(&t);
	} else {
		memcpy(&t, buf, sizeof(t));
		if (checksum(&t) != t.check)
			return refuse(why, whylen, -EBADMSG, "resume token: checksum: the token was "
				      "altered or damaged");
	}
	/* A correct checksum only says the bytes are as written: the writer may have been wrong. */
	if (t.steps_per_epoch == 0 || t.steps_per_epoch > CTL_STEP_LIMIT)
		return refuse(why, whylen, -EBADMSG, "resume token: steps_per_epoch: %llu is not in "
			      "1..%llu", (unsigned long long)t.steps_per_epoch,
			      (unsigned long long)CTL_STEP_LIMIT);
	if (t.step >= t.steps_per_epoch)
		return refuse(why, whylen, -EBADMSG, "resume token: step: %llu is not below "
			      "steps_per_epoch %llu", (unsigned long long)t.step,
			      (unsigned long long)t.steps_per_epoch);
	/* t.step < steps_per_epoch <= CTL_STEP_LIMIT: no underflow */
	if (t.epoch > (CTL_STEP_LIMIT - t.step) / t.steps_per_epoch)
		return refuse(why, whylen, -EBADMSG, "resume token: epoch: epoch %llu step %llu of "
			      "%llu-step epochs is past the step limit %llu",
			      (unsigned long long)t.epoch, (unsigned long long)t.step,
			      (unsigned long long)t.steps_per_epoch, (unsigned long long)CTL_STEP_LIMIT);
	if (t.world == 0 || t.world > CTL_WORLD_MAX)
		return refuse(why, whylen, -EBADMSG, "resume token: world: %u", t.world);
	if (t.batch == 0)
		return refuse(why, whylen, -EBADMSG, "resume token: batch: 0");
	if (t.sampling > CTL_SAMPLE_BLOCK)
		return refuse(why, whylen, -EBADMSG, "resume token: sampling: %u", t.sampling);
	if (t.tail > CTL_TAIL_DROP_LAST)
		return refuse(why, whylen, -EBADMSG, "resume token: tail: %u", t.tail);
	if (t.transforms & ~CTL_TF_ALL)
		return refuse(why, whylen, -EBADMSG, "resume token: transforms: 0x%x", t.transforms);
	if (t.samples == 0)
		return refuse(why, whylen, -EBADMSG, "resume token: samples: 0");
	if (t.sampling != CTL_SAMPLE_BLOCK && (t.block || t.window))
		return refuse(why, whylen, -EBADMSG, "resume token: %s: %u, not 0, with sampling %s",
			      t.block ? "block" : "window", t.block ? t.block : t.window,
			      t.sampling == CTL_SAMPLE_SHUFFLE ? "shuffle" : "sequential");
	if (t.sampling == CTL_SAMPLE_BLOCK && (t.block == 0 || t.block > CTL_BLOCK_MAX))
		return refuse(why, whylen, -EBADMSG, "resume token: block: %u is not in 1..%u",
			      t.block, CTL_BLOCK_MAX);
	if (t.sampling == CTL_SAMPLE_BLOCK && (t.window == 0 || t.window > CTL_WINDOW_MAX))
		return refuse(why, whylen, -EBADMSG, "resume token: window: %u is not in 1..%u",
			      t.window, CTL_WINDOW_MAX);
	*out = t;
	return 0;
}

static const char *const sampling_name[] = { "shuffle", "sequential", "block" };
static const char *const tail_name[] = { "pad", "drop", "mask", "drop_last" };

static void hex(const uint8_t *id, char *out)
{
	for (unsigned i = 0; i < 8; i++)  /* the first 8 bytes say enough in a message */
		snprintf(out + 2 * i, 3, "%02x", id[i]);
}

int ldc_token_match(const struct ldc_token *t, const struct ldc_token *job, char *why,
		    size_t whylen)
{
	static const uint8_t zero[LDC_TOKEN_ID_SIZE];

	if (memcmp(job->dataset, zero, sizeof(zero)) && memcmp(t->dataset, job->dataset, sizeof(zero))) {
		char a[17], b[17];
		hex(t->dataset, a);
		hex(job->dataset, b);
		return refuse(why, whylen, -EINVAL, "resume token: dataset: the token is for dataset "
			      "%s..., this job's is %s... (another dataset or another version of it)",
			      a, b);
	}
	if (t->world != job->world)
		return refuse(why, whylen, -EINVAL, "resume token: world: the token is for %u ranks, "
			      "this job has %u", t->world, job->world);
	if (t->batch != job->batch)
		return refuse(why, whylen, -EINVAL, "resume token: batch: the token is for batch %u, "
			      "this job's is %u", t->batch, job->batch);
	if (t->seed != job->seed)
		return refuse(why, whylen, -EINVAL, "resume token: seed: the token is for seed %llu, "
			      "this job's is %llu", (unsigned long long)t->seed,
			      (unsigned long long)job->seed);
	if (t->sampling != job->sampling)
		return refuse(why, whylen, -EINVAL, "resume token: sampling: the token is for %s, "
			      "this job's is %s", sampling_name[t->sampling % 3],
			      sampling_name[job->sampling % 3]);
	if (t->block != job->block)
		return refuse(why, whylen, -EINVAL, "resume token: block: the token is for blocks of "
			      "%u records, this job's are of %u (ldcat --block)", t->block, job->block);
	if (t->window != job->window)
		return refuse(why, whylen, -EINVAL, "resume token: window: the token is for windows of "
			      "%u blocks, this job's are of %u (ldcat --window)", t->window,
			      job->window);
	if (t->tail != job->tail)
		return refuse(why, whylen, -EINVAL, "resume token: tail: the token is for tail %s, "
			      "this job's is %s", tail_name[t->tail % 4], tail_name[job->tail % 4]);
	if (t->transforms != job->transforms)
		return refuse(why, whylen, -EINVAL, "resume token: transforms: the token is for 0x%x, "
			      "this job's are 0x%x", t->transforms, job->transforms);
	if (t->augment != job->augment)
		return refuse(why, whylen, -EINVAL, "resume token: augment: the token is for %s "
			      "(digest %08x), this job has %s (%08x)", t->augment ? "augmentations" :
			      "none", t->augment, job->augment ? "augmentations" : "none",
			      job->augment);
	if (t->crop_h != job->crop_h || t->crop_w != job->crop_w)
		return refuse(why, whylen, -EINVAL, "resume token: crop: the token is for %ux%u, "
			      "this job's is %ux%u", t->crop_h, t->crop_w, job->crop_h, job->crop_w);
	if (job->samples && t->samples != job->samples)
		return refuse(why, whylen, -EINVAL, "resume token: samples: the token is for %llu "
			      "samples, this dataset has %llu", (unsigned long long)t->samples,
			      (unsigned long long)job->samples);
	if (job->steps_per_epoch && t->steps_per_epoch != job->steps_per_epoch)
		return refuse(why, whylen, -EINVAL, "resume token: steps_per_epoch: the token is for "
			      "%llu, this job has %llu", (unsigned long long)t->steps_per_epoch,
			      (unsigned long long)job->steps_per_epoch);
	return 0;
}
