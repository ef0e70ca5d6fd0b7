/* s3.c - the S3 client (s3.h): requests signed by libcurl (CURLOPT_AWS_SIGV4), run through one
 * multi handle, responses parsed with expat.
 *
 * DESIGN. Every operation is a list of transfers handed to run(): up to cfg.inflight easy handles
 * are attached to the multi handle at once; a finished transfer is judged (done, failed, or
 * retried after a backoff drawn uniformly from [0, backoff_ms x 2^try], capped at 100 x
 * backoff_ms: "full jitter", so that many clients that failed together do not retry together),
 * and the next one takes its handle. Easy handles are reused (curl_easy_reset keeps nothing of
 * the last request but the handle) and the multi handle keeps the connections, so requests to one
 * store ride on kept-alive connections.
 *
 * libcurl 7.88's SigV4 neither adds x-amz-content-sha256 (S3 wants it on every request) nor sorts
 * the query string: each request sends the header (the SHA-256 of its body, OpenSSL), and
 * s3_query_build writes the canonical query (each name and value encoded, pairs sorted), used as
 * the URL's query as it is. Bodies are sent from memory (CURLOPT_POSTFIELDS), so that curl signs
 * the same bytes the header hashes. */
#include "s3/s3.h"

#include <curl/curl.h>
#include <errno.h>
#include <expat.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"

#define ERR_MAX 1024
#define ERRBODY_MAX (64u << 10)   /* bytes of an error document kept */
#define URL_MAX (S3_KEY_MAX * 3 + 4096)
#define GET_ROUND 256u            /* ranges set up at once by s3_get_files */
#define S3_LIST_PAGES_MAX 100000u  /* a store that says "more" for ever is cut off */

struct s3 {
	struct s3_cfg cfg;     /* copied, strings duplicated */
	char sigv4[128];       /* "aws:amz:REGION:s3" */
	CURLM *multi;
	CURL *pool[S3_INFLIGHT_MAX];
	uint64_t rng;          /* xorshift state for the jitter */
	struct s3_counters cnt;
	char err[ERR_MAX];
};

/* ---- URLs, encoding, the canonical query ---- */

int s3_is_url(const char *s)
{
	return s && !strncmp(s, "s3://", 5);
}

int s3_url_parse(const char *url, struct s3_url *out, char *err, size_t errlen)
{
	if (!s3_is_url(url))
		return err_set(err, errlen, -EINVAL, "'%.64s' is not an s3:// URL", url ? url : "");
	const char *b = url + 5, *slash = strchr(b, '/');
	size_t bl = slash ? (size_t)(slash - b) : strlen(b);
	if (bl < S3_BUCKET_MIN || bl > S3_BUCKET_MAX)
		return err_set(err, errlen, -EINVAL, "%.128s: a bucket name of %zu bytes (S3 allows "
			       "%u..%u)", url, bl, S3_BUCKET_MIN, S3_BUCKET_MAX);
	for (size_t i = 0; i < bl; i++) {
		char ch = b[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
			return err_set(err, errlen, -EINVAL, "%.128s: bucket name has '%c' at byte %zu "
				       "(S3 allows a-z, 0-9, '.', '-')", url, ch >= 0x20 && ch < 0x7f ?
				       ch : '?', i);
	}
	const char *k = slash ? slash + 1 : "";
	size_t kl = strlen(k);
	if (kl > S3_KEY_MAX)
		return err_set(err, errlen, -EINVAL, "%.128s...: a key of %zu bytes, above S3's %u",
			       url, kl, S3_KEY_MAX);
	for (size_t i = 0; i < kl; i++)
		if ((unsigned char)k[i] < 0x20 || k[i] == 0x7f)
			return err_set(err, errlen, -EINVAL, "%.128s: key has control character "
				       "0x%02x at byte %zu", url, (unsigned char)k[i], i);
	memcpy(out->bucket, b, bl);
	out->bucket[bl] = '\0';
	memcpy(out->key, k, kl + 1);
	return 0;
}

int s3_uri_encode(const char *in, int keep_slash, char *out, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
		int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' ||
			    *p == '~' || (keep_slash && *p == '/');
		if (o + (plain ? 1 : 3) >= cap)
			return -E2BIG;
		if (plain) {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	if (o >= cap)
		return -E2BIG;
	out[o] = '\0';
	return (int)o;
}

struct qenc {
	char *name, *value;
};

static int qenc_cmp(const void *a, const void *b)
{
	const struct qenc *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : strcmp(x->value, y->value);
}

int s3_query_build(const struct s3_qparam *q, size_t n, char *out, size_t cap)
{
	struct qenc e[8];
	char store[8][2][S3_KEY_MAX * 3 + 1];
	size_t o = 0;
	int ret = 0;

	if (n > 8)
		return -E2BIG;
	if (cap)
		out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (s3_uri_encode(q[i].name, 0, store[i][0], sizeof(store[i][0])) < 0 ||
		    s3_uri_encode(q[i].value ? q[i].value : "", 0, store[i][1],
				  sizeof(store[i][1])) < 0)
			return -E2BIG;
		e[i].name = store[i][0];
		e[i].value = store[i][1];
	}
	qsort(e, n, sizeof(e[0]), qenc_cmp);
	for (size_t i = 0; i < n; i++) {
		int w = snprintf(out + o, cap - o, "%s%s=%s", i ? "&" : "", e[i].name, e[i].value);
		if (w < 0 || (size_t)w >= cap - o)
			return -E2BIG;
		o += (size_t)w;
	}
	return ret ? ret : (int)o;
}

/* ---- XML (expat): the error document, InitiateMultipartUpload, ListObjectsV2 ---- */

#define XML_TEXT_MAX 2048
/* Collects the text of each element; @end is called at each element's end with its name and
 * text, and its depth (the root is 1). */
struct xml {
	char text[XML_TEXT_MAX];
	size_t tlen;
	int depth;
	void (*end)(struct xml *x, const char *name, const char *text, int depth);
	void *arg;
};

static void xml_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
	struct xml *x = ud;
	(void)name;
	(void)attrs;
	x->depth++;
	x->tlen = 0;
}

