/* ctl.c - framing and validation of control messages (see ctl.h). Both sides use it; nothing
 * here trusts the peer: lengths, types, strings and enums are all checked before use. */
#include "shm/ctl.h"
#include "shm/ring.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

int ctl_send(int sock, uint16_t type, const void *body, size_t len, const int *fds, int nfds)
{
	struct ctl_hdr h = { .magic = CTL_MAGIC, .version = CTL_VERSION, .type = type };
	union {
		char buf[CMSG_SPACE(CTL_FDS_BATCH * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)body, len } };
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };

	if (len > CTL_MSG_MAX - sizeof(h) || nfds < 0 || nfds > (int)CTL_FDS_BATCH)
		return -EINVAL;
	h.length = (uint32_t)(sizeof(h) + len);
	if (nfds > 0) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &m, MSG_NOSIGNAL);
		if (n >= 0)
			return n == (ssize_t)h.length ? 0 : -EIO;
		if (errno != EINTR)
			return errno == ECONNRESET ? -EPIPE : -errno;
	}
}

/* Take the fds out of a received control block: keep up to @cap in @fds, close all others;
 * *@extra says how many were closed. */
static int take_fds(struct msghdr *m, int *fds, int cap, int *nfds, int *extra)
{
	int kept = 0;

	*extra = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fds && kept < cap) {
				fds[kept++] = fd;
			} else {
				close(fd);
				++*extra;
			}
		}
	}
	if (nfds)
		*nfds = kept;
	return kept;
}

/* ctl_recv with room for @cap fds; @strict: more than @cap is -EBADMSG (else closed unseen). */
static ssize_t recv_msg(int sock, void *buf, uint16_t *type, int *fds, int cap, int *nfds,
			int strict)
{
	union {
		char buf[CMSG_SPACE((CTL_FDS_BATCH + 4) * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { buf, CTL_MSG_MAX };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	struct ctl_hdr h;
	ssize_t n;

	if (nfds)
		*nfds = 0;
	do
		n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == ECONNRESET ? -EPIPE : -errno;
	int extra;
	int kept = take_fds(&m, fds, cap, nfds, &extra);
	int ret = 0;
	if (n == 0) {
		/* End of stream and an empty packet both read as 0 bytes: only a hang-up is EOF. */
		struct pollfd p = { .fd = sock, .events = POLLRDHUP };
		ret = poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP)) ? -EPIPE : -EBADMSG;
	}
	else if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)n < sizeof(h) ||
		 (strict && extra))
		ret = -EBADMSG;
	if (ret == 0) {
		memcpy(&h, buf, sizeof(h));
		if (h.magic != CTL_MAGIC || h.length != (uint32_t)n || h.reserved)
			ret = -EBADMSG;
		else if (h.version != CTL_VERSION)
			ret = -EPROTO;
		else if (h.type == 0 || h.type > CTL_TYPE_MAX)
			ret = -EBADMSG;
	}
	if (ret < 0) {
		for (int i = 0; i < kept; i++)
			close(fds[i]);
		if (nfds)
			*nfds = 0;
		return ret;
	}
	*type = h.type;
	memmove(buf, (char *)buf + sizeof(h), (size_t)n - sizeof(h));
	return n - (ssize_t)sizeof(h);
}

ssize_t ctl_recv(int sock, void *buf, uint16_t *type, int *fds, int *nfds)
{
	return recv_msg(sock, buf, type, fds, 2, nfds, 0);
}

ssize_t ctl_recv_fds(int sock, void *buf, uint16_t *type, int *fds, int cap, int *nfds)
{
	if (cap < 0 || cap > (int)CTL_FDS_BATCH)
		return -EINVAL;
	return recv_msg(sock, buf, type, fds, cap, nfds, 1);
}

