/* input.h - dpack's input formats: one row each (ImageFolder tree, WebDataset tar, npy arrays),
 * so that pack.c knows none of them. A row recognises its source, lists its samples in the order
 * torchvision would give them, and says where each sample's bytes are. Files (images) become
 * records of whichever kind recognises them (codec/kind_pack.h); tensors become raw records.
 * Adding a format is one tools/dpack/input_NAME.c that defines its struct dpack_input and one row
 * in dpack_inputs[] (input.c). */
#ifndef LOADERD_DPACK_INPUT_H
#define LOADERD_DPACK_INPUT_H
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "formats/dpk.h"

/* Where one aux field of a sample is (tar: a member of the sample's shard). */
struct dpack_fref {
	uint64_t off;      /* member data offset */
	uint64_t size;     /* member size; UINT64_MAX: the sample has no such member */
};

/* --field NAME=EXT[:KEY]: member KEY.EXT of a sample becomes aux field NAME (whole, or with :KEY
 * the value of the JSON object's top-level KEY: a string unescaped to its UTF-8 bytes, any other
 * value its text). */
struct dpack_field_spec {
	const char *name;
	char ext[32];      /* with the dot, e.g. ".txt" */
	const char *json_key;  /* NULL: the member whole */
};

struct dpack_item {
	char *name;        /* path (folder) or member/key name (tar), for messages; owned */
	struct dpack_fref *f;  /* nfields refs (tar with --field), or NULL; owned */
	uint64_t offset;   /* tar: member data offset */
	uint64_t size;     /* tar: member size */
	int64_t label;
	uint32_t shard;    /* tar: which of the source's shards (tar files) holds it */
};

/* A source being packed: pack.c fills the first fields, the format's list() the rest. */
struct dpack_src {
	const char *path;           /* the SRC operand (the first of several .tar shards) */
	const char *const *paths;   /* every SRC operand: npaths > 1 only for several .tar shards */
	size_t npaths;
	const char *classes_file;   /* --classes FILE: class names, one a line (tar), or NULL */
	const char *labels;         /* the LABELS operand, or NULL */
	int strict;                 /* --strict: a bad sample stops the listing */
	const struct dpack_field_spec *fields;  /* --field, nfields of them (tar only) */
	uint32_t nfields;
	int missing_empty;          /* --missing empty: a sample without a field's member keeps an
				     * empty field (else it is skipped, with a warning) */
	int no_labels;              /* --no-labels: samples need no label member; labels are -1 */
	int fd;                     /* the source opened as one file (tar, npy), or -1; pack.c closes it */
	struct dpack_item *items;   /* n items, or NULL (tensor formats); pack.c frees them */
	uint64_t n;                 /* samples */
	char **classes;             /* nclasses class names, or NULL; pack.c frees them */
	uint32_t nclasses;
	uint64_t skipped;           /* samples the listing dropped (logged) */
	void *priv;                 /* the format's own state, freed by its fini() */
};

struct dpack_input {
	const char *name;           /* "folder", "tar", "npy" */
	const char *what;           /* what SRC must be, for "not a directory, .tar or .npy" */
	/* @path, stat'd as @st, is this format. */
	int (*detect)(const char *path, const struct stat *st);
	/* Non-NULL: the format takes a LABELS operand and this is the error without one. */
	const char *need_labels;
	/* List the samples into @s (n, items or priv, classes). Logs its errors; 0 or -errno. */
	int (*list)(struct dpack_src *s);
	/* Where sample @i's bytes are: *fd (s->fd, one the format keeps when keeps_fds, or a file
	 * opened for it that the caller closes), *off, *len. 0 or -errno. Thread-safe. */
	int (*locate)(const struct dpack_src *s, uint64_t i, int *fd, uint64_t *off, uint64_t *len);
	/* Tensor formats: @r's kind (DPK_KIND_RAW), shape, ndim and label for sample @i; 0 or
	 * -errno (logged: a label that cannot be read). Thread-safe; cheapest in increasing i.
	 * NULL: samples are files, typed by cdc_kind_probe(), labelled by their item. */
	int (*tensor)(const struct dpack_src *s, uint64_t i, struct dpk_record *r);
	/* Tensor formats with span: the labels of samples [@first, @first + @count) into @out; 0 or
	 * -errno (logged). Thread-safe. */
	int (*labels)(const struct dpack_src *s, uint64_t first, uint64_t count, int64_t *out);
	/* Tensor formats whose samples lie back to back in s->fd: the first at *off, *len bytes
	 * each (0), so that pack reads them in large blocks; -errno when not (or NULL). */
	int (*span)(const struct dpack_src *s, uint64_t *off, uint64_t *len);
	void (*fini)(struct dpack_src *s);  /* frees priv; NULL when none */
	int keeps_fds;              /* locate's fds are the format's (closed by fini), e.g. shards */
};

extern const struct dpack_input *const dpack_inputs[];  /* NULL-terminated */

/* The first row that detects @path (stat'd as @st), or NULL. */
const struct dpack_input *dpack_input_detect(const char *path, const struct stat *st);
/* "a directory, .tar or .npy": what every row takes, for the error on an unknown source. */
void dpack_input_whats(char *buf, size_t len);
/* @path is a WebDataset brace pattern of .tar shards ("data-{000..099}.tar", input_tar.c). */
int dpack_tar_pattern(const char *path);
/* @name ends in one of @exts (NULL-terminated, with the dot), compared without case. */
int dpack_has_ext(const char *name, const char *const *exts);

#endif
