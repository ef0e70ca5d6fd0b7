/* s3cache.c - an s3:// dataset made local in the user's cache (s3cache.h). */
#include "s3/s3cache.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <ftw.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "common/args.h"
#include "common/err.h"
#include "formats/dpkset.h"

#define BATCH 256u  /* objects HEADed or fetched together (bounds the memory of one round) */

int s3cache_dir(char *out, size_t len)
{
	const char *v = getenv("LOADERD_S3_CACHE"), *x = getenv("XDG_CACHE_HOME"),
		   *h = getenv("HOME");
	int n;
	if (v && *v)
		n = snprintf(out, len, "%s", v);
	else if (x && *x)
		n = snprintf(out, len, "%s/loaderd/s3", x);
	else if (h && *h)
		n = snprintf(out, len, "%s/.cache/loaderd/s3", h);
	else
		return -ENOENT;
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* mkdir -p @path (mode 0700 for what it makes). 0 or -errno. */
static int mkdirs(const char *path)
{
	char p[PATH_MAX];
	if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
		return -ENAMETOOLONG;
	for (char *s = p + 1;; s++) {
		if (*s == '/' || !*s) {
			char c = *s;
			*s = '\0';
			if (mkdir(p, 0700) < 0 && errno != EEXIST)
				return -errno;
			*s = c;
			if (!c)
				break;
		}
	}
	return 0;
}

/* objects/HASH of (endpoint, bucket, key, etag): a changed object is another file. */
static void obj_path(const char *dir, const char *endpoint, const char *bucket, const char *key,
		     const char *etag, char *out, size_t len)
{
	XXH3_state_t st;
	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, endpoint, strlen(endpoint) + 1);
	XXH3_128bits_update(&st, bucket, strlen(bucket) + 1);
	XXH3_128bits_update(&st, key, strlen(key) + 1);
	XXH3_128bits_update(&st, etag, strlen(etag) + 1);
	XXH128_hash_t h = XXH3_128bits_digest(&st);
	snprintf(out, len, "%s/objects/%016" PRIx64 "%016" PRIx64, dir, (uint64_t)h.high64,
		 (uint64_t)h.low64);
}

struct want {
	char *key;                  /* owned */
	struct s3_obj obj;
	char *path;                 /* DIR/objects/HASH, malloc'd (a set has up to 65536: two
				     * PATH_MAX arrays each were half a GiB) */
	char *tmp;                  /* while fetched, malloc'd */
	int fd;
	int missing;                /* not in the cache under its current ETag */
	int busy;                   /* side by side: another fetch is fetching it now */
};

/* @w's temporary name: its path and @suffix. 0 or -ENOMEM. */
static int set_tmp(struct want *w, const char *suffix)
{
	size_t n = strlen(w->path) + strlen(suffix) + 1;
	char *t = realloc(w->tmp, n);
	if (!t)
		return -ENOMEM;
	w->tmp = t;
	snprintf(t, n, "%s%s", w->path, suffix);
	return 0;
}

/* Fetches side by side (s3cache_opts.concurrent: loaderd's node cache). The cache's lock is let go
 * whenever the store is asked (HEADs, transfers), so that one long fetch, or a store that never
 * answers, delays no other open. Meanwhile:
 * - what this fetch relies on is kept from eviction: each object it found cached or has fetched
 *   is read-locked on byte PIN_BYTE (an OFD lock: s3cache_pinned sees it; past any uid's byte,
 *   so never charged to one);
 * - an object is fetched once: into OBJECT.tmp.part, made O_EXCL and write-locked by its fetcher
 *   until it is in place; another fetch that needs it waits for that lock to go (F_OFD_SETLKW),
 *   the cache unlocked, then finds it in place (or fetches it itself, when that fetch failed);
 *   a part whose fetcher died (no lock) is removed;
 * - room is reserved: a part is allocated to its object's size first (what the cache holds
 *   counts it; eviction never takes a temporary file), an object another fetch is fetching is
 *   not counted again, and a set's later batches make room again. */
#define PIN_BYTE (1ull << 40)
struct conc {
	int lockfd;                 /* the cache's lock, held but while transferring or waiting */
	int *pins;                  /* descriptors holding our read locks (n of cap) */
	size_t n, cap;
};

static void pin(struct conc *c, const char *path)
{
	if (!c)
		return;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		int *p = realloc(c->pins, cap * sizeof(*p));
		if (!p)
			return;  /* unpinned: at worst evicted, then refused when linked */
		c->pins = p;
		c->cap = cap;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = (off_t)PIN_BYTE,
			    .l_len = 1 };
	if (fd >= 0 && fcntl(fd, F_OFD_SETLK, &fl) == 0)
		c->pins[c->n++] = fd;
	else if (fd >= 0)
		close(fd);
}

static void unpin_all(struct conc *c)
{
	for (size_t i = 0; i < c->n; i++)
		close(c->pins[i]);
	free(c->pins);
	c->pins = NULL;
	c->n = c->cap = 0;
}

static void relock(int fd)
{
	while (flock(fd, LOCK_EX) < 0 && errno == EINTR)
		;
}

