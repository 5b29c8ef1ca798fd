/* tokenizer_jscan.c — a strict, bounded scan of tokenizer.json that reads model.vocab and
 * model.merges itself and leaves the small rest of the file to cJSON.
 *
 * cJSON builds a node (a malloc) per value: for a 151k-token vocabulary and its merges that
 * was ~600k nodes and the largest part of the load time. tk_js_split walks the text once:
 *   - it checks the whole document against RFC 8259 (no comments, trailing commas, leading
 *     zeros, bare control characters in strings, bad escapes, lone UTF-16 surrogates, content
 *     after the value), nesting at most TK_JS_MAX_DEPTH deep — as JSON.parse would refuse;
 *   - the members "vocab" (an object) and "merges" (an array) of the root's "model" object are
 *     read into two flat arrays (no allocation per entry), at most TK_MAX_ID vocabulary entries
 *     and TK_MAX_MERGES merges; their strings are referenced where they stand in the document,
 *     and only those with escapes are decoded, into one byte buffer;
 *   - "model", "vocab" and "merges" may each appear once (JSON.parse would keep the last and
 *     cJSON the first: refused instead);
 *   - the rest of the text, with those two values replaced by {} and [], is handed back for
 *     cJSON (tokenizer_json.c reads every other member from it).
 * Values are interpreted by tokenizer_json.c (UTF-8 validity, id ranges, merge shapes). */
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

typedef struct {
    const unsigned char *p;
    size_t n, i;
    const char *why; /* the first syntax error */
    char msg[96];    /* a refusal that is not a syntax error */
    int refused;
} scan;

static int bad(scan *s, const char *why)
{
    if (!s->why) s->why = why;
    return RECUR_EFORMAT;
}

static int refuse(scan *s, const char *why)
{
    snprintf(s->msg, sizeof s->msg, "%s", why);
    s->refused = 1;
    return RECUR_EFORMAT;
}

static inline void ws(scan *s)
{
    while (s->i < s->n && (s->p[s->i] == ' ' || s->p[s->i] == '\t' || s->p[s->i] == '\n' || s->p[s->i] == '\r')) s->i++;
}

static inline int at(scan *s, unsigned char c)
{
    return s->i < s->n && s->p[s->i] == c;
}

static int hex4(const unsigned char *p, uint32_t *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = p[k];
        unsigned d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 16;
        if (d > 15) return 0;
        *v = *v << 4 | d;
    }
    return 1;
}

/* The string at s->i (its opening quote). Decoded bytes are appended to out unless out is NULL. */
static int string(scan *s, tk_buf *out)
{
    if (!at(s, '"')) return bad(s, "expected a string");
    const unsigned char *p = s->p;
    size_t i = s->i + 1, n = s->n;
    for (;;) {
        size_t run = i;
        while (i < n && p[i] != '"' && p[i] != '\\' && p[i] >= 0x20) i++;
        if (out && i > run && tk_buf_put(out, p + run, i - run)) return RECUR_ENOMEM;
        if (i >= n) return bad(s, "unterminated string");
        if (p[i] == '"') { s->i = i + 1; return 0; }
        if (p[i] < 0x20) return bad(s, "control character inside a string");
        if (i + 1 >= n) return bad(s, "unterminated string");
        unsigned char e = p[i + 1], c;
        i += 2;
        switch (e) {
        case '"': case '\\': case '/': c = e; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (i + 4 > n || !hex4(p + i, &cp)) return bad(s, "\\u without four hex digits");
            i += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return bad(s, "lone UTF-16 surrogate in a \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (!(i + 6 <= n && p[i] == '\\' && p[i + 1] == 'u' && hex4(p + i + 2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF))
                    return bad(s, "lone UTF-16 surrogate in a \\u escape");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            if (out && tk_buf_put_cp(out, cp)) return RECUR_ENOMEM;
            continue;
        }
        default: return bad(s, "invalid escape in a string");
        }
        if (out && tk_buf_putc(out, c)) return RECUR_ENOMEM;
    }
}

/* The string at s->i as a reference (tk_js_str): into the document itself when it holds no escape
 * (nearly every string of a vocabulary: nothing is copied), else decoded into m->text. */
