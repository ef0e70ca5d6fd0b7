/* ldc.c - the client side of the control protocol and of the ring (see ldc.h).
 *
 * DESIGN
 * The ring's futex word is waited on in slices of at most SLICE_MS: a producer killed with
 * SIGKILL wakes nobody, so between slices the client asks the kernel whether the control socket
 * has hung up (poll: POLLHUP/POLLRDHUP, or a CTL_ERROR the daemon sent before dropping us). The
 * slice bounds how long a dead daemon goes unnoticed; it costs one wakeup per slice while idle.
 * After each release the client rings the doorbell (an eventfd the daemon polls), which is what
 * wakes the daemon's producer threads when the ring was full.
 *
 * Nothing the server sends is trusted. Every number of the job reply and of the ring's header is
 * checked once, in ldc_open (check_job_ok), and every number of a slot's header once per
 * acquire, from a private copy read once (read_slot): the server could change shared memory
 * between a check and a second read. Labels, ids, sample flags and pixels are data, passed
 * through; the client computes nothing from them. */
#include "shm/ldc.h"

#include "s3/s3cfg.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SLICE_MS 100
#define REPLY_TIMEOUT_MS 10000
#define S3_OPEN_TIMEOUT_MS (3600 * 1000)  /* a job open whose dataset the node cache fetches */

struct ldc {
	int fd;
	int bell;
	struct ring *ring;
	uint64_t next;          /* next step to acquire */
	struct ldc_token job;   /* the open job's identity and shape, for ldc_token */
	int gone;               /* the daemon hung up or dropped us, or ldc_detach */
	int gone_err;
	int detached;           /* ldc_detach: socket and doorbell closed, ring still mapped */
	int balance;            /* the job balances shares: a slot holds up to CTL_BALANCE_CAP */
	uint32_t augment;       /* ctl_augment_digest of the CTL_AUGMENT sent (ldc_augment) */
	int s3_cached;          /* ldc_s3_open was taken: the job open fetches, wait longer */
	double report;          /* ldc_report's latest, ns per sample; 0: none. Left in the slot
				 * of every step released from then on (ring_cons_report) */
	uint32_t *field_off;    /* the batch's aux offsets and lengths, checked copies (batch x
				 * aux_fields each, made at open) */
	uint32_t *field_len;
	char err[CTL_TEXT_MAX + 128];
};

