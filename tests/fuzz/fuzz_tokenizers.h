/*
 * fuzz_tokenizers.h — small synthetic tokenizers for the tokenizer fuzz targets (no data file):
 * fuzz_tok_json(v) builds a tokenizer.json text (malloc'd) exercising, per variant:
 *   0  byte-level BPE: NFC, Split (the Llama-3 pattern) + ByteLevel, ignore_merges, added tokens
 *      with lstrip / rstrip / single_word / normalized, ByteLevel decoder
 *   1  sentencepiece-style BPE: Prepend + Replace, byte_fallback, fuse_unk, TemplateProcessing,
 *      decoders Replace, ByteFallback, Fuse, Strip
 *   2  Lowercase + NFKC, Digits + Metaspace (first), continuing_subword_prefix, end_of_word_suffix,
 *      Metaspace decoder
 *   3  Split with each behaviour in sequence (String and Regex patterns), no decoder
 * fuzz_tok_rwkv() builds an RWKV World vocabulary text: every byte plus some words.
 */
#ifndef FUZZ_TOKENIZERS_H
#define FUZZ_TOKENIZERS_H

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_TOK_VARIANTS 4

static const char *const fuzz_tok_words[] = {
    "the", "and", "ing", "tion", "er", "re", "in", "on", "at", "es", "or", "an", "is", "it", "he",
    "hello", "world", "token", "izer", "über", "café", "привет", "日本", "12", "00", "\xE2\x96\x81the",
};

static void fuzz_tok_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; o[1] = 0; }
    else if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); o[2] = 0; }
    else { o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 63)); o[2] = (char)(0x80 | (cp & 63)); o[3] = 0; }
}

/* byte -> GPT-2 alphabet character */
static void fuzz_tok_bytechar(int b, char *o)
{
    int n = 0, cp = -1;
    for (int x = 0; x < 256; x++) {
        int keep = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
        int c = keep ? x : 256 + n++;
        if (x == b) cp = c;
    }
    fuzz_tok_utf8(o, (unsigned)cp);
}

typedef struct { cJSON *vocab, *merges; int next; } fuzz_tok_b;

static void fuzz_tok_add(fuzz_tok_b *b, const char *s)
{
    if (!cJSON_GetObjectItemCaseSensitive(b->vocab, s)) cJSON_AddNumberToObject(b->vocab, s, b->next++);
}

/* merges that build word w (already in the model's alphabet) left to right */
static void fuzz_tok_word(fuzz_tok_b *b, const char *w, int byte_level)
{
    char acc[256] = "", part[64];
    size_t i = 0, n = strlen(w);
    while (i < n) {
        size_t l = 1;
        if (!byte_level) {
            unsigned char c = (unsigned char)w[i];
            l = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        }
        if (byte_level) fuzz_tok_bytechar((unsigned char)w[i], part);
        else { memcpy(part, w + i, l); part[l] = 0; }
        fuzz_tok_add(b, part);
        if (acc[0]) {
            char m[600];
            snprintf(m, sizeof m, "%s %s", acc, part);
            cJSON_AddItemToArray(b->merges, cJSON_CreateString(m));
            strcat(acc, part);
            fuzz_tok_add(b, acc);
        } else strcpy(acc, part);
        i += l;
    }
}

static cJSON *fuzz_tok_obj(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static cJSON *fuzz_tok_added(int id, const char *content, int special, int lstrip, int rstrip, int single, int norm)
{
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", id);
    cJSON_AddStringToObject(a, "content", content);
    cJSON_AddBoolToObject(a, "single_word", single);
    cJSON_AddBoolToObject(a, "lstrip", lstrip);
    cJSON_AddBoolToObject(a, "rstrip", rstrip);
    cJSON_AddBoolToObject(a, "normalized", norm);
    cJSON_AddBoolToObject(a, "special", special);
    return a;
}

static cJSON *fuzz_tok_split(const char *kind, const char *pat, const char *behavior)
{
    cJSON *s = fuzz_tok_obj("Split"), *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, kind, pat);
    cJSON_AddItemToObject(s, "pattern", p);
    cJSON_AddStringToObject(s, "behavior", behavior);
    cJSON_AddBoolToObject(s, "invert", 0);
    return s;
}

