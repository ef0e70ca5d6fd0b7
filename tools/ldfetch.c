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
 * (the manifest or the .dpk), or CTL_ERROR with the errno and the reason alone. With LDF_STREAM in
 * struct ldf_req.reserved (docs/STREAMING.md, parts 3 and 4) the set is streamed: shard 0 alone,
 * then the manifest, and the child stays on that socket for the job's life, fetching the shards
 * CTL_SHARD_WANT lists and letting go of those CTL_SHARD_DROP names (serve_stream, stream_loop).
 *
 * DESIGN. Each request is served by a child process of its own (at most LDF_CHILDREN at once, and
 * one per uid; more wait in the parent; a uid's streams past their opens at most LDF_STREAMS_UID), so that a slow store delays its own uid's job opens only,
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

#define LDF_CHILDREN 16  /* requests served at once (streams included) */
/* streams of one uid past their open, at most: one uid's streamed jobs, each holding its place
 * for the job's life, never hold more than a quarter of the places */
#define LDF_STREAMS_UID (LDF_CHILDREN / 4)
#define LDF_OPEN_WAIT_S 60  /* a streamed set's open waits this long for room others hold */
#define STR_(x) #x
#define STR(x) STR_(x)

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
	int stream;                /* a stream past its open: past the bound is a wait (-EAGAIN) */
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

/* What @n objects of @sizes bytes take in the cache: allocated blocks, as --cache-size counts. */
static uint64_t blocks_of(const uint64_t *sizes, size_t n)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += (sizes[i] + 4095) / 4096 * 4096;
	return sum;
}

/* s3cache's admission: the uid's charge with this dataset, within --cache-size-per-uid. The
 * uid's markers are walked once per call (what its jobs hold, at most). */
