/* ringbench.c - how close does the batch ring (shm/ring.c) come to the machine's memory bandwidth,
 * and how long does a hand-off take? A producer process writes every byte of each slot, a consumer
 * process reads every byte; the same run measures single-core memcpy bandwidth as the yardstick,
 * and the same hand-off between the same two CPUs without the ring (plain sequence numbers, spin
 * then futex) as the ceiling. Last line: `ringbench: gbps=X memcpy_gbps=Y ratio=Z p99_us=W
 * xfer_gbps=V ring_vs_xfer=U c2c_ns=L` (GB = 10^9 bytes). What the two ratios mean: docs/RING.md,
 * Throughput.
 *
 * DESIGN
 * One ring (ring_create, batch 1, raw u8 payload of --slot-bytes), then fork(): the parent is the
 * producer, the child the consumer, which maps the ring again through ring_attach(dup(fd)) as a
 * real client would. With two or more CPUs each side is pinned to its own. Before the fork, alone
 * on the machine and on the producer's CPU, the yardstick: memcpy of --slot-bytes between two
 * prefaulted buffers for MEMCPY_SECONDS, counting bytes copied as the ring counts bytes handed
 * over. Then, with two CPUs, the ceiling (xfer_gbps()): a forked child on the consumer's CPU reads
 * what the producer's CPU writes, slot by slot, for XFER_SECONDS. ratio compares the ring with one
 * core copying within its own caches, which depends on the machine (where its two CPUs sit);
 * ring_vs_xfer compares it with the bytes' own cost of crossing from one core to the other.
 *
 * The parent runs three phases over one continuous sequence of steps; slot_hdr.epoch tells the
 * consumer which phase a step belongs to, RING_SLOT_LAST marks the final step:
 *   0 warm-up    2 * slots steps, not measured;
 *   1 streaming  as fast as both sides go, for --seconds or --steps; throughput is bytes consumed
 *                over the consumer's time from its first acquire to its last release;
 *   2 ping-pong  --lat-steps steps; the producer fills step s while the consumer reads s - 1, but
 *                publishes s only after s - 1 is released, so the consumer is always already
 *                waiting and the latency is the pure wake-up hand-off, not queueing.
 * Hand-off latency of a step is the consumer's CLOCK_MONOTONIC when ring_cons_acquire returns
 * minus the producer's, read just before ring_prod_publish and carried in slot_hdr.reserved[0]
 * (ordered by the publish's release store, like every header field). Streaming latencies are
 * reported too, labelled as queueing.
 *
 * The consumer keeps its latencies in arrays sized and touched before the first step and sends one
 * struct cons_result through a pipe when it is done or has failed. The parent never waits without
 * a limit: slot waits are cut into PEER_POLL_MS pieces between which it looks at the pipe (data or
 * EOF there before the end means the consumer failed or died), and gives up after WAIT_MS; then
 * it names the consumer's error or exit status, kills it and reaps it. The child dies with the
 * parent (PR_SET_PDEATHSIG) and times out its own acquires after WAIT_MS.
 *
 * Both sides read their run-queue wait (/proc/self/schedstat) around the steps: time spent runnable
 * while another task had the CPU. It is printed, with a warning past RUNQ_IDLE_PERMILLE, because
 * on a busy machine it, not the ring, decides throughput and p99. */
#include "common/args.h"
#include "common/clk.h"
#include "common/fdio.h"
#include "common/log.h"
#include "common/mix.h"
#include "shm/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_USAGE 2

#define WAIT_MS 2000              /* longest wait for the peer, either side */
#define PEER_POLL_MS 100          /* the producer looks at the consumer this often while waiting */
#define REPORT_WAIT_MS 10000      /* for the consumer's result after the last step */
#define MEMCPY_SECONDS 1.0
#define STREAM_LAT_MAX (1u << 20) /* streaming latencies kept (the first ones); 4 MiB */
#define LAT_STEPS_DEFAULT 2000
#define LAT_STEPS_MAX 10000000u
#define SECONDS_MAX 86400.0
#define RUNQ_IDLE_PERMILLE 10     /* run-queue wait over 1% of the stepping time: not idle */
#define RING_VS_XFER_MIN 0.80     /* ring / bare hand-off below this on an idle machine: warn */

enum { EPOCH_WARMUP = 0, EPOCH_STREAM = 1, EPOCH_PINGPONG = 2 };

struct opts {
	uint64_t slot_bytes;      /* payload bytes per slot, >= 1 */
	uint32_t slots;           /* 1..RING_SLOTS_MAX */
	double seconds;           /* streaming phase length, when steps == 0 */
	uint64_t steps;           /* streaming phase steps; 0 = use seconds */
	uint32_t lat_steps;       /* ping-pong steps */
	int no_huge, check;
};

/* What the consumer sends back, once. Under PIPE_BUF, so one write is atomic. */
struct cons_result {
	int32_t err;              /* 0 or -errno; msg says what failed */
	int32_t cpu;              /* where the consumer ran last, -1 unknown */
	uint64_t stream_steps;
	uint64_t stream_bytes;
	uint64_t stream_ns;       /* first acquire return to last release, streaming steps */
	uint64_t stream_lat_n;    /* streaming latencies kept (<= STREAM_LAT_MAX) */
	uint64_t stream_p50_ns, stream_p99_ns;
	uint64_t pp_n;            /* ping-pong steps seen */
	uint64_t pp_p50_ns, pp_p99_ns, pp_max_ns;
	uint64_t sink;            /* the reduction, so that reading cannot be optimised away */
	uint64_t runq_ns;         /* consumer runnable but not running, during its step loop */
	char msg[200];
};
_Static_assert(sizeof(struct cons_result) <= 512, "one atomic pipe write");

/* ---- options ---- */

