/* fieldesc.h - one way to print a sample's aux fields (a caption, metadata: bytes, UTF-8 or not)
 * on a line of words: " NAME=BYTES" per field, printable ASCII as it is but for backslash, '='
 * and space, any other byte as \xNN. What ldcat --fields and the trainer's --log-samples write,
 * so that one reader (tests/it_text.sh) parses both. */
#ifndef LOADERD_FIELDESC_H
#define LOADERD_FIELDESC_H
#include <stdint.h>
#include <stdio.h>

/* " @name=" then @n bytes of @p, escaped, to @f. */
void fieldesc_put(FILE *f, const char *name, const uint8_t *p, uint32_t n);

#endif
