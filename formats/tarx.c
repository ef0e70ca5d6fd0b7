/* tarx.c - walk the members of a tar archive (POSIX ustar, GNU, pax) with pread, for WebDataset
 * shards: the caller gets each regular file's name, data offset and size, and reads the data
 * itself. Every header field is attacker-controlled: each one is validated, every offset is
 * checked against the archive size before it is read, and nothing is allocated, so a hostile
 * shard costs at most one 512-byte read per header block and a bounded stack.
 *
 * Metadata records (GNU 'L'/'K', pax 'x'/'g', old GNU sparse extension blocks) are consumed here;
 * 'L' and pax path=/size= are held in struct tarx until the next member header, which they
 * describe whatever its type. After an error the position is not advanced, so calling
 * tarx_next() again reports the same error. */
#include "formats/tarx.h"
#include "common/err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 512u

/* ustar header field offsets and widths (POSIX.1-1988; GNU reuses the same layout up to 345). */
#define F_NAME		0
#define F_NAME_LEN	100
#define F_SIZE		124
#define F_SIZE_LEN	12
#define F_CHKSUM	148
#define F_CHKSUM_LEN	8
#define F_TYPE		156
#define F_MAGIC		257
#define F_PREFIX	345
#define F_PREFIX_LEN	155
#define F_GNU_ISEXT	482	/* old GNU sparse: extension blocks follow the header */
#define F_SPARSE_ISEXT	504	/* in each old GNU sparse extension block */

/* Longest pax record header we read in one go: up to 20 length digits, the space, and enough of
 * the key to tell "path" and "size" from the rest. */
#define PAX_HEAD 32u

