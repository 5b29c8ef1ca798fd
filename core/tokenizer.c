/* tokenizer.c — the tokenizer's public entry points (recur.h): load from a file, a folder or a
 * buffer; encode; the added-token listing. Decoding is tokenizer_decode.c. */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokenizer.h"

#define MAX_FILE (512u << 20)

/* The file's bytes, mapped (read-only, populated in one call): reading 11 MB of tokenizer.json
 * into the heap cost a copy and a page fault per 4 KB, more than scanning it. As for the
 * weights (core/safetensors.c), the file must not be truncated while it loads. */
typedef struct { const char *p; size_t len; } file_buf;

static void file_free(file_buf *f)
{
    if (f->len) munmap((void *)f->p, f->len);
    memset(f, 0, sizeof *f);
}

static int map_file(const char *path, file_buf *out, char *err, size_t errlen)
{
    out->p = "";
    out->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { tk_err(err, errlen, "%s: %s", path, strerror(errno)); return RECUR_EIO; }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) { tk_err(err, errlen, "%s: not a regular file", path); rc = RECUR_EIO; }
    else if ((uint64_t)st.st_size > MAX_FILE) { tk_err(err, errlen, "%s: larger than %u MB", path, MAX_FILE >> 20); rc = RECUR_EFORMAT; }
    else if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (p == MAP_FAILED) { tk_err(err, errlen, "%s: %s", path, strerror(errno)); rc = RECUR_EIO; }
        else { out->p = p; out->len = (size_t)st.st_size; }
    }
    close(fd);
    return rc;
}

int tk_read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen)
{
    file_buf f;
    int rc = map_file(path, &f, err, errlen);
    if (rc) return rc;
    char *p = malloc(f.len + 1);
    if (p) {
        memcpy(p, f.p, f.len);
        p[f.len] = 0;
        *buf = p;
        *len = f.len;
    } else {
        tk_err(err, errlen, "%s: out of memory", path);
        rc = RECUR_ENOMEM;
    }
    file_free(&f);
    return rc;
}

static int make(int kind, recur_tokenizer **out)
{
    recur_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return RECUR_ENOMEM;
    t->kind = kind;
    t->vocab_size = 256;
    *out = t;
    return 0;
}

int recur_tokenizer_bytes(recur_tokenizer **out)
{
    if (!out) return RECUR_EINVAL;
    return make(RECUR_TOKENIZER_BYTES, out);
}

static int load_text(int kind, const char *text, size_t len, recur_tokenizer **out, char *err, size_t errlen)
{
    if (!text || !out) return RECUR_EINVAL;
    *out = NULL;
    recur_tokenizer *t;
    int rc = make(kind, &t);
    if (rc) return rc;
    rc = kind == RECUR_TOKENIZER_HF ? tk_hf_load(text, len, &t->hf, &t->vocab_size, err, errlen)
                                    : tk_rwkv_load(text, len, &t->rwkv, &t->vocab_size, err, errlen);
    if (rc) { free(t); return rc; }
    *out = t;
    return 0;
}

int recur_tokenizer_load_json(const char *json, size_t len, recur_tokenizer **out, char *err, size_t errlen)
{
    return load_text(RECUR_TOKENIZER_HF, json, len, out, err, errlen);
}

int recur_tokenizer_load_rwkv(const char *text, size_t len, recur_tokenizer **out, char *err, size_t errlen)
{
    return load_text(RECUR_TOKENIZER_RWKV, text, len, out, err, errlen);
}

static int load_file(const char *path, recur_tokenizer **out, char *err, size_t errlen)
{
    file_buf f;
    int rc = map_file(path, &f, err, errlen);
    if (rc) return rc;
    const char *buf = f.p;
    size_t len = f.len;
    size_t i = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t')) i++;
    size_t pl = strlen(path);
    int json = (pl >= 5 && !strcmp(path + pl - 5, ".json")) || (i < len && buf[i] == '{');
    rc = json ? recur_tokenizer_load_json(buf, len, out, err, errlen) : recur_tokenizer_load_rwkv(buf, len, out, err, errlen);
    file_free(&f);
#ifdef __GLIBC__
    malloc_trim(0); /* the parse tree of a large tokenizer.json goes back to the system */
#endif
    return rc;
}

int recur_tokenizer_load(const char *path, recur_tokenizer **out, char *err, size_t errlen)
{
    if (!path || !out) return RECUR_EINVAL;
    *out = NULL;
    struct stat st;
    if (stat(path, &st)) { tk_err(err, errlen, "%s: %s", path, strerror(errno)); return RECUR_EIO; }
    if (!S_ISDIR(st.st_mode)) return load_file(path, out, err, errlen);
    static const char *const names[] = {"tokenizer.json", "rwkv_vocab_v20230424.txt"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        size_t n = strlen(path) + strlen(names[k]) + 2;
        char *p = malloc(n);
        if (!p) return RECUR_ENOMEM;
        snprintf(p, n, "%s/%s", path, names[k]);
        int found = !stat(p, &st) && S_ISREG(st.st_mode);
        int rc = found ? load_file(p, out, err, errlen) : 0;
        free(p);
        if (found) return rc;
    }
    return recur_tokenizer_bytes(out);
}

void recur_tokenizer_free(recur_tokenizer *t)
{
    if (!t) return;
    tk_hf_free(t->hf);
    tk_rwkv_free(t->rwkv);
    free(t);
}

int recur_tokenizer_kind(const recur_tokenizer *t)
{
    return t ? t->kind : RECUR_EINVAL;
}

int32_t recur_tokenizer_vocab_size(const recur_tokenizer *t)
{
    return t ? t->vocab_size : RECUR_EINVAL;
}

int recur_tokenizer_added_token(const recur_tokenizer *t, size_t i, int32_t *id, const char **content, int *special)
{
    if (!t) return RECUR_EINVAL;
    if (!t->hf || i >= t->hf->n_added) return RECUR_ERANGE;
    const tk_added *a = &t->hf->added[i];
    if (id) *id = a->id;
    if (content) *content = a->content;
    if (special) *special = a->special;
    return 0;
}

int recur_tokenizer_encode(const recur_tokenizer *t, const char *text, size_t len, int add_special_tokens,
                           int32_t **ids, size_t *n)
{
    if (!t || (!text && len) || !ids || !n) return RECUR_EINVAL;
    *ids = NULL;
    *n = 0;
    tk_ids out = {0};
    tk_buf clean = {0};
    int rc = 0;
    if (t->kind == RECUR_TOKENIZER_BYTES) {
        for (size_t i = 0; !rc && i < len; i++) rc = tk_ids_push(&out, (unsigned char)text[i]);
    } else {
        if (!text) text = "";
        if (tk_utf8_valid_prefix(text, len) != len) {
            if ((rc = tk_utf8_sanitize(text, len, &clean))) return rc;
            text = clean.p;
            len = clean.n;
        }
        rc = t->hf ? tk_hf_encode(t->hf, text, len, add_special_tokens, &out) : tk_rwkv_encode(t->rwkv, text, len, &out);
    }
    tk_buf_free(&clean);
    if (!rc && !out.p) rc = tk_ids_push(&out, 0), out.n = 0; /* a valid pointer for an empty result */
    if (rc) { tk_ids_free(&out); return rc; }
    *ids = out.p;
    *n = out.n;
    return 0;
}

void recur_tokenizer_release(void *p)
{
    free(p);
}
