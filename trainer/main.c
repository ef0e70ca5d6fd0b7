/* main.c - trainer: one rank of data-parallel training. Launched alone or by mpirun/srun; takes
 * batches from its loaderd ring (or makes a synthetic batch once), copies them to the device while
 * the previous step computes, averages gradients with the DDP core, and attributes every step's
 * time: data wait, exposed copy, compute, exposed allreduce, optimizer. */
#include "common/args.h"
#include "common/clk.h"
#include "common/log.h"
#include "formats/dpk.h"
#include "shm/ldc.h"
#include "trainer/coll.h"
#include "trainer/ddp.h"
#include "trainer/dev.h"
#include "trainer/model.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PREFETCH_MAX 8
#define TRACE_STEPS_MAX 20000

enum phase { PH_DATA, PH_H2D, PH_COMPUTE, PH_COMM, PH_OPT, PH_N };
static const char *const phase_name[PH_N] = { "data wait", "h2d", "compute", "allreduce", "optimizer" };

struct opts {
	const char *socket, *dataset, *model, *device, *backend, *trace, *job, *dump;
	int batch, crop, accum, prefetch, classes, slots, warmup, log_every;
	long steps, epochs;
	uint64_t seed;
	int synthetic;
	int slow_rank;          /* --inject-slow-rank R:F: rank R computes F times as long */
	double slow_factor;
	double comm_delay_ms;   /* --inject-comm-delay-ms X: each allreduce is X ms slower */
	float lr, momentum;
	double bucket_mb, first_bucket_mb;
};

static int g_rank, g_world;

/* A fatal error: say it, then take the whole job down so no rank waits forever for this one. */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "trainer: rank %d: error: %s\n", g_rank, msg);
	fflush(stderr);
	if (g_world > 1)
		MPI_Abort(MPI_COMM_WORLD, 1);
	MPI_Finalize();
	exit(1);
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: trainer [options]            (one rank; several: mpirun -np N trainer [options])\n"
"\n"
"data (one of):\n"
"  --socket PATH --dataset D.dpk   batches from loaderd (default socket as loaderd's)\n"
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
"  --accum K            gradient accumulation: allreduce every K micro-steps (default 1)\n"
"  --lr X --momentum X  SGD (default 0.05, 0.9)\n"
"  --prefetch N         batches copied ahead of compute, 1..%d (default 2)\n"
"  --bucket-mb X        DDP bucket cap (default 25; the first bucket 1, --first-bucket-mb)\n"
"  --classes N          classes (default: from the dataset; 10 with --synthetic)\n"
"  --job NAME           loaderd job name (default: derived from dataset, seed, batch, world)\n"
"  --slots N            ring depth asked of loaderd (default: loaderd's)\n"
"  --warmup N           steps left out of the figures (default 10%% of the steps, at most 20)\n"
"  --trace FILE         Chrome trace (Perfetto) of every rank's steps\n"
"  --dump-params FILE   rank 0 writes the final parameters (float32, forward order)\n"
"  --log-every N        print loss and accuracy every N steps (default 50; 0 = never)\n"
"test knobs (known answers for the diagnosis):\n"
"  --inject-slow-rank R:F      rank R's compute takes F times as long (a straggler)\n"
"  --inject-comm-delay-ms X    every allreduce takes X ms longer (a slow network)\n"
"The last line is: trainer: samples_per_s=X au=Y verdict=Z\n", PREFETCH_MAX);
}

static long parse_long(const char *name, const char *s, long lo, long hi)
{
	uint64_t v;

	if (lo < 0 || arg_u64(s, (uint64_t)lo, (uint64_t)hi, &v) < 0) {
		if (g_rank == 0)
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
		if (g_rank == 0)
			fprintf(stderr, "trainer: --%s: '%s' is not a number in %g..%g\n", name, s, lo, hi);
		MPI_Finalize();
		exit(2);
	}
	return v;
}

