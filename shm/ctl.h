/* ctl.h - the control protocol between loaderd and its clients, over a SOCK_SEQPACKET unix
 * socket: one message per packet, binary, little-endian, fixed layouts with _Static_asserts.
 * Every message starts with struct ctl_hdr; ctl_recv() checks magic, version, type and length
 * before any body is looked at, and the ctl_check_* functions validate every field of a body.
 * File descriptors travel with SCM_RIGHTS: from the client, the dataset it opened with its own
 * rights (with CTL_JOB_OPEN) and a set's shards (CTL_SHARD_FDS, in batches, before it); from the
 * server, the ring's memfd and its doorbell eventfd. Spec: docs/RING.md. */
#ifndef LOADERD_CTL_H
#define LOADERD_CTL_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#ifdef __cplusplus
extern "C" {
#endif

#define CTL_MAGIC 0x3143444cu     /* "LDC1" read as little-endian bytes 'L','D','C','1' */
#define CTL_VERSION 2u          /* 2: a job open may give a start step (resume tokens) */
#define CTL_MSG_MAX 4096u         /* bytes, header included; longer packets are refused */
#define CTL_JOB_NAME_MAX 64u      /* bytes including the NUL */
#define CTL_PATH_MAX 1024u        /* bytes including the NUL */
#define CTL_TEXT_MAX 256u         /* error text, bytes including the NUL */
#define CTL_WORLD_MAX 65536u
#define CTL_CROP_MAX 8192u
#define CTL_PHASES_MAX 2u         /* phase time slots in struct ctl_stats */

enum ctl_type {
	CTL_JOB_OPEN = 1,   /* client: struct ctl_job_open */
	CTL_JOB_OK = 2,     /* server: struct ctl_job_ok + 2 fds (ring memfd, doorbell eventfd) */
	CTL_STATS_REQ = 3,  /* client: no body: stats of this connection's rank */
	CTL_STATS = 4,      /* server: struct ctl_stats */
	CTL_ERROR = 5,      /* server: struct ctl_error; the server closes the connection after it */
	CTL_ADMIN = 6,      /* client (loaderctl): struct ctl_admin */
	CTL_ADMIN_TEXT = 7, /* server: a chunk of the answer (text or JSON); an empty one ends it */
	CTL_SPLIT_SEED = 8, /* client, before CTL_JOB_OPEN: struct ctl_split + weights + reports */
	CTL_SPLIT_REQ = 9,  /* client, after CTL_JOB_OK: struct ctl_split_req */
	CTL_SPLIT = 10,     /* server: struct ctl_split + weights (nrows 0) */
	CTL_SHARD_FDS = 11, /* client, before CTL_JOB_OPEN on a manifest: struct ctl_shard_fds +
			     * count fds, the shards the client opened, in manifest order */
	CTL_SHARD_ACK = 12, /* server: struct ctl_shard_fds echoed: that batch is taken */
	CTL_AUGMENT = 13,   /* client, before CTL_JOB_OPEN: struct ctl_augment */
	CTL_S3_OPEN = 14,   /* client, before CTL_JOB_OPEN on an s3:// dataset: struct ctl_s3_open
			     * + its strings: loaderd's node cache fetches it (docs/S3.md) */
	CTL_S3_ACK = 15,    /* server: struct ctl_s3_ack: taken, or no cache here */
	CTL_SHARD_WANT = 16, /* loaderd -> ldfetch, on a stream: struct ctl_shard_list + count u32 */
	CTL_SHARD_DROP = 17, /* loaderd -> ldfetch, on a stream: struct ctl_shard_list + count u32 */
	CTL_SHARD_SIZES = 18, /* ldfetch -> loaderd, on a stream: struct ctl_shard_sizes + u64s */
	CTL_TYPE_MAX = 18
};

struct ctl_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;       /* enum ctl_type */
	uint32_t length;     /* bytes of the whole message, header included */
	uint32_t reserved;   /* zero */
};
_Static_assert(sizeof(struct ctl_hdr) == 16, "ctl_hdr is on the wire");

