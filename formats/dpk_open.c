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
#include "formats/dpkset.h"
#include "common/err.h"

#include "common/afile.h"
#include "common/fdio.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
/* XXH3 through libxxhash's run-time dispatch (AVX2 or AVX-512 where the CPU has them; the same
 * hashes): its plain XXH3_64bits is the SSE2 build, 3-4x slower on a 3 KB record. */
#include <xxh_x86dispatch.h>
#endif

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the on-disk structs are read in place: little-endian hosts only"
#endif

#define CLASSES_SIZE_MAX (1ull << 30)

struct dpk {
	int fd;
	int own_fd;
	struct dpk_header hdr;
	struct dpk_entry *index;        /* private copy (malloc), NULL when count == 0 or mapped */
	const struct dpk_entry *map;    /* DPK_OPEN_MAP: the index section, mapped read-only (entries
					 * checked at use: dpk_entry_load); else NULL */
	int read_entries;               /* entries are read from the file at each load (pread, no
					 * mapping: DPK_OPEN_READ_INDEX or an index above
					 * DPK_INDEX_MAP_MAX); index and map are NULL */
	int index_fd;                   /* read_entries: a description of its own for those reads,
					 * advised POSIX_FADV_RANDOM (no read-ahead of 128 KiB for
					 * each 192 bytes), or -1: fd */
	void *map_base;                 /* the mapping (page aligned), map_len bytes */
	size_t map_len;
	int guard_slot;                 /* its slot in the SIGBUS guard's table, or -1 */
	const uint8_t *data;            /* DPK_OPEN_MAP_DATA: byte 0 of the file, as mapped for the
					 * data section (only [data_offset, +data_size) is); else NULL */
	void *data_base;                /* that mapping (page aligned), data_len bytes */
	size_t data_len;
	int data_slot;                  /* its guard slot, or -1 */
	atomic_int lost;                /* 1 once a page of the mapping was gone (file truncated):
					 * set by the SIGBUS guard, read by dpk_entry_load */
	char *class_blob;               /* class names, each NUL-terminated */
	const char **class_names;       /* class_count pointers into class_blob */
	uint8_t identity[DPK_IDENTITY_SIZE]; /* XXH3-128 of the index, seeded by the class table's
					      * checksum: computed once here (dpk_identity) */
	/* A set of shards (dpk_open on a manifest, formats/dpkset.h): fd is the manifest's, hdr
	 * their sums, identity the set's; entries, records and classes come from the shards. */
	struct dpkset_manifest *set;    /* NULL for one file */
	struct dpk **shards;            /* set->n, each a whole .dpk opened with the set's flags */
	int fd_direct;                  /* a set's shard: its O_DIRECT fd (dpk_direct_open), or -1 */
};

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
		return err_set(err, errlen, -EBADMSG, "not a dpk file (bad magic)");
	if (h->version != DPK_VERSION)
		return err_set(err, errlen, -EPROTO, "format version %u; this build reads version %u",
			    h->version, DPK_VERSION);
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
	if (add_overflows(h->data_offset, h->data_size, &end) || end != h->classes_offset ||
	    add_overflows(h->classes_offset, h->classes_size, &end) || end != h->index_offset ||
	    add_overflows(h->index_offset, h->index_size, &end) || end != h->file_size)
		return err_set(err, errlen, -EBADMSG, "header: sections do not tile the file");
	if (h->index_offset % DPK_INDEX_ALIGN)
		return err_set(err, errlen, -EBADMSG, "header: index offset %llu is not %u-byte aligned",
			    (unsigned long long)h->index_offset, DPK_INDEX_ALIGN);
	if (h->classes_size > CLASSES_SIZE_MAX || h->classes_size < 4ull * h->class_count)
		return err_set(err, errlen, -EBADMSG, "header: class table size %llu for %u classes",
			    (unsigned long long)h->classes_size, h->class_count);
	if (h->kinds & ~(uint32_t)((1u << (DPK_KIND_MAX + 1)) - 2))
		return err_set(err, errlen, -EBADMSG, "header: unknown record kinds 0x%x", h->kinds);
	if (h->reserved0 || h->reserved[0] || h->reserved[1] || h->reserved[2] || h->reserved[3])
		return err_set(err, errlen, -EBADMSG, "header: reserved fields are not zero");
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

	if (shape_check(e->kind, e->ndim, e->shape, e->subsamp, &raw_size, &why) < 0)
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

