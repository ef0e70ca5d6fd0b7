/* pack.c - dpack pack: turn an ImageFolder tree, a WebDataset tar or a pair of .npy files into
 * one .dpk file.
 *
 * DESIGN: the source is first listed into items (path or byte range, label) in the order
 * torchvision would give them, by its input format (tools/dpack/input.h). Worker threads then take
 * items in index order, read them, probe image files for their record kind (codec/kind_pack.h: for a
 * JPEG its dimensions, subsampling, truncation), compress raw tensors and checksum, and
 * leave the result in a slot of a reorder window; the main thread writes slots strictly in item
 * order, so the output does not depend on --jobs. Workers run up to WINDOW_PER_JOB items a worker
 * ahead of the writer, and take no new item while the records done but not yet written hold
 * INFLIGHT_BYTES or more: memory stays under that plus one record a worker, yet one large file
 * (a full-size progressive JPEG takes 100x the time of an ImageNet-sized one) does not stall the
 * other workers behind it, as a window of a few items a worker did. Any fatal error (read error,
 * full disk, signal) stops the workers and removes the temporary file: OUT either is a whole
 * dataset or was not touched.
 *
 * Tensors that lie back to back in one file (a .npy array, stored uncompressed: the input's
 * span()) skip the workers: the main thread reads them BLOCK_BYTES at a time with one pread and
 * hands each record to the writer from the block (pack_blocks), so packing costs a few large
 * reads and a checksum pass, not two reads and a hand-off between threads per record. */
#include "common/args.h"
#include "common/clk.h"
#include "common/log.h"
#include "common/proc.h"
#include "formats/dpk.h"
#include "formats/jsonf.h"
#include "codec/jpeg_build.h"
#include "codec/kind_pack.h"
#include "tools/dpack/dpack.h"
#include "tools/dpack/input.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
/* XXH3 through libxxhash's run-time dispatch (AVX2 or AVX-512 where the CPU has them; the same
 * hashes): its plain XXH3_64bits is the SSE2 build, 3-4x slower on a 3 KB record. */
#include <xxh_x86dispatch.h>
#endif
#include <zstd.h>

enum slot_status { SLOT_OK, SLOT_SKIP, SLOT_FATAL };

struct slot {
	int done;                /* set by a worker under pk.lock; cleared by the writer */
	enum slot_status status;
	int err;                 /* SLOT_FATAL: -errno */
	uint8_t *buf;            /* owned; the record's stored bytes */
	uint8_t *fbuf[DPK_AUX_FIELDS_MAX]; /* owned; its aux fields' bytes (--field) */
	uint64_t held;           /* bytes buf holds, counted in pk.held while done */
	uint64_t in_len;         /* the source's bytes (before a rewrite) */
	struct dpk_record rec;
	char why[200];
};

struct pack {
	const struct dpack_input *in;  /* the source's format */
	struct dpack_src src;
	int zstd_level;          /* 0: store raw uncompressed */
	int keep;                /* --keep-jpeg: files are stored as they are, not repacked */
	struct cdc_repack_opts repack; /* jpeg+idx (--index-width) or jpeg+rst (--restart-width) */
	uint64_t max_pixels;     /* --max-pixels: larger images are skipped, read no further */
	struct dpack_field_spec fields[DPK_AUX_FIELDS_MAX];  /* --field, src.nfields of them */
	const char *field_names[DPK_AUX_FIELDS_MAX];

	pthread_mutex_t lock;
	pthread_cond_t cv_done;  /* a slot became done (workers -> writer) */
	pthread_cond_t cv_space; /* the writer freed a slot, or abort (writer -> workers) */
	uint64_t next;           /* next item to hand out */
	uint64_t written;        /* items the writer has consumed */
	uint64_t held;           /* bytes of records done and not yet written (the slots' bufs) */
	unsigned space_waiters;  /* workers waiting on cv_space */
	int abort;
	struct slot *slots;
	uint64_t window;         /* slots: items a worker may be ahead of the writer, at most */
};

#define WINDOW_PER_JOB 256             /* slots a worker (a few hundred bytes each) */
#define INFLIGHT_BYTES (256ull << 20)  /* records done and waiting for the writer */

/* loaderd's bound (codec/kind.h), below PIL's decompression bomb limit (178956970): an image dpack
 * packs by default is one loaderd serves by default. */
#define DPACK_MAX_PIXELS_DEFAULT CDC_MAX_PIXELS_DEFAULT

static volatile sig_atomic_t got_signal;
static const char *volatile tmp_to_unlink;

static void on_signal(int sig)
{
	/* unlink is async-signal-safe; the writer's temp path is set before workers start. */
	if (tmp_to_unlink)
		unlink(tmp_to_unlink);
	got_signal = sig;
	signal(sig, SIG_DFL);
	raise(sig);
}

/* ---- workers ---- */