enum ctl_sampling { CTL_SAMPLE_SHUFFLE = 0, CTL_SAMPLE_SEQUENTIAL = 1, CTL_SAMPLE_BLOCK = 2 };
enum ctl_tail { CTL_TAIL_PAD = 0, CTL_TAIL_DROP = 1, CTL_TAIL_MASK = 2, CTL_TAIL_DROP_LAST = 3 };
enum ctl_bad { CTL_BAD_SUBSTITUTE = 0, CTL_BAD_FAIL = 1 };
/* Where a rank starts. DEFAULT: a fresh job at start_epoch; a rank that re-attaches to a job the
 * daemon still holds, at its first unreleased step. AT: exactly (at_epoch, at_step), whatever the
 * daemon remembers: the client's checkpoint is the authority on what was consumed. */
enum ctl_start { CTL_START_DEFAULT = 0, CTL_START_AT = 1 };
/* Whose job. A job belongs to the uid that opened it first, and its name is that uid's: another
 * uid opening the same name opens a job of its own. Nobody else sees it, joins it or moves its
 * resume position, unless the owner shared it with a group (GROUP: the owner's every open says
 * so, with the same share_gid; the owner must be a member). Another user joins a shared job with
 * JOIN, naming its owner: it never creates the job, and it must be a member of the job's group.
 * loaderd's own user and root may JOIN any job. */
enum ctl_share { CTL_SHARE_NONE = 0, CTL_SHARE_GROUP = 1, CTL_SHARE_JOIN = 2 };
/* Step arithmetic: a position (a first step, a job's end, a resume point) is at most
 * CTL_STEP_LIMIT, checked at job open where the steps of an epoch are known, so that no
 * (epoch * steps_per_epoch + step) and no step + 1 wraps. An unbounded job that starts there has
 * 2^64 - 2^62 steps to go before its step numbers would wrap: a million steps a second for
 * 400,000 years. Every position also fits an int64 (Python, numpy, torch). */
#define CTL_STEP_LIMIT (1ull << 62)
#define CTL_DATASET_ID_SIZE 16u   /* = DPK_IDENTITY_SIZE */
/* Samples a rank's ring slot holds when the job balances shares: room for twice the even batch,
 * the most any rank's share may reach (docs/RING.md, "Balanced shares"). */
#define CTL_BALANCE_CAP(batch) ((batch) * 2u < 65536u ? (batch) * 2u : 65536u)

/* Transforms (bits). */
#define CTL_TF_RANDOM_RESIZED_CROP 0x01u /* torchvision RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3) */
#define CTL_TF_CENTER_CROP 0x02u         /* resize shorter side then center crop (evaluation) */
#define CTL_TF_HFLIP 0x04u               /* random horizontal flip, p = 0.5 */
#define CTL_TF_NCHW 0x08u                /* channel-first output (default NHWC) */
#define CTL_TF_ALL 0x0fu

