/* dpk_open.c - opening a .dpk or a set of shards, and what an open one answers (formats/dpk.h;
 * the parts: formats/dpk_impl.h). */
#include "formats/dpk_impl.h"

/* ---- reader ---- */

static int check_header(const struct dpk_header *h, uint64_t st_size, char *err, size_t errlen)
{
	uint64_t end;

	if (memcmp(h->magic, DPK_MAGIC, 8) != 0)
		return err_set(err, errlen, -EBADMSG, "not a dpk file (bad magic)");
	if (h->version < DPK_VERSION_MIN || h->version > DPK_VERSION)
		return err_set(err, errlen, -EPROTO, "format version %u; this build reads versions "
			       "%u to %u", h->version, DPK_VERSION_MIN, DPK_VERSION);
	if (XXH3_64bits(h, offsetof(struct dpk_header, header_xxh3)) != h->header_xxh3)
		return err_set(err, errlen, -EBADMSG, "header checksum mismatch");
	if (h->header_size != DPK_HEADER_SIZE || h->entry_size != sizeof(struct dpk_entry) ||
	    h->data_offset != DPK_HEADER_SIZE)
		return err_set(err, errlen, -EBADMSG, "header: bad header_size, entry_size or data_offset");
	if (h->file_size != st_size)
		return err_set(err, errlen, -EBADMSG, "file is %llu bytes, header says %llu (truncated or appended to)",
			    (unsigned long long)st_size, (unsigned long long)h->file_size);
	if (h->count > UINT64_MAX / sizeof(struct dpk_entry) ||
	    h->index_size != h->count * sizeof(struct dpk_entry))
		return err_set(err, errlen, -EBADMSG, "header: index size does not match %llu samples",
			    (unsigned long long)h->count);
	/* version 1 had these bytes reserved (zero); version 2 names what it adds by a bit each */
	if (h->version == 1 && (h->features || h->aux_offset || h->aux_size || h->aux_xxh3 ||
				h->aux_fields || h->aux_max))
		return err_set(err, errlen, -EBADMSG, "header: reserved fields are not zero");
	if (h->features & ~DPK_FEATURES_KNOWN)
		return err_set(err, errlen, -EPROTO, "header: unknown features 0x%x (this build knows "
			       "0x1 aux fields, 0x2 no labels)", h->features & ~DPK_FEATURES_KNOWN);
	int aux = !!(h->features & DPK_FEAT_AUX);
	if (!aux && (h->aux_offset || h->aux_size || h->aux_xxh3 || h->aux_fields || h->aux_max))
		return err_set(err, errlen, -EBADMSG, "header: aux section fields without the aux "
			       "feature");
	if (aux && (h->aux_fields < 1 || h->aux_fields > DPK_AUX_FIELDS_MAX))
		return err_set(err, errlen, -EBADMSG, "header: %u aux fields (1..%u)", h->aux_fields,
			       DPK_AUX_FIELDS_MAX);
	if (aux && (h->aux_max < 4 * h->aux_fields || h->aux_max > DPK_AUX_RECORD_MAX))
		return err_set(err, errlen, -EBADMSG, "header: aux_max %u outside %u..%u (the bound "
			       "of a record's aux fields)", h->aux_max, 4 * h->aux_fields,
			       DPK_AUX_RECORD_MAX);
	if ((h->features & DPK_FEAT_NO_LABELS) && h->class_count)
		return err_set(err, errlen, -EBADMSG, "header: %u classes in a dataset without labels",
			       h->class_count);
	if (add_overflows(h->data_offset, h->data_size, &end) || end != h->classes_offset ||
	    add_overflows(h->classes_offset, h->classes_size, &end) || end != h->index_offset ||
	    add_overflows(h->index_offset, h->index_size, &end) ||
	    end != (aux ? h->aux_offset : h->file_size) ||
	    (aux && (add_overflows(h->aux_offset, h->aux_size, &end) || end != h->file_size)))
		return err_set(err, errlen, -EBADMSG, "header: sections do not tile the file");
	if (h->index_offset % DPK_INDEX_ALIGN)
		return err_set(err, errlen, -EBADMSG, "header: index offset %llu is not %u-byte aligned",
			    (unsigned long long)h->index_offset, DPK_INDEX_ALIGN);
	if (h->classes_size > CLASSES_SIZE_MAX || h->classes_size < 4ull * h->class_count)
		return err_set(err, errlen, -EBADMSG, "header: class table size %llu for %u classes",
			    (unsigned long long)h->classes_size, h->class_count);
	if (h->kinds & ~(uint32_t)((1u << (DPK_KIND_MAX + 1)) - 2))
		return err_set(err, errlen, -EBADMSG, "header: unknown record kinds 0x%x", h->kinds);
	return 0;
}

