/* ldcachesim.c - bytes fetched per epoch from an object store by a node-local cache of whole
 * shards smaller than the dataset, under two eviction policies replayed on the same access
 * sequence: LRU, and the sampler's known future (loaderd's sampler is a keyed permutation, so
 * every node knows which samples it will read, in which order, for the rest of the run: evict the
 * cached shard whose next use is farthest, and fetch ahead in the order of use; ahead-of-time
 * fetches change when bytes move, not how many, so the count is the policy's).
 *
 * The sequence is loaderd's own (loader/sampler.c, ldr_sampler_batch): epoch by epoch, step by
 * step, the node's ranks in order, each sample mapped to its shard (shards of --shard-records
 * consecutive samples, as dpack --shard-size cuts them). With --sampling block and --block equal
 * to the shard's records, a window of --window shards is shuffled at a time (the windowed
 * shuffle for caches smaller than the dataset). docs/S3.md has the figures and what they mean.
 * Ends on one JSON line. */
#include "common/args.h"
#include "loader/sampler.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"usage: ldcachesim [options]\n"
	"Replay loaderd's sampler through a cache of whole shards, LRU against the sampler's future.\n"
	"  --samples N         samples in the dataset (default 100000)\n"
	"  --shard-records K   samples per shard (default 1000)\n"
	"  --record-bytes B    bytes per sample (default 110K, an ImageNet JPEG)\n"
	"  --world W           ranks on the node (default 8)\n"
	"  --batch B           samples per rank per step (default 64)\n"
	"  --epochs E          epochs (default 3)\n"
	"  --cache F           cache size as a fraction of the dataset, 0 < F <= 1 (default 0.25)\n"
	"  --sampling M        shuffle (default), block (windowed) or sequential\n"
	"  --window S          block: shards shuffled together (default: a quarter of the cache)\n"
	"  --seed S            sampler seed (default 0)\n";

struct sim {
	uint32_t nshards;
	uint32_t cap;            /* shards the cache holds */
	uint64_t len;            /* accesses */
	uint32_t *seq;           /* shard of each access */
	uint64_t *next;          /* index of the next access to the same shard, or UINT64_MAX */
	uint64_t *epoch_end;     /* first access of epoch e + 1 */
	uint32_t epochs;
};