static int set_err(struct ldc *c, int ret, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_err(struct ldc *c, int ret, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return ret;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *ldc_default_socket(char *buf, size_t n)
{
	const char *rt = getenv("XDG_RUNTIME_DIR");

	if (rt && *rt)
		snprintf(buf, n, "%s/loaderd.sock", rt);
	else
		snprintf(buf, n, "/tmp/loaderd-%u.sock", (unsigned)getuid());
	return buf;
}

/* Is one of this process's groups @gid? */
static int in_group(gid_t gid)
{
	gid_t groups[256];
	int n = getgroups(256, groups);

	if (gid == getgid() || gid == getegid())
		return 1;
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return 1;
	return 0;
}

/* Could only root or @uid have put a socket at @path? Its folder, symbolic links resolved, and
 * every folder above it are owned by root or @uid and writable by their owner alone (a service's
 * RuntimeDirectory: /run/loaderd under /run; not /tmp, nor a folder another user can write). */
static int placed_by(const char *path, uid_t uid)
{
	char real[PATH_MAX];
	struct stat st;

	if (!realpath(path, real) || real[0] != '/')
		return 0;
	for (char *slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
		slash[slash == real] = '\0';  /* the folder: "/run/loaderd/s" -> "/run/loaderd" */
		if (lstat(real, &st) < 0 || !S_ISDIR(st.st_mode) ||
		    (st.st_uid != 0 && st.st_uid != uid) || (st.st_mode & 022))
			return 0;
		if (slash == real)
			return 1;  /* "/" checked */
	}
	return 0;
}

/* The client checks the daemon before it sends anything (a job names a dataset, and passes it
 * open): the process serving @path must be root, this user, the user that owns a socket shared
 * with one of our groups (loaderd --group), or the user that owns a socket that only it or root
 * could have put there (placed_by: the unprivileged service in its runtime folder). Anything
 * else (a socket squatted in /tmp by another user) is refused, naming the socket and who serves
 * it. 0 or -EPERM. */
static int check_server(int fd, const char *path, char *err, size_t errlen)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct stat st;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
		snprintf(err, errlen, "cannot check who serves %s: %s", path, strerror(errno));
		return -EPERM;
	}
	if (cr.uid == 0 || cr.uid == getuid() || cr.uid == geteuid())
		return 0;
	int have = stat(path, &st) == 0;
	if (have && st.st_uid == cr.uid && (st.st_mode & 0060) == 0060 && in_group(st.st_gid))
		return 0;
	if (have && S_ISSOCK(st.st_mode) && st.st_uid == cr.uid && placed_by(path, cr.uid))
		return 0;
	if (have)
		snprintf(err, errlen, "refusing loaderd at %s: it is served by uid %u and the socket is "
			 "owned by uid %u (mode %03o), neither root, you, a loaderd --group socket of "
			 "yours, nor one in a folder only its owner or root can write: another user may "
			 "have put it there", path, (unsigned)cr.uid,
			 (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
	else
		snprintf(err, errlen, "refusing loaderd at %s: it is served by uid %u, neither root "
			 "nor you", path, (unsigned)cr.uid);
	return -EPERM;
}

int ldc_connect(const char *socket_path, struct ldc **out, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ldc *c;
	int ret;

	*out = NULL;
	if (strlen(socket_path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path %s is too long", socket_path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, socket_path);
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	c->bell = -1;
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot connect to loaderd at %s: %s%s", socket_path,
			 strerror(-ret), ret == -ENOENT || ret == -ECONNREFUSED ?
			 " (is loaderd running with --socket this path?)" : "");
		if (c->fd >= 0)
			close(c->fd);
		free(c);
		return ret;
	}
	ret = check_server(c->fd, socket_path, err, errlen);
	if (ret < 0) {
		close(c->fd);
		free(c);
		return ret;
	}
	*out = c;
	return 0;
}

/* The daemon spoke or hung up without being asked: record why and return -errno. */
static int take_unsolicited(struct ldc *c)
{
	char buf[CTL_MSG_MAX];
	uint16_t type;
	ssize_t n = ctl_recv(c->fd, buf, &type, NULL, NULL);

	c->gone = 1;
	if (n >= (ssize_t)sizeof(struct ctl_error) && type == CTL_ERROR) {
		struct ctl_error e;
		memcpy(&e, buf, sizeof(e));
		e.text[sizeof(e.text) - 1] = '\0';
		c->gone_err = e.err > 0 && e.err < 4096 ? -e.err : -EPIPE;  /* as wait_reply */
		return set_err(c, -EPIPE, "loaderd dropped this client: %s", e.text);
	}
	c->gone_err = -EPIPE;
	if (n == -EPIPE || n == -ECONNRESET)
		return set_err(c, -EPIPE, "loaderd closed the connection: it exited or was killed");
	return set_err(c, -EPIPE, "loaderd sent an unexpected message (%s); connection abandoned",
		       n < 0 ? strerror((int)-n) : "wrong type");
}

/* Wait up to @timeout_ms for a reply of @want into @buf. Body length or -errno. */
static ssize_t wait_reply(struct ldc *c, uint16_t want, void *buf, int *fds, int *nfds)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	uint16_t type;
	ssize_t n;

	/* a job open through loaderd's node cache waits for its fetch (ldc_s3_open) */
	int ms = want == CTL_JOB_OK && c->s3_cached ? S3_OPEN_TIMEOUT_MS : REPLY_TIMEOUT_MS;
	int r = poll(&p, 1, ms);
	if (r == 0)
		return set_err(c, -ETIMEDOUT, "loaderd did not answer within %d ms", ms);
	if (r < 0)
		return set_err(c, -errno, "poll: %s", strerror(errno));
	n = ctl_recv(c->fd, buf, &type, fds, nfds);
	if (n == -EPIPE) {
		c->gone = 1;
		return set_err(c, -EPIPE, "loaderd closed the connection: it exited or was killed");
	}
	if (n < 0)
		return set_err(c, (int)n, "bad reply from loaderd: %s", strerror((int)-n));
	if (type == CTL_ERROR && (size_t)n == sizeof(struct ctl_error)) {
		struct ctl_error e;
		memcpy(&e, buf, sizeof(e));
		e.text[sizeof(e.text) - 1] = '\0';
		c->gone = 1;
		return set_err(c, e.err > 0 && e.err < 4096 ? -e.err : -EIO, "loaderd: %s", e.text);
	}
	if (type != want) {
		if (fds)
			for (int i = 0; i < *nfds; i++)
				close(fds[i]);
		return set_err(c, -EBADMSG, "loaderd answered with message type %u, expected %u", type,
			       want);
	}
	return n;
}

static int copy_field(char *dst, size_t cap, const char *src)
{
	size_t n = src ? strlen(src) : 0;

	if (n == 0 || n >= cap)
		return -1;
	memcpy(dst, src, n);
	return 0;
}

#define BAD_REPLY(...) set_err(c, -EBADMSG, "loaderd's job reply: " __VA_ARGS__)
#define ULL(v) ((unsigned long long)(v))

/* The job reply @ok and the ring's header @h (already checked for its own consistency by
 * ring_attach) against the job asked for (@m) and against each other. 0 or -EBADMSG naming the
 * field. After it, steps_per_epoch >= 1 (ldc_token and ldc_acquire divide by it), first_step is
 * where the client asked to start, and steps_total is the job's end. */
static int check_job_ok(struct ldc *c, const struct ctl_job_open *m, const struct ctl_job_ok *ok,
			const struct ring_hdr *h)
{
	uint64_t spe = ok->steps_per_epoch, want;

	if (ok->samples == 0)
		return BAD_REPLY("samples: 0 (a job has at least one)");
	if (spe == 0 || spe > ok->samples)
		return BAD_REPLY("steps_per_epoch: %llu is not in 1..samples (%llu)", ULL(spe),
				 ULL(ok->samples));
	if (m->epochs == 0 && ok->steps_total)
		return BAD_REPLY("steps_total: %llu for a job of unbounded epochs (0 expected)",
				 ULL(ok->steps_total));
	if (m->epochs && (__builtin_add_overflow(m->start_epoch, (uint64_t)m->epochs, &want) ||
			  __builtin_mul_overflow(want, spe, &want) || ok->steps_total != want))
		return BAD_REPLY("steps_total: %llu is not (start_epoch %llu + epochs %u) x "
				 "steps_per_epoch %llu", ULL(ok->steps_total), ULL(m->start_epoch),
				 m->epochs, ULL(spe));
	if (ok->first_step > CTL_STEP_LIMIT || ok->steps_total > CTL_STEP_LIMIT)
		return BAD_REPLY("first_step %llu or steps_total %llu: past the step limit %llu",
				 ULL(ok->first_step), ULL(ok->steps_total), ULL(CTL_STEP_LIMIT));
	if (ok->steps_total && ok->first_step > ok->steps_total)
		return BAD_REPLY("first_step: %llu is past the job's end (steps_total %llu)",
				 ULL(ok->first_step), ULL(ok->steps_total));
	if (m->start == CTL_START_AT &&
	    (m->at_step >= spe || __builtin_mul_overflow(m->at_epoch, spe, &want) ||
	     __builtin_add_overflow(want, m->at_step, &want) || ok->first_step != want))
		return BAD_REPLY("first_step: %llu is not the step asked for (epoch %llu step %llu "
				 "at %llu steps per epoch)", ULL(ok->first_step), ULL(m->at_epoch),
				 ULL(m->at_step), ULL(spe));
	if (ok->reserved[0])
		return BAD_REPLY("reserved: not zero");
	/* The ring says the same as the reply, and has the shape asked for. */
	if (h->first_step != ok->first_step)
		return BAD_REPLY("ring first_step: %llu, the reply says %llu", ULL(h->first_step),
				 ULL(ok->first_step));
	if (h->rank != m->rank || h->world != m->world)
		return BAD_REPLY("ring rank/world: rank %u of %u, asked for rank %u of %u", h->rank,
				 h->world, m->rank, m->world);
	if (h->steps_per_epoch != spe)
		return BAD_REPLY("ring steps_per_epoch: %llu, the reply says %llu",
				 ULL(h->steps_per_epoch), ULL(spe));
	if (h->steps_total != ok->steps_total)
		return BAD_REPLY("ring steps_total: %llu, the reply says %llu", ULL(h->steps_total),
				 ULL(ok->steps_total));
	if (h->job_id != ok->job_id)
		return BAD_REPLY("ring job_id: %llu, the reply says %llu", ULL(h->job_id),
				 ULL(ok->job_id));
	uint32_t slot_batch = m->balance ? CTL_BALANCE_CAP(m->batch) : m->batch;
	if (h->batch != slot_batch)
		return BAD_REPLY("ring batch: %u samples per slot, asked for %u%s", h->batch, slot_batch,
				 m->balance ? " (twice the batch: balanced shares)" : "");
	if (h->slots < 2 || (m->slots && h->slots != m->slots))
		return BAD_REPLY("ring slots: %u, asked for %u (0: loaderd's default, at least 2)",
				 h->slots, m->slots);
	if (m->crop_h) {
		int nchw = (m->transforms & CTL_TF_NCHW) != 0;
		uint32_t hh = h->shape[nchw], ww = h->shape[nchw + 1];
		if (h->ndim != 3 || h->layout != (nchw ? RING_LAYOUT_NCHW : RING_LAYOUT_NHWC) ||
		    hh != m->crop_h || ww != m->crop_w)
			return BAD_REPLY("ring shape: %u-d, layout %u, %ux%u; asked for %s %ux%u",
					 h->ndim, h->layout, hh, ww, nchw ? "NCHW" : "NHWC",
					 m->crop_h, m->crop_w);
	}
	return 0;
}

/* A user (@group 0) or group (@group 1) named by a decimal number or a name, into *@id. 0, or
 * -ENOENT when there is no such one, or -errno. */
static int name_id(const char *name, int group, uint32_t *id)
{
	char *end, *buf;
	unsigned long v;
	size_t cap = 1 << 16;  /* a group entry lists its members */
	int ret;

	errno = 0;
	v = strtoul(name, &end, 10);
	if (*name >= '0' && *name <= '9' && !*end && !errno && v < UINT32_MAX) {
		*id = (uint32_t)v;
		return 0;
	}
	buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	if (group) {
		struct group g, *res = NULL;
		ret = getgrnam_r(name, &g, buf, cap, &res);
		if (res)
			*id = (uint32_t)g.gr_gid;
		if (!res && !ret)
			ret = ENOENT;
	} else {
		struct passwd pw, *res = NULL;
		ret = getpwnam_r(name, &pw, buf, cap, &res);
		if (res)
			*id = (uint32_t)pw.pw_uid;
		if (!res && !ret)
			ret = ENOENT;
	}
	free(buf);
	return ret > 0 ? -ret : ret;
}

/* Whose job: @job's share_group and owner into @m's share fields. 0 or -errno (set_err). */
static int open_share(struct ldc *c, const struct ldc_job *job, struct ctl_job_open *m)
{
	int ret;

	if (job->share_group && job->owner)
		return set_err(c, -EINVAL, "job %s: share_group is for the job's owner, owner for "
			       "another user joining it: not both", m->job);
	if (job->share_group) {
		m->share = CTL_SHARE_GROUP;
		ret = name_id(job->share_group, 1, &m->share_gid);
		if (ret < 0)
			return set_err(c, ret, "job %s: share_group: %s: %s", m->job, job->share_group,
				       ret == -ENOENT ? "no such group" : strerror(-ret));
	}
	if (job->owner) {
		m->share = CTL_SHARE_JOIN;
		ret = name_id(job->owner, 0, &m->owner_uid);
		if (ret < 0)
			return set_err(c, ret, "job %s: owner: %s: %s", m->job, job->owner,
				       ret == -ENOENT ? "no such user" : strerror(-ret));
	}
	return 0;
}

/* ---- a set of shards, opened here (docs/RING.md, "Datasets") ---- */

#define SET_MAGIC "dpkset "            /* formats/dpkset.h's DPKSET_MAGIC */
#define SET_PATH_MAX 1024u             /* DPKSET_PATH_MAX */
#define SET_FILE_MAX ((uint64_t)(CTL_SHARDS_MAX + 2u) * (SET_PATH_MAX + 65u))

/* Is @p (@len bytes, one manifest line's PATH) one a manifest may name: relative, no ".."
 * component, no control character, not empty, within SET_PATH_MAX? 0, or -EINVAL with the reason
 * in @why, worded as formats/dpkset.c's path_check words it (libldc depends on libc alone, so the
 * rule is written here again). loaderd parses the manifest again and refuses what dpkset_parse
 * refuses; this is the client's own guard, so that a manifest never makes it open a file
 * outside the manifest's directory. */
static int set_path_check(const char *p, size_t len, char *why, size_t whylen)
{
	if (!len)
		return snprintf(why, whylen, "no shard path"), -EINVAL;
	if (len > SET_PATH_MAX)
		return snprintf(why, whylen, "a shard path of %zu bytes, above the limit of %u", len,
				SET_PATH_MAX), -E2BIG;
	if (p[0] == '/')
		return snprintf(why, whylen, "shard path '%.*s' is absolute (paths are relative to the "
				"manifest's directory)", (int)len, p), -EINVAL;
	for (size_t k = 0; k < len; k++)
		if ((unsigned char)p[k] < 0x20 || p[k] == 0x7f)
			return snprintf(why, whylen, "shard path has control character 0x%02x at byte "
					"%zu", (unsigned char)p[k], k), -EINVAL;
	for (size_t s = 0; s < len;) {  /* each component */
		size_t e = s;
		while (e < len && p[e] != '/')
			e++;
		if (e - s == 2 && p[s] == '.' && p[s + 1] == '.')
			return snprintf(why, whylen, "shard path '%.*s' has a '..' component (shards "
					"lie in the manifest's directory or below it)", (int)len, p),
			       -EINVAL;
		s = e + 1;
	}
	return 0;
}

/* Open shard @path of manifest @name (line @line) relative to @dirfd with this process's rights:
 * a regular file, or an error naming it. Non-blocking and O_NOCTTY: a FIFO cannot hang the open
 * nor a terminal become ours. The fd, or -errno with the reason in @c. */
static int set_open_shard(struct ldc *c, int dirfd, const char *name, unsigned line,
			  const char *path)
{
	struct stat st;
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

	if (fd < 0)
		return set_err(c, -errno, "%s line %u: shard %s: %s", name, line, path,
			       strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return set_err(c, -EINVAL, "%s line %u: shard %s: not a regular file", name, line,
			       path);
	}
	return fd;
}

/* Send batch @b with its fds and wait for loaderd to take it. 0 or -errno (in @c). */
static int set_send_batch(struct ldc *c, const struct ctl_shard_fds *b, const int *fds)
{
	char buf[CTL_MSG_MAX];
	struct ctl_shard_fds ack;
	int ret = ctl_send(c->fd, CTL_SHARD_FDS, b, sizeof(*b), fds, (int)b->count);

	if (ret < 0)
		return set_err(c, ret, "sending shards to loaderd: %s", strerror(-ret));
	ssize_t n = wait_reply(c, CTL_SHARD_ACK, buf, NULL, NULL);
	if (n < 0)
		return (int)n;
	if ((size_t)n != sizeof(ack))
		return set_err(c, -EBADMSG, "loaderd's shard answer is malformed (%zd bytes)", n);
	memcpy(&ack, buf, sizeof(ack));
	if (memcmp(&ack, b, sizeof(ack)))
		return set_err(c, -EBADMSG, "loaderd answered shards %u.. for the batch from shard %u",
			       ack.first, b->first);
	return 0;
}

/* @dfd, the dataset this client opened as @name: when it is a manifest, open every shard it
 * names with this process's rights and pass them to loaderd before the job open
 * (CTL_SHARD_FDS), at most CTL_FDS_BATCH open at once here. 0 (also when @dfd is a single .dpk),
 * or -errno with the reason, naming the manifest, the line and the shard, in @c. */
/* The manifest open at @dfd (@name in messages), whole and NUL-terminated, into *@text (free()
 * it; @len bytes). 1, 0 when the file is not a manifest (*@text NULL), or -errno in @c. */
static int set_read(struct ldc *c, int dfd, const char *name, char **text, size_t *len)
{
	char head[sizeof(SET_MAGIC) - 1];
	struct stat st;

	*text = NULL;
	if (pread(dfd, head, sizeof(head), 0) != (ssize_t)sizeof(head) ||
	    memcmp(head, SET_MAGIC, sizeof(head)))
		return 0;  /* not a manifest: loaderd checks the .dpk */
	if (fstat(dfd, &st) < 0)
		return set_err(c, -errno, "dataset %s: %s", name, strerror(errno));
	if ((uint64_t)st.st_size > SET_FILE_MAX)
		return set_err(c, -E2BIG, "dataset %s: a manifest of %lld bytes, above the limit of "
			       "%llu", name, (long long)st.st_size, (unsigned long long)SET_FILE_MAX);
	*len = (size_t)st.st_size;
	char *t = malloc(*len + 1);
	if (!t)
		return set_err(c, -ENOMEM, "dataset %s: out of memory for its manifest", name);
	size_t got = 0;
	while (got < *len) {
		ssize_t r = pread(dfd, t + got, *len - got, (off_t)got);
		if (r <= 0) {
			free(t);
			return set_err(c, r < 0 ? -errno : -EIO, "dataset %s: reading the manifest: %s",
				       name, r < 0 ? strerror(errno) : "shorter than its size");
		}
		got += (size_t)r;
	}
	t[*len] = '\0';
	*text = t;
	return 1;
}

/* ldc_job.window_shards: the records of the largest shard of the set @name names, into *@max.
 * 0, or -errno in @c (not a manifest; a shard line without a count). loaderd checks the manifest
 * itself: only the counts are read here. */
static int set_count_max(struct ldc *c, const char *name, uint64_t *max)
{
	int fd = open(name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	char *text;
	size_t len;

	if (fd < 0 && !strncmp(name, "s3://", 5))  /* loaderd's node cache holds it, not the client */
		return set_err(c, -EINVAL, "window_shards: dataset %s is read through loaderd's node "
			       "cache, so its shards' records cannot be counted here: give block (the "
			       "records of its largest shard: dpack inspect %s) and window instead",
			       name, name);
	if (fd < 0)
		return set_err(c, -errno, "cannot open dataset %s: %s", name, strerror(errno));
	int ret = set_read(c, fd, name, &text, &len);
	close(fd);
	if (ret <= 0)
		return ret ? ret : set_err(c, -EINVAL, "window_shards: dataset %s is not a set of "
					   "shards (a manifest: dpack --shard-size); give block "
					   "and window instead", name);
	*max = 0;
	unsigned line = 2;
	for (char *p = strchr(text, '\n'), *end; p && ++p < text + len && strncmp(p, "end ", 4);
	     p = end, line++) {
		end = memchr(p, '\n', (size_t)(text + len - p));
		char *stop;
		errno = 0;
		unsigned long long n = strtoull(p, &stop, 10);
		if (!end || stop == p || *stop != ' ' || errno || n == 0) {
			free(text);
			return set_err(c, -EBADMSG, "%s line %u: no shard count", name, line);
		}
		if (n > *max)
			*max = n;
	}
	free(text);
	return 0;
}

static int set_send(struct ldc *c, int dfd, const char *name)
{
	char *text;
	size_t len;
	int got = set_read(c, dfd, name, &text, &len);

	if (got <= 0)
		return got;
	/* Shards are relative to the manifest's directory, symbolic links resolved: the directory
	 * of the open file as the kernel names it (as dpack and formats/dpk_open.c resolve them). */
	char self[64], dir[PATH_MAX];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", dfd);
	ssize_t nl = readlink(self, dir, sizeof(dir) - 1);
	int ret = 0, dirfd = -1;
	if (nl <= 0 || dir[0] != '/') {
		ret = set_err(c, -EBADF, "dataset %s: cannot tell the manifest's directory", name);
		goto out;
	}
	dir[nl] = '\0';
	*strrchr(dir, '/') = '\0';
	dirfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);
	if (dirfd < 0) {
		ret = set_err(c, -errno, "dataset %s: its directory %s: %s", name, dir[0] ? dir : "/",
			      strerror(errno));
		goto out;
	}
	/* The lines: "dpkset V", then "COUNT IDENTITY PATH" per shard, then "end N". */
	uint32_t total = 0;
	for (int pass = 0; pass < 2 && ret == 0; pass++) {
		struct ctl_shard_fds b = { .first = 0, .total = total, .count = 0 };
		int fds[CTL_FDS_BATCH];
		unsigned line = 2;  /* the first shard's */
		char *p = strchr(text, '\n'), *end;
		uint32_t k = 0;
		for (p = p ? p + 1 : text + len; ret == 0 && p < text + len && strncmp(p, "end ", 4);
		     p = end + 1, line++) {
			end = memchr(p, '\n', (size_t)(text + len - p));
			if (!end)
				break;  /* cut short: loaderd refuses it and says so */
			char *sp1 = memchr(p, ' ', (size_t)(end - p));
			char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1)) : NULL;
			if (!sp2)
				continue;  /* malformed: loaderd refuses it by line */
			char *path = sp2 + 1;
			size_t plen = (size_t)(end - path);
			char why[SET_PATH_MAX + 128];
			if ((ret = set_path_check(path, plen, why, sizeof(why))) < 0) {
				ret = set_err(c, ret, "%s line %u: %s", name, line, why);
				break;
			}
			if (pass == 0) {
				if (++total > CTL_SHARDS_MAX)
					ret = set_err(c, -E2BIG, "dataset %s: more than %u shards", name,
						      CTL_SHARDS_MAX);
				continue;
			}
			*end = '\0';
			int fd = set_open_shard(c, dirfd, name, line, path);
			*end = '\n';
			if (fd < 0) {
				ret = fd;
				break;
			}
			fds[b.count++] = fd;
			if (++k == total || b.count == CTL_FDS_BATCH) {
				ret = set_send_batch(c, &b, fds);
				for (uint32_t i = 0; i < b.count; i++)
					close(fds[i]);
				b.first = k;
				b.count = 0;
			}
		}
		for (uint32_t i = 0; i < b.count; i++)
			close(fds[i]);
		if (pass == 0 && total == 0)
			break;  /* no shard: loaderd refuses the empty set and says so */
	}