static int load_classes(struct dpk *d, char *err, size_t errlen)
{
	const struct dpk_header *h = &d->hdr;
	uint8_t *raw = NULL;
	int ret;

	if (h->class_count == 0 && h->classes_size == 0)
		return 0;
	raw = malloc(h->classes_size);
	/* Each name gains a NUL in place of its 4-byte length, so the blob never grows. */
	d->class_blob = malloc(h->classes_size);
	d->class_names = calloc(h->class_count ? h->class_count : 1, sizeof(char *));
	if (!raw || !d->class_blob || !d->class_names) {
		ret = err_set(err, errlen, -ENOMEM, "no memory for a class table of %llu bytes",
			   (unsigned long long)h->classes_size);
		goto out;
	}
	ret = pread_full(d->fd, raw, h->classes_size, h->classes_offset);
	if (ret < 0) {
		err_set(err, errlen, ret, "reading the class table: %s", strerror(-ret));
		goto out;
	}
	if (XXH3_64bits(raw, h->classes_size) != h->classes_xxh3) {
		ret = err_set(err, errlen, -EBADMSG, "class table checksum mismatch");
		goto out;
	}
	uint64_t pos = 0, out_pos = 0;
	for (uint32_t i = 0; i < h->class_count; i++) {
		uint32_t n;

		if (h->classes_size - pos < 4) {
			ret = err_set(err, errlen, -EBADMSG, "class table ends inside class %u", i);
			goto out;
		}
		memcpy(&n, raw + pos, 4);
		pos += 4;
		if (n > DPK_CLASS_NAME_MAX || n > h->classes_size - pos || memchr(raw + pos, 0, n)) {
			ret = err_set(err, errlen, -EBADMSG, "class %u: bad name length %u", i, n);
			goto out;
		}
		d->class_names[i] = d->class_blob + out_pos;
		memcpy(d->class_blob + out_pos, raw + pos, n);
		d->class_blob[out_pos + n] = '\0';
		out_pos += n + 1;
		pos += n;
	}
	/* Past the last name: fewer than DPK_INDEX_ALIGN bytes of zero padding, nothing else. */
	if (h->classes_size - pos >= DPK_INDEX_ALIGN)
		ret = err_set(err, errlen, -EBADMSG, "class table has %llu trailing bytes",
			   (unsigned long long)(h->classes_size - pos));
	for (; ret == 0 && pos < h->classes_size; pos++)
		if (raw[pos])
			ret = err_set(err, errlen, -EBADMSG, "class table padding is not zero");
out:
	free(raw);
	return ret;
}

/* ---- sets of shards (formats/dpkset.h) ---- */

static int is_manifest_fd(int fd)
{
	char head[sizeof(DPKSET_MAGIC) - 1];

	return pread_full(fd, head, sizeof(head), 0) == 0 && dpkset_is_manifest(head, sizeof(head));
}

/* Open shard @k of @d's manifest from @fd (the caller's: closed by the caller on failure; @own:
 * the shard's dpk closes it) and check it against its line. */
