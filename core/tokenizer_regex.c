/* tokenizer_regex.c — tokenizer.json patterns (Oniguruma syntax) for PCRE2, and the two ways the
 * tokenizer uses a match: split (matchAll) and replaceAll.
 *
 * The rewrite follows what the reference (@huggingface/tokenizers) does to the same pattern:
 *   \s \S      -> Unicode White_Space (not JavaScript's \s, which adds U+FEFF and lacks U+0085)
 *   \d \D      -> \p{Nd}
 *   \w \W      -> [\p{Alphabetic}\p{M}\p{Nd}\p{Pc}] (plus the Latin-1 digits outside classes)
 *   \h \H      -> ASCII hex digits;  \v -> U+000B;  \uXXXX -> \x{XXXX};  \G is dropped
 *   (?i: ... ) -> ASCII case folding only (letters become [xX])
 *   (?> ... )  -> an ordinary group, as the reference treats it
 *   ^ $        -> line anchors on \n only (Oniguruma's default); . excludes \n
 * Character-class intersection (&&) and \S or \W inside a class are errors at load.
 * ByteLevel's built-in GPT-2 pattern is compiled with JavaScript's native \s (js_native_space),
 * since the reference runs that one as a JavaScript literal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#define WS_CLASS "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define JS_WS_CLASS "\\x{9}-\\x{D}\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"
#define WORD_IN_CLASS "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"
#define WORD_CLASS "[" WORD_IN_CLASS "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}]"

#define MAX_PATTERN 65536
#define MATCH_LIMIT 10000000u

static int is_letter(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int other_case(int c) { return c >= 'a' && c <= 'z' ? c - 32 : c + 32; }

static int put(tk_buf *o, const char *s) { return tk_buf_put(o, s, strlen(s)); }

/* Rewrite pat into o. Returns 0 or an error message (static). */
static const char *rewrite(const char *p, size_t n, int js_space, tk_buf *o)
{
    const char *ws = js_space ? JS_WS_CLASS : WS_CLASS;
    int fold_stack[256], depth = 0, fold = 0;
    int in_class = 0, class_start = 0;
    char tmp[64];
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\\') {
            if (i + 1 >= n) return "pattern ends with a backslash";
            char e = p[i + 1];
            i += 2;
            switch (e) {
            case 's':
                if (in_class ? put(o, ws) : (tk_buf_putc(o, '[') || put(o, ws) || tk_buf_putc(o, ']'))) return "out of memory";
                continue;
            case 'S': if (in_class) return "\\S inside a character class";
                      if (put(o, "[^") || put(o, ws) || tk_buf_putc(o, ']')) return "out of memory";
                      continue;
            case 'd': if (put(o, "\\p{Nd}")) return "out of memory"; continue;
            case 'D': if (put(o, "\\P{Nd}")) return "out of memory"; continue;
            case 'w': if (put(o, in_class ? WORD_IN_CLASS : WORD_CLASS)) return "out of memory"; continue;
            case 'W': if (in_class) return "\\W inside a character class";
                      if (put(o, "[^" WORD_IN_CLASS "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}]")) return "out of memory";
                      continue;
            case 'h': if (put(o, in_class ? "0-9A-Fa-f" : "[0-9A-Fa-f]")) return "out of memory"; continue;
            case 'H': if (in_class) return "\\H inside a character class";
                      if (put(o, "[^0-9A-Fa-f]")) return "out of memory";
                      continue;
            case 'v': if (put(o, "\\x{B}")) return "out of memory"; continue;
            case 'G': continue;
            case 'u': {
                size_t k = 0;
                while (k < 4 && i + k < n && strchr("0123456789abcdefABCDEF", p[i + k]) && p[i + k]) k++;
                if (k != 4) return "\\u without four hex digits";
                snprintf(tmp, sizeof tmp, "\\x{%.4s}", p + i);
                i += 4;
                if (put(o, tmp)) return "out of memory";
                continue;
            }
            case 'p': case 'P': {
                /* \p{Word} is the reference's word class */
                if (i + 6 <= n && !memcmp(p + i, "{Word}", 6)) {
                    i += 6;
                    if (e == 'P' && in_class) return "\\P{Word} inside a character class";
                    if (put(o, e == 'p' ? (in_class ? WORD_IN_CLASS : WORD_CLASS)
                                        : "[^" WORD_IN_CLASS "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}]"))
                        return "out of memory";
                    continue;
                }
                break;
            }
            default:
                break;
            }
            /* verbatim escape (\p{..}, \x.., \n, \r, \t, \A, \z, \b, \., ...) */
            if (tk_buf_putc(o, '\\') || tk_buf_putc(o, e)) return "out of memory";
            continue;
        }
        if (in_class) {
            if (c == '[' && i + 1 < n && p[i + 1] == ':') {
                /* POSIX class: copy through :] */
                const char *end = memchr(p + i + 2, ']', n - i - 2);
                if (!end) return "unterminated POSIX class";
                if (tk_buf_put(o, p + i, (size_t)(end - (p + i)) + 1)) return "out of memory";
                i = (size_t)(end - p) + 1;
                continue;
            }
            if (c == '[') return "nested character class";
            if (c == '&' && i + 1 < n && p[i + 1] == '&') return "character-class intersection (&&)";
            if (c == ']' && i > (size_t)class_start) { in_class = 0; if (tk_buf_putc(o, ']')) return "out of memory"; i++; continue; }
            if (fold && is_letter(c)) {
                /* a range of letters folds into both ranges */
                if (i + 2 < n && p[i + 1] == '-' && is_letter((unsigned char)p[i + 2]) &&
                    (c >= 'a') == ((unsigned char)p[i + 2] >= 'a')) {
                    char r[8] = {(char)c, '-', p[i + 2], (char)other_case(c), '-', (char)other_case((unsigned char)p[i + 2]), 0};
                    if (put(o, r)) return "out of memory";
                    i += 3;
                    continue;
                }
                if (tk_buf_putc(o, c) || tk_buf_putc(o, other_case(c))) return "out of memory";
                i++;
                continue;
            }
            if (tk_buf_putc(o, c)) return "out of memory";
            i++;
            continue;
        }
        if (c == '[') {
            in_class = 1;
            if (tk_buf_putc(o, '[')) return "out of memory";
            i++;
            if (i < n && p[i] == '^') { if (tk_buf_putc(o, '^')) return "out of memory"; i++; }
            class_start = (int)i; /* a ']' right here is literal */
            if (i < n && p[i] == ']') { if (put(o, "\\]")) return "out of memory"; i++; }
            continue;
        }
        if (c == '(') {
            if (depth >= 255) return "groups nested deeper than 255";
            fold_stack[depth++] = fold;
            if (i + 3 < n && !memcmp(p + i, "(?i:", 4)) { fold = 1; if (put(o, "(?:")) return "out of memory"; i += 4; continue; }
            if (i + 2 < n && !memcmp(p + i, "(?>", 3)) { if (put(o, "(?:")) return "out of memory"; i += 3; continue; }
            if (i + 2 < n && p[i + 1] == '?' && !strchr(":=!<", p[i + 2]))
                return "inline option group other than (?i:...)";
            if (tk_buf_putc(o, '(')) return "out of memory";
            i++;
            continue;
        }
        if (c == ')') {
            if (depth > 0) fold = fold_stack[--depth];
            if (tk_buf_putc(o, ')')) return "out of memory";
            i++;
            continue;
        }
        if (fold && is_letter(c)) {
            char r[5] = {'[', (char)c, (char)other_case(c), ']', 0};
            if (put(o, r)) return "out of memory";
            i++;
            continue;
        }
        if (tk_buf_putc(o, c)) return "out of memory";
        i++;
    }
    if (in_class) return "unterminated character class";
    return NULL;
}