out:
	if (dirfd >= 0)
		close(dirfd);
	free(text);
	return ret;
}

int ldc_open(struct ldc *c, const struct ldc_job *job, struct ldc_info *info)
{
	struct ctl_job_open m;
	char buf[CTL_MSG_MAX], why[CTL_TEXT_MAX];
	int fds[2], nfds = 0, ret;
	ssize_t n;

	if (c->ring)
		return set_err(c, -EINVAL, "this connection already has a job");
	memset(&m, 0, sizeof(m));
	if (copy_field(m.job, sizeof(m.job), job->job) < 0)
		return set_err(c, -EINVAL, "job name missing or longer than %u bytes",
			       CTL_JOB_NAME_MAX - 1);
	if (copy_field(m.dataset, sizeof(m.dataset), job->dataset) < 0)
		return set_err(c, -EINVAL, "dataset path missing or longer than %u bytes",
			       CTL_PATH_MAX - 1);
	m.seed = job->seed;
	m.start_epoch = job->start_epoch;
	m.epochs = job->epochs;
	m.batch = job->batch;
	m.crop_h = job->crop_h;
	m.crop_w = job->crop_w;
	m.transforms = job->transforms;
	m.rank = job->rank;
	m.world = job->world;
	m.sampling = job->sampling;
	m.tail = job->tail;
	m.on_bad = job->on_bad;
	m.slots = job->slots;
	m.weight = job->weight;
	m.balance = job->balance ? 1 : 0;
	m.block = job->block;
	m.window = job->window;
	if (job->window_shards) {
		/* A window of K shards: blocks of the largest shard's records (docs/S3.md). */
		uint64_t max = 0;
		if (job->sampling != CTL_SAMPLE_BLOCK || job->block || job->window ||
		    job->window_shards > CTL_WINDOW_MAX)
			return set_err(c, -EINVAL, "job %s: window_shards: %u is for sampling block, "
				       "alone (it sets block and window), 1..%u", m.job,
				       job->window_shards, CTL_WINDOW_MAX);
		if ((ret = set_count_max(c, job->dataset, &max)) < 0)
			return ret;
		if (max == 0)
			return set_err(c, -EINVAL, "job %s: window_shards: dataset %s has no shard",
				       m.job, job->dataset);
		if (max > CTL_BLOCK_MAX)
			return set_err(c, -EINVAL, "job %s: window_shards: the set's largest shard has "
				       "%llu records, above the block limit %u", m.job,
				       (unsigned long long)max, CTL_BLOCK_MAX);
		m.block = (uint32_t)max;
		m.window = job->window_shards;
	}
	if ((ret = open_share(c, job, &m)) < 0)
		return ret;
	struct ldc_token want = { .seed = job->seed, .world = job->world, .batch = job->batch,
				  .sampling = job->sampling, .tail = job->tail,
				  .transforms = job->transforms, .crop_h = job->crop_h,
				  .crop_w = job->crop_w, .augment = c->augment,
				  .block = m.block, .window = m.window };
	ctl_block_defaults(want.sampling, &want.block, &want.window);  /* as loaderd runs it */
	struct ldc_token tok;
	if (job->token) {
		/* Untrusted bytes: intact, this version, and for this job shape before anything is
		 * sent; the dataset's identity is checked by loaderd, which has it. */
		ret = ldc_token_parse(job->token, job->token_len, &tok, why, sizeof(why));
		if (ret == 0)
			ret = ldc_token_match(&tok, &want, why, sizeof(why));
		if (ret < 0)
			return set_err(c, ret, "job %.64s: %s", job->job ? job->job : "", why);
		m.start = CTL_START_AT;
		m.at_epoch = tok.epoch;
		m.at_step = tok.step;
		memcpy(m.dataset_id, tok.dataset, sizeof(m.dataset_id));
	} else if (job->start_at) {
		m.start = CTL_START_AT;
		m.at_epoch = job->at_epoch;
		m.at_step = job->at_step;
	}
	/* Same check the daemon makes: a mistake is reported here, in the caller's words. */
	if (ctl_check_job_open(&m, why, sizeof(why)) < 0)
		return set_err(c, -EINVAL, "job %s: %s", m.job, why);
	/* The dataset is opened here, with this process's rights, and passed to loaderd: the
	 * daemon reads only what its client could read itself (docs/RING.md). Non-blocking, so that
	 * a FIFO cannot hang the open; loaderd takes regular files only. */
	int dfd = open(job->dataset, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	int open_err = dfd < 0 ? errno : 0;
	struct stat st;
	if (dfd >= 0 && fstat(dfd, &st) == 0 && !S_ISREG(st.st_mode)) {
		close(dfd);
		return set_err(c, -EINVAL, "dataset %s is not a regular file", job->dataset);
	}
	/* A set's shards too, with the same rights, before the job open. One who joins another
	 * user's job (owner) is served with the owner's files and sends none. */
	if (dfd >= 0 && !job->owner && (ret = set_send(c, dfd, job->dataset)) < 0) {
		close(dfd);
		return ret;
	}
	/* Without a block geometry, the message as it was before it: older loaderds take it. */
	ret = ctl_send(c->fd, CTL_JOB_OPEN, &m, m.block || m.window ? sizeof(m) : CTL_JOB_OPEN_SIZE_V2,
		       dfd >= 0 ? &dfd : NULL, dfd >= 0);
	if (dfd >= 0)
		close(dfd);
	if (ret < 0)
		return set_err(c, ret, "sending the job to loaderd: %s", strerror(-ret));
	n = wait_reply(c, CTL_JOB_OK, buf, fds, &nfds);
	if (n == -EBADF && open_err)  /* loaderd: "the client did not pass it open" */
		return set_err(c, -open_err, "cannot open dataset %s: %s", job->dataset,
			       strerror(open_err));
	if (n < 0)
		return (int)n;
	if ((size_t)n != sizeof(struct ctl_job_ok) || nfds != 2) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return set_err(c, -EBADMSG, "loaderd's job reply is malformed (%zd bytes, %d fds)", n,
			       nfds);
	}
	struct ctl_job_ok ok;
	memcpy(&ok, buf, sizeof(ok));
	ret = ring_attach(fds[0], &c->ring);
	if (ret < 0) {
		close(fds[0]);
		close(fds[1]);
		return set_err(c, ret, "the ring loaderd sent cannot be used: %s%s", strerror(-ret),
			       ret == -EPERM ? " (not sealed)" : "");
	}
	const struct ring_hdr *h = ring_header(c->ring);
	ret = check_job_ok(c, &m, &ok, h);
	if (ret < 0) {
		close(fds[1]);
		ring_destroy(c->ring);
		c->ring = NULL;
		return ret;
	}
	c->bell = fds[1];
	free(c->field_off);
	free(c->field_len);
	c->field_off = c->field_len = NULL;
	if (h->aux_fields) {
		size_t nfo = (size_t)h->batch * h->aux_fields;
		c->field_off = malloc(nfo * sizeof(uint32_t));
		c->field_len = malloc(nfo * sizeof(uint32_t));
		if (!c->field_off || !c->field_len)
			return set_err(c, -ENOMEM, "no memory for %zu aux field offsets", nfo);
	}
	want.samples = ok.samples;
	want.steps_per_epoch = ok.steps_per_epoch;
	memcpy(want.dataset, ok.dataset_id, sizeof(want.dataset));
	/* loaderd checked the identity; what it answered must agree with the token too */
	if (job->token && (ret = ldc_token_match(&tok, &want, why, sizeof(why))) < 0) {
		ring_destroy(c->ring);
		c->ring = NULL;
		return set_err(c, ret, "job %s: %s", m.job, why);
	}
	c->job = want;  /* ldc_token's template */
	c->balance = m.balance;
	c->next = ok.first_step;
	memcpy(info->dataset_id, ok.dataset_id, sizeof(info->dataset_id));
	info->job_id = ok.job_id;
	info->first_step = ok.first_step;
	info->steps_total = ok.steps_total;
	info->steps_per_epoch = ok.steps_per_epoch;
	info->samples = ok.samples;
	info->ring = h;
	c->err[0] = '\0';
	return 0;
}

