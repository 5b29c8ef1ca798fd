/* tokenizer_json.c — a Hugging Face tokenizer.json -> tk_hf.
 *
 * Implemented: model BPE (vocab, merges as "a b" strings or [a, b] pairs, unk_token,
 * byte_fallback, ignore_merges, fuse_unk, continuing_subword_prefix, end_of_word_suffix);
 * normalizers NFC NFKC NFD NFKD Prepend Replace Lowercase Sequence; pre-tokenizers ByteLevel
 * Split Metaspace Digits Sequence; added_tokens; post-processors TemplateProcessing, ByteLevel,
 * Sequence; decoders ByteLevel ByteFallback Fuse Strip Replace Metaspace Sequence. Anything else
 * the file uses is an error at load that names it ("tokenizer.json: normalizer \"X\" is not
 * implemented"); so are combinations whose streaming decode would differ from the one-shot one. */
#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#define MAX_ID TK_MAX_ID

typedef struct { char *err; size_t errlen; } ectx;

#define FAIL(...) do { tk_err(e->err, e->errlen, "tokenizer.json: " __VA_ARGS__); return RECUR_EFORMAT; } while (0)

/* ---------------------------------------------------------------- byte-level alphabet */

static int16_t unmap_tab[324];
static uint16_t map_tab[256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void build_tabs(void)
{
    int n = 0;
    for (int i = 0; i < 324; i++) unmap_tab[i] = -1;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        map_tab[b] = (uint16_t)(keep ? b : 256 + n++);
        unmap_tab[map_tab[b]] = (int16_t)b;
    }
}

/* mapped characters -> raw bytes appended to o; 0 when s is not a sequence of the alphabet's
 * characters in UTF-8 (o unchanged): a character outside it, or invalid UTF-8 — the alphabet is
 * code points below 324, one byte or a two-byte sequence led by C2..C5, checked here in full */
static int unmap_append(const char *s, size_t n, tk_buf *o)
{
    size_t n0 = o->n;
    if (tk_buf_reserve(o, n)) return RECUR_ENOMEM;
    char *d = o->p + n0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp = u[i];
        if (cp >= 0x80) {
            if (cp < 0xC2 || cp > 0xC5 || i + 1 >= n || (u[i + 1] & 0xC0) != 0x80) { o->p[n0] = 0; return 0; }
            cp = (cp & 0x1F) << 6 | (u[i + 1] & 0x3F);
            i += 2;
        } else {
            i++;
        }
        if (cp >= 324 || unmap_tab[cp] < 0) { o->p[n0] = 0; return 0; }
        *d++ = (char)unmap_tab[cp];
    }
    o->n = (size_t)(d - o->p);
    o->p[o->n] = 0;
    return 1;
}

static int unmap(const char *s, size_t n, tk_buf *o)
{
    o->n = 0;
    return unmap_append(s, n, o);
}

/* ---------------------------------------------------------------- JSON helpers */

static int jbool(const cJSON *o, const char *k, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return dflt;
}

/* a string value; NULL when absent or null; *bad when present with another type */
static const char *jstr(const cJSON *o, const char *k, int *bad)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v)) return NULL;
    if (!cJSON_IsString(v) || !v->valuestring) { *bad = 1; return NULL; }
    return v->valuestring;
}

static const char *jtype(const cJSON *o)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) && t->valuestring ? t->valuestring : NULL;
}

/* an id: an integer in [0, MAX_ID) (range first: a cast of 1e300 to int is undefined) */
static int jid(const cJSON *v)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < MAX_ID)) return 0;
    return v->valuedouble == (double)(int32_t)v->valuedouble;
}

static char *dup(const char *s, size_t *n)
{
    size_t l = strlen(s);
    char *p = malloc(l + 1);
    if (p) memcpy(p, s, l + 1);
    if (n) *n = l;
    return p;
}

static int valid_str(const char *s)
{
    size_t n = strlen(s);
    return tk_utf8_valid_prefix(s, n) == n;
}

/* a pattern object {"String": s} or {"Regex": r} */
static int pattern(const cJSON *o, const char *where, tk_regex *re, ectx *e)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    if (!cJSON_IsObject(p)) FAIL("%s: pattern must be {\"String\": ...} or {\"Regex\": ...}", where);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    const cJSON *v = cJSON_IsString(s) ? s : cJSON_IsString(r) ? r : NULL;
    if (!v || !v->valuestring) FAIL("%s: pattern must be {\"String\": ...} or {\"Regex\": ...}", where);
    if (v == s && !*v->valuestring) FAIL("%s: empty String pattern", where);
    char msg[200];
    int rc = tk_regex_compile(re, v->valuestring, strlen(v->valuestring), v == s, 0, msg, sizeof msg);
    if (rc == RECUR_EFORMAT) FAIL("%s: %s", where, msg);
    return rc;
}

