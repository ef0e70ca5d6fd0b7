/* dpkset.h - a dataset as a set of .dpk shards, named by one small text manifest (docs/FORMAT.md,
 * "Sets of shards"). This module parses and writes the manifest and maps a global sample index to
 * (shard, local index); formats/dpk_open.c opens a manifest as one struct dpk through it (dpk_open on
 * a manifest), so that every reader of a .dpk reads a set the same way.
 *
 * Manifest, version 1 (UTF-8 text, every line ends with '\n'):
 *     dpkset 1
 *     COUNT IDENTITY PATH        one line per shard, in sample order (1..DPKSET_SHARDS_MAX)
 *     end NSHARDS                the last line: a manifest cut short has none
 * COUNT: the shard's samples (decimal, >= 1); IDENTITY: its dpk_identity, 32 lowercase hex digits;
 * PATH: relative to the manifest's directory, up to DPKSET_PATH_MAX bytes, no ".." component, no
 * control character, not absolute. A path named twice is refused; two shards may have one
 * identity (the same records twice is a dataset, if an odd one).
 *
 * Errors: 0 or -errno as everywhere in formats/ (-EBADMSG malformed, -EPROTO other version,
 * -E2BIG past a bound, -ENOMEM); the reason names the manifest and the line. Never logs. */
#ifndef LOADERD_DPKSET_H
#define LOADERD_DPKSET_H
#include <stddef.h>
#include <stdint.h>

#include "formats/dpk.h"
#ifdef __cplusplus
extern "C" {
#endif

#define DPKSET_MAGIC "dpkset "       /* the first line is "dpkset VERSION" */
#define DPKSET_VERSION 1u
#define DPKSET_SHARDS_MAX 65536u     /* shards in one set */
#define DPKSET_PATH_MAX 1024u        /* bytes of a shard's path */
#define DPKSET_LINE_MAX (DPKSET_PATH_MAX + 64u) /* bytes of a line, without its '\n' */
#define DPKSET_FILE_MAX ((uint64_t)(DPKSET_SHARDS_MAX + 2u) * (DPKSET_LINE_MAX + 1u))

struct dpkset_shard {
	uint64_t count;                     /* samples, >= 1 */
	uint8_t id[DPK_IDENTITY_SIZE];      /* its dpk_identity */
	char *path;                         /* relative to the manifest's directory, owned */
	unsigned line;                      /* in the manifest, from 1 */
};

struct dpkset_manifest {
	uint32_t n;                         /* shards, 1..DPKSET_SHARDS_MAX */
	struct dpkset_shard *shards;        /* n */
	uint64_t *first;                    /* n + 1 prefix sums: shard k holds samples
					     * [first[k], first[k + 1]); first[n] = total */
	uint32_t cap;                       /* room for cap shards (cap + 1 sums): grown by
					     * doubling */
};

/* 1 when @head (the first @len bytes of a file) starts a manifest ("dpkset "), else 0. */
int dpkset_is_manifest(const void *head, size_t len);
/* Parse manifest text @text[0, len) (@name: how messages call it). Returns 0 with *out (free with
 * dpkset_manifest_destroy) or -errno with "NAME line L: reason" in @err. */
int dpkset_parse(const char *text, size_t len, const char *name, struct dpkset_manifest **out,
		 char *err, size_t errlen);
/* Read the manifest open on @fd, @size bytes (its fstat's, at most DPKSET_FILE_MAX) from offset
 * 0, and parse it as dpkset_parse does, @name naming it in errors. 0, or -E2BIG, -ENOMEM, -errno
 * (-EBADMSG cut short) or dpkset_parse's error, with the reason in @err. */
int dpkset_read_fd(int fd, uint64_t size, const char *name, struct dpkset_manifest **out,
		   char *err, size_t errlen);
void dpkset_manifest_destroy(struct dpkset_manifest *m);  /* NULL ok */
/* Add a shard at the end (path copied; line set to its line in the text written). Returns 0,
 * -EINVAL for a path the parser would refuse or one in @m already (a linear scan), -E2BIG past a
 * bound, -ENOMEM; the reason in @err. @m may be an empty manifest from dpkset_manifest_create. */
int dpkset_manifest_add(struct dpkset_manifest *m, const char *path, uint64_t count,
			const uint8_t id[DPK_IDENTITY_SIZE], char *err, size_t errlen);
/* An empty manifest to add shards to (NULL on no memory). */
struct dpkset_manifest *dpkset_manifest_create(void);
/* Write @m to @path whole or not at all (temporary file, fsync, rename: common/afile.h). At least
 * one shard. Returns 0 or -errno. */
int dpkset_write(const char *path, const struct dpkset_manifest *m);
/* The shard holding global sample @i (< first[n]): binary search over @first, O(log n). */
uint32_t dpkset_find(const struct dpkset_manifest *m, uint64_t i);
/* The set's identity: the one shard's identity when n == 1 (a one-shard set is its file), else
 * XXH3-128 over the shard identities in order, seeded by n. */
void dpkset_identity(const struct dpkset_manifest *m, uint8_t out[DPK_IDENTITY_SIZE]);
/* Hex of an identity into @out (2 * DPK_IDENTITY_SIZE + 1 bytes). */
void dpkset_hex(const uint8_t id[DPK_IDENTITY_SIZE], char *out);

#ifdef __cplusplus
}
#endif
#endif