static void usage(FILE *f)
{
	fprintf(f,
"usage: ringbench [options]\n"
"\n"
"A producer process writes every byte of each ring slot, a consumer process reads every\n"
"byte. Measures, in one run: single-core memcpy bandwidth (the yardstick), ring throughput\n"
"(streaming), and hand-off latency (ping-pong: publish to acquire returning, with the\n"
"consumer already waiting), and the same hand-off between the same two CPUs\n"
"without the ring (plain sequence numbers, spin then futex: the ceiling). Last line:\n"
"  ringbench: gbps=X memcpy_gbps=Y ratio=Z p99_us=W xfer_gbps=V ring_vs_xfer=U c2c_ns=L\n"
"gbps, memcpy_gbps and xfer_gbps are GB/s (10^9 bytes/s) of payload handed over /\n"
"copied / handed over without the ring; ratio = gbps / memcpy_gbps; ring_vs_xfer =\n"
"gbps / xfer_gbps (0 when not measured: fewer than two CPUs); p99_us is the ping-pong\n"
"hand-off p99 in microseconds; c2c_ns the one-way latency of a cache line between the\n"
"two CPUs (0: not measured). On an idle machine a ring_vs_xfer under %.2f is warned\n"
"about (docs/RING.md, Throughput).\n"
"\n"
"options:\n"
"  --slot-bytes N   payload bytes per slot; suffix K, M or G (x1024) allowed\n"
"                   (default 4M)\n"
"  --slots N        slots in the ring, 1..%u (default 4)\n"
"  --seconds S      length of the streaming phase (default 3; decimals allowed)\n"
"  --steps N        or: the streaming phase is N steps\n"
"  --lat-steps N    steps in the ping-pong latency phase, 10..%u (default %u)\n"
"  --no-huge        do not try huge pages for the ring\n"
"  --check          the producer writes a per-step pattern and the consumer verifies\n"
"                   it (slower: use for correctness, not for figures)\n"
"  --help           this text\n"
"Exit status: 0 ok, 1 runtime error (the failing side and why), 2 bad usage.\n",
		RING_VS_XFER_MIN, RING_SLOTS_MAX, LAT_STEPS_MAX, LAT_STEPS_DEFAULT);
}

/* arg_u64, or arg_bytes when @suffix, and a message that names the option. */
static int parse_u64(const char *name, const char *s, int suffix, uint64_t min, uint64_t max,
		     uint64_t *out)
{
	if ((suffix ? arg_bytes(s, min, max, out) : arg_u64(s, min, max, out)) == 0)
		return 0;
	LOG_ERROR("--%s: '%s' is not %s in %" PRIu64 "..%" PRIu64, name, s,
		  suffix ? "a byte count (suffix K, M or G allowed)" : "an integer", min, max);
	return -EINVAL;
}

static int parse_seconds(const char *s, double *out)
{
	if (arg_double(s, 0, SECONDS_MAX, out) == 0 && *out > 0)
		return 0;
	LOG_ERROR("--seconds: '%s' is not a number of seconds in (0, %.0f]", s, SECONDS_MAX);
	return -EINVAL;
}

static void desc_of(const struct opts *o, struct ring_desc *d)
{
	*d = (struct ring_desc){ .slots = o->slots, .batch = 1, .sample_bytes = o->slot_bytes,
				 .ndim = 0, .dtype = RING_DTYPE_U8, .layout = RING_LAYOUT_RAW,
				 .rank = 0, .world = 1, .job_id = (uint64_t)getpid() };
}

/* Returns 0, 1 when --help was printed, or -EINVAL after logging what was wrong. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_SLOT_BYTES = 256, O_SLOTS, O_SECONDS, O_STEPS, O_LAT_STEPS, O_NO_HUGE, O_CHECK };
	static const struct option lopts[] = {
		{ "slot-bytes", required_argument, NULL, O_SLOT_BYTES },
		{ "slots", required_argument, NULL, O_SLOTS },
		{ "seconds", required_argument, NULL, O_SECONDS },
		{ "steps", required_argument, NULL, O_STEPS },
		{ "lat-steps", required_argument, NULL, O_LAT_STEPS },
		{ "no-huge", no_argument, NULL, O_NO_HUGE },
		{ "check", no_argument, NULL, O_CHECK },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, have_seconds = 0;
	uint64_t v;

	*o = (struct opts){ .slot_bytes = 4ull << 20, .slots = 4, .seconds = 3.0,
			    .lat_steps = LAT_STEPS_DEFAULT };
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", lopts, NULL)) != -1) {
		switch (c) {
		case O_SLOT_BYTES:
			if (parse_u64("slot-bytes", optarg, 1, 1, RING_SLOT_SIZE_MAX, &o->slot_bytes))
				return -EINVAL;
			break;
		case O_SLOTS:
			if (parse_u64("slots", optarg, 0, 1, RING_SLOTS_MAX, &v))
				return -EINVAL;
			o->slots = (uint32_t)v;
			break;
		case O_SECONDS:
			if (parse_seconds(optarg, &o->seconds))
				return -EINVAL;
			have_seconds = 1;
			break;
		case O_STEPS:
			if (parse_u64("steps", optarg, 0, 1, UINT64_MAX / 2, &o->steps))
				return -EINVAL;
			break;
		case O_LAT_STEPS:
			if (parse_u64("lat-steps", optarg, 0, 10, LAT_STEPS_MAX, &v))
				return -EINVAL;
			o->lat_steps = (uint32_t)v;
			break;
		case O_NO_HUGE: o->no_huge = 1; break;
		case O_CHECK: o->check = 1; break;
		case 'h':
			usage(stdout);
			return 1;
		case ':':
			LOG_ERROR("%s: missing value; see ringbench --help", argv[optind - 1]);
			return -EINVAL;
		default:
			LOG_ERROR("unknown option '%s'; see ringbench --help", argv[optind - 1]);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		LOG_ERROR("unexpected argument '%s'; see ringbench --help", argv[optind]);
		return -EINVAL;
	}
	if (have_seconds && o->steps) {
		LOG_ERROR("--seconds and --steps both given; pick one");
		return -EINVAL;
	}

	struct ring_desc d;
	uint64_t bytes;
	int ret;

	desc_of(o, &d);
	ret = ring_size(&d, &bytes);
	if (ret == -E2BIG) {
		LOG_ERROR("--slot-bytes %" PRIu64 " x --slots %u: too large for a ring (at most "
			  "%llu GiB per slot including its header, %llu GiB in all)", o->slot_bytes,
			  o->slots, RING_SLOT_SIZE_MAX >> 30, RING_TOTAL_SIZE_MAX >> 30);
		return -EINVAL;
	}
	if (ret < 0) {
		LOG_ERROR("ring parameters refused: %s", strerror(-ret));
		return -EINVAL;
	}
	if (o->slot_bytes > SIZE_MAX / 2) {
		LOG_ERROR("--slot-bytes %" PRIu64 ": too large for this machine", o->slot_bytes);
		return -EINVAL;
	}
	return 0;
}

/* ---- filling and reading ---- */

/* --check pattern: word i of step s is mix64(s) + i; tail bytes are the bytes of mix64(s) ^ ~0.
 * A stale slot (another step), a shifted or a torn write all show up. */
