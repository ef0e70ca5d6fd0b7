/* test_s3.c - s3/s3.c, the S3 client. The parsing, encoding and credential cases run anywhere.
 * The store cases run against a real S3 API server, moto (signatures checked), and the fault
 * cases against tests/s3_fault.py (503/429, responses cut short, resets): tests/it_s3.sh starts
 * both and runs this binary with LOADERD_S3_TEST=1 and LOADERD_S3_FAULT=http://127.0.0.1:PORT;
 * without them those cases are skipped (a plain `make test` run of this binary), never passed. */
/* link: -lcurl -lexpat -lcrypto */
#include "s3/s3.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/tmpdir.h"

/* ---- URLs ---- */

static void test_s3_url_parse_ok(void **state)
{
	struct s3_url u;
	char err[256];
	(void)state;
	assert_int_equal(s3_url_parse("s3://my-bucket.x/a/b/c.dpk", &u, err, sizeof(err)), 0);
	assert_string_equal(u.bucket, "my-bucket.x");
	assert_string_equal(u.key, "a/b/c.dpk");
	assert_int_equal(s3_url_parse("s3://abc", &u, err, sizeof(err)), 0);
	assert_string_equal(u.key, "");
	assert_true(s3_is_url("s3://x"));
	assert_false(s3_is_url("/data/s3://x"));
	assert_false(s3_is_url(NULL));
}

