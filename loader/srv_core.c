/* srv_core.c - the centre of the server core: the services every other srv_*.c file uses, and
 * nothing that uses them. It owns
 *   - notices: srv_notice, rate-limited, control characters escaped (any thread);
 *   - waking the control loop: srv_wake_control (any thread, async-signal-safe);
 *   - the per-uid accounts behind every per-uid limit: connections, jobs, memory held for jobs
 *     (srv_mem_add, srv_mem_check), admin answers queued and the admin time budget
 *     (srv_admin_charge);
 *   - who a peer is and what it may see: srv_peer_in_group, srv_job_visible.
 * The lock rules (what s->mu guards, which thread frees what) are stated once, at the top of
 * srv_impl.h; every function here says whether it wants the lock.
 *
 * It calls no other srv_*.c file: the others form a star around it (the map in srv_impl.h), so
 * a part can be changed without going around a circle of the others. */
#include "loader/srv_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- notices and the wake ---- */

/* Warnings and info are what clients cause (a refusal, a drop): a client that connects and
 * misbehaves in a loop would otherwise write the log as fast as it can. At most NOTICE_RATE a
 * second (bursts of NOTICE_BURST) pass; the next one that does says how many were left out.
 * Errors always pass. */
#define NOTICE_RATE 100.0
#define NOTICE_BURST 200.0

static int notice_allowed(int level, unsigned *suppressed)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static double tokens = NOTICE_BURST;
	static int64_t last;
	static unsigned dropped;
	int ok;

	pthread_mutex_lock(&mu);
	int64_t now = now_ns();
	tokens += (double)(now - last) * 1e-9 * NOTICE_RATE;
	if (tokens > NOTICE_BURST)
		tokens = NOTICE_BURST;
	last = now;
	ok = level == 0 || tokens >= 1;
	if (ok) {
		tokens -= level == 0 ? 0 : 1;
		*suppressed = dropped;
		dropped = 0;
	} else {
		dropped++;
	}
	pthread_mutex_unlock(&mu);
	return ok;
}