int ctl_check_shard_fds(const void *body, size_t len, int nfds, uint32_t got, uint32_t total,
			char *why, size_t whylen)
{
	struct ctl_shard_fds b;

	if (len != sizeof(b))
		return snprintf(why, whylen, "a shard batch of %zu bytes, not %zu", len, sizeof(b)),
		       -EINVAL;
	memcpy(&b, body, sizeof(b));
	if (b.reserved)
		return snprintf(why, whylen, "a shard batch with its reserved field set"), -EINVAL;
	if (b.total == 0 || b.total > CTL_SHARDS_MAX)
		return snprintf(why, whylen, "a set of %u shards (1..%u)", b.total, CTL_SHARDS_MAX),
		       -EINVAL;
	if (got && b.total != total)
		return snprintf(why, whylen, "a shard batch for a set of %u shards after batches for "
				"%u", b.total, total), -EINVAL;
	if (b.first != got)
		return snprintf(why, whylen, "a shard batch from shard %u where shard %u was next",
				b.first, got), -EINVAL;
	uint32_t want = b.total - got < CTL_FDS_BATCH ? b.total - got : CTL_FDS_BATCH;
	if (got >= b.total)
		return snprintf(why, whylen, "a shard batch after all %u shards came", b.total),
		       -EINVAL;
	if (b.count != want || nfds < 0 || (uint32_t)nfds != want)
		return snprintf(why, whylen, "a shard batch from shard %u of %u says %u descriptors "
				"and carries %d; it must carry %u", b.first, b.total, b.count, nfds,
				want), -EINVAL;
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

int ctl_check_shard_one(const void *body, size_t len, int nfds, uint32_t total, uint32_t *k,
			uint32_t *said, char *why, size_t whylen)
{
	struct ctl_shard_fds b;

	if (len != sizeof(b))
		return snprintf(why, whylen, "a shard of %zu bytes, not %zu", len, sizeof(b)), -EINVAL;
	memcpy(&b, body, sizeof(b));
	if (b.reserved)
		return snprintf(why, whylen, "a shard with its reserved field set"), -EINVAL;
	if (b.total == 0 || b.total > CTL_SHARDS_MAX || (total && b.total != total))
		return snprintf(why, whylen, "shard %u of %u: not a shard of this set's %u (1..%u)",
				b.first, b.total, total, CTL_SHARDS_MAX), -EINVAL;
	if (b.first >= b.total)
		return snprintf(why, whylen, "shard %u of a set of %u", b.first, b.total), -EINVAL;
	if (b.count != 1 || nfds != 1)
		return snprintf(why, whylen, "shard %u says %u descriptors and carries %d; it must "
				"carry 1", b.first, b.count, nfds), -EINVAL;
	*k = b.first;
	*said = b.total;
	return 0;
}

int ctl_check_shard_list(const void *body, size_t len, uint32_t total, const uint32_t **idx,
			 uint32_t *count, char *why, size_t whylen)
{
	struct ctl_shard_list h;
	uint32_t sorted[CTL_SHARD_LIST_MAX];

	if (len < sizeof(h))
		return snprintf(why, whylen, "a shard list of %zu bytes, shorter than its %zu-byte "
				"head", len, sizeof(h)), -EINVAL;
	memcpy(&h, body, sizeof(h));
	if (h.reserved)
		return snprintf(why, whylen, "a shard list with its reserved field set (%u)",
				h.reserved), -EINVAL;
	if (h.count > CTL_SHARD_LIST_MAX)
		return snprintf(why, whylen, "a shard list's count %u, above CTL_SHARD_LIST_MAX (%u)",
				h.count, CTL_SHARD_LIST_MAX), -EINVAL;
	if (len != sizeof(h) + (size_t)h.count * 4u)
		return snprintf(why, whylen, "a shard list of %zu bytes whose count %u says %zu", len,
				h.count, sizeof(h) + (size_t)h.count * 4u), -EINVAL;
	memcpy(sorted, (const char *)body + sizeof(h), (size_t)h.count * 4u);
	for (uint32_t i = 0; i < h.count; i++)
		if (sorted[i] >= total)
			return snprintf(why, whylen, "a shard list's index %u is shard %u: the set has "
					"%u shards", i, sorted[i], total), -EINVAL;
	qsort(sorted, h.count, sizeof(*sorted), cmp_u32);
	for (uint32_t i = 1; i < h.count; i++)
		if (sorted[i] == sorted[i - 1])
			return snprintf(why, whylen, "a shard list names shard %u twice", sorted[i]),
			       -EINVAL;
	*idx = (const uint32_t *)(const void *)((const char *)body + sizeof(h));
	*count = h.count;
	return 0;
}

static int s3_field_ok(const char *p, size_t n, int space)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] < (space ? 0x20 : 0x21) || (unsigned char)p[i] > 0x7e)
			return 0;
	return 1;
}

