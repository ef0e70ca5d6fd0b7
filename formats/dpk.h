/* dpk.h - the packed dataset format (.dpk): one file per dataset, O(1) random access by sample
 * index, every record and the index checksummed with XXH3-64. Spec: docs/FORMAT.md.
 *
 * Layout: header (DPK_HEADER_SIZE bytes) | records, back to back, unpadded | class names | index
 * (count x struct dpk_entry). All integers little-endian. The header is written last, so a file
 * whose header checks out was written completely. */
#ifndef LOADERD_DPK_H
#define LOADERD_DPK_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#ifdef __cplusplus
extern "C" {
#endif

#define DPK_MAGIC "DPKv\r\n\x1a\n"  /* 8 bytes; the CR LF / ^Z catch text-mode mangling, as PNG */
#define DPK_VERSION 2u           /* the newest this build reads and writes; a file without
				  * features (below) is written as version 1, which every reader
				  * since the first reads */
#define DPK_VERSION_MIN 1u
#define DPK_INDEX_ALIGN 64u          /* index_offset is a multiple of this */
#define DPK_HEADER_SIZE 4096u        /* records start here: 4 KiB aligned for O_DIRECT */
#define DPK_NDIM_MAX 4
#define DPK_CLASS_NAME_MAX 1024u     /* bytes, without the terminating NUL */
#define DPK_RECORD_MAX (1ull << 34)  /* 16 GiB: larger stored or decoded records are corrupt */
#define DPK_DIM_MAX (1u << 20)       /* no dimension of a tensor or image exceeds this */
#define DPK_IDENTITY_SIZE 16u        /* bytes of dpk_identity() */

/* Version 2's features (dpk_header.features): a reader refuses a bit it does not know, by name. */
#define DPK_FEAT_AUX 0x1u            /* per-record auxiliary fields (a caption, metadata bytes) */
#define DPK_FEAT_NO_LABELS 0x2u      /* the dataset has no labels: every entry's label is -1 */
#define DPK_FEATURES_KNOWN 0x3u
/* Auxiliary fields (docs/FORMAT.md, "Auxiliary fields"): each record has the same named fields,
 * each any bytes (UTF-8 or not), stored as one blob right after the record's own bytes. */
#define DPK_AUX_FIELDS_MAX 8u        /* fields a dataset may name */
#define DPK_AUX_NAME_MAX 64u         /* bytes of a field's name: [A-Za-z0-9_.-], 1..64 */
#define DPK_AUX_FIELD_MAX 65536u     /* bytes of one field of one record (a caption: 64 KiB) */
#define DPK_AUX_RECORD_MAX 262144u   /* bytes of one record's blob: 4 x fields + their bytes */

enum dpk_kind {
	DPK_KIND_JPEG = 1,      /* JPEG file stored as is; shape = H, W, C from its SOF */
	DPK_KIND_RAW = 2,       /* uint8 tensor, C order, shape[0..ndim) */
	DPK_KIND_RAW_ZSTD = 3,  /* the same tensor, one zstd frame */
	DPK_KIND_JPEG_RST = 4,  /* JPEG rewritten by dpack: baseline, one scan, restart markers at
				 * the start of every MCU row (docs/FORMAT.md); shape as JPEG */
	DPK_KIND_JPEG_IDX = 5,  /* JPEG (baseline, one scan, no restart markers) followed by an
				 * index of MCU bit offsets and DC predictions (docs/FORMAT.md) */
	/* Image files stored as they are and decoded to RGB as PIL's convert("RGB") does (what
	 * torchvision's ImageFolder trains on); shape = H, W, 3 (the decoded RGB). */
	DPK_KIND_JPEG_CMYK = 6, /* JPEG with 4 components (CMYK or YCCK, Adobe inverted or not) */
	DPK_KIND_PNG = 7,       /* PNG: any bit depth and colour type, interlaced or not */
	DPK_KIND_WEBP = 8,      /* WebP: lossy or lossless, still (the first frame of an animation) */
	DPK_KIND_PNM = 9,       /* binary PGM (P5) or PPM (P6), maxval 1..255 */
	DPK_KIND_BMP = 10,      /* BMP: uncompressed 1/4/8-bit palette, 24/32-bit */
	DPK_KIND_TIFF = 11,     /* TIFF: 8-bit grey or RGB, contiguous, in strips */
	DPK_KIND_JPEG_IDX_CMYK = 12, /* a 4-component JPEG (as kind 6) laid out as jpeg+idx: baseline,
				      * one scan, followed by its index (docs/FORMAT.md) */
};
#define DPK_KIND_MAX 12

/* What the format itself knows of a kind: one row per kind in formats/dpk_index.c (how a kind is
 * decoded is the codec's business: codec/kind.h). */
#define DPK_KF_IMAGE 0x1u       /* shape is H x W x {1,3}, sides <= 65535 */
#define DPK_KF_SUBSAMP 0x2u     /* entry.subsamp holds its chroma subsampling (else it is 0) */
#define DPK_KF_STORED_RAW 0x4u  /* the stored bytes are the tensor: length == raw_size */
#define DPK_KF_JPEG 0x8u        /* the stored bytes are a whole JPEG file (any decoder takes it) */
struct dpk_kind_info {
	const char *name;       /* "jpeg", "raw", "raw+zstd", "jpeg+rst", "jpeg+idx" */
	unsigned flags;         /* DPK_KF_* */
};

/* JPEG chroma subsampling, as parsed from the SOF sampling factors (values = TJSAMP_*). */
enum dpk_subsamp {
	DPK_SUB_444 = 0, DPK_SUB_422 = 1, DPK_SUB_420 = 2, DPK_SUB_GRAY = 3,
	DPK_SUB_440 = 4, DPK_SUB_411 = 5, DPK_SUB_OTHER = 255,
};

#define DPK_F_PROGRESSIVE 0x01u      /* entry.flags: progressive JPEG */

/* On disk at offset 0. header_xxh3 covers bytes [0, offsetof(header_xxh3)). */
struct dpk_header {
	char magic[8];
	uint32_t version;        /* DPK_VERSION; another value is -EPROTO */
	uint32_t header_size;    /* DPK_HEADER_SIZE */
	uint64_t count;          /* samples */
	uint64_t data_offset;    /* = header_size */
	uint64_t data_size;      /* bytes of records */
	uint64_t classes_offset; /* class table: class_count x (u32 len, len bytes UTF-8) */
	uint64_t classes_size;
	uint64_t index_offset;   /* count x struct dpk_entry */
	uint64_t index_size;     /* = count * sizeof(struct dpk_entry) */
	uint64_t file_size;      /* total bytes; a longer or shorter file is corrupt */
	uint64_t classes_xxh3;   /* XXH3-64 of the class table */
	uint64_t index_xxh3;     /* XXH3-64 of the index */
	uint32_t class_count;    /* 0 when the source had no class names (labels still valid) */
	uint32_t kinds;          /* bit (1 << kind) for every kind present */
	uint32_t entry_size;     /* sizeof(struct dpk_entry) */
	uint32_t features;       /* version 2: DPK_FEAT_*; version 1: 0 */
	uint64_t aux_offset;     /* DPK_FEAT_AUX: the aux section (= index_offset + index_size) */
	uint64_t aux_size;       /* its bytes: the field names (padded to 8), then count x struct
				  * dpk_aux_entry; aux_offset + aux_size = file_size */
	uint64_t aux_xxh3;       /* XXH3-64 of the aux section */
	uint32_t aux_fields;     /* 1..DPK_AUX_FIELDS_MAX with DPK_FEAT_AUX, else 0 */
	uint32_t aux_max;        /* the largest aux blob of any record, 4 x aux_fields ..
				  * DPK_AUX_RECORD_MAX (what a ring slot reserves a sample) */
	uint64_t header_xxh3;
};
_Static_assert(sizeof(struct dpk_header) == 152, "dpk_header is on disk");
_Static_assert(offsetof(struct dpk_header, count) == 16, "dpk_header is on disk");
_Static_assert(offsetof(struct dpk_header, class_count) == 96, "dpk_header is on disk");
_Static_assert(offsetof(struct dpk_header, header_xxh3) == 144, "dpk_header is on disk");
_Static_assert(offsetof(struct dpk_header, features) == 108, "dpk_header is on disk");
_Static_assert(offsetof(struct dpk_header, aux_offset) == 112, "dpk_header is on disk");
_Static_assert(offsetof(struct dpk_header, aux_fields) == 136, "dpk_header is on disk");

/* On disk, in the aux section after the field names: one per sample, in sample order. A record's
 * blob: u32 length of each field in field order, then the fields' bytes back to back. */
struct dpk_aux_entry {
	uint64_t offset;         /* absolute file offset of the blob: the end of its record */
	uint64_t xxh3;           /* XXH3-64 (seed 0) of the blob */
	uint32_t length;         /* 4 x aux_fields .. aux_max */
	uint32_t reserved;       /* zero */
};
_Static_assert(sizeof(struct dpk_aux_entry) == 24, "dpk_aux_entry is on disk");

/* On disk: one per sample, in sample order; records appear in the file in the same order. */
struct dpk_entry {
	uint64_t offset;         /* absolute file offset of the stored bytes */
	uint64_t length;         /* stored bytes, 1..DPK_RECORD_MAX */
	int64_t label;           /* class index (0..class_count-1 when class_count > 0) */
	uint64_t xxh3;           /* XXH3-64 (seed 0) of the stored bytes */
	uint64_t raw_size;       /* decoded bytes: product of shape (uint8 elements) */
	uint32_t shape[DPK_NDIM_MAX]; /* JPEG: H, W, C, 0; raw: the tensor's shape, 0 past ndim */
	uint8_t kind;            /* enum dpk_kind */
	uint8_t ndim;            /* 1..DPK_NDIM_MAX; JPEG: 3 */
	uint8_t subsamp;         /* JPEG: enum dpk_subsamp; raw: 0 */
	uint8_t flags;           /* DPK_F_* */
	uint32_t reserved;       /* zero on disk; in an entry loaded from a set, its shard's number */
};
_Static_assert(sizeof(struct dpk_entry) == 64, "dpk_entry is on disk");
_Static_assert(offsetof(struct dpk_entry, shape) == 40, "dpk_entry is on disk");
_Static_assert(offsetof(struct dpk_entry, kind) == 56, "dpk_entry is on disk");

/* ---- reader ---- */

struct dpk;  /* opaque; immutable after open, so safe to share between threads */

#define DPK_OPEN_NO_INDEX_CHECK 0x1u  /* skip the index checksum (entries are still validated) */
#define DPK_OPEN_MAP 0x2u  /* map the index read-only instead of copying it: open reads the header
			    * and class table only (its cost does not grow with the count), the index
			    * checksum is not checked (`dpack verify` does), and each entry is checked
			    * when dpk_entry_load copies it out, as strictly as a copied index is at
			    * open. Copies of one file opened so share its pages. The first such open
			    * installs a SIGBUS handler (chaining to the one before) that turns a
			    * truncation of the file under the mapping into dpk_entry_load's -EBADMSG
			    * for that dataset. dpk_entry_get() returns NULL on a mapped index. Falls
			    * back to a copy when the index cannot be mapped (dpk_mapped says). */
#define DPK_OPEN_MAP_DATA 0x4u  /* map the data section read-only too, for dpk_record_copy (a
				 * dataset in the page cache is copied from it, no syscall a record);
				 * guarded against truncation as the index is. Left unmapped when it
				 * cannot be (dpk_data_mapped says) */
