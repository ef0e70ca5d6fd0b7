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
/* remote.c: run @cmd_main with its s3:// operand made local (pack: uploaded after), or, when
 * @cmd_main is NULL, `dpack fetch` */
int dpack_remote_main(int argc, char **argv, int (*cmd_main)(int, char **));
/* What dpack pack writes (set.c): one .dpk at @path, or (@shard_size or @shard_records > 0) a set:
 * shards of at most @shard_size bytes and @shard_records records (0: no bound of that kind) beside the manifest @path (its stem + -NNNNN.dpk), cut between records as they
 * are added, the manifest written by finish. The calls mirror dpk_writer's (formats/dpk.h), with
 * the same returns; @flags: DPK_WRITE_*. destroy removes what an unfinished run wrote. */
struct dpk_record;
struct dpack_out;
int dpack_out_create(const char *path, uint64_t shard_size, unsigned shard_records, unsigned flags,
		     struct dpack_out **out);
int dpack_out_set_classes(struct dpack_out *o, const char *const *names, uint32_t n);
/* dpk_writer_set_aux for the file or every shard; @names must outlive @o. */
int dpack_out_set_aux(struct dpack_out *o, const char *const *names, uint32_t n, int no_labels);
/* @count records of @data bytes in all will come (dpk_writer_expect): one .dpk then writes its
 * index in place; a set's shards cannot know their share, so it is a no-op there. */
int dpack_out_expect(struct dpack_out *o, uint64_t count, uint64_t data);
int dpack_out_add(struct dpack_out *o, const struct dpk_record *r);
uint64_t dpack_out_count(const struct dpack_out *o);
/* The temporary file being written (a stable buffer, for a signal handler to unlink). */
const char *dpack_out_tmp_path(const struct dpack_out *o);
int dpack_out_finish(struct dpack_out *o);
void dpack_out_destroy(struct dpack_out *o);  /* NULL ok */

#endif
