/* ldcat.c - attach to a loaderd job as one rank and print what it delivers, one line per sample:
 * "STEP ID LABEL FLAGS". For tests and for looking at a job by hand: the ids and labels are the
 * ring's, so what is printed is exactly what a trainer of that rank would have been given. */
#include "common/args.h"
#include "common/clk.h"
#include "common/fieldesc.h"
#include "common/log.h"
#include "s3/s3cache.h"
#include "shm/ldc.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2

static void usage(FILE *f)
{
	fprintf(f,
"usage: ldcat --dataset D.dpk [options]\n"
"\n"
"Attaches to a loaderd job as one rank and prints one line per sample it delivers:\n"
"  STEP ID LABEL FLAGS\n"
"STEP is the global step, ID the sample's index in the dataset, FLAGS the RING_SAMPLE_* bits as a\n"
"decimal number (1 substituted for a bad record, 2 padding with weight 0, 4 repeated to pad the\n"
"tail). At the end a summary goes to stderr. Ranks of one job run as separate ldcat processes\n"
"with the same options but --rank.\n"
"\n"
"options:\n"
"  --fields             after FLAGS, each aux field of the sample (a caption, metadata:\n"
"                       dpack pack --field) as NAME=BYTES, printable ASCII as it is but for\n"
"                       backslash, '=' and space, any other byte as \\xNN\n"
"  --socket PATH        loaderd's socket (default: $XDG_RUNTIME_DIR/loaderd.sock, else\n"
"                       /tmp/loaderd-UID.sock, as loaderd)\n"
"  --dataset D.dpk      packed dataset (or a set's manifest: docs/FORMAT.md; or s3://BUCKET/KEY,\n"
"                       through loaderd's node cache when it has one, else fetched\n"
"                       into your cache first: docs/S3.md), as loaderd sees\n"
"                       the path (required)\n"
"  --job NAME           job name shared by the ranks (default ldcat)\n"
"  --rank R, --world W  this rank of W (default 0 of 1)\n"
"  --batch B            samples per step (default 32)\n"
"  --crop HxW | N       output size (default 224, i.e. 224x224); 0 = records as stored (raw\n"
"                       tensors of one shape; no crop transform)\n"
"  --transforms T       rrc (RandomResizedCrop), center (resize + center crop; default) or none\n"
"  --flip               random horizontal flip\n"
"  --nchw               channel-first output\n"
"  --augment SPEC       per-sample augmentations and the resize filter, e.g.\n"
"                       jitter=0.4:0.4:0.4,randaugment=2:9,erase=0.25,interp=bicubic,antialias\n"
"                       (docs/AUGMENT.md)\n"
"  --seed S             sampling and augmentation seed (default 0)\n"
"  --epochs E           epochs in the job, 0 = unbounded (default 1)\n"
"  --start-epoch E      first epoch of a fresh job (default 0)\n"
"  --sampling M         shuffle (default): one permutation of the whole dataset per epoch;\n"
"                       sequential; or block: blocks of consecutive records in a new order\n"
"                       each epoch, samples shuffled within a window of blocks (for a dataset\n"
"                       read through a cache smaller than it: docs/S3.md)\n"
"  --block N            block: records per block, 1..16777216 (default 64)\n"
"  --window M           block: blocks per shuffle window, 1..65536 (default 16)\n"
"  --window-shards K    block over a set of shards: a window of K shards (block = the set's\n"
"                       largest shard's records, window = K); keep K at most half the\n"
"                       shards your cache holds. Instead of --block and --window\n"
"  --tail P             pad (default), drop, mask or drop_last (whole batches only): what\n"
"                       happens to the last partial round\n"
"  --on-bad P           substitute (default) or fail: what a bad record does\n"
"  --slots N            ring depth (default: loaderd's)\n"
"  --share-group G      let members of group G (name or gid) join this job as ranks (loaderd\n"
"                       --group); by default a job is this user's alone: other users neither\n"
"                       see nor join it, and their jobs of the same name are other jobs\n"
"  --owner USER         join USER's job (name or uid), shared with one of this user's groups\n"
"                       (its owner opens it first, with --share-group)\n"
"  --balance            balanced shares (loaderd --balance): the ranks split each global step\n"
"                       by their reported speed; a rank's batch is then 1..2 x B samples\n"
"  --report-ns NS       with --balance: report NS ns of compute per sample after each batch\n"
"                       (a stand-in for a trainer's measured time; default: none)\n"
"  --steps N            stop after N steps and exit 0 without finishing the job\n"
"  --seconds S          stop after S seconds (at the first batch past them) and exit 0\n"
"  --rate S             consume at most S samples/s: hold each batch until its share of time\n"
"                       is over, as a trainer computing on it would (default: as fast as it\n"
"                       comes)\n"
"  --weight W           the job's weight, 1..1000, when loaderd is short of decode CPU (default\n"
"                       1; docs/TUNING.md)\n"
"  --json               end with the summary as one JSON line on stderr instead\n"
"  --timeout-ms MS      longest wait for one batch (default 30000)\n"
"  --help               this text\n"
"Exit status: 0 the job ended (or --steps were taken), 1 runtime error (message from loaderd or\n"
"the client library), 2 bad usage.\n");
}

