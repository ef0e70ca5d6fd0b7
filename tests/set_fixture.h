/* set_fixture.h - small sets of shards written for the tests of streamed sets (test_stream,
 * test_dpkstream, test_job_stream): shards of raw 4x4 records, a manifest over them, and a file
 * of the test's folder opened. Each call asserts (cmocka) that it succeeded. */
#ifndef LOADERD_TESTS_SET_FIXTURE_H
#define LOADERD_TESTS_SET_FIXTURE_H
#include <stdint.h>

#include "formats/dpk.h"

struct setfx {
	const char *const *classes;  /* the shard's class table; label (base + i) % nclasses */
	uint32_t nclasses;           /* 0: no class table; label base + i */
	int caption;                 /* an aux field "caption": one byte, base + i */
	unsigned big_at;             /* record big_at is 8x8 (64 bytes); n or more: none */
};

/* DIR/@name: @n raw 4x4 records, record i's bytes all (base + i) (@o: NULL for none of its
 * options). Its identity into @id. */
void setfx_shard(const char *dir, const char *name, unsigned n, unsigned base,
		 const struct setfx *o, uint8_t id[DPK_IDENTITY_SIZE]);
/* DIR/@name: a manifest over shards @names[0, k) of @counts records and identities @ids. */
void setfx_manifest(const char *dir, const char *name, unsigned k, const char *const *names,
		    const unsigned *counts, uint8_t (*ids)[DPK_IDENTITY_SIZE]);
/* DIR/@name opened for reading. */
int setfx_open(const char *dir, const char *name);

#endif