/* ---------------------------------------------------------------- components */

static int push(void **arr, size_t *n, size_t elem)
{
    if (*n >= (1u << 20)) return RECUR_ESHAPE;
    void *p = realloc(*arr, (*n + 1) * elem);
    if (!p) return RECUR_ENOMEM;
    *arr = p;
    memset((char *)p + *n * elem, 0, elem);
    (*n)++;
    return 0;
}

/* What every component shares: absent or null is none; else an object with a "type", or a
 * "Sequence" whose list_key array holds more of the same, at most 16 deep. Returns 1 with *type
 * set when the caller builds one component of that type; 0 when done (none, or a Sequence). */
typedef int (*component_fn)(tk_hf *h, const cJSON *o, int depth, ectx *e);
static int component(tk_hf *h, const cJSON *o, int depth, ectx *e, const char *what, const char *list_key,
                     component_fn self, const char **type)
{
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) FAIL("%s must be an object or null", what);
    if (depth > 16) FAIL("%s: Sequence nested deeper than 16", what);
    const char *t = jtype(o);
    if (!t) FAIL("%s without a type", what);
    if (strcmp(t, "Sequence")) { *type = t; return 1; }
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, list_key), *x;
    if (!cJSON_IsArray(a)) FAIL("%s Sequence: %s must be an array", what, list_key);
    cJSON_ArrayForEach(x, a) { int rc = self(h, x, depth + 1, e); if (rc) return rc; }
    return 0;
}

static int normalizer(tk_hf *h, const cJSON *o, int depth, ectx *e)
{
    const char *t = "";
    int rc = component(h, o, depth, e, "normalizer", "normalizers", normalizer, &t);
    if (rc <= 0) return rc;
    tk_nm_kind k;
    if (!strcmp(t, "NFC")) k = TK_NM_NFC;
    else if (!strcmp(t, "NFKC")) k = TK_NM_NFKC;
    else if (!strcmp(t, "NFD")) k = TK_NM_NFD;
    else if (!strcmp(t, "NFKD")) k = TK_NM_NFKD;
    else if (!strcmp(t, "Prepend")) k = TK_NM_PREPEND;
    else if (!strcmp(t, "Replace")) k = TK_NM_REPLACE;
    else if (!strcmp(t, "Lowercase")) k = TK_NM_LOWERCASE;
    else FAIL("normalizer \"%.64s\" is not implemented", t);
    rc = push((void **)&h->nm, &h->n_nm, sizeof *h->nm);
    if (rc) return rc;
    tk_normalizer *x = &h->nm[h->n_nm - 1];
    x->kind = k;
    int bad = 0;
    if (k == TK_NM_PREPEND) {
        const char *p = jstr(o, "prepend", &bad);
        if (!p || bad || !valid_str(p)) FAIL("normalizer Prepend: prepend must be a string");
        if (!(x->str = dup(p, &x->str_len))) return RECUR_ENOMEM;
    } else if (k == TK_NM_REPLACE) {
        const char *c = jstr(o, "content", &bad);
        if (!c || bad || !valid_str(c)) FAIL("normalizer Replace: content must be a string");
        if (!(x->str = dup(c, &x->str_len))) return RECUR_ENOMEM;
        if ((rc = pattern(o, "normalizer Replace", &x->re, e))) return rc;
    }
    return 0;
}

