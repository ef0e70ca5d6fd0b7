/* test_tarx.c - tarx against archives written by GNU tar (ustar, gnu, pax) and against
 * hand-built corrupt ones. pread is wrapped so that tests can inject I/O errors and short reads
 * into the reader. Archives written by tar live in a mkdtemp directory removed at the end;
 * hand-built ones live in memfds. Both kinds are tables (tar_cases, arc_cases): a row is an
 * archive and what tarx must give back, and each row runs as a cmocka case of its own name. */
/* link: -Wl,--wrap=pread */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/tarx.h"

/* ---- pread fault injection ---- */

enum { PREAD_REAL, PREAD_SHORT, PREAD_EIO, PREAD_EINTR };
static int pread_mode = PREAD_REAL;
static int pread_fail_after;  /* PREAD_EIO: calls that succeed first */

ssize_t __real_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off);

ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off)
{
	static int eintr_toggle;

	switch (pread_mode) {
	case PREAD_SHORT:
		/* At most 7 bytes a call: every loop in the reader must resume correctly. */
		return __real_pread(fd, buf, n < 7 ? n : 7, off);
	case PREAD_EIO:
		if (pread_fail_after-- > 0)
			return __real_pread(fd, buf, n, off);
		errno = EIO;
		return -1;
	case PREAD_EINTR:
		if (eintr_toggle ^= 1) {
			errno = EINTR;
			return -1;
		}
		return __real_pread(fd, buf, n, off);
	default:
		return __real_pread(fd, buf, n, off);
	}
}

/* ---- helpers ---- */

static char tmpdir[256];
static int have_gnu_tar;

#define assert_err_has(err, needle) do {					\
	if (!strstr((err), (needle)))						\
		fail_msg("err \"%s\" lacks \"%s\"", (err), (needle));		\
} while (0)

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	assert_true(n > 0 && (size_t)n < sizeof(cmd));
	return system(cmd);
}

/* File content is a function of its name, so reading a member back checks its offset. */
static unsigned char pattern(const char *name, uint64_t j)
{
	unsigned seed = 0;

	for (const char *p = name; *p; p++)
		seed = seed * 31 + (unsigned char)*p;
	return (unsigned char)(seed + j * 131 + (j >> 8));
}

static void mkparents(const char *path)
{
	char buf[4096];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0)
			assert_int_equal(errno, EEXIST);
		*p = '/';
	}
}

/* Create @rel under the source dir with @size pattern bytes. */
static void mkfile(const char *rel, uint64_t size)
{
	char path[4096];
	unsigned char buf[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/src/%s", tmpdir, rel);
	mkparents(path);
	f = fopen(path, "wb");
	assert_non_null(f);
	for (uint64_t j = 0; j < size;) {
		size_t n = 0;

		for (; n < sizeof(buf) && j < size; n++, j++)
			buf[n] = pattern(rel, j);
		assert_int_equal(fwrite(buf, 1, n, f), n);
	}
	assert_int_equal(fclose(f), 0);
}

static void mkdir_src(const char *rel)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/src/%s/", tmpdir, rel);
	mkparents(path);
}

/* Run GNU tar in the source dir on the listed paths (no recursion, so order is ours). */
static void tar_create(const char *archive, const char *opts, const char *files)
{
	if (!have_gnu_tar)
		skip();
	assert_int_equal(sh("cd '%s/src' && tar %s -b1 --no-recursion -cf '%s/%s' %s",
			    tmpdir, opts, tmpdir, archive, files), 0);
}

static int open_archive(const char *archive, uint64_t *size)
{
	char path[4096];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, archive);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	*size = (uint64_t)st.st_size;
	return fd;
}

static struct tarx it;
static struct tarx_member mem;

/* Iterate to the end, checking names, sizes and content against what mkfile wrote. */
static void expect_members(int fd, uint64_t size, const char *const *names, int n)
{
	unsigned char buf[4096];

	assert_int_equal(tarx_init(&it, fd, size), 0);
	for (int i = 0; i < n; i++) {
		int ret = tarx_next(&it, &mem);

		if (ret != 1)
			fail_msg("member %d (%s): tarx_next = %d: %s", i, names[i], ret, it.err);
		assert_string_equal(mem.name, names[i]);
		assert_true(mem.offset % 512 == 0);
		assert_true(mem.offset + mem.size <= size);
		for (uint64_t j = 0; j < mem.size;) {
			size_t k = mem.size - j < sizeof(buf) ? (size_t)(mem.size - j) : sizeof(buf);

			assert_int_equal(pread(fd, buf, k, (off_t)(mem.offset + j)), (ssize_t)k);
			for (size_t q = 0; q < k; q++, j++)
				if (buf[q] != pattern(names[i], j))
					fail_msg("%s: byte %" PRIu64 " differs", names[i], j);
		}
	}
	assert_int_equal(tarx_next(&it, &mem), 0);
	assert_int_equal(tarx_next(&it, &mem), 0);  /* the end stays the end */
}

