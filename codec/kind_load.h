/* kind_load.h - what a loaderd job needs of a record kind (codec/kind.h): whether it can deliver a
 * record as asked, and the decode into the output. */
#ifndef LOADERD_KIND_LOAD_H
#define LOADERD_KIND_LOAD_H
#include <stddef.h>
#include <stdint.h>

#include "codec/decode.h"
#include "codec/kind.h"
#include "formats/dpk.h"

struct cdc_kind_load {
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

/* The load operations of @kind, or NULL for a kind this build does not know. */
const struct cdc_kind_load *cdc_kind_load(unsigned kind);

#endif
