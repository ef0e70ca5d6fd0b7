/* jpeg_probe.c - the JPEG marker walker (ITU T.81 B.1) that every header parser of the codec uses,
 * and the pack-time probe over it: SOI, then marker segments until the first SOS. Reads the frame
 * header for size and sampling factors. Truncation is detected by looking
 * for EOI after the first scan header: entropy-coded data byte-stuffs 0xFF as FF 00, so FF D9
 * there can only be the real EOI (an EXIF thumbnail's EOI sits before the first SOS). */
#include "codec/jpeg_probe.h"
#include "common/bytes.h"
#include "common/err.h"
#include "formats/dpk.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int classify(const uint8_t *comp, unsigned nf)
{
	if (nf == 1)
		return DPK_SUB_GRAY;
	/* comp[3*i + 1] is H<<4 | V. Chroma at 1x1 and luma at (H, V) names the usual modes. */
	unsigned h0 = comp[1] >> 4, v0 = comp[1] & 15;
	for (unsigned i = 1; i < nf; i++)
		if (comp[3 * i + 1] != 0x11)
			return DPK_SUB_OTHER;
	if (h0 == 1 && v0 == 1)
		return DPK_SUB_444;
	if (h0 == 2 && v0 == 1)
		return DPK_SUB_422;
	if (h0 == 2 && v0 == 2)
		return DPK_SUB_420;
	if (h0 == 1 && v0 == 2)
		return DPK_SUB_440;
	if (h0 == 4 && v0 == 1)
		return DPK_SUB_411;
	return DPK_SUB_OTHER;
}

int cdc_jpeg_segment(const uint8_t *jpg, size_t len, size_t *pos, struct cdc_jpeg_seg *s,
		     char *why, size_t whylen)
{
	size_t at = *pos;

	if (at >= len)
		return err_set(why, whylen, -EBADMSG, "truncated in the headers at byte %zu", at);
	if (jpg[at] != 0xFF)
		return err_set(why, whylen, -EBADMSG, "expected a marker at byte %zu", at);
	while (at < len && jpg[at] == 0xFF)  /* fill bytes */
		at++;
	if (at >= len)
		return err_set(why, whylen, -EBADMSG, "truncated in the headers at byte %zu", at);
	s->m = jpg[at++];
	s->p = NULL;
	s->n = 0;
	if (s->m == 0x01 || (s->m >= 0xD0 && s->m <= 0xD9)) {  /* standalone: TEM, RSTn, SOI, EOI */
		*pos = at;
		return 0;
	}
	if (len - at < 2)
		return err_set(why, whylen, -EBADMSG, "truncated in marker FF%02X", s->m);
	size_t seg = be16(jpg + at);
	if (seg < 2 || seg > len - at)
		return err_set(why, whylen, -EBADMSG, "marker FF%02X length %zu runs past the end", s->m,
			    seg);
	s->p = jpg + at + 2;
	s->n = seg - 2;
	*pos = at + seg;
	return 0;
}

int cdc_jpeg_header_seg(const uint8_t *jpg, size_t len, size_t *pos, struct cdc_jpeg_seg *s,
			char *why, size_t whylen)
{
	if (*pos == 0) {
		if (len < 4 || jpg[0] != 0xFF || jpg[1] != 0xD8)
			return err_set(why, whylen, -EBADMSG, "not a JPEG (no SOI)");
		*pos = 2;
	}
	int ret = cdc_jpeg_segment(jpg, len, pos, s, why, whylen);
	if (ret < 0)
		return ret;
	if (!s->p)
		return err_set(why, whylen, -EBADMSG, "unexpected marker in the header");
	return 0;
}

int cdc_jpeg_probe(const void *data, size_t len, struct cdc_jpeg_info *out, char *err, size_t errlen)
{
	const uint8_t *p = data;
	size_t pos = 2;
	int have_sof = 0;

	memset(out, 0, sizeof(*out));
	if (len < 4 || p[0] != 0xFF || p[1] != 0xD8)
		return err_set(err, errlen, -EBADMSG, "not a JPEG (no SOI marker)");

	for (;;) {
		struct cdc_jpeg_seg sg;
		int ret = cdc_jpeg_segment(p, len, &pos, &sg, err, errlen);
		if (ret < 0)
			return ret;
		unsigned m = sg.m;
		if (m == 0x01 || (m >= 0xD0 && m <= 0xD7))
			continue;  /* standalone markers */
		if (m == 0xD8 || m == 0xD9 || m == 0x00)
			return err_set(err, errlen, -EBADMSG, "unexpected marker FF%02X before the first scan", m);
		size_t seg = sg.n + 2;
		const uint8_t *s = sg.p;  /* segment payload, seg - 2 bytes */

		int is_sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
		if (is_sof) {
			if (have_sof)
				return err_set(err, errlen, -EBADMSG, "second frame header");
			if (m != 0xC0 && m != 0xC1 && m != 0xC2 && m != 0xC9 && m != 0xCA)
				return err_set(err, errlen, -ENOTSUP, "unsupported JPEG process (SOF%u)", m - 0xC0);
			if (seg < 8)
				return err_set(err, errlen, -EBADMSG, "frame header too short");
			unsigned prec = s[0], h = be16(s + 1), w = be16(s + 3), nf = s[5];
			if (seg != 8 + 3 * nf)
				return err_set(err, errlen, -EBADMSG, "frame header length %zu for %u components", seg, nf);
			if (prec != 8)
				return err_set(err, errlen, -ENOTSUP, "%u-bit samples (only 8-bit)", prec);
			if (h == 0)
				return err_set(err, errlen, -ENOTSUP, "height defined by DNL");
			if (w == 0)
				return err_set(err, errlen, -EBADMSG, "zero width");
			if (nf != 1 && nf != 3)
				return err_set(err, errlen, -ENOTSUP, "%u components (only gray or YCbCr)", nf);
			for (unsigned i = 0; i < nf; i++) {
				unsigned hv = s[6 + 3 * i + 1];
				if ((hv >> 4) < 1 || (hv >> 4) > 4 || (hv & 15) < 1 || (hv & 15) > 4)
					return err_set(err, errlen, -EBADMSG, "component %u sampling factors 0x%02X", i, hv);
			}
			out->width = w;
			out->height = h;
			out->components = (uint8_t)nf;
			out->subsamp = (uint8_t)classify(s + 6, nf);
			out->progressive = m == 0xC2 || m == 0xCA;
			have_sof = 1;
		} else if (m == 0xDA) {
			if (!have_sof)
				return err_set(err, errlen, -EBADMSG, "scan before the frame header");
			size_t scan = pos;
			for (size_t i = len - 2; i + 1 > scan; i--)
				if (p[i] == 0xFF && p[i + 1] == 0xD9)
					return 0;
			return err_set(err, errlen, -EBADMSG, "truncated: no EOI after the scan data");
		}
	}
}
