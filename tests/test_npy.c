/* test_npy.c - npy header parsing and element reads on .npy files built byte by byte here (no
 * NumPy needed): v1/v2/v3 preambles, every integer dtype in both byte orders, the dict forms
 * NumPy and other writers produce, and corrupt, unsupported and hostile headers. pread is
 * wrapped to inject I/O errors and short reads. Files live in memfds. */
/* link: -Wl,--wrap=pread */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "formats/npy.h"

/* ---- pread fault injection ---- */

enum { PREAD_REAL, PREAD_SHORT, PREAD_EIO };
static int pread_mode = PREAD_REAL;
static int pread_fail_after;

ssize_t __real_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off);

ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off)
{
	switch (pread_mode) {
	case PREAD_SHORT:
		return __real_pread(fd, buf, n < 3 ? n : 3, off);
	case PREAD_EIO:
		if (pread_fail_after-- > 0)
			return __real_pread(fd, buf, n, off);
		errno = EIO;
		return -1;
	default:
		return __real_pread(fd, buf, n, off);
	}
}

/* ---- building files ---- */

#define assert_err_has(err, needle) do {					\
	if (!strstr((err), (needle)))						\
		fail_msg("err \"%s\" lacks \"%s\"", (err), (needle));		\
} while (0)

static unsigned char file[1 << 17];  /* test_npy_read_ints_range: 64 KiB of elements and more */
static size_t filelen;
static char err[256];
static struct npy_info info;

/* Preamble for @major.@minor plus @dict, padded with spaces and '\n' to a multiple of 64 as
 * NumPy writes it, then @datalen bytes of @data. */
static void build(int major, int minor, const char *dict, const void *data, size_t datalen)
{
	size_t pre = major == 1 ? 10 : 12, dlen = strlen(dict), hlen;

	hlen = (pre + dlen + 1 + 63) / 64 * 64 - pre;
	assert_true(pre + hlen + datalen <= sizeof(file));
	memcpy(file, "\x93NUMPY", 6);
	file[6] = (unsigned char)major;
	file[7] = (unsigned char)minor;
	file[8] = (unsigned char)hlen;
	file[9] = (unsigned char)(hlen >> 8);
	if (major != 1) {
		file[10] = (unsigned char)(hlen >> 16);
		file[11] = (unsigned char)(hlen >> 24);
	}
	memcpy(file + pre, dict, dlen);
	memset(file + pre + dlen, ' ', hlen - dlen - 1);
	file[pre + hlen - 1] = '\n';
	if (datalen)
		memcpy(file + pre + hlen, data, datalen);
	filelen = pre + hlen + datalen;
}

/* A dict with @descr and @shape and a zero-filled data section of the right size. */
static void build_simple(int major, const char *descr, const char *shape, size_t datalen)
{
	static unsigned char zeros[4096];
	char dict[256];

	assert_true(datalen <= sizeof(zeros));
	snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
		 descr, shape);
	build(major, 0, dict, zeros, datalen);
}

static int file_fd(void)
{
	int fd = memfd_create("npy", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, file, filelen), (ssize_t)filelen);
	return fd;
}

/* npy_read_header on the current file. */
static int read_header(void)
{
	int fd = file_fd();
	int ret;

	memset(err, 0, sizeof(err));
	ret = npy_read_header(fd, &info, err, sizeof(err));
	close(fd);
	return ret;
}

static int reset(void **state)
{
	(void)state;
	pread_mode = PREAD_REAL;
	filelen = 0;
	memset(&info, 0xa5, sizeof(info));
	return 0;
}

/* ---- good files ---- */

static void test_npy_v1_u1_image(void **state)
{
	(void)state;
	build_simple(1, "|u1", "(2, 3, 4, 3)", 72);
	assert_int_equal(read_header(), 0);
	assert_string_equal(err, "");
	assert_int_equal(info.kind, 'u');
	assert_int_equal(info.itemsize, 1);
	assert_int_equal(info.big_endian, 0);
	assert_int_equal(info.ndim, 4);
	assert_int_equal(info.shape[0], 2);
	assert_int_equal(info.shape[1], 3);
	assert_int_equal(info.shape[2], 4);
	assert_int_equal(info.shape[3], 3);
	assert_int_equal(info.count, 72);
	assert_int_equal(info.data_offset, 128);
	assert_int_equal(info.data_size, 72);
}