static int shard_from_fd(struct dpk *d, uint32_t k, int fd, int own, unsigned flags,
			 const char *name, char *err, size_t errlen)
{
	const struct dpkset_shard *sh = &d->set->shards[k];
	char why[256];
	struct stat st;
	uint8_t id[DPK_IDENTITY_SIZE];
	int ret;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return err_set(err, errlen, -EINVAL, "%s line %u: shard %s: not a regular file",
			       name, sh->line, sh->path);
	if (is_manifest_fd(fd))
		return err_set(err, errlen, -EBADMSG, "%s line %u: shard %s is a manifest itself "
			       "(sets do not nest)", name, sh->line, sh->path);
	if ((ret = dpk_open_fd(fd, flags, &d->shards[k], why, sizeof(why))) < 0)
		return err_set(err, errlen, ret, "%s line %u: shard %s: %s", name, sh->line, sh->path,
			       why);
	d->shards[k]->own_fd = own;
	dpk_identity(d->shards[k], id);
	if (d->slot && d->tmpl < 0)  /* the template: what later shards are checked against */
		return dpk_count(d->shards[k]) == sh->count && !memcmp(id, sh->id, sizeof(id)) ? 0 :
		       err_set(err, errlen, -EBADMSG, "%s line %u: shard %s does not match its "
			       "line (%llu samples; the manifest says %llu, or another identity)",
			       name, sh->line, sh->path,
			       (unsigned long long)dpk_count(d->shards[k]),
			       (unsigned long long)sh->count);
	/* a streamed set holds its template's class table and aux names itself */
	const struct dpk *ref = d->slot ? d : d->shards[0];
	const char *refpath = d->set->shards[d->slot ? (uint32_t)d->tmpl : 0].path;
	if (dpk_count(d->shards[k]) != sh->count)
		return err_set(err, errlen, -EBADMSG, "%s line %u: shard %s has %llu samples; the "
			       "manifest says %llu", name, sh->line, sh->path,
			       (unsigned long long)dpk_count(d->shards[k]), (unsigned long long)sh->count);
	if (memcmp(id, sh->id, sizeof(id))) {
		char hex[2 * DPK_IDENTITY_SIZE + 1];
		dpkset_hex(id, hex);
		return err_set(err, errlen, -EBADMSG, "%s line %u: shard %s has identity %s; the "
			       "manifest names another file (replaced or rewritten since)", name,
			       sh->line, sh->path, hex);
	}
	if (!dpk_same_classes(ref, d->shards[k]))
		return err_set(err, errlen, -EBADMSG, "%s line %u: shard %s has other class names "
			       "than shard %s", name, sh->line, sh->path, refpath);
	if (!dpk_same_aux(ref, d->shards[k]))
		return err_set(err, errlen, -EBADMSG, "%s line %u: shard %s has other aux fields or "
			       "labels than shard %s", name, sh->line, sh->path, refpath);
	return 0;
}

int dpk_same_classes(const struct dpk *a, const struct dpk *b)
{
	if (a->hdr.class_count != b->hdr.class_count)
		return 0;
	for (uint32_t c = 0; c < a->hdr.class_count; c++)  /* the table's checksum covers padding */
		if (strcmp(dpk_class_name(a, c), dpk_class_name(b, c)))
			return 0;
	return 1;
}

/* Open shard @k of @d's manifest by its path, relative to @dirfd, with this process's rights (the
 * tools, for their own user; loaderd never: its clients pass the shards open). */
