/* kind.c - the table of record kinds (see kind.h): one row per enum dpk_kind. */
#include "codec/kind.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

extern const struct cdc_kind cdc_kind_jpeg, cdc_kind_raw, cdc_kind_raw_zstd, cdc_kind_jpeg_rst,
	cdc_kind_jpeg_idx;

const struct cdc_kind *const cdc_kinds[DPK_KIND_MAX + 1] = {
	[DPK_KIND_JPEG] = &cdc_kind_jpeg,
	[DPK_KIND_RAW] = &cdc_kind_raw,
	[DPK_KIND_RAW_ZSTD] = &cdc_kind_raw_zstd,
	[DPK_KIND_JPEG_RST] = &cdc_kind_jpeg_rst,
	[DPK_KIND_JPEG_IDX] = &cdc_kind_jpeg_idx,
};

const struct cdc_kind *cdc_kind_get(unsigned kind)
{
	return kind <= DPK_KIND_MAX ? cdc_kinds[kind] : NULL;
}

const struct cdc_kind *cdc_kind_find(const char *name)
{
	for (unsigned k = 0; k <= DPK_KIND_MAX; k++)
		if (cdc_kinds[k] && !strcmp(cdc_kinds[k]->name, name))
			return cdc_kinds[k];
	return NULL;
}

int cdc_kind_probe(const uint8_t *buf, size_t len, struct dpk_record *r, char *why, size_t whylen)
{
	int first = 0;

	for (unsigned k = 0; k <= DPK_KIND_MAX; k++) {
		const struct cdc_kind *kd = cdc_kinds[k];
		if (!kd || !kd->probe)
			continue;
		/* Only the first failure's reason is kept: later kinds write into a scratch copy. */
		char tmp[256];
		int ret = kd->probe(buf, len, r, first ? tmp : why, first ? sizeof(tmp) : whylen);
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