static int pick(const char *s, const char *const *names, uint32_t *out)
{
	for (uint32_t i = 0; names[i]; i++)
		if (!strcmp(s, names[i])) {
			*out = i;
			return 0;
		}
	return -1;
}

enum { O_SOCKET = 256, O_DATASET, O_JOB, O_RANK, O_WORLD, O_BATCH, O_CROP, O_TF, O_FLIP,
       O_NCHW, O_SEED, O_EPOCHS, O_START, O_SAMPLING, O_TAIL, O_BAD, O_SLOTS, O_STEPS,
       O_TIMEOUT, O_SHARE, O_OWNER, O_RATE, O_WEIGHT, O_JSON, O_SECONDS, O_BALANCE,
       O_REPORT, O_FIELDS, O_AUGMENT, O_BLOCK, O_WINDOW, O_WSHARDS };
static const struct option long_opts[] = {
	{ "socket", required_argument, NULL, O_SOCKET },
	{ "dataset", required_argument, NULL, O_DATASET },
	{ "job", required_argument, NULL, O_JOB },
	{ "rank", required_argument, NULL, O_RANK },
	{ "world", required_argument, NULL, O_WORLD },
	{ "batch", required_argument, NULL, O_BATCH },
	{ "crop", required_argument, NULL, O_CROP },
	{ "transforms", required_argument, NULL, O_TF },
	{ "flip", no_argument, NULL, O_FLIP },
	{ "nchw", no_argument, NULL, O_NCHW },
	{ "seed", required_argument, NULL, O_SEED },
	{ "epochs", required_argument, NULL, O_EPOCHS },
	{ "start-epoch", required_argument, NULL, O_START },
	{ "sampling", required_argument, NULL, O_SAMPLING },
	{ "block", required_argument, NULL, O_BLOCK },
	{ "window", required_argument, NULL, O_WINDOW },
	{ "window-shards", required_argument, NULL, O_WSHARDS },
	{ "tail", required_argument, NULL, O_TAIL },
	{ "on-bad", required_argument, NULL, O_BAD },
	{ "slots", required_argument, NULL, O_SLOTS },
	{ "steps", required_argument, NULL, O_STEPS },
	{ "timeout-ms", required_argument, NULL, O_TIMEOUT },
	{ "share-group", required_argument, NULL, O_SHARE },
	{ "owner", required_argument, NULL, O_OWNER },
	{ "rate", required_argument, NULL, O_RATE },
	{ "weight", required_argument, NULL, O_WEIGHT },
	{ "json", no_argument, NULL, O_JSON },
	{ "seconds", required_argument, NULL, O_SECONDS },
	{ "balance", no_argument, NULL, O_BALANCE },
	{ "report-ns", required_argument, NULL, O_REPORT },
	{ "fields", no_argument, NULL, O_FIELDS },
	{ "augment", required_argument, NULL, O_AUGMENT },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};
