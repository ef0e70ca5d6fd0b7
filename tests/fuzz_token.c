/* fuzz_token.c - libFuzzer target for resume tokens (shm/token.c), which arrive from users'
 * checkpoints: ldc_token_parse must refuse any input cleanly or accept a token that is canonical
 * (sealing it again gives the same bytes; a version 1 token, the same fields) and that matches a
 * job of its own shape. */
#include "shm/token.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ldc_token t, again;
	char why[256];

	if (ldc_token_parse(data, size, &t, why, sizeof(why)) < 0) {
		if (!memchr(why, 0, sizeof(why)) || why[0] == '\0')
			abort();  /* every refusal says why */
		return 0;
	}
	again = t;
	ldc_token_seal(&again);
	if (memcmp(&again, &t, sizeof(t)))
		abort();
	if (size == sizeof(t)) {
		if (memcmp(&again, data, sizeof(t)))
			abort();
	} else if (size == LDC_TOKEN_SIZE_V1) {
		/* a version 1 token: the same fields after the header, up to block and window */
		size_t same = offsetof(struct ldc_token, block) - 8;
		if (memcmp((const uint8_t *)&t + 8, data + 8, same))
			abort();
	} else {
		abort();
	}
	if (ldc_token_match(&t, &t, why, sizeof(why)) != 0)
		abort();
	return 0;
}
