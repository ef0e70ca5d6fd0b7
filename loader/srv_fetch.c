/* srv_fetch.c - a job open's s3:// dataset through the node cache (loaderd --cache-dir): the
 * opener thread hands the client's request to ldfetch (tools/ldfetch.c, the one process of
 * loaderd that talks to a store; loaderd itself links no HTTP library) on a socket of the
 * request's own, and takes the descriptors it answers with as a client's (CTL_SHARD_FDS batches,
 * then the dataset's own). docs/S3.md, "The node cache". */
#include "loader/srv_impl.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

void srv_s3_wipe(char **p, size_t *len)
{
	if (*p) {
		explicit_bzero(*p, *len);
		free(*p);
	}
	*p = NULL;
	*len = 0;
}

int srv_fetch(struct srv *s, struct open_req *r, char *why, size_t whylen)
{
	char msg[CTL_MSG_MAX], buf[CTL_MSG_MAX];
	struct ldf_req q = { .uid = (uint32_t)r->uid,
			     .reserved = s->opts.cache_stream ? LDF_STREAM : 0 };
	const char *url = r->spec.dataset;
	int sv[2], ret;

	if (r->s3_len > sizeof(msg) - sizeof(struct ctl_hdr) - sizeof(q))
		return snprintf(why, whylen, "%s: an s3 request too long", url), -EINVAL;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		ret = -errno;
		srv_s3_wipe(&r->s3, &r->s3_len);
		return snprintf(why, whylen, "%s: the node cache: socketpair: %s", url,
				strerror(-ret)), ret;
	}
	memcpy(msg, &q, sizeof(q));
	memcpy(msg + sizeof(q), r->s3, r->s3_len);
	ret = ctl_send(s->opts.fetch_fd, CTL_S3_OPEN, msg, sizeof(q) + r->s3_len, &sv[1], 1);
	explicit_bzero(msg, sizeof(msg));
	srv_s3_wipe(&r->s3, &r->s3_len);  /* used once: this request's */
	close(sv[1]);
	if (ret < 0) {
		close(sv[0]);
		return snprintf(why, whylen, "%s: the node cache's fetcher (ldfetch) is gone: %s", url,
				strerror(-ret)), -EIO;
	}
	uint32_t got = 0, total = 0;
	for (;;) {
		uint16_t type;
		int fds[CTL_FDS_BATCH], nfds = 0;
		/* a fetch may take minutes: a loaderd that stops does not wait for it */
		struct pollfd p = { .fd = sv[0], .events = POLLIN };
		if (poll(&p, 1, 200) <= 0) {
			if (!atomic_load(&s->stop))
				continue;
			snprintf(why, whylen, "%s: loaderd is stopping", url);
			ret = -ESHUTDOWN;
			break;
		}
		ssize_t n = ctl_recv_fds(sv[0], buf, &type, fds, CTL_FDS_BATCH, &nfds);
		if (n == -EINTR)
			continue;
		if (n < 0) {
			snprintf(why, whylen, "%s: the node cache's fetcher (ldfetch) failed: %s", url,
				 strerror((int)-n));
			ret = -EIO;
			break;
		}
		if (type == CTL_SHARD_FDS) {
			char w[CTL_TEXT_MAX];
			uint32_t k, said;
			/* Streamed: shard 0 alone opens the set (the rest come on the stream). */
			if (s->opts.cache_stream && got == 0 &&
			    ctl_check_shard_one(buf, (size_t)n, nfds, 0, &k, &said, w, sizeof(w)) == 0 &&
			    k == 0)
				ret = 0;
			else
				ret = ctl_check_shard_fds(buf, (size_t)n, nfds, got, total, w,
							  sizeof(w));
			for (int i = 0; ret == 0 && i < nfds; i++)
				if (!srv_fd_regular(fds[i]))
					ret = -EINVAL, snprintf(w, sizeof(w), "not a regular file");
			if (ret == 0 && got == 0) {
				struct ctl_shard_fds b;
				memcpy(&b, buf, sizeof(b));
				total = b.total;
				pthread_mutex_lock(&s->mu);
				ret = srv_set_fds_reserve(s, r->uid, total, &r->shards_charge, w,
							  sizeof(w));
				pthread_mutex_unlock(&s->mu);
				if (ret == 0 && !(r->shard_fds = malloc((size_t)total * sizeof(int))))
					ret = -ENOMEM, snprintf(w, sizeof(w), "out of memory");
				for (uint32_t i = 0; ret == 0 && i < total; i++)
					r->shard_fds[i] = -1;
				r->nshards = total;
			}
			if (ret < 0) {
				for (int i = 0; i < nfds; i++)
					close(fds[i]);
				snprintf(why, whylen, "%s: the node cache: %s", url, w);
				break;
			}
			for (int i = 0; i < nfds; i++)
				r->shard_fds[got++] = fds[i];
			continue;
		}
		if (type == CTL_ERROR && (size_t)n == sizeof(struct ctl_error)) {
			struct ctl_error e;
			memcpy(&e, buf, sizeof(e));
			e.text[sizeof(e.text) - 1] = '\0';
			if (e.err == 0 && nfds == 1 && got == total && srv_fd_regular(fds[0])) {
				r->fd = fds[0];
				ret = 0;
				break;
			}
			/* Streamed (asked for): shard 0 came, the rest come on this socket, which
			 * the job's stream keeps (srv_stream.c). */
			if (e.err == 0 && nfds == 1 && s->opts.cache_stream && got == 1 && total > 1 &&
			    srv_fd_regular(fds[0])) {
				r->fd = fds[0];
				r->stream_fd = sv[0];
				return 0;
			}
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
			if (e.err > 0 && e.err < 4096 && nfds == 0) {
				snprintf(why, whylen, "%s", e.text);
				ret = -e.err;
				break;
			}
		} else {
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
		}
		snprintf(why, whylen, "%s: the node cache's fetcher answered out of turn (message "
			 "type %u)", url, type);
		ret = -EIO;
		break;
	}
	close(sv[0]);
	return ret;
}
