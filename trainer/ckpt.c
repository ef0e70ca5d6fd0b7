/* ckpt.c - checkpoint files (ckpt.h): an atomic save through common/afile.h, and a load that
 * treats the file as untrusted (sizes checked against the file before anything is allocated,
 * then the checksum) and names the fault. */
#include "trainer/ckpt.h"
#include "common/err.h"

#include "common/afile.h"
#include "common/fdio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define NAME_FMT "ckpt-%016" PRIu64 ".ldck"

/* XXH3-64 of header, parameters and momentum (@bytes each) into *out. 0 or -ENOMEM. */
static int digest(const struct trn_ckpt_hdr *h, const float *params, const float *mom, size_t bytes,
		  const uint8_t *split, uint64_t *out)
{
	XXH3_state_t *st = XXH3_createState();

	if (!st)
		return -ENOMEM;
	XXH3_64bits_reset(st);
	XXH3_64bits_update(st, h, h->hdr_size);  /* as stored: 168 bytes before version 3 */
	XXH3_64bits_update(st, params, bytes);
	XXH3_64bits_update(st, mom, bytes);
	if (h->split_len)
		XXH3_64bits_update(st, split, h->split_len);
	*out = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return 0;
}

/* The step of a checkpoint's file name, or -1 for any other name (temporary files included). */
static int64_t name_step(const char *name)
{
	uint64_t step;
	int end = 0;

	if (strlen(name) != 5 + 16 + 5 || sscanf(name, "ckpt-%16" SCNu64 ".ldck%n", &step, &end) != 1 ||
	    end != (int)strlen(name) || step > INT64_MAX)
		return -1;
	return (int64_t)step;
}

/* Steps of @dir's checkpoints, sorted ascending, into *out (malloc'd). Count or -errno. */
static int list(const char *dir, int64_t **out)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int64_t *v = NULL;
	int n = 0, cap = 0;

	*out = NULL;
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(d))) {
		int64_t s = name_step(e->d_name);
		if (s < 0)
			continue;
		if (n == cap) {
			int64_t *p = realloc(v, (size_t)(cap = cap ? 2 * cap : 8) * sizeof(*v));
			if (!p) {
				free(v);
				closedir(d);
				return -ENOMEM;
			}
			v = p;
		}
		v[n++] = s;
	}
	closedir(d);
	for (int i = 1; i < n; i++)  /* few files: insertion sort */
		for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
			int64_t t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	*out = v;
	return n;
}

int trn_ckpt_save(const char *dir, const struct trn_ckpt *c, char *path, size_t cap, char *why,
		  size_t whylen)
{
	struct trn_ckpt_hdr h;
	size_t bytes = c->n * sizeof(float);
	struct afile f;
	int ret;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return err_set(why, whylen, -errno, "cannot create %s: %s", dir, strerror(errno));
	snprintf(path, cap, "%s/" NAME_FMT, dir, c->step);
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, TRN_CKPT_MAGIC, sizeof(h.magic));
	h.version = TRN_CKPT_VERSION;
	h.hdr_size = sizeof(h);
	h.step = c->step;
	h.world = c->world;
	h.seed = c->seed;
	h.n = c->n;
	h.split_len = c->split ? c->split_len : 0;
	if (h.split_len > TRN_CKPT_SPLIT_MAX)
		return err_set(why, whylen, -EINVAL, "split seed of %u bytes", h.split_len);
	h.file_size = sizeof(h) + 2 * bytes + h.split_len + sizeof(uint64_t);
	h.token_len = c->token ? c->token_len : 0;
	if (h.token_len > sizeof(h.token))
		return err_set(why, whylen, -EINVAL, "token of %u bytes", h.token_len);
	if (c->token)
		memcpy(h.token, c->token, h.token_len);

	uint64_t sum;
	if (digest(&h, c->params, c->mom, bytes, c->split, &sum) < 0)
		return err_set(why, whylen, -ENOMEM, "out of memory");

	ret = afile_open(&f, path, 0);
	if (ret < 0)
		return err_set(why, whylen, ret, "%s: %s", path, strerror(-ret));
	if ((ret = fd_write_all(f.fd, &h, sizeof(h))) < 0 ||
	    (ret = fd_write_all(f.fd, c->params, bytes)) < 0 ||
	    (ret = fd_write_all(f.fd, c->mom, bytes)) < 0 ||
	    (h.split_len && (ret = fd_write_all(f.fd, c->split, h.split_len)) < 0) ||
	    (ret = fd_write_all(f.fd, &sum, sizeof(sum))) < 0 ||
	    (ret = afile_commit(&f)) < 0) {
		afile_close(&f);
		return err_set(why, whylen, ret, "writing %s: %s", path, strerror(-ret));
	}
	afile_close(&f);

	/* Keep the newest few: the one just written is complete, the older ones are spares. */
	int64_t *steps;
	int n = list(dir, &steps);
	for (int i = 0; i < n - TRN_CKPT_KEEP; i++) {
		char old[4096];
		snprintf(old, sizeof(old), "%s/" NAME_FMT, dir, (uint64_t)steps[i]);
		unlink(old);
	}
	free(steps);
	return 0;
}

