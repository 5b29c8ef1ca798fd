/*
 * tokenizer.h — librecur's tokenizer internals (the public API is the tokenizer section of recur.h).
 *
 * One file per concern:
 *   tokenizer_util.c     byte/id vectors, string and integer hash maps, byte tries, UTF-8 helpers
 *   tokenizer_regex.c    Oniguruma patterns (tokenizer.json) rewritten for PCRE2; split and replace
 *   tokenizer_text.c     normalizers (utf8proc) and pre-tokenizers
 *   tokenizer_bpe.c      the BPE model: symbols, ranked merges, byte fallback, pre-token cache
 *   tokenizer_jscan.c    strict scan of tokenizer.json: model.vocab / model.merges read in one pass
 *   tokenizer_json.c     tokenizer.json -> tk_hf (every construct not implemented is an error)
 *   tokenizer_rwkv.c     RWKV World vocabulary: python-literal lines, greedy longest byte match
 *   tokenizer_decode.c   ids -> bytes per token, the decoder chain, streaming WHATWG UTF-8
 *   tokenizer.c          the public entry points: load (file, folder, buffer), encode, decode
 */
#ifndef RECUR_TOKENIZER_INTERNAL_H
#define RECUR_TOKENIZER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "recur.h"

/* ---------------------------------------------------------------- util */

/* Large tables built at load (the vocabulary, the merges, the scan of tokenizer.json): zeroed;
 * from 1 MB on, mappings advised for 2 MB transparent huge pages. tk_big_resize keeps the contents
 * (the new bytes are zero); NULL when out of memory. Free only with tk_big_free. */
void *tk_big_alloc(size_t n);
void *tk_big_resize(void *p, size_t n);
void tk_big_free(void *p);

typedef struct {
    char *p; size_t n, cap;
    int big; /* p is a large table (tk_big_alloc), set before the first byte goes in */
} tk_buf;
int tk_buf_put(tk_buf *b, const void *s, size_t n);
int tk_buf_reserve(tk_buf *b, size_t n); /* room for n more bytes */
int tk_buf_putc(tk_buf *b, int c);
int tk_buf_put_cp(tk_buf *b, uint32_t cp); /* UTF-8 encode */
void tk_buf_free(tk_buf *b);

typedef struct { int32_t *p; size_t n, cap; } tk_ids;
int tk_ids_push(tk_ids *v, int32_t id);
void tk_ids_free(tk_ids *v);

/* A list of byte strings (pre-tokens): spans into one buffer. */
typedef struct { size_t off, len; } tk_span;
typedef struct { tk_buf text; tk_span *s; size_t n, cap; } tk_pieces;
int tk_pieces_add(tk_pieces *p, const char *s, size_t n);
void tk_pieces_reset(tk_pieces *p);
void tk_pieces_free(tk_pieces *p);

uint64_t tk_hash(const void *s, size_t n);

/* Interning string map: each distinct key gets index 0, 1, 2, ... in insertion order. */
typedef struct {
    uint64_t *slot; /* hash << 32 | record offset + 1; 0 = empty; [cap], a large table */
    size_t cap;     /* power of two */
    uint32_t *rec;  /* index -> offset of its record in keys; [rec_cap], a large table */
    size_t n, rec_cap;
    tk_buf keys;    /* records: uint32 index, uint32 length, the key's bytes (big) */
} tk_strmap;
/* index of key, or -1 */
int32_t tk_strmap_find(const tk_strmap *m, const char *s, size_t n);
/* index of key, inserting it when absent (*added = 1); negative RECUR_E* on failure */
int32_t tk_strmap_intern(tk_strmap *m, const char *s, size_t n, int *added);
/* the key of index i (valid until the next insertion) */
const char *tk_strmap_key(const tk_strmap *m, int32_t i, size_t *n);
/* room for n keys of key_bytes bytes in all without rehashing or regrowing */
int tk_strmap_reserve(tk_strmap *m, size_t n, size_t key_bytes);
static inline uint32_t tk_strmap_hash(const char *s, size_t n) { return (uint32_t)tk_hash(s, n); }
/* tk_strmap_intern for a key whose tk_strmap_hash is h */
int32_t tk_strmap_intern_hashed(tk_strmap *m, const char *s, size_t n, uint32_t h, int *added);
/* Warm what a lookup of a key of hash h will read: stage 0 its first slot, stage 1 the record
 * of the slot with that hash. Loading a vocabulary, lookups are issued in batches, each stage
 * for the whole batch, so their cache misses overlap. */