static int shard_open(struct dpk *d, uint32_t k, int dirfd, unsigned flags, const char *name,
		      char *err, size_t errlen)
{
	const struct dpkset_shard *sh = &d->set->shards[k];
	/* non-blocking: a FIFO cannot hang the open; O_NOCTTY: a terminal never becomes ours */
	int ret, fd = openat(dirfd, sh->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

	if (fd < 0)
		return err_set(err, errlen, -errno, "%s line %u: shard %s: %s", name, sh->line,
			       sh->path, strerror(errno));
	ret = shard_from_fd(d, k, fd, 1, flags, name, err, errlen);
	if (ret < 0 && !d->shards[k])
		close(fd);
	return ret;
}

/* dpk_open_fd on a manifest: every shard opened (by path, or from @fds[0, nfds) when @fds is not
 * NULL) and checked against its line; the header is the shards' sums (count, data, index, file
 * sizes; kinds or-ed), the classes shard 0's. */
/* The manifest's path, through its descriptor (what messages call it, and where its shards
 * are). 0, or -errno. */
static int manifest_name(const struct dpk *d, char *name, size_t len)
{
	char self[64];

	snprintf(self, sizeof(self), "/proc/self/fd/%d", d->fd);
	ssize_t nl = readlink(self, name, len - 1);
	if (nl <= 0)
		return nl < 0 ? -errno : -ENOENT;
	name[nl] = '\0';
	return 0;
}

static int set_open(struct dpk *d, const struct stat *mst, const int *fds, uint32_t nfds,
		    unsigned flags, char *err, size_t errlen)
{
	char name[PATH_MAX];
	int ret;

	if ((ret = manifest_name(d, name, sizeof(name))) < 0)
		return err_set(err, errlen, -EBADF, "manifest: cannot tell its directory (%s)",
			       strerror(-ret));
	if ((ret = dpkset_read_fd(d->fd, (uint64_t)mst->st_size, name, &d->set, err, errlen)) < 0)
		return ret;
	if (fds && nfds != d->set->n)
		return err_set(err, errlen, -EINVAL, "%s names %u shards; %u were passed open", name,
			       d->set->n, nfds);
	if (flags & DPK__OPEN_NO_SHARDS) {  /* dpk_open_pending: each shard comes by attach */
		if (!(d->shards = calloc(d->set->n, sizeof(*d->shards))))
			return err_set(err, errlen, -ENOMEM, "out of memory");
		d->hdr.count = d->set->first[d->set->n];
		dpkset_identity(d->set, d->identity);
		return 0;
	}
	int dirfd = -1;
	if (!fds) {
		char dir[PATH_MAX];  /* readlink's path is absolute */
		snprintf(dir, sizeof(dir), "%s", name);
		char *slash = strrchr(dir, '/');
		if (slash)
			slash[slash == dir] = '\0';  /* "/d/m" -> "/d", "/m" -> "/" */
		dirfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);
		if (dirfd < 0)
			return err_set(err, errlen, -errno, "%s: its directory: %s", name,
				       strerror(errno));
	}
	d->shards = calloc(d->set->n, sizeof(*d->shards));
	if (!d->shards)
		ret = err_set(err, errlen, -ENOMEM, "out of memory");
	for (uint32_t k = 0; ret == 0 && k < d->set->n; k++)
		ret = fds ? shard_from_fd(d, k, fds[k], 0, flags, name, err, errlen) :
			    shard_open(d, k, dirfd, flags, name, err, errlen);
	if (dirfd >= 0)
		close(dirfd);
	if (ret < 0)
		return ret;
	struct dpk_header *h = &d->hdr;
	*h = d->shards[0]->hdr;
	h->count = h->data_size = h->index_size = h->file_size = 0;
	h->kinds = 0;
	for (uint32_t k = 0; k < d->set->n; k++) {
		const struct dpk_header *s = &d->shards[k]->hdr;
		h->count += s->count;
		h->data_size += s->data_size;
		h->index_size += s->index_size;
		h->file_size += s->file_size;
		h->kinds |= s->kinds;
		if (s->aux_max > h->aux_max)
			h->aux_max = s->aux_max;
	}
	dpkset_identity(d->set, d->identity);
	return 0;
}

/* A dpk with no resource held yet: every descriptor and slot -1, so that dpk_close on any
 * failure path closes only what was opened. */
static struct dpk *dpk_alloc(int fd)
{
	struct dpk *d = calloc(1, sizeof(*d));

	if (d) {
		d->fd = fd;
		d->index_fd = d->fd_direct = -1;
		d->guard_slot = d->data_slot = -1;
		d->tmpl = -1;
	}
	return d;
}

