/* s3cache.h - an s3:// dataset (a .dpk, or a set's manifest and its shards under the same prefix)
 * made local: fetched with the user's own credentials into the user's own cache directory, so that
 * the client opens it like any local dataset and passes loaderd descriptors, as for a file on disk
 * (docs/S3.md, "Reading s3:// datasets in jobs": why the client fetches and loaderd never does).
 *
 * The cache (mode 0700, the user's): objects/HASH, one file per object version, HASH = XXH3-128 of
 * (endpoint, bucket, key, ETag), so a changed object is a new file and never mixed with the old;
 * sets/HASH/ the dataset's view, HASH of the manifest's (endpoint, bucket, key, ETag): the manifest
 * (or the .dpk) under its own name and each shard under its manifest path, hard links into
 * objects/. Every run HEADs every object (in flight together): an object already cached under its
 * current ETag is not fetched again; a missing or changed one is fetched, each range If-Match its
 * ETag, into a temporary file renamed into place whole. Records are checked as from any disk:
 * dpk_open checks each shard against its manifest line, every read its record's checksum.
 *
 * Errors: 0 or -errno, the reason (naming the object, quoting the store) in @err. */
#ifndef LOADERD_S3CACHE_H
#define LOADERD_S3CACHE_H
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "s3/s3.h"

struct s3cache_result {
	char path[PATH_MAX];       /* the local dataset: open it as the URL's dataset */
	uint32_t objects;          /* objects in the dataset (manifest and shards, or the .dpk) */
	uint32_t fetched;          /* of which fetched now (missing or changed) */
	uint64_t bytes;            /* the dataset's bytes */
	uint64_t fetched_bytes;    /* bytes fetched now */
};

/* The user's cache directory: $LOADERD_S3_CACHE, else $XDG_CACHE_HOME/loaderd/s3, else
 * $HOME/.cache/loaderd/s3. 0 or -ENAMETOOLONG / -ENOENT (no HOME). */
int s3cache_dir(char *out, size_t len);
/* Make @url local in cache directory @dir (made 0700 when missing), keeping what objects/ holds
 * within @bound bytes (0: no bound) by evicting other datasets' views, least recently used first,
 * and the objects no view links: -ENOSPC when the dataset alone exceeds it, or when it cannot fit
 * beside what is in use. 0 with @r filled, or -errno. */
int s3cache_fetch(struct s3 *s, const char *dir, uint64_t bound, const char *url,
		  struct s3cache_result *r, char *err, size_t errlen);

/* The same with more say (loaderd's node cache, tools/ldfetch.c): @o->bound as above, named in
 * messages as @o->bound_name (NULL: "LOADERD_S3_CACHE_SIZE"); @o->admit, when set, is asked
 * before any object of the dataset is fetched (once with its own object, once with all of them,
 * each HEADed with @s's credentials, its own first): @paths are their objects/HASH paths, @sizes
 * their sizes; non-zero refuses the fetch with that -errno (its reason in @err). When @lockfd is
 * not NULL, on success the cache's lock is left held and its descriptor put there (close it to
 * release): nothing is evicted before the caller has opened the view. */
struct s3cache_opts {
	uint64_t bound;
	const char *bound_name;
	int (*admit)(void *arg, const char *const *paths, const uint64_t *sizes, size_t n,
		     const char *url, char *err, size_t errlen);
	void *arg;
	int concurrent;     /* 1: the lock is let go while the store is asked, so that fetches
			     * run side by side (s3cache.c, struct conc: what each relies on pinned,
			     * each object fetched once, room reserved); 0: one fetch at a time */
};
int s3cache_fetch_opts(struct s3 *s, const char *dir, const struct s3cache_opts *o,
		       const char *url, struct s3cache_result *r, int *lockfd, char *err,
		       size_t errlen);