static void parse(int argc, char **argv, struct opts *o)
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
		{ "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int c;

	*o = (struct opts){ .model = "mlp", .batch = 64, .crop = 224, .accum = 1, .prefetch = 2,
			    .seed = 1, .lr = 0.05f, .momentum = 0.9f, .bucket_mb = 25,
			    .first_bucket_mb = 1, .warmup = -1, .log_every = 50, .slow_rank = -1 };
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
		case 'w': o->warmup = (int)parse_long("warmup", optarg, 0, 1 << 30); break;
		case 'P': o->dump = optarg; break;
		case 'L': o->log_every = (int)parse_long("log-every", optarg, 0, 1 << 30); break;
		case 'I': {
			char *colon = strchr(optarg, ':');
			if (!colon) {
				if (g_rank == 0)
					fprintf(stderr, "trainer: --inject-slow-rank: give RANK:FACTOR, e.g. 1:2\n");
				MPI_Finalize();
				exit(2);
			}
			*colon = '\0';
			o->slow_rank = (int)parse_long("inject-slow-rank", optarg, 0, 1 << 20);
			o->slow_factor = parse_double("inject-slow-rank", colon + 1, 1, 1000);
			break;
		}
		case 'J': o->comm_delay_ms = parse_double("inject-comm-delay-ms", optarg, 0, 1e6); break;
		case 'h':
			if (g_rank == 0)
				usage(stdout);
			MPI_Finalize();
			exit(0);
		default:
			if (g_rank == 0)
				usage(stderr);
			MPI_Finalize();
			exit(2);
		}
	}
	if (optind < argc || (!o->synthetic && !o->dataset) || (o->steps && o->epochs) ||
	    (o->synthetic && o->epochs)) {
		if (g_rank == 0)
			fprintf(stderr, "trainer: %s (see --help)\n", optind < argc ? "unexpected argument" :
				o->steps && o->epochs ? "give --steps or --epochs, not both" :
				o->synthetic && o->epochs ? "--synthetic has no epochs: give --steps" :
				"give --dataset D.dpk (with loaderd running) or --synthetic");
		MPI_Finalize();
		exit(2);
	}
	if (!o->steps && !o->epochs)
		o->steps = 100;
}

/* ---- data ---- */

struct inflight {
	struct ldc_batch b;     /* ring slot, held until its copy is done */
	int held;
	int ev;                 /* copy-done event */
	int count;
	int valid;              /* samples with weight > 0 (not tail padding) */
	uint64_t step;
};

struct data {
	struct ldc *c;
	struct ldc_info info;
	struct trn_dev *dev;
	size_t sample_bytes;
	int depth;                        /* device buffers = prefetch + 1 */
	uint8_t *img[PREFETCH_MAX + 1];   /* device */
	int64_t *lab[PREFETCH_MAX + 1];
	float *wt[PREFETCH_MAX + 1];
	struct inflight q[PREFETCH_MAX + 1];
	uint64_t issued, consumed;        /* batches whose copy was issued / that were computed */
	float *hw;                        /* host staging for weights */
	int synthetic;
	int done;                         /* the job has no more steps */
};

/* Acquire the next ring batch and start its copy into device buffer (issued % depth). Returns
 * 1 when a batch was started, 0 at the end of the job. Adds the blocking time to *wait_ns. */
static int issue_next(struct data *d, uint64_t *wait_ns, uint64_t *copy_ns)
{
	int k = (int)(d->issued % (uint64_t)d->depth);
	struct inflight *f = &d->q[k];
	uint64_t t0 = clk_now_ns();
	int ret = ldc_acquire(d->c, 60000, &f->b);

	*wait_ns += clk_now_ns() - t0;
	if (ret == -ENODATA) {
		d->done = 1;
		return 0;
	}
	if (ret < 0)
		die("loaderd: %s", ldc_error(d->c));
	f->held = 1;
	f->count = (int)f->b.count;
	f->step = f->b.step;
	f->ev = k + 1;  /* event 0 belongs to the DDP core */
	f->valid = 0;
	for (uint32_t i = 0; i < f->b.count; i++) {
		int pad = !!(f->b.sample_flags[i] & RING_SAMPLE_PADDING);
		d->hw[(size_t)k * 65536 + i] = pad ? 0.0f : 1.0f;
		f->valid += !pad;
	}
	struct trn_dev *dv = d->dev;
	uint64_t t1 = clk_now_ns();
	/* The copy stream reads the pinned ring slot directly: no staging copy on the host. */
	if (dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->img[k], f->b.data, (size_t)f->count * d->sample_bytes) < 0 ||
	    dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->lab[k], f->b.labels, (size_t)f->count * sizeof(int64_t)) < 0 ||
	    dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->wt[k], d->hw + (size_t)k * 65536, (size_t)f->count * sizeof(float)) < 0 ||
	    dv->ops->event_record(dv, f->ev, TRN_STREAM_COPY) < 0)
		die("device: %s", dv->err);
	*copy_ns += clk_now_ns() - t1;  /* issuing only on a GPU; the whole copy on the host */
	d->issued++;
	return 1;
}

