/* dpk_aux.c - the auxiliary fields of a .dpk (version 2, DPK_FEAT_AUX; docs/FORMAT.md, "Auxiliary
 * fields"): the names read and checked at open, the entries copied and checked with a copied
 * index (or read one at a time where the index is mapped or read), and each record's blob read,
 * checked against its checksum and split into its fields. Nothing here trusts the file: every
 * offset and length is checked before it sizes a read. */
#include "formats/dpk_impl.h"

#define NAMES_MAX (DPK_AUX_FIELDS_MAX * (4 + DPK_AUX_NAME_MAX) + 8)

static int name_ok(const char *s, uint32_t n)
{
	if (n < 1 || n > DPK_AUX_NAME_MAX)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}

/* The names: aux_fields x (u32 length, bytes), zero padding to 8; then the entries, exactly. */
int dpk__load_aux_names(struct dpk *d, char *err, size_t errlen)
{
	const struct dpk_header *h = &d->hdr;
	uint8_t raw[NAMES_MAX];
	uint64_t pos = 0, want = h->aux_size < NAMES_MAX ? h->aux_size : NAMES_MAX;
	int ret;

	if (!(h->features & DPK_FEAT_AUX))
		return 0;
	if ((ret = pread_full(d->fd, raw, (size_t)want, h->aux_offset)) < 0)
		return err_set(err, errlen, ret, "reading the aux field names: %s", strerror(-ret));
	d->aux_blob = malloc(NAMES_MAX);
	if (!d->aux_blob)
		return err_set(err, errlen, -ENOMEM, "out of memory");
	char *out = d->aux_blob;
	for (uint32_t k = 0; k < h->aux_fields; k++) {
		uint32_t n;
		if (pos + 4 > want)
			return err_set(err, errlen, -EBADMSG, "aux field %u: the names run past the aux "
				       "section", k);
		memcpy(&n, raw + pos, 4);
		if (n > want - pos - 4 || !name_ok((const char *)raw + pos + 4, n))
			return err_set(err, errlen, -EBADMSG, "aux field %u: bad name (length %u; 1..%u "
				       "bytes of A-Z a-z 0-9 _ . -)", k, n, DPK_AUX_NAME_MAX);
		memcpy(out, raw + pos + 4, n);
		out[n] = '\0';
		for (uint32_t j = 0; j < k; j++)
			if (!strcmp(d->aux_names[j], out))
				return err_set(err, errlen, -EBADMSG, "aux field %u: name %s twice", k,
					       out);
		d->aux_names[k] = out;
		out += n + 1;
		pos += 4 + n;
	}
	uint64_t names = (pos + 7) & ~7ull, entries;
	for (; pos < names; pos++)
		if (pos >= want || raw[pos])
			return err_set(err, errlen, -EBADMSG, "aux field names: padding is not zero");
	if (__builtin_mul_overflow(h->count, sizeof(struct dpk_aux_entry), &entries) ||
	    h->aux_size != names + entries)
		return err_set(err, errlen, -EBADMSG, "header: aux section of %llu bytes; %u names "
			       "and %llu samples take %llu", (unsigned long long)h->aux_size,
			       h->aux_fields, (unsigned long long)h->count,
			       (unsigned long long)(names + entries));
	d->aux_at = h->aux_offset + names;
	return 0;
}

/* Entry @i's checks (@a loaded for record @e). 0 or -EBADMSG naming the sample. */
static int aux_check(const struct dpk *d, uint64_t i, const struct dpk_entry *e,
		     const struct dpk_aux_entry *a, char *err, size_t errlen)
{
	const struct dpk_header *h = &d->hdr;
	unsigned long long id = (unsigned long long)i;
	uint64_t end;

	if (a->reserved)
		return err_set(err, errlen, -EBADMSG, "sample %llu: aux entry: reserved bits set", id);
	if (a->length < 4 * h->aux_fields || a->length > h->aux_max)
		return err_set(err, errlen, -EBADMSG, "sample %llu: aux fields of %u bytes, outside "
			       "%u..%u (aux_max)", id, a->length, 4 * h->aux_fields, h->aux_max);
	if (add_overflows(e->offset, e->length, &end) || a->offset != end)
		return err_set(err, errlen, -EBADMSG, "sample %llu: aux fields at %llu, not right "
			       "after the record (which ends at %llu)", id,
			       (unsigned long long)a->offset, (unsigned long long)end);
	if (add_overflows(a->offset, a->length, &end) || end > h->data_offset + h->data_size)
		return err_set(err, errlen, -EBADMSG, "sample %llu: aux fields [%llu, +%u) run past "
			       "the data section", id, (unsigned long long)a->offset, a->length);
	return 0;
}

