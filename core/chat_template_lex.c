/* chat_template_lex.c — Jinja source -> tokens (chat_template.h).
 *
 * Whitespace as transformers configures Jinja (trim_blocks=True, lstrip_blocks=True) and
 * @huggingface/jinja does the same:
 *   - one trailing newline of the template is dropped (keep_trailing_newline=False);
 *   - {%- {{- {#- strip all whitespace before the tag, -%} -}} -#} all whitespace after it;
 *   - lstrip_blocks: spaces and tabs from the start of a line up to {% or {# are dropped
 *     ({%+ keeps them);
 *   - trim_blocks: the first newline after %} or #} is dropped.
 * String literals take Python's escapes (\n \t \r \b \f \v \\ \' \" \xHH \uHHHH \UHHHHHHHH);
 * an unknown escape keeps its backslash, as Python does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "tokenizer.h" /* tk_utf8_next */

typedef struct {
    ct_ctx *c;
    const char *src;
    size_t n, pos, line;
    ct_tok *tok;
    size_t ntok, cap;
} lexer;

static ct_tok *emit(lexer *L, ct_tok_kind kind, const char *s, size_t n)
{
    if (L->ntok == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 256;
        ct_tok *t = ct_alloc(L->c, cap * sizeof *t);
        if (L->ntok) memcpy(t, L->tok, L->ntok * sizeof *t);
        L->tok = t;
        L->cap = cap;
    }
    ct_tok *t = &L->tok[L->ntok++];
    t->kind = kind;
    t->s = s;
    t->n = n;
    t->line = L->line;
    return t;
}

static int is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }

static void count_lines(lexer *L, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) L->line += L->src[i] == '\n';
}

