/* input_tar.c - dpack's WebDataset input: a .tar whose members KEY.EXT group into samples; a
 * sample is one image member (an extension of a record kind, e.g. KEY.jpg) and KEY.cls holding
 * its integer label. Members are read in place (offset and size in the archive). */
#include "common/log.h"
#include "formats/tarx.h"
#include "loader/kind.h"
#include "tools/dpack/input.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* WebDataset key: the path up to the first '.' of its last component. */
static size_t wds_key_len(const char *name)
{
	const char *base = strrchr(name, '/');
	const char *dot = strchr(base ? base + 1 : name, '.');

	return dot ? (size_t)(dot - name) : strlen(name);
}

static int parse_label(const char *s, size_t len, int64_t *out)
{
	char buf[32];
	char *end;

	while (len && isspace((unsigned char)s[len - 1]))
		len--;
	while (len && isspace((unsigned char)*s))
		s++, len--;
	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	errno = 0;
	long long v = strtoll(buf, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

/* A member extension of a kind made from files (loader/kind.h): ".jpg" or ".jpeg" for JPEG. */
static int is_image(const char *ext)
{
	for (unsigned k = 0; k <= DPK_KIND_MAX; k++)
		if (ldr_kinds[k] && ldr_kinds[k]->exts && dpack_has_ext(ext, ldr_kinds[k]->exts))
			return 1;
	return 0;
}

/* ".jpg/.jpeg/.png/...": those extensions, for the message on a sample without an image. */
static void image_exts(char *buf, size_t len)
{
	size_t pos = 0;

	buf[0] = '\0';
	for (unsigned k = 0; k <= DPK_KIND_MAX; k++)
		for (const char *const *e = ldr_kinds[k] ? ldr_kinds[k]->exts : NULL; e && *e; e++) {
			unsigned j = 0;  /* once each: jpeg and jpeg+cmyk share theirs */
			while (j < k && !(ldr_kinds[j] && ldr_kinds[j]->exts &&
					  dpack_has_ext(*e, ldr_kinds[j]->exts)))
				j++;
			if (j < k)
				continue;
			int n = snprintf(buf + pos, len - pos, "%s%s", pos ? "/" : "", *e);
			if (n < 0 || (size_t)n >= len - pos)
				return;
			pos += (size_t)n;
		}
}

struct wds_group {
	char key[TARX_NAME_MAX];
	size_t key_len;
	int has_img, has_cls;
	uint64_t img_off, img_size;
	int64_t label;
	char bad[160];
};

static int wds_flush(struct dpack_src *src, struct wds_group *g, uint64_t *cap)
{
	int ret = 0;

	if (!g->key_len)
		return 0;
	if (!g->has_img && !g->has_cls)
		goto out;  /* a key with neither, e.g. only .json: not a sample for us */
	if (!g->bad[0] && !g->has_img) {
		char exts[128];
		image_exts(exts, sizeof(exts));
		snprintf(g->bad, sizeof(g->bad), "no %s member", exts);
	}
	if (!g->bad[0] && !g->has_cls)
		snprintf(g->bad, sizeof(g->bad), "no .cls member");
	if (g->bad[0]) {
		LOG_WARN("%s: %s: %s", src->strict ? "error" : "skipped", g->key, g->bad);
		src->skipped++;
		ret = src->strict ? -EBADMSG : 0;
		goto out;
	}
	if (src->n == *cap) {
		uint64_t c = *cap ? *cap * 2 : 1024;
		struct dpack_item *t = realloc(src->items, c * sizeof(*t));
		if (!t)
			return -ENOMEM;
		src->items = t;
		*cap = c;
	}
	struct dpack_item *it = &src->items[src->n++];
	it->name = strdup(g->key);
	it->offset = g->img_off;
	it->size = g->img_size;
	it->label = g->label;
	if (!it->name)
		ret = -ENOMEM;
out:
	g->key_len = 0;
	g->has_img = g->has_cls = 0;
	g->bad[0] = '\0';
	return ret;
}

static int list_tar(struct dpack_src *src)
{
	static struct tarx t;          /* big (name buffers); dpack lists one source */
	static struct tarx_member m;
	static struct wds_group g;
	struct stat st;
	uint64_t cap = 0;
	int ret;

	src->fd = open(src->path, O_RDONLY | O_CLOEXEC);
	if (src->fd < 0) {
		int ret0 = -errno;
		LOG_ERROR("cannot open %s: %s", src->path, strerror(-ret0));
		return ret0;
	}
	if (fstat(src->fd, &st) < 0)
		return -errno;
	tarx_init(&t, src->fd, (uint64_t)st.st_size);
	memset(&g, 0, sizeof(g));
	while ((ret = tarx_next(&t, &m)) == 1) {
		size_t kl = wds_key_len(m.name);
		const char *ext = m.name + kl;

		if (g.key_len != kl || memcmp(g.key, m.name, kl) != 0) {
			ret = wds_flush(src, &g, &cap);
			if (ret < 0)
				return ret;
			memcpy(g.key, m.name, kl);
			g.key[kl] = '\0';
			g.key_len = kl;
		}
		if (is_image(ext) && !strchr(ext + 1, '.')) {
			if (g.has_img)
				snprintf(g.bad, sizeof(g.bad), "more than one image member");
			g.has_img = 1;
			g.img_off = m.offset;
			g.img_size = m.size;
		} else if (!strcmp(ext, ".cls")) {
			char buf[32];

			g.has_cls = 1;
			if (m.size == 0 || m.size >= sizeof(buf) ||
			    pread(src->fd, buf, m.size, (off_t)m.offset) != (ssize_t)m.size ||
			    parse_label(buf, m.size, &g.label) < 0)
				snprintf(g.bad, sizeof(g.bad), ".cls is not an integer label");
		}
	}
	if (ret < 0) {
		LOG_ERROR("%s: %s", src->path, t.err);
		return ret;
	}
	return wds_flush(src, &g, &cap);
}

static int tar_detect(const char *path, const struct stat *st)
{
	size_t sl = strlen(path);

	(void)st;
	return sl > 4 && !strcmp(path + sl - 4, ".tar");
}

static int tar_locate(const struct dpack_src *s, uint64_t i, int *fd, uint64_t *off, uint64_t *len)
{
	*fd = s->fd;
	*off = s->items[i].offset;
	*len = s->items[i].size;
	return 0;
}

const struct dpack_input dpack_input_tar = {
	.name = "tar",
	.what = ".tar",
	.detect = tar_detect,
	.list = list_tar,
	.locate = tar_locate,
};
