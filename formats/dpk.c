/* dpk.c - reader and writer of the packed dataset format (docs/FORMAT.md).
 *
 * The reader trusts nothing on disk: dpk_open validates the header, the class table and every
 * index entry (bounds, order, overlap, overflow, shapes) once, so that afterwards an entry can be
 * used to size buffers and issue reads without further checks. Record bytes are checked against
 * their XXH3-64 when read.
 *
 * The writer streams records into a temporary file beside the target, keeps the index in memory
 * (64 bytes a sample), and on finish appends class table and index, writes the header last,
 * fsyncs and renames: the target path either holds a complete dataset or is untouched. */
#include "formats/dpk.h"

#include "common/afile.h"
#include "common/fdio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the on-disk structs are read in place: little-endian hosts only"
#endif

#define CLASSES_SIZE_MAX (1ull << 30)

struct dpk {
	int fd;
	int own_fd;
	struct dpk_header hdr;
	struct dpk_entry *index;        /* private copy (malloc), NULL when count == 0 */
	char *class_blob;               /* class names, each NUL-terminated */
	const char **class_names;       /* class_count pointers into class_blob */
	uint8_t identity[DPK_IDENTITY_SIZE]; /* XXH3-128 of the index, seeded by the class table's
					      * checksum: computed once here (dpk_identity) */
};

static int fail(char *err, size_t errlen, int ret, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int ret, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return ret;
}

/* pread exactly @len bytes at @off. Returns 0, -EBADMSG at EOF, or -errno. */
static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EBADMSG;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static int add_overflows(uint64_t a, uint64_t b, uint64_t *sum)
{
	return __builtin_add_overflow(a, b, sum);
}

/* One row per enum dpk_kind: adding a kind is its enum value and its row here. */
static const struct dpk_kind_info kind_infos[DPK_KIND_MAX + 1] = {
	[DPK_KIND_JPEG] = { "jpeg", DPK_KF_IMAGE | DPK_KF_SUBSAMP | DPK_KF_JPEG },
	[DPK_KIND_RAW] = { "raw", DPK_KF_STORED_RAW },
	[DPK_KIND_RAW_ZSTD] = { "raw+zstd", 0 },
	[DPK_KIND_JPEG_RST] = { "jpeg+rst", DPK_KF_IMAGE | DPK_KF_SUBSAMP | DPK_KF_JPEG },
	[DPK_KIND_JPEG_IDX] = { "jpeg+idx", DPK_KF_IMAGE | DPK_KF_SUBSAMP | DPK_KF_JPEG },
};

const struct dpk_kind_info *dpk_kind_info(unsigned kind)
{
	return kind <= DPK_KIND_MAX && kind_infos[kind].name ? &kind_infos[kind] : NULL;
}

const char *dpk_kind_name(unsigned kind)
{
	const struct dpk_kind_info *k = dpk_kind_info(kind);

	return k ? k->name : "?";
}

const char *dpk_subsamp_name(unsigned s)
{
	switch (s) {
	case DPK_SUB_444: return "4:4:4";
	case DPK_SUB_422: return "4:2:2";
	case DPK_SUB_420: return "4:2:0";
	case DPK_SUB_GRAY: return "gray";
	case DPK_SUB_440: return "4:4:0";
	case DPK_SUB_411: return "4:1:1";
	case DPK_SUB_OTHER: return "other";
	default: return "?";
	}
}

/* Shape checks shared by reader and writer. Returns 0 or -EBADMSG with a reason in @why. */
static int shape_check(unsigned kind, unsigned ndim, const uint32_t *shape, unsigned subsamp,
		       uint64_t *raw_size, const char **why)
{
	const struct dpk_kind_info *ki = dpk_kind_info(kind);
	uint64_t n = 1;

	if (!ki)
		return *why = "unknown record kind", -EBADMSG;
	if (ndim < 1 || ndim > DPK_NDIM_MAX)
		return *why = "ndim out of range 1..4", -EBADMSG;
	for (unsigned k = 0; k < DPK_NDIM_MAX; k++) {
		if (k >= ndim) {
			if (shape[k] != 0)
				return *why = "nonzero dimension past ndim", -EBADMSG;
			continue;
		}
		if (shape[k] < 1 || shape[k] > DPK_DIM_MAX)
			return *why = "dimension out of range 1..2^20", -EBADMSG;
		if (__builtin_mul_overflow(n, (uint64_t)shape[k], &n) || n > DPK_RECORD_MAX)
			return *why = "tensor larger than 16 GiB", -EBADMSG;
	}
	if ((ki->flags & DPK_KF_IMAGE) &&
	    (ndim != 3 || (shape[2] != 1 && shape[2] != 3) || shape[0] > 65535 || shape[1] > 65535))
		return *why = "image shape is not H x W x {1,3} with sides <= 65535", -EBADMSG;
	if (ki->flags & DPK_KF_SUBSAMP) {
		if (subsamp > DPK_SUB_411 && subsamp != DPK_SUB_OTHER)
			return *why = "unknown chroma subsampling", -EBADMSG;
	} else if (subsamp != 0) {
		return *why = "subsampling set on a kind without one", -EBADMSG;
	}
	*raw_size = n;
	return 0;
}