/* Index = the enum's value (ctl.h): shuffle 0, sequential 1, block 2; pad 0, ... */
static const char *const samplings[] = { "shuffle", "sequential", "block", NULL };
static const char *const tails[] = { "pad", "drop", "mask", "drop_last", NULL };
static const char *const bads[] = { "substitute", "fail", NULL };
static const char *const tfs[] = { "none", "rrc", "center", NULL };
static const uint32_t tf_bits[] = { 0, CTL_TF_RANDOM_RESIZED_CROP, CTL_TF_CENTER_CROP };

/* What the command line decides. path may point into defpath: not to be copied. */
struct args {
	struct ldc_job job;
	const char *path;                                     /* loaderd's socket */
	char defpath[sizeof(((struct sockaddr_un *)0)->sun_path)];
	uint64_t max_steps;                                   /* 0: until the job ends */
	uint64_t timeout_ms;                                  /* longest wait for one batch */
	struct ctl_augment aug;                               /* --augment */
	int has_aug;
	double rate;                                          /* samples/s at most; 0: no limit */
	double seconds;                                       /* stop after this long; 0: no limit */
	int json;                                             /* summary as JSON */
	double report_ns;                                     /* --report-ns, 0: none */
	int fields;                                           /* --fields */
};

/* Fill *a from the defaults and the command line. Returns -1 to go on, or the exit status to end
 * with (0 after --help, EXIT_USAGE for bad usage; the message is printed). */