static void test_s3_url_parse_bounds(void **state)
{
	struct s3_url u;
	char err[256], url[S3_KEY_MAX + 200];
	(void)state;
	/* bucket: 3 and 63 bytes pass, 2 and 64 fail */
	assert_int_equal(s3_url_parse("s3://abc/k", &u, err, sizeof(err)), 0);
	assert_int_equal(s3_url_parse("s3://ab/k", &u, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "2 bytes"));
	snprintf(url, sizeof(url), "s3://%063d/k", 0);
	assert_int_equal(s3_url_parse(url, &u, err, sizeof(err)), 0);
	snprintf(url, sizeof(url), "s3://%064d/k", 0);
	assert_int_equal(s3_url_parse(url, &u, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "64 bytes"));
	assert_int_equal(s3_url_parse("s3://aBc/k", &u, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'B'"));
	/* key: S3_KEY_MAX bytes pass, one more fails */
	int o = snprintf(url, sizeof(url), "s3://abc/");
	memset(url + o, 'k', S3_KEY_MAX);
	url[o + S3_KEY_MAX] = '\0';
	assert_int_equal(s3_url_parse(url, &u, err, sizeof(err)), 0);
	assert_int_equal(strlen(u.key), S3_KEY_MAX);
	url[o + S3_KEY_MAX] = 'k';
	url[o + S3_KEY_MAX + 1] = '\0';
	assert_int_equal(s3_url_parse(url, &u, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "1025 bytes"));
	assert_int_equal(s3_url_parse("s3://abc/a\nb", &u, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "0x0a"));
	assert_int_equal(s3_url_parse("http://abc/k", &u, err, sizeof(err)), -EINVAL);
}

/* ---- encoding and the canonical query (what curl 7.88 does not do for us) ---- */

static void test_s3_uri_encode(void **state)
{
	char out[64];
	(void)state;
	assert_int_equal(s3_uri_encode("a b/c~d+é", 1, out, sizeof(out)), 18);
	assert_string_equal(out, "a%20b/c~d%2B%C3%A9");
	assert_true(s3_uri_encode("a/b", 0, out, sizeof(out)) > 0);
	assert_string_equal(out, "a%2Fb");
	/* the bound: exactly enough room passes, one byte less is -E2BIG */
	assert_int_equal(s3_uri_encode("abc", 0, out, 4), 3);
	assert_int_equal(s3_uri_encode("abc", 0, out, 3), -E2BIG);
	assert_int_equal(s3_uri_encode(" ", 0, out, 4), 3);
	assert_int_equal(s3_uri_encode(" ", 0, out, 3), -E2BIG);
}

static void test_s3_query_sorted_and_encoded(void **state)
{
	char out[256];
	(void)state;
	struct s3_qparam q[] = { { "prefix", "a b/" }, { "list-type", "2" },
				 { "continuation-token", "x=y" } };
	assert_true(s3_query_build(q, 3, out, sizeof(out)) > 0);
	assert_string_equal(out, "continuation-token=x%3Dy&list-type=2&prefix=a%20b%2F");
	struct s3_qparam u[] = { { "uploads", "" } };
	assert_true(s3_query_build(u, 1, out, sizeof(out)) > 0);
	assert_string_equal(out, "uploads=");
	struct s3_qparam p[] = { { "uploadId", "Z" }, { "partNumber", "10" } };
	assert_true(s3_query_build(p, 2, out, sizeof(out)) > 0);
	assert_string_equal(out, "partNumber=10&uploadId=Z");
	assert_int_equal(s3_query_build(p, 2, out, strlen("partNumber=10&uploadId=Z")), -E2BIG);
}

static void test_s3_error_doc(void **state)
{
	char code[64], msg[128];
	const char *doc = "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The "
			  "specified key does not exist.</Message><Key>k</Key></Error>";
	(void)state;
	assert_int_equal(s3_error_parse(doc, strlen(doc), code, sizeof(code), msg, sizeof(msg)), 0);
	assert_string_equal(code, "NoSuchKey");
	assert_string_equal(msg, "The specified key does not exist.");
	assert_int_equal(s3_error_parse("<Error><Code>x", 14, code, sizeof(code), msg, sizeof(msg)),
			 -EBADMSG);
	/* a hostile store's words carry no line break (a forged log line) nor any other control */
	doc = "<Error><Code>A&#10;B</Code><Message>one&#10;ldfetch: uid 0: forged&#13;&#9;x&#x9b;"
	      "&#x7f;\xc2\xa0" "end</Message></Error>";
	assert_int_equal(s3_error_parse(doc, strlen(doc), code, sizeof(code), msg, sizeof(msg)), 0);
	assert_string_equal(code, "A B");
	assert_string_equal(msg, "one ldfetch: uid 0: forged  x?? \xc2\xa0" "end");
}

/* ---- credentials from the standard places ---- */

static void test_s3_credentials_profiles(void **state)
{
	struct s3_cfg c;
	char err[256];
	const char *text = "# comment\n[default]\naws_access_key_id = AK1\naws_secret_access_key=SK1\n"
			   "\n[work]\naws_access_key_id=AK2\naws_secret_access_key = SK2\n"
			   "aws_session_token = TOK2\n[half]\naws_access_key_id=AK3\n";
	(void)state;
	memset(&c, 0, sizeof(c));
	assert_int_equal(s3_cfg_parse_credentials(&c, text, "default", err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AK1");
	assert_string_equal(c.secret_key, "SK1");
	assert_null(c.session_token);
	assert_int_equal(s3_cfg_parse_credentials(&c, text, "work", err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AK2");
	assert_string_equal(c.session_token, "TOK2");
	assert_int_equal(s3_cfg_parse_credentials(&c, text, "half", err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "[half]"));
	assert_null(strstr(err, "AK3"));  /* never a key in a message */
	assert_int_equal(s3_cfg_parse_credentials(&c, text, "nope", err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "no profile [nope]"));
	assert_int_equal(s3_cfg_parse_credentials(&c, "[default]\njunk\n", "default", err,
						  sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "line 2"));
	s3_cfg_fini(&c);
}

static void test_s3_cfg_load_env_and_file(void **state)
{
	struct s3_cfg c;
	char err[512], dir[64], path[128];
	(void)state;
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	unsetenv("AWS_SECRET_ACCESS_KEY");
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "AWS_SECRET_ACCESS_KEY is not"));
	setenv("AWS_SECRET_ACCESS_KEY", "SKENV", 1);
	setenv("AWS_REGION", "eu-west-3", 1);
	unsetenv("AWS_ENDPOINT_URL");
	unsetenv("AWS_ENDPOINT_URL_S3");
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKENV");
	assert_string_equal(c.endpoint, "https://s3.eu-west-3.amazonaws.com");
	s3_cfg_fini(&c);
	setenv("AWS_ENDPOINT_URL", "ftp://x", 1);
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "AWS_ENDPOINT_URL"));
	setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9/", 1);
	/* the file and the profile, when the environment has no keys */
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	assert_int_equal(tmpdir_create(dir, sizeof(dir), "test_s3"), 0);
	snprintf(path, sizeof(path), "%s/creds", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("[p1]\naws_access_key_id=AKF\naws_secret_access_key=SKF\n", f);
	fclose(f);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	setenv("AWS_PROFILE", "p1", 1);
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key, "AKF");
	assert_string_equal(c.endpoint, "http://127.0.0.1:9");
	s3_cfg_fini(&c);
	setenv("AWS_PROFILE", "p2", 1);
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), -ENOKEY);
	assert_non_null(strstr(err, "[p2]"));
	assert_non_null(strstr(err, path));
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/creds", 1);
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), -ENOKEY);
	assert_non_null(strstr(err, "/nonexistent/creds"));
	/* region and endpoint from the profile's section of the config file, the environment first */
	char cpath[128];
	snprintf(cpath, sizeof(cpath), "%s/config", dir);
	f = fopen(cpath, "w");
	assert_non_null(f);
	fputs("[default]\nregion = us-west-2\n[profile p1]\nregion = eu-north-1\n"
	      "endpoint_url = http://127.0.0.1:7/\n", f);
	fclose(f);
	setenv("AWS_CONFIG_FILE", cpath, 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	setenv("AWS_PROFILE", "p1", 1);
	unsetenv("AWS_REGION");
	unsetenv("AWS_ENDPOINT_URL");
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), 0);
	assert_string_equal(c.region, "eu-north-1");
	assert_string_equal(c.endpoint, "http://127.0.0.1:7");
	s3_cfg_fini(&c);
	setenv("AWS_REGION", "ap-south-1", 1);
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), 0);
	assert_string_equal(c.region, "ap-south-1");
	s3_cfg_fini(&c);
	unsetenv("AWS_REGION");
	unsetenv("AWS_PROFILE");
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SKENV", 1);
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), 0);
	assert_string_equal(c.region, "us-west-2");  /* [default], not [profile default] */
	assert_string_equal(c.endpoint, "https://s3.us-west-2.amazonaws.com");
	s3_cfg_fini(&c);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_CONFIG_FILE");
	setenv("LOADERD_S3_RETRIES", "21", 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	setenv("AWS_PROFILE", "p1", 1);
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "LOADERD_S3_RETRIES"));
	setenv("LOADERD_S3_RETRIES", "20", 1);
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), 0);
	assert_int_equal(c.retries, 20);
	s3_cfg_fini(&c);
	unsetenv("LOADERD_S3_RETRIES");
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_PROFILE");
	unsetenv("AWS_ENDPOINT_URL");
	tmpdir_remove(dir);
}