#define DPK_OPEN_READ_INDEX 0x8u  /* neither copy nor map the index: dpk_entry_load reads each entry
				   * (and its neighbours) with one pread and checks it as DPK_OPEN_MAP
				   * does; a file truncated later gives -EBADMSG, never SIGBUS. What
				   * DPK_OPEN_MAP does for an index above DPK_INDEX_MAP_MAX */
#define DPK_INDEX_MAP_MAX (1ull << 30)  /* bytes: DPK_OPEN_MAP maps an index up to this size (16M
				       * entries), larger ones are read (DPK_OPEN_READ_INDEX). A
				       * mapped index comes to count whole in the process's RSS: a
				       * fault maps the page cache's whole folio (up to 2 MiB) */

/* A set of shards (formats/dpkset.h): dpk_open and dpk_open_fd on a manifest open every shard it
 * names (paths relative to the manifest's directory) with this process's rights, or dpk_open_fds
 * takes them open from its caller (loaderd: its client opened them), with @flags; check each against its line (count, identity, the same class table as
 * the first), and give one dataset: sample i is sample i - first[k] of shard k (dpkset_find).
 * dpk_count, the class table, dpk_entry_load and the record functions work across the shards;
 * dpk_identity is the set's (dpkset_identity); dpk_header_get gives the shards' sums (count,
 * data_size, index_size, file_size; kinds or-ed; the class fields of the first; offsets
 * meaningless); dpk_fd is the manifest's; dpk_entry_get returns NULL (as on a mapped index). An
 * entry loaded from a set carries its shard's number in .reserved, by which dpk_read_entry,
 * dpk_record_copy and dpk_entry_fd find its file. A .dpk is a set of one shard, itself. */

