/* fuzz_dpkset.c - libFuzzer target for set manifests (formats/dpkset.c), which arrive from users:
 * dpkset_parse must refuse any input cleanly, saying why and on which line, or accept a manifest
 * whose prefix sums add up, whose map sends every shard's first and last sample to that shard, and
 * which, written out again, parses to the same shards. */
#include "formats/dpkset.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dpkset_manifest *m, *back;
	char why[2048], path[64];

	if (dpkset_parse((const char *)data, size, "m", &m, why, sizeof(why)) < 0) {
		if (!memchr(why, 0, sizeof(why)) || strncmp(why, "m line ", 7))
			abort();  /* every refusal names the manifest and the line */
		return 0;
	}
	if (m->n < 1 || m->n > DPKSET_SHARDS_MAX || m->first[0] != 0)
		abort();
	for (uint32_t k = 0; k < m->n; k++) {
		if (m->first[k + 1] != m->first[k] + m->shards[k].count || !m->shards[k].count ||
		    dpkset_find(m, m->first[k]) != k || dpkset_find(m, m->first[k + 1] - 1) != k)
			abort();
		if (strlen(m->shards[k].path) > DPKSET_PATH_MAX || m->shards[k].path[0] == '/')
			abort();
	}
	/* written out and read back: the same shards */
	snprintf(path, sizeof(path), "%s/fuzz_dpkset.%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
		 (int)getpid());
	if (dpkset_write(path, m) == 0) {
		FILE *f = fopen(path, "r");
		char *text = malloc(size + 64);
		size_t n = f && text ? fread(text, 1, size + 64, f) : 0;
		if (f)
			fclose(f);
		unlink(path);
		if (dpkset_parse(text, n, "again", &back, why, sizeof(why)) < 0 || back->n != m->n ||
		    back->first[back->n] != m->first[m->n])
			abort();
		for (uint32_t k = 0; k < m->n; k++)
			if (strcmp(back->shards[k].path, m->shards[k].path) ||
			    memcmp(back->shards[k].id, m->shards[k].id, DPK_IDENTITY_SIZE))
				abort();
		dpkset_manifest_destroy(back);
		free(text);
	}
	dpkset_manifest_destroy(m);
	return 0;
}