void srv_notice(struct srv *s, int level, const char *fmt, ...)
{
	char msg[512];
	unsigned suppressed = 0;
	va_list ap;

	if (!s->ops.notice || !notice_allowed(level, &suppressed))
		return;
	if (suppressed) {
		char m[96];
		snprintf(m, sizeof(m), "(%u notices about clients left out: more than %.0f a second)",
			 suppressed, NOTICE_RATE);
		s->ops.notice(s->ops.ctx, 1, m);
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	char safe[sizeof(msg) * 4];
	size_t k = 0;
	for (const unsigned char *p = (const unsigned char *)msg; *p && k + 5 < sizeof(safe); p++) {
		if (*p < 0x20 || *p == 0x7f)
			k += (size_t)snprintf(safe + k, sizeof(safe) - k, "\\x%02x", *p);
		else
			safe[k++] = (char)*p;
	}
	safe[k] = '\0';
	s->ops.notice(s->ops.ctx, level, safe);
}

void srv_wake_control(struct srv *s)
{
	uint64_t one = 1;

	(void)!write(s->wake, &one, sizeof(one));
}

/* ---- per-uid accounts ---- */

struct uid_use *srv_uid(struct srv *s, uid_t uid)
{
	struct uid_use *u;

	for (u = s->uids; u; u = u->next)
		if (u->uid == uid)
			return u;
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	u->admin_tokens = SRV_ADMIN_BURST_S * 1e9 * s->opts.admin_share / 100;  /* a full burst */
	u->admin_ns = now_ns();
	u->next = s->uids;
	s->uids = u;
	return u;
}

void srv_mem_add(struct srv *s, uid_t uid, int64_t delta)
{
	struct uid_use *u = srv_uid(s, uid);

	s->mem_used += (uint64_t)delta;
	if (u)
		u->mem += (uint64_t)delta;
}

void srv_fds_add(struct srv *s, uid_t uid, int64_t delta)
{
	struct uid_use *u = srv_uid(s, uid);

	s->fds_used += (uint64_t)delta;
	if (u)
		u->fds += (uint64_t)delta;
}

int srv_fds_check(struct srv *s, uid_t uid, uint64_t n, const char *what, char *why,
		  size_t whylen)
{
	struct uid_use *u = srv_uid(s, uid);

	if (s->fds_used + n > s->opts.max_fds) {
		snprintf(why, whylen, "%s needs %llu descriptors; loaderd holds %llu for clients of "
			 "its limit %u (loaderd --max-fds)", what, (unsigned long long)n,
			 (unsigned long long)s->fds_used, s->opts.max_fds);
		return -EMFILE;
	}
	if (u && u->fds + n > s->opts.max_fds_uid) {
		snprintf(why, whylen, "%s needs %llu descriptors; uid %u has %llu of its %u (loaderd "
			 "--max-fds-per-uid)", what, (unsigned long long)n, (unsigned)uid,
			 (unsigned long long)u->fds, s->opts.max_fds_uid);
		return -EMFILE;
	}
	return 0;
}

int srv_fd_regular(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

int srv_set_fds_reserve(struct srv *s, uid_t uid, uint32_t total, uint64_t *charge, char *why,
			size_t whylen)
{
	uint64_t need = 2 * (uint64_t)total + 2;
	char what[96];
	int ret;

	snprintf(what, sizeof(what), "a set of %u shards", total);
	if ((ret = srv_fds_check(s, uid, need, what, why, whylen)) < 0)
		return ret;
	srv_fds_add(s, uid, (int64_t)need);
	*charge = need;
	return 0;
}

int srv_mem_check(struct srv *s, uid_t uid, uint64_t bytes, const char *what, char *why,
		  size_t whylen)
{
	struct uid_use *u = srv_uid(s, uid);
	uint64_t share = s->opts.mem_limit / 100 * s->opts.mem_share_uid;

	if (!s->opts.mem_limit)
		return 0;
	if (s->mem_used + bytes > s->opts.mem_limit || s->mem_used + bytes < bytes) {
		snprintf(why, whylen, "%s needs %llu KiB of memory; limit %llu KiB, %llu KiB in use "
			 "(loaderd --mem-limit)", what, (unsigned long long)((bytes + 1023) >> 10),
			 (unsigned long long)(s->opts.mem_limit >> 10),
			 (unsigned long long)(s->mem_used >> 10));
		return -ENOMEM;
	}
	if (u && (u->mem + bytes > share || u->mem + bytes < bytes)) {
		snprintf(why, whylen, "%s needs %llu KiB of memory; uid %u has %llu KiB of its %llu "
			 "KiB (%u%% of the memory limit, loaderd --mem-share)", what,
			 (unsigned long long)((bytes + 1023) >> 10), (unsigned)uid,
			 (unsigned long long)(u->mem >> 10), (unsigned long long)(share >> 10),
			 s->opts.mem_share_uid);
		return -ENOMEM;
	}
	return 0;
}

void srv_admin_charge(struct srv *s, struct uid_use *u, int64_t ns)
{
	int64_t now = now_ns();
	double burst = SRV_ADMIN_BURST_S * 1e9 * s->opts.admin_share / 100;

	u->admin_tokens += (double)(now - u->admin_ns) * s->opts.admin_share / 100;
	if (u->admin_tokens > burst)
		u->admin_tokens = burst;
	u->admin_ns = now;
	u->admin_tokens -= (double)ns;
}

/* ---- peers ---- */

int srv_peer_in_group(int fd, gid_t g)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	gid_t groups[256];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return 0;
	if (cr.gid == g)
		return 1;
	len = sizeof(groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return 0;
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == g)
			return 1;
	return 0;
}

int srv_job_visible(const struct conn *c, const struct job *j)
{
	return c->uid == j->uid || c->uid == 0 || c->uid == geteuid() ||
	       (j->spec.share == CTL_SHARE_GROUP && srv_peer_in_group(c->fd, j->spec.share_gid));
}
