/* input_tar.c - dpack's WebDataset input: one or more .tar shards (several SRC operands, a
 * directory of .tar files, a .txt file listing them one a line, or WebDataset's "{000..099}"
 * notation) whose members KEY.EXT group into samples; a sample is one image member (an extension
 * of a record kind, e.g. KEY.jpg) and its label: KEY.cls (an integer), KEY.txt (a class name: its
 * index in --classes FILE, or among the sorted names the shards hold), or else KEY.json's "label"
 * (either). Shards are taken in the order given (a directory's sorted by name, a list's as
 * listed), members in archive order: the same input gives the same sample order. A key found in
 * two shards, or a shard cut short, is reported by name. Shards are listed in parallel (up to 8
 * threads, each shard's samples joined in shard order), and their records read and checked in
 * parallel by pack.c's workers. Members are read in place (shard, offset and size). */
#include "common/log.h"
#include "formats/tarx.h"
#include "formats/jsonf.h"
#include "codec/kind_pack.h"
#include "tools/dpack/input.h"

#include <ctype.h>
#include <pthread.h>
#include <dirent.h>
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

/* A member extension of a kind made from files (codec/kind_pack.h): ".jpg" or ".jpeg" for JPEG. */
static int is_image(const char *ext)
{
	for (unsigned k = 0; k <= DPK_KIND_MAX; k++)
		if (cdc_kind_pack(k) && dpack_has_ext(ext, cdc_kind_pack(k)->exts))
			return 1;
	return 0;
}

