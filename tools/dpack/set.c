/* set.c - sets of .dpk shards (formats/dpkset.h): dpack pack's output (struct dpack_out: one
 * .dpk, or with --shard-size shards cut between records as they come, beside the set's manifest)
 * and dpack append, which adds a shard to a set without repacking. Either writes the manifest
 * last, whole or not at all: a failed run leaves the set as it was and removes the shards it
 * wrote. */
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
 * (before its padding): the writer's layout (formats/dpk_write.c, dpk_writer_finish). */
static uint64_t shard_bytes(uint64_t count, uint64_t data, uint64_t classes)
{
	uint64_t end = DPK_HEADER_SIZE + data + classes;

	end = (end + DPK_INDEX_ALIGN - 1) / DPK_INDEX_ALIGN * DPK_INDEX_ALIGN;
	return end + count * sizeof(struct dpk_entry);
}

/* "dir/name.ext" -> "dir/name" into @stem; the base name's offset in *dirlen. */
static void stem_of(const char *out, char *stem, size_t len, size_t *dirlen)
{
	snprintf(stem, len, "%s", out);
	char *slash = strrchr(stem, '/');
	char *b = slash ? slash + 1 : stem;
	char *dot = strrchr(b, '.');
	if (dot && dot != b)
		*dot = '\0';
	*dirlen = (size_t)(b - stem);
}

struct dpack_out {
	char *path;                 /* OUT: the .dpk, or the set's manifest */
	uint64_t shard_size;        /* 0: one .dpk */
	uint64_t shard_records;     /* a shard's records at most; 0: no bound */
	unsigned flags;             /* DPK_WRITE_* */
	struct dpk_writer *w;       /* the file being written, or NULL between shards */
	char tmp[PATH_MAX + 64];    /* its temporary file (dpack_out_tmp_path: a stable buffer) */
	char stem[PATH_MAX];        /* a set: OUT less its extension; shards are STEM-NNNNN.dpk */
	size_t dirlen;              /* bytes of stem before the base name */
	char file[PATH_MAX + 32];   /* the shard being written */
	uint32_t nshard;            /* shards begun */
	uint64_t cnt, data;         /* the current shard's records and their bytes */
	uint64_t classes;           /* bytes of the class table, before its padding */
	uint64_t count;             /* records added in all */
	const char **names;         /* class names (copied), for every shard */
	uint32_t nc;
	const char *const *aux;     /* dpack_out_set_aux's (borrowed: they outlive the output) */
	uint32_t naux;
	int no_labels;
	struct dpkset_manifest *m;  /* the shards finished */
	uint32_t big;               /* records larger than shard_size alone */
	int finished;
};

int dpack_out_create(const char *path, uint64_t shard_size, unsigned shard_records, unsigned flags,
		     struct dpack_out **out)
{
	struct dpack_out *o = calloc(1, sizeof(*o));

	*out = NULL;
	if (!o || !(o->path = strdup(path))) {
		free(o);
		return -ENOMEM;
	}
	/* a bound on records alone: a set whose shards' bytes are not bounded */
	o->shard_size = shard_records && !shard_size ? UINT64_MAX >> 2 : shard_size;
	o->shard_records = shard_records;
	shard_size = o->shard_size;
	o->flags = flags;
	if (!shard_size) {  /* one .dpk: the writer as it is */
		int ret = dpk_writer_create(path, flags, &o->w);
		if (ret < 0) {
			dpack_out_destroy(o);
			return ret;
		}
		snprintf(o->tmp, sizeof(o->tmp), "%s", dpk_writer_tmp_path(o->w));
	} else if (!(o->m = dpkset_manifest_create())) {
		dpack_out_destroy(o);
		return -ENOMEM;
	}
	stem_of(path, o->stem, sizeof(o->stem), &o->dirlen);
	*out = o;
	return 0;
}

int dpack_out_set_classes(struct dpack_out *o, const char *const *names, uint32_t n)
{
	if (!o->shard_size)
		return dpk_writer_set_classes(o->w, names, n);
	o->names = calloc(n ? n : 1, sizeof(*o->names));
	if (!o->names)
		return -ENOMEM;
	for (uint32_t c = 0; c < n; c++) {
		if (!(o->names[c] = strdup(names[c])))
			return -ENOMEM;
		o->nc = c + 1;
		o->classes += 4 + strlen(names[c]);
	}
	return 0;
}

int dpack_out_set_aux(struct dpack_out *o, const char *const *names, uint32_t n, int no_labels)
{
	if (!o->shard_size)
		return dpk_writer_set_aux(o->w, names, n, no_labels);
	o->aux = names;
	o->naux = n;
	o->no_labels = no_labels;
	return 0;
}

