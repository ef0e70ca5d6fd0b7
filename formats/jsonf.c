/* jsonf.c - one value out of a JSON object (jsonf.h), on json-c (Debian's libjson-c): the text is
 * parsed whole by json_tokener with a depth bound, and the top-level key looked up. */
#include "formats/jsonf.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

/* Deeper than this is refused (json-c's tokener keeps a state per level). A WebDataset sample's
 * metadata is a flat object or nearly so. */
#define JSONF_DEPTH 64

static int copy_out(const char *s, size_t len, uint8_t **out, uint32_t *olen)
{
	if (len > UINT32_MAX)
		return -EMSGSIZE;
	*out = malloc(len ? len : 1);
	if (!*out)
		return -ENOMEM;
	memcpy(*out, s, len);
	*olen = (uint32_t)len;
	return 1;
}

int jsonf_get(const uint8_t *j, size_t n, const char *key, uint8_t **out, uint32_t *olen)
{
	return jsonf_get_ex(j, n, key, out, olen, NULL);
}

int jsonf_get_ex(const uint8_t *j, size_t n, const char *key, uint8_t **out, uint32_t *olen,
		 int *is_string)
{
	struct json_tokener *tok;
	struct json_object *root, *val;
	int ret;

	*out = NULL;
	*olen = 0;
	if (n > INT32_MAX)
		return -EBADMSG;
	tok = json_tokener_new_ex(JSONF_DEPTH);
	if (!tok)
		return -ENOMEM;
	root = json_tokener_parse_ex(tok, (const char *)j, (int)n);
	size_t used = (size_t)json_tokener_get_parse_end(tok);
	enum json_tokener_error e = json_tokener_get_error(tok);
	json_tokener_free(tok);
	/* a whole object, and nothing after it but white space */
	int trailing = 0;
	for (size_t i = used; i < n; i++)
		trailing |= !(j[i] == ' ' || j[i] == '\t' || j[i] == '\n' || j[i] == '\r');
	if (!root || e != json_tokener_success || trailing ||
	    !json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		return -EBADMSG;
	}
	if (!json_object_object_get_ex(root, key, &val)) {
		ret = 0;
	} else if (json_object_is_type(val, json_type_string)) {
		if (is_string)
			*is_string = 1;
		ret = copy_out(json_object_get_string(val), (size_t)json_object_get_string_len(val),
			       out, olen);
	} else {
		size_t len;
		if (is_string)
			*is_string = 0;
		const char *s = json_object_to_json_string_length(val, JSON_C_TO_STRING_PLAIN |
								  JSON_C_TO_STRING_NOSLASHESCAPE,
								  &len);
		ret = s ? copy_out(s, len, out, olen) : -ENOMEM;
	}
	json_object_put(root);
	return ret;
}