static void test_npy_v2_and_v3_headers(void **state)
{
	(void)state;
	for (int major = 2; major <= 3; major++) {
		build_simple(major, "<u2", "(10,)", 20);
		assert_int_equal(read_header(), 0);
		assert_int_equal(info.kind, 'u');
		assert_int_equal(info.itemsize, 2);
		assert_int_equal(info.ndim, 1);
		assert_int_equal(info.count, 10);
		assert_int_equal(info.data_offset, 128);  /* 12 + 58 + '\n', padded to 64 */
		assert_int_equal(info.data_size, 20);
	}
	/* A v2 header longer than v1 could express is still bounded: 9000 bytes of padding. */
	{
		static const char d0[] = "{'descr': '|u1', 'fortran_order': False, 'shape': (3,)}";
		char dict[9100];

		memset(dict, ' ', sizeof(dict));
		memcpy(dict, d0, strlen(d0));
		dict[9000] = '\0';
		build(2, 0, dict, "abc", 3);
		assert_int_equal(read_header(), 0);
		assert_int_equal(info.count, 3);
		assert_int_equal(info.data_offset + 3, filelen);
	}
}

/* One dtype: its descr and how to encode a value. */
struct dt {
	const char *descr;
	char kind;
	unsigned size;
	int big;
};

static const struct dt dtypes[] = {
	{ "|u1", 'u', 1, 0 }, { "|i1", 'i', 1, 0 }, { "|b1", 'b', 1, 0 },
	{ "<u2", 'u', 2, 0 }, { ">u2", 'u', 2, 1 }, { "<i2", 'i', 2, 0 }, { ">i2", 'i', 2, 1 },
	{ "<u4", 'u', 4, 0 }, { ">u4", 'u', 4, 1 }, { "<i4", 'i', 4, 0 }, { ">i4", 'i', 4, 1 },
	{ "<u8", 'u', 8, 0 }, { ">u8", 'u', 8, 1 }, { "<i8", 'i', 8, 0 }, { ">i8", 'i', 8, 1 },
	{ "u1", 'u', 1, 0 },  /* no byte-order character: NumPy reads it, so do we */
	{ ">u1", 'u', 1, 0 },  /* '>' on one byte is not big-endian in npy_info */
};

static void encode(const struct dt *t, int64_t v, unsigned char *out)
{
	uint64_t u = (uint64_t)v;

	for (unsigned k = 0; k < t->size; k++)
		out[t->big ? t->size - 1 - k : k] = (unsigned char)(u >> (8 * k));
}

/* The values an element of @t can hold, at the edges and between. */
static int64_t clamp(const struct dt *t, int64_t v)
{
	if (t->kind == 'b')
		return v != 0;
	if (t->size == 8)
		return t->kind == 'u' && v < 0 ? -v - 1 : v;
	if (t->kind == 'u')
		return (int64_t)((uint64_t)v & ((1ull << (8 * t->size)) - 1));
	/* Signed: wrap into range as a two's-complement truncation does. */
	{
		uint64_t m = (1ull << (8 * t->size)) - 1, u = (uint64_t)v & m;

		return u >> (8 * t->size - 1) ? (int64_t)(u | ~m) : (int64_t)u;
	}
}

static void test_npy_dtypes_read_int(void **state)
{
	static const int64_t vals[] = { 0, 1, -1, 127, -128, 255, 256, 32767, -32768, 65535,
					0x12345678, -0x12345678, INT64_MAX, INT64_MIN + 1,
					0x0102030405060708ll };
	const size_t nv = sizeof(vals) / sizeof(vals[0]);

	(void)state;
	for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
		const struct dt *t = &dtypes[d];
		unsigned char data[sizeof(vals) / sizeof(vals[0]) * 8];
		char dict[128], shape[32];
		int fd;

		for (size_t i = 0; i < nv; i++)
			encode(t, clamp(t, vals[i]), data + i * t->size);
		snprintf(shape, sizeof(shape), "(%zu,)", nv);
		snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, "
			 "'shape': %s, }", t->descr, shape);
		build(1, 0, dict, data, nv * t->size);
		fd = file_fd();
		assert_int_equal(npy_read_header(fd, &info, err, sizeof(err)), 0);
		assert_int_equal(info.kind, t->kind);
		assert_int_equal(info.itemsize, t->size);
		assert_int_equal(info.big_endian, t->big);
		for (size_t i = 0; i < nv; i++) {
			int64_t got = 0, want = clamp(t, vals[i]);

			assert_int_equal(npy_read_int(fd, &info, i, &got), 0);
			if (got != want)
				fail_msg("%s [%zu]: got %" PRId64 ", want %" PRId64, t->descr, i,
					 got, want);
		}
		assert_int_equal(npy_read_int(fd, &info, nv, &(int64_t){ 0 }), -ERANGE);
		close(fd);
	}
}

