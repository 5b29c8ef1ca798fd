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

#define MAX_ID (1 << 24)
#define MAX_MERGES (1 << 23)

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

/* mapped characters -> raw bytes; 0 when a character is outside the alphabet */
static int unmap(const char *s, size_t n, tk_buf *o)
{
    o->n = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += tk_utf8_next(s + i, &cp);
        if (cp >= 324 || unmap_tab[cp] < 0) return 0;
        if (tk_buf_putc(o, unmap_tab[cp])) return RECUR_ENOMEM;
    }
    if (tk_buf_put(o, "", 0)) return RECUR_ENOMEM;
    return 1;
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

static int normalizer(tk_hf *h, const cJSON *o, int depth, ectx *e)
{
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) FAIL("normalizer must be an object or null");
    if (depth > 16) FAIL("normalizer: Sequence nested deeper than 16");
    const char *t = jtype(o);
    if (!t) FAIL("normalizer without a type");
    if (!strcmp(t, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "normalizers"), *x;
        if (!cJSON_IsArray(a)) FAIL("normalizer Sequence: normalizers must be an array");
        cJSON_ArrayForEach(x, a) { int rc = normalizer(h, x, depth + 1, e); if (rc) return rc; }
        return 0;
    }
    tk_nm_kind k;
    if (!strcmp(t, "NFC")) k = TK_NM_NFC;
    else if (!strcmp(t, "NFKC")) k = TK_NM_NFKC;
    else if (!strcmp(t, "NFD")) k = TK_NM_NFD;
    else if (!strcmp(t, "NFKD")) k = TK_NM_NFKD;
    else if (!strcmp(t, "Prepend")) k = TK_NM_PREPEND;
    else if (!strcmp(t, "Replace")) k = TK_NM_REPLACE;
    else if (!strcmp(t, "Lowercase")) k = TK_NM_LOWERCASE;
    else FAIL("normalizer \"%.64s\" is not implemented", t);
    int rc = push((void **)&h->nm, &h->n_nm, sizeof *h->nm);
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
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) FAIL("pre_tokenizer must be an object or null");
    if (depth > 16) FAIL("pre_tokenizer: Sequence nested deeper than 16");
    const char *t = jtype(o);
    if (!t) FAIL("pre_tokenizer without a type");
    if (!strcmp(t, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers"), *x;
        if (!cJSON_IsArray(a)) FAIL("pre_tokenizer Sequence: pretokenizers must be an array");
        cJSON_ArrayForEach(x, a) { int rc = pretokenizer(h, x, depth + 1, e); if (rc) return rc; }
        return 0;
    }
    tk_pt_kind k;
    if (!strcmp(t, "ByteLevel")) k = TK_PT_BYTELEVEL;
    else if (!strcmp(t, "Split")) k = TK_PT_SPLIT;
    else if (!strcmp(t, "Metaspace")) k = TK_PT_METASPACE;
    else if (!strcmp(t, "Digits")) k = TK_PT_DIGITS;
    else FAIL("pre_tokenizer \"%.64s\" is not implemented", t);
    if (h->n_pt && h->pt[h->n_pt - 1].kind == TK_PT_BYTELEVEL)
        FAIL("pre_tokenizer %s after ByteLevel is not implemented (ByteLevel must come last)", t);
    int rc = push((void **)&h->pt, &h->n_pt, sizeof *h->pt);
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
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) FAIL("decoder must be an object or null");
    if (depth > 16) FAIL("decoder: Sequence nested deeper than 16");
    h->has_decoder = 1;
    const char *t = jtype(o);
    if (!t) FAIL("decoder without a type");
    if (!strcmp(t, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "decoders"), *x;
        if (!cJSON_IsArray(a)) FAIL("decoder Sequence: decoders must be an array");
        cJSON_ArrayForEach(x, a) { int rc = decoder(h, x, depth + 1, e); if (rc) return rc; }
        return 0;
    }
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
    int rc = push((void **)&h->dc, &h->n_dc, sizeof *h->dc);
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
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) FAIL("post_processor must be an object or null");
    if (depth > 16) FAIL("post_processor: Sequence nested deeper than 16");
    const char *t = jtype(o);
    if (!t) FAIL("post_processor without a type");
    if (!strcmp(t, "ByteLevel")) return 0; /* offsets only */
    if (!strcmp(t, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "processors"), *x;
        if (!cJSON_IsArray(a)) FAIL("post_processor Sequence: processors must be an array");
        cJSON_ArrayForEach(x, a) { int rc = post_processor(h, x, depth + 1, e); if (rc) return rc; }
        return 0;
    }
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
        int rc = push((void **)&h->tmpl, &h->n_tmpl, sizeof *h->tmpl);
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

