/* job.c - a loaderd job on one dataset, and the fill of one slot (see job.h).
 *
 * DESIGN
 * A step is opened once (step_open): the sampler writes its sample ids and flags into the
 * server's private arrays for the step. The server cuts it into tasks of a few samples that any
 * worker fills (fill): the worker's reader brings the task's records in with one batched
 * submission; each record's checksum is checked, then it is decoded into its place in the slot's
 * payload, and its label set. The server copies ids, flags and labels into the slot once every
 * task is done. Shared memory is write-only for the producer: the consumer can write into
 * its slots at any time (a bug, or malice), so nothing read back from them may steer a worker (an
 * id read back twice could change in between and send the checksum past its record's buffer).
 * Pixels are not staged: the decoders only write the payload, never read it.
 *
 * A record that fails its checksum or its decode is never delivered. With the default policy it is
 * replaced by the sample at the next position of the epoch's order (then the one after, ...), read
 * and decoded on the spot, and flagged RING_SAMPLE_SUBSTITUTED; that choice depends only on (seed,
 * epoch, position), so every run and every rank makes the same one and batch counts stay equal.
 * With --on-bad fail the job stops with the sample id. Either way the sample id is logged.
 *
 * Memory: a record's size is the client's choice (a sparse file of 512 MiB records costs it
 * nothing). Records above cfg->max_record refuse the job at open, naming the sample; reads check
 * it again. What a worker makes for one large record (the reader's big buffer, the substitute
 * buffer, the augmentations' copy of a large crop) is freed after the task, and the job's
 * memory (srv_job_info.mem_bytes) counts its index and the most its records can make the
 * workers hold at once, against --mem-limit.
 *
 * Datasets (struct dset): jobs on the same file (device, inode and identity) share one dpk, its
 * index mapped read-only (DPK_OPEN_MAP) and reads of it through one pair of fds. Opening a job
 * reads the header and the class table; the index is never copied. Each entry is loaded and
 * checked where it is used (dpk_entry_load: the reader's plan, a substitute), and the job then
 * goes by that one copy: checksum, kind's verdict, shape, pixel and record limits are checked
 * on it at use, so a file rewritten under the mapping cannot steer a worker. An index above
 * DPK_INDEX_MAP_MAX (1 GiB, 16M samples) is not mapped but read an entry at a time (one pread
 * each): a mapping would come to hold all of it in loaderd's RSS (a fault maps a whole large
 * folio of the page cache), and a shuffled epoch touches every page; the page cache is still the
 * one copy. A dataset of at most
 * WALK_MAX samples is also walked once, at its first job's open (every entry checked, the largest
 * record found, each kind's verdict per way of delivery): so a bad entry or a record above
 * --max-record refuses the job at open, naming the sample, and later jobs on it pay nothing.
 * Larger ones are not walked (open costs the same at any count): a bad entry is a bad record
 * when drawn, and the job is charged for records as large as --max-record (or the data section,
 * if smaller). The index's bytes are charged to the job that maps it (the first on the dataset),
 * not again to the jobs sharing it; they are clean file pages the kernel can reclaim. A truncated
 * file fails the jobs that read it (dpk's SIGBUS guard, then truncated() below); others go on. */
#include "loader/job.h"
#include "common/mix.h"
#include "common/clk.h"
#include "common/fdio.h"
#include "common/log.h"
#include "codec/decode.h"
#include "codec/kind_load.h"
#include "loader/job_aug.h"
#include "loader/sampler.h"
#include "loader/shares.h"
#include "loader/stream.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUBSTITUTE_TRIES 16
#define READ_MAX 1024              /* records per reader call */
#define WALK_MAX (1ull << 21)      /* datasets up to this many samples are walked at first open */

/* What a walk learnt of the records for one way of delivering them (cropped or as stored: the
 * kinds' accepts() look at nothing else of the output today; one that does needs a key here). */
struct verdict {
	int known;
	int ret;                   /* 0: every record is accepted; else the first refusal's -errno */
	char why[CTL_TEXT_MAX];    /* the reason, after "dataset NAME" */
};

/* A dataset file open for one or more jobs of one uid (see DESIGN). Under dset_mu: refs and the
 * list; under its mu: the walk's results (written once, at the first open that needs them). */
struct dset {
	struct dset *next;
	uid_t uid;                 /* the client's whose descriptors it holds */
	pthread_mutex_t mu;        /* the walk and the verdicts (dset_walk, dset_verdict) */
	int *shard_fds;            /* a set's shards: our dups of the client's (nshards) */
	uint32_t nshards;
	uint32_t fds;              /* descriptors it holds in all (srv_job_info.fds) */
	dev_t dev;
	ino_t ino;
	uint8_t id[DPK_IDENTITY_SIZE];
	struct dpk *d;
	int fd;                    /* our dup of the first client's fd; d reads through it */
	int fd_direct;             /* O_DIRECT fd of the same file, or -1 (also when the page cache
				    * serves it better: io_choice) */
	unsigned refs;             /* jobs using it */
	char io[64];               /* how its records are read, for srv_job_info.io */
	int walked;                /* the walk ran (count <= WALK_MAX) */
	uint64_t walk_limit;       /* the max_record it ran with (loaderd's is one for all jobs) */
	int bad;                   /* an entry failed its check in the walk: bad_why */
	char bad_why[200];
	uint64_t big;              /* largest stored record (walked) */
	uint64_t big_px;           /* largest image, in pixels (walked; raw tensors left out) */
	uint64_t over_id;          /* first record above max_record (when over) */
	uint64_t over_len;
	int over;
	int over_z;                /* over_len is a zstd tensor's decompressed size */
	struct verdict v[2];       /* [cropped] */
	int stream;                /* a streamed set (dpk_open_pending): never shared, never walked
				    * whole; each shard is checked as it attaches (shard_check) */
};

static pthread_mutex_t dset_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dset *dsets;

struct job {
	struct dset *ds;
	struct dpk *d;             /* ds->d */
	int fd;                    /* the dataset, as the client passed it (our dup) */
	int fd_direct;             /* ds->fd_direct */
	int created;               /* this job mapped ds (its index is charged to it) */
	uint32_t ndim;             /* as stored (out.h == 0): the shape every record must have */
	uint32_t shape[DPK_NDIM_MAX];
	struct ldr_sampler smp;
	struct ctl_job_open spec;
	struct cdc_out out;        /* output size (0x0 = records as stored), layout */
	uint64_t max_pixels;       /* per record (ldr_config) */
	uint64_t max_record;       /* stored bytes per record (ldr_config) */
	uint64_t sample_bytes;
	int rrc;                   /* RandomResizedCrop, else center crop */
	int hflip;
	struct ldr_aug aug;        /* CTL_AUGMENT: the resize filter and the per-sample ops */
	uint64_t *shard_bytes;     /* a streamed set: each shard's file size (srv_job_info; an
				    * attached shard's own, a pending one's estimated from the
				    * template's by its count), written by the attaching thread */
};

struct worker {
	struct ldr_reader *rd;
	struct cdc_decoder *dec;
	uint8_t *sub;              /* a substitute record's bytes */
	size_t sub_cap;
	const uint8_t *bufs[READ_MAX];
	int errs[READ_MAX];
	/* Reads started for the task this worker fills next (reader half pf_half), when pf_n: the
	 * dataset and the ids they are for. */
	const struct dpk *pf_d;
	uint64_t pf_ids[READ_MAX];
	uint32_t pf_n;             /* records the reads cover (the leading ones that fit) */
	uint32_t pf_asked;         /* of pf_ids */
	unsigned pf_half;
	unsigned half;             /* the reader half the current records are in */
	uint8_t *aux;              /* a record's aux blob, checked here before it is copied into
				    * the slot (RING_AUX_STRIDE_MAX bytes, made at first use) */
	uint8_t *aug_scratch;      /* ldr_aug_pixels' copy of a sample (one sample's bytes) */
	size_t aug_cap;
};

/* ---- job open ---- */

/* Can record @i (entry @e) be delivered as @o asks (its kind's verdict)? 0, or -EINVAL with
 * the reason in @why, led by a space ("dataset NAME" goes before it). */
static int refusal(const struct cdc_out *o, const struct dpk_entry *e, uint64_t i, char *why,
		   size_t whylen)
{
	const struct cdc_kind_load *k = cdc_kind_load(e->kind);
	char reason[200];

	if (!k)
		snprintf(reason, sizeof(reason), "sample %" PRIu64 ": record kind %s has no decoder in "
			 "this build", i, dpk_kind_name(e->kind));
	if (!k || k->accepts(e, i, o, reason, sizeof(reason)) < 0) {
		snprintf(why, whylen, " %s", reason);
		return -EINVAL;
	}
	return 0;
}