static void test_npy_u8_above_int64_max_overflows(void **state)
{
	unsigned char data[16] = { 0 };
	int64_t v;
	int fd;

	(void)state;
	data[7] = 0x80;            /* '<u8' 2^63 */
	memset(data + 8, 0xff, 8); /* 2^64 - 1 */
	build(1, 0, "{'descr': '<u8', 'fortran_order': False, 'shape': (2,)}", data, 16);
	fd = file_fd();
	assert_int_equal(npy_read_header(fd, &info, err, sizeof(err)), 0);
	assert_int_equal(npy_read_int(fd, &info, 0, &v), -EOVERFLOW);
	assert_int_equal(npy_read_int(fd, &info, 1, &v), -EOVERFLOW);
	close(fd);
}

/* A range of a 1-D array: every element as npy_read_int gives it, the range ending exactly at the
 * count and one past it, a NULL output (checked only) finding the element past int64 by its
 * index in the whole array, and a block boundary (8,192 '<i8' elements a 64 KiB read) crossed. */
static void test_npy_read_ints_range(void **state)
{
	enum { N = 8192 + 5 };
	static unsigned char data[N * 8];
	static int64_t out[N];
	uint64_t bad = 0;
	int fd;

	(void)state;
	for (uint64_t i = 0; i < N; i++)
		for (int b = 0; b < 8; b++)
			data[i * 8 + b] = (unsigned char)((i * 7919) >> (8 * b));
	build(1, 0, "{'descr': '<u8', 'fortran_order': False, 'shape': (8197,)}", data, sizeof(data));
	fd = file_fd();
	assert_int_equal(npy_read_header(fd, &info, err, sizeof(err)), 0);
	assert_int_equal(npy_read_ints_range(fd, &info, 3, N - 3, out, &bad), 0);
	for (uint64_t i = 3; i < N; i++)
		assert_int_equal(out[i - 3], (int64_t)(i * 7919));
	assert_int_equal(npy_read_ints_range(fd, &info, N - 1, 1, out, &bad), 0);
	assert_int_equal(out[0], (int64_t)((N - 1) * 7919));
	assert_int_equal(npy_read_ints_range(fd, &info, N - 1, 2, out, &bad), -ERANGE);
	assert_int_equal(npy_read_ints_range(fd, &info, 1, UINT64_MAX, out, &bad), -ERANGE);
	assert_int_equal(npy_read_ints_range(fd, &info, 0, N, NULL, &bad), 0);
	close(fd);
	data[8192 * 8 + 7] = 0x80;  /* element 8192, the second block's first, is past INT64_MAX */
	build(1, 0, "{'descr': '<u8', 'fortran_order': False, 'shape': (8197,)}", data, sizeof(data));
	fd = file_fd();
	assert_int_equal(npy_read_header(fd, &info, err, sizeof(err)), 0);
	assert_int_equal(npy_read_ints_range(fd, &info, 0, N, NULL, &bad), -EOVERFLOW);
	assert_int_equal(bad, 8192);
	assert_int_equal(npy_read_ints_range(fd, &info, 0, 8192, NULL, &bad), 0);
	assert_int_equal(npy_read_ints_range(fd, &info, 8193, 4, out, &bad), 0);
	close(fd);
}

