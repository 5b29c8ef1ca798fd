/* state.c — one session's state (docs/MODEL.md "Session state").
 *
 * The struct and every recurrent layer's S (and z) are one allocation. A softmax layer's KV cache
 * is reserved at max_context as its own anonymous mapping (not calloc: once glibc's dynamic mmap
 * threshold has risen, a large calloc comes from the heap and is memset, touching every page), so
 * only the rows a session actually uses are ever touched; reset hands the used pages back to the
 * kernel (only rows < tokens_seen are live), and copy copies live rows only.
 * The recurrent block holds fp32 values (rec) or, for a model whose state dtype is a half, 16-bit
 * halves (hrec: state_dtype.h; a step widens a layer's part to fp32 and rounds it back). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "model_internal.h"

static size_t kv_bytes(const recur_model *m, int k)
{
    size_t per = (size_t)m->cfg.n_heads * (size_t)(k ? m->cfg.head_k : m->cfg.head_v);
    return (size_t)m->cfg.max_context * per * sizeof(float);
}

static float *kv_map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Give back the pages of the first `used` bytes (they read as zeros afterwards; pages never
 * touched cost nothing). */
static void kv_release(float *p, size_t used)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t n = (used + page - 1) / page * page;
    if (p && n) madvise(p, n, MADV_DONTNEED);
}

int recur_state_create(const recur_model *m, recur_state **out)
{
    if (!m || !out) return RECUR_EINVAL;
    size_t head = (sizeof(recur_state) + 63) / 64 * 64;
    recur_state *s = calloc(1, head + recur__rec_bytes(m));
    if (!s) return RECUR_ENOMEM;
    s->m = m;
    s->dtype = m->sdtype;
    if (s->dtype == RECUR_STATE_F32) s->rec = (float *)((char *)s + head);
    else s->hrec = (uint16_t *)((char *)s + head);
    s->kbytes = kv_bytes(m, 1);
    s->vbytes = kv_bytes(m, 0);
    const recur_config *c = &m->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        if (m->layers[l].kind != RECUR_MIXER_SOFTMAX) continue;
        s->kcache[l] = kv_map(s->kbytes);
        s->vcache[l] = kv_map(s->vbytes);
        if (!s->kcache[l] || !s->vcache[l]) { recur_state_destroy(s); return RECUR_ENOMEM; }
    }
    *out = s;
    return RECUR_OK;
}

/* Needs nothing of the model: a state may outlive it (garbage-collected bindings). */
void recur_state_destroy(recur_state *s)
{
    if (!s) return;
    for (int l = 0; l < RECUR_MAX_LAYERS; l++) {
        if (s->kcache[l]) munmap(s->kcache[l], s->kbytes);
        if (s->vcache[l]) munmap(s->vcache[l], s->vbytes);
    }
    free(s);
}

void recur_state_reset(recur_state *s)
{
    if (!s) return;
    const recur_model *m = s->m;
    memset(recur__state_rec(s), 0, recur__state_rec_bytes(s));
    /* the whole mapping, not only the live rows: a snapshot read may have shortened the live part */
    for (int l = 0; l < m->cfg.n_layers; l++) {
        kv_release(s->kcache[l], s->kbytes);
        kv_release(s->vcache[l], s->vbytes);
    }
    s->tokens_seen = 0;
}

int recur_state_copy(recur_state *dst, const recur_state *src)
{
    if (!dst || !src) return RECUR_EINVAL;
    if (dst->m != src->m || dst->dtype != src->dtype) return RECUR_EMISMATCH;
    if (dst == src) return RECUR_OK;
    const recur_model *m = src->m;
    memcpy(recur__state_rec(dst), recur__state_rec(src), recur__state_rec_bytes(src));
    size_t HK = (size_t)m->cfg.n_heads * m->cfg.head_k, HV = (size_t)m->cfg.n_heads * m->cfg.head_v;
    size_t live = (size_t)src->tokens_seen;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        if (!src->kcache[l]) continue;
        memcpy(dst->kcache[l], src->kcache[l], live * HK * sizeof(float));
        memcpy(dst->vcache[l], src->vcache[l], live * HV * sizeof(float));
    }
    dst->tokens_seen = src->tokens_seen;
    return RECUR_OK;
}

uint64_t recur_state_tokens_seen(const recur_state *s)
{
    return s ? s->tokens_seen : 0;
}

size_t recur_state_bytes_used(const recur_state *s)
{
    if (!s) return 0;
    const recur_model *m = s->m;
    size_t HK = (size_t)m->cfg.n_heads * m->cfg.head_k, HV = (size_t)m->cfg.n_heads * m->cfg.head_v;
    size_t live = m->n_softmax ? (size_t)s->tokens_seen : 0;
    return recur__state_rec_bytes(s) + (size_t)m->n_softmax * live * (HK + HV) * sizeof(float);
}

size_t recur_state_checkpoint_bytes(const recur_state *s)
{
    return s ? sizeof(uint64_t) + recur__state_rec_bytes(s) : 0;
}

void recur_state_checkpoint(const recur_state *s, void *buf)
{
    memcpy(buf, &s->tokens_seen, sizeof(uint64_t));
    memcpy((char *)buf + sizeof(uint64_t), recur__state_rec(s), recur__state_rec_bytes(s));
}

void recur_state_rollback(recur_state *s, const void *buf)
{
    memcpy(&s->tokens_seen, buf, sizeof(uint64_t));
    memcpy(recur__state_rec(s), (const char *)buf + sizeof(uint64_t), recur__state_rec_bytes(s));
}