static int pretokenizer(tk_hf *h, const cJSON *o, int depth, ectx *e)
{
    const char *t = "";
    int rc = component(h, o, depth, e, "pre_tokenizer", "pretokenizers", pretokenizer, &t);
    if (rc <= 0) return rc;
    tk_pt_kind k;
    if (!strcmp(t, "ByteLevel")) k = TK_PT_BYTELEVEL;
    else if (!strcmp(t, "Split")) k = TK_PT_SPLIT;
    else if (!strcmp(t, "Metaspace")) k = TK_PT_METASPACE;
    else if (!strcmp(t, "Digits")) k = TK_PT_DIGITS;
    else FAIL("pre_tokenizer \"%.64s\" is not implemented", t);
    if (h->n_pt && h->pt[h->n_pt - 1].kind == TK_PT_BYTELEVEL)
        FAIL("pre_tokenizer %s after ByteLevel is not implemented (ByteLevel must come last)", t);
    rc = push((void **)&h->pt, &h->n_pt, sizeof *h->pt);
    if (rc) return rc;
    tk_pretok *x = &h->pt[h->n_pt - 1];
    x->kind = k;
    char msg[200];
    int bad = 0;
    switch (k) {
    case TK_PT_BYTELEVEL:
        x->add_prefix_space = jbool(o, "add_prefix_space", 0);
        x->use_regex = jbool(o, "use_regex", 1);
        if (x->use_regex) {
            static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
            rc = tk_regex_compile(&x->re, gpt2, strlen(gpt2), 0, 1, msg, sizeof msg);
            if (rc == RECUR_EFORMAT) FAIL("pre_tokenizer ByteLevel: %s", msg);
            if (rc) return rc;
        }
        return 0;
    case TK_PT_DIGITS: {
        const char *p = jbool(o, "individual_digits", 0) ? "[^0-9]+|[0-9]" : "[^0-9]+|[0-9]+";
        rc = tk_regex_compile(&x->re, p, strlen(p), 0, 0, msg, sizeof msg);
        return rc == RECUR_EFORMAT ? RECUR_EINVAL : rc;
    }
    case TK_PT_METASPACE: {
        const char *r = jstr(o, "replacement", &bad);
        if (bad || (r && (!*r || !valid_str(r)))) FAIL("pre_tokenizer Metaspace: replacement must be a non-empty string");
        if (!(x->repl = dup(r ? r : "\xE2\x96\x81", &x->repl_len))) return RECUR_ENOMEM;
        const char *s = jstr(o, "prepend_scheme", &bad);
        if (bad) FAIL("pre_tokenizer Metaspace: prepend_scheme must be a string");
        if (!s || !strcmp(s, "always")) x->prepend_scheme = 0;
        else if (!strcmp(s, "first")) x->prepend_scheme = 1;
        else if (!strcmp(s, "never")) x->prepend_scheme = 2;
        else FAIL("pre_tokenizer Metaspace: prepend_scheme \"%.32s\" is not implemented", s);
        return 0;
    }
    case TK_PT_SPLIT: {
        const char *b = jstr(o, "behavior", &bad);
        if (bad || !b) FAIL("pre_tokenizer Split: behavior must be a string");
        if (!strcmp(b, "Isolated")) x->behavior = TK_SPLIT_ISOLATED;
        else if (!strcmp(b, "Removed")) x->behavior = TK_SPLIT_REMOVED;
        else if (!strcmp(b, "MergedWithPrevious")) x->behavior = TK_SPLIT_MERGED_PREV;
        else if (!strcmp(b, "MergedWithNext")) x->behavior = TK_SPLIT_MERGED_NEXT;
        else if (!strcmp(b, "Contiguous")) x->behavior = TK_SPLIT_CONTIGUOUS;
        else FAIL("pre_tokenizer Split: behavior \"%.32s\" is not implemented", b);
        x->invert = jbool(o, "invert", 0);
        return pattern(o, "pre_tokenizer Split", &x->re, e);
    }
    }
    return 0;
}

static int decoder(tk_hf *h, const cJSON *o, int depth, ectx *e)
{
    if (cJSON_IsObject(o)) h->has_decoder = 1;
    const char *t = "";
    int rc = component(h, o, depth, e, "decoder", "decoders", decoder, &t);
    if (rc <= 0) return rc;
    tk_dc_kind k;
    if (!strcmp(t, "ByteLevel")) k = TK_DC_BYTELEVEL;
    else if (!strcmp(t, "ByteFallback")) k = TK_DC_BYTEFALLBACK;
    else if (!strcmp(t, "Fuse")) k = TK_DC_FUSE;
    else if (!strcmp(t, "Strip")) k = TK_DC_STRIP;
    else if (!strcmp(t, "Replace")) k = TK_DC_REPLACE;
    else if (!strcmp(t, "Metaspace")) k = TK_DC_METASPACE;
    else FAIL("decoder \"%.64s\" is not implemented", t);
    int fused = 0;
    for (size_t i = 0; i < h->n_dc; i++) {
        if (h->dc[i].kind == TK_DC_FUSE) fused = 1;
        if (h->dc[i].kind == TK_DC_BYTELEVEL) FAIL("decoder %s after ByteLevel is not implemented", t);
    }
    if (k == TK_DC_BYTELEVEL && h->n_dc) FAIL("decoder ByteLevel after other decoders is not implemented");
    if (fused && k != TK_DC_STRIP && k != TK_DC_FUSE)
        FAIL("decoder %s after Fuse is not implemented (only Strip may follow Fuse)", t);
    rc = push((void **)&h->dc, &h->n_dc, sizeof *h->dc);
    if (rc) return rc;
    tk_decoder *x = &h->dc[h->n_dc - 1];
    x->kind = k;
    int bad = 0;
    if (k == TK_DC_STRIP) {
        const char *c = jstr(o, "content", &bad);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "start"), *sp = cJSON_GetObjectItemCaseSensitive(o, "stop");
        if (!c || bad || !valid_str(c)) FAIL("decoder Strip: content must be a string");
        uint32_t cp;
        if (!*c || tk_utf8_next(c, &cp) != strlen(c)) FAIL("decoder Strip: content must be one character");
        if ((st && !cJSON_IsNumber(st)) || (sp && !cJSON_IsNumber(sp))) FAIL("decoder Strip: start and stop must be numbers");
        double a = st ? st->valuedouble : 0, b = sp ? sp->valuedouble : 0;
        if (!(a >= 0 && a <= 1e6 && b >= 0 && b <= 1e6) || a != (int)a || b != (int)b)
            FAIL("decoder Strip: start and stop must be integers in [0, 1e6]");
        x->start = (int)a;
        x->stop = (int)b;
        if (fused && x->stop) FAIL("decoder Strip with stop > 0 after Fuse is not implemented");
        if (!(x->a = dup(c, &x->a_len))) return RECUR_ENOMEM;
    } else if (k == TK_DC_REPLACE) {
        const char *c = jstr(o, "content", &bad);
        if (!c || bad || !valid_str(c)) FAIL("decoder Replace: content must be a string");
        if (!(x->b = dup(c, &x->b_len))) return RECUR_ENOMEM;
        if ((rc = pattern(o, "decoder Replace", &x->re, e))) return rc;
        x->has_re = 1;
    } else if (k == TK_DC_METASPACE) {
        const char *r = jstr(o, "replacement", &bad);
        if (bad || (r && (!*r || !valid_str(r)))) FAIL("decoder Metaspace: replacement must be a non-empty string");
        if (!(x->a = dup(r ? r : "\xE2\x96\x81", &x->a_len))) return RECUR_ENOMEM;
    }
    return 0;
}