static void test_npy_read_int_bad_args(void **state)
{
	unsigned char data[6] = { 1, 2, 3, 4, 5, 6 };
	struct npy_info bad;
	int64_t v;
	int fd;

	(void)state;
	build(1, 0, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3)}", data, 6);
	fd = file_fd();
	assert_int_equal(npy_read_header(fd, &info, err, sizeof(err)), 0);
	assert_int_equal(npy_read_int(fd, &info, 0, &v), -EINVAL);  /* 2-D */
	bad = info;
	bad.ndim = 1;
	bad.count = 6;
	assert_int_equal(npy_read_int(fd, &bad, 5, &v), 0);
	assert_int_equal(v, 6);
	assert_int_equal(npy_read_int(fd, &bad, 6, &v), -ERANGE);
	assert_int_equal(npy_read_int(fd, &bad, UINT64_MAX, &v), -ERANGE);
	/* A caller-built info whose count disagrees with data_size cannot read past it. */
	bad.count = UINT64_MAX;
	assert_int_equal(npy_read_int(fd, &bad, 6, &v), -ERANGE);
	bad.itemsize = 8;
	bad.data_size = UINT64_MAX;
	assert_int_equal(npy_read_int(fd, &bad, UINT64_MAX / 4, &v), -ERANGE);
	bad.itemsize = 3;
	assert_int_equal(npy_read_int(fd, &bad, 0, &v), -EINVAL);
	bad = info;
	bad.ndim = 1;
	bad.count = 6;
	bad.data_size = 12;  /* claims more than the file holds */
	bad.itemsize = 2;
	assert_int_equal(npy_read_int(fd, &bad, 5, &v), -EBADMSG);
	close(fd);
}

static void test_npy_dict_forms_accepted(void **state)
{
	static const struct {
		const char *dict;
		int ndim;
		uint64_t count;
	} ok[] = {
		{ "{'shape': (3,), 'fortran_order': False, 'descr': '|u1'}", 1, 3 },
		{ "{\"descr\": \"|u1\", \"fortran_order\": False, \"shape\": (3,)}", 1, 3 },
		{ "{'descr':'|u1','fortran_order':False,'shape':(3,),}", 1, 3 },
		{ " {\n\t'descr' : '|u1' ,\r\n 'fortran_order' : False ,\n 'shape' : ( 3 , ) ,\n} ",
		  1, 3 },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': ()}", 0, 1 },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 3)}", 2, 3 },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 3,)}", 2, 3 },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (3L,)}", 1, 3 },  /* Python 2 */
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,3)}", 8, 3 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		build(1, 0, ok[i].dict, "xyz", ok[i].count);
		if (read_header() != 0)
			fail_msg("dict #%zu rejected: %s", i, err);
		assert_int_equal(info.ndim, ok[i].ndim);
		assert_int_equal(info.count, ok[i].count);
	}
}

static void test_npy_zero_size_dims(void **state)
{
	(void)state;
	build_simple(1, "<i8", "(0, 3)", 0);
	assert_int_equal(read_header(), 0);
	assert_int_equal(info.count, 0);
	assert_int_equal(info.data_size, 0);
	assert_int_equal(info.data_offset, filelen);
	/* Python ints do not overflow: 0 * anything is 0 even when the rest would not fit. */
	build_simple(1, "<i8", "(4294967296, 4294967296, 0)", 0);
	assert_int_equal(read_header(), 0);
	assert_int_equal(info.count, 0);
}

/* ---- bad files ---- */

static void test_npy_wrong_data_size(void **state)
{
	(void)state;
	build_simple(1, "<u2", "(2, 5)", 21);
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "expected file size 148");  /* 128 of header + 2 * 5 * 2 */
	assert_err_has(err, "actual 149");
	build_simple(1, "<u2", "(2, 5)", 19);
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "actual 147");
	build_simple(1, "|u1", "(1,)", 0);
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "data size");
}

static void test_npy_fortran_order_not_supported(void **state)
{
	(void)state;
	build(1, 0, "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3)}", "abcdef", 6);
	assert_int_equal(read_header(), -ENOTSUP);
	assert_err_has(err, "fortran_order");
}

