/* test_jpeg_probe_errors.c - cdc_jpeg_probe's marker walk on hand-made headers, one table row
 * each: every refusal with its errno and message, the markers it steps over, and the chroma
 * subsampling it reads from the sampling factors (each factor at its limit 4 and one past it).
 * The headers are only markers (SOI, an optional extra segment, SOF, SOS, a byte of scan data,
 * EOI): the probe never decodes, so no real image is needed; tests/test_jpeg_probe.c runs it on
 * real JPEGs. */
#include "formats/dpk.h"
#include "codec/jpeg_probe.h"
#include "codec/jpeg_hdr.h"
#include "codec/jpeg_rst.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

/* What a row's header holds. */
struct hdr {
	const char *pre;       /* bytes (as a hex string) right after SOI, before SOF; NULL none */
	unsigned sof;          /* SOF marker byte (0xC0 baseline); 0: no SOF */
	unsigned seg_extra;    /* added to the SOF segment's length field */
	unsigned prec, h, w, nf;
	uint8_t hv[4];         /* per component: sampling factors (H << 4 | V) */
	int sos_first;         /* SOS before SOF */
	int two_sof;
	int no_eoi;
	size_t cut;            /* keep only this many bytes (0: all) */
};

static size_t hex(uint8_t *out, const char *s)
{
	size_t n = 0;
	unsigned v;

	while (s && sscanf(s, "%2x", &v) == 1) {
		out[n++] = (uint8_t)v;
		s += 2;
		while (*s == ' ')
			s++;
	}
	return n;
}

static size_t sof(uint8_t *p, const struct hdr *h)
{
	size_t n = 0, seg = 8 + 3 * h->nf + h->seg_extra;

	p[n++] = 0xFF;
	p[n++] = (uint8_t)h->sof;
	p[n++] = (uint8_t)(seg >> 8);
	p[n++] = (uint8_t)seg;
	p[n++] = (uint8_t)h->prec;
	p[n++] = (uint8_t)(h->h >> 8);
	p[n++] = (uint8_t)h->h;
	p[n++] = (uint8_t)(h->w >> 8);
	p[n++] = (uint8_t)h->w;
	p[n++] = (uint8_t)h->nf;
	for (unsigned i = 0; i < h->nf; i++) {
		p[n++] = (uint8_t)(i + 1);
		p[n++] = h->hv[i];
		p[n++] = 0;
	}
	for (unsigned i = 0; i < h->seg_extra; i++)
		p[n++] = 0;
	return n;
}

static size_t make(uint8_t *p, const struct hdr *h)
{
	static const uint8_t sos[] = { 0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00 };
	size_t n = 0;

	p[n++] = 0xFF;
	p[n++] = 0xD8;
	n += hex(p + n, h->pre);
	if (h->sos_first) {
		memcpy(p + n, sos, sizeof(sos));
		n += sizeof(sos);
	}
	if (h->sof)
		n += sof(p + n, h);
	if (h->two_sof)
		n += sof(p + n, h);
	memcpy(p + n, sos, sizeof(sos));
	n += sizeof(sos);
	p[n++] = 0x12;  /* scan data */
	if (!h->no_eoi) {
		p[n++] = 0xFF;
		p[n++] = 0xD9;
	}
	return h->cut ? h->cut : n;
}

#define GRAY .sof = 0xC0, .prec = 8, .h = 16, .w = 24, .nf = 1
#define YCC .sof = 0xC0, .prec = 8, .h = 16, .w = 24, .nf = 3
#define SOF(m, p, hh, ww, n) .sof = (m), .prec = (p), .h = (hh), .w = (ww), .nf = (n)
#define OK(nm, sub, ...) { .name = (nm), .subsamp = (sub), .h = { __VA_ARGS__ } }
#define NO(nm, e, m, ...) { .name = (nm), .err = (e), .msg = (m), .h = { __VA_ARGS__ } }