int ctl_check_s3_open(const void *body, size_t len, char *why, size_t whylen)
{
	struct ctl_s3_open h;
	static const char *const names[6] = { "url", "endpoint", "region", "access key id",
					      "secret key", "session token" };
	static const uint16_t lo[6] = { 6, 8, 1, 1, 1, 0 };
	static const uint16_t hi[6] = { CTL_S3_URL_MAX, CTL_S3_ENDPOINT_MAX, CTL_S3_REGION_MAX,
					CTL_S3_KEY_MAX, CTL_S3_KEY_MAX, CTL_S3_TOKEN_MAX };

	if (len < sizeof(h))
		return snprintf(why, whylen, "an s3 open of %zu bytes, under its %zu-byte header", len,
				sizeof(h)), -EINVAL;
	memcpy(&h, body, sizeof(h));
	if (h.reserved)
		return snprintf(why, whylen, "an s3 open with its reserved field set"), -EINVAL;
	const uint16_t l[6] = { h.url_len, h.endpoint_len, h.region_len, h.access_len,
				h.secret_len, h.token_len };
	size_t sum = 0;
	for (int i = 0; i < 6; i++) {
		if (l[i] < lo[i] || l[i] > hi[i])
			return snprintf(why, whylen, "an s3 open whose %s is %u bytes (%u..%u)", names[i],
					l[i], lo[i], hi[i]), -EINVAL;
		sum += l[i];
	}
	if (sum != len - sizeof(h))
		return snprintf(why, whylen, "an s3 open of %zu bytes whose strings add up to %zu",
				len, sum + sizeof(h)), -EINVAL;
	const char *p = (const char *)body + sizeof(h);
	for (int i = 0; i < 6; p += l[i], i++)
		if (!s3_field_ok(p, l[i], i == 0))
			return snprintf(why, whylen, "an s3 open whose %s holds a byte that is not "
					"printable ASCII", names[i]), -EINVAL;
	p = (const char *)body + sizeof(h);
	if (memcmp(p, "s3://", 5))
		return snprintf(why, whylen, "an s3 open whose url does not start with s3://"),
		       -EINVAL;
	p += l[0];
	if (memcmp(p, "http://", 7) && (l[1] < 9 || memcmp(p, "https://", 8)))
		return snprintf(why, whylen, "an s3 open whose endpoint is neither http:// nor "
				"https://"), -EINVAL;
	return 0;
}

/* @n bytes at @p, without one trailing "/". */
static size_t strip_slash(const char *p, size_t n)
{
	return n && p[n - 1] == '/' ? n - 1 : n;
}