static void xml_chars(void *ud, const XML_Char *s, int len)
{
	struct xml *x = ud;
	size_t n = (size_t)len;
	if (n > sizeof(x->text) - 1 - x->tlen)
		n = sizeof(x->text) - 1 - x->tlen;
	memcpy(x->text + x->tlen, s, n);
	x->tlen += n;
}

static void xml_endel(void *ud, const XML_Char *name)
{
	struct xml *x = ud;
	const char *local = strrchr(name, ':');  /* namespace-qualified names: the local part */
	x->text[x->tlen] = '\0';
	x->end(x, local ? local + 1 : name, x->text, x->depth);
	x->depth--;
	x->tlen = 0;
}

static int xml_parse(struct xml *x, const char *doc, size_t len)
{
	XML_Parser p = XML_ParserCreate(NULL);
	if (!p)
		return -ENOMEM;
	XML_SetUserData(p, x);
	XML_SetElementHandler(p, xml_start, xml_endel);
	XML_SetCharacterDataHandler(p, xml_chars);
	int ok = XML_Parse(p, doc, (int)(len > INT32_MAX ? INT32_MAX : len), 1) == XML_STATUS_OK;
	XML_ParserFree(p);
	return ok ? 0 : -EBADMSG;
}

struct errdoc {
	char *code, *msg;
	size_t codecap, msgcap;
};

/* The store's words go into messages and loaderd's log: a control character (a line break that
 * would start a forged log line, an escape; C1 ones as UTF-8 too) becomes a space, or two '?'. */
static void err_clean(char *t)
{
	for (unsigned char *p = (unsigned char *)t; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			*p = ' ';
		else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
			p[0] = p[1] = '?';
}

static void err_end(struct xml *x, const char *name, const char *text, int depth)
{
	struct errdoc *e = x->arg;
	if (depth != 2)
		return;
	if (!strcmp(name, "Code") && e->codecap) {
		snprintf(e->code, e->codecap, "%s", text);
		err_clean(e->code);
	} else if (!strcmp(name, "Message") && e->msgcap) {
		snprintf(e->msg, e->msgcap, "%s", text);
		err_clean(e->msg);
	}
}

int s3_error_parse(const char *xml, size_t len, char *code, size_t codecap, char *msg,
		   size_t msgcap)
{
	struct errdoc e = { code, msg, codecap, msgcap };
	struct xml x = { .end = err_end, .arg = &e };
	if (codecap)
		code[0] = '\0';
	if (msgcap)
		msg[0] = '\0';
	return xml_parse(&x, xml, len);
}

/* ---- the client ---- */

static int set_err(struct s3 *s, int ret, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int set_err(struct s3 *s, int ret, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_vset(s->err, sizeof(s->err), ret, fmt, ap);
	va_end(ap);
	return ret;
}

static char *cfg_dup(const char *v, int *bad)
{
	char *d = v ? strdup(v) : NULL;
	if (v && !d)
		*bad = 1;
	return d;
}

int s3_create(const struct s3_cfg *cfg, struct s3 **out, char *err, size_t errlen)
{
	static int global;  /* curl_global_init once per process */
	struct s3 *s = calloc(1, sizeof(*s));
	int bad = 0;

	if (!s)
		return err_set(err, errlen, -ENOMEM, "out of memory");
	if (!cfg->endpoint || !cfg->region || !cfg->access_key || !cfg->secret_key) {
		free(s);
		return err_set(err, errlen, -EINVAL, "S3 configuration without endpoint, region or "
			       "credentials");
	}
	if (!global) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
			free(s);
			return err_set(err, errlen, -ENOMEM, "libcurl does not initialise");
		}
		global = 1;
	}
	s->cfg = *cfg;
	s->cfg.endpoint = cfg_dup(cfg->endpoint, &bad);
	s->cfg.region = cfg_dup(cfg->region, &bad);
	s->cfg.access_key = cfg_dup(cfg->access_key, &bad);
	s->cfg.secret_key = cfg_dup(cfg->secret_key, &bad);
	s->cfg.session_token = cfg_dup(cfg->session_token, &bad);
	if (!s->cfg.inflight || s->cfg.inflight > S3_INFLIGHT_MAX)
		s->cfg.inflight = s->cfg.inflight ? S3_INFLIGHT_MAX : 1;
	if (s->cfg.part_size < S3_PART_MIN)
		s->cfg.part_size = S3_PART_MIN;
	if (!s->cfg.backoff_ms)
		s->cfg.backoff_ms = 1;
	if (!s->cfg.timeout_ms)
		s->cfg.timeout_ms = 30000;
	snprintf(s->sigv4, sizeof(s->sigv4), "aws:amz:%s:s3", s->cfg.region);
	s->multi = bad ? NULL : curl_multi_init();
	if (!s->multi) {
		s3_destroy(s);
		return err_set(err, errlen, -ENOMEM, "out of memory for the S3 client");
	}
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	s->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ 0x9e3779b97f4a7c15ull;
	*out = s;
	return 0;
}

void s3_destroy(struct s3 *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < S3_INFLIGHT_MAX; i++)
		if (s->pool[i])
			curl_easy_cleanup(s->pool[i]);
	if (s->multi)
		curl_multi_cleanup(s->multi);
	s3_cfg_fini(&s->cfg);
	free(s);
}

const char *s3_error(const struct s3 *s)
{
	return s->err;
}

