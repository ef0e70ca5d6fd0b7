/* token.h - the resume token: where a job stands, (seed, epoch, step), bound to the dataset's
 * identity (dpk_identity: a digest of its index and checksums, not its path) and to the job's
 * shape (world size, batch, tail policy, sampling and block sampling's geometry, transforms, crop
 * and augmentations). A rank that opens a job
 * with a token starts exactly at its step (ldc.h); loaderd computes that step's samples directly.
 *
 * The token is a small fixed blob, saved by the user with a checkpoint and handed back later:
 * little-endian, versioned and self-checking (magic, version, length, a 64-bit checksum of the rest). It
 * is untrusted input: ldc_token_parse refuses a truncated, altered or other-version token, and
 * ldc_token_match a token made for another dataset or job shape, each with a sentence that names
 * the field. Shared by the client (shm/ldc.c) and anything that stores tokens; no logging. */
#ifndef LOADERD_TOKEN_H
#define LOADERD_TOKEN_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define LDC_TOKEN_MAGIC 0x314b544cu  /* "LTK1" read as little-endian bytes 'L','T','K','1' */
#define LDC_TOKEN_VERSION 2u          /* 2: block and window; version 1 tokens are still read */
#define LDC_TOKEN_SIZE 112u          /* bytes of a version 2 token */
#define LDC_TOKEN_SIZE_V1 104u       /* bytes of a version 1 token: no block, window */
#define LDC_TOKEN_ID_SIZE 16u        /* = DPK_IDENTITY_SIZE */

/* The token as stored. Position: step @step (< steps_per_epoch) of epoch @epoch is the next step
 * to consume; the global step is epoch * steps_per_epoch + step. */
struct ldc_token {
	uint32_t magic;               /* LDC_TOKEN_MAGIC */
	uint16_t version;             /* LDC_TOKEN_VERSION */
	uint16_t length;              /* LDC_TOKEN_SIZE */
	uint64_t seed;
	uint64_t epoch;
	uint64_t step;                /* within the epoch */
	uint8_t dataset[LDC_TOKEN_ID_SIZE]; /* dpk_identity of the dataset */
	uint64_t samples;             /* in the dataset */
	uint64_t steps_per_epoch;     /* >= 1 */
	uint32_t world, batch;        /* >= 1 */
	uint32_t sampling, tail;      /* enum ctl_sampling, enum ctl_tail */
	uint32_t transforms;          /* CTL_TF_* */
	uint32_t crop_h, crop_w;      /* 0, 0: records as stored */
	uint32_t augment;             /* ctl_augment_digest of the job's CTL_AUGMENT (0: none; the
				       * bytes were reserved, zero, in tokens made before it) */
	uint32_t block, window;       /* sampling block: records per block, blocks per window, as
				       * the job runs (ctl_block_defaults); else 0. A version 1
				       * token, which has neither, is read as the only geometry
				       * there was (CTL_BLOCK_DEFAULT, CTL_WINDOW_DEFAULT) */
	uint64_t check;               /* checksum of the bytes before it (token.c) */
};
_Static_assert(sizeof(struct ldc_token) == LDC_TOKEN_SIZE, "the token is stored");
_Static_assert(offsetof(struct ldc_token, dataset) == 32, "the token is stored");
_Static_assert(offsetof(struct ldc_token, block) == 96, "the token is stored");
_Static_assert(offsetof(struct ldc_token, check) == 104, "the token is stored");

/* Set @t's magic, version and length, and its checksum over the rest (call after the
 * fields are set). */
void ldc_token_seal(struct ldc_token *t);
/* Check the @len bytes at @buf as a token and copy it to @out. Returns 0; -EBADMSG when it is
 * truncated, too long, not a token (magic), altered or damaged (checksum) or inconsistent (a
 * field out of range); -EPROTO for another version. A version 1 token is read into the version 2
 * layout (its check recomputed for it). The reason, naming the field, goes to @why. */
int ldc_token_parse(const void *buf, size_t len, struct ldc_token *out, char *why, size_t whylen);
/* Is @t (parsed) for the job described by @job (its dataset identity and shape; position and
 * header fields ignored)? 0, or -EINVAL with the first field that differs in @why, e.g. "world:
 * the token is for 2 ranks, this job has 4". A field of @job left 0 (dataset all zero, samples,
 * steps_per_epoch) is not compared: the client checks those once loaderd has answered. */
int ldc_token_match(const struct ldc_token *t, const struct ldc_token *job, char *why,
		    size_t whylen);

#ifdef __cplusplus
}
#endif
#endif
