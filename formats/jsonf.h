/* jsonf.h - one value out of a JSON object, for dpack's --field NAME=json:KEY (a WebDataset
 * sample's KEY.json metadata): the value of a top-level key, a string as its UTF-8 bytes
 * (escapes decoded by json-c; bytes that are not UTF-8 kept as they are), any other value
 * (number, object, array, true, false, null) as json-c writes it, compactly. Parsed by json-c
 * (formats/jsonf.c), nesting bounded. */
#ifndef LOADERD_JSONF_H
#define LOADERD_JSONF_H
#include <stddef.h>
#include <stdint.h>

/* Top-level key @key (NUL-terminated) of the JSON object @j (@n bytes, any bytes): into *@out
 * (malloc, free() it) and *@olen. Returns 1 found, 0 not there, -EBADMSG not one JSON object
 * (malformed, another type, text after it, nested deeper than 64), -ENOMEM. Of two members of one
 * name, the last wins (json-c's objects keep one). */
int jsonf_get(const uint8_t *j, size_t n, const char *key, uint8_t **out, uint32_t *olen);
/* The same, and whether the value was a JSON string (*@is_string 1) or another value (0). */
int jsonf_get_ex(const uint8_t *j, size_t n, const char *key, uint8_t **out, uint32_t *olen,
		 int *is_string);

#endif