/* Open and validate @path: header, checksums of header, class table and index, and every entry
 * (bounds, order, no overlap, no overflow, sane shapes). The index is read into private memory
 * (not mapped, unless DPK_OPEN_MAP: a file truncated or rewritten later cannot raise SIGBUS or
 * change an entry).
 * Returns 0 or -errno: -EBADMSG corrupt, -EPROTO other version, -ENOMEM, or open's errno.
 * On failure a message naming the fault (and the sample, if one) is written to @err. */
int dpk_open(const char *path, unsigned flags, struct dpk **out, char *err, size_t errlen);
/* The same on an fd the caller keeps owning (it must stay open until dpk_close). */
int dpk_open_fd(int fd, unsigned flags, struct dpk **out, char *err, size_t errlen);
/* The same, never opening a path: a manifest's shards are @shards[0, nshards) in manifest order,
 * which the caller keeps owning like @fd (nshards must equal the manifest's count; each must be a
 * regular file, not a manifest, and match its line). @fd a .dpk: @nshards must be 0. -EINVAL with
 * the reason for a count that does not match or a shard that is not a regular file. */
int dpk_open_fds(int fd, const int *shards, uint32_t nshards, unsigned flags, struct dpk **out,
		 char *err, size_t errlen);
void dpk_close(struct dpk *d);  /* NULL ok */
/* Descriptors @d opened itself and holds (an index read entry by entry, a set's shards opened by
 * path, their O_DIRECT twins), not counting the one it was opened on or those it borrowed. */