/* ---- hand-built archives ---- */

static unsigned char arc[64 * 1024];
static size_t arclen;

static void hdr_sum(unsigned char *h)
{
	unsigned sum = 0;

	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);  /* "NNNNNN\0" then the space: as GNU */
	h[155] = ' ';
}

/* Append a ustar header; returns it for tweaking (call hdr_sum again after). */
static unsigned char *add_hdr(const char *name, uint64_t size, char type)
{
	unsigned char *h = arc + arclen;

	assert_true(arclen + 512 <= sizeof(arc));
	memset(h, 0, 512);
	strncpy((char *)h, name, 100);
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0000000", 8);
	memcpy(h + 116, "0000000", 8);
	snprintf((char *)h + 124, 12, "%011" PRIo64, size);
	memcpy(h + 136, "00000000000", 12);
	h[156] = (unsigned char)type;
	memcpy(h + 257, "ustar\0" "00", 8);
	hdr_sum(h);
	arclen += 512;
	return h;
}

/* Append @n data bytes (pattern of @name) and the padding. */
static void add_data(const char *name, size_t n)
{
	assert_true(arclen + n + 512 <= sizeof(arc));
	for (size_t j = 0; j < n; j++)
		arc[arclen + j] = pattern(name, j);
	arclen += n;
	while (arclen % 512)
		arc[arclen++] = 0;
}

static void add_raw(const void *p, size_t n)
{
	assert_true(arclen + n + 512 <= sizeof(arc));
	memcpy(arc + arclen, p, n);
	arclen += n;
	while (arclen % 512)
		arc[arclen++] = 0;
}

static void add_file(const char *name, size_t n)
{
	add_hdr(name, n, '0');
	add_data(name, n);
}

static void add_end(void)
{
	assert_true(arclen + 1024 <= sizeof(arc));
	memset(arc + arclen, 0, 1024);
	arclen += 1024;
}

/* "LEN key=value\n" with LEN counting itself. */
static size_t pax_rec(char *out, size_t cap, const char *key, const char *val)
{
	size_t body = strlen(key) + strlen(val) + 3, len = body;  /* ' ', '=', '\n' */
	int n;

	/* The length's own digits count: iterate to the fixed point. */
	for (int i = 0; i < 3; i++)
		len = body + (size_t)snprintf(NULL, 0, "%zu", len);
	n = snprintf(out, cap, "%zu %s=%s\n", len, key, val);
	assert_int_equal((size_t)n, len);
	return len;
}

static void add_pax(const char *recs, size_t n)
{
	add_hdr("PaxHeaders/x", n, 'x');
	add_raw(recs, n);
}

/* The archive so far in a memfd of exactly @len bytes (arclen when 0). */
static int arc_fd(size_t len)
{
	int fd = memfd_create("tarx", MFD_CLOEXEC);

	assert_true(fd >= 0);
	if (len == 0)
		len = arclen;
	assert_int_equal(write(fd, arc, len), (ssize_t)len);
	return fd;
}

static int reset(void **state)
{
	(void)state;
	arclen = 0;
	pread_mode = PREAD_REAL;
	memset(&mem, 0, sizeof(mem));
	return 0;
}

/* ---- archives written by GNU tar: one table row each ---- */

/* Names longer than a header holds, made by long_names_init. */
static char split[172];  /* 171 bytes: tar splits it into prefix "ppp..." and name "nnn..." */
static char n150[151], n300[301], n200[201], n400[401];

static void long_names_init(void)
{
	memset(split, 'p', 80);
	split[80] = '/';
	memset(split + 81, 'n', 90);
	memset(n150, 'g', 150);
	memset(n300, 'a', 120);
	n300[120] = '/';
	memset(n300 + 121, 'b', 120);
	n300[241] = '/';
	memset(n300 + 242, 'c', 58);
	memset(n200, 'x', 200);
	for (int i = 0; i < 400; i++)
		n400[i] = (i % 101 == 100) ? '/' : (char)('k' + i / 101);
}

/* A path given to tar: a file of @size pattern bytes, or a directory when @size < 0. */
struct tar_entry {
	const char *path;
	int64_t size;
};