/* 1 when the object file @path is in use: some open file holds a read lock (an OFD lock,
 * fcntl F_OFD_SETLK) on any of its bytes. loaderd's node cache takes one on byte UID of every
 * object it passes to a job of that uid (tools/ldfetch.c), held as long as loaderd's descriptor
 * of it (SCM_RIGHTS shares the open file). Eviction leaves such objects alone. */
int s3cache_pinned(const char *path);
/* 1 when some open file holds a read lock on a byte of [@from, @from + @len) of @path (@len 0: to
 * the end and past it): byte UID held is a job of that uid holding the object. */
int s3cache_held(const char *path, uint64_t from, uint64_t len);

/* A set streamed through loaderd's node cache (tools/ldfetch.c, LDF_STREAM; docs/STREAMING.md,
 * parts 3 and 4): its objects fetched one shard at a time as loaderd asks, each linked into the
 * set's view as it comes (so the view's LRU eviction and the orphans' apply to them as to a whole
 * set's), kept from eviction only while a job holds it (s3cache_pinned). @take is called under the
 * cache's lock for each object made present, in order (@k: the shard, or S3CACHE_TOP for the
 * manifest), with its objects/HASH path: open it and pin it there (nothing is evicted before the
 * lock goes); non-zero stops with that -errno. */
#define S3CACHE_TOP UINT32_MAX
typedef int (*s3cache_take_fn)(void *arg, uint32_t k, const char *path, char *err, size_t errlen);
struct s3cache_stream;
/* HEAD the manifest @url and every shard with @s's credentials (the proof: every object), then
 * fetch the manifest and shard 0 (the template) as s3cache_fetch_opts would a set of those two:
 * @o->admit asked with the manifest, then with the manifest and shard 0 (never the whole set: a
 * set larger than @o->bound is streamed, not refused); -ENOSPC when those two exceed @o->bound or
 * cannot fit beside what is in use; -EMEDIUMTYPE when @url is not a manifest (a .dpk: fetch it whole). -EBUSY when the manifest and
 * shard 0 fit the bound but not beside what is held now (or @o->admit answered -EBUSY): the
 * caller may try again once others let go. @take for the manifest,
 * then shard 0. @s stays the caller's and must outlive the stream. 0 with *@out, or -errno. */
int s3cache_stream_open(struct s3 *s, const char *dir, const struct s3cache_opts *o,
			const char *url, s3cache_take_fn take, void *arg,
			struct s3cache_stream **out, char *err, size_t errlen);
uint32_t s3cache_stream_shards(const struct s3cache_stream *st);
uint64_t s3cache_stream_size(const struct s3cache_stream *st, uint32_t k);  /* from its HEAD */
/* Make shards @ks[0, n) (n <= 256, distinct) present, fetching those missing (every range of
 * them in flight together, the cache's lock let go meanwhile), then @take each in order. Room is
 * made under @o->bound: objects no view links, then other views, least recently used first, then
 * shards @evict[0, nevict) of this stream, in that order (none of @ks), each only while no job
 * holds it. @o->admit is asked with the shards' objects first. Returns 0 (*@fetched: bytes fetched
 * now), 1 when space is short (nothing fetched; the figures in @err; @o->admit's -EAGAIN counts
 * as short): try again once something was let go, or -errno (-ENOSPC: a shard alone exceeds the
 * bound) with the object named in @err. */
int s3cache_stream_fetch(struct s3cache_stream *st, const uint32_t *ks, size_t n,
			 const uint32_t *evict, size_t nevict, s3cache_take_fn take, void *arg,
			 uint64_t *fetched, char *err, size_t errlen);
void s3cache_stream_close(struct s3cache_stream *st);  /* NULL ok */

/* The whole of it for a tool: credentials and endpoint from the standard places (s3_cfg_load), the
 * user's cache directory (s3cache_dir), its bound ($LOADERD_S3_CACHE_SIZE: bytes, or with K, M,
 * G, T; none by default), s3cache_fetch. 0 or -errno with the reason in @err. */
int s3cache_resolve(const char *url, struct s3cache_result *r, char *err, size_t errlen);

#endif