/* A job: ranks that send equal bodies (rank aside) join the same job. */
struct ctl_job_open {
	char job[CTL_JOB_NAME_MAX];   /* [A-Za-z0-9._-]+, NUL-terminated, NUL-padded */
	char dataset[CTL_PATH_MAX];   /* absolute or daemon-relative path, NUL-terminated, NUL-padded */
	uint64_t seed;
	uint64_t start_epoch;         /* first epoch of a fresh job; start_epoch + epochs, and
				       * their steps, at most CTL_STEP_LIMIT */
	uint32_t epochs;              /* 0 = unbounded */
	uint32_t batch;               /* 1..RING_BATCH_MAX */
	uint32_t crop_h, crop_w;      /* output size, 1..CTL_CROP_MAX; 0, 0 = records as stored */
	uint32_t transforms;          /* CTL_TF_* */
	uint32_t rank, world;         /* rank < world <= CTL_WORLD_MAX */
	uint32_t sampling;            /* enum ctl_sampling */
	uint32_t tail;                /* enum ctl_tail */
	uint32_t on_bad;              /* enum ctl_bad */
	uint32_t slots;               /* ring depth, 2..RING_SLOTS_MAX; 0 = server default */
	uint32_t start;               /* enum ctl_start: where this rank starts */
	uint64_t at_epoch, at_step;   /* CTL_START_AT: step at_step (< steps per epoch) of at_epoch */
	uint8_t dataset_id[CTL_DATASET_ID_SIZE]; /* CTL_START_AT: not all zero = the identity the
					    * dataset must have (from a resume token), else refused */
	uint32_t share;               /* enum ctl_share */
	uint32_t share_gid;           /* CTL_SHARE_GROUP: the group whose members may join */
	uint32_t owner_uid;           /* CTL_SHARE_JOIN: whose job to join */
	uint16_t weight;              /* the job's share of decode CPU when loaderd is short of it
				       * (docs/TUNING.md, self-sizing): 1..CTL_WEIGHT_MAX; 0 = 1 */
	uint16_t balance;             /* 1: balanced shares (docs/RING.md, "Balanced shares"; the
				       * daemon must allow them: loaderd --balance), 0: even splits.
				       * Every rank of a job says the same. (weight and balance were
				       * reserved: zero from older clients) */
	/* Block sampling (sampling CTL_SAMPLE_BLOCK only; 0 in every other mode): records per
	 * block, 1..CTL_BLOCK_MAX, and blocks per shuffle window, 1..CTL_WINDOW_MAX; 0 = the
	 * default (CTL_BLOCK_DEFAULT, CTL_WINDOW_DEFAULT). Part of what the ranks agree on and of
	 * the resume token's shape. A client that leaves both 0 may send the message without them
	 * (CTL_JOB_OPEN_SIZE_V2 bytes, as clients before them did): loaderd takes either length. */
	uint32_t block;
	uint32_t window;
};
#define CTL_WEIGHT_MAX 1000u
#define CTL_BLOCK_DEFAULT 64u
#define CTL_WINDOW_DEFAULT 16u
/* Bounds on what a client chooses. The sampler holds nothing per block or per window and draws
 * any sample in O(1) whatever they are (loader/sampler.h), so these bound arithmetic, not work:
 * block x window < 2^40 positions in one window. 2^24 records is a 16 Mi-record shard. */
#define CTL_BLOCK_MAX (1u << 24)
#define CTL_WINDOW_MAX (1u << 16)
#define CTL_JOB_OPEN_SIZE_V2 offsetof(struct ctl_job_open, block)  /* before block and window */
_Static_assert(sizeof(struct ctl_job_open) == CTL_JOB_NAME_MAX + CTL_PATH_MAX + 120, "on the wire");
_Static_assert(offsetof(struct ctl_job_open, block) == CTL_JOB_NAME_MAX + CTL_PATH_MAX + 112,
	       "the message's length before block and window, as older clients send it");
_Static_assert(offsetof(struct ctl_job_open, share) == CTL_JOB_NAME_MAX + CTL_PATH_MAX + 96,
	       "the bytes of reserved[2], zero from older clients (CTL_SHARE_NONE)");
_Static_assert(offsetof(struct ctl_job_open, at_epoch) % 8 == 0, "on the wire");

struct ctl_job_ok {
	uint64_t job_id;
	uint64_t first_step;          /* the step this rank starts (or resumes) at */
	uint64_t steps_total;         /* 0 = unbounded */
	uint64_t steps_per_epoch;
	uint64_t samples;             /* samples in the dataset */
	uint8_t dataset_id[CTL_DATASET_ID_SIZE]; /* the dataset's identity (zero: unknown) */
	uint64_t reserved[1];
};
_Static_assert(sizeof(struct ctl_job_ok) == 64, "on the wire");