void tk_strmap_prefetch(const tk_strmap *m, uint32_t h, int stage);
void tk_strmap_free(tk_strmap *m);

/* uint64 -> int64 map (open addressing; key UINT64_MAX is reserved; slots are a large table). */
typedef struct tk_u64slot tk_u64slot;
typedef struct { tk_u64slot *slot; size_t cap, n; } tk_u64map;
int tk_u64map_put(tk_u64map *m, uint64_t k, int64_t v); /* overwrites */
int tk_u64map_get(const tk_u64map *m, uint64_t k, int64_t *v); /* 1 found, 0 not */
int tk_u64map_reserve(tk_u64map *m, size_t n);
void tk_u64map_prefetch(const tk_u64map *m, uint64_t k); /* warm the first probe of k */
void tk_u64map_free(tk_u64map *m);

/* Byte trie; node 0 is the root; value -1 = no string ends here. */
typedef struct {
    int32_t root[256]; /* child of the root per byte, or -1 */
    tk_u64map edge;    /* (node << 8 | byte) -> child */
    int32_t *value;
    size_t n, cap;
    uint8_t first[32]; /* bit set of first bytes */
} tk_trie;
int tk_trie_init(tk_trie *t);
int tk_trie_add(tk_trie *t, const char *s, size_t n, int32_t value); /* overwrites */
/* Longest string starting at s[0]; returns its length (0 = none) and *value. */
size_t tk_trie_longest(const tk_trie *t, const char *s, size_t n, int32_t *value);
static inline int tk_trie_may_start(const tk_trie *t, unsigned char c) { return t->first[c >> 3] >> (c & 7) & 1; }
void tk_trie_free(tk_trie *t);

/* UTF-8: length of the valid prefix; tk_utf8_sanitize replaces every invalid sequence by U+FFFD
 * (WHATWG "maximal subpart" rule) into out. */
size_t tk_utf8_valid_prefix(const char *s, size_t n);
int tk_utf8_sanitize(const char *s, size_t n, tk_buf *out);
/* Decode one code point of valid UTF-8 at s; returns its length. */
size_t tk_utf8_next(const char *s, uint32_t *cp);
static inline size_t tk_utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* ---------------------------------------------------------------- regex */

typedef struct {
    pcre2_code *code;
    int literal; /* compiled from a String pattern */
} tk_regex;
/* Compile an Oniguruma pattern (as tokenizer.json writes it) or a literal string. On error a
 * message naming the construct goes to err. */
int tk_regex_compile(tk_regex *r, const char *pat, size_t n, int literal, int js_native_space,
                     char *err, size_t errlen);
void tk_regex_free(tk_regex *r);
/* Calls fn(start, end) for every match, JS matchAll order (an empty match advances one code
 * point). Returns 0, or RECUR_ERANGE when the match limit is hit. */
typedef int (*tk_match_fn)(void *ctx, size_t start, size_t end, pcre2_match_data *md);
int tk_regex_each(const tk_regex *r, const char *s, size_t n, tk_match_fn fn, void *ctx);
/* JS String.prototype.replaceAll(regex, content) semantics. */
int tk_regex_replace(const tk_regex *r, const char *s, size_t n, const char *with, size_t wn,
                     tk_buf *out);

/* ---------------------------------------------------------------- normalizers, pre-tokenizers */

typedef enum { TK_NM_NFC, TK_NM_NFKC, TK_NM_NFD, TK_NM_NFKD, TK_NM_PREPEND, TK_NM_REPLACE,
               TK_NM_LOWERCASE } tk_nm_kind;