/* dpk_open_fd (@fds NULL: a set's shards by path) and dpk_open_fds (@fds: the shards, open). */
static int open_fd(int fd, const int *fds, uint32_t nfds, unsigned flags, struct dpk **out,
		   char *err, size_t errlen)
{
	struct dpk *d;
	struct stat st;
	int ret;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	if (fstat(fd, &st) < 0)
		return err_set(err, errlen, -errno, "stat: %s", strerror(errno));
	if (!S_ISREG(st.st_mode))
		return err_set(err, errlen, -EINVAL, "not a regular file");
	if (is_manifest_fd(fd)) {
		if (!(d = dpk_alloc(fd)))
			return err_set(err, errlen, -ENOMEM, "out of memory");
		if ((ret = set_open(d, &st, fds, nfds, flags, err, errlen)) < 0) {
			dpk_close(d);
			return ret;
		}
		*out = d;
		return 0;
	}
	if (fds && nfds)
		return err_set(err, errlen, -EINVAL, "%u shards were passed with a file that is not a "
			       "manifest", nfds);
	if ((uint64_t)st.st_size < DPK_HEADER_SIZE)
		return err_set(err, errlen, -EBADMSG, "file is %lld bytes, shorter than a header (%u)",
			    (long long)st.st_size, DPK_HEADER_SIZE);
	d = dpk_alloc(fd);
	if (!d)
		return err_set(err, errlen, -ENOMEM, "out of memory");
	/* The whole header block: the struct, then zeros up to DPK_HEADER_SIZE, so that no
	 * byte of it can change unnoticed. */
	uint8_t *block = malloc(DPK_HEADER_SIZE);
	if (!block) {
		ret = err_set(err, errlen, -ENOMEM, "out of memory");
		goto fail;
	}
	ret = pread_full(fd, block, DPK_HEADER_SIZE, 0);
	if (ret < 0) {
		free(block);
		err_set(err, errlen, ret, "reading the header: %s", strerror(-ret));
		goto fail;
	}
	memcpy(&d->hdr, block, sizeof(d->hdr));
	ret = check_header(&d->hdr, (uint64_t)st.st_size, err, errlen);
	for (size_t k = sizeof(d->hdr); ret == 0 && k < DPK_HEADER_SIZE; k++)
		if (block[k])
			ret = err_set(err, errlen, -EBADMSG, "header: nonzero byte %zu in the reserved block", k);
	free(block);
	if (ret < 0)
		goto fail;
	ret = load_classes(d, err, errlen);
	if (ret == 0)
		ret = dpk__load_aux_names(d, err, errlen);
	if (ret < 0)
		goto fail;
	/* Mapped: nothing walks the index here (open costs the same at any count); each entry is
	 * checked where it is used (dpk_entry_load). Copied: read into private memory, where a file
	 * truncated or rewritten later cannot raise SIGBUS or change an entry, and checked whole. */
	/* An index too large to map is read entry by entry: a mapping of it would come to hold
	 * most of it in our RSS (a fault maps the page cache's whole folio, up to 2 MiB, for one
	 * 64-byte entry), and a shuffled epoch touches all of it. */
	if (d->hdr.count && ((flags & DPK_OPEN_READ_INDEX) ||
			     ((flags & DPK_OPEN_MAP) && d->hdr.index_size > DPK_INDEX_MAP_MAX))) {
		char self[64];
		d->read_entries = 1;
		/* the same open file, through /proc: the advice is the description's, and the
		 * records' reads (on fd) keep their read-ahead */
		snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
		d->index_fd = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (d->index_fd >= 0)
			(void)posix_fadvise(d->index_fd, 0, 0, POSIX_FADV_RANDOM);
	}
	else if (!(flags & DPK_OPEN_MAP) || !d->hdr.count || dpk__map_index(d) < 0)
		ret = dpk__copy_index(d, flags, err, errlen);
	if (ret == 0 && d->index)  /* copied and checked whole: so are the aux entries */
		ret = dpk__copy_aux(d, flags, err, errlen);
	if (ret < 0)
		goto fail;
	if (flags & DPK_OPEN_MAP_DATA)
		dpk__map_data(d);  /* else records are read: dpk_record_copy says so */
	/* The header holds the index's and the class table's checksums (and is checksummed
	 * itself): their digest names the content (every record's checksum, offset, label and
	 * shape; not the path) for resume tokens, at the same cost whatever the count. Little-endian
	 * bytes, high half first. */
	/* Version 2 adds the aux section's checksum (every blob's checksum and place, the field
	 * names) and the features; a version 1 file keeps the identity it always had. */
	uint64_t key[6] = { d->hdr.index_xxh3, d->hdr.classes_xxh3, d->hdr.count, d->hdr.data_size,
			    d->hdr.aux_xxh3, d->hdr.features };
	size_t keylen = d->hdr.version == 1 ? 4 * sizeof(key[0]) : sizeof(key);
	XXH128_hash_t id = XXH3_128bits_withSeed(key, keylen, d->hdr.classes_xxh3 ^ d->hdr.count);
	for (int i = 0; i < 8; i++) {
		d->identity[i] = (uint8_t)(id.high64 >> (8 * i));
		d->identity[8 + i] = (uint8_t)(id.low64 >> (8 * i));
	}
	*out = d;
	return 0;
fail:
	dpk_close(d);
	return ret;
}

int dpk_open_fd(int fd, unsigned flags, struct dpk **out, char *err, size_t errlen)
{
	return open_fd(fd, NULL, 0, flags, out, err, errlen);
}

int dpk_open_fds(int fd, const int *shards, uint32_t nshards, unsigned flags, struct dpk **out,
		 char *err, size_t errlen)
{
	static const int none[1] = { -1 };

	return open_fd(fd, shards ? shards : none, shards ? nshards : 0, flags, out, err, errlen);
}