int s3_etag_check_fd(int fd, uint64_t size, const char *etag, char *md5hex)
{
	size_t n = strlen(etag);
	if (n != 34 || etag[0] != '"' || etag[33] != '"' || strspn(etag + 1, "0123456789abcdef") != 32)
		return 1;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE], buf[1 << 16];
	unsigned mdlen = 0;
	int ret = ctx && EVP_DigestInit_ex(ctx, EVP_md5(), NULL) ? 0 : -ENOMEM;
	for (uint64_t off = 0; ret == 0 && off < size;) {
		size_t want = size - off < sizeof(buf) ? (size_t)(size - off) : sizeof(buf);
		ssize_t r = pread(fd, buf, want, (off_t)off);
		if (r <= 0)
			ret = r < 0 ? -errno : -EIO;
		else if (!EVP_DigestUpdate(ctx, buf, (size_t)r))
			ret = -ENOMEM;
		off += r > 0 ? (uint64_t)r : 0;
	}
	if (ret == 0 && !EVP_DigestFinal_ex(ctx, md, &mdlen))
		ret = -ENOMEM;
	EVP_MD_CTX_free(ctx);
	if (ret < 0)
		return ret;
	for (unsigned i = 0; i < mdlen && i < 16; i++)
		snprintf(md5hex + 2 * i, 3, "%02x", md[i]);
	return memcmp(md5hex, etag + 1, 32) ? -EBADMSG : 0;
}

const char *s3_endpoint(const struct s3 *s)
{
	return s->cfg.endpoint;
}

void s3_counters(const struct s3 *s, struct s3_counters *out)
{
	*out = s->cnt;
}

/* ---- transfers ---- */

enum sink_kind { SINK_NONE, SINK_FIXED, SINK_GROW, SINK_FD };

struct xfer {
	const char *method;          /* GET HEAD PUT POST DELETE */
	const char *bucket, *key;    /* key "" for a bucket request */
	char query[2 * S3_KEY_MAX + 512];
	int ranged;
	uint64_t off, len;           /* ranged: bytes [off, off + len) */
	const char *if_match;
	const void *body;
	size_t body_len;
	enum sink_kind sink;
	char *buf;                   /* FIXED: caller's, cap bytes; GROW: malloc'd, up to cap */
	size_t cap, got;
	int fd;
	/* what came back */
	long status;
	char etag[S3_ETAG_MAX + 1];
	uint64_t clen;
	int have_clen;
	char *errbody;
	size_t errlen;
	int wret;                    /* a sink's own failure (-EFBIG, a pwrite's -errno) */
	char curlerr[CURL_ERROR_SIZE];
	/* the engine's */
	unsigned tries;
	int64_t due_ns;
	int slot;                    /* pool index while attached, else -1 */
	struct curl_slist *hdrs;
	int ret;                     /* 0 done, -errno failed, 1 pending */
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n;

	if (len >= 5 && !strncmp(p, "HTTP/", 5)) {  /* a new response (after 100, or a retry) */
		const char *sp = memchr(p, ' ', len);
		x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		x->etag[0] = '\0';
		x->have_clen = 0;
	} else if (len > 5 && !strncasecmp(p, "etag:", 5)) {
		size_t s = 5, e = len;
		while (s < e && (p[s] == ' ' || p[s] == '\t'))
			s++;
		while (e > s && (p[e - 1] == '\r' || p[e - 1] == '\n' || p[e - 1] == ' '))
			e--;
		if (e - s <= S3_ETAG_MAX) {
			memcpy(x->etag, p + s, e - s);
			x->etag[e - s] = '\0';
		}
	} else if (len > 15 && !strncasecmp(p, "content-length:", 15)) {
		char num[32];
		size_t k = len - 15 < sizeof(num) - 1 ? len - 15 : sizeof(num) - 1;
		memcpy(num, p + 15, k);
		num[k] = '\0';
		char *end;
		unsigned long long v = strtoull(num, &end, 10);
		x->clen = v;
		x->have_clen = end != num;
	}
	return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n;
	long code = x->status;  /* from the status line (on_header), before any body byte */

	if (code < 200 || code >= 300) {
		size_t k = len;
		if (x->errlen + k > ERRBODY_MAX)
			k = ERRBODY_MAX - x->errlen;
		if (k) {
			char *nb = realloc(x->errbody, x->errlen + k + 1);
			if (!nb)
				return 0;
			x->errbody = nb;
			memcpy(nb + x->errlen, p, k);
			x->errlen += k;
			nb[x->errlen] = '\0';
		}
		return len;
	}
	switch (x->sink) {
	case SINK_NONE:  /* counted, so that a cut-short answer shows */
		break;
	case SINK_FIXED:
		if (len > x->cap - x->got) {
			x->wret = -EFBIG;
			return 0;
		}
		memcpy(x->buf + x->got, p, len);
		break;
	case SINK_GROW:
		if (len > x->cap - x->got) {
			x->wret = -EFBIG;
			return 0;
		}
		{
			char *nb = realloc(x->buf, x->got + len + 1);
			if (!nb) {
				x->wret = -ENOMEM;
				return 0;
			}
			x->buf = nb;
			memcpy(nb + x->got, p, len);
			nb[x->got + len] = '\0';
		}
		break;
	case SINK_FD:
		if (len > x->len - x->got) {
			x->wret = -EFBIG;
			return 0;
		}
		for (size_t done = 0; done < len;) {
			ssize_t w = pwrite(x->fd, p + done, len - done,
					   (off_t)(x->off + x->got + done));
			if (w < 0) {
				x->wret = -errno;
				return 0;
			}
			done += (size_t)w;
		}
		break;
	}
	x->got += len;
	return len;
}