/* An archive GNU tar writes from @entries (in that order, no recursion) and what shows it is the
 * archive the row means; tarx must give back every file, in order, with its content. */
struct tar_case {
	const char *name;               /* the case, as cmocka prints it */
	const char *opts;               /* tar's format options */
	struct tar_entry entries[7];    /* NULL path ends */
	char first_type;                /* typeflag of the first header; 0: not checked */
	void (*check)(int fd);          /* more about the archive itself, or NULL */
};

/* The split name uses the prefix field. */
static void check_split_in_prefix(int fd)
{
	unsigned char h[512];
	uint64_t off = 0;
	int found = 0;

	for (int i = 0; i < 6 && !found; i++) {
		uint64_t sz;

		assert_int_equal(pread(fd, h, 512, (off_t)off), 512);
		sz = strtoull((char *)h + 124, NULL, 8);
		if (h[156] == '0' && h[345]) {
			assert_memory_equal(h + 345, split, 80);
			found = 1;
		}
		off += 512 + (sz + 511) / 512 * 512;
	}
	assert_true(found);
}

static const struct tar_case tar_cases[] = {
	{ "test_tarx_ustar_members", "--format=ustar",
	  { { "a.txt", 6 }, { "sub", -1 }, { "empty.bin", 0 }, { "sub/big.bin", 70000 },
	    { split, 513 }, { "sub/one", 1 } },
	  .check = check_split_in_prefix },
	/* The test is about GNU long-name records. */
	{ "test_tarx_gnu_long_names", "--format=gnu",
	  { { n150, 1000 }, { n300, 512 }, { "short", 3 } }, .first_type = 'L' },
	{ "test_tarx_pax_long_names", "--format=pax",
	  { { n200, 4097 }, { "pdir", -1 }, { "pdir/plain", 10 }, { n400, 0 } }, .first_type = 'x' },
	{ "test_tarx_pax_global_header_ignored", "--format=pax --pax-option=comment=hello",
	  { { "g1", 100 }, { "g2", 0 } }, .first_type = 'g' },
};

static void test_tarx_tar_case(void **state)
{
	const struct tar_case *c = *state;
	const char *names[7];
	char files[2048];
	size_t len = 0;
	uint64_t size;
	int n = 0, fd;

	for (const struct tar_entry *e = c->entries; e->path; e++) {
		if (e->size < 0) {
			mkdir_src(e->path);
		} else {
			mkfile(e->path, (uint64_t)e->size);
			names[n++] = e->path;
		}
		len += (size_t)snprintf(files + len, sizeof(files) - len, " %s", e->path);
		assert_true(len < sizeof(files));
	}
	tar_create("case.tar", c->opts, files);
	fd = open_archive("case.tar", &size);
	if (c->first_type) {
		unsigned char h[512];

		assert_int_equal(pread(fd, h, 512, 0), 512);
		assert_int_equal(h[156], c->first_type);
	}
	if (c->check)
		c->check(fd);
	expect_members(fd, size, names, n);
	close(fd);
}

static void test_tarx_dirs_links_fifo_skipped(void **state)
{
	static const char *names[] = { "d/f1", "d/f2" };
	static const char *const formats[] = { "--format=ustar", "--format=gnu", "--format=pax" };
	char path[512];
	uint64_t size;

	(void)state;
	mkfile("d/f1", 700);
	mkdir_src("d/e");
	mkfile("d/f2", 1);
	snprintf(path, sizeof(path), "%s/src/d", tmpdir);
	assert_int_equal(sh("cd '%s' && rm -f sym hard fifo && ln -s f1 sym && ln f1 hard && "
			    "mkfifo fifo", path), 0);
	for (int i = 0; i < 3; i++) {
		int fd;

		/* hard follows f1, so tar stores it as a link ('1'), not as data. */
		tar_create("mixed.tar", formats[i], "d d/f1 d/e d/sym d/hard d/fifo d/f2");
		fd = open_archive("mixed.tar", &size);
		expect_members(fd, size, names, 2);
		close(fd);
	}
}

static void test_tarx_empty_archive(void **state)
{
	uint64_t size;
	int fd;

	(void)state;
	tar_create("empty.tar", "", "-T /dev/null");
	fd = open_archive("empty.tar", &size);
	assert_true(size > 0);
	expect_members(fd, size, NULL, 0);
	close(fd);
	/* A zero-byte file is an archive that ends at a block boundary: empty, not corrupt. */
	fd = arc_fd(0);
	expect_members(fd, 0, NULL, 0);
	close(fd);
}

