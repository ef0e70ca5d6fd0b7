/* remote.c - dpack's s3:// operands (docs/S3.md): a command's s3:// dataset is made local in the
 * user's cache first (s3/s3cache.h: fetched with the user's credentials, each object once per
 * version), and the command runs on the local copy; `dpack pack ... s3://bucket/prefix/NAME`
 * packs into a private temporary folder, then uploads the shards under the prefix (multipart above
 * 8 MiB) and the manifest NAME last, so that a reader never sees a manifest whose shards are not all
 * there; `dpack fetch URL` makes a dataset local and prints where (the Python client calls it). */
#include "common/log.h"
#include "formats/dpkset.h"
#include "s3/s3.h"
#include "s3/s3cache.h"
#include "tools/dpack/dpack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct s3 *client(void)
{
	struct s3_cfg c;
	struct s3 *s;
	char err[512];
	int ret = s3_cfg_load(&c, err, sizeof(err));
	if (ret == 0) {
		ret = s3_create(&c, &s, err, sizeof(err));
		s3_cfg_fini(&c);
	}
	if (ret < 0) {
		LOG_ERROR("%s", err);
		return NULL;
	}
	return s;
}

/* Make @url local (@r). 0, or 1 after saying why. */
static int fetch(const char *url, struct s3cache_result *r)
{
	char err[1024];
	if (s3cache_resolve(url, r, err, sizeof(err)) < 0) {
		LOG_ERROR("%s", err);
		return 1;
	}
	return 0;
}

static const char fetch_usage[] =
	"usage: dpack fetch s3://bucket/prefix/NAME\n"
	"Make an s3:// dataset (a .dpk, or a set's manifest NAME and its shards under prefix/) local\n"
	"in your cache (LOADERD_S3_CACHE, else ~/.cache/loaderd/s3), fetching only what is missing or\n"
	"changed, with your credentials (AWS_* variables, ~/.aws/credentials). Ends on one JSON line:\n"
	"{\"path\": LOCAL, \"objects\": N, \"fetched\": N, \"bytes\": N, \"fetched_bytes\": N}\n";

static int fetch_main(int argc, char **argv)
{
	struct s3cache_result r;
	if (argc != 2 || !s3_is_url(argv[1])) {
		fputs(fetch_usage, argc == 2 && !strcmp(argv[1], "--help") ? stdout : stderr);
		return argc == 2 && !strcmp(argv[1], "--help") ? 0 : 2;
	}
	if (fetch(argv[1], &r))
		return 1;
	printf("{\"path\": \"");
	for (const char *p = r.path; *p; p++)
		printf(*p == '"' || *p == '\\' ? "\\%c" : (unsigned char)*p < 0x20 ? "\\u%04x" : "%c",
		       *p);
	printf("\", \"objects\": %u, \"fetched\": %u, \"bytes\": %llu, \"fetched_bytes\": %llu}\n",
	       r.objects, r.fetched, (unsigned long long)r.bytes,
	       (unsigned long long)r.fetched_bytes);
	return 0;
}

/* Upload what `dpack pack` wrote at @local (a .dpk, or a manifest and its shards beside it) as
 * @url: the shards first, the manifest last. 0 or 1 after saying why. */
