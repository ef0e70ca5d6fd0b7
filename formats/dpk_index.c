/* dpk_index.c - the index of a .dpk: the kind table and shapes, each entry's checks (bounds,
 * order, overlap, overflow, shape), the index copied and checked whole, an entry loaded and
 * checked at use, and the records' checks (formats/dpk.h; the parts: formats/dpk_impl.h). */
#include "formats/dpk_impl.h"

/* One row per enum dpk_kind: adding a kind is its enum value and its row here. */
static const struct dpk_kind_info kind_infos[DPK_KIND_MAX + 1] = {
	[DPK_KIND_JPEG] = { "jpeg", DPK_KF_IMAGE | DPK_KF_SUBSAMP | DPK_KF_JPEG },
	[DPK_KIND_RAW] = { "raw", DPK_KF_STORED_RAW },
	[DPK_KIND_RAW_ZSTD] = { "raw+zstd", 0 },
	[DPK_KIND_JPEG_RST] = { "jpeg+rst", DPK_KF_IMAGE | DPK_KF_SUBSAMP | DPK_KF_JPEG },
	[DPK_KIND_JPEG_IDX] = { "jpeg+idx", DPK_KF_IMAGE | DPK_KF_SUBSAMP | DPK_KF_JPEG },
	[DPK_KIND_JPEG_CMYK] = { "jpeg+cmyk", DPK_KF_IMAGE },
	[DPK_KIND_PNG] = { "png", DPK_KF_IMAGE },
	[DPK_KIND_WEBP] = { "webp", DPK_KF_IMAGE },
	[DPK_KIND_PNM] = { "pnm", DPK_KF_IMAGE },
	[DPK_KIND_BMP] = { "bmp", DPK_KF_IMAGE },
	[DPK_KIND_TIFF] = { "tiff", DPK_KF_IMAGE },
	[DPK_KIND_JPEG_IDX_CMYK] = { "jpeg+idx+cmyk", DPK_KF_IMAGE },
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
int dpk__shape_check(unsigned kind, unsigned ndim, const uint32_t *shape, unsigned subsamp,
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

/* Entry @i's checks: everything check_entries() asks of it, given where the record before it
 * ends (@prev_end) and where the one after it starts (@next_start; the data section's end for the
 * last). 0 or -EBADMSG with a message naming the sample. */
static int entry_check(const struct dpk_header *h, uint64_t i, const struct dpk_entry *e,
		       uint64_t prev_end, uint64_t next_start, char *err, size_t errlen)
{
	uint64_t data_end = h->data_offset + h->data_size;
	unsigned long long id = (unsigned long long)i;
	const char *why = NULL;
	uint64_t raw_size, end;

	if (dpk__shape_check(e->kind, e->ndim, e->shape, e->subsamp, &raw_size, &why) < 0)
		return err_set(err, errlen, -EBADMSG, "sample %llu: %s", id, why);
	if (e->raw_size != raw_size)
		return err_set(err, errlen, -EBADMSG, "sample %llu: raw_size %llu is not the product of its shape",
			    id, (unsigned long long)e->raw_size);
	if (e->length == 0 || e->length > DPK_RECORD_MAX)
		return err_set(err, errlen, -EBADMSG, "sample %llu: absurd length %llu",
			    id, (unsigned long long)e->length);
	if (add_overflows(e->offset, e->length, &end))
		return err_set(err, errlen, -EBADMSG, "sample %llu: offset + length overflows", id);
	if (e->offset < prev_end)
		return err_set(err, errlen, -EBADMSG, "sample %llu: record at %llu overlaps the previous one (ends at %llu)",
			    id, (unsigned long long)e->offset, (unsigned long long)prev_end);
	if (end > data_end)
		return err_set(err, errlen, -EBADMSG, "sample %llu: record [%llu, %llu) runs past the data section (ends at %llu)",
			    id, (unsigned long long)e->offset, (unsigned long long)end,
			    (unsigned long long)data_end);
	if (end > next_start)
		return err_set(err, errlen, -EBADMSG, "sample %llu: record [%llu, %llu) overlaps the next one (starts at %llu)",
			    id, (unsigned long long)e->offset, (unsigned long long)end,
			    (unsigned long long)next_start);
	if ((dpk_kind_info(e->kind)->flags & DPK_KF_STORED_RAW) && e->length != e->raw_size)
		return err_set(err, errlen, -EBADMSG, "sample %llu: raw record of %llu bytes for shape of %llu",
			    id, (unsigned long long)e->length, (unsigned long long)e->raw_size);
	if ((h->features & DPK_FEAT_NO_LABELS) && e->label != -1)
		return err_set(err, errlen, -EBADMSG, "sample %llu: label %lld in a dataset without "
			       "labels (must be -1)", id, (long long)e->label);
	if (h->class_count && (e->label < 0 || e->label >= (int64_t)h->class_count))
		return err_set(err, errlen, -EBADMSG, "sample %llu: label %lld outside %u classes",
			    id, (long long)e->label, h->class_count);
	if (e->reserved || (e->flags & ~DPK_F_PROGRESSIVE))
		return err_set(err, errlen, -EBADMSG, "sample %llu: reserved bits set", id);
	if (!(h->kinds & (1u << e->kind)))
		return err_set(err, errlen, -EBADMSG, "sample %llu: kind %s is not in the header's kinds 0x%x",
			    id, dpk_kind_name(e->kind), h->kinds);
	return 0;
}

static int check_entries(const struct dpk *d, char *err, size_t errlen)
{
	const struct dpk_header *h = &d->hdr;
	uint64_t prev_end = h->data_offset, data_end = h->data_offset + h->data_size;
	uint32_t kinds = 0;

	for (uint64_t i = 0; i < h->count; i++) {
		const struct dpk_entry *e = &d->index[i];
		/* the next record's start is checked as its own prev_end, one step later */
		int ret = entry_check(h, i, e, prev_end, data_end, err, errlen);
		if (ret < 0)
			return ret;
		kinds |= 1u << e->kind;
		prev_end = e->offset + e->length;
	}
	if (kinds != h->kinds)
		return err_set(err, errlen, -EBADMSG, "header kinds 0x%x but index has 0x%x", h->kinds, kinds);
	return 0;
}

/* Read the index into private memory and check it whole (checksum, every entry). */
int dpk__copy_index(struct dpk *d, unsigned flags, char *err, size_t errlen)
{
	int ret;

	if (d->hdr.count) {
		if (d->hdr.index_size > SIZE_MAX)
			return err_set(err, errlen, -EFBIG, "index of %llu bytes does not fit the address space",
				    (unsigned long long)d->hdr.index_size);
		d->index = malloc((size_t)d->hdr.index_size);
		if (!d->index)
			return err_set(err, errlen, -ENOMEM, "no memory for an index of %llu bytes",
				    (unsigned long long)d->hdr.index_size);
		ret = pread_full(d->fd, d->index, (size_t)d->hdr.index_size, d->hdr.index_offset);
		if (ret < 0)
			return err_set(err, errlen, ret, "reading the index: %s", strerror(-ret));
		if (!(flags & DPK_OPEN_NO_INDEX_CHECK) &&
		    XXH3_64bits(d->index, d->hdr.index_size) != d->hdr.index_xxh3)
			return err_set(err, errlen, -EBADMSG, "index checksum mismatch");
	}
	return check_entries(d, err, errlen);
}

const struct dpk_entry *dpk_entry_get(const struct dpk *d, uint64_t i)
{
	return i < d->hdr.count && d->index ? &d->index[i] : NULL;
}

int dpk_mapped(const struct dpk *d)
{
	if (d->set)
		return d->slot ? d->tmpl_mapped : dpk_mapped(d->shards[0]);
	return d->map != NULL;
}

int dpk_entries_read(const struct dpk *d)
{
	return d->read_entries;
}

void dpk_entry_prefetch(const struct dpk *d, uint64_t i)
{
	if (d->set && i < d->hdr.count) {
		uint32_t k = dpkset_find(d->set, i);
		const struct dpk *s = dpk__shard(d, k);
		if (s)
			dpk_entry_prefetch(s, i - d->set->first[k]);
		return;
	}
	if (d->map && i < d->hdr.count) {  /* a hint: touches nothing, cannot fault */
		__builtin_prefetch(&d->map[i]);
		if (i > 0)
			__builtin_prefetch(&d->map[i - 1]);
		if (i + 1 < d->hdr.count)
			__builtin_prefetch(&d->map[i + 1]);
	}
}

void dpk_record_prefetch(const struct dpk *d, const struct dpk_entry *e)
{
	/* a hint: never faults, so an entry of another file or a lost page costs nothing */
	if (d->data && e->offset >= d->hdr.data_offset &&
	    e->offset < d->hdr.data_offset + d->hdr.data_size) {
		const uint8_t *p = d->data + e->offset;
		for (unsigned k = 0; k < 4; k++)
			__builtin_prefetch(p + 64 * k);
	}
}

int dpk_data_mapped(const struct dpk *d)
{
	if (d->slot)  /* each later shard is refused at attach unless it is as the template */
		return d->tmpl_data_mapped;
	for (uint32_t k = 0; d->set && k < d->set->n; k++)
		if (!dpk_data_mapped(d->shards[k]))
			return 0;
	if (d->set)
		return 1;
	return d->data != NULL;
}

ssize_t dpk_record_copy(const struct dpk *d, const struct dpk_entry *e, void *buf, size_t cap)
{
	uint64_t end;

	if (d->set) {
		if (e->reserved >= d->set->n)
			return -EBADMSG;
		const struct dpk *s = dpk__shard(d, e->reserved);
		return s ? dpk_record_copy(s, e, buf, cap) : -EAGAIN;
	}
	if (!d->data)
		return -EINVAL;
	if (cap < e->length)
		return -ENOSPC;
	if (e->offset < d->hdr.data_offset || add_overflows(e->offset, e->length, &end) ||
	    end > d->hdr.data_offset + d->hdr.data_size)
		return -EBADMSG;  /* not an entry of this file's (loaded entries never are) */
	memcpy(buf, d->data + e->offset, e->length);
	/* pairs with the guard's store: a page lost under the copy was patched with zeros */
	if (atomic_load(&((struct dpk *)d)->lost))
		return -EBADMSG;
	return (ssize_t)e->length;
}

int dpk_entry_load(const struct dpk *d, uint64_t i, struct dpk_entry *out, char *err, size_t errlen)
{
	const struct dpk_header *h = &d->hdr;

	if (i >= h->count)
		return err_set(err, errlen, -ERANGE, "sample %llu: past the last of %llu",
			    (unsigned long long)i, (unsigned long long)h->count);
	if (d->set) {  /* the shard's entry, its number in .reserved (dpk.h) */
		uint32_t k = dpkset_find(d->set, i);
		char why[200];
		const struct dpk *s = dpk__shard(d, k);
		if (!s)
			return err_set(err, errlen, -EAGAIN, "sample %llu (shard %s): the shard is not "
				       "here yet", (unsigned long long)i, d->set->shards[k].path);
		int ret = dpk_entry_load(s, i - d->set->first[k], out, why, sizeof(why));
		if (ret < 0)
			return err_set(err, errlen, ret, "sample %llu (shard %s): %s",
				       (unsigned long long)i, d->set->shards[k].path, why);
		out->reserved = k;
		return 0;
	}
	if (d->index) {  /* copied and checked whole at open */
		*out = d->index[i];
		return 0;
	}
	/* One copy, then checks on the copy only: the file may be rewritten under the mapping. */
	uint64_t prev_end = h->data_offset, next_start = h->data_offset + h->data_size;
	if (d->read_entries) {  /* the entry and its neighbours, in one read */
		struct dpk_entry three[3];
		uint64_t first = i > 0 ? i - 1 : 0, last = i + 1 < h->count ? i + 1 : i;
		size_t len = (size_t)(last - first + 1) * sizeof(three[0]);
		int ret = pread_full(d->index_fd >= 0 ? d->index_fd : d->fd, three, len,
				     h->index_offset + first * sizeof(three[0]));
		if (ret < 0) {
			memset(out, 0, sizeof(*out));
			return ret == -EBADMSG ?
			       err_set(err, errlen, -EBADMSG, "sample %llu: the file ends before its "
				       "index entry (truncated?)", (unsigned long long)i) :
			       err_set(err, errlen, ret, "sample %llu: reading its index entry: %s",
				       (unsigned long long)i, strerror(-ret));
		}
		if (i > 0 && add_overflows(three[0].offset, three[0].length, &prev_end))
			prev_end = UINT64_MAX;
		*out = three[i - first];
		if (last > i)
			next_start = three[2 - (i == 0)].offset;
		ret = entry_check(h, i, out, prev_end, next_start, err, errlen);
		if (ret < 0)
			memset(out, 0, sizeof(*out));
		return ret;
	}
	if (i > 0) {
		const struct dpk_entry *p = &d->map[i - 1];
		uint64_t off = p->offset, len = p->length;
		if (add_overflows(off, len, &prev_end))
			prev_end = UINT64_MAX;
	}
	*out = d->map[i];
	if (i + 1 < h->count)
		next_start = d->map[i + 1].offset;
	/* pairs with the guard's store: the handler ran (if at all) inside the copies above */
	if (atomic_load(&((struct dpk *)d)->lost)) {
		memset(out, 0, sizeof(*out));
		return err_set(err, errlen, -EBADMSG, "the file was truncated while its index was mapped");
	}
	int ret = entry_check(h, i, out, prev_end, next_start, err, errlen);
	if (ret < 0)
		memset(out, 0, sizeof(*out));
	return ret;
}

int dpk_record_check(const struct dpk_entry *e, const void *buf)
{
	return XXH3_64bits(buf, e->length) == e->xxh3 ? 0 : -EBADMSG;
}

ssize_t dpk_read(const struct dpk *d, uint64_t i, void *buf, size_t cap)
{
	struct dpk_entry e;
	int ret = dpk_entry_load(d, i, &e, NULL, 0);

	return ret < 0 ? ret : dpk_read_entry(d, &e, buf, cap);
}

ssize_t dpk_read_entry(const struct dpk *d, const struct dpk_entry *e, void *buf, size_t cap)
{
	int ret;

	if (d->set) {
		if (e->reserved >= d->set->n)
			return -EBADMSG;
		const struct dpk *s = dpk__shard(d, e->reserved);
		return s ? dpk_read_entry(s, e, buf, cap) : -EAGAIN;
	}
	if (cap < e->length)
		return -ENOSPC;
	ret = pread_full(d->fd, buf, e->length, e->offset);
	if (ret < 0)
		return ret;
	ret = dpk_record_check(e, buf);
	return ret < 0 ? ret : (ssize_t)e->length;
}

void dpk_extent_align(const struct dpk_entry *e, uint64_t block, struct dpk_extent *out)
{
	uint64_t start = e->offset & ~(block - 1);
	uint64_t end = (e->offset + e->length + block - 1) & ~(block - 1);

	out->offset = start;
	out->length = end - start;
	out->skip = e->offset - start;
}

