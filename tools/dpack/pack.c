/* pack.c - dpack pack: turn an ImageFolder tree, a WebDataset tar or a pair of .npy files into
 * one .dpk file.
 *
 * DESIGN: the source is first listed into items (path or byte range, label) in the order
 * torchvision would give them. Worker threads then take items in index order, read them,
 * probe JPEGs (dimensions, subsampling, truncation), compress raw tensors and checksum, and
 * leave the result in a slot of a reorder window; the main thread writes slots strictly in item
 * order, so the output does not depend on --jobs. Workers never run more than WINDOW items ahead
 * of the writer, which bounds memory. Any fatal error (read error, full disk, signal) stops the
 * workers and removes the temporary file: OUT either is a whole dataset or was not touched. */
#include "common/args.h"
#include "common/clk.h"
#include "common/log.h"
#include "common/proc.h"
#include "formats/dpk.h"
#include "formats/jpeg_probe.h"
#include "formats/npy.h"
#include "formats/tarx.h"
#include "tools/dpack/dpack.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

enum src_kind { SRC_FOLDER, SRC_TAR, SRC_NPY };

struct item {
	char *name;        /* path (folder) or member/key name (tar), for messages; NULL for npy */
	uint64_t offset;   /* tar: member data offset */
	uint64_t size;     /* tar: member size */
	int64_t label;
};

enum slot_status { SLOT_OK, SLOT_SKIP, SLOT_FATAL };

struct slot {
	int done;                /* set by a worker under pk.lock; cleared by the writer */
	enum slot_status status;
	int err;                 /* SLOT_FATAL: -errno */
	uint8_t *buf;            /* owned; the record's stored bytes */
	struct dpk_record rec;
	char why[200];
};

struct pack {
	enum src_kind kind;
	const char *src;
	int src_fd;              /* tar archive or images .npy */
	struct npy_info img;     /* SRC_NPY */
	uint64_t sample_bytes;   /* SRC_NPY */
	int64_t *npy_labels;     /* SRC_NPY */
	struct item *items;
	uint64_t n;
	char **classes;
	uint32_t nclasses;
	int zstd_level;          /* 0: store raw uncompressed */
	int strict;

	pthread_mutex_t lock;
	pthread_cond_t cv_done;  /* a slot became done (workers -> writer) */
	pthread_cond_t cv_space; /* the writer freed a slot, or abort (writer -> workers) */
	uint64_t next;           /* next item to hand out */
	uint64_t written;        /* items the writer has consumed */
	int abort;
	struct slot *slots;
	uint64_t window;
};

static volatile sig_atomic_t got_signal;
static const char *volatile tmp_to_unlink;

static void on_signal(int sig)
{
	/* unlink is async-signal-safe; the writer's temp path is set before workers start. */
	if (tmp_to_unlink)
		unlink(tmp_to_unlink);
	got_signal = sig;
	signal(sig, SIG_DFL);
	raise(sig);
}

/* ---- listing sources ---- */

static int has_ext(const char *name, const char *const *exts)
{
	const char *dot = strrchr(name, '.');

	if (!dot)
		return 0;
	for (; *exts; exts++)
		if (!strcasecmp(dot, *exts))
			return 1;
	return 0;
}

/* torchvision's IMG_EXTENSIONS: listed and probed; only JPEGs pack, the rest are reported. */
static const char *const img_exts[] = { ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif",
					".tiff", ".webp", NULL };

struct vec {
	char **v;
	size_t n, cap;
};

static int vec_push(struct vec *s, char *p)
{
	if (!p)
		return -ENOMEM;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		char **t = realloc(s->v, cap * sizeof(*t));
		if (!t) {
			free(p);
			return -ENOMEM;
		}
		s->v = t;
		s->cap = cap;
	}
	s->v[s->n++] = p;
	return 0;
}

