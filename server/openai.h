/*
 * openai.h — the OpenAI API (docs/API.md "OpenAI API"): POST /v1/completions,
 * POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id}.
 *
 * A completion request is an internal client of the session machinery, not a second one: each
 * prompt becomes an ephemeral session created with the prompt (an SRV_OP_CREATE, prefilled by
 * the scheduler as any create), forked once the prompt is folded for n > 1 (every choice
 * continues from the same state), and generated on (an SRV_OP_GENERATE per choice) through
 * ops.c with a sink (ops.h srv_op_sink) instead of a connection; a session goes when its
 * generation ends (drop_session), or at once when the client leaves. Limits, the API key,
 * queues and metrics are the session API's.
 *
 * The chat template (openai_chat.c) is chosen at start: the chat_template key (a built-in or a
 * Jinja file), else the model folder's tokenizer_config.json, else the built-in "plain".
 */
#ifndef SRV_OPENAI_H
#define SRV_OPENAI_H

#include "app.h"
#include "offloop.h"
#include "openai_requests.h"

/* Route handlers (routes.c's table; signature of its route_fn). */
void srv_openai_completions(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                            srv_body *body);
void srv_openai_models(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                       srv_body *body);
void srv_openai_model(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                      srv_body *body);

/* A connection whose user is an internal client (ops.c tells them apart): the client left, or
 * its write queue drained. */
void srv_openai_on_close(void *client);
void srv_openai_on_drain(void *client);

/* The OpenAI families of /metrics. */
void srv_openai_metrics(const srv_app *app, proto_buf *b);

/* The chat template (openai_chat.c): chosen and test-rendered at start; 0, or -1 after logging
 * why (a template that was named or that the model folder holds and cannot be used). */
int srv_chat_load(srv_app *app);
void srv_chat_free(srv_app *app);
/* proto_render_fn over app->chat (ctx: the srv_app). */
int srv_chat_render(const void *ctx, const proto_chat_msg *msgs, size_t n, char **text,
                    size_t *len, char *err, size_t errlen);

#endif /* SRV_OPENAI_H */
