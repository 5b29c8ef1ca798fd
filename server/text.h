/*
 * text.h — the served model's tokenizer (docs/API.md §Text and tokenizers): loaded at start
 * from the model folder (tokenizer.json or rwkv_vocab_v20230424.txt; none: the byte tokenizer,
 * today's behaviour unchanged), and what the routes need of it.
 */
#ifndef SRV_TEXT_H
#define SRV_TEXT_H

#include "app.h"
#include "buf.h"
#include "requests.h"

/* Load app->tok for app->cfg (after the model). 0, or -1 after logging why. */
int srv_text_load(srv_app *app);
void srv_text_free(srv_app *app);

/* 1 when text fields go through a real tokenizer (not the byte tokenizer). */
int srv_text_active(const srv_app *app);

/* The ids a generation may sample and a top list may show: ids < this (the tokenizer's
 * vocab_size) when a real tokenizer's vocabulary is smaller than the model's padded one, else 0
 * (all ids; the byte tokenizer keeps today's behaviour). */
int srv_text_sample_limit(const srv_app *app);

/* The encode hook of proto_limits for app (NULL encode for the byte tokenizer). */
void srv_text_limits(const srv_app *app, proto_limits *lim);

/* ,"tokenizer":{"kind","vocab_size","special_tokens":[{"id","content"}...]} appended to b
 * (a JSON object member, leading comma included). */
void srv_text_model_json(const srv_app *app, proto_buf *b);

#endif /* SRV_TEXT_H */
