/* sdnotify.h - the service manager's readiness protocol (systemd's sd_notify, Type=notify): one
 * datagram such as "READY=1" to the unix socket named by $NOTIFY_SOCKET, without libsystemd.
 * loader/sdnotify.c. */
#ifndef LOADERD_SDNOTIFY_H
#define LOADERD_SDNOTIFY_H

/* Send @state ("READY=1", "STOPPING=1", newline-separated assignments) to $NOTIFY_SOCKET: an
 * absolute path, or '@' then a name in the abstract namespace. Returns 1 when sent, 0 when
 * NOTIFY_SOCKET is unset or empty (not run by a service manager), or -errno (-EAFNOSUPPORT for an
 * address of another kind, -ENAMETOOLONG). Any thread; never blocks for long (a datagram). */
int ldr_sd_notify(const char *state);

#endif
