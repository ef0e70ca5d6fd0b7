/* registry.c - the device and backend tables. A device row names the backend that suits it; a
 * backend row names the device it needs (NCCL works on device memory). */
#include "trainer/registry.h"

#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int open_cuda(int local_rank, struct trn_dev **out, char *err, size_t errlen)
{
	return trn_dev_cuda_open(local_rank, out, err, errlen);
}

static int open_host(int local_rank, struct trn_dev **out, char *err, size_t errlen)
{
	(void)local_rank;
	if (trn_dev_host_open(out) < 0) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

static const struct dev_kind {
	const char *name;
	int (*open)(int local_rank, struct trn_dev **out, char *err, size_t errlen);
	const char *backend;       /* the default backend on it */
} devices[] = {
	{ "cuda", open_cuda, "nccl" },
	{ "host", open_host, "mpi" },
};

static int open_nccl(struct trn_dev *dev, struct trn_coll **out, char *err, size_t errlen)
{
	char why[400];
	int ret = trn_coll_nccl_open(dev, out, why, sizeof(why));

	if (ret < 0)
		snprintf(err, errlen, "NCCL: %s", why);
	return ret;
}

static int open_mpi(struct trn_dev *dev, struct trn_coll **out, char *err, size_t errlen)
{
	(void)dev;
	if (trn_coll_mpi_open(out) < 0) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

static const struct coll_kind {
	const char *name;
	int (*open)(struct trn_dev *dev, struct trn_coll **out, char *err, size_t errlen);
	const char *device;        /* the device it needs; NULL: any */
} backends[] = {
	{ "nccl", open_nccl, "cuda" },
	{ "mpi", open_mpi, NULL },
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* "use a, b or c" from the names of a table's rows (@stride bytes apart, name first). */
static void choices(char *err, size_t errlen, const void *rows, size_t n, size_t stride)
{
	size_t len = (size_t)snprintf(err, errlen, "use ");

	for (size_t i = 0; i < n && len < errlen; i++)
		len += (size_t)snprintf(err + len, errlen - len, "%s%s",
					i == 0 ? "" : i + 1 == n ? " or " : ", ",
					*(const char *const *)((const char *)rows + i * stride));
}

int trn_dev_open_named(const char *name, int local_rank, int log_fallback, struct trn_dev **out,
		       char *err, size_t errlen)
{
	int automatic = !name || !strcmp(name, "auto");
	char why[400] = "";

	*out = NULL;
	for (size_t i = 0; i < COUNT(devices); i++) {
		if (!automatic && strcmp(name, devices[i].name))
			continue;
		int ret = devices[i].open(local_rank, out, why, sizeof(why));
		if (ret == 0)
			return 0;
		if (!automatic || i + 1 == COUNT(devices)) {
			snprintf(err, errlen, "%s", why);
			return ret;
		}
		if (log_fallback)
			LOG_INFO("no %s device (%s): using the %s device", devices[i].name, why,
				 devices[i + 1].name);
	}
	choices(err, errlen, devices, COUNT(devices), sizeof(devices[0]));
	return -EINVAL;
}

int trn_coll_open_named(const char *name, struct trn_dev *dev, struct trn_coll **out, char *err,
			size_t errlen)
{
	*out = NULL;
	if (!name) {
		for (size_t i = 0; i < COUNT(devices); i++)
			if (!strcmp(devices[i].name, dev->ops->name))
				name = devices[i].backend;
	}
	for (size_t i = 0; name && i < COUNT(backends); i++) {
		if (strcmp(name, backends[i].name))
			continue;
		if (backends[i].device && strcmp(backends[i].device, dev->ops->name)) {
			snprintf(err, errlen, "--backend %s needs --device %s", name, backends[i].device);
			return -EINVAL;
		}
		return backends[i].open(dev, out, err, errlen);
	}
	char list[128];
	choices(list, sizeof(list), backends, COUNT(backends), sizeof(backends[0]));
	snprintf(err, errlen, "--backend %s: %s", name ? name : "?", list);
	return -EINVAL;
}
