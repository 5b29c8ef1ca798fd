/*
 * hostaddr.h — the address recurd listens on: --host is an IP literal or a name, resolved once at
 * start (getaddrinfo). The loopback rule (a non-loopback host needs api_key or
 * allow_insecure_bind) looks at every address the name resolves to, never at the name itself.
 */
#ifndef SRV_HOSTADDR_H
#define SRV_HOSTADDR_H

#include <stddef.h>
#include <sys/socket.h>

typedef struct {
    char address[64];  /* numeric form of the address to bind (the first IPv4 one, else the first) */
    int n_addresses;   /* addresses the host resolved to */
    int all_loopback;  /* 1 when every one of them is a loopback address */
} srv_host_addr;

/* 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. */
int srv_sockaddr_is_loopback(const struct sockaddr *sa);
/* 0, or -1 with err naming the host and the resolver's reason. */
int srv_host_resolve(const char *host, srv_host_addr *out, char *err, size_t errlen);

#endif /* SRV_HOSTADDR_H */
