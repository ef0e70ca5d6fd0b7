/* test_dpkset.c - sets of .dpk shards (formats/dpkset.h): the manifest parser, table-driven over
 * every malformed line with each bound at its limit and one past; the map from a global index to
 * (shard, local index); and real sets opened by dpk_open: records read across shards, the set's
 * identity rules, and shards that disagree with their lines refused by name. */
#include "formats/dpk.h"
#include "formats/dpkset.h"
#include "tests/tmpdir.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#define ID "0123456789abcdef0123456789abcdef"
#define ID2 "fedcba9876543210fedcba9876543210"

struct row {
	const char *what;
	const char *text;   /* NULL: built by the case */
	int ret;            /* 0 or the -errno */
	const char *msg;    /* a part of the message (with "m line N:") */
};

static const struct row rows[] = {
	{ "one shard", "dpkset 1\n3 " ID " a.dpk\nend 1\n", 0, NULL },
	{ "two, a sub-folder and a space", "dpkset 1\n3 " ID " a.dpk\n1 " ID2 " sub/b c.dpk\nend 2\n",
	  0, NULL },
	{ "one identity twice", "dpkset 1\n3 " ID " a.dpk\n3 " ID " b.dpk\nend 2\n", 0, NULL },
	{ "empty file", "", -EBADMSG, "m line 1: empty file" },
	{ "not a manifest", "DPKv\n", -EBADMSG, "m line 1: not a dpk set manifest" },
	{ "another version", "dpkset 2\nend 0\n", -EPROTO, "m line 1: manifest version 2" },
	{ "version not a number", "dpkset x\n", -EBADMSG, "line 1: not a dpk set" },
	{ "empty set", "dpkset 1\nend 0\n", -EBADMSG, "m line 2: an empty set" },
	{ "cut before end", "dpkset 1\n3 " ID " a.dpk\n", -EBADMSG, "no 'end N' line" },
	{ "cut mid-line", "dpkset 1\n3 " ID " a.d", -EBADMSG, "m line 2: the last line has no end" },
	{ "cut in the end line", "dpkset 1\n3 " ID " a.dpk\nend 1", -EBADMSG, "line 3: the last line" },
	{ "end count wrong", "dpkset 1\n3 " ID " a.dpk\nend 2\n", -EBADMSG,
	  "m line 3: 'end 2', but 1 shard lines" },
	{ "text after end", "dpkset 1\n3 " ID " a.dpk\nend 1\nx\n", -EBADMSG, "line 4: text after" },
	{ "duplicate line", "dpkset 1\n3 " ID " a.dpk\n1 " ID2 " b.dpk\n3 " ID " a.dpk\nend 3\n",
	  -EINVAL, "m line 4: shard a.dpk is named on line 2 already" },
	{ "count zero", "dpkset 1\n0 " ID " a.dpk\nend 1\n", -EINVAL, "line 2: shard a.dpk has no" },
	{ "count negative", "dpkset 1\n-1 " ID " a.dpk\nend 1\n", -EBADMSG, "line 2: expected" },
	{ "count with a sign", "dpkset 1\n+1 " ID " a.dpk\nend 1\n", -EBADMSG, "line 2: expected" },
	{ "count overflows", "dpkset 1\n99999999999999999999 " ID " a.dpk\nend 1\n", -EBADMSG,
	  "line 2: expected" },
	{ "set too large", "dpkset 1\n4611686018427387904 " ID " a.dpk\n1 " ID2 " b\nend 2\n",
	  -E2BIG, "line 3: more than 4611686018427387904 samples" },
	{ "no identity", "dpkset 1\n3 a.dpk\nend 1\n", -EBADMSG, "line 2: expected an identity" },
	{ "identity upper case", "dpkset 1\n3 0123456789ABCDEF0123456789abcdef a\nend 1\n", -EBADMSG,
	  "line 2: identity: 'AB' is not" },
	{ "identity short", "dpkset 1\n3 0123456789abcdef0123456789abcde a\nend 1\n", -EBADMSG,
	  "line 2: expected an identity" },
	{ "no path", "dpkset 1\n3 " ID " \nend 1\n", -EINVAL, "line 2: no shard path" },
	{ "absolute path", "dpkset 1\n3 " ID " /etc/a.dpk\nend 1\n", -EINVAL, "is absolute" },
	{ "path up", "dpkset 1\n3 " ID " ../a.dpk\nend 1\n", -EINVAL, "has a '..' component" },
	{ "path up inside", "dpkset 1\n3 " ID " a/../../b\nend 1\n", -EINVAL, "'..' component" },
	{ "dots in a name", "dpkset 1\n3 " ID " a..b/..c\nend 1\n", 0, NULL },
	{ "carriage return", "dpkset 1\n3 " ID " a.dpk\r\nend 1\n", -EINVAL, "control character 0x0d" },
	{ "NUL byte", NULL, -EBADMSG, "line 2: a NUL byte" },
};

