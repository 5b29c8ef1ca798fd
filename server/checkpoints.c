/* checkpoints.c — capture and restore of a session's state; a session's checkpoints
 * (checkpoints.h). */
#include "checkpoints.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state_blob.h"

#define SECTION_MAGIC "RECURCK1"
#define SECTION_HEAD 16 /* magic, u32 count, u32 0 */
#define ENTRY_HEAD (SRV_CKPT_ID_LEN + 16) /* id, u64 tokens_seen, u64 len */

/* ---------------------------------------------------------------- capture / restore */

int srv_state_capture(const srv_session *s, int vocab, uint8_t **out, size_t *len)
{
    return proto_state_write(s->state, s->logits, s->has_logits != 0, vocab, out, len);
}

int srv_state_restore(const recur_model *m, int vocab, srv_session *s, const uint8_t *blob,
                      size_t len, const char **why)
{
    proto_state_fault f;
    int has = 0;
    /* proto_state_load checks everything before it applies anything; the logits go to a
     * scratch copy first so a refused blob leaves s->logits as they were too */
    float *lg = malloc((size_t)vocab * sizeof *lg);
    if (!lg)
        abort();
    if (proto_state_load(m, s->state, vocab, blob, len, lg, &has, &f) != 0) {
        free(lg);
        if (why)
            *why = f.reason;
        return -1;
    }
    memcpy(s->logits, lg, (size_t)vocab * sizeof *lg);
    free(lg);
    s->has_logits = has; /* 1: the constants are recomputed from these logits at the next step */
    s->tokens_seen = recur_state_tokens_seen(s->state);
    s->snapshot_bytes = srv_session_state_bytes(s, vocab);
    return 0;
}

int srv_state_restore_own(const recur_model *m, int vocab, srv_session *s, const uint8_t *blob,
                          size_t len, const char **why)
{
    int has = 0;
    /* logits straight into s: proto_state_load_own checks the framing before it writes
     * anything, and after that nothing can fail */
    if (proto_state_load_own(m, s->state, vocab, blob, len, s->logits, &has) != 0) {
        if (why)
            *why = "format";
        return -1;
    }
    s->has_logits = has;
    s->tokens_seen = recur_state_tokens_seen(s->state);
    s->snapshot_bytes = srv_session_state_bytes(s, vocab);
    return 0;
}

/* ---------------------------------------------------------------- a session's checkpoints */

