/* dpk_write.c - the .dpk writer (formats/dpk.h; the parts: formats/dpk_impl.h). It streams
 * records into a temporary file beside the target, keeps the index in memory (64 bytes a sample,
 * spilled past IDX_CHUNK entries), and on finish appends class table and index, writes the
 * header last, fsyncs and renames: the target path either holds a complete dataset or is
 * untouched. */
#include "formats/dpk_impl.h"

/* ---- writer ---- */

#define WBUF_SIZE (4u << 20)
#define DIRECT_MIN (64u << 10)      /* records this large skip wbuf */
#define WRITEBACK_STEP (32u << 20)  /* start writeback every this many bytes */
#define IDX_CHUNK 65536u            /* index entries held in memory (4 MiB); older ones are
				     * spilled to a file of their own, so memory does not grow
				     * with the count */

struct dpk_writer {
	struct afile f;         /* the temporary file, renamed over the target by finish */
	int failed;             /* sticky error: only destroy is accepted */
	int finished;
	int no_sync;            /* DPK_WRITE_NO_SYNC */
	uint64_t pos;           /* bytes written to fd so far (buffer included) */
	uint64_t synced;        /* writeback started for [0, synced) */
	uint8_t *wbuf;
	size_t wlen;
	struct dpk_entry *index; /* entries [spilled, count): at most IDX_CHUNK */
	uint64_t count, cap;
	int spill_fd;           /* entries [0, spilled), an unnamed file beside the target, or -1 */
	uint64_t spilled;
	XXH3_state_t *ixh;      /* the index checksum over the spilled entries (with spill_fd, or
				 * index_at) */
	uint64_t expect_count;  /* dpk_writer_expect: the records to come, and ... */
	uint64_t expect_data;   /* ... their bytes */
	uint64_t index_at;      /* when expected: where the index goes, the entries spilled into
				 * their place in the file itself (no spill file), else 0 */
	char *classes;          /* encoded class table */
	uint64_t classes_size;
	uint32_t class_count;
	uint32_t kinds;
	/* Aux fields (dpk_writer_set_aux): the names encoded as on disk, with their padding; the
	 * entries in memory (24 bytes a sample, not spilled) */
	uint32_t features;      /* DPK_FEAT_* */
	uint32_t aux_fields;
	uint8_t *aux_names;
	uint64_t aux_names_size;
	struct dpk_aux_entry *aux;
	uint64_t aux_cap;
	uint32_t aux_max;
	uint8_t *aux_buf;       /* one record's blob, DPK_AUX_RECORD_MAX bytes */
};

/* Start writeback of what has been written so far without waiting for it, so that the fsync in
 * finish has little left to do: packing then costs max(read + hash, disk write), not their sum. */
static void writeback(struct dpk_writer *w, uint64_t file_pos)
{
	if (!w->no_sync && file_pos - w->synced >= WRITEBACK_STEP) {
		(void)sync_file_range(w->f.fd, (off_t)w->synced, (off_t)(file_pos - w->synced),
				      SYNC_FILE_RANGE_WRITE);
		w->synced = file_pos;
	}
}

static int wflush(struct dpk_writer *w)
{
	int ret = fd_write_all(w->f.fd, w->wbuf, w->wlen);

	w->wlen = 0;
	if (ret == 0)
		writeback(w, w->pos);
	return ret;
}

/* Small records are gathered in wbuf; large ones are written from the caller's buffer, which
 * saves a copy of most of the bytes (JPEGs average ~100 KiB). */
static int wappend(struct dpk_writer *w, const void *data, uint64_t len)
{
	int ret;

	if (len == 0)
		return 0;
	if (len >= DIRECT_MIN || len > WBUF_SIZE - w->wlen) {
		ret = wflush(w);
		if (ret < 0)
			return ret;
	}
	if (len >= DIRECT_MIN) {
		ret = fd_write_all(w->f.fd, data, len);
		if (ret < 0)
			return ret;
		w->pos += len;
		writeback(w, w->pos);
		return 0;
	}
	memcpy(w->wbuf + w->wlen, data, len);
	w->wlen += len;
	w->pos += len;
	return 0;
}

