/* tokenizer_rwkv.c — the RWKV World vocabulary (rwkv_vocab_v20230424.txt).
 *
 * One line per token: `ID LITERAL LENGTH`, LITERAL a Python str ('...' / "...", encoded as
 * UTF-8) or bytes (b'...') literal, LENGTH its byte length. Encoding is the greedy longest match
 * over bytes from left to right; id 0 (end of text) is not in the file and is never produced.
 * Every single byte must have a token, so every input encodes. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#define MAX_RWKV_ID (1 << 20)

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* decode a Python literal s[0..n) into o; returns 0 or a static message */
static const char *literal(const char *s, size_t n, tk_buf *o)
{
    o->n = 0;
    int bytes = 0;
    if (n && s[0] == 'b') { bytes = 1; s++; n--; }
    if (n < 2 || (s[0] != '\'' && s[0] != '"') || s[n - 1] != s[0]) return "literal is not quoted";
    char q = s[0];
    for (size_t i = 1; i + 1 < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == (unsigned char)q) return "unescaped quote inside the literal";
        if (c != '\\') {
            if (bytes && c >= 0x80) return "non-ASCII character in a bytes literal";
            if (tk_buf_putc(o, c)) return "out of memory";
            i++;
            continue;
        }
        if (i + 2 >= n) return "literal ends with a backslash";
        char e = s[i + 1];
        i += 2;
        uint32_t v = 0;
        int digits = 0;
        switch (e) {
        case '\\': case '\'': case '"': v = (unsigned char)e; break;
        case 'n': v = '\n'; break;
        case 'r': v = '\r'; break;
        case 't': v = '\t'; break;
        case 'a': v = 7; break;
        case 'b': v = 8; break;
        case 'f': v = 12; break;
        case 'v': v = 11; break;
        case 'x': digits = 2; break;
        case 'u': if (bytes) return "\\u in a bytes literal"; digits = 4; break;
        case 'U': if (bytes) return "\\U in a bytes literal"; digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                v = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i + 1 < n && s[i] >= '0' && s[i] <= '7'; k++) v = v * 8 + (uint32_t)(s[i++] - '0');
                break;
            }
            return "unknown escape";
        }
        for (int k = 0; k < digits; k++) {
            if (i + 1 >= n) return "truncated escape";
            int h = hexval((unsigned char)s[i++]);
            if (h < 0) return "bad hex digit in an escape";
            v = v * 16 + (uint32_t)h;
        }
        if (bytes) {
            if (v > 255) return "byte value above 255";
            if (tk_buf_putc(o, (int)v)) return "out of memory";
        } else {
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return "escape is not a Unicode scalar value";
            if (tk_buf_put_cp(o, v)) return "out of memory";
        }
    }
    return NULL;
}

void tk_rwkv_free(tk_rwkv *r)
{
    if (!r) return;
    tk_trie_free(&r->trie);
    free(r->tok);
    tk_buf_free(&r->text);
    free(r);
}

