/* safetensors.c — read a model's weights from a safetensors file into the model's arena.
 *
 * Layout: u64 LE header length N, N bytes of JSON {name: {dtype, shape, data_offsets}, ...,
 * "__metadata__": {...}}, then the data; offsets are relative to the end of the header.
 * The file is mmapped read-only, every entry is validated against the model's tensor table
 * (name, dtype F32/F16/BF16, exact shape, byte range inside the file, no overlap, no missing or
 * extra tensor) before the model is allocated, and the mapping is dropped after the copy: the
 * model owns its weights. When every matrix tensor (docs/MODEL.md "Weights in memory") has the
 * same half dtype, the matrices keep it (their halves are copied as they are; the rest is widened
 * to fp32); otherwise everything is fp32. Corrupt input is an error code, never a crash. */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cJSON.h>
#include "model_internal.h"

#define ST_MAX_HEADER ((uint64_t)64 << 20) /* a header above 64 MiB is not a model of ours */

typedef struct {
    recur_weight_ref ref; /* name and shape from the config; places once the model exists */
    int layer, t;         /* recur__weight's enumeration */
    int found;
    recur_wtype dt;       /* on disk */
    uint64_t begin, end;  /* relative to the data section */
} st_entry;

/* The exact widenings (packed_gemm.h), by the names tests/unit/test_safetensors_half.c checks
 * against every bit pattern. */
static inline float half_to_float(uint16_t h) { return recur__half_to_float(h, RECUR_WT_F16); }
static inline float bf16_to_float(uint16_t h) { return recur__half_to_float(h, RECUR_WT_BF16); }

/* An integral JSON number in [0, 2^53]. */
static int get_u64(const cJSON *it, uint64_t *out)
{
    if (!cJSON_IsNumber(it)) return 0;
    double v = it->valuedouble;
    if (!isfinite(v) || v < 0 || v > 9007199254740992.0 || v != floor(v)) return 0;
    *out = (uint64_t)v;
    return 1;
}

static int check_entry(const cJSON *obj, st_entry *e, uint64_t data_size)
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
    size_t elsize;
    if (!strcmp(dtype->valuestring, "F32")) { e->dt = RECUR_WT_F32; elsize = 4; }
    else if (!strcmp(dtype->valuestring, "F16")) { e->dt = RECUR_WT_F16; elsize = 2; }
    else if (!strcmp(dtype->valuestring, "BF16")) { e->dt = RECUR_WT_BF16; elsize = 2; }
    else return RECUR_EFORMAT;

    int nd = 0;
    uint64_t dims[2] = {0, 0};
    cJSON_ArrayForEach(it, shape) {
        uint64_t v;
        if (nd >= 2 || !get_u64(it, &v)) return RECUR_EFORMAT;
        dims[nd++] = v;
    }
    if (nd != e->ref.ndim || (int64_t)dims[0] != e->ref.shape[0] ||
        (nd == 2 && (int64_t)dims[1] != e->ref.shape[1]))
        return RECUR_EFORMAT; /* wrong shape */

    int no = 0;
    uint64_t o[2] = {0, 0};
    cJSON_ArrayForEach(it, offs) {
        if (no >= 2 || !get_u64(it, &o[no])) return RECUR_EFORMAT;
        no++;
    }
    if (no != 2 || o[1] < o[0] || o[1] - o[0] != (uint64_t)e->ref.n * elsize) return RECUR_EFORMAT;
    if (o[1] > data_size) return RECUR_ETRUNCATED;
    e->begin = o[0];
    e->end = o[1];
    return RECUR_OK;
}