/* Read and check @path into @c. 0 or -errno with @why. */
static int load(const char *path, struct trn_ckpt *c, uint8_t tok[LDC_TOKEN_SIZE], char *why,
		size_t whylen)
{
	struct trn_ckpt_hdr h;
	struct stat sb;
	uint8_t *split = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int ret = 0;

	memset(c, 0, sizeof(*c));
	if (fd < 0)
		return err_set(why, whylen, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &sb) < 0) {
		ret = err_set(why, whylen, -errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	memset(&h, 0, sizeof(h));
	if (pread(fd, &h, 16, 0) != 16) {
		ret = err_set(why, whylen, -EBADMSG, "%s: truncated: %lld bytes, shorter than its header",
			  path, (long long)sb.st_size);
		goto out;
	}
	if (memcmp(h.magic, TRN_CKPT_MAGIC, sizeof(h.magic))) {
		ret = err_set(why, whylen, -EBADMSG, "%s: not a trainer checkpoint (magic)", path);
		goto out;
	}
	if (h.version < 1 || h.version > TRN_CKPT_VERSION ||
	    h.hdr_size != (h.version >= 3 ? sizeof(h) : TRN_CKPT_HDR_V2)) {
		ret = err_set(why, whylen, -EPROTO, "%s: checkpoint version %u; this trainer reads "
			  "versions 1 to %u", path, h.version, TRN_CKPT_VERSION);
		goto out;
	}
	uint32_t hsz = h.hdr_size;  /* the same fields; before version 3 the token's room ends 8
				      * bytes sooner (they stay zero) */
	if (pread(fd, &h, hsz, 0) != (ssize_t)hsz) {
		ret = err_set(why, whylen, -EBADMSG, "%s: truncated: %lld bytes, shorter than its header",
			  path, (long long)sb.st_size);
		goto out;
	}
	/* Sizes before allocations: n comes from the file (bounded first, so no product overflows;
	 * then the file's real size bounds it). */
	if (h.n == 0 || h.n > (1ull << 58) ||
	    h.split_len > (h.version >= 2 ? TRN_CKPT_SPLIT_MAX : 0) ||
	    h.file_size != hsz + 2 * h.n * sizeof(float) + h.split_len + sizeof(uint64_t) ||
	    h.token_len > hsz - offsetof(struct trn_ckpt_hdr, token)) {
		ret = err_set(why, whylen, -EBADMSG, "%s: corrupt header (sizes)", path);
		goto out;
	}
	if ((uint64_t)sb.st_size != h.file_size) {
		ret = err_set(why, whylen, -EBADMSG, "%s: truncated or extended: %lld bytes, the header "
			  "says %llu", path, (long long)sb.st_size, (unsigned long long)h.file_size);
		goto out;
	}
	size_t bytes = h.n * sizeof(float);
	uint64_t sum;
	c->params = malloc(bytes);
	c->mom = malloc(bytes);
	split = h.split_len ? malloc(h.split_len) : NULL;
	c->split = split;
	if (!c->params || !c->mom || (h.split_len && !split)) {
		ret = err_set(why, whylen, -ENOMEM, "%s: out of memory for %llu parameters", path,
			  (unsigned long long)h.n);
		goto out;
	}
	if (pread(fd, c->params, bytes, hsz) != (ssize_t)bytes ||
	    pread(fd, c->mom, bytes, (off_t)(hsz + bytes)) != (ssize_t)bytes ||
	    (h.split_len && pread(fd, split, h.split_len, (off_t)(hsz + 2 * bytes)) !=
	     (ssize_t)h.split_len) ||
	    pread(fd, &sum, sizeof(sum), (off_t)(hsz + 2 * bytes + h.split_len)) !=
	    (ssize_t)sizeof(sum)) {
		ret = err_set(why, whylen, -EBADMSG, "%s: short read", path);
		goto out;
	}
	uint64_t want;
	if (digest(&h, c->params, c->mom, bytes, split, &want) < 0) {
		ret = err_set(why, whylen, -ENOMEM, "out of memory");
		goto out;
	}
	if (want != sum) {
		ret = err_set(why, whylen, -EBADMSG, "%s: checksum mismatch: the file is damaged", path);
		goto out;
	}
	c->step = h.step;
	c->world = h.world;
	c->seed = h.seed;
	c->n = (size_t)h.n;
	c->token_len = h.token_len;
	memcpy(tok, h.token, sizeof(h.token));
	c->token = h.token_len ? tok : NULL;
	c->split_len = h.split_len;
out:
	close(fd);
	if (ret < 0) {
		free(c->params);
		free(c->mom);
		free(split);
		c->params = c->mom = NULL;
		c->split = NULL;
	}
	return ret;
}

int trn_ckpt_load_newest(const char *dir, struct trn_ckpt *c, uint8_t tok[LDC_TOKEN_SIZE],
			 char *path, size_t cap, char *why, size_t whylen)
{
	int64_t *steps;
	int n = list(dir, &steps);

	if (n < 0)
		return err_set(why, whylen, n, "%s: %s", dir, strerror(-n));
	if (n == 0)
		return 0;
	snprintf(path, cap, "%s/" NAME_FMT, dir, (uint64_t)steps[n - 1]);
	free(steps);
	int ret = load(path, c, tok, why, whylen);
	return ret < 0 ? ret : 1;
}
