/* tokenizer_decode.c — ids -> text, one id at a time.
 *
 * Each id becomes bytes through the decoder steps that act per token (ByteLevel: the vocabulary
 * is already raw bytes; ByteFallback: <0xXX> -> that byte; Replace; Strip; Metaspace: the
 * replacement becomes a space and the stream's first token loses a leading space). After Fuse
 * only Strip may follow (tokenizer_json.c), and it acts on the start of the whole stream. The
 * bytes go through one WHATWG UTF-8 decoder that holds an unfinished sequence and replaces an
 * invalid one by U+FFFD; recur_tokenizer_decode is the same stream pushed at once, so a stream's
 * concatenation equals the one-shot decode by construction. Without a decoder, tokens are
 * joined with a space (the reference's fallback). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

struct recur_detok {
    const recur_tokenizer *t;
    size_t pushed;
    int strip_left;          /* stream-level Strip: leading content characters still to drop */
    const tk_decoder *strip; /* that Strip step */
    int need, seen;          /* WHATWG UTF-8 decoder state */
    unsigned char lo, hi, pend[4];
    tk_buf out, a, b;
};

int recur_detok_new(const recur_tokenizer *t, recur_detok **out)
{
    if (!t || !out) return RECUR_EINVAL;
    recur_detok *d = calloc(1, sizeof *d);
    if (!d) return RECUR_ENOMEM;
    d->t = t;
    d->lo = 0x80;
    d->hi = 0xBF;
    if (t->hf) {
        int fused = 0;
        for (size_t i = 0; i < t->hf->n_dc; i++) {
            const tk_decoder *x = &t->hf->dc[i];
            if (x->kind == TK_DC_FUSE) fused = 1;
            else if (fused && x->kind == TK_DC_STRIP && x->start > 0 && !d->strip) { d->strip = x; d->strip_left = x->start; }
        }
    }
    *out = d;
    return 0;
}

void recur_detok_free(recur_detok *d)
{
    if (!d) return;
    tk_buf_free(&d->out);
    tk_buf_free(&d->a);
    tk_buf_free(&d->b);
    free(d);
}

/* a complete character (or U+FFFD) leaves the decoder */
static int emit(recur_detok *d, const void *c, size_t n)
{
    if (d->strip_left > 0) {
        if (n == d->strip->a_len && !memcmp(c, d->strip->a, n)) { d->strip_left--; return 0; }
        d->strip_left = 0;
    }
    return tk_buf_put(&d->out, c, n);
}

static int feed(recur_detok *d, const unsigned char *s, size_t n)
{
    static const char fffd[] = "\xEF\xBF\xBD";
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        int rc = 0;
        if (!d->need) {
            if (c < 0x80) {
                /* a run of ASCII at once */
                size_t j = i;
                while (j < n && s[j] < 0x80 && d->strip_left <= 0) j++;
                if (j > i) { if (tk_buf_put(&d->out, s + i, j - i)) return RECUR_ENOMEM; i = j; continue; }
                rc = emit(d, s + i, 1);
            } else if (c >= 0xC2 && c <= 0xDF) { d->need = 1; d->pend[0] = c; }
            else if (c >= 0xE0 && c <= 0xEF) { d->need = 2; d->pend[0] = c; if (c == 0xE0) d->lo = 0xA0; if (c == 0xED) d->hi = 0x9F; }
            else if (c >= 0xF0 && c <= 0xF4) { d->need = 3; d->pend[0] = c; if (c == 0xF0) d->lo = 0x90; if (c == 0xF4) d->hi = 0x8F; }
            else rc = emit(d, fffd, 3);
            if (rc) return rc;
            i++;
            continue;
        }
        if (c < d->lo || c > d->hi) {
            d->need = d->seen = 0;
            d->lo = 0x80;
            d->hi = 0xBF;
            if (emit(d, fffd, 3)) return RECUR_ENOMEM;
            continue; /* the byte starts over */
        }
        d->lo = 0x80;
        d->hi = 0xBF;
        d->pend[++d->seen] = c;
        if (d->seen == d->need) {
            rc = emit(d, d->pend, (size_t)d->need + 1);
            d->need = d->seen = 0;
            if (rc) return rc;
        }
        i++;
    }
    return 0;
}

static int is_byte_token(const char *s, size_t n, unsigned char *v)
{
    static const char hex[] = "0123456789ABCDEFabcdef";
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>' || !s[3] || !s[4] || !strchr(hex, s[3]) || !strchr(hex, s[4])) return 0;
    int h = s[3] <= '9' ? s[3] - '0' : (s[3] | 32) - 'a' + 10;
    int l = s[4] <= '9' ? s[4] - '0' : (s[4] | 32) - 'a' + 10;
    *v = (unsigned char)(h * 16 + l);
    return 1;
}

static int replace_bytes(tk_buf *src, tk_buf *dst, const char *pat, size_t pn, const char *with, size_t wn)
{
    dst->n = 0;
    size_t i = 0;
    while (i < src->n) {
        if (pn && i + pn <= src->n && !memcmp(src->p + i, pat, pn)) {
            if (tk_buf_put(dst, with, wn)) return RECUR_ENOMEM;
            i += pn;
        } else {
            if (tk_buf_putc(dst, src->p[i])) return RECUR_ENOMEM;
            i++;
        }
    }
    return tk_buf_put(dst, "", 0);
}