unsigned dpk_fds(const struct dpk *d);

uint64_t dpk_count(const struct dpk *d);
/* The dataset's identity: a 128-bit digest of the checksums of its index (every record's checksum,
 * offset, label and shape) and class table as the header states them, computed once at open. Equal for copies of one file wherever they
 * lie; different when any record differs. What a resume token binds to (shm/token.h). */
void dpk_identity(const struct dpk *d, uint8_t out[DPK_IDENTITY_SIZE]);
uint32_t dpk_class_count(const struct dpk *d);
/* NUL-terminated name of class @i, or NULL when out of range. Lives until dpk_close. */
const char *dpk_class_name(const struct dpk *d, uint32_t i);
/* Auxiliary fields: how many (0: none), field @k's name (NULL past the last; lives until
 * dpk_close), the largest blob of any record (0: none). */
uint32_t dpk_aux_fields(const struct dpk *d);
const char *dpk_aux_name(const struct dpk *d, uint32_t k);
uint32_t dpk_aux_max(const struct dpk *d);
/* 0 when the dataset has no labels (DPK_FEAT_NO_LABELS: every label is -1), else 1. */
int dpk_has_labels(const struct dpk *d);
/* Sample @i's aux blob, for entry @e loaded from @d for @i (dpk_entry_load), read with pread into
 * @buf (@cap bytes, at least dpk_aux_max) and checked: its aux entry (right after the record,
 * inside the data section, length 4 x fields .. aux_max, reserved zero), its checksum, and that
 * its field lengths (each at most DPK_AUX_FIELD_MAX) add up to its length. Returns the blob's
 * length; 0 when the dataset has no aux fields; -EBADMSG with a message naming the sample and
 * what is wrong in @err; -ENOSPC (@cap too small), -ERANGE (@i past the count), or a read's
 * -errno. Thread-safe. */