/* The same, with @why naming the dataset @name. */
static int accepts(const char *name, const struct cdc_out *o, const struct dpk_entry *e,
		   uint64_t i, char *why, size_t whylen)
{
	char reason[220];
	int ret = refusal(o, e, i, reason, sizeof(reason));

	if (ret < 0)
		snprintf(why, whylen, "dataset %s%s", name, reason);
	return ret;
}

static uint64_t max_record(const struct ldr_config *cfg)
{
	return cfg->max_record ? cfg->max_record : LDR_MAX_RECORD_DEFAULT;
}

/* The bytes a record makes a worker hold: a zstd tensor is held whole once decompressed (the
 * decoder's scratch), so a few stored bytes of zeros could otherwise claim any size. */
static uint64_t held_len(const struct dpk_entry *e, int *decompressed)
{
	*decompressed = e->kind == DPK_KIND_RAW_ZSTD && e->raw_size > e->length;
	return *decompressed ? e->raw_size : e->length;
}

/* The one walk over @ds's index, at its first open (see DESIGN): every entry checked, the
 * largest record and the first above @max_rec. Under ds->mu. */
static int is_image(const struct dpk_entry *e)
{
	return e->kind != DPK_KIND_RAW && e->kind != DPK_KIND_RAW_ZSTD && e->ndim >= 2;
}

static void dset_walk(struct dset *ds, uint64_t max_rec)
{
	uint64_t n = dpk_count(ds->d);
	struct dpk_entry e;

	ds->walked = 1;
	ds->walk_limit = max_rec;
	ds->over = 0;
	ds->big = ds->big_px = 0;
	for (uint64_t i = 0; i < n; i++) {
		if (dpk_entry_load(ds->d, i, &e, ds->bad_why, sizeof(ds->bad_why)) < 0) {
			ds->bad = 1;
			return;
		}
		int z;
		uint64_t len = held_len(&e, &z);
		if (len > max_rec && !ds->over) {
			ds->over = 1;
			ds->over_id = i;
			ds->over_len = len;
			ds->over_z = z;
		}
		ds->big = len > ds->big ? len : ds->big;
		if (is_image(&e) && (uint64_t)e.shape[0] * e.shape[1] > ds->big_px)
			ds->big_px = (uint64_t)e.shape[0] * e.shape[1];
	}
}

/* Every record's verdict for delivery as @o (and, as stored, the same shape as sample 0),
 * walked once per way of delivery. 0 or -EINVAL with @why. Under ds->mu, ds walked. */
static int dset_verdict(struct dset *ds, const struct cdc_out *o, const char *name, char *why,
			size_t whylen)
{
	struct verdict *v = &ds->v[o->h != 0];
	uint64_t n = dpk_count(ds->d);
	struct dpk_entry e0, e;

	if (!v->known) {
		v->known = 1;
		v->ret = 0;
		dpk_entry_load(ds->d, 0, &e0, NULL, 0);
		for (uint64_t i = 0; i < n && !v->ret; i++) {
			dpk_entry_load(ds->d, i, &e, NULL, 0);  /* checked by the walk */
			v->ret = refusal(o, &e, i, v->why, sizeof(v->why));
			if (!v->ret && !o->h &&
			    (e.ndim != e0.ndim || memcmp(e.shape, e0.shape, sizeof(e.shape)))) {
				snprintf(v->why, sizeof(v->why), ": sample %" PRIu64 " has another shape "
					 "than sample 0; give a crop size to resize", i);
				v->ret = -EINVAL;
			}
		}
	}
	if (v->ret)  /* each job's own dataset name before the reason */
		snprintf(why, whylen, "dataset %s%s", name, v->why);
	return v->ret;
}

static int resident_permille(int fd, uint64_t off, uint64_t len);

/* Is @d a set of shards opened through its manifest (even of one shard)? */
static int is_set(const struct dpk *d)
{
	return dpk_shard_path(d, 0) != NULL;
}

static void io_choice(struct dset *ds, const struct ldr_config *cfg, int res, const char *name);

#define RESIDENT_ENOUGH 900       /* thousandths of sampled pages in the page cache: read from
				   * memory (a mapping of the data section) */
/* A set of shards (opened after its manifest, so measured after the shards' headers were read):
 * the records' residency, each shard's weighted by its size, into *res. 1 when --io auto should
 * map the shards' data (resident enough), else 0. */
static int set_resident(const struct dpk *d, const struct ldr_config *cfg, int *res)
{
	uint64_t sum = 0, total = 0;

	for (uint32_t k = 0; k < dpk_shard_count(d); k++) {
		const struct dpk *s = dpk_shard(d, k);
		uint64_t len = dpk_header_get(s)->file_size - DPK_HEADER_SIZE;
		int r = resident_permille(dpk_fd(s), DPK_HEADER_SIZE, len);
		sum += (uint64_t)(r < 0 ? 0 : r) * len;
		total += len;
	}
	*res = total ? (int)(sum / total) : -1;
	return cfg->io == LDR_IO_AUTO && *res >= RESIDENT_ENOUGH;
}

/* The dataset of @fd (ours: closed on failure, kept by the dset otherwise) and, for a manifest, its
 * shards @shards[0, nshards) (taken over: each entry set to -1; no copies, so that what the open
 * holds stays within what the server reserved for the set), for @uid: an open one of the same
 * uid on the same file with the same identity (*created = 0), or a new one (*created = 1).
 * Datasets are never shared across uids: each holds the descriptions its own client passed. The
 * open (a set's every shard) runs without dset_mu, which is taken for the list only, so that one
 * client's large set delays nobody else. 0 or -errno with @err. */
static int dset_get(int fd, int *shards, uint32_t nshards, uid_t uid,
		    const struct ldr_config *cfg, const char *name, struct dset **out, int *created,
		    char *err, size_t errlen)
{
	struct dpk *d = NULL;
	struct stat st;
	uint8_t id[DPK_IDENTITY_SIZE];
	int *sfd = NULL, ret;
	uint32_t nsfd = 0;

	*created = 0;
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "stat: %s", strerror(errno));
		close(fd);
		return -EBADF;
	}
	if (nshards && !(sfd = malloc((size_t)nshards * sizeof(*sfd)))) {
		close(fd);
		return -ENOMEM;
	}
	for (; nsfd < nshards; nsfd++) {
		sfd[nsfd] = shards[nsfd];
		shards[nsfd] = -1;
	}
	/* Before anything reads it: the header's read-ahead would bring a small file in whole. The
	 * records and the index, which is the file past its header. */
	int res = (uint64_t)st.st_size > DPK_HEADER_SIZE ?
		  resident_permille(fd, DPK_HEADER_SIZE, (uint64_t)st.st_size - DPK_HEADER_SIZE) : -1;
	/* Resident: records are copied from a mapping of the data section (loader/reader.c). */
	unsigned flags = DPK_OPEN_MAP | (cfg->io == LDR_IO_AUTO && res >= RESIDENT_ENOUGH ?
					 DPK_OPEN_MAP_DATA : 0);
	ret = dpk_open_fds(fd, sfd, nsfd, flags, &d, err, errlen);
	if (ret == 0 && is_set(d) && (ret = set_resident(d, cfg, &res)) > 0) {
		dpk_close(d);  /* resident: again, with the shards' data mapped */
		ret = dpk_open_fds(fd, sfd, nsfd, DPK_OPEN_MAP | DPK_OPEN_MAP_DATA, &d, err, errlen);
	}
	if (ret < 0) {
		d = NULL;
		goto fail;
	}
	dpk_identity(d, id);
	pthread_mutex_lock(&dset_mu);
	for (struct dset *ds = dsets; ds; ds = ds->next)
		if (ds->uid == uid && ds->dev == st.st_dev && ds->ino == st.st_ino &&
		    !memcmp(ds->id, id, sizeof(id))) {
			ds->refs++;
			pthread_mutex_unlock(&dset_mu);
			ret = 0;
			*out = ds;
			goto fail;  /* not a failure: ours is not needed */
		}
	pthread_mutex_unlock(&dset_mu);
	struct dset *ds = calloc(1, sizeof(*ds));
	if (!ds) {
		ret = -ENOMEM;
		goto fail;
	}
	pthread_mutex_init(&ds->mu, NULL);
	ds->uid = uid;
	ds->dev = st.st_dev;
	ds->ino = st.st_ino;
	memcpy(ds->id, id, sizeof(id));
	ds->d = d;
	ds->fd = fd;
	ds->shard_fds = sfd;
	ds->nshards = nsfd;
	/* O_DIRECT when the file system allows it (tmpfs does not: open fails with EINVAL). The
	 * same open file, through /proc (never a path a client named: the magic link is the inode
	 * this descriptor holds, checked against loaderd's own rights, regular as fstat said). A set
	 * of shards: one per shard, which the reader takes from each record's entry; fd_direct is
	 * then shard 0's, standing for them (its close goes with dpk_direct_close). */
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", is_set(d) ? dpk_fd(dpk_shard(d, 0)) : fd);
	ds->fd_direct = is_set(d) && dpk_direct_open(d) < 0 ? -1 :
			open(self, O_RDONLY | O_DIRECT | O_CLOEXEC | O_NOCTTY);
	ds->refs = 1;
	io_choice(ds, cfg, res, name);
	ds->fds = 1 + nsfd + (ds->fd_direct >= 0 && !is_set(d)) + dpk_fds(d);
	pthread_mutex_lock(&dset_mu);
	ds->next = dsets;
	dsets = ds;
	pthread_mutex_unlock(&dset_mu);
	*out = ds;
	*created = 1;
	return 0;