static void seterr(struct tarx *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void seterr(struct tarx *t, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vset(t->err, sizeof(t->err), 0, fmt, ap);
	va_end(ap);
}

/* Read exactly @len bytes at @off, which the caller has checked lie inside t->size. A short
 * read means the file is shorter than the size we were given: truncated, not an I/O error. */
static int read_at(struct tarx *t, void *buf, size_t len, uint64_t off)
{
	char *p = buf;

	if (off > (uint64_t)INT64_MAX - len) {
		seterr(t, "offset %" PRIu64 " is beyond what pread can address", off);
		return -EOVERFLOW;
	}
	while (len > 0) {
		ssize_t n = pread(t->fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			n = -errno;
			seterr(t, "read of %zu bytes at offset %" PRIu64 ": %s", len, off,
			       strerror((int)-n));
			return (int)n;
		}
		if (n == 0) {
			seterr(t, "truncated: file ends at offset %" PRIu64 ", before the archive "
			       "size %" PRIu64, off, t->size);
			return -EBADMSG;
		}
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* Octal number as tar writes it: optional leading spaces, at least one digit, then only NULs or
 * spaces to the end of the field (GNU and star may also fill the field with digits). */
static int parse_octal(const unsigned char *f, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0, digits = 0;

	while (i < n && f[i] == ' ')
		i++;
	for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
		if (v > (UINT64_MAX >> 3))
			return -1;
		v = (v << 3) | (uint64_t)(f[i] - '0');
	}
	if (digits == 0)
		return -1;
	for (; i < n; i++)
		if (f[i] != '\0' && f[i] != ' ')
			return -1;
	*out = v;
	return 0;
}

/* The size field: octal, or GNU base-256 (high bit of the first byte set; the next bit is the
 * sign, and a negative size is corrupt) for members of 8 GiB and more. */
static int parse_size(const unsigned char *f, uint64_t *out)
{
	uint64_t v;

	if (!(f[0] & 0x80))
		return parse_octal(f, F_SIZE_LEN, out);
	if (f[0] & 0x40)
		return -1;
	v = f[0] & 0x3f;
	for (size_t i = 1; i < F_SIZE_LEN; i++) {
		if (v > (UINT64_MAX >> 8))
			return -1;
		v = (v << 8) | f[i];
	}
	*out = v;
	return 0;
}

/* GNU tar accepts the checksum computed over unsigned or over signed chars, because some old
 * tars summed signed chars; the checksum field itself counts as eight spaces. */
static int check_chksum(struct tarx *t, const unsigned char *h)
{
	uint64_t stored;
	uint32_t usum = 0;
	int32_t ssum = 0;

	if (parse_octal(h + F_CHKSUM, F_CHKSUM_LEN, &stored) < 0) {
		seterr(t, "tar header at offset %" PRIu64 ": checksum field (byte %" PRIu64 ") "
		       "is not an octal number", t->pos, t->pos + F_CHKSUM);
		return -EBADMSG;
	}
	for (size_t i = 0; i < BLOCK; i++) {
		unsigned char c = (i >= F_CHKSUM && i < F_CHKSUM + F_CHKSUM_LEN) ? ' ' : h[i];

		usum += c;
		ssum += (signed char)c;
	}
	if (stored == usum || (ssum >= 0 && stored == (uint64_t)ssum))
		return 0;
	seterr(t, "tar header at offset %" PRIu64 ": bad checksum field (byte %" PRIu64 "): "
	       "stored %" PRIo64 ", computed %" PRIo32, t->pos, t->pos + F_CHKSUM, stored, usum);
	return -EBADMSG;
}

static int is_zero_block(const unsigned char *h)
{
	for (size_t i = 0; i < BLOCK; i++)
		if (h[i])
			return 0;
	return 1;
}

/* Skip past @size bytes of data starting at @data plus the padding to the next block. Data may
 * not extend past the archive; missing padding after the last member is caught by the next
 * call, which finds the position beyond the end. */
static int advance(struct tarx *t, uint64_t data, uint64_t size, const char *what)
{
	uint64_t pad = (BLOCK - size % BLOCK) % BLOCK;

	if (size > t->size - data) {
		seterr(t, "truncated: %s at offset %" PRIu64 " has %" PRIu64 " bytes of data, "
		       "the archive ends %" PRIu64 " bytes after the header", what, t->pos, size,
		       t->size - data);
		return -EBADMSG;
	}
	if (data + size > UINT64_MAX - pad) {
		seterr(t, "%s at offset %" PRIu64 ": size overflows", what, t->pos);
		return -EBADMSG;
	}
	t->pos = data + size + pad;
	return 0;
}

/* GNU 'L': the data is the next member's name, NUL-terminated (GNU writes the NUL and counts
 * it in the size; we also accept a name that fills the data exactly). */
static int read_long_name(struct tarx *t, uint64_t data, uint64_t size)
{
	size_t len;
	int ret;

	if (size > t->size - data)
		return 0;  /* advance() reports the truncation with the record's offset */
	if (size >= TARX_NAME_MAX) {
		/* Longer data may still hold a short NUL-terminated name: look at the start. */
		ret = read_at(t, t->pending_name, TARX_NAME_MAX, data);
		if (ret < 0)
			return ret;
		if (!memchr(t->pending_name, '\0', TARX_NAME_MAX)) {
			seterr(t, "GNU long-name record at offset %" PRIu64 ": name of %" PRIu64
			       " bytes exceeds %d", t->pos, size, TARX_NAME_MAX - 1);
			return -ENAMETOOLONG;
		}
	} else {
		ret = read_at(t, t->pending_name, (size_t)size, data);
		if (ret < 0)
			return ret;
		t->pending_name[size] = '\0';
	}
	len = strlen(t->pending_name);
	if (len == 0) {
		seterr(t, "GNU long-name record at offset %" PRIu64 ": empty name", t->pos);
		return -EBADMSG;
	}
	t->has_pending_name = 1;
	return 0;
}

/* Apply one pax record at @roff with a 4-byte @key, whose value is @vlen bytes at @voff.
 * Only path and size matter to us; an empty value deletes the key (POSIX), restoring the
 * header field. */
static int pax_apply(struct tarx *t, const char *key, uint64_t roff, uint64_t voff, uint64_t vlen)
{
	if (memcmp(key, "path", 4) == 0) {
		if (vlen >= TARX_NAME_MAX) {
			seterr(t, "pax record at offset %" PRIu64 ": path of %" PRIu64 " bytes "
			       "exceeds %d", roff, vlen, TARX_NAME_MAX - 1);
			return -ENAMETOOLONG;
		}
		if (vlen == 0) {
			t->has_pending_name = 0;
			return 0;
		}
		int ret = read_at(t, t->pending_name, (size_t)vlen, voff);

		if (ret < 0)
			return ret;
		if (memchr(t->pending_name, '\0', (size_t)vlen)) {
			t->has_pending_name = 0;
			seterr(t, "pax record at offset %" PRIu64 ": path contains a NUL", roff);
			return -EBADMSG;
		}
		t->pending_name[vlen] = '\0';
		t->has_pending_name = 1;
		return 0;
	}
	if (memcmp(key, "size", 4) == 0) {
		char buf[24];
		uint64_t v = 0;

		if (vlen == 0) {
			t->has_pending_size = 0;
			return 0;
		}
		if (vlen > 20)
			goto bad_size;
		int ret = read_at(t, buf, (size_t)vlen, voff);

		if (ret < 0)
			return ret;
		for (size_t i = 0; i < vlen; i++) {
			unsigned d = (unsigned char)buf[i] - '0';

			if (d > 9 || v > (UINT64_MAX - d) / 10)
				goto bad_size;
			v = v * 10 + d;
		}
		t->pending_size = v;
		t->has_pending_size = 1;
		return 0;
bad_size:
		seterr(t, "pax record at offset %" PRIu64 ": size is not a decimal number below "
		       "2^64", roff);
		return -EBADMSG;
	}
	return 0;  /* mtime, uid, linkpath, xattrs, ...: not ours */
}

/* Offset of the first '=' in [@off, @end), or @end when there is none. Keys like
 * SCHILY.xattr.security.capability do not fit the first read; they are rare, so rescanning in
 * small chunks costs nothing that matters. */
static int find_eq(struct tarx *t, uint64_t off, uint64_t end, uint64_t *eq)
{
	char buf[256];

	while (off < end) {
		size_t n = end - off < sizeof(buf) ? (size_t)(end - off) : sizeof(buf);
		const char *p;
		int ret = read_at(t, buf, n, off);

		if (ret < 0)
			return ret;
		p = memchr(buf, '=', n);
		if (p) {
			*eq = off + (uint64_t)(p - buf);
			return 0;
		}
		off += n;
	}
	*eq = end;
	return 0;
}

/* pax 'x': records "LEN key=value\n", LEN in decimal counting the whole record. Parsed
 * strictly, since a wrong LEN means we would misread every later key. Values are read only for
 * the keys we use, so a huge xattr record costs a few small reads, not a buffer. */
static int read_pax(struct tarx *t, uint64_t data, uint64_t size)
{
	uint64_t off = data, end;

	if (size > t->size - data)
		return 0;  /* advance() reports the truncation */
	end = data + size;
	while (off < end) {
		unsigned char head[PAX_HEAD];
		size_t n = end - off < PAX_HEAD ? (size_t)(end - off) : PAX_HEAD;
		size_t i = 0;
		uint64_t len = 0, key, eq;
		char nl;
		int ret;

		ret = read_at(t, head, n, off);
		if (ret < 0)
			return ret;
		for (; i < n && head[i] >= '0' && head[i] <= '9'; i++) {
			if (len > (UINT64_MAX - 9) / 10)
				goto bad_len;
			len = len * 10 + (head[i] - '0');
		}
		/* Up to 20 digits (leading zeros allowed, as Go and libarchive do) keeps the
		 * 4-byte keys we look at inside head[]. */
		if (i == 0 || i > 20 || i == n || head[i] != ' ')
			goto bad_len;
		key = off + i + 1;
		/* Shortest record: digits, space, one-byte key, '=', '\n'. */
		if (len < i + 4 || len > end - off)
			goto bad_len;
		ret = read_at(t, &nl, 1, off + len - 1);
		if (ret < 0)
			return ret;
		if (nl != '\n')
			goto bad_len;
		ret = find_eq(t, key, off + len - 1, &eq);
		if (ret < 0)
			return ret;
		if (eq == off + len - 1 || eq == key) {
			seterr(t, "pax record at offset %" PRIu64 " (header at %" PRIu64 "): empty "
			       "key or no '='", off, t->pos);
			return -EBADMSG;
		}
		/* Only 4-byte keys matter, and those lie inside head[]. */
		if (eq - key == 4) {
			ret = pax_apply(t, (const char *)head + i + 1, off, eq + 1,
					off + len - 1 - (eq + 1));
			if (ret < 0)
				return ret;
		}
		off += len;
		continue;
bad_len:
		seterr(t, "pax record at offset %" PRIu64 " (header at %" PRIu64 "): bad length "
		       "field", off, t->pos);
		return -EBADMSG;
	}
	return 0;
}

/* Old GNU sparse ('S'): when the header's isextended flag is set, 512-byte extension blocks
 * follow before the data, each with its own flag. Returns the offset of the data. */
static int skip_sparse_ext(struct tarx *t, const unsigned char *h, uint64_t *data)
{
	unsigned char ext[BLOCK];
	int more = h[F_GNU_ISEXT] != 0;
	int ret;

	while (more) {
		if (t->size - *data < BLOCK) {
			seterr(t, "truncated: sparse extension block at offset %" PRIu64 " (member "
			       "at %" PRIu64 ")", *data, t->pos);
			return -EBADMSG;
		}
		ret = read_at(t, ext, BLOCK, *data);
		if (ret < 0)
			return ret;
		more = ext[F_SPARSE_ISEXT] != 0;
		*data += BLOCK;
	}
	return 0;
}

/* Regular-file name: pax or GNU long name if one came before, else ustar prefix "/" name.
 * Only POSIX ustar ("ustar\0") has a prefix; GNU ("ustar  \0") keeps atime/ctime there. */
static void member_name(struct tarx *t, const unsigned char *h, char *out)
{
	size_t nlen, plen = 0;

	if (t->has_pending_name) {
		memcpy(out, t->pending_name, strlen(t->pending_name) + 1);
		return;
	}
	nlen = strnlen((const char *)h + F_NAME, F_NAME_LEN);
	if (memcmp(h + F_MAGIC, "ustar\0", 6) == 0)
		plen = strnlen((const char *)h + F_PREFIX, F_PREFIX_LEN);
	_Static_assert(F_PREFIX_LEN + 1 + F_NAME_LEN < TARX_NAME_MAX, "ustar name fits");
	if (plen) {
		memcpy(out, h + F_PREFIX, plen);
		out[plen++] = '/';
	}
	memcpy(out + plen, h + F_NAME, nlen);
	out[plen + nlen] = '\0';
}

int tarx_init(struct tarx *t, int fd, uint64_t size)
{
	memset(t, 0, sizeof(*t));
	t->fd = fd;
	t->size = size;
	return 0;
}

int tarx_next(struct tarx *t, struct tarx_member *m)
{
	unsigned char h[BLOCK];

	for (;;) {
		uint64_t size, data;
		int ret;

		if (t->pos == t->size) {
			/* EOF on a block boundary without end-of-archive blocks: accepted. */
			if (!t->has_pending_name && !t->has_pending_size)
				return 0;
			seterr(t, "truncated: archive ends at offset %" PRIu64 " right after a "
			       "long-name or pax record", t->pos);
			return -EBADMSG;
		}
		if (t->pos > t->size || t->size - t->pos < BLOCK) {
			seterr(t, "truncated: archive of %" PRIu64 " bytes ends inside the header "
			       "or padding at offset %" PRIu64, t->size, t->pos);
			return -EBADMSG;
		}
		ret = read_at(t, h, BLOCK, t->pos);
		if (ret < 0)
			return ret;
		if (is_zero_block(h)) {
			if (t->has_pending_name || t->has_pending_size) {
				seterr(t, "end of archive at offset %" PRIu64 " right after a "
				       "long-name or pax record", t->pos);
				return -EBADMSG;
			}
			return 0;
		}
		ret = check_chksum(t, h);
		if (ret < 0)
			return ret;
		if (parse_size(h + F_SIZE, &size) < 0) {
			seterr(t, "tar header at offset %" PRIu64 ": size field (byte %" PRIu64 ") "
			       "is not a valid octal or base-256 number", t->pos, t->pos + F_SIZE);
			return -EBADMSG;
		}
		data = t->pos + BLOCK;

		switch (h[F_TYPE]) {
		case 'L':
			ret = read_long_name(t, data, size);
			if (ret < 0)
				return ret;
			ret = advance(t, data, size, "GNU long-name record");
			if (ret < 0)
				return ret;
			continue;
		case 'x':
			ret = read_pax(t, data, size);
			if (ret < 0)
				return ret;
			ret = advance(t, data, size, "pax record");
			if (ret < 0)
				return ret;
			continue;
		case 'g':  /* pax global: nothing we use */
		case 'K':  /* GNU long link name: only for links, which we skip */
			ret = advance(t, data, size, "metadata record");
			if (ret < 0)
				return ret;
			continue;
		default:
			break;
		}

		/* A member header: the held long name and pax size describe it, whatever its
		 * type. */
		if (t->has_pending_size)
			size = t->pending_size;

		switch (h[F_TYPE]) {
		case '0':
		case '\0':
		case '7':  /* contiguous file: an ordinary file to everyone but Masscomp */
			member_name(t, h, m->name);
			ret = advance(t, data, size, "member");
			if (ret < 0)
				return ret;
			t->has_pending_name = 0;
			t->has_pending_size = 0;
			/* Pre-POSIX tars stored directories as regular entries ending in '/'. */
			if (m->name[0] == '\0' || m->name[strlen(m->name) - 1] == '/')
				continue;
			m->offset = data;
			m->size = size;
			return 1;
		case '1': case '2': case '3': case '4': case '5': case '6':
			/* POSIX: no data follows links, devices, directories and FIFOs whatever
			 * the size field says (Solaris stores a directory's st_size); as Go and
			 * Python read them. */
			size = 0;
			break;
		case 'S':
			ret = skip_sparse_ext(t, h, &data);
			if (ret < 0)
				return ret;
			break;
		default:
			break;  /* GNU 'D' dump dirs, 'M', 'V', vendor types: skip their data */
		}
		ret = advance(t, data, size, "member");
		if (ret < 0)
			return ret;
		t->has_pending_name = 0;
		t->has_pending_size = 0;
	}
}
