/* args.h - strict parsing of command-line values, shared by the programs in loader/, trainer/
 * and tools/ so that every one accepts and refuses the same spellings, and option tables built on
 * them (below). Each value parser returns 0 with the value in *out, or -EINVAL (nothing written)
 * for anything else: empty, a sign, spaces, junk after the number, out of range. They never log;
 * the caller names the option, e.g. with arg_bad_value(), or arg_parse() does. */
#ifndef LOADERD_ARGS_H
#define LOADERD_ARGS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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


/* ---- option tables ----
 * A program's options as one table, one row per option, the way nccl-tests keeps its getopt
 * table: arg_parse() fills the caller's struct from the rows (defaults first, then argv) and
 * arg_help() prints --help from the same rows, so an option cannot be parsed without being
 * documented or documented with another default. A new option is one row.
 *
 * A row's target is a field of the caller's struct, given as ARG_AT(struct, field, type): a
 * compile error when the field's type is not the one the kind writes (below). Errors name the
 * option, the bad value and what is allowed: "loaderd: --workers: bad value '0' (1..1024)". */
enum arg_kind {
	ARG_HEADING,   /* not an option: --help prints .help as a heading before the next rows */
	ARG_UINT,      /* unsigned: decimal, within [.lo, .hi] */
	ARG_U64,       /* uint64_t: decimal, within [.lo, .hi] */
	ARG_BYTES,     /* uint64_t: arg_bytes() spelling (K, M, G, T suffixes), within [.lo, .hi] */
	ARG_PERCENT,   /* unsigned: a whole percent, within [.lo, .hi] (.hi at most 100) */
	ARG_DOUBLE,    /* double: finite, within [.dlo, .dhi] */
	ARG_ENUM,      /* int: the index of the value in .choices (NULL-terminated) */
	ARG_PATH,      /* const char *: a non-empty path, pointing into argv (or at .def) */
	ARG_CUSTOM,    /* whatever .parse writes; .allowed says what it takes, for the error */
	ARG_HELP,      /* no value: print arg_help() to stdout and stop (arg_parse: -ECANCELED) */
	ARG_FLAG,      /* int: no value; given, the target is 1 */
};

struct arg_opt {
	const char *name;        /* long name without the dashes; NULL only for ARG_HEADING */
	char short_name;         /* '\0': none */
	enum arg_kind kind;
	size_t off;              /* the target, ARG_AT(...); unused by ARG_HEADING and ARG_HELP */
	uint64_t lo, hi;         /* ARG_UINT, ARG_U64, ARG_BYTES, ARG_PERCENT: inclusive bounds */
	double dlo, dhi;         /* ARG_DOUBLE: inclusive bounds */
	const char *const *choices; /* ARG_ENUM */
	/* ARG_CUSTOM: parse @s into @target; 0, or -EINVAL to refuse it (arg_parse reports it). */
	int (*parse)(const char *s, void *target);
	const char *allowed;     /* ARG_CUSTOM: what it takes, e.g. "a group of this host" */
	const char *meta;        /* the value's name in --help ("N", "BYTES"); NULL: from the kind */
	/* The default, spelled as on the command line and parsed like it before argv; or NULL: the
	 * caller fills the target before arg_parse, and .def_doc says how it chooses (--help then
	 * adds the value chosen here, when the kind can print it and it is not zero). */
	const char *def;
	const char *def_doc;
	const char *help;        /* one sentence or a few; --help wraps it */
};

struct arg_table {
	const char *prog;        /* "loaderd": begins every error message */
	const char *intro;       /* --help's opening text (usage line, what the program does) */
	const char *outro;       /* --help's closing text (exit statuses); NULL: none */
	const struct arg_opt *opts;
	size_t n_opts;
	int operands;            /* 0: an operand (a word that is no option) is a usage error */
};

/* The offset of @field in @type, only when @field has type @ctype (else: no match in _Generic). */
#define ARG_AT(type, field, ctype) _Generic(((type *)0)->field, ctype: offsetof(type, field))

/* Set every row's default in @base, then parse @argv (getopt_long: "--name VALUE",
 * "--name=VALUE", unique prefixes, -X for a short name) into @base. Returns the index of the first
 * operand (argc when none; with .operands 0 there is none) on success; -ECANCELED after --help
 * was printed (exit 0); -EINVAL after a usage error was printed to stderr (exit 2). Uses getopt's
 * globals: one thread at a time. */
int arg_parse(const struct arg_table *t, int argc, char **argv, void *base);
/* Print --help for @t to @f: the intro, each row with its value's name, help, range and default
 * (the defaults the caller chose read from @base, NULL: not shown), lines under 100 columns. */
void arg_help(const struct arg_table *t, const void *base, FILE *f);
/* Print @v in arg_bytes() spelling: the largest suffix that divides it exactly ("64M", "1536K",
 * "1000"). Returns what snprintf returns. */
int arg_fmt_bytes(char *buf, size_t size, uint64_t v);

struct option;
/* The usage error for a value the parsers refused: prints "PROG: --NAME: bad value 'VALUE' (see
 * --help)" to stderr, PROG being log_prog and NAME the option of @opts (getopt_long's table) whose
 * val is @c. Returns 2, the usage exit status. */
int arg_bad_value(const struct option *opts, int c, const char *value);

#endif