/* Has the daemon gone (hang-up, or an error message that precedes the close)? 0 or -EPIPE. */
static int check_peer(struct ldc *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN | POLLRDHUP };

	if (c->gone)
		return -EPIPE;
	if (poll(&p, 1, 0) <= 0)
		return 0;
	return take_unsolicited(c);
}

/* Copy the header of the slot just taken, each field read once (the server may write shared
 * memory at any time: what is checked is what is used), and check it. 0, or -EBADMSG naming the
 * field; the connection is then done (the slot stays held, the ring is not to be trusted). */
static int read_slot(struct ldc *c, const struct ring_slot *s, struct ring_slot_hdr *sh)
{
	const struct ring_hdr *h = ring_header(c->ring);
	uint64_t spe = c->job.steps_per_epoch;  /* >= 1: check_job_ok */
	const char *what = NULL;

	sh->step = __atomic_load_n(&s->hdr->step, __ATOMIC_RELAXED);
	sh->epoch = __atomic_load_n(&s->hdr->epoch, __ATOMIC_RELAXED);
	sh->step_in_epoch = __atomic_load_n(&s->hdr->step_in_epoch, __ATOMIC_RELAXED);
	sh->count = __atomic_load_n(&s->hdr->count, __ATOMIC_RELAXED);
	sh->flags = __atomic_load_n(&s->hdr->flags, __ATOMIC_RELAXED);
	sh->global_count = __atomic_load_n(&s->hdr->global_count, __ATOMIC_RELAXED);
	sh->global_offset = __atomic_load_n(&s->hdr->global_offset, __ATOMIC_RELAXED);
	/* The global step is world x (the even count, 1..batch asked for); this rank's part lies
	 * inside it, and with even splits it is exactly the rank's even batch. */
	uint64_t world = h->world, even = sh->global_count / (world ? world : 1);
	if (sh->step != s->step)
		what = "step";
	else if (sh->count == 0 || sh->count > h->batch)
		what = "count";
	else if (sh->global_count % world || even == 0 || even > c->job.batch)
		what = "global_count";
	else if (sh->global_offset > sh->global_count ||
		 sh->count > sh->global_count - sh->global_offset)
		what = "global_offset";
	else if (!c->balance && (sh->count != even || sh->global_offset != even * h->rank))
		what = "global_offset";
	else if (sh->epoch != s->step / spe)
		what = "epoch";
	else if (sh->step_in_epoch != s->step % spe)
		what = "step_in_epoch";
	if (!what)
		return 0;
	c->gone = 1;
	c->gone_err = -EBADMSG;
	return set_err(c, -EBADMSG, "the ring's slot of step %llu: %s is out of range (step %llu, "
		       "epoch %llu, step_in_epoch %llu, count %u; batch %u, %llu steps per epoch)",
		       ULL(s->step), what, ULL(sh->step), ULL(sh->epoch), ULL(sh->step_in_epoch),
		       sh->count, h->batch, ULL(spe));
}

