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

const struct cdc_kind cdc_kinds[DPK_KIND_MAX + 1] = {
	[DPK_KIND_JPEG] = { DPK_KIND_JPEG, "jpeg", &cdc_jpeg_pack, &cdc_jpeg_load },
	[DPK_KIND_RAW] = { DPK_KIND_RAW, "raw", NULL, &cdc_raw_load },
	[DPK_KIND_RAW_ZSTD] = { DPK_KIND_RAW_ZSTD, "raw+zstd", NULL, &cdc_raw_zstd_load },
	[DPK_KIND_JPEG_RST] = { DPK_KIND_JPEG_RST, "jpeg+rst", NULL, &cdc_jpeg_rst_load },
	[DPK_KIND_JPEG_IDX] = { DPK_KIND_JPEG_IDX, "jpeg+idx", NULL, &cdc_jpeg_idx_load },
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
		if (ret != -ENOMSG) {
			if (first)
				snprintf(why, whylen, "%s", tmp);
			return ret;
		}
		if (!first)
			first = ret;
	}
	if (!first)
		snprintf(why, whylen, "no record kind is made from files");
	return -EBADMSG;
}
