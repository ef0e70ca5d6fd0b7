/* input_npy.c - dpack's npy input: IMAGES.npy (uint8, N x ...) and LABELS.npy (N integers), e.g.
 * CIFAR; sample i is the C-order tensor IMAGES[i], a raw record. Labels are checked whole at
 * listing (64 KiB at a time) and read again where they are needed: memory does not grow with N. */
#include "common/log.h"
#include "formats/npy.h"
#include "tools/dpack/input.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LABEL_WINDOW 8192u       /* labels tensor() keeps (64 KiB): its callers go in order */

struct npy_src {
	struct npy_info img;     /* the images array */
	uint64_t sample_bytes;   /* bytes of one image */
	int lfd;                 /* the labels file, or -1 */
	struct npy_info lab;     /* the labels array (checked whole by list_npy) */
	pthread_mutex_t mu;      /* tensor()'s window, under mu */
	uint64_t win_first, win_n;
	int64_t win[LABEL_WINDOW];
};

static int list_npy(struct dpack_src *src)
{
	const char *labels_path = src->labels;
	struct npy_src *np = calloc(1, sizeof(*np));
	struct npy_info lab;
	char err[256];
	int lfd = -1, ret;

	if (!np)
		return -ENOMEM;
	np->lfd = -1;
	pthread_mutex_init(&np->mu, NULL);
	src->priv = np;
	src->fd = open(src->path, O_RDONLY | O_CLOEXEC);
	if (src->fd < 0) {
		int ret0 = -errno;
		LOG_ERROR("cannot open %s: %s", src->path, strerror(-ret0));
		return ret0;
	}
	ret = npy_read_header(src->fd, &np->img, err, sizeof(err));
	if (ret < 0) {
		LOG_ERROR("%s: %s", src->path, err);
		return ret;
	}
	if (np->img.kind != 'u' || np->img.itemsize != 1 || np->img.ndim < 2 ||
	    np->img.ndim > DPK_NDIM_MAX + 1) {
		LOG_ERROR("%s: need a uint8 array of 2 to %d dimensions (N x ...), found %c%u with %d",
			  src->path, DPK_NDIM_MAX + 1, np->img.kind, np->img.itemsize * 8, np->img.ndim);
		return -EINVAL;
	}
	for (int k = 1; k < np->img.ndim; k++)
		if (np->img.shape[k] == 0 || np->img.shape[k] > DPK_DIM_MAX) {
			LOG_ERROR("%s: dimension %d is %llu (1..%u)", src->path, k,
				  (unsigned long long)np->img.shape[k], DPK_DIM_MAX);
			return -EINVAL;
		}
	src->n = np->img.shape[0];
	np->sample_bytes = src->n ? np->img.data_size / src->n : 0;

	lfd = open(labels_path, O_RDONLY | O_CLOEXEC);
	if (lfd < 0) {
		LOG_ERROR("cannot open %s: %s", labels_path, strerror(errno));
		return -errno;
	}
	ret = npy_read_header(lfd, &lab, err, sizeof(err));
	if (ret < 0) {
		LOG_ERROR("%s: %s", labels_path, err);
		goto out;
	}
	if (lab.ndim != 1 || (lab.kind != 'i' && lab.kind != 'u')) {
		LOG_ERROR("%s: labels must be a 1-D integer array, found %d dimensions of '%c'",
			  labels_path, lab.ndim, lab.kind);
		ret = -EINVAL;
		goto out;
	}
	if (lab.shape[0] != src->n) {
		LOG_ERROR("%s has %llu labels but %s has %llu images", labels_path,
			  (unsigned long long)lab.shape[0], src->path, (unsigned long long)src->n);
		ret = -EINVAL;
		goto out;
	}
	uint64_t bad = 0;
	ret = npy_read_ints_range(lfd, &lab, 0, src->n, NULL, &bad);  /* checked, not kept */
	if (ret < 0) {
		LOG_ERROR("%s: label %llu: %s", labels_path, (unsigned long long)bad, strerror(-ret));
		goto out;
	}
	np->lfd = lfd;
	np->lab = lab;
	return 0;
out:
	close(lfd);
	return ret;
}

static void npy_fini(struct dpack_src *src)
{
	struct npy_src *np = src->priv;

	if (np) {
		if (np->lfd >= 0)
			close(np->lfd);
		pthread_mutex_destroy(&np->mu);
	}
	free(np);
	src->priv = NULL;
}

static int npy_detect(const char *path, const struct stat *st)
{
	size_t sl = strlen(path);

	(void)st;
	return sl > 4 && !strcmp(path + sl - 4, ".npy");
}

static int npy_locate(const struct dpack_src *src, uint64_t i, int *fd, uint64_t *off, uint64_t *len)
{
	const struct npy_src *np = src->priv;

	*fd = src->fd;
	*off = np->img.data_offset + i * np->sample_bytes;
	*len = np->sample_bytes;
	return 0;
}

/* Labels [first, first + count), as checked at listing; a read's -errno (the file changed). */
static int npy_labels(const struct dpack_src *src, uint64_t first, uint64_t count, int64_t *out)
{
	struct npy_src *np = src->priv;
	uint64_t bad;
	int ret = npy_read_ints_range(np->lfd, &np->lab, first, count, out, &bad);

	if (ret < 0)
		LOG_ERROR("%s: label %llu: %s", src->labels, (unsigned long long)bad, strerror(-ret));
	return ret;
}

static int npy_tensor(const struct dpack_src *src, uint64_t i, struct dpk_record *r)
{
	struct npy_src *np = src->priv;
	int ret = 0;

	r->kind = DPK_KIND_RAW;
	r->ndim = (uint8_t)(np->img.ndim - 1);
	for (int k = 1; k < np->img.ndim; k++)
		r->shape[k - 1] = (uint32_t)np->img.shape[k];
	pthread_mutex_lock(&np->mu);
	if (i - np->win_first >= np->win_n) {  /* i below the window wraps: a miss too */
		uint64_t k = src->n - i < LABEL_WINDOW ? src->n - i : LABEL_WINDOW;
		np->win_n = 0;
		ret = npy_labels(src, i, k, np->win);
		if (ret == 0) {
			np->win_first = i;
			np->win_n = k;
		}
	}
	if (ret == 0)
		r->label = np->win[i - np->win_first];
	pthread_mutex_unlock(&np->mu);
	return ret;
}

static int npy_span(const struct dpack_src *src, uint64_t *off, uint64_t *len)
{
	const struct npy_src *np = src->priv;

	if (!np->sample_bytes)
		return -EINVAL;
	*off = np->img.data_offset;
	*len = np->sample_bytes;
	return 0;
}

const struct dpack_input dpack_input_npy = {
	.name = "npy",
	.what = ".npy",
	.detect = npy_detect,
	.need_labels = ".npy images need a labels .npy: dpack pack IMAGES.npy LABELS.npy OUT.dpk",
	.list = list_npy,
	.locate = npy_locate,
	.tensor = npy_tensor,
	.labels = npy_labels,
	.span = npy_span,
	.fini = npy_fini,
};