/* ---- against moto (tests/it_s3.sh) ---- */

static char env_saved[4][512];
static const char *env_names[4] = { "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
				    "AWS_ENDPOINT_URL", "AWS_REGION" };

static int store_setup(void **state)
{
	(void)state;
	for (int i = 0; i < 4; i++) {
		const char *v = getenv(env_names[i]);
		snprintf(env_saved[i], sizeof(env_saved[i]), "%s", v ? v : "");
	}
	return 0;
}

static void store_env(void)
{
	for (int i = 0; i < 4; i++)
		setenv(env_names[i], env_saved[i], 1);
}

static struct s3 *store(unsigned retries)
{
	struct s3_cfg c;
	struct s3 *s;
	char err[512];
	if (!getenv("LOADERD_S3_TEST"))
		return NULL;
	store_env();
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), 0);
	c.retries = retries;
	c.backoff_ms = 5;
	c.part_size = S3_PART_MIN;
	c.inflight = 4;
	assert_int_equal(s3_create(&c, &s, err, sizeof(err)), 0);
	s3_cfg_fini(&c);
	return s;
}

/* a call that must succeed, the client's sentence printed when it does not */
#define S3_OK(s, call) do { int r_ = (call); if (r_) print_error("%s\n", s3_error(s)); \
	assert_int_equal(r_, 0); } while (0)
#define NEED_STORE(s) do { if (!(s)) { skip(); return; } } while (0)

static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)((i * 2654435761u + seed) >> 13);
}