static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Move the IDX_CHUNK entries in memory to their place in the file when its layout is known
 * (dpk_writer_expect), else to the spill file (made the first time: O_TMPFILE in the target's
 * directory, else a named one unlinked at once). 0 or -errno. */
static int spill(struct dpk_writer *w)
{
	uint64_t n = w->count - w->spilled;

	if (w->index_at) {
		if (!w->ixh) {
			w->ixh = XXH3_createState();
			if (!w->ixh)
				return -ENOMEM;
			XXH3_64bits_reset(w->ixh);
		}
		int ret = pwrite_all(w->f.fd, w->index, n * sizeof(*w->index),
				     w->index_at + w->spilled * sizeof(*w->index));
		if (ret < 0)
			return ret;
		XXH3_64bits_update(w->ixh, w->index, n * sizeof(*w->index));
		w->spilled += n;
		return 0;
	}
	if (w->spill_fd < 0) {
		char dir[4096];
		const char *slash = strrchr(w->f.tmp, '/');

		if (snprintf(dir, sizeof(dir), "%s", slash ? w->f.tmp : ".") >= (int)sizeof(dir))
			return -ENAMETOOLONG;
		if (slash)  /* the directory: up to the last slash ("/" for a file in the root) */
			dir[slash == w->f.tmp ? 1 : slash - w->f.tmp] = '\0';
		w->spill_fd = open(dir, O_RDWR | O_TMPFILE | O_CLOEXEC | O_NOCTTY, 0600);
		if (w->spill_fd < 0) {
			char name[4200];
			snprintf(name, sizeof(name), "%s.idx.XXXXXX", w->f.tmp);
			w->spill_fd = mkostemp(name, O_CLOEXEC);
			if (w->spill_fd < 0)
				return -errno;
			unlink(name);
		}
		w->ixh = XXH3_createState();
		if (!w->ixh)
			return -ENOMEM;
		XXH3_64bits_reset(w->ixh);
	}
	int ret = fd_write_all(w->spill_fd, w->index, n * sizeof(*w->index));
	if (ret < 0)
		return ret;
	XXH3_64bits_update(w->ixh, w->index, n * sizeof(*w->index));
	w->spilled += n;
	return 0;
}

