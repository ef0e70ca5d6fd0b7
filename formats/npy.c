/* npy.c - validate the header of a NumPy .npy file and read integer elements from it, for the
 * dpack converter. The header is a Python dict literal that NumPy itself parses with
 * ast.literal_eval; here a small strict parser accepts the subset NumPy and other writers
 * produce (any key order, any whitespace, trailing commas, '' or "" strings), and rejects
 * everything else, since the file is attacker-controlled and a lenient guess at a shape would
 * turn into an out-of-bounds read later. No allocation: the header is parsed from a stack
 * buffer, bounded as NumPy bounds it. */
#include "formats/npy.h"
#include "common/err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* NumPy (>= 1.24) refuses headers longer than this unless told otherwise; ours are ~128 bytes,
 * and only structured dtypes (-ENOTSUP anyway) come near it. */
#define NPY_HEADER_MAX 10000u

/* Read up to @len bytes at @off; returns the count (short only at EOF) or -errno. */
static ssize_t read_upto(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	size_t got = 0;

	if (off > (uint64_t)INT64_MAX - len)
		return -EOVERFLOW;
	while (got < len) {
		ssize_t n = pread(fd, p + got, len - got, (off_t)(off + got));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* ---- the header dict ---- */

struct cur {
	const char *p, *end;
	const char *base;      /* start of the header text, for messages */
	uint64_t base_off;     /* file offset of base */
	char *err;
	size_t errlen;
};

/* What the dict said, before its meaning is checked. */
struct dict {
	const char *descr;     /* inside the header buffer; NULL when descr was a list */
	size_t descr_len;
	int structured;        /* descr was a list: a record dtype */
	int fortran;
	int ndim;              /* may exceed NPY_NDIM_MAX; shape[] holds the first ones */
	uint64_t shape[NPY_NDIM_MAX];
	int zero_dim;          /* some dimension is 0: count is 0, whatever the others */
	int seen_descr, seen_fortran, seen_shape;
};

static int bad(struct cur *c, const char *what)
{
	size_t at = (size_t)(c->p - c->base);

	err_set(c->err, c->errlen, 0, "npy header byte %zu (file offset %" PRIu64 "): %s", at,
	       c->base_off + at, what);
	return -EBADMSG;
}

static void skip_ws(struct cur *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' ||
				 *c->p == '\r'))
		c->p++;
}

static int peek(const struct cur *c)
{
	return c->p < c->end ? (unsigned char)*c->p : -1;
}

/* A quoted string without escapes (NumPy never writes any in the keys or simple descrs). */
static int parse_str(struct cur *c, const char **s, size_t *n, const char *what)
{
	const char *q;
	char quote;

	if (peek(c) != '\'' && peek(c) != '"')
		return bad(c, what);
	quote = *c->p++;
	for (q = c->p; q < c->end && *q != quote; q++)
		if (*q == '\\' || *q == '\n' || (unsigned char)*q < 0x20)
			break;
	if (q == c->end || *q != quote) {
		c->p = q;
		return bad(c, "unterminated or escaped string");
	}
	*s = c->p;
	*n = (size_t)(q - c->p);
	c->p = q + 1;
	return 0;
}

/* A Python int literal >= 0: no sign, no leading zeros, no '_'; Python 2 NumPy wrote a
 * trailing L on shape entries, which NumPy still reads. */
static int parse_uint(struct cur *c, uint64_t *out)
{
	uint64_t v = 0;
	const char *start = c->p;

	if (peek(c) < '0' || peek(c) > '9')
		return bad(c, "'shape': expected a non-negative integer");
	for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++) {
		unsigned d = (unsigned)(*c->p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return bad(c, "'shape': dimension overflows 64 bits");
		v = v * 10 + d;
	}
	if (*start == '0' && c->p - start > 1) {
		c->p = start;
		return bad(c, "'shape': dimension has leading zeros");
	}
	if (peek(c) == 'L')
		c->p++;
	*out = v;
	return 0;
}

/* A tuple of ints: "()", "(5,)", "(2, 3)", "(2, 3,)". "(5)" is an int in Python, not a tuple. */
static int parse_shape(struct cur *c, struct dict *d)
{
	int commas = 0;

	if (peek(c) != '(')
		return bad(c, "'shape': expected a tuple");
	c->p++;
	skip_ws(c);
	d->ndim = 0;
	while (peek(c) != ')') {
		uint64_t v;
		int ret = parse_uint(c, &v);

		if (ret < 0)
			return ret;
		if (d->ndim < NPY_NDIM_MAX)
			d->shape[d->ndim] = v;
		if (v == 0)
			d->zero_dim = 1;
		/* Stop counting far past NPY_NDIM_MAX; the value only goes into a message. */
		if (d->ndim < 1000)
			d->ndim++;
		skip_ws(c);
		if (peek(c) == ',') {
			c->p++;
			commas++;
			skip_ws(c);
		} else if (peek(c) != ')') {
			return bad(c, "'shape': expected ',' or ')'");
		}
	}
	if (d->ndim == 1 && commas == 0)
		return bad(c, "'shape': one-element tuple needs a trailing comma");
	c->p++;
	return 0;
}

