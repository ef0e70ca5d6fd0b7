/* registry.h - devices and collective backends by name: one table each of {name, constructor},
 * so that a new device or backend is one row. */
#ifndef LOADERD_TRN_REGISTRY_H
#define LOADERD_TRN_REGISTRY_H
#include <stddef.h>

#include "trainer/coll.h"
#include "trainer/dev.h"

/* Open device @name ("cuda", "host"), or with NULL or "auto" the first that opens, in table
 * order (cuda, then host; a fallback is logged when @log_fallback). @local_rank picks the GPU.
 * 0, or -errno with the reason in @err ("use cuda or host" for an unknown name). */
int trn_dev_open_named(const char *name, int local_rank, int log_fallback, struct trn_dev **out,
		       char *err, size_t errlen);
/* Open backend @name ("nccl", "mpi"), or with NULL the default of @dev's kind (nccl on cuda, mpi
 * on the host). 0, or -errno with the whole reason in @err. */
int trn_coll_open_named(const char *name, struct trn_dev *dev, struct trn_coll **out, char *err,
			size_t errlen);

#endif
