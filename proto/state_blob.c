/* state_blob.c — snapshot body with the logits trailer (state_blob.h). */
#include "state_blob.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRAILER_MAGIC "RECURLG1"


/* ---------------------------------------------------------------- faults */

typedef struct {
    int rc;
    const char *code, *reason, *what;
} fault_name;

/* One row per check, in the order they run (docs/API.md errors, docs/OPERATIONS.md reasons). */
static const fault_name FAULTS[] = {
    {RECUR_EFORMAT, "invalid_snapshot", "format", "not a snapshot of this format"},
    {RECUR_ETRUNCATED, "snapshot_truncated", "truncated", "shorter than its header says"},
    {RECUR_ECHECKSUM, "snapshot_checksum", "checksum", "checksum mismatch (a corrupted byte)"},
    {RECUR_EMISMATCH, "snapshot_mismatch", "othermodel", "a snapshot of another model"},
    {RECUR_ECONTEXT, "snapshot_tokens_seen", "tokens",
     "tokens_seen beyond what a session of this model may have seen"},
    {RECUR_ENONFINITE, "snapshot_nonfinite", "nonfinite", "a state value or logit is NaN or infinite"},
    {RECUR_ERANGE, "snapshot_range", "range",
     "a state value is outside +-2^40 (into an f16 state: beyond F16's +-65504), or a linear layer's "
     "normaliser is negative"},
};

static void set_fault(proto_state_fault *f, int rc, const char *detail)
{
    const fault_name *n = &FAULTS[0];
    for (size_t i = 0; i < sizeof FAULTS / sizeof FAULTS[0]; i++)
        if (FAULTS[i].rc == rc)
            n = &FAULTS[i];
    f->code = n->code;
    f->reason = n->reason;
    snprintf(f->message, sizeof f->message, "snapshot rejected: %s; the session is unchanged",
             detail ? detail : n->what);
}

/* ---------------------------------------------------------------- trailer */

size_t proto_state_trailer_size(int vocab)
{
    return 16 + 4 * (size_t)vocab + 8;
}

/* Where the trailer's checksum starts (state_blob.h), for the core of clen >= 48 bytes at core:
 * after a version 4 / 5 core, FNV-1a 64 of the core's own 8 checksum bytes (the lane checksum has
 * no running value to continue). After a version 1-3 core, FNV-1a 64 of the whole core; when the
 * core's checksum holds (core_checked: the caller checks it, before or after, before it trusts a
 * byte) its last 8 bytes are FNV-1a of every byte before them, so the hash continues from that
 * stored value over those 8 bytes alone instead of hashing the ~200 KB core again. */
static uint64_t trailer_seed(const uint8_t *core, size_t clen, int core_checked)
{
    const uint8_t *sum = core + clen - 8;
    if (recur_snapshot_lane_checksum(core, clen))
        return recur_fnv1a64(RECUR_FNV_OFFSET, sum, 8);
    if (core_checked)
        return recur_fnv1a64(recur_get_le64(sum), sum, 8);
    return recur_fnv1a64(RECUR_FNV_OFFSET, core, clen);
}

/* The trailer at dst, its checksum continuing h_core = trailer_seed of the core before it. */
static void trailer_write_h(uint8_t *dst, uint64_t h_core, const float *logits, int vocab)
{
    memcpy(dst, TRAILER_MAGIC, 8);
    recur_put_le32(dst + 8, (uint32_t)vocab);
    recur_put_le32(dst + 12, 0);
    for (int i = 0; i < vocab; i++) { /* little-endian fp32 regardless of host order */
        uint32_t bits;
        memcpy(&bits, &logits[i], 4);
        recur_put_le32(dst + 16 + 4 * (size_t)i, bits);
    }
    size_t n = 16 + 4 * (size_t)vocab;
    recur_put_le64(dst + n, recur_fnv1a64(h_core, dst, n));
}

void proto_state_trailer_write(uint8_t *dst, const uint8_t *core, size_t core_len,
                               const float *logits, int vocab)
{
    trailer_write_h(dst, trailer_seed(core, core_len, 0), logits, vocab);
}

/* Where the core ends: its own length when the header says one that fits, else the whole body. */
static size_t core_length(const uint8_t *body, size_t len)
{
    size_t total;
    if (recur_snapshot_length(body, len, &total) != RECUR_OK || total > len)
        return len;
    return total;
}

/* The trailer after a core of clen bytes: 0 (or none), else a RECUR_E* code and *detail.
 * core_checked_after: the caller checks the core's own checksum before it trusts any byte (a
 * fault there outranks this one), so trailer_seed may take the core's stored checksum as it is
 * (an old core's FNV over ~200 KB again was a fifth of the loop's time per resume from Redis). */