/* Build and attach @x on pool handle @slot. 0 or -errno. */
static int xfer_start(struct s3 *s, struct xfer *x, int slot)
{
	char url[URL_MAX], enc[S3_KEY_MAX * 3 + 1], hdr[256];
	CURL *h = s->pool[slot];

	if (!h && !(h = s->pool[slot] = curl_easy_init()))
		return -ENOMEM;
	curl_easy_reset(h);
	if (s3_uri_encode(x->key, 1, enc, sizeof(enc)) < 0)
		return -E2BIG;
	snprintf(url, sizeof(url), "%s/%s%s%s%s%s", s->cfg.endpoint, x->bucket, x->key[0] ? "/" : "",
		 enc, x->query[0] ? "?" : "", x->query);
	/* a retry starts again from nothing */
	x->got = 0;
	x->status = 0;
	x->etag[0] = '\0';
	x->have_clen = 0;
	x->errlen = 0;
	x->wret = 0;
	x->curlerr[0] = '\0';
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;

	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	if (!EVP_Digest(x->body ? x->body : "", x->body_len, md, &mdlen, EVP_sha256(), NULL))
		return -ENOMEM;
	int o = snprintf(hdr, sizeof(hdr), "x-amz-content-sha256: ");
	for (unsigned i = 0; i < mdlen; i++)
		o += snprintf(hdr + o, sizeof(hdr) - (size_t)o, "%02x", md[i]);
	struct curl_slist *l = curl_slist_append(NULL, hdr);
	if (s->cfg.session_token) {
		size_t tl = strlen(s->cfg.session_token) + 32;
		char *t = malloc(tl);
		if (t) {
			snprintf(t, tl, "x-amz-security-token: %s", s->cfg.session_token);
			l = l ? curl_slist_append(l, t) : NULL;
			memset(t, 0, tl);
			free(t);
		} else {
			curl_slist_free_all(l);
			l = NULL;
		}
	}
	if (l && x->ranged) {
		snprintf(hdr, sizeof(hdr), "Range: bytes=%" PRIu64 "-%" PRIu64, x->off,
			 x->off + x->len - 1);
		l = curl_slist_append(l, hdr);
	}
	if (l && x->if_match && x->if_match[0]) {
		snprintf(hdr, sizeof(hdr), "If-Match: %s", x->if_match);
		l = curl_slist_append(l, hdr);
	}
	if (l && x->body)
		l = curl_slist_append(l, "Content-Type: application/octet-stream");
	if (!l)
		return -ENOMEM;
	x->hdrs = l;
	curl_easy_setopt(h, CURLOPT_URL, url);
	/* http and https only, whatever the endpoint says (loaderd's ldfetch takes it from a client) */
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
	curl_easy_setopt(h, CURLOPT_USERNAME, s->cfg.access_key);
	curl_easy_setopt(h, CURLOPT_PASSWORD, s->cfg.secret_key);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)s->cfg.timeout_ms);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)(s->cfg.timeout_ms + 999) / 1000);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->curlerr);
	curl_easy_setopt(h, CURLOPT_PRIVATE, x);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	if (!strcmp(x->method, "HEAD")) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (x->body) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, x->method);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body_len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, x->body);
	} else if (strcmp(x->method, "GET")) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, x->method);
	}
	if (curl_multi_add_handle(s->multi, h) != CURLM_OK)
		return -ENOMEM;
	x->slot = slot;
	s->cnt.requests++;
	return 0;
}

static const char *obj_name(const struct xfer *x, char *buf, size_t n)
{
	snprintf(buf, n, "s3://%s/%s", x->bucket, x->key);
	return buf;
}

/* Judge a finished try: 0 done, 1 retry, or -errno (the reason in s->err). */
static int xfer_judge(struct s3 *s, struct xfer *x, CURLcode cc)
{
	char name[S3_KEY_MAX + S3_BUCKET_MAX + 8];
	int last = x->tries >= s->cfg.retries;

	obj_name(x, name, sizeof(name));
	if (x->wret)
		return set_err(s, x->wret, "%s: %s: %s", name, x->method, x->wret == -EFBIG ?
			       "larger than expected" : strerror(-x->wret));
	if (cc != CURLE_OK) {
		int e;
		const char *what;
		switch (cc) {
		case CURLE_COULDNT_CONNECT:
			e = -ECONNREFUSED, what = "the store cannot be reached";
			break;
		case CURLE_COULDNT_RESOLVE_HOST:
			e = -EHOSTUNREACH, what = "the store's host name does not resolve";
			break;
		case CURLE_OPERATION_TIMEDOUT:
			e = -ETIMEDOUT, what = "the store stopped answering";
			break;
		case CURLE_PARTIAL_FILE:
		case CURLE_RECV_ERROR:
		case CURLE_SEND_ERROR:
		case CURLE_GOT_NOTHING:
			e = -EPIPE, what = "the store cut the response short";
			break;
		default:
			e = -EIO, what = "the request failed";
		}
		if (!last)
			return 1;
		return set_err(s, e, "%s: %s: %s at %s after %u tries (%s; got %zu bytes)", name,
			       x->method, what, s->cfg.endpoint, x->tries + 1,
			       x->curlerr[0] ? x->curlerr : curl_easy_strerror(cc), x->got);
	}
	if (x->status >= 200 && x->status < 300) {
		uint64_t want = x->ranged ? x->len : x->have_clen ? x->clen : x->got;
		if (strcmp(x->method, "HEAD") && x->got != want) {
			if (!last)
				return 1;
			return set_err(s, -EPIPE, "%s: %s: the store cut the response short: %zu of "
				       "%" PRIu64 " bytes, after %u tries", name, x->method, x->got,
				       want, x->tries + 1);
		}
		return 0;
	}
	char code[128], msg[512];
	if (!x->errbody || s3_error_parse(x->errbody, x->errlen, code, sizeof(code), msg,
					  sizeof(msg)) < 0)
		code[0] = msg[0] = '\0';
	if ((x->status >= 500 || x->status == 429) && !last)
		return 1;
	/* credentials the store no longer takes come back as 400 from S3 itself */
	int expired = !strcmp(code, "ExpiredToken") || !strcmp(code, "InvalidToken") ||
		      !strcmp(code, "TokenRefreshRequired");
	int e = x->status == 403 || x->status == 401 || expired ? -EACCES :
		x->status == 404 ? -ENOENT :
		x->status == 412 ? -ESTALE :
		x->status == 400 || x->status == 416 ? -EINVAL : -EIO;
	const char *hint = x->status == 412 ? " (the object changed: another ETag than the one "
					     "read before)" : "";
	if (!code[0] && x->status == 404)
		snprintf(code, sizeof(code), "NoSuchKey");  /* a HEAD has no body */
	if (!code[0] && (x->status == 403 || x->status == 401))
		snprintf(code, sizeof(code), "AccessDenied");
	return set_err(s, e, "%s: %s: HTTP %ld%s%s%s%s%s%s", name, x->method, x->status,
		       code[0] ? " " : "", code, msg[0] ? ": " : "", msg, hint,
		       x->status >= 500 || x->status == 429 ? " (after every retry)" : "");
}