int dpk_open(const char *path, unsigned flags, struct dpk **out, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	int ret;

	*out = NULL;
	if (fd < 0)
		return err_set(err, errlen, -errno, "%s", strerror(errno));
	ret = dpk_open_fd(fd, flags, out, err, errlen);
	if (ret < 0) {
		close(fd);
		return ret;
	}
	(*out)->own_fd = 1;
	return 0;
}

unsigned dpk_fds(const struct dpk *d)
{
	unsigned n = 0;

	if (!d)
		return 0;
	if (d->set) {
		n += d->fd_direct >= 0;  /* dpk_direct_open's count is the shards' */
		for (uint32_t k = 0; d->shards && k < d->set->n; k++)
			n += dpk_fds(d->shards[k]) + (d->shards[k] && d->shards[k]->own_fd);
	}
	return n + (d->index_fd >= 0) + (!d->set && d->fd_direct >= 0);
}

void dpk_close(struct dpk *d)
{
	if (!d)
		return;
	if (d->set) {
		dpk_direct_close(d);
		for (uint32_t k = 0; d->shards && k < d->set->n; k++)
			dpk_close(d->shards[k]);
		free(d->shards);
		dpkset_manifest_destroy(d->set);
		if (d->slot) {
			free((void *)d->slot);
			pthread_mutex_destroy(&d->attach_mu);
		}
	}
	free(d->index);
	if (d->index_fd >= 0)
		close(d->index_fd);
	if (d->map_base) {
		dpk__guard_remove(d->guard_slot);
		munmap(d->map_base, d->map_len);
	}
	if (d->data_base) {
		dpk__guard_remove(d->data_slot);
		munmap(d->data_base, d->data_len);
	}
	if (d->own_fd)
		close(d->fd);
	free(d->class_names);
	free(d->class_blob);
	free(d->aux);
	free(d->aux_blob);
	free(d);
}

void dpk_identity(const struct dpk *d, uint8_t out[DPK_IDENTITY_SIZE])
{
	memcpy(out, d->identity, DPK_IDENTITY_SIZE);
}

uint64_t dpk_count(const struct dpk *d)
{
	return d->hdr.count;
}

uint32_t dpk_class_count(const struct dpk *d)
{
	return d->hdr.class_count;
}

const char *dpk_class_name(const struct dpk *d, uint32_t i)
{
	if (d->set && !d->slot)
		return dpk_class_name(d->shards[0], i);
	return i < d->hdr.class_count ? d->class_names[i] : NULL;
}

const struct dpk_header *dpk_header_get(const struct dpk *d)
{
	return &d->hdr;
}

int dpk_fd(const struct dpk *d)
{
	return d->fd;
}

int dpk_entry_fd(const struct dpk *d, const struct dpk_entry *e)
{
	if (d->set) {
		const struct dpk *s = e->reserved < d->set->n ? dpk__shard(d, e->reserved) : NULL;
		return s ? s->fd : -1;
	}
	return d->fd;
}

int dpk_direct_open(struct dpk *d)
{
	char self[64];

	if (!d->set || d->slot)
		return -ENOTSUP;
	for (uint32_t k = 0; k < d->set->n; k++) {
		struct dpk *s = d->shards[k];
		if (s->fd_direct >= 0)
			continue;
		/* the same file, reopened through /proc: not the path, which may name another by now */
		snprintf(self, sizeof(self), "/proc/self/fd/%d", s->fd);
		s->fd_direct = open(self, O_RDONLY | O_DIRECT | O_CLOEXEC | O_NOCTTY);
		if (s->fd_direct < 0) {
			int ret = -errno;
			dpk_direct_close(d);
			return ret;
		}
	}
	return 0;
}

void dpk_direct_close(struct dpk *d)
{
	for (uint32_t k = 0; d->set && d->shards && k < d->set->n; k++)
		if (d->shards[k] && d->shards[k]->fd_direct >= 0) {
			close(d->shards[k]->fd_direct);
			d->shards[k]->fd_direct = -1;
		}
}

int dpk_entry_fd_direct(const struct dpk *d, const struct dpk_entry *e)
{
	const struct dpk *s = d->set && e->reserved < d->set->n ? dpk__shard(d, e->reserved) : NULL;

	return s ? s->fd_direct : -1;
}

uint32_t dpk_shard_count(const struct dpk *d)
{
	return d->set ? d->set->n : 1;
}

const struct dpk *dpk_shard(const struct dpk *d, uint32_t k)
{
	if (!d->set)
		return k == 0 ? d : NULL;
	return k < d->set->n ? dpk__shard(d, k) : NULL;
}