/* Give back ring slots whose copies have completed: the slot returns to loaderd as soon as the
 * bytes are on the device, not after the step. */
static void release_copied(struct data *d)
{
	for (int k = 0; k < d->depth; k++) {
		struct inflight *f = &d->q[k];
		if (f->held && d->dev->ops->event_done(d->dev, f->ev) == 1) {
			if (ldc_release(d->c, &f->b) < 0)
				die("loaderd: %s", ldc_error(d->c));
			f->held = 0;
		}
	}
}

/* The synthetic batch: sample id i*world + rank, label id % classes, pixels with a class-dependent
 * mean so that the mlp can learn it. Made once; every step reuses it. */
static void make_synthetic(struct data *d, int batch, int crop, int classes)
{
	size_t per = (size_t)crop * crop * 3;
	uint8_t *img = malloc(per * (size_t)batch);
	int64_t *lab = malloc(sizeof(int64_t) * (size_t)batch);
	float *w = malloc(sizeof(float) * (size_t)batch);

	if (!img || !lab || !w)
		die("out of memory for the synthetic batch");
	for (int i = 0; i < batch; i++) {
		uint64_t id = (uint64_t)i * (uint64_t)g_world + (uint64_t)g_rank;
		lab[i] = (int64_t)(id % (uint64_t)classes);
		w[i] = 1.0f;
		uint64_t x = id * 0x9e3779b97f4a7c15ull + 1;
		for (size_t p = 0; p < per; p++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			int ch = (int)(p % 3), base = 40 + (int)((lab[i] * 37 + ch * 71) % 170);
			img[(size_t)i * per + p] = (uint8_t)(base + (int)(x % 40));
		}
	}
	struct trn_dev *dv = d->dev;
	if (dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->img[0], img, per * (size_t)batch) < 0 ||
	    dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->lab[0], lab, sizeof(int64_t) * (size_t)batch) < 0 ||
	    dv->ops->copy_h2d(dv, TRN_STREAM_COPY, d->wt[0], w, sizeof(float) * (size_t)batch) < 0 ||
	    dv->ops->sync(dv, TRN_STREAM_COPY) < 0)
		die("device: %s", dv->err);
	free(img);
	free(lab);
	free(w);
}

/* ---- report ---- */

struct step_rec {
	uint64_t start_ns;
	uint64_t ns[PH_N];
};

