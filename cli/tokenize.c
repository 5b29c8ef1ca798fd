/* tokenize.c — `recur tokenize DIR_OR_FILE [--decode] [--special]` (docs/API.md §Tokenizers).
 *
 * Encode (default): stdin is UTF-8 text; stdout gets its ids, space-separated, and a newline.
 * --special applies the tokenizer's TemplateProcessing (BOS/EOS). --decode: stdin holds ids
 * separated by whitespace or commas; stdout gets the text, as the streaming decoder emits it.
 * DIR_OR_FILE: a tokenizer.json, an RWKV vocab file, or a model folder (without a tokenizer
 * file: the byte tokenizer). Exit codes: 0 ok, 1 runtime error, 2 usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"

int cmd_tokenize(int argc, char **argv);

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
        if (n == cap) {
            char *q = cap < ((size_t)1 << 31) ? realloc(b, cap *= 2) : NULL;
            if (!q) { free(b); return NULL; }
            b = q;
        }
    }
    if (b) *len = n;
    return b;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *path = NULL;
    int decode = 0, special = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--decode")) decode = 1;
        else if (!strcmp(argv[i], "--special")) special = 1;
        else if (argv[i][0] == '-' || path) { fprintf(stderr, "usage: recur tokenize DIR_OR_FILE [--decode] [--special]\n"); return 2; }
        else path = argv[i];
    }
    if (!path) { fprintf(stderr, "usage: recur tokenize DIR_OR_FILE [--decode] [--special]\n"); return 2; }
    recur_tokenizer *t;
    char err[512] = "";
    int rc = recur_tokenizer_load(path, &t, err, sizeof err);
    if (rc) { fprintf(stderr, "recur tokenize: %s: %s\n", recur_strerror(rc), err); return 1; }
    size_t len;
    char *in = read_all(stdin, &len);
    if (!in) { fprintf(stderr, "recur tokenize: cannot read stdin\n"); recur_tokenizer_free(t); return 1; }
    int status = 0;
    if (!decode) {
        int32_t *ids;
        size_t n;
        if ((rc = recur_tokenizer_encode(t, in, len, special, &ids, &n))) {
            fprintf(stderr, "recur tokenize: %s\n", recur_strerror(rc));
            status = 1;
        } else {
            for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
            printf("\n");
            recur_tokenizer_release(ids);
        }
    } else {
        recur_detok *d;
        if ((rc = recur_detok_new(t, &d))) { fprintf(stderr, "recur tokenize: %s\n", recur_strerror(rc)); status = 1; }
        const char *p = in, *end = in + len, *s;
        size_t l;
        while (!status && p < end) {
            while (p < end && (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
            if (p == end) break;
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p || v < 0 || v > INT32_MAX) { fprintf(stderr, "recur tokenize: not a token id near \"%.16s\"\n", p); status = 2; break; }
            p = q;
            if ((rc = recur_detok_push(d, (int32_t)v, &s, &l))) { fprintf(stderr, "recur tokenize: %s\n", recur_strerror(rc)); status = 1; break; }
            fwrite(s, 1, l, stdout);
        }
        if (!status && !recur_detok_finish(d, &s, &l)) fwrite(s, 1, l, stdout);
        recur_detok_free(d);
    }
    free(in);
    recur_tokenizer_free(t);
    if (fflush(stdout)) status = 1;
    return status;
}