static int parse_args(int argc, char **argv, struct args *a)
{
	struct ldc_job *job = &a->job;
	uint32_t tf = 2, extra_tf = 0;
	int c, tf_given = 0;
	uint64_t v;

	*a = (struct args){
		.job = {
			.job = "ldcat", .batch = 32, .crop_h = 224, .crop_w = 224, .world = 1,
			.epochs = 1, .sampling = CTL_SAMPLE_SHUFFLE, .tail = CTL_TAIL_PAD,
			.on_bad = CTL_BAD_SUBSTITUTE,
		},
		.timeout_ms = 30000,
	};
	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case O_SOCKET: a->path = optarg; break;
		case O_DATASET: job->dataset = optarg; break;
		case O_JOB: job->job = optarg; break;
		case O_RANK:
			bad = arg_u64(optarg, 0, CTL_WORLD_MAX - 1, &v);
			job->rank = (uint32_t)v;
			break;
		case O_WORLD:
			bad = arg_u64(optarg, 1, CTL_WORLD_MAX, &v);
			job->world = (uint32_t)v;
			break;
		case O_BATCH:
			bad = arg_u64(optarg, 1, RING_BATCH_MAX, &v);
			job->batch = (uint32_t)v;
			break;
		case O_CROP: bad = arg_size2(optarg, CTL_CROP_MAX, &job->crop_h, &job->crop_w); break;
		case O_TF:
			bad = pick(optarg, tfs, &tf);
			tf_given = 1;
			break;
		case O_FLIP: extra_tf |= CTL_TF_HFLIP; break;
		case O_NCHW: extra_tf |= CTL_TF_NCHW; break;
		case O_SEED: bad = arg_u64(optarg, 0, UINT64_MAX, &job->seed); break;
		case O_EPOCHS:
			bad = arg_u64(optarg, 0, UINT32_MAX, &v);
			job->epochs = (uint32_t)v;
			break;
		case O_START: bad = arg_u64(optarg, 0, CTL_STEP_LIMIT, &job->start_epoch); break;
		case O_SAMPLING: bad = pick(optarg, samplings, &job->sampling); break;
		case O_BLOCK:
			bad = arg_u64(optarg, 1, CTL_BLOCK_MAX, &v);
			job->block = (uint32_t)v;
			break;
		case O_WINDOW:
			bad = arg_u64(optarg, 1, CTL_WINDOW_MAX, &v);
			job->window = (uint32_t)v;
			break;
		case O_WSHARDS:
			bad = arg_u64(optarg, 1, CTL_WINDOW_MAX, &v);
			job->window_shards = (uint32_t)v;
			break;
		case O_TAIL: bad = pick(optarg, tails, &job->tail); break;
		case O_BAD: bad = pick(optarg, bads, &job->on_bad); break;
		case O_SLOTS:
			bad = arg_u64(optarg, 2, RING_SLOTS_MAX, &v);
			job->slots = (uint32_t)v;
			break;
		case O_STEPS: bad = arg_u64(optarg, 1, UINT64_MAX, &a->max_steps); break;
		case O_TIMEOUT: bad = arg_u64(optarg, 0, INT_MAX, &a->timeout_ms); break;
		case O_AUGMENT: {
			char why[CTL_TEXT_MAX];
			if (ctl_augment_parse(optarg, &a->aug, why, sizeof(why)) < 0) {
				fprintf(stderr, "ldcat: --augment: %s\n", why);
				return EXIT_USAGE;
			}
			a->has_aug = 1;
			break;
		}
		case O_SHARE: job->share_group = optarg; break;
		case O_OWNER: job->owner = optarg; break;
		case O_RATE: bad = arg_double(optarg, 0.001, 1e9, &a->rate); break;
		case O_WEIGHT:
			bad = arg_u64(optarg, 1, CTL_WEIGHT_MAX, &v);
			job->weight = (uint32_t)v;
			break;
		case O_JSON: a->json = 1; break;
		case O_FIELDS: a->fields = 1; break;
		case O_SECONDS: bad = arg_double(optarg, 0.001, 1e9, &a->seconds); break;
		case O_BALANCE: job->balance = 1; break;
		case O_REPORT:
			if (arg_double(optarg, 1e-3, 1e12, &a->report_ns) < 0) {
				fprintf(stderr, "ldcat: --report-ns: '%s' is not a number of ns in "
					"[0.001, 1e12]\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			fprintf(stderr, "ldcat: see --help\n");
			return EXIT_USAGE;
		}
		if (bad)
			return arg_bad_value(long_opts, c, optarg);
	}
	if (optind < argc) {
		fprintf(stderr, "ldcat: unexpected argument '%s' (see --help)\n", argv[optind]);
		return EXIT_USAGE;
	}
	if (!job->dataset) {
		fprintf(stderr, "ldcat: --dataset is required (see --help)\n");
		return EXIT_USAGE;
	}
	if ((job->block || job->window || job->window_shards) && job->sampling != CTL_SAMPLE_BLOCK) {
		fprintf(stderr, "ldcat: --%s is for --sampling block\n", job->block ? "block" :
			job->window ? "window" : "window-shards");
		return EXIT_USAGE;
	}
	if (job->window_shards && (job->block || job->window)) {
		fprintf(stderr, "ldcat: --window-shards sets the block and the window: give it "
			"alone, or --block and --window\n");
		return EXIT_USAGE;
	}
	if (job->rank >= job->world) {
		fprintf(stderr, "ldcat: --rank %u is not below --world %u\n", job->rank, job->world);
		return EXIT_USAGE;
	}
	if (job->crop_h == 0 && tf_bits[tf]) {
		/* Records as stored: the default center crop does not apply; an explicit one is an error. */
		if (tf_given) {
			fprintf(stderr, "ldcat: --transforms %s needs a crop size (--crop)\n", tfs[tf]);
			return EXIT_USAGE;
		}
		tf = 0;
	}
	job->transforms = tf_bits[tf] | extra_tf;
	if (!a->path) {
		a->path = ldc_default_socket(a->defpath, sizeof(a->defpath));
	}
	return -1;
}