int dpk__copy_aux(struct dpk *d, unsigned flags, char *err, size_t errlen)
{
	const struct dpk_header *h = &d->hdr;
	uint64_t names = d->aux_at - h->aux_offset;
	int ret;

	if (!(h->features & DPK_FEAT_AUX) || !h->count)
		return 0;
	if (h->aux_size - names > SIZE_MAX)
		return err_set(err, errlen, -EFBIG, "aux entries do not fit the address space");
	d->aux = malloc((size_t)(h->aux_size - names));
	if (!d->aux)
		return err_set(err, errlen, -ENOMEM, "no memory for %llu aux entries",
			       (unsigned long long)h->count);
	if ((ret = pread_full(d->fd, d->aux, (size_t)(h->aux_size - names), d->aux_at)) < 0)
		return err_set(err, errlen, ret, "reading the aux entries: %s", strerror(-ret));
	if (!(flags & DPK_OPEN_NO_INDEX_CHECK)) {
		uint8_t raw[NAMES_MAX];
		XXH3_state_t *st = XXH3_createState();
		if (!st)
			return err_set(err, errlen, -ENOMEM, "out of memory");
		ret = pread_full(d->fd, raw, (size_t)names, h->aux_offset);
		XXH3_64bits_reset(st);
		XXH3_64bits_update(st, raw, (size_t)names);
		XXH3_64bits_update(st, d->aux, (size_t)(h->aux_size - names));
		uint64_t sum = XXH3_64bits_digest(st);
		XXH3_freeState(st);
		if (ret < 0 || sum != h->aux_xxh3)
			return err_set(err, errlen, -EBADMSG, "aux section checksum mismatch");
	}
	for (uint64_t i = 0; i < h->count; i++)
		if ((ret = aux_check(d, i, &d->index[i], &d->aux[i], err, errlen)) < 0)
			return ret;
	return 0;
}

int dpk_aux_field(const void *blob, size_t len, uint32_t nfields, uint32_t k, const uint8_t **p,
		  uint32_t *n)
{
	const uint8_t *b = blob;
	uint64_t at = 4ull * nfields, sum = 0;

	if (len < at)
		return -EBADMSG;
	for (uint32_t j = 0; j < nfields; j++) {
		uint32_t l;
		memcpy(&l, b + 4 * j, 4);
		if (l > DPK_AUX_FIELD_MAX)
			return -EBADMSG;
		if (j < k)
			at += l;
		else if (j == k)
			*n = l;
		sum += l;
	}
	if (sum != len - 4ull * nfields)
		return -EBADMSG;
	if (k >= nfields)
		return -ERANGE;
	*p = b + at;
	return 0;
}

