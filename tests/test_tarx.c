/* test_tarx.c - tarx against archives written by GNU tar (ustar, gnu, pax) and against
 * hand-built corrupt ones. pread is wrapped so that tests can inject I/O errors and short reads
 * into the reader. Archives written by tar live in a mkdtemp directory removed at the end;
 * hand-built ones live in memfds. */
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

/* ---- archives written by GNU tar ---- */

static void test_tarx_ustar_members(void **state)
{
	/* 171 bytes: tar splits it into prefix "ppp..." and name "nnn..." */
	static char split[200];
	static const char *names[5];
	char files[512];
	uint64_t size;
	int fd;

	(void)state;
	memset(split, 'p', 80);
	split[80] = '/';
	memset(split + 81, 'n', 90);
	split[171] = '\0';
	names[0] = "a.txt";
	names[1] = "empty.bin";
	names[2] = "sub/big.bin";
	names[3] = split;
	names[4] = "sub/one";
	mkfile("a.txt", 6);
	mkfile("empty.bin", 0);
	mkfile("sub/big.bin", 70000);
	mkfile(split, 513);
	mkfile("sub/one", 1);
	snprintf(files, sizeof(files), "a.txt sub empty.bin sub/big.bin %s sub/one", split);
	tar_create("ustar.tar", "--format=ustar", files);
	fd = open_archive("ustar.tar", &size);
	/* Check the archive is what the test means: the split name uses the prefix field. */
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
	expect_members(fd, size, names, 5);
	close(fd);
}

static void test_tarx_gnu_long_names(void **state)
{
	static char n150[160], n300[320];
	static const char *names[3];
	char files[1024];
	uint64_t size;
	int fd;

	(void)state;
	memset(n150, 'g', 150);
	memset(n300, 'a', 120);
	n300[120] = '/';
	memset(n300 + 121, 'b', 120);
	n300[241] = '/';
	memset(n300 + 242, 'c', 58);
	names[0] = n150;
	names[1] = n300;
	names[2] = "short";
	mkfile(n150, 1000);
	mkfile(n300, 512);
	mkfile("short", 3);
	snprintf(files, sizeof(files), "%s %s short", n150, n300);
	tar_create("gnu.tar", "--format=gnu", files);
	fd = open_archive("gnu.tar", &size);
	{
		unsigned char h[512];

		assert_int_equal(pread(fd, h, 512, 0), 512);
		assert_int_equal(h[156], 'L');  /* the test is about GNU long-name records */
	}
	expect_members(fd, size, names, 3);
	close(fd);
}

static void test_tarx_pax_long_names(void **state)
{
	static char n200[210], n400[410];
	static const char *names[3];
	char files[1024];
	uint64_t size;
	int fd;

	(void)state;
	memset(n200, 'x', 200);
	for (int i = 0; i < 400; i++)
		n400[i] = (i % 101 == 100) ? '/' : (char)('k' + i / 101);
	mkdir_src("pdir");
	names[0] = n200;
	names[1] = "pdir/plain";
	names[2] = n400;
	mkfile(n200, 4097);
	mkfile("pdir/plain", 10);
	mkfile(n400, 0);
	snprintf(files, sizeof(files), "%s pdir pdir/plain %s", n200, n400);
	tar_create("pax.tar", "--format=pax", files);
	fd = open_archive("pax.tar", &size);
	{
		unsigned char h[512];

		assert_int_equal(pread(fd, h, 512, 0), 512);
		assert_int_equal(h[156], 'x');
	}
	expect_members(fd, size, names, 3);
	close(fd);
}

