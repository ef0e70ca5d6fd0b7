/* npy.h - read the header of a NumPy .npy file (format versions 1.0, 2.0 and 3.0). Only what
 * dpack needs: C-order arrays of integer or unsigned-integer dtypes. No allocation, no logging. */
#ifndef LOADERD_NPY_H
#define LOADERD_NPY_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define NPY_NDIM_MAX 8

struct npy_info {
	char kind;                 /* 'u' unsigned int, 'i' signed int, 'b' bool ('f' is -ENOTSUP) */
	unsigned itemsize;         /* bytes per element: 1, 2, 4 or 8 */
	int big_endian;            /* 1 when the descr says '>' (and itemsize > 1) */
	int ndim;                  /* 0..NPY_NDIM_MAX */
	uint64_t shape[NPY_NDIM_MAX];
	uint64_t count;            /* product of shape (1 for ndim 0) */
	uint64_t data_offset;      /* where the array data starts */
	uint64_t data_size;        /* count * itemsize; checked against the file size */
};

/* Read and validate the header of the .npy file open on @fd (pread; the offset is untouched).
 * Returns 0, -EBADMSG (not .npy, malformed header, data size does not match the file size,
 * overflow), -EPROTO (unknown format version), -ENOTSUP (fortran order, float/object/other
 * dtype), or the read's -errno. On failure @err (may be NULL) says which field was wrong. */
int npy_read_header(int fd, struct npy_info *out, char *err, size_t errlen);

/* Read element @i (0 <= i < count) of a 1-D integer array as int64 (sign/zero extended,
 * byte-swapped if big-endian). Returns 0, -ERANGE, -EOVERFLOW (uint64 > INT64_MAX), or -errno. */
int npy_read_int(int fd, const struct npy_info *info, uint64_t i, int64_t *out);
/* All count elements of a 1-D integer array into @out (count entries), read in 64 KiB blocks,
 * converted as npy_read_int does. Returns 0, -ERANGE, -EOVERFLOW with *@bad the element, -EBADMSG
 * when the file is shorter than its header says, or -errno. */
int npy_read_ints(int fd, const struct npy_info *info, int64_t *out, uint64_t *bad);
/* The same for elements [@first, @first + @count) into @out (count entries; NULL: only checked,
 * nothing stored). *@bad is the element's index in the whole array. -ERANGE past the count. */
int npy_read_ints_range(int fd, const struct npy_info *info, uint64_t first, uint64_t count,
			int64_t *out, uint64_t *bad);

#ifdef __cplusplus
}
#endif
#endif
