/*
 * gen_text.h — the text of a stream of generated tokens: the served tokenizer's streaming
 * decoder (recur_detok: never half a UTF-8 sequence) followed by the stop strings
 * (stop_match.h). One per generation; every text-producing generation (the native /generate,
 * the OpenAI routes) goes through it, so they all follow the same rules (docs/API.md, generate):
 *
 *   - pushed token by token, it appends to `out` the text that is final now;
 *   - the concatenation of everything appended, srv_gen_text_finish included, is
 *     recur_tokenizer_decode(all pushed ids) cut at the first stop string (the stop string and
 *     everything after it are never released);
 *   - text is held back while it could still begin a stop string, and while a UTF-8 sequence is
 *     unfinished; srv_gen_text_finish releases it (an unfinished sequence as U+FFFD).
 *
 * Not thread-safe: one thread at a time (the worker stepping the generation, or the loop
 * while the generation is not in flight).
 */
#ifndef SRV_GEN_TEXT_H
#define SRV_GEN_TEXT_H

#include <stdint.h>

#include "buf.h"
#include "recur.h"
#include "stop_match.h"

typedef struct {
    recur_detok *detok;
    srv_stop_match stop;
    int ended;            /* finished, or a stop string completed */
} srv_gen_text;

/* For a stream decoded with tok (borrowed, outlives t) and n stop strings stop[i] of len[i]
 * bytes (borrowed; n <= SRV_STOP_MAX). 0, or RECUR_EINVAL / RECUR_ENOMEM (nothing to free). */
int srv_gen_text_init(srv_gen_text *t, const recur_tokenizer *tok, const char *const *stop,
                      const size_t *len, size_t n);
void srv_gen_text_free(srv_gen_text *t);

/* The next generated token: appends its final text to out. Returns 1 when a stop string is
 * complete (the text now ends; nothing more is appended), else 0. An id the tokenizer does not
 * know (a padded vocabulary) has no text. */
int srv_gen_text_push(srv_gen_text *t, int32_t token, proto_buf *out);

/* The stream ends (max_tokens, max_context, cancelled): appends what is held back. Once only;
 * later calls (and a call after a stop) append nothing. Returns 1 when the held text completed
 * a stop string after all (an unfinished sequence became U+FFFD), else 0. */
int srv_gen_text_finish(srv_gen_text *t, proto_buf *out);

#endif /* SRV_GEN_TEXT_H */