/* 1 when @part (an OBJECT.tmp.part) is being written: its fetcher holds its write lock. */
static int part_busy(const char *part)
{
	int fd = open(part, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return 0;
	struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
	int busy = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
	close(fd);
	return busy;
}

/* HEAD @n objects: each one's size, ETag and cache path, and whether it is missing there. 0 or
 * -errno (the reason in @err). */
static int head_batch(struct s3 *s, const char *dir, const char *bucket, struct want *w, size_t n,
		      struct s3cache_result *r, struct conc *c, char *err, size_t errlen)
{
	const char *keys[BATCH];
	struct s3_obj objs[BATCH];
	int ret;

	for (size_t i = 0; i < n; i++)
		keys[i] = w[i].key;
	/* side by side, no request to a store is made under the cache's lock: a store that never
	 * answers (the client chose it) holds up its own open only */
	if (c)
		flock(c->lockfd, LOCK_UN);
	ret = s3_head_many(s, bucket, keys, objs, n);
	if (c)
		relock(c->lockfd);
	if (ret < 0)
		return err_set(err, errlen, ret, "%s", s3_error(s));
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		w[i].obj = objs[i];
		w[i].fd = -1;
		char p[PATH_MAX + 64];
		obj_path(dir, s3_endpoint(s), bucket, w[i].key, objs[i].etag, p, sizeof(p));
		free(w[i].path);
		if (!(w[i].path = strdup(p)))
			return err_set(err, errlen, -ENOMEM, "out of memory");
		r->objects++;
		r->bytes += objs[i].size;
		/* cached under its current ETag, or to fetch */
		w[i].missing = !(stat(w[i].path, &st) == 0 && (uint64_t)st.st_size == objs[i].size);
		w[i].busy = 0;
		if (c && !w[i].missing) {
			pin(c, w[i].path);
		} else if (c) {
			char part[PATH_MAX + 16];
			snprintf(part, sizeof(part), "%s.tmp.part", w[i].path);
			w[i].busy = part_busy(part);
		}
	}
	return 0;
}

/* Fetch the missing ones of @n objects (all their ranges in flight together), each into a
 * temporary file renamed into place whole. 0 or -errno (the reason in @err). */
static int get_batch(struct s3 *s, const char *dir, const char *bucket, struct want *w, size_t n,
		     struct s3cache_result *r, char *err, size_t errlen)
{
	struct s3_file files[BATCH];
	size_t nf = 0;
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		if (!w[i].missing)
			continue;
		if (set_tmp(&w[i], ".tmp.XXXXXX") < 0) {
			ret = err_set(err, errlen, -ENOMEM, "out of memory");
			break;
		}
		w[i].fd = mkstemp(w[i].tmp);
		if (w[i].fd < 0) {
			ret = err_set(err, errlen, -errno, "the cache %s: %s", dir, strerror(errno));
			break;
		}
		files[nf++] = (struct s3_file){ bucket, w[i].key, w[i].fd, &w[i].obj };
	}
	if (ret == 0 && nf && (ret = s3_get_files(s, files, nf)) < 0)
		err_set(err, errlen, ret, "%s", s3_error(s));
	for (size_t i = 0; i < n; i++) {
		if (w[i].fd < 0)
			continue;
		/* bytes that are not the object's (changed on the way, or by a broken store) are never
		 * cached: checked against the ETag where it is the MD5 */
		char md5[33];
		int chk = ret == 0 ? s3_etag_check_fd(w[i].fd, w[i].obj.size, w[i].obj.etag, md5) : 1;
		if (chk == -EBADMSG)
			ret = err_set(err, errlen, chk, "s3://%s/%s: the bytes fetched have MD5 %s, not "
				      "the object's ETag %s: corrupted on the way; not cached", bucket,
				      w[i].key, md5, w[i].obj.etag);
		else if (chk < 0)
			ret = err_set(err, errlen, chk, "the cache: %s: %s", w[i].tmp, strerror(-chk));
		if (ret == 0 && rename(w[i].tmp, w[i].path) < 0)
			ret = err_set(err, errlen, -errno, "the cache %s: %s", dir, strerror(errno));
		if (ret == 0) {
			r->fetched++;
			r->fetched_bytes += w[i].obj.size;
			w[i].missing = 0;
		} else {
			unlink(w[i].tmp);
		}
		close(w[i].fd);
		w[i].fd = -1;
	}
	return ret;
}

/* get_batch side by side (struct conc above): each missing object fetched by this fetch into its
 * part, or waited for while another fetches it; up to 3 rounds (a fetch waited for may fail). */
