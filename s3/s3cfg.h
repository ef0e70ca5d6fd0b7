/* s3cfg.h - an S3 client's configuration (s3cfg.c): endpoint, region, credentials and the
 * client's knobs, read with the caller's rights from the places s3.h lists. libc alone, no network:
 * the client library (shm/ldc.c, ldc_s3_offer) reads a user's credentials with it to hand them to
 * loaderd's node cache. The strings are never written to a message, a log or an error. */
#ifndef LOADERD_S3CFG_H
#define LOADERD_S3CFG_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Where requests go and with what rights. Strings owned (s3_cfg_fini frees them). */
struct s3_cfg {
	char *endpoint;       /* "http://host:port" or "https://host", no trailing '/' */
	char *region;
	char *access_key, *secret_key, *session_token;  /* session_token may be NULL */
	unsigned retries;     /* retries after the first try (default 5) */
	unsigned backoff_ms;  /* first backoff; doubles each retry, capped at 100x; full jitter */
	unsigned timeout_ms;  /* no byte for this long ends a try (default 30000) */
	unsigned inflight;    /* requests in flight at once, 1..S3_INFLIGHT_MAX (default 16) */
	uint64_t part_size;   /* multipart part size, >= S3_PART_MIN (default 8 MiB); objects above
			       * it go up in parts */
	unsigned list_page;   /* keys per LIST page asked for (max-keys); 0: the store's (1000) */
};
/* Fill @c from the environment and the credentials file (above). 0, or -errno with the reason
 * (naming the variable, the file and the profile, never a key) in @err: -ENOKEY no credentials
 * found, -EINVAL a malformed value. LOADERD_S3_RETRIES and LOADERD_S3_BACKOFF_MS override
 * retries and backoff_ms (tests make failures fast with them). */
int s3_cfg_load(struct s3_cfg *c, char *err, size_t errlen);
void s3_cfg_fini(struct s3_cfg *c);  /* NULL ok; wipes the secret */
/* Parse credentials file text @text for section @profile into @c's keys (tests call it; s3_cfg_load
 * reads the file). 0, -ENOENT (no such profile, or no keys in it), -EINVAL malformed (line named),
 * -ENOMEM. */
int s3_cfg_parse_credentials(struct s3_cfg *c, const char *text, const char *profile, char *err,
			     size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