/* AWS's own endpoints: https://s3.amazonaws.com, https://s3.REGION.amazonaws.com. */
static int aws_endpoint(const char *ep, size_t n)
{
	static const char pre[] = "https://s3.", post[] = "amazonaws.com";
	const size_t lp = sizeof(pre) - 1, lq = sizeof(post) - 1;

	if (n < lp + lq || strncasecmp(ep, pre, lp) || strncasecmp(ep + n - lq, post, lq))
		return 0;
	size_t r = n - lp - lq;  /* "" or "REGION." */
	if (r == 0)
		return 1;
	if (r < 2 || r > 33 || ep[lp + r - 1] != '.')
		return 0;
	for (size_t i = lp; i < lp + r - 1; i++) {
		char c = ep[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-'))
			return 0;
	}
	return 1;
}

int ctl_s3_endpoint_listed(const char *list, const char *ep, size_t n)
{
	n = strip_slash(ep, n);
	if (!list)
		return aws_endpoint(ep, n);
	for (const char *p = list; *p;) {
		size_t m = strcspn(p, ",");
		size_t k = strip_slash(p, m);
		if (k == n && n && !strncasecmp(p, ep, n))
			return 1;
		p += m;
		if (*p == ',')
			p++;
	}
	return 0;
}

int ctl_s3_endpoints_check(const char *list, char *why, size_t whylen)
{
	if (!*list)
		return snprintf(why, whylen, "an empty list"), -EINVAL;
	for (const char *p = list; *p;) {
		size_t m = strcspn(p, ","), k = strip_slash(p, m), s;
		if (!strncasecmp(p, "http://", 7))
			s = 7;
		else if (!strncasecmp(p, "https://", 8))
			s = 8;
		else
			return snprintf(why, whylen, "'%.*s' is neither http://HOST[:PORT] nor "
					"https://HOST[:PORT]", (int)(m > 200 ? 200 : m), p), -EINVAL;
		/* HOST[:PORT] only: no user, path, query or fragment that could make two spellings */
		if (k == s || strspn(p + s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				     "0123456789.-:[]") < k - s || k > CTL_S3_ENDPOINT_MAX)
			return snprintf(why, whylen, "'%.*s' is not http(s)://HOST[:PORT] (no user, "
					"path or query; at most %d bytes)", (int)(m > 200 ? 200 : m),
					p, CTL_S3_ENDPOINT_MAX), -EINVAL;
		p += m;
		if (*p == ',' && !*++p)
			return snprintf(why, whylen, "a list that ends on a comma"), -EINVAL;
	}
	return 0;
}

/* A fixed-size string field must hold a NUL, and nothing but NULs after it (no hidden bytes). */
static int fixed_string_ok(const char *s, size_t cap)
{
	const char *nul = memchr(s, 0, cap);

	if (!nul || nul == s)
		return 0;
	for (const char *p = nul; p < s + cap; p++)
		if (*p)
			return 0;
	return 1;
}

#define BAD(...) (snprintf(why, whylen, __VA_ARGS__), -EINVAL)

int ctl_check_job_open(const struct ctl_job_open *j, char *why, size_t whylen)
{
	if (!fixed_string_ok(j->job, sizeof(j->job)))
		return BAD("job: empty, not NUL-terminated, or junk after the NUL");
	if (strspn(j->job, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
	    strlen(j->job))
		return BAD("job: only letters, digits, '.', '_' and '-' are allowed");
	if (!fixed_string_ok(j->dataset, sizeof(j->dataset)))
		return BAD("dataset: empty, not NUL-terminated, or junk after the NUL");
	if (j->batch == 0 || j->batch > RING_BATCH_MAX)
		return BAD("batch: %u is not in 1..%u", j->batch, RING_BATCH_MAX);
	if ((j->crop_h == 0) != (j->crop_w == 0) || j->crop_h > CTL_CROP_MAX || j->crop_w > CTL_CROP_MAX)
		return BAD("crop: %ux%u (both 1..%u, or both 0 for records as stored)", j->crop_h,
			   j->crop_w, CTL_CROP_MAX);
	if (j->transforms & ~CTL_TF_ALL)
		return BAD("transforms: unknown bits 0x%x", j->transforms & ~CTL_TF_ALL);
	if ((j->transforms & CTL_TF_RANDOM_RESIZED_CROP) && (j->transforms & CTL_TF_CENTER_CROP))
		return BAD("transforms: random-resized-crop and center-crop exclude each other");
	if ((j->transforms & (CTL_TF_RANDOM_RESIZED_CROP | CTL_TF_CENTER_CROP)) && j->crop_h == 0)
		return BAD("transforms: a crop needs crop_h and crop_w");
	if (j->world == 0 || j->world > CTL_WORLD_MAX)
		return BAD("world: %u is not in 1..%u", j->world, CTL_WORLD_MAX);
	if (j->rank >= j->world)
		return BAD("rank: %u is not below world size %u", j->rank, j->world);
	if (j->sampling > CTL_SAMPLE_BLOCK)
		return BAD("sampling: unknown mode %u", j->sampling);
	if (j->tail > CTL_TAIL_DROP_LAST)
		return BAD("tail: unknown policy %u", j->tail);
	if (j->on_bad > CTL_BAD_FAIL)
		return BAD("on_bad: unknown policy %u", j->on_bad);
	if (j->slots == 1 || j->slots > RING_SLOTS_MAX)
		return BAD("slots: %u is not in 2..%u (0 = default)", j->slots, RING_SLOTS_MAX);
	if (j->start > CTL_START_AT)
		return BAD("start: unknown mode %u", j->start);
	if (j->start == CTL_START_DEFAULT) {
		static const uint8_t zero[CTL_DATASET_ID_SIZE];
		if (j->at_epoch || j->at_step || memcmp(j->dataset_id, zero, sizeof(zero)))
			return BAD("start: at_epoch, at_step and dataset_id are for start AT only");
	}
	/* Without the steps of an epoch (the server knows them at open) these bound the epochs
	 * alone: every epoch has at least one step. The rest is checked where they are known. */
	if (j->start_epoch > CTL_STEP_LIMIT || j->epochs > CTL_STEP_LIMIT - j->start_epoch)
		return BAD("start_epoch: %llu (+ %u epochs) is past the step limit %llu",
			   (unsigned long long)j->start_epoch, j->epochs,
			   (unsigned long long)CTL_STEP_LIMIT);
	if (j->start == CTL_START_AT && j->at_epoch > CTL_STEP_LIMIT)
		return BAD("at_epoch: %llu is past the step limit %llu", (unsigned long long)j->at_epoch,
			   (unsigned long long)CTL_STEP_LIMIT);
	if (j->start == CTL_START_AT && j->at_step >= CTL_STEP_LIMIT)
		return BAD("at_step: %llu is past the step limit %llu", (unsigned long long)j->at_step,
			   (unsigned long long)CTL_STEP_LIMIT);
	if (j->share > CTL_SHARE_JOIN)
		return BAD("share: unknown mode %u", j->share);
	if (j->share != CTL_SHARE_GROUP && j->share_gid)
		return BAD("share_gid: for share GROUP only");
	if (j->share != CTL_SHARE_JOIN && j->owner_uid)
		return BAD("owner_uid: for share JOIN only");
	if (j->weight > CTL_WEIGHT_MAX)
		return BAD("weight: %u is not in 1..%u (0 = 1)", j->weight, CTL_WEIGHT_MAX);
	if ((uint64_t)j->batch * j->world > UINT32_MAX)
		return BAD("batch x world: more than 2^32 - 1 samples a step");
	if (j->balance > 1)
		return BAD("balance: 0 or 1");
	if (j->sampling != CTL_SAMPLE_BLOCK && (j->block || j->window))
		return BAD("%s: for sampling block only (0 with sampling %s)",
			   j->block ? "block" : "window",
			   j->sampling == CTL_SAMPLE_SHUFFLE ? "shuffle" : "sequential");
	if (j->block > CTL_BLOCK_MAX)
		return BAD("block: %u records is not in 1..%u (0 = %u)", j->block, CTL_BLOCK_MAX,
			   CTL_BLOCK_DEFAULT);
	if (j->window > CTL_WINDOW_MAX)
		return BAD("window: %u blocks is not in 1..%u (0 = %u)", j->window, CTL_WINDOW_MAX,
			   CTL_WINDOW_DEFAULT);
	return 0;
}

void ctl_block_defaults(uint32_t sampling, uint32_t *block, uint32_t *window)
{
	if (sampling != CTL_SAMPLE_BLOCK) {
		*block = *window = 0;
		return;
	}
	if (!*block)
		*block = CTL_BLOCK_DEFAULT;
	if (!*window)
		*window = CTL_WINDOW_DEFAULT;
}

int ctl_check_admin(const struct ctl_admin *a, char *why, size_t whylen)
{
	if (a->op < CTL_OP_STATUS || a->op > CTL_OP_STOP)
		return BAD("admin: unknown operation %u", a->op);
	if (a->flags & ~CTL_ADMIN_JSON)
		return BAD("admin: unknown flags 0x%x", a->flags);
	if (a->reserved[0] || a->reserved[1])
		return BAD("admin: reserved fields are not zero");
	const char *nul = memchr(a->job, 0, sizeof(a->job));
	if (!nul)
		return BAD("admin: job name is not NUL-terminated");
	for (const char *p = nul; p < a->job + sizeof(a->job); p++)
		if (*p)
			return BAD("admin: junk after the job name");
	if (a->op == CTL_OP_STOP && nul == a->job)
		return BAD("admin: stop needs a job name");
	return 0;
}

int ctl_check_split(const void *body, size_t len, int seed, char *why, size_t whylen)
{
	const char *what = seed ? "split seed" : "split";
	struct ctl_split h;

	if (len < sizeof(h))
		return BAD("%s: %zu bytes, under the %zu of its header", what, len, sizeof(h));
	memcpy(&h, body, sizeof(h));
	if (h.reserved)
		return BAD("%s: reserved field is not zero", what);
	if (h.world > CTL_WORLD_MAX || (seed && h.world == 0))
		return BAD("%s: world %u is not in %u..%u", what, h.world, seed ? 1u : 0u, CTL_WORLD_MAX);
	if (h.from > CTL_STEP_LIMIT)
		return BAD("%s: step %llu is past the limit of %llu", what, (unsigned long long)h.from,
			   (unsigned long long)CTL_STEP_LIMIT);
	if (!seed && (h.slots || h.nrows))
		return BAD("split: slots %u and rows %u are not zero", h.slots, h.nrows);
	if (seed && (h.slots < 1 || h.slots > RING_SLOTS_MAX))
		return BAD("split seed: slots %u is not in 1..%u", h.slots, RING_SLOTS_MAX);
	if (seed && h.nrows != CTL_SPLIT_ROWS(h.from, h.slots))
		return BAD("split seed: %u report rows, not the %u of the updates from step %llu with "
			   "%u slots", h.nrows, CTL_SPLIT_ROWS(h.from, h.slots),
			   (unsigned long long)h.from, h.slots);
	if (len != CTL_SPLIT_SIZE(h.world, h.nrows))
		return BAD("%s: %zu bytes, not the %zu of world %u and %u rows", what, len,
			   CTL_SPLIT_SIZE(h.world, h.nrows), h.world, h.nrows);
	uint64_t sum = 0;
	uint32_t floor = h.world ? CTL_SPLIT_ONE / (4u * h.world) : 0;
	for (uint32_t r = 0; r < h.world; r++) {
		uint32_t w;
		memcpy(&w, (const char *)body + sizeof(h) + 4 * (size_t)r, 4);
		if (w < floor || w > CTL_SPLIT_ONE)
			return BAD("%s: weight of rank %u is %u, not in %u..%u", what, r, w, floor,
				   CTL_SPLIT_ONE);
		sum += w;
	}
	if (h.world && sum != CTL_SPLIT_ONE)
		return BAD("%s: the weights sum to %llu, not %u", what, (unsigned long long)sum,
			   CTL_SPLIT_ONE);
	return 0;
}

void ctl_error_make(struct ctl_error *e, int err, const char *fmt, ...)
{
	va_list ap;

	memset(e, 0, sizeof(*e));
	e->err = err < 0 ? -err : err;
	va_start(ap, fmt);
	vsnprintf(e->text, sizeof(e->text), fmt, ap);
	va_end(ap);
}