int tk_rwkv_load(const char *text, size_t len, tk_rwkv **out, int32_t *vocab_size, char *err, size_t errlen)
{
    *out = NULL;
    tk_rwkv *r = calloc(1, sizeof *r);
    if (!r || tk_trie_init(&r->trie)) { free(r); return RECUR_ENOMEM; }
    tk_buf lit = {0};
    int rc = 0;
    size_t line = 0;
    int32_t max_id = 0;
    for (size_t i = 0; i < len && !rc;) {
        const char *eol = memchr(text + i, '\n', len - i);
        size_t e = eol ? (size_t)(eol - text) : len;
        const char *s = text + i;
        size_t n = e - i;
        i = e + 1;
        line++;
        if (n && s[n - 1] == '\r') n--;
        if (!n) continue;
        const char *sp1 = memchr(s, ' ', n);
        const char *sp2 = n ? s + n - 1 : s;
        while (sp2 > s && *sp2 != ' ') sp2--;
        if (!sp1 || sp2 <= sp1) { tk_err(err, errlen, "rwkv vocab line %zu: expected `id literal length`", line); rc = RECUR_EFORMAT; break; }
        long id = 0, blen = 0;
        for (const char *p = s; p < sp1; p++) {
            if (*p < '0' || *p > '9' || id > MAX_RWKV_ID) { id = -1; break; }
            id = id * 10 + (*p - '0');
        }
        for (const char *p = sp2 + 1; p < s + n; p++) {
            if (*p < '0' || *p > '9' || blen > 1 << 20) { blen = -1; break; }
            blen = blen * 10 + (*p - '0');
        }
        if (id <= 0 || id >= MAX_RWKV_ID || sp1 == s) { tk_err(err, errlen, "rwkv vocab line %zu: id must be an integer in [1, %d)", line, MAX_RWKV_ID); rc = RECUR_EFORMAT; break; }
        if (blen <= 0 || sp2 + 1 == s + n) { tk_err(err, errlen, "rwkv vocab line %zu: length must be a positive integer", line); rc = RECUR_EFORMAT; break; }
        const char *msg = literal(sp1 + 1, (size_t)(sp2 - sp1 - 1), &lit);
        if (msg) { tk_err(err, errlen, "rwkv vocab line %zu: %s", line, msg); rc = RECUR_EFORMAT; break; }
        if (lit.n != (size_t)blen) { tk_err(err, errlen, "rwkv vocab line %zu: literal is %zu bytes, line says %ld", line, lit.n, blen); rc = RECUR_EFORMAT; break; }
        if ((size_t)id >= r->n_tok) {
            size_t c = r->n_tok ? r->n_tok : 1024;
            while (c <= (size_t)id) c *= 2;
            tk_span *t = realloc(r->tok, c * sizeof *t);
            if (!t) { rc = RECUR_ENOMEM; break; }
            memset(t + r->n_tok, 0xff, (c - r->n_tok) * sizeof *t);
            r->tok = t;
            r->n_tok = c;
        }
        if (r->tok[id].len != (size_t)-1) { tk_err(err, errlen, "rwkv vocab line %zu: id %ld appears twice", line, id); rc = RECUR_EFORMAT; break; }
        int32_t dupe;
        if (tk_trie_longest(&r->trie, lit.p, lit.n, &dupe) == lit.n) {
            tk_err(err, errlen, "rwkv vocab line %zu: the bytes of id %ld are also id %d", line, id, dupe);
            rc = RECUR_EFORMAT;
            break;
        }
        r->tok[id].off = r->text.n;
        r->tok[id].len = lit.n;
        if ((rc = tk_buf_put(&r->text, lit.p, lit.n)) || (rc = tk_trie_add(&r->trie, lit.p, lit.n, (int32_t)id))) break;
        if (id > max_id) max_id = (int32_t)id;
    }
    tk_buf_free(&lit);
    for (int b = 0; !rc && b < 256; b++) {
        char c = (char)b;
        int32_t v;
        if (tk_trie_longest(&r->trie, &c, 1, &v) != 1) {
            tk_err(err, errlen, "rwkv vocab: no token for the single byte 0x%02X", b);
            rc = RECUR_EFORMAT;
        }
    }
    if (rc) { tk_rwkv_free(r); return rc; }
    r->n_tok = (size_t)max_id + 1;
    for (size_t i = 0; i < r->n_tok; i++)
        if (r->tok[i].len == (size_t)-1) r->tok[i].len = 0, r->tok[i].off = 0;
    *vocab_size = max_id + 1;
    *out = r;
    return 0;
}

int tk_rwkv_encode(const tk_rwkv *r, const char *s, size_t n, tk_ids *out)
{
    for (size_t i = 0; i < n;) {
        int32_t id = -1;
        size_t l = tk_trie_longest(&r->trie, s + i, n - i, &id);
        if (!l) return RECUR_EINVAL; /* cannot happen: every byte has a token */
        if (tk_ids_push(out, id)) return RECUR_ENOMEM;
        i += l;
    }
    return 0;
}