/* id of a token string for TemplateProcessing: added token content first, then the vocabulary */
static int32_t token_id(tk_hf *h, const char *s)
{
    for (size_t i = h->n_added; i-- > 0;)
        if (!strcmp(h->added[i].content, s)) return h->added[i].id;
    size_t n = strlen(s);
    for (size_t id = 0; id < h->n_vocab; id++)
        if (h->added_of_id[id] < 0 && h->vocab[id].len == n && !memcmp(h->vocab_text.p + h->vocab[id].off, s, n))
            return (int32_t)id;
    return -1;
}

static int post_processor(tk_hf *h, const cJSON *o, int depth, ectx *e)
{
    const char *t = "";
    int rc = component(h, o, depth, e, "post_processor", "processors", post_processor, &t);
    if (rc <= 0) return rc;
    if (!strcmp(t, "ByteLevel")) return 0; /* offsets only */
    if (strcmp(t, "TemplateProcessing")) FAIL("post_processor \"%.64s\" is not implemented", t);
    if (h->has_template) FAIL("post_processor: more than one TemplateProcessing");
    h->has_template = 1;
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(o, "single"), *it;
    if (!cJSON_IsArray(single)) FAIL("post_processor TemplateProcessing: single must be an array");
    h->tmpl_seq_pos = -1;
    cJSON_ArrayForEach(it, single) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        int32_t id;
        if (cJSON_IsObject(sp)) {
            int bad = 0;
            const char *name = jstr(sp, "id", &bad);
            if (!name || bad) FAIL("post_processor TemplateProcessing: SpecialToken without an id");
            if ((id = token_id(h, name)) < 0)
                FAIL("post_processor TemplateProcessing: special token \"%.64s\" is not in the vocabulary", name);
        } else if (cJSON_IsObject(sq)) {
            int bad = 0;
            const char *name = jstr(sq, "id", &bad);
            if (!name || bad || strcmp(name, "A")) FAIL("post_processor TemplateProcessing: single may only hold Sequence A");
            if (h->tmpl_seq_pos >= 0) FAIL("post_processor TemplateProcessing: Sequence A twice");
            h->tmpl_seq_pos = (int)h->n_tmpl;
            id = -1;
        } else FAIL("post_processor TemplateProcessing: an item is neither SpecialToken nor Sequence");
        rc = push((void **)&h->tmpl, &h->n_tmpl, sizeof *h->tmpl);
        if (rc) return rc;
        h->tmpl[h->n_tmpl - 1] = id;
    }
    if (h->tmpl_seq_pos < 0) FAIL("post_processor TemplateProcessing: single lacks Sequence A");
    return 0;
}

/* ---------------------------------------------------------------- model */

static int set_vocab_entry(tk_hf *h, int32_t id, const char *s, size_t n)
{
    size_t off = h->vocab_text.n;
    if (tk_buf_put(&h->vocab_text, s, n)) return RECUR_ENOMEM;
    h->vocab[id].off = off;
    h->vocab[id].len = n;
    return 0;
}

/* The vocabulary and the merges are interned a batch at a time: the batch's strings are made and
 * hashed first, then the symbol table's slots, entries and key bytes they will touch are fetched
 * ahead, stage by stage (tk_strmap_prefetch), so that the cache misses of a batch overlap instead
 * of following one another; the lookups then run in the original order. */
#define BATCH 64

typedef struct {
    tk_buf bytes; /* the strings, back to back */
    size_t n;
    uint32_t off[3 * BATCH], len[3 * BATCH], hash[3 * BATCH];
} batch;

