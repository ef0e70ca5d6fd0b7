/* set.c - sets of .dpk shards (formats/dpkset.h): dpack pack --shard-size cuts a packed dataset
 * into shards beside its manifest (dpack_split), dpack append adds a shard to a set without
 * repacking. Either writes the manifest last, whole or not at all: a failed run leaves the set as
 * it was (and removes the shards it wrote). */
#include "common/log.h"
#include "formats/dpk.h"
#include "formats/dpkset.h"
#include "tools/dpack/dpack.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A shard's file size with @count records of @data bytes and a class table of @classes bytes
 * (before its padding): the writer's layout (formats/dpk.c, dpk_writer_finish). */
static uint64_t shard_bytes(uint64_t count, uint64_t data, uint64_t classes)
{
	uint64_t end = DPK_HEADER_SIZE + data + classes;

	end = (end + DPK_INDEX_ALIGN - 1) / DPK_INDEX_ALIGN * DPK_INDEX_ALIGN;
	return end + count * sizeof(struct dpk_entry);
}

/* "dir/name.ext" -> "dir/name" into @stem; the base name's part in *base. */
static void stem_of(const char *out, char *stem, size_t len, const char **base)
{
	snprintf(stem, len, "%s", out);
	char *slash = strrchr(stem, '/');
	char *b = slash ? slash + 1 : stem;
	char *dot = strrchr(b, '.');
	if (dot && dot != b)
		*dot = '\0';
	*base = out + (b - stem);
}

/* One shard written: its path (as the manifest names it) and identity added to @m. */
static int add_written(struct dpkset_manifest *m, const char *file, const char *rel)
{
	struct dpk *d;
	char err[256];
	uint8_t id[DPK_IDENTITY_SIZE];
	int ret = dpk_open(file, DPK_OPEN_MAP, &d, err, sizeof(err));

	if (ret < 0) {
		LOG_ERROR("%s: reading back: %s", file, err);
		return ret;
	}
	dpk_identity(d, id);
	ret = dpkset_manifest_add(m, rel, dpk_count(d), id, err, sizeof(err));
	dpk_close(d);
	if (ret < 0)
		LOG_ERROR("%s: %s", file, err);
	return ret;
}

