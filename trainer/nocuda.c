/* nocuda.c - stands in for dev_cuda.cu and coll_nccl.cu in builds without a CUDA toolkit, so
 * that --device cuda and --backend nccl fail with a sentence instead of a link error. */
#include "trainer/coll.h"
#include "trainer/dev.h"

#include <errno.h>
#include <stdio.h>

int trn_dev_cuda_open(int local_rank, struct trn_dev **out, char *err, size_t errlen)
{
	(void)local_rank;
	*out = NULL;
	snprintf(err, errlen, "this trainer was built without CUDA (no nvcc at build time); "
		 "use --device host, or rebuild with CUDA_HOME set");
	return -ENODEV;
}

int trn_coll_nccl_open(struct trn_dev *dev, struct trn_coll **out, char *err, size_t errlen)
{
	(void)dev;
	*out = NULL;
	snprintf(err, errlen, "this trainer was built without NCCL (no nvcc at build time); "
		 "use --backend mpi");
	return -ENODEV;
}