/* The aux lengths of a slot's @count samples, read once each from shared memory into c's private
 * arrays and checked: a sample's blob inside its stride and at least its field lengths, each
 * field at most RING_AUX_FIELD_MAX (the format's), the fields adding up to the blob. -EBADMSG
 * naming the sample and field (the connection is done, as for a bad slot header). */
#define RING_AUX_FIELD_MAX 65536u
static int read_aux(struct ldc *c, const struct ring_hdr *h, const struct ring_slot *s,
		    uint32_t count)
{
	uint32_t nf = h->aux_fields;

	for (uint32_t j = 0; j < count; j++) {
		uint32_t len = ((volatile const uint32_t *)s->aux_len)[j];
		const volatile uint8_t *blob = s->aux + (size_t)j * h->aux_stride;
		uint64_t at = 4ull * nf;
		if (len > h->aux_stride || len < 4 * nf) {
			c->gone = 1;
			return set_err(c, -EBADMSG, "step %llu: loaderd sent a bad slot: aux_len[%u] %u "
				       "outside %u..%u", (unsigned long long)s->step, j, len, 4 * nf,
				       h->aux_stride);
		}
		for (uint32_t k = 0; k < nf; k++) {
			uint32_t l = (uint32_t)blob[4 * k] | (uint32_t)blob[4 * k + 1] << 8 |
				     (uint32_t)blob[4 * k + 2] << 16 | (uint32_t)blob[4 * k + 3] << 24;
			if (l > RING_AUX_FIELD_MAX || l > len - at) {
				c->gone = 1;
				return set_err(c, -EBADMSG, "step %llu: loaderd sent a bad slot: sample "
					       "%u's aux field %s of %u bytes runs past its %u", 
					       (unsigned long long)s->step, j, ring_aux_name(c->ring, k),
					       l, len);
			}
			c->field_off[(size_t)j * nf + k] = (uint32_t)((size_t)j * h->aux_stride + at);
			c->field_len[(size_t)j * nf + k] = l;
			at += l;
		}
		if (at != len) {
			c->gone = 1;
			return set_err(c, -EBADMSG, "step %llu: loaderd sent a bad slot: sample %u's aux "
				       "fields add up to %llu of its %u bytes", (unsigned long long)s->step,
				       j, (unsigned long long)at, len);
		}
	}
	return 0;
}