/* s as the next string (byte-level text mapped back to bytes); 0 when it cannot be mapped */
static int batch_add(batch *q, const char *s, size_t n, int byte_level)
{
    size_t off = q->bytes.n;
    int ok = byte_level ? unmap_append(s, n, &q->bytes) : tk_buf_put(&q->bytes, s, n) ? RECUR_ENOMEM : 1;
    if (ok <= 0) return ok;
    q->off[q->n] = (uint32_t)off;
    q->len[q->n] = (uint32_t)(q->bytes.n - off);
    q->n++;
    return 1;
}

/* strings i and j joined, as the next string */
static int batch_join(batch *q, size_t i, size_t j)
{
    size_t off = q->bytes.n, li = q->len[i], lj = q->len[j];
    if (tk_buf_reserve(&q->bytes, li + lj)) return RECUR_ENOMEM;
    char *p = q->bytes.p;
    memcpy(p + off, p + q->off[i], li);
    memcpy(p + off + li, p + q->off[j], lj);
    q->bytes.n = off + li + lj;
    p[q->bytes.n] = 0;
    q->off[q->n] = (uint32_t)off;
    q->len[q->n] = (uint32_t)(li + lj);
    q->n++;
    return 1;
}

static void batch_prefetch(batch *q, const tk_strmap *m)
{
    for (size_t i = 0; i < q->n; i++) q->hash[i] = tk_strmap_hash(q->bytes.p + q->off[i], q->len[i]);
    for (int stage = 0; stage < 2; stage++)
        for (size_t i = 0; i < q->n; i++) tk_strmap_prefetch(m, q->hash[i], stage);
}

/* byte-level keys are checked for UTF-8 here: one that maps back to bytes is valid already */
static int load_vocab(tk_hf *h, const tk_js_model *jm, int byte_level, ectx *e)
{
    tk_bpe *b = &h->bpe;
    batch q = {0};
    int32_t str_of[BATCH]; /* the batch string of each entry; -1: not reachable from bytes */
    int rc = 0;
    for (size_t i0 = 0; !rc && i0 < jm->n_vocab; i0 += BATCH) {
        size_t nb = jm->n_vocab - i0 < BATCH ? jm->n_vocab - i0 : BATCH;
        q.n = q.bytes.n = 0;
        for (size_t j = 0; !rc && j < nb; j++) {
            const tk_js_entry *v = &jm->vocab[i0 + j];
            int ok = batch_add(&q, tk_js_str(jm, v->off), v->len, byte_level);
            if (ok < 0) rc = ok;
            str_of[j] = ok > 0 ? (int32_t)q.n - 1 : -1;
        }
        if (rc) break;
        batch_prefetch(&q, &b->syms);
        for (size_t j = 0; !rc && j < nb; j++) {
            const tk_js_entry *v = &jm->vocab[i0 + j];
            if (str_of[j] < 0) { /* decodes as its UTF-8 */
                const char *k = tk_js_str(jm, v->off);
                if (tk_utf8_valid_prefix(k, v->len) != v->len) {
                    tk_buf_free(&q.bytes);
                    FAIL("model BPE: vocab key is not valid UTF-8");
                }
                rc = set_vocab_entry(h, v->id, k, v->len);
                continue;
            }
            const char *k = q.bytes.p + q.off[str_of[j]];
            size_t kn = q.len[str_of[j]];
            if ((rc = set_vocab_entry(h, v->id, k, kn))) break;
            int32_t sym = tk_bpe_symbol_hashed(b, k, kn, q.hash[str_of[j]]);
            if (sym < 0) rc = sym;
            else b->sym_id[sym] = v->id;
        }
    }
    tk_buf_free(&q.bytes);
    return rc;
}