ssize_t dpk_aux_read(const struct dpk *d, uint64_t i, const struct dpk_entry *e, void *buf,
		     size_t cap, char *err, size_t errlen);
/* Field @k of a blob dpk_aux_read checked (@len bytes, @nfields fields): *@p, *@n. 0, or
 * -EBADMSG when the blob does not hold @nfields fields that add up to @len, -ERANGE for @k. */
int dpk_aux_field(const void *blob, size_t len, uint32_t nfields, uint32_t k, const uint8_t **p,
		  uint32_t *n);

/* Index entry @i (validated at open), or NULL when i >= count or the index is mapped
 * (DPK_OPEN_MAP: use dpk_entry_load). Lives until dpk_close. */
const struct dpk_entry *dpk_entry_get(const struct dpk *d, uint64_t i);
/* Copy entry @i into @out and check the copy: shape, raw_size, length, no overlap with its
 * neighbours, inside the data section, label within the classes, reserved bits, kind in the
 * header (a copied index was checked whole at open and is copied out as is). Returns 0, -ERANGE
 * past the count, -EBADMSG for a bad entry or a file truncated under its mapped index (@out is
 * then zeroed), with a message naming the sample in @err (NULL ok), or a read's -errno when the
 * entries are read (dpk_entries_read). Thread-safe; no syscall unless the entries are read. */
int dpk_entry_load(const struct dpk *d, uint64_t i, struct dpk_entry *out, char *err, size_t errlen);
/* Hint that dpk_entry_load(@i) comes soon (a mapped index: its cache lines are fetched; entries
 * of a shuffled order miss the cache). No effect past the count or on a copied index. */
void dpk_entry_prefetch(const struct dpk *d, uint64_t i);
/* 1 when the index is mapped (DPK_OPEN_MAP took), else 0. */
/* The SIGBUS guard of mappings (DPK_OPEN_MAP, DPK_OPEN_MAP_DATA) has DPK_GUARD_SLOTS slots for
 * the whole process, two a mapped file. A daemon serving many users charges them per user: the
 * mappings the calling thread makes from now on are charged to @owner (a uid; < 0: no one, the
 * default), who may hold @max of them at once (0: no limit but the table's). Past it a file is
 * opened as when the table is full: its index copied, its records read (dpk_mapped and
 * dpk_data_mapped say 0). A slot is given back by dpk_close. Thread-local; no errors. */
#define DPK_GUARD_SLOTS 4096
void dpk_guard_owner(long owner, unsigned max);
/* Guard slots charged to @owner now. */
unsigned dpk_guard_held(long owner);
int dpk_mapped(const struct dpk *d);
/* 1 when each entry is read from the file at dpk_entry_load (DPK_OPEN_READ_INDEX, or DPK_OPEN_MAP
 * on an index above DPK_INDEX_MAP_MAX), else 0. */