const char *ldc_aux_name(const struct ldc *c, uint32_t k)
{
	return c->ring ? ring_aux_name(c->ring, k) : NULL;
}

int ldc_acquire(struct ldc *c, int timeout_ms, struct ldc_batch *b)
{
	int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
	struct ring_slot s;
	int ret;

	if (!c->ring)
		return set_err(c, -EINVAL, "no job is open on this connection");
	if (c->detached)
		return set_err(c, -EPIPE, "this connection let go of its job (ldc_detach)");
	for (;;) {
		int slice = SLICE_MS;
		if (deadline >= 0) {
			int64_t left = deadline - now_ms();
			slice = left < 0 ? 0 : left < SLICE_MS ? (int)left : SLICE_MS;
		}
		ret = ring_cons_acquire(c->ring, c->next, slice, &s);
		if (ret == 0)
			break;
		if (ret == -EBADMSG && read_slot(c, &s, &(struct ring_slot_hdr){ 0 }) < 0)
			return -EBADMSG;  /* the slot is held: name the field that is wrong */
		if (ret == -ENODATA)
			return set_err(c, ret, "end of job: all %llu steps were delivered",
				       (unsigned long long)ring_header(c->ring)->steps_total);
		if (ret != -ETIMEDOUT)
			return set_err(c, ret, "step %llu: the ring is inconsistent (%s)",
				       (unsigned long long)c->next, strerror(-ret));
		/* Published batches are still good after the daemon died; only wait-forever ends. */
		if (check_peer(c) < 0)
			return -EPIPE;
		if (deadline >= 0 && now_ms() >= deadline)
			return set_err(c, -ETIMEDOUT, "no batch for step %llu within %d ms",
				       (unsigned long long)c->next, timeout_ms);
	}
	const struct ring_hdr *h = ring_header(c->ring);
	struct ring_slot_hdr sh;
	ret = read_slot(c, &s, &sh);
	if (ret < 0)
		return ret;
	c->next++;
	b->step = s.step;
	b->epoch = sh.epoch;
	b->step_in_epoch = sh.step_in_epoch;
	b->count = sh.count;
	b->flags = sh.flags;
	b->sample_flags = s.flags;
	b->labels = s.labels;
	b->ids = s.ids;
	b->data = s.payload;
	b->sample_bytes = h->sample_bytes;
	b->global_count = sh.global_count;
	b->global_offset = sh.global_offset;
	b->aux_fields = h->aux_fields;
	b->aux_stride = h->aux_stride;
	b->aux = s.aux;
	b->field_off = c->field_off;
	b->field_len = c->field_len;
	if (h->aux_fields && (ret = read_aux(c, h, &s, sh.count)) < 0)
		return ret;
	return 0;
}