static inline uint64_t pair_key(int32_t l, int32_t r)
{
    return (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
}

/* merges: rank = index; a repeated pair keeps its last rank (as the reference) */
static int load_merges(tk_hf *h, const tk_js_model *jm, int byte_level, ectx *e)
{
    tk_bpe *b = &h->bpe;
    batch q = {0};
    uint32_t rank_of[BATCH];
    int32_t sym[3 * BATCH]; /* left, right, joined per merge of the batch */
    int rc = 0;
    for (size_t m0 = 0; !rc && m0 < jm->n_merges; m0 += BATCH) {
        size_t end = jm->n_merges - m0 < BATCH ? jm->n_merges : m0 + BATCH, nb = 0;
        q.n = q.bytes.n = 0;
        for (size_t m = m0; !rc && m < end; m++) {
            const tk_js_merge *x = &jm->merges[m];
            const char *a, *c;
            size_t an, cn;
            if (x->form == 1) {
                a = tk_js_str(jm, x->a);
                for (an = 0; an < x->an && a[an] != ' '; an++) {} /* short strings: no memchr call */
                if (an == x->an) continue; /* no space: never matches, as in the reference */
                c = a + an + 1;
                size_t rest = x->an - an - 1;
                for (cn = 0; cn < rest && c[cn] != ' '; cn++) {}
            } else if (x->form == 2) {
                a = tk_js_str(jm, x->a); an = x->an;
                c = tk_js_str(jm, x->b); cn = x->bn;
            } else {
                tk_buf_free(&q.bytes);
                FAIL("model BPE: merge %zu is neither \"a b\" nor [a, b]", m);
            }
            /* invalid UTF-8 never matches (byte-level: unmap_append refuses it) */
            if (!byte_level && (tk_utf8_valid_prefix(a, an) != an || tk_utf8_valid_prefix(c, cn) != cn)) continue;
            size_t n0 = q.n, bytes0 = q.bytes.n;
            int ok = batch_add(&q, a, an, byte_level);
            if (ok > 0) ok = batch_add(&q, c, cn, byte_level);
            if (ok > 0) ok = batch_join(&q, n0, n0 + 1);
            if (ok < 0) rc = ok;
            else if (!ok) { q.n = n0; q.bytes.n = bytes0; } /* outside the byte-level alphabet: never matches */
            else rank_of[nb++] = (uint32_t)m;
        }
        if (rc) break;
        batch_prefetch(&q, &b->syms);
        for (size_t i = 0; !rc && i < q.n; i++)
            if ((sym[i] = tk_bpe_symbol_hashed(b, q.bytes.p + q.off[i], q.len[i], q.hash[i])) < 0) rc = sym[i];
        for (size_t j = 0; !rc && j < nb; j++) tk_u64map_prefetch(&b->merges, pair_key(sym[3 * j], sym[3 * j + 1]));
        for (size_t j = 0; !rc && j < nb; j++)
            rc = tk_u64map_put(&b->merges, pair_key(sym[3 * j], sym[3 * j + 1]),
                               (int64_t)((uint64_t)rank_of[j] << 32 | (uint32_t)sym[3 * j + 2]));
    }
    tk_buf_free(&q.bytes);
    return rc;
}

static int model(tk_hf *h, const cJSON *root, const cJSON *m, const tk_js_model *jm, int byte_level, ectx *e)
{
    tk_bpe *b = &h->bpe;
    if (!cJSON_IsObject(m)) FAIL("model must be an object");
    const char *t = jtype(m);
    if (t && strcmp(t, "BPE")) FAIL("model \"%.64s\" is not implemented (BPE only)", t);
    if (!t && !jm->has_merges && !cJSON_GetObjectItemCaseSensitive(m, "merges")) FAIL("model without a type is not BPE (no merges)");
    if (!jm->has_vocab) FAIL("model BPE: vocab must be an object");
    if (!jm->has_merges) FAIL("model BPE: merges must be an array");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (drop && !cJSON_IsNull(drop) && !(cJSON_IsNumber(drop) && drop->valuedouble == 0))
        FAIL("model BPE: dropout is not implemented");
    b->byte_level = byte_level;
    b->byte_fallback = jbool(m, "byte_fallback", 0);
    b->ignore_merges = jbool(m, "ignore_merges", 0);
    b->fuse_unk = jbool(m, "fuse_unk", 0);
    int bad = 0;
    const char *pre = jstr(m, "continuing_subword_prefix", &bad);
    const char *suf = jstr(m, "end_of_word_suffix", &bad);
    const char *unk = jstr(m, "unk_token", &bad);
    if (bad) FAIL("model BPE: unk_token, continuing_subword_prefix and end_of_word_suffix must be strings or null");
    if ((pre && !valid_str(pre)) || (suf && !valid_str(suf)) || (unk && !valid_str(unk))) FAIL("model BPE: invalid UTF-8");
    if (pre && *pre && !(b->prefix = dup(pre, &b->prefix_len))) return RECUR_ENOMEM;
    if (suf && *suf && !(b->suffix = dup(suf, &b->suffix_len))) return RECUR_ENOMEM;

    /* ids: the vocabulary and the added tokens */
    int32_t max_id = -1;
    size_t key_bytes = 0;
    for (size_t i = 0; i < jm->n_vocab; i++) {
        const tk_js_entry *v = &jm->vocab[i];
        key_bytes += v->len;
        if (v->id < 0 || v->id >= MAX_ID)
            FAIL("model BPE: vocab ids must be integers in [0, %d)", MAX_ID);
        if (!byte_level && tk_utf8_valid_prefix(tk_js_str(jm, v->off), v->len) != v->len) FAIL("model BPE: vocab key is not valid UTF-8");
        if (v->id > max_id) max_id = v->id;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), *v;
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added)) FAIL("added_tokens must be an array");
    cJSON_ArrayForEach(v, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(v, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (!jid(id))
            FAIL("added_tokens: id must be an integer in [0, %d)", MAX_ID);
        if (!cJSON_IsString(c) || !c->valuestring || !valid_str(c->valuestring)) FAIL("added_tokens: content must be a string");
        if ((int32_t)id->valuedouble > max_id) max_id = (int32_t)id->valuedouble;
    }
    h->n_vocab = (size_t)(max_id + 1);
    h->vocab = tk_big_alloc((h->n_vocab ? h->n_vocab : 1) * sizeof *h->vocab);
    h->added_of_id = tk_big_alloc((h->n_vocab ? h->n_vocab : 1) * sizeof *h->added_of_id);
    if (!h->vocab || !h->added_of_id) return RECUR_ENOMEM;
    for (size_t i = 0; i < h->n_vocab; i++) h->added_of_id[i] = -1;

    /* every table sized once: the symbols (the vocabulary; the table has room for a third more, merge
     * parts and results outside the vocabulary, before it must grow), the merges and the id -> token
     * text */
    int rc = tk_bpe_reserve(b, jm->n_vocab + 256, key_bytes + 4096);
    if (!rc) rc = tk_u64map_reserve(&b->merges, jm->n_merges);
    h->vocab_text.big = 1;
    if (!rc) rc = tk_buf_reserve(&h->vocab_text, key_bytes + 1);
    if (!rc) rc = load_vocab(h, jm, byte_level, e);
    if (!rc) rc = load_merges(h, jm, byte_level, e);
    tk_buf raw = {0};

    /* added tokens: they join the model's vocabulary (content -> id), as in the reference */
    cJSON_ArrayForEach(v, added) {
        if (rc) break;
        if ((rc = push((void **)&h->added, &h->n_added, sizeof *h->added))) break;
        tk_added *a = &h->added[h->n_added - 1];
        a->id = (int32_t)cJSON_GetObjectItemCaseSensitive(v, "id")->valuedouble;
        if (!(a->content = dup(cJSON_GetObjectItemCaseSensitive(v, "content")->valuestring, &a->len))) { rc = RECUR_ENOMEM; break; }
        a->special = jbool(v, "special", 0);
        a->lstrip = jbool(v, "lstrip", 0);
        a->rstrip = jbool(v, "rstrip", 0);
        a->single_word = jbool(v, "single_word", 0);
        a->normalized = jbool(v, "normalized", !a->special);
        h->added_of_id[a->id] = (int32_t)(h->n_added - 1);
        if ((rc = set_vocab_entry(h, a->id, a->content, a->len))) break;
        const char *k = a->content;
        size_t kn = a->len;
        int ok = 1;
        if (byte_level) {
            if ((ok = unmap(k, kn, &raw)) < 0) { rc = ok; break; }
            k = raw.p; kn = raw.n;
        }
        if (ok && kn) {
            int32_t s = tk_bpe_symbol(b, k, kn);
            if (s < 0) { rc = s; break; }
            b->sym_id[s] = a->id;
        }
    }
    tk_buf_free(&raw);
    if (rc) return rc;
    if (unk) {
        int32_t s = tk_strmap_find(&b->syms, unk, strlen(unk));
        if (byte_level) {
            tk_buf u = {0};
            int ok = unmap(unk, strlen(unk), &u);
            s = ok > 0 ? tk_strmap_find(&b->syms, u.p, u.n) : -1;
            tk_buf_free(&u);
        }
        b->unk_id = s >= 0 ? b->sym_id[s] : -1;
    }
    for (int i = 0; i < 256; i++) {
        char fb[8];
        static const char hex[] = "0123456789ABCDEF";
        fb[0] = '<'; fb[1] = '0'; fb[2] = 'x'; fb[3] = hex[i >> 4]; fb[4] = hex[i & 15]; fb[5] = '>';
        int32_t s = tk_strmap_find(&b->syms, fb, 6);
        b->fallback[i] = s >= 0 ? b->sym_id[s] : -1;
        char one = (char)i;
        s = tk_strmap_find(&b->syms, &one, 1);
        b->byte_sym[i] = s;
    }
    return 0;
}