fail:
	dpk_close(d);
	close(fd);
	for (uint32_t k = 0; k < nsfd; k++)
		close(sfd[k]);
	free(sfd);
	return ret;
}

/* A streamed set (srv_dataset.stream): the manifest @fd (ours: closed on failure, kept by the
 * dset otherwise) opened with every shard pending, and shard 0, @shards[0] (taken over: set to
 * -1), attached as the template. Never shared with another job (a streamed set's attached shards
 * are its stream's), so a new dset each time. The other shards that came are attached by
 * job_open once the job's shape is known (job_shard_attach). 0 or -errno with @err. */
static int dset_stream_get(int fd, int *shards, uint32_t nshards, uid_t uid, struct dset **out,
			   char *err, size_t errlen)
{
	struct dpk *d = NULL;
	struct stat st;
	int ret;

	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "stat: %s", strerror(errno));
		close(fd);
		return -EBADF;
	}
	ret = dpk_open_pending(fd, DPK_OPEN_MAP, &d, err, errlen);
	if (ret == 0 && dpk_shard_count(d) != nshards) {
		snprintf(err, errlen, "its manifest has %u shards, the stream %u",
			 dpk_shard_count(d), nshards);
		ret = -EPROTO;
	}
	if (ret == 0 && (!nshards || shards[0] < 0)) {
		snprintf(err, errlen, "shard 0 did not come with the open");
		ret = -EPROTO;
	}
	if (ret == 0) {
		int sfd = shards[0];
		shards[0] = -1;
		char why[200];
		if ((ret = dpk_shard_attach(d, 0, sfd, why, sizeof(why))) < 0)
			snprintf(err, errlen, "shard 0 (%s): %s", dpk_shard_path(d, 0), why);
	}
	struct dset *ds = ret == 0 ? calloc(1, sizeof(*ds)) : NULL;
	if (ret == 0 && !ds)
		ret = -ENOMEM;
	if (ret < 0) {
		dpk_close(d);
		close(fd);
		return ret;
	}
	pthread_mutex_init(&ds->mu, NULL);
	ds->uid = uid;
	ds->dev = st.st_dev;
	ds->ino = st.st_ino;
	dpk_identity(d, ds->id);
	ds->d = d;
	ds->fd = fd;
	ds->fd_direct = -1;  /* dpk_direct_open: not on a streamed set */
	ds->refs = 1;
	ds->stream = 1;
	/* the manifest's, and each shard's once attached (no O_DIRECT twin) */
	ds->fds = 1 + nshards;
	snprintf(ds->io, sizeof(ds->io), "streamed, %u shards", nshards);
	*out = ds;  /* not on dsets: no other job finds it */
	return 0;
}

#define RESIDENT_SAMPLES 1024u    /* pages of the data section mincore looks at */

/* Pages of @fd's [off, off + len) in the page cache (the file's pages past its header: records
 * and index), in thousandths, from up to RESIDENT_SAMPLES
 * pages spread evenly over it (mincore on a mapping that is never touched: no SIGBUS). -1 when it
 * cannot tell. */
static int resident_permille(int fd, uint64_t off, uint64_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t start = off & ~(uint64_t)(pg - 1), span = off + len - start;
	uint64_t pages = (span + (uint64_t)pg - 1) / (uint64_t)pg, step, hit = 0, seen = 0;

	if (!len || span > SIZE_MAX)
		return -1;
	void *p = mmap(NULL, (size_t)span, PROT_READ, MAP_SHARED, fd, (off_t)start);
	if (p == MAP_FAILED)
		return -1;
	step = pages > RESIDENT_SAMPLES ? pages / RESIDENT_SAMPLES : 1;
	for (uint64_t k = 0; k < pages; k += step) {
		unsigned char v = 0;
		if (mincore((uint8_t *)p + k * (uint64_t)pg, (size_t)pg, &v) < 0)
			break;
		hit += v & 1;
		seen++;
	}
	munmap(p, (size_t)span);
	return seen ? (int)(hit * 1000 / seen) : -1;
}

/* The lowest limit in @file at @dir and each of its ancestors up to @root (a cgroup's limit is
 * also bounded by its parents'); @best if none is lower ("max", v1's "unlimited" and missing
 * files are no limit). */
static uint64_t lowest_limit(const char *root, char *dir, const char *file, uint64_t best)
{
	size_t rl = strlen(root);

	for (;;) {
		char path[PATH_MAX + 64];
		unsigned long long v;
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s", dir, file);
		if ((f = fd_fopen_read(path))) {
			if (fscanf(f, "%llu", &v) == 1 && v < best)
				best = v;
			fclose(f);
		}
		char *slash = strrchr(dir, '/');
		if (!slash || (size_t)(slash - dir) < rl)
			return best;
		*slash = '\0';
	}
}

uint64_t ldr_memory_budget(const char *proc_cgroup, const char *root, uint64_t phys)
{
	char line[1024], dir[PATH_MAX];
	uint64_t best = phys;
	FILE *f = fd_fopen_read(proc_cgroup);

	if (!f)
		return phys;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *ctl = strchr(line, ':'), *rel = ctl ? strchr(ctl + 1, ':') : NULL;
		if (!rel || rel[1] != '/')
			continue;
		*rel++ = '\0';
		ctl++;
		if (!*ctl) {  /* v2: "0::/path" */
			snprintf(dir, sizeof(dir), "%s%s", root, rel);
			best = lowest_limit(root, dir, "memory.max", best);
			continue;
		}
		for (char *save, *c = strtok_r(ctl, ",", &save); c; c = strtok_r(NULL, ",", &save))
			if (!strcmp(c, "memory")) {  /* v1: "N:memory[,...]:/path" */
				char mroot[PATH_MAX];
				snprintf(mroot, sizeof(mroot), "%s/memory", root);
				snprintf(dir, sizeof(dir), "%s%s", mroot, rel);
				best = lowest_limit(mroot, dir, "memory.limit_in_bytes", best);
			}
	}
	fclose(f);
	return best;
}

/* The memory the page cache may give loaderd: the lowest memory limit of its cgroup (v2's
 * memory.max, v1's memory.limit_in_bytes, the cgroup's and its parents'), else the machine's. */
static uint64_t memory_budget(void)
{
	uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);

	return ldr_memory_budget("/proc/self/cgroup", "/sys/fs/cgroup", phys);
}

/* --io auto's choice for a dataset (see docs/TUNING.md): through the page cache when most of the
 * records are in it already, or when they fit in half the memory loaderd may use (the first epoch
 * brings them in, the next ones read memory); O_DIRECT, one aligned read per record, only for a
 * dataset larger than that, which would evict what the trainer needs and not stay cached. Once,
 * when the dataset is mapped; logged, and shown in loaderctl stats ("io"). */