static void test_dpkset_parse_table(void **state)
{
	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		const struct row *w = &rows[r];
		char text[256], err[512] = "";
		size_t len;
		struct dpkset_manifest *m = NULL;
		if (w->text) {
			len = strlen(w->text);
			memcpy(text, w->text, len);
		} else {  /* NUL byte in a path */
			len = (size_t)snprintf(text, sizeof(text), "dpkset 1\n3 %s a.dpk\nend 1\n", ID);
			text[9 + 2 + 32 + 2] = '\0';
		}
		int ret = dpkset_parse(text, len, "m", &m, err, sizeof(err));
		printf("# %s: %d %s\n", w->what, ret, err);
		assert_int_equal(ret, w->ret);
		if (w->ret) {
			assert_null(m);
			assert_non_null(strstr(err, w->msg));
		} else {
			assert_non_null(m);
			assert_true(m->n >= 1);
		}
		dpkset_manifest_destroy(m);
	}
}

/* A manifest of @n shards whose last path is @plen bytes, or whose last line is padded to @llen
 * bytes (the path takes the rest). */
static char *manifest(unsigned n, size_t plen, size_t *len)
{
	size_t cap = (size_t)n * 64 + plen + 64;
	char *t = malloc(cap);
	size_t p = (size_t)sprintf(t, "dpkset 1\n");

	assert_non_null(t);
	for (unsigned k = 0; k + 1 < n; k++)
		p += (size_t)sprintf(t + p, "1 " ID " s%u\n", k);
	p += (size_t)sprintf(t + p, "1 " ID " ");
	memset(t + p, 'p', plen);
	p += plen;
	p += (size_t)sprintf(t + p, "\nend %u\n", n);
	*len = p;
	return t;
}

static void test_dpkset_parse_bounds(void **state)
{
	struct dpkset_manifest *m;
	char err[2048];
	size_t len;
	char *t;

	(void)state;
	/* the path at DPKSET_PATH_MAX bytes, and one past */
	t = manifest(1, DPKSET_PATH_MAX, &len);
	assert_int_equal(dpkset_parse(t, len, "m", &m, err, sizeof(err)), 0);
	assert_int_equal(strlen(m->shards[0].path), DPKSET_PATH_MAX);
	dpkset_manifest_destroy(m);
	free(t);
	t = manifest(1, DPKSET_PATH_MAX + 1, &len);
	assert_int_equal(dpkset_parse(t, len, "m", &m, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "m line 2: a shard path of 1025 bytes, above the limit of 1024"));
	free(t);
	/* a line of DPKSET_LINE_MAX bytes passes the line bound (its path is then too long), one
	 * byte more does not */
	size_t head = 2 + 2 * DPK_IDENTITY_SIZE + 1;  /* "1 " ID " " */
	t = manifest(1, DPKSET_LINE_MAX - head, &len);
	assert_int_equal(dpkset_parse(t, len, "m", &m, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "a shard path of"));
	free(t);
	t = manifest(1, DPKSET_LINE_MAX - head + 1, &len);
	assert_int_equal(dpkset_parse(t, len, "m", &m, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "m line 2: a line of 1089 bytes, above the limit of 1088"));
	free(t);
	/* DPKSET_SHARDS_MAX shards, and one more */
	t = manifest(DPKSET_SHARDS_MAX, 1, &len);
	assert_int_equal(dpkset_parse(t, len, "m", &m, err, sizeof(err)), 0);
	assert_int_equal(m->n, DPKSET_SHARDS_MAX);
	assert_int_equal(m->first[m->n], DPKSET_SHARDS_MAX);
	dpkset_manifest_destroy(m);
	free(t);
	t = manifest(DPKSET_SHARDS_MAX + 1, 1, &len);
	assert_int_equal(dpkset_parse(t, len, "m", &m, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "line 65538: more than 65536 shards"));
	free(t);
	/* the whole text above its bound is refused before it is read */
	assert_int_equal(dpkset_parse("", DPKSET_FILE_MAX + 1, "m", &m, err, sizeof(err)), -E2BIG);
}