static void test_tarx_pax_global_header_ignored(void **state)
{
	static const char *names[] = { "g1", "g2" };
	unsigned char h[512];
	uint64_t size;
	int fd;

	(void)state;
	mkfile("g1", 100);
	mkfile("g2", 0);
	tar_create("glob.tar", "--format=pax --pax-option=comment=hello", "g1 g2");
	fd = open_archive("glob.tar", &size);
	assert_int_equal(pread(fd, h, 512, 0), 512);
	assert_int_equal(h[156], 'g');
	expect_members(fd, size, names, 2);
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

/* ---- hand-built archives ---- */

static void test_tarx_truncated_padding(void **state)
{
	int fd;

	(void)state;
	add_file("p", 100);
	fd = arc_fd(512 + 100);  /* data complete, padding missing */
	tarx_init(&it, fd, 612);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_int_equal(mem.size, 100);
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	assert_err_has(it.err, "truncated");
	close(fd);
}

static void test_tarx_bad_checksum(void **state)
{
	unsigned char *h;
	int fd;

	(void)state;
	add_file("ok", 1);
	h = add_hdr("bad", 1, '0');
	h[0] ^= 1;  /* the stored sum no longer matches */
	add_data("bad", 1);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	assert_err_has(it.err, "checksum");
	assert_err_has(it.err, "offset 1024");
	/* Errors do not advance: the same one again. */
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	assert_err_has(it.err, "offset 1024");
	close(fd);

	/* Non-octal checksum field. */
	arclen = 0;
	h = add_hdr("bad", 0, '0');
	memcpy(h + 148, "01x345\0 ", 8);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	assert_err_has(it.err, "checksum field");
	close(fd);
}

static void test_tarx_signed_checksum_accepted(void **state)
{
	unsigned char *h;
	int sum = 0;
	int fd;

	(void)state;
	h = add_hdr("caf\xc3\xa9", 5, '0');  /* bytes >= 0x80 make the two sums differ */
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += (signed char)h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	add_data("caf\xc3\xa9", 5);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_string_equal(mem.name, "caf\xc3\xa9");
	assert_int_equal(tarx_next(&it, &mem), 0);
	close(fd);
}

static void test_tarx_truncated_data(void **state)
{
	int fd;

	(void)state;
	add_file("t", 1000);
	fd = arc_fd(512 + 600);
	tarx_init(&it, fd, 512 + 600);
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	assert_err_has(it.err, "truncated");
	assert_err_has(it.err, "1000 bytes");
	close(fd);
}

static void test_tarx_truncated_header(void **state)
{
	int fd;

	(void)state;
	add_file("h", 1);
	add_file("i", 1);
	fd = arc_fd(1024 + 100);
	tarx_init(&it, fd, 1024 + 100);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	assert_err_has(it.err, "truncated");
	assert_err_has(it.err, "offset 1024");
	close(fd);
}

static void test_tarx_size_lies_past_fd(void **state)
{
	int fd;

	(void)state;
	/* The caller's size is larger than the file: reads come back short. */
	add_file("s", 10);
	fd = arc_fd(512);
	tarx_init(&it, fd, 4096);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	assert_err_has(it.err, "truncated");
	close(fd);
}

static void test_tarx_size_field_garbage(void **state)
{
	static const char *const bad[] = {
		"0000000x123",      /* not octal */
		"00000000008",      /* 8 is not an octal digit */
		"           ",      /* no digits */
		"",                 /* empty */
		"-0000000001",
		"0001\0" "x",       /* junk after the terminator */
		"1 2",
	};
	int fd;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		unsigned char *h;

		arclen = 0;
		h = add_hdr("g", 0, '0');
		memset(h + 124, 0, 12);
		memcpy(h + 124, bad[i], i == 5 ? 6 : strlen(bad[i]));
		hdr_sum(h);
		add_end();
		fd = arc_fd(0);
		tarx_init(&it, fd, arclen);
		if (tarx_next(&it, &mem) != -EBADMSG)
			fail_msg("size field #%zu accepted", i);
		assert_err_has(it.err, "size field");
		assert_err_has(it.err, "byte 124");
		close(fd);
	}
}

static void test_tarx_size_octal_forms(void **state)
{
	unsigned char *h;
	int fd;

	(void)state;
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
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_int_equal(mem.size, 100);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_int_equal(mem.size, 10);
	assert_int_equal(tarx_next(&it, &mem), 0);
	close(fd);
}

static void test_tarx_size_base256(void **state)
{
	unsigned char *h;
	int fd;

	(void)state;
	h = add_hdr("b256", 0, '0');
	memset(h + 124, 0, 12);
	h[124] = 0x80;
	h[134] = 0x03;  /* 0x03e8 = 1000 */
	h[135] = 0xe8;
	hdr_sum(h);
	add_data("b256", 1000);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_int_equal(mem.size, 1000);
	assert_int_equal(tarx_next(&it, &mem), 0);
	close(fd);

	/* Negative (GNU: 0xff-led two's complement; star: 0xc0-led magnitude, here -1) and
	 * past-64-bit values are corrupt. */
	for (int i = 0; i < 3; i++) {
		arclen = 0;
		h = add_hdr("neg", 0, '0');
		memset(h + 124, i == 0 ? 0xff : 0xbf, 12);
		if (i == 2) {
			memset(h + 124, 0, 12);
			h[124] = 0xc0;
			h[135] = 1;
		}
		hdr_sum(h);
		add_end();
		fd = arc_fd(0);
		tarx_init(&it, fd, arclen);
		assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
		assert_err_has(it.err, "size field");
		close(fd);
	}

	/* 2^64 - 1: fits the field, not the archive. */
	arclen = 0;
	h = add_hdr("huge", 0, '0');
	h[124] = 0x80;
	memset(h + 125, 0, 3);
	memset(h + 128, 0xff, 8);
	hdr_sum(h);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	assert_err_has(it.err, "truncated");
	close(fd);
}

