/*
 * playground.h — GET / (docs/API.md "Playground"): one static page, server/playground.html,
 * embedded at build time (the Makefile turns it into build/gen/playground_html.c, a byte array)
 * and answered as text/html with a strict Content-Security-Policy. No key is needed for it (the
 * key guards /v1/ only); the page holds no secret and asks the user for the key it sends.
 */
#ifndef SRV_PLAYGROUND_H
#define SRV_PLAYGROUND_H

#include <stddef.h>

#include "app.h"
#include "offloop.h"

/* The page's bytes (generated from server/playground.html; not NUL-terminated). */
extern const unsigned char srv_playground_html[];
extern const size_t srv_playground_html_len;

/* Route handler (routes.c's table; signature of its route_fn). */
void srv_playground(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                    srv_body *body);

#endif
