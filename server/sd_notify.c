/* sd_notify.c — the readiness datagram of sd_notify(3) (sd_notify.h). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "sd_notify.h"

int srv_sd_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !path[0])
        return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof sa.sun_path || (path[0] != '/' && path[0] != '@')) {
        srv_log(SRV_LOG_WARN, "sd_notify_failed", "\"error\":\"NOTIFY_SOCKET is not a usable address\"");
        return -1;
    }
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace: the length, not a NUL, ends the name */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ssize_t sent = fd < 0 ? -1 : sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    if (fd >= 0)
        close(fd);
    if (sent < 0) {
        srv_log(SRV_LOG_WARN, "sd_notify_failed", "\"error\":\"send to NOTIFY_SOCKET failed\"");
        return -1;
    }
    return 0;
}