struct ctl_stats {
	uint64_t job_id;
	uint64_t published;           /* steps published to this rank's rings, all attaches */
	uint64_t released;            /* first step not released by the current consumer */
	uint64_t samples;             /* samples delivered */
	uint64_t bad_records;         /* records that failed checksum or decode (job-wide) */
	uint64_t fill_ns;             /* producer time spent filling this rank's slots */
	uint64_t phase_ns[CTL_PHASES_MAX]; /* of which each phase of the fill, as the server names
					    * them (loaderd's: docs/RING.md) */
	uint32_t attaches;            /* times a consumer attached to this rank */
	uint32_t ranks_attached;      /* consumers attached to the job now */
	uint32_t slots;
	uint32_t occupancy;           /* slots published and not yet released, now */
	uint32_t workers;             /* the server's fill threads, shared by all its jobs (0: an
					 older server that does not say) */
	uint32_t reserved0;
	uint64_t latency_ns;          /* sum over published steps of the time from the step's first
				       * task to its publish (0: an older server) */
	uint64_t reserved[2];
};
_Static_assert(sizeof(struct ctl_stats) == 112, "on the wire");
_Static_assert(offsetof(struct ctl_stats, workers) == 80, "was reserved, zero from older servers");
_Static_assert(offsetof(struct ctl_stats, latency_ns) == 88, "was reserved, zero from older ones");
_Static_assert(offsetof(struct ctl_stats, phase_ns) == 48, "the bytes of io_ns, decode_ns before");

/* Balanced shares across a loaderd restart (docs/RING.md, "Balanced shares"). CTL_SPLIT_REQ asks
 * for the weights in force at a step of the client's job; CTL_SPLIT answers with them (world
 * u32 after the struct, summing to CTL_SPLIT_ONE; world 0: the server no longer knows that
 * step). A client that resumes a job loaderd may have lost sends CTL_SPLIT_SEED before its
 * CTL_JOB_OPEN: the weights in force at its resume step `from`, then, 8-aligned, nrows rows of
 * world doubles' bits: row i holds each rank's report that came with the release of step
 * k_i - 4 - slots, k_i the i-th multiple of 4 above `from` (the updates whose reports were
 * released before `from`: nrows = CTL_SPLIT_ROWS(from, slots)). Length: exactly
 * CTL_SPLIT_SIZE(world, nrows). */
#define CTL_SPLIT_ONE (1u << 20)
#define CTL_SPLIT_EVERY 4u
#define CTL_SPLIT_ROWS(from, slots) \
	((uint32_t)(((uint64_t)(from) + 3u + (slots)) / 4u - (uint64_t)(from) / 4u))
#define CTL_SPLIT_SIZE(world, nrows) \
	(sizeof(struct ctl_split) + ((size_t)(world) * 4u + 7u) / 8u * 8u + \
	 (size_t)(nrows) * (world) * 8u)
struct ctl_split_req {
	uint64_t step;
	uint64_t reserved;            /* zero */
};
_Static_assert(sizeof(struct ctl_split_req) == 16, "on the wire");
struct ctl_split {
	uint64_t from;                /* the step the weights are in force at */
	uint32_t world;               /* weights that follow (CTL_SPLIT: 0 = not known) */
	uint32_t slots;               /* seed: the ring depth of the run it comes from */
	uint32_t nrows;               /* seed: report rows after the weights; CTL_SPLIT: 0 */
	uint32_t reserved;            /* zero */
};
_Static_assert(sizeof(struct ctl_split) == 24, "on the wire");

/* A set of shards (a manifest, docs/FORMAT.md) is opened by the client: it reads the manifest with
 * its own rights, opens every shard relative to the manifest's directory and sends the
 * descriptors in order, CTL_FDS_BATCH at most per CTL_SHARD_FDS, each answered by CTL_SHARD_ACK
 * before the next is sent (so that no more than one batch is in flight: the kernel counts fds in
 * flight against the sender's RLIMIT_NOFILE), then CTL_JOB_OPEN with the manifest's fd. Batch i
 * has first = i * CTL_FDS_BATCH, the same total (1..CTL_SHARDS_MAX) in every batch, and count =
 * min(CTL_FDS_BATCH, total - first) descriptors. */
#define CTL_FDS_BATCH 64u
#define CTL_SHARDS_MAX 65536u         /* = DPKSET_SHARDS_MAX */
struct ctl_shard_fds {
	uint32_t first;               /* index of this batch's first shard */
	uint32_t total;               /* shards in the set */
	uint32_t count;               /* descriptors with this message */
	uint32_t reserved;            /* zero */
};
_Static_assert(sizeof(struct ctl_shard_fds) == 16, "on the wire");

