/* set_fixture.c - see set_fixture.h. */
#include "tests/set_fixture.h"

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "formats/dpkset.h"

static const char *const caption_name[] = { "caption" };

void setfx_shard(const char *dir, const char *name, unsigned n, unsigned base,
		 const struct setfx *o, uint8_t id[DPK_IDENTITY_SIZE])
{
	static const struct setfx none = { .big_at = ~0u };
	char p[128], err[256];
	struct dpk_writer *w;
	struct dpk *d;
	uint8_t buf[64], cap;

	o = o ? o : &none;
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	assert_int_equal(dpk_writer_create(p, DPK_WRITE_NO_SYNC, &w), 0);
	if (o->nclasses)
		assert_int_equal(dpk_writer_set_classes(w, o->classes, o->nclasses), 0);
	if (o->caption)
		assert_int_equal(dpk_writer_set_aux(w, caption_name, 1, 0), 0);
	for (unsigned i = 0; i < n; i++) {
		int big = i == o->big_at;
		memset(buf, (int)(base + i), sizeof(buf));
		cap = (uint8_t)(base + i);
		struct dpk_record r = { .kind = DPK_KIND_RAW, .data = buf, .length = big ? 64 : 16,
					.label = o->nclasses ? (base + i) % o->nclasses : base + i,
					.shape = { big ? 8 : 4, big ? 8 : 4 }, .ndim = 2 };
		if (o->caption) {
			r.aux[0] = &cap;
			r.aux_len[0] = 1;
		}
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	assert_int_equal(dpk_open(p, 0, &d, err, sizeof(err)), 0);
	dpk_identity(d, id);
	dpk_close(d);
}

void setfx_manifest(const char *dir, const char *name, unsigned k, const char *const *names,
		    const unsigned *counts, uint8_t (*ids)[DPK_IDENTITY_SIZE])
{
	char p[128], hex[33];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fprintf(f, "dpkset 1\n");
	for (unsigned i = 0; i < k; i++) {
		dpkset_hex(ids[i], hex);
		fprintf(f, "%u %s %s\n", counts[i], hex, names[i]);
	}
	fprintf(f, "end %u\n", k);
	assert_int_equal(fclose(f), 0);
}

int setfx_open(const char *dir, const char *name)
{
	char p[128];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}
