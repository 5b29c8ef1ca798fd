/*
 * fuzz_http_app.h — what the two targets of the HTTP layer (fuzz_http.c, fuzz_http_async.c)
 * share: the /locked refusal from the head, no-op close and drain callbacks, and small limits
 * that inputs of a few hundred bytes reach.
 */
#ifndef FUZZ_HTTP_APP_H
#define FUZZ_HTTP_APP_H

#include <stdint.h>
#include <string.h>

#include "auth.h"
#include "http.h"

/* A request with a body to /locked is refused from its head (as a wrong API key is): 401 before
 * any 100 Continue or body byte, then the connection closes. */
static int on_head(const srv_request *head, srv_refusal *r, void *app)
{
    if (strcmp(head->path, "/locked"))
        return 0;
    return srv_auth_refuse(r, "locked");
}

static void on_close(srv_conn *c, void *app) {}
static void on_drain(srv_conn *c, void *app) {}

/* The defaults with small input limits (request line 256 B, headers 1 KiB / 16, body 4 KiB) and
 * every timeout at timeout_ms. */
static void fuzz_small_limits(srv_http_limits *l, uint64_t timeout_ms)
{
    srv_http_limits_default(l);
    l->max_request_line = 256;
    l->max_header_bytes = 1024;
    l->max_headers = 16;
    l->max_body = 4096;
    l->header_timeout = l->body_idle_timeout = l->request_timeout = timeout_ms;
    l->keepalive_idle = l->send_stall_timeout = timeout_ms;
}

#endif
