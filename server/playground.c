/*
 * playground.c — GET / answers the embedded playground page (playground.h).
 */
#include "playground.h"

/* The page's scripts and styles are inline (one file, no build step at run time), so
 * 'unsafe-inline' is allowed for those two alone; it may fetch only this origin (the API), loads
 * no image, font, frame or plugin, and may not be framed. */
#define PLAYGROUND_HEADERS                                                                      \
    "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; "                \
    "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; "   \
    "form-action 'none'; frame-ancestors 'none'\r\n"                                            \
    "X-Content-Type-Options: nosniff\r\n"                                                       \
    "Referrer-Policy: no-referrer\r\n"                                                          \
    "Cache-Control: no-cache\r\n"

void srv_playground(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                    srv_body *body)
{
    srv_respond(c, 200, "text/html; charset=utf-8", srv_playground_html, srv_playground_html_len,
                PLAYGROUND_HEADERS);
}