/* A job's per-sample augmentations and resize filter (docs/AUGMENT.md), sent before CTL_JOB_OPEN
 * (struct ctl_job_open has no room left): part of what the ranks of a job agree on (a rank that
 * sends another, or none where the job has one, is refused) and of the resume token's shape
 * (ctl_augment_digest). Fixed point: every fraction in millionths (CTL_AUG_ONE), so that no
 * float crosses the socket; ctl_check_augment bounds each field. All zero: nothing to do. */
#define CTL_AUG_ONE 1000000
#define CTL_AUG_JITTER_MAX (16 * CTL_AUG_ONE)  /* a brightness/contrast/saturation factor */
#define CTL_AUG_RATIO_MAX (100 * CTL_AUG_ONE)  /* RandomErasing's aspect ratio */
#define CTL_AUG_LEVEL_MAX (255 * CTL_AUG_ONE)  /* a pixel level (erasing's mean and std) */
#define CTL_AUG_BINS_MAX 64u
#define CTL_AUG_OPS_MAX 8u
enum ctl_autoaug { CTL_AUTO_NONE = 0, CTL_AUTO_RAND = 1, CTL_AUTO_WIDE = 2, CTL_AUTO_IMAGENET = 3 };
enum ctl_interp { CTL_INTERP_FAST = 0, CTL_INTERP_BILINEAR = 1, CTL_INTERP_BICUBIC = 2,
		  CTL_INTERP_RANDOM = 3 /* bilinear or bicubic, drawn per sample */ };
struct ctl_augment {
	uint32_t jitter;              /* ColorJitter: bit i on for brightness, contrast,
				       * saturation, hue (i = 0..3) */
	int32_t jitter_lo[4], jitter_hi[4]; /* its factor ranges: 0..CTL_AUG_JITTER_MAX (hue
					     * -CTL_AUG_ONE/2..CTL_AUG_ONE/2), lo <= hi */
	uint32_t autoaug;             /* enum ctl_autoaug */
	uint32_t num_ops;             /* RandAugment: 1..CTL_AUG_OPS_MAX */
	uint32_t magnitude;           /* RandAugment: < bins */
	uint32_t bins;                /* RandAugment, TrivialAugmentWide: 2..CTL_AUG_BINS_MAX */
	uint32_t erase_p;             /* RandomErasing: 0..CTL_AUG_ONE; 0 = off */
	uint32_t erase_scale[2];      /* of the area: 1..CTL_AUG_ONE, lo <= hi */
	uint32_t erase_ratio[2];      /* aspect: 1..CTL_AUG_RATIO_MAX, lo <= hi */
	uint32_t erase_fill;          /* 0: erase_rgb; 1: random, N(mean, std) per pixel */
	uint8_t erase_rgb[4];         /* [3] zero */
	uint32_t erase_mean[3], erase_std[3]; /* 0..CTL_AUG_LEVEL_MAX (pixel levels) */
	uint32_t interp;              /* enum ctl_interp: RandomResizedCrop's resize */
	uint32_t antialias;           /* 0 or 1 (not with CTL_INTERP_FAST) */
	uint32_t reserved[4];         /* zero */
};
_Static_assert(sizeof(struct ctl_augment) == 128, "on the wire");
_Static_assert(offsetof(struct ctl_augment, erase_rgb) == 76, "on the wire");

/* An s3:// dataset read through loaderd's node cache (loaderd --cache-dir; docs/S3.md, "The node
 * cache"). The client sends, before CTL_JOB_OPEN (whose dataset is then the URL itself, and which
 * carries no descriptor), the URL and the store's endpoint, region and its user's credentials,
 * read with its user's rights: struct ctl_s3_open, then the six strings back to back, without
 * NULs, each of its stated length. The server answers CTL_S3_ACK: err 0, the cache fetches the
 * dataset at the job open with these credentials for this job only; EOPNOTSUPP, this loaderd has
 * no cache, or EPERM, its cache does not fetch from that endpoint (loaderd --cache-endpoints): the
 * client fetches into its user's cache, as without it; the connection stays open
 * either way. That answer is the server's capability: no other message says it. Credentials are
 * used for this job open only, never logged, never shown in status, and wiped after use. */
