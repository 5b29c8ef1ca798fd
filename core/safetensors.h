/*
 * safetensors.h — a safetensors file as a validated list of tensors (not public).
 *
 * The container only: it knows no model and allocates none. Layout: u64 LE header length N,
 * N bytes of JSON {name: {dtype, shape, data_offsets}, ..., "__metadata__": {...}}, then the
 * data; offsets are relative to the end of the header. recur__st_open mmaps the file read-only
 * and validates the whole header before returning: every entry has exactly the keys dtype,
 * shape and data_offsets, a dtype of F32, F16 or BF16, integral dimensions, a byte range of
 * exactly prod(shape) elements inside the file (RECUR_ETRUNCATED when it runs past the end);
 * no name twice, no two ranges overlapping. What the tensors mean is a model family's business
 * (model_family.h).
 */
#ifndef RECUR_SAFETENSORS_H
#define RECUR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "packed_gemm.h" /* recur_wtype */

#define RECUR__ST_MAX_DIMS 4

typedef struct {
    const char *name;                    /* NUL-terminated, owned by the file */
    recur_wtype dtype;                   /* on disk */
    int ndim;                            /* 0 .. RECUR__ST_MAX_DIMS */
    int64_t shape[RECUR__ST_MAX_DIMS];
    size_t n;                            /* elements, prod(shape) */
    const unsigned char *data;           /* n elements of dtype, little-endian, in the mapping */
    uint64_t begin, end;                 /* byte range relative to the data section */
} recur__st_tensor;

typedef struct {
    int n;                    /* tensors, sorted by name */
    recur__st_tensor *t;
    void *json;               /* the parsed header (names point into it) */
    void *map;                /* the read-only mapping of the whole file */
    size_t map_bytes;
} recur__st_file;

/* Map and validate the file at path. 0, or RECUR_EIO / RECUR_EFORMAT / RECUR_ETRUNCATED /
 * RECUR_ENOMEM with nothing left open. */
int recur__st_open(const char *path, recur__st_file *f);

/* The tensor named name, or NULL. */
const recur__st_tensor *recur__st_find(const recur__st_file *f, const char *name);

/* Unmap and free; the tensors' data and names are gone afterwards. */
void recur__st_close(recur__st_file *f);

#endif /* RECUR_SAFETENSORS_H */
