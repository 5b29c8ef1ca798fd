/* responses.c — JSON bodies of non-streamed answers (responses.h). */
#include "responses.h"

#include <string.h>

void proto_model_json(proto_buf *b, const recur_model_info *info, const char *name)
{
    proto_buf_puts(b, "{\"name\":");
    proto_buf_json_str(b, name, strlen(name));
    proto_buf_printf(b,
                     ",\"vocab_size\":%d,\"d_model\":%d,\"n_layers\":%d,\"n_heads\":%d,"
                     "\"head_k\":%d,\"head_v\":%d,\"d_ff\":%d,\"mixers\":[",
                     info->vocab_size, info->d_model, info->n_layers, info->n_heads, info->head_k,
                     info->head_v, info->d_ff);
    for (int i = 0; i < info->n_layers && i < RECUR_MAX_LAYERS; i++) {
        const char *name = recur_mixer_name(info->mixers[i]);
        if (i)
            proto_buf_append(b, ",", 1);
        proto_buf_json_str(b, name, strlen(name));
    }
    proto_buf_printf(b,
                     "],\"tied_embeddings\":%s,\"max_context\":",
                     info->tied_embeddings ? "true" : "false");
    /* a model without softmax layers has no context limit: max_context does not apply */
    if (info->softmax_layers > 0)
        proto_buf_printf(b, "%lld", (long long)info->max_context);
    else
        proto_buf_puts(b, "null");
    proto_buf_printf(b, ",\"n_params\":%lld,\"state_bytes\":%zu,\"fingerprint\":\"%016llx\",\"weights_dtype\":",
                     (long long)info->n_params, info->state_bytes,
                     (unsigned long long)info->fingerprint);
    proto_buf_json_str(b, info->weights_dtype, strnlen(info->weights_dtype, sizeof info->weights_dtype));
    proto_buf_printf(b, ",\"weight_bytes\":%zu,\"state_dtype\":", info->weight_bytes);
    proto_buf_json_str(b, info->state_dtype, strnlen(info->state_dtype, sizeof info->state_dtype));
    proto_buf_puts(b, ",\"weights_origin\":");
    proto_buf_json_str(b, info->weights_origin, strnlen(info->weights_origin, sizeof info->weights_origin));
    proto_buf_puts(b, ",\"prefill_dtype\":");
    proto_buf_json_str(b, info->prefill_dtype, strnlen(info->prefill_dtype, sizeof info->prefill_dtype));
    proto_buf_printf(b, ",\"prefill_bytes\":%zu,\"isa\":\"%s\"}", info->prefill_bytes, recur_isa_name());
}

void proto_session_json(proto_buf *b, const char *id, uint64_t tokens_seen, size_t state_bytes,
                        size_t snapshot_bytes, int pending_ops)
{
    proto_buf_puts(b, "{\"id\":");
    proto_buf_json_str(b, id, strlen(id));
    proto_buf_printf(b, ",\"tokens_seen\":%llu,\"state_bytes\":%zu,\"snapshot_bytes\":%zu,"
                        "\"pending_ops\":%d}",
                     (unsigned long long)tokens_seen, state_bytes, snapshot_bytes, pending_ops);
}

int proto_error_json(proto_buf *b, const char *code, const char *message)
{
    return proto_buf_try_append(b, "{\"error\":{\"code\":", 17) ||
           proto_buf_try_json_str(b, code, strlen(code)) ||
           proto_buf_try_append(b, ",\"message\":", 11) ||
           proto_buf_try_json_str(b, message, strlen(message)) || proto_buf_try_append(b, "}}", 2);
}
