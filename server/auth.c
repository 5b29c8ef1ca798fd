/* auth.c — the API key check (auth.h). */
#include "auth.h"

#include <string.h>
#include <strings.h>

int srv_auth_bearer_ok(const char *key, const char *authorization)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return 0;
    const char *tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    size_t kl = strlen(key), tl = strlen(tok);
    while (tl > 0 && (tok[tl - 1] == ' ' || tok[tl - 1] == '\t'))
        tl--;
    volatile unsigned char diff = (unsigned char)(kl != tl);
    for (size_t i = 0; i < kl; i++) {
        unsigned char t = i < tl ? (unsigned char)tok[i] : 0;
        diff |= (unsigned char)(t ^ (unsigned char)key[i]);
    }
    return diff == 0;
}

int srv_auth_check(const srv_app *app, const srv_request *req, srv_refusal *r)
{
    /* OPTIONS (a CORS preflight) never carries credentials; it reveals the methods alone */
    if (!app->cfg.api_key[0] || strncmp(req->path, "/v1/", 4) != 0 || !strcmp(req->method, "OPTIONS") ||
        srv_auth_bearer_ok(app->cfg.api_key, req->authorization))
        return 0;
    return srv_auth_refuse(r, "missing or wrong API key (Authorization: Bearer KEY)");
}

int srv_auth_refuse(srv_refusal *r, const char *message)
{
    r->status = 401;
    r->code = "unauthorized";
    r->message = message;
    r->extra_headers = "WWW-Authenticate: Bearer\r\n";
    return 1;
}

int srv_app_on_head(const srv_request *head, srv_refusal *r, void *app)
{
    return srv_auth_check(app, head, r);
}