static int valid_ckpt_id(const char *id)
{
    for (int i = 0; i < SRV_CKPT_ID_LEN; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return id[SRV_CKPT_ID_LEN] == '\0';
}

int srv_ckpt_take(srv_session *s, int vocab, int max, char id_out[SRV_CKPT_ID_LEN + 1])
{
    if (s->n_ckpts >= max)
        return -1;
    srv_ckpt c;
    memset(&c, 0, sizeof c);
    do {
        if (srv_random_hex(c.id, SRV_CKPT_ID_LEN / 2) != 0)
            return -2;
    } while (srv_ckpt_find(s, c.id)); /* 64 random bits: a repeat within a session never happens */
    if (srv_state_capture(s, vocab, &c.blob, &c.len) != 0)
        return -2;
    c.tokens_seen = s->tokens_seen;
    srv_ckpt *a = realloc(s->ckpts, (size_t)(s->n_ckpts + 1) * sizeof *a);
    if (!a)
        abort();
    s->ckpts = a;
    s->ckpts[s->n_ckpts++] = c;
    memcpy(id_out, c.id, sizeof c.id);
    return 0;
}

srv_ckpt *srv_ckpt_find(srv_session *s, const char *id)
{
    for (int i = 0; i < s->n_ckpts; i++)
        if (!strcmp(s->ckpts[i].id, id))
            return &s->ckpts[i];
    return NULL;
}

int srv_ckpt_remove(srv_session *s, const char *id)
{
    srv_ckpt *c = srv_ckpt_find(s, id);
    if (!c)
        return -1;
    free(c->blob);
    size_t i = (size_t)(c - s->ckpts);
    memmove(c, c + 1, ((size_t)s->n_ckpts - i - 1) * sizeof *c);
    s->n_ckpts--;
    return 0;
}

void srv_ckpt_clear(srv_session *s)
{
    for (int i = 0; i < s->n_ckpts; i++)
        free(s->ckpts[i].blob);
    free(s->ckpts);
    s->ckpts = NULL;
    s->n_ckpts = 0;
}

int srv_ckpt_copy(srv_session *dst, const srv_session *src)
{
    if (!src->n_ckpts)
        return 0;
    srv_ckpt *a = calloc((size_t)src->n_ckpts, sizeof *a);
    if (!a)
        return -1;
    for (int i = 0; i < src->n_ckpts; i++) {
        a[i] = src->ckpts[i];
        a[i].blob = malloc(a[i].len);
        if (!a[i].blob) {
            for (int k = 0; k < i; k++)
                free(a[k].blob);
            free(a);
            return -1;
        }
        memcpy(a[i].blob, src->ckpts[i].blob, a[i].len);
    }
    dst->ckpts = a;
    dst->n_ckpts = src->n_ckpts;
    return 0;
}

void srv_ckpt_list_json(const srv_session *s, proto_buf *b)
{
    proto_buf_puts(b, "{\"checkpoints\":[");
    for (int i = 0; i < s->n_ckpts; i++)
        proto_buf_printf(b, "%s{\"checkpoint\":\"%s\",\"tokens_seen\":%llu}", i ? "," : "",
                         s->ckpts[i].id, (unsigned long long)s->ckpts[i].tokens_seen);
    proto_buf_puts(b, "]}");
}

/* ---------------------------------------------------------------- in a session file */

size_t srv_ckpt_section_size(const srv_session *s)
{
    if (!s->n_ckpts)
        return 0;
    size_t n = SECTION_HEAD + 8;
    for (int i = 0; i < s->n_ckpts; i++)
        n += ENTRY_HEAD + s->ckpts[i].len;
    return n;
}

void srv_ckpt_section_write(const srv_session *s, uint8_t *dst)
{
    uint8_t *p = dst;
    memcpy(p, SECTION_MAGIC, 8);
    recur_put_le32(p + 8, (uint32_t)s->n_ckpts);
    recur_put_le32(p + 12, 0);
    p += SECTION_HEAD;
    for (int i = 0; i < s->n_ckpts; i++) {
        const srv_ckpt *c = &s->ckpts[i];
        memcpy(p, c->id, SRV_CKPT_ID_LEN);
        recur_put_le64(p + SRV_CKPT_ID_LEN, c->tokens_seen);
        recur_put_le64(p + SRV_CKPT_ID_LEN + 8, c->len);
        memcpy(p + ENTRY_HEAD, c->blob, c->len);
        p += ENTRY_HEAD + c->len;
    }
    recur_put_le64(p, recur_fnv1a64(RECUR_FNV_OFFSET, dst, (size_t)(p - dst)));
}

size_t srv_ckpt_blob_end(const uint8_t *file, size_t len, int vocab)
{
    size_t core;
    if (recur_snapshot_length(file, len, &core) != 0 || core > len)
        return len; /* the blob's own check reports it */
    size_t tl = proto_state_trailer_size(vocab);
    if (len - core >= 8 && !memcmp(file + core, SECTION_MAGIC, 8))
        return core; /* no logits trailer, then the section */
    if (len - core >= tl + 8 && !memcmp(file + core + tl, SECTION_MAGIC, 8))
        return core + tl;
    return len; /* no section: the whole file is the blob */
}

int srv_ckpt_section_read(srv_session *s, const recur_model *m, int vocab, int max,
                          const uint8_t *sec, size_t len, const char **why)
{
    *why = "checkpoints";
    if (len < SECTION_HEAD + 8 || memcmp(sec, SECTION_MAGIC, 8) || recur_get_le32(sec + 12) != 0)
        return -1;
    if (recur_fnv1a64(RECUR_FNV_OFFSET, sec, len - 8) != recur_get_le64(sec + len - 8)) {
        *why = "checkpoints_checksum";
        return -1;
    }
    uint32_t n = recur_get_le32(sec + 8);
    if (n == 0 || n > (uint32_t)max) {
        *why = "checkpoints_count";
        return -1;
    }
    /* First every check, then take them (a refused section gives s nothing). */
    size_t off = SECTION_HEAD;
    for (uint32_t i = 0; i < n; i++) {
        if (len - 8 - off < ENTRY_HEAD)
            return -1;
        char id[SRV_CKPT_ID_LEN + 1];
        memcpy(id, sec + off, SRV_CKPT_ID_LEN);
        id[SRV_CKPT_ID_LEN] = '\0';
        uint64_t bl = recur_get_le64(sec + off + SRV_CKPT_ID_LEN + 8);
        if (!valid_ckpt_id(id) || bl > len - 8 - off - ENTRY_HEAD)
            return -1;
        const uint8_t *blob = sec + off + ENTRY_HEAD;
        size_t core_len;
        const uint8_t *lg;
        proto_error e;
        if (proto_state_split(blob, (size_t)bl, vocab, &core_len, &lg, &e) != 0 ||
            recur_snapshot_check(m, blob, core_len) != 0) {
            *why = "checkpoints_state";
            return -1;
        }
        off += ENTRY_HEAD + (size_t)bl;
    }
    if (off != len - 8)
        return -1;
    srv_ckpt *a = calloc(n, sizeof *a);
    if (!a)
        abort();
    off = SECTION_HEAD;
    for (uint32_t i = 0; i < n; i++) {
        memcpy(a[i].id, sec + off, SRV_CKPT_ID_LEN);
        a[i].tokens_seen = recur_get_le64(sec + off + SRV_CKPT_ID_LEN);
        a[i].len = (size_t)recur_get_le64(sec + off + SRV_CKPT_ID_LEN + 8);
        a[i].blob = malloc(a[i].len ? a[i].len : 1);
        if (!a[i].blob)
            abort();
        memcpy(a[i].blob, sec + off + ENTRY_HEAD, a[i].len);
        off += ENTRY_HEAD + a[i].len;
    }
    srv_ckpt_clear(s);
    s->ckpts = a;
    s->n_ckpts = (int)n;
    return 0;
}

/* ---------------------------------------------------------------- session files */

int srv_session_file_write(const srv_session *s, int vocab, uint8_t **out, size_t *len)
{
    int rc = proto_state_write(s->state, s->logits, s->has_logits != 0, vocab, out, len);
    size_t sl = srv_ckpt_section_size(s);
    if (rc || !sl)
        return rc;
    uint8_t *b = realloc(*out, *len + sl);
    if (!b) {
        free(*out);
        *out = NULL;
        return RECUR_ENOMEM;
    }
    srv_ckpt_section_write(s, b + *len);
    *out = b;
    *len += sl;
    return 0;
}

int srv_session_file_read(srv_session *s, const recur_model *m, int vocab, int max_ckpts,
                          const uint8_t *buf, size_t len, const char **why)
{
    proto_state_fault f;
    size_t blob_end = srv_ckpt_blob_end(buf, len, vocab); /* then the checkpoints, if any */
    if (proto_state_load(m, s->state, vocab, buf, blob_end, s->logits, &s->has_logits, &f) != 0) {
        *why = f.reason;
        return -1;
    }
    if (blob_end < len &&
        srv_ckpt_section_read(s, m, vocab, max_ckpts, buf + blob_end, len - blob_end, why) != 0)
        return -1;
    s->tokens_seen = recur_state_tokens_seen(s->state);
    s->snapshot_bytes = srv_session_state_bytes(s, vocab);
    return 0;
}
