/* fuzz_requests.c — libFuzzer target for proto/: JSON request decoding and the state-blob
 * splitter. The first byte picks the decoder (and a vocab size), the rest is the body.
 * Invariants: a decoder either accepts with every token in [0, vocab) and no more than the limit,
 * or rejects with 400/422 and a snake_case code, never crashing or leaking. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "requests.h"
#include "state_blob.h"

static void check_error(const proto_error *e)
{
    if (e->status != 400 && e->status != 422)
        abort();
    if (e->code[0] == '\0')
        abort();
    for (const char *p = e->code; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || *p == '_'))
            abort();
}

static void check_tokens(const proto_tokens_req *r, const proto_limits *lim)
{
    if (r->n > lim->max_tokens_per_request)
        abort();
    for (size_t i = 0; i < r->n; i++)
        if (r->tokens[i] < 0 || r->tokens[i] >= lim->vocab_size)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    const uint8_t *body = data + 1;
    size_t len = size - 1;
    /* The server hands cJSON a NUL-terminated copy; do the same (and test without the NUL). */
    uint8_t *copy = malloc(len + 1);
    if (!copy)
        return 0;
    memcpy(copy, body, len);
    copy[len] = 0;
    proto_limits lim = {.vocab_size = (sel & 0x10) ? 100 : 256, .max_tokens_per_request = (sel & 0x20) ? 4 : 64};
    proto_error e;
    switch (sel & 3) {
    case 0:   /* POST .../tokens */
    case 1: { /* POST /v1/sessions */
        proto_tokens_req r;
        int tokens = (sel & 3) == 0;
        int rc = tokens ? proto_decode_tokens_req(copy, len, &lim, &r, &e)
                        : proto_decode_create_req(copy, len, &lim, &r, &e);
        if (rc == 0) {
            check_tokens(&r, &lim);
            if (tokens && (r.top_k < 0 || r.top_k > PROTO_MAX_TOP_K || !r.present))
                abort();
            proto_tokens_req_free(&r);
        } else {
            check_error(&e);
        }
        break;
    }
    case 2: {
        proto_generate_req g;
        if (proto_decode_generate_req(copy, len, &lim, &g, &e) == 0) {
            if (g.max_tokens < 0 || (size_t)g.max_tokens > lim.max_tokens_per_request ||
                !(g.temperature >= 0) || !(g.top_p > 0 && g.top_p <= 1) || g.top_k < 0 ||
                g.top_k > lim.vocab_size || g.n_stop > PROTO_MAX_STOP)
                abort();
            for (size_t i = 0; i < g.n_stop; i++)
                if (g.stop_len[i] == 0 || g.stop_len[i] > PROTO_MAX_STOP_BYTES)
                    abort();
        } else {
            check_error(&e);
        }
        break;
    }
    case 3: {
        size_t core;
        const uint8_t *lg;
        if (proto_state_split(body, len, 4, &core, &lg, &e) == 0) {
            if (core > len || (lg && (lg < body || lg + 16 > body + len)))
                abort();
        } else if (e.status != 400) {
            abort();
        }
        if (proto_decode_empty_req(copy, len, &e) != 0)
            check_error(&e);
        proto_rollback_req rb; /* POST .../rollback */
        if (proto_decode_rollback_req(copy, len, &rb, &e) == 0) {
            size_t n = strlen(rb.checkpoint);
            if (n == 0 || n >= sizeof rb.checkpoint)
                abort();
        } else {
            check_error(&e);
        }
        break;
    }
    }
    free(copy);
    return 0;
}