/* Python True/False, nothing else: NumPy checks that fortran_order is a bool. */
static int parse_bool(struct cur *c, int *out)
{
	size_t left = (size_t)(c->end - c->p);

	if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
		c->p += 4;
		*out = 1;
	} else if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
		c->p += 5;
		*out = 0;
	} else {
		return bad(c, "'fortran_order': expected True or False");
	}
	/* "Falsey" would be a name, not False. */
	if (c->p < c->end && (*c->p == '_' || (*c->p >= 'a' && *c->p <= 'z') ||
			      (*c->p >= 'A' && *c->p <= 'Z') || (*c->p >= '0' && *c->p <= '9')))
		return bad(c, "'fortran_order': expected True or False");
	return 0;
}

/* A structured descr, [('a', '<u1'), ...]: only skipped, to report -ENOTSUP once the rest of
 * the header proved well-formed. Brackets must balance; strings may hold any bracket. */
static int skip_list(struct cur *c)
{
	int depth = 0;

	do {
		int ch = peek(c);

		if (ch < 0)
			return bad(c, "'descr': unterminated list");
		if (ch == '\'' || ch == '"') {
			const char *s;
			size_t n;
			int ret = parse_str(c, &s, &n, "'descr': bad string");

			if (ret < 0)
				return ret;
			continue;
		}
		if (ch == '[' || ch == '(') {
			if (++depth > 32)
				return bad(c, "'descr': nested too deep");
		} else if (ch == ']' || ch == ')') {
			depth--;
		}
		c->p++;
	} while (depth > 0);
	return 0;
}

static int parse_dict(struct cur *c, struct dict *d)
{
	int ret;

	skip_ws(c);
	if (peek(c) != '{')
		return bad(c, "expected '{'");
	c->p++;
	for (;;) {
		const char *key;
		size_t klen;

		skip_ws(c);
		if (peek(c) == '}')
			break;
		ret = parse_str(c, &key, &klen, "expected a quoted key or '}'");
		if (ret < 0)
			return ret;
		skip_ws(c);
		if (peek(c) != ':')
			return bad(c, "expected ':' after a key");
		c->p++;
		skip_ws(c);
		if (klen == 5 && memcmp(key, "descr", 5) == 0) {
			if (d->seen_descr++)
				return bad(c, "duplicate key 'descr'");
			if (peek(c) == '[') {
				d->structured = 1;
				ret = skip_list(c);
			} else {
				ret = parse_str(c, &d->descr, &d->descr_len,
						"'descr': expected a string");
			}
		} else if (klen == 13 && memcmp(key, "fortran_order", 13) == 0) {
			if (d->seen_fortran++)
				return bad(c, "duplicate key 'fortran_order'");
			ret = parse_bool(c, &d->fortran);
		} else if (klen == 5 && memcmp(key, "shape", 5) == 0) {
			if (d->seen_shape++)
				return bad(c, "duplicate key 'shape'");
			ret = parse_shape(c, d);
		} else {
			/* NumPy rejects any key but these three. */
			c->p = key - 1;
			return bad(c, "unknown key");
		}
		if (ret < 0)
			return ret;
		skip_ws(c);
		if (peek(c) == ',') {
			c->p++;
			continue;
		}
		if (peek(c) != '}')
			return bad(c, "expected ',' or '}'");
	}
	c->p++;
	/* NumPy pads with spaces and ends with '\n'; anything else after the dict is not ours. */
	skip_ws(c);
	if (c->p != c->end)
		return bad(c, "text after the closing '}'");
	if (!d->seen_descr || !d->seen_fortran || !d->seen_shape) {
		err_set(c->err, c->errlen, 0, "npy header: missing key '%s'",
		       !d->seen_descr ? "descr" : !d->seen_fortran ? "fortran_order" : "shape");
		return -EBADMSG;
	}
	return 0;
}

/* descr "<u2": byte order ('<' little, '>' big, '|' not applicable, '=' native; NumPy also
 * reads it absent, meaning native), kind, itemsize. */