typedef struct {
    tk_nm_kind kind;
    char *str; size_t str_len;         /* Prepend text, Replace content */
    tk_regex re;                       /* Replace pattern */
} tk_normalizer;
/* Apply every normalizer in order: in -> out (out is reset first). */
int tk_normalize(const tk_normalizer *nm, size_t n_nm, const char *s, size_t n, tk_buf *out);

typedef enum { TK_PT_BYTELEVEL, TK_PT_SPLIT, TK_PT_METASPACE, TK_PT_DIGITS } tk_pt_kind;
typedef enum { TK_SPLIT_ISOLATED, TK_SPLIT_REMOVED, TK_SPLIT_MERGED_PREV, TK_SPLIT_MERGED_NEXT,
               TK_SPLIT_CONTIGUOUS } tk_split_behavior;
typedef struct {
    tk_pt_kind kind;
    int add_prefix_space, use_regex;   /* ByteLevel */
    tk_regex re;                       /* ByteLevel (use_regex), Split, Digits */
    tk_split_behavior behavior; int invert;
    char *repl; size_t repl_len;       /* Metaspace replacement */
    int prepend_scheme;                /* Metaspace: 0 always, 1 first, 2 never */
} tk_pretok;
/* Run the pre-tokenizers over one normalized section: pieces are appended to out.
 * section_index is the index of the section among the added-token split (Metaspace "first"). */
int tk_pretokenize(const tk_pretok *pt, size_t n_pt, const char *s, size_t n, size_t section_index,
                   tk_pieces *out, tk_pieces *scratch);

/* ---------------------------------------------------------------- BPE */

typedef struct tk_cache tk_cache;
typedef struct {
    tk_strmap syms;         /* vocab keys, merge parts and merge results (raw bytes when byte_level) */
    int32_t *sym_id;        /* symbol -> vocab id, or -1 */
    size_t sym_cap;
    tk_u64map merges;       /* (left << 32 | right) -> (rank << 32 | merged symbol) */
    int32_t byte_sym[256];  /* byte_level: the symbol of each single byte */
    int32_t fallback[256];  /* id of <0xXX>, or -1 */
    int byte_level, byte_fallback, ignore_merges, fuse_unk;
    int32_t unk_id;         /* -1 none */
    char *prefix; size_t prefix_len; /* continuing_subword_prefix */
    char *suffix; size_t suffix_len; /* end_of_word_suffix */
    tk_cache *cache;
} tk_bpe;
int tk_bpe_init(tk_bpe *b);
void tk_bpe_free(tk_bpe *b);
int32_t tk_bpe_symbol(tk_bpe *b, const char *s, size_t n); /* intern; grows sym_id */
int32_t tk_bpe_symbol_hashed(tk_bpe *b, const char *s, size_t n, uint32_t h); /* h = tk_strmap_hash(s, n) */
int tk_bpe_reserve(tk_bpe *b, size_t n_syms, size_t key_bytes); /* room without regrowing */
/* Encode one pre-token; *last_unk carries fuse_unk across the pre-tokens of a section. */
int tk_bpe_word(const tk_bpe *b, const char *s, size_t n, tk_ids *out, int *last_unk);

/* ---------------------------------------------------------------- decoders */

typedef enum { TK_DC_BYTELEVEL, TK_DC_BYTEFALLBACK, TK_DC_FUSE, TK_DC_STRIP, TK_DC_REPLACE,
               TK_DC_METASPACE } tk_dc_kind;
typedef struct {
    tk_dc_kind kind;
    char *a; size_t a_len;   /* Strip content, Replace pattern (String), Metaspace replacement */
    char *b; size_t b_len;   /* Replace content */
    tk_regex re; int has_re; /* Replace with a Regex pattern */
    int start, stop;         /* Strip */
} tk_decoder;

/* ---------------------------------------------------------------- tokenizer.json scan */

#define TK_MAX_ID (1 << 24)     /* ids of a tokenizer.json are below this */
#define TK_MAX_MERGES (1 << 23) /* at most this many merges */
#define TK_JS_MAX_DEPTH 512     /* JSON nesting */

