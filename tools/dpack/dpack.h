/* dpack.h - the dpack tool's subcommands: pack (pack.c), verify and inspect (check.c),
 * decode (decode.c). */
#ifndef LOADERD_DPACK_H
#define LOADERD_DPACK_H

/* Each returns the process exit status: 0 ok, 1 failure (bad data or I/O), 2 usage. */
int dpack_pack_main(int argc, char **argv);
int dpack_verify_main(int argc, char **argv);
int dpack_inspect_main(int argc, char **argv);
int dpack_decode_main(int argc, char **argv);  /* decode.c */

#endif