const char *dpk_shard_path(const struct dpk *d, uint32_t k)
{
	return d->set && k < d->set->n ? d->set->shards[k].path : NULL;
}

uint64_t dpk_shard_first(const struct dpk *d, uint32_t k)
{
	if (!d->set)
		return k == 0 ? 0 : d->hdr.count;
	return d->set->first[k < d->set->n ? k : d->set->n];
}


/* ---- a set streamed: shards pending until attached (formats/dpk.h, docs/STREAMING.md) ----
 * DESIGN. Shard k's word slot[k] is DPK_SLOT_ATTACHED | pins. States: pending (0), attached
 * (ATTACHED | 0), pinned (ATTACHED | p, p > 0). attach: pending -> attached, a release CAS after
 * shards[k] and the shard's struct were written (under attach_mu, so two attaches of one shard
 * cannot both open it). hold: attached or pinned -> +1, an acquire CAS that fails on pending
 * (pairs with attach's release: the reader then sees the shard whole). release: -1, release
 * (pairs with detach's acquire CAS: the reader's last use happens before the close). detach:
 * exactly ATTACHED -> 0, an acquire CAS (under attach_mu), then shards[k] closed and cleared: no
 * hold can succeed after the CAS, and none was outstanding at it. */

int dpk_streamed(const struct dpk *d)
{
	return d->slot != NULL;
}

int dpk_open_pending(int fd, unsigned flags, struct dpk **out, char *err, size_t errlen)
{
	struct dpk *d;
	struct stat st;
	int ret;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	if (fstat(fd, &st) < 0)
		return err_set(err, errlen, -errno, "stat: %s", strerror(errno));
	if (!S_ISREG(st.st_mode) || !is_manifest_fd(fd))
		return err_set(err, errlen, -EINVAL, "not a set's manifest: only a set of shards "
			       "streams");
	if (!(d = dpk_alloc(fd)))
		return err_set(err, errlen, -ENOMEM, "out of memory");
	ret = set_open(d, &st, NULL, 0, flags | DPK__OPEN_NO_SHARDS, err, errlen);
	if (ret == 0 && (!(d->slot = calloc(d->set->n, sizeof(*d->slot))) ||
			 pthread_mutex_init(&d->attach_mu, NULL) != 0)) {
		free((void *)d->slot);
		d->slot = NULL;
		ret = err_set(err, errlen, -ENOMEM, "out of memory");
	}
	if (ret < 0) {
		dpk_close(d);
		return ret;
	}
	d->open_flags = flags;
	*out = d;
	return 0;
}

/* @n names @src[0, n) copied into one blob (*blob, freed by the caller) with @dst[i] into it. */
static int names_copy(const char *const *src, uint32_t n, char **blob, const char **dst)
{
	size_t len = 1, at = 0;

	for (uint32_t i = 0; i < n; i++)
		len += strlen(src[i]) + 1;
	if (!(*blob = malloc(len)))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		size_t l = strlen(src[i]) + 1;
		memcpy(*blob + at, src[i], l);
		dst[i] = *blob + at;
		at += l;
	}
	return 0;
}

/* The first attached shard @t becomes the set's template: its header (the set's count kept), its
 * class table and its aux names, copied (the set keeps them after @t is detached). */
static int take_template(struct dpk *d, uint32_t k, char *err, size_t errlen)
{
	const struct dpk *t = d->shards[k];
	uint64_t count = d->hdr.count;
	uint32_t nc = t->hdr.class_count;

	d->class_names = calloc(nc ? nc : 1, sizeof(char *));
	if (!d->class_names || names_copy(t->class_names, nc, &d->class_blob, d->class_names) < 0 ||
	    names_copy(t->aux_names, t->hdr.aux_fields, &d->aux_blob, d->aux_names) < 0)
		return err_set(err, errlen, -ENOMEM, "out of memory");
	d->hdr = t->hdr;
	d->hdr.count = count;
	d->tmpl = (int)k;
	d->tmpl_mapped = dpk_mapped(t);
	d->tmpl_data_mapped = dpk_data_mapped(t);
	return 0;
}

