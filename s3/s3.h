/* s3.h - a client for S3-compatible object stores (AWS S3, Ceph RGW, MinIO, R2, GCS's S3 API) on
 * libcurl: SigV4 by CURLOPT_AWS_SIGV4, many requests in flight through one multi handle (its
 * connection cache keeps connections alive between calls), retries with exponential backoff and
 * full jitter on 5xx, 429, resets and responses cut short, errors that name the object and quote
 * the store's own code and message. docs/S3.md says what it does and why.
 *
 *     struct s3_cfg cfg;  s3_cfg_load(&cfg, err, sizeof(err));   (env, ~/.aws/credentials)
 *     struct s3 *s;       s3_create(&cfg, &s, err, sizeof(err));
 *     s3_head(s, "bucket", "key", &obj);  ...  s3_destroy(s);  s3_cfg_fini(&cfg);
 *
 * Credentials are read with the caller's rights from the standard places (AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; else AWS_PROFILE's section, "default" without it, of
 * AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials), AWS_REGION (or AWS_DEFAULT_REGION),
 * AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL; else region and endpoint_url in the profile's section
 * of AWS_CONFIG_FILE or ~/.aws/config; else us-east-1 and https://s3.REGION.amazonaws.com. They are never
 * written to a message, a log or an error: s3_error() names objects and the store's answer only.
 * Requests use path-style URLs (ENDPOINT/BUCKET/KEY), which every S3-compatible store takes.
 *
 * Errors: 0 (or a count) or -errno, and a sentence in s3_error(): -EINVAL bad argument or URL,
 * -EACCES the store refused the credentials or the request (403, 401), -ENOENT no such bucket or
 * key (404), -EIO the store failed (5xx, 429) after every retry, or answered what cannot be, -EPIPE
 * a response cut short after every retry, -ECONNREFUSED / -EHOSTUNREACH / -ETIMEDOUT the store
 * cannot be reached, -ENOMEM. Not thread-safe: one struct s3 per thread. */
