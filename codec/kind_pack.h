/* kind_pack.h - what dpack needs of a record kind (codec/kind.h): which source files it is made
 * from, how to recognise one, and how to convert it into the record dpack stores. */
#ifndef LOADERD_KIND_PACK_H
#define LOADERD_KIND_PACK_H
#include <stddef.h>
#include <stdint.h>

#include "codec/kind.h"
#include "formats/dpk.h"

/* dpack's choices for a repack. */
struct cdc_repack_opts {
	int rst;                   /* JPEG: the restart-marker rewrite (jpeg+rst), not jpeg+idx */
	unsigned width;            /* JPEG: index column (or restart segment) width in pixels */
};

struct cdc_kind_pack {
	/* Source files of this kind, by extension (NULL-terminated, with the dot, matched without
	 * case), e.g. the image members of a WebDataset tar. */
	const char *const *exts;
	/* Recognise the file @buf[0, len) as this kind and fill @r's kind, shape, ndim, subsamp and
	 * flags from its headers (not data, length or label). Returns 0; -ENOMSG when it is not this
	 * kind at all (e.g. another magic); -EBADMSG (damaged) or -ENOTSUP (a variant the decoder
	 * does not take) with the reason in @why. */
	int (*probe)(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen);
	/* dpack's default conversion of a file probed as this kind, or NULL (stored as it is):
	 * rewrite @buf[0, len) into *out (free()), *outlen bytes, and set @r's kind and flags to
	 * what it became, as @opt asks (JPEG: codec/jpeg_build.h).
	 * Returns 0, -EBADMSG (with @why: the data is damaged) or -ENOMEM. */
	int (*repack)(const uint8_t *buf, size_t len, const struct cdc_repack_opts *opt,
		      struct dpk_record *r, uint8_t **out, size_t *outlen, char *why,
		      size_t whylen);
};

/* The pack operations of @kind, or NULL: an unknown kind, or one not made from files. */
const struct cdc_kind_pack *cdc_kind_pack(unsigned kind);
/* The first kind whose probe takes the file @buf[0, len) (kinds in table order), filling @r.
 * Returns 0; or the first probe's error other than -ENOMSG with its reason in @why; or, when no
 * kind recognises the file, the first probe's -ENOMSG turned into -EBADMSG, with its reason. */
int cdc_kind_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen);

#endif