int ldc_report(struct ldc *c, double ns_per_sample)
{
	if (!c->ring)
		return set_err(c, -EINVAL, "no job is open on this connection");
	if (!(ns_per_sample > 0) || !isfinite(ns_per_sample))
		return set_err(c, -EINVAL, "compute time per sample: %g ns is not a positive number",
			       ns_per_sample);
	c->report = ns_per_sample;
	return 0;
}

int ldc_release(struct ldc *c, const struct ldc_batch *b)
{
	uint64_t one = 1;
	int ret;

	if (!c->ring)
		return set_err(c, -EINVAL, "no job is open on this connection");
	if (c->detached)
		return set_err(c, -EPIPE, "this connection let go of its job (ldc_detach)");
	/* The latest report goes with the release of this step: loaderd reads it back when it takes
	 * the slot again, so what it sees for a step does not depend on when it looks. A step not
	 * held fails the release below. */
	if (c->report > 0)
		(void)ring_cons_report(c->ring, b->step, c->report);
	ret = ring_cons_release(c->ring, b->step);
	if (ret < 0)
		return set_err(c, ret, "step %llu is not held by this client",
			       (unsigned long long)b->step);
	/* The doorbell is non-blocking; a full counter (never, in practice) still wakes the daemon. */
	(void)!write(c->bell, &one, sizeof(one));
	return 0;
}

int ldc_token(struct ldc *c, uint64_t step, void *buf, size_t cap)
{
	struct ldc_token t;

	if (!c->ring)
		return set_err(c, -EINVAL, "no job is open on this connection");
	if (cap < sizeof(t))
		return set_err(c, -ENOSPC, "a resume token needs %u bytes", LDC_TOKEN_SIZE);
	if (step == LDC_TOKEN_NEXT)
		step = c->next;
	if (step > CTL_STEP_LIMIT)  /* a token no one could resume from (ctl.h) */
		return set_err(c, -EINVAL, "step %llu is past the step limit %llu",
			       (unsigned long long)step, (unsigned long long)CTL_STEP_LIMIT);
	t = c->job;
	t.epoch = step / t.steps_per_epoch;
	t.step = step % t.steps_per_epoch;
	ldc_token_seal(&t);
	memcpy(buf, &t, sizeof(t));
	return (int)sizeof(t);
}

int ldc_stats(struct ldc *c, struct ctl_stats *st)
{
	char buf[CTL_MSG_MAX];
	ssize_t n;
	int ret;

	if (!c->ring)
		return set_err(c, -EINVAL, "no job is open on this connection");
	if (c->gone)
		return -EPIPE;
	ret = ctl_send(c->fd, CTL_STATS_REQ, NULL, 0, NULL, 0);
	if (ret < 0)
		return set_err(c, ret, "asking loaderd for stats: %s", strerror(-ret));
	n = wait_reply(c, CTL_STATS, buf, NULL, NULL);
	if (n < 0)
		return (int)n;
	if ((size_t)n != sizeof(*st))
		return set_err(c, -EBADMSG, "loaderd's stats reply is %zd bytes", n);
	struct ctl_stats t;
	memcpy(&t, buf, sizeof(t));
	const struct ring_hdr *h = ring_header(c->ring);
	if (t.job_id != h->job_id)
		return set_err(c, -EBADMSG, "loaderd's stats: job_id %llu, this job is %llu",
			       ULL(t.job_id), ULL(h->job_id));
	if (t.slots != h->slots || t.occupancy > t.slots)
		return set_err(c, -EBADMSG, "loaderd's stats: slots %u, occupancy %u; the ring has "
			       "%u slots", t.slots, t.occupancy, h->slots);
	if (t.ranks_attached > h->world)
		return set_err(c, -EBADMSG, "loaderd's stats: ranks_attached %u of a world of %u",
			       t.ranks_attached, h->world);
	if (t.reserved0 || t.reserved[0] || t.reserved[1])
		return set_err(c, -EBADMSG, "loaderd's stats: reserved fields are not zero");
	*st = t;
	return 0;
}

int ldc_split_seed(struct ldc *c, const void *body, size_t len)
{
	char why[CTL_TEXT_MAX];
	int ret;

	if (c->ring)
		return set_err(c, -EINVAL, "a split seed goes before the job open");
	if (len > CTL_MSG_MAX - sizeof(struct ctl_hdr))
		return set_err(c, -E2BIG, "a split seed of %zu bytes does not fit one message (%zu)",
			       len, CTL_MSG_MAX - sizeof(struct ctl_hdr));
	if (ctl_check_split(body, len, 1, why, sizeof(why)) < 0)
		return set_err(c, -EINVAL, "%s", why);
	if (c->gone)
		return -EPIPE;
	ret = ctl_send(c->fd, CTL_SPLIT_SEED, body, len, NULL, 0);
	if (ret < 0)
		return set_err(c, ret, "sending the split seed to loaderd: %s", strerror(-ret));
	return 0;
}

int ldc_augment(struct ldc *c, const struct ctl_augment *a)
{
	char why[CTL_TEXT_MAX];
	int ret;

	if (c->ring)
		return set_err(c, -EINVAL, "augmentations go before the job open");
	if (ctl_check_augment(a, sizeof(*a), why, sizeof(why)) < 0)
		return set_err(c, -EINVAL, "%s", why);
	if (c->gone)
		return -EPIPE;
	ret = ctl_send(c->fd, CTL_AUGMENT, a, sizeof(*a), NULL, 0);
	if (ret < 0)
		return set_err(c, ret, "sending the augmentations to loaderd: %s", strerror(-ret));
	c->augment = ctl_augment_digest(a);
	return 0;
}