int dpk_entries_read(const struct dpk *d);
/* 1 when the data section is mapped (DPK_OPEN_MAP_DATA took), else 0. */
int dpk_data_mapped(const struct dpk *d);
/* Hint that dpk_record_copy(@e) comes soon: the first 256 bytes of its record are fetched (and
 * the page walk done), where the CPU's own prefetcher then carries on. No effect when the data
 * is not mapped or @e lies outside it; never faults. */
void dpk_record_prefetch(const struct dpk *d, const struct dpk_entry *e);
/* Copy the stored bytes of entry @e (loaded from @d) from the mapped data section into @buf: a
 * page that is not in the page cache is read in on the spot (the caller blocks). Returns the
 * length, -EINVAL when the data is not mapped, -ENOSPC when @cap is too small, -EBADMSG when the
 * entry lies outside the data section or the file was truncated under the mapping. The checksum
 * is not checked here (dpk_record_check). Thread-safe. */
ssize_t dpk_record_copy(const struct dpk *d, const struct dpk_entry *e, void *buf, size_t cap);
const struct dpk_header *dpk_header_get(const struct dpk *d);
int dpk_fd(const struct dpk *d);
/* The fd of the file that holds entry @e (loaded from @d): dpk_fd for one file, its shard's for a
 * set; -1 for an entry of no shard of @d. */
int dpk_entry_fd(const struct dpk *d, const struct dpk_entry *e);
/* 1 when @a and @b have the same aux field names in the same order and both or neither have
 * labels, else 0. */
int dpk_same_aux(const struct dpk *a, const struct dpk *b);
/* 1 when @a and @b have the same class names in the same order, else 0. */
int dpk_same_classes(const struct dpk *a, const struct dpk *b);
/* A set: open an O_DIRECT descriptor for every shard (through /proc/self/fd: the files opened,
 * not their paths). 0, or -errno with none kept (-EINVAL: the file system refuses O_DIRECT).
 * -ENOTSUP for one file (its reader opens its own). Not thread-safe: before any read. */
int dpk_direct_open(struct dpk *d);
void dpk_direct_close(struct dpk *d);  /* the set's O_DIRECT fds; before any read or after all */
/* The O_DIRECT fd of the shard holding entry @e (loaded from the set @d), or -1 (none open, or @d
 * is one file). */
int dpk_entry_fd_direct(const struct dpk *d, const struct dpk_entry *e);
/* Shards of @d: 1 for one file. */
uint32_t dpk_shard_count(const struct dpk *d);
/* Shard @k (@d itself for one file and k == 0), or NULL past the last. Lives until dpk_close. */
const struct dpk *dpk_shard(const struct dpk *d, uint32_t k);
/* Shard @k's path as its manifest names it, or NULL (one file, or past the last). */
const char *dpk_shard_path(const struct dpk *d, uint32_t k);
/* The global index of shard @k's first sample (the count for k past the last). */
uint64_t dpk_shard_first(const struct dpk *d, uint32_t k);

/* ---- a set streamed: shards pending until attached (docs/STREAMING.md) ----
 * dpk_open_pending opens a manifest with every shard pending: sample -> shard is known from the
 * manifest's counts (dpk_count is the set's, dpk_identity the set's, as dpk_open_fds gives), but
 * no shard is read. dpk_shard_attach gives shard k its file. The first attach, which must come
 * before the set is shared with another thread, makes that shard the template: the set takes its
 * header (kinds, data, index and file sizes, aux_max: the template's, never changed after), its
 * class table and its aux field names; every later shard is checked against them, and against
 * its manifest line, as dpk_open_fds checks every shard against the first.
 * Each shard has one atomic word: attached (a bit) and pins (a count). dpk_shard_hold pins an
 * attached shard; dpk_shard_detach succeeds only on an attached shard with no pin, atomically,
 * so no hold can succeed after it and none is outstanding. A reader holds a shard across every
 * call that reaches it (dpk_entry_load, dpk_read_entry, dpk_record_copy, dpk_entry_fd,
 * dpk_aux_read); those calls answer -EAGAIN (dpk_entry_fd: -1) for a sample of a pending shard.
 * Attaches and detaches of one set are serialised by its mutex; holds and releases take no lock
 * and may run on any thread. dpk_shard on a pending shard is NULL; dpk_direct_open answers
 * -ENOTSUP on a streamed set. */