static int string_ref(scan *s, tk_js_model *m, uint32_t *ref, uint32_t *len)
{
    const unsigned char *p = s->p;
    size_t i = s->i + 1, n = s->n;
    while (i < n && p[i] != '"' && p[i] != '\\' && p[i] >= 0x20) i++;
    if (i < n && p[i] == '"') {
        *ref = (uint32_t)(s->i + 1);
        *len = (uint32_t)(i - s->i - 1);
        s->i = i + 1;
        return 0;
    }
    size_t off = m->text.n;
    int r = string(s, &m->text);
    if (r) return r;
    *ref = TK_JS_IN_TEXT | (uint32_t)off;
    *len = (uint32_t)(m->text.n - off);
    return 0;
}

/* RFC 8259 number grammar at s->i; [*a, s->i) is the number afterwards */
static int number(scan *s, size_t *a)
{
    const unsigned char *p = s->p;
    size_t i = s->i, n = s->n;
#define DIGIT(k) ((k) < n && p[k] >= '0' && p[k] <= '9')
    *a = i;
    if (i < n && p[i] == '-') i++;
    if (!DIGIT(i)) return bad(s, "malformed number");
    if (p[i] == '0') i++;
    else while (DIGIT(i)) i++;
    if (i < n && p[i] == '.') {
        if (!DIGIT(i + 1)) return bad(s, "malformed number");
        for (i++; DIGIT(i); i++) {}
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-')) i++;
        if (!DIGIT(i)) return bad(s, "malformed number");
        while (DIGIT(i)) i++;
    }
#undef DIGIT
    s->i = i;
    return 0;
}

/* the number p[0..n) (valid grammar) as an id in [0, INT32_MAX], or -1 when it is not one;
 * RECUR_ENOMEM */
static int64_t number_id(const unsigned char *p, size_t n)
{
    if (n <= 9) {
        int64_t v = 0;
        size_t k = 0;
        while (k < n && p[k] >= '0' && p[k] <= '9') v = v * 10 + (p[k++] - '0');
        if (k == n) return v;
    }
    /* a fraction, an exponent or a sign: strtod as cJSON does (the locale's decimal point) */
    char small[64], *b = n < sizeof small ? small : malloc(n + 1);
    if (!b) return RECUR_ENOMEM;
    memcpy(b, p, n);
    b[n] = 0;
    const char *dp = localeconv()->decimal_point;
    for (size_t k = 0; dp && dp[0] && !dp[1] && k < n; k++)
        if (b[k] == '.') b[k] = dp[0];
    double d = strtod(b, NULL);
    if (b != small) free(b);
    if (!(d >= 0 && d <= (double)INT32_MAX) || d != (double)(int32_t)d) return -1;
    return (int32_t)d;
}

/* a literal true / false / null */
static int literal(scan *s)
{
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(words[k]);
        if (s->n - s->i >= l && !memcmp(s->p + s->i, words[k], l)) { s->i += l; return 0; }
    }
    return bad(s, "unexpected character");
}

/* Before the next member or element of an open object or array (index: how many came before):
 * 1 when one follows (s->i at it), 0 after the closing bracket. */