/* Unicode whitespace before end (Jinja's \s), not crossing start */
static size_t rstrip_ws(const char *s, size_t start, size_t end)
{
    while (end > start) {
        size_t k = end - 1;
        while (k > start && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        uint32_t cp;
        tk_utf8_next(s + k, &cp);
        if (!ct_is_space(cp)) break;
        end = k;
    }
    return end;
}

static size_t lstrip_ws(const char *s, size_t pos, size_t n)
{
    while (pos < n) {
        uint32_t cp;
        size_t l = tk_utf8_next(s + pos, &cp);
        if (!ct_is_space(cp)) break;
        pos += l;
    }
    return pos;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static void lex_string(lexer *L)
{
    char q = L->src[L->pos++];
    ct_out b = ct_scratch("a string literal");
    size_t start_line = L->line;
    for (;;) {
        if (L->pos >= L->n) ct_fail(L->c, RECUR_EFORMAT, "line %zu: unterminated string literal", start_line);
        char ch = L->src[L->pos];
        if (ch == q) { L->pos++; break; }
        if (ch == '\n') L->line++;
        if (ch != '\\' || L->pos + 1 >= L->n) {
            ct_out_put(L->c, &b, &ch, 1);
            L->pos++;
            continue;
        }
        char e = L->src[L->pos + 1];
        const char *simple = NULL;
        switch (e) {
        case 'n': simple = "\n"; break;
        case 't': simple = "\t"; break;
        case 'r': simple = "\r"; break;
        case 'b': simple = "\b"; break;
        case 'f': simple = "\f"; break;
        case 'v': simple = "\v"; break;
        case 'a': simple = "\a"; break;
        case '\\': simple = "\\"; break;
        case '\'': simple = "'"; break;
        case '"': simple = "\""; break;
        case '\n': simple = ""; L->line++; break; /* a backslash-newline continues the line */
        }
        if (simple) {
            ct_out_put(L->c, &b, simple, strlen(simple));
            L->pos += 2;
            continue;
        }
        if (e == 'x' || e == 'u' || e == 'U') {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = L->pos + 2 + (size_t)k < L->n ? hexval(L->src[L->pos + 2 + k]) : -1;
                if (h < 0) ct_fail(L->c, RECUR_EFORMAT, "line %zu: truncated \\%c escape in a string literal", L->line, e);
                cp = cp << 4 | (uint32_t)h;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                ct_fail(L->c, RECUR_EFORMAT, "line %zu: \\%c escape names no Unicode scalar value (U+%X)", L->line, e, cp);
            ct_out_cp(L->c, &b, cp);
            L->pos += 2 + (size_t)digits;
            continue;
        }
        if ((e >= '0' && e <= '7') || e == 'N')
            ct_fail(L->c, RECUR_EFORMAT, "line %zu: string escape \\%c (octal / named) is not supported", L->line, e);
        /* Python keeps an unknown escape as written */
        ct_out_put(L->c, &b, "\\", 1);
        L->pos++;
    }
    ct_tok *t = emit(L, T_STRING, b.p ? b.p : "", b.n);
    t->line = start_line;
}

static void lex_number(lexer *L)
{
    size_t s = L->pos;
    while (L->pos < L->n && ((L->src[L->pos] >= '0' && L->src[L->pos] <= '9') || L->src[L->pos] == '_')) L->pos++;
    int is_float = 0;
    if (L->pos + 1 < L->n && L->src[L->pos] == '.' && L->src[L->pos + 1] >= '0' && L->src[L->pos + 1] <= '9') {
        is_float = 1;
        L->pos++;
        while (L->pos < L->n && L->src[L->pos] >= '0' && L->src[L->pos] <= '9') L->pos++;
    }
    if (L->pos < L->n && (L->src[L->pos] == 'e' || L->src[L->pos] == 'E')) {
        size_t k = L->pos + 1;
        if (k < L->n && (L->src[k] == '+' || L->src[k] == '-')) k++;
        if (k < L->n && L->src[k] >= '0' && L->src[k] <= '9') {
            is_float = 1;
            L->pos = k;
            while (L->pos < L->n && L->src[L->pos] >= '0' && L->src[L->pos] <= '9') L->pos++;
        }
    }
    char buf[64];
    size_t k = 0;
    for (size_t i = s; i < L->pos; i++)
        if (L->src[i] != '_') {
            if (k + 1 >= sizeof buf) ct_fail(L->c, RECUR_EFORMAT, "line %zu: number literal too long", L->line);
            buf[k++] = L->src[i];
        }
    buf[k] = 0;
    ct_tok *t = emit(L, is_float ? T_FLOAT : T_INT, L->src + s, L->pos - s);
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        if (v > INT64_MAX || k > 19) ct_fail(L->c, RECUR_EFORMAT, "line %zu: integer literal %s out of range", L->line, buf);
        t->i = (int64_t)v;
    }
}

/* Tokens of one {{ }} or {% %} tag, up to and including its end; returns 1 when the end had '-'. */
static int lex_tag(lexer *L, int is_block)
{
    static const char *const ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                      "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".",
                                      ":", "|"};
    int braces = 0;
    for (;;) {
        while (L->pos < L->n && is_ws(L->src[L->pos])) L->line += L->src[L->pos++] == '\n';
        if (L->pos >= L->n)
            ct_fail(L->c, RECUR_EFORMAT, "line %zu: unclosed '%s' tag", L->line, is_block ? "{%" : "{{");
        const char *p = L->src + L->pos;
        size_t left = L->n - L->pos;
        char close = is_block ? '%' : '}';
        if (left >= 3 && p[0] == '-' && p[1] == close && p[2] == '}' && braces == 0) {
            emit(L, is_block ? T_BLOCK_END : T_VAR_END, p, 3);
            L->pos += 3;
            return 1;
        }
        if (left >= 2 && p[0] == close && p[1] == '}' && braces == 0) {
            emit(L, is_block ? T_BLOCK_END : T_VAR_END, p, 2);
            L->pos += 2;
            return 0;
        }
        if (left >= 2 && p[0] == '{' && (p[1] == '%' || p[1] == '{' || p[1] == '#'))
            ct_fail(L->c, RECUR_EFORMAT, "line %zu: '%.2s' inside a tag (an unclosed tag before it?)", L->line, p);
        char ch = p[0];
        if (ch == '\'' || ch == '"') { lex_string(L); continue; }
        if (ch >= '0' && ch <= '9') { lex_number(L); continue; }
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
            size_t s = L->pos;
            while (L->pos < L->n) {
                char d = L->src[L->pos];
                if (!((d >= 'a' && d <= 'z') || (d >= 'A' && d <= 'Z') || d == '_' || (d >= '0' && d <= '9'))) break;
                L->pos++;
            }
            emit(L, T_NAME, L->src + s, L->pos - s);
            continue;
        }
        size_t k = 0;
        for (; k < sizeof ops / sizeof *ops; k++)
            if (left >= strlen(ops[k]) && !memcmp(p, ops[k], strlen(ops[k]))) break;
        if (k == sizeof ops / sizeof *ops) {
            uint32_t cp;
            tk_utf8_next(p, &cp);
            ct_fail(L->c, RECUR_EFORMAT, "line %zu: unexpected character U+%04X inside a tag", L->line, cp);
        }
        size_t ol = strlen(ops[k]);
        if (ops[k][0] == '{') braces++;
        if (ops[k][0] == '}') braces--;
        emit(L, T_OP, p, ol);
        L->pos += ol;
    }
}

