/* tokenizer_encode.c — text -> ids for a tokenizer.json pipeline.
 *
 * As the reference: the raw text is split on the added tokens that are not normalized
 * (leftmost-longest), lstrip/rstrip trim the neighbouring sections (JavaScript whitespace);
 * each other section is normalized, split again on the normalized added tokens, pre-tokenized
 * and run through the model; TemplateProcessing adds its special tokens when asked.
 * single_word (a match must not touch a word character) follows the Rust library; the
 * reference ignores that flag. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer.h"

typedef struct { size_t a, b; int32_t added; } section;
typedef struct { section *p; size_t n, cap; } sections;

static int sec_push(sections *v, size_t a, size_t b, int32_t added)
{
    if (v->n == v->cap) {
        size_t c = v->cap ? v->cap * 2 : 16;
        section *p = realloc(v->p, c * sizeof *p);
        if (!p) return RECUR_ENOMEM;
        v->p = p;
        v->cap = c;
    }
    v->p[v->n++] = (section){a, b, added};
    return 0;
}

static int js_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

static int word_char(uint32_t c)
{
    if (c == '_') return 1;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

static uint32_t cp_before(const char *s, size_t i)
{
    size_t k = i - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    uint32_t c;
    tk_utf8_next(s + k, &c);
    return c;
}

/* leftmost-longest split of s[0..n) on the trie's strings */
static int split_added(const tk_hf *h, const tk_trie *t, const char *s, size_t n, sections *out)
{
    size_t start = 0, i = 0;
    while (i < n) {
        if (!tk_trie_may_start(t, (unsigned char)s[i])) { i += tk_utf8_len((unsigned char)s[i]); continue; }
        int32_t k;
        size_t l = tk_trie_longest(t, s + i, n - i, &k);
        if (l && h->added[k].single_word) {
            uint32_t c;
            if ((i > 0 && word_char(cp_before(s, i))) || (i + l < n && (tk_utf8_next(s + i + l, &c), word_char(c)))) l = 0;
        }
        if (!l) { i += tk_utf8_len((unsigned char)s[i]); continue; }
        if (i > start && sec_push(out, start, i, -1)) return RECUR_ENOMEM;
        if (sec_push(out, i, i + l, k)) return RECUR_ENOMEM;
        i += l;
        start = i;
    }
    if (start < n && sec_push(out, start, n, -1)) return RECUR_ENOMEM;
    /* lstrip / rstrip trim the neighbours */
    for (size_t j = 0; j < out->n; j++) {
        int32_t k = out->p[j].added;
        if (k < 0) continue;
        if (h->added[k].lstrip && j > 0) {
            section *p = &out->p[j - 1];
            while (p->b > p->a && js_space(cp_before(s, p->b))) {
                size_t q = p->b - 1;
                while (q > p->a && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
                p->b = q;
            }
        }
        if (h->added[k].rstrip && j + 1 < out->n) {
            section *p = &out->p[j + 1];
            uint32_t c;
            size_t l;
            while (p->a < p->b && (l = tk_utf8_next(s + p->a, &c), js_space(c))) p->a += l;
        }
    }
    return 0;
}

static int32_t exact_added(const tk_hf *h, const char *s, size_t n)
{
    int32_t k = tk_strmap_find(&h->added_exact, s, n);
    return k >= 0 ? h->added[h->added_exact_idx[k]].id : -1;
}

static int encode_text(const tk_hf *h, const char *s, size_t n, tk_ids *out)
{
    sections top = {0}, sub = {0};
    tk_buf norm = {0};
    tk_pieces pieces = {0}, scratch = {0};
    int rc = split_added(h, &h->added_raw, s, n, &top);
    for (size_t j = 0; !rc && j < top.n; j++) {
        const char *x = s + top.p[j].a;
        size_t xn = top.p[j].b - top.p[j].a;
        if (!xn) continue;
        int32_t id = exact_added(h, x, xn);
        if (id >= 0) { rc = tk_ids_push(out, id); continue; }
        if (h->n_nm) {
            if ((rc = tk_normalize(h->nm, h->n_nm, x, xn, &norm))) break;
            x = norm.p;
            xn = norm.n;
            if (!xn) continue;
        }
        sub.n = 0;
        if ((rc = split_added(h, &h->added_norm, x, xn, &sub))) break;
        for (size_t k = 0; !rc && k < sub.n; k++) {
            const char *y = x + sub.p[k].a;
            size_t yn = sub.p[k].b - sub.p[k].a;
            if (!yn) continue;
            if ((id = exact_added(h, y, yn)) >= 0) { rc = tk_ids_push(out, id); continue; }
            tk_pieces_reset(&pieces);
            if ((rc = tk_pretokenize(h->pt, h->n_pt, y, yn, j, &pieces, &scratch))) break;
            int last_unk = 0;
            for (size_t p = 0; !rc && p < pieces.n; p++)
                rc = tk_bpe_word(&h->bpe, pieces.text.p + pieces.s[p].off, pieces.s[p].len, out, &last_unk);
        }
    }
    free(top.p);
    free(sub.p);
    tk_buf_free(&norm);
    tk_pieces_free(&pieces);
    tk_pieces_free(&scratch);
    return rc;
}

int tk_hf_encode(const tk_hf *h, const char *s, size_t n, int add_special, tk_ids *out)
{
    int tmpl = add_special && h->has_template;
    int rc = 0;
    if (tmpl)
        for (int i = 0; !rc && i < h->tmpl_seq_pos; i++) rc = tk_ids_push(out, h->tmpl[i]);
    if (!rc) rc = encode_text(h, s, n, out);
    if (tmpl)
        for (size_t i = (size_t)h->tmpl_seq_pos + 1; !rc && i < h->n_tmpl; i++) rc = tk_ids_push(out, h->tmpl[i]);
    return rc;
}