static int more(scan *s, unsigned char close, size_t index)
{
    ws(s);
    if (at(s, close)) { s->i++; return 0; }
    if (index) {
        if (!at(s, ',')) return bad(s, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
        s->i++;
        ws(s);
    }
    return 1;
}

/* an object key at s->i and its colon; the key is appended to key unless key is NULL */
static int key_colon(scan *s, tk_buf *key)
{
    int rc = string(s, key);
    if (rc) return rc;
    ws(s);
    if (!at(s, ':')) return bad(s, "expected ':' after an object key");
    s->i++;
    ws(s);
    return 0;
}

static int skip(scan *s, int depth)
{
    ws(s);
    if (s->i >= s->n) return bad(s, "expected a value");
    unsigned char c = s->p[s->i];
    if (c == '"') return string(s, NULL);
    if (c == '-' || (c >= '0' && c <= '9')) { size_t a; return number(s, &a); }
    if (c != '{' && c != '[') return literal(s);
    if (depth >= TK_JS_MAX_DEPTH) return bad(s, "nested too deep");
    unsigned char close = c == '{' ? '}' : ']';
    s->i++;
    for (size_t k = 0;; k++) {
        int r = more(s, close, k);
        if (r <= 0) return r;
        if (c == '{' && (r = key_colon(s, NULL))) return r;
        if ((r = skip(s, depth + 1))) return r;
    }
}

static int is_key(const tk_buf *k, const char *name)
{
    return k->n == strlen(name) && !memcmp(k->p, name, k->n);
}

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 1024;
    void *q = tk_big_resize(*p, c * elem);
    if (!q) return RECUR_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* One member of "vocab": {"token": id, ...}; a value that is not an integer in [0, INT32_MAX]
 * gets id -1. */
static int vocab_entry(scan *s, tk_js_model *m, void *entry, int depth)
{
    tk_js_entry *e = entry;
    int r = string_ref(s, m, &e->off, &e->len);
    if (r) return r;
    ws(s);
    if (!at(s, ':')) return bad(s, "expected ':' after an object key");
    s->i++;
    ws(s);
    e->id = -1;
    if (!at(s, '-') && !(s->i < s->n && s->p[s->i] >= '0' && s->p[s->i] <= '9')) return skip(s, depth + 1);
    size_t a;
    if ((r = number(s, &a))) return r;
    int64_t id = number_id(s->p + a, s->i - a);
    if (id == RECUR_ENOMEM) return RECUR_ENOMEM;
    e->id = (int32_t)id;
    return 0;
}

/* One element of "merges": "a b" (form 1) or ["a", "b"] (form 2); anything else is kept as form 0. */
static int merge_entry(scan *s, tk_js_model *m, void *entry, int depth)
{
    tk_js_merge *e = entry;
    int r;
    if (at(s, '"')) {
        e->form = 1;
        return string_ref(s, m, &e->a, &e->an);
    }
    if (!at(s, '[') || depth + 1 >= TK_JS_MAX_DEPTH) return skip(s, depth + 1);
    s->i++;
    int strings = 0;
    size_t j = 0;
    for (;; j++) {
        if ((r = more(s, ']', j)) < 0) return r;
        if (!r) break;
        if (j < 2 && at(s, '"')) {
            if ((r = j == 0 ? string_ref(s, m, &e->a, &e->an) : string_ref(s, m, &e->b, &e->bn))) return r;
            strings++;
        } else if ((r = skip(s, depth + 2))) return r;
    }
    e->form = j == 2 && strings == 2 ? 2 : 0;
    return 0;
}

/* A table read entry by entry from the object or array at s->i (closed by close): at most limit
 * entries of elem bytes in *arr (else the refusal too_many), each zeroed then filled by fn. */
typedef int (*entry_fn)(scan *s, tk_js_model *m, void *entry, int depth);
typedef struct { unsigned char close; size_t elem, limit; const char *too_many; entry_fn fn; } table_kind;

static int read_table(scan *s, tk_js_model *m, int depth, const table_kind *t, void **arr, size_t *n, size_t *cap)
{
    s->i++;
    for (size_t k = 0;; k++) {
        int r = more(s, t->close, k);
        if (r <= 0) return r;
        if (*n >= t->limit) return refuse(s, t->too_many);
        if (grow(arr, cap, *n, t->elem)) return RECUR_ENOMEM;
        void *e = (char *)*arr + (*n)++ * t->elem;
        memset(e, 0, t->elem);
        if ((r = t->fn(s, m, e, depth))) return r;
    }
}

static const table_kind k_vocab = {'}', sizeof(tk_js_entry), TK_MAX_ID, "model BPE: more than 16777216 vocab entries", vocab_entry};
static const table_kind k_merges = {']', sizeof(tk_js_merge), TK_MAX_MERGES, "model BPE: more than 8388608 merges", merge_entry};

/* the members of the root's "model" object */
static int read_model(scan *s, tk_js_model *m, tk_buf *key)
{
    s->i++;
    for (size_t k = 0;; k++) {
        int r = more(s, '}', k);
        if (r <= 0) return r;
        key->n = 0;
        if ((r = key_colon(s, key))) return r;
        int vocab = is_key(key, "vocab"), merges = is_key(key, "merges");
        if ((vocab && m->vocab_at) || (merges && m->merges_at)) {
            return refuse(s, vocab ? "model: the key \"vocab\" appears twice" : "model: the key \"merges\" appears twice");
        }
        size_t start = s->i;
        if (vocab && at(s, '{')) r = read_table(s, m, 2, &k_vocab, (void **)&m->vocab, &m->n_vocab, &m->cap_vocab);
        else if (merges && at(s, '[')) r = read_table(s, m, 2, &k_merges, (void **)&m->merges, &m->n_merges, &m->cap_merges);
        else { r = skip(s, 2); vocab = merges = 0; }
        if (r) return r;
        if (vocab) { m->has_vocab = 1; m->vocab_at = start + 1; m->vocab_end = s->i; }
        if (merges) { m->has_merges = 1; m->merges_at = start + 1; m->merges_end = s->i; }
    }
}

static int document(scan *s, tk_js_model *m)
{
    ws(s);
    if (!at(s, '{')) {
        int r = skip(s, 0);
        if (!r) { ws(s); if (s->i == s->n) return refuse(s, "not a JSON object"); }
        return r ? r : bad(s, "content after the JSON value");
    }
    s->i++;
    tk_buf key = {0};
    int r, seen_model = 0;
    for (size_t k = 0;; k++) {
        if ((r = more(s, '}', k)) <= 0) break;
        key.n = 0;
        if ((r = key_colon(s, &key))) break;
        if (is_key(&key, "model")) {
            if (seen_model) { r = refuse(s, "the key \"model\" appears twice"); break; }
            seen_model = 1;
            r = at(s, '{') ? read_model(s, m, &key) : skip(s, 1);
        } else r = skip(s, 1);
        if (r) break;
    }
    tk_buf_free(&key);
    if (r) return r;
    ws(s);
    return s->i == s->n ? 0 : bad(s, "content after the JSON value");
}

/* the text without the two values' insides: "vocab": {} and "merges": [] */
static int build_rest(const char *json, size_t len, tk_js_model *m)
{
    /* [keep from, cut at) pairs in text order; a value's brackets stay */
    size_t cuts[2][2];
    int n = 0;
    if (m->has_vocab) { cuts[n][0] = m->vocab_at; cuts[n][1] = m->vocab_end - 1; n++; }
    if (m->has_merges) { cuts[n][0] = m->merges_at; cuts[n][1] = m->merges_end - 1; n++; }
    if (n == 2 && cuts[0][0] > cuts[1][0]) {
        size_t t0 = cuts[0][0], t1 = cuts[0][1];
        cuts[0][0] = cuts[1][0]; cuts[0][1] = cuts[1][1];
        cuts[1][0] = t0; cuts[1][1] = t1;
    }
    tk_buf r = {0};
    size_t from = 0;
    int rc = 0;
    for (int k = 0; !rc && k < n; k++) {
        rc = tk_buf_put(&r, json + from, cuts[k][0] - from);
        from = cuts[k][1];
    }
    if (!rc) rc = tk_buf_put(&r, json + from, len - from);
    if (rc) { tk_buf_free(&r); return RECUR_ENOMEM; }
    m->rest = r.p;
    m->rest_len = r.n;
    return 0;
}

/* The two arrays sized once from the bound the length gives (an entry takes two bytes at least),
 * capped by the entry limits. Only what is written is ever touched (tk_big_alloc maps lazily), so
 * the slack costs address space, not memory; growing by doubling copied and re-zeroed ~15 MB for
 * llama3, and counting the quotes first cost a pass over the file. */
static int presize(size_t len, tk_js_model *m)
{
    size_t strings = len / 2 + 1;
    m->cap_vocab = strings < TK_MAX_ID ? strings : TK_MAX_ID;
    m->cap_merges = strings < TK_MAX_MERGES ? strings : TK_MAX_MERGES;
    m->vocab = tk_big_alloc(m->cap_vocab * sizeof *m->vocab);
    m->merges = tk_big_alloc(m->cap_merges * sizeof *m->merges);
    if (!m->vocab || !m->merges) return RECUR_ENOMEM;
    return 0;
}

void tk_js_model_free(tk_js_model *m)
{
    free(m->rest);
    tk_buf_free(&m->text);
    tk_big_free(m->vocab);
    tk_big_free(m->merges);
    memset(m, 0, sizeof *m);
}

int tk_js_split(const char *json, size_t len, tk_js_model *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->text.big = 1;
    m->json = json;
    if (len >= TK_JS_IN_TEXT) { tk_err(err, errlen, "tokenizer.json: larger than 2 GB"); return RECUR_EFORMAT; }
    scan s = {(const unsigned char *)json, len, 0, NULL, "", 0};
    int rc = presize(len, m);
    if (!rc) rc = document(&s, m);
    if (!rc) rc = build_rest(json, len, m);
    if (rc == RECUR_EFORMAT) {
        if (s.refused) tk_err(err, errlen, "tokenizer.json: %s", s.msg);
        else tk_err(err, errlen, "tokenizer.json: not valid JSON (%s at byte %zu)", s.why ? s.why : "?", s.i);
    } else if (rc) tk_err(err, errlen, "tokenizer.json: out of memory");
    if (rc) tk_js_model_free(m);
    return rc;
}