#define CTL_S3_URL_MAX (CTL_PATH_MAX - 1u)   /* bytes of each string, at most */
#define CTL_S3_ENDPOINT_MAX 512u
#define CTL_S3_REGION_MAX 64u
#define CTL_S3_KEY_MAX 128u                 /* the access key id, and the secret */
#define CTL_S3_TOKEN_MAX 2048u              /* a session token (0: none) */
struct ctl_s3_open {
	uint16_t url_len;             /* "s3://bucket/key", 6..CTL_S3_URL_MAX */
	uint16_t endpoint_len;        /* "http://..." or "https://...", 8..CTL_S3_ENDPOINT_MAX */
	uint16_t region_len;          /* 1..CTL_S3_REGION_MAX */
	uint16_t access_len;          /* 1..CTL_S3_KEY_MAX */
	uint16_t secret_len;          /* 1..CTL_S3_KEY_MAX */
	uint16_t token_len;           /* 0..CTL_S3_TOKEN_MAX */
	uint32_t reserved;            /* zero */
};
_Static_assert(sizeof(struct ctl_s3_open) == 16, "on the wire");
_Static_assert(sizeof(struct ctl_hdr) + sizeof(struct ctl_s3_open) + CTL_S3_URL_MAX +
	       CTL_S3_ENDPOINT_MAX + CTL_S3_REGION_MAX + 2 * CTL_S3_KEY_MAX + CTL_S3_TOKEN_MAX + 16 <=
	       CTL_MSG_MAX, "the longest one fits a message, with room for loaderd's uid");
struct ctl_s3_ack {
	int32_t err;                  /* 0 taken; EOPNOTSUPP: no cache here; EPERM: not from there */
	uint32_t reserved;            /* zero */
};
_Static_assert(sizeof(struct ctl_s3_ack) == 8, "on the wire");

/* loaderd -> ldfetch (its node cache's fetcher, tools/ldfetch.c): CTL_S3_OPEN's body is struct
 * ldf_req (the client's uid, from SO_PEERCRED; flags) then the client's own CTL_S3_OPEN body, with
 * one descriptor: the request's own socket, on which ldfetch answers. LDF_STREAM: the set is
 * streamed through that socket (docs/STREAMING.md, part 3): ldfetch answers CTL_SHARD_FDS with
 * shard 0 alone {first 0, total n, count 1}, then CTL_ERROR err 0 with the manifest's descriptor,
 * and the socket stays open: loaderd sends CTL_SHARD_WANT (the shards wanted, soonest first,
 * replacing the last list) and CTL_SHARD_DROP (shards whose descriptors it closed); ldfetch answers
 * each shard it fetched as CTL_SHARD_FDS {first k, total n, count 1} with its descriptor, or
 * CTL_ERROR (a fetch failed, or a message was malformed) and exits. */
#define LDF_STREAM 0x1u
struct ldf_req {
	uint32_t uid;
	uint32_t reserved;            /* flags: LDF_STREAM */
};
_Static_assert(sizeof(struct ldf_req) == 8, "on the wire");
/* CTL_SHARD_WANT and CTL_SHARD_DROP: count uint32 shard indices follow, each below the set's
 * shard count and none twice; count <= CTL_SHARD_LIST_MAX, so the longest fits a message. */
#define CTL_SHARD_LIST_MAX 1000u       /* 16 + 8 + 4 x 1000 bytes: within CTL_MSG_MAX */
struct ctl_shard_list {
	uint32_t count;
	uint32_t reserved;            /* zero */
};
_Static_assert(sizeof(struct ctl_shard_list) == 8, "on the wire");
_Static_assert(sizeof(struct ctl_hdr) + sizeof(struct ctl_shard_list) + CTL_SHARD_LIST_MAX * 4u <=
	       CTL_MSG_MAX, "the longest list fits a message");

