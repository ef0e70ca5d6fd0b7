/* args.h - strict parsing of command-line values, shared by the programs in loader/, trainer/
 * and tools/ so that every one accepts and refuses the same spellings. Each returns 0 with the
 * value in *out, or -EINVAL (nothing written) for anything else: empty, a sign, spaces, junk
 * after the number, out of range. They never log; the caller names the option, e.g. with
 * arg_bad_value(). */
#ifndef LOADERD_ARGS_H
#define LOADERD_ARGS_H
#include <stdint.h>

/* Decimal digits only, within [lo, hi]. */
int arg_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* The same for an unsigned int. */
int arg_uint(const char *s, unsigned lo, unsigned hi, unsigned *out);
/* A byte count: digits, then optionally K, M, G or T (powers of 1024, either case), then
 * optionally "B" ("iB" after a prefix); within [lo, hi]. */
int arg_bytes(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* A finite decimal number within [lo, hi]. */
int arg_double(const char *s, double lo, double hi, double *out);
/* An image size: "N" (N x N; "0" alone is 0 x 0) or "HxW" with H, W >= 1; each at most @max. */
int arg_size2(const char *s, uint32_t max, uint32_t *h, uint32_t *w);


struct option;
/* The usage error for a value the parsers refused: prints "PROG: --NAME: bad value 'VALUE' (see
 * --help)" to stderr, PROG being log_prog and NAME the option of @opts (getopt_long's table) whose
 * val is @c. Returns 2, the usage exit status. */
int arg_bad_value(const struct option *opts, int c, const char *value);

#endif