static uint64_t rnd(struct s3 *s)
{
	s->rng ^= s->rng << 13;
	s->rng ^= s->rng >> 7;
	s->rng ^= s->rng << 17;
	return s->rng;
}

static int64_t backoff_ns(struct s3 *s, unsigned tries)
{
	uint64_t cap = (uint64_t)s->cfg.backoff_ms * 100, ms = s->cfg.backoff_ms;
	for (unsigned i = 1; i < tries && ms < cap; i++)
		ms *= 2;
	if (ms > cap)
		ms = cap;
	return (int64_t)(rnd(s) % (ms * 1000000 + 1));
}

/* Start @x in a free slot of @busy: 1, or 0 when it cannot start (its result set, and the
 * reason kept in @keep (ERR_MAX bytes) when it is the first failure, *@first). */
static int launch(struct s3 *s, struct xfer *x, int *busy, int *first, char *keep)
{
	int slot = 0;

	while (busy[slot])
		slot++;
	int ret = xfer_start(s, x, slot);
	if (ret < 0) {
		x->ret = set_err(s, ret, "s3://%s/%s: cannot start the request: %s", x->bucket, x->key,
				 strerror(-ret));
		if (!*first) {
			*first = x->ret;
			memcpy(keep, s->err, ERR_MAX);
		}
		return 0;
	}
	busy[slot] = 1;
	return 1;
}

/* Run @n transfers, at most cfg.inflight at once, each retried as xfer_judge says. 0 when all
 * succeeded, else the first failure's -errno (its reason in s->err); each one's result in .ret. */
static int run(struct s3 *s, struct xfer *xs, size_t n)
{
	size_t next = 0, active = 0, left = n;
	int first = 0, busy[S3_INFLIGHT_MAX] = { 0 };
	size_t *retry = calloc(n ? n : 1, sizeof(*retry)), nretry = 0;
	char keep[ERR_MAX] = "";

	if (!retry)
		return set_err(s, -ENOMEM, "out of memory");
	s->err[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		xs[i].ret = 1;
		xs[i].slot = -1;
		xs[i].tries = 0;
		xs[i].due_ns = 0;
	}
	while (left) {
		int64_t now = now_ns(), wait_ms = 100;
		/* start what may start: retries that are due first, then new ones */
		for (size_t r = 0; r < nretry && active < s->cfg.inflight;) {
			struct xfer *x = &xs[retry[r]];
			if (x->due_ns > now) {
				int64_t w = (x->due_ns - now) / 1000000 + 1;
				if (w < wait_ms)
					wait_ms = w;
				r++;
				continue;
			}
			retry[r] = retry[--nretry];
			if (launch(s, x, busy, &first, keep))
				active++;
			else
				left--;
		}
		while (next < n && active < s->cfg.inflight) {
			struct xfer *x = &xs[next++];
			if (launch(s, x, busy, &first, keep))
				active++;
			else
				left--;
		}
		if (!left)
			break;
		int running = 0;
		curl_multi_perform(s->multi, &running);
		CURLMsg *m;
		int q;
		while ((m = curl_multi_info_read(s->multi, &q))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			struct xfer *x = NULL;
			CURL *h = m->easy_handle;
			CURLcode cc = m->data.result;
			curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&x);
			curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x->status);
			curl_multi_remove_handle(s->multi, h);
			busy[x->slot] = 0;
			x->slot = -1;
			active--;
			s->cnt.bytes_in += x->got;
			int v = xfer_judge(s, x, cc);
			if (v == 1) {
				x->tries++;
				s->cnt.retries++;
				x->due_ns = now_ns() + backoff_ns(s, x->tries);
				retry[nretry++] = (size_t)(x - xs);
				continue;
			}
			x->ret = v;
			if (v < 0 && !first) {
				first = v;
				memcpy(keep, s->err, sizeof(keep));
			}
			left--;
		}
		if (left && active)
			curl_multi_poll(s->multi, NULL, 0, (int)wait_ms, NULL);
		else if (left && nretry) {
			struct timespec ts = { 0, (long)wait_ms * 1000000 };
			nanosleep(&ts, NULL);
		}
	}
	free(retry);
	if (first)
		memcpy(s->err, keep, sizeof(keep));  /* the first failure's, not the last's */
	return first;
}

static void xfer_init(struct xfer *x, const char *method, const char *bucket, const char *key)
{
	memset(x, 0, sizeof(*x));
	x->method = method;
	x->bucket = bucket;
	x->key = key;
	x->fd = -1;
	x->slot = -1;
}

static void xfer_fini(struct xfer *x)
{
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;
	free(x->errbody);
	x->errbody = NULL;
	if (x->sink == SINK_GROW) {
		free(x->buf);
		x->buf = NULL;
	}
}

static int check_args(struct s3 *s, const char *bucket, const char *key)
{
	size_t bl = bucket ? strlen(bucket) : 0;
	if (bl < S3_BUCKET_MIN || bl > S3_BUCKET_MAX || !key || strlen(key) > S3_KEY_MAX)
		return set_err(s, -EINVAL, "s3://%.64s/%.64s: bucket or key out of S3's bounds",
			       bucket ? bucket : "", key ? key : "");
	return 0;
}

/* A HEAD's refusal has no body, so none of the store's words: ask the same object for one byte
 * (a GET is refused alike, with its error document) and report that answer when it fails too. */
static int head_explain(struct s3 *s, const struct xfer *h, int ret)
{
	if (!h->status || h->status < 400)
		return ret;
	struct xfer x;
	char one[1];
	xfer_init(&x, "GET", h->bucket, h->key);
	x.ranged = 1;
	x.len = 1;
	x.sink = SINK_FIXED;
	x.buf = one;
	x.cap = 1;
	char keep[ERR_MAX];
	memcpy(keep, s->err, sizeof(keep));
	unsigned retries = s->cfg.retries;
	s->cfg.retries = 0;
	int r = run(s, &x, 1);
	s->cfg.retries = retries;
	xfer_fini(&x);
	if (r == 0 || x.status != h->status)
		memcpy(s->err, keep, sizeof(keep));  /* not the same answer: keep the HEAD's */
	return ret;
}