static void test_tarx_pax_record_bad_length(void **state)
{
	static const char *const bad[] = {
		"30 path=abc\n",            /* longer than the data */
		"11 path=abc\n",            /* '\n' not where the length says */
		"13 path=abc\n",            /* runs past the area by one */
		"x2 path=abc\n",            /* not a number */
		"12path=abc\n\n",           /* no space after the length */
		"0 path=abc\n",             /* zero */
		"4 a\n",                    /* shorter than any record */
		"12 path=abc\n" "5 a=\n\n", /* second record wrong */
		"000000000000000000012 path=abc\n", /* 21 digits */
		"99999999999999999999999 p=x\n", /* overflows */
		"12 path=abc\0",            /* no newline */
	};
	int fd;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t n = strlen(bad[i]);

		if (i == sizeof(bad) / sizeof(bad[0]) - 1)
			n = 12;
		arclen = 0;
		add_pax(bad[i], n);
		add_file("f", 1);
		add_end();
		fd = arc_fd(0);
		tarx_init(&it, fd, arclen);
		if (tarx_next(&it, &mem) != -EBADMSG)
			fail_msg("pax area #%zu accepted", i);
		assert_err_has(it.err, "pax record");
		assert_err_has(it.err, "length");
		close(fd);
	}
}

static void test_tarx_pax_record_bad_key(void **state)
{
	static const char *const bad[] = {
		"12 =pathabc\n",   /* empty key */
		"12 pathabcd\n",   /* no '=' */
	};
	int fd;

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		arclen = 0;
		add_pax(bad[i], strlen(bad[i]));
		add_file("f", 1);
		add_end();
		fd = arc_fd(0);
		tarx_init(&it, fd, arclen);
		assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
		assert_err_has(it.err, "pax record");
		close(fd);
	}
}

static void test_tarx_pax_size_and_path_override(void **state)
{
	char recs[2048], key[400], val[64];
	size_t n = 0;
	int fd;

	(void)state;
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
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_string_equal(mem.name, "real/name with spaces=and equals");
	assert_int_equal(mem.size, 700);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_string_equal(mem.name, "next");
	assert_int_equal(mem.size, 3);
	assert_int_equal(tarx_next(&it, &mem), 0);
	close(fd);
}

static void test_tarx_pax_size_not_decimal(void **state)
{
	static const char *const vals[] = { "12a", "-1", "99999999999999999999", " 1" };
	char recs[256];
	int fd;

	(void)state;
	for (size_t i = 0; i < 4; i++) {
		size_t n = pax_rec(recs, sizeof(recs), "size", vals[i]);

		arclen = 0;
		add_pax(recs, n);
		add_file("f", 1);
		add_end();
		fd = arc_fd(0);
		tarx_init(&it, fd, arclen);
		assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
		assert_err_has(it.err, "size");
		close(fd);
	}
}

static void test_tarx_long_name_too_long(void **state)
{
	static char name[TARX_NAME_MAX + 10];
	static char recs[TARX_NAME_MAX + 64];
	size_t n;
	int fd;

	(void)state;
	/* GNU 'L' with 4096 name bytes and no NUL among them. */
	memset(name, 'L', TARX_NAME_MAX + 5);
	add_hdr("././@LongLink", TARX_NAME_MAX + 5, 'L');
	add_raw(name, TARX_NAME_MAX + 5);
	add_file("x", 1);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), -ENAMETOOLONG);
	assert_err_has(it.err, "long-name");
	close(fd);

	/* Exactly TARX_NAME_MAX - 1 bytes plus the NUL fits. */
	arclen = 0;
	name[TARX_NAME_MAX - 1] = '\0';
	add_hdr("././@LongLink", TARX_NAME_MAX, 'L');
	add_raw(name, TARX_NAME_MAX);
	add_file("x", 1);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_int_equal(strlen(mem.name), TARX_NAME_MAX - 1);
	assert_int_equal(tarx_next(&it, &mem), 0);
	close(fd);

	/* pax path of TARX_NAME_MAX bytes. */
	arclen = 0;
	memset(name, 'P', TARX_NAME_MAX);
	name[TARX_NAME_MAX] = '\0';
	n = pax_rec(recs, sizeof(recs), "path", name);
	add_pax(recs, n);
	add_file("x", 1);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), -ENAMETOOLONG);
	assert_err_has(it.err, "path");
	close(fd);
}

static void test_tarx_long_name_then_end(void **state)
{
	int fd;

	(void)state;
	add_hdr("././@LongLink", 6, 'L');
	add_raw("named", 6);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	assert_err_has(it.err, "long-name or pax");
	close(fd);

	/* The same with EOF instead of the end blocks. */
	arclen = 0;
	add_hdr("././@LongLink", 6, 'L');
	add_raw("named", 6);
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	close(fd);
}