static int parse_descr(const struct dict *d, struct npy_info *out, char *err, size_t errlen)
{
	const char *s = d->descr, *end = d->descr + d->descr_len;
	char order = '=';
	unsigned size = 0;
	int host_big = __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__;

	if (d->structured) {
		err_set(err, errlen, 0, "npy 'descr': structured dtype not supported");
		return -ENOTSUP;
	}
	if (s < end && *s && strchr("<>|=", *s))
		order = *s++;
	if (s == end)
		goto bad;
	if (*s != 'u' && *s != 'i' && *s != 'b') {
		/* Float, complex, object, string, void, datetime: valid NumPy, not ours. */
		if (*s && strchr("fcOSUVMmaeg", *s)) {
			err_set(err, errlen, 0, "npy 'descr' '%.*s': only integer and bool dtypes are "
			       "supported", (int)d->descr_len, d->descr);
			return -ENOTSUP;
		}
		goto bad;
	}
	out->kind = *s++;
	if (s == end || end - s > 1)
		goto bad;
	size = (unsigned)(*s - '0');
	if (out->kind == 'b' ? size != 1 : (size != 1 && size != 2 && size != 4 && size != 8))
		goto bad;
	out->itemsize = size;
	if (size > 1)
		out->big_endian = order == '>' || ((order == '|' || order == '=') && host_big);
	return 0;
bad:
	err_set(err, errlen, 0, "npy 'descr': '%.*s' is not a NumPy integer dtype",
	       (int)(d->descr_len > 32 ? 32 : d->descr_len), d->descr);
	return -EBADMSG;
}

int npy_read_header(int fd, struct npy_info *out, char *err, size_t errlen)
{
	unsigned char pre[12];
	char hdr[NPY_HEADER_MAX];
	struct dict d = { 0 };
	struct cur c;
	struct stat st;
	uint64_t hlen, hoff, fsize, end;
	ssize_t n;
	int ret;

	memset(out, 0, sizeof(*out));
	if (err && errlen)
		err[0] = '\0';
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		err_set(err, errlen, 0, "npy: fstat: %s", strerror(-ret));
		return ret;
	}
	fsize = (uint64_t)st.st_size;

	n = read_upto(fd, pre, sizeof(pre), 0);
	if (n < 0)
		goto read_err;
	if (n < NPY_MAGIC_LEN || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
		err_set(err, errlen, 0, "npy magic (offset 0): not a .npy file");
		return -EBADMSG;
	}
	if (n < 8)
		goto truncated;
	if ((pre[6] != 1 && pre[6] != 2 && pre[6] != 3) || pre[7] != 0) {
		err_set(err, errlen, 0, "npy version (offset 6): %u.%u, only 1.0, 2.0 and 3.0 are "
		       "known", pre[6], pre[7]);
		return -EPROTO;
	}
	if (pre[6] == 1) {
		if (n < 10)
			goto truncated;
		hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
		hoff = 10;
	} else {
		if (n < 12)
			goto truncated;
		hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 |
		       (uint64_t)pre[11] << 24;
		hoff = 12;
	}
	if (hlen == 0 || hlen > NPY_HEADER_MAX) {
		err_set(err, errlen, 0, "npy header length (offset 8): %" PRIu64 " bytes, expected "
		       "1..%u", hlen, NPY_HEADER_MAX);
		return -EBADMSG;
	}
	n = read_upto(fd, hdr, (size_t)hlen, hoff);
	if (n < 0)
		goto read_err;
	if ((uint64_t)n < hlen) {
		err_set(err, errlen, 0, "npy header: truncated, %" PRIu64 " bytes at offset %" PRIu64
		       " announced, the file has %zd", hlen, hoff, n);
		return -EBADMSG;
	}

	c = (struct cur){ .p = hdr, .end = hdr + hlen, .base = hdr, .base_off = hoff,
			  .err = err, .errlen = errlen };
	ret = parse_dict(&c, &d);
	if (ret < 0)
		return ret;
	ret = parse_descr(&d, out, err, errlen);
	if (ret < 0)
		return ret;
	if (d.fortran) {
		err_set(err, errlen, 0, "npy 'fortran_order': True is not supported");
		return -ENOTSUP;
	}
	if (d.ndim > NPY_NDIM_MAX) {
		err_set(err, errlen, 0, "npy 'shape': %d dimensions, at most %d supported", d.ndim,
		       NPY_NDIM_MAX);
		return -ENOTSUP;
	}
	out->ndim = d.ndim;
	memcpy(out->shape, d.shape, sizeof(out->shape));
	out->count = 1;
	if (d.zero_dim)
		out->count = 0;
	for (int i = 0; i < d.ndim && out->count; i++) {
		if (__builtin_mul_overflow(out->count, d.shape[i], &out->count)) {
			err_set(err, errlen, 0, "npy 'shape': element count overflows 64 bits");
			return -EBADMSG;
		}
	}
	out->data_offset = hoff + hlen;
	if (__builtin_mul_overflow(out->count, (uint64_t)out->itemsize, &out->data_size) ||
	    __builtin_add_overflow(out->data_offset, out->data_size, &end)) {
		err_set(err, errlen, 0, "npy 'shape': data size overflows 64 bits");
		return -EBADMSG;
	}
	if (end != fsize) {
		err_set(err, errlen, 0, "npy data size: 'shape' and 'descr' give %" PRIu64 " bytes "
		       "at offset %" PRIu64 ", expected file size %" PRIu64 ", actual %" PRIu64,
		       out->data_size, out->data_offset, end, fsize);
		return -EBADMSG;
	}
	return 0;

