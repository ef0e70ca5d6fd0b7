/* ckpt.h - the trainer's checkpoints: everything that decides the rest of a run, in one file that
 * appears whole or not at all (common/afile.h: temporary file, fsync, rename, directory fsync).
 *
 * A checkpoint holds the step to run next, the parameters, the optimizer state (SGD momentum) and
 * the loader's resume token for that step (shm/token.h), plus what must match to continue: world
 * size, seed, parameter count. DIR/ckpt-STEP.ldck, STEP in 16 zero-padded digits so that names
 * sort by step; the newest two are kept. Little-endian; a checksum (XXH3-64) over everything.
 *
 * Layout: struct trn_ckpt_hdr | params (n float32, the DDP core's flat layout) | momentum (n
 * float32) | split seed (split_len bytes) | u64 XXH3-64 of all the bytes before it. The split
 * seed (version 2; --balance) is the CTL_SPLIT_SEED body (shm/ctl.h) for the checkpoint's step:
 * the weights loaderd had in force there and the ranks' reports of the updates still pending,
 * so that a resume on a loaderd that lost the job replays the same splits; then world doubles,
 * each rank's latest report at the checkpoint (what its next releases carry). Version 1 files
 * (no seed) and version 2 ones (a header 8 bytes shorter: a version 1 token) still load.
 *
 * Rank 0 writes and reads them (every rank holds the same parameters and momentum after each
 * optimizer step); no MPI here. Never logs: errors come back as -errno with a sentence. */
#ifndef LOADERD_TRN_CKPT_H
#define LOADERD_TRN_CKPT_H
#include <stddef.h>
#include <stdint.h>

#include "shm/token.h"

#define TRN_CKPT_MAGIC "LDCKPT\0\1"
#define TRN_CKPT_VERSION 3u          /* 3: room for a version 2 resume token (112 bytes) */
#define TRN_CKPT_HDR_V2 168u         /* header bytes of versions 1 and 2 (token[104]) */
#define TRN_CKPT_SPLIT_MAX 4080u     /* split seed bytes at most: one control message's body */
#define TRN_CKPT_KEEP 2              /* checkpoints left in DIR after a save */

struct trn_ckpt_hdr {
	char magic[8];               /* TRN_CKPT_MAGIC */
	uint32_t version;            /* TRN_CKPT_VERSION */
	uint32_t hdr_size;           /* sizeof(struct trn_ckpt_hdr) */
	uint64_t step;               /* the micro-step to run next (the ring step of its batch) */
	uint64_t world;
	uint64_t seed;
	uint64_t n;                  /* floats in the parameters, and in the momentum */
	uint64_t file_size;          /* bytes of the whole file */
	uint32_t token_len;          /* LDC_TOKEN_SIZE, or 0 (--synthetic: no loader); versions 1
				      * and 2: at most 104 (a version 1 token), the header 8
				      * bytes shorter, ending there */
	uint32_t split_len;          /* bytes of the split seed, <= TRN_CKPT_SPLIT_MAX (version 1:
				      * the reserved field, zero) */
	uint8_t token[LDC_TOKEN_SIZE];
};
_Static_assert(sizeof(struct trn_ckpt_hdr) == 176, "on disk");
_Static_assert(offsetof(struct trn_ckpt_hdr, token) + 104 == TRN_CKPT_HDR_V2, "versions 1, 2");
_Static_assert(offsetof(struct trn_ckpt_hdr, step) == 16, "on disk");
_Static_assert(offsetof(struct trn_ckpt_hdr, token_len) == 56, "on disk");
_Static_assert(offsetof(struct trn_ckpt_hdr, token) == 64, "on disk");

/* A checkpoint in memory. @params and @mom: n floats each, host memory. */
struct trn_ckpt {
	uint64_t step, world, seed;
	size_t n;
	const uint8_t *token;        /* token_len bytes, or NULL */
	uint32_t token_len;
	float *params, *mom;
	const uint8_t *split;        /* split_len bytes (save: borrowed; load: malloc'd, the caller
				      * frees it), or NULL */
	uint32_t split_len;
};

/* Write @c as DIR/ckpt-STEP.ldck atomically, then remove all but the newest TRN_CKPT_KEEP.
 * The path written goes to @path (@cap bytes). 0 or -errno with @why. */
int trn_ckpt_save(const char *dir, const struct trn_ckpt *c, char *path, size_t cap, char *why,
		  size_t whylen);
/* The newest checkpoint of @dir into @c (params and mom malloc'd: the caller frees them; token
 * points into @tok, LDC_TOKEN_SIZE bytes). Returns 1 when one was loaded, 0 when @dir holds none
 * (or does not exist), or -errno with a sentence naming the file and the fault in @why: -EBADMSG
 * corrupt (truncated, checksum, sizes), -EPROTO another version. Temporary files of an
 * interrupted save are not checkpoints. */
int trn_ckpt_load_newest(const char *dir, struct trn_ckpt *c, uint8_t tok[LDC_TOKEN_SIZE],
			 char *path, size_t cap, char *why, size_t whylen);

#endif
