/* dpkset.c - the manifest of a set of .dpk shards: parse, check, write, and the map from a global
 * sample index to its shard (see dpkset.h; the set is opened by formats/dpk_open.c).
 *
 * The parser trusts nothing: every line is bounded before it is looked at, numbers are decimal
 * digits only and checked for overflow, a path may not leave the manifest's directory, and the
 * closing "end N" line is required, so that a manifest cut short anywhere, even between lines, is
 * refused rather than read as a smaller set. */
#include "formats/dpkset.h"
#include "formats/dpk_impl.h"
#include "common/afile.h"
#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack */
#include <xxhash.h>

#define TOTAL_MAX (1ull << 62)  /* samples in a set: sums stay far from overflow */

int dpkset_is_manifest(const void *head, size_t len)
{
	size_t m = sizeof(DPKSET_MAGIC) - 1;

	return len >= m && !memcmp(head, DPKSET_MAGIC, m);
}

struct dpkset_manifest *dpkset_manifest_create(void)
{
	struct dpkset_manifest *m = calloc(1, sizeof(*m));

	if (m && !(m->first = calloc(1, sizeof(*m->first)))) {
		free(m);
		return NULL;
	}
	return m;
}

void dpkset_manifest_destroy(struct dpkset_manifest *m)
{
	if (!m)
		return;
	for (uint32_t k = 0; k < m->n; k++)
		free(m->shards[k].path);
	free(m->shards);
	free(m->first);
	free(m);
}

/* Is @p (@len bytes) a path a manifest may name? 0 or -EINVAL with the reason. */
static int path_check(const char *p, size_t len, char *why, size_t whylen)
{
	if (!len)
		return err_set(why, whylen, -EINVAL, "no shard path");
	if (len > DPKSET_PATH_MAX)
		return err_set(why, whylen, -E2BIG, "a shard path of %zu bytes, above the limit of %u",
			       len, DPKSET_PATH_MAX);
	if (p[0] == '/')
		return err_set(why, whylen, -EINVAL, "shard path '%.*s' is absolute (paths are "
			       "relative to the manifest's directory)", (int)len, p);
	for (size_t k = 0; k < len; k++)
		if ((unsigned char)p[k] < 0x20 || p[k] == 0x7f)
			return err_set(why, whylen, -EINVAL, "shard path has control character 0x%02x "
				       "at byte %zu", (unsigned char)p[k], k);
	for (size_t s = 0; s < len;) {  /* each component */
		size_t e = s;
		while (e < len && p[e] != '/')
			e++;
		if (e - s == 2 && p[s] == '.' && p[s + 1] == '.')
			return err_set(why, whylen, -EINVAL, "shard path '%.*s' has a '..' component "
				       "(shards lie in the manifest's directory or below it)", (int)len, p);
		s = e + 1;
	}
	return 0;
}

/* Add a shard; @dup_check: refuse a path named already (linear: parse checks all at once). */
static int add(struct dpkset_manifest *m, const char *path, uint64_t count,
	       const uint8_t id[DPK_IDENTITY_SIZE], int dup_check, char *err, size_t errlen)
{
	size_t len = strlen(path);
	int ret = path_check(path, len, err, errlen);

	if (ret < 0)
		return ret;
	if (m->n >= DPKSET_SHARDS_MAX)
		return err_set(err, errlen, -E2BIG, "more than %u shards", DPKSET_SHARDS_MAX);
	if (count == 0)
		return err_set(err, errlen, -EINVAL, "shard %s has no samples", path);
	if (count > TOTAL_MAX - m->first[m->n])
		return err_set(err, errlen, -E2BIG, "more than %llu samples in the set",
			       (unsigned long long)TOTAL_MAX);
	for (uint32_t k = 0; dup_check && k < m->n; k++)
		if (!strcmp(m->shards[k].path, path))
			return err_set(err, errlen, -EINVAL, "shard %s is in the set already (line %u)",
				       path, m->shards[k].line);
	if (m->n == m->cap) {  /* doubling: a manifest's lines cost O(n) in all, not O(n^2) */
		uint32_t cap = m->cap ? 2 * m->cap : 16;
		struct dpkset_shard *ns = realloc(m->shards, (size_t)cap * sizeof(*ns));
		if (!ns)
			return err_set(err, errlen, -ENOMEM, "out of memory");
		m->shards = ns;
		uint64_t *f = realloc(m->first, ((size_t)cap + 1) * sizeof(*f));
		if (!f)
			return err_set(err, errlen, -ENOMEM, "out of memory");
		m->first = f;
		m->cap = cap;
	}
	struct dpkset_shard *s = &m->shards[m->n];
	if (!(s->path = strdup(path)))
		return err_set(err, errlen, -ENOMEM, "out of memory");
	s->count = count;
	memcpy(s->id, id, DPK_IDENTITY_SIZE);
	s->line = m->n + 2;  /* after "dpkset 1" */
	m->first[m->n + 1] = m->first[m->n] + count;
	m->n++;
	return 0;
}

