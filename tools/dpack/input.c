/* input.c - the table of dpack's input formats (see input.h). */
#include "tools/dpack/input.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

extern const struct dpack_input dpack_input_folder, dpack_input_tar, dpack_input_npy;

const struct dpack_input *const dpack_inputs[] = {
	&dpack_input_tar,      /* first: a directory of .tar shards is not an ImageFolder tree */
	&dpack_input_folder,
	&dpack_input_npy,
	NULL,
};

const struct dpack_input *dpack_input_detect(const char *path, const struct stat *st)
{
	for (const struct dpack_input *const *in = dpack_inputs; *in; in++)
		if ((*in)->detect(path, st))
			return *in;
	return NULL;
}

void dpack_input_whats(char *buf, size_t len)
{
	size_t pos = 0;

	buf[0] = '\0';
	for (size_t k = 0; dpack_inputs[k] && pos < len; k++) {
		const char *sep = k == 0 ? "" : dpack_inputs[k + 1] ? ", " : " or ";
		int n = snprintf(buf + pos, len - pos, "%s%s", sep, dpack_inputs[k]->what);
		pos += n > 0 ? (size_t)n : 0;
	}
}

int dpack_has_ext(const char *name, const char *const *exts)
{
	const char *dot = strrchr(name, '.');

	if (!dot)
		return 0;
	for (; *exts; exts++)
		if (!strcasecmp(dot, *exts))
			return 1;
	return 0;
}
