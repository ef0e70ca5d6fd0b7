/* ldfetch.c - loaderd's node cache of s3:// datasets (loaderd --cache-dir; docs/S3.md, "The node
 * cache"). loaderd starts it, one per daemon, with one end of a SOCK_SEQPACKET socketpair as
 * descriptor 3 and never links an HTTP library itself: this program owns the cache directory and
 * is the only part of loaderd that talks to a store.
 *
 * The protocol (shm/ctl.h framing, ctl_send / ctl_recv): loaderd sends CTL_S3_OPEN whose body is
 * struct ldf_req (the client's uid, from SO_PEERCRED) followed by the client's own CTL_S3_OPEN
 * body (checked again here: ctl_check_s3_open), with one descriptor: the request's own socket.
 * ldfetch answers on that socket: the set's shards as CTL_SHARD_FDS batches (exactly as a client
 * sends them, ctl_check_shard_fds), then CTL_ERROR with err 0 and the dataset's own descriptor
 * (the manifest or the .dpk), or CTL_ERROR with the errno and the reason alone.
 *
 * DESIGN. Each request is served by a child process of its own (at most LDF_CHILDREN at once, and
 * one per uid; more wait in the parent), so that a slow store delays its own uid's job opens only,
 * and the credentials live in that child's memory only, for that request only: wiped in the
 * parent as soon as the child is forked, and gone with the child. The child HEADs every object
 * of the dataset with the uid's credentials (the store's own answer to that uid is the proof that
 * it may read them: a cached object is served only after it), fetches those missing
 * (s3cache_fetch_opts: objects keyed by endpoint, bucket, key and ETag, temporary files renamed
 * whole, MD5 checked against single-part ETags), under the cache's lock but while it asks the
 * store (s3cache_opts.concurrent), and, under it, opens the view's files and takes a read lock on
 * byte UID of each (an OFD lock, fcntl F_OFD_SETLK) before it passes them: the lock
 * lives as long as loaderd's descriptors (it belongs to the open file, which SCM_RIGHTS shares),
 * so eviction (s3cache_pinned: any byte locked) never takes an object a running job reads, and
 * what the cache holds is never more than --cache-size. Space is charged per uid:
 * DIR/uids/UID/HASH marks each object a uid's job was given; a uid's charge is the size of its
 * marked objects that a job of that uid still holds (byte UID locked: s3cache_held; a marker whose
 * object no job of the uid holds is dropped), plus the dataset asked for; past
 * --cache-size-per-uid the open is refused (ENOSPC, naming the dataset and both figures). An
 * object two uids both hold is charged to both while each holds it. A uid's requests run one at
 * a time (a flock on DIR/uids/UID/.lock, taken before the cache's), so that its admission counts
 * what its earlier requests hold; other uids' run side by side. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/args.h"
#include "common/err.h"
#include "formats/dpkset.h"
#include "s3/s3.h"
#include "s3/s3cache.h"
#include "shm/ctl.h"

#define LDF_CHILDREN 16  /* requests served at once */

static const char *g_dir;
static uint64_t g_size, g_per_uid;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	char line[1024];
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "ldfetch: %s\n", line);
}

static void reply_err(int sock, int err, const char *text)
{
	struct ctl_error e;
	ctl_error_make(&e, err, "%s", text);
	ctl_send(sock, CTL_ERROR, &e, sizeof(e), NULL, 0);
}

/* ---- per-uid charge ---- */

struct charge_arg {
	uint32_t uid;
	char udir[PATH_MAX];       /* DIR/uids/UID */
	char **names;              /* the dataset's objects (their objects/ names), sorted */
	size_t n;
};

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_free(struct charge_arg *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->names[i]);
	free(a->names);
	a->names = NULL;
	a->n = 0;
}

/* s3cache's admission: the uid's charge with this dataset, within --cache-size-per-uid. The
 * uid's markers are walked once per call (what its jobs hold, at most). */