int tk_regex_compile(tk_regex *r, const char *pat, size_t n, int literal, int js_native_space,
                     char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->literal = literal;
    if (n > MAX_PATTERN) { tk_err(err, errlen, "pattern longer than %d bytes", MAX_PATTERN); return RECUR_EFORMAT; }
    if (tk_utf8_valid_prefix(pat, n) != n) { tk_err(err, errlen, "pattern is not valid UTF-8"); return RECUR_EFORMAT; }
    tk_buf o = {0};
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
    if (literal) {
        opts = PCRE2_UTF | PCRE2_LITERAL;
        if (tk_buf_put(&o, pat, n)) return RECUR_ENOMEM;
    } else {
        if (memchr(pat, 0, n)) { tk_err(err, errlen, "pattern contains NUL"); return RECUR_EFORMAT; }
        const char *msg = rewrite(pat, n, js_native_space, &o);
        if (msg) {
            tk_buf_free(&o);
            tk_err(err, errlen, "unsupported regex construct: %s", msg);
            return RECUR_EFORMAT;
        }
        if (tk_buf_put(&o, "", 0)) return RECUR_ENOMEM;
    }
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    if (!cc) { tk_buf_free(&o); return RECUR_ENOMEM; }
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    pcre2_set_max_pattern_length(cc, MAX_PATTERN * 4);
    int ec;
    PCRE2_SIZE eo;
    r->code = pcre2_compile((PCRE2_SPTR)o.p, o.n, opts, &ec, &eo, cc);
    pcre2_compile_context_free(cc);
    if (!r->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        tk_err(err, errlen, "regex does not compile: %s at offset %zu", (char *)msg, (size_t)eo);
        tk_buf_free(&o);
        return RECUR_EFORMAT;
    }
    tk_buf_free(&o);
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE); /* failure just means the interpreter */
    return 0;
}