static void pattern_fill(void *p, size_t n, uint64_t step)
{
	uint64_t base = mix64(step), *w = p, tail = ~base;
	size_t nw = n / 8;

	for (size_t i = 0; i < nw; i++)
		w[i] = base + i;
	for (size_t j = 0; j < n % 8; j++)
		((uint8_t *)p)[nw * 8 + j] = (uint8_t)(tail >> (8 * j));
}

/* Offset of the first byte that differs from the pattern, or -1. */
static int64_t pattern_check(const void *p, size_t n, uint64_t step, uint8_t *got, uint8_t *want)
{
	uint64_t base = mix64(step), tail = ~base;
	const uint64_t *w = p;
	size_t nw = n / 8;

	for (size_t i = 0; i < nw; i++) {
		if (w[i] == base + i)
			continue;
		uint64_t g = w[i], e = base + i;
		for (unsigned b = 0; b < 8; b++)
			if ((uint8_t)(g >> (8 * b)) != (uint8_t)(e >> (8 * b))) {
				*got = (uint8_t)(g >> (8 * b));
				*want = (uint8_t)(e >> (8 * b));
				return (int64_t)(i * 8 + b);  /* little-endian byte order */
			}
	}
	for (size_t j = 0; j < n % 8; j++) {
		uint8_t g = ((const uint8_t *)p)[nw * 8 + j], e = (uint8_t)(tail >> (8 * j));
		if (g != e) {
			*got = g;
			*want = e;
			return (int64_t)(nw * 8 + j);
		}
	}
	return -1;
}

/* XOR of every byte of [p, p + n), 64 bytes (four 16-byte vectors, independent chains) per
 * iteration: the reader should not be the bottleneck of what it measures. */
typedef uint64_t v2u64 __attribute__((vector_size(16)));

static uint64_t reduce_xor(const void *p, size_t n)
{
	const uint8_t *b = p;
	v2u64 a0 = { 0, 0 }, a1 = a0, a2 = a0, a3 = a0, x0, x1, x2, x3;
	uint64_t r = 0;
	size_t i = 0;

	for (; i + 64 <= n; i += 64) {
		memcpy(&x0, b + i, 16);
		memcpy(&x1, b + i + 16, 16);
		memcpy(&x2, b + i + 32, 16);
		memcpy(&x3, b + i + 48, 16);
		a0 ^= x0;
		a1 ^= x1;
		a2 ^= x2;
		a3 ^= x3;
	}
	a0 ^= a1 ^ a2 ^ a3;
	r = a0[0] ^ a0[1];
	for (; i < n; i++)
		r ^= (uint64_t)b[i] << (8 * (i % 8));
	return r;
}

static volatile uint64_t g_sink;  /* keeps reductions and copies alive */

/* ---- small helpers ---- */

static const char *fmt_bytes(uint64_t n, char *buf, size_t len)
{
	if (n >= (1ull << 30) && n % (1ull << 20) == 0)
		snprintf(buf, len, "%.2f GiB", (double)n / (1ull << 30));
	else if (n >= (1ull << 20))
		snprintf(buf, len, "%.2f MiB", (double)n / (1ull << 20));
	else if (n >= (1ull << 10))
		snprintf(buf, len, "%.2f KiB", (double)n / (1ull << 10));
	else
		snprintf(buf, len, "%" PRIu64 " B", n);
	return buf;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile @p (0..100] of @v[n], sorted in place. n > 0. */
static uint64_t percentile(uint32_t *v, size_t n, double p, int sorted)
{
	size_t k;

	if (!sorted)
		qsort(v, n, sizeof(*v), cmp_u32);
	k = (size_t)ceil(p / 100.0 * (double)n);
	return v[k ? k - 1 : 0];
}

static uint32_t clamp_ns(uint64_t later, uint64_t earlier)
{
	if (later <= earlier)
		return 0;  /* same clock on every CPU; only a garbled stamp could do this */
	return later - earlier > UINT32_MAX ? UINT32_MAX : (uint32_t)(later - earlier);
}

/* Nanoseconds this (single-threaded) process has spent runnable but waiting for its CPU, from
 * /proc/self/schedstat; 0 where the kernel does not keep it. On an idle machine it stays near 0. */
static uint64_t runq_wait_ns(void)
{
	unsigned long long run, wait = 0;
	FILE *f = fopen("/proc/self/schedstat", "re");

	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu", &run, &wait) != 2)
		wait = 0;
	fclose(f);
	return wait;
}

/* Milliseconds the hypervisor has stolen from @cpu (all CPUs when < 0) since boot, from the steal
 * column of /proc/stat (clock-tick resolution); 0 where not reported. */
static double steal_ms(int cpu)
{
	char want[32], line[512];
	unsigned long long v[8] = { 0 };
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f = fopen("/proc/stat", "re");
	double ms = 0;

	if (!f)
		return 0;
	if (cpu < 0)
		snprintf(want, sizeof(want), "cpu ");
	else
		snprintf(want, sizeof(want), "cpu%d ", cpu);
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, want, strlen(want)))
			continue;
		if (sscanf(line + strlen(want), "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
			   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8 && hz > 0)
			ms = (double)v[7] * 1000.0 / (double)hz;
		break;
	}
	fclose(f);
	return ms;
}

static int pin_to(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) < 0 ? -errno : 0;
}

/* The first two CPUs this process may run on, or -1s. Returns how many it may run on. */
static int pick_cpus(int *a, int *b)
{
	cpu_set_t set;
	int n = 0;

	*a = *b = -1;
	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 1;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &set))
			continue;
		if (n == 0)
			*a = c;
		else if (n == 1)
			*b = c;
		n++;
	}
	return n;
}

static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");

	snprintf(buf, len, "unknown");
	if (!f)
		return;
	if (fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = '\0';
	fclose(f);
}

/* The selected word of a sysfs choice line ("always [never] deny" -> "never"), in place. */
static const char *selected(char *line)
{
	char *l = strchr(line, '['), *r = l ? strchr(l, ']') : NULL;

	if (!r)
		return line;
	*r = '\0';
	return l + 1;
}

/* ---- memcpy baseline ---- */

/* Single-core memcpy of @n bytes between two prefaulted buffers, repeated for ~MEMCPY_SECONDS.
 * GB/s counts bytes copied (n per copy), as the ring counts bytes handed over. 0 on failure. */