static int charge_admit(void *arg, const char *const *paths, const uint64_t *sizes, size_t n,
			const char *url, char *err, size_t errlen)
{
	struct charge_arg *a = arg;
	uint64_t mine = 0, held = 0;
	names_free(a);
	if (!(a->names = calloc(n, sizeof(*a->names))))
		return err_set(err, errlen, -ENOMEM, "%s: out of memory", url);
	for (size_t i = 0; i < n; i++) {
		const char *base = strrchr(paths[i], '/');
		if (!(a->names[a->n] = strdup(base ? base + 1 : paths[i])))
			return err_set(err, errlen, -ENOMEM, "%s: out of memory", url);
		a->n++;
		mine += sizes[i];
	}
	qsort(a->names, a->n, sizeof(*a->names), cmp_name);
	DIR *d = opendir(a->udir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char obj[PATH_MAX + 300], *name = e->d_name;
		struct stat st;
		if (e->d_name[0] == '.' || bsearch(&name, a->names, a->n, sizeof(*a->names), cmp_name))
			continue;  /* counted with this dataset */
		snprintf(obj, sizeof(obj), "%s/objects/%s", g_dir, e->d_name);
		if (stat(obj, &st) == 0 && s3cache_held(obj, a->uid, 1))
			held += (uint64_t)st.st_size;
		else
			unlinkat(dirfd(d), e->d_name, 0);  /* no job of the uid holds it any more */
	}
	if (d)
		closedir(d);
	if (mine + held > g_per_uid)
		return err_set(err, errlen, -ENOSPC, "%s: %llu bytes for uid %u, whose jobs hold %llu "
			       "bytes of the node cache: above loaderd --cache-size-per-uid %llu", url,
			       (unsigned long long)mine, a->uid, (unsigned long long)held,
			       (unsigned long long)g_per_uid);
	return 0;
}

/* The uid's jobs now hold the dataset's objects: mark each. */
static void charge_mark(const struct charge_arg *a)
{
	for (size_t i = 0; i < a->n; i++) {
		char mark[PATH_MAX + 300];
		snprintf(mark, sizeof(mark), "%s/%s", a->udir, a->names[i]);
		int m = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
		if (m >= 0)
			close(m);
	}
}

/* ---- one request, in its own child ---- */

/* @path opened for a job of @uid, pinned: a read lock on its byte @uid, held by the open file,
 * which loaderd's descriptor keeps (eviction: s3cache_pinned; the uid's charge: s3cache_held). */
static int open_pinned(const char *path, uint32_t uid, char *err, size_t errlen, const char *url)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return err_set(err, errlen, -errno, "%s: the node cache: %s: %s", url, path,
			       strerror(errno));
	struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = (off_t)uid,
			    .l_len = 1 };
	if (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
		int ret = err_set(err, errlen, -errno, "%s: the node cache: locking %s: %s", url, path,
				  strerror(errno));
		close(fd);
		return ret;
	}
	return fd;
}