static void test_tarx_long_name_consumed_by_skipped_member(void **state)
{
	int fd;

	(void)state;
	add_hdr("././@LongLink", 9, 'L');
	add_raw("dirname/", 9);
	add_hdr("dirnam", 0, '5');
	add_file("after", 2);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_string_equal(mem.name, "after");
	assert_int_equal(tarx_next(&it, &mem), 0);
	close(fd);
}

static void test_tarx_header_only_types_ignore_size(void **state)
{
	int fd;

	(void)state;
	/* A directory with a size (Solaris) and a symlink with one: no data follows either. */
	add_hdr("dir/", 4096, '5');
	add_hdr("sym", 100, '2');
	add_file("f", 1);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_string_equal(mem.name, "f");
	assert_int_equal(mem.offset, 3 * 512);
	assert_int_equal(tarx_next(&it, &mem), 0);
	close(fd);
}

static void test_tarx_old_regular_dir_skipped(void **state)
{
	unsigned char *h;
	int fd;

	(void)state;
	h = add_hdr("olddir/", 0, '\0');
	memset(h + 257, 0, 8);  /* v7: no magic */
	hdr_sum(h);
	h = add_hdr("v7file", 4, '\0');
	memset(h + 257, 0, 8);
	memcpy(h + 345, "ignored-prefix", 14);  /* v7 has no prefix field */
	hdr_sum(h);
	add_data("v7file", 4);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_string_equal(mem.name, "v7file");
	assert_int_equal(tarx_next(&it, &mem), 0);
	close(fd);
}

static void test_tarx_gnu_magic_has_no_prefix(void **state)
{
	unsigned char *h;
	int fd;

	(void)state;
	h = add_hdr("gnufile", 4, '0');
	memcpy(h + 257, "ustar  \0", 8);
	memcpy(h + 345, "14577123456", 12);  /* GNU atime lives where ustar's prefix does */
	hdr_sum(h);
	add_data("gnufile", 4);
	h = add_hdr("ctg", 2, '7');
	add_data("ctg", 2);
	add_end();
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_string_equal(mem.name, "gnufile");
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_string_equal(mem.name, "ctg");
	assert_int_equal(tarx_next(&it, &mem), 0);
	close(fd);
}

static void test_tarx_old_gnu_sparse_skipped(void **state)
{
	unsigned char *h, ext[512];
	int fd;

	(void)state;
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
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_string_equal(mem.name, "after");
	assert_int_equal(tarx_next(&it, &mem), 0);
	close(fd);

	/* The extension chain runs off the end. */
	arclen = 0;
	h = add_hdr("sparse", 0, 'S');
	h[482] = 1;
	hdr_sum(h);
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), -EBADMSG);
	assert_err_has(it.err, "sparse");
	close(fd);
}

static void test_tarx_zero_block_ends_archive(void **state)
{
	int fd;

	(void)state;
	add_file("z", 3);
	add_end();
	add_raw("garbage after the end", 21);  /* never looked at */
	fd = arc_fd(0);
	tarx_init(&it, fd, arclen);
	assert_int_equal(tarx_next(&it, &mem), 1);
	assert_int_equal(tarx_next(&it, &mem), 0);
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
	const struct CMUnitTest tests[] = {
		T(test_tarx_ustar_members),
		T(test_tarx_gnu_long_names),
		T(test_tarx_pax_long_names),
		T(test_tarx_pax_global_header_ignored),
		T(test_tarx_dirs_links_fifo_skipped),
		T(test_tarx_empty_archive),
		T(test_tarx_eof_at_block_boundary),
		T(test_tarx_truncated_padding),
		T(test_tarx_bad_checksum),
		T(test_tarx_signed_checksum_accepted),
		T(test_tarx_truncated_data),
		T(test_tarx_truncated_header),
		T(test_tarx_size_lies_past_fd),
		T(test_tarx_size_field_garbage),
		T(test_tarx_size_octal_forms),
		T(test_tarx_size_base256),
		T(test_tarx_pax_record_bad_length),
		T(test_tarx_pax_record_bad_key),
		T(test_tarx_pax_size_and_path_override),
		T(test_tarx_pax_size_not_decimal),
		T(test_tarx_long_name_too_long),
		T(test_tarx_long_name_then_end),
		T(test_tarx_long_name_consumed_by_skipped_member),
		T(test_tarx_header_only_types_ignore_size),
		T(test_tarx_old_regular_dir_skipped),
		T(test_tarx_gnu_magic_has_no_prefix),
		T(test_tarx_old_gnu_sparse_skipped),
		T(test_tarx_zero_block_ends_archive),
		T(test_tarx_read_error_propagates),
		T(test_tarx_short_reads_and_eintr),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
