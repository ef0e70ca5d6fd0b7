/* s3data.c - the trainer's --dataset s3://bucket/prefix/NAME (docs/S3.md): made local in the
 * user's cache with the user's credentials before any rank opens it, then opened like a local
 * dataset (loaderd gets descriptors, never a URL or a credential). On each node the first local
 * rank fetches while the others wait at a barrier, then they resolve it too (HEADs only: every
 * object is cached under its current ETag by then). */
#include "trainer/s3data.h"

#include <mpi.h>
#include <stdio.h>

#include "common/log.h"
#include "s3/s3cache.h"
#include "trainer/fatal.h"

void trn_s3_dataset(struct trn_opts *o, int local_rank, int rank)
{
	static struct s3cache_result r;  /* o->dataset points into it for the run */
	char err[1024];
	int ret = 0;

	if (!o->dataset || !s3_is_url(o->dataset))
		return;
	if (local_rank == 0)
		ret = s3cache_resolve(o->dataset, &r, err, sizeof(err));
	MPI_Barrier(MPI_COMM_WORLD);
	if (ret == 0 && local_rank != 0)
		ret = s3cache_resolve(o->dataset, &r, err, sizeof(err));
	if (ret < 0)
		trn_die("%s", err);
	if (rank == 0)
		LOG_INFO("%s is %s (%u objects, %u fetched now, %llu bytes)", o->dataset, r.path,
			 r.objects, r.fetched, (unsigned long long)r.fetched_bytes);
	o->dataset = r.path;
}