static void io_choice(struct dset *ds, const struct ldr_config *cfg, int res, const char *name)
{
	const struct dpk_header *h = dpk_header_get(ds->d);

	if (cfg->io == LDR_IO_BUFFERED || cfg->io == LDR_IO_PREAD) {
		snprintf(ds->io, sizeof(ds->io), "%s", cfg->io == LDR_IO_PREAD ? "pread (--io pread)" :
			 "page cache (--io buffered)");
		return;
	}
	if (ds->fd_direct < 0) {
		snprintf(ds->io, sizeof(ds->io), "page cache (no O_DIRECT on this file system)");
		return;
	}
	if (cfg->io == LDR_IO_DIRECT) {
		snprintf(ds->io, sizeof(ds->io), "O_DIRECT (--io direct)");
		return;
	}
	uint64_t budget = cfg->cache_bytes ? cfg->cache_bytes : memory_budget();
	int fits = h->data_size <= budget / 2;

	if (res >= RESIDENT_ENOUGH || fits) {
		close(ds->fd_direct);
		ds->fd_direct = -1;
		dpk_direct_close(ds->d);  /* a set's (none for one file) */
	}
	if (res >= RESIDENT_ENOUGH && dpk_data_mapped(ds->d))
		snprintf(ds->io, sizeof(ds->io), "memory (%d.%d%% resident, mapped)", res / 10,
			 res % 10);
	else if (res >= RESIDENT_ENOUGH)
		snprintf(ds->io, sizeof(ds->io), "page cache (%d.%d%% resident)", res / 10, res % 10);
	else if (fits)
		snprintf(ds->io, sizeof(ds->io), "page cache (fits half of %llu MiB)",
			 (unsigned long long)(budget >> 20));
	else
		snprintf(ds->io, sizeof(ds->io), "O_DIRECT (%llu MiB > half of %llu MiB)",
			 (unsigned long long)(h->data_size >> 20), (unsigned long long)(budget >> 20));
	char shown[128];  /* the client's bytes: no control character reaches the log */
	size_t k;
	for (k = 0; name[k] && k + 1 < sizeof(shown); k++)
		shown[k] = (unsigned char)name[k] < 0x20 || name[k] == 0x7f ? '?' : name[k];
	shown[k] = '\0';
	char shards[32] = "";
	if (is_set(ds->d))
		snprintf(shards, sizeof(shards), " in %u shards", dpk_shard_count(ds->d));
	LOG_INFO("dataset %s: %llu MiB of records%s, %d.%d%% resident: %s", shown,
		 (unsigned long long)(h->data_size >> 20), shards, res < 0 ? 0 : res / 10,
		 res < 0 ? 0 : res % 10, ds->io);
}

static void dset_put(struct dset *ds)
{
	if (!ds)
		return;
	pthread_mutex_lock(&dset_mu);
	int last = --ds->refs == 0;
	if (last)
		for (struct dset **p = &dsets; *p; p = &(*p)->next)
			if (*p == ds) {
				*p = ds->next;
				break;
			}
	pthread_mutex_unlock(&dset_mu);
	if (!last)
		return;
	/* no other job can find it now: closed without the lock (a large set takes a while) */
	dpk_close(ds->d);
	if (ds->fd_direct >= 0)
		close(ds->fd_direct);
	close(ds->fd);
	for (uint32_t k = 0; k < ds->nshards; k++)
		close(ds->shard_fds[k]);
	free(ds->shard_fds);
	pthread_mutex_destroy(&ds->mu);
	free(ds);
}

/* Is every record within max_record, and deliverable as j->out asks? Then 0 and the memory the
 * job makes loaderd hold besides rings (the index, if this job mapped it; what the workers may
 * hold at once for its largest record: each worker's two reader halves and its substitute
 * buffer) in *mem; else -errno with @why naming the first sample that is not. Before anything
 * reads a record; under ds->mu. */
static int records_bounded(const struct ldr_config *cfg, struct job *j, uint64_t *mem, char *why,
			   size_t whylen)
{
	struct dset *ds = j->ds;
	const struct dpk_header *h = dpk_header_get(j->d);
	uint64_t big;

	/* A streamed set's shards are checked one by one as they attach (shard_check): sized here
	 * as a set not walked (any record up to --max-record). */
	if (!ds->stream && (!ds->walked || ds->walk_limit != j->max_record) &&
	    dpk_count(j->d) <= WALK_MAX)
		dset_walk(ds, j->max_record);
	if (ds->bad) {
		snprintf(why, whylen, "dataset %s: %s", j->spec.dataset, ds->bad_why);
		return -EBADMSG;
	}
	if (ds->walked) {
		if (ds->over) {
			snprintf(why, whylen, "dataset %s: sample %llu is a record of %llu bytes%s, "
				 "above the limit of %llu (loaderd --max-record)", j->spec.dataset,
				 (unsigned long long)ds->over_id, (unsigned long long)ds->over_len,
				 ds->over_z ? " decompressed" : "", (unsigned long long)j->max_record);
			return -EFBIG;
		}
		big = ds->big;
	} else {  /* not walked: as large as a record may be */
		big = h->data_size < j->max_record ? h->data_size : j->max_record;
	}
	size_t arena = cfg->arena_bytes ? cfg->arena_bytes : LDR_ARENA_DEFAULT;
	/* A worker's decoded pixels for the largest image: the decoder's rows of the window (the
	 * whole image at worst, up to 4 components for CMYK) and the resize's scratch, held while
	 * it decodes such a record (walked: the largest image's size; not walked: as large as
	 * --max-pixels lets an image be, when the file holds images at all; never above it). */
	uint64_t px = ds->walked ? ds->big_px :
		      (h->kinds & ~((1u << DPK_KIND_RAW) | (1u << DPK_KIND_RAW_ZSTD))) ? j->max_pixels : 0;
	if (px > j->max_pixels)
		px = j->max_pixels;  /* a larger image is a bad record, refused before it decodes */
	uint64_t per_worker = 2 * ldr_reader_extra(arena, big) + (big > LDR_SUB_KEEP ? big : 0) +
			      px * LDR_DECODE_PX_BYTES;
	*mem = sizeof(*j) + (uint64_t)(cfg->workers ? cfg->workers : 1) * per_worker;
	if (j->created)  /* an index read entry by entry (dpk_entries_read) holds nothing */
		*mem += sizeof(*ds) + (dpk_mapped(j->d) ? h->index_size : 0) + h->classes_size +
			(uint64_t)h->class_count * sizeof(char *);
	return 0;
}

/* How records are delivered: the ring's shape, and every record's verdict (walked) or sample 0's
 * (the rest are checked at use). Under ds->mu. */
static int job_shape(struct job *j, struct ring_desc *rd, char *why, size_t whylen)
{
	const struct ctl_job_open *spec = &j->spec;
	struct dpk_entry e0;
	char err[200];
	int ret;

	memset(rd, 0, sizeof(*rd));
	rd->batch = spec->batch;
	rd->dtype = RING_DTYPE_U8;
	if (spec->crop_h) {
		j->out.h = spec->crop_h;
		j->out.w = spec->crop_w;
		j->out.nchw = !!(spec->transforms & CTL_TF_NCHW);
		j->rrc = !!(spec->transforms & CTL_TF_RANDOM_RESIZED_CROP);
		j->hflip = !!(spec->transforms & CTL_TF_HFLIP);
		j->sample_bytes = (uint64_t)spec->crop_h * spec->crop_w * 3;
		rd->ndim = 3;
		rd->layout = j->out.nchw ? RING_LAYOUT_NCHW : RING_LAYOUT_NHWC;
		if (j->out.nchw) {
			rd->shape[0] = 3, rd->shape[1] = spec->crop_h, rd->shape[2] = spec->crop_w;
		} else {
			rd->shape[0] = spec->crop_h, rd->shape[1] = spec->crop_w, rd->shape[2] = 3;
		}
	}
	if (j->ds->walked && (ret = dset_verdict(j->ds, &j->out, spec->dataset, why, whylen)) < 0)
		return ret;
	if ((ret = dpk_entry_load(j->d, 0, &e0, err, sizeof(err))) < 0) {
		snprintf(why, whylen, "dataset %s: %s", spec->dataset, err);
		return ret;
	}
	if ((ret = accepts(spec->dataset, &j->out, &e0, 0, why, whylen)) < 0)
		return ret;
	if (!spec->crop_h) {  /* records as stored: every one must be a tensor of sample 0's shape */
		j->ndim = e0.ndim;
		memcpy(j->shape, e0.shape, sizeof(j->shape));
		j->sample_bytes = e0.raw_size;
		rd->ndim = e0.ndim;
		memcpy(rd->shape, e0.shape, sizeof(rd->shape));
		rd->layout = e0.ndim == 3 && e0.shape[2] <= 4 ? RING_LAYOUT_NHWC : RING_LAYOUT_RAW;
	}
	rd->sample_bytes = j->sample_bytes;
	/* Aux fields: each sample's blob, checked, goes to its place in the slot's aux area, whose
	 * stride is the dataset's largest blob (the header's aux_max, bounded by the format) */
	if ((rd->aux_fields = dpk_aux_fields(j->d))) {
		rd->aux_stride = (dpk_aux_max(j->d) + 7) & ~7u;
		for (uint32_t k = 0; k < rd->aux_fields; k++)
			snprintf(rd->aux_names[k], sizeof(rd->aux_names[k]), "%s",
				 dpk_aux_name(j->d, k));
	}
	return 0;
}