static void test_s3_store_put_head_get_ranges(void **state)
{
	struct s3 *s = store(2);
	struct s3_obj o;
	char buf[5000], back[5000], r1[10], r2[4000], r3[1];
	void *all;
	size_t len;
	(void)state;
	NEED_STORE(s);
	S3_OK(s, s3_put(s, "t-basic", "", "", 0));  /* CreateBucket */
	fill(buf, sizeof(buf), 1);
	S3_OK(s, s3_put(s, "t-basic", "dir/a b~c.bin", buf, sizeof(buf)));
	S3_OK(s, s3_head(s, "t-basic", "dir/a b~c.bin", &o));
	assert_int_equal(o.size, sizeof(buf));
	assert_true(o.etag[0] == '"');
	S3_OK(s, s3_get(s, "t-basic", "dir/a b~c.bin", sizeof(buf), &all, &len, NULL));
	assert_int_equal(len, sizeof(buf));
	assert_memory_equal(all, buf, sizeof(buf));
	free(all);
	/* the bound: a max one byte short is -EFBIG */
	assert_int_equal(s3_get(s, "t-basic", "dir/a b~c.bin", sizeof(buf) - 1, &all, &len, NULL),
			 -EFBIG);
	/* ranges in flight together, the last ending at the last byte */
	struct s3_range r[] = {
		{ "t-basic", "dir/a b~c.bin", 0, sizeof(r1), r1, 1 },
		{ "t-basic", "dir/a b~c.bin", 1000, sizeof(r2), r2, 1 },
		{ "t-basic", "dir/a b~c.bin", sizeof(buf) - 1, 1, r3, 1 },
	};
	S3_OK(s, s3_get_ranges(s, r, 3));
	assert_memory_equal(r1, buf, sizeof(r1));
	assert_memory_equal(r2, buf + 1000, sizeof(r2));
	assert_int_equal(r3[0], buf[sizeof(buf) - 1]);
	for (int i = 0; i < 3; i++)
		assert_int_equal(r[i].ret, 0);
	/* a range one past the end: the store refuses it (416), named */
	struct s3_range past = { "t-basic", "dir/a b~c.bin", sizeof(buf), 1, r3, 1 };
	assert_int_equal(s3_get_ranges(s, &past, 1), -EINVAL);
	assert_non_null(strstr(s3_error(s), "s3://t-basic/dir/a b~c.bin"));
	assert_non_null(strstr(s3_error(s), "416"));
	(void)back;
	s3_destroy(s);
}

static void test_s3_store_multipart_and_get_fd(void **state)
{
	struct s3 *s = store(2);
	struct s3_obj o;
	char dir[64], path[128];
	size_t size = 2 * S3_PART_MIN + 12345;  /* three parts, the last short */
	(void)state;
	NEED_STORE(s);
	assert_int_equal(tmpdir_create(dir, sizeof(dir), "test_s3"), 0);
	char *buf = malloc(size), *back = malloc(size);
	assert_non_null(buf);
	assert_non_null(back);
	fill(buf, size, 7);
	snprintf(path, sizeof(path), "%s/big", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, size), (ssize_t)size);
	S3_OK(s, s3_put(s, "t-multi", "", "", 0));
	S3_OK(s, s3_put_fd(s, "t-multi", "big", fd, size));
	S3_OK(s, s3_head(s, "t-multi", "big", &o));
	assert_int_equal(o.size, size);
	assert_non_null(strstr(o.etag, "-3\""));  /* a multipart upload's ETag counts its parts */
	/* exactly one part's size goes up in one request */
	S3_OK(s, s3_put_fd(s, "t-multi", "one", fd, S3_PART_MIN));
	S3_OK(s, s3_head(s, "t-multi", "one", &o));
	assert_null(strchr(o.etag, '-'));
	/* back, in ranges in flight, into a file */
	snprintf(path, sizeof(path), "%s/back", dir);
	int bfd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(bfd >= 0);
	S3_OK(s, s3_get_fd(s, "t-multi", "big", bfd, NULL, &o));
	assert_int_equal(pread(bfd, back, size, 0), (ssize_t)size);
	assert_memory_equal(back, buf, size);
	struct stat st;
	assert_int_equal(fstat(bfd, &st), 0);
	assert_int_equal(st.st_size, size);
	/* the bytes against the ETag: a multipart ETag is no MD5 (1); a single part's is, and one
	 * flipped byte differs (-EBADMSG) */
	char md5[33];
	assert_int_equal(s3_etag_check_fd(bfd, size, o.etag, md5), 1);
	S3_OK(s, s3_get_fd(s, "t-multi", "one", bfd, NULL, &o));
	assert_int_equal(s3_etag_check_fd(bfd, S3_PART_MIN, o.etag, md5), 0);
	assert_int_equal(pwrite(bfd, "\xff", 1, 12345), 1);
	assert_int_equal(s3_etag_check_fd(bfd, S3_PART_MIN, o.etag, md5), -EBADMSG);
	assert_int_equal(strlen(md5), 32);
	S3_OK(s, s3_get_fd(s, "t-multi", "big", bfd, NULL, &o));
	/* an ETag that is not the object's: refused, naming the object */
	assert_int_equal(s3_get_fd(s, "t-multi", "big", bfd, "\"0123\"", NULL), -ESTALE);
	assert_non_null(strstr(s3_error(s), "s3://t-multi/big"));
	assert_non_null(strstr(s3_error(s), "changed"));
	close(fd);
	close(bfd);
	free(buf);
	free(back);
	tmpdir_remove(dir);
	s3_destroy(s);
}

