/*
 * sd_notify.h — tell systemd (Type=notify units, docs/OPERATIONS.md "systemd") that recurd is
 * ready or stopping, by the protocol of sd_notify(3), without libsystemd.
 */
#ifndef SRV_SD_NOTIFY_H
#define SRV_SD_NOTIFY_H

/* Send state (e.g. "READY=1", "STOPPING=1") as one datagram to the AF_UNIX socket named by
 * $NOTIFY_SOCKET: a path, or a name in the abstract namespace when it starts with '@'.
 * Not under systemd (the variable unset): nothing, 0. Otherwise 0 sent, -1 not (logged). */
int srv_sd_notify(const char *state);

#endif /* SRV_SD_NOTIFY_H */