static int charge_admit(void *arg, const char *const *paths, const uint64_t *sizes, size_t n,
			const char *url, char *err, size_t errlen)
{
	struct charge_arg *a = arg;
	uint64_t mine = blocks_of(sizes, n), held = 0;
	names_free(a);
	if (!(a->names = calloc(n, sizeof(*a->names))))
		return err_set(err, errlen, -ENOMEM, "%s: out of memory", url);
	for (size_t i = 0; i < n; i++) {
		const char *base = strrchr(paths[i], '/');
		if (!(a->names[a->n] = strdup(base ? base + 1 : paths[i])))
			return err_set(err, errlen, -ENOMEM, "%s: out of memory", url);
		a->n++;
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
			held += (uint64_t)st.st_blocks * 512;
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

/* ---- a streamed set (LDF_STREAM): this child stays for the job's life ---- */

static int g_note = -1;  /* to the parent: one byte once the stream's open is answered */

struct got {
	uint32_t k;
	int fd;
};

struct strm {
	uint32_t uid;
	const char *url;
	struct charge_arg *ca;
	struct got got[256 + 2];    /* what s3cache made present, opened and pinned, in order */
	unsigned ngot;
};

static void got_close(struct strm *t)
{
	for (unsigned i = 0; i < t->ngot; i++)
		close(t->got[i].fd);
	t->ngot = 0;
}

/* s3cache's take: open @path pinned on byte UID (the job's hold, as send_view's) and mark it for
 * the uid's charge, under the cache's lock. */
static int strm_take(void *arg, uint32_t k, const char *path, char *err, size_t errlen)
{
	struct strm *t = arg;
	if (t->ngot == sizeof(t->got) / sizeof(t->got[0]))
		return err_set(err, errlen, -EOVERFLOW, "%s: too many objects at once", t->url);
	int fd = open_pinned(path, t->uid, err, errlen, t->url);
	if (fd < 0)
		return fd;
	const char *base = strrchr(path, '/');
	char mark[PATH_MAX + 300];
	snprintf(mark, sizeof(mark), "%s/%s", t->ca->udir, base ? base + 1 : path);
	int m = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	if (m >= 0)
		close(m);
	t->got[t->ngot++] = (struct got){ k, fd };
	return 0;
}

/* The uid's charge for a stream's shards: past --cache-size-per-uid while the uid's jobs hold
 * others is a wait (-EAGAIN: loaderd may drop some), not a refusal; shards that alone exceed it
 * are refused. */
static int strm_admit(void *arg, const char *const *paths, const uint64_t *sizes, size_t n,
		      const char *url, char *err, size_t errlen)
{
	uint64_t mine = blocks_of(sizes, n);
	struct charge_arg *a = arg;
	int ret = charge_admit(arg, paths, sizes, n, url, err, errlen);
	/* Streaming, past the uid's bound: a wait for its drops; a batch above the bound is tried
	 * again alone (stream_loop); one shard above it alone can never come */
	if (ret == -ENOSPC && !a->stream && mine <= g_per_uid)
		return -EBUSY;  /* a stream's open: the uid's other streams let go as they move */
	return a->stream && ret == -ENOSPC && (mine <= g_per_uid || n > 1) ? -EAGAIN : ret;
}

static int send_shard(int sock, uint32_t k, uint32_t total, int fd)
{
	struct ctl_shard_fds b = { .first = k, .total = total, .count = 1 };
	return ctl_send(sock, CTL_SHARD_FDS, &b, sizeof(b), &fd, 1);
}

/* The stream's loop (docs/STREAMING.md, parts 3 and 4): CTL_SHARD_WANT replaces the list wanted
 * (soonest first); the first @inflight wanted and not delivered are fetched together and
 * delivered in the list's order, one CTL_SHARD_FDS each; CTL_SHARD_DROP makes delivered shards
 * evictable again (and deliverable again). Space short: evict (s3cache_stream_fetch: orphans,
 * other views LRU, then this stream's dropped shards: those not wanted first, then the farthest
 * wanted), else wait for a drop, trying again every 200 ms (other jobs let go too). Returns 0 on
 * hangup, 1 after a CTL_ERROR. */
static int stream_loop(int sock, struct s3cache_stream *st, struct strm *t, unsigned inflight)
{
	uint32_t n = s3cache_stream_shards(st);
	uint8_t *state = calloc(n, 1);          /* 0 not delivered, 1 delivered, 2 dropped */
	uint32_t *pos = malloc((size_t)n * sizeof(*pos));  /* place in the wanted list */
	uint32_t *evict = malloc((size_t)n * sizeof(*evict));
	uint32_t want[CTL_SHARD_LIST_MAX], nwant = 0;
	_Alignas(8) char buf[CTL_MSG_MAX];
	char err[1024], why[CTL_TEXT_MAX];
	int shorted = 0, ret = 0;

	if (!state || !pos || !evict) {
		reply_err(sock, ENOMEM, "ldfetch: out of memory");
		ret = 1;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		pos[i] = UINT32_MAX;
	state[0] = 1;  /* delivered at the open */
	/* first, each shard's size in the store: loaderd plans with the bytes they will take */
	for (uint32_t k = 0; k < n; k += CTL_SHARD_SIZES_MAX) {
		_Alignas(8) char msg[CTL_MSG_MAX];
		struct ctl_shard_sizes h = { .first = k,
					     .count = n - k < CTL_SHARD_SIZES_MAX ? n - k :
									  CTL_SHARD_SIZES_MAX };
		memcpy(msg, &h, sizeof(h));
		for (uint32_t i = 0; i < h.count; i++) {
			uint64_t z = s3cache_stream_size(st, k + i);
			memcpy(msg + sizeof(h) + 8 * (size_t)i, &z, 8);
		}
		if (ctl_send(sock, CTL_SHARD_SIZES, msg, sizeof(h) + 8 * (size_t)h.count, NULL, 0) < 0)
			goto out;  /* loaderd went away */
	}
	for (;;) {
		uint32_t batch[256];
		unsigned nb = 0;
		for (uint32_t i = 0; i < nwant && nb < inflight; i++)
			if (state[want[i]] != 1)
				batch[nb++] = want[i];
		struct pollfd p = { .fd = sock, .events = POLLIN };
		int pr = poll(&p, 1, nb && !shorted ? 0 : nb ? 200 : -1);
		if (pr < 0 && errno != EINTR) {
			say("uid %u: %s: poll: %s", t->uid, t->url, strerror(errno));
			ret = 1;
			goto out;
		}
		if (pr > 0) {
			uint16_t type;
			int fds[1], nfds = 0;
			const uint32_t *idx;
			uint32_t count;
			ssize_t m = ctl_recv_fds(sock, buf, &type, fds, 1, &nfds);
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
			if (m == -EPIPE)
				goto out;  /* loaderd closed the stream: the job is done */
			if (m == -EINTR || m == -EAGAIN)
				continue;
			const char *what = type == CTL_SHARD_WANT ? "CTL_SHARD_WANT" : "CTL_SHARD_DROP";
			if (m < 0)
				snprintf(why, sizeof(why), "a malformed message on the stream (%s)",
					 strerror((int)-m));
			else if (type != CTL_SHARD_WANT && type != CTL_SHARD_DROP)
				snprintf(why, sizeof(why), "a message of type %u on the stream (only "
					 "CTL_SHARD_WANT and CTL_SHARD_DROP)", type);
			else if (nfds)
				snprintf(why, sizeof(why), "%s with %d descriptors (none)", what, nfds);
			else if (ctl_check_shard_list(buf, (size_t)m, n, &idx, &count, err, sizeof(err)) == 0)
				why[0] = '\0';
			else
				snprintf(why, sizeof(why), "%s: %.200s", what, err);
			for (uint32_t i = 0; !why[0] && type == CTL_SHARD_DROP && i < count; i++)
				if (state[idx[i]] != 1)
					snprintf(why, sizeof(why), "CTL_SHARD_DROP: shard %u, which is not "
						 "delivered", idx[i]);
			if (why[0]) {
				say("uid %u: %s: %s", t->uid, t->url, why);
				reply_err(sock, m == -EPROTO ? EPROTO : EINVAL, why);
				ret = 1;
				goto out;
			}
			if (type == CTL_SHARD_WANT) {
				for (uint32_t i = 0; i < nwant; i++)
					pos[want[i]] = UINT32_MAX;
				memcpy(want, idx, (size_t)count * sizeof(*idx));
				nwant = count;
				for (uint32_t i = 0; i < nwant; i++)
					pos[want[i]] = i;
			} else {
				for (uint32_t i = 0; i < count; i++)
					state[idx[i]] = 2;
			}
			shorted = 0;  /* room may be had now */
			continue;
		}
		if (!nb)
			continue;
		/* this stream's dropped shards, in the order they go: not wanted (by index), then
		 * the farthest wanted first; none of the batch (it is wanted: never dropped-now) */
		size_t ne = 0;
		for (uint32_t k = 0; k < n; k++)
			if (state[k] == 2 && pos[k] == UINT32_MAX)
				evict[ne++] = k;
		for (uint32_t i = nwant; i-- > 0;)
			if (state[want[i]] == 2) {
				int in = 0;
				for (unsigned j = 0; j < nb; j++)
					in |= batch[j] == want[i];
				if (!in)
					evict[ne++] = want[i];
			}
		uint64_t fetched = 0;
		int r = s3cache_stream_fetch(st, batch, nb, evict, ne, strm_take, t, &fetched, err,
					     sizeof(err));
		if (r == 1 && nb > 1)  /* room for the soonest alone, perhaps */
			r = s3cache_stream_fetch(st, batch, nb = 1, evict, ne, strm_take, t, &fetched,
						 err, sizeof(err));
		if (r == 1) {
			if (!shorted)
				say("uid %u: %s: shard %u waits for room: %s", t->uid, t->url, batch[0],
				    err);
			shorted = 1;
			continue;
		}
		shorted = 0;
		for (unsigned i = 0; r == 0 && i < t->ngot; i++) {
			if (send_shard(sock, t->got[i].k, n, t->got[i].fd) < 0) {
				got_close(t);
				goto out;  /* loaderd went away */
			}
			state[t->got[i].k] = 1;
		}
		got_close(t);
		if (r < 0) {
			say("uid %u: %s: %s", t->uid, t->url, err);
			reply_err(sock, -r, err);
			ret = 1;
			goto out;
		}
	}
out:
	free(state);
	free(pos);
	free(evict);
	return ret;
}

static unsigned stream_inflight(void)
{
	const char *v = getenv("LOADERD_CACHE_STREAM_INFLIGHT");
	unsigned u;
	return v && arg_uint(v, 1, 64, &u) == 0 ? u : 4;
}

/* A streamed set's open (*@ul: the uid's lock, held; let go once the open is answered, so that the
 * uid's next request does not wait for this job's end), then its loop. -EMEDIUMTYPE, nothing
 * sent and the lock still held, when @url is a single .dpk: the caller fetches it whole. */
static int serve_stream(int sock, struct s3 *s, const char *url, uint32_t uid,
			struct charge_arg *ca, int *ul, char *err, size_t errlen)
{
	struct s3cache_opts o = { .bound = g_size, .bound_name = "loaderd --cache-size",
				  .admit = strm_admit, .arg = ca, .concurrent = 1 };
	struct strm t = { .uid = uid, .url = url, .ca = ca };
	struct s3cache_stream *st = NULL;
	/* Short of room that streams hold (-EBUSY): they let go of shards as their ranks move on,
	 * so wait for it, up to LDF_OPEN_WAIT_S, while the request's client is there. */
	int ret, waited_ms = 0, step_ms = 100;
	while ((ret = s3cache_stream_open(s, g_dir, &o, url, strm_take, &t, &st, err,
					  errlen)) == -EBUSY && waited_ms < LDF_OPEN_WAIT_S * 1000) {
		got_close(&t);
		struct pollfd p = { .fd = sock, .events = POLLIN };
		if (poll(&p, 1, step_ms) > 0)
			break;  /* loaderd let go of the request (or spoke out of turn) */
		waited_ms += step_ms;
		step_ms = step_ms < 1600 ? 2 * step_ms : step_ms;
	}
	if (ret == -EBUSY)
		ret = -ENOSPC;
	if (ret == 0) {
		/* shard 0, then the manifest (the set's own descriptor ends the open, as ever) */
		uint32_t n = s3cache_stream_shards(st);
		struct ctl_error ok;
		ctl_error_make(&ok, 0, "%s", "");
		ok.err = 0;
		if (send_shard(sock, 0, n, t.got[1].fd) < 0 ||
		    ctl_send(sock, CTL_ERROR, &ok, sizeof(ok), &t.got[0].fd, 1) < 0)
			ret = err_set(err, errlen, -EPIPE, "%s: loaderd went away", url);
	}
	got_close(&t);
	if (ret == -EMEDIUMTYPE) {
		s3cache_stream_close(st);
		return ret;
	}
	if (*ul >= 0)
		close(*ul);
	*ul = -1;
	if (ret < 0) {
		s3cache_stream_close(st);
		return ret;
	}
	say("uid %u: %s: streamed, %u shards (the manifest and shard 0 delivered)", uid, url,
	    s3cache_stream_shards(st));
	if (g_note >= 0) {
		(void)!write(g_note, "s", 1);  /* the parent: this uid's next request may start */
		close(g_note);
		g_note = -1;
	}
	ca->stream = 1;  /* from now on, the uid's charge past its bound is a wait */
	ret = stream_loop(sock, st, &t, stream_inflight());
	s3cache_stream_close(st);
	return ret ? 1 : 0;
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
	if (q.reserved & ~LDF_STREAM) {
		explicit_bzero(body, len);
		snprintf(why, sizeof(why), "a request with unknown flags 0x%x", q.reserved);
		reply_err(sock, EINVAL, why);
		return 1;
	}
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
		int stream = (q.reserved & LDF_STREAM) != 0;
		if (stream) {
			ret = serve_stream(sock, s, url, q.uid, &ca, &ul, err, sizeof(err));
			if (ret == -EMEDIUMTYPE)
				stream = 0;  /* a single .dpk: whole, as without streaming */
		}
		if (!stream)
			ret = s3cache_fetch_opts(s, g_dir, &o, url, &r, &lock, err, sizeof(err));
		if (ret == 0 && !stream) {
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
	if (ret > 0) {  /* a stream that ended on its CTL_ERROR, already sent */
		free(url);
		return 1;
	}
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
	int stream;  /* LDF_STREAM asked for */
	size_t len;
	char body[];
};

struct ldf_child {
	pid_t pid;
	int pidfd;   /* readable when it exits; -1 where the kernel has no pidfd_open */
	uint32_t uid;
	int note;    /* a pipe from the child: a byte when its stream's open is answered; -1 after */
	int streaming;  /* a stream past its open: not the uid's running request any more */
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
				if (g_kids[i].note >= 0)
					close(g_kids[i].note);
				g_kids[i] = g_kids[--g_nkids];
				break;
			}
}

static int uid_running(uint32_t uid)
{
	for (unsigned i = 0; i < g_nkids; i++)
		if (g_kids[i].uid == uid && !g_kids[i].streaming)
			return 1;
	return 0;
}

static unsigned uid_streams(uint32_t uid)
{
	unsigned n = 0;
	for (unsigned i = 0; i < g_nkids; i++)
		n += g_kids[i].uid == uid && g_kids[i].streaming;
	return n;
}

static unsigned streams_running(void)
{
	unsigned n = 0;
	for (unsigned i = 0; i < g_nkids; i++)
		n += g_kids[i].streaming;
	return n;
}

/* Fork a child for each waiting request whose uid has none, while places are free (in order). */
static void start_waiting(void)
{
	/* every place held by a stream, each for its job's life: no request would start before a
	 * job ends, so each is refused, saying so, rather than left waiting */
	while (g_wait && streams_running() == LDF_CHILDREN) {
		struct ldf_wait *w = g_wait;
		g_wait = w->next;
		if (!g_wait)
			g_wait_tail = &g_wait;
		g_nwait--;
		reply_err(w->fd, EAGAIN, "ldfetch: every one of its " STR(LDF_CHILDREN) " places "
			  "is held by a streamed set's job (loaderd --cache-stream), its most at once; "
			  "try again when one ends");
		wait_drop(w);
	}
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
		/* a uid's streams hold their places for their jobs' lives: past its bound, its next
		 * stream is refused (the uid's earlier requests are past their opens here: counted) */
		if (w->stream && uid_streams(w->uid) >= LDF_STREAMS_UID) {
			char t[CTL_TEXT_MAX];
			snprintf(t, sizeof(t), "ldfetch: uid %u already streams %u sets (loaderd "
				 "--cache-stream), its most at once of the node cache's "
				 STR(LDF_CHILDREN) " places; try again when one of its jobs ends",
				 w->uid, uid_streams(w->uid));
			reply_err(w->fd, EAGAIN, t);
			wait_drop(w);
			continue;
		}
		int note[2] = { -1, -1 };
		if (pipe2(note, O_CLOEXEC) < 0)
			note[0] = note[1] = -1;  /* then a stream stays its uid's running request */
		pid_t pid = fork();
		if (pid == 0) {
			close(3);
			if (note[0] >= 0)
				close(note[0]);
			g_note = note[1];
			for (unsigned i = 0; i < g_nkids; i++) {
				if (g_kids[i].pidfd >= 0)
					close(g_kids[i].pidfd);
				if (g_kids[i].note >= 0)
					close(g_kids[i].note);
			}
			while (g_wait) {  /* other requests' credentials are not this child's */
				struct ldf_wait *o = g_wait;
				g_wait = o->next;
				wait_drop(o);
			}
			int ret = serve(w->fd, w->body, w->len);
			close(w->fd);
			_exit(ret);
		}
		if (note[1] >= 0)
			close(note[1]);
		if (pid < 0) {
			reply_err(w->fd, errno, "ldfetch: cannot fork");
			if (note[0] >= 0)
				close(note[0]);
		} else {
			g_kids[g_nkids].pid = pid;
			g_kids[g_nkids].pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
			g_kids[g_nkids].uid = w->uid;
			g_kids[g_nkids].note = note[0];
			g_kids[g_nkids].streaming = 0;
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
		struct pollfd p[1 + 2 * LDF_CHILDREN];
		unsigned at[LDF_CHILDREN];  /* p[] index of each child's note, or 0 */
		int np = 1, timeout = -1;
		p[0] = (struct pollfd){ .fd = 3, .events = POLLIN };
		for (unsigned i = 0; i < g_nkids; i++) {
			if (g_kids[i].pidfd >= 0)
				p[np++] = (struct pollfd){ .fd = g_kids[i].pidfd, .events = POLLIN };
			else
				timeout = 50;
			at[i] = 0;
			if (g_kids[i].note >= 0) {
				at[i] = (unsigned)np;
				p[np++] = (struct pollfd){ .fd = g_kids[i].note, .events = POLLIN };
			}
		}
		if (poll(p, (nfds_t)np, timeout) < 0 && errno != EINTR) {
			say("poll: %s", strerror(errno));
			return 1;
		}
		for (unsigned i = 0; i < g_nkids; i++) {
			char c;
			if (!at[i] || !(p[at[i]].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (read(g_kids[i].note, &c, 1) == 1)
				g_kids[i].streaming = 1;  /* the uid's next request may start */
			close(g_kids[i].note);
			g_kids[i].note = -1;
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
		w->stream = (q.reserved & LDF_STREAM) != 0;
		w->len = (size_t)n;
		memcpy(w->body, buf, (size_t)n);
		explicit_bzero(buf, sizeof(buf));
		*g_wait_tail = w;
		g_wait_tail = &w->next;
		g_nwait++;
	}
}