/* A HEAD's Content-Length above any object S3 holds (a hostile or broken store): refused, so that
 * what a caller sums (a dataset's bytes, a uid's charge) never wraps. */
static int too_large(struct s3 *s, const char *bucket, const char *key, uint64_t size)
{
	return set_err(s, -EFBIG, "s3://%s/%s: HEAD: the store says %llu bytes, above S3's largest "
		       "object (%llu bytes)", bucket, key, (unsigned long long)size,
		       (unsigned long long)S3_OBJECT_MAX);
}

int s3_head(struct s3 *s, const char *bucket, const char *key, struct s3_obj *o)
{
	struct xfer x;
	int ret = check_args(s, bucket, key);
	if (ret < 0)
		return ret;
	xfer_init(&x, "HEAD", bucket, key);
	ret = run(s, &x, 1);
	if (ret < 0)
		head_explain(s, &x, ret);
	if (ret == 0) {
		if (!x.have_clen)
			ret = set_err(s, -EIO, "s3://%s/%s: HEAD: the store gave no Content-Length",
				      bucket, key);
		else if (x.clen > S3_OBJECT_MAX)
			ret = too_large(s, bucket, key, x.clen);
		o->size = x.clen;
		memcpy(o->etag, x.etag, sizeof(o->etag));
	}
	xfer_fini(&x);
	return ret;
}

int s3_get(struct s3 *s, const char *bucket, const char *key, size_t max, void **out,
	   size_t *len, struct s3_obj *o)
{
	struct xfer x;
	int ret = check_args(s, bucket, key);
	if (ret < 0)
		return ret;
	xfer_init(&x, "GET", bucket, key);
	x.sink = SINK_GROW;
	x.cap = max;
	ret = run(s, &x, 1);
	if (ret == 0) {
		if (!x.buf && !(x.buf = calloc(1, 1)))
			ret = set_err(s, -ENOMEM, "out of memory");
		*out = x.buf;
		*len = x.got;
		x.buf = NULL;
		if (o) {
			o->size = x.got;
			memcpy(o->etag, x.etag, sizeof(o->etag));
		}
	}
	xfer_fini(&x);
	return ret;
}

int s3_get_fd(struct s3 *s, const char *bucket, const char *key, int fd, const char *if_etag,
	      struct s3_obj *o)
{
	struct s3_obj h;
	int ret = s3_head(s, bucket, key, &h);
	if (ret < 0)
		return ret;
	if (if_etag && strcmp(if_etag, h.etag))
		return set_err(s, -ESTALE, "s3://%s/%s: the object changed (ETag %s, expected %s)",
			       bucket, key, h.etag, if_etag);
	struct s3_file f = { bucket, key, fd, &h };
	ret = s3_get_files(s, &f, 1);
	if (ret == 0 && o)
		*o = h;
	return ret;
}

int s3_head_many(struct s3 *s, const char *bucket, const char *const *keys, struct s3_obj *objs,
		 size_t n)
{
	struct xfer *xs = calloc(n ? n : 1, sizeof(*xs));
	int ret = 0;
	if (!xs)
		return set_err(s, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n && ret == 0; i++) {
		ret = check_args(s, bucket, keys[i]);
		xfer_init(&xs[i], "HEAD", bucket, keys[i]);
	}
	if (ret == 0)
		ret = run(s, xs, n);
	for (size_t i = 0; ret < 0 && i < n; i++)
		if (xs[i].ret < 0) {
			head_explain(s, &xs[i], ret);  /* the first failure's */
			break;
		}
	for (size_t i = 0; i < n; i++) {
		if (ret == 0 && !xs[i].have_clen)
			ret = set_err(s, -EIO, "s3://%s/%s: HEAD: the store gave no Content-Length",
				      bucket, keys[i]);
		else if (ret == 0 && xs[i].clen > S3_OBJECT_MAX)
			ret = too_large(s, bucket, keys[i], xs[i].clen);
		objs[i].size = xs[i].clen;
		memcpy(objs[i].etag, xs[i].etag, sizeof(objs[i].etag));
		xfer_fini(&xs[i]);
	}
	free(xs);
	return ret;
}

int s3_get_files(struct s3 *s, const struct s3_file *f, size_t n)
{
	uint64_t part = s->cfg.part_size;
	int ret = 0;
	for (size_t i = 0; i < n; i++) {
		if ((ret = check_args(s, f[i].bucket, f[i].key)) < 0)
			return ret;
		if (ftruncate(f[i].fd, (off_t)f[i].obj->size) < 0)
			return set_err(s, -errno, "s3://%s/%s: cannot size the local copy: %s",
				       f[i].bucket, f[i].key, strerror(errno));
	}
	/* the ranges of every file, GET_ROUND at a time (memory bounded however large the files) */
	struct xfer *xs = calloc(GET_ROUND, sizeof(*xs));
	if (!xs)
		return set_err(s, -ENOMEM, "out of memory");
	size_t i = 0;
	uint64_t off = 0;
	while (ret == 0 && i < n) {
		size_t k = 0;
		while (k < GET_ROUND && i < n) {
			if (off >= f[i].obj->size) {  /* the next file (an empty one has no range) */
				i++;
				off = 0;
				continue;
			}
			xfer_init(&xs[k], "GET", f[i].bucket, f[i].key);
			xs[k].ranged = 1;
			xs[k].off = off;
			xs[k].len = f[i].obj->size - off < part ? f[i].obj->size - off : part;
			xs[k].sink = SINK_FD;
			xs[k].fd = f[i].fd;
			xs[k].if_match = f[i].obj->etag;
			off += xs[k].len;
			k++;
		}
		if (k)
			ret = run(s, xs, k);
		for (size_t j = 0; j < k; j++)
			xfer_fini(&xs[j]);
	}
	free(xs);
	return ret;
}