/* Open the manifest @fd (the caller's, as dpk_open_fd) with all its shards pending. -EINVAL when
 * @fd is not a manifest; the manifest's own errors as dpk_open. */
int dpk_open_pending(int fd, unsigned flags, struct dpk **out, char *err, size_t errlen);
/* Attach shard @k from @fd (taken over in every case: closed on failure, else at detach or
 * dpk_close), opened with the set's flags and checked. 0, -ERANGE past the last shard, -EEXIST
 * attached already, -EINVAL not a streamed set, or the shard's open and check errors (-EBADMSG
 * for one that disagrees with its line or the template, the reason naming the manifest's line). */
int dpk_shard_attach(struct dpk *d, uint32_t k, int fd, char *err, size_t errlen);
/* Pin shard @k: 0, or -EAGAIN while it is pending, -ERANGE past the last. On a set opened whole
 * (or one file) every shard is always here: 0, and dpk_shard_release does nothing. */
int dpk_shard_hold(struct dpk *d, uint32_t k);
void dpk_shard_release(struct dpk *d, uint32_t k);  /* after a hold that returned 0 */
/* Detach shard @k (close its file and mappings): 0, -EBUSY while pinned, -ENOENT when pending,
 * -ERANGE past the last, -EINVAL not a streamed set. */
int dpk_shard_detach(struct dpk *d, uint32_t k);
/* 1 when shard @k is attached (for a set opened whole or one file: always), else 0. A snapshot:
 * only a hold keeps it so. */
int dpk_shard_attached(const struct dpk *d, uint32_t k);
/* The shard holding sample @i (< dpk_count): 0 for one file. */
uint32_t dpk_shard_find(const struct dpk *d, uint64_t i);
/* 1 for a set opened with dpk_open_pending, else 0. */
int dpk_streamed(const struct dpk *d);

/* Read record @i's stored bytes into @buf (capacity @cap >= entry length) with pread and check
 * its checksum. Returns the length, -EBADMSG on checksum mismatch or short file, -ENOSPC when
 * @cap is too small, -ERANGE for a bad index, or the read's -errno. Thread-safe. */
ssize_t dpk_read(const struct dpk *d, uint64_t i, void *buf, size_t cap);
/* dpk_read for an entry already loaded (dpk_entry_load): reads e->length bytes at e->offset. */
ssize_t dpk_read_entry(const struct dpk *d, const struct dpk_entry *e, void *buf, size_t cap);
/* 0 when @buf (entry->length bytes) matches the entry's checksum, else -EBADMSG. */
int dpk_record_check(const struct dpk_entry *e, const void *buf);

/* The O_DIRECT view of a record: the block-aligned extent that covers it. */
struct dpk_extent {
	uint64_t offset;  /* aligned down to the block size */
	uint64_t length;  /* aligned up; offset + length covers the record */
	uint64_t skip;    /* record starts at buffer + skip */
};
/* @block: a power of two (e.g. 512 or 4096). */
void dpk_extent_align(const struct dpk_entry *e, uint64_t block, struct dpk_extent *out);

/* ---- writer ---- */

struct dpk_writer;

/* A record to append. The writer computes xxh3 and raw_size; for DPK_KIND_RAW_ZSTD, @data is
 * the compressed frame and shape describes the decompressed tensor. */