static const struct row {
	const char *name;
	struct hdr h;
	int err;             /* 0: accepted */
	const char *msg;     /* refused: what the message says; accepted: unused */
	int subsamp;         /* accepted: the subsampling read */
} rows[] = {
	OK("gray baseline", DPK_SUB_GRAY,
	   GRAY, .hv = { 0x11 }),
	OK("4:4:4", DPK_SUB_444,
	   YCC, .hv = { 0x11, 0x11, 0x11 }),
	OK("4:2:2", DPK_SUB_422,
	   YCC, .hv = { 0x21, 0x11, 0x11 }),
	OK("4:2:0", DPK_SUB_420,
	   YCC, .hv = { 0x22, 0x11, 0x11 }),
	OK("4:4:0", DPK_SUB_440,
	   YCC, .hv = { 0x12, 0x11, 0x11 }),
	OK("4:1:1", DPK_SUB_411,
	   YCC, .hv = { 0x41, 0x11, 0x11 }),
	OK("3x1 luma: other", DPK_SUB_OTHER,
	   YCC, .hv = { 0x31, 0x11, 0x11 }),
	OK("chroma not 1x1: other", DPK_SUB_OTHER,
	   YCC, .hv = { 0x22, 0x21, 0x11 }),
	OK("factors 4x4: the limit", DPK_SUB_GRAY,
	   GRAY, .hv = { 0x44 }),
	OK("fill bytes, TEM and RST0 are stepped over", DPK_SUB_GRAY,
	   .pre = "FF FF 01 FF D0", GRAY , .hv = { 0x11 }),
	OK("an APP0 segment is stepped over", DPK_SUB_GRAY,
	   .pre = "FF E0 00 04 AB CD", GRAY , .hv = { 0x11 }),
	NO("H factor 5", -EBADMSG, "component 0 sampling factors 0x51",
	   GRAY, .hv = { 0x51 }),
	NO("V factor 5", -EBADMSG, "component 1 sampling factors 0x15",
	   YCC, .hv = { 0x11, 0x15, 0x11 }),
	NO("H factor 0", -EBADMSG, "component 0 sampling factors 0x01",
	   GRAY, .hv = { 0x01 }),
	NO("no SOI", -EBADMSG, "not a JPEG (no SOI marker)",
	   GRAY, .hv = { 0x11 }, .cut = 3),
	NO("fill bytes to the end", -EBADMSG, "truncated in the headers at byte 4",
	   .pre = "FF FF", .cut = 4),
	NO("junk where a marker is due", -EBADMSG, "expected a marker at byte 2",
	   .pre = "00", GRAY , .hv = { 0x11 }),
	NO("SOI again", -EBADMSG, "unexpected marker FFD8 before the first scan",
	   .pre = "FF D8", GRAY , .hv = { 0x11 }),
	NO("cut inside a length", -EBADMSG, "truncated in marker FFE0",
	   .pre = "FF E0 00", .cut = 5),
	NO("segment past the end", -EBADMSG, "marker FFE0 length 64 runs past the end",
	   .pre = "FF E0 00 40 00", .cut = 7),
	NO("segment length 1", -EBADMSG, "marker FFE0 length 1 runs past the end",
	   .pre = "FF E0 00 01", GRAY , .hv = { 0x11 }),
	NO("two frame headers", -EBADMSG, "second frame header",
	   GRAY, .hv = { 0x11 }, .two_sof = 1),
	NO("lossless (SOF3)", -ENOTSUP, "unsupported JPEG process (SOF3)",
	   SOF(0xC3, 8, 16, 24, 1), .hv = { 0x11 }),
	NO("frame header of 7 bytes", -EBADMSG, "frame header too short",
	   .pre = "FF C0 00 07 08 00 10 00 18"),
	NO("frame header longer than its components", -EBADMSG, "frame header length 14 for 1 components",
	   SOF(0xC0, 8, 16, 24, 1), .hv = { 0x11 }, .seg_extra = 3),
	NO("12-bit", -ENOTSUP, "12-bit samples (only 8-bit)",
	   SOF(0xC1, 12, 16, 24, 1), .hv = { 0x11 }),
	NO("height 0 (DNL)", -ENOTSUP, "height defined by DNL",
	   SOF(0xC0, 8, 0, 24, 1), .hv = { 0x11 }),
	NO("width 0", -EBADMSG, "zero width",
	   SOF(0xC0, 8, 16, 0, 1), .hv = { 0x11 }),
	NO("CMYK", -ENOTSUP, "4 components (only gray or YCbCr)",
	   SOF(0xC0, 8, 16, 24, 4), .hv = { 0x11, 0x11, 0x11, 0x11 }),
	NO("scan before the frame", -EBADMSG, "scan before the frame header",
	   GRAY, .hv = { 0x11 }, .sos_first = 1),
	NO("no EOI", -EBADMSG, "truncated: no EOI after the scan data",
	   GRAY, .hv = { 0x11 }, .no_eoi = 1),
};