/* ---- reader ---- */

static int check_header(const struct dpk_header *h, uint64_t st_size, char *err, size_t errlen)
{
	uint64_t end;

	if (memcmp(h->magic, DPK_MAGIC, 8) != 0)
		return fail(err, errlen, -EBADMSG, "not a dpk file (bad magic)");
	if (h->version != DPK_VERSION)
		return fail(err, errlen, -EPROTO, "format version %u; this build reads version %u",
			    h->version, DPK_VERSION);
	if (XXH3_64bits(h, offsetof(struct dpk_header, header_xxh3)) != h->header_xxh3)
		return fail(err, errlen, -EBADMSG, "header checksum mismatch");
	if (h->header_size != DPK_HEADER_SIZE || h->entry_size != sizeof(struct dpk_entry) ||
	    h->data_offset != DPK_HEADER_SIZE)
		return fail(err, errlen, -EBADMSG, "header: bad header_size, entry_size or data_offset");
	if (h->file_size != st_size)
		return fail(err, errlen, -EBADMSG, "file is %llu bytes, header says %llu (truncated or appended to)",
			    (unsigned long long)st_size, (unsigned long long)h->file_size);
	if (h->count > UINT64_MAX / sizeof(struct dpk_entry) ||
	    h->index_size != h->count * sizeof(struct dpk_entry))
		return fail(err, errlen, -EBADMSG, "header: index size does not match %llu samples",
			    (unsigned long long)h->count);
	if (add_overflows(h->data_offset, h->data_size, &end) || end != h->classes_offset ||
	    add_overflows(h->classes_offset, h->classes_size, &end) || end != h->index_offset ||
	    add_overflows(h->index_offset, h->index_size, &end) || end != h->file_size)
		return fail(err, errlen, -EBADMSG, "header: sections do not tile the file");
	if (h->index_offset % DPK_INDEX_ALIGN)
		return fail(err, errlen, -EBADMSG, "header: index offset %llu is not %u-byte aligned",
			    (unsigned long long)h->index_offset, DPK_INDEX_ALIGN);
	if (h->classes_size > CLASSES_SIZE_MAX || h->classes_size < 4ull * h->class_count)
		return fail(err, errlen, -EBADMSG, "header: class table size %llu for %u classes",
			    (unsigned long long)h->classes_size, h->class_count);
	if (h->kinds & ~(uint32_t)((1u << (DPK_KIND_MAX + 1)) - 2))
		return fail(err, errlen, -EBADMSG, "header: unknown record kinds 0x%x", h->kinds);
	if (h->reserved0 || h->reserved[0] || h->reserved[1] || h->reserved[2] || h->reserved[3])
		return fail(err, errlen, -EBADMSG, "header: reserved fields are not zero");
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
		ret = fail(err, errlen, -ENOMEM, "no memory for a class table of %llu bytes",
			   (unsigned long long)h->classes_size);
		goto out;
	}
	ret = pread_full(d->fd, raw, h->classes_size, h->classes_offset);
	if (ret < 0) {
		fail(err, errlen, ret, "reading the class table: %s", strerror(-ret));
		goto out;
	}
	if (XXH3_64bits(raw, h->classes_size) != h->classes_xxh3) {
		ret = fail(err, errlen, -EBADMSG, "class table checksum mismatch");
		goto out;
	}
	uint64_t pos = 0, out_pos = 0;
	for (uint32_t i = 0; i < h->class_count; i++) {
		uint32_t n;

		if (h->classes_size - pos < 4) {
			ret = fail(err, errlen, -EBADMSG, "class table ends inside class %u", i);
			goto out;
		}
		memcpy(&n, raw + pos, 4);
		pos += 4;
		if (n > DPK_CLASS_NAME_MAX || n > h->classes_size - pos || memchr(raw + pos, 0, n)) {
			ret = fail(err, errlen, -EBADMSG, "class %u: bad name length %u", i, n);
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
		ret = fail(err, errlen, -EBADMSG, "class table has %llu trailing bytes",
			   (unsigned long long)(h->classes_size - pos));
	for (; ret == 0 && pos < h->classes_size; pos++)
		if (raw[pos])
			ret = fail(err, errlen, -EBADMSG, "class table padding is not zero");
out:
	free(raw);
	return ret;
}

static int check_entries(const struct dpk *d, char *err, size_t errlen)
{
	const struct dpk_header *h = &d->hdr;
	uint64_t prev_end = h->data_offset, data_end = h->data_offset + h->data_size;
	uint32_t kinds = 0;

	for (uint64_t i = 0; i < h->count; i++) {
		const struct dpk_entry *e = &d->index[i];
		unsigned long long id = (unsigned long long)i;
		const char *why = NULL;
		uint64_t raw_size, end;

		if (shape_check(e->kind, e->ndim, e->shape, e->subsamp, &raw_size, &why) < 0)
			return fail(err, errlen, -EBADMSG, "sample %llu: %s", id, why);
		if (e->raw_size != raw_size)
			return fail(err, errlen, -EBADMSG, "sample %llu: raw_size %llu is not the product of its shape",
				    id, (unsigned long long)e->raw_size);
		if (e->length == 0 || e->length > DPK_RECORD_MAX)
			return fail(err, errlen, -EBADMSG, "sample %llu: absurd length %llu",
				    id, (unsigned long long)e->length);
		if (add_overflows(e->offset, e->length, &end))
			return fail(err, errlen, -EBADMSG, "sample %llu: offset + length overflows", id);
		if (e->offset < prev_end)
			return fail(err, errlen, -EBADMSG, "sample %llu: record at %llu overlaps the previous one (ends at %llu)",
				    id, (unsigned long long)e->offset, (unsigned long long)prev_end);
		if (end > data_end)
			return fail(err, errlen, -EBADMSG, "sample %llu: record [%llu, %llu) runs past the data section (ends at %llu)",
				    id, (unsigned long long)e->offset, (unsigned long long)end,
				    (unsigned long long)data_end);
		if ((dpk_kind_info(e->kind)->flags & DPK_KF_STORED_RAW) && e->length != e->raw_size)
			return fail(err, errlen, -EBADMSG, "sample %llu: raw record of %llu bytes for shape of %llu",
				    id, (unsigned long long)e->length, (unsigned long long)e->raw_size);
		if (h->class_count && (e->label < 0 || e->label >= (int64_t)h->class_count))
			return fail(err, errlen, -EBADMSG, "sample %llu: label %lld outside %u classes",
				    id, (long long)e->label, h->class_count);
		if (e->reserved || (e->flags & ~DPK_F_PROGRESSIVE))
			return fail(err, errlen, -EBADMSG, "sample %llu: reserved bits set", id);
		kinds |= 1u << e->kind;
		prev_end = end;
	}
	if (kinds != h->kinds)
		return fail(err, errlen, -EBADMSG, "header kinds 0x%x but index has 0x%x", h->kinds, kinds);
	return 0;
}

int dpk_open_fd(int fd, unsigned flags, struct dpk **out, char *err, size_t errlen)
{
	struct dpk *d;
	struct stat st;
	int ret;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	if (fstat(fd, &st) < 0)
		return fail(err, errlen, -errno, "stat: %s", strerror(errno));
	if (!S_ISREG(st.st_mode))
		return fail(err, errlen, -EINVAL, "not a regular file");
	if ((uint64_t)st.st_size < DPK_HEADER_SIZE)
		return fail(err, errlen, -EBADMSG, "file is %lld bytes, shorter than a header (%u)",
			    (long long)st.st_size, DPK_HEADER_SIZE);
	d = calloc(1, sizeof(*d));
	if (!d)
		return fail(err, errlen, -ENOMEM, "out of memory");
	d->fd = fd;
	/* The whole header block: the struct, then zeros up to DPK_HEADER_SIZE, so that no
	 * byte of it can change unnoticed. */
	uint8_t *block = malloc(DPK_HEADER_SIZE);
	if (!block) {
		ret = fail(err, errlen, -ENOMEM, "out of memory");
		goto fail;
	}
	ret = pread_full(fd, block, DPK_HEADER_SIZE, 0);
	if (ret < 0) {
		free(block);
		fail(err, errlen, ret, "reading the header: %s", strerror(-ret));
		goto fail;
	}
	memcpy(&d->hdr, block, sizeof(d->hdr));
	ret = check_header(&d->hdr, (uint64_t)st.st_size, err, errlen);
	for (size_t k = sizeof(d->hdr); ret == 0 && k < DPK_HEADER_SIZE; k++)
		if (block[k])
			ret = fail(err, errlen, -EBADMSG, "header: nonzero byte %zu in the reserved block", k);
	free(block);
	if (ret < 0)
		goto fail;
	ret = load_classes(d, err, errlen);
	if (ret < 0)
		goto fail;
	if (d->hdr.count) {
		/* Read into private memory, not mapped: a mapping of a file that is truncated later
		 * raises SIGBUS on access, and a file rewritten in place would change entries that
		 * check_entries() has already validated. */
		if (d->hdr.index_size > SIZE_MAX) {
			ret = fail(err, errlen, -EFBIG, "index of %llu bytes does not fit the address space",
				   (unsigned long long)d->hdr.index_size);
			goto fail;
		}
		d->index = malloc((size_t)d->hdr.index_size);
		if (!d->index) {
			ret = fail(err, errlen, -ENOMEM, "no memory for an index of %llu bytes",
				   (unsigned long long)d->hdr.index_size);
			goto fail;
		}
		ret = pread_full(fd, d->index, (size_t)d->hdr.index_size, d->hdr.index_offset);
		if (ret < 0) {
			fail(err, errlen, ret, "reading the index: %s", strerror(-ret));
			goto fail;
		}
		if (!(flags & DPK_OPEN_NO_INDEX_CHECK) &&
		    XXH3_64bits(d->index, d->hdr.index_size) != d->hdr.index_xxh3) {
			ret = fail(err, errlen, -EBADMSG, "index checksum mismatch");
			goto fail;
		}
	}
	ret = check_entries(d, err, errlen);
	if (ret < 0)
		goto fail;
	/* The index holds every record's checksum, offset, label and shape: its digest names the
	 * content (not the path) for resume tokens. Little-endian bytes, high half first. */
	XXH128_hash_t id = XXH3_128bits_withSeed(d->index, d->index ? d->hdr.index_size : 0,
						 d->hdr.classes_xxh3 ^ d->hdr.count);
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

int dpk_open(const char *path, unsigned flags, struct dpk **out, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int ret;

	*out = NULL;
	if (fd < 0)
		return fail(err, errlen, -errno, "%s", strerror(errno));
	ret = dpk_open_fd(fd, flags, out, err, errlen);
	if (ret < 0) {
		close(fd);
		return ret;
	}
	(*out)->own_fd = 1;
	return 0;
}

void dpk_close(struct dpk *d)
{
	if (!d)
		return;
	free(d->index);
	if (d->own_fd)
		close(d->fd);
	free(d->class_names);
	free(d->class_blob);
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
	return i < d->hdr.class_count ? d->class_names[i] : NULL;
}

const struct dpk_entry *dpk_entry_get(const struct dpk *d, uint64_t i)
{
	return i < d->hdr.count ? &d->index[i] : NULL;
}

const struct dpk_header *dpk_header_get(const struct dpk *d)
{
	return &d->hdr;
}

int dpk_fd(const struct dpk *d)
{
	return d->fd;
}

int dpk_record_check(const struct dpk_entry *e, const void *buf)
{
	return XXH3_64bits(buf, e->length) == e->xxh3 ? 0 : -EBADMSG;
}

ssize_t dpk_read(const struct dpk *d, uint64_t i, void *buf, size_t cap)
{
	const struct dpk_entry *e = dpk_entry_get(d, i);
	int ret;

	if (!e)
		return -ERANGE;
	if (cap < e->length)
		return -ENOSPC;
	ret = pread_full(d->fd, buf, e->length, e->offset);
	if (ret < 0)
		return ret;
	ret = dpk_record_check(e, buf);
	return ret < 0 ? ret : (ssize_t)e->length;
}

ssize_t dpk_raw_decode(const struct dpk_entry *e, const void *src, void *dst, size_t cap)
{
	if (cap < e->raw_size)
		return -ENOSPC;
	switch (e->kind) {
	case DPK_KIND_RAW:
		memcpy(dst, src, e->raw_size);
		return (ssize_t)e->raw_size;
	case DPK_KIND_RAW_ZSTD: {
		unsigned long long fcs = ZSTD_getFrameContentSize(src, e->length);
		if (fcs != e->raw_size)
			return -EBADMSG;
		size_t n = ZSTD_decompress(dst, e->raw_size, src, e->length);
		if (ZSTD_isError(n) || n != e->raw_size)
			return -EBADMSG;
		return (ssize_t)n;
	}
	default:
		return -EINVAL;
	}
}

void dpk_extent_align(const struct dpk_entry *e, uint64_t block, struct dpk_extent *out)
{
	uint64_t start = e->offset & ~(block - 1);
	uint64_t end = (e->offset + e->length + block - 1) & ~(block - 1);

	out->offset = start;
	out->length = end - start;
	out->skip = e->offset - start;
}

/* ---- writer ---- */

#define WBUF_SIZE (4u << 20)
#define DIRECT_MIN (64u << 10)      /* records this large skip wbuf */
#define WRITEBACK_STEP (32u << 20)  /* start writeback every this many bytes */

struct dpk_writer {
	struct afile f;         /* the temporary file, renamed over the target by finish */
	int failed;             /* sticky error: only destroy is accepted */
	int finished;
	int no_sync;            /* DPK_WRITE_NO_SYNC */
	uint64_t pos;           /* bytes written to fd so far (buffer included) */
	uint64_t synced;        /* writeback started for [0, synced) */
	uint8_t *wbuf;
	size_t wlen;
	struct dpk_entry *index;
	uint64_t count, cap;
	char *classes;          /* encoded class table */
	uint64_t classes_size;
	uint32_t class_count;
	uint32_t kinds;
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

int dpk_writer_create(const char *path, unsigned flags, struct dpk_writer **out)
{
	struct dpk_writer *w = calloc(1, sizeof(*w));
	int ret = -ENOMEM;

	*out = NULL;
	if (!w)
		return -ENOMEM;
	w->f.fd = -1;
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

int dpk_writer_set_classes(struct dpk_writer *w, const char *const *names, uint32_t n)
{
	uint64_t size = 0;
	char *t;

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
	uint64_t pos = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len = (uint32_t)strlen(names[i]);
		memcpy(t + pos, &len, 4);
		memcpy(t + pos + 4, names[i], len);
		pos += 4 + len;
	}
	free(w->classes);
	w->classes = t;
	w->classes_size = size;
	w->class_count = n;
	return 0;
}

int dpk_writer_add(struct dpk_writer *w, const struct dpk_record *r)
{
	const char *why;
	uint64_t raw_size;
	int ret;

	if (w->failed || w->finished)
		return -EINVAL;
	if (shape_check(r->kind, r->ndim, r->shape, r->subsamp, &raw_size, &why) < 0 ||
	    r->length == 0 || r->length > DPK_RECORD_MAX ||
	    ((dpk_kind_info(r->kind)->flags & DPK_KF_STORED_RAW) && r->length != raw_size) ||
	    (r->flags & ~DPK_F_PROGRESSIVE))
		return -EINVAL;
	if (w->count == w->cap) {
		uint64_t cap = w->cap ? w->cap * 2 : 1024;
		struct dpk_entry *t = NULL;

		if (cap <= SIZE_MAX / sizeof(*t))
			t = realloc(w->index, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		w->index = t;
		w->cap = cap;
	}
	struct dpk_entry *e = &w->index[w->count];
	memset(e, 0, sizeof(*e));
	e->offset = w->pos;
	e->length = r->length;
	e->label = r->label;
	e->xxh3 = r->has_xxh3 ? r->xxh3 : XXH3_64bits(r->data, r->length);
	e->raw_size = raw_size;
	memcpy(e->shape, r->shape, sizeof(e->shape));
	e->kind = (uint8_t)r->kind;
	e->ndim = r->ndim;
	e->subsamp = r->subsamp;
	e->flags = r->flags;
	ret = wappend(w, r->data, r->length);
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
	/* The index starts on a DPK_INDEX_ALIGN boundary so that a mapped entry is naturally
	 * aligned: the class table takes zero padding at its end (covered by its checksum). */
	uint64_t pad = (DPK_INDEX_ALIGN - (w->pos + w->classes_size) % DPK_INDEX_ALIGN) % DPK_INDEX_ALIGN;
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
	h.version = DPK_VERSION;
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
	h.index_xxh3 = XXH3_64bits(w->index, h.index_size);
	h.file_size = h.index_offset + h.index_size;
	h.kinds = w->kinds;
	h.header_xxh3 = XXH3_64bits(&h, offsetof(struct dpk_header, header_xxh3));

	ret = wappend(w, w->classes, w->classes_size);
	if (ret == 0)
		ret = wappend(w, w->index, h.index_size);
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
	free(w->classes);
	free(w);
}