/* A string of model.vocab / model.merges: ref is an offset into the document, or TK_JS_IN_TEXT |
 * an offset into text (a string with escapes, decoded); tk_js_str resolves it. */
#define TK_JS_IN_TEXT 0x80000000u
typedef struct { uint32_t off, len; int32_t id; } tk_js_entry; /* key (a ref) and length; id, -1 when not an integer >= 0 */
typedef struct { uint32_t a, an, b, bn; int form; } tk_js_merge; /* refs; form 1 "a b" (all in a), 2 [a, b], 0 anything else */
typedef struct {
    const char *json;             /* the document (borrowed) */
    char *rest; size_t rest_len;  /* the document with model.vocab / model.merges emptied, for cJSON */
    int has_vocab, has_merges;    /* model.vocab was an object / model.merges an array */
    size_t vocab_at, vocab_end, merges_at, merges_end;
    tk_buf text;                  /* the strings of both that hold escapes, decoded */
    tk_js_entry *vocab; size_t n_vocab, cap_vocab;
    tk_js_merge *merges; size_t n_merges, cap_merges;
} tk_js_model;
/* Check json (RFC 8259) and read model.vocab / model.merges; RECUR_EFORMAT with a message naming
 * the rule (and the byte) or RECUR_ENOMEM. */
int tk_js_split(const char *json, size_t len, tk_js_model *m, char *err, size_t errlen);
static inline const char *tk_js_str(const tk_js_model *m, uint32_t ref)
{
    return ref & TK_JS_IN_TEXT ? m->text.p + (ref & ~TK_JS_IN_TEXT) : m->json + ref;
}
void tk_js_model_free(tk_js_model *m);

/* ---------------------------------------------------------------- the tokenizer */

typedef struct {
    char *content; size_t len;
    int32_t id;
    int special, lstrip, rstrip, single_word, normalized;
    char *norm; size_t norm_len; /* normalized content (normalized tokens) */
} tk_added;

typedef struct {
    tk_normalizer *nm; size_t n_nm;
    tk_pretok *pt; size_t n_pt;
    tk_bpe bpe;
    tk_added *added; size_t n_added;
    tk_trie added_raw, added_norm; /* content -> added index */
    tk_strmap added_exact;         /* content and normalized content -> added index (values) */
    int32_t *added_exact_idx;
    tk_decoder *dc; size_t n_dc; int has_decoder;
    int32_t *tmpl; size_t n_tmpl; int tmpl_seq_pos; /* TemplateProcessing "single" */
    int has_template;
    /* id -> token string for decoding (raw bytes when byte_level) */
    tk_span *vocab; size_t n_vocab; tk_buf vocab_text;
    int32_t *added_of_id; /* id -> added index or -1 */
} tk_hf;

typedef struct {
    tk_trie trie;         /* byte string -> id */
    tk_span *tok; size_t n_tok; tk_buf text; /* id -> bytes */
} tk_rwkv;

struct recur_tokenizer {
    int kind; /* RECUR_TOKENIZER_* */
    int32_t vocab_size;
    tk_hf *hf;
    tk_rwkv *rwkv;
};

int tk_hf_load(const char *json, size_t len, tk_hf **out, int32_t *vocab_size, char *err, size_t errlen);
void tk_hf_free(tk_hf *h);
int tk_hf_encode(const tk_hf *h, const char *s, size_t n, int add_special, tk_ids *out);

int tk_rwkv_load(const char *text, size_t len, tk_rwkv **out, int32_t *vocab_size, char *err, size_t errlen);
void tk_rwkv_free(tk_rwkv *r);
int tk_rwkv_encode(const tk_rwkv *r, const char *s, size_t n, tk_ids *out);

void tk_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A whole file into *buf [*len] (malloc'd; at most 512 MB): RECUR_EIO unreadable,
 * RECUR_EFORMAT too large, RECUR_ENOMEM. Shared by the tokenizer and chat-template loaders. */
int tk_read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen);

#endif