int s3_get_ranges(struct s3 *s, struct s3_range *r, size_t n)
{
	struct xfer *xs = calloc(n ? n : 1, sizeof(*xs));
	int ret = 0;
	if (!xs)
		return set_err(s, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n && ret == 0; i++) {
		if ((ret = check_args(s, r[i].bucket, r[i].key)) < 0 || !r[i].len)
			ret = ret ? ret : set_err(s, -EINVAL, "s3://%s/%s: an empty range",
						  r[i].bucket, r[i].key);
		xfer_init(&xs[i], "GET", r[i].bucket, r[i].key);
		xs[i].ranged = 1;
		xs[i].off = r[i].off;
		xs[i].len = r[i].len;
		xs[i].sink = SINK_FIXED;
		xs[i].buf = r[i].buf;
		xs[i].cap = r[i].len;
	}
	if (ret == 0)
		ret = run(s, xs, n);
	for (size_t i = 0; i < n; i++) {
		r[i].ret = ret == 0 ? 0 : xs[i].ret <= 0 ? xs[i].ret : ret;
		xfer_fini(&xs[i]);
	}
	free(xs);
	return ret;
}

int s3_put(struct s3 *s, const char *bucket, const char *key, const void *buf, size_t len)
{
	struct xfer x;
	int ret = check_args(s, bucket, key);
	if (ret < 0)
		return ret;
	xfer_init(&x, "PUT", bucket, key);
	x.body = len ? buf : "";
	x.body_len = len;
	ret = run(s, &x, 1);
	xfer_fini(&x);
	return ret;
}

int s3_delete(struct s3 *s, const char *bucket, const char *key)
{
	struct xfer x;
	int ret = check_args(s, bucket, key);
	if (ret < 0)
		return ret;
	xfer_init(&x, "DELETE", bucket, key);
	ret = run(s, &x, 1);
	xfer_fini(&x);
	return ret;
}

static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
	for (size_t got = 0; got < len;) {
		ssize_t r = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		got += (size_t)r;
	}
	return 0;
}

struct upid {
	char id[1024];
};

static void upid_end(struct xml *x, const char *name, const char *text, int depth)
{
	struct upid *u = x->arg;
	if (depth == 2 && !strcmp(name, "UploadId"))
		snprintf(u->id, sizeof(u->id), "%s", text);
}

/* The complete's answer may be 200 with an <Error> in its body (S3 says so): 0 or -EIO. */
static int complete_check(struct s3 *s, const char *bucket, const char *key, const char *doc,
			  size_t len)
{
	char code[128], msg[512];
	if (doc && s3_error_parse(doc, len, code, sizeof(code), msg, sizeof(msg)) == 0 && code[0] &&
	    strstr(doc, "<Error"))
		return set_err(s, -EIO, "s3://%s/%s: completing the upload: %s: %s", bucket, key,
			       code, msg);
	return 0;
}

int s3_put_fd(struct s3 *s, const char *bucket, const char *key, int fd, uint64_t size)
{
	uint64_t part = s->cfg.part_size;
	int ret = check_args(s, bucket, key);
	if (ret < 0)
		return ret;
	if (size <= part) {
		void *buf = malloc(size ? size : 1);
		if (!buf)
			return set_err(s, -ENOMEM, "out of memory for %" PRIu64 " bytes", size);
		ret = read_at(fd, buf, size, 0);
		if (ret < 0)
			ret = set_err(s, ret, "s3://%s/%s: reading the local file: %s", bucket, key,
				      strerror(-ret));
		else
			ret = s3_put(s, bucket, key, buf, size);
		free(buf);
		return ret;
	}
	uint64_t nparts = (size + part - 1) / part;
	if (nparts > S3_PARTS_MAX)
		return set_err(s, -EFBIG, "s3://%s/%s: %" PRIu64 " bytes need %" PRIu64 " parts of "
			       "%" PRIu64 " (S3 allows %u)", bucket, key, size, nparts, part,
			       S3_PARTS_MAX);
	/* initiate */
	struct xfer x;
	struct upid u = { "" };
	xfer_init(&x, "POST", bucket, key);
	struct s3_qparam q0[] = { { "uploads", "" } };
	s3_query_build(q0, 1, x.query, sizeof(x.query));
	x.body = "";
	x.sink = SINK_GROW;
	x.cap = 1 << 20;
	ret = run(s, &x, 1);
	if (ret == 0) {
		struct xml xp = { .end = upid_end, .arg = &u };
		if (xml_parse(&xp, x.buf ? x.buf : "", x.got) < 0 || !u.id[0])
			ret = set_err(s, -EIO, "s3://%s/%s: the store's answer to starting an upload "
				      "has no UploadId", bucket, key);
	}
	xfer_fini(&x);
	if (ret < 0)
		return ret;
	/* parts, inflight at a time, each read into memory (so that curl signs its bytes) */
	unsigned win = s->cfg.inflight;
	struct xfer *xs = calloc(win, sizeof(*xs));
	char **bufs = calloc(win, sizeof(*bufs));
	char (*etags)[S3_ETAG_MAX + 1] = calloc(nparts, S3_ETAG_MAX + 1);
	char num[16];
	if (!xs || !bufs || !etags)
		ret = set_err(s, -ENOMEM, "out of memory");
	for (uint64_t first = 0; ret == 0 && first < nparts; first += win) {
		unsigned k = (unsigned)(nparts - first < win ? nparts - first : win);
		for (unsigned i = 0; i < k && ret == 0; i++) {
			uint64_t pn = first + i, off = pn * part, len = size - off < part ?
								   size - off : part;
			if (!bufs[i] && !(bufs[i] = malloc(part))) {
				ret = set_err(s, -ENOMEM, "out of memory for a part");
				break;
			}
			if ((ret = read_at(fd, bufs[i], len, off)) < 0) {
				ret = set_err(s, ret, "s3://%s/%s: reading the local file: %s", bucket,
					      key, strerror(-ret));
				break;
			}
			xfer_init(&xs[i], "PUT", bucket, key);
			snprintf(num, sizeof(num), "%" PRIu64, pn + 1);
			struct s3_qparam q[] = { { "partNumber", num }, { "uploadId", u.id } };
			s3_query_build(q, 2, xs[i].query, sizeof(xs[i].query));
			xs[i].body = bufs[i];
			xs[i].body_len = len;
		}
		if (ret == 0)
			ret = run(s, xs, k);
		for (unsigned i = 0; i < k; i++) {
			if (ret == 0 && !xs[i].etag[0])
				ret = set_err(s, -EIO, "s3://%s/%s: part %" PRIu64 " came back without "
					      "an ETag", bucket, key, first + i + 1);
			memcpy(etags[first + i], xs[i].etag, S3_ETAG_MAX + 1);
			xfer_fini(&xs[i]);
		}
	}
	/* complete, or abort so that no part lingers (and is billed) */
	struct s3_qparam qu[] = { { "uploadId", u.id } };
	if (ret == 0) {
		size_t cap = 128 + (size_t)nparts * (S3_ETAG_MAX + 64), o = 0;
		char *doc = malloc(cap);
		if (!doc) {
			ret = set_err(s, -ENOMEM, "out of memory");
		} else {
			o += (size_t)snprintf(doc + o, cap - o, "<CompleteMultipartUpload>");
			for (uint64_t i = 0; i < nparts; i++) {
				o += (size_t)snprintf(doc + o, cap - o, "<Part><PartNumber>%" PRIu64
						      "</PartNumber><ETag>", i + 1);
				for (const char *p = etags[i]; *p; p++)  /* XML-escaped */
					o += (size_t)snprintf(doc + o, cap - o, "%s",
							      *p == '&' ? "&amp;" : *p == '<' ? "&lt;" :
							      *p == '>' ? "&gt;" : *p == '"' ?
							      "&quot;" : (char[2]){ *p, 0 });
				o += (size_t)snprintf(doc + o, cap - o, "</ETag></Part>");
			}
			o += (size_t)snprintf(doc + o, cap - o, "</CompleteMultipartUpload>");
			xfer_init(&x, "POST", bucket, key);
			s3_query_build(qu, 1, x.query, sizeof(x.query));
			x.body = doc;
			x.body_len = o;
			x.sink = SINK_GROW;
			x.cap = 1 << 20;
			ret = run(s, &x, 1);
			if (ret == 0)
				ret = complete_check(s, bucket, key, x.buf, x.got);
			xfer_fini(&x);
			free(doc);
		}
	}
	if (ret < 0) {
		char keep[ERR_MAX];
		memcpy(keep, s->err, sizeof(keep));
		xfer_init(&x, "DELETE", bucket, key);
		s3_query_build(qu, 1, x.query, sizeof(x.query));
		run(s, &x, 1);
		xfer_fini(&x);
		memcpy(s->err, keep, sizeof(keep));
	}
	for (unsigned i = 0; bufs && i < win; i++)
		free(bufs[i]);
	free(bufs);
	free(xs);
	free(etags);
	return ret;
}