/* Append the spilled entries to the file, in WBUF_SIZE blocks through wbuf. 0 or -errno. */
static int unspill(struct dpk_writer *w)
{
	uint64_t left = w->spilled * sizeof(struct dpk_entry), off = 0;
	int ret = wflush(w);

	while (ret == 0 && left) {
		size_t k = left < WBUF_SIZE ? (size_t)left : WBUF_SIZE;
		ssize_t n = pread(w->spill_fd, w->wbuf, k, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		ret = fd_write_all(w->f.fd, w->wbuf, (size_t)n);
		w->pos += (uint64_t)n;
		off += (uint64_t)n;
		left -= (uint64_t)n;
	}
	return ret;
}

int dpk_writer_create(const char *path, unsigned flags, struct dpk_writer **out)
{
	struct dpk_writer *w = calloc(1, sizeof(*w));
	int ret = -ENOMEM;

	*out = NULL;
	if (!w)
		return -ENOMEM;
	w->f.fd = -1;
	w->spill_fd = -1;
	w->no_sync = flags & DPK_WRITE_NO_SYNC;
	w->wbuf = malloc(WBUF_SIZE);
	if (!w->wbuf)
		goto fail;
	ret = afile_open(&w->f, path, w->no_sync ? AFILE_NO_SYNC : 0);
	if (ret < 0)
		goto fail;
	/* The header is written last; reserve its block now. */
	memset(w->wbuf, 0, DPK_HEADER_SIZE);
	w->wlen = DPK_HEADER_SIZE;
	w->pos = DPK_HEADER_SIZE;
	*out = w;
	return 0;
fail:
	dpk_writer_destroy(w);
	return ret;
}

/* The class table's zero padding that puts the index on a DPK_INDEX_ALIGN boundary after a data
 * section ending at @pos. */
static uint64_t classes_pad(const struct dpk_writer *w, uint64_t pos)
{
	return (DPK_INDEX_ALIGN - (pos + w->classes_size) % DPK_INDEX_ALIGN) % DPK_INDEX_ALIGN;
}

int dpk_writer_expect(struct dpk_writer *w, uint64_t count, uint64_t data_size)
{
	uint64_t end;

	if (w->failed || w->finished || w->count || w->index_at ||
	    __builtin_add_overflow(data_size, (uint64_t)DPK_HEADER_SIZE, &end) ||
	    __builtin_add_overflow(end, w->classes_size + DPK_INDEX_ALIGN, &end) ||
	    count > (UINT64_MAX - end) / sizeof(struct dpk_entry))
		return -EINVAL;
	w->expect_count = count;
	w->expect_data = data_size;
	w->index_at = DPK_HEADER_SIZE + data_size + w->classes_size +
		      classes_pad(w, DPK_HEADER_SIZE + data_size);
	return 0;
}

/* @names[0, n) into @out as the format lays out a name table (the class table, the aux field
 * names): each a u32 length, then its bytes. */
static void put_names(void *out, const char *const *names, uint32_t n)
{
	uint8_t *t = out;
	uint64_t pos = 0;

	for (uint32_t k = 0; k < n; k++) {
		uint32_t len = (uint32_t)strlen(names[k]);
		memcpy(t + pos, &len, 4);
		memcpy(t + pos + 4, names[k], len);
		pos += 4 + len;
	}
}

int dpk_writer_set_classes(struct dpk_writer *w, const char *const *names, uint32_t n)
{
	uint64_t size = 0;
	char *t;

	if (w->index_at)
		return -EINVAL;  /* the index's place depends on the table's size */

	for (uint32_t i = 0; i < n; i++) {
		size_t len = strlen(names[i]);
		if (len > DPK_CLASS_NAME_MAX)
			return -EINVAL;
		size += 4 + len;
	}
	if (size > CLASSES_SIZE_MAX)
		return -EINVAL;
	t = malloc(size ? size : 1);
	if (!t)
		return -ENOMEM;
	put_names(t, names, n);
	free(w->classes);
	w->classes = t;
	w->classes_size = size;
	w->class_count = n;
	return 0;
}

int dpk_writer_set_aux(struct dpk_writer *w, const char *const *names, uint32_t n, int no_labels)
{
	uint64_t size = 0;

	if (w->failed || w->finished || w->count || n > DPK_AUX_FIELDS_MAX)
		return -EINVAL;
	for (uint32_t k = 0; k < n; k++) {
		size_t len = strlen(names[k]);
		if (len < 1 || len > DPK_AUX_NAME_MAX ||
		    strspn(names[k], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				     "0123456789_.-") != len)
			return -EINVAL;
		for (uint32_t j = 0; j < k; j++)
			if (!strcmp(names[j], names[k]))
				return -EINVAL;
		size += 4 + len;
	}
	size = (size + 7) & ~7ull;
	uint8_t *t = calloc(1, size ? size : 1);
	uint8_t *buf = n ? malloc(DPK_AUX_RECORD_MAX) : NULL;
	if (!t || (n && !buf)) {
		free(t);
		free(buf);
		return -ENOMEM;
	}
	put_names(t, names, n);
	free(w->aux_names);
	free(w->aux_buf);
	w->aux_names = t;
	w->aux_names_size = size;
	w->aux_buf = buf;
	w->aux_fields = n;
	w->features = (n ? DPK_FEAT_AUX : 0) | (no_labels ? DPK_FEAT_NO_LABELS : 0);
	return 0;
}

/* Encode @r's aux fields into w->aux_buf: its length, or -EMSGSIZE (a field or the whole past
 * its bound). */
static int64_t aux_encode(struct dpk_writer *w, const struct dpk_record *r)
{
	uint64_t n = 4ull * w->aux_fields;

	for (uint32_t k = 0; k < w->aux_fields; k++)
		if (r->aux_len[k] > DPK_AUX_FIELD_MAX)
			return -EMSGSIZE;
	if (dpk_aux_blob_size(w->aux_fields, r->aux_len) > DPK_AUX_RECORD_MAX)
		return -EMSGSIZE;
	for (uint32_t k = 0; k < w->aux_fields; k++) {
		memcpy(w->aux_buf + 4 * k, &r->aux_len[k], 4);
		if (r->aux_len[k])
			memcpy(w->aux_buf + n, r->aux[k], r->aux_len[k]);
		n += r->aux_len[k];
	}
	return (int64_t)n;
}

int dpk_writer_add(struct dpk_writer *w, const struct dpk_record *r)
{
	const char *why;
	uint64_t raw_size;
	int64_t alen = 0;
	int ret;

	if (w->failed || w->finished)
		return -EINVAL;
	if (w->aux_fields && (alen = aux_encode(w, r)) < 0)
		return (int)alen;
	if (w->index_at && (w->count == w->expect_count ||
			    r->length > w->expect_data - (w->pos - DPK_HEADER_SIZE) ||
			    (uint64_t)alen > w->expect_data - (w->pos - DPK_HEADER_SIZE) - r->length))
		return -EINVAL;  /* more than dpk_writer_expect said */
	if (dpk__shape_check(r->kind, r->ndim, r->shape, r->subsamp, &raw_size, &why) < 0 ||
	    r->length == 0 || r->length > DPK_RECORD_MAX ||
	    ((dpk_kind_info(r->kind)->flags & DPK_KF_STORED_RAW) && r->length != raw_size) ||
	    (r->flags & ~DPK_F_PROGRESSIVE))
		return -EINVAL;
	if (w->count - w->spilled == IDX_CHUNK && (ret = spill(w)) < 0) {
		w->failed = 1;
		return ret;
	}
	if (w->count - w->spilled == w->cap) {
		uint64_t cap = w->cap ? w->cap * 2 : 1024;
		struct dpk_entry *t = NULL;

		if (cap <= SIZE_MAX / sizeof(*t))
			t = realloc(w->index, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		w->index = t;
		w->cap = cap;
	}
	if (w->aux_fields && w->count == w->aux_cap) {
		uint64_t cap = w->aux_cap ? w->aux_cap * 2 : 1024;
		struct dpk_aux_entry *t = NULL;

		if (cap <= SIZE_MAX / sizeof(*t))
			t = realloc(w->aux, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		w->aux = t;
		w->aux_cap = cap;
	}
	struct dpk_entry *e = &w->index[w->count - w->spilled];
	memset(e, 0, sizeof(*e));
	e->offset = w->pos;
	e->length = r->length;
	e->label = (w->features & DPK_FEAT_NO_LABELS) ? -1 : r->label;
	e->xxh3 = r->has_xxh3 ? r->xxh3 : XXH3_64bits(r->data, r->length);
	e->raw_size = raw_size;
	memcpy(e->shape, r->shape, sizeof(e->shape));
	e->kind = (uint8_t)r->kind;
	e->ndim = r->ndim;
	e->subsamp = r->subsamp;
	e->flags = r->flags;
	ret = wappend(w, r->data, r->length);
	if (ret == 0 && w->aux_fields) {  /* the blob right after its record */
		struct dpk_aux_entry *a = &w->aux[w->count];
		memset(a, 0, sizeof(*a));
		a->offset = w->pos;
		a->length = (uint32_t)alen;
		a->xxh3 = XXH3_64bits(w->aux_buf, (size_t)alen);
		if ((uint32_t)alen > w->aux_max)
			w->aux_max = (uint32_t)alen;
		ret = wappend(w, w->aux_buf, (uint64_t)alen);
	}
	if (ret < 0) {
		w->failed = 1;
		return ret;
	}
	w->kinds |= 1u << r->kind;
	w->count++;
	return 0;
}

uint64_t dpk_writer_count(const struct dpk_writer *w)
{
	return w->count;
}

const char *dpk_writer_tmp_path(const struct dpk_writer *w)
{
	return w->f.tmp;
}

int dpk_writer_finish(struct dpk_writer *w)
{
	struct dpk_header h;
	int ret;

	if (w->failed || w->finished)
		return -EINVAL;
	if (w->index_at && (w->count != w->expect_count ||
			    w->pos - DPK_HEADER_SIZE != w->expect_data)) {
		w->failed = 1;  /* fewer than dpk_writer_expect said: spilled entries lie elsewhere */
		return -EINVAL;
	}
	/* The index starts on a DPK_INDEX_ALIGN boundary so that a mapped entry is naturally
	 * aligned: the class table takes zero padding at its end (covered by its checksum). */
	uint64_t pad = classes_pad(w, w->pos);
	if (pad) {
		char *t = realloc(w->classes, w->classes_size + pad);
		if (!t)
			return -ENOMEM;
		memset(t + w->classes_size, 0, pad);
		w->classes = t;
		w->classes_size += pad;
	}
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, DPK_MAGIC, 8);
	h.version = w->features ? 2 : 1;  /* a file without features stays readable everywhere */
	h.features = w->features;
	h.header_size = DPK_HEADER_SIZE;
	h.entry_size = sizeof(struct dpk_entry);
	h.count = w->count;
	h.data_offset = DPK_HEADER_SIZE;
	h.data_size = w->pos - DPK_HEADER_SIZE;
	h.classes_offset = w->pos;
	h.classes_size = w->classes_size;
	h.class_count = w->class_count;
	h.classes_xxh3 = XXH3_64bits(w->classes, w->classes_size);
	h.index_offset = h.classes_offset + h.classes_size;
	h.index_size = w->count * sizeof(struct dpk_entry);
	uint64_t mem = (w->count - w->spilled) * sizeof(struct dpk_entry);
	if (w->ixh) {
		XXH3_64bits_update(w->ixh, w->index, mem);
		h.index_xxh3 = XXH3_64bits_digest(w->ixh);
	} else {
		h.index_xxh3 = XXH3_64bits(w->index, mem);
	}
	h.file_size = h.index_offset + h.index_size;
	uint64_t aux_entries = w->aux_fields ? w->count * sizeof(struct dpk_aux_entry) : 0;
	if (w->aux_fields) {
		XXH3_state_t *st = XXH3_createState();
		if (!st)
			return -ENOMEM;
		XXH3_64bits_reset(st);
		XXH3_64bits_update(st, w->aux_names, w->aux_names_size);
		XXH3_64bits_update(st, w->aux, aux_entries);
		h.aux_xxh3 = XXH3_64bits_digest(st);
		XXH3_freeState(st);
		h.aux_offset = h.file_size;
		h.aux_size = w->aux_names_size + aux_entries;
		h.aux_fields = w->aux_fields;
		h.aux_max = w->aux_max ? w->aux_max : 4 * w->aux_fields;
		h.file_size += h.aux_size;
	}
	h.kinds = w->kinds;
	h.header_xxh3 = XXH3_64bits(&h, offsetof(struct dpk_header, header_xxh3));

	ret = wappend(w, w->classes, w->classes_size);
	if (ret == 0 && w->spilled && w->index_at) {  /* the spilled entries are in place */
		assert(w->pos == w->index_at);
		ret = wflush(w);
		w->pos += w->spilled * sizeof(struct dpk_entry);
		if (ret == 0 && lseek(w->f.fd, (off_t)w->pos, SEEK_SET) < 0)
			ret = -errno;
	} else if (ret == 0 && w->spilled) {
		ret = unspill(w);
	}
	if (ret == 0)
		ret = wappend(w, w->index, mem);
	if (ret == 0 && w->aux_fields)
		ret = wappend(w, w->aux_names, w->aux_names_size);
	if (ret == 0 && w->aux_fields)
		ret = wappend(w, w->aux, aux_entries);
	if (ret == 0)
		ret = wflush(w);
	if (ret == 0) {
		ssize_t n = pwrite(w->f.fd, &h, sizeof(h), 0);
		ret = n < 0 ? -errno : n != (ssize_t)sizeof(h) ? -EIO : 0;
	}
	if (ret == 0)
		ret = afile_commit(&w->f);
	if (ret < 0) {
		w->failed = 1;
		return ret;
	}
	w->finished = 1;
	return 0;
}

void dpk_writer_destroy(struct dpk_writer *w)
{
	if (!w)
		return;
	afile_close(&w->f);  /* removes the temporary file unless finish renamed it */
	free(w->wbuf);
	free(w->index);
	if (w->spill_fd >= 0)
		close(w->spill_fd);
	XXH3_freeState(w->ixh);
	free(w->classes);
	free(w->aux_names);
	free(w->aux);
	free(w->aux_buf);
	free(w);
}