static void test_jpeg_probe_each_row(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		const struct row *r = &rows[k];
		uint8_t buf[256];
		char err[128] = "";
		struct cdc_jpeg_info in;
		size_t n = make(buf, &r->h);
		int ret = cdc_jpeg_probe(buf, n, &in, err, sizeof(err));

		if (ret != r->err)
			fail_msg("%s: %d (%s), expected %d", r->name, ret, err, r->err);
		if (ret < 0) {
			if (strcmp(err, r->msg) != 0)
				fail_msg("%s: \"%s\", expected \"%s\"", r->name, err, r->msg);
			continue;
		}
		if (in.subsamp != r->subsamp || in.width != r->h.w || in.height != r->h.h ||
		    in.components != r->h.nf || in.progressive)
			fail_msg("%s: %ux%u, %u components, subsampling %s, progressive %u", r->name,
				 in.width, in.height, in.components, dpk_subsamp_name(in.subsamp),
				 in.progressive);
	}
}

/* SOF2 and SOF10 are progressive; the probe says so. No message buffer: NULL is fine. */
static void test_jpeg_probe_progressive(void **state)
{
	static const unsigned sofs[] = { 0xC2, 0xCA };
	(void)state;
	for (size_t k = 0; k < 2; k++) {
		struct hdr h = { .sof = sofs[k], .prec = 8, .h = 16, .w = 24, .nf = 1, .hv = { 0x11 } };
		uint8_t buf[256];
		struct cdc_jpeg_info in;
		size_t n = make(buf, &h);

		assert_int_equal(cdc_jpeg_probe(buf, n, &in, NULL, 0), 0);
		assert_int_equal(in.progressive, 1);
		h.no_eoi = 1;
		n = make(buf, &h);
		assert_int_equal(cdc_jpeg_probe(buf, n, &in, NULL, 0), -EBADMSG);
	}
}

/* cdc_jpeg_header_seg, the header walk of the jpeg+rst and jpeg+idx parsers: the SOI at the
 * length limit (4 bytes) and one under it, a segment, a standalone marker, a truncation; and both
 * parsers give its refusals word for word. */
static void test_jpeg_header_seg_walk(void **state)
{
	static const uint8_t eoi_only[] = { 0xFF, 0xD8, 0xFF, 0xD9 };
	static const uint8_t app0[] = { 0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0xAB, 0xCD, 0xFF, 0xD0 };
	static const uint8_t not_soi[] = { 0xFF, 0xD9, 0xFF, 0xD9 };
	static struct cdc_idx_info idx;
	struct cdc_rst_info rst;
	struct cdc_jpeg_seg sg;
	char why[128];
	size_t pos = 0;
	(void)state;

	assert_int_equal(cdc_jpeg_header_seg(eoi_only, 3, &pos, &sg, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "not a JPEG (no SOI)");
	pos = 0;
	assert_int_equal(cdc_jpeg_header_seg(not_soi, 4, &pos, &sg, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "not a JPEG (no SOI)");
	pos = 0;  /* 4 bytes: the SOI passes, then EOI stands where a header segment should */
	assert_int_equal(cdc_jpeg_header_seg(eoi_only, 4, &pos, &sg, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "unexpected marker in the header");
	pos = 0;
	assert_int_equal(cdc_jpeg_header_seg(app0, sizeof(app0), &pos, &sg, why, sizeof(why)), 0);
	assert_int_equal(sg.m, 0xE0);
	assert_int_equal(sg.n, 2);
	assert_ptr_equal(sg.p, app0 + 6);
	assert_int_equal(pos, 8);
	assert_int_equal(cdc_jpeg_header_seg(app0, sizeof(app0), &pos, &sg, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "unexpected marker in the header");  /* RST0 */
	pos = 0;
	assert_int_equal(cdc_jpeg_header_seg(app0, 2 + 4, &pos, &sg, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "marker FFE0 length 4 runs past the end");

	assert_int_equal(cdc_rst_parse(not_soi, 4, &rst, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "not a JPEG (no SOI)");
	assert_int_equal(cdc_rst_parse(eoi_only, 4, &rst, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "unexpected marker in the header");
	assert_int_equal(cdc_idx_header(not_soi, 4, 0, &idx, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "not a JPEG (no SOI)");
	assert_int_equal(cdc_idx_header(eoi_only, 4, 0, &idx, why, sizeof(why)), -EBADMSG);
	assert_string_equal(why, "unexpected marker in the header");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jpeg_probe_each_row),
		cmocka_unit_test(test_jpeg_probe_progressive),
		cmocka_unit_test(test_jpeg_header_seg_walk),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