struct listing {
	s3_list_fn fn;
	void *arg;
	int ret, truncated, in_contents;
	char key[S3_KEY_MAX + 1], etag[S3_ETAG_MAX + 1], token[2048];
	uint64_t size;
};

static void list_end(struct xml *x, const char *name, const char *text, int depth)
{
	struct listing *l = x->arg;
	if (depth == 3) {
		if (!strcmp(name, "Key"))
			snprintf(l->key, sizeof(l->key), "%s", text);
		else if (!strcmp(name, "Size"))
			l->size = strtoull(text, NULL, 10);
		else if (!strcmp(name, "ETag"))
			snprintf(l->etag, sizeof(l->etag), "%s", text);
	} else if (depth == 2) {
		if (!strcmp(name, "Contents")) {
			if (l->ret == 0 && l->key[0])
				l->ret = l->fn(l->arg, l->key, l->size, l->etag);
			l->key[0] = l->etag[0] = '\0';
			l->size = 0;
		} else if (!strcmp(name, "IsTruncated")) {
			l->truncated = !strcmp(text, "true");
		} else if (!strcmp(name, "NextContinuationToken")) {
			snprintf(l->token, sizeof(l->token), "%s", text);
		}
	}
}

int s3_list(struct s3 *s, const char *bucket, const char *prefix, s3_list_fn fn, void *arg)
{
	struct listing *l = calloc(1, sizeof(*l));
	int ret = check_args(s, bucket, prefix);
	unsigned pages = 0;

	if (!l)
		return set_err(s, -ENOMEM, "out of memory");
	l->fn = fn;
	l->arg = arg;
	while (ret == 0) {
		struct xfer x;
		xfer_init(&x, "GET", bucket, "");
		char page[16];
		snprintf(page, sizeof(page), "%u", s->cfg.list_page);
		struct s3_qparam q[4] = { { "list-type", "2" }, { "prefix", prefix } };
		size_t nq = 2;
		if (s->cfg.list_page)
			q[nq++] = (struct s3_qparam){ "max-keys", page };
		if (l->token[0])
			q[nq++] = (struct s3_qparam){ "continuation-token", l->token };
		if (s3_query_build(q, nq, x.query, sizeof(x.query)) < 0) {
			ret = set_err(s, -E2BIG, "s3://%s/%s: listing: query too long", bucket, prefix);
			break;
		}
		x.sink = SINK_GROW;
		x.cap = 64u << 20;
		ret = run(s, &x, 1);
		if (ret == 0) {
			struct xml xp = { .end = list_end, .arg = l };
			l->truncated = 0;
			l->token[0] = '\0';
			if (xml_parse(&xp, x.buf ? x.buf : "", x.got) < 0)
				ret = set_err(s, -EIO, "s3://%s/%s: the store's listing is not XML",
					      bucket, prefix);
			else if (l->ret)
				ret = l->ret;
			else if (l->truncated && !l->token[0])
				ret = set_err(s, -EIO, "s3://%s/%s: a listing cut without a "
					      "continuation token", bucket, prefix);
			if (ret == 0 && !l->truncated) {
				xfer_fini(&x);
				break;
			}
			if (++pages > S3_LIST_PAGES_MAX)
				ret = set_err(s, -E2BIG, "s3://%s/%s: more than %u pages of keys", bucket,
					      prefix, S3_LIST_PAGES_MAX);
		}
		xfer_fini(&x);
	}
	free(l);
	return ret;
}