/* s3_head_many and s3_get_files over 300 objects, one empty: more ranges than one round sets up
 * (GET_ROUND, 256), so the rounds' seams and an object without a range are crossed */
static void test_s3_store_many_files(void **state)
{
	struct s3 *s = store(2);
	enum { N = 300 };
	static char keys[N][16];
	static const char *kp[N];
	static struct s3_obj objs[N];
	struct s3_file files[N];
	char dir[64], path[128], want[16], got[16];
	(void)state;
	NEED_STORE(s);
	S3_OK(s, s3_put(s, "t-many", "", "", 0));
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "o%03d", i);
		kp[i] = keys[i];
		int len = snprintf(want, sizeof(want), "%d", i * 7919);
		S3_OK(s, s3_put(s, "t-many", keys[i], want, i == 150 ? 0 : (size_t)len));
	}
	S3_OK(s, s3_head_many(s, "t-many", kp, objs, N));
	assert_int_equal(objs[150].size, 0);
	assert_int_equal(tmpdir_create(dir, sizeof(dir), "test_s3"), 0);
	for (int i = 0; i < N; i++) {
		snprintf(path, sizeof(path), "%s/%d", dir, i);
		files[i] = (struct s3_file){ "t-many", keys[i], open(path, O_RDWR | O_CREAT, 0600),
					     &objs[i] };
		assert_true(files[i].fd >= 0);
	}
	S3_OK(s, s3_get_files(s, files, N));
	for (int i = 0; i < N; i++) {
		int len = i == 150 ? 0 : snprintf(want, sizeof(want), "%d", i * 7919);
		assert_int_equal(pread(files[i].fd, got, sizeof(got), 0), len);
		assert_memory_equal(got, want, (size_t)len);
		close(files[i].fd);
	}
	tmpdir_remove(dir);
	s3_destroy(s);
}

struct seen {
	char keys[8][64];
	uint64_t sizes[8];
	int n;
};

static int on_key(void *arg, const char *key, uint64_t size, const char *etag)
{
	struct seen *sn = arg;
	(void)etag;
	if (sn->n == 8)
		return -E2BIG;
	snprintf(sn->keys[sn->n], sizeof(sn->keys[0]), "%s", key);
	sn->sizes[sn->n++] = size;
	return 0;
}