static int get_batch_conc(struct s3 *s, const char *dir, const char *bucket, struct want *w,
			  size_t n, struct s3cache_result *r, struct conc *c, char *err,
			  size_t errlen)
{
	struct s3_file files[BATCH];
	int ret = 0;

	for (int round = 0; round < 3 && ret == 0; round++) {
		size_t nf = 0, nwait = 0;
		for (size_t i = 0; i < n && ret == 0; i++) {
			struct stat st;
			if (!w[i].missing)
				continue;
			w[i].busy = 0;
			if (stat(w[i].path, &st) == 0 && (uint64_t)st.st_size == w[i].obj.size) {
				w[i].missing = 0;  /* placed by another fetch */
				pin(c, w[i].path);
				continue;
			}
			if (set_tmp(&w[i], ".tmp.part") < 0) {
				ret = err_set(err, errlen, -ENOMEM, "out of memory");
				break;
			}
			int e = 0;
			for (int t = 0; t < 2; t++) {
				w[i].fd = open(w[i].tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY,
					       0600);
				e = w[i].fd < 0 ? errno : 0;
				if (w[i].fd >= 0 || e != EEXIST || part_busy(w[i].tmp))
					break;
				unlink(w[i].tmp);  /* its fetcher died */
			}
			if (w[i].fd < 0 && e == EEXIST) {
				w[i].busy = 1;
				nwait++;
				continue;
			}
			struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
			int fa = 0;
			if (w[i].fd >= 0 && fcntl(w[i].fd, F_OFD_SETLK, &fl) < 0)
				e = errno;
			else if (w[i].fd >= 0 && w[i].obj.size &&
				 (fa = posix_fallocate(w[i].fd, 0, (off_t)w[i].obj.size)) &&
				 fa != EOPNOTSUPP && fa != EINVAL)
				e = fa;
			if (e) {
				ret = err_set(err, errlen, -e, "the cache %s: %s", dir, strerror(e));
				if (w[i].fd >= 0) {
					unlink(w[i].tmp);
					close(w[i].fd);
					w[i].fd = -1;
				}
				break;
			}
			files[nf++] = (struct s3_file){ bucket, w[i].key, w[i].fd, &w[i].obj };
		}
		if (ret == 0 && nf) {
			flock(c->lockfd, LOCK_UN);  /* the transfer, beside other fetches */
			if ((ret = s3_get_files(s, files, nf)) < 0)
				err_set(err, errlen, ret, "%s", s3_error(s));
			relock(c->lockfd);
		}
		for (size_t i = 0; i < n; i++) {
			if (w[i].fd < 0)
				continue;
			char md5[33];
			int chk = ret == 0 ? s3_etag_check_fd(w[i].fd, w[i].obj.size, w[i].obj.etag,
							       md5) : 1;
			if (chk == -EBADMSG)
				ret = err_set(err, errlen, chk, "s3://%s/%s: the bytes fetched have MD5 "
					      "%s, not the object's ETag %s: corrupted on the way; not "
					      "cached", bucket, w[i].key, md5, w[i].obj.etag);
			else if (chk < 0)
				ret = err_set(err, errlen, chk, "the cache: %s: %s", w[i].tmp,
					      strerror(-chk));
			if (ret == 0 && link(w[i].tmp, w[i].path) < 0 && errno != EEXIST)
				ret = err_set(err, errlen, -errno, "the cache %s: %s", dir,
					      strerror(errno));
			if (ret == 0) {
				r->fetched++;
				r->fetched_bytes += w[i].obj.size;
				w[i].missing = 0;
			}
			unlink(w[i].tmp);
			close(w[i].fd);  /* and its write lock: whoever waits goes on */
			w[i].fd = -1;
			/* pinned only now: the part's write lock (the whole file, the object's too once
			 * linked) made a pin taken before it fail, and the object, unpinned, could be
			 * evicted as an orphan by another fetch while this one's lock was let go (a later
			 * transfer, the shards' HEADs), before it was linked into its view. Still under
			 * the cache's lock: no eviction in between. */
			if (ret == 0)
				pin(c, w[i].path);
		}
		if (ret < 0 || !nwait)
			return ret;
		/* wait for the other fetches, the cache unlocked */
		flock(c->lockfd, LOCK_UN);
		for (size_t i = 0; i < n; i++) {
			if (!w[i].missing || !w[i].busy)
				continue;
			int fd = open(w[i].tmp, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
			struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
			if (fd >= 0) {
				while (fcntl(fd, F_OFD_SETLKW, &fl) < 0 && errno == EINTR)
					;
				close(fd);
			}
		}
		relock(c->lockfd);
	}
	for (size_t i = 0; ret == 0 && i < n; i++)
		if (w[i].missing)
			ret = err_set(err, errlen, -EAGAIN, "s3://%s/%s: fetched by another request "
				      "that failed, three times; try again", bucket, w[i].key);
	return ret;
}

/* ---- the bound: eviction ----
 * Space is what objects/ holds (allocated blocks). A dataset's view links its objects, so an object
 * is in use while some view links it (st_nlink > 1); eviction removes whole views, least recently
 * used first (a view's mtime is set at each use), never the one being fetched, then every object
 * no view links (and that the fetch in progress does not need). */

static uint64_t usage(const char *dir)
{
	char path[PATH_MAX + 300];
	snprintf(path, sizeof(path), "%s/objects", dir);
	DIR *d = opendir(path);
	struct dirent *e;
	uint64_t sum = 0;
	struct stat st;
	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode))
			sum += (uint64_t)st.st_blocks * 512;
	closedir(d);
	return sum;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Unlink every object no view links, but those in @keep (@nkeep sorted full paths). */
static void drop_orphans(const char *dir, const char **keep, size_t nkeep)
{
	char path[PATH_MAX + 300];
	snprintf(path, sizeof(path), "%s/objects", dir);
	DIR *d = opendir(path);
	struct dirent *e;
	struct stat st;
	if (!d)
		return;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode) || st.st_nlink > 1 || strstr(e->d_name, ".tmp."))
			continue;
		char full[PATH_MAX + 600], *k = full;
		snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
		if (bsearch(&k, keep, nkeep, sizeof(*keep), cmp_str) || s3cache_pinned(full))
			continue;
		unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
}

int s3cache_held(const char *path, uint64_t from, uint64_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return 0;
	/* would a write lock on [from, from + len) conflict with another open file's read lock? */
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)from,
			    .l_len = (off_t)len };
	int held = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
	close(fd);
	return held;
}

int s3cache_pinned(const char *path)
{
	return s3cache_held(path, 0, 0);  /* any byte, any uid */
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(p);
	return 0;
}