/* ".jpg/.jpeg/.png/...": those extensions, for the message on a sample without an image. */
static void image_exts(char *buf, size_t len)
{
	size_t pos = 0;

	buf[0] = '\0';
	for (unsigned k = 0; k <= DPK_KIND_MAX; k++)
		for (const char *const *e = cdc_kind_pack(k) ? cdc_kind_pack(k)->exts : NULL; e && *e;
		     e++) {
			unsigned j = 0;  /* once each: jpeg and jpeg+cmyk share theirs */
			while (j < k && !(cdc_kind_pack(j) && cdc_kind_pack(j)->exts &&
					  dpack_has_ext(*e, cdc_kind_pack(j)->exts)))
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
	int has_json;        /* the label came from a .json member (a .cls or .txt replaces it) */
	uint64_t img_off, img_size;
	int64_t label;
	char *name;          /* a .txt label's class name (malloc), or NULL */
	struct dpack_fref f[DPK_AUX_FIELDS_MAX];  /* --field members found */
	char bad[160];
};

/* The shards, open; what the listing keeps for the labels. */
struct tar_priv {
	char **paths;        /* nshards, owned */
	int *fds;
	size_t nshards;
	char **names;        /* per item: its .txt class name (owned), or NULL; freed after listing */
	size_t names_cap;
};

/* One shard's listing, made by one thread, joined to the others in shard order. */
struct shard_list {
	struct dpack_item *items;
	char **names;        /* per item, as tar_priv's */
	uint64_t n, cap;
	uint64_t skipped;
	uint32_t shard;
	int strict;
	int ret;             /* 0 or -errno; -EBADMSG: a bad sample or damage under --strict */
	struct tarx t;       /* big (name buffers): here, not on a thread's stack */
	struct tarx_member m;
	struct wds_group g;
	const struct dpack_src *src;  /* --field, --missing, --no-labels */
};

static int wds_flush(struct shard_list *sl, struct wds_group *g)
{
	int ret = 0;

	if (!g->key_len)
		return 0;
	const struct dpack_src *src = sl->src;
	if (!g->has_img && !g->has_cls)
		goto out;  /* a key with neither, e.g. only .json: not a sample for us */
	if (src->no_labels) {
		g->has_cls = 1;
		g->label = -1;
		free(g->name);
		g->name = NULL;
	}
	for (uint32_t k = 0; !g->bad[0] && !src->missing_empty && k < src->nfields; k++)
		if (g->f[k].size == UINT64_MAX)
			snprintf(g->bad, sizeof(g->bad), "no %s member (field %s; --missing empty "
				 "keeps such samples with the field empty)", src->fields[k].ext,
				 src->fields[k].name);
	if (!g->bad[0] && !g->has_img) {
		char exts[128];
		image_exts(exts, sizeof(exts));
		snprintf(g->bad, sizeof(g->bad), "no %s member", exts);
	}
	if (!g->bad[0] && !g->has_cls)
		snprintf(g->bad, sizeof(g->bad), "no .cls or .txt label member");
	if (g->bad[0]) {
		LOG_WARN("%s: %s: %s", sl->strict ? "error" : "skipped", g->key, g->bad);
		sl->skipped++;
		ret = sl->strict ? -EBADMSG : 0;
		goto out;
	}
	if (sl->n == sl->cap) {
		uint64_t c = sl->cap ? sl->cap * 2 : 256;
		struct dpack_item *t = realloc(sl->items, c * sizeof(*t));
		if (!t)
			return -ENOMEM;
		sl->items = t;
		char **nt = realloc(sl->names, c * sizeof(*nt));
		if (!nt)
			return -ENOMEM;
		sl->names = nt;
		sl->cap = c;
	}
	struct dpack_item *it = &sl->items[sl->n];
	sl->names[sl->n++] = g->name;  /* NULL for an integer label */
	g->name = NULL;
	it->name = strdup(g->key);
	it->offset = g->img_off;
	it->size = g->img_size;
	it->label = g->label;
	it->shard = sl->shard;
	it->f = NULL;
	if (!it->name)
		ret = -ENOMEM;
	if (src->nfields && ret == 0) {
		it->f = malloc(src->nfields * sizeof(*it->f));
		if (!it->f)
			ret = -ENOMEM;
		else
			memcpy(it->f, g->f, src->nfields * sizeof(*it->f));
	}
out:
	for (uint32_t k = 0; k < DPK_AUX_FIELDS_MAX; k++)
		g->f[k].size = UINT64_MAX;
	free(g->name);
	g->name = NULL;
	g->key_len = 0;
	g->has_img = g->has_cls = g->has_json = 0;
	g->bad[0] = '\0';
	return ret;
}

/* The top-level "label" member of a JSON object @s (NUL-terminated; formats/jsonf.c, json-c):
 * an integer into *label, or a string into *name (malloc). Returns 1 found, 0 not there (or
 * another type, or not a JSON object), -ENOMEM. */
static int json_label(const char *s, int64_t *label, char **name)
{
	uint8_t *v = NULL;
	uint32_t n = 0;
	int str = 0;
	int ret = jsonf_get_ex((const uint8_t *)s, strlen(s), "label", &v, &n, &str);

	if (ret <= 0)
		return ret == -ENOMEM ? ret : 0;
	if (str) {
		if (n == 0 || n > DPK_CLASS_NAME_MAX || memchr(v, 0, n)) {
			free(v);
			return 0;
		}
		free(*name);
		*name = strndup((const char *)v, n);
		free(v);
		return *name ? 1 : -ENOMEM;
	}
	char buf[32], *end;
	if (n >= sizeof(buf)) {
		free(v);
		return 0;
	}
	memcpy(buf, v, n);
	buf[n] = '\0';
	free(v);
	errno = 0;
	long long x = strtoll(buf, &end, 10);
	if (errno || end == buf || *end)
		return 0;
	*label = x;
	return 1;
}

/* One shard (@fd, named @path): its members' groups onto @sl. A shard cut short (a member past
 * its end, a damaged header) keeps the samples before the damage: logged, or -EBADMSG under
 * --strict. Returns 0 or -errno (also in sl->ret). */
static int list_shard(struct shard_list *sl, int fd, const char *path)
{
	struct tarx *t = &sl->t;
	struct tarx_member *mb = &sl->m;
	struct wds_group *g = &sl->g;
	struct stat st;
	int ret;

	if (fstat(fd, &st) < 0)
		return sl->ret = -errno;
	tarx_init(t, fd, (uint64_t)st.st_size);
	for (uint32_t k = 0; k < DPK_AUX_FIELDS_MAX; k++)
		g->f[k].size = UINT64_MAX;
	while ((ret = tarx_next(t, mb)) == 1) {
		size_t kl = wds_key_len(mb->name);
		const char *ext = mb->name + kl;
		int field = 0;

		if (g->key_len != kl || memcmp(g->key, mb->name, kl) != 0) {
			ret = wds_flush(sl, g);
			if (ret < 0)
				return sl->ret = ret;
			memcpy(g->key, mb->name, kl);
			g->key[kl] = '\0';
			g->key_len = kl;
		}
		/* a member a --field names is that field, never a label */
		for (uint32_t k = 0; k < sl->src->nfields; k++) {
			if (strcasecmp(ext, sl->src->fields[k].ext))
				continue;
			if (g->f[k].size != UINT64_MAX)
				snprintf(g->bad, sizeof(g->bad), "more than one %s member (field %s)",
					 ext, sl->src->fields[k].name);
			g->f[k].off = mb->offset;
			g->f[k].size = mb->size;
			field = 1;
		}
		if (field)
			continue;
		if (is_image(ext) && !strchr(ext + 1, '.')) {
			if (g->has_img)
				snprintf(g->bad, sizeof(g->bad), "more than one image member");
			g->has_img = 1;
			g->img_off = mb->offset;
			g->img_size = mb->size;
		} else if (!strcmp(ext, ".json") && !g->has_cls) {
			/* {"label": 3} or {"label": "tench"}: used when no .cls or .txt is there */
			char buf[4096];
			if (mb->size == 0 || mb->size >= sizeof(buf) ||
			    pread(fd, buf, mb->size, (off_t)mb->offset) != (ssize_t)mb->size)
				continue;
			buf[mb->size] = '\0';
			int r = json_label(buf, &g->label, &g->name);
			if (r < 0)
				return sl->ret = r;
			g->has_json = r > 0;
			g->has_cls = r > 0;
		} else if (!strcmp(ext, ".cls") || !strcmp(ext, ".txt")) {
			if (g->has_json) {  /* a .cls or .txt wins over a .json label */
				g->has_json = 0;
				g->has_cls = 0;
				free(g->name);
				g->name = NULL;
			}
			char buf[DPK_CLASS_NAME_MAX + 1];
			size_t n = mb->size;

			if (g->has_cls)
				snprintf(g->bad, sizeof(g->bad), "more than one label member");
			g->has_cls = 1;
			if (n == 0 || n >= sizeof(buf) ||
			    pread(fd, buf, n, (off_t)mb->offset) != (ssize_t)n) {
				snprintf(g->bad, sizeof(g->bad), "%s: empty, too long or unreadable", ext);
				continue;
			}
			if (ext[1] == 'c') {
				if (parse_label(buf, n, &g->label) < 0)
					snprintf(g->bad, sizeof(g->bad), ".cls is not an integer label");
				continue;
			}
			while (n && isspace((unsigned char)buf[n - 1]))
				n--;
			buf[n] = '\0';
			free(g->name);
			g->name = strdup(buf);
			if (!g->name)
				return sl->ret = -ENOMEM;
		}
	}
	if (ret < 0) {
		/* the group in progress may miss members: dropped with the rest of the shard */
		LOG_WARN("%s %s: %s (%llu samples before it kept)",
			 sl->strict ? "error: shard" : "shard", path, t->err, (unsigned long long)sl->n);
		free(g->name);
		g->name = NULL;
		g->key_len = 0;
		sl->skipped++;
		return sl->ret = sl->strict ? -EBADMSG : 0;
	}
	return sl->ret = wds_flush(sl, g);
}

/* The listing threads take shards in turn (an atomic counter) and list each into its own
 * shard_list: the output is joined in shard order, so it does not depend on the threads. */
struct lister {
	const struct dpack_src *src;
	struct shard_list **lists;
	struct tar_priv *tp;
	int strict;
	size_t next;         /* atomic: the next shard to take */
};

static void *lister_run(void *arg)
{
	struct lister *l = arg;
	size_t k;

	while ((k = __atomic_fetch_add(&l->next, 1, __ATOMIC_RELAXED)) < l->tp->nshards) {
		struct shard_list *sl = l->lists[k];  /* made before the threads started */
		sl->shard = (uint32_t)k;
		sl->strict = l->strict;
		sl->src = l->src;
		list_shard(sl, l->tp->fds[k], l->tp->paths[k]);
	}
	return NULL;
}

static void shard_list_free(struct shard_list *sl)
{
	if (!sl)
		return;
	for (uint64_t i = 0; i < sl->n; i++) {
		free(sl->items[i].name);
		free(sl->items[i].f);
		free(sl->names[i]);
	}
	free(sl->items);
	free(sl->names);
	free(sl->g.name);
	free(sl);
}

/* List every shard, on up to 8 threads, and join the lists in shard order into @src. */
static int list_shards(struct dpack_src *src, struct tar_priv *tp)
{
	struct shard_list **lists = calloc(tp->nshards, sizeof(*lists));
	struct lister l = { .lists = lists, .tp = tp, .src = src, .strict = src->strict };
	pthread_t th[8];
	size_t nth = tp->nshards < 8 ? tp->nshards : 8, started = 0;
	uint64_t total = 0;
	int ret = 0;

	if (!lists)
		return -ENOMEM;
	for (size_t k = 0; k < tp->nshards; k++)
		if (!(lists[k] = calloc(1, sizeof(**lists))))
			ret = -ENOMEM;
	for (; ret == 0 && started < nth; started++)
		if (pthread_create(&th[started], NULL, lister_run, &l) != 0)
			break;
	if (ret == 0 && started == 0)
		lister_run(&l);  /* no thread could start: list here */
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	for (size_t k = 0; k < tp->nshards && ret == 0; k++) {
		if (lists[k]->ret < 0)
			ret = lists[k]->ret;  /* the first shard in order that failed */
		total += lists[k]->n;
		src->skipped += lists[k]->skipped;
	}
	if (ret == 0) {
		src->items = malloc((total ? total : 1) * sizeof(*src->items));
		tp->names = malloc((total ? total : 1) * sizeof(*tp->names));
		if (!src->items || !tp->names)
			ret = -ENOMEM;
	}
	for (size_t k = 0; k < tp->nshards && ret == 0; k++) {
		struct shard_list *sl = lists[k];
		memcpy(src->items + src->n, sl->items, sl->n * sizeof(*sl->items));
		memcpy(tp->names + src->n, sl->names, sl->n * sizeof(*sl->names));
		src->n += sl->n;
		sl->n = 0;  /* the strings now belong to src and tp */
	}
	tp->names_cap = src->n;
	for (size_t k = 0; k < tp->nshards; k++)
		shard_list_free(lists[k]);
	free(lists);
	return ret;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int push(struct tar_priv *tp, size_t *cap, char *p)
{
	if (!p)
		return -ENOMEM;
	if (tp->nshards == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		char **t = realloc(tp->paths, c * sizeof(*t));
		if (!t) {
			free(p);
			return -ENOMEM;
		}
		tp->paths = t;
		*cap = c;
	}
	tp->paths[tp->nshards++] = p;
	return 0;
}

static int has_tar_ext(const char *p)
{
	size_t l = strlen(p);

	return l > 4 && !strcmp(p + l - 4, ".tar");
}

/* @path holds one "{LO..HI}" (decimal, LO <= HI, at most 100000 values): the offset of '{', the
 * width of LO (zero padding) and the range. */
static int brace_range(const char *path, int *pre, int *width, unsigned long *lo,
		       unsigned long *hi)
{
	const char *b = strchr(path, '{'), *e;
	char *end;

	if (!b || strchr(b + 1, '{'))
		return 0;
	*lo = strtoul(b + 1, &end, 10);
	if (end == b + 1 || strncmp(end, "..", 2) || !isdigit((unsigned char)b[1]))
		return 0;
	*width = (int)(end - (b + 1));
	e = end + 2;
	*hi = strtoul(e, &end, 10);
	if (end == e || *end != '}' || *hi < *lo || *hi - *lo >= 100000)
		return 0;
	*pre = (int)(b - path);
	return 1;
}

/* The shards @src names: its operands, a directory's .tar files (sorted), or a list's lines
 * (relative to the list's directory; blank lines and # comments skipped). */
static int find_shards(struct dpack_src *src, struct tar_priv *tp)
{
	struct stat st;
	size_t cap = 0;
	int ret = 0;

	if (src->npaths > 1) {
		for (size_t i = 0; i < src->npaths && ret == 0; i++)
			ret = push(tp, &cap, strdup(src->paths[i]));
		return ret;
	}
	unsigned long lo, hi;
	int pre, width;
	if (brace_range(src->path, &pre, &width, &lo, &hi)) {
		/* WebDataset's notation, quoted past the shell: data-{000..099}.tar */
		const char *post = strchr(src->path + pre, '}') + 1;
		for (unsigned long v = lo; v <= hi && ret == 0; v++) {
			char *p;
			ret = push(tp, &cap, asprintf(&p, "%.*s%0*lu%s", pre, src->path, width, v,
						      post) < 0 ? NULL : p);
		}
		return ret;
	}
	if (stat(src->path, &st) == 0 && S_ISDIR(st.st_mode)) {
		DIR *d = opendir(src->path);
		struct dirent *de;
		if (!d)
			return -errno;
		while ((de = readdir(d)) && ret == 0) {
			char *p;
			if (de->d_name[0] == '.' || !has_tar_ext(de->d_name))
				continue;
			ret = push(tp, &cap, asprintf(&p, "%s/%s", src->path, de->d_name) < 0 ? NULL : p);
		}
		closedir(d);
		if (ret == 0 && tp->nshards > 1)
			qsort(tp->paths, tp->nshards, sizeof(char *), cmp_str);
		return ret;
	}
	if (has_tar_ext(src->path))
		return push(tp, &cap, strdup(src->path));
	FILE *f = fopen(src->path, "r");  /* a list of shards */
	if (!f)
		return -errno;
	const char *slash = strrchr(src->path, '/');
	int dl = slash ? (int)(slash - src->path) : 0;
	char line[4096];
	while (ret == 0 && fgets(line, sizeof(line), f)) {
		size_t n = strcspn(line, "\r\n");
		line[n] = '\0';
		if (n == 0 || line[0] == '#')
			continue;
		char *p;
		if (line[0] == '/' || !slash)
			p = strdup(line);
		else if (asprintf(&p, "%.*s/%s", dl, src->path, line) < 0)
			p = NULL;
		ret = push(tp, &cap, p);
	}
	fclose(f);
	return ret;
}

/* Class names and labels of .txt-labelled samples: --classes FILE's lines in order, or else the
 * sorted distinct names the shards hold (as ImageFolder sorts its folders). */
static int name_labels(struct dpack_src *src, struct tar_priv *tp)
{
	char **cls = NULL;
	size_t nc = 0, cap = 0, ntxt = 0;
	int ret = 0;

	for (uint64_t i = 0; i < src->n; i++)
		ntxt += tp->names[i] != NULL;
	if (src->classes_file) {
		FILE *f = fopen(src->classes_file, "r");
		char line[DPK_CLASS_NAME_MAX + 2];
		if (!f) {
			ret = -errno;
			LOG_ERROR("--classes %s: %s", src->classes_file, strerror(-ret));
			return ret;
		}
		while (fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\r\n")] = '\0';
			if (nc == cap) {
				cap = cap ? cap * 2 : 64;
				char **t = realloc(cls, cap * sizeof(*t));
				if (!t) {
					ret = -ENOMEM;
					break;
				}
				cls = t;
			}
			if (!(cls[nc] = strdup(line))) {
				ret = -ENOMEM;
				break;
			}
			nc++;
		}
		fclose(f);
	} else if (ntxt) {
		cls = malloc(ntxt * sizeof(*cls));
		if (!cls)
			return -ENOMEM;
		for (uint64_t i = 0; i < src->n; i++)
			if (tp->names[i])
				cls[nc++] = tp->names[i];
		qsort(cls, nc, sizeof(char *), cmp_str);
		size_t u = 0;
		for (size_t i = 0; i < nc; i++)
			if (u == 0 || strcmp(cls[u - 1], cls[i]))
				cls[u++] = cls[i];
		nc = u;
		for (size_t i = 0; i < nc && ret == 0; i++)
			if (!(cls[i] = strdup(cls[i])))
				ret = -ENOMEM;  /* the ones not yet copied are the names', freed there */
		if (ret < 0)
			nc = 0;
	}
	/* each .txt label is its name's index (binary search: the list is sorted unless given) */
	for (uint64_t i = 0; i < src->n && ret == 0; i++) {
		if (!tp->names[i])
			continue;
		size_t j = 0;
		if (src->classes_file) {
			while (j < nc && strcmp(cls[j], tp->names[i]))
				j++;
		} else {
			char **hit = bsearch(&tp->names[i], cls, nc, sizeof(char *), cmp_str);
			j = hit ? (size_t)(hit - cls) : nc;
		}
		if (j == nc) {
			LOG_ERROR("%s: label '%s' is not in --classes %s", src->items[i].name,
				  tp->names[i], src->classes_file);
			ret = -EBADMSG;
		}
		src->items[i].label = (int64_t)j;
	}
	if (ret == 0 && nc) {
		src->classes = cls;
		src->nclasses = (uint32_t)nc;
		return 0;
	}
	for (size_t i = 0; i < nc; i++)
		free(cls[i]);
	free(cls);
	return ret;
}

static int cmp_key(const void *a, const void *b, void *arg)
{
	const struct dpack_item *items = arg;
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	int c = strcmp(items[x].name, items[y].name);

	return c ? c : (x > y) - (x < y);
}

/* Two samples with one key (in two shards, or twice in one): the second is reported by name
 * and dropped, or with --strict the listing fails. */
static int drop_duplicate_keys(struct dpack_src *src, struct tar_priv *tp)
{
	uint64_t *ord = malloc((src->n ? src->n : 1) * sizeof(*ord)), w = 0;
	int ret = 0;

	if (!ord)
		return -ENOMEM;
	for (uint64_t i = 0; i < src->n; i++)
		ord[i] = i;
	/* sort item numbers by key, then by position: the first of equal keys is the one kept */
	struct dpack_item *items = src->items;
	qsort_r(ord, src->n, sizeof(*ord), cmp_key, items);
	for (uint64_t i = 1; i < src->n; i++) {
		struct dpack_item *a = &items[ord[i - 1]], *b = &items[ord[i]];
		if (strcmp(a->name, b->name))
			continue;
		LOG_WARN("%s: key %s in %s and again in %s", src->strict ? "error" : "skipped",
			 b->name, tp->paths[a->shard], tp->paths[b->shard]);
		b->size = UINT64_MAX;  /* marked */
		ord[i] = ord[i - 1];   /* a third copy compares with the kept one */
		src->skipped++;
		if (src->strict)
			ret = -EBADMSG;
	}
	free(ord);
	if (ret < 0)
		return ret;
	for (uint64_t i = 0; i < src->n; i++) {
		if (items[i].size == UINT64_MAX) {
			free(items[i].name);
			free(items[i].f);
			free(tp->names[i]);
			continue;
		}
		tp->names[w] = tp->names[i];
		items[w++] = items[i];
	}
	src->n = w;
	return 0;
}

static int list_tar(struct dpack_src *src)
{
	struct tar_priv *tp = calloc(1, sizeof(*tp));
	int ret;

	if (!tp)
		return -ENOMEM;
	src->priv = tp;
	ret = find_shards(src, tp);
	if (ret < 0) {
		LOG_ERROR("%s: cannot list the shards: %s", src->path, strerror(-ret));
		return ret;
	}
	if (tp->nshards == 0) {
		LOG_ERROR("%s: no .tar shards", src->path);
		return -ENOENT;
	}
	tp->fds = malloc(tp->nshards * sizeof(int));
	if (!tp->fds)
		return -ENOMEM;
	for (size_t k = 0; k < tp->nshards; k++)
		tp->fds[k] = -1;
	for (size_t k = 0; k < tp->nshards; k++) {
		tp->fds[k] = open(tp->paths[k], O_RDONLY | O_CLOEXEC);
		if (tp->fds[k] < 0) {
			ret = -errno;
			LOG_ERROR("cannot open shard %s: %s", tp->paths[k], strerror(-ret));
			return ret;
		}
	}
	ret = list_shards(src, tp);
	if (ret < 0)
		return ret;
	ret = drop_duplicate_keys(src, tp);
	if (ret == 0)
		ret = name_labels(src, tp);
	for (uint64_t i = 0; i < tp->names_cap && tp->names && i < src->n; i++)
		free(tp->names[i]);
	free(tp->names);
	tp->names = NULL;
	return ret;
}

static void tar_fini(struct dpack_src *src)
{
	struct tar_priv *tp = src->priv;

	if (!tp)
		return;
	for (size_t k = 0; k < tp->nshards; k++) {
		if (tp->fds && tp->fds[k] >= 0)
			close(tp->fds[k]);
		free(tp->paths[k]);
	}
	free(tp->fds);
	free(tp->paths);
	free(tp->names);
	free(tp);
	src->priv = NULL;
}

/* A .tar; a directory with .tar files and no sub-directory (else it is an ImageFolder tree); a
 * .txt list of shards. */
static int tar_detect(const char *path, const struct stat *st)
{
	size_t sl = strlen(path);

	if (S_ISDIR(st->st_mode)) {
		DIR *d = opendir(path);
		struct dirent *de;
		int tars = 0, dirs = 0;
		if (!d)
			return 0;
		while ((de = readdir(d))) {
			struct stat es;
			char *p;
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			if (asprintf(&p, "%s/%s", path, de->d_name) < 0)
				break;
			if (stat(p, &es) == 0 && S_ISDIR(es.st_mode))
				dirs++;
			else if (has_tar_ext(de->d_name))
				tars++;
			free(p);
		}
		closedir(d);
		return tars > 0 && dirs == 0;
	}
	return has_tar_ext(path) || (sl > 4 && !strcmp(path + sl - 4, ".txt"));
}

/* "data-{000..099}.tar": shards named by WebDataset's brace notation (the path itself does not
 * exist, so it is recognised before stat). */
int dpack_tar_pattern(const char *path)
{
	unsigned long lo, hi;
	int pre, width;

	return has_tar_ext(path) && brace_range(path, &pre, &width, &lo, &hi);
}

static int tar_locate(const struct dpack_src *s, uint64_t i, int *fd, uint64_t *off, uint64_t *len)
{
	const struct tar_priv *tp = s->priv;

	*fd = tp->fds[s->items[i].shard];
	*off = s->items[i].offset;
	*len = s->items[i].size;
	return 0;
}

const struct dpack_input dpack_input_tar = {
	.name = "tar",
	.what = ".tar (or several, a directory of them, a .txt list of them)",
	.detect = tar_detect,
	.list = list_tar,
	.locate = tar_locate,
	.fini = tar_fini,
	.keeps_fds = 1,
};
