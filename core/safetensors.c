/* safetensors.c — the safetensors container (safetensors.h): map, validate, list the tensors.
 * Corrupt input is an error code, never a crash. */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cJSON.h>
#include "recur.h"
#include "safetensors.h"
#include "util.h"

#define ST_MAX_HEADER ((uint64_t)64 << 20) /* a header above 64 MiB is not a model of ours */
#define ST_MAX_EXACT 9007199254740992.0    /* 2^53: JSON numbers above it are not exact */

/* An integral JSON number in [0, 2^53]. */
static int get_u64(const cJSON *it, uint64_t *out)
{
    if (!cJSON_IsNumber(it)) return 0;
    double v = it->valuedouble;
    if (!isfinite(v) || v < 0 || v > ST_MAX_EXACT || v != floor(v)) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* One header entry {dtype, shape, data_offsets} into t (name and data set by the caller). */
static int parse_entry(const cJSON *obj, recur__st_tensor *t, uint64_t data_size)
{
    if (!cJSON_IsObject(obj)) return RECUR_EFORMAT;
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL, *it;
    cJSON_ArrayForEach(it, obj) {
        const cJSON **slot = NULL;
        if (!it->string) return RECUR_EFORMAT;
        if (!strcmp(it->string, "dtype")) slot = &dtype;
        else if (!strcmp(it->string, "shape")) slot = &shape;
        else if (!strcmp(it->string, "data_offsets")) slot = &offs;
        if (!slot || *slot) return RECUR_EFORMAT; /* unknown or duplicate key */
        *slot = it;
    }
    if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs)) return RECUR_EFORMAT;
    if (!strcmp(dtype->valuestring, "F32")) t->dtype = RECUR_WT_F32;
    else if (!strcmp(dtype->valuestring, "F16")) t->dtype = RECUR_WT_F16;
    else if (!strcmp(dtype->valuestring, "BF16")) t->dtype = RECUR_WT_BF16;
    else return RECUR_EFORMAT;

    /* n = prod(shape), without overflow */
    uint64_t n = 1;
    t->ndim = 0;
    cJSON_ArrayForEach(it, shape) {
        uint64_t v;
        if (t->ndim >= RECUR__ST_MAX_DIMS || !get_u64(it, &v)) return RECUR_EFORMAT;
        if (v && n > UINT64_MAX / v) return RECUR_EFORMAT;
        n *= v;
        t->shape[t->ndim++] = (int64_t)v;
    }
    const uint64_t es = recur__wtype_size(t->dtype);
    if (n > UINT64_MAX / es || n > SIZE_MAX) return RECUR_EFORMAT;

    int no = 0;
    uint64_t o[2] = {0, 0};
    cJSON_ArrayForEach(it, offs) {
        if (no >= 2 || !get_u64(it, &o[no])) return RECUR_EFORMAT;
        no++;
    }
    if (no != 2 || o[1] < o[0] || o[1] - o[0] != n * es) return RECUR_EFORMAT;
    if (o[1] > data_size) return RECUR_ETRUNCATED;
    t->n = (size_t)n;
    t->begin = o[0];
    t->end = o[1];
    return RECUR_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const recur__st_tensor *)a)->name, ((const recur__st_tensor *)b)->name);
}

static int cmp_begin(const void *a, const void *b)
{
    const recur__st_tensor *x = *(const recur__st_tensor *const *)a, *y = *(const recur__st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* No two byte ranges overlap. */
static int check_overlap(const recur__st_file *f)
{
    if (f->n < 2) return RECUR_OK;
    const recur__st_tensor **order = malloc(sizeof *order * (size_t)f->n);
    if (!order) return RECUR_ENOMEM;
    for (int i = 0; i < f->n; i++) order[i] = &f->t[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
    int rc = RECUR_OK;
    for (int i = 1; i < f->n; i++)
        if (order[i]->begin < order[i - 1]->end) { rc = RECUR_EFORMAT; break; }
    free(order);
    return rc;
}

/* Parse and validate the header text; f->t filled (sorted by name), f->json kept. */
static int parse_header(recur__st_file *f, const char *hdr, size_t hdr_len, const unsigned char *data,
                        uint64_t data_size)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hdr_len, &end, 0);
    if (!root) return RECUR_EFORMAT;
    f->json = root;
    while (end && end < hdr + hdr_len && (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r'))
        end++;
    if (!end || end != hdr + hdr_len || !cJSON_IsObject(root)) return RECUR_EFORMAT;

    int n = cJSON_GetArraySize(root);
    f->t = calloc(n > 0 ? (size_t)n : 1, sizeof *f->t);
    if (!f->t) return RECUR_ENOMEM;
    const cJSON *it;
    int meta_seen = 0;
    cJSON_ArrayForEach(it, root) {
        if (!it->string) return RECUR_EFORMAT;
        if (!strcmp(it->string, "__metadata__")) {
            if (meta_seen++ || !cJSON_IsObject(it)) return RECUR_EFORMAT;
            continue;
        }
        recur__st_tensor *t = &f->t[f->n];
        int rc = parse_entry(it, t, data_size);
        if (rc) return rc;
        t->name = it->string;
        t->data = data + t->begin;
        f->n++;
    }
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_name);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(f->t[i - 1].name, f->t[i].name)) return RECUR_EFORMAT; /* duplicate */
    return check_overlap(f);
}

int recur__st_open(const char *path, recur__st_file *f)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return RECUR_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return RECUR_EIO; }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) { close(fd); return RECUR_ETRUNCATED; }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return RECUR_EIO;
    f->map = map;
    f->map_bytes = (size_t)size;
    const unsigned char *base = map;
    const uint64_t hdr_len = recur__get_le64(base);
    int rc;
    if (hdr_len < 2 || hdr_len > ST_MAX_HEADER) rc = RECUR_EFORMAT;
    else if (hdr_len > size - 8) rc = RECUR_ETRUNCATED;
    else rc = parse_header(f, (const char *)base + 8, (size_t)hdr_len, base + 8 + hdr_len, size - 8 - hdr_len);
    if (rc) recur__st_close(f);
    return rc;
}

const recur__st_tensor *recur__st_find(const recur__st_file *f, const char *name)
{
    const recur__st_tensor key = {.name = name};
    return f->n ? bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, cmp_name) : NULL;
}

void recur__st_close(recur__st_file *f)
{
    free(f->t);
    cJSON_Delete(f->json);
    if (f->map) munmap(f->map, f->map_bytes);
    memset(f, 0, sizeof *f);
}
