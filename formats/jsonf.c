/* jsonf.c - a top-level key's value out of a JSON object (jsonf.h). */
#include "formats/jsonf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static int json_skip(const uint8_t *j, size_t n, size_t *p);

/* Past JSON whitespace at j[*p]: 1 while bytes are left, 0 at the end. */
static int json_ws(const uint8_t *j, size_t n, size_t *p)
{
	while (*p < n && (j[*p] == ' ' || j[*p] == '\t' || j[*p] == '\n' || j[*p] == '\r'))
		(*p)++;
	return *p < n;
}
/* A string at j[*p] == '"': its end past the closing quote into *p; unescaped into @out when
 * not NULL (room: the string's length). Returns the unescaped length or -EBADMSG. */
static ssize_t json_str(const uint8_t *j, size_t n, size_t *p, uint8_t *out)
{
	size_t q = *p + 1, o = 0;

	while (q < n && j[q] != '"') {
		uint8_t c = j[q++];
		if (c != '\\') {
			if (out)
				out[o] = c;
			o++;
			continue;
		}
		if (q >= n)
			return -EBADMSG;
		c = j[q++];
		const char *esc = strchr("\"\\/bfnrt", c);
		if (esc && c) {
			if (out)
				out[o] = (uint8_t)"\"\\/\b\f\n\r\t"[esc - "\"\\/bfnrt"];
			o++;
			continue;
		}
		if (c != 'u' || q + 4 > n)
			return -EBADMSG;
		unsigned cp = 0;
		for (int k = 0; k < 4; k++) {
			int h = j[q + k];
			int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 :
				h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
			if (v < 0)
				return -EBADMSG;
			cp = cp * 16 + (unsigned)v;
		}
		q += 4;
		if (cp >= 0xd800 && cp < 0xdc00 && q + 6 <= n && j[q] == '\\' && j[q + 1] == 'u') {
			unsigned lo = 0;
			int ok = 1;
			for (int k = 0; k < 4; k++) {
				int h = j[q + 2 + k];
				int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 :
					h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
				ok &= v >= 0;
				lo = lo * 16 + (unsigned)(v < 0 ? 0 : v);
			}
			if (ok && lo >= 0xdc00 && lo < 0xe000) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				q += 6;
			}
		}
		uint8_t u[4];
		int k = cp < 0x80 ? (u[0] = (uint8_t)cp, 1) :
			cp < 0x800 ? (u[0] = (uint8_t)(0xc0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3f)), 2) :
			cp < 0x10000 ? (u[0] = (uint8_t)(0xe0 | cp >> 12), u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f)),
					u[2] = (uint8_t)(0x80 | (cp & 0x3f)), 3) :
			(u[0] = (uint8_t)(0xf0 | cp >> 18), u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f)),
			 u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (uint8_t)(0x80 | (cp & 0x3f)), 4);
		if (out)  /* at most as long as the escape it replaces (6 or 12 bytes) */
			memcpy(out + o, u, (size_t)k);
		o += (size_t)k;
	}
	if (q >= n)
		return -EBADMSG;
	*p = q + 1;
	return (ssize_t)o;
}
/* Past one value at j[*p]: containers by a depth counter, not recursion (the file chooses the
 * nesting). 0, or -EBADMSG. */
static int json_skip(const uint8_t *j, size_t n, size_t *p)
{
	unsigned depth = 0;

	do {
		if (!json_ws(j, n, p))
			return -EBADMSG;
		uint8_t c = j[*p];
		if (c == '"') {
			if (json_str(j, n, p, NULL) < 0)
				return -EBADMSG;
		} else if (c == '{' || c == '[') {
			depth++;
			(*p)++;
		} else if (c == '}' || c == ']') {
			if (!depth)
				return -EBADMSG;
			depth--;
			(*p)++;
		} else {  /* a number, true, false, null; or , and : inside a container */
			(*p)++;
			while (*p < n && !strchr(",:}] \t\r\n\"{[", j[*p]))
				(*p)++;
		}
	} while (depth);
	return 0;
}
int jsonf_get(const uint8_t *j, size_t n, const char *key, uint8_t **out, uint32_t *olen)
{
	size_t p = 0, kl = strlen(key);

	if (!json_ws(j, n, &p) || j[p++] != '{')
		return -EBADMSG;
	for (;;) {
		if (!json_ws(j, n, &p))
			return -EBADMSG;
		if (j[p] == '}')
			return 0;
		if (j[p] != '"')
			return -EBADMSG;
		size_t k0 = p + 1;
		if (json_str(j, n, &p, NULL) < 0)
			return -EBADMSG;
		int match = p - 1 - k0 == kl && !memcmp(j + k0, key, kl);
		if (!json_ws(j, n, &p) || j[p++] != ':' || !json_ws(j, n, &p))
			return -EBADMSG;
		size_t v0 = p;
		if (match) {
			if (j[p] == '"') {
				ssize_t l = json_str(j, n, &p, NULL);
				size_t q = v0;
				if (l < 0 || !(*out = malloc((size_t)l + 1)))
					return l < 0 ? -EBADMSG : -ENOMEM;
				json_str(j, n, &q, *out);
				*olen = (uint32_t)l;
				return 1;
			}
			if (json_skip(j, n, &p) < 0)
				return -EBADMSG;
			if (!(*out = malloc(p - v0 + 1)))
				return -ENOMEM;
			memcpy(*out, j + v0, p - v0);
			*olen = (uint32_t)(p - v0);
			return 1;
		}
		if (json_skip(j, n, &p) < 0 || !json_ws(j, n, &p))
			return -EBADMSG;
		if (j[p] == ',')
			p++;
	}
}