static void test_npy_float_and_other_dtypes_not_supported(void **state)
{
	static const char *const descrs[] = {
		"<f4", "<f8", ">f2", "<c16", "|O", "<U3", "|S5", "|V16", "<M8[ns]", "<m8[s]",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(descrs) / sizeof(descrs[0]); i++) {
		build_simple(1, descrs[i], "(1,)", 4);
		if (read_header() != -ENOTSUP)
			fail_msg("descr %s: not -ENOTSUP: %s", descrs[i], err);
		assert_err_has(err, "descr");
	}
	/* Structured: a list of fields. */
	build(1, 0, "{'descr': [('a', '<u1'), ('b', [('c', '<i4')], (2,))], 'fortran_order': "
		    "False, 'shape': (1,)}", NULL, 0);
	assert_int_equal(read_header(), -ENOTSUP);
	assert_err_has(err, "structured");
}

static void test_npy_bad_descr(void **state)
{
	static const char *const descrs[] = {
		"<u3", "<b2", "<i16", "<x4", "", "<", "uint8", "<i4 ", "<u", "<<u1", "i-1",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(descrs) / sizeof(descrs[0]); i++) {
		build_simple(1, descrs[i], "(1,)", 1);
		if (read_header() != -EBADMSG)
			fail_msg("descr '%s' accepted or wrong code: %s", descrs[i], err);
		assert_err_has(err, "'descr'");
	}
}

static void test_npy_garbage_dict(void **state)
{
	static const struct {
		const char *dict;
		const char *field;   /* what err must name */
	} bad[] = {
		{ "", "'{'" },
		{ "descr", "'{'" },
		{ "{}", "missing key 'descr'" },
		{ "{'descr': '|u1', 'shape': (1,)}", "missing key 'fortran_order'" },
		{ "{'descr': '|u1', 'fortran_order': False}", "missing key 'shape'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), 'x': 1}", "unknown key" },
		{ "{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (1,)}",
		  "duplicate key 'descr'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1)}", "trailing comma" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': 1}", "'shape'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': [1]}", "'shape'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (,)}", "'shape'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (-1,)}", "'shape'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (01,)}", "leading zeros" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1 1)}", "'shape'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1,,)}", "'shape'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1_0,)}", "'shape'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1.0,)}", "'shape'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1,)", "expected ',' or '}'" },
		{ "{'descr': '|u1', 'fortran_order': false, 'shape': (1,)}", "'fortran_order'" },
		{ "{'descr': '|u1', 'fortran_order': Falsey, 'shape': (1,)}", "'fortran_order'" },
		{ "{'descr': '|u1', 'fortran_order': 0, 'shape': (1,)}", "'fortran_order'" },
		{ "{'descr': |u1, 'fortran_order': False, 'shape': (1,)}", "'descr'" },
		/* The string runs to the next quote, so the dict breaks after it. */
		{ "{'descr': '|u1\", 'fortran_order': False, 'shape': (1,)}", "expected ',' or" },
		{ "{'descr': '|u\\x31', 'fortran_order': False, 'shape': (1,)}", "string" },
		{ "{'descr' '|u1', 'fortran_order': False, 'shape': (1,)}", "':'" },
		{ "{'descr': '|u1' 'fortran_order': False, 'shape': (1,)}", "expected ','" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1,)}}", "after the closing" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1,)} x", "after the closing" },
		{ "{'descr': '|u1',, 'fortran_order': False, 'shape': (1,)}", "quoted key" },
		{ "{descr: '|u1', 'fortran_order': False, 'shape': (1,)}", "quoted key" },
		{ "{'descr': [('a', '<u1'), 'fortran_order': False, 'shape': (1,)}", "'descr'" },
		{ "{'descr': '|u1', 'fortran_order': False, 'shape': (1,)}\0", "after the closing" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		build(1, 0, bad[i].dict, "x", 1);
		/* The last one hides a NUL inside the padded header. */
		if (i == sizeof(bad) / sizeof(bad[0]) - 1)
			file[10 + strlen(bad[i].dict)] = '\0';
		if (read_header() != -EBADMSG)
			fail_msg("dict #%zu not -EBADMSG (err \"%s\"): %s", i, err, bad[i].dict);
		assert_err_has(err, bad[i].field);
	}
	/* Messages give the byte: the 'x' key starts at header byte 56, file offset 66. */
	build(1, 0, bad[5].dict, "x", 1);
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "byte 56 (file offset 66)");
}