void ct_lex(ct_ctx *c, const char *src, size_t n, ct_tok **toks, size_t *ntoks)
{
    lexer L = {.c = c, .src = src, .n = n, .line = 1};
    if (L.n && src[L.n - 1] == '\n') L.n--; /* keep_trailing_newline=False */
    int strip_next = 0;  /* the previous tag ended with '-' */
    int trim_next = 0;   /* the previous tag was a block or comment (trim_blocks) */
    while (L.pos < L.n) {
        size_t text_start = L.pos;
        if (strip_next) text_start = lstrip_ws(src, text_start, L.n);
        else if (trim_next && text_start < L.n && src[text_start] == '\n') text_start++;
        count_lines(&L, L.pos, text_start);
        /* the next tag */
        size_t t = text_start;
        while (t + 1 < L.n && !(src[t] == '{' && (src[t + 1] == '{' || src[t + 1] == '%' || src[t + 1] == '#'))) t++;
        if (t + 1 >= L.n) t = L.n;
        size_t text_end = t;
        if (t < L.n) {
            char kind = src[t + 1];
            char mod = t + 2 < L.n ? src[t + 2] : 0;
            if (mod == '-') {
                text_end = rstrip_ws(src, text_start, t);
            } else if ((kind == '%' || kind == '#') && mod != '+') {
                /* lstrip_blocks: only blanks between the line start and the tag */
                size_t k = t;
                while (k > 0 && (src[k - 1] == ' ' || src[k - 1] == '\t')) k--;
                if ((k == 0 || src[k - 1] == '\n') && k >= text_start) text_end = k;
            }
        }
        if (text_end > text_start) emit(&L, T_TEXT, src + text_start, text_end - text_start);
        count_lines(&L, text_start, t);
        L.pos = t;
        if (t >= L.n) break;
        char kind = src[t + 1];
        L.pos += 2;
        if (L.pos < L.n && (src[L.pos] == '-' || src[L.pos] == '+')) L.pos++;
        if (kind == '#') {
            size_t k = L.pos;
            while (k + 1 < L.n && !(src[k] == '#' && src[k + 1] == '}')) k++;
            if (k + 1 >= L.n) ct_fail(c, RECUR_EFORMAT, "line %zu: unclosed comment '{#'", L.line);
            strip_next = k > L.pos && src[k - 1] == '-';
            trim_next = 1;
            count_lines(&L, L.pos, k);
            L.pos = k + 2;
            continue;
        }
        int block = kind == '%';
        emit(&L, block ? T_BLOCK_BEGIN : T_VAR_BEGIN, src + t, 2);
        strip_next = lex_tag(&L, block);
        trim_next = block;
    }
    emit(&L, T_EOF, src + L.n, 0);
    *toks = L.tok;
    *ntoks = L.ntok;
}
