/* metrics.h - loaderd's counters as a Prometheus text-format file (exposition format 0.0.4), in the
 * node_exporter textfile-collector convention: rewritten whole every interval by a rename, so that
 * a reader sees the previous file or the next one, never a part. loader/metrics.c; the metric list
 * is in README.md ("Metrics"). */
#ifndef LOADERD_METRICS_H
#define LOADERD_METRICS_H
#include "loader/srv.h"

#include <stddef.h>

struct ldr_metrics;

/* Start a thread that writes @path from srv_snapshot_take(@s) now and every @interval_ms.
 * Returns 0 or -errno; stop it with ldr_metrics_stop(). @path is copied. */
int ldr_metrics_start(struct srv *s, const char *path, unsigned interval_ms,
		      struct ldr_metrics **out);
/* Stop the thread, then write the file once more (the final counters; @s must still exist).
 * Returns what that write returned: 0 or -errno. NULL ok (returns 0). */
int ldr_metrics_stop(struct ldr_metrics *m);

/* Render @snap into *out (malloc'd, NUL-terminated, *len bytes without the NUL; free() it).
 * Returns 0 or -ENOMEM. */
int ldr_metrics_render(const struct srv_snapshot *snap, char **out, size_t *len);
/* Replace @path with @len bytes of @text: written to a temporary file beside it (common/afile.h:
 * PATH.tmp.PID, a name that does not end in .prom), then renamed over it; not fsynced. Returns 0
 * or -errno. */
int ldr_metrics_write(const char *path, const char *text, size_t len);
/* Write @in as a label value's escaped text, without the quotes (backslash, double quote and
 * newline escaped as \\, \" and \n). Returns the length it needs, like snprintf: @out (@cap
 * bytes, may be 0) holds a NUL-terminated prefix when it is too short. */
size_t ldr_metrics_escape(const char *in, char *out, size_t cap);

#endif