static void test_tarx_eof_at_block_boundary(void **state)
{
	static const char *names[] = { "b1", "b2" };
	char path[512];
	uint64_t size;
	int fd;

	(void)state;
	mkfile("b1", 10);
	mkfile("b2", 600);
	tar_create("eof.tar", "--format=ustar", "b1 b2");
	/* Drop the end-of-archive blocks: 512 + 512 + 512 + 1024 bytes of members remain. */
	snprintf(path, sizeof(path), "%s/eof.tar", tmpdir);
	assert_int_equal(truncate(path, 2560), 0);
	fd = open_archive("eof.tar", &size);
	assert_int_equal(size, 2560);
	expect_members(fd, size, names, 2);
	close(fd);
}

/* ---- hand-built archives: one table row each ---- */

/* What tarx_next must give for one member: its name and size, and where it sits when @offset is
 * not 0 (a member's data never starts at 0: its header comes first). */
struct want_member {
	const char *name;
	uint64_t size;
	uint64_t offset;
};

/* One hand-built archive and what tarx must make of it: the members in order, then @ret (0: the
 * end, which stays the end; < 0: the error, whose message holds each of @err and which comes
 * back unchanged on the next call). */
struct arc_case {
	const char *name;                       /* the case, as cmocka prints it */
	void (*build)(const struct arc_case *c); /* appends the archive to arc */
	const char *arg;                        /* for build: a field's bytes or a pax area */
	size_t arg_len;                         /* bytes of @arg; 0: strlen(arg) */
	size_t fd_len;                          /* bytes in the memfd; 0: all of arc */
	uint64_t size;                          /* tarx_init's size; 0: @fd_len */
	struct want_member members[3];          /* NULL name ends */
	int ret;
	const char *err[2];                     /* NULL: no check */
};

static size_t arg_len(const struct arc_case *c)
{
	return c->arg_len ? c->arg_len : strlen(c->arg);
}

static void build_padding_missing(const struct arc_case *c)
{
	(void)c;
	add_file("p", 100);
}

static void build_bad_checksum(const struct arc_case *c)
{
	unsigned char *h;

	(void)c;
	add_file("ok", 1);
	h = add_hdr("bad", 1, '0');
	h[0] ^= 1;  /* the stored sum no longer matches */
	add_data("bad", 1);
	add_end();
}

static void build_checksum_not_octal(const struct arc_case *c)
{
	unsigned char *h = add_hdr("bad", 0, '0');

	(void)c;
	memcpy(h + 148, "01x345\0 ", 8);
	add_end();
}

static void build_signed_checksum(const struct arc_case *c)
{
	unsigned char *h = add_hdr("caf\xc3\xa9", 5, '0');  /* bytes >= 0x80 make the sums differ */
	int sum = 0;

	(void)c;
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += (signed char)h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	add_data("caf\xc3\xa9", 5);
	add_end();
}

static void build_files_t(const struct arc_case *c)
{
	(void)c;
	add_file("t", 1000);
}

static void build_files_h_i(const struct arc_case *c)
{
	(void)c;
	add_file("h", 1);
	add_file("i", 1);
}

static void build_file_s(const struct arc_case *c)
{
	(void)c;
	add_file("s", 10);
}

/* A header whose 12-byte size field is @arg. */
static void build_size_field(const struct arc_case *c)
{
	unsigned char *h = add_hdr("g", 0, '0');

	memset(h + 124, 0, 12);
	memcpy(h + 124, c->arg, arg_len(c));
	hdr_sum(h);
	add_end();
}

static void build_size_octal_forms(const struct arc_case *c)
{
	unsigned char *h;

	(void)c;
	/* Leading spaces, space terminator, all twelve digits: all written by some tar. */
	h = add_hdr("a", 0, '0');
	memcpy(h + 124, "    144 \0\0\0\0", 12);
	hdr_sum(h);
	add_data("a", 100);
	h = add_hdr("b", 0, '0');
	memcpy(h + 124, "000000000012", 12);
	hdr_sum(h);
	add_data("b", 10);
	add_end();
}

static void build_size_base256(const struct arc_case *c)
{
	unsigned char *h = add_hdr("b256", 0, '0');

	(void)c;
	memset(h + 124, 0, 12);
	h[124] = 0x80;
	h[134] = 0x03;  /* 0x03e8 = 1000 */
	h[135] = 0xe8;
	hdr_sum(h);
	add_data("b256", 1000);
	add_end();
}

/* The pax area @arg before a one-byte member. */
static void build_pax_area(const struct arc_case *c)
{
	add_pax(c->arg, arg_len(c));
	add_file("f", 1);
	add_end();
}