/* Global index -> shard, at every boundary: first[k] - 1, first[k], the last sample. */
static void test_dpkset_find_boundaries(void **state)
{
	static const uint64_t sets[][6] = {  /* counts, 0-terminated */
		{ 1 }, { 5 }, { 1, 1, 1 }, { 3, 1, 4, 1, 5 }, { 7, 2 },
	};
	(void)state;
	for (size_t s = 0; s < sizeof(sets) / sizeof(sets[0]); s++) {
		struct dpkset_manifest *m = dpkset_manifest_create();
		uint8_t id[DPK_IDENTITY_SIZE] = { 0 };
		char name[16], err[128];
		for (unsigned k = 0; k < 6 && sets[s][k]; k++) {
			snprintf(name, sizeof(name), "s%u", k);
			id[0] = (uint8_t)k;
			assert_int_equal(dpkset_manifest_add(m, name, sets[s][k], id, err, sizeof(err)), 0);
		}
		for (uint32_t k = 0; k < m->n; k++) {
			assert_int_equal(dpkset_find(m, m->first[k]), k);
			assert_int_equal(dpkset_find(m, m->first[k + 1] - 1), k);
			if (k)
				assert_int_equal(dpkset_find(m, m->first[k] - 1), k - 1);
		}
		uint64_t total = 0;
		for (uint64_t i = 0; i < m->first[m->n]; i++) {  /* every index, against a walk */
			uint32_t k = 0;
			while (i >= m->first[k + 1])
				k++;
			assert_int_equal(dpkset_find(m, i), k);
			total++;
		}
		assert_int_equal(total, m->first[m->n]);
		/* the same path again is refused, naming its line */
		assert_int_equal(dpkset_manifest_add(m, "s0", 1, id, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "shard s0 is in the set already (line 2)"));
		dpkset_manifest_destroy(m);
	}
}

/* ---- real sets ---- */

static char dir[64];

