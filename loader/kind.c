/* kind.c - the table of record kinds (see kind.h): one row per enum dpk_kind. */
#include "loader/kind.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

extern const struct ldr_kind ldr_kind_jpeg, ldr_kind_raw, ldr_kind_raw_zstd, ldr_kind_jpeg_rst,
	ldr_kind_jpeg_idx;
/* Image files decoded whole (loader/kind_image.h). */
extern const struct ldr_kind ldr_kind_jpeg_cmyk, ldr_kind_png, ldr_kind_webp, ldr_kind_pnm,
	ldr_kind_bmp, ldr_kind_tiff;

const struct ldr_kind *const ldr_kinds[DPK_KIND_MAX + 1] = {
	[DPK_KIND_JPEG] = &ldr_kind_jpeg,
	[DPK_KIND_RAW] = &ldr_kind_raw,
	[DPK_KIND_RAW_ZSTD] = &ldr_kind_raw_zstd,
	[DPK_KIND_JPEG_RST] = &ldr_kind_jpeg_rst,
	[DPK_KIND_JPEG_IDX] = &ldr_kind_jpeg_idx,
	[DPK_KIND_JPEG_CMYK] = &ldr_kind_jpeg_cmyk,
	[DPK_KIND_PNG] = &ldr_kind_png,
	[DPK_KIND_WEBP] = &ldr_kind_webp,
	[DPK_KIND_PNM] = &ldr_kind_pnm,
	[DPK_KIND_BMP] = &ldr_kind_bmp,
	[DPK_KIND_TIFF] = &ldr_kind_tiff,
};

const struct ldr_kind *ldr_kind_get(unsigned kind)
{
	return kind <= DPK_KIND_MAX ? ldr_kinds[kind] : NULL;
}

const struct ldr_kind *ldr_kind_find(const char *name)
{
	for (unsigned k = 0; k <= DPK_KIND_MAX; k++)
		if (ldr_kinds[k] && !strcmp(ldr_kinds[k]->name, name))
			return ldr_kinds[k];
	return NULL;
}

int ldr_kind_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	int first = 0;

	for (unsigned k = 0; k <= DPK_KIND_MAX; k++) {
		const struct ldr_kind *kd = ldr_kinds[k];
		if (!kd || !kd->probe)
			continue;
		/* Only the first failure's reason is kept: later kinds write into a scratch copy. */
		char tmp[256];
		int ret = kd->probe(buf, len, r, first ? tmp : why, first ? sizeof(tmp) : whylen);
		if (ret == 0)
			return 0;
		/* -ENOTSUP: a variant this kind does not take, which a later kind may (a JPEG with
		 * 4 components is jpeg+cmyk's): the reason stays, unless a later kind takes it. */
		if (ret != -ENOMSG && ret != -ENOTSUP) {
			if (first)
				snprintf(why, whylen, "%s", tmp);
			return ret;
		}
		if (!first || (first == -ENOMSG && ret == -ENOTSUP)) {
			if (first)
				snprintf(why, whylen, "%s", tmp);
			first = ret;
		}
	}
	if (first == -ENOTSUP)
		return first;
	if (!first)
		snprintf(why, whylen, "no record kind is made from files");
	return -EBADMSG;
}