/* CTL_SHARD_SIZES: ldfetch's first messages on a stream, after its open: each shard's size in the
 * store (its HEAD's Content-Length), count of them from shard first on, so that loaderd plans
 * with the bytes each shard will take (the manifest gives only record counts). */
#define CTL_SHARD_SIZES_MAX 500u
struct ctl_shard_sizes {
	uint32_t first;
	uint32_t count;               /* 1..CTL_SHARD_SIZES_MAX; count uint64 sizes follow */
};
_Static_assert(sizeof(struct ctl_shard_sizes) == 8, "on the wire");
_Static_assert(sizeof(struct ctl_hdr) + sizeof(struct ctl_shard_sizes) + CTL_SHARD_SIZES_MAX * 8u <=
	       CTL_MSG_MAX, "the longest fits a message");

enum ctl_admin_op { CTL_OP_STATUS = 1, CTL_OP_JOBS = 2, CTL_OP_STATS = 3, CTL_OP_STOP = 4 };
#define CTL_ADMIN_JSON 0x1u

struct ctl_admin {
	uint32_t op;                  /* enum ctl_admin_op */
	uint32_t flags;               /* CTL_ADMIN_JSON */
	char job[CTL_JOB_NAME_MAX];   /* CTL_OP_STOP: the job; else empty (all jobs) or one job */
	uint64_t reserved[2];         /* zero */
};
_Static_assert(sizeof(struct ctl_admin) == 88, "on the wire");

struct ctl_error {
	int32_t err;                  /* positive errno */
	char text[CTL_TEXT_MAX];      /* NUL-terminated */
	uint32_t reserved;
};
_Static_assert(sizeof(struct ctl_error) == 264, "on the wire");

/* Send one message of @type with @body (@len bytes) and up to CTL_FDS_BATCH fds (@nfds may be 0).
 * Returns 0 or -errno (-EPIPE when the peer is gone; never raises SIGPIPE). */
int ctl_send(int sock, uint16_t type, const void *body, size_t len, const int *fds, int nfds);
/* Receive one message into @buf (CTL_MSG_MAX bytes). Checks the header; fds that came with it are
 * stored in @fds (up to 2, *nfds set) when @fds is not NULL and closed otherwise. Returns the body
 * length (>= 0) with *type set, 0-length EOF as -EPIPE, -EBADMSG for a malformed packet (bad
 * magic, length, type, truncated), -EPROTO for another version, or -errno. */
ssize_t ctl_recv(int sock, void *buf, uint16_t *type, int *fds, int *nfds);
/* ctl_recv keeping up to @cap (<= CTL_FDS_BATCH) fds; more than @cap, or more than the kernel
 * could pass in its control buffer, is -EBADMSG with every fd closed. */
ssize_t ctl_recv_fds(int sock, void *buf, uint16_t *type, int *fds, int cap, int *nfds);
/* A CTL_SHARD_FDS body of @len bytes that came with @nfds fds, expected as the batch that starts
 * at @got (shards already received; 0: the first, whose total is taken) of @total (0 when none
 * came yet): 0 or -EINVAL with @why. */
int ctl_check_shard_fds(const void *body, size_t len, int nfds, uint32_t got, uint32_t total,
			char *why, size_t whylen);

/* A CTL_SHARD_FDS body of @len bytes that came with @nfds fds, as a stream delivers one shard
 * (docs/STREAMING.md): {first k, total, count 1}, reserved zero, one descriptor, k below total.
 * @total: the set's shard count, or 0 when not known yet (the stream's open, whose message says
 * it: 1..CTL_SHARDS_MAX). 0 with *@k (and *@said, the message's total), or -EINVAL with @why. */
int ctl_check_shard_one(const void *body, size_t len, int nfds, uint32_t total, uint32_t *k,
			uint32_t *said, char *why, size_t whylen);