/* ---- the SIGBUS guard of mapped indexes ----
 *
 * A mapped index whose file is truncated raises SIGBUS on the next touch of a page past the new
 * end. The guard turns that into an error of the datasets concerned: its handler finds the
 * faulting address in the table of mapped indexes, marks that dataset lost, maps a page of zeros
 * over the faulting page and returns, so the access completes (reading zeros, which no entry
 * check passes) and dpk_entry_load, which looks at `lost` after its copy, reports the
 * truncation. A fault anywhere else goes to the handler that was there before (or the default:
 * the process dies as it would have). The table is written under guard_mu and read by the
 * handler without locks: a slot's base is published last (release) and read first (acquire). A
 * dataset's slot can only fault while it is mapped, that is before dpk_close clears its slot. */
#define GUARD_SLOTS DPK_GUARD_SLOTS  /* mappings guarded at once: two a file (index, data), and a set of
			   * shards maps each of its files (a slot is 24 bytes; the handler scans
			   * them only on a SIGBUS). Past it, an index is copied and data read */
struct guard_slot {
	_Atomic uintptr_t base;   /* 0: free */
	uintptr_t len;
	struct dpk *d;
	long owner;               /* who it is charged to (dpk_guard_owner), -1: no one */
};
/* The owner the calling thread's next mappings are charged to, and how many slots that owner may
 * hold at once (dpk_guard_owner): the table is one for the process, shared by every user of a
 * daemon, so that one user's shards cannot take every slot. */
static _Thread_local long guard_owner = -1;
static _Thread_local unsigned guard_owner_max;
static struct guard_slot guard_tab[GUARD_SLOTS];
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction guard_old;
static uintptr_t guard_page;  /* the page size, read before the handler can run (sysconf is not
			       * async-signal-safe) */