/* Open the view @r->path (a .dpk or a manifest and its shards), pin and pass every file. */
static int send_view(int sock, const char *url, const char *path, uint32_t uid, char *err,
		     size_t errlen)
{
	struct dpkset_manifest *m = NULL;
	int ret, top = open_pinned(path, uid, err, errlen, url);
	if (top < 0)
		return top;
	char head[8] = "";
	struct stat st;
	ssize_t got = pread(top, head, sizeof(head), 0);
	if (got < 0 || fstat(top, &st) < 0) {
		ret = err_set(err, errlen, -errno, "%s: the node cache: %s", url, strerror(errno));
		goto out;
	}
	if (dpkset_is_manifest(head, (size_t)got)) {
		if ((ret = dpkset_read_fd(top, (uint64_t)st.st_size, url, &m, err, errlen)) < 0)
			goto out;
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s", path);
		*strrchr(dir, '/') = '\0';
		struct ctl_shard_fds b = { .first = 0, .total = m->n, .count = 0 };
		int fds[CTL_FDS_BATCH];
		for (uint32_t i = 0; i < m->n; i++) {
			char sp[PATH_MAX * 2];
			snprintf(sp, sizeof(sp), "%s/%s", dir, m->shards[i].path);
			int fd = open_pinned(sp, uid, err, errlen, url);
			if (fd < 0) {
				ret = fd;
				for (uint32_t k = 0; k < b.count; k++)
					close(fds[k]);
				goto out;
			}
			fds[b.count++] = fd;
			if (i + 1 == m->n || b.count == CTL_FDS_BATCH) {
				ret = ctl_send(sock, CTL_SHARD_FDS, &b, sizeof(b), fds, (int)b.count);
				for (uint32_t k = 0; k < b.count; k++)
					close(fds[k]);
				if (ret < 0) {
					err_set(err, errlen, ret, "%s: loaderd went away", url);
					goto out;
				}
				b.first = i + 1;
				b.count = 0;
			}
		}
	}
	struct ctl_error ok;
	ctl_error_make(&ok, 0, "%s", "");
	ok.err = 0;
	ret = ctl_send(sock, CTL_ERROR, &ok, sizeof(ok), &top, 1);
	if (ret < 0)
		err_set(err, errlen, ret, "%s: loaderd went away", url);
out:
	close(top);  /* loaderd's copy keeps the lock */
	dpkset_manifest_destroy(m);
	return ret;
}

static char *take(const char **p, uint16_t n)
{
	char *s = malloc((size_t)n + 1);
	if (s) {
		memcpy(s, *p, n);
		s[n] = '\0';
	}
	*p += n;
	return s;
}

