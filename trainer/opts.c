/* opts.c - the trainer's command line. Only rank 0 prints usage errors and --help; every rank
 * exits with the same status, since every rank parses the same arguments. */
#include "trainer/opts.h"

#include "common/args.h"
#include "shm/ctl.h"

#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFETCH_MAX TRN_PREFETCH_MAX

static int rank;

static void usage(FILE *f)
{
	fprintf(f,
"usage: trainer [options]            (one rank; several: mpirun -np N trainer [options])\n"
"\n"
"data (one of):\n"
"  --socket PATH --dataset D.dpk   batches from loaderd (default socket as loaderd's)\n""                                  (D.dpk: a .dpk or a set's manifest, docs/FORMAT.md,\n"
"                                  or s3://BUCKET/KEY: through loaderd's node cache when it\n"
"                                  has one and --classes is given, else fetched into your\n"
"                                  cache: docs/S3.md)\n"
"  --synthetic                     one batch made on the device at start, no loader: the\n"
"                                  compute ceiling\n"
"options:\n"
"  --batch B            samples per rank per step (default 64)\n"
"  --crop N             image side (default 224)\n"
"  --model M            mlp (default), mlp:hidden=N, synthetic:resnet50,\n"
"                       synthetic:flops=F,params=P (e.g. flops=4.1G,params=25.6M)\n"
"  --device D           cuda (default when built with CUDA and a GPU is visible) or host\n"
"  --backend B          nccl (default on cuda) or mpi (default on host)\n"
"  --steps N | --epochs E   how long (default 100 steps)\n"
"  --seed S             sampling and initialisation seed (default 1)\n"
"  --sampling M         shuffle (default): one permutation of the dataset per epoch;\n"
"                       sequential; or block: blocks of consecutive records in a new order\n"
"                       each epoch, samples shuffled within a window of blocks (a dataset\n"
"                       read through a cache smaller than it: docs/S3.md)\n"
"  --block N            block: records per block, 1..%u (default %u)\n"
"  --window M           block: blocks per shuffle window, 1..%u (default %u)\n"
"  --window-shards K    block over a set of shards: a window of K shards (block = the set's\n"
"                       largest shard's records, window = K); instead of --block, --window\n"
"  --accum K            gradient accumulation: allreduce every K micro-steps (default 1)\n"
"  --lr X --momentum X  SGD (default 0.05, 0.9)\n"
"  --prefetch N         batches copied ahead of compute, 1..%d (default 2)\n"
"  --bucket-mb X        DDP bucket cap (default 25; the first bucket 1, --first-bucket-mb)\n"
"  --classes N          classes (default: from --dataset, with --synthetic too; else 10)\n"
"  --job NAME           loaderd job name (default: derived from dataset, seed, batch, world)\n"
"  --slots N            ring depth asked of loaderd (default: loaderd's)\n"
"  --share-group G      let members of group G join this job as ranks (loaderd --group); by\n"
"                       default a job is this user's alone\n"
"  --owner USER         join USER's job, shared with one of this user's groups (--share-group)\n"
"  --balance            balanced shares (loaderd --balance): loaderd splits each global step\n"
"                       across the ranks by their measured compute time per sample (each rank\n"
"                       reports its own), and gradients are averaged weighted by each rank's\n"
"                       sample count, so the update equals the even split's (not with --accum)\n"
"  --report-ns NS       with --balance: report NS ns of compute per sample (times the factor of\n"
"                       --inject-slow-rank on that rank) instead of the measured time: fixed\n"
"                       speeds, so the shares a run gets do not depend on the machine's load\n"
"  --warmup N           steps left out of the figures (default 10%% of the steps, at most 20)\n"
"  --trace FILE         Chrome trace (Perfetto) of every rank's steps\n"
"  --report-json FILE   rank 0 writes the report (per-rank, per-phase figures, thresholds,\n"
"                       verdict) as JSON\n"
"  --dump-params FILE   rank 0 writes the final parameters (float32, forward order)\n"
"  --log-samples PREFIX each rank writes PREFIX.RANK, one line per sample it takes from its\n"
"                       ring: STEP ID LABEL FLAGS (as ldcat prints them), then a\n"
"                       dataset's aux fields as ldcat --fields does\n"
"  --log-every N        print loss and accuracy every N steps (default 50; 0 = never)\n"
"checkpoints (the run's result does not depend on them):\n"
"  --checkpoint-dir DIR     write checkpoints here: parameters, momentum, step and the\n"
"                           loader's resume token (with --balance, the split seed: a\n"
"                           loaderd that lost the job replays the same splits), atomically;\n"
"                           also on SIGTERM or SIGINT, which then end the run after that step\n"
"  --checkpoint-every N     every N optimizer steps (default: on SIGTERM only)\n"
"  --resume                 continue from DIR's newest checkpoint (same options); from the\n"
"                           start when there is none; a damaged one is refused\n"
"  --log-consumed PREFIX    rank r appends each batch it trained on to PREFIX.r:\n"
"                           'step S N id...' lines, 'resume S' when a run starts at S\n"
"test knobs (known answers for the diagnosis):\n"
"  --inject-slow-rank R:F      rank R's compute takes F times as long (a straggler)\n"
"  --inject-comm-delay-ms X    every allreduce takes X ms longer (a slow network)\n"
"  --inject-kill-at R:S         rank R SIGKILLs itself when micro-step S has its batch (a crash,\n"
"                              for the resume tests)\n"
"The last line is: trainer: samples_per_s=X au=Y verdict=Z\n", CTL_BLOCK_MAX, CTL_BLOCK_DEFAULT,
		CTL_WINDOW_MAX, CTL_WINDOW_DEFAULT, PREFETCH_MAX);
}