/* Sample @id's aux blob (entry @e) read, checked and copied to entry @i of the slot's aux area:
 * 0, or -EBADMSG (a bad blob: a bad sample) with @why, or -ENOMEM. Nothing to do without aux. */
static int aux_fill(struct job *j, struct worker *w, struct ring_slot *slot, uint32_t i,
		    uint64_t id, const struct dpk_entry *e, char *why, size_t whylen)
{
	uint32_t stride = (dpk_aux_max(j->d) + 7) & ~7u;

	if (!slot->aux)
		return 0;
	if (!w->aux && !(w->aux = malloc(RING_AUX_STRIDE_MAX)))
		return -ENOMEM;
	ssize_t n = dpk_aux_read(j->d, id, e, w->aux, RING_AUX_STRIDE_MAX, why, whylen);
	if (n < 0)
		return n == -ENOMEM ? -ENOMEM : -EBADMSG;
	if ((uint64_t)n > stride) {  /* the entry was checked against aux_max: cannot be */
		snprintf(why, whylen, "aux fields of %zd bytes above the ring's %u", n, stride);
		return -EBADMSG;
	}
	memcpy(slot->aux + (size_t)i * stride, w->aux, (size_t)n);
	slot->aux_len[i] = (uint32_t)n;  /* shared memory: written, never read back */
	return 0;
}

/* ---- a streamed set's shards (docs/STREAMING.md) ---- */

/* Shard @k of @j's streamed set, open alone as @sd (its samples from 0; the set's from
 * dpk_shard_first): every entry checked, every record within --max-record and deliverable as
 * j->out asks (of sample 0's shape when delivered as stored), as the walk and the verdicts check
 * a whole set at its open. 0, or -errno with @why naming the shard and the sample. */
static int shard_check(struct job *j, const struct dpk *sd, uint32_t k, char *why, size_t whylen)
{
	uint64_t first = dpk_shard_first(j->d, k), n = dpk_count(sd);
	const char *path = dpk_shard_path(j->d, k);
	char reason[220];
	struct dpk_entry e;
	int z;

	if (n != dpk_shard_first(j->d, k + 1) - first) {  /* attach checks it too */
		snprintf(why, whylen, "dataset %s: shard %u (%s): %llu samples, its manifest line "
			 "says %llu", j->spec.dataset, k, path, (unsigned long long)n,
			 (unsigned long long)(dpk_shard_first(j->d, k + 1) - first));
		return -EBADMSG;
	}
	for (uint64_t i = 0; i < n; i++) {
		if (dpk_entry_load(sd, i, &e, reason, sizeof(reason)) < 0) {
			snprintf(why, whylen, "dataset %s: shard %u (%s): %s", j->spec.dataset, k, path,
				 reason);
			return -EBADMSG;
		}
		uint64_t len = held_len(&e, &z);
		if (len > j->max_record) {
			snprintf(why, whylen, "dataset %s: shard %u (%s): sample %llu is a record of "
				 "%llu bytes%s, above the limit of %llu (loaderd --max-record)",
				 j->spec.dataset, k, path, (unsigned long long)(first + i),
				 (unsigned long long)len, z ? " decompressed" : "",
				 (unsigned long long)j->max_record);
			return -EFBIG;
		}
		if (refusal(&j->out, &e, first + i, reason, sizeof(reason)) < 0) {
			snprintf(why, whylen, "dataset %s: shard %u (%s):%s", j->spec.dataset, k, path,
				 reason);
			return -EINVAL;
		}
		if (!j->out.h && (e.ndim != j->ndim || memcmp(e.shape, j->shape, sizeof(j->shape)))) {
			snprintf(why, whylen, "dataset %s: shard %u (%s): sample %llu has another shape "
				 "than sample 0; give a crop size to resize", j->spec.dataset, k, path,
				 (unsigned long long)(first + i));
			return -EINVAL;
		}
	}
	return 0;
}

/* Attach shard @k of @j's streamed set from @fd (taken over in every case): checked first on a
 * descriptor of its own (shard_check), so that no step can hold a shard that fails; then
 * dpk_shard_attach (its manifest line, the template). 0 or -errno with @why naming the shard. */
static int job_shard_attach(struct job *j, uint32_t k, int fd, char *why, size_t whylen)
{
	struct dpk *sd = NULL;
	char err[200];
	int ret;

	if (!j->ds->stream || k >= dpk_shard_count(j->d)) {
		snprintf(why, whylen, "dataset %s: no shard %u to attach (%u, %s)", j->spec.dataset, k,
			 dpk_shard_count(j->d), j->ds->stream ? "streamed" : "not streamed");
		close(fd);
		return j->ds->stream ? -ERANGE : -EINVAL;
	}
	const char *path = dpk_shard_path(j->d, k);
	if (dpk_shard_attached(j->d, k)) {
		snprintf(why, whylen, "dataset %s: shard %u (%s) is attached already", j->spec.dataset,
			 k, path);
		close(fd);
		return -EEXIST;
	}
	ret = dpk_open_fd(fd, 0, &sd, err, sizeof(err));
	if (ret < 0) {
		snprintf(why, whylen, "dataset %s: shard %u (%s): %s", j->spec.dataset, k, path, err);
		close(fd);
		return ret;
	}
	ret = shard_check(j, sd, k, why, whylen);
	uint64_t bytes = dpk_header_get(sd)->file_size;
	dpk_close(sd);
	if (ret < 0) {
		close(fd);
		return ret;
	}
	ret = dpk_shard_attach(j->d, k, fd, err, sizeof(err));
	if (ret < 0) {
		snprintf(why, whylen, "dataset %s: shard %u (%s): %s", j->spec.dataset, k, path, err);
		return ret;
	}
	j->shard_bytes[k] = bytes;
	return 0;
}

/* @j's streamed set at its open: shard 0 (the template) checked, each shard's size (estimated
 * from the template's for the pending ones), then the other shards that came attached. 0 or
 * -errno with @why. */
static int job_stream_open(struct job *j, const struct srv_dataset *sd, struct srv_job_info *info,
			   char *why, size_t whylen)
{
	uint32_t n = dpk_shard_count(j->d);
	const struct dpk *t = dpk_shard(j->d, 0);
	uint64_t tbytes = dpk_header_get(t)->file_size, tcount = dpk_count(t);
	int ret;

	if (!(j->shard_bytes = calloc(n, sizeof(*j->shard_bytes))))
		return -ENOMEM;
	for (uint32_t k = 0; k < n; k++) {
		uint64_t c = dpk_shard_first(j->d, k + 1) - dpk_shard_first(j->d, k);
		j->shard_bytes[k] = (uint64_t)((double)tbytes * (double)c / (double)tcount);
	}
	j->shard_bytes[0] = tbytes;
	if ((ret = shard_check(j, t, 0, why, whylen)) < 0)
		return ret;
	for (uint32_t k = 1; k < sd->nshards; k++) {
		if (sd->shards[k] < 0)
			continue;
		int fd = sd->shards[k];
		sd->shards[k] = -1;
		if ((ret = job_shard_attach(j, k, fd, why, whylen)) < 0)
			return ret;
	}
	info->stream_shards = n;
	info->shard_bytes = j->shard_bytes;
	return 0;
}

/* The SIGBUS guard's slots (DPK_GUARD_SLOTS, two a mapped file, one table for the daemon) are
 * charged per uid: the mappings a job open makes are its client's, up to a quarter of the table;
 * past it its files are opened unmapped (an index copy, counted in --mem-limit, and reads), and
 * other users still map theirs. */
#define LDR_GUARD_UID_MAX (DPK_GUARD_SLOTS / 4)

/* The job's augmentations (@w, NULL: none), and what they make each worker hold: one sample's
 * copy (ldr_aug_pixels), counted in *@mem. 0, or -EINVAL with @why. */
static int job_aug_open(const struct ldr_config *cfg, struct job *j, const struct ctl_augment *w,
			uint64_t *mem, char *why, size_t whylen)
{
	int ret = ldr_aug_init(&j->aug, w, j->out.h != 0, why, whylen);

	if (ret == 0 && j->aug.active)
		*mem += (uint64_t)(cfg->workers ? cfg->workers : 1) * j->sample_bytes;
	return ret;
}

