/* steps.c - every rank's step records at rank 0 (steps.h): one gather of the per-rank totals,
 * one of the step tables; and the Chrome trace, each rank's events rendered locally and gathered
 * as text. */
#include "trainer/steps.h"

#include "common/log.h"
#include "trainer/fatal.h"

#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The gathers move steps as arrays of uint64_t. */
_Static_assert(sizeof(struct trn_step) == (1 + TRN_PH_N) * sizeof(uint64_t), "trn_step is packed");
#define STEP_WORDS (1 + TRN_PH_N)
#define TOTAL_WORDS (3 + TRN_PH_N)   /* n_steps, samples, wall_ns, sum_ns[] */

static const char *const trace_name[TRN_PH_N] = { "data wait", "h2d", "compute", "allreduce",
						  "optimizer" };

struct trn_rank_run *trn_steps_gather(const struct trn_rank_run *mine, int rank, int world,
				      struct trn_step **store)
{
	uint64_t tot[TOTAL_WORDS] = { (uint64_t)mine->n_steps, mine->samples, mine->wall_ns };
	uint64_t *all = NULL;
	int *counts = NULL, *displs = NULL, total = 0;
	struct trn_rank_run *runs = NULL;

	*store = NULL;
	memcpy(tot + 3, mine->sum_ns, sizeof(mine->sum_ns));
	if (rank == 0) {
		all = calloc((size_t)world * TOTAL_WORDS, sizeof(*all));
		counts = calloc((size_t)world, sizeof(*counts));
		displs = calloc((size_t)world, sizeof(*displs));
		runs = calloc((size_t)world, sizeof(*runs));
		if (!all || !counts || !displs || !runs)
			trn_die("out of memory for the report");
	}
	MPI_Gather(tot, TOTAL_WORDS, MPI_UINT64_T, all, TOTAL_WORDS, MPI_UINT64_T, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		for (int r = 0; r < world; r++) {
			const uint64_t *x = all + (size_t)r * TOTAL_WORDS;
			runs[r].n_steps = (long)x[0];
			runs[r].samples = x[1];
			runs[r].wall_ns = x[2];
			memcpy(runs[r].sum_ns, x + 3, sizeof(runs[r].sum_ns));
			counts[r] = (int)(x[0] * STEP_WORDS);
			displs[r] = total;
			total += counts[r];
		}
		*store = calloc((size_t)total / STEP_WORDS + 1, sizeof(**store));
		if (!*store)
			trn_die("out of memory for the report");
		for (int r = 0; r < world; r++)
			runs[r].steps = *store + displs[r] / STEP_WORDS;
	}
	MPI_Gatherv(mine->steps, (int)(mine->n_steps * STEP_WORDS), MPI_UINT64_T,
		    rank == 0 ? (void *)*store : NULL, counts, displs, MPI_UINT64_T, 0, MPI_COMM_WORLD);
	free(all);
	free(counts);
	free(displs);
	return runs;
}

void trn_steps_write_trace(const char *path, const struct trn_step *rec, long n, int rank,
			   int world)
{
	size_t cap = (size_t)n * TRN_PH_N * 120 + 64, len = 0;
	char *buf = malloc(cap);
	uint64_t t0 = n > 0 ? rec[0].start_ns : UINT64_MAX, t0_all = 0;

	if (!buf)
		trn_die("out of memory for the trace");
	/* one time origin for every rank (CLOCK_MONOTONIC is per node): the earliest start */
	MPI_Allreduce(&t0, &t0_all, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
	for (long s = 0; s < n; s++) {
		uint64_t t = rec[s].start_ns - t0_all;
		for (int p = 0; p < TRN_PH_N; p++) {
			if (rec[s].ns[p] == 0)
				continue;
			len += (size_t)snprintf(buf + len, cap - len,
				"{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
				"\"args\":{\"step\":%ld}},\n", trace_name[p], rank, (double)t / 1e3,
				(double)rec[s].ns[p] / 1e3, s);
			t += rec[s].ns[p];
		}
	}
	/* Rank 0 gathers every rank's events and writes one file Perfetto can open. */
	int mylen = (int)len, *lens = NULL, *displs = NULL, total = 0;
	char *all = NULL;
	if (rank == 0) {
		lens = calloc((size_t)world, sizeof(int));
		displs = calloc((size_t)world, sizeof(int));
		if (!lens || !displs)
			trn_die("out of memory for the trace");
	}
	MPI_Gather(&mylen, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		for (int r = 0; r < world; r++)
			displs[r] = total, total += lens[r];
		all = malloc((size_t)total + 1);
		if (!all)
			trn_die("out of memory for the trace");
	}
	MPI_Gatherv(buf, mylen, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		FILE *f = fopen(path, "w");
		if (!f)
			trn_die("--trace %s: %s", path, strerror(errno));
		fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
		if (total > 2)
			fwrite(all, 1, (size_t)total - 2, f);  /* drop the last ",\n" */
		fputs("\n]}\n", f);
		if (fclose(f) != 0)
			trn_die("--trace %s: write failed", path);
		LOG_INFO("trace of %d ranks written to %s", world, path);
	}
	free(all);
	free(lens);
	free(displs);
	free(buf);
}
