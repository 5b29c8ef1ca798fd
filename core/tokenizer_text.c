/* tokenizer_text.c — normalizers (utf8proc) and pre-tokenizers of a tokenizer.json pipeline.
 * Text is valid UTF-8 throughout (tokenizer.c sanitizes its input). The behaviour is the
 * reference's (@huggingface/tokenizers); docs/API.md lists where it differs from the Rust
 * library. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer.h"

/* ---------------------------------------------------------------- normalizers */

/* A starter that no composition takes as its second element and that NFC leaves alone: text
 * made only of such characters is already NFC (nothing reorders or composes). Below U+0300
 * (combining marks start there), CJK ideographs, Hangul syllables, kana. */
static int nfc_boundary(uint32_t c)
{
    return c < 0x300 || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3) ||
           (c >= 0x3041 && c <= 0x3096) || (c >= 0x30A1 && c <= 0x30FA);
}

static int unicode_form(int flags, const char *s, size_t n, tk_buf *out)
{
    out->n = 0;
    if (!n) return tk_buf_put(out, "", 0);
    /* plain ASCII is unchanged in every form; see nfc_boundary for NFC */
    size_t i = 0;
    int nfc = (flags & UTF8PROC_COMPOSE) && !(flags & UTF8PROC_COMPAT);
    while (i < n && (unsigned char)s[i] < 0x80) i++;
    while (nfc && i < n) {
        uint32_t c;
        size_t l = tk_utf8_next(s + i, &c);
        if (!nfc_boundary(c)) break;
        i += l;
    }
    if (i == n) return tk_buf_put(out, s, n);
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      (utf8proc_option_t)flags);
    if (r < 0) { free(dst); return r == UTF8PROC_ERROR_NOMEM ? RECUR_ENOMEM : RECUR_EINVAL; }
    int rc = tk_buf_put(out, dst, (size_t)r);
    free(dst);
    return rc;
}

static int is_cased(utf8proc_int32_t cp)
{
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

/* String.prototype.toLowerCase: simple mappings, U+0130 -> "i\u0307", and the final sigma rule
 * (Σ after a cased letter and not before one becomes ς; marks are skipped on both sides). */
static int lowercase(const char *s, size_t n, tk_buf *out)
{
    out->n = 0;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = tk_utf8_next(s + i, &cp);
        int rc;
        if (cp == 0x130) rc = tk_buf_put(out, "i\xCC\x87", 3);
        else if (cp == 0x3A3) {
            int before = 0, after = 0;
            for (size_t j = i; j > 0;) {
                size_t k = j - 1;
                while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
                uint32_t q;
                tk_utf8_next(s + k, &q);
                if (utf8proc_category((utf8proc_int32_t)q) == UTF8PROC_CATEGORY_MN) { j = k; continue; }
                before = is_cased((utf8proc_int32_t)q);
                break;
            }
            for (size_t j = i + l; j < n;) {
                uint32_t q;
                size_t m = tk_utf8_next(s + j, &q);
                if (utf8proc_category((utf8proc_int32_t)q) == UTF8PROC_CATEGORY_MN) { j += m; continue; }
                after = is_cased((utf8proc_int32_t)q);
                break;
            }
            rc = tk_buf_put_cp(out, before && !after ? 0x3C2 : 0x3C3);
        } else rc = tk_buf_put_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
        if (rc) return rc;
        i += l;
    }
    return tk_buf_put(out, "", 0);
}

int tk_normalize(const tk_normalizer *nm, size_t n_nm, const char *s, size_t n, tk_buf *out)
{
    tk_buf a = {0}, b = {0};
    int rc = tk_buf_put(&a, s, n);
    for (size_t k = 0; !rc && k < n_nm; k++) {
        const tk_normalizer *x = &nm[k];
        b.n = 0;
        switch (x->kind) {
        case TK_NM_NFC: rc = unicode_form(UTF8PROC_STABLE | UTF8PROC_COMPOSE, a.p, a.n, &b); break;
        case TK_NM_NFKC: rc = unicode_form(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, a.p, a.n, &b); break;
        case TK_NM_NFD: rc = unicode_form(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, a.p, a.n, &b); break;
        case TK_NM_NFKD: rc = unicode_form(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, a.p, a.n, &b); break;
        case TK_NM_PREPEND: rc = tk_buf_put(&b, x->str, x->str_len); if (!rc) rc = tk_buf_put(&b, a.p, a.n); break;
        case TK_NM_REPLACE: rc = tk_regex_replace(&x->re, a.p, a.n, x->str, x->str_len, &b); break;
        case TK_NM_LOWERCASE: rc = lowercase(a.p, a.n, &b); break;
        }
        tk_buf t = a; a = b; b = t;
    }
    tk_buf_free(&b);
    if (rc) { tk_buf_free(&a); return rc; }
    tk_buf_free(out);
    *out = a;
    if (!out->p) return tk_buf_put(out, "", 0);
    return 0;
}

/* ---------------------------------------------------------------- pre-tokenizers */

typedef struct {
    const tk_pretok *pt;
    const char *s;
    size_t n, prev, last_start;
    tk_pieces *out;
    int have_last; size_t last_a, last_b; /* Contiguous: pending delimiter run */
} split_ctx;

static int add(tk_pieces *o, const char *s, size_t a, size_t b)
{
    return b > a ? tk_pieces_add(o, s + a, b - a) : 0;
}

