/* step_fill.c - one step of a server's callbacks on this thread (step_fill.h). */
#include "tests/step_fill.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int step_fill(const struct srv_ops *ops, void *worker, struct srv_step *st, uint32_t batch,
	      uint32_t task, struct ring_slot *slot, struct srv_fill *out)
{
	struct srv_fill f;
	int ret;

	memset(out, 0, sizeof(*out));
	st->count = st->slot_flags = 0;
	st->ids = calloc(batch ? batch : 1, sizeof(*st->ids));
	st->flags = calloc(batch ? batch : 1, sizeof(*st->flags));
	st->labels = calloc(batch ? batch : 1, sizeof(*st->labels));
	st->held = calloc(batch ? batch : 1, sizeof(*st->held));
	st->nheld = 0;
	ret = st->ids && st->flags && st->labels && st->held ? 0 : -ENOMEM;
	if (ret == 0)
		ret = ops->step_open(ops->ctx, worker, st, out->why, sizeof(out->why));
	int opened = ret == 0;
	if (ret == 0 && st->count > batch)
		ret = -EPROTO;
	for (uint32_t b = 0; ret == 0 && b < st->count; b = f.end) {
		memset(&f, 0, sizeof(f));
		f.step = st;
		f.begin = b;
		f.end = task && st->count - b > task ? b + task : st->count;
		f.slot = slot;
		if (f.end < st->count) {  /* as a worker does: the next task's reads start now */
			f.next_step = st;
			f.next_begin = f.end;
			f.next_end = task && st->count - f.end > task ? f.end + task : st->count;
		}
		ret = ops->fill(ops->ctx, worker, &f);
		for (unsigned k = 0; k < SRV_PHASES_MAX; k++)
			out->phase_ns[k] += f.phase_ns[k];
		for (uint32_t i = 0; i < f.nbad_ids && out->nbad_ids < 8; i++)
			out->bad_ids[out->nbad_ids++] = f.bad_ids[i];
		out->bad += f.bad;
		if (ret < 0)
			memcpy(out->why, f.why, sizeof(out->why));
	}
	if (ret == 0) {
		memcpy(slot->ids, st->ids, st->count * sizeof(*st->ids));
		memcpy(slot->flags, st->flags, st->count * sizeof(*st->flags));
		memcpy(slot->labels, st->labels, st->count * sizeof(*st->labels));
	}
	if (opened && ops->step_release)  /* as the server does once the step is published */
		ops->step_release(ops->ctx, worker, st);
	free(st->ids);
	free(st->flags);
	free(st->labels);
	free(st->held);
	st->held = NULL;
	st->ids = NULL;
	st->flags = NULL;
	st->labels = NULL;
	return ret;
}
