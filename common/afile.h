/* afile.h - a file that appears whole or not at all: written to PATH.tmp.PID beside PATH, then
 * (unless AFILE_NO_SYNC) fsynced, renamed over PATH and the directory fsynced. A failed or
 * interrupted writer leaves PATH as it was. Used by formats/dpk_write.c and by dsgen; never
 * logs (formats/ may not), so the caller names the path in its message.
 *
 *     struct afile f;
 *     if (afile_open(&f, "out.bin", 0) < 0) ...;     // f.fd is the temporary file
 *     fd_write_all(f.fd, buf, len);
 *     ret = afile_commit(&f);                         // 0: out.bin holds exactly what was written
 *     afile_close(&f);                                // always; removes the temporary if not committed
 */
#ifndef LOADERD_AFILE_H
#define LOADERD_AFILE_H
#ifdef __cplusplus
extern "C" {
#endif

#define AFILE_NO_SYNC 0x1u  /* no fsync of file or directory (scratch data): the rename still makes
			     * the file appear whole to other processes, but a crash may lose it */

struct afile {
	char *path;     /* the target, owned */
	char *tmp;      /* PATH.tmp.PID, owned: valid until afile_close, also after the commit
			 * (a signal handler may hold it) */
	int fd;         /* open on tmp for writing until commit; -1 after */
	unsigned flags; /* AFILE_* */
	int committed;  /* tmp was renamed over path */
};

/* Create @path's temporary file (O_EXCL, mode 0644 less the umask) into caller storage @f.
 * Returns 0 or -errno; on failure @f needs no afile_close (calling it is harmless). */
int afile_open(struct afile *f, const char *path, unsigned flags);
/* fsync (unless AFILE_NO_SYNC), close, rename over the target, fsync the directory (a failure
 * there is ignored: the file is complete either way). Returns 0 or -errno; after a failure the
 * temporary file is still there for afile_close to remove. */
int afile_commit(struct afile *f);
/* Release @f: close the descriptor and, unless committed, unlink the temporary file. */
void afile_close(struct afile *f);

#ifdef __cplusplus
}
#endif
#endif