static void guard_handler(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;

	for (int k = 0; k < GUARD_SLOTS; k++) {
		uintptr_t base = atomic_load_explicit(&guard_tab[k].base, memory_order_acquire);
		if (!base || a < base || a - base >= guard_tab[k].len)
			continue;
		atomic_store(&guard_tab[k].d->lost, 1);
		if (mmap((void *)(a & ~(guard_page - 1)), (size_t)guard_page, PROT_READ,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
			return;
		break;  /* cannot patch it: die as the default would */
	}
	if ((guard_old.sa_flags & SA_SIGINFO) && guard_old.sa_sigaction) {
		guard_old.sa_sigaction(sig, si, uc);
		return;
	}
	if (guard_old.sa_handler != SIG_DFL && guard_old.sa_handler != SIG_IGN) {
		guard_old.sa_handler(sig);
		return;
	}
	/* the default action: the faulting access runs again and kills the process */
	signal(SIGBUS, SIG_DFL);
}

void dpk_guard_owner(long owner, unsigned max)
{
	guard_owner = owner < 0 ? -1 : owner;
	guard_owner_max = max;
}

/* Under guard_mu. Slots charged to @owner. */
static unsigned guard_count(long owner)
{
	unsigned n = 0;

	for (int k = 0; k < GUARD_SLOTS; k++)
		n += atomic_load_explicit(&guard_tab[k].base, memory_order_relaxed) &&
		     guard_tab[k].owner == owner;
	return n;
}

unsigned dpk_guard_held(long owner)
{
	pthread_mutex_lock(&guard_mu);
	unsigned n = guard_count(owner);
	pthread_mutex_unlock(&guard_mu);
	return n;
}

/* A slot for @d's mapping (installing the handler the first time), charged to this thread's
 * guard_owner, or -1 when the table is full, that owner holds its guard_owner_max, or the handler
 * cannot be set. */
static int guard_add(struct dpk *d, void *base, size_t len)
{
	int slot = -1;

	struct sigaction cur;
	int installed;

	pthread_mutex_lock(&guard_mu);
	guard_page = (uintptr_t)sysconf(_SC_PAGESIZE);
	/* (Again) when someone else's handler took SIGBUS since: ours goes first, chaining to it. */
	installed = sigaction(SIGBUS, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
		    cur.sa_sigaction == guard_handler;
	if (!installed) {
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = guard_handler;
		sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
		sigemptyset(&sa.sa_mask);
		installed = sigaction(SIGBUS, &sa, &guard_old) == 0;
	}
	if (guard_owner >= 0 && guard_owner_max && guard_count(guard_owner) >= guard_owner_max)
		installed = 0;  /* its share is held: a copy and reads, as when the table is full */
	for (int k = 0; installed && k < GUARD_SLOTS && slot < 0; k++) {
		if (atomic_load_explicit(&guard_tab[k].base, memory_order_relaxed))
			continue;
		guard_tab[k].len = len;
		guard_tab[k].d = d;
		guard_tab[k].owner = guard_owner;
		atomic_store_explicit(&guard_tab[k].base, (uintptr_t)base, memory_order_release);
		slot = k;
	}
	pthread_mutex_unlock(&guard_mu);
	return slot;
}

static void guard_remove(int slot)
{
	pthread_mutex_lock(&guard_mu);
	atomic_store_explicit(&guard_tab[slot].base, 0, memory_order_release);
	pthread_mutex_unlock(&guard_mu);
}

/* Map the index section read-only; 0, or -errno when it cannot (the caller copies it then). */
static int map_index(struct dpk *d)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t start = d->hdr.index_offset & ~(uint64_t)(pg - 1);
	uint64_t len = d->hdr.index_offset + d->hdr.index_size - start;

	if (len > SIZE_MAX)
		return -EFBIG;
	void *p = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, d->fd, (off_t)start);
	if (p == MAP_FAILED)
		return -errno;
	d->map_base = p;
	d->map_len = (size_t)len;
	d->guard_slot = guard_add(d, p, (size_t)len);
	if (d->guard_slot < 0) {
		munmap(p, (size_t)len);
		d->map_base = NULL;
		return -ENOSPC;
	}
	d->map = (const struct dpk_entry *)((uint8_t *)p + (d->hdr.index_offset - start));
	return 0;
}

/* Map the data section read-only (DPK_OPEN_MAP_DATA); 0 or -errno (then records are read). */
static int map_data(struct dpk *d)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t start = d->hdr.data_offset & ~(uint64_t)(pg - 1);
	uint64_t len = d->hdr.data_offset + d->hdr.data_size - start;

	if (!d->hdr.data_size || len > SIZE_MAX)
		return -EFBIG;
	void *p = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, d->fd, (off_t)start);
	if (p == MAP_FAILED)
		return -errno;
	d->data_slot = guard_add(d, p, (size_t)len);
	if (d->data_slot < 0) {
		munmap(p, (size_t)len);
		return -ENOSPC;
	}
	d->data_base = p;
	d->data_len = (size_t)len;
	d->data = (const uint8_t *)p - start;
	return 0;
}

