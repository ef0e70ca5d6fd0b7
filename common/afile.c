/* afile.c - write a file beside its target and rename it into place (see afile.h). */
#include "common/afile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int afile_open(struct afile *f, const char *path, unsigned flags)
{
	int ret;

	*f = (struct afile){ .fd = -1, .flags = flags };
	f->path = strdup(path);
	if (!f->path || asprintf(&f->tmp, "%s.tmp.%d", path, (int)getpid()) < 0) {
		f->tmp = NULL;
		ret = -ENOMEM;
		goto fail;
	}
	f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0644);
	if (f->fd < 0) {
		ret = -errno;
		free(f->tmp);
		f->tmp = NULL;  /* someone else's file (EEXIST), or none: not ours to unlink */
		goto fail;
	}
	return 0;
fail:
	afile_close(f);
	return ret;
}

/* fsync the directory holding @path, which makes a rename in it durable. 0 or -errno. */
static int fsync_dir(const char *path)
{
	char *dir = strdup(path);
	int fd, ret = 0;

	if (!dir)
		return -ENOMEM;
	char *slash = strrchr(dir, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0 || fsync(fd) < 0)
		ret = -errno;
	if (fd >= 0)
		close(fd);
	free(dir);
	return ret;
}

int afile_commit(struct afile *f)
{
	int ret = 0;

	if (f->fd < 0 || f->committed)
		return -EBADF;
	if (!(f->flags & AFILE_NO_SYNC) && fsync(f->fd) < 0)
		ret = -errno;
	/* close() reports the delayed write errors of NFS and friends. */
	if (close(f->fd) < 0 && ret == 0)
		ret = -errno;
	f->fd = -1;
	if (ret == 0 && rename(f->tmp, f->path) < 0)
		ret = -errno;
	if (ret < 0)
		return ret;
	f->committed = 1;
	if (!(f->flags & AFILE_NO_SYNC))
		(void)fsync_dir(f->path);
	return 0;
}

void afile_close(struct afile *f)
{
	if (f->fd >= 0)
		close(f->fd);
	if (f->tmp && !f->committed)
		unlink(f->tmp);
	free(f->tmp);
	free(f->path);
	*f = (struct afile){ .fd = -1 };
}
