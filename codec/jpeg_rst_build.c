/* jpeg_rst_build.c - dpack's side of jpeg+rst records (see jpeg_build.h): the lossless transcode
 * through libjpeg (the same DCT coefficients, re-entropy-coded as one baseline scan), which the
 * jpeg+idx index pass also falls back to, and the restart rewrite over it. */
#include "codec/jpeg_build.h"
#include "codec/jpeg_hdr.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

/* ---- the rewrite (dpack) ---- */

struct rw_err {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	unsigned char *mem;        /* jpeg_mem_dest's buffer: in memory, so valid after longjmp */
	unsigned long memlen;
};

static void rw_error(j_common_ptr c)
{
	longjmp(((struct rw_err *)(void *)c->err)->jb, 1);
}

/* Corrupt-data warnings fail the rewrite, as they fail a decode (codec/decode.c). */
static void rw_message(j_common_ptr c, int level)
{
	if (level < 0 && c->err->msg_code != JWRN_EXTRANEOUS_DATA)
		longjmp(((struct rw_err *)(void *)c->err)->jb, 1);
}

_Static_assert(sizeof(JCOEF) == sizeof(int16_t), "cdc_coefs rows are int16_t");

struct coefs_priv {
	struct jpeg_decompress_struct *src;
	jvirt_barray_ptr *arrays;
};

static const int16_t *coefs_row(const struct cdc_coefs *c, unsigned ci, uint32_t brow)
{
	const struct coefs_priv *p = c->priv;
	JBLOCKARRAY a = (*p->src->mem->access_virt_barray)((j_common_ptr)p->src, p->arrays[ci],
							    brow, 1, FALSE);
	return (const int16_t *)a[0][0];
}

typedef int coefs_fn(void *arg, const uint8_t *out, size_t outlen, const struct cdc_coefs *c);

/* cdc_jpeg_transcode(), and @fn called on the result while the coefficients live (when not NULL). */
static int transcode(const uint8_t *jpg, size_t len, int optimize, long seg_px, uint8_t **out,
		     size_t *outlen, coefs_fn *fn, void *arg, char *why, size_t whylen)
{
	struct jpeg_decompress_struct src;
	struct jpeg_compress_struct dst;
	struct rw_err err;
	volatile int have_dst = 0;
	volatile int ret = 0;

	*out = NULL;
	*outlen = 0;
	memset(&src, 0, sizeof(src));
	memset(&dst, 0, sizeof(dst));
	src.err = dst.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = rw_error;
	err.pub.emit_message = rw_message;
	err.mem = NULL;
	err.memlen = 0;
	if (setjmp(err.jb)) {
		char msg[JMSG_LENGTH_MAX];
		err.pub.format_message((j_common_ptr)&src, msg);
		snprintf(why, whylen, "JPEG rewrite: %s", msg);
		if (have_dst)
			jpeg_destroy_compress(&dst);
		jpeg_destroy_decompress(&src);
		free(err.mem);
		return -EBADMSG;
	}
	jpeg_create_decompress(&src);
	jpeg_mem_src(&src, jpg, (unsigned long)len);
	jpeg_read_header(&src, TRUE);
	jvirt_barray_ptr *coef = jpeg_read_coefficients(&src);
	jpeg_create_compress(&dst);
	have_dst = 1;
	jpeg_mem_dest(&dst, &err.mem, &err.memlen);
	jpeg_copy_critical_parameters(&src, &dst);  /* also the standard Huffman tables */
	dst.optimize_coding = optimize ? TRUE : FALSE;

	/* the largest divisor of the MCU row that is at most seg_px wide */
	unsigned mcu_w = src.num_components == 1 ? 8 : 8 * (unsigned)src.max_h_samp_factor;
	unsigned mcus_x = (src.image_width + mcu_w - 1) / mcu_w, interval = mcus_x;
	if (seg_px > 0) {
		for (interval = (unsigned)seg_px / mcu_w ? (unsigned)seg_px / mcu_w : 1;
		     mcus_x % interval; interval--)
			;
	}
	dst.restart_interval = seg_px < 0 ? 0 : interval;
	jpeg_write_coefficients(&dst, coef);
	jpeg_finish_compress(&dst);
	if (fn) {
		struct coefs_priv p = { &src, coef };
		struct cdc_coefs c = { .ncomp = (unsigned)src.num_components, .row = coefs_row,
				       .priv = &p };

		if (c.ncomp > CDC_COEFS_MAX) {
			ret = -ENOTSUP;
		} else {
			for (unsigned ci = 0; ci < c.ncomp; ci++) {
				const jpeg_component_info *ci_info = &src.comp_info[ci];
				c.wblocks[ci] = ci_info->width_in_blocks;
				c.hblocks[ci] = ci_info->height_in_blocks;
				c.h[ci] = (unsigned)ci_info->h_samp_factor;
				c.v[ci] = (unsigned)ci_info->v_samp_factor;
			}
			ret = fn(arg, err.mem, err.memlen, &c);
		}
	}
	jpeg_finish_decompress(&src);
	jpeg_destroy_compress(&dst);
	jpeg_destroy_decompress(&src);
	if (ret < 0) {
		free(err.mem);
		return ret;
	}
	*out = err.mem;
	*outlen = err.memlen;
	return 0;
}

int cdc_jpeg_transcode(const uint8_t *jpg, size_t len, int optimize, long seg_px, uint8_t **out,
		       size_t *outlen, char *why, size_t whylen)
{
	return transcode(jpg, len, optimize, seg_px, out, outlen, NULL, NULL, why, whylen);
}

int cdc_jpeg_transcode_coefs(const uint8_t *jpg, size_t len, uint8_t **out, size_t *outlen,
			     coefs_fn *fn, void *arg, char *why, size_t whylen)
{
	return transcode(jpg, len, 0, -1, out, outlen, fn, arg, why, whylen);
}

int cdc_rst_rewrite(const uint8_t *jpg, size_t len, unsigned seg_px, struct dpk_record *r,
		    uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	int ret = cdc_jpeg_transcode(jpg, len, 1, seg_px, out, outlen, why, whylen);

	if (ret == 0) {
		r->kind = DPK_KIND_JPEG_RST;
		r->flags &= (uint8_t)~DPK_F_PROGRESSIVE;
	}
	return ret;
}
