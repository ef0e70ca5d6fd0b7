/* fieldesc.c - aux fields on a line of words (fieldesc.h). */
#include "common/fieldesc.h"

void fieldesc_put(FILE *f, const char *name, const uint8_t *p, uint32_t n)
{
	fprintf(f, " %s=", name);
	for (uint32_t i = 0; i < n; i++) {
		if (p[i] > ' ' && p[i] < 0x7f && p[i] != '\\' && p[i] != '=')
			putc(p[i], f);
		else
			fprintf(f, "\\x%02x", p[i]);
	}
}