/* ---------------------------------------------------------------- added tokens */

static int added_tables(tk_hf *h, ectx *e)
{
    int rc = tk_trie_init(&h->added_raw);
    if (!rc) rc = tk_trie_init(&h->added_norm);
    if (rc) return rc;
    h->added_exact_idx = malloc((2 * h->n_added + 1) * sizeof *h->added_exact_idx);
    if (!h->added_exact_idx) return RECUR_ENOMEM;
    tk_buf nb = {0};
    for (size_t i = 0; i < h->n_added && !rc; i++) {
        tk_added *a = &h->added[i];
        int32_t k = tk_strmap_intern(&h->added_exact, a->content, a->len, NULL);
        if (k < 0) { rc = k; break; }
        h->added_exact_idx[k] = (int32_t)i;
        if (a->normalized && h->n_nm) {
            if ((rc = tk_normalize(h->nm, h->n_nm, a->content, a->len, &nb))) break;
            if (!(a->norm = malloc(nb.n + 1))) { rc = RECUR_ENOMEM; break; }
            memcpy(a->norm, nb.p, nb.n + 1);
            a->norm_len = nb.n;
            if (a->norm_len && (rc = tk_trie_add(&h->added_norm, a->norm, a->norm_len, (int32_t)i))) break;
            k = tk_strmap_intern(&h->added_exact, a->norm, a->norm_len, NULL);
            if (k < 0) { rc = k; break; }
            h->added_exact_idx[k] = (int32_t)i;
        } else if (a->len && (rc = tk_trie_add(&h->added_raw, a->content, a->len, (int32_t)i))) break;
    }
    tk_buf_free(&nb);
    (void)e;
    return rc;
}