static double memcpy_gbps(size_t n)
{
	size_t len = (n + 4095) & ~(size_t)4095;
	uint8_t *src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t per_batch, copies = 0, t0, t;
	double gbps = 0;

	if (src == MAP_FAILED || dst == MAP_FAILED) {
		LOG_ERROR("memcpy baseline: mmap of 2 x %zu bytes: %s", len, strerror(errno));
		goto out;
	}
	memset(src, 0x5a, len);  /* prefault both, and warm them like a ring slot is */
	memset(dst, 0xa5, len);
	memcpy(dst, src, n);
	/* Look at the clock every ~1 MiB copied, not every 4 KiB. */
	per_batch = n >= (1u << 20) ? 1 : (1u << 20) / n;
	t0 = clk_now_ns();
	do {
		for (uint64_t i = 0; i < per_batch; i++) {
			memcpy(dst, src, n);
			__asm__ __volatile__("" : : "r"(dst), "r"(src) : "memory");
		}
		copies += per_batch;
		t = clk_now_ns();
	} while (t - t0 < (uint64_t)(MEMCPY_SECONDS * 1e9));
	g_sink ^= dst[n - 1];
	gbps = (double)copies * (double)n / (double)(t - t0);
out:
	if (src != MAP_FAILED)
		munmap(src, len);
	if (dst != MAP_FAILED)
		munmap(dst, len);
	return gbps;
}

/* ---- consumer (child) ---- */

