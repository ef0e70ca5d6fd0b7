/* fuzz_srv.c - libFuzzer target for the daemon's handling of control messages: the real server
 * core (loader/srv_*.c, shm/) runs in this process on a unix socket, with a small filler, and
 * each input is a conversation on one connection: packets of any bytes, some with a valid header
 * laid over them, some carrying one or two descriptors (a regular file), answers read or not,
 * then a hang-up. Besides crashes and sanitizer reports (use after free across a hang-up during
 * a job open, a leaked fd, ...), what is checked is that the server stays up: a fresh connection
 * gets an answer to a status request after every input.
 *
 * Input: records of [flags u8][len u16 LE][len bytes]. flags: 0x1 send the dataset fd with it,
 * 0x2 send it twice, 0x4 read what the server answers before the next packet, 0x8 lay a valid
 * header over the first 16 bytes (type = bytes[16] % (CTL_TYPE_MAX + 1), the packet's own length).
 * The server allows balanced shares (loaderd --balance), so split seeds reach a job open. */
#include "loader/srv.h"
#include "shm/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct srv *g_srv;
static char g_sock[108];
static int g_file = -1;     /* a regular file, the "dataset" clients pass */

static int fz_job_open(void *ctx, const struct ctl_job_open *spec, const struct srv_dataset *ds,
		       void **job, struct srv_job_info *info, char *why, size_t whylen)
{
	(void)ctx, (void)ds;
	if (spec->seed == 13) {
		snprintf(why, whylen, "seed 13 is unlucky");
		return -EINVAL;
	}
	memset(info, 0, sizeof(*info));
	info->ring.batch = spec->batch;
	info->ring.sample_bytes = 16;
	info->ring.ndim = 1;
	info->ring.shape[0] = 16;
	info->ring.dtype = RING_DTYPE_U8;
	info->steps_per_epoch = 4;
	info->samples = 64;
	*job = NULL;
	return 0;
}

static int fz_step_open(void *ctx, void *worker, struct srv_step *st, char *why, size_t whylen)
{
	(void)ctx, (void)worker, (void)why, (void)whylen;
	st->count = 1;
	st->ids[0] = 0;
	return 0;
}

static int fz_fill(void *ctx, void *worker, struct srv_fill *f)
{
	(void)ctx, (void)worker, (void)f;
	return 0;
}

static void *serve(void *p)
{
	(void)p;
	srv_run(g_srv);
	return NULL;
}

static void start(void)
{
	/* Under $TMPDIR, which tests/fuzz.sh points at its own work folder and removes: the
	 * fuzzer exits without unwinding, so nothing here would remove the socket. */
	const char *tmp = getenv("TMPDIR");
	char dir[96], why[256], path[128];

	snprintf(dir, sizeof(dir), "%s/fuzz_srv.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		abort();
	snprintf(g_sock, sizeof(g_sock), "%s/s.sock", dir);
	snprintf(path, sizeof(path), "%s/data", dir);
	g_file = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	unlink(path);  /* the fd is all the jobs need */
	struct srv_opts o = { .socket_path = g_sock, .workers = 1, .mem_limit = 64u << 20,
			      .group = (gid_t)-1, .linger_ms = 1, .idle_ms = 2000,
			      .ring_flags = RING_CREATE_NO_HUGE, .balance = 1 };
	struct srv_ops ops = { .job_open = fz_job_open, .step_open = fz_step_open,
			       .fill = fz_fill };
	signal(SIGPIPE, SIG_IGN);
	if (g_file < 0 || srv_create(&o, &ops, &g_srv, why, sizeof(why)) < 0) {
		fprintf(stderr, "fuzz_srv: %s\n", why);
		abort();
	}
	pthread_t th;
	pthread_create(&th, NULL, serve, NULL);
	pthread_detach(th);
}

static int dial(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g_sock);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		abort();  /* the server is gone: that is the bug */
	return fd;
}

/* Read and drop what the server sends within @ms; 1 when it hung up. */
static int drain(int fd, int ms)
{
	char buf[CTL_MSG_MAX];
	uint16_t type;
	int fds[2], n;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, ms) <= 0)
			return 0;
		ssize_t r = ctl_recv(fd, buf, &type, fds, &n);
		for (int i = 0; i < n; i++)
			close(fds[i]);
		if (r == -EPIPE || r == -ECONNRESET)
			return 1;
		if (r < 0 && r != -EBADMSG && r != -EPROTO)
			return 1;
	}
}

static void send_raw(int fd, const uint8_t *p, size_t len, int nfds)
{
	union {
		char b[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { (void *)p, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds) {
		int fds[2] = { g_file, g_file };
		memset(&u, 0, sizeof(u));
		m.msg_control = u.b;
		m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	(void)!sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t pkt[CTL_MSG_MAX + 256];

	if (!g_srv)
		start();
	int fd = dial();
	for (size_t off = 0; off + 3 <= size;) {
		uint8_t flags = data[off];
		size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
		off += 3;
		if (len > size - off)
			len = size - off;
		if (len > sizeof(pkt))
			len = sizeof(pkt);
		memcpy(pkt, data + off, len);
		off += len;
		if ((flags & 0x8) && len >= sizeof(struct ctl_hdr) + 1) {
			struct ctl_hdr h = { .magic = CTL_MAGIC, .version = CTL_VERSION,
					     .type = (uint16_t)(pkt[sizeof(h)] % (CTL_TYPE_MAX + 1)),
					     .length = (uint32_t)len };
			memcpy(pkt, &h, sizeof(h));
		}
		send_raw(fd, pkt, len, flags & 0x2 ? 2 : flags & 0x1 ? 1 : 0);
		if ((flags & 0x4) && drain(fd, 20))
			break;
	}
	shutdown(fd, SHUT_WR);
	drain(fd, 200);
	close(fd);

	/* Still serving: a status request on a fresh connection is answered. */
	struct ctl_admin a = { .op = CTL_OP_STATUS };
	char buf[CTL_MSG_MAX];
	uint16_t type = 0;
	fd = dial();
	if (ctl_send(fd, CTL_ADMIN, &a, sizeof(a), NULL, 0) < 0)
		abort();
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int ready;
	do  /* libFuzzer's SIGALRM (its -timeout watchdog) interrupts a wait now and then */
		ready = poll(&p, 1, 5000);
	while (ready < 0 && errno == EINTR);
	ssize_t got = ready == 1 ? ctl_recv(fd, buf, &type, NULL, NULL) : 0;
	/* An answer either way: the status text, or the admin budget's refusal (EAGAIN, naming
	 * --admin-share) when the input's own admin requests spent this uid's share. */
	int throttled = got == (ssize_t)sizeof(struct ctl_error) && type == CTL_ERROR &&
			((const struct ctl_error *)(const void *)buf)->err == EAGAIN;
	if (ready != 1 || got < 0 || (type != CTL_ADMIN_TEXT && !throttled)) {
		/* Say which, so that a failure that depends on the server's history (it does not
		 * replay from one input) can be read from the log. */
		const char *text = type == CTL_ERROR && got == (ssize_t)sizeof(struct ctl_error)
					   ? ((const struct ctl_error *)(const void *)buf)->text : buf;
		fprintf(stderr, "fuzz_srv: status on a fresh connection: poll %d (%s), recv %zd, "
			"type %u%s%.*s\n", ready, ready < 0 ? strerror(errno) : "-", got, type,
			got > 0 ? ": " : "", got > 0 ? (int)strnlen(text, (size_t)got) : 0, text);
		abort();
	}
	close(fd);
	return 0;
}