/* ---------------------------------------------------------------- entry */

void tk_hf_free(tk_hf *h)
{
    if (!h) return;
    for (size_t i = 0; i < h->n_nm; i++) { free(h->nm[i].str); tk_regex_free(&h->nm[i].re); }
    free(h->nm);
    for (size_t i = 0; i < h->n_pt; i++) { free(h->pt[i].repl); tk_regex_free(&h->pt[i].re); }
    free(h->pt);
    tk_bpe_free(&h->bpe);
    for (size_t i = 0; i < h->n_added; i++) { free(h->added[i].content); free(h->added[i].norm); }
    free(h->added);
    tk_trie_free(&h->added_raw);
    tk_trie_free(&h->added_norm);
    tk_strmap_free(&h->added_exact);
    free(h->added_exact_idx);
    for (size_t i = 0; i < h->n_dc; i++) { free(h->dc[i].a); free(h->dc[i].b); tk_regex_free(&h->dc[i].re); }
    free(h->dc);
    free(h->tmpl);
    tk_big_free(h->vocab);
    tk_buf_free(&h->vocab_text);
    tk_big_free(h->added_of_id);
    free(h);
}

int tk_hf_load(const char *json, size_t len, tk_hf **out, int32_t *vocab_size, char *err, size_t errlen)
{
    ectx ec = {err, errlen}, *e = &ec;
    *out = NULL;
    pthread_once(&tab_once, build_tabs);
    tk_js_model jm;
    int rc = tk_js_split(json, len, &jm, err, errlen);
    if (rc) return rc;
    cJSON *root = cJSON_ParseWithLength(jm.rest, jm.rest_len);
    if (!root) { tk_js_model_free(&jm); FAIL("not valid JSON"); }
    tk_hf *h = calloc(1, sizeof *h);
    if (!h || tk_bpe_init(&h->bpe)) { cJSON_Delete(root); tk_js_model_free(&jm); tk_hf_free(h); return RECUR_ENOMEM; }
#define STEP(x) do { if (!rc) rc = (x); } while (0)
    if (!cJSON_IsObject(root)) { tk_err(err, errlen, "tokenizer.json: not a JSON object"); rc = RECUR_EFORMAT; }
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    if (!rc && tr && !cJSON_IsNull(tr)) { tk_err(err, errlen, "tokenizer.json: truncation is not implemented"); rc = RECUR_EFORMAT; }
    STEP(normalizer(h, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), 0, e));
    STEP(pretokenizer(h, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), 0, e));
    STEP(decoder(h, cJSON_GetObjectItemCaseSensitive(root, "decoder"), 0, e));
    int bl_pt = h->n_pt && h->pt[h->n_pt - 1].kind == TK_PT_BYTELEVEL;
    int bl_dc = h->n_dc && h->dc[0].kind == TK_DC_BYTELEVEL;
    if (!rc && bl_pt != bl_dc) {
        tk_err(err, errlen, "tokenizer.json: %s", bl_pt ? "a ByteLevel pre_tokenizer needs the ByteLevel decoder"
                                                        : "the ByteLevel decoder needs a ByteLevel pre_tokenizer");
        rc = RECUR_EFORMAT;
    }
    STEP(model(h, root, cJSON_GetObjectItemCaseSensitive(root, "model"), &jm, bl_pt, e));
    STEP(post_processor(h, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), 0, e));
    STEP(added_tables(h, e));
#undef STEP
    cJSON_Delete(root);
    tk_js_model_free(&jm);
    if (rc) {
        if (rc == RECUR_ENOMEM) tk_err(err, errlen, "tokenizer.json: out of memory");
        else if (rc == RECUR_ESHAPE) tk_err(err, errlen, "tokenizer.json: too many entries");
        tk_hf_free(h);
        return rc == RECUR_EINVAL ? RECUR_EFORMAT : rc;
    }
    *vocab_size = (int32_t)h->n_vocab;
    *out = h;
    return 0;
}