#ifndef LOADERD_S3_H
#define LOADERD_S3_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "s3/s3cfg.h"
#ifdef __cplusplus
extern "C" {
#endif

#define S3_BUCKET_MIN 3u           /* bytes of a bucket name (S3's rule) */
#define S3_BUCKET_MAX 63u
#define S3_KEY_MAX 1024u           /* bytes of a key (S3's rule) */
#define S3_ETAG_MAX 128u           /* bytes of an ETag, quotes included */
#define S3_OBJECT_MAX (5ull << 40) /* bytes of an object (S3's rule: 5 TiB); a HEAD saying more is
				    * refused, so that sums of sizes never wrap */
#define S3_PART_MIN (5u << 20)     /* S3's smallest part but the last */
#define S3_PARTS_MAX 10000u        /* S3's most parts in one upload */
#define S3_INFLIGHT_MAX 64u        /* requests in flight at once */

/* "s3://bucket/key": 1 when @s starts with "s3://", else 0. */
int s3_is_url(const char *s);
struct s3_url {
	char bucket[S3_BUCKET_MAX + 1];
	char key[S3_KEY_MAX + 1];      /* may be empty ("s3://bucket/" or "s3://bucket") */
};
/* Parse @url. 0, or -EINVAL with the reason in @err: not s3://, a bucket of other than 3..63
 * bytes of [a-z0-9.-], a key above S3_KEY_MAX bytes or with a control character. */
int s3_url_parse(const char *url, struct s3_url *out, char *err, size_t errlen);

struct s3;
int s3_create(const struct s3_cfg *cfg, struct s3 **out, char *err, size_t errlen);
void s3_destroy(struct s3 *s);  /* NULL ok */
const char *s3_error(const struct s3 *s);  /* the last failure's sentence, "" after success */
const char *s3_endpoint(const struct s3 *s);  /* the store's URL, as configured */

struct s3_obj {
	uint64_t size;
	char etag[S3_ETAG_MAX + 1];
};
/* HEAD: the object's size and ETag. */
int s3_head(struct s3 *s, const char *bucket, const char *key, struct s3_obj *o);
/* A whole object into malloc'd memory (*out, free()), at most @max bytes (-EFBIG past it). */
int s3_get(struct s3 *s, const char *bucket, const char *key, size_t max, void **out,
	   size_t *len, struct s3_obj *o);
/* A whole object into @fd from offset 0 (pwrite; @fd truncated to its size), in ranges of
 * part_size with up to inflight in flight; its size and ETag in @o (NULL ok). When @if_etag is
 * given, each range is asked If-Match it: an object replaced while it is read fails (-ESTALE,
 * naming it) instead of mixing two versions. */
int s3_get_fd(struct s3 *s, const char *bucket, const char *key, int fd, const char *if_etag,
	      struct s3_obj *o);
/* HEAD many objects, in flight together: objs[i] for keys[i]. 0, or the first failure. */
int s3_head_many(struct s3 *s, const char *bucket, const char *const *keys, struct s3_obj *objs,
		 size_t n);
/* Many whole objects into their fds (each as s3_get_fd, If-Match its etag, which is required, and
 * of its known size), every range of every object in flight together (up to inflight). */
struct s3_file {
	const char *bucket, *key;
	int fd;
	const struct s3_obj *obj;   /* size and ETag, from a HEAD */
};
int s3_get_files(struct s3 *s, const struct s3_file *f, size_t n);
/* Many ranged GETs in flight: each request's bytes [off, off + len) into its buf; every one must
 * come whole. 0 when all did, else the first failure's -errno (each request's own in .ret). */
struct s3_range {
	const char *bucket, *key;
	uint64_t off;
	size_t len;           /* >= 1 */
	void *buf;
	int ret;              /* out: 0 or -errno */
};
int s3_get_ranges(struct s3 *s, struct s3_range *r, size_t n);
/* PUT @len bytes (one request). */
int s3_put(struct s3 *s, const char *bucket, const char *key, const void *buf, size_t len);
/* PUT file @fd (@size bytes from offset 0): one request up to part_size, else a multipart upload
 * with up to inflight parts in flight (aborted on failure, so no part lingers). */
int s3_put_fd(struct s3 *s, const char *bucket, const char *key, int fd, uint64_t size);
int s3_delete(struct s3 *s, const char *bucket, const char *key);
/* LIST every key under @prefix (ListObjectsV2, page after page), calling @fn for each in order;
 * a non-zero return from @fn stops the walk and is returned. */
typedef int (*s3_list_fn)(void *arg, const char *key, uint64_t size, const char *etag);
int s3_list(struct s3 *s, const char *bucket, const char *prefix, s3_list_fn fn, void *arg);
/* Check @size bytes of @fd against @etag when the ETag is the object's MD5 (a single-part upload
 * without KMS: 32 hex digits in quotes): 0 they match, 1 the ETag is not an MD5 (multipart, KMS),
 * -EBADMSG they differ (the MD5 in @md5hex, 33 bytes), or -errno reading @fd. */
int s3_etag_check_fd(int fd, uint64_t size, const char *etag, char *md5hex);
/* Counters since s3_create (bytes of response bodies kept, requests sent including retries). */
struct s3_counters {
	uint64_t bytes_in, requests, retries;
};
void s3_counters(const struct s3 *s, struct s3_counters *out);

/* ---- pieces exposed for their tests ---- */
/* Percent-encode @in as SigV4 wants (unreserved kept; '/' kept when @keep_slash). Bytes written
 * (without the NUL), or -E2BIG when @cap is too small. */
int s3_uri_encode(const char *in, int keep_slash, char *out, size_t cap);
/* The canonical query: @n "name=value" pairs (raw, unencoded), each part encoded and the pairs
 * sorted by name then value, joined by '&'. Bytes written, or -E2BIG. */
struct s3_qparam {
	const char *name, *value;
};
int s3_query_build(const struct s3_qparam *q, size_t n, char *out, size_t cap);
/* The store's error document (<Error><Code>..</Code><Message>..</Message></Error>): code and
 * message into @code / @msg (empty when absent). 0, or -EBADMSG when it is not XML. */
int s3_error_parse(const char *xml, size_t len, char *code, size_t codecap, char *msg,
		   size_t msgcap);

#ifdef __cplusplus
}
#endif
#endif
