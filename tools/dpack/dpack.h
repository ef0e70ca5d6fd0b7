/* dpack.h - the dpack tool's subcommands: pack (pack.c), verify and inspect (check.c),
 * decode (decode.c). */
#ifndef LOADERD_DPACK_H
#define LOADERD_DPACK_H
#include <stdint.h>

/* Each returns the process exit status: 0 ok, 1 failure (bad data or I/O), 2 usage. */
int dpack_pack_main(int argc, char **argv);
int dpack_verify_main(int argc, char **argv);
int dpack_inspect_main(int argc, char **argv);
int dpack_decode_main(int argc, char **argv);  /* decode.c */
int dpack_append_main(int argc, char **argv);  /* set.c */
/* Cut the packed dataset @whole into shards of at most @shard_size bytes beside the manifest @out
 * (OUT's stem + -NNNNN.dpk), then write the manifest. 0 or -errno (logged; the shards written are
 * removed). @wflags: DPK_WRITE_*. */
int dpack_split(const char *whole, const char *out, uint64_t shard_size, unsigned wflags);

#endif