/* Read the index into private memory and check it whole (checksum, every entry). */
static int copy_index(struct dpk *d, unsigned flags, char *err, size_t errlen)
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
	if (!dpk_same_classes(d->shards[0], d->shards[k]))
		return err_set(err, errlen, -EBADMSG, "%s line %u: shard %s has other class names "
			       "than shard %s", name, sh->line, sh->path, d->set->shards[0].path);
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
static int set_open(struct dpk *d, const struct stat *mst, const int *fds, uint32_t nfds,
		    unsigned flags, char *err, size_t errlen)
{
	char self[64], name[PATH_MAX];
	int ret;

	snprintf(self, sizeof(self), "/proc/self/fd/%d", d->fd);
	ssize_t nl = readlink(self, name, sizeof(name) - 1);
	if (nl <= 0)
		return err_set(err, errlen, -EBADF, "manifest: cannot tell its directory (%s)",
			       strerror(nl < 0 ? errno : ENOENT));
	name[nl] = '\0';
	if ((uint64_t)mst->st_size > DPKSET_FILE_MAX)
		return err_set(err, errlen, -E2BIG, "%s: %lld bytes, above the limit of %llu for a "
			       "manifest", name, (long long)mst->st_size,
			       (unsigned long long)DPKSET_FILE_MAX);
	char *text = malloc((size_t)mst->st_size + 1);
	if (!text)
		return err_set(err, errlen, -ENOMEM, "out of memory");
	ret = pread_full(d->fd, text, (size_t)mst->st_size, 0);
	if (ret == 0)
		ret = dpkset_parse(text, (size_t)mst->st_size, name, &d->set, err, errlen);
	else
		err_set(err, errlen, ret, "%s: %s", name, strerror(-ret));
	free(text);
	if (ret < 0)
		return ret;
	if (fds && nfds != d->set->n)
		return err_set(err, errlen, -EINVAL, "%s names %u shards; %u were passed open", name,
			       d->set->n, nfds);
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
	else if (!(flags & DPK_OPEN_MAP) || !d->hdr.count || map_index(d) < 0)
		ret = copy_index(d, flags, err, errlen);
	if (ret < 0)
		goto fail;
	if (flags & DPK_OPEN_MAP_DATA)
		map_data(d);  /* else records are read: dpk_record_copy says so */
	/* The header holds the index's and the class table's checksums (and is checksummed
	 * itself): their digest names the content (every record's checksum, offset, label and
	 * shape; not the path) for resume tokens, at the same cost whatever the count. Little-endian
	 * bytes, high half first. */
	uint64_t key[4] = { d->hdr.index_xxh3, d->hdr.classes_xxh3, d->hdr.count, d->hdr.data_size };
	XXH128_hash_t id = XXH3_128bits_withSeed(key, sizeof(key), d->hdr.classes_xxh3 ^ d->hdr.count);
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
	}
	free(d->index);
	if (d->index_fd >= 0)
		close(d->index_fd);
	if (d->map_base) {
		guard_remove(d->guard_slot);
		munmap(d->map_base, d->map_len);
	}
	if (d->data_base) {
		guard_remove(d->data_slot);
		munmap(d->data_base, d->data_len);
	}
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
	if (d->set)
		return dpk_class_name(d->shards[0], i);
	return i < d->hdr.class_count ? d->class_names[i] : NULL;
}

const struct dpk_entry *dpk_entry_get(const struct dpk *d, uint64_t i)
{
	return i < d->hdr.count && d->index ? &d->index[i] : NULL;
}

int dpk_mapped(const struct dpk *d)
{
	if (d->set)
		return dpk_mapped(d->shards[0]);
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
		dpk_entry_prefetch(d->shards[k], i - d->set->first[k]);
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

	if (d->set)
		return e->reserved < d->set->n ? dpk_record_copy(d->shards[e->reserved], e, buf, cap) :
		       -EBADMSG;
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
		int ret = dpk_entry_load(d->shards[k], i - d->set->first[k], out, why, sizeof(why));
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
	if (d->set)
		return e->reserved < d->set->n ? d->shards[e->reserved]->fd : -1;
	return d->fd;
}

int dpk_direct_open(struct dpk *d)
{
	char self[64];

	if (!d->set)
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
	return d->set && e->reserved < d->set->n ? d->shards[e->reserved]->fd_direct : -1;
}

uint32_t dpk_shard_count(const struct dpk *d)
{
	return d->set ? d->set->n : 1;
}

const struct dpk *dpk_shard(const struct dpk *d, uint32_t k)
{
	if (!d->set)
		return k == 0 ? d : NULL;
	return k < d->set->n ? d->shards[k] : NULL;
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

	if (d->set)
		return e->reserved < d->set->n ? dpk_read_entry(d->shards[e->reserved], e, buf, cap) :
		       -EBADMSG;
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
	if (w->index_at && (w->count == w->expect_count ||
			    r->length > w->expect_data - (w->pos - DPK_HEADER_SIZE)))
		return -EINVAL;  /* more than dpk_writer_expect said */
	if (shape_check(r->kind, r->ndim, r->shape, r->subsamp, &raw_size, &why) < 0 ||
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
	struct dpk_entry *e = &w->index[w->count - w->spilled];
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
	uint64_t mem = (w->count - w->spilled) * sizeof(struct dpk_entry);
	if (w->ixh) {
		XXH3_64bits_update(w->ixh, w->index, mem);
		h.index_xxh3 = XXH3_64bits_digest(w->ixh);
	} else {
		h.index_xxh3 = XXH3_64bits(w->index, mem);
	}
	h.file_size = h.index_offset + h.index_size;
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
	free(w);
}