/* The current shard finished and added to the manifest. */
static int shard_end(struct dpack_out *o)
{
	struct dpk *d;
	char err[256];
	uint8_t id[DPK_IDENTITY_SIZE];
	int ret = dpk_writer_finish(o->w);

	if (ret < 0) {
		LOG_ERROR("finishing %s: %s", o->file, strerror(-ret));
		return ret;
	}
	dpk_writer_destroy(o->w);
	o->w = NULL;
	if ((ret = dpk_open(o->file, DPK_OPEN_MAP, &d, err, sizeof(err))) < 0) {
		LOG_ERROR("%s: reading back: %s", o->file, err);
		return ret;
	}
	dpk_identity(d, id);
	ret = dpkset_manifest_add(o->m, o->file + o->dirlen, dpk_count(d), id, err, sizeof(err));
	dpk_close(d);
	if (ret < 0)
		LOG_ERROR("%s: %s", o->file, err);
	return ret;
}

/* A new shard begun. */
static int shard_begin(struct dpack_out *o)
{
	int ret;

	snprintf(o->file, sizeof(o->file), "%s-%05u.dpk", o->stem, o->nshard++);
	o->cnt = o->data = 0;
	if ((ret = dpk_writer_create(o->file, o->flags, &o->w)) < 0 ||
	    (o->nc && (ret = dpk_writer_set_classes(o->w, o->names, o->nc)) < 0) ||
	    ((o->naux || o->no_labels) &&
	     (ret = dpk_writer_set_aux(o->w, o->aux, o->naux, o->no_labels)) < 0)) {
		LOG_ERROR("%s: %s", o->file, strerror(-ret));
		return ret;
	}
	snprintf(o->tmp, sizeof(o->tmp), "%s", dpk_writer_tmp_path(o->w));
	return 0;
}

int dpack_out_expect(struct dpack_out *o, uint64_t count, uint64_t data)
{
	return o->shard_size ? 0 : dpk_writer_expect(o->w, count, data);
}

int dpack_out_add(struct dpack_out *o, const struct dpk_record *r)
{
	int ret;

	/* a record's bytes with its aux blob (the aux section's 24 bytes a sample are not counted:
	 * a shard may pass SIZE by them) */
	uint64_t len = r->length + dpk_aux_blob_size(o->naux, r->aux_len);
	if (o->shard_size) {
		if (o->w && o->cnt &&
		    (o->cnt == o->shard_records ||
		     shard_bytes(o->cnt + 1, o->data + len, o->classes) > o->shard_size) &&
		    (ret = shard_end(o)) < 0)
			return ret;
		if (!o->w && (ret = shard_begin(o)) < 0)
			return ret;
	}
	if ((ret = dpk_writer_add(o->w, r)) < 0)
		return ret;
	o->cnt++;
	o->data += len;
	o->count++;
	o->big += o->shard_size && o->cnt == 1 && shard_bytes(1, r->length, o->classes) > o->shard_size;
	return 0;
}

uint64_t dpack_out_count(const struct dpack_out *o)
{
	return o->count;
}

const char *dpack_out_tmp_path(const struct dpack_out *o)
{
	return o->tmp;
}

int dpack_out_finish(struct dpack_out *o)
{
	int ret;

	if (!o->shard_size)
		return dpk_writer_finish(o->w);
	if (!o->w)
		return -EINVAL;  /* no record: no set */
	if ((ret = shard_end(o)) < 0)
		return ret;
	if ((ret = dpkset_write(o->path, o->m)) < 0)
		return ret;
	o->finished = 1;
	if (o->big)
		LOG_WARN("%u records larger than --shard-size alone: each has a shard of its own",
			 o->big);
	if (o->shard_size == UINT64_MAX >> 2)
		printf("dpack pack: %s: %u shards of at most %llu records (%llu samples)\n", o->path,
		       o->m->n, (unsigned long long)o->shard_records, (unsigned long long)o->count);
	else
		printf("dpack pack: %s: %u shards of at most %llu bytes", o->path, o->m->n,
		       (unsigned long long)o->shard_size);
	if (o->shard_size != UINT64_MAX >> 2 && o->shard_records)
		printf(" and %llu records", (unsigned long long)o->shard_records);
	if (o->shard_size != UINT64_MAX >> 2)
		printf(" (%llu samples)\n", (unsigned long long)o->count);
	return 0;
}

void dpack_out_destroy(struct dpack_out *o)
{
	if (!o)
		return;
	dpk_writer_destroy(o->w);  /* its temporary file goes */
	if (o->shard_size && !o->finished)  /* nothing half-written: the shards of this run go */
		for (uint32_t k = 0; k < o->nshard; k++) {
			snprintf(o->file, sizeof(o->file), "%s-%05u.dpk", o->stem, k);
			unlink(o->file);
		}
	for (uint32_t c = 0; c < o->nc; c++)
		free((char *)o->names[c]);
	free(o->names);
	dpkset_manifest_destroy(o->m);
	free(o->path);
	free(o);
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
	if (!dpk_same_aux(s0, s)) {
		LOG_ERROR("%s: its aux fields or labels differ from those of set %s (%u fields there, "
			  "%s)", shard, set, dpk_aux_fields(s0), dpk_has_labels(s0) ? "labelled" :
			  "no labels");
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
