/* s3data.c - the trainer's --dataset s3://bucket/prefix/NAME (docs/S3.md). With --classes, the
 * set is offered to loaderd's node cache (loaderd --cache-dir; ldc_s3_offer, the rule ldcat
 * follows): when loaderd has one, every rank's job open names the URL and loaderd fetches it with
 * this user's credentials, so nothing is fetched here. Otherwise (loaderd has no cache,
 * LOADERD_S3_CLIENT_FETCH=1, or no --classes: the class count is read from the set itself) it is
 * made local in the user's cache before any rank opens it and opened like a local dataset: on each
 * node the first local rank fetches while the others wait at a barrier, then they resolve it too
 * (HEADs only: every object is cached under its current ETag by then). */
#include "trainer/s3data.h"

#include <mpi.h>
#include <stdio.h>

#include "common/log.h"
#include "s3/s3cache.h"
#include "shm/ldc.h"
#include "trainer/fatal.h"

/* Does loaderd take @url into its node cache? Asked on a connection of its own, closed after:
 * 0 yes, 1 no (fetch it here). Dies on a refusal (no credentials, loaderd unreachable). */
static int offer(const struct trn_opts *o)
{
	char sock[256], err[512];
	const char *socket = o->socket ? o->socket : ldc_default_socket(sock, sizeof(sock));
	struct ldc *c;

	if (ldc_connect(socket, &c, err, sizeof(err)) < 0)
		trn_die("%s", err);
	int ret = ldc_s3_offer(c, o->dataset);
	if (ret < 0)
		trn_die("%s", ldc_error(c));
	ldc_close(c);
	return ret;
}

void trn_s3_dataset(struct trn_opts *o, int local_rank, int rank)
{
	static struct s3cache_result r;  /* o->dataset points into it for the run */
	char err[1024];
	int ret = 0;

	if (!o->dataset || !s3_is_url(o->dataset))
		return;
	int fetch = o->synthetic || !o->classes || offer(o) == 1;
	if (fetch && local_rank == 0)
		ret = s3cache_resolve(o->dataset, &r, err, sizeof(err));
	MPI_Barrier(MPI_COMM_WORLD);
	if (fetch && ret == 0 && local_rank != 0)
		ret = s3cache_resolve(o->dataset, &r, err, sizeof(err));
	if (ret < 0)
		trn_die("%s", err);
	if (!fetch) {
		if (rank == 0)
			LOG_INFO("%s through loaderd's node cache", o->dataset);
		return;
	}
	if (rank == 0)
		LOG_INFO("%s is %s (%u objects, %u fetched now, %llu bytes)", o->dataset, r.path,
			 r.objects, r.fetched, (unsigned long long)r.fetched_bytes);
	o->dataset = r.path;
}
