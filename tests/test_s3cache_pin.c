/* test_s3cache_pin.c - s3/s3cache.c's side-by-side fetches (s3cache_opts.concurrent, loaderd's
 * node cache): what a fetch has just fetched stays pinned while its cache lock is let go, so that
 * another fetch's eviction of orphans (objects no view links yet) leaves it alone. The store is a
 * small HTTP server in this process (no signature checked), which holds the HEAD of a streamed
 * set's shard until told: a deterministic window in which the open has fetched the manifest, has
 * not linked it into its view yet, and has let the cache's lock go. Another fetch, under a bound
 * that needs room, then evicts every orphan not pinned; the open must still succeed (before the
 * fix, the manifest's pin failed under its part's write lock, the manifest was evicted and the
 * open failed with "the cache: linking .../set.dpks: No such file or directory"). */
/* link: -lcurl -lexpat -lcrypto */
#include "s3/s3cache.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/tmpdir.h"

/* ---- the store: bucket "bkt", a set of one shard under p/, a .dpk under q/ ---- */

static const char MANIFEST[] = "dpkset 1\n5 0123456789abcdef0123456789abcdef s00000.dpk\nend 1\n";
static const char SHARD[] = "shard";
static const char OTHER[] = "other";

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int head_held;   /* the shard's HEAD arrived and is held */
static int go;          /* answer it */
static int lfd = -1;

static void *conn(void *arg)
{
	int c = (int)(intptr_t)arg;
	char buf[8192];
	size_t have = 0;
	for (;;) {
		char *end;
		while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
			if (have == sizeof(buf))
				goto out;
			ssize_t n = read(c, buf + have, sizeof(buf) - have);
			if (n <= 0)
				goto out;
			have += (size_t)n;
		}
		size_t reqlen = (size_t)(end - buf) + 4;
		char method[8] = "", path[1024] = "";
		sscanf(buf, "%7s %1023s", method, path);
		unsigned long long from = 0, to = 0;
		int ranged = 0;
		char *r = memmem(buf, reqlen, "\r\nRange: bytes=", 15);
		if (!r)
			r = memmem(buf, reqlen, "\r\nrange: bytes=", 15);
		if (r && sscanf(r + 15, "%llu-%llu", &from, &to) == 2)
			ranged = 1;
		memmove(buf, buf + reqlen, have - reqlen);
		have -= reqlen;
		char *q = strchr(path, '?');
		if (q)
			*q = '\0';
		int head = !strcmp(method, "HEAD");
		const char *body = NULL;
		if (!strcmp(path, "/bkt/p/set.dpks"))
			body = MANIFEST;
		else if (!strcmp(path, "/bkt/p/s00000.dpk"))
			body = SHARD;
		else if (!strcmp(path, "/bkt/q/o.dpk"))
			body = OTHER;
		if (body == SHARD && head) {
			pthread_mutex_lock(&mu);
			head_held = 1;
			pthread_cond_broadcast(&cv);
			while (!go)
				pthread_cond_wait(&cv, &mu);
			pthread_mutex_unlock(&mu);
		}
		char hdr[512];
		size_t len = body ? strlen(body) : 0, off = 0;
		int code = body ? 200 : 404;
		if (body && ranged && from < len) {
			if (to >= len)
				to = len - 1;
			off = (size_t)from;
			len = (size_t)(to - from + 1);
			code = 206;
		}
		int h = snprintf(hdr, sizeof(hdr), "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n"
				 "ETag: \"e-%s\"\r\n\r\n", code, body ? len : 0,
				 body == MANIFEST ? "m" : body == SHARD ? "s" : "o");
		if (write(c, hdr, (size_t)h) != h || (body && !head && write(c, body + off, len) !=
						       (ssize_t)len))
			goto out;
	}
out:
	close(c);
	return NULL;
}

static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(lfd, NULL, NULL);
		if (c < 0)
			return NULL;
		pthread_t t;
		if (pthread_create(&t, NULL, conn, (void *)(intptr_t)c) == 0)
			pthread_detach(t);
		else
			close(c);
	}
}

