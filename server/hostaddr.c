/* hostaddr.c — resolving --host and the loopback rule (hostaddr.h). */
#include "hostaddr.h"
#include "errf.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>

int srv_sockaddr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

static int numeric(const struct sockaddr *sa, char *out, size_t n)
{
    const void *src = sa->sa_family == AF_INET
                          ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                          : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
    return inet_ntop(sa->sa_family, src, out, (socklen_t)n) ? 0 : -1;
}

int srv_host_resolve(const char *host, srv_host_addr *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!host || !*host)
        return srv_errf(err, errlen, "host is empty");
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return srv_errf(err, errlen, "host \"%.200s\" does not resolve: %s", host,
                        gai_strerror(rc));
    const struct sockaddr *pick = NULL;
    out->all_loopback = 1;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            continue;
        out->n_addresses++;
        if (!srv_sockaddr_is_loopback(ai->ai_addr))
            out->all_loopback = 0;
        if (!pick || (pick->sa_family != AF_INET && ai->ai_family == AF_INET))
            pick = ai->ai_addr;
    }
    rc = pick ? numeric(pick, out->address, sizeof out->address) : -1;
    freeaddrinfo(res);
    if (rc != 0) {
        out->all_loopback = 0;
        return srv_errf(err, errlen, "host \"%.200s\" has no IPv4 or IPv6 address", host);
    }
    return 0;
}