static int setup(void **state)
{
	(void)state;
	assert_int_equal(tmpdir_create(dir, sizeof(dir), "test_dpkset"), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

/* Shard @name: @n raw 4x4 records, record i's bytes all (base + i), label base + i. */
static void shard(const char *name, unsigned n, unsigned base, uint8_t id[DPK_IDENTITY_SIZE])
{
	char p[128], err[256];
	struct dpk_writer *w;
	struct dpk *d;
	uint8_t buf[16];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	assert_int_equal(dpk_writer_create(p, DPK_WRITE_NO_SYNC, &w), 0);
	for (unsigned i = 0; i < n; i++) {
		memset(buf, (int)(base + i), sizeof(buf));
		struct dpk_record r = { .kind = DPK_KIND_RAW, .label = base + i, .data = buf,
					.length = sizeof(buf), .shape = { 4, 4 }, .ndim = 2 };
		assert_int_equal(dpk_writer_add(w, &r), 0);
	}
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	assert_int_equal(dpk_open(p, 0, &d, err, sizeof(err)), 0);
	dpk_identity(d, id);
	dpk_close(d);
}

static void put(const char *name, const char *text)
{
	char p[128];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Open @name (in dir) as a set; its return, @err filled. */
static int open_set(const char *name, unsigned flags, struct dpk **d, char *err, size_t len)
{
	char p[128];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return dpk_open(p, flags, d, err, len);
}

static void test_dpkset_open_reads_across_shards(void **state)
{
	uint8_t a[DPK_IDENTITY_SIZE], b[DPK_IDENTITY_SIZE], c[DPK_IDENTITY_SIZE];
	char ha[33], hb[33], hc[33], text[512], err[512];
	struct dpk *d;
	uint8_t buf[16], id1[DPK_IDENTITY_SIZE], id2[DPK_IDENTITY_SIZE];

	(void)state;
	shard("a.dpk", 3, 0, a);
	shard("b.dpk", 1, 3, b);
	shard("c.dpk", 4, 4, c);
	dpkset_hex(a, ha), dpkset_hex(b, hb), dpkset_hex(c, hc);
	snprintf(text, sizeof(text), "dpkset 1\n3 %s a.dpk\n1 %s b.dpk\n4 %s c.dpk\nend 3\n", ha, hb,
		 hc);
	put("s.dpks", text);
	for (unsigned flags = 0; flags <= DPK_OPEN_MAP; flags += DPK_OPEN_MAP) {
		int ret = open_set("s.dpks", flags, &d, err, sizeof(err));
		printf("# flags %u: %d %s\n", flags, ret, err);
		assert_int_equal(ret, 0);
		assert_int_equal(dpk_count(d), 8);
		assert_int_equal(dpk_shard_count(d), 3);
		assert_string_equal(dpk_shard_path(d, 2), "c.dpk");
		assert_int_equal(dpk_shard_first(d, 2), 4);
		assert_null(dpk_entry_get(d, 0));
		for (uint64_t i = 0; i < 8; i++) {  /* sample i is record i of the concatenation */
			struct dpk_entry e;
			assert_int_equal(dpk_entry_load(d, i, &e, err, sizeof(err)), 0);
			assert_int_equal(e.label, (int64_t)i);
			assert_int_equal(dpk_read_entry(d, &e, buf, sizeof(buf)), 16);
			for (int k = 0; k < 16; k++)
				assert_int_equal(buf[k], i);
			assert_int_equal(dpk_entry_fd(d, &e), dpk_fd(dpk_shard(d, e.reserved)));
		}
		struct dpk_entry e;
		assert_int_equal(dpk_entry_load(d, 8, &e, err, sizeof(err)), -ERANGE);
		assert_int_equal(dpk_header_get(d)->count, 8);
		assert_int_equal(dpk_header_get(d)->data_size, 8 * 16);
		dpk_identity(d, id1);
		dpk_close(d);
	}
	/* one shard: the set is its file (old tokens fit); order swapped: another identity */
	snprintf(text, sizeof(text), "dpkset 1\n3 %s a.dpk\nend 1\n", ha);
	put("one.dpks", text);
	assert_int_equal(open_set("one.dpks", 0, &d, err, sizeof(err)), 0);
	dpk_identity(d, id2);
	assert_memory_equal(id2, a, DPK_IDENTITY_SIZE);
	dpk_close(d);
	snprintf(text, sizeof(text), "dpkset 1\n1 %s b.dpk\n3 %s a.dpk\n4 %s c.dpk\nend 3\n", hb, ha,
		 hc);
	put("swap.dpks", text);
	assert_int_equal(open_set("swap.dpks", 0, &d, err, sizeof(err)), 0);
	dpk_identity(d, id2);
	assert_memory_not_equal(id1, id2, DPK_IDENTITY_SIZE);
	dpk_close(d);
	/* one shard more: another identity */
	snprintf(text, sizeof(text), "dpkset 1\n3 %s a.dpk\n1 %s b.dpk\nend 2\n", ha, hb);
	put("two.dpks", text);
	assert_int_equal(open_set("two.dpks", 0, &d, err, sizeof(err)), 0);
	dpk_identity(d, id2);
	assert_memory_not_equal(id1, id2, DPK_IDENTITY_SIZE);
	dpk_close(d);
}

static void test_dpkset_open_refuses_shards_that_disagree(void **state)
{
	uint8_t a[DPK_IDENTITY_SIZE], b[DPK_IDENTITY_SIZE];
	char ha[33], hb[33], text[512], err[512];
	struct dpk *d = NULL;
	static const struct {
		const char *fmt;        /* %s: a's hex, then b's */
		int ret;
		const char *msg;
	} bad[] = {
		{ "dpkset 1\n3 %s a.dpk\n1 %s gone.dpk\nend 2\n", -ENOENT,
		  "s.dpks line 3: shard gone.dpk: No such file" },
		{ "dpkset 1\n4 %s a.dpk\n1 %s b.dpk\nend 2\n", -EBADMSG,
		  "s.dpks line 2: shard a.dpk has 3 samples; the manifest says 4" },
		{ "dpkset 1\n3 %s b.dpk\n1 %s a.dpk\nend 2\n", -EBADMSG,
		  "s.dpks line 2: shard b.dpk has 1 samples; the manifest says 3" },
		{ "dpkset 1\n3 %.31s0 a.dpk\n1 %s b.dpk\nend 2\n", -EBADMSG,
		  "s.dpks line 2: shard a.dpk has identity" },
		{ "dpkset 1\n3 %s a.dpk\n1 %s s.dpks\nend 2\n", -EBADMSG,
		  "s.dpks line 3: shard s.dpks is a manifest itself" },
	};

	(void)state;
	shard("a.dpk", 3, 0, a);
	shard("b.dpk", 1, 3, b);
	dpkset_hex(a, ha), dpkset_hex(b, hb);
	if (ha[31] == '0')  /* the identity row changes the last digit */
		ha[31] = '1';
	/* A refused set closes only what it opened: fd 0 (a set's unopened descriptors were once 0
	 * from calloc, and a daemon's refusal closed whichever connection held fd 0 next). */
	struct stat st0, st1;
	if (fcntl(0, F_GETFD) < 0)
		assert_int_equal(open("/dev/null", O_RDONLY), 0);
	assert_int_equal(fstat(0, &st0), 0);
	for (size_t r = 0; r < sizeof(bad) / sizeof(bad[0]); r++) {
		snprintf(text, sizeof(text), bad[r].fmt, ha, hb);
		put("s.dpks", text);
		for (unsigned flags = 0; flags <= DPK_OPEN_MAP; flags += DPK_OPEN_MAP) {
			int ret = open_set("s.dpks", flags, &d, err, sizeof(err));
			printf("# %zu: %d %s\n", r, ret, err);
			assert_int_equal(ret, bad[r].ret);
			assert_null(d);
			assert_non_null(strstr(err, bad[r].msg));
			assert_int_equal(fstat(0, &st1), 0);
			assert_int_equal(st1.st_ino, st0.st_ino);
		}
	}
	/* another class table than the first shard's */
	char p[128];
	struct dpk_writer *w;
	const char *names[] = { "cat" };
	uint8_t buf[16] = { 0 }, c[DPK_IDENTITY_SIZE];
	char hc[33];
	snprintf(p, sizeof(p), "%s/c.dpk", dir);
	assert_int_equal(dpk_writer_create(p, DPK_WRITE_NO_SYNC, &w), 0);
	assert_int_equal(dpk_writer_set_classes(w, names, 1), 0);
	struct dpk_record rec = { .kind = DPK_KIND_RAW, .data = buf, .length = 16,
				  .shape = { 4, 4 }, .ndim = 2 };
	assert_int_equal(dpk_writer_add(w, &rec), 0);
	assert_int_equal(dpk_writer_finish(w), 0);
	dpk_writer_destroy(w);
	assert_int_equal(dpk_open(p, 0, &d, err, sizeof(err)), 0);
	dpk_identity(d, c);
	dpk_close(d);
	dpkset_hex(c, hc);
	dpkset_hex(a, ha);
	snprintf(text, sizeof(text), "dpkset 1\n3 %s a.dpk\n1 %s c.dpk\nend 2\n", ha, hc);
	put("s.dpks", text);
	assert_int_equal(open_set("s.dpks", 0, &d, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "s.dpks line 3: shard c.dpk has other class names than shard a.dpk"));
}

/* 400 shards mapped, index and data: 800 guarded mappings (the guard had 256 slots once, and a
 * set past them fell back to copies and reads), and 400 fds, below the usual soft limit of 1024. */
static void test_dpkset_open_many_shards_all_mapped(void **state)
{
	enum { SHARDS = 400 };
	uint8_t id[DPK_IDENTITY_SIZE];
	char hex[33], name[32], err[512];
	struct dpk *d;
	size_t cap = (size_t)SHARDS * 64 + 64, p;
	char *text = malloc(cap);

	(void)state;
	assert_non_null(text);
	p = (size_t)snprintf(text, cap, "dpkset 1\n");
	for (unsigned k = 0; k < SHARDS; k++) {
		snprintf(name, sizeof(name), "m%03u.dpk", k);
		shard(name, 1, k % 200, id);
		dpkset_hex(id, hex);
		p += (size_t)snprintf(text + p, cap - p, "1 %s %s\n", hex, name);
	}
	snprintf(text + p, cap - p, "end %u\n", SHARDS);
	put("many.dpks", text);
	free(text);
	assert_int_equal(open_set("many.dpks", DPK_OPEN_MAP | DPK_OPEN_MAP_DATA, &d, err, sizeof(err)),
			 0);
	assert_true(dpk_mapped(d));
	assert_true(dpk_data_mapped(d));
	for (uint64_t i = 0; i < SHARDS; i++) {
		struct dpk_entry e;
		uint8_t buf[16];
		assert_int_equal(dpk_entry_load(d, i, &e, err, sizeof(err)), 0);
		assert_int_equal(e.reserved, i);
		assert_int_equal(dpk_record_copy(d, &e, buf, sizeof(buf)), 16);
		assert_int_equal(buf[0], i % 200);
		assert_int_equal(dpk_record_check(&e, buf), 0);
	}
	dpk_close(d);
}

static void test_dpkset_write_round_trip(void **state)
{
	struct dpkset_manifest *m = dpkset_manifest_create(), *back;
	uint8_t id[DPK_IDENTITY_SIZE];
	char p[128], err[256], text[4096];

	(void)state;
	for (unsigned k = 0; k < 3; k++) {
		memset(id, (int)k * 17, sizeof(id));
		snprintf(p, sizeof(p), "d/s %u.dpk", k);
		assert_int_equal(dpkset_manifest_add(m, p, k + 1, id, err, sizeof(err)), 0);
	}
	snprintf(p, sizeof(p), "%s/w.dpks", dir);
	assert_int_equal(dpkset_write(p, m), 0);
	FILE *f = fopen(p, "r");
	size_t n = fread(text, 1, sizeof(text), f);
	fclose(f);
	assert_int_equal(dpkset_parse(text, n, "w", &back, err, sizeof(err)), 0);
	assert_int_equal(back->n, 3);
	for (unsigned k = 0; k < 3; k++) {
		assert_string_equal(back->shards[k].path, m->shards[k].path);
		assert_memory_equal(back->shards[k].id, m->shards[k].id, DPK_IDENTITY_SIZE);
		assert_int_equal(back->first[k + 1], m->first[k + 1]);
	}
	dpkset_manifest_destroy(back);
	dpkset_manifest_destroy(m);
	/* nothing is written for an empty set */
	m = dpkset_manifest_create();
	snprintf(p, sizeof(p), "%s/empty.dpks", dir);
	assert_int_equal(dpkset_write(p, m), -EINVAL);
	assert_int_equal(access(p, F_OK), -1);
	dpkset_manifest_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dpkset_parse_table),
		cmocka_unit_test(test_dpkset_parse_bounds),
		cmocka_unit_test(test_dpkset_find_boundaries),
		cmocka_unit_test_setup_teardown(test_dpkset_open_reads_across_shards, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpkset_open_refuses_shards_that_disagree, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dpkset_open_many_shards_all_mapped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dpkset_write_round_trip, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