static long parse_long(const char *name, const char *s, long lo, long hi)
{
	uint64_t v;

	if (lo < 0 || arg_u64(s, (uint64_t)lo, (uint64_t)hi, &v) < 0) {
		if (rank == 0)
			fprintf(stderr, "trainer: --%s: '%s' is not a number in %ld..%ld\n", name, s, lo, hi);
		MPI_Finalize();
		exit(2);
	}
	return (long)v;
}

static double parse_double(const char *name, const char *s, double lo, double hi)
{
	double v;

	if (arg_double(s, lo, hi, &v) < 0) {
		if (rank == 0)
			fprintf(stderr, "trainer: --%s: '%s' is not a number in %g..%g\n", name, s, lo, hi);
		MPI_Finalize();
		exit(2);
	}
	return v;
}

/* --NAME RANK:VALUE: the rank into *@r; returns the VALUE part of @arg (cut at the colon). */
static char *rank_and_value(const char *name, char *arg, const char *form, int *r)
{
	char *colon = strchr(arg, ':');

	if (!colon) {
		if (rank == 0)
			fprintf(stderr, "trainer: --%s: give %s\n", name, form);
		MPI_Finalize();
		exit(2);
	}
	*colon = '\0';
	*r = (int)parse_long(name, arg, 0, 1 << 20);
	return colon + 1;
}

