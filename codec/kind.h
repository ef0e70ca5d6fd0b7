/* kind.h - the table of record kinds (enum dpk_kind): one row per kind, with the operations dpack
 * needs to make a record of that kind (codec/kind_pack.h) and those a loaderd job needs to deliver
 * one (codec/kind_load.h), each side seeing only its own. Adding a kind is its enum value and its
 * formats/ row (formats/dpk.h, dpk_index.c), one codec/kind_NAME.c that defines its operations, and one
 * row in cdc_kinds[] (codec/kind.c). Rows are immutable: thread-safe. */
#ifndef LOADERD_KIND_H
#define LOADERD_KIND_H
#include "formats/dpk.h"

struct cdc_kind_pack;  /* codec/kind_pack.h */
struct cdc_kind_load;  /* codec/kind_load.h */

struct cdc_kind {
	unsigned kind;                      /* enum dpk_kind */
	const char *name;                   /* = dpk_kind_name(kind); NULL: no such kind */
	const struct cdc_kind_pack *pack;   /* NULL: dpack makes it from no file (tensors) */
	const struct cdc_kind_load *load;   /* never NULL in a row that has a name */
};

/* Indexed by enum dpk_kind; name NULL where no kind has that value. */
extern const struct cdc_kind cdc_kinds[DPK_KIND_MAX + 1];

/* The row of @kind, or NULL for a kind this build does not know. */
const struct cdc_kind *cdc_kind_get(unsigned kind);
/* The row named @name ("jpeg"), or NULL. */
const struct cdc_kind *cdc_kind_find(const char *name);

/* The pixel bound of an image record (height x width), one for both sides: dpack refuses an image
 * above it on its header's word (tools/dpack, --max-pixels) and loaderd refuses such a record
 * (--max-pixels, LDR_MAX_PIXELS_DEFAULT), so that what dpack packs by default loaderd serves. */
#define CDC_MAX_PIXELS_DEFAULT (64ull << 20)  /* 64 Mpixel: 8192 x 8192 */

/* Is an @h x @w image above @max pixels? (Sides below 2^32: the product cannot wrap.) The one
 * comparison dpack's probe bound, loaderd's check before decode and the decoders make. */
static inline int cdc_pixels_over(uint32_t h, uint32_t w, uint64_t max)
{
	return (uint64_t)h * w > max;
}

#endif
