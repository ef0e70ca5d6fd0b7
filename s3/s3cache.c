/* s3cache.c - an s3:// dataset made local in the user's cache (s3cache.h). */
#include "s3/s3cache.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

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
	char path[PATH_MAX];        /* objects/HASH */
	char tmp[PATH_MAX];         /* while fetched */
	int fd;
};

/* HEAD @n objects and fetch those missing from the cache (or there under another size). 0 or
 * -errno (the reason in @err). */
static int fetch_batch(struct s3 *s, const char *dir, const char *bucket, struct want *w, size_t n,
		       struct s3cache_result *r, char *err, size_t errlen)
{
	const char *keys[BATCH];
	struct s3_obj objs[BATCH];
	struct s3_file files[BATCH];
	size_t nf = 0;
	int ret;

	for (size_t i = 0; i < n; i++)
		keys[i] = w[i].key;
	if ((ret = s3_head_many(s, bucket, keys, objs, n)) < 0)
		return err_set(err, errlen, ret, "%s", s3_error(s));
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		w[i].obj = objs[i];
		w[i].fd = -1;
		obj_path(dir, s3_endpoint(s), bucket, w[i].key, objs[i].etag, w[i].path,
			 sizeof(w[i].path));
		r->objects++;
		r->bytes += objs[i].size;
		if (stat(w[i].path, &st) == 0 && (uint64_t)st.st_size == objs[i].size)
			continue;  /* cached under its current ETag */
		snprintf(w[i].tmp, sizeof(w[i].tmp), "%s.tmp.XXXXXX", w[i].path);
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
		if (ret == 0 && rename(w[i].tmp, w[i].path) < 0)
			ret = err_set(err, errlen, -errno, "the cache %s: %s", dir, strerror(errno));
		if (ret == 0) {
			r->fetched++;
			r->fetched_bytes += w[i].obj.size;
		} else {
			unlink(w[i].tmp);
		}
		close(w[i].fd);
		w[i].fd = -1;
	}
	return ret;
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

int s3cache_fetch(struct s3 *s, const char *dir, const char *url, struct s3cache_result *r,
		  char *err, size_t errlen)
{
	struct s3_url u;
	struct dpkset_manifest *m = NULL;
	struct want *w = NULL;
	char view[PATH_MAX], sub[64];
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
	char objdir[PATH_MAX];
	snprintf(objdir, sizeof(objdir), "%s/objects", dir);
	if ((ret = mkdirs(objdir)) < 0)
		return err_set(err, errlen, ret, "the cache %s: %s", dir, strerror(-ret));
	chmod(dir, 0700);
	/* the dataset's own object: a .dpk, or a manifest */
	struct want top = { .key = u.key };
	if ((ret = fetch_batch(s, dir, u.bucket, &top, 1, r, err, errlen)) < 0)
		return ret;
	snprintf(view, sizeof(view), "%s", top.path);
	snprintf(sub, sizeof(sub), "%s", strrchr(top.path, '/') + 1);
	snprintf(view, sizeof(view), "%s/sets/%s", dir, sub);
	char head[8] = "";
	int fd = open(top.path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0 || pread(fd, head, sizeof(head), 0) < 0)
		ret = err_set(err, errlen, -errno, "the cache: %s: %s", top.path, strerror(errno));
	if (fd >= 0)
		close(fd);
	if (ret < 0)
		return ret;
	if (dpkset_is_manifest(head, top.obj.size < sizeof(head) ? (size_t)top.obj.size :
			       sizeof(head))) {
		if ((ret = read_file(top.path, DPKSET_FILE_MAX, &text, &len)) < 0)
			return err_set(err, errlen, ret, "%s: the manifest: %s", url, strerror(-ret));
		if ((ret = dpkset_parse(text, len, url, &m, err, errlen)) < 0)
			goto out;
		size_t plen = (size_t)(base - u.key);
		w = calloc(m->n, sizeof(*w));
		if (!w) {
			ret = -ENOMEM;
			goto out;
		}
		for (uint32_t i = 0; i < m->n; i++) {
			size_t kl = plen + strlen(m->shards[i].path);
			if (kl > S3_KEY_MAX) {
				ret = err_set(err, errlen, -E2BIG, "%s line %u: shard key of %zu bytes, "
					      "above S3's %u", url, m->shards[i].line, kl, S3_KEY_MAX);
				goto out;
			}
			if (!(w[i].key = malloc(kl + 1))) {
				ret = -ENOMEM;
				goto out;
			}
			memcpy(w[i].key, u.key, plen);
			strcpy(w[i].key + plen, m->shards[i].path);
		}
		for (uint32_t i = 0; i < m->n; i += BATCH) {
			size_t k = m->n - i < BATCH ? m->n - i : BATCH;
			if ((ret = fetch_batch(s, dir, u.bucket, w + i, k, r, err, errlen)) < 0)
				goto out;
		}
		for (uint32_t i = 0; i < m->n; i++)
			if ((ret = place(w[i].path, view, m->shards[i].path, err, errlen)) < 0)
				goto out;
	}
	if ((ret = place(top.path, view, base, err, errlen)) < 0)
		goto out;
	if (snprintf(r->path, sizeof(r->path), "%s/%s", view, base) >= (int)sizeof(r->path))
		ret = err_set(err, errlen, -ENAMETOOLONG, "the cache %s: path too long", dir);
out:
	if (ret == -ENOMEM)
		err_set(err, errlen, ret, "%s: out of memory", url);
	for (uint32_t i = 0; w && m && i < m->n; i++)
		free(w[i].key);
	free(w);
	dpkset_manifest_destroy(m);
	free(text);
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
	ret = s3cache_fetch(s, dir, url, r, err, errlen);
	s3_destroy(s);
	return ret;
}