static int job_open(void *ctx, const struct ctl_job_open *spec, const struct srv_dataset *sd,
		    void **out, struct srv_job_info *info, char *why, size_t whylen)
{
	int fd = sd->fd;

	dpk_guard_owner((long)sd->uid, LDR_GUARD_UID_MAX);  /* this opener thread's mappings */
	const struct ldr_config *cfg = ctx;
	struct job *j = calloc(1, sizeof(*j));
	char err[256];
	int ret;

	*out = NULL;
	if (!j)
		return -ENOMEM;
	j->fd_direct = -1;
	j->fd = -1;
	j->spec = *spec;
	j->max_pixels = cfg->max_pixels ? cfg->max_pixels : LDR_MAX_PIXELS_DEFAULT;
	j->max_record = max_record(cfg);
	/* The client opened the dataset, and a set's every shard, with its own rights (ldc_open):
	 * loaderd never opens a path a client names, so it reads nothing that client could not read
	 * itself. A job shares the dataset of another only when its own fd names the same file and
	 * its client is of the same uid. */
	if (fd < 0) {
		snprintf(why, whylen, "dataset %s: the client did not pass it open (clients open the "
			 "dataset themselves and send the descriptor; ldc_open does)", spec->dataset);
		ret = -EBADF;
		goto fail;
	}
	j->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	int dfd = j->fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0) {
		ret = -errno;
		snprintf(why, whylen, "dataset %s: %s", spec->dataset, strerror(-ret));
		goto fail;
	}
	if (sd->stream) {
		ret = dset_stream_get(dfd, sd->shards, sd->nshards, sd->uid, &j->ds, err, sizeof(err));
		j->created = 1;
	} else {
		ret = dset_get(dfd, sd->shards, sd->nshards, sd->uid, cfg, spec->dataset, &j->ds,
			       &j->created, err, sizeof(err));
	}
	if (ret < 0) {
		snprintf(why, whylen, "dataset %s: %s", spec->dataset, err);
		goto fail;
	}
	info->fds = 1 + j->ds->fds;  /* j->fd, and the dataset's (counted for each job on it) */
	pthread_mutex_lock(&j->ds->mu);
	j->d = j->ds->d;
	j->fd_direct = j->ds->fd_direct;
	snprintf(info->io, sizeof(info->io), "%s", j->ds->io);
	ret = records_bounded(cfg, j, &info->mem_bytes, why, whylen);
	if (ret == 0)
		ret = job_shape(j, &info->ring, why, whylen);
	if (ret == 0)
		ret = job_aug_open(cfg, j, sd->aug, &info->mem_bytes, why, whylen);
	if (ret == 0 && j->ds->stream)
		ret = job_stream_open(j, sd, info, why, whylen);
	pthread_mutex_unlock(&j->ds->mu);
	if (ret < 0)
		goto fail;
	uint64_t n = dpk_count(j->d);
	ret = ldr_sampler_init(&j->smp, n, spec->world, spec->batch, (enum ldr_sampling)spec->sampling,
			       (enum ldr_tail)spec->tail, spec->seed, spec->block, spec->window);
	if (ret < 0) {
		snprintf(why, whylen, "dataset %s has %" PRIu64 " samples: too few for %u ranks%s",
			 spec->dataset, n, spec->world,
			 spec->tail == CTL_TAIL_DROP ? " with tail policy drop" :
			 spec->tail == CTL_TAIL_DROP_LAST ? " of whole batches (tail policy drop_last)" :
			 "");
		goto fail;
	}
	info->steps_per_epoch = j->smp.steps;
	info->samples = n;
	_Static_assert(CTL_DATASET_ID_SIZE == DPK_IDENTITY_SIZE, "one identity");
	dpk_identity(j->d, info->dataset_id);
	*out = j;
	return 0;
fail:
	dset_put(j->ds);
	if (j->fd >= 0)
		close(j->fd);
	free(j->shard_bytes);
	free(j);
	return ret;
}

static void job_close(void *ctx, void *p)
{
	struct job *j = p;

	(void)ctx;
	if (!j)
		return;
	dset_put(j->ds);
	close(j->fd);
	free(j->shard_bytes);
	free(j);
}

/* ---- workers ---- */

static uint64_t max_pixels(const struct ldr_config *cfg)
{
	return cfg->max_pixels ? cfg->max_pixels : LDR_MAX_PIXELS_DEFAULT;
}

static void *worker_init(void *ctx, unsigned index)
{
	const struct ldr_config *cfg = ctx;
	struct worker *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	if (ldr_reader_create(cfg->io, cfg->arena_bytes ? cfg->arena_bytes : LDR_ARENA_DEFAULT,
			      &w->rd) < 0 ||
	    cdc_decoder_create(&w->dec) < 0) {
		LOG_ERROR("worker %u: cannot set up its reader or decoder", index);
		ldr_reader_destroy(w->rd);
		cdc_decoder_destroy(w->dec);
		free(w);
		return NULL;
	}
	cdc_decoder_limit(w->dec, max_pixels(cfg));
	ldr_reader_limit(w->rd, max_record(cfg));
	return w;
}

static void worker_fini(void *ctx, void *p)
{
	struct worker *w = p;

	(void)ctx;
	if (!w)
		return;
	ldr_reader_destroy(w->rd);
	cdc_decoder_destroy(w->dec);
	free(w->sub);
	free(w->aux);
	free(w->aug_scratch);
	free(w);
}

/* ---- fill ---- */

/* The per-sample augmentations of the sample of @key, decoded into @dst as @o. 0, or -ENOMEM
 * with @why. */
static int augment(struct job *j, struct worker *w, uint64_t key, const struct cdc_out *o,
		   uint8_t *dst, char *why, size_t whylen)
{
	int ret = ldr_aug_pixels(&j->aug, key, o, dst, &w->aug_scratch, &w->aug_cap);

	if (ret < 0)
		snprintf(why, whylen, "out of memory for the augmentations' copy of a sample");
	return ret;
}

/* Check and decode one record's bytes into @dst, by its entry @e (the copy the read went by).
 * 0 or -errno with @why. */
static int decode_one(struct job *j, struct worker *w, uint64_t epoch, uint64_t id,
		      const struct dpk_entry *e, const uint8_t *bytes, uint8_t *dst, char *why,
		      size_t whylen)
{
	struct cdc_crop crop;
	struct cdc_out o = j->out;
	/* The open's walk (if any) saw the file as it was then: the verdict, and the shape of a
	 * record delivered as stored, are checked again on the entry the read went by. */
	if (refusal(&o, e, id, why, whylen) < 0) {
		memmove(why, why + 1, strlen(why));
		return -EBADMSG;
	}
	if (!o.h && (e->ndim != j->ndim || memcmp(e->shape, j->shape, sizeof(j->shape)) ||
		     e->raw_size != j->sample_bytes)) {
		snprintf(why, whylen, "shape differs from the job's (that of sample 0)");
		return -EBADMSG;
	}
	int z;
	if (held_len(e, &z) > j->max_record) {  /* a dataset too large to walk at open */
		snprintf(why, whylen, "a record of %llu bytes%s, above the limit of %llu (loaderd "
			 "--max-record)", (unsigned long long)held_len(e, &z),
			 z ? " decompressed" : "", (unsigned long long)j->max_record);
		return -EBADMSG;
	}
	if (dpk_record_check(e, bytes) < 0) {
		snprintf(why, whylen, "checksum mismatch");
		return -EBADMSG;
	}
	uint32_t ih = e->shape[0];  /* JPEG and HxWxC raw alike */
	uint32_t iw = e->shape[1];
	/* Checked at use, not only at open: a record this large is bad, whatever its index says
	 * its kind allows (the decoders check the stream's own size again). */
	if (o.h && cdc_pixels_over(ih, iw, j->max_pixels)) {
		snprintf(why, whylen, "%ux%u pixels, above the limit of %llu (loaderd --max-pixels)",
			 ih, iw, (unsigned long long)j->max_pixels);
		return -EBADMSG;
	}
	uint64_t key = 0;
	if (o.h) {
		key = mix3(j->spec.seed, epoch, id);
		if (j->rrc)
			cdc_crop_random(iw, ih, key, &crop);
		else
			cdc_crop_center(iw, ih, o.h, o.w, &crop);
		o.flip = j->hflip && (mix3(key, 0x464c4950ull, 0) & 1);
		ldr_aug_out(&j->aug, key, &o);
	} else {
		memset(&crop, 0, sizeof(crop));
	}
	/* as stored (o.h == 0), checked above: the record has sample_bytes bytes */
	int ret = cdc_kind_load(e->kind)->decode(w->dec, e, bytes, &crop, &o, dst, why, whylen);
	if (ret == 0 && o.h)
		ret = augment(j, w, key, &o, dst, why, whylen);
	return ret;
}