static void write_trace(const char *path, const struct step_rec *rec, long n, uint64_t t0)
{
	size_t cap = (size_t)n * PH_N * 120 + 64, len = 0;
	char *buf = malloc(cap);

	if (!buf)
		die("out of memory for the trace");
	for (long s = 0; s < n; s++) {
		uint64_t t = rec[s].start_ns - t0;
		for (int p = 0; p < PH_N; p++) {
			if (rec[s].ns[p] == 0)
				continue;
			len += (size_t)snprintf(buf + len, cap - len,
				"{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
				"\"args\":{\"step\":%ld}},\n", phase_name[p], g_rank, (double)t / 1e3,
				(double)rec[s].ns[p] / 1e3, s);
			t += rec[s].ns[p];
		}
	}
	/* Rank 0 gathers every rank's events and writes one file Perfetto can open. */
	int mylen = (int)len, *lens = NULL, *displs = NULL, total = 0;
	char *all = NULL;
	if (g_rank == 0) {
		lens = calloc((size_t)g_world, sizeof(int));
		displs = calloc((size_t)g_world, sizeof(int));
	}
	MPI_Gather(&mylen, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (g_rank == 0) {
		for (int r = 0; r < g_world; r++)
			displs[r] = total, total += lens[r];
		all = malloc((size_t)total + 1);
	}
	MPI_Gatherv(buf, mylen, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
	if (g_rank == 0) {
		FILE *f = fopen(path, "w");
		if (!f)
			die("--trace %s: %s", path, strerror(errno));
		fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
		if (total > 2)
			fwrite(all, 1, (size_t)total - 2, f);  /* drop the last ",\n" */
		fputs("\n]}\n", f);
		if (fclose(f) != 0)
			die("--trace %s: write failed", path);
		LOG_INFO("trace of %d ranks written to %s", g_world, path);
	}
	free(all);
	free(lens);
	free(displs);
	free(buf);
}

/* ---- main ---- */

int main(int argc, char **argv)
{
	struct opts o;
	char err[512];
	int ret;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_world);
	log_prog = "trainer";
	parse(argc, argv, &o);

	MPI_Comm local;
	int local_rank = 0;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &local);
	MPI_Comm_rank(local, &local_rank);
	MPI_Comm_free(&local);

	/* device */
	struct trn_dev *dev = NULL;
	const char *want = o.device ? o.device : "auto";
	if (strcmp(want, "host") != 0) {
		ret = trn_dev_cuda_open(local_rank, &dev, err, sizeof(err));
		if (ret < 0 && !strcmp(want, "cuda"))
			die("--device cuda: %s", err);
		if (ret < 0 && g_rank == 0)
			LOG_INFO("no GPU (%s): using the host device", err);
	}
	if (!dev && strcmp(want, "host") && strcmp(want, "cuda") && strcmp(want, "auto"))
		die("--device %s: use cuda or host", want);
	if (!dev && trn_dev_host_open(&dev) < 0)
		die("out of memory");

	/* collectives */
	struct trn_coll *coll = NULL;
	const char *be = o.backend ? o.backend : !strcmp(dev->ops->name, "cuda") ? "nccl" : "mpi";
	if (!strcmp(be, "nccl")) {
		if (strcmp(dev->ops->name, "cuda"))
			die("--backend nccl needs --device cuda");
		if (trn_coll_nccl_open(dev, &coll, err, sizeof(err)) < 0)
			die("NCCL: %s", err);
	} else if (!strcmp(be, "mpi")) {
		if (trn_coll_mpi_open(&coll) < 0)
			die("out of memory");
	} else {
		die("--backend %s: use nccl or mpi", be);
	}

	/* data */
	struct data d = { .dev = dev, .depth = o.prefetch + 1, .synthetic = o.synthetic };
	int crop = o.crop, classes = o.classes, nchw = 0;
	uint64_t steps_total = (uint64_t)o.steps;
	if (!o.synthetic) {
		struct dpk *dp;
		if (!classes) {
			if (dpk_open(o.dataset, DPK_OPEN_NO_INDEX_CHECK, &dp, err, sizeof(err)) < 0)
				die("dataset %s: %s", o.dataset, err);
			classes = (int)dpk_class_count(dp);
			if (classes < 2) {
				/* no class table (WebDataset, npy): the largest label + 1 */
				int64_t mx = 0;
				for (uint64_t i = 0; i < dpk_count(dp); i++)
					if (dpk_entry_get(dp, i)->label > mx)
						mx = dpk_entry_get(dp, i)->label;
				classes = (int)mx + 1 < 2 ? 2 : (int)mx + 1;
			}
			dpk_close(dp);
		}
		char sock[256], job[64];
		if (!o.socket) {
			o.socket = ldc_default_socket(sock, sizeof(sock));
		}
		if (!o.job) {
			/* A fresh job per launch: rank 0's pid and start time, shared with every rank.
			 * Rejoining a job (to resume after a crash) takes an explicit --job. */
			uint64_t id[2] = { (uint64_t)getpid(), clk_now_ns() };
			MPI_Bcast(id, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
			snprintf(job, sizeof(job), "trainer-%" PRIu64 "-%" PRIx64, id[0], id[1] & 0xffffffffu);
			o.job = job;
		}
		if (ldc_connect(o.socket, &d.c, err, sizeof(err)) < 0)
			die("%s", err);
		struct ldc_job j = { .job = o.job, .dataset = o.dataset, .batch = (uint32_t)o.batch,
				     .crop_h = (uint32_t)crop, .crop_w = (uint32_t)crop,
				     .transforms = CTL_TF_RANDOM_RESIZED_CROP | CTL_TF_HFLIP,
				     .seed = o.seed, .rank = (uint32_t)g_rank, .world = (uint32_t)g_world,
				     .tail = CTL_TAIL_MASK, .slots = (uint32_t)o.slots,
				     .epochs = (uint32_t)o.epochs };
		if (ldc_open(d.c, &j, &d.info) < 0)
			die("loaderd: %s", ldc_error(d.c));
		if (o.epochs)
			steps_total = d.info.steps_total - d.info.first_step;
		d.sample_bytes = d.info.ring->sample_bytes;
		nchw = d.info.ring->layout == RING_LAYOUT_NCHW;
		/* Pin the whole ring once: every copy from a slot is then a DMA. */
		if (dev->ops->host_register(dev, ldc_ring_base(d.c), ldc_ring_size(d.c)) < 0)
			die("registering the ring with the device: %s", dev->err);
	} else {
		if (!classes)
			classes = 10;
		d.sample_bytes = (size_t)crop * crop * 3;
	}
	/* --steps counts optimizer steps: each is accum micro-steps; --epochs counts ring steps. */
	uint64_t micro_total = steps_total * (uint64_t)o.accum;
	if (o.synthetic || o.steps)
		micro_total = (uint64_t)o.steps * (uint64_t)o.accum;

	if (!o.synthetic && (uint32_t)d.depth > d.info.ring->slots) {
		/* holding more batches than the ring has slots would wait for a slot forever */
		if (g_rank == 0)
			LOG_WARN("--prefetch %d needs %d ring slots; the ring has %u: prefetching %u",
				 o.prefetch, d.depth, d.info.ring->slots, d.info.ring->slots - 1);
		d.depth = (int)d.info.ring->slots;
	}
	d.hw = calloc((size_t)d.depth * 65536, sizeof(float));
	for (int k = 0; k < d.depth; k++) {
		d.img[k] = dev->ops->alloc(dev, d.sample_bytes * (size_t)o.batch);
		d.lab[k] = dev->ops->alloc(dev, sizeof(int64_t) * (size_t)o.batch);
		d.wt[k] = dev->ops->alloc(dev, sizeof(float) * (size_t)o.batch);
		if (!d.img[k] || !d.lab[k] || !d.wt[k] || !d.hw)
			die("out of device memory for %d batches of %d", d.depth, o.batch);
	}
	if (o.synthetic)
		make_synthetic(&d, o.batch, crop, classes);

	/* model and DDP */
	struct trn_model_shape shp = { .h = crop, .w = crop, .c = 3, .nchw = nchw, .classes = classes,
				       .batch = o.batch };
	struct trn_model *m;
	if (trn_model_create(o.model, dev, &shp, &m, err, sizeof(err)) < 0)
		die("%s", err);
	const size_t *sizes;
	int np = m->ops->params(m, &sizes);
	struct trn_ddp *ddp;
	if (trn_ddp_create(coll, dev, sizes, np, (size_t)(o.bucket_mb * 1048576.0),
			   (size_t)(o.first_bucket_mb * 1048576.0), o.accum, &ddp) < 0)
		die("DDP: no bucket plan for bucket caps of %g MiB (first %g MiB): each must hold a "
		    "float", o.bucket_mb, o.first_bucket_mb);
	size_t total = trn_ddp_total(ddp);
	float *params = dev->ops->alloc(dev, total * sizeof(float));
	float *grads = dev->ops->alloc(dev, total * sizeof(float));
	float *mom = dev->ops->alloc(dev, total * sizeof(float));
	if (!params || !grads || !mom)
		die("out of device memory for %zu parameters", total);
	if (m->ops->init(m, params, trn_ddp_offsets(ddp), o.seed) < 0)
		die("initialising the model: %s", dev->err);
	if (trn_ddp_broadcast(ddp, params) < 0)
		die("%s", trn_ddp_error(ddp));
	const struct trn_bucket *bk;
	int nb = trn_ddp_buckets(ddp, &bk);
	if (g_rank == 0)
		LOG_INFO("%d ranks, device %s, backend %s, model %s: %zu parameters in %d buckets, "
			 "batch %d x %d ranks%s, %s", g_world, dev->ops->name, coll->ops->name, o.model,
			 total, nb, o.batch, g_world, o.accum > 1 ? " (accumulated)" : "",
			 o.synthetic ? "synthetic data" : "data from loaderd");

	long warmup = o.warmup >= 0 ? o.warmup : (long)fmin(20, (double)micro_total / 10);
	if ((uint64_t)warmup >= micro_total && micro_total > 0) {
		if (g_rank == 0)
			LOG_WARN("--warmup %ld leaves no step to measure; measuring all %" PRIu64,
				 warmup, micro_total);
		warmup = 0;
	}
	struct step_rec *rec = calloc((size_t)(micro_total < TRACE_STEPS_MAX ? micro_total : TRACE_STEPS_MAX) + 1,
				      sizeof(*rec));
	if (!rec)
		die("out of memory");
	uint64_t sum[PH_N] = { 0 }, samples = 0, t_begin = 0, t_first = clk_now_ns();
	double win_loss = 0, win_correct = 0, win_n = 0;
	uint64_t micro;

	for (micro = 0; micro < micro_total; micro++) {
		struct step_rec r = { .start_ns = clk_now_ns() };
		int count = o.batch, valid = o.batch, k = 0;
		if (micro == (uint64_t)warmup)
			t_begin = r.start_ns;
		if (!o.synthetic) {
			/* keep `prefetch` copies in flight ahead of this step */
			while (!d.done && d.issued < d.consumed + (uint64_t)d.depth) {
				release_copied(&d);  /* slots whose bytes are on the device already */
				issue_next(&d, &r.ns[PH_DATA], &r.ns[PH_H2D]);
			}
			if (d.consumed == d.issued)
				break;  /* end of the job */
			k = (int)(d.consumed % (uint64_t)d.depth);
			count = d.q[k].count;
			valid = d.q[k].valid;
			uint64_t t0 = clk_now_ns();
			/* exposed copy: how long compute would wait for this batch's bytes */
			if (dev->ops->event_sync(dev, d.q[k].ev) < 0 ||
			    dev->ops->stream_wait(dev, TRN_STREAM_COMPUTE, d.q[k].ev) < 0)
				die("device: %s", dev->err);
			r.ns[PH_H2D] += clk_now_ns() - t0;
			release_copied(&d);
		}
		int sync, acc;
		double out[2] = { 0, 0 };
		trn_ddp_begin(ddp, micro, &sync, &acc);
		uint64_t t0 = clk_now_ns();
		if (m->ops->step(m, d.img[k], d.lab[k], d.wt[k], count, params, grads, trn_ddp_offsets(ddp),
				 acc, ddp, out) < 0)
			die("step %" PRIu64 ": %s", micro, dev->err[0] ? dev->err : trn_ddp_error(ddp));
		if (dev->ops->sync(dev, TRN_STREAM_COMPUTE) < 0)
			die("device: %s", dev->err);
		r.ns[PH_COMPUTE] = clk_now_ns() - t0;
		if (g_rank == o.slow_rank && o.slow_factor > 1) {
			/* an injected straggler: as if this device were F times slower */
			uint64_t extra = (uint64_t)((o.slow_factor - 1) * (double)r.ns[PH_COMPUTE]);
			struct timespec ts = { (time_t)(extra / 1000000000u), (long)(extra % 1000000000u) };
			nanosleep(&ts, NULL);
			r.ns[PH_COMPUTE] += extra;
		}
		struct trn_ddp_stats st0, st1;
		trn_ddp_get_stats(ddp, &st0);
		t0 = clk_now_ns();
		if (trn_ddp_step(ddp, params, grads, mom, o.lr, o.momentum) < 0)
			die("%s", trn_ddp_error(ddp));
		if (dev->ops->sync(dev, TRN_STREAM_COMPUTE) < 0)
			die("device: %s", dev->err);
		trn_ddp_get_stats(ddp, &st1);
		if (sync && o.comm_delay_ms > 0) {
			/* an injected slow network: the allreduce ends this much later, in full view */
			uint64_t t1 = clk_now_ns();
			uint64_t ns = (uint64_t)(o.comm_delay_ms * 1e6);
			struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
			nanosleep(&ts, NULL);
			st1.exposed_ns += clk_now_ns() - t1;
		}
		uint64_t opt = clk_now_ns() - t0, exposed = st1.exposed_ns - st0.exposed_ns;
		r.ns[PH_COMM] = exposed;
		r.ns[PH_OPT] = opt > exposed ? opt - exposed : 0;
		if (!o.synthetic)
			d.consumed++;
		if ((long)micro >= warmup) {
			for (int p = 0; p < PH_N; p++)
				sum[p] += r.ns[p];
			samples += (uint64_t)count;
		}
		if (micro < TRACE_STEPS_MAX)
			rec[micro] = r;
		win_loss += out[0];
		win_correct += out[1];
		win_n += valid;  /* loss and accuracy count weighted samples only */
		if (o.log_every && (micro + 1) % (uint64_t)o.log_every == 0) {
			double tot[3] = { win_loss, win_correct, win_n }, all[3];
			MPI_Allreduce(tot, all, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
			if (g_rank == 0)
				LOG_INFO("step %" PRIu64 ": loss %.4f, accuracy %.3f (chance %.3f)", micro + 1,
					 all[0] / all[2], all[1] / all[2], 1.0 / classes);
			win_loss = win_correct = win_n = 0;
		}
	}
	uint64_t t_end = clk_now_ns();
	uint64_t ran = micro;
	if (!t_begin)
		t_begin = t_first;  /* too few steps for a warm-up */
	for (int k = 0; k < d.depth && !o.synthetic; k++)
		if (d.q[k].held)
			ldc_release(d.c, &d.q[k].b);

	/* ---- the report ---- */
	double wall = (double)(t_end - t_begin) * 1e-9, mine = wall > 0 ? (double)samples / wall : 0;
	double share[PH_N];
	for (int p = 0; p < PH_N; p++)
		share[p] = wall > 0 ? (double)sum[p] * 1e-9 / wall : 0;
	struct { double v; int r; } me = { mine, g_rank }, slow;
	MPI_Allreduce(&me, &slow, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
	/* In synchronous DDP every rank runs at the slowest one's pace, so samples/s cannot show a
	 * straggler; its compute time per step can (the others wait for it in the allreduce). */
	struct { double v; int r; } cmine = { share[PH_COMPUTE] * wall, g_rank }, cmax, cmin;
	MPI_Allreduce(&cmine, &cmax, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
	MPI_Allreduce(&cmine, &cmin, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
	double imbalance = cmin.v > 0 ? cmax.v / cmin.v : 1;
	double sh_all[PH_N];
	MPI_Allreduce(share, sh_all, PH_N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	for (int p = 0; p < PH_N; p++)
		sh_all[p] /= g_world;
	/* Synchronous data parallelism runs at the slowest rank's pace. */
	double job_rate = slow.v * g_world;
	double au = sh_all[PH_COMPUTE];
	/* A rank's exposed allreduce includes waiting for peers that were still waiting for data or
	 * computing: only the rank that arrives last sees the transfer alone. So the cause is read
	 * from the worst rank's data wait and the least exposed rank's allreduce. */
	double loader = 0, comm = 0;
	{
		/* per step: the worst rank's data wait, the least exposed rank's allreduce */
		long n = (long)(ran < TRACE_STEPS_MAX ? ran : TRACE_STEPS_MAX) - warmup;
		double *mine2 = calloc(2 * (size_t)(n > 0 ? n : 1), sizeof(double));
		double *mx = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
		double *mn = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
		if (!mine2 || !mx || !mn)
			die("out of memory");
		for (long i = 0; i < n; i++) {
			mine2[i] = (double)(rec[warmup + i].ns[PH_DATA] + rec[warmup + i].ns[PH_H2D]);
			mine2[n + i] = (double)rec[warmup + i].ns[PH_COMM];
		}
		if (n > 0) {
			MPI_Allreduce(mine2, mx, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
			MPI_Allreduce(mine2 + n, mn, (int)n, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
		}
		double recorded = 0;
		for (long i = 0; i < n; i++) {
			loader += mx[i];
			comm += mn[i];
			for (int p = 0; p < PH_N; p++)
				recorded += (double)rec[warmup + i].ns[p];
		}
		/* as shares of the recorded steps' time */
		loader = recorded > 0 ? loader / recorded : 0;
		comm = recorded > 0 ? comm / recorded : 0;
		free(mine2);
		free(mx);
		free(mn);
	}
	if (imbalance > 2.0)
		comm = sh_all[PH_COMM];  /* the fast ranks' wait for the straggler is the finding */
	const char *verdict = loader >= 0.10 && loader >= comm ? "loader-limited" :
			      comm >= 0.10 && imbalance > 2.0 ? "straggler-limited" :
			      comm >= 0.10 ? "communication-limited" : "compute-limited";
	if (o.trace) {
		/* one time origin for every rank (CLOCK_MONOTONIC is per node): the earliest start */
		uint64_t t0_all = t_first;
		MPI_Allreduce(&t_first, &t0_all, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
		write_trace(o.trace, rec, (long)(ran < TRACE_STEPS_MAX ? ran : TRACE_STEPS_MAX), t0_all);
	}
	if (o.dump && g_rank == 0) {
		float *h = malloc(total * sizeof(float));
		FILE *f = fopen(o.dump, "wb");
		if (!h || !f)
			die("--dump-params %s: %s", o.dump, strerror(errno));
		if (dev->ops->copy_d2h(dev, TRN_STREAM_COMPUTE, h, params, total * sizeof(float)) < 0 ||
		    dev->ops->sync(dev, TRN_STREAM_COMPUTE) < 0)
			die("device: %s", dev->err);
		const size_t *offs = trn_ddp_offsets(ddp);
		for (int p = 0; p < np; p++)
			fwrite(h + offs[p], sizeof(float), sizes[p], f);
		if (fclose(f) != 0)
			die("--dump-params %s: write failed", o.dump);
		free(h);
	}
	if (g_rank == 0) {
		printf("trainer: %d ranks x batch %d, %" PRIu64 " steps (%ld warm-up left out), %.2f s\n",
		       g_world, o.batch, ran, warmup, wall);
		printf("  time per step: data wait %.1f%%, exposed copy %.1f%%, compute %.1f%%, "
		       "exposed allreduce %.1f%%, optimizer %.1f%%\n", 100 * sh_all[PH_DATA],
		       100 * sh_all[PH_H2D], 100 * sh_all[PH_COMPUTE], 100 * sh_all[PH_COMM],
		       100 * sh_all[PH_OPT]);
		if (g_world > 1)
			printf("  slowest rank %d: compute %.2fx the fastest rank's (rank %d); "
			       "%.1f samples/s per rank\n", cmax.r, imbalance, cmin.r, slow.v);
		printf("  accelerator utilisation (compute / wall, warm-up excluded) %.2f\n", au);
		printf("trainer: samples_per_s=%.1f au=%.3f verdict=%s\n", job_rate, au, verdict);
		fflush(stdout);
	}
	if (d.c) {
		dev->ops->host_unregister(dev, ldc_ring_base(d.c));
		ldc_close(d.c);
	}
	free(rec);
	free(d.hw);
	for (int k = 0; k < d.depth; k++) {
		dev->ops->free(dev, d.img[k]);
		dev->ops->free(dev, d.lab[k]);
		dev->ops->free(dev, d.wt[k]);
	}
	dev->ops->free(dev, params);
	dev->ops->free(dev, grads);
	dev->ops->free(dev, mom);
	m->ops->destroy(m);
	trn_ddp_destroy(ddp);
	coll->ops->close(coll);
	dev->ops->close(dev);
	MPI_Finalize();
	return 0;
}
