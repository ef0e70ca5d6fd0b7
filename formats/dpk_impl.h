/* dpk_impl.h - what the parts of the .dpk reader and writer share, private to formats/dpk_*.c
 * (the interface is formats/dpk.h). The format is docs/FORMAT.md; the parts, by role:
 *   dpk_open.c   open and close: the header, the class table, sets of shards (by path, or passed
 *                open: dpk_open_fds), the accessors and the O_DIRECT twins
 *   dpk_index.c  the index: the kind table and shapes, each entry's checks, the index copied and
 *                checked whole, an entry loaded (from the copy, the mapping or the file) and
 *                checked at use, records copied from a mapping and checked
 *   dpk_aux.c    the aux fields (version 2): names, entries, a record's blob read and checked
 *   dpk_guard.c  the SIGBUS guard of mapped files (per-owner slots) and the mappings it guards
 *   dpk_write.c  the writer: records streamed to a temporary file, the index spilled past a
 *                bound, classes, index and header last, fsync and rename
 * The reader trusts nothing on disk: dpk_open validates the header, the class table and every
 * index entry (bounds, order, overlap, overflow, shapes) once (or, mapped or read entry by entry,
 * each entry where it is used), so that afterwards an entry can size buffers and issue reads
 * without further checks. Record bytes are checked against their XXH3-64 when read. */
#ifndef LOADERD_DPK_IMPL_H
#define LOADERD_DPK_IMPL_H
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
	char *aux_blob;                 /* aux field names, each NUL-terminated (DPK_FEAT_AUX) */
	const char *aux_names[DPK_AUX_FIELDS_MAX];
	uint64_t aux_at;                /* file offset of aux entry 0 (after the names) */
	struct dpk_aux_entry *aux;      /* the aux entries, copied and checked with the index when
					 * it is copied; else NULL and each is read at use */
	uint8_t identity[DPK_IDENTITY_SIZE]; /* XXH3-128 of the index, seeded by the class table's
					      * checksum: computed once here (dpk_identity) */
	/* A set of shards (dpk_open on a manifest, formats/dpkset.h): fd is the manifest's, hdr
	 * their sums, identity the set's; entries, records and classes come from the shards. */
	struct dpkset_manifest *set;    /* NULL for one file */
	struct dpk **shards;            /* set->n, each a whole .dpk opened with the set's flags */
	int fd_direct;                  /* a set's shard: its O_DIRECT fd (dpk_direct_open), or -1 */
	/* A streamed set (dpk_open_pending): shard k's word, DPK_SLOT_ATTACHED | pins. shards[k] is
	 * written before the attach's release CAS and cleared after the detach's CAS; a reader reads
	 * it after its hold's acquire CAS. NULL for a set opened whole. */
	_Atomic uint64_t *slot;
	pthread_mutex_t attach_mu;      /* serialises attach and detach (slot != NULL) */
	unsigned open_flags;            /* the flags each attached shard is opened with */
	int tmpl;                       /* the template's shard number, or -1 before the first attach */
	int tmpl_mapped;                /* dpk_mapped and dpk_data_mapped of the template */
	int tmpl_data_mapped;
};

#define DPK_SLOT_ATTACHED (1ull << 63)
#define DPK__OPEN_NO_SHARDS 0x80000000u  /* set_open: parse the manifest, open no shard */

/* Shard @k of set @d (k < n), or NULL while it is pending (a streamed set). */
static inline struct dpk *dpk__shard(const struct dpk *d, uint32_t k)
{
	/* acquire: pairs with dpk_shard_attach's release CAS (shards[k] written before it) */
	if (d->slot && !(atomic_load_explicit(&d->slot[k], memory_order_acquire) &
			 DPK_SLOT_ATTACHED))
		return NULL;
	return d->shards[k];
}

/* pread exactly @len bytes at @off. Returns 0, -EBADMSG at EOF, or -errno. */

static inline int pread_full(int fd, void *buf, size_t len, uint64_t off)
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

static inline int add_overflows(uint64_t a, uint64_t b, uint64_t *sum)
{
	return __builtin_add_overflow(a, b, sum);
}


/* dpk_index.c */
int dpk__shape_check(unsigned kind, unsigned ndim, const uint32_t *shape, unsigned subsamp,
		     uint64_t *raw_size, const char **why);
int dpk__copy_index(struct dpk *d, unsigned flags, char *err, size_t errlen);
/* dpk_aux.c */
int dpk__load_aux_names(struct dpk *d, char *err, size_t errlen);
int dpk__copy_aux(struct dpk *d, unsigned flags, char *err, size_t errlen);
/* dpk_guard.c */
int dpk__map_index(struct dpk *d);
int dpk__map_data(struct dpk *d);
void dpk__guard_remove(int slot);

#endif