/* The least recently used view but @keep (its full path into @out): 0, or -ENOENT for none. */
static int oldest_view(const char *dir, const char *keep, char *out, size_t len)
{
	char path[PATH_MAX + 300];
	snprintf(path, sizeof(path), "%s/sets", dir);
	DIR *d = opendir(path);
	struct dirent *e;
	struct stat st;
	struct timespec best = { 0, 0 };
	int found = 0;
	if (!d)
		return -ENOENT;
	while ((e = readdir(d))) {
		char full[PATH_MAX + 600];
		if (e->d_name[0] == '.')
			continue;
		snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
		if (!strcmp(full, keep) || stat(full, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		if (!found || st.st_mtim.tv_sec < best.tv_sec ||
		    (st.st_mtim.tv_sec == best.tv_sec && st.st_mtim.tv_nsec < best.tv_nsec)) {
			best = st.st_mtim;
			snprintf(out, len, "%s", full);
			found = 1;
		}
	}
	closedir(d);
	return found ? 0 : -ENOENT;
}

/* Make room in the cache for @need more bytes under @bound, keeping view @view and the objects
 * @w[0, n) and @top. 0, or -ENOSPC naming @url and the figures. */
static int make_room(const char *dir, uint64_t bound, const char *bname, uint64_t need,
		     const char *view, const struct want *w, size_t n, const struct want *top,
		     const char *url, char *err, size_t errlen)
{
	const char **keep;
	if (!bound)
		return 0;
	if (usage(dir) + need <= bound)
		return 0;
	if (!(keep = calloc(n + 1, sizeof(*keep))))
		return err_set(err, errlen, -ENOMEM, "%s: out of memory", url);
	for (size_t i = 0; i < n; i++)
		keep[i] = w[i].path;
	keep[n] = top->path;
	qsort(keep, n + 1, sizeof(*keep), cmp_str);
	char old[PATH_MAX + 600];
	uint64_t used;
	for (;;) {
		drop_orphans(dir, keep, n + 1);
		if ((used = usage(dir)) + need <= bound)
			break;
		if (oldest_view(dir, view, old, sizeof(old)) < 0) {
			free(keep);
			if (strcmp(bname, "LOADERD_S3_CACHE_SIZE"))  /* the node cache's: short */
				return err_set(err, errlen, -ENOSPC, "%s: %llu more bytes do not fit: the "
					       "node cache holds %llu bytes in use, its bound is %llu "
					       "(%s)", url, (unsigned long long)need,
					       (unsigned long long)used, (unsigned long long)bound, bname);
			return err_set(err, errlen, -ENOSPC, "%s: %llu more bytes do not fit in the cache "
				       "%s: it holds %llu bytes of this dataset's and others in use, its "
				       "bound is %llu (%s)", url, (unsigned long long)need, dir,
				       (unsigned long long)used, (unsigned long long)bound, bname);
		}
		nftw(old, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	}
	free(keep);
	return 0;
}

static uint64_t missing_bytes(const struct want *w, size_t n)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++)
		if (w[i].missing && !w[i].busy)  /* another fetch's part holds its room already */
			sum += (w[i].obj.size + 4095) / 4096 * 4096;  /* as blocks */
	return sum;
}

/* Hard-link cached object @obj as @view/@rel (its folders made), replacing what was there. */
static int place(const char *obj, const char *view, const char *rel, char *err, size_t errlen)
{
	char to[PATH_MAX * 2];
	snprintf(to, sizeof(to), "%s/%s", view, rel);
	char *slash = strrchr(to, '/');
	*slash = '\0';
	int ret = mkdirs(to);
	*slash = '/';
	if (ret == 0 && unlink(to) < 0 && errno != ENOENT)
		ret = -errno;
	if (ret == 0 && link(obj, to) < 0)
		ret = -errno;
	return ret < 0 ? err_set(err, errlen, ret, "the cache: linking %s: %s", to,
				 strerror(-ret)) : 0;
}

static int read_file(const char *path, uint64_t max, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size > max) {
		close(fd);
		return -E2BIG;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t got = 0;
	while (buf && got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (!buf || got != (size_t)st.st_size) {
		free(buf);
		return buf ? -EIO : -ENOMEM;
	}
	buf[got] = '\0';
	*out = buf;
	*len = got;
	return 0;
}

/* The caller's admission of the objects [0, n) of a dataset (its own object first), all HEADed
 * with its credentials, before any of them is fetched. */
static int admit(const struct s3cache_opts *o, const struct want *top, const struct want *w,
		 size_t n, const char *url, char *err, size_t errlen)
{
	if (!o->admit)
		return 0;
	const char **paths = calloc(n + 1, sizeof(*paths));
	uint64_t *sizes = calloc(n + 1, sizeof(*sizes));
	int ret = -ENOMEM;
	if (paths && sizes) {
		paths[0] = top->path;
		sizes[0] = top->obj.size;
		for (size_t i = 0; i < n; i++) {
			paths[i + 1] = w[i].path;
			sizes[i + 1] = w[i].obj.size;
		}
		ret = o->admit(o->arg, paths, sizes, n + 1, url, err, errlen);
	} else {
		err_set(err, errlen, ret, "%s: out of memory", url);
	}
	free(paths);
	free(sizes);
	return ret;
}

static int fetch_locked(struct s3 *s, const char *dir, const struct s3cache_opts *o,
			const char *url, struct s3cache_result *r, struct conc *c, char *err,
			size_t errlen)
{
	uint64_t bound = o->bound;
	const char *bname = o->bound_name ? o->bound_name : "LOADERD_S3_CACHE_SIZE";
	struct s3_url u;
	struct dpkset_manifest *m = NULL;
	struct want *w = NULL;
	uint32_t nw = 0;
	char view[PATH_MAX + 300];
	char *text = NULL;
	size_t len = 0;
	int ret;

	memset(r, 0, sizeof(*r));
	if ((ret = s3_url_parse(url, &u, err, errlen)) < 0)
		return ret;
	const char *base = strrchr(u.key, '/');
	base = base ? base + 1 : u.key;
	if (!*base)
		return err_set(err, errlen, -EINVAL, "%s names no object (a dataset is a key: "
			       "s3://bucket/prefix/NAME)", url);
	/* the dataset's own object, a .dpk or a manifest; its view is named after its version */
	struct want top = { .key = u.key };
	if ((ret = head_batch(s, dir, u.bucket, &top, 1, r, c, err, errlen)) < 0)
		goto out;
	snprintf(view, sizeof(view), "%s/sets/%s", dir, strrchr(top.path, '/') + 1);
	if (bound && top.obj.size > bound) {
		ret = err_set(err, errlen, -ENOSPC, "%s: %llu bytes, above the cache's bound of %llu "
			      "(%s)", url, (unsigned long long)top.obj.size,
			      (unsigned long long)bound, bname);
		goto out;
	}
	if ((ret = admit(o, &top, NULL, 0, url, err, errlen)) < 0 ||
	    (ret = make_room(dir, bound, bname, missing_bytes(&top, 1), view, NULL, 0, &top, url,
			     err, errlen)) < 0 ||
	    (ret = c ? get_batch_conc(s, dir, u.bucket, &top, 1, r, c, err, errlen) :
		     get_batch(s, dir, u.bucket, &top, 1, r, err, errlen)) < 0)
		goto out;
	char head[8] = "";
	int fd = open(top.path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0 || pread(fd, head, sizeof(head), 0) < 0)
		ret = err_set(err, errlen, -errno, "the cache: %s: %s", top.path, strerror(errno));
	if (fd >= 0)
		close(fd);
	if (ret < 0)
		goto out;
	if (dpkset_is_manifest(head, top.obj.size < sizeof(head) ? (size_t)top.obj.size :
			       sizeof(head))) {
		if ((ret = read_file(top.path, DPKSET_FILE_MAX, &text, &len)) < 0) {
			ret = err_set(err, errlen, ret, "%s: the manifest: %s", url, strerror(-ret));
			goto out;
		}
		if ((ret = dpkset_parse(text, len, url, &m, err, errlen)) < 0)
			goto out;
		size_t plen = (size_t)(base - u.key);
		w = calloc(m->n, sizeof(*w));
		if (!w) {
			ret = -ENOMEM;
			goto out;
		}
		for (nw = 0; nw < m->n; nw++) {
			size_t kl = plen + strlen(m->shards[nw].path);
			w[nw].fd = -1;
			if (kl > S3_KEY_MAX) {
				ret = err_set(err, errlen, -E2BIG, "%s line %u: shard key of %zu bytes, "
					      "above S3's %u", url, m->shards[nw].line, kl, S3_KEY_MAX);
				goto out;
			}
			if (!(w[nw].key = malloc(kl + 1))) {
				ret = -ENOMEM;
				goto out;
			}
			memcpy(w[nw].key, u.key, plen);
			strcpy(w[nw].key + plen, m->shards[nw].path);
		}
		/* every shard's version first, then room for the missing ones, then those */
		for (uint32_t i = 0; i < m->n; i += BATCH) {
			size_t k = m->n - i < BATCH ? m->n - i : BATCH;
			if ((ret = head_batch(s, dir, u.bucket, w + i, k, r, c, err, errlen)) < 0)
				goto out;
		}
		if (bound && r->bytes > bound) {
			ret = err_set(err, errlen, -ENOSPC, "%s: a dataset of %llu bytes, above the "
				      "cache's bound of %llu (%s)", url, (unsigned long long)r->bytes,
				      (unsigned long long)bound, bname);
			goto out;
		}
		if ((ret = admit(o, &top, w, m->n, url, err, errlen)) < 0 ||
		    (ret = make_room(dir, bound, bname, missing_bytes(w, m->n), view, w, m->n, &top,
				     url, err, errlen)) < 0)
			goto out;
		for (uint32_t i = 0; i < m->n; i += BATCH) {
			size_t k = m->n - i < BATCH ? m->n - i : BATCH;
			/* side by side, other fetches took room while the lock was let go: this
			 * batch's room is made again */
			if (c && i && (ret = make_room(dir, bound, bname, missing_bytes(w + i, k), view,
						       w, m->n, &top, url, err, errlen)) < 0)
				goto out;
			if ((ret = c ? get_batch_conc(s, dir, u.bucket, w + i, k, r, c, err, errlen) :
			     get_batch(s, dir, u.bucket, w + i, k, r, err, errlen)) < 0)
				goto out;
		}
		for (uint32_t i = 0; i < m->n; i++)
			if ((ret = place(w[i].path, view, m->shards[i].path, err, errlen)) < 0)
				goto out;
	}
	if ((ret = place(top.path, view, base, err, errlen)) < 0)
		goto out;
	utimensat(AT_FDCWD, view, NULL, 0);  /* used now: the last view eviction takes */
	if (snprintf(r->path, sizeof(r->path), "%s/%s", view, base) >= (int)sizeof(r->path))
		ret = err_set(err, errlen, -ENAMETOOLONG, "the cache %s: path too long", dir);
out:
	if (ret == -ENOMEM)
		err_set(err, errlen, ret, "%s: out of memory", url);
	for (uint32_t i = 0; w && i < nw; i++) {
		free(w[i].key);
		free(w[i].path);
		free(w[i].tmp);
	}
	free(w);
	free(top.path);
	free(top.tmp);
	dpkset_manifest_destroy(m);
	free(text);
	return ret;
}

/* ---- a set streamed (s3cache_stream_*) ---- */

struct s3cache_stream {
	struct s3 *s;
	char dir[PATH_MAX];
	struct s3cache_opts o;
	const char *bname;
	char url[S3_KEY_MAX + S3_BUCKET_MAX + 16];
	struct s3_url u;
	char view[PATH_MAX + 300];
	struct want top;
	struct want *w;             /* the shards, n */
	uint32_t n;
	struct dpkset_manifest *m;
	int lockfd;                 /* DIR/objects/.lock, flocked while the stream works */
};

static int open_lock(const char *dir, char *err, size_t errlen)
{
	char objdir[PATH_MAX + 16], lock[PATH_MAX + 32];
	int ret;
	snprintf(objdir, sizeof(objdir), "%s/objects", dir);
	if ((ret = mkdirs(objdir)) < 0)
		return err_set(err, errlen, ret, "the cache %s: %s", dir, strerror(-ret));
	chmod(dir, 0700);
	snprintf(lock, sizeof(lock), "%s/.lock", objdir);
	int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0)
		return err_set(err, errlen, -errno, "the cache %s: %s", lock, strerror(errno));
	return fd;
}

void s3cache_stream_close(struct s3cache_stream *st)
{
	if (!st)
		return;
	for (uint32_t i = 0; st->w && i < st->n; i++) {
		free(st->w[i].key);
		free(st->w[i].path);
		free(st->w[i].tmp);
	}
	free(st->w);
	free(st->top.path);
	free(st->top.tmp);
	dpkset_manifest_destroy(st->m);
	if (st->lockfd >= 0)
		close(st->lockfd);
	free(st);
}

uint32_t s3cache_stream_shards(const struct s3cache_stream *st)
{
	return st->n;
}

uint64_t s3cache_stream_size(const struct s3cache_stream *st, uint32_t k)
{
	return k < st->n ? st->w[k].obj.size : 0;
}

/* Link the present objects @ks (and the manifest when @top) into the stream's view. */
static int stream_place(struct s3cache_stream *st, const uint32_t *ks, size_t n, int top,
			char *err, size_t errlen)
{
	int ret = 0;
	for (size_t i = 0; i < n && ret == 0; i++)
		ret = place(st->w[ks[i]].path, st->view, st->m->shards[ks[i]].path, err, errlen);
	if (ret == 0 && top) {
		const char *base = strrchr(st->u.key, '/');
		ret = place(st->top.path, st->view, base ? base + 1 : st->u.key, err, errlen);
	}
	utimensat(AT_FDCWD, st->view, NULL, 0);  /* used now */
	return ret;
}

/* Room for @need more bytes under the bound, keeping @keep (@nkeep paths): orphans, then other
 * views LRU first, then this stream's shards @evict in order, each only while no job holds it.
 * 0, or 1 when still short (the figures in @err). */
/* Under the cache's lock: shard @k of @st's view out of the cache (its link, and its object when
 * no other view links it), unless a job holds it; *@used less what that freed. */
static void view_evict(struct s3cache_stream *st, uint32_t k, uint64_t *used)
{
	const struct want *w = &st->w[k];
	struct stat sb;
	char link_[PATH_MAX * 2];

	if (!w->path || s3cache_pinned(w->path))
		return;  /* a job holds it (this stream's loaderd, or another's) */
	snprintf(link_, sizeof(link_), "%s/%s", st->view, st->m->shards[k].path);
	unlink(link_);
	if (stat(w->path, &sb) == 0 && sb.st_nlink == 1 && !s3cache_pinned(w->path) &&
	    unlink(w->path) == 0)
		*used = *used > (uint64_t)sb.st_blocks * 512 ? *used - (uint64_t)sb.st_blocks * 512 : 0;
}

static int stream_room(struct s3cache_stream *st, uint64_t need, const char **keep, size_t nkeep,
		       const uint32_t *evict, size_t nevict, char *err, size_t errlen)
{
	uint64_t bound = st->o.bound, used;
	char old[PATH_MAX + 600];
	if (!bound || usage(st->dir) + need <= bound)
		return 0;
	qsort(keep, nkeep, sizeof(*keep), cmp_str);
	for (;;) {
		drop_orphans(st->dir, keep, nkeep);
		if ((used = usage(st->dir)) + need <= bound)
			return 0;
		if (oldest_view(st->dir, st->view, old, sizeof(old)) < 0)
			break;
		nftw(old, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	}
	for (size_t i = 0; i < nevict && used + need > bound; i++)
		view_evict(st, evict[i], &used);
	/* Then any shard of this view no job holds and this call does not keep: one an earlier
	 * stream of the same set left (it would fill the cache for good: no stream of its own
	 * drops it), or another stream's let go. */
	for (uint32_t k = 0; st->m && k < st->m->n && used + need > bound; k++)
		if (!bsearch(&st->w[k].path, keep, nkeep, sizeof(*keep), cmp_str))
			view_evict(st, k, &used);
	if (used + need <= bound)
		return 0;
	err_set(err, errlen, -ENOSPC, "%s: %llu more bytes do not fit yet: the node cache holds %llu "
		"bytes in use, its bound is %llu (%s)", st->url, (unsigned long long)need,
		(unsigned long long)used, (unsigned long long)bound, st->bname);
	return 1;
}

static int busy(int ret)
{
	return ret == -ENOSPC ? -EBUSY : ret;
}

int s3cache_stream_open(struct s3 *s, const char *dir, const struct s3cache_opts *o,
			const char *url, s3cache_take_fn take, void *arg,
			struct s3cache_stream **out, char *err, size_t errlen)
{
	struct s3cache_stream *st = calloc(1, sizeof(*st));
	struct s3cache_result r;
	char *text = NULL;
	size_t len = 0;
	int ret;

	*out = NULL;
	if (!st)
		return err_set(err, errlen, -ENOMEM, "%s: out of memory", url);
	st->lockfd = -1;
	st->s = s;
	st->o = *o;
	st->bname = o->bound_name ? o->bound_name : "LOADERD_S3_CACHE_SIZE";
	snprintf(st->dir, sizeof(st->dir), "%s", dir);
	snprintf(st->url, sizeof(st->url), "%s", url);
	memset(&r, 0, sizeof(r));
	if ((ret = s3_url_parse(url, &st->u, err, errlen)) < 0)
		goto fail;
	const char *base = strrchr(st->u.key, '/');
	base = base ? base + 1 : st->u.key;
	if (!*base) {
		ret = err_set(err, errlen, -EINVAL, "%s names no object (a dataset is a key: "
			      "s3://bucket/prefix/NAME)", url);
		goto fail;
	}
	if ((ret = st->lockfd = open_lock(dir, err, errlen)) < 0)
		goto fail;
	relock(st->lockfd);
	struct conc c = { .lockfd = st->lockfd };
	st->top.key = st->u.key;
	if ((ret = head_batch(s, dir, st->u.bucket, &st->top, 1, &r, &c, err, errlen)) < 0)
		goto out;
	snprintf(st->view, sizeof(st->view), "%s/sets/%s", dir, strrchr(st->top.path, '/') + 1);
	if (o->bound && st->top.obj.size > o->bound) {
		ret = err_set(err, errlen, -ENOSPC, "%s: %llu bytes, above the cache's bound of %llu "
			      "(%s)", url, (unsigned long long)st->top.obj.size,
			      (unsigned long long)o->bound, st->bname);
		goto out;
	}
	/* Both fit the bound (checked): short of room is what others hold now (-EBUSY) */
	if ((ret = admit(o, &st->top, NULL, 0, url, err, errlen)) < 0 ||
	    (ret = busy(make_room(dir, o->bound, st->bname, missing_bytes(&st->top, 1), st->view,
				  NULL, 0, &st->top, url, err, errlen))) < 0 ||
	    (ret = get_batch_conc(s, dir, st->u.bucket, &st->top, 1, &r, &c, err, errlen)) < 0)
		goto out;
	if ((ret = read_file(st->top.path, DPKSET_FILE_MAX, &text, &len)) < 0) {
		ret = err_set(err, errlen, ret, "%s: the manifest: %s", url, strerror(-ret));
		goto out;
	}
	if (!dpkset_is_manifest(text, len < 8 ? len : 8)) {
		ret = err_set(err, errlen, -EMEDIUMTYPE, "%s: not a manifest (a single .dpk is fetched "
			      "whole, not streamed)", url);
		goto out;
	}
	if ((ret = dpkset_parse(text, len, url, &st->m, err, errlen)) < 0)
		goto out;
	size_t plen = (size_t)(base - st->u.key);
	if (!(st->w = calloc(st->m->n, sizeof(*st->w)))) {
		ret = -ENOMEM;
		goto out;
	}
	for (st->n = 0; st->n < st->m->n; st->n++) {
		struct want *w = &st->w[st->n];
		size_t kl = plen + strlen(st->m->shards[st->n].path);
		w->fd = -1;
		if (kl > S3_KEY_MAX) {
			ret = err_set(err, errlen, -E2BIG, "%s line %u: shard key of %zu bytes, above "
				      "S3's %u", url, st->m->shards[st->n].line, kl, S3_KEY_MAX);
			goto out;
		}
		if (!(w->key = malloc(kl + 1))) {
			ret = -ENOMEM;
			goto out;
		}
		memcpy(w->key, st->u.key, plen);
		strcpy(w->key + plen, st->m->shards[st->n].path);
	}
	/* every shard HEADed with these credentials: the proof, at every open */
	for (uint32_t i = 0; i < st->n; i += BATCH) {
		size_t k = st->n - i < BATCH ? st->n - i : BATCH;
		if ((ret = head_batch(s, dir, st->u.bucket, st->w + i, k, &r, &c, err, errlen)) < 0)
			goto out;
	}
	/* The HEADs pinned every shard present: only the manifest and shard 0 are relied on now
	 * (the others may be evicted to make room for shard 0; a set of 65,536 shards would
	 * otherwise hold as many descriptors). */
	unpin_all(&c);
	pin(&c, st->top.path);
	if (!st->w[0].missing)
		pin(&c, st->w[0].path);
	if (o->bound && st->top.obj.size + st->w[0].obj.size > o->bound) {
		ret = err_set(err, errlen, -ENOSPC, "%s: its manifest and first shard are %llu bytes, "
			      "above the cache's bound of %llu (%s)", url,
			      (unsigned long long)(st->top.obj.size + st->w[0].obj.size),
			      (unsigned long long)o->bound, st->bname);
		goto out;
	}
	const char *keep0[2] = { st->top.path, st->w[0].path };
	if ((ret = admit(o, &st->top, st->w, 1, url, err, errlen)) < 0 ||
	    (ret = stream_room(st, missing_bytes(st->w, 1), keep0, 2, NULL, 0, err, errlen)) < 0 ||
	    (ret = ret == 1 ? -EBUSY : 0) < 0 ||
	    (ret = get_batch_conc(s, dir, st->u.bucket, st->w, 1, &r, &c, err, errlen)) < 0)
		goto out;
	uint32_t zero = 0;
	if ((ret = stream_place(st, &zero, 1, 1, err, errlen)) < 0 ||
	    (ret = take(arg, S3CACHE_TOP, st->top.path, err, errlen)) < 0 ||
	    (ret = take(arg, 0, st->w[0].path, err, errlen)) < 0)
		goto out;
out:
	if (ret == -ENOMEM)
		err_set(err, errlen, ret, "%s: out of memory", url);
	unpin_all(&c);
	flock(st->lockfd, LOCK_UN);
fail:
	free(text);
	if (ret < 0) {
		s3cache_stream_close(st);
		return ret;
	}
	*out = st;
	return 0;
}

int s3cache_stream_fetch(struct s3cache_stream *st, const uint32_t *ks, size_t n,
			 const uint32_t *evict, size_t nevict, s3cache_take_fn take, void *arg,
			 uint64_t *fetched, char *err, size_t errlen)
{
	struct want b[BATCH];
	const char *keep[BATCH + 1], *paths[BATCH];
	uint64_t sizes[BATCH];
	struct s3cache_result r;
	int ret = 0;

	*fetched = 0;
	if (n > BATCH)
		return err_set(err, errlen, -EINVAL, "%s: %zu shards asked at once (at most %u)",
			       st->url, n, BATCH);
	memset(&r, 0, sizeof(r));
	relock(st->lockfd);
	struct conc c = { .lockfd = st->lockfd };
	for (size_t i = 0; i < n; i++) {
		struct want *w = &st->w[ks[i]];
		struct stat sb;
		if (st->o.bound && w->obj.size > st->o.bound) {
			ret = err_set(err, errlen, -ENOSPC, "%s: shard %u (s3://%s/%s): %llu bytes, above "
				      "the cache's bound of %llu (%s)", st->url, ks[i], st->u.bucket,
				      w->key, (unsigned long long)w->obj.size,
				      (unsigned long long)st->o.bound, st->bname);
			goto out;
		}
		w->missing = !(stat(w->path, &sb) == 0 && (uint64_t)sb.st_size == w->obj.size);
		w->busy = 0;
		if (!w->missing) {
			pin(&c, w->path);
		} else {
			char part[PATH_MAX + 16];
			snprintf(part, sizeof(part), "%s.tmp.part", w->path);
			w->busy = part_busy(part);
		}
		b[i] = *w;
		keep[i] = paths[i] = w->path;
		sizes[i] = w->obj.size;
	}
	keep[n] = st->top.path;
	if (st->o.admit && (ret = st->o.admit(st->o.arg, paths, sizes, n, st->url, err, errlen)) < 0) {
		if (ret == -EAGAIN)
			ret = 1;
		goto out;
	}
	if ((ret = stream_room(st, missing_bytes(b, n), keep, n + 1, evict, nevict, err,
			       errlen)) != 0)
		goto out;
	ret = get_batch_conc(st->s, st->dir, st->u.bucket, b, n, &r, &c, err, errlen);
	for (size_t i = 0; i < n; i++) {
		st->w[ks[i]].tmp = b[i].tmp;  /* realloc'd there */
		st->w[ks[i]].fd = -1;
	}
	if (ret < 0)
		goto out;
	*fetched = r.fetched_bytes;
	if ((ret = stream_place(st, ks, n, 0, err, errlen)) < 0)
		goto out;
	for (size_t i = 0; i < n && ret == 0; i++)
		ret = take(arg, ks[i], st->w[ks[i]].path, err, errlen);
out:
	unpin_all(&c);
	flock(st->lockfd, LOCK_UN);
	return ret;
}

/* One fetch at a time per cache (flock on DIR/objects/.lock): the ranks of a node that all resolve
 * one dataset at once fetch it once (the first; the others then find it cached), and eviction
 * never removes what another fetch is about to link. */
int s3cache_fetch(struct s3 *s, const char *dir, uint64_t bound, const char *url,
		  struct s3cache_result *r, char *err, size_t errlen)
{
	struct s3cache_opts o = { .bound = bound };
	return s3cache_fetch_opts(s, dir, &o, url, r, NULL, err, errlen);
}

int s3cache_fetch_opts(struct s3 *s, const char *dir, const struct s3cache_opts *o,
		       const char *url, struct s3cache_result *r, int *lockfd, char *err,
		       size_t errlen)
{
	int ret, fd;

	memset(r, 0, sizeof(*r));
	if ((fd = open_lock(dir, err, errlen)) < 0)
		return fd;
	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR) {
			ret = err_set(err, errlen, -errno, "the cache %s/objects/.lock: %s", dir,
				      strerror(errno));
			close(fd);
			return ret;
		}
	struct conc c = { .lockfd = fd };
	ret = fetch_locked(s, dir, o, url, r, o->concurrent ? &c : NULL, err, errlen);
	unpin_all(&c);  /* under the lock: the caller pins what it keeps before it lets go */
	if (ret == 0 && lockfd)
		*lockfd = fd;  /* the caller's, still locked */
	else
		close(fd);  /* the lock goes with it */
	return ret;
}

int s3cache_resolve(const char *url, struct s3cache_result *r, char *err, size_t errlen)
{
	char dir[PATH_MAX];
	struct s3_cfg c;
	struct s3 *s;
	int ret = s3cache_dir(dir, sizeof(dir));
	if (ret < 0)
		return err_set(err, errlen, ret, "%s: no cache folder (set LOADERD_S3_CACHE, "
			       "XDG_CACHE_HOME or HOME)", url);
	if ((ret = s3_cfg_load(&c, err, errlen)) < 0)
		return ret;
	ret = s3_create(&c, &s, err, errlen);
	s3_cfg_fini(&c);
	if (ret < 0)
		return ret;
	uint64_t bound = 0;
	const char *b = getenv("LOADERD_S3_CACHE_SIZE");
	if (b && *b && arg_bytes(b, 1, UINT64_MAX, &bound) < 0)
		ret = err_set(err, errlen, -EINVAL, "LOADERD_S3_CACHE_SIZE='%.32s': not a size (bytes, "
			      "or with K, M, G, T)", b);
	else
		ret = s3cache_fetch(s, dir, bound, url, r, err, errlen);
	s3_destroy(s);
	return ret;
}
