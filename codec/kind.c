/* kind.c - the table of record kinds (see kind.h): one row per enum dpk_kind, naming its pack
 * operations (kind_pack.h) and its load operations (kind_load.h). */
#include "codec/kind.h"
#include "codec/kind_load.h"
#include "codec/kind_pack.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

extern const struct cdc_kind_pack cdc_jpeg_pack;
extern const struct cdc_kind_load cdc_jpeg_load, cdc_jpeg_rst_load, cdc_jpeg_idx_load,
	cdc_raw_load, cdc_raw_zstd_load;
/* Image files decoded whole (codec/kind_image.h). */
extern const struct cdc_kind_pack cdc_jpeg_cmyk_pack, cdc_png_pack, cdc_webp_pack, cdc_pnm_pack,
	cdc_bmp_pack, cdc_tiff_pack;
extern const struct cdc_kind_load cdc_jpeg_cmyk_load, cdc_jpeg_idx_cmyk_load, cdc_png_load,
	cdc_webp_load, cdc_pnm_load, cdc_bmp_load, cdc_tiff_load;

const struct cdc_kind cdc_kinds[DPK_KIND_MAX + 1] = {
	[DPK_KIND_JPEG] = { DPK_KIND_JPEG, "jpeg", &cdc_jpeg_pack, &cdc_jpeg_load },
	[DPK_KIND_RAW] = { DPK_KIND_RAW, "raw", NULL, &cdc_raw_load },
	[DPK_KIND_RAW_ZSTD] = { DPK_KIND_RAW_ZSTD, "raw+zstd", NULL, &cdc_raw_zstd_load },
	[DPK_KIND_JPEG_RST] = { DPK_KIND_JPEG_RST, "jpeg+rst", NULL, &cdc_jpeg_rst_load },
	[DPK_KIND_JPEG_IDX] = { DPK_KIND_JPEG_IDX, "jpeg+idx", NULL, &cdc_jpeg_idx_load },
	[DPK_KIND_JPEG_CMYK] = { DPK_KIND_JPEG_CMYK, "jpeg+cmyk", &cdc_jpeg_cmyk_pack,
				 &cdc_jpeg_cmyk_load },
	[DPK_KIND_PNG] = { DPK_KIND_PNG, "png", &cdc_png_pack, &cdc_png_load },
	[DPK_KIND_WEBP] = { DPK_KIND_WEBP, "webp", &cdc_webp_pack, &cdc_webp_load },
	[DPK_KIND_PNM] = { DPK_KIND_PNM, "pnm", &cdc_pnm_pack, &cdc_pnm_load },
	[DPK_KIND_BMP] = { DPK_KIND_BMP, "bmp", &cdc_bmp_pack, &cdc_bmp_load },
	[DPK_KIND_TIFF] = { DPK_KIND_TIFF, "tiff", &cdc_tiff_pack, &cdc_tiff_load },
	/* made by jpeg+cmyk's repack (the index pass), from no file of its own */
	[DPK_KIND_JPEG_IDX_CMYK] = { DPK_KIND_JPEG_IDX_CMYK, "jpeg+idx+cmyk", NULL,
				     &cdc_jpeg_idx_cmyk_load },
};

const struct cdc_kind *cdc_kind_get(unsigned kind)
{
	return kind <= DPK_KIND_MAX && cdc_kinds[kind].name ? &cdc_kinds[kind] : NULL;
}

const struct cdc_kind *cdc_kind_find(const char *name)
{
	for (unsigned k = 0; k <= DPK_KIND_MAX; k++)
		if (cdc_kinds[k].name && !strcmp(cdc_kinds[k].name, name))
			return &cdc_kinds[k];
	return NULL;
}

const struct cdc_kind_pack *cdc_kind_pack(unsigned kind)
{
	const struct cdc_kind *k = cdc_kind_get(kind);

	return k ? k->pack : NULL;
}

const struct cdc_kind_load *cdc_kind_load(unsigned kind)
{
	const struct cdc_kind *k = cdc_kind_get(kind);

	return k ? k->load : NULL;
}

int cdc_kind_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	int first = 0;

	for (unsigned k = 0; k <= DPK_KIND_MAX; k++) {
		const struct cdc_kind_pack *kp = cdc_kind_pack(k);
		if (!kp || !kp->probe)
			continue;
		/* Only the first failure's reason is kept: later kinds write into a scratch copy. */
		char tmp[256];
		int ret = kp->probe(buf, len, r, first ? tmp : why, first ? sizeof(tmp) : whylen);
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