truncated:
	err_set(err, errlen, 0, "npy: truncated, %zd bytes is too short for the preamble", n);
	return -EBADMSG;
read_err:
	err_set(err, errlen, 0, "npy: read: %s", strerror((int)-n));
	return (int)n;
}

/* Element bytes @b of @info's dtype as int64. 0 or -EOVERFLOW. */
static int elem(const struct npy_info *info, const unsigned char *b, int64_t *out)
{
	unsigned size = info->itemsize;
	uint64_t v = 0;

	for (unsigned k = 0; k < size; k++)
		v |= (uint64_t)b[info->big_endian ? k : size - 1 - k] << (8 * (size - 1 - k));
	if (info->kind == 'b') {
		*out = v != 0;
	} else if (info->kind == 'i') {
		unsigned shift = 64 - 8 * size;

		/* Sign-extend through the top bit of the element; avoid shifting a negative. */
		if (shift && (v >> (8 * size - 1)) & 1)
			v |= UINT64_MAX << (8 * size);
		*out = (int64_t)v;
	} else {
		if (v > INT64_MAX)
			return -EOVERFLOW;
		*out = (int64_t)v;
	}
	return 0;
}

static int int_array(const struct npy_info *info)
{
	unsigned size = info->itemsize;

	return info->ndim == 1 && (info->kind == 'u' || info->kind == 'i' || info->kind == 'b') &&
	       (size == 1 || size == 2 || size == 4 || size == 8);
}

int npy_read_int(int fd, const struct npy_info *info, uint64_t i, int64_t *out)
{
	unsigned char b[8];
	uint64_t off, rel;
	unsigned size = info->itemsize;
	ssize_t n;

	if (!int_array(info))
		return -EINVAL;
	/* The info may be caller-built: check the element lies in data_size, not just i < count. */
	if (i >= info->count || __builtin_mul_overflow(i, (uint64_t)size, &rel) ||
	    rel > info->data_size || info->data_size - rel < size)
		return -ERANGE;
	if (__builtin_add_overflow(info->data_offset, rel, &off))
		return -ERANGE;
	n = read_upto(fd, b, size, off);
	if (n < 0)
		return (int)n;
	if ((size_t)n < size)
		return -EBADMSG;  /* the file shrank since npy_read_header */
	return elem(info, b, out);
}

int npy_read_ints_range(int fd, const struct npy_info *info, uint64_t first, uint64_t count,
			int64_t *out, uint64_t *bad)
{
	unsigned char buf[1 << 16];
	unsigned size = info->itemsize;
	uint64_t per = sizeof(buf) / size, rel, end;
	int64_t sink;

	if (!int_array(info))
		return -EINVAL;
	if (__builtin_mul_overflow(info->count, (uint64_t)size, &rel) || rel > info->data_size ||
	    info->data_offset > UINT64_MAX - rel || __builtin_add_overflow(first, count, &end) ||
	    end > info->count)
		return -ERANGE;
	for (uint64_t i = first; i < end; i += per) {
		uint64_t k = end - i < per ? end - i : per;
		ssize_t n = read_upto(fd, buf, (size_t)(k * size), info->data_offset + i * size);
		if (n < 0)
			return (int)n;
		if ((uint64_t)n < k * size)
			return -EBADMSG;  /* the file shrank since npy_read_header */
		for (uint64_t e = 0; e < k; e++)
			if (elem(info, buf + e * size, out ? &out[i - first + e] : &sink) < 0) {
				*bad = i + e;
				return -EOVERFLOW;
			}
	}
	return 0;
}

int npy_read_ints(int fd, const struct npy_info *info, int64_t *out, uint64_t *bad)
{
	return npy_read_ints_range(fd, info, 0, info->count, out, bad);
}
