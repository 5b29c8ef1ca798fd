/* tokenizer_text.c — normalizers (utf8proc) and pre-tokenizers of a tokenizer.json pipeline.
 * Text is valid UTF-8 throughout (tokenizer.c sanitizes its input). The behaviour is the
 * reference's (@huggingface/tokenizers); docs/API.md lists where it differs from the Rust
 * library. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer.h"

/* ---------------------------------------------------------------- normalizers */

/* Normalization stretches. A character is inert for a form when
 *   - its canonical combining class is 0 (nothing reorders across it),
 *   - no composition takes it as the second element (utf8proc: comb_index >= 0x8000 marks a
 *     second; the Hangul V and T jamo compose algorithmically), and
 *   - the form does not decompose it (no canonical decomposition; for NFKC/NFKD none at all),
 *     except a Hangul syllable under NFC/NFKC: it decomposes to L V [T] and composes back, and
 *     its L jamo is itself no second.
 * Before an inert character X, normalization restarts: in utf8proc's algorithm X never moves,
 * never composes with what precedes it and, as the new starter, blocks everything after it from
 * the earlier starters; and X alone normalizes to X. So form(text) = form(prefix) + form(rest)
 * at every inert character, and only the stretches that hold a non-inert character — each from
 * the inert character before its first non-inert one up to the next inert character — go
 * through utf8proc; the rest is copied. tests/unit/test_tokenizer_nfc.c checks this against
 * utf8proc over the whole text for every code point in several contexts. */
enum { FORM_COMPOSE = 1, FORM_COMPAT = 2 };
static uint8_t inert_bmp[4][8192]; /* [form] bit set over U+0000..U+FFFF */
static pthread_once_t inert_once = PTHREAD_ONCE_INIT;

static int inert_slow(uint32_t c, int form)
{
    if (c >= 0xAC00 && c <= 0xD7A3) return form & FORM_COMPOSE;
    if ((c >= 0x1161 && c <= 0x1175) || (c >= 0x11A7 && c <= 0x11C2)) return 0;
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)c);
    if (p->combining_class) return 0;
    if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return 0;
    if (p->decomp_seqindex != UINT16_MAX && (!p->decomp_type || (form & FORM_COMPAT))) return 0;
    return 1;
}

static void build_inert(void)
{
    for (int f = 0; f < 4; f++)
        for (uint32_t c = 0; c < 0x10000; c++)
            if (inert_slow(c, f)) inert_bmp[f][c >> 3] |= (uint8_t)(1u << (c & 7));
}

static inline int inert(uint32_t c, int form)
{
    return c < 0x10000 ? inert_bmp[form][c >> 3] >> (c & 7) & 1 : inert_slow(c, form);
}

/* utf8proc over one stretch of valid UTF-8, appended to out */
static int form_stretch(int flags, const char *s, size_t n, tk_buf *out)
{
    utf8proc_int32_t stack[256], *buf = stack;
    utf8proc_ssize_t cap = 256;
    utf8proc_ssize_t r = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, buf, cap,
                                            (utf8proc_option_t)flags);
    if (r > cap) {
        if ((size_t)r > SIZE_MAX / sizeof *buf || !(buf = malloc((size_t)r * sizeof *buf))) return RECUR_ENOMEM;
        cap = r;
        r = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, buf, cap, (utf8proc_option_t)flags);
    }
    if (r >= 0) r = utf8proc_normalize_utf32(buf, r, (utf8proc_option_t)flags);
    int rc = r < 0 ? (r == UTF8PROC_ERROR_NOMEM ? RECUR_ENOMEM : RECUR_EINVAL) : 0;
    for (utf8proc_ssize_t i = 0; !rc && i < r; i++) rc = tk_buf_put_cp(out, (uint32_t)buf[i]);
    if (buf != stack) free(buf);
    return rc;
}

static int unicode_form(int flags, const char *s, size_t n, tk_buf *out)
{
    pthread_once(&inert_once, build_inert);
    int form = (flags & UTF8PROC_COMPOSE ? FORM_COMPOSE : 0) | (flags & UTF8PROC_COMPAT ? FORM_COMPAT : 0);
    out->n = 0;
    size_t copied = 0;   /* s[0..copied) is in out */
    size_t boundary = 0; /* start of the last inert character */
    size_t dirty = SIZE_MAX; /* start of the open stretch, or none */
    int rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        uint32_t c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : tk_utf8_next(s + i, &c);
        if (c < 0x80 || inert(c, form)) {
            if (dirty != SIZE_MAX) {
                rc = tk_buf_put(out, s + copied, dirty - copied);
                if (!rc) rc = form_stretch(flags, s + dirty, i - dirty, out);
                copied = i;
                dirty = SIZE_MAX;
            }
            boundary = i;
        } else if (dirty == SIZE_MAX) dirty = boundary;
        i += l;
    }
    if (!rc) rc = tk_buf_put(out, s + copied, (dirty == SIZE_MAX ? n : dirty) - copied);
    if (!rc && dirty != SIZE_MAX) rc = form_stretch(flags, s + dirty, n - dirty, out);
    if (!rc) rc = tk_buf_put(out, "", 0);
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

static int normalize_one(const tk_normalizer *x, const char *s, size_t n, tk_buf *out)
{
    out->n = 0;
    switch (x->kind) {
    case TK_NM_NFC: return unicode_form(UTF8PROC_STABLE | UTF8PROC_COMPOSE, s, n, out);
    case TK_NM_NFKC: return unicode_form(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, s, n, out);
    case TK_NM_NFD: return unicode_form(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, s, n, out);
    case TK_NM_NFKD: return unicode_form(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, s, n, out);
    case TK_NM_PREPEND: return tk_buf_put(out, x->str, x->str_len) ? RECUR_ENOMEM : tk_buf_put(out, s, n);
    case TK_NM_REPLACE: return tk_regex_replace(&x->re, s, n, x->str, x->str_len, out);
    case TK_NM_LOWERCASE: return lowercase(s, n, out);
    }
    return RECUR_EINVAL;
}

int tk_normalize(const tk_normalizer *nm, size_t n_nm, const char *s, size_t n, tk_buf *out)
{
    /* the steps alternate between out and tmp, reading the previous step's output; the last
     * one writes out (the caller's buffer is reused: no copy of the input, no allocation for
     * one step) */
    tk_buf tmp = {0};
    tk_buf *dst = n_nm % 2 ? out : &tmp, *other = n_nm % 2 ? &tmp : out;
    int rc = 0;
    if (!n_nm) { out->n = 0; rc = tk_buf_put(out, s, n); }
    for (size_t k = 0; !rc && k < n_nm; k++) {
        rc = normalize_one(&nm[k], s, n, dst);
        s = dst->p;
        n = dst->n;
        tk_buf *t = dst; dst = other; other = t;
    }
    tk_buf_free(&tmp);
    if (!rc && !out->p) rc = tk_buf_put(out, "", 0);
    return rc;
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
