/* fuzz_token.c - libFuzzer target for resume tokens (shm/token.c), which arrive from users'
 * checkpoints: ldc_token_parse must refuse any input cleanly or accept a token that is canonical
 * (sealing it again gives the same bytes) and that matches a job of its own shape. */
#include "shm/token.h"

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
	if (size != sizeof(t) || memcmp(&again, data, sizeof(t)) || memcmp(&again, &t, sizeof(t)))
		abort();
	if (ldc_token_match(&t, &t, why, sizeof(why)) != 0)
		abort();
	return 0;
}