static void vec_free(struct vec *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *path_join(const char *a, const char *b)
{
	char *p;

	return asprintf(&p, "%s/%s", a, b) < 0 ? NULL : p;
}

/* Collect image files under @dir in torchvision order: directories by full path, files by name
 * within a directory (sorted(os.walk(...)) then sorted(fnames)). Symlinks are followed. */
static int walk(const char *dir, struct vec *files)
{
	struct vec names = { 0 }, subdirs = { 0 };
	DIR *d = opendir(dir);
	struct dirent *de;
	int ret = 0;

	if (!d) {
		ret = -errno;
		LOG_ERROR("cannot read directory %s: %s", dir, strerror(errno));
		return ret;
	}
	errno = 0;
	while ((de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *p = path_join(dir, de->d_name);
		if (!p || stat(p, &st) < 0) {
			ret = p ? -errno : -ENOMEM;
			LOG_ERROR("cannot stat %s: %s", p ? p : de->d_name, strerror(-ret));
			free(p);
			goto out;
		}
		if (S_ISDIR(st.st_mode))
			ret = vec_push(&subdirs, p);
		else if (S_ISREG(st.st_mode) && has_ext(de->d_name, img_exts))
			ret = vec_push(&names, p);
		else
			free(p);
		if (ret < 0)
			goto out;
		errno = 0;
	}
	if (errno) {
		ret = -errno;
		LOG_ERROR("cannot read directory %s: %s", dir, strerror(errno));
		goto out;
	}
	if (names.n > 1)  /* qsort(NULL, 0) is undefined behaviour */
		qsort(names.v, names.n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < names.n; i++) {
		ret = vec_push(files, names.v[i]);
		names.v[i] = NULL;
		if (ret < 0)
			goto out;
	}
	/* A sub-directory "a/b" sorts after files of "a" (its path is longer than "a"), and
	 * before a sibling "a!"-like path only by byte order: sorting the full paths matches. */
	if (subdirs.n > 1)
		qsort(subdirs.v, subdirs.n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < subdirs.n && ret == 0; i++)
		ret = walk(subdirs.v[i], files);
out:
	closedir(d);
	vec_free(&names);
	vec_free(&subdirs);
	return ret;
}

static int list_folder(struct pack *pk)
{
	struct vec classes = { 0 };
	DIR *d = opendir(pk->src);
	struct dirent *de;
	int ret = 0;

	if (!d) {
		LOG_ERROR("cannot read directory %s: %s", pk->src, strerror(errno));
		return -errno;
	}
	while ((de = readdir(d))) {
		struct stat st;

		if (de->d_name[0] == '.')
			continue;  /* hidden entries are not classes (torchvision skips them too) */
		char *p = path_join(pk->src, de->d_name);
		if (!p) {
			ret = -ENOMEM;
			break;
		}
		if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
			ret = vec_push(&classes, strdup(de->d_name));
		free(p);
		if (ret < 0)
			break;
	}
	closedir(d);
	if (ret < 0)
		goto out;
	if (classes.n == 0) {
		LOG_ERROR("%s: no class sub-folders (an ImageFolder tree is ROOT/CLASS/IMAGE.jpg)", pk->src);
		ret = -ENOENT;
		goto out;
	}
	if (classes.n > 1)
		qsort(classes.v, classes.n, sizeof(char *), cmp_str);

	struct vec files = { 0 };
	for (size_t c = 0; c < classes.n; c++) {
		size_t before = files.n;
		char *dir = path_join(pk->src, classes.v[c]);

		ret = dir ? walk(dir, &files) : -ENOMEM;
		free(dir);
		if (ret < 0) {
			vec_free(&files);
			goto out;
		}
		if (files.n == before)
			LOG_WARN("class '%s' has no image files", classes.v[c]);
		struct item *t = realloc(pk->items, files.n * sizeof(*t) + 1);
		if (!t) {
			vec_free(&files);
			ret = -ENOMEM;
			goto out;
		}
		pk->items = t;
		for (size_t i = before; i < files.n; i++) {
			memset(&t[i], 0, sizeof(t[i]));
			t[i].name = files.v[i];
			t[i].label = (int64_t)c;
		}
	}
	pk->n = files.n;
	free(files.v);  /* the strings now belong to the items */
	pk->nclasses = (uint32_t)classes.n;
	pk->classes = classes.v;
	return 0;
out:
	vec_free(&classes);
	return ret;
}

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

struct wds_group {
	char key[TARX_NAME_MAX];
	size_t key_len;
	int has_img, has_cls;
	uint64_t img_off, img_size;
	int64_t label;
	char bad[160];
};

static int wds_flush(struct pack *pk, struct wds_group *g, uint64_t *cap, uint64_t *bad)
{
	int ret = 0;

	if (!g->key_len)
		return 0;
	if (!g->has_img && !g->has_cls)
		goto out;  /* a key with neither, e.g. only .json: not a sample for us */
	if (!g->bad[0] && !g->has_img)
		snprintf(g->bad, sizeof(g->bad), "no .jpg/.jpeg member");
	if (!g->bad[0] && !g->has_cls)
		snprintf(g->bad, sizeof(g->bad), "no .cls member");
	if (g->bad[0]) {
		LOG_WARN("%s: %s: %s", pk->strict ? "error" : "skipped", g->key, g->bad);
		(*bad)++;
		ret = pk->strict ? -EBADMSG : 0;
		goto out;
	}
	if (pk->n == *cap) {
		uint64_t c = *cap ? *cap * 2 : 1024;
		struct item *t = realloc(pk->items, c * sizeof(*t));
		if (!t)
			return -ENOMEM;
		pk->items = t;
		*cap = c;
	}
	struct item *it = &pk->items[pk->n++];
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

static int list_tar(struct pack *pk, uint64_t *bad)
{
	static struct tarx t;          /* big (name buffers); dpack lists one source */
	static struct tarx_member m;
	static struct wds_group g;
	static const char *const jpg_exts[] = { ".jpg", ".jpeg", NULL };
	struct stat st;
	uint64_t cap = 0;
	int ret;

	if (fstat(pk->src_fd, &st) < 0)
		return -errno;
	tarx_init(&t, pk->src_fd, (uint64_t)st.st_size);
	memset(&g, 0, sizeof(g));
	while ((ret = tarx_next(&t, &m)) == 1) {
		size_t kl = wds_key_len(m.name);
		const char *ext = m.name + kl;

		if (g.key_len != kl || memcmp(g.key, m.name, kl) != 0) {
			ret = wds_flush(pk, &g, &cap, bad);
			if (ret < 0)
				return ret;
			memcpy(g.key, m.name, kl);
			g.key[kl] = '\0';
			g.key_len = kl;
		}
		if (has_ext(ext, jpg_exts) && !strchr(ext + 1, '.')) {
			if (g.has_img)
				snprintf(g.bad, sizeof(g.bad), "more than one image member");
			g.has_img = 1;
			g.img_off = m.offset;
			g.img_size = m.size;
		} else if (!strcmp(ext, ".cls")) {
			char buf[32];

			g.has_cls = 1;
			if (m.size == 0 || m.size >= sizeof(buf) ||
			    pread(pk->src_fd, buf, m.size, (off_t)m.offset) != (ssize_t)m.size ||
			    parse_label(buf, m.size, &g.label) < 0)
				snprintf(g.bad, sizeof(g.bad), ".cls is not an integer label");
		}
	}
	if (ret < 0) {
		LOG_ERROR("%s: %s", pk->src, t.err);
		return ret;
	}
	return wds_flush(pk, &g, &cap, bad);
}

static int list_npy(struct pack *pk, const char *labels_path)
{
	struct npy_info lab;
	char err[256];
	int lfd = -1, ret;

	ret = npy_read_header(pk->src_fd, &pk->img, err, sizeof(err));
	if (ret < 0) {
		LOG_ERROR("%s: %s", pk->src, err);
		return ret;
	}
	if (pk->img.kind != 'u' || pk->img.itemsize != 1 || pk->img.ndim < 2 ||
	    pk->img.ndim > DPK_NDIM_MAX + 1) {
		LOG_ERROR("%s: need a uint8 array of 2 to %d dimensions (N x ...), found %c%u with %d",
			  pk->src, DPK_NDIM_MAX + 1, pk->img.kind, pk->img.itemsize * 8, pk->img.ndim);
		return -EINVAL;
	}
	for (int k = 1; k < pk->img.ndim; k++)
		if (pk->img.shape[k] == 0 || pk->img.shape[k] > DPK_DIM_MAX) {
			LOG_ERROR("%s: dimension %d is %llu (1..%u)", pk->src, k,
				  (unsigned long long)pk->img.shape[k], DPK_DIM_MAX);
			return -EINVAL;
		}
	pk->n = pk->img.shape[0];
	pk->sample_bytes = pk->n ? pk->img.data_size / pk->n : 0;

	lfd = open(labels_path, O_RDONLY | O_CLOEXEC);
	if (lfd < 0) {
		LOG_ERROR("cannot open %s: %s", labels_path, strerror(errno));
		return -errno;
	}
	ret = npy_read_header(lfd, &lab, err, sizeof(err));
	if (ret < 0) {
		LOG_ERROR("%s: %s", labels_path, err);
		goto out;
	}
	if (lab.ndim != 1 || (lab.kind != 'i' && lab.kind != 'u')) {
		LOG_ERROR("%s: labels must be a 1-D integer array, found %d dimensions of '%c'",
			  labels_path, lab.ndim, lab.kind);
		ret = -EINVAL;
		goto out;
	}
	if (lab.shape[0] != pk->n) {
		LOG_ERROR("%s has %llu labels but %s has %llu images", labels_path,
			  (unsigned long long)lab.shape[0], pk->src, (unsigned long long)pk->n);
		ret = -EINVAL;
		goto out;
	}
	pk->npy_labels = malloc(pk->n * sizeof(int64_t) + 1);
	if (!pk->npy_labels) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < pk->n; i++) {
		ret = npy_read_int(lfd, &lab, i, &pk->npy_labels[i]);
		if (ret < 0) {
			LOG_ERROR("%s: label %llu: %s", labels_path, (unsigned long long)i, strerror(-ret));
			goto out;
		}
	}
	ret = 0;
out:
	close(lfd);
	return ret;
}

/* ---- workers ---- */

static int read_all(int fd, uint8_t *buf, uint64_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pread(fd, buf, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;  /* the file shrank under us */
		buf += n;
		len -= (uint64_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static void process(struct pack *pk, uint64_t i, struct slot *s, ZSTD_CCtx *cctx)
{
	struct dpk_record *r = &s->rec;
	uint64_t len, off = 0;
	int fd = pk->src_fd, ret;

	memset(r, 0, sizeof(*r));
	s->status = SLOT_OK;
	s->buf = NULL;
	if (pk->kind == SRC_FOLDER) {
		struct stat st;

		fd = open(pk->items[i].name, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0) {
			ret = -errno;
			goto fatal;
		}
		len = (uint64_t)st.st_size;
	} else if (pk->kind == SRC_TAR) {
		off = pk->items[i].offset;
		len = pk->items[i].size;
	} else {
		off = pk->img.data_offset + i * pk->sample_bytes;
		len = pk->sample_bytes;
	}
	if (len > DPK_RECORD_MAX) {
		s->status = SLOT_SKIP;
		snprintf(s->why, sizeof(s->why), "%llu bytes is larger than a record may be",
			 (unsigned long long)len);
		goto out;
	}
	s->buf = malloc(len ? len : 1);
	if (!s->buf) {
		ret = -ENOMEM;
		goto fatal;
	}
	ret = read_all(fd, s->buf, len, off);
	if (ret < 0)
		goto fatal;

	if (pk->kind != SRC_NPY) {
		struct dpk_jpeg_info ji;

		ret = dpk_jpeg_probe(s->buf, len, &ji, s->why, sizeof(s->why));
		if (ret < 0) {
			s->status = SLOT_SKIP;
			goto out;
		}
		r->kind = DPK_KIND_JPEG;
		r->ndim = 3;
		r->shape[0] = ji.height;
		r->shape[1] = ji.width;
		r->shape[2] = ji.components;
		r->subsamp = ji.subsamp;
		r->flags = ji.progressive ? DPK_F_PROGRESSIVE : 0;
		r->label = pk->items[i].label;
	} else {
		r->ndim = (uint8_t)(pk->img.ndim - 1);
		for (int k = 1; k < pk->img.ndim; k++)
			r->shape[k - 1] = (uint32_t)pk->img.shape[k];
		r->label = pk->npy_labels[i];
		r->kind = DPK_KIND_RAW;
		if (pk->zstd_level) {
			size_t bound = ZSTD_compressBound(len);
			uint8_t *z = malloc(bound);

			if (!z) {
				ret = -ENOMEM;
				goto fatal;
			}
			size_t zn = ZSTD_compressCCtx(cctx, z, bound, s->buf, len, pk->zstd_level);
			if (ZSTD_isError(zn)) {
				free(z);
				snprintf(s->why, sizeof(s->why), "zstd: %s", ZSTD_getErrorName(zn));
				s->status = SLOT_FATAL;
				s->err = -EIO;
				goto out;
			}
			free(s->buf);
			s->buf = z;
			len = zn;
			r->kind = DPK_KIND_RAW_ZSTD;
		}
	}
	r->data = s->buf;
	r->length = len;
	r->xxh3 = XXH3_64bits(s->buf, len);
	r->has_xxh3 = 1;
	goto out;
fatal:
	s->status = SLOT_FATAL;
	s->err = ret;
	snprintf(s->why, sizeof(s->why), "%s", strerror(-ret));
out:
	if (pk->kind == SRC_FOLDER && fd >= 0)
		close(fd);
}

static void *worker(void *arg)
{
	struct pack *pk = arg;
	ZSTD_CCtx *cctx = pk->zstd_level ? ZSTD_createCCtx() : NULL;

	for (;;) {
		pthread_mutex_lock(&pk->lock);
		while (!pk->abort && pk->next < pk->n && pk->next >= pk->written + pk->window)
			pthread_cond_wait(&pk->cv_space, &pk->lock);
		if (pk->abort || pk->next >= pk->n) {
			pthread_mutex_unlock(&pk->lock);
			break;
		}
		uint64_t i = pk->next++;
		pthread_mutex_unlock(&pk->lock);

		struct slot *s = &pk->slots[i % pk->window];
		process(pk, i, s, cctx);

		pthread_mutex_lock(&pk->lock);
		s->done = 1;  /* pairs with the writer's wait on cv_done */
		pthread_cond_broadcast(&pk->cv_done);
		pthread_mutex_unlock(&pk->lock);
	}
	ZSTD_freeCCtx(cctx);
	return NULL;
}

/* ---- progress and the main loop ---- */

static void progress(uint64_t done, uint64_t n, uint64_t bytes, double t0, int last)
{
	double dt = clk_now_s() - t0;
	int width = 30, fill = n ? (int)(width * done / n) : width;
	char bar[64];

	memset(bar, '=', (size_t)fill);
	memset(bar + fill, ' ', (size_t)(width - fill));
	bar[width] = '\0';
	fprintf(stderr, "\r[%s] %llu/%llu %3d%%  %.1f MB/s  %s%.0fs  ", bar, (unsigned long long)done,
		(unsigned long long)n, n ? (int)(100 * done / n) : 100, dt > 0 ? bytes / dt / 1e6 : 0.0,
		last ? "" : "ETA ", last ? dt : (done ? dt * (double)(n - done) / (double)done : 0.0));
	if (last)
		fputc('\n', stderr);
}

static const char pack_usage[] =
	"usage: dpack pack [options] SRC OUT.dpk\n"
	"       dpack pack [options] IMAGES.npy LABELS.npy OUT.dpk\n"
	"\n"
	"SRC is an ImageFolder tree (classes = sorted sub-folders, as torchvision) or a WebDataset\n"
	".tar (samples are KEY.jpg or KEY.jpeg with KEY.cls holding the integer label).\n"
	"JPEGs are stored as they are; .npy images become raw uint8 tensors.\n"
	"\n"
	"options:\n"
	"  --compress zstd[:LEVEL]  compress raw tensors with zstd (level 1..19, default 3)\n"
	"  --jobs N                 worker threads (default: all cores)\n"
	"  --strict                 a bad or non-JPEG image is an error, not a skipped sample\n"
	"  --no-fsync               do not wait for the disk (scratch space): faster, but a crash\n"
	"                           soon after packing may lose the file\n"
	"  -h, --help               this text\n"
	"\n"
	"OUT is written to OUT.tmp.PID, synced and renamed: an interrupted run leaves no OUT.\n";

int dpack_pack_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "compress", required_argument, NULL, 'c' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "strict", no_argument, NULL, 's' },
		{ "no-fsync", no_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct pack pk = { .src_fd = -1 };
	struct dpk_writer *w = NULL;
	pthread_t *th = NULL;
	unsigned jobs = proc_cpu_count();
	int nth = 0, c, ret, status = 1, no_fsync = 0;
	uint64_t skipped = 0, bytes = 0, written = 0;
	const char *out, *labels = NULL;

	while ((c = getopt_long(argc, argv, "hj:", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (strncmp(optarg, "zstd", 4) || (optarg[4] && optarg[4] != ':')) {
				LOG_ERROR("--compress: '%s' is not zstd or zstd:LEVEL", optarg);
				return 2;
			}
			pk.zstd_level = 3;
			if (optarg[4]) {
				unsigned lv;
				if (arg_uint(optarg + 5, 1, (unsigned)ZSTD_maxCLevel(), &lv) < 0) {
					LOG_ERROR("--compress: level '%s' is not in 1..%d", optarg + 5, ZSTD_maxCLevel());
					return 2;
				}
				pk.zstd_level = (int)lv;
			}
			break;
		case 'j':
			if (arg_uint(optarg, 1, 1024, &jobs) < 0) {
				LOG_ERROR("--jobs: '%s' is not a number in 1..1024", optarg);
				return 2;
			}
			break;
		case 's':
			pk.strict = 1;
			break;
		case 'F':
			no_fsync = 1;
			break;
		case 'h':
			fputs(pack_usage, stdout);
			return 0;
		default:
			fputs(pack_usage, stderr);
			return 2;
		}
	}
	argc -= optind;
	argv += optind;
	if (argc == 3) {
		labels = argv[1];
		out = argv[2];
	} else if (argc == 2) {
		out = argv[1];
	} else {
		fputs(pack_usage, stderr);
		return 2;
	}
	pk.src = argv[0];

	struct stat st;
	if (stat(pk.src, &st) < 0) {
		LOG_ERROR("cannot open %s: %s", pk.src, strerror(errno));
		return 1;
	}
	size_t sl = strlen(pk.src);
	if (S_ISDIR(st.st_mode)) {
		pk.kind = SRC_FOLDER;
	} else if (sl > 4 && !strcmp(pk.src + sl - 4, ".tar")) {
		pk.kind = SRC_TAR;
	} else if (sl > 4 && !strcmp(pk.src + sl - 4, ".npy")) {
		pk.kind = SRC_NPY;
		if (!labels) {
			LOG_ERROR("%s: .npy images need a labels .npy: dpack pack IMAGES.npy LABELS.npy OUT.dpk",
				  pk.src);
			return 2;
		}
	} else {
		LOG_ERROR("%s: not a directory, .tar or .npy", pk.src);
		return 2;
	}
	if (labels && pk.kind != SRC_NPY) {
		fputs(pack_usage, stderr);
		return 2;
	}
	if (pk.zstd_level && pk.kind != SRC_NPY)
		LOG_WARN("--compress applies to raw tensors; JPEGs are stored as they are");
	if (pk.kind != SRC_FOLDER) {
		pk.src_fd = open(pk.src, O_RDONLY | O_CLOEXEC);
		if (pk.src_fd < 0) {
			LOG_ERROR("cannot open %s: %s", pk.src, strerror(errno));
			return 1;
		}
	}

	double t0 = clk_now_s();
	ret = pk.kind == SRC_FOLDER ? list_folder(&pk) :
	      pk.kind == SRC_TAR ? list_tar(&pk, &skipped) : list_npy(&pk, labels);
	if (ret < 0)
		goto out;
	if (pk.n == 0) {
		LOG_ERROR("%s: no samples found", pk.src);
		goto out;
	}

	ret = dpk_writer_create(out, no_fsync ? DPK_WRITE_NO_SYNC : 0, &w);
	if (ret < 0) {
		LOG_ERROR("cannot create %s.tmp.%d: %s", out, (int)getpid(), strerror(-ret));
		goto out;
	}
	tmp_to_unlink = dpk_writer_tmp_path(w);
	proc_on_stop_signals(on_signal, PROC_SIG_HUP);
	if (pk.nclasses) {
		ret = dpk_writer_set_classes(w, (const char *const *)pk.classes, pk.nclasses);
		if (ret < 0) {
			LOG_ERROR("class names: %s", strerror(-ret));
			goto out;
		}
	}

	pk.window = (uint64_t)jobs * 16;
	pk.slots = calloc(pk.window, sizeof(*pk.slots));
	th = calloc((size_t)jobs, sizeof(*th));
	if (!pk.slots || !th) {
		LOG_ERROR("out of memory");
		goto out;
	}
	pthread_mutex_init(&pk.lock, NULL);
	pthread_cond_init(&pk.cv_done, NULL);
	pthread_cond_init(&pk.cv_space, NULL);
	for (nth = 0; nth < (int)jobs; nth++)
		if (pthread_create(&th[nth], NULL, worker, &pk) != 0) {
			LOG_ERROR("cannot start worker threads");
			goto stop;
		}

	int tty = isatty(STDERR_FILENO);
	double last = 0;
	for (uint64_t i = 0; i < pk.n; i++) {
		struct slot *s = &pk.slots[i % pk.window];
		const char *name = pk.items ? pk.items[i].name : NULL;

		pthread_mutex_lock(&pk.lock);
		while (!s->done)
			pthread_cond_wait(&pk.cv_done, &pk.lock);
		pthread_mutex_unlock(&pk.lock);

		if (s->status == SLOT_FATAL) {
			if (name)
				LOG_ERROR("%s: %s", name, s->why);
			else
				LOG_ERROR("%s: sample %llu: %s", pk.src, (unsigned long long)i, s->why);
			ret = s->err;
			goto stop;
		} else if (s->status == SLOT_SKIP) {
			skipped++;
			if (tty)
				fputs("\r\033[K", stderr);
			LOG_WARN("%s %s: %s", pk.strict ? "bad image" : "skipped", name, s->why);
			if (pk.strict) {
				LOG_ERROR("--strict: stopping at the first bad image");
				ret = -EBADMSG;
				goto stop;
			}
		} else {
			ret = dpk_writer_add(w, &s->rec);
			if (ret < 0) {
				LOG_ERROR("writing %s: %s", dpk_writer_tmp_path(w), strerror(-ret));
				goto stop;
			}
			bytes += s->rec.length;
		}
		free(s->buf);
		s->buf = NULL;
		pthread_mutex_lock(&pk.lock);
		s->done = 0;
		pk.written = i + 1;  /* frees slot i for item i + window */
		pthread_cond_broadcast(&pk.cv_space);
		pthread_mutex_unlock(&pk.lock);

		if (tty && clk_now_s() - last > 0.1) {
			last = clk_now_s();
			progress(i + 1, pk.n, bytes, t0, 0);
		}
	}
	written = dpk_writer_count(w);
	if (written == 0) {
		LOG_ERROR("%s: no valid samples (%llu skipped)", pk.src, (unsigned long long)skipped);
		ret = -ENOENT;
		goto stop;
	}
	ret = dpk_writer_finish(w);
	if (ret < 0)
		LOG_ERROR("finishing %s: %s", out, strerror(-ret));
	if (tty)
		progress(pk.n, pk.n, bytes, t0, 1);
stop:
	pthread_mutex_lock(&pk.lock);
	pk.abort = 1;
	pthread_cond_broadcast(&pk.cv_space);
	pthread_mutex_unlock(&pk.lock);
	for (int t = 0; t < nth; t++)
		pthread_join(th[t], NULL);
	for (uint64_t k = 0; k < pk.window; k++)
		free(pk.slots[k].buf);
	if (ret == 0) {
		double dt = clk_now_s() - t0;
		printf("dpack: %s: %llu samples, %u classes, %llu skipped, %.1f MB in %.2f s (%.0f MB/s)\n",
		       out, (unsigned long long)written, pk.nclasses, (unsigned long long)skipped,
		       bytes / 1e6, dt, dt > 0 ? bytes / dt / 1e6 : 0.0);
		status = 0;
	}
out:
	tmp_to_unlink = NULL;
	dpk_writer_destroy(w);  /* removes the temporary file unless finish succeeded */
	if (pk.src_fd >= 0)
		close(pk.src_fd);
	for (uint64_t i = 0; pk.items && i < pk.n; i++)
		free(pk.items[i].name);
	free(pk.items);
	for (uint32_t k = 0; k < pk.nclasses; k++)
		free(pk.classes[k]);
	free(pk.classes);
	free(pk.npy_labels);
	free(pk.slots);
	free(th);
	return status;
}