/* A CTL_SHARD_WANT or CTL_SHARD_DROP body of @len bytes (@body 4-byte aligned, as ctl_recv's
 * buffer is when the caller aligns it) for a set of @total shards: reserved zero, count at most
 * CTL_SHARD_LIST_MAX, the length exactly 8 + 4 x count, every index below @total, none twice
 * (O(count log count)). 0 with *@idx pointing at the indices in @body and *@count set, or
 * -EINVAL naming the field in @why. */
int ctl_check_shard_list(const void *body, size_t len, uint32_t total, const uint32_t **idx,
			 uint32_t *count, char *why, size_t whylen);

/* Field validation. Return 0, or -EINVAL with a message naming the field in @why. */
int ctl_check_job_open(const struct ctl_job_open *j, char *why, size_t whylen);
/* The block geometry a job of @sampling runs with: in block mode, 0 becomes CTL_BLOCK_DEFAULT
 * and CTL_WINDOW_DEFAULT (the ranks and the resume token compare these); else both stay 0. */
void ctl_block_defaults(uint32_t sampling, uint32_t *block, uint32_t *window);
int ctl_check_admin(const struct ctl_admin *a, char *why, size_t whylen);
/* A CTL_SPLIT_SEED (@seed 1) or CTL_SPLIT (@seed 0) body of @len bytes: the length matches world
 * and nrows, world 1..CTL_WORLD_MAX (CTL_SPLIT: or 0), from <= CTL_STEP_LIMIT, nrows =
 * CTL_SPLIT_ROWS(from, slots) (CTL_SPLIT: 0), slots 1..RING_SLOTS_MAX (CTL_SPLIT: 0), reserved zero, the
 * weights sum to CTL_SPLIT_ONE and none is under CTL_SPLIT_ONE / (4 x world) (the floor loaderd
 * keeps). The reports are not checked: they are raw, like the ring's. */
int ctl_check_split(const void *body, size_t len, int seed, char *why, size_t whylen);
/* A CTL_AUGMENT body of @len bytes (exactly sizeof(struct ctl_augment)): every field within the
 * bounds above, reserved bytes zero, and nothing but the resize asked of a job without a crop is
 * left to the job open. 0, or -EINVAL naming the field in @why. */
int ctl_check_augment(const void *body, size_t len, char *why, size_t whylen);
/* Parse a spec such as "jitter=0.4:0.4:0.4:0.1,randaugment=2:9,erase=0.25,interp=bicubic,
 * antialias" (docs/AUGMENT.md; ldcat --augment) into @out, then check it. 0, or -EINVAL with
 * the item in @why. */
int ctl_augment_parse(const char *spec, struct ctl_augment *out, char *why, size_t whylen);
/* A 32-bit digest of @a for the resume token (0 for all zero: no augmentation, as older tokens
 * say; never 0 otherwise). */
uint32_t ctl_augment_digest(const struct ctl_augment *a);
/* A CTL_S3_OPEN body of @len bytes: every length within its bound above and the lengths adding up
 * to the body, reserved zero, the URL "s3://" and the endpoint "http://" or "https://", every
 * byte printable ASCII (the URL's may be a space). 0, or -EINVAL naming the field in @why (never
 * quoting a credential). */
int ctl_check_s3_open(const void *body, size_t len, char *why, size_t whylen);
/* The node cache fetches only from the endpoints its operator lists (loaderd --cache-endpoints):
 * a client names the endpoint, and ldfetch has the network. @list: endpoints separated by commas,
 * each "http://HOST[:PORT]" or "https://HOST[:PORT]" (a trailing "/" allowed), compared without
 * regard to case; NULL: AWS's own, "https://s3.amazonaws.com" and "https://s3.REGION.amazonaws.com"
 * (REGION of [a-z0-9-], 1..32). 1: @ep (@n bytes, a trailing "/" ignored) is listed; 0: not. */
int ctl_s3_endpoint_listed(const char *list, const char *ep, size_t n);
/* @list checked as --cache-endpoints takes it: 0, or -EINVAL with @why naming the entry. */
int ctl_s3_endpoints_check(const char *list, char *why, size_t whylen);
/* Make @e from -errno @err and a printf-style message. */
void ctl_error_make(struct ctl_error *e, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