static int read_all(int fd, uint8_t *buf, uint64_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pread(fd, buf, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;  /* the file shrank under us */
		buf += n;
		len -= (uint64_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Sample @i's --field members from @fd (its shard) into s->fbuf and the record's aux. 0, or a
 * SLOT_SKIP with s->why naming the field (above DPK_AUX_FIELD_MAX, a JSON key not there or
 * unreadable), or -errno. */
/* An ImageFolder tree's side file of @image for @ext: the image's path with its extension
 * replaced ("cls/x.jpg" -> "cls/x.txt"), opened into *fd with its size in *size. 0, 1 when there
 * is none (or it is not a regular file), or -errno. */
static int side_file(const char *image, const char *ext, char *path, size_t len, int *fd,
		     uint64_t *size)
{
	const char *slash = strrchr(image, '/'), *dot = strrchr(slash ? slash + 1 : image, '.');
	size_t stem = dot ? (size_t)(dot - image) : strlen(image);
	struct stat st;

	if (snprintf(path, len, "%.*s%s", (int)stem, image, ext) >= (int)len)
		return -ENAMETOOLONG;
	*fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (*fd < 0)
		return errno == ENOENT || errno == ENOTDIR ? 1 : -errno;
	if (fstat(*fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(*fd);
		*fd = -1;
		return 1;
	}
	*size = (uint64_t)st.st_size;
	return 0;
}

static int read_fields(struct pack *pk, uint64_t i, struct slot *s, int fd)
{
	const struct dpack_item *it = &pk->src.items[i];
	char side[PATH_MAX];

	for (uint32_t k = 0; k < pk->src.nfields; k++) {
		const struct dpack_field_spec *f = &pk->src.fields[k];
		uint64_t size = it->f ? it->f[k].size : UINT64_MAX, off = it->f ? it->f[k].off : 0;
		int sfd = -1;
		if (!it->f) {  /* a tree: the side file */
			int ret = side_file(it->name, f->ext, side, sizeof(side), &sfd, &size);
			if (ret < 0)
				return ret;
			if (ret > 0 && !pk->src.missing_empty) {
				snprintf(s->why, sizeof(s->why), "no %.120s (field %s; --missing empty keeps "
					 "such samples with the field empty)", side, f->name);
				return 1;
			}
			if (ret > 0)
				continue;
		}
		if (size == UINT64_MAX)
			continue;  /* no member: an empty field (--missing empty) */
		uint64_t cap = f->json_key ? (uint64_t)DPK_AUX_RECORD_MAX : DPK_AUX_FIELD_MAX;
		if (size > cap) {
			if (sfd >= 0)
				close(sfd);
			snprintf(s->why, sizeof(s->why), "field %s (%s): %llu bytes, above the bound of "
				 "%u (DPK_AUX_FIELD_MAX)", f->name, f->ext, (unsigned long long)size,
				 DPK_AUX_FIELD_MAX);
			return 1;
		}
		uint8_t *b = size <= cap ? malloc(size ? size : 1) : NULL;
		int ret = !b ? -ENOMEM : read_all(sfd >= 0 ? sfd : fd, b, size, off);
		if (sfd >= 0)
			close(sfd);
		if (ret < 0) {
			free(b);
			return ret;
		}
		if (f->json_key) {
			uint8_t *v = NULL;
			uint32_t vl = 0;
			ret = jsonf_get(b, (size_t)size, f->json_key, &v, &vl);
			free(b);
			if (ret == -ENOMEM)
				return ret;
			if (ret <= 0) {
				if (ret == 0 && pk->src.missing_empty)
					continue;
				snprintf(s->why, sizeof(s->why), "field %s: %s%s", f->name, ret == 0 ?
					 "no key " : "not a JSON object (looking for ", f->json_key);
				if (ret < 0)
					strncat(s->why, ")", sizeof(s->why) - strlen(s->why) - 1);
				return 1;
			}
			b = v;
			size = vl;
			if (size > DPK_AUX_FIELD_MAX) {
				free(b);
				snprintf(s->why, sizeof(s->why), "field %s (%s:%s): %llu bytes, above the "
					 "bound of %u (DPK_AUX_FIELD_MAX)", f->name, f->ext, f->json_key,
					 (unsigned long long)size, DPK_AUX_FIELD_MAX);
				return 1;
			}
		}
		s->fbuf[k] = b;
		s->rec.aux[k] = b;
		s->rec.aux_len[k] = (uint32_t)size;
	}
	return 0;
}

static void process(struct pack *pk, uint64_t i, struct slot *s, ZSTD_CCtx *cctx)
{
	struct dpk_record *r = &s->rec;
	uint64_t len, off;
	int fd = -1, ret;

	memset(r, 0, sizeof(*r));
	s->status = SLOT_OK;
	s->buf = NULL;
	memset(s->fbuf, 0, sizeof(s->fbuf));
	s->in_len = 0;
	ret = pk->in->locate(&pk->src, i, &fd, &off, &len);
	if (ret < 0)
		goto fatal;
	if (pk->src.nfields && (ret = read_fields(pk, i, s, fd)) != 0) {
		if (ret < 0)
			goto fatal;
		s->status = SLOT_SKIP;
		goto out;
	}
	if (len > DPK_RECORD_MAX) {
		s->status = SLOT_SKIP;
		snprintf(s->why, sizeof(s->why), "%llu bytes is larger than a record may be",
			 (unsigned long long)len);
		goto out;
	}
	s->buf = malloc(len ? len : 1);
	if (!s->buf) {
		ret = -ENOMEM;
		goto fatal;
	}
	ret = read_all(fd, s->buf, len, off);
	if (ret < 0)
		goto fatal;
	s->in_len = len;

	if (!pk->in->tensor) {
		ret = cdc_kind_probe(s->buf, len, r, s->why, sizeof(s->why));
		if (ret < 0) {
			s->status = SLOT_SKIP;
			goto out;
		}
		r->label = pk->src.items[i].label;
		/* A decompression bomb is refused on its header's word, before anything decodes it. */
		if (cdc_pixels_over(r->shape[0], r->shape[1], pk->max_pixels)) {
			s->status = SLOT_SKIP;
			snprintf(s->why, sizeof(s->why), "%u x %u pixels is more than --max-pixels %llu",
				 r->shape[1], r->shape[0], (unsigned long long)pk->max_pixels);
			goto out;
		}
		const struct cdc_kind_pack *k = cdc_kind_pack(r->kind);
		if (!pk->keep && k && k->repack) {
			uint8_t *nb;
			size_t nl;

			ret = k->repack(s->buf, len, &pk->repack, r, &nb, &nl, s->why, sizeof(s->why));
			if (ret == -ENOMEM)
				goto fatal;
			if (ret < 0) {
				s->status = SLOT_SKIP;
				goto out;
			}
			free(s->buf);
			s->buf = nb;
			len = nl;
		}
	} else {
		ret = pk->in->tensor(&pk->src, i, r);
		if (ret < 0)
			goto fatal;
		if (pk->zstd_level) {
			size_t bound = ZSTD_compressBound(len);
			uint8_t *z = malloc(bound);

			if (!z) {
				ret = -ENOMEM;
				goto fatal;
			}
			size_t zn = ZSTD_compressCCtx(cctx, z, bound, s->buf, len, pk->zstd_level);
			if (ZSTD_isError(zn)) {
				free(z);
				snprintf(s->why, sizeof(s->why), "zstd: %s", ZSTD_getErrorName(zn));
				s->status = SLOT_FATAL;
				s->err = -EIO;
				goto out;
			}
			free(s->buf);
			s->buf = z;
			len = zn;
			r->kind = DPK_KIND_RAW_ZSTD;
		}
	}
	r->data = s->buf;
	r->length = len;
	r->xxh3 = XXH3_64bits(s->buf, len);
	r->has_xxh3 = 1;
	goto out;
fatal:
	s->status = SLOT_FATAL;
	s->err = ret;
	snprintf(s->why, sizeof(s->why), "%s", strerror(-ret));
out:
	if (fd >= 0 && fd != pk->src.fd && !pk->in->keeps_fds)
		close(fd);
}

static void *worker(void *arg)
{
	struct pack *pk = arg;
	ZSTD_CCtx *cctx = pk->zstd_level ? ZSTD_createCCtx() : NULL;

	for (;;) {
		pthread_mutex_lock(&pk->lock);
		/* the next item the writer needs is always taken: the held bytes cannot block it */
		while (!pk->abort && pk->next < pk->src.n &&
		       (pk->next >= pk->written + pk->window ||
			(pk->held >= INFLIGHT_BYTES && pk->next > pk->written))) {
			pk->space_waiters++;
			pthread_cond_wait(&pk->cv_space, &pk->lock);
			pk->space_waiters--;
		}
		if (pk->abort || pk->next >= pk->src.n) {
			pthread_mutex_unlock(&pk->lock);
			break;
		}
		uint64_t i = pk->next++;
		pthread_mutex_unlock(&pk->lock);

		struct slot *s = &pk->slots[i % pk->window];
		process(pk, i, s, cctx);

		pthread_mutex_lock(&pk->lock);
		s->done = 1;  /* pairs with the writer's wait on cv_done */
		s->held = !s->buf ? 0 : s->status == SLOT_OK ? s->rec.length : s->in_len;
		pk->held += s->held;
		if (i == pk->written)  /* the writer waits for this one only */
			pthread_cond_signal(&pk->cv_done);
		pthread_mutex_unlock(&pk->lock);
	}
	ZSTD_freeCCtx(cctx);
	return NULL;
}

/* ---- progress and the main loop ---- */

static void progress(uint64_t done, uint64_t n, uint64_t bytes, double t0, int last)
{
	double dt = clk_now_s() - t0;
	int width = 30, fill = n ? (int)(width * done / n) : width;
	char bar[64];

	memset(bar, '=', (size_t)fill);
	memset(bar + fill, ' ', (size_t)(width - fill));
	bar[width] = '\0';
	fprintf(stderr, "\r[%s] %llu/%llu %3d%%  %.1f MB/s  %s%.0fs  ", bar, (unsigned long long)done,
		(unsigned long long)n, n ? (int)(100 * done / n) : 100, dt > 0 ? bytes / dt / 1e6 : 0.0,
		last ? "" : "ETA ", last ? dt : (done ? dt * (double)(n - done) / (double)done : 0.0));
	if (last)
		fputc('\n', stderr);
}

static const char pack_usage[] =
	"usage: dpack pack [options] SRC OUT.dpk\n"
	"       dpack pack [options] SHARD.tar SHARD.tar... OUT.dpk\n"
	"       dpack pack [options] IMAGES.npy LABELS.npy OUT.dpk\n"
	"\n"
	"SRC is an ImageFolder tree (classes = sorted sub-folders, as torchvision) or a WebDataset\n"
	"set: a .tar, several .tar operands (e.g. a shell brace list: data-{000..099}.tar, or the same\n"
	"quoted: dpack expands it), a directory of .tar files (taken sorted by name) or a .txt file\n"
	"listing shards one a line. A WebDataset\n"
	"sample is KEY.EXT (EXT an image extension below) with KEY.cls (an integer label), KEY.txt (a\n"
	"class name: its line in --classes FILE, else its index among the sorted names) or else\n"
	"KEY.json's \"label\" (an integer or a class name); shards in\n"
	"the order given, members in archive order. A key in two shards keeps its first sample; a\n"
	"shard cut short keeps the samples before the damage (both reported; --strict: an error).\n"
	"A tree packs the files torchvision's ImageFolder loads (.jpg .jpeg .png .ppm .bmp .pgm .tif\n"
	".tiff .webp, any case, hidden files and folders included), in its order and with its class\n"
	"indices; each file becomes a record of what its bytes are, whatever its name: JPEG, CMYK\n"
	"JPEG, PNG, WebP, PGM/PPM, BMP or TIFF (docs/FORMAT.md), decoded by loaderd to the RGB that\n"
	"PIL's convert(\"RGB\") gives; each is decoded once here, so that a damaged file is reported\n"
	"now, not by a training job.\n"
	"JPEGs are stored as jpeg+idx records: the JPEG (kept byte for byte when it is baseline with\n"
	"one scan, else first transcoded losslessly to that: the same DCT coefficients, so the same\n"
	"pixels) followed by an index of where MCUs start, so that loaderd entropy-decodes only the\n"
	"part of an image that a crop needs; CMYK JPEGs likewise become jpeg+idx+cmyk records;\n"
	".npy images become raw uint8 tensors.\n"
	"\n"
	"options:\n"
	"  --compress zstd[:LEVEL]  compress raw tensors with zstd (level 1..19, default 3)\n"
	"  --jobs N                 worker threads (default: all cores)\n"
	"  --keep-jpeg              store JPEGs as they are (loaderd then decodes every row above\n"
	"                           and the full width of the rows in a crop; CMYK ones: the whole\n"
	"                           image), unchecked\n"
	"  --index-width PX         index columns of jpeg+idx(+cmyk) records about PX pixels wide\n"
	"                           (default 64; 0: one per MCU row)\n"
	"  --restart-width PX       make jpeg+rst records instead (the older rewrite: optimised\n"
	"                           Huffman tables and restart segments about PX pixels wide, the\n"
	"                           largest divisor of the MCU row that fits; 0: one per MCU row).\n"
	"                           CMYK JPEGs have no such form: they become jpeg+idx+cmyk, PX wide\n"
	"  --classes FILE           WebDataset: class names, one a line; a .txt label is its line's\n"
	"                           index (without it: the sorted names the shards hold)\n"
	"  --max-pixels N           skip (or, with --strict, refuse) an image whose header declares\n"
	"                           more than N pixels, before decoding it (default 67108864,\n"
	"                           8192 x 8192: loaderd's --max-pixels default)\n"
	"  --strict                 a bad or unknown image is an error, not a skipped sample\n"
	"  --no-fsync               do not wait for the disk (scratch space): faster, but a crash\n"
	"                           soon after packing may lose the file\n"
	"  --shard-size SIZE        write OUT as a set: a manifest (docs/FORMAT.md) and shards\n"
	"                           OUT's stem + -00000.dpk, -00001.dpk, ... beside it, each a\n"
	"                           whole .dpk of at most SIZE bytes (suffixes K, M, G, T), cut\n"
	"                           between records as they come (a record larger alone has its\n"
	"                           own); samples in the same order as one .dpk. Loaderd and every\n"
	"                           tool open OUT as one dataset; 'dpack append' adds shards\n"
	"  --shard-records N        write OUT as a set whose shards hold N records each (the last\n"
	"                           fewer), or fewer where --shard-size cuts first: shards that\n"
	"                           line up with loaderd's --block N, so that a window of blocks\n"
	"                           is a window of whole shards (docs/STREAMING.md)\n"
	"  --field NAME=EXT[:KEY]   WebDataset: member KEY.EXT of each sample becomes the record's aux\n"
	"                           field NAME (docs/FORMAT.md), its bytes as they are (UTF-8 or\n"
	"                           not; at most 65536); with :KEY, EXT a JSON object and the field\n"
	"                           the value of its top-level KEY (a string unescaped, else its\n"
	"                           text). Repeat for up to 8 fields, e.g. --field txt=txt --field\n"
	"                           json=json --field url=json:url. A member a field takes is no\n"
	"                           label (.txt as a caption, not a class name). An ImageFolder\n"
	"                           tree: the side file beside each image, e.g. cls/x.txt for\n"
	"                           cls/x.jpg (its label is still its folder's, unless --no-labels)\n"
	"  --missing skip|empty     a sample without a field's member (or JSON key): skipped with\n"
	"                           a warning naming it (default), or kept with the field empty\n"
	"  --no-labels              samples need no label member; the dataset has no labels\n"
	"                           (image-text pairs)\n"
	"  -h, --help               this text\n"
	"\n"
	"OUT is written to OUT.tmp.PID, synced and renamed: an interrupted run leaves no OUT.\n";

/* The command line's choices that are not the pack's own. */
struct pack_args {
	unsigned jobs;           /* worker threads, 1..1024 */
	int no_fsync;            /* --no-fsync */
	const char *out;         /* the .dpk to write (with --shard-size: the set's manifest) */
	uint64_t shard_size;     /* --shard-size: bytes a shard's file may take; 0: one .dpk */
	unsigned shard_records;  /* --shard-records: records a shard may hold; 0: no bound */
};

/* What the writer counted, for the summary line. */
struct tally {
	uint64_t skipped;        /* items not packed (listing and workers) */
	uint64_t bytes;          /* record bytes written */
	uint64_t in_bytes;       /* the source's bytes of those records */
	uint64_t written;        /* records in the finished file */
};

/* --compress zstd[:LEVEL]. Returns 0, or -EINVAL (the message is logged). */
static int parse_compress(const char *arg, int *level)
{
	unsigned lv;

	if (strncmp(arg, "zstd", 4) || (arg[4] && arg[4] != ':')) {
		LOG_ERROR("--compress: '%s' is not zstd or zstd:LEVEL", arg);
		return -EINVAL;
	}
	*level = 3;
	if (arg[4]) {
		if (arg_uint(arg + 5, 1, (unsigned)ZSTD_maxCLevel(), &lv) < 0) {
			LOG_ERROR("--compress: level '%s' is not in 1..%d", arg + 5, ZSTD_maxCLevel());
			return -EINVAL;
		}
		*level = (int)lv;
	}
	return 0;
}

/* --field NAME=EXT[:KEY] into pk->fields. 0, or -EINVAL (logged). */
static int parse_field(char *arg, struct pack *pk)
{
	char *eq = strchr(arg, '=');
	uint32_t n = pk->src.nfields;

	if (n == DPK_AUX_FIELDS_MAX) {
		LOG_ERROR("--field: at most %u fields", DPK_AUX_FIELDS_MAX);
		return -EINVAL;
	}
	if (!eq || eq == arg || (size_t)(eq - arg) > DPK_AUX_NAME_MAX ||
	    strspn(arg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
	    (size_t)(eq - arg)) {
		LOG_ERROR("--field '%s': not NAME=EXT or NAME=EXT:KEY (NAME: 1..%u of A-Z a-z 0-9 _ . -)",
			  arg, DPK_AUX_NAME_MAX);
		return -EINVAL;
	}
	*eq = '\0';
	char *ext = eq + 1, *colon = strchr(ext, ':');
	if (colon)
		*colon = '\0';
	if (*ext == '.')
		ext++;
	if (!*ext || strlen(ext) + 2 > sizeof(pk->fields[n].ext) || strchr(ext, '/') ||
	    (colon && !colon[1])) {
		LOG_ERROR("--field %s: a member extension (and a JSON key after ':') is needed", arg);
		return -EINVAL;
	}
	for (uint32_t k = 0; k < n; k++)
		if (!strcmp(pk->fields[k].name, arg)) {
			LOG_ERROR("--field %s: named twice", arg);
			return -EINVAL;
		}
	pk->fields[n].name = arg;
	snprintf(pk->fields[n].ext, sizeof(pk->fields[n].ext), ".%s", ext);
	pk->fields[n].json_key = colon ? colon + 1 : NULL;
	pk->field_names[n] = arg;
	pk->src.fields = pk->fields;
	pk->src.nfields = n + 1;
	return 0;
}

/* Fill *pk's options and source paths and *a from the command line. Returns -1 to go on, or the
 * exit status to end with (0 after --help, 2 for bad usage; the message is printed). */
static int parse_args(int argc, char **argv, struct pack *pk, struct pack_args *a)
{
	static const struct option opts[] = {
		{ "compress", required_argument, NULL, 'c' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "strict", no_argument, NULL, 's' },
		{ "no-fsync", no_argument, NULL, 'F' },
		{ "keep-jpeg", no_argument, NULL, 'K' },
		{ "restart-width", required_argument, NULL, 'R' },
		{ "index-width", required_argument, NULL, 'I' },
		{ "max-pixels", required_argument, NULL, 'P' },
		{ "classes", required_argument, NULL, 'C' },
		{ "shard-size", required_argument, NULL, 'S' },
		{ "shard-records", required_argument, NULL, 'N' },
		{ "field", required_argument, NULL, 'f' },
		{ "missing", required_argument, NULL, 'M' },
		{ "no-labels", no_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;

	*a = (struct pack_args){ .jobs = proc_cpu_count() };
	while ((c = getopt_long(argc, argv, "hj:", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (parse_compress(optarg, &pk->zstd_level) < 0)
				return 2;
			break;
		case 'j':
			if (arg_uint(optarg, 1, 1024, &a->jobs) < 0) {
				LOG_ERROR("--jobs: '%s' is not a number in 1..1024", optarg);
				return 2;
			}
			break;
		case 's':
			pk->src.strict = 1;
			break;
		case 'F':
			a->no_fsync = 1;
			break;
		case 'K':
			pk->keep = 1;
			break;
		case 'R':
			if (arg_uint(optarg, 0, 65535, &pk->repack.width) < 0) {
				LOG_ERROR("--restart-width: '%s' is not a number in 0..65535", optarg);
				return 2;
			}
			pk->repack.rst = 1;
			break;
		case 'I':
			if (arg_uint(optarg, 0, 65535, &pk->repack.width) < 0) {
				LOG_ERROR("--index-width: '%s' is not a number in 0..65535", optarg);
				return 2;
			}
			pk->repack.rst = 0;
			break;
		case 'P': {
			char *end;
			errno = 0;
			unsigned long long v = strtoull(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' || v == 0) {
				LOG_ERROR("--max-pixels: '%s' is not a positive number", optarg);
				return 2;
			}
			pk->max_pixels = v;
			break;
		}
		case 'C':
			pk->src.classes_file = optarg;
			break;
		case 'S':
			if (arg_bytes(optarg, DPK_HEADER_SIZE, UINT64_MAX >> 2, &a->shard_size) < 0) {
				LOG_ERROR("--shard-size: '%s' is not a size of at least %u bytes (suffixes "
					  "K, M, G, T)", optarg, DPK_HEADER_SIZE);
				return 2;
			}
			break;
		case 'N':
			if (arg_uint(optarg, 1, UINT_MAX, &a->shard_records) < 0) {
				LOG_ERROR("--shard-records: '%s' is not a count in 1..%u", optarg,
					  UINT_MAX);
				return 2;
			}
			break;
		case 'f':
			if (parse_field(optarg, pk) < 0)
				return 2;
			break;
		case 'M':
			if (strcmp(optarg, "skip") && strcmp(optarg, "empty")) {
				LOG_ERROR("--missing: '%s' is not skip or empty", optarg);
				return 2;
			}
			pk->src.missing_empty = !strcmp(optarg, "empty");
			break;
		case 'L':
			pk->src.no_labels = 1;
			break;
		case 'h':
			fputs(pack_usage, stdout);
			return 0;
		default:
			fputs(pack_usage, stderr);
			return 2;
		}
	}
	argc -= optind;
	argv += optind;
	size_t l0 = argc >= 1 ? strlen(argv[0]) : 0;
	if (argc >= 3 && l0 > 4 && !strcmp(argv[0] + l0 - 4, ".tar")) {
		/* several .tar shards (a shell brace list expands to them), then OUT */
		pk->src.paths = (const char *const *)argv;
		pk->src.npaths = (size_t)argc - 1;
		a->out = argv[argc - 1];
	} else if (argc == 3) {
		pk->src.labels = argv[1];
		a->out = argv[2];
	} else if (argc == 2) {
		a->out = argv[1];
	} else {
		fputs(pack_usage, stderr);
		return 2;
	}
	pk->src.path = argv[0];
	return -1;
}

/* Set pk->in from what the source is. Returns -1 to go on, or the exit status to end with
 * (1 the source cannot be read, 2 not a known format or labels missing or extra). */
static int detect_input(struct pack *pk)
{
	struct stat st;

	if (dpack_tar_pattern(pk->src.path)) {
		extern const struct dpack_input dpack_input_tar;
		pk->in = &dpack_input_tar;
		return -1;
	}
	if (stat(pk->src.path, &st) < 0) {
		LOG_ERROR("cannot open %s: %s", pk->src.path, strerror(errno));
		return 1;
	}
	pk->in = dpack_input_detect(pk->src.path, &st);
	if (!pk->in) {
		char whats[128];
		dpack_input_whats(whats, sizeof(whats));
		LOG_ERROR("%s: not %s", pk->src.path, whats);
		return 2;
	}
	if (pk->in->need_labels && !pk->src.labels) {
		LOG_ERROR("%s: %s", pk->src.path, pk->in->need_labels);
		return 2;
	}
	if (pk->src.labels && !pk->in->need_labels) {
		fputs(pack_usage, stderr);
		return 2;
	}
	if (pk->src.nfields && pk->in->tensor) {
		LOG_ERROR("--field: %s is %s; fields come from WebDataset shards' members and "
			  "ImageFolder trees' side files", pk->src.path, pk->in->what);
		return 2;
	}
	if (pk->zstd_level && !pk->in->tensor)
		LOG_WARN("--compress applies to raw tensors; JPEGs are not compressed further");
	return -1;
}

/* The writer: take the workers' slots in item order, write them to @w, then finish the file.
 * Returns 0 or -errno (the message is logged). */
static int finish_items(struct pack *pk, struct dpack_out *w, const char *out, double t0,
			struct tally *t, int tty);

static int write_items(struct pack *pk, struct dpack_out *w, const char *out, double t0,
		       struct tally *t)
{
	int tty = isatty(STDERR_FILENO), ret = 0;
	double last = 0;

	for (uint64_t i = 0; i < pk->src.n; i++) {
		struct slot *s = &pk->slots[i % pk->window];
		const char *name = pk->src.items ? pk->src.items[i].name : NULL;

		pthread_mutex_lock(&pk->lock);
		while (!s->done)
			pthread_cond_wait(&pk->cv_done, &pk->lock);
		pthread_mutex_unlock(&pk->lock);

		if (s->status == SLOT_FATAL) {
			if (name)
				LOG_ERROR("%s: %s", name, s->why);
			else
				LOG_ERROR("%s: sample %llu: %s", pk->src.path, (unsigned long long)i, s->why);
			return s->err;
		} else if (s->status == SLOT_SKIP) {
			t->skipped++;
			if (tty)
				fputs("\r\033[K", stderr);
			LOG_WARN("%s %s: %s", pk->src.strict ? "bad image" : "skipped", name, s->why);
			if (pk->src.strict) {
				LOG_ERROR("--strict: stopping at the first bad image");
				return -EBADMSG;
			}
		} else {
			ret = dpack_out_add(w, &s->rec);
			if (ret < 0) {
				LOG_ERROR("writing %s: %s", dpack_out_tmp_path(w), strerror(-ret));
				return ret;
			}
			t->bytes += s->rec.length;
			t->in_bytes += s->in_len;
		}
		uint64_t freed = s->held;
		free(s->buf);
		s->buf = NULL;
		for (uint32_t k = 0; k < DPK_AUX_FIELDS_MAX; k++) {
			free(s->fbuf[k]);
			s->fbuf[k] = NULL;
		}
		pthread_mutex_lock(&pk->lock);
		s->done = 0;
		pk->held -= freed;
		pk->written = i + 1;  /* frees slot i for item i + window */
		if (pk->space_waiters)
			pthread_cond_broadcast(&pk->cv_space);
		pthread_mutex_unlock(&pk->lock);

		if (tty && clk_now_s() - last > 0.1) {
			last = clk_now_s();
			progress(i + 1, pk->src.n, t->bytes, t0, 0);
		}
	}
	return finish_items(pk, w, out, t0, t, tty);
}

/* The end of a pack: the count, the writer's finish, the progress line. */
static int finish_items(struct pack *pk, struct dpack_out *w, const char *out, double t0,
			struct tally *t, int tty)
{
	t->written = dpack_out_count(w);
	if (t->written == 0) {
		LOG_ERROR("%s: no valid samples (%llu skipped)", pk->src.path,
			  (unsigned long long)t->skipped);
		return -ENOENT;
	}
	int ret = dpack_out_finish(w);
	if (ret < 0)
		LOG_ERROR("finishing %s: %s", out, strerror(-ret));
	if (tty)
		progress(pk->src.n, pk->src.n, t->bytes, t0, 1);
	return ret;
}

#define BLOCK_BYTES (8u << 20)  /* one read of back-to-back tensors */
#define BLOCK_RECORDS (1u << 18) /* and at most this many records (their labels: 2 MiB) */

/* Back-to-back tensors (span), uncompressed: read in blocks, records added from the block. One
 * record's tensor() gives the shape of all (a span's records are alike); labels come a block at
 * a time. Memory: one block and its labels, whatever the count. */
static int pack_blocks(struct pack *pk, struct dpack_out *w, uint64_t off, uint64_t sb,
		       const char *out, double t0, struct tally *t)
{
	int tty = isatty(STDERR_FILENO), ret = 0;
	uint64_t per = sb >= BLOCK_BYTES ? 1 : BLOCK_BYTES / sb;
	per = per > BLOCK_RECORDS ? BLOCK_RECORDS : per;
	uint8_t *buf = malloc((size_t)(per * sb));
	int64_t *labels = malloc((size_t)per * sizeof(*labels));
	struct dpk_record r;
	double last = 0;

	if (!buf || !labels) {
		LOG_ERROR("out of memory for a block of %llu bytes", (unsigned long long)(per * sb));
		free(buf);
		free(labels);
		return -ENOMEM;
	}
	memset(&r, 0, sizeof(r));
	/* the layout is known: the index goes straight to its place (no spill file) */
	ret = dpack_out_expect(w, pk->src.n, pk->src.n * sb);
	if (ret == 0 && pk->src.n)
		ret = pk->in->tensor(&pk->src, 0, &r);
	for (uint64_t i = 0; i < pk->src.n && ret == 0; i += per) {
		uint64_t k = pk->src.n - i < per ? pk->src.n - i : per;
		ret = read_all(pk->src.fd, buf, k * sb, off + i * sb);
		if (ret < 0) {
			LOG_ERROR("%s: samples %llu..%llu: %s", pk->src.path, (unsigned long long)i,
				  (unsigned long long)(i + k - 1), strerror(-ret));
			break;
		}
		ret = pk->in->labels(&pk->src, i, k, labels);
		for (uint64_t e = 0; e < k && ret == 0; e++) {
			r.label = labels[e];
			r.data = buf + e * sb;
			r.length = sb;
			ret = dpack_out_add(w, &r);  /* checksums it */
			if (ret < 0)
				LOG_ERROR("writing %s: %s", dpack_out_tmp_path(w), strerror(-ret));
		}
		t->bytes += k * sb;
		t->in_bytes += k * sb;
		if (tty && clk_now_s() - last > 0.1) {
			last = clk_now_s();
			progress(i + k, pk->src.n, t->bytes, t0, 0);
		}
	}
	free(buf);
	free(labels);
	return ret < 0 ? ret : finish_items(pk, w, out, t0, t, tty);
}

/* Start @jobs workers into @th (pk->slots allocated), run the writer, then stop and join the
 * workers and free what the slots still hold. Returns 0 or -errno (the message is logged). */
static int pack_items(struct pack *pk, struct dpack_out *w, pthread_t *th, unsigned jobs,
		      const char *out, double t0, struct tally *t)
{
	int nth, ret = 0;

	pthread_mutex_init(&pk->lock, NULL);
	pthread_cond_init(&pk->cv_done, NULL);
	pthread_cond_init(&pk->cv_space, NULL);
	for (nth = 0; nth < (int)jobs; nth++)
		if ((ret = -pthread_create(&th[nth], NULL, worker, pk)) < 0) {
			LOG_ERROR("cannot start worker threads: %s", strerror(-ret));
			goto stop;
		}
	ret = write_items(pk, w, out, t0, t);
stop:
	pthread_mutex_lock(&pk->lock);
	pk->abort = 1;
	pthread_cond_broadcast(&pk->cv_space);
	pthread_mutex_unlock(&pk->lock);
	for (int k = 0; k < nth; k++)
		pthread_join(th[k], NULL);
	for (uint64_t k = 0; k < pk->window; k++)
		free(pk->slots[k].buf);
	return ret;
}

/* A file's record and libjpeg's coefficient arrays for it are megabytes each, allocated and freed
 * per file. glibc serves such sizes with fresh mmaps (and each worker thread from its own arena),
 * so every file faulted in and zeroed new pages: 6% of the CPU on full-size photographs. One
 * arena that keeps what is freed (mmap only past 32 MiB, glibc's largest threshold; no trim)
 * gives the next file the same pages. dpack is a short-lived process: its peak stays bound by
 * the window. */
static void reuse_freed_memory(void)
{
#ifdef M_ARENA_MAX
	mallopt(M_ARENA_MAX, 1);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

/* The machine-readable last line, on stdout. */
static void print_summary(const char *out, uint32_t nclasses, const struct tally *t, double t0)
{
	double dt = clk_now_s() - t0;

	printf("dpack: %s: %llu samples, %u classes, %llu skipped, %.1f MB in %.2f s (%.0f MB/s)",
	       out, (unsigned long long)t->written, nclasses, (unsigned long long)t->skipped,
	       t->bytes / 1e6, dt, dt > 0 ? t->bytes / dt / 1e6 : 0.0);
	if (t->in_bytes != t->bytes)
		printf(", from %.1f MB of source (%+.2f%%)", t->in_bytes / 1e6, t->in_bytes ?
		       100.0 * ((double)t->bytes - (double)t->in_bytes) / (double)t->in_bytes : 0.0);
	putchar('\n');
}

/* Free what the input format's list and locate left in pk->src. */
static void src_fini(struct pack *pk)
{
	if (pk->in && pk->in->fini)
		pk->in->fini(&pk->src);
	if (pk->src.fd >= 0)
		close(pk->src.fd);
	for (uint64_t i = 0; pk->src.items && i < pk->src.n; i++) {
		free(pk->src.items[i].name);
		free(pk->src.items[i].f);
	}
	free(pk->src.items);
	for (uint32_t k = 0; k < pk->src.nclasses; k++)
		free(pk->src.classes[k]);
	free(pk->src.classes);
}

int dpack_pack_main(int argc, char **argv)
{
	struct pack pk = { .src.fd = -1, .repack.width = CDC_IDX_WIDTH_DEFAULT,
			   .max_pixels = DPACK_MAX_PIXELS_DEFAULT };
	struct pack_args a;
	struct tally t = { 0 };
	struct dpack_out *w = NULL;
	pthread_t *th = NULL;
	int ret, status = 1;

	ret = parse_args(argc, argv, &pk, &a);
	if (ret < 0)
		ret = detect_input(&pk);
	if (ret >= 0)
		return ret;

	double t0 = clk_now_s();
	ret = pk.in->list(&pk.src);
	if (ret < 0)
		goto out;
	if (pk.src.n == 0) {
		LOG_ERROR("%s: no samples found", pk.src.path);
		goto out;
	}
	t.skipped = pk.src.skipped;

	ret = dpack_out_create(a.out, a.shard_size, a.shard_records,
			       a.no_fsync ? DPK_WRITE_NO_SYNC : 0, &w);
	if (ret < 0) {
		LOG_ERROR("cannot create %s.tmp.%d: %s", a.out, (int)getpid(), strerror(-ret));
		goto out;
	}
	tmp_to_unlink = dpack_out_tmp_path(w);
	proc_on_stop_signals(on_signal, PROC_SIG_HUP);
	if (pk.src.nclasses) {
		ret = dpack_out_set_classes(w, (const char *const *)pk.src.classes, pk.src.nclasses);
		if (ret < 0) {
			LOG_ERROR("class names: %s", strerror(-ret));
			goto out;
		}
	}
	if (pk.src.nfields || pk.src.no_labels) {
		ret = dpack_out_set_aux(w, pk.field_names, pk.src.nfields, pk.src.no_labels);
		if (ret < 0) {
			LOG_ERROR("--field names: %s", strerror(-ret));
			goto out;
		}
	}

	uint64_t span_off, span_sb;
	if (pk.in->span && pk.in->labels && !pk.zstd_level &&
	    pk.in->span(&pk.src, &span_off, &span_sb) == 0) {
		if (pack_blocks(&pk, w, span_off, span_sb, a.out, t0, &t) == 0) {
			print_summary(a.out, pk.src.nclasses, &t, t0);
			status = 0;
		}
		goto out;
	}
	reuse_freed_memory();
	pk.window = (uint64_t)a.jobs * WINDOW_PER_JOB;
	if (pk.window > pk.src.n)  /* no more slots than items (--jobs 1024 would ask 262,144) */
		pk.window = pk.src.n;
	pk.slots = calloc(pk.window, sizeof(*pk.slots));
	th = calloc((size_t)a.jobs, sizeof(*th));
	if (!pk.slots || !th) {
		LOG_ERROR("out of memory");
		goto out;
	}
	if (pack_items(&pk, w, th, a.jobs, a.out, t0, &t) == 0) {
		print_summary(a.out, pk.src.nclasses, &t, t0);
		status = 0;
	}
out:
	tmp_to_unlink = NULL;
	dpack_out_destroy(w);  /* removes the temporary file unless finish succeeded */
	src_fini(&pk);
	free(pk.slots);
	free(th);
	return status;
}