static int upload(const char *local, const char *url)
{
	struct s3_url u;
	struct dpkset_manifest *m = NULL;
	char err[1024], head[8] = "", key[S3_KEY_MAX + 1];
	struct s3 *s;
	int status = 1;

	if (s3_url_parse(url, &u, err, sizeof(err)) < 0) {
		LOG_ERROR("%s", err);
		return 1;
	}
	if (!(s = client()))
		return 1;
	int fd = open(local, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || pread(fd, head, sizeof(head), 0) < 0) {
		LOG_ERROR("%s: %s", local, strerror(errno));
		goto out;
	}
	const char *base = strrchr(u.key, '/');
	size_t plen = base ? (size_t)(base + 1 - u.key) : 0;
	if (dpkset_is_manifest(head, (size_t)st.st_size < sizeof(head) ? (size_t)st.st_size :
			       sizeof(head))) {
		char *text = malloc((size_t)st.st_size + 1);
		if (!text || pread(fd, text, (size_t)st.st_size, 0) != st.st_size) {
			free(text);
			LOG_ERROR("%s: cannot read the manifest", local);
			goto out;
		}
		int ret = dpkset_parse(text, (size_t)st.st_size, local, &m, err, sizeof(err));
		free(text);
		if (ret < 0) {
			LOG_ERROR("%s", err);
			goto out;
		}
		char dir[PATH_MAX * 2];
		snprintf(dir, sizeof(dir), "%s", local);
		*strrchr(dir, '/') = '\0';
		for (uint32_t i = 0; i < m->n; i++) {
			char path[PATH_MAX * 4];
			if (plen + strlen(m->shards[i].path) > S3_KEY_MAX) {
				LOG_ERROR("%s: shard %s makes a key above S3's %u bytes", url,
					  m->shards[i].path, S3_KEY_MAX);
				goto out;
			}
			snprintf(key, sizeof(key), "%.*s%s", (int)plen, u.key, m->shards[i].path);
			snprintf(path, sizeof(path), "%s/%s", dir, m->shards[i].path);
			int sfd = open(path, O_RDONLY | O_CLOEXEC);
			struct stat sst;
			if (sfd < 0 || fstat(sfd, &sst) < 0) {
				LOG_ERROR("%s: %s", path, strerror(errno));
				if (sfd >= 0)
					close(sfd);
				goto out;
			}
			ret = s3_put_fd(s, u.bucket, key, sfd, (uint64_t)sst.st_size);
			close(sfd);
			if (ret < 0) {
				LOG_ERROR("%s", s3_error(s));
				goto out;
			}
		}
	}
	/* the manifest (or the one .dpk) last: once it is there, everything it names is */
	if (s3_put_fd(s, u.bucket, u.key, fd, (uint64_t)st.st_size) < 0) {
		LOG_ERROR("%s", s3_error(s));
		goto out;
	}
	fprintf(stderr, "dpack: uploaded %s (%u objects)\n", url, m ? m->n + 1 : 1);
	status = 0;
out:
	if (fd >= 0)
		close(fd);
	dpkset_manifest_destroy(m);
	s3_destroy(s);
	return status;
}

static int pack_to_store(int argc, char **argv, int out)
{
	const char *url = argv[out];
	struct s3_url u;
	char err[512], tmpl[PATH_MAX], local[PATH_MAX * 2];
	if (s3_url_parse(url, &u, err, sizeof(err)) < 0) {
		LOG_ERROR("%s", err);
		return 2;
	}
	const char *base = strrchr(u.key, '/');
	base = base ? base + 1 : u.key;
	if (!*base) {
		LOG_ERROR("%s names no object: give s3://bucket/prefix/NAME", url);
		return 2;
	}
	const char *t = getenv("TMPDIR");
	snprintf(tmpl, sizeof(tmpl), "%s/dpack-s3.XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(tmpl)) {
		LOG_ERROR("%s: %s", tmpl, strerror(errno));
		return 1;
	}
	snprintf(local, sizeof(local), "%s/%s", tmpl, base);
	argv[out] = local;
	int status = dpack_pack_main(argc, argv);
	argv[out] = (char *)url;
	if (status == 0)
		status = upload(local, url);
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
	if (system(cmd) != 0)
		LOG_WARN("could not remove %s", tmpl);
	return status;
}

int dpack_remote_main(int argc, char **argv, int (*cmd_main)(int, char **))
{
	if (cmd_main == NULL)
		return fetch_main(argc, argv);
	int last = -1;
	for (int i = 1; i < argc; i++)
		if (s3_is_url(argv[i]))
			last = i;
	if (last < 0)
		return cmd_main(argc, argv);
	if (cmd_main == dpack_pack_main) {
		if (last != argc - 1) {
			LOG_ERROR("%s: an s3:// URL is taken as pack's output only", argv[last]);
			return 2;
		}
		return pack_to_store(argc, argv, last);
	}
	if (cmd_main == dpack_append_main) {
		LOG_ERROR("%s: dpack append does not take s3:// URLs yet (pack the set again, or "
			  "append locally and pack)", argv[last]);
		return 2;
	}
	/* verify, inspect, decode: on the local copy */
	struct s3cache_result r;
	const char *url = argv[last];
	if (fetch(url, &r))
		return 1;
	fprintf(stderr, "dpack: %s is %s (%u objects, %u fetched now, %llu bytes)\n", url, r.path,
		r.objects, r.fetched, (unsigned long long)r.fetched_bytes);
	argv[last] = r.path;
	int status = cmd_main(argc, argv);
	argv[last] = (char *)url;
	return status;
}