/* One try of substitute(): sample @sid (its shard held). 1 when good (decoded into @dst, its aux
 * filled, its label in *label), 0 when bad too (counted, logged), -ENOMEM. */
static int substitute_one(struct job *j, struct worker *w, uint64_t epoch, uint64_t sid,
			  int64_t *label, uint8_t *dst, struct srv_fill *f, uint32_t slot_i)
{
	char why[CTL_TEXT_MAX];
	struct dpk_entry ent;
	const struct dpk_entry *e = &ent;
	ssize_t n = -EFBIG;  /* above --max-record: job_open saw to it, but the index is the
			      * client's */

	if (dpk_entry_load(j->d, sid, &ent, why, sizeof(why)) < 0) {
		f->bad++;
		if (f->nbad_ids < 8)
			f->bad_ids[f->nbad_ids++] = sid;
		LOG_WARN("job %s: sample %" PRIu64 " is bad too (%s); trying the next",
			 j->spec.job, sid, why);
		return 0;
	}
	if (e->length <= j->max_record && w->sub_cap < e->length) {
		uint8_t *p = realloc(w->sub, e->length);
		if (!p)
			return -ENOMEM;
		w->sub = p;
		w->sub_cap = e->length;
	}
	if (e->length <= j->max_record) {
		uint64_t t0 = clk_now_ns();
		n = dpk_read_entry(j->d, e, w->sub, w->sub_cap);
		f->phase_ns[LDR_PHASE_IO] += clk_now_ns() - t0;
	}
	if (n >= 0 && decode_one(j, w, epoch, sid, e, w->sub, dst, why, sizeof(why)) == 0 &&
	    aux_fill(j, w, f->slot, slot_i, sid, e, why, sizeof(why)) == 0) {
		*label = e->label;
		return 1;
	}
	f->bad++;
	if (f->nbad_ids < 8)
		f->bad_ids[f->nbad_ids++] = sid;
	LOG_WARN("job %s: sample %" PRIu64 " is bad too (%s); trying the next",
		 j->spec.job, sid, n < 0 ? strerror((int)-n) : why);
	return 0;
}

/* Replace the bad sample at position @pos with the next good one of the order; 0 with *id and
 * *label set. A streamed set: each candidate's shard is held around its read (the step holds
 * only its own shards); one whose shard is pending is passed over (not known good, not counted
 * bad). */
static int substitute(struct job *j, struct worker *w, uint64_t epoch, uint64_t pos, uint64_t *id,
		      int64_t *label, uint8_t *dst, struct srv_fill *f, uint32_t slot_i)
{
	for (uint64_t k = 1; k <= SUBSTITUTE_TRIES && k < j->smp.n; k++) {
		uint64_t sid = ldr_sampler_substitute(&j->smp, epoch, pos, k);
		uint32_t sk = j->ds->stream ? dpk_shard_find(j->d, sid) : 0;
		if (j->ds->stream && dpk_shard_hold(j->d, sk) < 0)
			continue;
		int ret = substitute_one(j, w, epoch, sid, label, dst, f, slot_i);
		if (j->ds->stream)
			dpk_shard_release(j->d, sk);
		if (ret < 0)
			return ret;
		if (ret > 0) {
			*id = sid;
			return 0;
		}
	}
	return -EBADMSG;
}

/* A read ended early: has the file been cut shorter than it was when the job opened it? Then
 * no record past the cut can ever be read again: the job stops with that, not with a string of
 * "bad records" (1 with f->why set, else 0). */
static int truncated(struct job *j, struct srv_fill *f)
{
	struct stat st;

	/* each file of a set; of a streamed set, the shards the step holds (the others may be
	 * pending, or detached at any time) */
	uint32_t nk = j->ds->stream ? f->step->nheld : dpk_shard_count(j->d);
	for (uint32_t q = 0; q < nk; q++) {
		uint32_t k = j->ds->stream ? f->step->held[q] : q;
		const struct dpk *s = dpk_shard(j->d, k);
		uint64_t want = dpk_header_get(s)->file_size;
		if (fstat(dpk_fd(s), &st) < 0 || (uint64_t)st.st_size >= want)
			continue;
		const char *sp = dpk_shard_path(j->d, k);
		snprintf(f->why, sizeof(f->why), "dataset %.*s%s%.*s was truncated while the job ran "
			 "(%lld bytes now, %llu when it was opened); the job stops", 120,
			 j->spec.dataset, sp ? ": shard " : "", 60, sp ? sp : "",
			 (long long)st.st_size, (unsigned long long)want);
		return 1;
	}
	return 0;
}

/* A streamed set: hold the shards of @st's samples (ldr_step_hold), all or none. 0, -EAGAIN
 * with st->wait_shard, or another -errno with @why. Nothing held on a set not streamed. */
static int step_hold(struct job *j, struct srv_step *st, char *why, size_t whylen)
{
	st->nheld = 0;
	if (!j->ds->stream)
		return 0;
	int ret = ldr_step_hold(j->d, st->ids, st->count, st->held, &st->nheld, &st->wait_shard);
	if (ret < 0 && ret != -EAGAIN)
		snprintf(why, whylen, "dataset %s: step %llu draws a sample past the set's %llu",
			 j->spec.dataset, (unsigned long long)st->step_in_epoch,
			 (unsigned long long)dpk_count(j->d));
	return ret;
}

/* The sampler's draw for a step, into the server's private arrays; labels are set by the fills
 * (a substitute has its own). */
static int step_open(void *ctx, void *wp, struct srv_step *st, char *why, size_t whylen)
{
	struct job *j = st->job;

	(void)ctx;
	if (!wp) {
		snprintf(why, whylen, "a worker could not start (see loaderd's log)");
		return -ENOMEM;
	}
	uint32_t c = ldr_sampler_count(&j->smp, st->step_in_epoch);

	st->global_count = c * st->world;
	if (!st->weights) {
		st->count = ldr_sampler_batch(&j->smp, st->epoch, st->step_in_epoch, st->rank,
					      st->ids, st->flags);
		st->global_offset = c * st->rank;
		assert(st->count <= j->spec.batch && j->spec.batch <= RING_BATCH_MAX);
		return step_hold(j, st, why, whylen);
	}
	/* Balanced shares: the same global step, cut by the weights in force (loader/shares.h) */
	if (ldr_shares_split(st->world, st->global_count, st->cap, st->weights, st->split, NULL) < 0) {
		snprintf(why, whylen, "no split of %u samples over %u ranks of at most %u",
			 st->global_count, st->world, st->cap);
		return -EINVAL;
	}
	st->global_offset = 0;
	for (uint32_t r = 0; r < st->rank; r++)
		st->global_offset += st->split[r];
	st->count = st->split[st->rank];
	ldr_sampler_range(&j->smp, st->epoch, st->step_in_epoch, st->global_offset, st->count,
			  st->ids, st->flags);
	return step_hold(j, st, why, whylen);
}

/* The shards a step's fills read, held until the server let go of the step (step_release): a
 * streamed set's; -EAGAIN with st->wait_shard when one is pending (nothing held). */
static void step_release(void *ctx, void *wp, struct srv_step *st)
{
	struct job *j = st->job;

	(void)ctx, (void)wp;
	ldr_step_release(j->d, st->held, st->nheld);
	st->nheld = 0;
}

/* Sample @i of the step failed to read or decode (@why): substitute it (into @dst, its ids and
 * flags entries) or, with the fail policy or no good substitute, fail with f->why. The choice
 * depends only on (seed, epoch, position of @i), whichever task or worker fills it. */
static int replace_bad(struct job *j, struct worker *w, struct srv_fill *f, uint32_t i,
		       uint8_t *dst, const char *why)
{
	struct srv_step *st = f->step;
	uint64_t id = st->ids[i];

	f->bad++;
	if (f->nbad_ids < 8)
		f->bad_ids[f->nbad_ids++] = id;
	if (j->spec.on_bad == CTL_BAD_FAIL) {
		snprintf(f->why, sizeof(f->why), "sample %" PRIu64 ": %s (policy: fail)", id, why);
		return -EBADMSG;
	}
	uint64_t pos = ldr_sampler_gpos(&j->smp, st->step_in_epoch,
					(uint64_t)st->global_offset + i) % j->smp.n;
	uint64_t sid;
	int64_t label;
	if (substitute(j, w, st->epoch, pos, &sid, &label, dst, f, i) < 0) {
		snprintf(f->why, sizeof(f->why), "sample %" PRIu64 ": %s, and no good substitute in "
			 "the next %d", id, why, SUBSTITUTE_TRIES);
		return -EBADMSG;
	}
	LOG_WARN("job %s: sample %" PRIu64 " is bad (%s); substituted by sample %" PRIu64,
		 j->spec.job, id, why, sid);
	st->ids[i] = sid;
	st->labels[i] = label;
	st->flags[i] |= RING_SAMPLE_SUBSTITUTED;
	return 0;
}