struct dpk_record {
	enum dpk_kind kind;
	int64_t label;
	const void *data;
	uint64_t length;
	uint32_t shape[DPK_NDIM_MAX];
	uint8_t ndim;
	uint8_t subsamp;
	uint8_t flags;
	uint64_t xxh3;     /* when has_xxh3, trusted as the checksum of data (saves a pass) */
	int has_xxh3;
	/* With dpk_writer_set_aux: field k's bytes are aux[k] (aux_len[k] bytes, NULL when 0) */
	const void *aux[DPK_AUX_FIELDS_MAX];
	uint32_t aux_len[DPK_AUX_FIELDS_MAX];
};
/* The bytes a record of @nfields fields of @lens adds to the data section (its blob), or 0 when
 * nfields is 0: what dpk_writer_expect's @data_size counts beside the records' lengths. */
uint64_t dpk_aux_blob_size(uint32_t nfields, const uint32_t *lens);

#define DPK_WRITE_NO_SYNC 0x1u  /* skip writeback and fsync: the rename stays atomic for other
				 * processes, but a crash soon after may lose the file's data */

/* Start writing @path: records go to a temporary file in the same directory, which
 * dpk_writer_finish() fsyncs and renames over @path. Returns 0 or -errno. */
int dpk_writer_create(const char *path, unsigned flags, struct dpk_writer **out);
/* Set the class names (copied). Call before finish (and before dpk_writer_expect). Returns 0,
 * -EINVAL (name too long, or after dpk_writer_expect) or -ENOMEM. */
int dpk_writer_set_classes(struct dpk_writer *w, const char *const *names, uint32_t n);
/* Give every record the aux fields @names[0, n) (1..DPK_AUX_FIELDS_MAX, each 1..DPK_AUX_NAME_MAX
 * bytes of [A-Za-z0-9_.-], no two the same; copied), and/or (@no_labels) no label: the file is
 * version 2 with DPK_FEAT_AUX / DPK_FEAT_NO_LABELS. Before the first add. 0, -EINVAL (a bad name,
 * too many, after an add) or -ENOMEM. A record's fields are then each at most DPK_AUX_FIELD_MAX
 * bytes (dpk_writer_add: -EMSGSIZE past it). */
int dpk_writer_set_aux(struct dpk_writer *w, const char *const *names, uint32_t n, int no_labels);
/* Say that exactly @count records of @data_size bytes in all will be added (before the first):
 * the index's place is then known, and its entries go straight there as they are made, not
 * through a spill file copied in at finish (one write of the index instead of three passes).
 * An add past either figure is -EINVAL; a finish short of them is -EINVAL (nothing is kept).
 * Returns 0 or -EINVAL (records already added, called twice, or figures that overflow). */
int dpk_writer_expect(struct dpk_writer *w, uint64_t count, uint64_t data_size);
/* Append the next sample. Returns 0, -EINVAL (bad shape or kind) or the write's -errno
 * (-ENOSPC on a full disk). After an error the writer only accepts destroy. */
int dpk_writer_add(struct dpk_writer *w, const struct dpk_record *r);
uint64_t dpk_writer_count(const struct dpk_writer *w);
/* Write class table, index and header, fsync, rename to the final path, fsync the directory.
 * Returns 0 or -errno; on error the temporary file is removed and @path is untouched. */
int dpk_writer_finish(struct dpk_writer *w);
/* Free; removes the temporary file unless finish succeeded. NULL ok. */
void dpk_writer_destroy(struct dpk_writer *w);
/* The temporary file's path (for a signal handler that must unlink it). */
const char *dpk_writer_tmp_path(const struct dpk_writer *w);

/* @kind's row, or NULL for an unknown kind (0 or above DPK_KIND_MAX). Static storage. */
const struct dpk_kind_info *dpk_kind_info(unsigned kind);
/* Human name of a kind ("jpeg", "raw", "raw+zstd") or "?". */
const char *dpk_kind_name(unsigned kind);
const char *dpk_subsamp_name(unsigned subsamp);

#ifdef __cplusplus
}
#endif
#endif