ssize_t dpk_aux_read(const struct dpk *d, uint64_t i, const struct dpk_entry *e, void *buf,
		     size_t cap, char *err, size_t errlen)
{
	const struct dpk_header *h = &d->hdr;
	struct dpk_aux_entry a;
	unsigned long long id = (unsigned long long)i;
	int ret;

	if (i >= h->count)
		return err_set(err, errlen, -ERANGE, "sample %llu: past the last of %llu", id,
			       (unsigned long long)h->count);
	if (d->set) {
		uint32_t k = dpkset_find(d->set, i);
		char why[200];
		if (e->reserved != k)
			return err_set(err, errlen, -EBADMSG, "sample %llu: its entry is not of shard %s",
				       id, d->set->shards[k].path);
		const struct dpk *s = dpk__shard(d, k);
		if (!s)
			return err_set(err, errlen, -EAGAIN, "sample %llu (shard %s): the shard is not "
				       "here yet", id, d->set->shards[k].path);
		struct dpk_entry local = *e;
		local.reserved = 0;
		ssize_t n = dpk_aux_read(s, i - d->set->first[k], &local, buf, cap, why,
					 sizeof(why));
		if (n < 0)
			return err_set(err, errlen, (int)n, "sample %llu (shard %s): %s", id,
				       d->set->shards[k].path, why);
		return n;
	}
	if (!(h->features & DPK_FEAT_AUX))
		return 0;
	if (d->aux) {
		a = d->aux[i];  /* checked at open */
	} else {
		ret = pread_full(d->index_fd >= 0 ? d->index_fd : d->fd, &a, sizeof(a),
				 d->aux_at + i * sizeof(a));
		if (ret < 0)
			return ret == -EBADMSG ?
			       err_set(err, errlen, -EBADMSG, "sample %llu: the file ends before its aux "
				       "entry (truncated?)", id) :
			       err_set(err, errlen, ret, "sample %llu: reading its aux entry: %s", id,
				       strerror(-ret));
		if ((ret = aux_check(d, i, e, &a, err, errlen)) < 0)
			return ret;
	}
	if (cap < a.length)
		return err_set(err, errlen, -ENOSPC, "sample %llu: aux fields of %u bytes, buffer of "
			       "%zu", id, a.length, cap);
	if ((ret = pread_full(d->fd, buf, a.length, a.offset)) < 0)
		return ret == -EBADMSG ?
		       err_set(err, errlen, -EBADMSG, "sample %llu: the file ends inside its aux "
			       "fields (truncated?)", id) :
		       err_set(err, errlen, ret, "sample %llu: reading its aux fields: %s", id,
			       strerror(-ret));
	if (XXH3_64bits(buf, a.length) != a.xxh3)
		return err_set(err, errlen, -EBADMSG, "sample %llu: aux fields checksum mismatch", id);
	/* the checksum was the writer's: the structure is checked too (a writer's bug, or a file
	 * made by hand with a matching checksum) */
	uint64_t sum = 0;
	for (uint32_t k = 0; k < h->aux_fields; k++) {
		uint32_t l;
		memcpy(&l, (const uint8_t *)buf + 4 * k, 4);
		if (l > DPK_AUX_FIELD_MAX)
			return err_set(err, errlen, -EBADMSG, "sample %llu: aux field %s of %u bytes, "
				       "above the bound of %u", id, d->aux_names[k], l,
				       DPK_AUX_FIELD_MAX);
		sum += l;
	}
	if (sum != a.length - 4ull * h->aux_fields)
		return err_set(err, errlen, -EBADMSG, "sample %llu: aux field lengths add up to %llu; "
			       "the blob holds %u", id, (unsigned long long)sum,
			       a.length - 4 * h->aux_fields);
	return (ssize_t)a.length;
}

uint32_t dpk_aux_fields(const struct dpk *d)
{
	return d->set && !d->slot ? dpk_aux_fields(d->shards[0]) : d->hdr.aux_fields;
}

const char *dpk_aux_name(const struct dpk *d, uint32_t k)
{
	if (d->set && !d->slot)
		return dpk_aux_name(d->shards[0], k);
	return k < d->hdr.aux_fields ? d->aux_names[k] : NULL;
}

uint32_t dpk_aux_max(const struct dpk *d)
{
	return d->hdr.aux_max;  /* a set's header: the largest of its shards' */
}

int dpk_has_labels(const struct dpk *d)
{
	return !(d->hdr.features & DPK_FEAT_NO_LABELS);
}

int dpk_same_aux(const struct dpk *a, const struct dpk *b)
{
	if (dpk_aux_fields(a) != dpk_aux_fields(b) || dpk_has_labels(a) != dpk_has_labels(b))
		return 0;
	for (uint32_t k = 0; k < dpk_aux_fields(a); k++)
		if (strcmp(dpk_aux_name(a, k), dpk_aux_name(b, k)))
			return 0;
	return 1;
}

uint64_t dpk_aux_blob_size(uint32_t nfields, const uint32_t *lens)
{
	uint64_t n = nfields ? 4ull * nfields : 0;

	for (uint32_t k = 0; k < nfields; k++)
		n += lens[k];
	return n;
}