int dpack_split(const char *whole, const char *out, uint64_t shard_size, unsigned wflags)
{
	struct dpk *d = NULL;
	struct dpk_writer *w = NULL;
	struct dpkset_manifest *m = dpkset_manifest_create();
	char err[512], stem[PATH_MAX], file[PATH_MAX + 32];
	const char *base;
	uint8_t *buf = NULL;
	size_t cap = 0;
	uint32_t nshard = 0, big = 0;
	uint64_t cnt = 0, data = 0, classes = 0;
	int ret = m ? 0 : -ENOMEM;

	stem_of(out, stem, sizeof(stem), &base);
	size_t dirlen = (size_t)(base - out);
	if (ret == 0 && (ret = dpk_open(whole, 0, &d, err, sizeof(err))) < 0)
		LOG_ERROR("%s: %s", whole, err);
	uint32_t nc = d ? dpk_class_count(d) : 0;
	const char **names = d ? calloc(nc + 1, sizeof(*names)) : NULL;
	if (ret == 0 && !names)
		ret = -ENOMEM;
	for (uint32_t c = 0; ret == 0 && c < nc; c++) {
		names[c] = dpk_class_name(d, c);
		classes += 4 + strlen(names[c]);
	}
	for (uint64_t i = 0; ret == 0 && i < dpk_count(d); i++) {
		const struct dpk_entry *e = dpk_entry_get(d, i);
		if (w && cnt && shard_bytes(cnt + 1, data + e->length, classes) > shard_size) {
			if ((ret = dpk_writer_finish(w)) < 0 || (ret = add_written(m, file,
									file + dirlen)) < 0)
				break;
			dpk_writer_destroy(w);
			w = NULL;
		}
		if (!w) {
			snprintf(file, sizeof(file), "%s-%05u.dpk", stem, nshard++);
			cnt = data = 0;
			if ((ret = dpk_writer_create(file, wflags, &w)) < 0 ||
			    (nc && (ret = dpk_writer_set_classes(w, names, nc)) < 0)) {
				LOG_ERROR("%s: %s", file, strerror(-ret));
				break;
			}
		}
		if (cap < e->length) {
			free(buf);
			cap = e->length;
			if (!(buf = malloc(cap))) {
				ret = -ENOMEM;
				break;
			}
		}
		ssize_t n = dpk_read_entry(d, e, buf, cap);
		if (n < 0) {
			ret = (int)n;
			LOG_ERROR("%s: sample %llu: %s", whole, (unsigned long long)i, strerror(-ret));
			break;
		}
		struct dpk_record r = { .kind = e->kind, .label = e->label, .data = buf,
					.length = e->length, .ndim = e->ndim, .subsamp = e->subsamp,
					.flags = e->flags, .xxh3 = e->xxh3, .has_xxh3 = 1 };
		memcpy(r.shape, e->shape, sizeof(r.shape));
		if ((ret = dpk_writer_add(w, &r)) < 0) {
			LOG_ERROR("writing %s: %s", dpk_writer_tmp_path(w), strerror(-ret));
			break;
		}
		cnt++;
		data += e->length;
		big += cnt == 1 && shard_bytes(1, e->length, classes) > shard_size;
	}
	if (ret == 0 && w && (ret = dpk_writer_finish(w)) == 0)
		ret = add_written(m, file, file + dirlen);
	else if (ret == 0 && !w)
		ret = -ENOENT;
	if (ret == 0 && (ret = dpkset_write(out, m)) < 0)
		LOG_ERROR("writing the manifest %s: %s", out, strerror(-ret));
	if (ret == 0 && big)
		LOG_WARN("%u records larger than --shard-size alone: each has a shard of its own", big);
	dpk_writer_destroy(w);
	if (ret < 0)  /* nothing half-written: the shards of this run go too */
		for (uint32_t k = 0; k < nshard; k++) {
			snprintf(file, sizeof(file), "%s-%05u.dpk", stem, k);
			unlink(file);
		}
	else
		printf("dpack pack: %s: %u shards of at most %llu bytes (%llu samples)\n", out,
		       m->n, (unsigned long long)shard_size, (unsigned long long)m->first[m->n]);
	free(buf);
	free(names);
	dpk_close(d);
	dpkset_manifest_destroy(m);
	return ret;
}

/* ---- dpack append ---- */

static const char append_usage[] =
	"usage: dpack append SET SHARD.dpk\n"
	"\n"
	"Add SHARD.dpk at the end of the set whose manifest is SET (docs/FORMAT.md), without\n"
	"repacking; SET is made when it does not exist. SHARD must lie in SET's directory or below\n"
	"it, have the set's class names and, for records delivered as stored (raw tensors), the\n"
	"kind and shape of the set's sample 0. The manifest is rewritten whole or not at all.\n";

/* @shard's path relative to @manifest's directory, into @rel: both resolved; the shard must lie
 * in that directory or below it. 0 or -EINVAL (logged). */
static int relative(const char *manifest, const char *shard, char *rel, size_t len)
{
	char dir[PATH_MAX], mdir[PATH_MAX], real[PATH_MAX];

	snprintf(dir, sizeof(dir), "%s", manifest);
	char *slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir] = '\0';
	if (!realpath(slash ? dir : ".", mdir) || !realpath(shard, real)) {
		LOG_ERROR("%s: %s", shard, strerror(errno));
		return -errno;
	}
	size_t ml = strlen(mdir);
	if (strncmp(real, mdir, ml) || (real[ml] != '/' && strcmp(mdir, "/"))) {
		LOG_ERROR("%s lies outside %s, the manifest's directory: a set's shards lie there or "
			  "below it", shard, mdir);
		return -EINVAL;
	}
	snprintf(rel, len, "%s", real + ml + (strcmp(mdir, "/") ? 1 : 0));
	return 0;
}