int dpkset_manifest_add(struct dpkset_manifest *m, const char *path, uint64_t count,
			const uint8_t id[DPK_IDENTITY_SIZE], char *err, size_t errlen)
{
	return add(m, path, count, id, 1, err, errlen);
}

static int by_path(const void *a, const void *b)
{
	const struct dpkset_shard *x = *(const struct dpkset_shard *const *)a;
	const struct dpkset_shard *y = *(const struct dpkset_shard *const *)b;
	int c = strcmp(x->path, y->path);

	return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* A path on two lines? 0, or -EINVAL naming both (line in *line: the later one). */
static int dup_paths(const struct dpkset_manifest *m, unsigned *line, char *why, size_t whylen)
{
	const struct dpkset_shard **v = malloc(m->n * sizeof(*v));
	int ret = 0;

	if (!v)
		return err_set(why, whylen, -ENOMEM, "out of memory");
	for (uint32_t k = 0; k < m->n; k++)
		v[k] = &m->shards[k];
	qsort(v, m->n, sizeof(*v), by_path);
	for (uint32_t k = 1; k < m->n && !ret; k++)
		if (!strcmp(v[k - 1]->path, v[k]->path)) {
			*line = v[k]->line;
			ret = err_set(why, whylen, -EINVAL, "shard %s is named on line %u already",
				      v[k]->path, v[k - 1]->line);
		}
	free(v);
	return ret;
}

/* Decimal digits only, no sign, no overflow: 0 with *v, else -EBADMSG. */
static int parse_u64(const char *p, size_t len, uint64_t *v)
{
	uint64_t x = 0;

	if (!len || len > 20)
		return -EBADMSG;
	for (size_t k = 0; k < len; k++) {
		if (p[k] < '0' || p[k] > '9' || x > (UINT64_MAX - 9) / 10)
			return -EBADMSG;
		x = x * 10 + (uint64_t)(p[k] - '0');
	}
	*v = x;
	return 0;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One shard line: "COUNT IDENTITY PATH". 0, or -errno with the reason in @why. */
static int parse_shard(struct dpkset_manifest *m, const char *p, size_t len, char *why,
		       size_t whylen)
{
	const char *sp = memchr(p, ' ', len);
	uint64_t count;
	uint8_t id[DPK_IDENTITY_SIZE];
	char path[DPKSET_PATH_MAX + 1];

	if (!sp || parse_u64(p, (size_t)(sp - p), &count) < 0)
		return err_set(why, whylen, -EBADMSG, "expected 'COUNT IDENTITY PATH' (COUNT in "
			       "decimal digits) or 'end N'");
	const char *h = sp + 1;
	size_t rest = len - (size_t)(h - p);
	if (rest < 2 * DPK_IDENTITY_SIZE + 1 || h[2 * DPK_IDENTITY_SIZE] != ' ')
		return err_set(why, whylen, -EBADMSG, "expected an identity of %u lowercase hex "
			       "digits after the count", 2 * DPK_IDENTITY_SIZE);
	for (unsigned k = 0; k < DPK_IDENTITY_SIZE; k++) {
		int hi = hexval(h[2 * k]), lo = hexval(h[2 * k + 1]);
		if (hi < 0 || lo < 0)
			return err_set(why, whylen, -EBADMSG, "identity: '%c%c' is not lowercase hex",
				       h[2 * k], h[2 * k + 1]);
		id[k] = (uint8_t)(hi << 4 | lo);
	}
	const char *pp = h + 2 * DPK_IDENTITY_SIZE + 1;
	size_t plen = len - (size_t)(pp - p);
	int ret = path_check(pp, plen, why, whylen);
	if (ret < 0)
		return ret;
	memcpy(path, pp, plen);
	path[plen] = '\0';
	unsigned line = m->n + 2;
	ret = add(m, path, count, id, 0, why, whylen);  /* duplicates: all at once, at the end */
	if (ret == 0)
		m->shards[m->n - 1].line = line;
	return ret;
}

int dpkset_parse(const char *text, size_t len, const char *name, struct dpkset_manifest **out,
		 char *err, size_t errlen)
{
	struct dpkset_manifest *m;
	char why[DPKSET_PATH_MAX + 200];
	size_t pos = 0;
	unsigned line = 0;
	int ret = 0, ended = 0;

	*out = NULL;
	if (len > DPKSET_FILE_MAX)
		return err_set(err, errlen, -E2BIG, "%s: %zu bytes, above the limit of %llu for a "
			       "manifest", name, len, (unsigned long long)DPKSET_FILE_MAX);
	if (!(m = dpkset_manifest_create()))
		return err_set(err, errlen, -ENOMEM, "%s: out of memory", name);
	while (pos < len && ret == 0) {
		const char *p = text + pos;
		const char *nl = memchr(p, '\n', len - pos);
		size_t ll = nl ? (size_t)(nl - p) : len - pos;
		line++;
		if (ll > DPKSET_LINE_MAX) {
			ret = err_set(why, sizeof(why), -E2BIG, "a line of %zu bytes, above the limit "
				      "of %u", ll, DPKSET_LINE_MAX);
		} else if (!nl) {
			ret = err_set(why, sizeof(why), -EBADMSG, "the last line has no end of line: "
				      "the manifest is cut short");
		} else if (memchr(p, '\0', ll)) {
			ret = err_set(why, sizeof(why), -EBADMSG, "a NUL byte");
		} else if (ended) {
			ret = err_set(why, sizeof(why), -EBADMSG, "text after the 'end' line");
		} else if (line == 1) {
			uint64_t v;
			size_t mlen = sizeof(DPKSET_MAGIC) - 1;
			if (!dpkset_is_manifest(p, ll) || parse_u64(p + mlen, ll - mlen, &v) < 0)
				ret = err_set(why, sizeof(why), -EBADMSG, "not a dpk set manifest (the "
					      "first line is not 'dpkset VERSION')");
			else if (v != DPKSET_VERSION)
				ret = err_set(why, sizeof(why), -EPROTO, "manifest version %llu; this "
					      "build reads version %u", (unsigned long long)v,
					      DPKSET_VERSION);
		} else if (ll >= 4 && !memcmp(p, "end ", 4)) {
			uint64_t v;
			if (parse_u64(p + 4, ll - 4, &v) < 0)
				ret = err_set(why, sizeof(why), -EBADMSG, "expected 'end N' (N in decimal "
					      "digits)");
			else if (v != m->n)
				ret = err_set(why, sizeof(why), -EBADMSG, "'end %llu', but %u shard lines "
					      "came before it", (unsigned long long)v, m->n);
			ended = 1;
		} else {
			ret = parse_shard(m, p, ll, why, sizeof(why));
		}
		pos += ll + 1;
	}
	if (ret == 0 && !line)
		ret = err_set(why, sizeof(why), -EBADMSG, "empty file");
	else if (ret == 0 && !ended)
		ret = err_set(why, sizeof(why), -EBADMSG, "no 'end N' line: the manifest is cut short");
	else if (ret == 0 && m->n == 0)
		ret = err_set(why, sizeof(why), -EBADMSG, "an empty set (no shard lines)");
	else if (ret == 0)
		ret = dup_paths(m, &line, why, sizeof(why));
	if (ret < 0) {
		err_set(err, errlen, ret, "%s line %u: %s", name, line ? line : 1, why);
		dpkset_manifest_destroy(m);
		return ret;
	}
	*out = m;
	return 0;
}

void dpkset_hex(const uint8_t id[DPK_IDENTITY_SIZE], char *out)
{
	static const char hx[] = "0123456789abcdef";

	for (unsigned k = 0; k < DPK_IDENTITY_SIZE; k++) {
		out[2 * k] = hx[id[k] >> 4];
		out[2 * k + 1] = hx[id[k] & 15];
	}
	out[2 * DPK_IDENTITY_SIZE] = '\0';
}

int dpkset_write(const char *path, const struct dpkset_manifest *m)
{
	struct afile f;
	char hex[2 * DPK_IDENTITY_SIZE + 1];
	int ret;

	if (!m->n)
		return -EINVAL;
	if ((ret = afile_open(&f, path, 0)) < 0)
		return ret;
	FILE *fp = fdopen(dup(f.fd), "w");
	if (!fp) {
		ret = -errno;
		afile_close(&f);
		return ret;
	}
	fprintf(fp, "%s%u\n", DPKSET_MAGIC, DPKSET_VERSION);
	for (uint32_t k = 0; k < m->n; k++) {
		dpkset_hex(m->shards[k].id, hex);
		fprintf(fp, "%llu %s %s\n", (unsigned long long)m->shards[k].count, hex,
			m->shards[k].path);
	}
	fprintf(fp, "end %u\n", m->n);
	ret = fflush(fp) == 0 && !ferror(fp) ? 0 : -EIO;
	if (fclose(fp) != 0 && ret == 0)
		ret = -EIO;
	if (ret == 0)
		ret = afile_commit(&f);
	afile_close(&f);
	return ret;
}

uint32_t dpkset_find(const struct dpkset_manifest *m, uint64_t i)
{
	/* Branch-free (a conditional move a step): a shuffled order makes every branch of a plain
	 * binary search a coin toss. The answer is in [lo, lo + len), first[lo] <= i throughout. */
	uint32_t lo = 0, len = m->n;

	while (len > 1) {
		uint32_t half = len / 2;
		lo += m->first[lo + half] <= i ? half : 0;
		len -= half;
	}
	return lo;
}

void dpkset_identity(const struct dpkset_manifest *m, uint8_t out[DPK_IDENTITY_SIZE])
{
	if (m->n == 1) {
		memcpy(out, m->shards[0].id, DPK_IDENTITY_SIZE);
		return;
	}
	XXH3_state_t st;  /* on the stack: the digest cannot depend on an allocation */
	XXH3_INITSTATE(&st);
	XXH3_128bits_reset_withSeed(&st, m->n);
	for (uint32_t k = 0; k < m->n; k++)
		XXH3_128bits_update(&st, m->shards[k].id, DPK_IDENTITY_SIZE);
	XXH128_hash_t h = XXH3_128bits_digest(&st);
	for (int i = 0; i < 8; i++) {
		out[i] = (uint8_t)(h.high64 >> (8 * i));
		out[8 + i] = (uint8_t)(h.low64 >> (8 * i));
	}
}

int dpkset_read_fd(int fd, uint64_t size, const char *name, struct dpkset_manifest **out,
		   char *err, size_t errlen)
{
	int ret;

	if (size > DPKSET_FILE_MAX)
		return err_set(err, errlen, -E2BIG, "%s: %llu bytes, above the limit of %llu for a "
			       "manifest", name, (unsigned long long)size,
			       (unsigned long long)DPKSET_FILE_MAX);
	size_t len = (size_t)size;
	char *text = malloc(len + 1);
	if (!text)
		return err_set(err, errlen, -ENOMEM, "out of memory");
	ret = pread_full(fd, text, len, 0);
	if (ret == 0)
		ret = dpkset_parse(text, len, name, out, err, errlen);
	else
		err_set(err, errlen, ret, "%s: %s", name, strerror(-ret));
	free(text);
	return ret;
}
