/* fuzz_aux_fields.c - structure-aware libFuzzer target for the aux fields of a .dpk (version 2):
 * a valid file of 4 raw records with 2 aux fields is made once; the input is a list of edits
 * (3 bytes each: where, 1 of 64 places in the aux section, the blobs or the header's aux words,
 * and the byte to put there), after which every checksum is made right again (the blobs', the
 * aux section's, the header's), so that the reader's structure checks, not a checksum, must
 * catch what is wrong. dpk_open (copied, mapped, read entry by entry) must refuse the file or
 * give blobs that lie in the buffer, are at most aux_max and split into fields that add up. */
#include "formats/dpk.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *tmpl;
static size_t tmpl_len;
static uint8_t blob[DPK_AUX_RECORD_MAX];

static void make_template(void)
{
	static const char *const names[] = { "txt", "json" };
	char path[] = "/tmp/fuzz_aux_fields.XXXXXX";
	struct dpk_writer *w;
	uint8_t rec[6] = { 1, 2, 3, 4, 5, 6 };
	int fd = mkstemp(path);

	if (fd < 0)
		abort();
	close(fd);
	if (dpk_writer_create(path, DPK_WRITE_NO_SYNC, &w) < 0 ||
	    dpk_writer_set_aux(w, names, 2, 0) < 0)
		abort();
	for (unsigned i = 0; i < 4; i++) {
		struct dpk_record r = { .kind = DPK_KIND_RAW, .data = rec, .length = 6,
					.shape = { 6 }, .ndim = 1, .aux = { "caption", "{}" },
					.aux_len = { 7 - i, 2 } };
		if (dpk_writer_add(w, &r) < 0)
			abort();
	}
	if (dpk_writer_finish(w) < 0)
		abort();
	dpk_writer_destroy(w);
	FILE *f = fopen(path, "rb");
	if (!f || fseek(f, 0, SEEK_END) < 0)
		abort();
	tmpl_len = (size_t)ftell(f);
	tmpl = malloc(tmpl_len);
	rewind(f);
	if (!tmpl || fread(tmpl, 1, tmpl_len, f) != tmpl_len)
		abort();
	fclose(f);
	unlink(path);
}

static void check_all(int fd, unsigned flags)
{
	struct dpk *d;
	char err[256];

	if (dpk_open_fd(fd, flags, &d, err, sizeof(err)) < 0)
		return;
	for (uint64_t i = 0; i < dpk_count(d); i++) {
		struct dpk_entry e;
		if (dpk_entry_load(d, i, &e, err, sizeof(err)) < 0)
			continue;
		ssize_t n = dpk_aux_read(d, i, &e, blob, sizeof(blob), err, sizeof(err));
		if (n <= 0)
			continue;
		uint32_t nf = dpk_aux_fields(d);
		uint64_t sum = 4ull * nf;
		if ((uint64_t)n > dpk_aux_max(d) || e.offset + e.length + (uint64_t)n > tmpl_len)
			abort();
		for (uint32_t k = 0; k < nf; k++) {
			const uint8_t *p;
			uint32_t l;
			if (dpk_aux_field(blob, (size_t)n, nf, k, &p, &l) || p + l > blob + n)
				abort();
			sum += l;
		}
		if (sum != (uint64_t)n)
			abort();
	}
	dpk_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!tmpl)
		make_template();
	uint8_t *b = malloc(tmpl_len);
	if (!b)
		return 0;
	memcpy(b, tmpl, tmpl_len);
	struct dpk_header *h = (struct dpk_header *)(void *)b;
	const uint64_t ao = h->aux_offset, asz = h->aux_size, cnt = h->count;
	struct dpk_aux_entry *ae = (struct dpk_aux_entry *)(void *)(b + ao + asz - 24 * cnt);
	uint64_t blobs = ae[0].offset, blobs_end = ae[cnt - 1].offset + ae[cnt - 1].length;
	for (size_t k = 0; k + 3 <= size; k += 3) {
		uint16_t at = (uint16_t)(data[k] | data[k + 1] << 8);
		uint8_t v = data[k + 2];
		switch (at % 3) {
		case 0:  /* the aux section: names, entries */
			b[ao + (at / 3) % asz] = v;
			break;
		case 1:  /* the data section from the first blob on (blobs and records) */
			b[blobs + (at / 3) % (blobs_end - blobs)] = v;
			break;
		default:  /* the header's aux words: features .. aux_max */
			b[offsetof(struct dpk_header, features) + (at / 3) % 36] = v;
			break;
		}
	}
	/* every checksum right again, where the entries still point inside the file */
	for (uint64_t i = 0; i < cnt && ao + asz <= tmpl_len; i++)
		if (ae[i].offset < tmpl_len && ae[i].length <= tmpl_len - ae[i].offset)
			ae[i].xxh3 = XXH3_64bits(b + ae[i].offset, ae[i].length);
	if (h->aux_offset < tmpl_len && h->aux_size <= tmpl_len - h->aux_offset)
		h->aux_xxh3 = XXH3_64bits(b + h->aux_offset, h->aux_size);
	h->header_xxh3 = XXH3_64bits(h, offsetof(struct dpk_header, header_xxh3));
	int fd = memfd_create("fuzz_aux_fields", MFD_CLOEXEC);
	if (fd >= 0 && write(fd, b, tmpl_len) == (ssize_t)tmpl_len) {
		check_all(fd, 0);
		check_all(fd, DPK_OPEN_MAP);
		check_all(fd, DPK_OPEN_READ_INDEX);
	}
	if (fd >= 0)
		close(fd);
	free(b);
	return 0;
}