/* Fetches per epoch (@out[e], in shards) under @policy: 0 LRU, 1 the future (farthest next use). */
static int replay(const struct sim *m, int policy, uint64_t *out)
{
	uint32_t *slot = calloc(m->cap, sizeof(*slot));      /* cached shards */
	uint64_t *key = calloc(m->cap, sizeof(*key));        /* LRU: last use; future: next use */
	int32_t *where = malloc(m->nshards * sizeof(*where)); /* shard -> slot, or -1 */
	uint32_t used = 0, e = 0;
	if (!slot || !key || !where) {
		free(slot), free(key), free(where);
		return -ENOMEM;
	}
	memset(where, 0xff, m->nshards * sizeof(*where));
	memset(out, 0, m->epochs * sizeof(*out));
	for (uint64_t i = 0; i < m->len; i++) {
		while (i >= m->epoch_end[e])
			e++;
		uint32_t sh = m->seq[i];
		int32_t k = where[sh];
		if (k < 0) {
			out[e]++;
			if (used < m->cap) {
				k = (int32_t)used++;
			} else {  /* evict: LRU the least recent use, the future the farthest next use */
				uint32_t v = 0;
				for (uint32_t j = 1; j < m->cap; j++)
					if (policy ? key[j] > key[v] : key[j] < key[v])
						v = j;
				where[slot[v]] = -1;
				k = (int32_t)v;
			}
			slot[k] = sh;
			where[sh] = k;
		}
		key[k] = policy ? m->next[i] : i;
	}
	free(slot);
	free(key);
	free(where);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "samples", required_argument, NULL, 'n' }, { "shard-records", required_argument, NULL, 'k' },
		{ "record-bytes", required_argument, NULL, 'r' }, { "world", required_argument, NULL, 'w' },
		{ "batch", required_argument, NULL, 'b' }, { "epochs", required_argument, NULL, 'e' },
		{ "cache", required_argument, NULL, 'c' }, { "sampling", required_argument, NULL, 'm' },
		{ "window", required_argument, NULL, 'W' }, { "seed", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	uint64_t n = 100000, rec = 110 << 10, seed = 0;
	unsigned k = 1000, world = 8, batch = 64, epochs = 3, window = 0;
	double frac = 0.25;
	enum ldr_sampling mode = LDR_SAMPLE_SHUFFLE;
	int c, bad = 0;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'n': bad = arg_u64(optarg, 1, 1ull << 32, &n); break;
		case 'k': bad = arg_uint(optarg, 1, 1u << 24, &k); break;
		case 'r': bad = arg_bytes(optarg, 1, 1ull << 34, &rec); break;
		case 'w': bad = arg_uint(optarg, 1, 4096, &world); break;
		case 'b': bad = arg_uint(optarg, 1, 65536, &batch); break;
		case 'e': bad = arg_uint(optarg, 1, 100, &epochs); break;
		case 'c': bad = arg_double(optarg, 1e-9, 1.0, &frac); break;
		case 'W': bad = arg_uint(optarg, 1, 1u << 24, &window); break;
		case 's': bad = arg_u64(optarg, 0, UINT64_MAX, &seed); break;
		case 'm':
			mode = !strcmp(optarg, "shuffle") ? LDR_SAMPLE_SHUFFLE :
			       !strcmp(optarg, "block") ? LDR_SAMPLE_BLOCK :
			       !strcmp(optarg, "sequential") ? LDR_SAMPLE_SEQUENTIAL : (bad = -1, mode);
			break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
		if (bad < 0) {
			fprintf(stderr, "ldcachesim: bad value '%s' (see --help)\n", optarg);
			return 2;
		}
	}
	struct sim m = { .epochs = epochs };
	m.nshards = (uint32_t)((n + k - 1) / k);
	m.cap = (uint32_t)(frac * m.nshards + 1e-9);
	if (m.cap < 1) {
		fprintf(stderr, "ldcachesim: a cache of %.3g of %u shards holds none\n", frac, m.nshards);
		return 2;
	}
	if (!window)
		window = m.cap / 4 ? m.cap / 4 : 1;
	struct ldr_sampler s;
	if (ldr_sampler_init(&s, n, world, batch, mode, LDR_TAIL_PAD, seed, k, window) < 0) {
		fprintf(stderr, "ldcachesim: the sampler refuses these figures\n");
		return 2;
	}
	m.len = (uint64_t)epochs * s.steps * world * batch;  /* an upper bound; the last steps are short */
	m.seq = malloc(m.len * sizeof(*m.seq));
	m.next = malloc(m.len * sizeof(*m.next));
	m.epoch_end = calloc(epochs, sizeof(*m.epoch_end));
	uint64_t *ids = malloc(batch * sizeof(*ids)), *last = malloc(m.nshards * sizeof(*last));
	uint8_t *flags = malloc(batch);
	uint64_t *lru = calloc(epochs, sizeof(*lru)), *fut = calloc(epochs, sizeof(*fut));
	if (!m.seq || !m.next || !m.epoch_end || !ids || !last || !flags || !lru || !fut) {
		fprintf(stderr, "ldcachesim: out of memory\n");
		return 1;
	}
	uint64_t len = 0;
	for (uint32_t e = 0; e < epochs; e++) {
		for (uint64_t st = 0; st < s.steps; st++)
			for (uint32_t r = 0; r < world; r++) {
				uint32_t cnt = ldr_sampler_batch(&s, e, st, r, ids, flags);
				for (uint32_t i = 0; i < cnt; i++)
					m.seq[len++] = (uint32_t)(ids[i] / k);
			}
		m.epoch_end[e] = len;
	}
	m.len = len;
	for (uint32_t i = 0; i < m.nshards; i++)
		last[i] = UINT64_MAX;
	for (uint64_t i = m.len; i-- > 0;) {
		m.next[i] = last[m.seq[i]];
		last[m.seq[i]] = i;
	}
	if (replay(&m, 0, lru) < 0 || replay(&m, 1, fut) < 0) {
		fprintf(stderr, "ldcachesim: out of memory\n");
		return 1;
	}
	double shard_bytes = (double)k * (double)rec, dataset = (double)n * (double)rec;
	const char *mname = mode == LDR_SAMPLE_SHUFFLE ? "shuffle" : mode == LDR_SAMPLE_BLOCK ?
			    "block" : "sequential";
	printf("%u shards of %u samples, cache %u shards (%.3g of the dataset), %s sampling%s, %u "
	       "ranks, batch %u\n", m.nshards, k, m.cap, frac, mname,
	       mode == LDR_SAMPLE_BLOCK ? " (windowed)" : "", world, batch);
	printf("epoch   LRU (x dataset)   future (x dataset)\n");
	for (uint32_t e = 0; e < epochs; e++)
		printf("%5u   %15.3f   %18.3f\n", e, lru[e] * shard_bytes / dataset,
		       fut[e] * shard_bytes / dataset);
	printf("{\"shards\": %u, \"cache_shards\": %u, \"sampling\": \"%s\", \"window\": %u, "
	       "\"lru\": [", m.nshards, m.cap, mname, mode == LDR_SAMPLE_BLOCK ? window : 0);
	for (uint32_t e = 0; e < epochs; e++)
		printf("%s%.6f", e ? ", " : "", lru[e] * shard_bytes / dataset);
	printf("], \"future\": [");
	for (uint32_t e = 0; e < epochs; e++)
		printf("%s%.6f", e ? ", " : "", fut[e] * shard_bytes / dataset);
	printf("]}\n");
	free(m.seq), free(m.next), free(m.epoch_end), free(ids), free(last), free(flags);
	free(lru), free(fut);
	return 0;
}