/* Sleep until @s seconds after @t0 (CLOCK_MONOTONIC). */
/* Sleep until @s seconds after @start (clk_now_s() time). */
static void sleep_until(double start, double s)
{
	uint64_t due = (uint64_t)((start + s) * 1e9);
	struct timespec t = { (time_t)(due / 1000000000u), (long)(due % 1000000000u) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
		;
}

/* Print every sample of the open job until it ends, --steps are taken or an error, then the
 * summary line on stderr. Returns the exit status: 0, or 1 for a runtime error. */

#define LINE_MAX_CHARS 68  /* "STEP ID LABEL FLAGS\n": 20 + 20 + 20 + 3 digits, 3 spaces, '\n' */

/* @v in decimal at @p; returns its length. */
static size_t put_u64(char *p, uint64_t v)
{
	char t[20];
	size_t n = 0;

	do {
		t[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (size_t k = 0; k < n; k++)
		p[k] = t[n - 1 - k];
	return n;
}

/* One output line (as printf("%" PRIu64 " %" PRIu64 " %" PRId64 " %u\n") would write it) at @p;
 * returns its length, at most LINE_MAX_CHARS. */
static size_t put_line(char *p, uint64_t step, uint64_t id, int64_t label, unsigned flags)
{
	size_t n = put_u64(p, step);

	p[n++] = ' ';
	n += put_u64(p + n, id);
	p[n++] = ' ';
	if (label < 0) {
		p[n++] = '-';
		n += put_u64(p + n, 0 - (uint64_t)label);
	} else {
		n += put_u64(p + n, (uint64_t)label);
	}
	p[n++] = ' ';
	n += put_u64(p + n, flags);
	p[n++] = '\n';
	return n;
}

/* " NAME=BYTES" for each aux field of sample @j of @b, escaped (see --fields). */
static void put_fields(struct ldc *cl, const struct ldc_batch *b, uint32_t j)
{
	for (uint32_t k = 0; k < b->aux_fields; k++)
		fieldesc_put(stdout, ldc_aux_name(cl, k), b->aux + b->field_off[j * b->aux_fields + k],
			     b->field_len[j * b->aux_fields + k]);
}

static int print_batches(struct ldc *cl, const struct args *a)
{
	static char obuf[1 << 16];
	struct ldc_batch b;
	uint64_t steps = 0, samples = 0, substituted = 0, padding = 0, waited = 0;
	double wait_s = 0;
	int ret, status = 0;

	setvbuf(stdout, obuf, _IOFBF, sizeof(obuf));
	double start = clk_now_s();
	while ((!a->max_steps || steps < a->max_steps) &&
	       (a->seconds <= 0 || clk_now_s() - start < a->seconds)) {
		/* A step not ready when asked for is a wait (the first one aside: start-up). */
		ret = ldc_acquire(cl, 0, &b);
		if (ret == -ETIMEDOUT) {
			double w0 = clk_now_s();
			ret = ldc_acquire(cl, (int)a->timeout_ms, &b);
			if (steps > 0) {
				waited++;
				wait_s += clk_now_s() - w0;
			}
		}
		if (ret == -ENODATA)
			break;
		if (ret < 0) {
			fflush(stdout);
			fprintf(stderr, "ldcat: rank %u: %s\n", a->job.rank, ldc_error(cl));
			status = 1;
			break;
		}
		/* the lines of a step formatted by hand, a block at a time: printf's per-sample
		 * call was three quarters of ldcat's CPU on small records */
		char lines[8192];
		size_t len = 0;
		for (uint32_t i = 0; i < b.count; i++) {
			uint8_t fl = b.sample_flags[i];
			if (len > sizeof(lines) - LINE_MAX_CHARS) {
				fwrite(lines, 1, len, stdout);
				len = 0;
			}
			len += put_line(lines + len, b.step, b.ids[i], b.labels[i], fl);
			if (a->fields && b.aux_fields) {  /* the line's newline after the fields */
				fwrite(lines, 1, len - 1, stdout);
				len = 0;
				put_fields(cl, &b, i);
				putchar('\n');
			}
			substituted += !!(fl & RING_SAMPLE_SUBSTITUTED);
			padding += !!(fl & (RING_SAMPLE_PADDING | RING_SAMPLE_REPEATED));
		}
		fwrite(lines, 1, len, stdout);
		samples += b.count;
		steps++;
		if (a->rate > 0)  /* hold it until this many samples are due at the rate */
			sleep_until(start, (double)samples / a->rate);
		if (a->report_ns > 0 && ldc_report(cl, a->report_ns) < 0) {
			fflush(stdout);
			fprintf(stderr, "ldcat: rank %u: %s\n", a->job.rank, ldc_error(cl));
			status = 1;
			break;
		}
		if (ldc_release(cl, &b) < 0) {
			fflush(stdout);
			fprintf(stderr, "ldcat: rank %u: %s\n", a->job.rank, ldc_error(cl));
			status = 1;
			break;
		}
	}
	double dt = clk_now_s() - start;
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "ldcat: writing the output: %s\n", strerror(errno));
		status = 1;
	}
	if (a->json)
		fprintf(stderr, "{\"rank\": %u, \"world\": %u, \"steps\": %" PRIu64 ", \"samples\": %"
			PRIu64 ", \"substituted\": %" PRIu64 ", \"padding\": %" PRIu64 ", \"waited\": %"
			PRIu64 ", \"wait_s\": %.6f, \"seconds\": %.6f, \"samples_per_s\": %.3f}\n",
			a->job.rank, a->job.world, steps, samples, substituted, padding, waited, wait_s,
			dt, dt > 0 ? (double)samples / dt : 0.0);
	else
		fprintf(stderr, "ldcat: rank %u/%u: %" PRIu64 " steps, %" PRIu64 " samples, %" PRIu64
			" substituted, %" PRIu64 " padding, %.1f samples/s, waited at %" PRIu64
			" steps\n", a->job.rank, a->job.world, steps, samples, substituted, padding,
			dt > 0 ? (double)samples / dt : 0.0, waited);
	return status;
}

int main(int argc, char **argv)
{
	struct args a;
	struct ldc *cl;
	struct ldc_info info;
	char err[512];
	int ret, status = 1;

	log_prog = "ldcat";
	ret = parse_args(argc, argv, &a);
	if (ret >= 0)
		return ret;
	ret = ldc_connect(a.path, &cl, err, sizeof(err));
	if (ret < 0) {
		fprintf(stderr, "ldcat: %s\n", err);
		return 1;
	}
	/* An s3:// dataset: offered to loaderd's node cache when it has one (loaderd --cache-dir),
	 * with this user's credentials, read here with its rights, for this job only; else (or with
	 * LOADERD_S3_CLIENT_FETCH=1) made local in this user's cache with them and opened from there
	 * like any file: loaderd gets descriptors, never a URL (docs/S3.md). */
	static struct s3cache_result local;
	if (s3_is_url(a.job.dataset)) {
		ret = ldc_s3_offer(cl, a.job.dataset);
		if (ret < 0) {
			fprintf(stderr, "ldcat: %s\n", ldc_error(cl));
			goto close;
		}
		if (ret == 0)
			fprintf(stderr, "ldcat: %s through loaderd's node cache\n", a.job.dataset);
		if (ret == 1) {
			if (s3cache_resolve(a.job.dataset, &local, err, sizeof(err)) < 0) {
				fprintf(stderr, "ldcat: %s\n", err);
				goto close;
			}
			fprintf(stderr, "ldcat: %s is %s (%u objects, %u fetched now, %llu bytes)\n",
				a.job.dataset, local.path, local.objects, local.fetched,
				(unsigned long long)local.fetched_bytes);
			a.job.dataset = local.path;
		}
	}
	if ((a.has_aug && ldc_augment(cl, &a.aug) < 0) || ldc_open(cl, &a.job, &info) < 0) {
		fprintf(stderr, "ldcat: %s\n", ldc_error(cl));
		goto close;
	}
	status = print_batches(cl, &a);
close:
	ldc_close(cl);
	return status;
}