/* the bytes of one HF token through the per-token decoder steps, into d->a */
static int hf_token(recur_detok *d, int32_t id)
{
    const tk_hf *h = d->t->hf;
    d->a.n = 0;
    if ((size_t)id >= h->n_vocab) return tk_buf_put(&d->a, "", 0);
    if (!h->has_decoder && d->pushed && tk_buf_putc(&d->a, ' ')) return RECUR_ENOMEM;
    if (tk_buf_put(&d->a, h->vocab_text.p + h->vocab[id].off, h->vocab[id].len)) return RECUR_ENOMEM;
    for (size_t k = 0; k < h->n_dc; k++) {
        const tk_decoder *x = &h->dc[k];
        int rc = 0;
        switch (x->kind) {
        case TK_DC_BYTELEVEL: break; /* the vocabulary is stored as raw bytes */
        case TK_DC_FUSE: return 0;
        case TK_DC_BYTEFALLBACK: {
            unsigned char v;
            if (is_byte_token(d->a.p, d->a.n, &v)) { d->a.n = 0; rc = tk_buf_putc(&d->a, v); }
            break;
        }
        case TK_DC_REPLACE:
            /* the regex engine needs valid UTF-8: a lone byte token passes unchanged */
            if (tk_utf8_valid_prefix(d->a.p, d->a.n) == d->a.n) {
                rc = tk_regex_replace(&x->re, d->a.p, d->a.n, x->b, x->b_len, &d->b);
                if (!rc) { tk_buf t = d->a; d->a = d->b; d->b = t; }
            }
            break;
        case TK_DC_STRIP: {
            size_t a = 0, b = d->a.n;
            for (int i = 0; i < x->start && b - a >= x->a_len && !memcmp(d->a.p + a, x->a, x->a_len); i++) a += x->a_len;
            for (int i = 0; i < x->stop && b - a >= x->a_len && !memcmp(d->a.p + b - x->a_len, x->a, x->a_len); i++) b -= x->a_len;
            memmove(d->a.p, d->a.p + a, b - a);
            d->a.n = b - a;
            break;
        }
        case TK_DC_METASPACE:
            if ((rc = replace_bytes(&d->a, &d->b, x->a, x->a_len, " ", 1))) break;
            { tk_buf t = d->a; d->a = d->b; d->b = t; }
            if (d->pushed == 0 && d->a.n && d->a.p[0] == ' ') { memmove(d->a.p, d->a.p + 1, d->a.n - 1); d->a.n--; }
            break;
        }
        if (rc) return rc;
    }
    return 0;
}

int recur_detok_push(recur_detok *d, int32_t id, const char **text, size_t *len)
{
    if (!d || !text || !len) return RECUR_EINVAL;
    if (id < 0) return RECUR_ETOKEN;
    const recur_tokenizer *t = d->t;
    d->out.n = 0;
    int rc = 0;
    if (id < t->vocab_size) {
        if (t->hf) {
            if ((rc = hf_token(d, id))) return rc;
            rc = feed(d, (const unsigned char *)d->a.p, d->a.n);
        } else if (t->rwkv) {
            const tk_span *s = &t->rwkv->tok[id];
            rc = feed(d, (const unsigned char *)t->rwkv->text.p + s->off, s->len);
        } else {
            unsigned char c = (unsigned char)id;
            rc = feed(d, &c, 1);
        }
    }
    d->pushed++;
    if (rc || (rc = tk_buf_put(&d->out, "", 0))) return rc;
    *text = d->out.p;
    *len = d->out.n;
    return 0;
}

int recur_detok_finish(recur_detok *d, const char **text, size_t *len)
{
    if (!d || !text || !len) return RECUR_EINVAL;
    d->out.n = 0;
    int rc = 0;
    if (d->need) {
        d->need = d->seen = 0;
        d->lo = 0x80;
        d->hi = 0xBF;
        rc = emit(d, "\xEF\xBF\xBD", 3);
    }
    if (rc || (rc = tk_buf_put(&d->out, "", 0))) return rc;
    *text = d->out.p;
    *len = d->out.n;
    return 0;
}

int recur_tokenizer_decode(const recur_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len)
{
    if (!t || (!ids && n) || !text || !len) return RECUR_EINVAL;
    recur_detok *d;
    int rc = recur_detok_new(t, &d);
    if (rc) return rc;
    tk_buf all = {0};
    const char *s;
    size_t l;
    for (size_t i = 0; !rc && i < n; i++)
        if (!(rc = recur_detok_push(d, ids[i], &s, &l))) rc = tk_buf_put(&all, s, l);
    if (!rc && !(rc = recur_detok_finish(d, &s, &l))) rc = tk_buf_put(&all, s, l);
    recur_detok_free(d);
    if (rc) { tk_buf_free(&all); return rc; }
    *text = all.p;
    *len = all.n;
    return 0;
}