int ldc_s3_open(struct ldc *c, const struct ldc_s3 *s3)
{
	char body[CTL_MSG_MAX], buf[CTL_MSG_MAX], why[CTL_TEXT_MAX];
	const char *f[6] = { s3->url, s3->endpoint, s3->region, s3->access_key, s3->secret_key,
			     s3->session_token ? s3->session_token : "" };
	struct ctl_s3_open h = { 0 };
	uint16_t *lens[6] = { &h.url_len, &h.endpoint_len, &h.region_len, &h.access_len,
			      &h.secret_len, &h.token_len };
	size_t off = sizeof(h);
	struct ctl_s3_ack ack;
	int ret = 0;

	if (c->ring)
		return set_err(c, -EINVAL, "an s3 dataset goes before the job open");
	for (int i = 0; i < 6; i++) {
		size_t n = f[i] ? strlen(f[i]) : 0;
		if (n > CTL_S3_TOKEN_MAX || off + n > sizeof(body)) {
			ret = -EINVAL;
			break;
		}
		*lens[i] = (uint16_t)n;
		memcpy(body + off, f[i] ? f[i] : "", n);
		off += n;
	}
	memcpy(body, &h, sizeof(h));
	if (ret == 0 && ctl_check_s3_open(body, off, why, sizeof(why)) < 0)
		ret = set_err(c, -EINVAL, "%s: %s", s3->url ? s3->url : "s3 dataset", why);
	else if (ret < 0)
		set_err(c, ret, "%s: a field longer than loaderd takes", s3->url ? s3->url : "s3");
	if (ret == 0 && c->gone)
		ret = -EPIPE;
	if (ret == 0 && (ret = ctl_send(c->fd, CTL_S3_OPEN, body, off, NULL, 0)) < 0)
		set_err(c, ret, "sending the s3 dataset to loaderd: %s", strerror(-ret));
	explicit_bzero(body, sizeof(body));  /* the credentials */
	if (ret < 0)
		return ret;
	ssize_t n = wait_reply(c, CTL_S3_ACK, buf, NULL, NULL);
	if (n < 0)
		return (int)n;
	if ((size_t)n != sizeof(ack))
		return set_err(c, -EBADMSG, "loaderd's s3 answer is malformed (%zd bytes)", n);
	memcpy(&ack, buf, sizeof(ack));
	if (ack.err == EOPNOTSUPP || ack.err == EPERM)  /* no cache; not from this endpoint */
		return 1;
	if (ack.err != 0 || ack.reserved)
		return set_err(c, -EBADMSG, "loaderd's s3 answer is malformed (err %d)", ack.err);
	c->s3_cached = 1;
	return 0;
}

int ldc_s3_offer(struct ldc *c, const char *url)
{
	const char *cf = getenv("LOADERD_S3_CLIENT_FETCH");
	struct s3_cfg cfg;
	char why[512];
	int ret;

	if (cf && !strcmp(cf, "1"))
		return 1;
	ret = s3_cfg_load(&cfg, why, sizeof(why));
	if (ret < 0)
		return set_err(c, ret, "%s: %s", url ? url : "s3 dataset", why);
	struct ldc_s3 q = { url, cfg.endpoint, cfg.region, cfg.access_key, cfg.secret_key,
			    cfg.session_token };
	ret = ldc_s3_open(c, &q);
	s3_cfg_fini(&cfg);  /* wipes the keys */
	return ret;
}

int ldc_split_weights(struct ldc *c, uint64_t step, uint32_t *w, uint32_t world)
{
	char buf[CTL_MSG_MAX], why[CTL_TEXT_MAX];
	struct ctl_split_req q = { .step = step };
	struct ctl_split h;
	ssize_t n;
	int ret;

	if (!c->ring || !c->balance)
		return set_err(c, -EINVAL, "no job with balanced shares is open on this connection");
	if (world != ring_header(c->ring)->world)
		return set_err(c, -EINVAL, "split weights: world %u, the job's is %u", world,
			       ring_header(c->ring)->world);
	if (c->gone)
		return -EPIPE;
	ret = ctl_send(c->fd, CTL_SPLIT_REQ, &q, sizeof(q), NULL, 0);
	if (ret < 0)
		return set_err(c, ret, "asking loaderd for split weights: %s", strerror(-ret));
	n = wait_reply(c, CTL_SPLIT, buf, NULL, NULL);
	if (n < 0)
		return (int)n;
	if (ctl_check_split(buf, (size_t)n, 0, why, sizeof(why)) < 0)
		return set_err(c, -EBADMSG, "loaderd's %s", why);
	memcpy(&h, buf, sizeof(h));
	if (h.from != step || (h.world && h.world != world))
		return set_err(c, -EBADMSG, "loaderd's split: step %llu of world %u, asked for step "
			       "%llu of world %u", ULL(h.from), h.world, ULL(step), world);
	if (!h.world)
		return 0;
	memcpy(w, buf + sizeof(h), (size_t)world * sizeof(*w));
	return 1;
}

void ldc_detach(struct ldc *c)
{
	if (!c || c->detached)
		return;
	c->detached = 1;
	c->gone = 1;
	c->gone_err = -EPIPE;
	if (c->bell >= 0)
		close(c->bell);
	if (c->fd >= 0)
		close(c->fd);
	c->bell = c->fd = -1;
}

void ldc_close(struct ldc *c)
{
	if (!c)
		return;
	ring_destroy(c->ring);
	if (c->bell >= 0)
		close(c->bell);
	if (c->fd >= 0)
		close(c->fd);
	free(c->field_off);
	free(c->field_len);
	free(c);
}

/* Append @n bytes of @p to the growing string *@buf (*@len used, *@cap allocated). 0 or -ENOMEM. */
static int append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t want = *cap ? *cap : 4096;
		while (want < *len + n + 1)
			want *= 2;
		char *t = realloc(*buf, want);
		if (!t)
			return -ENOMEM;
		*buf = t;
		*cap = want;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

int ldc_admin(const char *socket_path, uint32_t op, uint32_t flags, const char *job, char **text,
	      char *err, size_t errlen)
{
	struct ctl_admin req = { .op = op, .flags = flags };
	size_t len = 0, cap = 0;
	char *out = NULL;
	struct ldc *c;
	int ret;

	*text = NULL;
	if (job && strlen(job) >= sizeof(req.job)) {
		snprintf(err, errlen, "job name %s is longer than %zu bytes", job, sizeof(req.job) - 1);
		return -EINVAL;
	}
	if (job)
		strcpy(req.job, job);
	ret = ldc_connect(socket_path, &c, err, errlen);
	if (ret < 0)
		return ret;
	ret = ctl_send(c->fd, CTL_ADMIN, &req, sizeof(req), NULL, 0);
	if (ret < 0)
		set_err(c, ret, "sending to loaderd: %s", strerror(-ret));
	/* The answer comes in chunks; an empty one ends it. */
	while (ret == 0) {
		char buf[CTL_MSG_MAX];
		ssize_t n = wait_reply(c, CTL_ADMIN_TEXT, buf, NULL, NULL);

		if (n < 0)
			ret = (int)n;
		else if (n == 0)
			break;
		else if (append(&out, &len, &cap, buf, (size_t)n) < 0)
			ret = set_err(c, -ENOMEM, "out of memory for loaderd's answer");
	}
	if (ret == 0 && !out)
		ret = append(&out, &len, &cap, "", 0) < 0 ? set_err(c, -ENOMEM, "out of memory") : 0;
	if (ret < 0) {
		snprintf(err, errlen, "%s", c->err);
		free(out);
		out = NULL;
	}
	ldc_close(c);
	*text = out;
	return ret;
}

const char *ldc_error(const struct ldc *c)
{
	return c->err;
}

void *ldc_ring_base(const struct ldc *c)
{
	return c->ring ? ring_base(c->ring) : NULL;
}

size_t ldc_ring_size(const struct ldc *c)
{
	return c->ring ? (size_t)ring_header(c->ring)->total_size : 0;
}
