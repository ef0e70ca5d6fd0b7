/* s3cfg.c - where S3 requests go and with what rights (s3/s3cfg.h): the environment, the
 * credentials file and the config file, read with the caller's rights. No network and libc alone,
 * so that the client library (libldc.so, shm/ldc.c's ldc_s3_offer) carries it without libcurl;
 * the S3 client (s3.c) and the tools take it from there. */
#include "s3/s3cfg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CRED_FILE_MAX (1u << 20)

static int cfg_err(char *buf, size_t len, int ret, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int cfg_err(char *buf, size_t len, int ret, const char *fmt, ...)
{
	va_list ap;

	if (buf && len) {
		va_start(ap, fmt);
		vsnprintf(buf, len, fmt, ap);
		va_end(ap);
	}
	return ret;
}

static char *dupstr(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

static void wipe_free(char *s)
{
	if (s) {
		volatile char *v = s;
		while (*v)
			*v++ = 0;
		free(s);
	}
}

void s3_cfg_fini(struct s3_cfg *c)
{
	if (!c)
		return;
	free(c->endpoint);
	free(c->region);
	wipe_free(c->access_key);
	wipe_free(c->secret_key);
	wipe_free(c->session_token);
	memset(c, 0, sizeof(*c));
}

static const char *trim(char *s, char **end)
{
	while (*s == ' ' || *s == '\t')
		s++;
	char *e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		e--;
	*e = '\0';
	if (end)
		*end = e;
	return s;
}

int s3_cfg_parse_credentials(struct s3_cfg *c, const char *text, const char *profile, char *err,
			     size_t errlen)
{
	char *copy = strdup(text), *save = NULL, *line;
	int in = 0, found = 0, lineno = 0, ret = 0;
	char *ak = NULL, *sk = NULL, *tok = NULL;

	if (!copy)
		return -ENOMEM;
	/* strsep, not strtok: empty lines still count for the line numbers */
	for (save = copy; (line = strsep(&save, "\n")) != NULL;) {
		lineno++;
		const char *l = trim(line, NULL);
		if (!*l || *l == '#' || *l == ';')
			continue;
		if (*l == '[') {
			const char *close = strchr(l, ']');
			if (!close) {
				ret = cfg_err(err, errlen, -EINVAL, "credentials line %d: a section "
					      "without ']'", lineno);
				break;
			}
			char name[256];
			snprintf(name, sizeof(name), "%.*s", (int)(close - l - 1), l + 1);
			in = !strcmp(trim(name, NULL), profile);
			found |= in;
			continue;
		}
		if (!in)
			continue;
		char *eq = strchr(l, '=');
		if (!eq) {
			ret = cfg_err(err, errlen, -EINVAL, "credentials line %d (profile %s): no '='",
				      lineno, profile);
			break;
		}
		*eq = '\0';
		char *kend;
		const char *k = trim((char *)l, &kend), *v = trim(eq + 1, NULL);
		char **dst = !strcmp(k, "aws_access_key_id") ? &ak :
			     !strcmp(k, "aws_secret_access_key") ? &sk :
			     !strcmp(k, "aws_session_token") ? &tok : NULL;
		if (dst) {
			wipe_free(*dst);
			if (!(*dst = strdup(v))) {
				ret = -ENOMEM;
				break;
			}
		}
	}
	if (ret == 0 && (!found || !ak || !sk))
		ret = cfg_err(err, errlen, -ENOENT, !found ? "no profile [%s]" :
			      "profile [%s] lacks aws_access_key_id or aws_secret_access_key",
			      profile);
	if (ret == 0) {
		wipe_free(c->access_key);
		wipe_free(c->secret_key);
		wipe_free(c->session_token);
		c->access_key = ak;
		c->secret_key = sk;
		c->session_token = tok;
	} else {
		wipe_free(ak);
		wipe_free(sk);
		wipe_free(tok);
	}
	memset(copy, 0, strlen(text));
	free(copy);
	return ret;
}

static int env_uint(const char *name, unsigned lo, unsigned hi, unsigned *out, char *err,
		    size_t errlen)
{
	const char *v = getenv(name);
	char *end;
	if (!v || !*v)
		return 0;
	errno = 0;
	unsigned long n = strtoul(v, &end, 10);
	if (errno || *end || n < lo || n > hi)
		return cfg_err(err, errlen, -EINVAL, "%s='%.32s': not a number in %u..%u", name, v,
			       lo, hi);
	*out = (unsigned)n;
	return 0;
}

static int read_small(const char *path, char **out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > CRED_FILE_MAX) {
		close(fd);
		return -EINVAL;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	ssize_t n = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	close(fd);
	if (n < 0) {
		free(buf);
		return buf ? -EIO : -ENOMEM;
	}
	buf[n] = '\0';
	*out = buf;
	return 0;
}

/* The value of @key in section [@sect] (or [@alt], when given) of INI text @text, into @out: 1
 * found, 0 not found (or longer than @outlen). Malformed lines are skipped: this file is optional
 * and only read for region and endpoint. */
static int ini_get(const char *text, const char *sect, const char *alt, const char *key, char *out,
		   size_t outlen)
{
	int in = 0;
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		char line[1024], *e;
		const char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		if (n >= sizeof(line))
			continue;
		memcpy(line, l, n);
		line[n] = '\0';
		const char *t = trim(line, &e);
		if (*t == '[') {
			char *close = strchr(t, ']');
			if (close) {
				*close = '\0';
				const char *name = trim((char *)t + 1, NULL);
				in = !strcmp(name, sect) || (alt && !strcmp(name, alt));
			}
			continue;
		}
		char *eq = in ? strchr(t, '=') : NULL;
		if (!eq)
			continue;
		*eq = '\0';
		if (strcmp(trim((char *)t, NULL), key))
			continue;
		const char *v = trim(eq + 1, NULL);
		if (strlen(v) >= outlen)
			return 0;
		strcpy(out, v);
		return 1;
	}
	return 0;
}

int s3_cfg_load(struct s3_cfg *c, char *err, size_t errlen)
{
	int ret = 0;

	memset(c, 0, sizeof(*c));
	c->retries = 5;
	c->backoff_ms = 100;
	c->timeout_ms = 30000;
	c->inflight = 16;
	c->part_size = 8u << 20;
	const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
	if ((ak && *ak) || (sk && *sk)) {
		if (!ak || !*ak || !sk || !*sk) {
			ret = cfg_err(err, errlen, -EINVAL, "%s is set but %s is not",
				      ak && *ak ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
				      ak && *ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
			goto fail;
		}
		const char *tok = getenv("AWS_SESSION_TOKEN");
		c->access_key = strdup(ak);
		c->secret_key = strdup(sk);
		c->session_token = tok && *tok ? strdup(tok) : NULL;
		if (!c->access_key || !c->secret_key || (tok && *tok && !c->session_token)) {
			ret = -ENOMEM;
			goto fail;
		}
	} else {
		const char *profile = getenv("AWS_PROFILE"), *file = getenv("AWS_SHARED_CREDENTIALS_FILE");
		char path[4096], why[256];
		char *text = NULL;
		if (!profile || !*profile)
			profile = "default";
		if (file && *file) {
			snprintf(path, sizeof(path), "%s", file);
		} else {
			const char *home = getenv("HOME");
			snprintf(path, sizeof(path), "%s/.aws/credentials", home ? home : "");
		}
		ret = read_small(path, &text);
		if (ret < 0) {
			ret = cfg_err(err, errlen, -ENOKEY, "no S3 credentials: AWS_ACCESS_KEY_ID and "
				      "AWS_SECRET_ACCESS_KEY are not set and %s cannot be read (%s)",
				      path, strerror(-ret));
			goto fail;
		}
		ret = s3_cfg_parse_credentials(c, text, profile, why, sizeof(why));
		memset(text, 0, strlen(text));
		free(text);
		if (ret < 0) {
			ret = cfg_err(err, errlen, ret == -ENOENT ? -ENOKEY : ret,
				      "no S3 credentials in %s: %s", path, why);
			goto fail;
		}
	}
	/* region and endpoint: the environment, else the profile's section of the config file */
	const char *profile = getenv("AWS_PROFILE"), *cfile = getenv("AWS_CONFIG_FILE");
	char cpath[4096], psect[300], conf_region[64], conf_ep[512];
	char *conf = NULL;
	int have_region = 0, have_ep = 0;
	if (!profile || !*profile)
		profile = "default";
	if (cfile && *cfile) {
		snprintf(cpath, sizeof(cpath), "%s", cfile);
	} else {
		const char *home = getenv("HOME");
		snprintf(cpath, sizeof(cpath), "%s/.aws/config", home ? home : "");
	}
	snprintf(psect, sizeof(psect), "profile %s", profile);
	if (read_small(cpath, &conf) == 0) {
		const char *alt = strcmp(profile, "default") ? profile : NULL;
		const char *sect = strcmp(profile, "default") ? psect : "default";
		have_region = ini_get(conf, sect, alt, "region", conf_region, sizeof(conf_region));
		have_ep = ini_get(conf, sect, alt, "endpoint_url", conf_ep, sizeof(conf_ep));
		free(conf);
	}
	const char *region = getenv("AWS_REGION");
	if (!region || !*region)
		region = getenv("AWS_DEFAULT_REGION");
	if ((!region || !*region) && have_region)
		region = conf_region;
	if (!region || !*region)
		region = "us-east-1";
	for (const char *p = region; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')) {
			ret = cfg_err(err, errlen, -EINVAL, "%s '%.64s': not a region name",
				      region == conf_region ? "the config file's region" : "AWS_REGION",
				      region);
			goto fail;
		}
	c->region = strdup(region);
	const char *ep = getenv("AWS_ENDPOINT_URL_S3");
	if (!ep || !*ep)
		ep = getenv("AWS_ENDPOINT_URL");
	if ((!ep || !*ep) && have_ep)
		ep = conf_ep;
	if (ep && *ep) {
		if (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8)) {
			ret = cfg_err(err, errlen, -EINVAL, "%s '%.128s': not an http:// or https:// "
				      "URL", ep == conf_ep ? "endpoint_url in the config file" :
				      "AWS_ENDPOINT_URL", ep);
			goto fail;
		}
		size_t n = strlen(ep);
		while (n && ep[n - 1] == '/')
			n--;
		c->endpoint = dupstr(ep, n);
	} else if (c->region) {
		char buf[256];
		snprintf(buf, sizeof(buf), "https://s3.%s.amazonaws.com", c->region);
		c->endpoint = strdup(buf);
	}
	if (!c->region || !c->endpoint) {
		ret = -ENOMEM;
		goto fail;
	}
	if ((ret = env_uint("LOADERD_S3_RETRIES", 0, 20, &c->retries, err, errlen)) < 0 ||
	    (ret = env_uint("LOADERD_S3_BACKOFF_MS", 1, 60000, &c->backoff_ms, err, errlen)) < 0)
		goto fail;
	return 0;
fail:
	s3_cfg_fini(c);
	return ret;
}