static int split_fn(void *c, size_t a, size_t b, pcre2_match_data *md)
{
    split_ctx *x = c;
    const tk_pretok *pt = x->pt;
    if (a < x->prev) return 0; /* cannot happen with forward matching; be safe */
    int rc = 0;
    if (pt->kind != TK_PT_SPLIT || pt->invert) return add(x->out, x->s, a, b); /* matches only */
    switch (pt->behavior) {
    case TK_SPLIT_ISOLATED:
        if (!(rc = add(x->out, x->s, x->prev, a))) rc = add(x->out, x->s, a, b);
        break;
    case TK_SPLIT_REMOVED:
        rc = add(x->out, x->s, x->prev, a);
        if (pt->re.literal) { if (!rc) rc = add(x->out, x->s, a, b); }
        else {
            /* JavaScript's String.split splices in the capture groups */
            uint32_t ng = pcre2_get_ovector_count(md);
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            for (uint32_t g = 1; !rc && g < ng; g++)
                if (ov[2 * g] != PCRE2_UNSET && ov[2 * g + 1] > ov[2 * g]) rc = add(x->out, x->s, ov[2 * g], ov[2 * g + 1]);
        }
        break;
    case TK_SPLIT_MERGED_PREV:
        if (b > a) rc = add(x->out, x->s, x->prev, b);
        else { x->prev = x->prev; return 0; }
        break;
    case TK_SPLIT_MERGED_NEXT:
        if (b > a) { rc = add(x->out, x->s, x->last_start, a); x->last_start = a; }
        x->prev = b;
        return rc;
    case TK_SPLIT_CONTIGUOUS:
        if (b == a) return 0;
        if (x->have_last && x->last_b == a) { x->last_b = b; x->prev = b; return 0; }
        if (x->have_last) rc = add(x->out, x->s, x->last_a, x->last_b);
        if (!rc) rc = add(x->out, x->s, x->have_last ? x->last_b : x->prev, a);
        x->have_last = 1; x->last_a = a; x->last_b = b;
        x->prev = b;
        return rc;
    }
    x->prev = b;
    return rc;
}

static int regex_pieces(const tk_pretok *pt, const char *s, size_t n, tk_pieces *out)
{
    split_ctx x = {pt, s, n, 0, 0, out, 0, 0, 0};
    int rc = tk_regex_each(&pt->re, s, n, split_fn, &x);
    if (rc) return rc;
    if (pt->kind != TK_PT_SPLIT || pt->invert) return 0;
    switch (pt->behavior) {
    case TK_SPLIT_MERGED_NEXT: return add(out, s, x.last_start, n);
    case TK_SPLIT_CONTIGUOUS:
        if (x.have_last && (rc = add(out, s, x.last_a, x.last_b))) return rc;
        return add(out, s, x.prev, n);
    default: return add(out, s, x.prev, n);
    }
}

static int one(const tk_pretok *pt, const char *s, size_t n, size_t section_index, tk_pieces *out, tk_buf *tmp)
{
    switch (pt->kind) {
    case TK_PT_BYTELEVEL:
        if (pt->add_prefix_space && !(n && s[0] == ' ')) {
            tmp->n = 0;
            if (tk_buf_putc(tmp, ' ') || tk_buf_put(tmp, s, n)) return RECUR_ENOMEM;
            s = tmp->p;
            n = tmp->n;
        }
        if (!pt->use_regex) return add(out, s, 0, n);
        return regex_pieces(pt, s, n, out);
    case TK_PT_SPLIT:
    case TK_PT_DIGITS:
        return regex_pieces(pt, s, n, out);
    case TK_PT_METASPACE: {
        tmp->n = 0;
        int starts = n >= pt->repl_len && !memcmp(s, pt->repl, pt->repl_len);
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ') { if (tk_buf_put(tmp, pt->repl, pt->repl_len)) return RECUR_ENOMEM; }
            else if (tk_buf_putc(tmp, s[i])) return RECUR_ENOMEM;
        }
        /* the reference checks the text after the replacement */
        starts = tmp->n >= pt->repl_len && !memcmp(tmp->p, pt->repl, pt->repl_len);
        if (!starts && (pt->prepend_scheme == 0 || (pt->prepend_scheme == 1 && section_index == 0))) {
            if (tk_pieces_add(out, pt->repl, pt->repl_len)) return RECUR_ENOMEM;
            /* extend the piece just added with the text */
            tk_span *sp = &out->s[out->n - 1];
            if (tk_buf_put(&out->text, tmp->p, tmp->n)) return RECUR_ENOMEM;
            sp->len += tmp->n;
            return 0;
        }
        return tk_pieces_add(out, tmp->p, tmp->n);
    }
    }
    return RECUR_EINVAL;
}

int tk_pretokenize(const tk_pretok *pt, size_t n_pt, const char *s, size_t n, size_t section_index,
                   tk_pieces *out, tk_pieces *scratch)
{
    if (!n_pt) return tk_pieces_add(out, s, n);
    tk_buf tmp = {0};
    int rc = 0;
    if (n_pt == 1) {
        rc = one(&pt[0], s, n, section_index, out, &tmp);
        tk_buf_free(&tmp);
        return rc;
    }
    /* several steps: ping-pong between scratch and a local list, the last step into out */
    tk_pieces cur = {0};
    rc = tk_pieces_add(&cur, s, n);
    for (size_t k = 0; !rc && k < n_pt; k++) {
        tk_pieces *dst = k + 1 == n_pt ? out : scratch;
        if (dst == scratch) tk_pieces_reset(scratch);
        for (size_t i = 0; !rc && i < cur.n; i++)
            rc = one(&pt[k], cur.text.p + cur.s[i].off, cur.s[i].len, section_index, dst, &tmp);
        if (!rc && dst == scratch) {
            tk_pieces t = cur; cur = *scratch; *scratch = t;
        }
    }
    tk_pieces_free(&cur);
    tk_buf_free(&tmp);
    return rc;
}