/* May @s join the set whose first shard is @s0? 0 or -EINVAL (logged). */
static int compatible(const char *set, const struct dpk *s0, const char *shard, const struct dpk *s)
{
	struct dpk_entry e0, e;

	if (!dpk_same_classes(s0, s)) {
		LOG_ERROR("%s: its class names differ from those of set %s (%u classes there)", shard,
			  set, dpk_class_count(s0));
		return -EINVAL;
	}
	if (dpk_entry_load(s0, 0, &e0, NULL, 0) < 0 || dpk_entry_load(s, 0, &e, NULL, 0) < 0)
		return -EBADMSG;
	int image0 = !!(dpk_kind_info(e0.kind)->flags & DPK_KF_IMAGE);
	int image = !!(dpk_kind_info(e.kind)->flags & DPK_KF_IMAGE);
	if (image0 != image || (!image && (e.kind != e0.kind || e.ndim != e0.ndim ||
					   memcmp(e.shape, e0.shape, sizeof(e.shape))))) {
		LOG_ERROR("%s: sample 0 is a %s record of another shape than the set %s's (%s): a "
			  "job could not deliver both as stored", shard, dpk_kind_name(e.kind), set,
			  dpk_kind_name(e0.kind));
		return -EINVAL;
	}
	return 0;
}

int dpack_append_main(int argc, char **argv)
{
	struct dpk *set = NULL, *s = NULL;
	struct dpkset_manifest *m = NULL;
	char err[DPKSET_PATH_MAX + 512], rel[PATH_MAX];
	uint8_t id[DPK_IDENTITY_SIZE];
	int status = 1;

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		fputs(append_usage, stdout);
		return 0;
	}
	if (argc != 3) {
		fputs(append_usage, stderr);
		return 2;
	}
	const char *mpath = argv[1], *spath = argv[2];
	if (dpk_open(spath, 0, &s, err, sizeof(err)) < 0) {
		LOG_ERROR("%s: %s", spath, err);
		goto out;
	}
	if (dpk_shard_path(s, 0)) {
		LOG_ERROR("%s is a manifest: append its shards one by one (sets do not nest)", spath);
		goto out;
	}
	if (relative(mpath, spath, rel, sizeof(rel)) < 0)
		goto out;
	if (access(mpath, F_OK) == 0) {  /* the set as it is, every shard checked */
		FILE *f;
		if (dpk_open(mpath, DPK_OPEN_MAP, &set, err, sizeof(err)) < 0) {
			LOG_ERROR("%s", err);
			goto out;
		}
		if (!dpk_shard_path(set, 0)) {
			LOG_ERROR("%s is a .dpk, not a manifest", mpath);
			goto out;
		}
		if (compatible(mpath, dpk_shard(set, 0), spath, s) < 0)
			goto out;
		/* The manifest's own lines, kept as they are (read again: dpk owns its copy). */
		if (!(f = fopen(mpath, "re"))) {
			LOG_ERROR("%s: %s", mpath, strerror(errno));
			goto out;
		}
		char *text = NULL;
		size_t cap = 0;
		ssize_t n = getdelim(&text, &cap, '\0', f);
		fclose(f);
		int ret = n < 0 ? -EIO : dpkset_parse(text, (size_t)n, mpath, &m, err, sizeof(err));
		free(text);
		if (ret < 0) {
			LOG_ERROR("%s", n < 0 ? mpath : err);
			goto out;
		}
	} else if (errno != ENOENT || !(m = dpkset_manifest_create())) {
		LOG_ERROR("%s: %s", mpath, strerror(errno));
		goto out;
	}
	dpk_identity(s, id);
	if (dpkset_manifest_add(m, rel, dpk_count(s), id, err, sizeof(err)) < 0) {
		LOG_ERROR("%s: %s", mpath, err);
		goto out;
	}
	int ret = dpkset_write(mpath, m);
	if (ret < 0) {
		LOG_ERROR("writing %s: %s", mpath, strerror(-ret));
		goto out;
	}
	printf("dpack append: %s: shard %u is %s (%llu samples), %llu samples in all\n", mpath, m->n,
	       rel, (unsigned long long)dpk_count(s), (unsigned long long)m->first[m->n]);
	status = 0;
out:
	dpk_close(s);
	dpk_close(set);
	dpkset_manifest_destroy(m);
	return status;
}