int dpk_shard_attach(struct dpk *d, uint32_t k, int fd, char *err, size_t errlen)
{
	char name[PATH_MAX];
	int ret;

	if (err && errlen)
		err[0] = '\0';
	if (!d->slot) {
		close(fd);
		return err_set(err, errlen, -EINVAL, "not a streamed set (dpk_open_pending)");
	}
	if (k >= d->set->n) {
		close(fd);
		return err_set(err, errlen, -ERANGE, "shard %u: the set has %u", k, d->set->n);
	}
	pthread_mutex_lock(&d->attach_mu);
	/* relaxed: attach_mu orders this against the other attaches and detaches */
	if (atomic_load_explicit(&d->slot[k], memory_order_relaxed)) {
		pthread_mutex_unlock(&d->attach_mu);
		close(fd);
		return err_set(err, errlen, -EEXIST, "shard %u (%s) is attached already", k,
			       d->set->shards[k].path);
	}
	if (manifest_name(d, name, sizeof(name)) < 0)
		snprintf(name, sizeof(name), "the manifest");
	ret = shard_from_fd(d, k, fd, 1, d->open_flags, name, err, errlen);
	if (ret == 0 && d->tmpl < 0)
		ret = take_template(d, k, err, errlen);
	else if (ret == 0 && d->tmpl_data_mapped && !dpk_data_mapped(d->shards[k]))
		ret = err_set(err, errlen, -ENOMEM, "%s line %u: shard %s: its records could not "
			      "be mapped (the set's are)", name, d->set->shards[k].line,
			      d->set->shards[k].path);
	if (ret < 0) {
		if (d->shards[k])
			dpk_close(d->shards[k]);  /* owns fd */
		else
			close(fd);
		d->shards[k] = NULL;
		pthread_mutex_unlock(&d->attach_mu);
		return ret;
	}
	uint64_t pending = 0;
	/* release: pairs with dpk__shard's and dpk_shard_hold's acquire */
	int ok = atomic_compare_exchange_strong_explicit(&d->slot[k], &pending, DPK_SLOT_ATTACHED,
							 memory_order_release, memory_order_relaxed);
	assert(ok);
	(void)ok;
	pthread_mutex_unlock(&d->attach_mu);
	return 0;
}

int dpk_shard_hold(struct dpk *d, uint32_t k)
{
	if (k >= dpk_shard_count(d))
		return -ERANGE;
	if (!d->slot)
		return 0;
	uint64_t w = atomic_load_explicit(&d->slot[k], memory_order_relaxed);
	do {
		if (!(w & DPK_SLOT_ATTACHED))
			return -EAGAIN;
		assert((w & ~DPK_SLOT_ATTACHED) < ~DPK_SLOT_ATTACHED);
	/* acquire: pairs with dpk_shard_attach's release CAS */
	} while (!atomic_compare_exchange_weak_explicit(&d->slot[k], &w, w + 1,
							memory_order_acquire,
							memory_order_relaxed));
	return 0;
}

void dpk_shard_release(struct dpk *d, uint32_t k)
{
	if (!d->slot || k >= d->set->n)
		return;
	/* release: pairs with dpk_shard_detach's acquire CAS */
	uint64_t was = atomic_fetch_sub_explicit(&d->slot[k], 1, memory_order_release);
	assert((was & DPK_SLOT_ATTACHED) && (was & ~DPK_SLOT_ATTACHED));
	(void)was;
}

int dpk_shard_detach(struct dpk *d, uint32_t k)
{
	if (!d->slot)
		return -EINVAL;
	if (k >= d->set->n)
		return -ERANGE;
	pthread_mutex_lock(&d->attach_mu);
	uint64_t w = DPK_SLOT_ATTACHED;
	/* acquire: pairs with dpk_shard_release's release (the last reader's use is done) */
	if (!atomic_compare_exchange_strong_explicit(&d->slot[k], &w, 0, memory_order_acquire,
						     memory_order_relaxed)) {
		pthread_mutex_unlock(&d->attach_mu);
		return w ? -EBUSY : -ENOENT;
	}
	dpk_close(d->shards[k]);
	d->shards[k] = NULL;
	pthread_mutex_unlock(&d->attach_mu);
	return 0;
}

int dpk_shard_attached(const struct dpk *d, uint32_t k)
{
	return k < dpk_shard_count(d) && (!d->set || dpk__shard(d, k) != NULL);
}

uint32_t dpk_shard_find(const struct dpk *d, uint64_t i)
{
	return d->set && i < d->hdr.count ? dpkset_find(d->set, i) : 0;
}