static void test_npy_bad_version(void **state)
{
	static const unsigned char versions[][2] = { { 1, 1 }, { 4, 0 }, { 0, 0 }, { 2, 1 },
						     { 255, 0 } };

	(void)state;
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		build_simple(1, "|u1", "(1,)", 1);
		file[6] = versions[i][0];
		file[7] = versions[i][1];
		assert_int_equal(read_header(), -EPROTO);
		assert_err_has(err, "version");
	}
}

static void test_npy_bad_magic(void **state)
{
	(void)state;
	build_simple(1, "|u1", "(1,)", 1);
	file[1] = 'n';
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "magic");
	filelen = 3;  /* shorter than the magic */
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "magic");
	filelen = 0;
	assert_int_equal(read_header(), -EBADMSG);
}

static void test_npy_truncated_header(void **state)
{
	(void)state;
	build_simple(1, "|u1", "(1,)", 1);
	filelen = 60;  /* header announced as 118 bytes */
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "truncated");
	assert_err_has(err, "118");
	filelen = 9;   /* inside the v1 length field */
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "truncated");
	build_simple(2, "|u1", "(1,)", 1);
	filelen = 11;  /* inside the v2 length field */
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "truncated");
	filelen = 7;   /* inside the version */
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "truncated");
}

static void test_npy_header_length_out_of_range(void **state)
{
	(void)state;
	build_simple(2, "|u1", "(1,)", 1);
	file[8] = 0xa0;
	file[9] = 0x86;
	file[10] = 0x01;  /* 100000 */
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "header length");
	build_simple(2, "|u1", "(1,)", 1);
	memset(file + 8, 0xff, 4);
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "header length");
	build_simple(1, "|u1", "(1,)", 1);
	file[8] = file[9] = 0;
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "header length");
}

static void test_npy_shape_overflow(void **state)
{
	(void)state;
	build_simple(1, "|u1", "(4294967296, 4294967296)", 0);
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "'shape'");
	assert_err_has(err, "overflow");
	build_simple(1, "|u1", "(18446744073709551616,)", 0);  /* 2^64 */
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "overflow");
	build_simple(1, "<i8", "(2305843009213693952,)", 0);  /* 2^61 * 8 bytes = 2^64 */
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "overflow");
	build_simple(1, "|u1", "(18446744073709551615,)", 0);  /* fits, but offset + size not */
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "overflow");
	build_simple(1, "|u1", "(18446744073709551000,)", 0);  /* fits; file far too short */
	assert_int_equal(read_header(), -EBADMSG);
	assert_err_has(err, "data size");
}

static void test_npy_too_many_dims(void **state)
{
	(void)state;
	build_simple(1, "|u1", "(1, 1, 1, 1, 1, 1, 1, 1, 2)", 2);
	assert_int_equal(read_header(), -ENOTSUP);
	assert_err_has(err, "9 dimensions");
}

static void test_npy_err_may_be_null(void **state)
{
	int fd;

	(void)state;
	build_simple(1, "<f4", "(1,)", 4);
	fd = file_fd();
	assert_int_equal(npy_read_header(fd, &info, NULL, 0), -ENOTSUP);
	err[0] = 'x';
	assert_int_equal(npy_read_header(fd, &info, err, 0), -ENOTSUP);
	assert_int_equal(err[0], 'x');  /* errlen 0: not written */
	close(fd);
	build_simple(1, "|u1", "(1,)", 1);
	/* A one-byte buffer holds just the NUL. */
	err[0] = 'x';
	fd = file_fd();
	assert_int_equal(npy_read_header(fd, &info, err, 1), 0);
	assert_int_equal(err[0], '\0');
	close(fd);
}

static void test_npy_read_errors_propagate(void **state)
{
	unsigned char data[4] = { 1, 2, 3, 4 };
	int64_t v;
	int fd;

	(void)state;
	build(1, 0, "{'descr': '|u1', 'fortran_order': False, 'shape': (4,)}", data, 4);
	fd = file_fd();
	for (int k = 0; k < 2; k++) {
		pread_mode = PREAD_EIO;
		pread_fail_after = k;
		assert_int_equal(npy_read_header(fd, &info, err, sizeof(err)), -EIO);
		pread_mode = PREAD_REAL;
		assert_err_has(err, "read");
	}
	assert_int_equal(npy_read_header(fd, &info, err, sizeof(err)), 0);
	pread_mode = PREAD_EIO;
	pread_fail_after = 0;
	assert_int_equal(npy_read_int(fd, &info, 2, &v), -EIO);
	pread_mode = PREAD_REAL;
	close(fd);
}