static void test_s3_store_list_prefix(void **state)
{
	struct s3 *s = store(2);
	struct seen sn = { .n = 0 };
	(void)state;
	NEED_STORE(s);
	/* moto rebuilds the URL (werkzeug) before it checks a signature and turns a query's %2F, and
	 * a path's %2B, back into '/' and '+', so such a signed request fails there though S3 takes
	 * it: the prefix here is "set", without its '/' */
	S3_OK(s, s3_put(s, "t-list", "", "", 0));
	S3_OK(s, s3_put(s, "t-list", "set/b", "bb", 2));
	S3_OK(s, s3_put(s, "t-list", "set/a", "a", 1));
	S3_OK(s, s3_put(s, "t-list", "set/c/d", "ddd", 3));
	S3_OK(s, s3_put(s, "t-list", "other", "o", 1));
	S3_OK(s, s3_put(s, "t-list", "se", "o", 1));
	S3_OK(s, s3_list(s, "t-list", "set", on_key, &sn));
	assert_int_equal(sn.n, 3);
	assert_string_equal(sn.keys[0], "set/a");
	assert_string_equal(sn.keys[1], "set/b");
	assert_string_equal(sn.keys[2], "set/c/d");
	assert_int_equal(sn.sizes[2], 3);
	/* page by page: one key a page, the continuation tokens followed */
	struct s3_counters c1;
	struct s3_cfg c;
	char err[256];
	s3_cfg_load(&c, err, sizeof(err));
	c.list_page = 1;
	s3_destroy(s);
	assert_int_equal(s3_create(&c, &s, err, sizeof(err)), 0);
	s3_cfg_fini(&c);
	sn.n = 0;
	S3_OK(s, s3_list(s, "t-list", "set", on_key, &sn));
	assert_int_equal(sn.n, 3);
	assert_string_equal(sn.keys[2], "set/c/d");
	s3_counters(s, &c1);
	assert_int_equal(c1.requests, 3);
	S3_OK(s, s3_delete(s, "t-list", "set/a"));
	sn.n = 0;
	S3_OK(s, s3_list(s, "t-list", "set", on_key, &sn));
	assert_int_equal(sn.n, 2);
	s3_destroy(s);
}

static void test_s3_store_errors_named(void **state)
{
	struct s3 *s = store(1);
	struct s3_obj o;
	struct s3_counters cnt;
	(void)state;
	NEED_STORE(s);
	S3_OK(s, s3_put(s, "t-err", "", "", 0));
	assert_int_equal(s3_head(s, "t-err", "missing", &o), -ENOENT);
	assert_non_null(strstr(s3_error(s), "s3://t-err/missing"));
	void *p;
	size_t len;
	assert_int_equal(s3_get(s, "no-such-bucket", "k", 10, &p, &len, NULL), -ENOENT);
	assert_non_null(strstr(s3_error(s), "NoSuchBucket"));
	assert_non_null(strstr(s3_error(s), "s3://no-such-bucket/k"));
	s3_counters(s, &cnt);
	assert_int_equal(cnt.retries, 0);  /* a 404 is not retried */
	s3_destroy(s);

	/* wrong secret: the store's own code, and no key in the message */
	struct s3_cfg c;
	char err[512];
	store_env();
	setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-zzz", 1);
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), 0);
	assert_int_equal(s3_create(&c, &s, err, sizeof(err)), 0);
	assert_int_equal(s3_head(s, "t-err", "missing", &o), -EACCES);
	assert_null(strstr(s3_error(s), "wrong-secret-zzz"));
	assert_null(strstr(s3_error(s), env_saved[0]));
	void *q;
	assert_int_equal(s3_get(s, "t-err", "missing", 10, &q, &len, NULL), -EACCES);
	assert_non_null(strstr(s3_error(s), "SignatureDoesNotMatch"));
	s3_destroy(s);
	s3_cfg_fini(&c);
	setenv("AWS_ACCESS_KEY_ID", "AKIDUNKNOWN000000000", 1);
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), 0);
	assert_int_equal(s3_create(&c, &s, err, sizeof(err)), 0);
	assert_int_equal(s3_get(s, "t-err", "missing", 10, &q, &len, NULL), -EACCES);
	assert_non_null(strstr(s3_error(s), "InvalidAccessKeyId"));
	s3_destroy(s);
	s3_cfg_fini(&c);
	store_env();
}

static void test_s3_store_down(void **state)
{
	struct s3 *s = store(2);
	struct s3_obj o;
	struct s3_counters cnt;
	(void)state;
	NEED_STORE(s);
	s3_destroy(s);
	/* a port nothing listens on (9, discard, is closed here) */
	setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9", 1);
	struct s3_cfg c;
	char err[512];
	assert_int_equal(s3_cfg_load(&c, err, sizeof(err)), 0);
	c.retries = 2;
	c.backoff_ms = 1;
	assert_int_equal(s3_create(&c, &s, err, sizeof(err)), 0);
	assert_int_equal(s3_head(s, "t-err", "k", &o), -ECONNREFUSED);
	assert_non_null(strstr(s3_error(s), "s3://t-err/k"));
	assert_non_null(strstr(s3_error(s), "cannot be reached"));
	assert_non_null(strstr(s3_error(s), "3 tries"));
	s3_counters(s, &cnt);
	assert_int_equal(cnt.retries, 2);
	s3_destroy(s);
	s3_cfg_fini(&c);
	store_env();
}