static void cons_fail(struct cons_result *res, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void cons_fail(struct cons_result *res, int err, const char *fmt, ...)
{
	va_list ap;

	res->err = err < 0 ? err : -EIO;
	va_start(ap, fmt);
	vsnprintf(res->msg, sizeof(res->msg), fmt, ap);
	va_end(ap);
}

static void consume(const struct opts *o, struct ring *r, struct cons_result *res)
{
	size_t n = (size_t)o->slot_bytes;
	uint32_t *stream_lat, *pp_lat;
	uint64_t t_first = 0, t_last = 0, sink = 0;
	struct ring_slot sl;
	int ret;

	/* Sized and touched here: no allocation or page fault inside the step loop. */
	stream_lat = calloc(STREAM_LAT_MAX, sizeof(*stream_lat));
	pp_lat = calloc(o->lat_steps, sizeof(*pp_lat));
	if (!stream_lat || !pp_lat) {
		cons_fail(res, -ENOMEM, "latency arrays: %s", strerror(ENOMEM));
		goto out;
	}
	memset(stream_lat, 0xff, STREAM_LAT_MAX * sizeof(*stream_lat));
	memset(pp_lat, 0xff, o->lat_steps * sizeof(*pp_lat));
	res->runq_ns = runq_wait_ns();

	for (uint64_t step = 0;; step++) {
		ret = ring_cons_acquire(r, step, WAIT_MS, &sl);
		uint64_t t_acq = clk_now_ns();
		if (ret < 0) {
			cons_fail(res, ret, "acquire of step %" PRIu64 ": %s%s", step, strerror(-ret),
				  ret == -ETIMEDOUT ? " (the producer published nothing for 2 s)" : "");
			goto out;
		}
		uint64_t epoch = sl.hdr->epoch, stamp = sl.hdr->latency_ns;
		uint32_t flags = sl.hdr->flags;
		if (sl.hdr->count != 1 || epoch > EPOCH_PINGPONG) {
			cons_fail(res, -EBADMSG, "step %" PRIu64 ": slot header count %u epoch %" PRIu64
				  " (want 1, <= 2)", step, sl.hdr->count, epoch);
			goto out;
		}
		if (o->check) {
			uint8_t got, want;
			int64_t off = pattern_check(sl.payload, n, step, &got, &want);
			if (off >= 0) {
				cons_fail(res, -EBADMSG, "step %" PRIu64 " (slot %u): byte %" PRId64
					  " of the payload is 0x%02x, want 0x%02x", step, sl.index,
					  off, got, want);
				goto out;
			}
		} else {
			sink ^= reduce_xor(sl.payload, n);
		}
		ret = ring_cons_release(r, step);
		uint64_t t_rel = clk_now_ns();
		if (ret < 0) {
			cons_fail(res, ret, "release of step %" PRIu64 ": %s", step, strerror(-ret));
			goto out;
		}
		if (epoch == EPOCH_STREAM) {
			if (res->stream_steps == 0)
				t_first = t_acq;
			t_last = t_rel;
			if (res->stream_lat_n < STREAM_LAT_MAX)
				stream_lat[res->stream_lat_n++] = clamp_ns(t_acq, stamp);
			res->stream_steps++;
		} else if (epoch == EPOCH_PINGPONG) {
			if (res->pp_n == o->lat_steps) {
				cons_fail(res, -EBADMSG, "step %" PRIu64 ": more ping-pong steps than "
					  "%u", step, o->lat_steps);
				goto out;
			}
			pp_lat[res->pp_n++] = clamp_ns(t_acq, stamp);
		}
		if (flags & RING_SLOT_LAST)
			break;
	}
	res->runq_ns = runq_wait_ns() - res->runq_ns;
	res->stream_bytes = res->stream_steps * (uint64_t)n;
	res->stream_ns = t_last - t_first;
	if (res->stream_lat_n) {
		res->stream_p50_ns = percentile(stream_lat, res->stream_lat_n, 50, 0);
		res->stream_p99_ns = percentile(stream_lat, res->stream_lat_n, 99, 1);
	}
	if (res->pp_n) {
		res->pp_p50_ns = percentile(pp_lat, res->pp_n, 50, 0);
		res->pp_p99_ns = percentile(pp_lat, res->pp_n, 99, 1);
		res->pp_max_ns = pp_lat[res->pp_n - 1];
	}
out:
	res->sink = sink;
	res->cpu = sched_getcpu();
	free(stream_lat);
	free(pp_lat);
}

/* The child: attach, pin, consume, report through @wfd, _exit. Never returns. */
static void consumer_main(const struct opts *o, int ring_fd_dup, int cpu, pid_t parent, int wfd)
{
	struct cons_result res;
	struct ring *r = NULL;
	int ret;

	memset(&res, 0, sizeof(res));
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(1);  /* the producer is gone already: nobody to report to */
	if (cpu >= 0 && (ret = pin_to(cpu)) < 0) {
		cons_fail(&res, ret, "pinning to cpu %d: %s", cpu, strerror(-ret));
		goto report;
	}
	ret = ring_attach(ring_fd_dup, &r);
	if (ret < 0) {
		close(ring_fd_dup);
		cons_fail(&res, ret, "ring_attach: %s", strerror(-ret));
		goto report;
	}
	consume(o, r, &res);
	ring_destroy(r);
report:
	g_sink ^= res.sink;
	ret = fd_write_all(wfd, &res, sizeof(res));
	_exit(ret == 0 && res.err == 0 ? 0 : 1);
}

/* ---- producer (parent) ---- */

struct bench {
	const struct opts *o;
	struct ring *r;
	pid_t child;
	int rfd;                  /* the consumer's result pipe */
	int child_reaped;
	int child_status;
	struct cons_result res;
	int have_res;
};

/* Read the consumer's result within @timeout_ms. 0, -EPIPE (closed before a full result: it died),
 * -ETIMEDOUT. */
static int read_result(struct bench *b, int timeout_ms)
{
	uint64_t deadline = clk_now_ns() + (uint64_t)timeout_ms * 1000000;
	size_t got = 0;
	char *p = (char *)&b->res;

	if (b->have_res)
		return 0;
	while (got < sizeof(b->res)) {
		uint64_t now = clk_now_ns();
		struct pollfd pfd = { .fd = b->rfd, .events = POLLIN };
		if (now >= deadline)
			return -ETIMEDOUT;
		int n = poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			continue;
		ssize_t r = read(b->rfd, p + got, sizeof(b->res) - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EPIPE;
		got += (size_t)r;
	}
	b->have_res = 1;
	return 0;
}

/* Has the consumer written or closed its end (which, before the end, means it failed)? */
static int peer_spoke(const struct bench *b)
{
	struct pollfd pfd = { .fd = b->rfd, .events = POLLIN };

	return poll(&pfd, 1, 0) > 0;
}

/* Wait for the child to exit, at most @timeout_ms, then kill it. Records its status. */
static void reap(struct bench *b, int timeout_ms, int kill_first)
{
	uint64_t deadline = clk_now_ns() + (uint64_t)timeout_ms * 1000000;

	if (b->child_reaped)
		return;
	if (kill_first)
		kill(b->child, SIGKILL);
	for (;;) {
		pid_t p = waitpid(b->child, &b->child_status, WNOHANG);
		if (p == b->child || (p < 0 && errno != EINTR)) {
			b->child_reaped = 1;
			if (p < 0)
				b->child_status = -1;
			return;
		}
		if (clk_now_ns() >= deadline) {
			kill(b->child, SIGKILL);
			while (waitpid(b->child, &b->child_status, 0) < 0 && errno == EINTR)
				;
			b->child_reaped = 1;
			return;
		}
		usleep(1000);
	}
}

static const char *status_str(int st, char *buf, size_t len)
{
	if (st == -1)
		snprintf(buf, len, "status unknown");
	else if (WIFEXITED(st))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
	else
		snprintf(buf, len, "status 0x%x", st);
	return buf;
}

/* Something went wrong on either side: say what the consumer said or how it ended, kill and reap
 * it. @what is the producer's view, or NULL when the consumer failed on its own. */
static void fail(struct bench *b, const char *what)
{
	char st[96];
	int alive;

	/* A consumer that failed wrote its result before exiting; give it a moment. */
	alive = read_result(b, 200) == -ETIMEDOUT;
	reap(b, alive ? 0 : 1000, alive);
	if (what)
		LOG_ERROR("producer: %s", what);
	if (b->have_res && b->res.err)
		LOG_ERROR("consumer (pid %d): %s", (int)b->child, b->res.msg);
	else if (alive)
		LOG_ERROR("consumer (pid %d) alive but stuck; killed it", (int)b->child);
	else
		LOG_ERROR("consumer (pid %d) %s without reporting", (int)b->child,
			  status_str(b->child_status, st, sizeof(st)));
}

/* Wait until the slot of @step is free for it (ring_prod_wait), watching the consumer. 0 or -errno
 * after fail() has reported. */
static int wait_free(struct bench *b, uint64_t step, const char *why)
{
	uint64_t t0 = clk_now_ns();
	char msg[160];
	int ret;

	for (;;) {
		ret = ring_prod_wait(b->r, step, PEER_POLL_MS);
		if (ret != -ETIMEDOUT)
			break;
		if (peer_spoke(b)) {
			fail(b, NULL);
			return -EPIPE;
		}
		if (clk_now_ns() - t0 >= (uint64_t)WAIT_MS * 1000000)
			break;
	}
	if (ret == 0)
		return 0;
	snprintf(msg, sizeof(msg), "waiting for %s (slot of step %" PRIu64 "): %s%s", why, step,
		 strerror(-ret), ret == -ETIMEDOUT ? " (the consumer released nothing for 2 s)" : "");
	fail(b, msg);
	return ret;
}

static void fill(const struct opts *o, void *p, size_t n, uint64_t step)
{
	if (o->check)
		pattern_fill(p, n, step);
	else
		memset(p, (int)(mix64(step) & 0xff), n);
}

/* Produce steps [*step, *step + count) (count 0: until @until_ns) of @epoch. @pingpong: publish
 * step s only after s - 1 is released. @last flags the final step. Advances *step. */
static int produce(struct bench *b, uint64_t *step, uint64_t count, uint64_t until_ns, int epoch,
		   int pingpong, int last)
{
	const struct opts *o = b->o;
	size_t n = (size_t)o->slot_bytes;
	uint64_t end = count ? *step + count : UINT64_MAX;
	struct ring_slot sl;
	char msg[96];
	int ret;

	for (uint64_t s = *step; s < end; s++) {
		int final = count ? s + 1 == end : clk_now_ns() >= until_ns;

		ret = wait_free(b, s, "a free slot");
		if (ret < 0)
			return ret;
		ret = ring_prod_begin(b->r, s, &sl);
		if (ret < 0) {
			snprintf(msg, sizeof(msg), "ring_prod_begin(step %" PRIu64 "): %s", s,
				 strerror(-ret));
			fail(b, msg);
			return ret;
		}
		fill(o, sl.payload, n, s);
		sl.hdr->epoch = (uint64_t)epoch;
		sl.hdr->step_in_epoch = s - *step;
		/* With one slot, waiting for the slot of s was waiting for the release of s - 1. */
		if (pingpong && o->slots > 1 && s > 0) {
			ret = wait_free(b, s - 1 + o->slots, "the release of the previous step");
			if (ret < 0)
				return ret;
		}
		sl.hdr->latency_ns = clk_now_ns();  /* ordered by the publish's release store */
		ring_prod_publish(b->r, &sl, 1, final && last ? RING_SLOT_LAST : 0);
		if (final) {
			*step = s + 1;
			return 0;
		}
	}
	return -EINVAL;  /* unreachable: the last step returns */
}

/* ---- cross-core yardstick: the same hand-off without the ring ---- */

/* What no ring can beat on these two CPUs: the producer's CPU writes a slot (fill(), as the ring's
 * producer does), the consumer's CPU reads it (reduce_xor(), as the ring's consumer does), over
 * @slots slots of the same size in shared memory, each side told by a per-slot sequence number on
 * its own cache line. A side that waits spins for XFER_SPIN pauses, then sleeps on the number
 * (futex, 1 ms at a time); each store is followed by a wake. That is the least any hand-off between
 * processes can do: no state words, no checks, no slot header; a waiter that only spun would lose
 * its CPU to other tasks on a busy machine, where a sleeper gets it back when woken (as the ring's
 * sides do). The bytes have to cross from one core's caches to the other's, and that, not the
 * ring, is what bounds the ring's throughput. It depends on where the two CPUs sit (sharing a last
 * level cache or not), not on the code: see docs/RING.md, "Throughput". */
#define XFER_SECONDS 1.0
#define XFER_LINE 64u
#define C2C_BATCHES 10            /* core-to-core latency: the fastest of 10 batches ... */
#define C2C_ROUNDS 2000           /* ... of 2000 round trips of one cache line */
#define XFER_SPIN 1024            /* pauses before a waiter sleeps (tens of microseconds at most) */

struct xfer_ctl {                 /* lines 0 and 1 of the yardstick's control area */
	_Atomic uint32_t total;       /* steps the producer publishes; UINT32_MAX until it knows */
	_Atomic uint32_t done;        /* consumer: 1 ok, 2 failed (gave up waiting) */
	uint64_t steps, ns;           /* consumer: measured steps and their time */
	uint64_t runq_ns;             /* consumer: run-queue wait during its loop */
	uint64_t sink;
	_Atomic uint32_t ball __attribute__((aligned(64)));  /* the latency ping-pong's line */
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Wait until *@w >= @want (acquire): spin XFER_SPIN pauses, then sleep on @w 1 ms at a time. 0, or
 * -ETIMEDOUT after WAIT_MS; with @total, -ENODATA once *@total <= @step (the producer stopped
 * before @step). */
static int xwait(_Atomic uint32_t *w, uint32_t want, _Atomic uint32_t *total, uint32_t step)
{
	const struct timespec ms = { 0, 1000000 };
	uint64_t deadline = 0;

	for (unsigned k = 1;; k++) {
		uint32_t v = atomic_load_explicit(w, memory_order_acquire);  /* pairs: xpost */
		if (v >= want)
			return 0;
		if (total && atomic_load_explicit(total, memory_order_acquire) <= step)
			return -ENODATA;
		if (k < XFER_SPIN) {
			cpu_relax();
			continue;
		}
		uint64_t now = clk_now_ns();
		if (!deadline)
			deadline = now + (uint64_t)WAIT_MS * 1000000;
		else if (now >= deadline)
			return -ETIMEDOUT;
		syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ms, NULL, 0);
	}
}

/* Store @v (release: pairs with the acquire load in xwait) and wake a sleeping waiter. */
static void xpost(_Atomic uint32_t *w, uint32_t v)
{
	atomic_store_explicit(w, v, memory_order_release);
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Bytes handed over per second (GB/s) from this process's CPU to @cpu_c, measured by the consumer
 * as the ring's streaming phase is (first acquire to last release, after 2 x @slots warm-up steps).
 * *@runq_ns: both sides' run-queue wait meanwhile. *@c2c_ns: then the one-way core-to-core latency
 * of a cache line (half the fastest batch's mean round trip), which says where the two CPUs sit:
 * a few tens of ns within one last-level cache, 100 ns or more across (AMD: another CCX). 0 when
 * it could not be measured (logged). */
static double xfer_gbps(const struct opts *o, int cpu_c, uint64_t *runq_ns, double *c2c_ns)
{
	size_t n = (size_t)o->slot_bytes, stride = (n + 4095) & ~(size_t)4095;
	size_t ctl_bytes = ((size_t)XFER_LINE * (2 + 2 * (size_t)o->slots) + 4095) & ~(size_t)4095;
	size_t len = ctl_bytes + stride * o->slots;
	uint64_t warm = 2ull * o->slots;
	double gbps = 0;
	int st, ret = 0;
	uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED) {
		LOG_ERROR("cross-core yardstick: mmap of %zu bytes: %s", len, strerror(errno));
		return 0;
	}
	struct xfer_ctl *ctl = (struct xfer_ctl *)(void *)m;
#define XPUB(i) ((_Atomic uint32_t *)(void *)(m + XFER_LINE * (2 + 2 * (size_t)(i))))
#define XREL(i) ((_Atomic uint32_t *)(void *)(m + XFER_LINE * (3 + 2 * (size_t)(i))))
#define XSLOT(i) (m + ctl_bytes + stride * (size_t)(i))
	memset(m, 0, len);  /* fault every page in, as the ring's producer does */
	atomic_store(&ctl->total, UINT32_MAX);
	fflush(stdout);
	pid_t parent = getpid(), child = fork();
	if (child < 0) {
		LOG_ERROR("cross-core yardstick: fork: %s", strerror(errno));
		munmap(m, len);
		return 0;
	}
	if (child == 0) {
		uint64_t sink = 0, t_first = 0, t_last = 0, s;
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent || pin_to(cpu_c) < 0)
			_exit(1);
		ctl->runq_ns = runq_wait_ns();
		for (s = 0;; s++) {
			uint64_t i = s % o->slots, lap = s / o->slots;
			ret = xwait(XPUB(i), (uint32_t)lap + 1, &ctl->total, (uint32_t)s);
			if (ret < 0)
				break;
			uint64_t t = clk_now_ns();
			if (s == warm)
				t_first = t;
			sink ^= reduce_xor(XSLOT(i), n);
			xpost(XREL(i), (uint32_t)lap + 1);
			t_last = clk_now_ns();
		}
		ctl->runq_ns = runq_wait_ns() - ctl->runq_ns;
		ctl->steps = s > warm ? s - warm : 0;
		ctl->ns = t_last - t_first;
		ctl->sink = sink;
		atomic_store_explicit(&ctl->done, ret == -ENODATA ? 1 : 2, memory_order_release);
		/* pong: answer 2k + 1 with 2k + 2; pairs with the producer's ping */
		for (uint64_t k = 0; ret == -ENODATA && k < (uint64_t)C2C_BATCHES * C2C_ROUNDS; k++) {
			if (xwait(&ctl->ball, (uint32_t)(2 * k + 1), NULL, 0) < 0)
				break;
			atomic_store_explicit(&ctl->ball, (uint32_t)(2 * k + 2), memory_order_release);
		}
		_exit(0);
	}
	uint64_t t_end = clk_now_ns() + (uint64_t)(XFER_SECONDS * 1e9), s, runq = runq_wait_ns();
	for (s = 0;; s++) {
		uint64_t i = s % o->slots, lap = s / o->slots;
		ret = xwait(XREL(i), (uint32_t)lap, NULL, 0);
		if (ret < 0)
			break;
		fill(o, XSLOT(i), n, s);
		xpost(XPUB(i), (uint32_t)lap + 1);
		if (s > warm && (clk_now_ns() >= t_end || s + 2 >= UINT32_MAX))
			break;
	}
	atomic_store_explicit(&ctl->total, ret < 0 ? 0 : (uint32_t)(s + 1), memory_order_release);
	runq = runq_wait_ns() - runq;
	if (ret == 0)
		ret = xwait(&ctl->done, 1, NULL, 0);
	*c2c_ns = 0;
	for (uint64_t b = 0, k = 0; ret == 0 && atomic_load(&ctl->done) == 1 && b < C2C_BATCHES; b++) {
		uint64_t t0 = clk_now_ns();
		for (uint64_t end = k + C2C_ROUNDS; ret == 0 && k < end; k++) {
			atomic_store_explicit(&ctl->ball, (uint32_t)(2 * k + 1), memory_order_release);
			ret = xwait(&ctl->ball, (uint32_t)(2 * k + 2), NULL, 0);
		}
		double one_way = (double)(clk_now_ns() - t0) / C2C_ROUNDS / 2;
		if (ret == 0 && (*c2c_ns == 0 || one_way < *c2c_ns))
			*c2c_ns = one_way;
	}
	if (ret < 0)
		kill(child, SIGKILL);
	while (waitpid(child, &st, 0) < 0 && errno == EINTR)
		;
	if (ret < 0 || atomic_load(&ctl->done) != 1 || ctl->steps == 0 || ctl->ns == 0)
		LOG_ERROR("cross-core yardstick: the %s gave up waiting for its peer (2 s); not measured",
			  ret < 0 ? "producer" : "consumer");
	else
		gbps = (double)ctl->steps * (double)n / (double)ctl->ns;
	*runq_ns = runq + ctl->runq_ns;
	g_sink ^= ctl->sink;
#undef XPUB
#undef XREL
#undef XSLOT
	munmap(m, len);
	return gbps;
}

static int run(const struct opts *o)
{
	struct bench b = { .o = o, .child = -1, .rfd = -1 };
	struct ring_desc d;
	char sz[32], tot[32], thp[64], st[96];
	int cpu_p, cpu_c, ncpu, pinned = 0, pfd[2], ret, rc = 1;
	uint64_t step = 0;
	double mgbps, gbps, xgbps = 0;
	uint64_t xrunq = 0;
	double c2c = 0;
	int xbusy = 0;

	ncpu = pick_cpus(&cpu_p, &cpu_c);
	if (ncpu >= 2) {
		ret = pin_to(cpu_p);
		if (ret < 0)
			LOG_WARN("pinning the producer to cpu %d: %s; running unpinned", cpu_p,
				 strerror(-ret));
		else
			pinned = 1;
	}

	desc_of(o, &d);
	ret = ring_create(&d, o->no_huge ? RING_CREATE_NO_HUGE : 0, &b.r);
	if (ret < 0) {
		LOG_ERROR("ring_create (%u slots of %" PRIu64 " bytes): %s", o->slots, o->slot_bytes,
			  strerror(-ret));
		return 1;
	}
	const struct ring_hdr *h = ring_header(b.r);
	read_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled", thp, sizeof(thp));
	printf("ringbench: ring of %u slot%s x %s payload (slot %" PRIu64 " bytes, %s mapped), ",
	       h->slots, h->slots == 1 ? "" : "s", fmt_bytes(o->slot_bytes, sz, sizeof(sz)),
	       h->slot_size, fmt_bytes(h->total_size, tot, sizeof(tot)));
	if (h->huge)
		printf("huge pages yes\n");
	else
		printf("huge pages no (MADV_HUGEPAGE; shmem THP setting: %s)\n", selected(thp));
	if (pinned)
		printf("ringbench: producer pinned to cpu %d, consumer to cpu %d (%d CPUs available)\n",
		       cpu_p, cpu_c, ncpu);
	else
		printf("ringbench: not pinned (%d CPU%s available): producer and consumer %s; "
		       "figures are not comparable\n", ncpu, ncpu == 1 ? "" : "s",
		       ncpu == 1 ? "share one CPU" : "may share a CPU");
	fflush(stdout);

	/* The yardstick first, alone on the machine, on the producer's CPU. */
	mgbps = memcpy_gbps((size_t)o->slot_bytes);
	if (mgbps <= 0)
		goto out_ring;
	printf("ringbench: memcpy %s -> %s, one core, %.1f s: %.2f GB/s (bytes copied)\n", sz, sz,
	       MEMCPY_SECONDS, mgbps);
	if (pinned) {
		xgbps = xfer_gbps(o, cpu_c, &xrunq, &c2c);
		xbusy = xrunq * 1000 > (uint64_t)(2 * XFER_SECONDS * 1e9) * RUNQ_IDLE_PERMILLE;
		if (xgbps > 0)
			printf("ringbench: cross-core hand-off without the ring (cpu %d writes, cpu %d "
			       "reads, %u slot%s, no ring), %.1f s: %.2f GB/s = %.2f x memcpy; waited "
			       "for the CPU %.1f ms%s\n", cpu_p, cpu_c, o->slots, o->slots == 1 ? "" : "s",
			       XFER_SECONDS, xgbps, xgbps / mgbps, xrunq / 1e6,
			       xbusy ? " (not idle)" : "");
		if (c2c > 0)
			printf("ringbench: core-to-core latency cpu %d -> cpu %d: %.0f ns one way (one "
			       "cache line; tens of ns within a last-level cache, 100 or more across)\n",
			       cpu_p, cpu_c, c2c);
	} else {
		printf("ringbench: cross-core hand-off without the ring: not measured (needs two "
		       "CPUs to pin to)\n");
	}
	fflush(stdout);  /* before fork: the child must not inherit unwritten output */

	if (pipe2(pfd, O_CLOEXEC) < 0) {
		LOG_ERROR("pipe: %s", strerror(errno));
		goto out_ring;
	}
	pid_t parent = getpid();
	int dfd = dup(ring_fd(b.r));  /* the consumer's own fd, for ring_attach to take */
	if (dfd < 0) {
		LOG_ERROR("dup of the ring fd: %s", strerror(errno));
		close(pfd[0]);
		close(pfd[1]);
		goto out_ring;
	}
	b.child = fork();
	if (b.child < 0) {
		LOG_ERROR("fork: %s", strerror(errno));
		close(pfd[0]);
		close(pfd[1]);
		close(dfd);
		goto out_ring;
	}
	if (b.child == 0) {
		close(pfd[0]);
		consumer_main(o, dfd, pinned ? cpu_c : -1, parent, pfd[1]);
	}
	close(pfd[1]);
	close(dfd);
	b.rfd = pfd[0];

	uint64_t warm = 2ull * o->slots, t0, prod_runq = runq_wait_ns(), t_steps = clk_now_ns();
	double steal = pinned ? steal_ms(cpu_p) + steal_ms(cpu_c) : steal_ms(-1);
	if (produce(&b, &step, warm, 0, EPOCH_WARMUP, 0, 0) < 0)
		goto out_pipe;
	t0 = clk_now_ns();
	if (produce(&b, &step, o->steps, t0 + (uint64_t)(o->seconds * 1e9), EPOCH_STREAM, 0, 0) < 0)
		goto out_pipe;
	if (produce(&b, &step, o->lat_steps, 0, EPOCH_PINGPONG, 1, 1) < 0)
		goto out_pipe;

	prod_runq = runq_wait_ns() - prod_runq;
	t_steps = clk_now_ns() - t_steps;
	steal = (pinned ? steal_ms(cpu_p) + steal_ms(cpu_c) : steal_ms(-1)) - steal;
	ret = read_result(&b, REPORT_WAIT_MS);
	if (ret < 0 || b.res.err) {
		char msg[160];
		snprintf(msg, sizeof(msg), "all %" PRIu64 " steps published, but no result from the "
			 "consumer: %s", step, ret < 0 ? strerror(-ret) : "it failed");
		fail(&b, ret < 0 ? msg : NULL);
		goto out_pipe;
	}
	reap(&b, WAIT_MS, 0);
	if (!WIFEXITED(b.child_status) || WEXITSTATUS(b.child_status) != 0) {
		LOG_ERROR("consumer (pid %d) reported but then %s", (int)b.child,
			  status_str(b.child_status, st, sizeof(st)));
		goto out_pipe;
	}
	if (b.res.stream_steps == 0 || b.res.stream_ns == 0 || b.res.pp_n != o->lat_steps) {
		LOG_ERROR("consumer saw %" PRIu64 " streaming and %" PRIu64 " ping-pong steps; "
			  "nothing to measure", b.res.stream_steps, b.res.pp_n);
		goto out_pipe;
	}
	g_sink ^= b.res.sink;

	gbps = (double)b.res.stream_bytes / (double)b.res.stream_ns;
	printf("ringbench: streaming: %" PRIu64 " steps, %.3f GB in %.3f s (consumer, first "
	       "acquire to last release): %.2f GB/s%s\n", b.res.stream_steps,
	       (double)b.res.stream_bytes / 1e9, (double)b.res.stream_ns / 1e9, gbps,
	       o->check ? " (with --check: pattern work included, not comparable)" : "");
	printf("ringbench: streaming publish->acquire (queueing when the consumer is the slower "
	       "side): p50=%.1f us p99=%.1f us%s\n", b.res.stream_p50_ns / 1e3,
	       b.res.stream_p99_ns / 1e3, b.res.stream_lat_n < b.res.stream_steps ?
	       " (first steps only)" : "");
	printf("ringbench: hand-off latency, ping-pong (%" PRIu64 " steps, publish after the "
	       "previous release; consumer on cpu %d): p50=%.1f us p99=%.1f us max=%.1f us\n",
	       b.res.pp_n, b.res.cpu, b.res.pp_p50_ns / 1e3, b.res.pp_p99_ns / 1e3,
	       b.res.pp_max_ns / 1e3);
	printf("ringbench: while stepping (%.3f s): waited for the CPU %.1f ms (producer) and "
	       "%.1f ms (consumer); hypervisor steal %.0f ms\n", t_steps / 1e9, prod_runq / 1e6,
	       b.res.runq_ns / 1e6, steal);
	int busy = (prod_runq + b.res.runq_ns) * 1000 > t_steps * 2 * RUNQ_IDLE_PERMILLE;
	fflush(stdout);  /* keep the order when both go to one file */
	if (busy)
		LOG_WARN("other tasks took the benchmark's CPUs for %.1f ms of 2 x %.1f ms: the "
			 "machine is not idle, and throughput and p99 are worse than it can do",
			 (prod_runq + b.res.runq_ns) / 1e6, t_steps / 1e6);
	/* The regression check: only on an idle machine, where both figures mean something. */
	if (!busy && !xbusy && xgbps > 0 && !o->check && gbps < RING_VS_XFER_MIN * xgbps)
		LOG_WARN("on an idle machine the ring moved %.2f GB/s, %.2f of the %.2f GB/s the same "
			 "two CPUs move without it (want >= %.2f): its per-step path costs more than "
			 "it should; see docs/RING.md, Throughput", gbps, gbps / xgbps, xgbps,
			 RING_VS_XFER_MIN);
	printf("ringbench: gbps=%.2f memcpy_gbps=%.2f ratio=%.2f p99_us=%.1f xfer_gbps=%.2f "
	       "ring_vs_xfer=%.2f c2c_ns=%.0f\n", gbps, mgbps, gbps / mgbps, b.res.pp_p99_ns / 1e3,
	       xgbps, xgbps > 0 ? gbps / xgbps : 0.0, c2c);
	rc = 0;
	if (fflush(stdout) == EOF) {
		LOG_ERROR("stdout: %s", strerror(errno));
		rc = 1;
	}
out_pipe:
	reap(&b, 0, 1);
	close(b.rfd);
out_ring:
	ring_destroy(b.r);
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o;
	int ret;

	log_prog = "ringbench";
	ret = parse_args(argc, argv, &o);
	if (ret)
		return ret > 0 ? 0 : EXIT_USAGE;
	return run(&o);
}