static void test_npy_short_reads(void **state)
{
	unsigned char data[8] = { 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78 };
	int64_t v;
	int fd;

	(void)state;
	build(3, 0, "{'descr': '>i4', 'fortran_order': False, 'shape': (2,)}", data, 8);
	fd = file_fd();
	pread_mode = PREAD_SHORT;
	assert_int_equal(npy_read_header(fd, &info, err, sizeof(err)), 0);
	assert_int_equal(npy_read_int(fd, &info, 1, &v), 0);
	pread_mode = PREAD_REAL;
	assert_int_equal(v, 0x12345678);
	close(fd);
}

/* Random dtypes, shapes and values written and read back. The seed is printed; set
 * TEST_NPY_SEED to replay one. */
static void test_npy_roundtrip_seeded(void **state)
{
	const char *env = getenv("TEST_NPY_SEED");
	unsigned seed = env ? (unsigned)strtoul(env, NULL, 0) : (unsigned)time(NULL);
	uint64_t x;

	(void)state;
	printf("test_npy_roundtrip_seeded: seed %u (TEST_NPY_SEED=%u to replay)\n", seed, seed);
	x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (int iter = 0; iter < 300; iter++) {
		const struct dt *t;
		unsigned char data[2048];
		int64_t want[256];
		char dict[160];
		uint64_t n;
		int fd, major;

#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
		t = &dtypes[RND() % (sizeof(dtypes) / sizeof(dtypes[0]))];
		n = RND() % 256;
		major = 1 + (int)(RND() % 3);
		for (uint64_t i = 0; i < n; i++) {
			unsigned shift = (unsigned)(RND() % 64);

			/* Shifted so that small magnitudes, where sign bugs hide, come up too. */
			want[i] = clamp(t, (int64_t)RND() >> shift);
			encode(t, want[i], data + i * t->size);
		}
		snprintf(dict, sizeof(dict), "{'shape': (%" PRIu64 ",), 'descr': '%s', "
			 "'fortran_order': False}", n, t->descr);
		build(major, 0, dict, data, n * t->size);
		fd = file_fd();
		if (npy_read_header(fd, &info, err, sizeof(err)) != 0)
			fail_msg("seed %u iter %d: %s", seed, iter, err);
		assert_int_equal(info.count, n);
		for (uint64_t i = 0; i < n; i++) {
			int64_t got;

			assert_int_equal(npy_read_int(fd, &info, i, &got), 0);
			if (got != want[i])
				fail_msg("seed %u iter %d %s [%" PRIu64 "]: got %" PRId64 " want %"
					 PRId64, seed, iter, t->descr, i, got, want[i]);
		}
		close(fd);
#undef RND
	}
}

#define T(f) cmocka_unit_test_setup(f, reset)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_npy_v1_u1_image),
		T(test_npy_v2_and_v3_headers),
		T(test_npy_dtypes_read_int),
		T(test_npy_u8_above_int64_max_overflows),
		T(test_npy_read_ints_range),
		T(test_npy_read_int_bad_args),
		T(test_npy_dict_forms_accepted),
		T(test_npy_zero_size_dims),
		T(test_npy_wrong_data_size),
		T(test_npy_fortran_order_not_supported),
		T(test_npy_float_and_other_dtypes_not_supported),
		T(test_npy_bad_descr),
		T(test_npy_garbage_dict),
		T(test_npy_bad_version),
		T(test_npy_bad_magic),
		T(test_npy_truncated_header),
		T(test_npy_header_length_out_of_range),
		T(test_npy_shape_overflow),
		T(test_npy_too_many_dims),
		T(test_npy_err_may_be_null),
		T(test_npy_read_errors_propagate),
		T(test_npy_short_reads),
		T(test_npy_roundtrip_seeded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
