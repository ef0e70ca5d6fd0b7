/* tjcheck.h - the one CHECK macro for TurboJPEG calls (STYLE.md: one per library): a failure
 * logs the library's own message with file:line, sets @ret to -EIO and jumps to @label.
 * For tools/ (it logs); include turbojpeg.h and common/log.h first. */
#ifndef LOADERD_TJCHECK_H
#define LOADERD_TJCHECK_H

#define TJCHECK(call, tj, ret, label) do { \
	if ((call) < 0) { \
		LOG_ERROR("%s:%d: %s: %s", __FILE__, __LINE__, #call, tjGetErrorStr2(tj)); \
		(ret) = -EIO; \
		goto label; \
	} \
} while (0)

#endif