/* ---- faults (tests/s3_fault.py) ---- */

static struct s3 *fault(unsigned retries)
{
	const char *url = getenv("LOADERD_S3_FAULT");
	struct s3_cfg c;
	struct s3 *s;
	char err[512];
	if (!url)
		return NULL;
	memset(&c, 0, sizeof(c));
	c.endpoint = (char *)url;
	c.region = (char *)"us-east-1";
	c.access_key = (char *)"AK";
	c.secret_key = (char *)"SK";
	c.retries = retries;
	c.backoff_ms = 2;
	c.inflight = 4;
	assert_int_equal(s3_create(&c, &s, err, sizeof(err)), 0);
	return s;
}

static void test_s3_fault_retries(void **state)
{
	struct s3 *s = fault(2);
	struct s3_counters cnt;
	void *p;
	size_t len;
	(void)state;
	NEED_STORE(s);
	/* as many failures as retries: served, each retried (a reset on a kept-alive connection
	 * libcurl may retry itself once: counted apart) */
	const char *keys[] = { "fail-2-503/k", "fail-2-429/k", "cut-2/k", "reset-2/k" };
	for (int i = 0; i < 4; i++) {
		if (i == 3) {
			s3_counters(s, &cnt);
			assert_int_equal(cnt.retries, 6);
		}
		S3_OK(s, s3_get(s, "bkt", keys[i], 100, &p, &len, NULL));
		assert_int_equal(len, 11);
		assert_memory_equal(p, "hello fault", 11);
		free(p);
	}
	/* one failure more than retries: the error names the object and the store's words */
	assert_int_equal(s3_get(s, "bkt", "fail-3-503/k", 100, &p, &len, NULL), -EIO);
	assert_non_null(strstr(s3_error(s), "s3://bkt/fail-3-503/k"));
	assert_non_null(strstr(s3_error(s), "503 SlowDown: Please reduce your request rate."));
	assert_int_equal(s3_get(s, "bkt", "cut-3/k", 100, &p, &len, NULL), -EPIPE);
	assert_non_null(strstr(s3_error(s), "cut the response short"));
	assert_non_null(strstr(s3_error(s), "s3://bkt/cut-3/k"));
	assert_int_equal(s3_get(s, "bkt", "reset-3/k", 100, &p, &len, NULL), -EPIPE);
	/* a 400 is not retried; an expired session token (400 ExpiredToken) is a refusal */
	assert_int_equal(s3_get(s, "bkt", "fail-1-400/k", 100, &p, &len, NULL), -EACCES);
	assert_non_null(strstr(s3_error(s), "400 ExpiredToken: The provided token has expired."));
	s3_counters(s, &cnt);
	uint64_t before = cnt.retries;
	assert_int_equal(s3_get(s, "bkt", "fail-3-500/k", 100, &p, &len, NULL), -EIO);
	s3_counters(s, &cnt);
	assert_int_equal(cnt.retries, before + 2);
	s3_destroy(s);
}

static void test_s3_fault_stalled_store(void **state)
{
	struct s3 *s = fault(1);
	void *p;
	size_t len;
	(void)state;
	NEED_STORE(s);
	s3_destroy(s);
	/* a store that stops sending: a try ends after timeout_ms without a byte, and is retried */
	struct s3_cfg c = { .endpoint = (char *)getenv("LOADERD_S3_FAULT"), .region = (char *)"r",
			    .access_key = (char *)"AK", .secret_key = (char *)"SK", .retries = 1,
			    .backoff_ms = 1, .timeout_ms = 1000, .inflight = 2 };
	char err[256];
	assert_int_equal(s3_create(&c, &s, err, sizeof(err)), 0);
	S3_OK(s, s3_get(s, "bkt", "stall-1/k", 100, &p, &len, NULL));
	assert_memory_equal(p, "hello fault", 11);
	free(p);
	assert_int_equal(s3_get(s, "bkt", "stall-2/k", 100, &p, &len, NULL), -ETIMEDOUT);
	assert_non_null(strstr(s3_error(s), "s3://bkt/stall-2/k"));
	assert_non_null(strstr(s3_error(s), "stopped answering"));
	s3_destroy(s);
}