static int serve(int sock, char *body, size_t len)
{
	char err[1024] = "", why[CTL_TEXT_MAX];
	struct ldf_req q;
	struct ctl_s3_open h;
	struct s3_cfg c;
	struct s3 *s = NULL;
	char *url = NULL;
	int ret;

	memset(&c, 0, sizeof(c));
	if (len < sizeof(q) + sizeof(h) ||
	    ctl_check_s3_open(body + sizeof(q), len - sizeof(q), why, sizeof(why)) < 0) {
		explicit_bzero(body, len);
		reply_err(sock, EINVAL, len < sizeof(q) + sizeof(h) ? "a request too short" : why);
		return 1;
	}
	memcpy(&q, body, sizeof(q));
	memcpy(&h, body + sizeof(q), sizeof(h));
	const char *p = body + sizeof(q) + sizeof(h);
	url = take(&p, h.url_len);
	c.endpoint = take(&p, h.endpoint_len);
	c.region = take(&p, h.region_len);
	c.access_key = take(&p, h.access_len);
	c.secret_key = take(&p, h.secret_len);
	c.session_token = h.token_len ? take(&p, h.token_len) : NULL;
	explicit_bzero(body, len);
	c.retries = 5;
	c.backoff_ms = 100;
	c.timeout_ms = 30000;
	c.inflight = 16;
	c.part_size = 8u << 20;
	const char *v = getenv("LOADERD_S3_RETRIES");
	unsigned u;
	if (v && arg_uint(v, 0, 20, &u) == 0)
		c.retries = u;
	if ((v = getenv("LOADERD_S3_BACKOFF_MS")) && arg_uint(v, 1, 60000, &u) == 0)
		c.backoff_ms = u;
	if (!url || !c.endpoint || !c.region || !c.access_key || !c.secret_key ||
	    (h.token_len && !c.session_token)) {
		s3_cfg_fini(&c);
		free(url);
		reply_err(sock, ENOMEM, "ldfetch: out of memory");
		return 1;
	}
	/* the region goes into the signature's scope (aws:amz:REGION:s3): its letters only */
	for (const char *r = c.region; *r; r++)
		if (!((*r >= 'a' && *r <= 'z') || (*r >= '0' && *r <= '9') || *r == '-')) {
			snprintf(err, sizeof(err), "%.900s: region '%.64s': not a region name", url,
				 c.region);
			s3_cfg_fini(&c);
			free(url);
			reply_err(sock, EINVAL, err);
			return 1;
		}
	ret = s3_create(&c, &s, err, sizeof(err));
	s3_cfg_fini(&c);  /* wiped: the handles hold what they need */
	if (ret == 0) {
		struct charge_arg ca = { .uid = q.uid };
		snprintf(ca.udir, sizeof(ca.udir), "%s/uids/%u", g_dir, q.uid);
		char uids[PATH_MAX];
		snprintf(uids, sizeof(uids), "%s/uids", g_dir);
		mkdir(uids, 0700);
		mkdir(ca.udir, 0700);
		/* one request of a uid at a time (other uids' side by side): its admission then
		 * counts everything the uid's earlier requests hold */
		char ulock[PATH_MAX + 16];
		snprintf(ulock, sizeof(ulock), "%s/.lock", ca.udir);
		int ul = open(ulock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
		while (ul >= 0 && flock(ul, LOCK_EX) < 0 && errno == EINTR)
			;
		struct s3cache_opts o = { .bound = g_size, .bound_name = "loaderd --cache-size",
					  .admit = charge_admit, .arg = &ca, .concurrent = 1 };
		struct s3cache_result r;
		int lock = -1;
		ret = s3cache_fetch_opts(s, g_dir, &o, url, &r, &lock, err, sizeof(err));
		if (ret == 0) {
			/* marked, and pinned, under the cache's lock: no other request's admission
			 * or eviction runs between them */
			charge_mark(&ca);
			ret = send_view(sock, url, r.path, q.uid, err, sizeof(err));
			close(lock);
			if (ret == 0)
				say("uid %u: %s: %u objects, %u fetched now (%llu bytes)", q.uid, url,
				    r.objects, r.fetched, (unsigned long long)r.fetched_bytes);
		}
		names_free(&ca);
		if (ul >= 0)
			close(ul);
	}
	s3_destroy(s);
	if (ret < 0) {
		say("uid %u: %s", q.uid, err);
		reply_err(sock, -ret, err);
	}
	free(url);
	return ret < 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: ldfetch DIR SIZE PER_UID_SIZE (started by loaderd --cache-dir, "
		"its socket as descriptor 3)\n");
	return 2;
}

/* ---- the parent: requests waiting, children running ----
 * A uid's requests run one at a time, so a uid has one child at most: its other requests wait
 * here (the credentials with them, wiped when their child is forked or they are dropped), and
 * never take one of the LDF_CHILDREN places while its earlier request runs: one uid whose store
 * never answers holds up its own requests only. */

#define LDF_WAITING 4096  /* requests waiting for their child, at most (opens in flight) */

struct ldf_wait {
	struct ldf_wait *next;
	int fd;
	uint32_t uid;
	size_t len;
	char body[];
};

struct ldf_child {
	pid_t pid;
	int pidfd;   /* readable when it exits; -1 where the kernel has no pidfd_open */
	uint32_t uid;
};

static struct ldf_child g_kids[LDF_CHILDREN];
static unsigned g_nkids;
static struct ldf_wait *g_wait, **g_wait_tail = &g_wait;
static unsigned g_nwait;

static void wait_drop(struct ldf_wait *w)
{
	explicit_bzero(w->body, w->len);
	close(w->fd);
	free(w);
}

static void reap(void)
{
	int w;
	while (g_nkids && ((w = waitpid(-1, NULL, WNOHANG)) > 0 || (w < 0 && errno == EINTR)))
		for (unsigned i = 0; w > 0 && i < g_nkids; i++)
			if (g_kids[i].pid == w) {
				if (g_kids[i].pidfd >= 0)
					close(g_kids[i].pidfd);
				g_kids[i] = g_kids[--g_nkids];
				break;
			}
}

static int uid_running(uint32_t uid)
{
	for (unsigned i = 0; i < g_nkids; i++)
		if (g_kids[i].uid == uid)
			return 1;
	return 0;
}

/* Fork a child for each waiting request whose uid has none, while places are free (in order). */
static void start_waiting(void)
{
	for (struct ldf_wait **pp = &g_wait; *pp && g_nkids < LDF_CHILDREN;) {
		struct ldf_wait *w = *pp;
		if (uid_running(w->uid)) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		if (!*pp)
			g_wait_tail = pp;
		g_nwait--;
		pid_t pid = fork();
		if (pid == 0) {
			close(3);
			for (unsigned i = 0; i < g_nkids; i++)
				if (g_kids[i].pidfd >= 0)
					close(g_kids[i].pidfd);
			while (g_wait) {  /* other requests' credentials are not this child's */
				struct ldf_wait *o = g_wait;
				g_wait = o->next;
				wait_drop(o);
			}
			int ret = serve(w->fd, w->body, w->len);
			close(w->fd);
			_exit(ret);
		}
		if (pid < 0) {
			reply_err(w->fd, errno, "ldfetch: cannot fork");
		} else {
			g_kids[g_nkids].pid = pid;
			g_kids[g_nkids].pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
			g_kids[g_nkids].uid = w->uid;
			g_nkids++;
		}
		wait_drop(w);  /* the credentials are the child's alone */
	}
}

int main(int argc, char **argv)
{
	char buf[CTL_MSG_MAX];

	if (argc != 4 || arg_bytes(argv[2], 1, UINT64_MAX, &g_size) < 0 ||
	    arg_bytes(argv[3], 1, UINT64_MAX, &g_per_uid) < 0 || fcntl(3, F_GETFD) < 0)
		return usage();
	g_dir = argv[1];
	signal(SIGPIPE, SIG_IGN);
	/* its children hold users' credentials: no core file of them, and no other process of this
	 * uid may read their memory (ptrace, /proc/PID/mem); both are inherited across fork */
	struct rlimit nocore = { 0, 0 };
	setrlimit(RLIMIT_CORE, &nocore);
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	for (;;) {
		uint16_t type;
		int fds[1], nfds = 0;
		reap();
		start_waiting();
		/* loaderd's socket, and each child's exit (its pidfd; else a look every 50 ms) */
		struct pollfd p[1 + LDF_CHILDREN];
		int np = 1, timeout = -1;
		p[0] = (struct pollfd){ .fd = 3, .events = POLLIN };
		for (unsigned i = 0; i < g_nkids; i++) {
			if (g_kids[i].pidfd >= 0)
				p[np++] = (struct pollfd){ .fd = g_kids[i].pidfd, .events = POLLIN };
			else
				timeout = 50;
		}
		if (poll(p, (nfds_t)np, timeout) < 0 && errno != EINTR) {
			say("poll: %s", strerror(errno));
			return 1;
		}
		if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ssize_t n = ctl_recv_fds(3, buf, &type, fds, 1, &nfds);
		if (n == -EPIPE)
			return 0;  /* loaderd is gone */
		if (n == -EINTR || n == -EAGAIN)
			continue;
		if (n < 0 || type != CTL_S3_OPEN || nfds != 1) {
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
			explicit_bzero(buf, sizeof(buf));
			if (n < 0 && n != -EBADMSG) {
				say("the socket from loaderd: %s", strerror((int)-n));
				return 1;
			}
			say("a malformed request from loaderd, ignored");
			continue;
		}
		struct ldf_req q;
		struct ldf_wait *w = NULL;
		if ((size_t)n < sizeof(q))
			reply_err(fds[0], EINVAL, "a request too short");
		else if (g_nwait >= LDF_WAITING)
			reply_err(fds[0], EAGAIN, "ldfetch: too many requests waiting; try again");
		else if (!(w = malloc(sizeof(*w) + (size_t)n)))
			reply_err(fds[0], ENOMEM, "ldfetch: out of memory");
		if (!w) {
			explicit_bzero(buf, sizeof(buf));
			close(fds[0]);
			continue;
		}
		memcpy(&q, buf, sizeof(q));
		w->next = NULL;
		w->fd = fds[0];
		w->uid = q.uid;
		w->len = (size_t)n;
		memcpy(w->body, buf, (size_t)n);
		explicit_bzero(buf, sizeof(buf));
		*g_wait_tail = w;
		g_wait_tail = &w->next;
		g_nwait++;
	}
}