/* A pax "size" record of value @arg before a one-byte member. */
static void build_pax_size(const struct arc_case *c)
{
	char recs[256];
	size_t n = pax_rec(recs, sizeof(recs), "size", c->arg);

	add_pax(recs, n);
	add_file("f", 1);
	add_end();
}

static void build_pax_override(const struct arc_case *c)
{
	char recs[2048], key[400], val[64];
	size_t n = 0;

	(void)c;
	/* A key too long for the first read (as SCHILY.xattr ones get) is skipped correctly. */
	memset(key, 'K', 300);
	key[300] = '\0';
	n += pax_rec(recs + n, sizeof(recs) - n, "mtime", "1700000000.5");
	n += pax_rec(recs + n, sizeof(recs) - n, key, "v=with=equals");
	n += pax_rec(recs + n, sizeof(recs) - n, "path", "real/name with spaces=and equals");
	n += pax_rec(recs + n, sizeof(recs) - n, "size", "700");
	snprintf(val, sizeof(val), "%d", 5);
	n += pax_rec(recs + n, sizeof(recs) - n, "uid", val);
	add_pax(recs, n);
	add_hdr("header-name", 0, '0');  /* header says 0 bytes; pax says 700 */
	add_data("real/name with spaces=and equals", 700);
	add_file("next", 3);              /* no pax: its own name and size again */
	add_end();
}

/* The longest name that fits: TARX_NAME_MAX - 1 bytes and the NUL. */
static char name_fits[TARX_NAME_MAX];

/* GNU 'L' with TARX_NAME_MAX + 5 name bytes and no NUL among them. */
static void build_long_name_over(const struct arc_case *c)
{
	static char name[TARX_NAME_MAX + 10];

	(void)c;
	memset(name, 'L', TARX_NAME_MAX + 5);
	add_hdr("././@LongLink", TARX_NAME_MAX + 5, 'L');
	add_raw(name, TARX_NAME_MAX + 5);
	add_file("x", 1);
	add_end();
}

/* GNU 'L' with exactly TARX_NAME_MAX bytes: TARX_NAME_MAX - 1 and the NUL. */
static void build_long_name_at_limit(const struct arc_case *c)
{
	static char name[TARX_NAME_MAX];

	(void)c;
	memset(name, 'L', TARX_NAME_MAX - 1);
	name[TARX_NAME_MAX - 1] = '\0';
	memcpy(name_fits, name, TARX_NAME_MAX);
	add_hdr("././@LongLink", TARX_NAME_MAX, 'L');
	add_raw(name, TARX_NAME_MAX);
	add_file("x", 1);
	add_end();
}

/* pax path of TARX_NAME_MAX bytes (one past the longest that fits). */
static void build_pax_path_over(const struct arc_case *c)
{
	static char name[TARX_NAME_MAX + 1], recs[TARX_NAME_MAX + 64];
	size_t n;

	(void)c;
	memset(name, 'P', TARX_NAME_MAX);
	name[TARX_NAME_MAX] = '\0';
	n = pax_rec(recs, sizeof(recs), "path", name);
	add_pax(recs, n);
	add_file("x", 1);
	add_end();
}

static void build_long_name_then_end(const struct arc_case *c)
{
	(void)c;
	add_hdr("././@LongLink", 6, 'L');
	add_raw("named", 6);
	add_end();
}

static void build_long_name_then_eof(const struct arc_case *c)
{
	(void)c;
	add_hdr("././@LongLink", 6, 'L');
	add_raw("named", 6);
}

static void build_long_name_on_dir(const struct arc_case *c)
{
	(void)c;
	add_hdr("././@LongLink", 9, 'L');
	add_raw("dirname/", 9);
	add_hdr("dirnam", 0, '5');
	add_file("after", 2);
	add_end();
}

static void build_header_only_sizes(const struct arc_case *c)
{
	(void)c;
	/* A directory with a size (Solaris) and a symlink with one: no data follows either. */
	add_hdr("dir/", 4096, '5');
	add_hdr("sym", 100, '2');
	add_file("f", 1);
	add_end();
}

static void build_v7(const struct arc_case *c)
{
	unsigned char *h;

	(void)c;
	h = add_hdr("olddir/", 0, '\0');
	memset(h + 257, 0, 8);  /* v7: no magic */
	hdr_sum(h);
	h = add_hdr("v7file", 4, '\0');
	memset(h + 257, 0, 8);
	memcpy(h + 345, "ignored-prefix", 14);  /* v7 has no prefix field */
	hdr_sum(h);
	add_data("v7file", 4);
	add_end();
}