static void test_s3_fault_huge_size(void **state)
{
	struct s3 *s = fault(0);
	struct s3_obj o[2];
	char k0[64], k1[64];
	(void)state;
	NEED_STORE(s);
	/* S3's largest object, 5 TiB, is taken; one byte more is refused, named, whether HEADed alone
	 * or with others (what a cache sums of a dataset's sizes must never wrap) */
	snprintf(k0, sizeof(k0), "size-%llu/k", (unsigned long long)S3_OBJECT_MAX);
	snprintf(k1, sizeof(k1), "size-%llu/k", (unsigned long long)S3_OBJECT_MAX + 1);
	S3_OK(s, s3_head(s, "bkt", k0, &o[0]));
	assert_true(o[0].size == S3_OBJECT_MAX);
	assert_int_equal(s3_head(s, "bkt", k1, &o[0]), -EFBIG);
	assert_non_null(strstr(s3_error(s), k1));
	assert_non_null(strstr(s3_error(s), "above S3's largest object (5497558138880 bytes)"));
	const char *keys[2] = { k0, "size-9223372036854775807/k" };
	assert_int_equal(s3_head_many(s, "bkt", keys, o, 1), 0);
	assert_int_equal(s3_head_many(s, "bkt", keys, o, 2), -EFBIG);
	assert_non_null(strstr(s3_error(s), "s3://bkt/size-9223372036854775807/k: HEAD: the store "
			       "says 9223372036854775807 bytes"));
	s3_destroy(s);
}

static void test_s3_fault_ranges_in_flight(void **state)
{
	struct s3 *s = fault(3);
	char b[8][4];
	struct s3_range r[8];
	char keys[8][32];
	(void)state;
	NEED_STORE(s);
	/* eight ranged GETs in flight, each path failing its first request differently */
	for (int i = 0; i < 8; i++) {
		snprintf(keys[i], sizeof(keys[i]), "%s-1%s/r%d", i % 2 ? "cut" : "fail",
			 i % 2 ? "" : "-503", i);
		r[i] = (struct s3_range){ "bkt", keys[i], 0, 4, b[i], 1 };
	}
	S3_OK(s, s3_get_ranges(s, r, 8));
	for (int i = 0; i < 8; i++) {
		assert_int_equal(r[i].ret, 0);
		assert_memory_equal(b[i], "hell", 4);
	}
	struct s3_counters cnt;
	s3_counters(s, &cnt);
	assert_int_equal(cnt.retries, 8);
	/* a range past what the server holds comes back short: cut short, not garbage */
	char big[20];
	struct s3_range shortr = { "bkt", "ok/k", 0, sizeof(big), big, 1 };
	assert_int_equal(s3_get_ranges(s, &shortr, 1), -EPIPE);
	assert_non_null(strstr(s3_error(s), "11 of 20 bytes"));
	s3_destroy(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_s3_url_parse_ok),
		cmocka_unit_test(test_s3_url_parse_bounds),
		cmocka_unit_test(test_s3_uri_encode),
		cmocka_unit_test(test_s3_query_sorted_and_encoded),
		cmocka_unit_test(test_s3_error_doc),
		cmocka_unit_test(test_s3_credentials_profiles),
		cmocka_unit_test(test_s3_store_put_head_get_ranges),
		cmocka_unit_test(test_s3_store_multipart_and_get_fd),
		cmocka_unit_test(test_s3_store_list_prefix),
		cmocka_unit_test(test_s3_store_many_files),
		cmocka_unit_test(test_s3_store_errors_named),
		cmocka_unit_test(test_s3_store_down),
		cmocka_unit_test(test_s3_fault_retries),
		cmocka_unit_test(test_s3_fault_ranges_in_flight),
		cmocka_unit_test(test_s3_fault_huge_size),
		cmocka_unit_test(test_s3_fault_stalled_store),
		/* last: it rewrites the environment the store cases read */
		cmocka_unit_test(test_s3_cfg_load_env_and_file),
	};
	return cmocka_run_group_tests(tests, store_setup, NULL);
}
