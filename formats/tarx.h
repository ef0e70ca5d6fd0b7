/* tarx.h - read the members of a tar archive (POSIX ustar, GNU long names, pax path/size
 * records) through pread on an fd, for WebDataset shards. No allocation, no logging. */
#ifndef LOADERD_TARX_H
#define LOADERD_TARX_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define TARX_NAME_MAX 4096   /* bytes including the NUL; longer names are -ENAMETOOLONG */

struct tarx_member {
	char name[TARX_NAME_MAX];  /* full path inside the archive, NUL-terminated */
	uint64_t offset;           /* byte offset of the member's data in the archive */
	uint64_t size;             /* bytes of data */
};

/* Iterator state; caller's storage (init/fini pair; fini is not needed: nothing is held). */
struct tarx {
	int fd;                    /* borrowed */
	uint64_t size;             /* archive bytes */
	uint64_t pos;              /* next header offset */
	char pending_name[TARX_NAME_MAX]; /* from a GNU 'L' or pax 'x' record, for the next member */
	int has_pending_name;
	uint64_t pending_size;     /* from a pax 'x' size= record */
	int has_pending_size;
	char err[256];             /* message of the last error, naming the offset */
};

/* Start iterating @fd, an archive of @size bytes. Returns 0. */
int tarx_init(struct tarx *t, int fd, uint64_t size);
/* Next regular-file member into @m (directories, links and other types are skipped).
 * Returns 1 with a member, 0 at the end of the archive, -EBADMSG for a corrupt or truncated
 * archive (bad header checksum, data past EOF, bad octal field), -ENAMETOOLONG, or the
 * read's -errno; t->err then says what and where. */
int tarx_next(struct tarx *t, struct tarx_member *m);

#ifdef __cplusplus
}
#endif
#endif