/* The records @ids[0..n) from the reads started for them by the fill before (their count, the
 * leading ones that fit), or -1 when none were: then reads started for other records are
 * waited for and dropped. */
static int prefetched(struct worker *w, const struct dpk *d, const uint64_t *ids, uint32_t n)
{
	if (!w->pf_n)
		return -1;
	int match = w->pf_d == d && w->pf_asked <= n &&
		    !memcmp(w->pf_ids, ids, w->pf_asked * sizeof(*ids));
	w->pf_n = 0;
	w->half = w->pf_half;
	int k = ldr_reader_complete(w->rd, w->half, w->bufs, w->errs);
	return match ? k : -1;
}

/* Read @ids[0..n) now (the leading ones that fit; their count), into the half that reads started
 * for the next task do not use. */
static int read_now(struct job *j, struct worker *w, const uint64_t *ids, uint32_t n)
{
	w->half = w->pf_n ? !w->pf_half : 0;
	int k = ldr_reader_submit(w->rd, w->half, j->d, j->fd_direct, ids, n);
	return k <= 0 ? k : ldr_reader_complete(w->rd, w->half, w->bufs, w->errs);
}

/* Start reading the records of the task this worker fills next (f->next_*), into the other half
 * of the reader, so that they arrive while this task decodes. */
static void prefetch(struct worker *w, const struct srv_fill *f)
{
	const struct srv_step *nst = f->next_step;
	const struct job *nj = nst->job;
	uint32_t n = f->next_end - f->next_begin;

	if (n > READ_MAX)
		n = READ_MAX;
	memcpy(w->pf_ids, nst->ids + f->next_begin, n * sizeof(*w->pf_ids));
	int k = ldr_reader_submit(w->rd, !w->half, nj->d, nj->fd_direct, w->pf_ids, n);
	if (k > 0) {
		w->pf_d = nj->d;
		w->pf_n = (uint32_t)k;
		w->pf_asked = n;
		w->pf_half = !w->half;
	}
}

/* Samples [f->begin, f->end) of the step: read, check and decode each into its place in the
 * slot's payload; its label (and, when substituted, its id and flags) into the step's arrays.
 * The first records come from the reads the fill before started for them, if any; once they are
 * in, the reads of the next task start (f->next_step), before any decoding. */
static int fill_task(struct worker *w, struct srv_fill *f)
{
	struct srv_step *st = f->step;
	struct job *j = st->job;
	uint8_t *payload = f->slot->payload;
	char why[160];  /* leaves room for the sample id in f->why */

	for (uint32_t i = f->begin; i < f->end;) {
		uint64_t t0 = clk_now_ns();
		uint32_t want = f->end - i > READ_MAX ? READ_MAX : f->end - i;
		int k = i == f->begin ? prefetched(w, j->d, st->ids + i, want) : -1;
		if (k <= 0)
			k = read_now(j, w, st->ids + i, want);
		if (k <= 0) {  /* cannot be: a reader half is always free here */
			snprintf(f->why, sizeof(f->why), "reader: %s", strerror(k < 0 ? -k : EIO));
			return k < 0 ? k : -EIO;
		}
		if (i == f->begin && f->next_step && f->next_end > f->next_begin)
			prefetch(w, f);
		uint64_t t1 = clk_now_ns();
		f->phase_ns[LDR_PHASE_IO] += t1 - t0;
		/* Timed per set, not per record (a clock read costs as much as a small record's
		 * copy); a substitute's read counts as decode time here, and as io time too. */
		for (int q = 0; q < k; q++, i++) {
			uint8_t *dst = payload + (size_t)i * j->sample_bytes;
			const struct dpk_entry *e = ldr_reader_entry(w->rd, w->half, (uint32_t)q);
			struct dpk_entry bad;
			int ret = w->errs[q];
			if (ret == -EBADMSG && truncated(j, f))
				return -EBADMSG;
			if (ret == -EBADMSG && !e->length &&
			    dpk_entry_load(j->d, st->ids[i], &bad, why, sizeof(why)) < 0)
				;  /* the entry failed its check: why says how */
			else if (ret < 0)
				snprintf(why, sizeof(why), "read: %.100s", strerror(-ret));
			else if ((ret = aux_fill(j, w, f->slot, i, st->ids[i], e, why,
						 sizeof(why))) == -ENOMEM) {
				snprintf(f->why, sizeof(f->why), "out of memory for aux fields");
				return ret;
			} else if (ret == 0) {
				ret = decode_one(j, w, st->epoch, st->ids[i], e, w->bufs[q], dst, why,
						 sizeof(why));
			}
			st->labels[i] = e->label;
			if (ret < 0 && (ret = replace_bad(j, w, f, i, dst, why)) < 0)
				return ret;
		}
		f->phase_ns[LDR_PHASE_DECODE] += clk_now_ns() - t1;
	}
	return 0;
}

/* A task, then what it made for large records is let go (the reads of the next task, if any,
 * stay in flight): a worker holds an outlier's size only while it fills it. */
static int fill(void *ctx, void *wp, struct srv_fill *f)
{
	struct worker *w = wp;

	(void)ctx;
	if (!w) {
		snprintf(f->why, sizeof(f->why), "a worker could not start (see loaderd's log)");
		return -ENOMEM;
	}
	int ret = fill_task(w, f);
	ldr_reader_trim(w->rd);
	cdc_decoder_trim(w->dec, LDR_DEC_KEEP);
	if (w->sub_cap > LDR_SUB_KEEP) {
		free(w->sub);
		w->sub = NULL;
		w->sub_cap = 0;
	}
	if (w->aug_cap > LDR_SUB_KEEP) {  /* charged to the job only while it is open */
		free(w->aug_scratch);
		w->aug_scratch = NULL;
		w->aug_cap = 0;
	}
	return ret;
}

/* ---- the stream's ops (srv.h; srv_fetch.c's stream thread) ---- */

static int shard_attach(void *ctx, void *p, uint32_t k, int fd, char *why, size_t whylen)
{
	(void)ctx;
	return job_shard_attach(p, k, fd, why, whylen);
}

static int shard_detach(void *ctx, void *p, uint32_t k)
{
	struct job *j = p;

	(void)ctx;
	return j->ds->stream ? dpk_shard_detach(j->d, k) : -EINVAL;
}

static uint32_t stream_future(void *ctx, void *p, uint32_t rank, uint64_t from, uint64_t nsteps,
			      uint8_t *seen, uint32_t *out, uint32_t max)
{
	struct job *j = p;
	uint32_t n = 0, batch = j->spec.batch;
	uint64_t spe = j->smp.steps;

	(void)ctx;
	if (!j->ds->stream || rank >= j->spec.world || !max)
		return 0;
	uint64_t *ids = malloc(batch * sizeof(*ids));
	uint8_t *flags = malloc(batch);
	for (uint64_t s = from; ids && flags && s - from < nsteps && n < max; s++) {
		uint32_t c = ldr_sampler_batch(&j->smp, s / spe, s % spe, rank, ids, flags);
		for (uint32_t i = 0; i < c && n < max; i++) {
			uint32_t k = dpk_shard_find(j->d, ids[i]);
			if (!seen[k]) {
				seen[k] = 1;
				out[n++] = k;
			}
		}
	}
	free(ids);
	free(flags);
	return n;
}

void ldr_job_ops(const struct ldr_config *cfg, struct srv_ops *ops)
{
	memset(ops, 0, sizeof(*ops));
	ops->ctx = (void *)cfg;
	ops->job_open = job_open;
	ops->job_close = job_close;
	ops->worker_init = worker_init;
	ops->worker_fini = worker_fini;
	ops->step_open = step_open;
	ops->step_release = step_release;
	ops->fill = fill;
	ops->shard_attach = shard_attach;
	ops->shard_detach = shard_detach;
	ops->stream_future = stream_future;
	ops->phases[LDR_PHASE_IO] = (struct srv_phase){ "io", "reading" };
	ops->phases[LDR_PHASE_DECODE] = (struct srv_phase){ "decode", "decoding" };
}