void tk_regex_free(tk_regex *r)
{
    if (r->code) pcre2_code_free(r->code);
    memset(r, 0, sizeof *r);
}

/* The thread's context is freed when the thread exits (a key destructor), so worker threads that
 * decode and then end leak nothing. */
static pthread_key_t mc_key;
static pthread_once_t mc_once = PTHREAD_ONCE_INIT;
static void mc_free(void *mc) { pcre2_match_context_free(mc); }
static void mc_key_make(void) { pthread_key_create(&mc_key, mc_free); }

static pcre2_match_context *match_ctx(void)
{
    /* one per thread: a match limit so that a hostile pattern fails instead of spinning */
    static _Thread_local pcre2_match_context *mc;
    if (!mc) {
        mc = pcre2_match_context_create(NULL);
        if (mc) {
            pcre2_set_match_limit(mc, MATCH_LIMIT);
            pcre2_set_depth_limit(mc, 100000);
            pthread_once(&mc_once, mc_key_make);
            pthread_setspecific(mc_key, mc);
        }
    }
    return mc;
}

int tk_regex_each(const tk_regex *r, const char *s, size_t n, tk_match_fn fn, void *ctx)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(r->code, NULL);
    if (!md) return RECUR_ENOMEM;
    pcre2_match_context *mc = match_ctx();
    size_t at = 0;
    int rc = 0;
    while (at <= n) {
        int m = pcre2_match(r->code, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, mc);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) { rc = m == PCRE2_ERROR_NOMEMORY ? RECUR_ENOMEM : RECUR_ERANGE; break; }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (b < a) b = a; /* \K tricks */
        if ((rc = fn(ctx, a, b, md))) break;
        if (b == a) {
            if (b >= n) break;
            at = b + tk_utf8_len((unsigned char)s[b]);
        } else at = b;
    }
    pcre2_match_data_free(md);
    return rc;
}

typedef struct { const char *s; tk_buf *out; size_t prev; const char *with; size_t wn; } repl_ctx;

static int repl_fn(void *c, size_t a, size_t b, pcre2_match_data *md)
{
    repl_ctx *x = c;
    if (a < x->prev) a = x->prev;
    if (tk_buf_put(x->out, x->s + x->prev, a - x->prev) || tk_buf_put(x->out, x->with, x->wn)) return RECUR_ENOMEM;
    x->prev = b > a ? b : a;
    return 0;
}

int tk_regex_replace(const tk_regex *r, const char *s, size_t n, const char *with, size_t wn, tk_buf *out)
{
    out->n = 0;
    repl_ctx x = {s, out, 0, with, wn};
    int rc = tk_regex_each(r, s, n, repl_fn, &x);
    if (rc) return rc;
    return tk_buf_put(out, s + x.prev, n - x.prev);
}