static void build_gnu_magic(const struct arc_case *c)
{
	unsigned char *h;

	(void)c;
	h = add_hdr("gnufile", 4, '0');
	memcpy(h + 257, "ustar  \0", 8);
	memcpy(h + 345, "14577123456", 12);  /* GNU atime lives where ustar's prefix does */
	hdr_sum(h);
	add_data("gnufile", 4);
	add_hdr("ctg", 2, '7');
	add_data("ctg", 2);
	add_end();
}

static void build_old_sparse(const struct arc_case *c)
{
	unsigned char *h, ext[512];

	(void)c;
	h = add_hdr("sparse", 1024, 'S');
	h[482] = 1;  /* one extension block follows */
	hdr_sum(h);
	memset(ext, 0, sizeof(ext));
	ext[504] = 1;  /* and another */
	add_raw(ext, 512);
	ext[504] = 0;
	add_raw(ext, 512);
	add_data("sparse", 1024);
	add_file("after", 5);
	add_end();
}

static void build_old_sparse_chain_off_end(const struct arc_case *c)
{
	unsigned char *h = add_hdr("sparse", 0, 'S');

	(void)c;
	h[482] = 1;
	hdr_sum(h);
}

static void build_garbage_after_end(const struct arc_case *c)
{
	(void)c;
	add_file("z", 3);
	add_end();
	add_raw("garbage after the end", 21);  /* never looked at */
}

#define SIZE_FIELD(case_, bytes, len) \
	{ "test_tarx_size_field_" case_, build_size_field, bytes, len, \
	  .ret = -EBADMSG, .err = { "size field", "byte 124" } }
#define SIZE_BASE256_BAD(case_, bytes) \
	{ "test_tarx_size_base256_" case_, build_size_field, bytes, 12, \
	  .ret = -EBADMSG, .err = { "size field" } }
#define PAX_LENGTH(case_, area, len) \
	{ "test_tarx_pax_record_bad_length_" case_, build_pax_area, area, len, \
	  .ret = -EBADMSG, .err = { "pax record", "length" } }
#define PAX_KEY(case_, area) \
	{ "test_tarx_pax_record_bad_key_" case_, build_pax_area, area, \
	  .ret = -EBADMSG, .err = { "pax record" } }
#define PAX_SIZE(case_, val) \
	{ "test_tarx_pax_size_not_decimal_" case_, build_pax_size, val, \
	  .ret = -EBADMSG, .err = { "size" } }

