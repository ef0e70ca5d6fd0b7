/* kind.h - one row of operations per record kind (enum dpk_kind): what dpack needs to make a record
 * of that kind from a source file, and what a loaderd job needs to deliver it. Adding a kind is its
 * enum value and its formats/ row (formats/dpk.h, dpk.c), one codec/kind_NAME.c that defines its
 * struct cdc_kind, and one row in cdc_kinds[] (codec/kind.c). Rows are immutable: thread-safe. */
#ifndef LOADERD_KIND_H
#define LOADERD_KIND_H
#include <stddef.h>
#include <stdint.h>

#include "formats/dpk.h"
#include "codec/decode.h"

/* dpack's choices for a repack. */
struct cdc_repack_opts {
	int rst;                   /* JPEG: the restart-marker rewrite (jpeg+rst), not jpeg+idx */
	unsigned width;            /* JPEG: index column (or restart segment) width in pixels */
};

struct cdc_kind {
	unsigned kind;             /* enum dpk_kind */
	const char *name;          /* = dpk_kind_name(kind) */
	/* Source files of this kind, by extension (NULL-terminated, with the dot, matched without
	 * case), e.g. the image members of a WebDataset tar; NULL: not made from files (tensors). */
	const char *const *exts;
	/* Recognise the file @buf[0, len) as this kind and fill @r's kind, shape, ndim, subsamp and
	 * flags from its headers (not data, length or label). Returns 0; -ENOMSG when it is not this
	 * kind at all (e.g. another magic); -EBADMSG (damaged) or -ENOTSUP (a variant the decoder
	 * does not take) with the reason in @why. NULL with exts. */
	int (*probe)(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen);
	/* dpack's default conversion of a file probed as this kind, or NULL (stored as it is):
	 * rewrite @buf[0, len) into *out (free()), *outlen bytes, and set @r's kind and flags to
	 * what it became, as @opt asks (JPEG: codec/jpeg_idx.h, codec/jpeg_rst.h).
	 * Returns 0, -EBADMSG (with @why: the data is damaged) or -ENOMEM. */
	int (*repack)(const uint8_t *buf, size_t len, const struct cdc_repack_opts *opt,
		      struct dpk_record *r, uint8_t **out, size_t *outlen, char *why,
		      size_t whylen);
	/* Can a job deliver entry @e (sample @id) as @o asks (o->h == 0: as stored; else cropped and
	 * resized to o->h x o->w x 3)? 0, or -EINVAL with the reason in @why, which the caller
	 * prefixes with the dataset ("sample 7: a 2-d raw tensor cannot be cropped ..."). */
	int (*accepts)(const struct dpk_entry *e, uint64_t id, const struct cdc_out *o, char *why,
		       size_t whylen);
	/* Decode entry @e's stored bytes @src (checksum already checked) into @dst: cropped to
	 * @crop and resized to @o, or as stored (e->raw_size bytes) when o->h == 0. Returns 0, or
	 * -EBADMSG / -EINVAL with the reason in @why. @d is the worker's decoder. */
	int (*decode)(struct cdc_decoder *d, const struct dpk_entry *e, const uint8_t *src,
		      const struct cdc_crop *crop, const struct cdc_out *o, uint8_t *dst, char *why,
		      size_t whylen);
	/* The DCT scale denominator (1, 2, 4, 8) at which @crop is decoded for @o; NULL for kinds
	 * that decode at full size (ldbench's crop profile). */
	unsigned (*scale)(const struct cdc_crop *crop, const struct cdc_out *o);
};

/* Indexed by enum dpk_kind; NULL where no kind has that value. */
extern const struct cdc_kind *const cdc_kinds[DPK_KIND_MAX + 1];

/* The row of @kind, or NULL for a kind this build does not know. */
const struct cdc_kind *cdc_kind_get(unsigned kind);
/* The row named @name ("jpeg"), or NULL. */
const struct cdc_kind *cdc_kind_find(const char *name);
/* The first row whose probe takes the file @buf[0, len) (kinds in table order), filling @r.
 * Returns 0; or the first probe's error other than -ENOMSG with its reason in @why; or, when no
 * kind recognises the file, the first probe's -ENOMSG turned into -EBADMSG, with its reason. */
int cdc_kind_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen);

#endif