static int store_start(char *url, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 64) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &al) < 0)
		return -1;
	snprintf(url, len, "http://127.0.0.1:%u", ntohs(a.sin_port));
	pthread_t t;
	if (pthread_create(&t, NULL, serve, NULL))
		return -1;
	pthread_detach(t);
	return 0;
}

static struct s3 *client(const char *url)
{
	struct s3_cfg c = { .endpoint = (char *)url, .region = (char *)"r",
			    .access_key = (char *)"AK", .secret_key = (char *)"SK", .retries = 1,
			    .backoff_ms = 1, .timeout_ms = 20000, .inflight = 4 };
	struct s3 *s = NULL;
	char err[256];
	if (s3_create(&c, &s, err, sizeof(err)) < 0)
		fail_msg("s3_create: %s", err);
	return s;
}

/* ---- the open, in its own thread ---- */

struct opener {
	struct s3 *s;
	const char *dir;
	int ret;
	char err[512];
	struct s3cache_stream *st;
};

static int take(void *arg, uint32_t k, const char *path, char *err, size_t errlen)
{
	(void)arg;
	(void)k;
	(void)path;
	(void)err;
	(void)errlen;
	return 0;
}

static void *open_set(void *arg)
{
	struct opener *o = arg;
	struct s3cache_opts opts = { .bound = 0, .bound_name = "--cache-size", .concurrent = 1 };
	o->ret = s3cache_stream_open(o->s, o->dir, &opts, "s3://bkt/p/set.dpks", take, NULL, &o->st,
				     o->err, sizeof(o->err));
	return NULL;
}

/* the manifest's object: the one file of objects/ (but the lock) */
static int manifest_object(const char *dir, char *out, size_t len)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/objects", dir);
	DIR *d = opendir(p);
	struct dirent *e;
	int n = 0;
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.' && !strstr(e->d_name, ".tmp.")) {
			snprintf(out, len, "%s/%s", p, e->d_name);
			n++;
		}
	if (d)
		closedir(d);
	return n;
}

static void test_fresh_manifest_pinned_while_heads(void **state)
{
	char dir[64], url[64], obj[PATH_MAX + 300], err[512];
	(void)state;
	assert_int_equal(tmpdir_create(dir, sizeof(dir), "s3cache_pin"), 0);
	assert_int_equal(store_start(url, sizeof(url)), 0);
	struct opener o = { .s = client(url), .dir = dir };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, open_set, &o), 0);

	/* the open has fetched the manifest, and its lock is let go for the shard's HEAD */
	pthread_mutex_lock(&mu);
	while (!head_held)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	int nobj = manifest_object(dir, obj, sizeof(obj));
	int pinned = nobj == 1 && s3cache_pinned(obj);

	/* another fetch, under a bound of one block, makes room for its own object: orphans first */
	struct s3 *s2 = client(url);
	struct s3cache_opts opts = { .bound = 4096, .bound_name = "--cache-size", .concurrent = 1 };
	struct s3cache_result r;
	int lockfd = -1;
	int ret2 = s3cache_fetch_opts(s2, dir, &opts, "s3://bkt/q/o.dpk", &r, &lockfd, err,
				      sizeof(err));
	if (lockfd >= 0)
		close(lockfd);
	s3_destroy(s2);
	struct stat sb;
	int still = nobj == 1 && stat(obj, &sb) == 0;

	pthread_mutex_lock(&mu);
	go = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	assert_int_equal(pthread_join(t, NULL), 0);

	print_message("# objects %d, manifest pinned %d, other fetch %d (%s), manifest kept %d, "
		      "open %d (%s)\n", nobj, pinned, ret2, ret2 ? err : "", still, o.ret,
		      o.ret ? o.err : "");
	s3cache_stream_close(o.st);
	s3_destroy(o.s);
	assert_int_equal(tmpdir_remove(dir), 0);
	assert_int_equal(nobj, 1);
	assert_true(pinned);  /* a freshly fetched object is pinned once its part is closed */
	/* kept from the other fetch's eviction (it found no room instead), and the open succeeds */
	assert_true(still);
	assert_int_equal(ret2, -ENOSPC);
	assert_int_equal(o.ret, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fresh_manifest_pinned_while_heads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
