/* remote.c - dpack's s3:// operands (docs/S3.md): a command's s3:// dataset is made local in the
 * user's cache first (s3/s3cache.h: fetched with the user's credentials, each object once per
 * version), and the command runs on the local copy; `dpack pack ... s3://bucket/prefix/NAME`
 * packs into a private temporary folder, then uploads the shards under the prefix (multipart above
 * 8 MiB) and the manifest NAME last, so that a reader never sees a manifest whose shards are not all
 * there; `dpack append s3://.../SET SHARD.dpk` checks the shard against the set as the store has it,
 * uploads it, then the manifest; `dpack fetch URL` makes a dataset local and prints where (the Python client calls it). */
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

/* PUT local file @local as @u's key. 0, or 1 after saying why. */
static int upload_one(struct s3 *s, const struct s3_url *u, const char *local)
{
	int fd = open(local, O_RDONLY | O_CLOEXEC), status = 1;
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		LOG_ERROR("%s: %s", local, strerror(errno));
	else if (s3_put_fd(s, u->bucket, u->key, fd, (uint64_t)st.st_size) < 0)
		LOG_ERROR("%s", s3_error(s));
	else
		status = 0;
	if (fd >= 0)
		close(fd);
	return status;
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

/* Copy file @from to @to (a hard link when they share a file system). 0 or -errno. */
static int copy_file(const char *from, const char *to)
{
	if (link(from, to) == 0)
		return 0;
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, ret = 0;
	char buf[1 << 16];
	if (in < 0)
		return -errno;
	out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		ret = -errno;
	for (ssize_t n; ret == 0 && (n = read(in, buf, sizeof(buf))) != 0;)
		if (n < 0 || write(out, buf, (size_t)n) != n)
			ret = n < 0 ? -errno : -EIO;
	close(in);
	if (out >= 0)
		close(out);
	return ret;
}

static void rm_rf(const char *dir)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		LOG_WARN("could not remove %s", dir);
}

/* dpack append s3://bucket/prefix/SET SHARD.dpk: the set as the store has it (through the cache;
 * none yet: a new set) is laid out in a private folder (the manifest copied, its shards linked to
 * the cached copies, the new shard beside them), dpack append runs there with every check it makes
 * locally, then the new shard is uploaded under the prefix and the manifest last. */
static int append_to_store(int argc, char **argv)
{
	const char *url = argv[1], *shard = argv[2];
	struct s3cache_result r;
	struct s3_url u;
	struct dpkset_manifest *m = NULL;
	char err[1024], tmpl[PATH_MAX], man[PATH_MAX * 2], path[PATH_MAX * 3];
	int status = 1, have = 1;

	if (argc != 3 || s3_is_url(shard)) {
		LOG_ERROR("usage: dpack append s3://bucket/prefix/SET SHARD.dpk (a local shard)");
		return 2;
	}
	if (s3_url_parse(url, &u, err, sizeof(err)) < 0) {
		LOG_ERROR("%s", err);
		return 2;
	}
	const char *base = strrchr(u.key, '/'), *sbase = strrchr(shard, '/');
	base = base ? base + 1 : u.key;
	sbase = sbase ? sbase + 1 : shard;
	if (!*base) {
		LOG_ERROR("%s names no object: give s3://bucket/prefix/SET", url);
		return 2;
	}
	int ret = s3cache_resolve(url, &r, err, sizeof(err));
	if (ret == -ENOENT && r.objects == 0) {
		have = 0;  /* no manifest there yet: a new set (a missing shard is an error below) */
	} else if (ret < 0) {
		LOG_ERROR("%s", err);
		return 1;
	}
	const char *t = getenv("TMPDIR");
	snprintf(tmpl, sizeof(tmpl), "%s/dpack-s3.XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(tmpl)) {
		LOG_ERROR("%s: %s", tmpl, strerror(errno));
		return 1;
	}
	snprintf(man, sizeof(man), "%s/%s", tmpl, base);
	if (have) {
		char *text = NULL;
		FILE *f = fopen(r.path, "re");
		size_t cap = 0;
		ssize_t n = f ? getdelim(&text, &cap, '\0', f) : -1;
		if (f)
			fclose(f);
		if (n < 0 || dpkset_parse(text, (size_t)n, url, &m, err, sizeof(err)) < 0) {
			LOG_ERROR("%s", n < 0 ? "cannot read the cached manifest" : err);
			free(text);
			goto out;
		}
		FILE *o = fopen(man, "we");
		if (!o || fwrite(text, 1, (size_t)n, o) != (size_t)n) {
			LOG_ERROR("%s: %s", man, strerror(errno));
			if (o)
				fclose(o);
			free(text);
			goto out;
		}
		fclose(o);
		free(text);
		char vdir[PATH_MAX];
		snprintf(vdir, sizeof(vdir), "%s", r.path);
		*strrchr(vdir, '/') = '\0';
		for (uint32_t i = 0; i < m->n; i++) {
			char to[PATH_MAX * 3];
			snprintf(path, sizeof(path), "%s/%s", vdir, m->shards[i].path);
			snprintf(to, sizeof(to), "%s/%s", tmpl, m->shards[i].path);
			for (char *p = to + strlen(tmpl) + 1; (p = strchr(p, '/')); p++) {
				*p = '\0';
				mkdir(to, 0700);
				*p = '/';
			}
			if (symlink(path, to) < 0) {
				LOG_ERROR("%s: %s", to, strerror(errno));
				goto out;
			}
		}
	}
	snprintf(path, sizeof(path), "%s/%s", tmpl, sbase);
	if ((ret = copy_file(shard, path)) < 0) {
		LOG_ERROR("%s: %s", shard, ret == -EEXIST ? "a shard of that name is in the set already" :
			  strerror(-ret));
		goto out;
	}
	char *av[] = { (char *)"append", man, path, NULL };
	if (dpack_append_main(3, av) != 0) {
		LOG_ERROR("%s: %s not appended (above: the set as laid out in %s); the store's set is "
			  "unchanged", url, shard, tmpl);
		goto out;
	}
	/* the new shard under the prefix, then the manifest */
	struct s3 *s = client();
	if (!s)
		goto out;
	char key[S3_KEY_MAX + 1];
	size_t plen = (size_t)(base - u.key);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (plen + strlen(sbase) > S3_KEY_MAX || fd < 0 || fstat(fd, &st) < 0) {
		LOG_ERROR("%s: %s", path, fd < 0 ? strerror(errno) : "its key is too long");
	} else {
		snprintf(key, sizeof(key), "%.*s%s", (int)plen, u.key, sbase);
		if (s3_put_fd(s, u.bucket, key, fd, (uint64_t)st.st_size) < 0)
			LOG_ERROR("%s", s3_error(s));
		else
			status = upload_one(s, &u, man);
	}
	if (fd >= 0)
		close(fd);
	s3_destroy(s);
out:
	dpkset_manifest_destroy(m);
	rm_rf(tmpl);
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
	if (cmd_main == dpack_append_main)
		return append_to_store(argc, argv);
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
