/* fuzz_dpk.c - libFuzzer target for the .dpk reader and the JPEG probe: the input becomes a file
 * (memfd); dpk_open must reject it cleanly or return a dataset whose every record can be read
 * (and a JPEG one probed) without touching memory outside its buffers. A mapped open
 * (DPK_OPEN_MAP, and DPK_OPEN_READ_INDEX the same way) checks each entry at load: every entry it passes lies inside the file, and where
 * the whole-index check passes the file, the mapped loads pass every entry and give the same
 * bytes. Decoding a record is the daemon's (codec/decode.c), not the reader's. Aux fields
 * (version 2): every blob dpk_aux_read passes, copied or mapped, is at most aux_max, lies in
 * the buffer, and splits into fields that add up (dpk_aux_field); where the whole open passed,
 * the mapped read gives the same bytes. */
#include "formats/dpk.h"
#include "codec/jpeg_probe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t aux_a[DPK_AUX_RECORD_MAX], aux_b[DPK_AUX_RECORD_MAX];

/* Sample @i's aux blob from @d into @buf: its length (checked as above), or < 0. */
static ssize_t aux_checked(const struct dpk *d, uint64_t i, const struct dpk_entry *e,
			   uint8_t *buf)
{
	char err[256];
	ssize_t n = dpk_aux_read(d, i, e, buf, DPK_AUX_RECORD_MAX, err, sizeof(err));

	if (n > 0) {
		uint32_t nf = dpk_aux_fields(d);
		uint64_t sum = 4ull * nf;
		if (!nf || (uint64_t)n > dpk_aux_max(d))
			abort();
		for (uint32_t k = 0; k < nf; k++) {
			const uint8_t *p;
			uint32_t l;
			if (dpk_aux_field(buf, (size_t)n, nf, k, &p, &l) != 0 || p < buf ||
			    p + l > buf + n || l > DPK_AUX_FIELD_MAX || !dpk_aux_name(d, k))
				abort();
			sum += l;
		}
		if (sum != (uint64_t)n)
			abort();
	}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cdc_jpeg_info ji;
	struct dpk *d = NULL;
	char err[256];

	cdc_jpeg_probe(data, size, &ji, err, sizeof(err));

	int fd = memfd_create("fuzz_dpk", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	struct dpk *m = NULL;
	/* Skip the index checksum so that the fuzzer reaches entry validation. */
	int whole = dpk_open_fd(fd, DPK_OPEN_NO_INDEX_CHECK, &d, err, sizeof(err));
	for (int lazy = 0; lazy < 2; lazy++) {  /* mapped, then read an entry at a time */
		if (dpk_open_fd(fd, lazy ? DPK_OPEN_READ_INDEX : DPK_OPEN_MAP, &m, err,
				sizeof(err)) == 0) {
			for (uint64_t i = 0; i < dpk_count(m) && i < 4096; i++) {
				struct dpk_entry e;
				int ret = dpk_entry_load(m, i, &e, err, sizeof(err));
				if (ret == 0 && e.offset + e.length > size)
					abort();
				if (whole == 0 &&
				    (ret != 0 || memcmp(&e, dpk_entry_get(d, i), sizeof(e))))
					abort();
				if (ret == 0 && i < 64) {
					ssize_t n = aux_checked(m, i, &e, aux_b);
					if (whole == 0 && n > 0) {
						ssize_t w = aux_checked(d, i, &e, aux_a);
						if (w != n || memcmp(aux_a, aux_b, (size_t)n))
							abort();
					}
				}
			}
			dpk_close(m);
		} else if (whole == 0) {
			abort();  /* the header and class table passed the whole open */
		}
	}
	if (whole == 0) {
		uint64_t n = dpk_count(d);
		for (uint32_t c = 0; c < dpk_class_count(d); c++)
			if (strlen(dpk_class_name(d, c)) > DPK_CLASS_NAME_MAX)
				abort();
		for (uint64_t i = 0; i < n && i < 64; i++) {
			const struct dpk_entry *e = dpk_entry_get(d, i);
			/* Validated at open: the record lies inside the (small) file. */
			if (e->offset + e->length > size)
				abort();
			uint8_t *buf = malloc(e->length);
			if (!buf)
				continue;
			ssize_t r = dpk_read(d, i, buf, e->length);
			if (r >= 0 && (dpk_kind_info(e->kind)->flags & DPK_KF_JPEG))
				cdc_jpeg_probe(buf, e->length, &ji, err, sizeof(err));
			free(buf);
		}
		dpk_close(d);
	}
	close(fd);
	return 0;
}
