/* jsonf.h - one value out of a JSON object, for dpack's --field NAME=json:KEY (a WebDataset
 * sample's KEY.json metadata): the value of a top-level key, a string unescaped to its UTF-8
 * bytes, any other value (number, object, array, true, false, null) its text as it stands. A small
 * reader, not a validator: it walks the object's members without recursion (nesting costs a
 * counter, not stack) and refuses what it cannot walk. No allocation but the value's. */
#ifndef LOADERD_JSONF_H
#define LOADERD_JSONF_H
#include <stddef.h>
#include <stdint.h>

/* Top-level key @key (NUL-terminated, compared byte for byte, no escapes) of the JSON object @j
 * (@n bytes, any bytes): into *@out (malloc, free() it) and *@olen. A string's \uXXXX escapes
 * become UTF-8 (surrogate pairs joined; a lone surrogate as its 3 bytes); bytes that are not
 * UTF-8 are kept as they are. Returns 1 found, 0 not there, -EBADMSG not a JSON object this
 * reader can walk, -ENOMEM. The first member of that name wins. */
int jsonf_get(const uint8_t *j, size_t n, const char *key, uint8_t **out, uint32_t *olen);

#endif
