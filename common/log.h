/* log.h - leveled logging to stderr for loader/, trainer/ and tools/ (never shm/ or formats/).
 * LOG_WARN(fmt, ...) checks the level before formatting, so a disabled level costs one compare. */
#ifndef LOADERD_LOG_H
#define LOADERD_LOG_H
#ifdef __cplusplus
extern "C" {
#endif

enum log_level { LOG_LVL_ERROR = 0, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

extern int log_level;          /* messages above this level are dropped; default LOG_LVL_INFO */
extern const char *log_prog;   /* prefix of every line, e.g. "dpack"; default "loaderd" */

/* Parse "error|warn|info|debug" (or 0..3). Returns the level or -EINVAL. */
int log_level_parse(const char *s);
void log_emit(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_AT(lvl, ...) do { if ((lvl) <= log_level) log_emit((lvl), __VA_ARGS__); } while (0)
#define LOG_ERROR(...) LOG_AT(LOG_LVL_ERROR, __VA_ARGS__)
#define LOG_WARN(...)  LOG_AT(LOG_LVL_WARN, __VA_ARGS__)
#define LOG_INFO(...)  LOG_AT(LOG_LVL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) LOG_AT(LOG_LVL_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
