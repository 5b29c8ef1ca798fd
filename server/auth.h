/*
 * auth.h — the API key (config api_key, --api-key, RECURD_API_KEY): which requests need it and the
 * 401 that refuses them. One rule for both places it is applied: a request's head, before its
 * body is read (the HTTP layer's on_head, so no 100 Continue invites an unauthenticated upload),
 * and every complete request (routes.c).
 */
#ifndef SRV_AUTH_H
#define SRV_AUTH_H

#include "app.h"
#include "http.h"

/* Constant-time check of "Bearer TOKEN" against key (time depends on the key's length only). */
int srv_auth_bearer_ok(const char *key, const char *authorization);
/* 0 when req may go on (no api_key, a path outside /v1/, or the right key); otherwise fills *r
 * with the 401 (code "unauthorized", WWW-Authenticate: Bearer) and returns 1. */
int srv_auth_check(const srv_app *app, const srv_request *req, srv_refusal *r);
/* Fills *r with the 401 (code "unauthorized", WWW-Authenticate: Bearer) saying message; returns 1.
 * The one place that refusal is written (the test and fuzz servers refuse their /locked with it). */
int srv_auth_refuse(srv_refusal *r, const char *message);
/* srv_http_callbacks.on_head: srv_auth_check on the head of a request with a body. */
int srv_app_on_head(const srv_request *head, srv_refusal *r, void *app);

#endif /* SRV_AUTH_H */