static int model(tk_hf *h, const cJSON *root, const cJSON *m, int byte_level, ectx *e)
{
    tk_bpe *b = &h->bpe;
    if (!cJSON_IsObject(m)) FAIL("model must be an object");
    const char *t = jtype(m);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (t && strcmp(t, "BPE")) FAIL("model \"%.64s\" is not implemented (BPE only)", t);
    if (!t && !merges) FAIL("model without a type is not BPE (no merges)");
    if (!cJSON_IsObject(vocab)) FAIL("model BPE: vocab must be an object");
    if (!cJSON_IsArray(merges)) FAIL("model BPE: merges must be an array");
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
    const cJSON *v;
    cJSON_ArrayForEach(v, vocab) {
        if (!jid(v))
            FAIL("model BPE: vocab ids must be integers in [0, %d)", MAX_ID);
        if (!v->string || !valid_str(v->string)) FAIL("model BPE: vocab key is not valid UTF-8");
        if ((int32_t)v->valuedouble > max_id) max_id = (int32_t)v->valuedouble;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
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
    h->vocab = calloc(h->n_vocab ? h->n_vocab : 1, sizeof *h->vocab);
    h->added_of_id = malloc((h->n_vocab ? h->n_vocab : 1) * sizeof *h->added_of_id);
    if (!h->vocab || !h->added_of_id) return RECUR_ENOMEM;
    for (size_t i = 0; i < h->n_vocab; i++) h->added_of_id[i] = -1;

    tk_buf raw = {0};
    size_t n_merges = (size_t)cJSON_GetArraySize(merges);
    int rc = n_merges > MAX_MERGES ? 0 : tk_strmap_reserve(&b->syms, (size_t)cJSON_GetArraySize(vocab) + n_merges / 4 + 256);
    if (!rc && n_merges <= MAX_MERGES) rc = tk_u64map_reserve(&b->merges, n_merges);
    cJSON_ArrayForEach(v, vocab) {
        if (rc) break;
        int32_t id = (int32_t)v->valuedouble;
        const char *k = v->string;
        size_t kn = strlen(k);
        int ok = 1;
        if (byte_level) {
            if ((ok = unmap(k, kn, &raw)) < 0) { rc = ok; break; }
            if (ok) { k = raw.p; kn = raw.n; }
        }
        if ((rc = set_vocab_entry(h, id, k, kn))) break;
        if (!ok) continue; /* unreachable from bytes; decodes as its UTF-8 */
        int32_t s = tk_bpe_symbol(b, k, kn);
        if (s < 0) { rc = s; break; }
        b->sym_id[s] = id;
    }
    /* merges: rank = index; a repeated pair keeps its last rank (as the reference) */
    size_t nm = n_merges;
    if (!rc && nm > MAX_MERGES) { tk_buf_free(&raw); FAIL("model BPE: more than %d merges", MAX_MERGES); }
    tk_buf l = {0}, r = {0}, lr = {0};
    uint32_t rank = 0;
    cJSON_ArrayForEach(v, merges) {
        if (rc) break;
        const char *a, *c;
        size_t an, cn;
        if (cJSON_IsString(v) && v->valuestring) {
            a = v->valuestring;
            const char *sp = strchr(a, ' ');
            if (!sp) { rank++; continue; } /* never matches, as in the reference */
            an = (size_t)(sp - a);
            c = sp + 1;
            const char *sp2 = strchr(c, ' ');
            cn = sp2 ? (size_t)(sp2 - c) : strlen(c);
        } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsString(v->child) &&
                   cJSON_IsString(v->child->next) && v->child->valuestring && v->child->next->valuestring) {
            a = v->child->valuestring; an = strlen(a);
            c = v->child->next->valuestring; cn = strlen(c);
        } else { tk_buf_free(&raw); tk_buf_free(&l); tk_buf_free(&r); tk_buf_free(&lr); FAIL("model BPE: merge %u is neither \"a b\" nor [a, b]", rank); }
        if (tk_utf8_valid_prefix(a, an) != an || tk_utf8_valid_prefix(c, cn) != cn) { rank++; continue; }
        if (byte_level) {
            int ok1 = unmap(a, an, &l), ok2 = ok1 > 0 ? unmap(c, cn, &r) : 0;
            if (ok1 < 0 || ok2 < 0) { rc = RECUR_ENOMEM; break; }
            if (!ok1 || !ok2) { rank++; continue; }
        } else {
            l.n = r.n = 0;
            if (tk_buf_put(&l, a, an) || tk_buf_put(&r, c, cn)) { rc = RECUR_ENOMEM; break; }
        }
        lr.n = 0;
        if (tk_buf_put(&lr, l.p, l.n) || tk_buf_put(&lr, r.p, r.n)) { rc = RECUR_ENOMEM; break; }
        int32_t sl = tk_bpe_symbol(b, l.p, l.n);
        int32_t sr = sl >= 0 ? tk_bpe_symbol(b, r.p, r.n) : sl;
        int32_t slr = sr >= 0 ? tk_bpe_symbol(b, lr.p, lr.n) : sr;
        if (slr < 0) { rc = slr; break; }
        if ((rc = tk_u64map_put(&b->merges, (uint64_t)(uint32_t)sl << 32 | (uint32_t)sr, (int64_t)((uint64_t)rank << 32 | (uint32_t)slr)))) break;
        rank++;
    }
    tk_buf_free(&l); tk_buf_free(&r); tk_buf_free(&lr);

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
    free(h->vocab);
    tk_buf_free(&h->vocab_text);
    free(h->added_of_id);
    free(h);
}

int tk_hf_load(const char *json, size_t len, tk_hf **out, int32_t *vocab_size, char *err, size_t errlen)
{
    ectx ec = {err, errlen}, *e = &ec;
    *out = NULL;
    pthread_once(&tab_once, build_tabs);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) FAIL("not valid JSON");
    int rc = 0;
    tk_hf *h = calloc(1, sizeof *h);
    if (!h || tk_bpe_init(&h->bpe)) { cJSON_Delete(root); tk_hf_free(h); return RECUR_ENOMEM; }
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
    STEP(model(h, root, cJSON_GetObjectItemCaseSensitive(root, "model"), bl_pt, e));
    STEP(post_processor(h, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), 0, e));
    STEP(added_tables(h, e));
#undef STEP
    cJSON_Delete(root);
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
