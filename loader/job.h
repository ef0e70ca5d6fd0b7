/* job.h - loaderd's jobs: what the server (loader/srv.h) calls to open a job on a .dpk and to
 * fill a slot: sampler -> batched reads -> checksum -> crop-aware decode straight into the slot,
 * with the bad-record policy. */
#ifndef LOADERD_JOB_H
#define LOADERD_JOB_H
#include <stddef.h>
#include <stdint.h>

#include "codec/kind.h"
#include "loader/reader.h"
#include "loader/srv.h"

struct ldr_config {
	enum ldr_io io;            /* AUTO (io_uring, O_DIRECT where possible), BUFFERED, PREAD */
	size_t arena_bytes;        /* per worker, for batched reads (0: LDR_ARENA_DEFAULT) */
	uint64_t max_pixels;       /* per record (height x width); larger ones are refused at job
				    * open and bad records at decode (0: LDR_MAX_PIXELS_DEFAULT) */
	uint64_t max_record;       /* stored bytes per record; a dataset with a larger one is
				    * refused at job open, and such a read fails (0:
				    * LDR_MAX_RECORD_DEFAULT) */
	uint64_t cache_bytes;      /* memory the page cache may give datasets, for --io auto's choice
				    * (docs/TUNING.md; 0: ldr_memory_budget) */
	unsigned workers;          /* worker threads (>= 1; 0 counts as 1): each may hold buffers
				    * for a job's largest records, counted in the job's memory */
};

#define LDR_MAX_PIXELS_DEFAULT CDC_MAX_PIXELS_DEFAULT  /* 64 Mpixel: dpack's default too */
#define LDR_ARENA_DEFAULT (16u << 20)         /* a worker's reader arena */
#define LDR_MAX_RECORD_DEFAULT (64ull << 20)  /* 64 MiB stored */
#define LDR_DECODE_PX_BYTES 4u  /* a worker's decode scratch per pixel of an image it decodes
				  * (rows of up to 4 components), counted in a job's memory */
#define LDR_DEC_KEEP (16u << 20) /* a worker's decoder keeps its buffers up to this after a task
				  * (a 2-Mpixel window at full scale); larger ones are let go */
#define LDR_SUB_KEEP (1u << 20)  /* a worker keeps a substitute buffer (and the augmentations'
				  * copy) up to this; larger ones are freed after the task */

/* The phases of a fill whose time loaderd reports (srv_fill.phase_ns, ctl_stats.phase_ns):
 * reading the records, and checking and decoding them. */
enum ldr_phase { LDR_PHASE_IO = 0, LDR_PHASE_DECODE = 1 };

/* Fill @ops with loaderd's callbacks; @cfg must outlive the server. */
void ldr_job_ops(const struct ldr_config *cfg, struct srv_ops *ops);

/* The memory loaderd may use by its cgroups: the lowest limit on the path that @proc_cgroup
 * (/proc/self/cgroup) names, and on each parent, under @root (/sys/fs/cgroup): cgroup v2's
 * memory.max, or v1's memory/.../memory.limit_in_bytes; @phys where none is lower. */
uint64_t ldr_memory_budget(const char *proc_cgroup, const char *root, uint64_t phys);

#endif
