/* input_folder.c - dpack's ImageFolder input: ROOT/CLASS/.../IMAGE, classes = the sorted
 * sub-folders, files in torchvision's order; every file is one sample labelled by its class. */
#include "common/log.h"
#include "tools/dpack/input.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* torchvision's IMG_EXTENSIONS: the files listed, each probed by its bytes (codec/kind_pack.h), not
 * by its name; a file no kind takes is reported (or stops the pack under --strict). */
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

/* One directory of a class: the image files directly in it, sorted by name, onto @files; its
 * sub-directories (symlinks followed, hidden ones too) onto @subdirs when non-NULL. */
static int list_dir(const char *dir, struct vec *files, struct vec *subdirs)
{
	struct vec names = { 0 };
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
		if (S_ISDIR(st.st_mode) && subdirs)
			ret = vec_push(subdirs, p);
		else if (S_ISREG(st.st_mode) && dpack_has_ext(de->d_name, img_exts))
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
out:
	closedir(d);
	vec_free(&names);
	return ret;
}

/* Every directory under @dir, @dir included, onto @dirs. */
static int collect_dirs(const char *dir, struct vec *dirs, unsigned depth)
{
	struct vec subdirs = { 0 }, none = { 0 };
	int ret;

	if (depth > 256) {
		LOG_ERROR("%s: more than 256 directories deep (a symlink loop?)", dir);
		return -ELOOP;
	}
	ret = vec_push(dirs, strdup(dir));
	if (ret == 0)
		ret = list_dir(dir, &none, &subdirs);
	vec_free(&none);
	for (size_t i = 0; i < subdirs.n && ret == 0; i++)
		ret = collect_dirs(subdirs.v[i], dirs, depth + 1);
	vec_free(&subdirs);
	return ret;
}

/* Collect image files under @dir in torchvision's order: sorted(os.walk(dir)) orders the
 * directories by their whole path ("a/b-c" before "a/b/d": '-' < '/'), so all of them are
 * collected and sorted first; then sorted(fnames) within each. Symlinks are followed. */
static int walk(const char *dir, struct vec *files)
{
	struct vec dirs = { 0 };
	int ret = collect_dirs(dir, &dirs, 0);

	if (ret == 0 && dirs.n > 1)
		qsort(dirs.v, dirs.n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < dirs.n && ret == 0; i++)
		ret = list_dir(dirs.v[i], files, NULL);
	vec_free(&dirs);
	return ret;
}

static int list_folder(struct dpack_src *src)
{
	struct vec classes = { 0 };
	DIR *d = opendir(src->path);
	struct dirent *de;
	int ret = 0;

	if (!d) {
		LOG_ERROR("cannot read directory %s: %s", src->path, strerror(errno));
		return -errno;
	}
	while ((de = readdir(d))) {
		struct stat st;

		/* Hidden folders are classes too, as in torchvision's find_classes (os.scandir
		 * with is_dir(): ".ipynb_checkpoints" is a class there, so it is one here). */
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *p = path_join(src->path, de->d_name);
		if (!p) {
			ret = -ENOMEM;
			break;
		}
		if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
			if (de->d_name[0] == '.')
				LOG_WARN("%s: a hidden folder, a class as in torchvision's ImageFolder", p);
			ret = vec_push(&classes, strdup(de->d_name));
		}
		free(p);
		if (ret < 0)
			break;
	}
	closedir(d);
	if (ret < 0)
		goto out;
	if (classes.n == 0) {
		LOG_ERROR("%s: no class sub-folders (an ImageFolder tree is ROOT/CLASS/IMAGE.jpg)", src->path);
		ret = -ENOENT;
		goto out;
	}
	if (classes.n > 1)
		qsort(classes.v, classes.n, sizeof(char *), cmp_str);

	struct vec files = { 0 };
	for (size_t c = 0; c < classes.n; c++) {
		size_t before = files.n;
		char *dir = path_join(src->path, classes.v[c]);

		ret = dir ? walk(dir, &files) : -ENOMEM;
		free(dir);
		if (ret < 0) {
			vec_free(&files);
			goto out;
		}
		if (files.n == before)
			LOG_WARN("class '%s' has no image files (torchvision's ImageFolder refuses "
				 "such a tree; here the class keeps its index)", classes.v[c]);
		struct dpack_item *t = realloc(src->items, files.n * sizeof(*t) + 1);
		if (!t) {
			vec_free(&files);
			ret = -ENOMEM;
			goto out;
		}
		src->items = t;
		for (size_t i = before; i < files.n; i++) {
			memset(&t[i], 0, sizeof(t[i]));
			t[i].name = files.v[i];
			t[i].label = (int64_t)c;
		}
	}
	src->n = files.n;
	free(files.v);  /* the strings now belong to the items */
	src->nclasses = (uint32_t)classes.n;
	src->classes = classes.v;
	return 0;
out:
	vec_free(&classes);
	return ret;
}

static int folder_detect(const char *path, const struct stat *st)
{
	(void)path;
	return S_ISDIR(st->st_mode);
}

static int folder_locate(const struct dpack_src *s, uint64_t i, int *fd, uint64_t *off, uint64_t *len)
{
	struct stat st;

	*fd = open(s->items[i].name, O_RDONLY | O_CLOEXEC);
	if (*fd < 0 || fstat(*fd, &st) < 0) {
		int ret = -errno;
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		return ret;
	}
	*off = 0;
	*len = (uint64_t)st.st_size;
	return 0;
}

const struct dpack_input dpack_input_folder = {
	.name = "folder",
	.what = "a directory",
	.detect = folder_detect,
	.list = list_folder,
	.locate = folder_locate,
};