static char *fuzz_tok_json(int v)
{
    cJSON *root = cJSON_CreateObject(), *model = fuzz_tok_obj("BPE"), *added = cJSON_CreateArray();
    fuzz_tok_b b = {cJSON_CreateObject(), cJSON_CreateArray(), 0};
    int byte_level = v == 0;
    char c[8];
    if (v == 1) {
        fuzz_tok_add(&b, "<unk>"); fuzz_tok_add(&b, "<s>"); fuzz_tok_add(&b, "</s>");
        for (int i = 0; i < 256; i++) { char t[8]; snprintf(t, sizeof t, "<0x%02X>", i); fuzz_tok_add(&b, t); }
        fuzz_tok_add(&b, "\xE2\x96\x81");
    }
    if (v == 2) fuzz_tok_add(&b, "[UNK]");
    if (byte_level) for (int i = 0; i < 256; i++) { fuzz_tok_bytechar(i, c); fuzz_tok_add(&b, c); }
    else for (int i = 0x21; i < 0x7F; i++) { c[0] = (char)i; c[1] = 0; if (v != 1 || i > 0x40) fuzz_tok_add(&b, c); }
    for (size_t i = 0; i < sizeof fuzz_tok_words / sizeof *fuzz_tok_words; i++) {
        fuzz_tok_word(&b, fuzz_tok_words[i], byte_level);
        if (v == 1) {
            char w[64];
            snprintf(w, sizeof w, "\xE2\x96\x81%s", fuzz_tok_words[i]);
            fuzz_tok_word(&b, w, 0);
        }
    }
    if (byte_level) fuzz_tok_word(&b, " the", 1);
    cJSON_AddItemToObject(model, "vocab", b.vocab);
    cJSON_AddItemToObject(model, "merges", b.merges);
    cJSON_AddItemToObject(root, "model", model);
    cJSON *nm = cJSON_CreateNull(), *pt = cJSON_CreateNull(), *dc = cJSON_CreateNull(), *pp = cJSON_CreateNull();
    if (v == 0) {
        cJSON_AddBoolToObject(model, "ignore_merges", 1);
        cJSON_Delete(nm); nm = fuzz_tok_obj("NFC");
        cJSON_Delete(pt); pt = fuzz_tok_obj("Sequence");
        cJSON *l = cJSON_AddArrayToObject(pt, "pretokenizers");
        cJSON_AddItemToArray(l, fuzz_tok_split("Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "Isolated"));
        cJSON *bl = fuzz_tok_obj("ByteLevel");
        cJSON_AddBoolToObject(bl, "add_prefix_space", 0);
        cJSON_AddBoolToObject(bl, "use_regex", 0);
        cJSON_AddItemToArray(l, bl);
        cJSON_Delete(dc); dc = fuzz_tok_obj("ByteLevel");
        cJSON_AddItemToArray(added, fuzz_tok_added(b.next, "<|eot|>", 1, 0, 0, 0, 0));
        cJSON_AddItemToArray(added, fuzz_tok_added(b.next + 1, "  ", 0, 0, 0, 0, 1));
        cJSON_AddItemToArray(added, fuzz_tok_added(b.next + 2, "<mask>", 1, 1, 1, 0, 0));
        cJSON_AddItemToArray(added, fuzz_tok_added(b.next + 3, "word", 0, 0, 0, 1, 0));
    } else if (v == 1) {
        cJSON_AddStringToObject(model, "unk_token", "<unk>");
        cJSON_AddBoolToObject(model, "byte_fallback", 1);
        cJSON_AddBoolToObject(model, "fuse_unk", 1);
        cJSON_Delete(nm); nm = fuzz_tok_obj("Sequence");
        cJSON *l = cJSON_AddArrayToObject(nm, "normalizers");
        cJSON *p = fuzz_tok_obj("Prepend");
        cJSON_AddStringToObject(p, "prepend", "\xE2\x96\x81");
        cJSON_AddItemToArray(l, p);
        cJSON *r = fuzz_tok_obj("Replace"), *rp = cJSON_CreateObject();
        cJSON_AddStringToObject(rp, "String", " ");
        cJSON_AddItemToObject(r, "pattern", rp);
        cJSON_AddStringToObject(r, "content", "\xE2\x96\x81");
        cJSON_AddItemToArray(l, r);
        cJSON_Delete(dc); dc = fuzz_tok_obj("Sequence");
        cJSON *d = cJSON_AddArrayToObject(dc, "decoders");
        cJSON *dr = fuzz_tok_obj("Replace"), *drp = cJSON_CreateObject();
        cJSON_AddStringToObject(drp, "String", "\xE2\x96\x81");
        cJSON_AddItemToObject(dr, "pattern", drp);
        cJSON_AddStringToObject(dr, "content", " ");
        cJSON_AddItemToArray(d, dr);
        cJSON_AddItemToArray(d, fuzz_tok_obj("ByteFallback"));
        cJSON_AddItemToArray(d, fuzz_tok_obj("Fuse"));
        cJSON *st = fuzz_tok_obj("Strip");
        cJSON_AddStringToObject(st, "content", " ");
        cJSON_AddNumberToObject(st, "start", 1);
        cJSON_AddNumberToObject(st, "stop", 0);
        cJSON_AddItemToArray(d, st);
        cJSON_Delete(pp); pp = fuzz_tok_obj("TemplateProcessing");
        cJSON *single = cJSON_AddArrayToObject(pp, "single");
        cJSON_AddItemToArray(single, cJSON_Parse("{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}"));
        cJSON_AddItemToArray(single, cJSON_Parse("{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}"));
        cJSON_AddItemToArray(added, fuzz_tok_added(0, "<unk>", 1, 0, 0, 0, 0));
        cJSON_AddItemToArray(added, fuzz_tok_added(1, "<s>", 1, 0, 0, 0, 0));
        cJSON_AddItemToArray(added, fuzz_tok_added(2, "</s>", 1, 0, 0, 0, 0));
    } else if (v == 2) {
        cJSON_AddStringToObject(model, "unk_token", "[UNK]");
        cJSON_AddStringToObject(model, "continuing_subword_prefix", "##");
        cJSON_AddStringToObject(model, "end_of_word_suffix", "</w>");
        cJSON_Delete(nm); nm = fuzz_tok_obj("Sequence");
        cJSON *l = cJSON_AddArrayToObject(nm, "normalizers");
        cJSON_AddItemToArray(l, fuzz_tok_obj("NFKC"));
        cJSON_AddItemToArray(l, fuzz_tok_obj("Lowercase"));
        cJSON_Delete(pt); pt = fuzz_tok_obj("Sequence");
        cJSON *p = cJSON_AddArrayToObject(pt, "pretokenizers");
        cJSON *dg = fuzz_tok_obj("Digits");
        cJSON_AddBoolToObject(dg, "individual_digits", 1);
        cJSON_AddItemToArray(p, dg);
        cJSON *ms = fuzz_tok_obj("Metaspace");
        cJSON_AddStringToObject(ms, "replacement", "\xE2\x96\x81");
        cJSON_AddStringToObject(ms, "prepend_scheme", "first");
        cJSON_AddItemToArray(p, ms);
        cJSON_Delete(dc); dc = fuzz_tok_obj("Metaspace");
        cJSON_AddItemToArray(added, fuzz_tok_added(b.next, "[SEP]", 1, 0, 0, 0, 0));
    } else {
        cJSON_Delete(pt); pt = fuzz_tok_obj("Sequence");
        cJSON *p = cJSON_AddArrayToObject(pt, "pretokenizers");
        cJSON_AddItemToArray(p, fuzz_tok_split("String", " ", "MergedWithPrevious"));
        cJSON_AddItemToArray(p, fuzz_tok_split("Regex", "[,.]", "MergedWithNext"));
        cJSON_AddItemToArray(p, fuzz_tok_split("Regex", "-", "Contiguous"));
        cJSON_AddItemToArray(p, fuzz_tok_split("Regex", "(x)|y", "Removed"));
        cJSON_AddItemToArray(p, fuzz_tok_split("Regex", "\\d*", "Isolated"));
    }
    cJSON_AddItemToObject(root, "normalizer", nm);
    cJSON_AddItemToObject(root, "pre_tokenizer", pt);
    cJSON_AddItemToObject(root, "post_processor", pp);
    cJSON_AddItemToObject(root, "decoder", dc);
    cJSON_AddItemToObject(root, "added_tokens", added);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static char *fuzz_tok_rwkv(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    int id = 1;
    for (int b = 0; b < 256; b++)
        n += (size_t)snprintf(s + n, cap - n, "%d %s'\\x%02x' 1\n", id++, b < 128 ? "" : "b", b);
    for (size_t i = 0; i < sizeof fuzz_tok_words / sizeof *fuzz_tok_words; i++) {
        const char *w = fuzz_tok_words[i];
        n += (size_t)snprintf(s + n, cap - n, "%d '%s' %zu\n", id++, w, strlen(w));
        n += (size_t)snprintf(s + n, cap - n, "%d ' %s' %zu\n", id++, w, strlen(w) + 1);
    }
    n += (size_t)snprintf(s + n, cap - n, "%d '\\n\\n' 2\n%d \"it's\" 4\n%d '\\u00e9t\\xe9' 5\n", id, id + 1, id + 2);
    *len = n;
    return s;
}

#endif