void trn_opts_parse(int argc, char **argv, struct trn_opts *o)
{
	static const struct option lo[] = {
		{ "socket", 1, 0, 's' }, { "dataset", 1, 0, 'd' }, { "batch", 1, 0, 'b' },
		{ "crop", 1, 0, 'c' }, { "model", 1, 0, 'm' }, { "device", 1, 0, 'D' },
		{ "backend", 1, 0, 'B' }, { "steps", 1, 0, 'n' }, { "epochs", 1, 0, 'e' },
		{ "seed", 1, 0, 'S' }, { "trace", 1, 0, 't' }, { "synthetic", 0, 0, 'y' },
		{ "accum", 1, 0, 'a' }, { "lr", 1, 0, 'l' }, { "momentum", 1, 0, 'M' },
		{ "prefetch", 1, 0, 'p' }, { "bucket-mb", 1, 0, 'k' }, { "first-bucket-mb", 1, 0, 'K' },
		{ "classes", 1, 0, 'C' }, { "job", 1, 0, 'j' }, { "slots", 1, 0, 'r' },
		{ "warmup", 1, 0, 'w' }, { "dump-params", 1, 0, 'P' }, { "log-every", 1, 0, 'L' },
		{ "inject-slow-rank", 1, 0, 'I' }, { "inject-comm-delay-ms", 1, 0, 'J' },
		{ "report-json", 1, 0, 'R' }, { "log-samples", 1, 0, 'g' },
		{ "checkpoint-dir", 1, 0, 'x' }, { "checkpoint-every", 1, 0, 'X' },
		{ "resume", 0, 0, 'Z' }, { "log-consumed", 1, 0, 'G' },
		{ "inject-kill-at", 1, 0, 'Q' }, { "share-group", 1, 0, 256 }, { "owner", 1, 0, 257 },
		{ "balance", 0, 0, 258 }, { "report-ns", 1, 0, 259 }, { "sampling", 1, 0, 260 },
		{ "block", 1, 0, 261 }, { "window", 1, 0, 262 }, { "window-shards", 1, 0, 263 },
		{ "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int c;

	*o = (struct trn_opts){ .model = "mlp", .batch = 64, .crop = 224, .accum = 1, .prefetch = 2,
				.seed = 1, .lr = 0.05f, .momentum = 0.9f, .bucket_mb = 25,
				.first_bucket_mb = 1, .warmup = -1, .log_every = 50, .slow_rank = -1,
				.kill_rank = -1 };
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 's': o->socket = optarg; break;
		case 'd': o->dataset = optarg; break;
		case 'b': o->batch = (int)parse_long("batch", optarg, 1, 65536); break;
		case 'c': o->crop = (int)parse_long("crop", optarg, 1, 8192); break;
		case 'm': o->model = optarg; break;
		case 'D': o->device = optarg; break;
		case 'B': o->backend = optarg; break;
		case 'n': o->steps = parse_long("steps", optarg, 1, 1L << 40); break;
		case 'e': o->epochs = parse_long("epochs", optarg, 1, 1L << 20); break;
		case 'S': o->seed = (uint64_t)parse_long("seed", optarg, 0, 1L << 62); break;
		case 't': o->trace = optarg; break;
		case 'y': o->synthetic = 1; break;
		case 'a': o->accum = (int)parse_long("accum", optarg, 1, 1 << 20); break;
		case 'l': o->lr = (float)parse_double("lr", optarg, 0, 100); break;
		case 'M': o->momentum = (float)parse_double("momentum", optarg, 0, 1); break;
		case 'p': o->prefetch = (int)parse_long("prefetch", optarg, 1, PREFETCH_MAX); break;
		case 'k': o->bucket_mb = parse_double("bucket-mb", optarg, 1e-5, 4096); break;
		case 'K': o->first_bucket_mb = parse_double("first-bucket-mb", optarg, 1e-5, 4096); break;
		case 'C': o->classes = (int)parse_long("classes", optarg, 2, 1 << 24); break;
		case 'j': o->job = optarg; break;
		case 'r': o->slots = (int)parse_long("slots", optarg, 2, 1024); break;
		case 256: o->share_group = optarg; break;
		case 257: o->owner = optarg; break;
		case 258: o->balance = 1; break;
		case 259: o->report_ns = parse_double("report-ns", optarg, 1e-3, 1e12); break;
		case 260:
			o->sampling = !strcmp(optarg, "shuffle") ? CTL_SAMPLE_SHUFFLE :
				      !strcmp(optarg, "sequential") ? CTL_SAMPLE_SEQUENTIAL :
				      !strcmp(optarg, "block") ? CTL_SAMPLE_BLOCK : UINT32_MAX;
			if (o->sampling == UINT32_MAX) {
				if (rank == 0)
					fprintf(stderr, "trainer: --sampling: '%s' is not shuffle, "
						"sequential or block\n", optarg);
				MPI_Finalize();
				exit(2);
			}
			break;
		case 261: o->block = (uint32_t)parse_long("block", optarg, 1, CTL_BLOCK_MAX); break;
		case 262: o->window = (uint32_t)parse_long("window", optarg, 1, CTL_WINDOW_MAX); break;
		case 263:
			o->window_shards = (uint32_t)parse_long("window-shards", optarg, 1, CTL_WINDOW_MAX);
			break;
		case 'w': o->warmup = (int)parse_long("warmup", optarg, 0, 1 << 30); break;
		case 'P': o->dump = optarg; break;
		case 'R': o->report_json = optarg; break;
		case 'x': o->ckpt_dir = optarg; break;
		case 'X': o->ckpt_every = parse_long("checkpoint-every", optarg, 1, 1L << 40); break;
		case 'Z': o->resume = 1; break;
		case 'G': o->log_consumed = optarg; break;
		case 'g': o->log_samples = optarg; break;
		case 'L': o->log_every = (int)parse_long("log-every", optarg, 0, 1 << 30); break;
		case 'I': {
			char *v = rank_and_value("inject-slow-rank", optarg, "RANK:FACTOR, e.g. 1:2",
						 &o->slow_rank);
			o->slow_factor = parse_double("inject-slow-rank", v, 1, 1000);
			break;
		}
		case 'Q': {
			char *v = rank_and_value("inject-kill-at", optarg, "RANK:STEP, e.g. 1:12",
						 &o->kill_rank);
			o->kill_step = parse_long("inject-kill-at", v, 0, 1L << 40);
			break;
		}
		case 'J': o->comm_delay_ms = parse_double("inject-comm-delay-ms", optarg, 0, 1e6); break;
		case 'h':
			if (rank == 0)
				usage(stdout);
			MPI_Finalize();
			exit(0);
		default:
			if (rank == 0)
				usage(stderr);
			MPI_Finalize();
			exit(2);
		}
	}
	if (optind < argc || (!o->synthetic && !o->dataset) || (o->steps && o->epochs) ||
	    (o->synthetic && o->epochs) || (o->synthetic && o->log_samples) ||
	    ((o->ckpt_every || o->resume) && !o->ckpt_dir) ||
	    (o->balance && (o->synthetic || o->accum > 1)) || (o->report_ns > 0 && !o->balance) ||
	    ((o->block || o->window || o->window_shards) && o->sampling != CTL_SAMPLE_BLOCK) ||
	    (o->window_shards && (o->block || o->window))) {
		if (rank == 0)
			fprintf(stderr, "trainer: %s (see --help)\n", optind < argc ? "unexpected argument" :
				o->steps && o->epochs ? "give --steps or --epochs, not both" :
				o->synthetic && o->epochs ? "--synthetic has no epochs: give --steps" :
				o->synthetic && o->log_samples ? "--log-samples logs loaderd's samples: "
				"not with --synthetic" :
				!o->synthetic && !o->dataset ?
				"give --dataset D.dpk (with loaderd running) or --synthetic" :
				o->report_ns > 0 && !o->balance ? "--report-ns is for --balance" :
				(o->block || o->window || o->window_shards) &&
				o->sampling != CTL_SAMPLE_BLOCK ?
				"--block, --window and --window-shards are for --sampling block" :
				o->window_shards && (o->block || o->window) ?
				"--window-shards sets the block and the window: give it alone, or "
				"--block and --window" :
				o->balance ? "--balance needs loaderd (not --synthetic) and no --accum" :
				"--checkpoint-every and --resume need --checkpoint-dir");
		MPI_Finalize();
		exit(2);
	}
	if (!o->steps && !o->epochs)
		o->steps = 100;
}