static const struct arc_case arc_cases[] = {
	{ "test_tarx_truncated_padding", build_padding_missing,
	  .fd_len = 512 + 100,  /* data complete, padding missing */
	  .members = { { "p", 100 } }, .ret = -EBADMSG, .err = { "truncated" } },
	{ "test_tarx_bad_checksum", build_bad_checksum,
	  .members = { { "ok", 1 } }, .ret = -EBADMSG, .err = { "checksum", "offset 1024" } },
	{ "test_tarx_bad_checksum_not_octal", build_checksum_not_octal,
	  .ret = -EBADMSG, .err = { "checksum field" } },
	{ "test_tarx_signed_checksum_accepted", build_signed_checksum,
	  .members = { { "caf\xc3\xa9", 5 } } },
	{ "test_tarx_truncated_data", build_files_t, .fd_len = 512 + 600,
	  .ret = -EBADMSG, .err = { "truncated", "1000 bytes" } },
	{ "test_tarx_truncated_header", build_files_h_i, .fd_len = 1024 + 100,
	  .members = { { "h", 1 } }, .ret = -EBADMSG, .err = { "truncated", "offset 1024" } },
	/* The caller's size is larger than the file: reads come back short. */
	{ "test_tarx_size_lies_past_fd", build_file_s, .fd_len = 512, .size = 4096,
	  .members = { { "s", 10 } }, .ret = -EBADMSG, .err = { "truncated" } },
	SIZE_FIELD("not_octal", "0000000x123", 0),
	SIZE_FIELD("digit_8", "00000000008", 0),
	SIZE_FIELD("no_digits", "           ", 0),
	SIZE_FIELD("empty", "", 0),
	SIZE_FIELD("minus", "-0000000001", 0),
	SIZE_FIELD("junk_after_nul", "0001\0" "x", 6),
	SIZE_FIELD("inner_space", "1 2", 0),
	{ "test_tarx_size_octal_forms", build_size_octal_forms,
	  .members = { { "a", 100 }, { "b", 10 } } },
	{ "test_tarx_size_base256", build_size_base256, .members = { { "b256", 1000 } } },
	/* Negative (GNU: 0xff-led two's complement; star: 0xc0-led magnitude, here -1) and
	 * past-64-bit values are corrupt. */
	SIZE_BASE256_BAD("negative_gnu", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"),
	SIZE_BASE256_BAD("past_64_bits", "\xbf\xbf\xbf\xbf\xbf\xbf\xbf\xbf\xbf\xbf\xbf\xbf"),
	SIZE_BASE256_BAD("negative_star", "\xc0\0\0\0\0\0\0\0\0\0\0\x01"),
	/* 2^64 - 1: fits the field, not the archive. */
	{ "test_tarx_size_base256_huge", build_size_field, "\x80\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff",
	  12, .ret = -EBADMSG, .err = { "truncated" } },
	PAX_LENGTH("past_data", "30 path=abc\n", 0),
	PAX_LENGTH("newline_misplaced", "11 path=abc\n", 0),
	PAX_LENGTH("past_area_by_one", "13 path=abc\n", 0),
	PAX_LENGTH("not_a_number", "x2 path=abc\n", 0),
	PAX_LENGTH("no_space", "12path=abc\n\n", 0),
	PAX_LENGTH("zero", "0 path=abc\n", 0),
	PAX_LENGTH("shorter_than_any", "4 a\n", 0),
	PAX_LENGTH("second_record", "12 path=abc\n" "5 a=\n\n", 0),
	PAX_LENGTH("21_digits", "000000000000000000012 path=abc\n", 0),
	PAX_LENGTH("overflows", "99999999999999999999999 p=x\n", 0),
	PAX_LENGTH("no_newline", "12 path=abc\0", 12),
	PAX_KEY("empty", "12 =pathabc\n"),
	PAX_KEY("no_equals", "12 pathabcd\n"),
	{ "test_tarx_pax_size_and_path_override", build_pax_override,
	  .members = { { "real/name with spaces=and equals", 700 }, { "next", 3 } } },
	PAX_SIZE("letter", "12a"),
	PAX_SIZE("minus", "-1"),
	PAX_SIZE("overflows", "99999999999999999999"),
	PAX_SIZE("leading_space", " 1"),
	{ "test_tarx_long_name_too_long", build_long_name_over,
	  .ret = -ENAMETOOLONG, .err = { "long-name" } },
	{ "test_tarx_long_name_at_limit", build_long_name_at_limit,
	  .members = { { name_fits, 1 } } },
	{ "test_tarx_pax_path_too_long", build_pax_path_over,
	  .ret = -ENAMETOOLONG, .err = { "path" } },
	{ "test_tarx_long_name_then_end", build_long_name_then_end,
	  .ret = -EBADMSG, .err = { "long-name or pax" } },
	{ "test_tarx_long_name_then_eof", build_long_name_then_eof, .ret = -EBADMSG },
	{ "test_tarx_long_name_consumed_by_skipped_member", build_long_name_on_dir,
	  .members = { { "after", 2 } } },
	{ "test_tarx_header_only_types_ignore_size", build_header_only_sizes,
	  .members = { { "f", 1, 3 * 512 } } },
	{ "test_tarx_old_regular_dir_skipped", build_v7, .members = { { "v7file", 4 } } },
	{ "test_tarx_gnu_magic_has_no_prefix", build_gnu_magic,
	  .members = { { "gnufile", 4 }, { "ctg", 2 } } },
	{ "test_tarx_old_gnu_sparse_skipped", build_old_sparse, .members = { { "after", 5 } } },
	{ "test_tarx_old_gnu_sparse_chain_off_end", build_old_sparse_chain_off_end,
	  .ret = -EBADMSG, .err = { "sparse" } },
	{ "test_tarx_zero_block_ends_archive", build_garbage_after_end,
	  .members = { { "z", 3 } } },
};

/* tarx_next's result @ret and, for an error, its message, as the row wants. */
static void expect_result(const struct arc_case *c, int ret)
{
	if (ret != c->ret)
		print_error("%s: tarx_next = %d: %s\n", c->name, ret, it.err);
	assert_int_equal(ret, c->ret);
	for (int k = 0; ret < 0 && k < 2 && c->err[k]; k++)
		assert_err_has(it.err, c->err[k]);
}

/* cmocka names the failing row: each is a case of its own (see main). */
static void test_tarx_arc_case(void **state)
{
	const struct arc_case *c = *state;
	size_t fd_len;
	int fd;

	c->build(c);
	fd_len = c->fd_len ? c->fd_len : arclen;
	fd = arc_fd(fd_len);
	assert_int_equal(tarx_init(&it, fd, c->size ? c->size : fd_len), 0);
	for (int i = 0; i < 3 && c->members[i].name; i++) {
		const struct want_member *w = &c->members[i];
		int ret = tarx_next(&it, &mem);

		if (ret != 1)
			fail_msg("member %d (%s): tarx_next = %d: %s", i, w->name, ret, it.err);
		assert_string_equal(mem.name, w->name);
		assert_int_equal(mem.size, w->size);
		if (w->offset)
			assert_int_equal(mem.offset, w->offset);
	}
	expect_result(c, tarx_next(&it, &mem));
	/* The end stays the end; an error does not advance: the same one again. */
	expect_result(c, tarx_next(&it, &mem));
	close(fd);
}

/* ---- I/O faults ---- */

static void test_tarx_read_error_propagates(void **state)
{
	int fd;

	(void)state;
	add_file("a", 3);
	add_hdr("././@LongLink", 5, 'L');
	add_raw("long", 5);
	add_file("b", 3);
	add_end();
	fd = arc_fd(0);
	/* Fail the 1st, 2nd, 3rd... read in turn: every read's error comes back unchanged. */
	for (int k = 0; k < 3; k++) {
		int ret = 1;

		tarx_init(&it, fd, arclen);
		pread_mode = PREAD_EIO;
		pread_fail_after = k;
		while (ret == 1)
			ret = tarx_next(&it, &mem);
		pread_mode = PREAD_REAL;
		assert_int_equal(ret, -EIO);
		assert_err_has(it.err, "read");
	}
	close(fd);
}

static void test_tarx_short_reads_and_eintr(void **state)
{
	char recs[256];
	size_t n;
	int fd;

	(void)state;
	n = pax_rec(recs, sizeof(recs), "path", "pax/name");
	add_pax(recs, n);
	add_file("x", 10);
	add_hdr("././@LongLink", 5, 'L');
	add_raw("long", 5);
	add_file("b", 3);
	add_end();
	fd = arc_fd(0);
	for (int k = 0; k < 2; k++) {
		pread_mode = k == 0 ? PREAD_SHORT : PREAD_EINTR;
		tarx_init(&it, fd, arclen);
		assert_int_equal(tarx_next(&it, &mem), 1);
		assert_string_equal(mem.name, "pax/name");
		assert_int_equal(tarx_next(&it, &mem), 1);
		assert_string_equal(mem.name, "long");
		assert_int_equal(tarx_next(&it, &mem), 0);
		pread_mode = PREAD_REAL;
	}
	close(fd);
}

static int group_setup(void **state)
{
	const char *base = getenv("TMPDIR");

	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "%s/test_tarx.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmpdir))
		return -1;
	long_names_init();
	have_gnu_tar = system("tar --version 2>/dev/null | grep -q 'GNU tar'") == 0;
	if (!have_gnu_tar)
		fprintf(stderr, "test_tarx: no GNU tar on PATH; tests that need it skip\n");
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	return sh("rm -rf '%s'", tmpdir) == 0 ? 0 : -1;
}

#define T(f) cmocka_unit_test_setup(f, reset)

int main(void)
{
	const struct CMUnitTest fixed[] = {
		T(test_tarx_dirs_links_fifo_skipped),
		T(test_tarx_empty_archive),
		T(test_tarx_eof_at_block_boundary),
		T(test_tarx_read_error_propagates),
		T(test_tarx_short_reads_and_eintr),
	};

	enum {
		N_FIXED = sizeof(fixed) / sizeof(fixed[0]),
		N_TAR = sizeof(tar_cases) / sizeof(tar_cases[0]),
		N_ARC = sizeof(arc_cases) / sizeof(arc_cases[0]),
	};
	struct CMUnitTest tests[N_TAR + N_FIXED + N_ARC], *t = tests;

	/* One case a row, under the row's name. */
	for (size_t i = 0; i < N_TAR; i++)
		*t++ = (struct CMUnitTest){ .name = tar_cases[i].name,
			.test_func = test_tarx_tar_case, .setup_func = reset,
			.initial_state = (void *)&tar_cases[i] };
	memcpy(t, fixed, sizeof(fixed));
	t += N_FIXED;
	for (size_t i = 0; i < N_ARC; i++)
		*t++ = (struct CMUnitTest){ .name = arc_cases[i].name,
			.test_func = test_tarx_arc_case, .setup_func = reset,
			.initial_state = (void *)&arc_cases[i] };

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
