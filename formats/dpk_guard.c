/* dpk_guard.c - the SIGBUS guard of mapped files and the mappings it guards (formats/dpk.h; the
 * parts: formats/dpk_impl.h). */
#include "formats/dpk_impl.h"

/* ---- the SIGBUS guard of mapped indexes ----
 *
 * A mapped index whose file is truncated raises SIGBUS on the next touch of a page past the new
 * end. The guard turns that into an error of the datasets concerned: its handler finds the
 * faulting address in the table of mapped indexes, marks that dataset lost, maps a page of zeros
 * over the faulting page and returns, so the access completes (reading zeros, which no entry
 * check passes) and dpk_entry_load, which looks at `lost` after its copy, reports the
 * truncation. A fault anywhere else goes to the handler that was there before (or the default:
 * the process dies as it would have). The table is written under guard_mu and read by the
 * handler without locks: a slot's base is published last (release) and read first (acquire). A
 * dataset's slot can only fault while it is mapped, that is before dpk_close clears its slot. */
#define GUARD_SLOTS DPK_GUARD_SLOTS  /* mappings guarded at once: two a file (index, data), and a set of
			   * shards maps each of its files (a slot is 24 bytes; the handler scans
			   * them only on a SIGBUS). Past it, an index is copied and data read */
struct guard_slot {
	_Atomic uintptr_t base;   /* 0: free */
	uintptr_t len;
	struct dpk *d;
	long owner;               /* who it is charged to (dpk_guard_owner), -1: no one */
};
/* The owner the calling thread's next mappings are charged to, and how many slots that owner may
 * hold at once (dpk_guard_owner): the table is one for the process, shared by every user of a
 * daemon, so that one user's shards cannot take every slot. */
static _Thread_local long guard_owner = -1;
static _Thread_local unsigned guard_owner_max;
static struct guard_slot guard_tab[GUARD_SLOTS];
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction guard_old;
static uintptr_t guard_page;  /* the page size, read before the handler can run (sysconf is not
			       * async-signal-safe) */

static void guard_handler(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;

	for (int k = 0; k < GUARD_SLOTS; k++) {
		uintptr_t base = atomic_load_explicit(&guard_tab[k].base, memory_order_acquire);
		if (!base || a < base || a - base >= guard_tab[k].len)
			continue;
		atomic_store(&guard_tab[k].d->lost, 1);
		if (mmap((void *)(a & ~(guard_page - 1)), (size_t)guard_page, PROT_READ,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
			return;
		break;  /* cannot patch it: die as the default would */
	}
	if ((guard_old.sa_flags & SA_SIGINFO) && guard_old.sa_sigaction) {
		guard_old.sa_sigaction(sig, si, uc);
		return;
	}
	if (guard_old.sa_handler != SIG_DFL && guard_old.sa_handler != SIG_IGN) {
		guard_old.sa_handler(sig);
		return;
	}
	/* the default action: the faulting access runs again and kills the process */
	signal(SIGBUS, SIG_DFL);
}

void dpk_guard_owner(long owner, unsigned max)
{
	guard_owner = owner < 0 ? -1 : owner;
	guard_owner_max = max;
}

/* Under guard_mu. Slots charged to @owner. */
static unsigned guard_count(long owner)
{
	unsigned n = 0;

	for (int k = 0; k < GUARD_SLOTS; k++)
		n += atomic_load_explicit(&guard_tab[k].base, memory_order_relaxed) &&
		     guard_tab[k].owner == owner;
	return n;
}

unsigned dpk_guard_held(long owner)
{
	pthread_mutex_lock(&guard_mu);
	unsigned n = guard_count(owner);
	pthread_mutex_unlock(&guard_mu);
	return n;
}

/* A slot for @d's mapping (installing the handler the first time), charged to this thread's
 * guard_owner, or -1 when the table is full, that owner holds its guard_owner_max, or the handler
 * cannot be set. */
static int guard_add(struct dpk *d, void *base, size_t len)
{
	int slot = -1;

	struct sigaction cur;
	int installed;

	pthread_mutex_lock(&guard_mu);
	guard_page = (uintptr_t)sysconf(_SC_PAGESIZE);
	/* (Again) when someone else's handler took SIGBUS since: ours goes first, chaining to it. */
	installed = sigaction(SIGBUS, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
		    cur.sa_sigaction == guard_handler;
	if (!installed) {
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = guard_handler;
		sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
		sigemptyset(&sa.sa_mask);
		installed = sigaction(SIGBUS, &sa, &guard_old) == 0;
	}
	if (guard_owner >= 0 && guard_owner_max && guard_count(guard_owner) >= guard_owner_max)
		installed = 0;  /* its share is held: a copy and reads, as when the table is full */
	for (int k = 0; installed && k < GUARD_SLOTS && slot < 0; k++) {
		if (atomic_load_explicit(&guard_tab[k].base, memory_order_relaxed))
			continue;
		guard_tab[k].len = len;
		guard_tab[k].d = d;
		guard_tab[k].owner = guard_owner;
		atomic_store_explicit(&guard_tab[k].base, (uintptr_t)base, memory_order_release);
		slot = k;
	}
	pthread_mutex_unlock(&guard_mu);
	return slot;
}

void dpk__guard_remove(int slot)
{
	pthread_mutex_lock(&guard_mu);
	atomic_store_explicit(&guard_tab[slot].base, 0, memory_order_release);
	pthread_mutex_unlock(&guard_mu);
}

/* Map the index section read-only; 0, or -errno when it cannot (the caller copies it then). */
int dpk__map_index(struct dpk *d)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t start = d->hdr.index_offset & ~(uint64_t)(pg - 1);
	uint64_t len = d->hdr.index_offset + d->hdr.index_size - start;

	if (len > SIZE_MAX)
		return -EFBIG;
	void *p = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, d->fd, (off_t)start);
	if (p == MAP_FAILED)
		return -errno;
	d->map_base = p;
	d->map_len = (size_t)len;
	d->guard_slot = guard_add(d, p, (size_t)len);
	if (d->guard_slot < 0) {
		munmap(p, (size_t)len);
		d->map_base = NULL;
		return -ENOSPC;
	}
	d->map = (const struct dpk_entry *)((uint8_t *)p + (d->hdr.index_offset - start));
	return 0;
}

/* Map the data section read-only (DPK_OPEN_MAP_DATA); 0 or -errno (then records are read). */
int dpk__map_data(struct dpk *d)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t start = d->hdr.data_offset & ~(uint64_t)(pg - 1);
	uint64_t len = d->hdr.data_offset + d->hdr.data_size - start;

	if (!d->hdr.data_size || len > SIZE_MAX)
		return -EFBIG;
	void *p = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, d->fd, (off_t)start);
	if (p == MAP_FAILED)
		return -errno;
	d->data_slot = guard_add(d, p, (size_t)len);
	if (d->data_slot < 0) {
		munmap(p, (size_t)len);
		return -ENOSPC;
	}
	d->data_base = p;
	d->data_len = (size_t)len;
	d->data = (const uint8_t *)p - start;
	return 0;
}

