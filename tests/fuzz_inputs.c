/* fuzz_inputs.c - libFuzzer target for the input-format readers that parse untrusted shards:
 * every input goes through tarx (to the end of the archive), npy (header, then a few
 * element reads when it is a 1-D integer array) and jsonf (a WebDataset sample's .json, for
 * dpack --field NAME=json:KEY: a value found is never longer than the input). Both read through an fd, so the input is put
 * in a memfd. Besides crashes and sanitizer reports, the readers' promises are checked:
 * members lie inside the archive, npy data ends exactly at the end of the file. */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "formats/jsonf.h"
#include "formats/npy.h"
#include "formats/tarx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Static: together about 12 KiB, more than a fuzzer thread's stack should carry per call. */
static struct tarx it;
static struct tarx_member mem;

static int memfd_of(const uint8_t *data, size_t size)
{
	size_t off = 0;
	int fd = memfd_create("fuzz_inputs", MFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	while (off < size) {
		ssize_t n = write(fd, data + off, size - off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			close(fd);
			return -errno;
		}
		off += (size_t)n;
	}
	return fd;
}

static void run_tarx(int fd, uint64_t size)
{
	uint64_t last_end = 0;
	int ret;

	tarx_init(&it, fd, size);
	/* Each call advances at least one block, so this ends; the bound is a backstop. */
	for (uint64_t guard = 0; guard <= size / 512 + 1; guard++) {
		ret = tarx_next(&it, &mem);
		if (ret != 1)
			break;
		assert(memchr(mem.name, '\0', sizeof(mem.name)));
		assert(mem.offset >= 512 && mem.offset <= size && mem.size <= size - mem.offset);
		assert(mem.offset >= last_end);  /* members come in file order */
		last_end = mem.offset + mem.size;
	}
	assert(ret <= 0);
	assert(ret == 0 || ret == -EBADMSG || ret == -ENAMETOOLONG);
	if (ret < 0)
		assert(it.err[0] != '\0' && memchr(it.err, '\0', sizeof(it.err)));
	/* Errors and the end are sticky. */
	assert(tarx_next(&it, &mem) == ret);
}

static void run_npy(int fd, uint64_t size)
{
	struct npy_info info;
	char err[128];
	int64_t v;
	int ret;

	ret = npy_read_header(fd, &info, err, sizeof(err));
	assert(ret == 0 || ret == -EBADMSG || ret == -EPROTO || ret == -ENOTSUP);
	if (ret < 0) {
		assert(err[0] != '\0');
		return;
	}
	assert(info.data_offset + info.data_size == size);
	assert(info.ndim >= 0 && info.ndim <= NPY_NDIM_MAX);
	assert(info.itemsize == 1 || info.itemsize == 2 || info.itemsize == 4 ||
	       info.itemsize == 8);
	if (info.ndim != 1)
		return;
	if (info.count > 0) {
		uint64_t idx[3] = { 0, info.count / 2, info.count - 1 };

		for (int k = 0; k < 3; k++) {
			ret = npy_read_int(fd, &info, idx[k], &v);
			assert(ret == 0 || ret == -EOVERFLOW);
		}
	}
	assert(npy_read_int(fd, &info, info.count, &v) == -ERANGE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_of(data, size);

	if (fd < 0)
		return 0;
	run_tarx(fd, size);
	run_npy(fd, size);
	close(fd);
	uint8_t *v = NULL;
	uint32_t n;
	if (jsonf_get(data, size, "caption", &v, &n) == 1 && n > size)
		abort();
	free(v);
	return 0;
}