static int trailer_check(const uint8_t *body, size_t len, size_t clen, int vocab,
                         int core_checked_after, const char **detail)
{
    size_t tlen = proto_state_trailer_size(vocab);
    if (len - clen != tlen || memcmp(body + clen, TRAILER_MAGIC, 8) != 0 ||
        recur_get_le32(body + clen + 8) != (uint32_t)vocab || recur_get_le32(body + clen + 12) != 0) {
        *detail = "bytes after the snapshot are not a logits trailer for this model";
        return RECUR_EFORMAT;
    }
    uint64_t h = recur_fnv1a64(trailer_seed(body, clen, core_checked_after), body + clen, tlen - 8);
    if (h != recur_get_le64(body + clen + tlen - 8)) {
        *detail = "snapshot logits trailer checksum mismatch";
        return RECUR_ECHECKSUM;
    }
    /* The value rule of the state (a NaN would fail every later sampling step of the session,
     * an infinity would make its logprobs null) */
    int rc = recur_values_check(body + clen + 16, (size_t)vocab);
    if (rc)
        *detail = rc == RECUR_ENONFINITE ? "snapshot logits trailer holds a non-finite value"
                                         : "snapshot logits trailer holds a value outside +-2^40";
    return rc;
}

int proto_state_split(const uint8_t *body, size_t len, int vocab, size_t *core_len,
                      const uint8_t **logits, proto_error *err)
{
    size_t clen = core_length(body, len);
    *core_len = len;
    *logits = NULL;
    if (clen == len)
        return 0;
    const char *detail = NULL;
    int rc = trailer_check(body, len, clen, vocab, 0, &detail);
    if (rc) {
        proto_state_fault f;
        set_fault(&f, rc, detail);
        err->status = 400;
        snprintf(err->code, sizeof err->code, "%s", f.code);
        snprintf(err->message, sizeof err->message, "%s", detail);
        return -1;
    }
    *core_len = clen;
    *logits = body + clen + 16;
    return 0;
}

/* ---------------------------------------------------------------- both directions */

int proto_state_write(const recur_state *s, const float *logits, int has_logits, int vocab,
                      uint8_t **out, size_t *out_len)
{
    size_t core = recur_snapshot_size(s);
    if (core == 0)
        return RECUR_EINVAL;
    int rc = has_logits ? recur_values_check(logits, (size_t)vocab) : 0;
    if (rc)
        return rc;
    size_t extra = has_logits ? proto_state_trailer_size(vocab) : 0;
    uint8_t *buf = malloc(core + extra);
    if (!buf)
        return RECUR_ENOMEM;
    size_t written = 0;
    rc = recur_snapshot_write(s, buf, core, &written);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    if (extra) {
        trailer_write_h(buf + written, trailer_seed(buf, written, 1), logits, vocab); /* written: its sum holds */
        written += extra;
    }
    *out = buf;
    *out_len = written;
    return 0;
}

int proto_state_load(const recur_model *m, recur_state *s, int vocab, const uint8_t *body,
                     size_t len, float *logits, int *has_logits, proto_state_fault *f)
{
    size_t clen = core_length(body, len);
    /* The trailer first (it stands apart from the snapshot's bytes), then recur_snapshot_read,
     * which checks the snapshot once before it writes s (a second recur_snapshot_check before it
     * was a third of a resume from Redis: the checksum and every value, twice). A snapshot
     * fault outranks a trailer fault: on a bad trailer the snapshot is checked to say which. */
    const char *detail = NULL;
    int rc = clen < len ? trailer_check(body, len, clen, vocab, 1, &detail) : 0;
    if (rc) {
        int src = recur_snapshot_check(m, body, clen);
        if (src) {
            set_fault(f, src, NULL);
            return -1;
        }
        set_fault(f, rc, detail);
        if (rc == RECUR_EFORMAT)
            f->reason = "trailer";
        return -1;
    }
    rc = recur_snapshot_read(s, body, clen); /* on any error s is unchanged */
    if (rc) {
        set_fault(f, rc, NULL);
        return -1;
    }
    if (clen < len) {
        memcpy(logits, body + clen + 16, (size_t)vocab * sizeof(float));
        *has_logits = 1;
    } else {
        *has_logits = 0;
    }
    return 0;
}

int proto_state_load_own(const recur_model *m, recur_state *s, int vocab, const uint8_t *body,
                         size_t len, float *logits, int *has_logits)
{
    size_t clen = core_length(body, len);
    size_t tlen = proto_state_trailer_size(vocab);
    if (clen < len && (len - clen != tlen || memcmp(body + clen, TRAILER_MAGIC, 8) != 0))
        return -1;
    if (recur_snapshot_read_own(s, body, clen) != 0)
        return -1;
    *has_logits = clen < len;
    if (clen < len)
        memcpy(logits, body + clen + 16, (size_t)vocab * sizeof(float));
    return 0;
}

const char *proto_state_toolarge_reason(const recur_model *m, const uint8_t *head, size_t n)
{
    return recur_snapshot_check(m, head, n) == RECUR_EMISMATCH ? "othermodel" : "toolarge";
}

/* A state of this model held as fp32, whatever its state dtype: a snapshot of any dtype is at
 * most this (the softmax KV rows are fp32 in every dtype, the recurrent values 2 or 4 bytes). */
static size_t state_bytes_f32(const recur_model_info *info)
{
    size_t kv = (size_t)info->softmax_layers * (size_t)info->max_context * (size_t)info->n_heads *
                (size_t)(info->head_k + info->head_v) * 4;
    size_t rec = info->state_bytes - kv;
    return strcmp(info->state_dtype, "F32") && info->state_dtype[0] ? kv + 2 * rec : info->state_bytes;
}

size_t proto_state_max_body(const recur_model_info *info)
{
    return state_bytes_f32(info) + PROTO_STATE_BODY_SLACK + 8 * (size_t)info->vocab_size;
}