static int cmp_begin(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Validate the header against the model's tensor table; entries[] filled with byte ranges. */
static int validate_header(const char *hdr, size_t hdr_len, uint64_t data_size,
                           st_entry *entries, int n_entries)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hdr_len, &end, 0);
    if (!root) return RECUR_EFORMAT;
    int rc = RECUR_OK;
    while (end && end < hdr + hdr_len && (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r'))
        end++;
    if (!end || end != hdr + hdr_len || !cJSON_IsObject(root)) { rc = RECUR_EFORMAT; goto out; }

    const cJSON *it;
    int meta_seen = 0;
    cJSON_ArrayForEach(it, root) {
        if (!it->string) { rc = RECUR_EFORMAT; goto out; }
        if (!strcmp(it->string, "__metadata__")) {
            if (meta_seen++ || !cJSON_IsObject(it)) { rc = RECUR_EFORMAT; goto out; }
            continue;
        }
        int i = 0;
        while (i < n_entries && strcmp(entries[i].ref.name, it->string) != 0) i++;
        if (i == n_entries || entries[i].found) { rc = RECUR_EFORMAT; goto out; } /* extra / duplicate */
        entries[i].found = 1;
        rc = check_entry(it, &entries[i], data_size);
        if (rc) goto out;
    }
    for (int i = 0; i < n_entries; i++)
        if (!entries[i].found) { rc = RECUR_EFORMAT; goto out; } /* missing */

    /* byte ranges must not overlap */
    st_entry **order = malloc(sizeof *order * (size_t)n_entries);
    if (!order) { rc = RECUR_ENOMEM; goto out; }
    for (int i = 0; i < n_entries; i++) order[i] = &entries[i];
    qsort(order, (size_t)n_entries, sizeof *order, cmp_begin);
    for (int i = 1; i < n_entries; i++)
        if (order[i]->begin < order[i - 1]->end) { rc = RECUR_EFORMAT; break; }
    free(order);
out:
    cJSON_Delete(root);
    return rc;
}

/* Copy one tensor into its place(s) in m: fp32 (widened from a half file exactly) and / or the
 * model's half type (only ever the file's own, copied as is). A non-finite weight is a corrupt
 * file. */
static int convert(const st_entry *e, const recur_weight_ref *dst, recur_wtype mwt, const unsigned char *data)
{
    const unsigned char *src = data + e->begin;
    size_t n = e->ref.n;
    if (e->dt == RECUR_WT_F32) {
        if (dst->half || !dst->ptr) return RECUR_EFORMAT; /* cannot happen: fp32 is never narrowed */
        memcpy(dst->ptr, src, n * 4);
        float acc = 0.0f; /* NaN/inf propagate into acc: one test at the end */
        for (size_t i = 0; i < n; i++) acc += dst->ptr[i] * 0.0f;
        return isfinite(acc) ? RECUR_OK : RECUR_EFORMAT;
    }
    if (dst->half && mwt != e->dt) return RECUR_EFORMAT; /* cannot happen: see choose_wtype */
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        finite &= recur__half_finite(h, e->dt);
        if (dst->ptr) dst->ptr[i] = e->dt == RECUR_WT_F16 ? half_to_float(h) : bf16_to_float(h);
    }
    if (dst->half) memcpy(dst->half, src, n * 2);
    return finite ? RECUR_OK : RECUR_EFORMAT;
}

/* The matrices' type in memory: the file's half type when every matrix tensor has it. */
static recur_wtype choose_wtype(const st_entry *entries, int n, int keep_half)
{
    recur_wtype wt = RECUR_WT_F32;
    int first = 1;
    for (int i = 0; i < n; i++) {
        if (!entries[i].ref.is_matrix) continue;
        if (first) { wt = entries[i].dt; first = 0; }
        else if (entries[i].dt != wt) return RECUR_WT_F32;
    }
    return keep_half ? wt : RECUR_WT_F32;
}

int recur__safetensors_load(const recur_config *c, const char *path, int keep_half, recur_model **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return RECUR_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return RECUR_EIO; }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) { close(fd); return RECUR_ETRUNCATED; }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return RECUR_EIO;
    const unsigned char *base = map;

    int rc;
    st_entry *entries = NULL;
    recur_model *m = NULL;
    uint64_t hdr_len = 0;
    for (int i = 0; i < 8; i++) hdr_len |= (uint64_t)base[i] << (8 * i);
    if (hdr_len < 2 || hdr_len > ST_MAX_HEADER) { rc = RECUR_EFORMAT; goto out; }
    if (hdr_len > size - 8) { rc = RECUR_ETRUNCATED; goto out; }

    int n = 0;
    recur_weight_ref ref;
    for (int l = -1; l < c->n_layers; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS; t++) n += recur__weight_meta(c, l, t, &ref);
    entries = calloc((size_t)n, sizeof *entries);
    if (!entries) { rc = RECUR_ENOMEM; goto out; }
    n = 0;
    for (int l = -1; l < c->n_layers; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS; t++)
            if (recur__weight_meta(c, l, t, &entries[n].ref)) {
                entries[n].layer = l;
                entries[n].t = t;
                n++;
            }

    rc = validate_header((const char *)base + 8, (size_t)hdr_len, size - 8 - hdr_len, entries, n);
    if (rc) goto out;
    rc = recur__model_alloc(c, choose_wtype(entries, n, keep_half), &m);
    if (rc) goto out;
    for (int i = 0; rc == RECUR_OK && i < n; i++) {
        recur__weight(m, entries[i].layer, entries[i].t, &ref);
        rc = convert(&entries[i], &ref, m->wtype, base + 8 + hdr_len);
    }
out:
    free(entries);
    munmap(map, (size_t)size);
    if (rc) recur_model_free(m);
    else *out = m;
    return rc;
}
