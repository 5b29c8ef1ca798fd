/* checkpoint.c — tensors over one or several safetensors files (checkpoint.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "checkpoint.h"
#include "hf_config.h"
#include "recur.h"

#define PATH_CAP 4352 /* a folder of at most 4000 bytes (model_load.c) plus a shard name */
#define SHARD_NAME_MAX 255

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp((*(const recur__st_tensor *const *)a)->name, (*(const recur__st_tensor *const *)b)->name);
}

static const char *st_error(int rc)
{
    return rc == RECUR_EIO ? "cannot be opened or read"
         : rc == RECUR_ETRUNCATED ? "is truncated (a tensor or the header runs past the end)"
         : rc == RECUR_ENOMEM ? "out of memory"
         : "is not a valid safetensors file (header, dtype F32/F16/BF16, shapes, offsets, overlaps)";
}

/* The sorted list of every tensor of c's files; a name in two files is refused. */
static int build_list(recur__ckpt *c, char *err, size_t errlen)
{
    int n = 0;
    for (int i = 0; i < c->n_files; i++) n += c->files[i].n;
    c->t = malloc(sizeof *c->t * (size_t)(n ? n : 1));
    if (!c->t) return RECUR_ENOMEM;
    n = 0;
    for (int i = 0; i < c->n_files; i++)
        for (int k = 0; k < c->files[i].n; k++) c->t[n++] = &c->files[i].t[k];
    qsort(c->t, (size_t)n, sizeof *c->t, cmp_tensor);
    c->n = n;
    for (int i = 1; i < n; i++)
        if (!strcmp(c->t[i - 1]->name, c->t[i]->name))
            return recur__errf(err, errlen, "tensor \"%.80s\" is stored in two shards", c->t[i]->name);
    return RECUR_OK;
}

int recur__ckpt_open_file(const char *path, recur__ckpt *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->files = calloc(1, sizeof *c->files);
    if (!c->files) return RECUR_ENOMEM;
    int rc = recur__st_open(path, &c->files[0]);
    if (rc) {
        recur__errf(err, errlen, "%s %s", path, st_error(rc));
        free(c->files);
        c->files = NULL;
        return rc;
    }
    c->n_files = 1;
    rc = build_list(c, err, errlen);
    if (rc) recur__ckpt_close(c);
    return rc;
}

/* A shard name we open inside the folder: a plain file name. */
static int plain_name(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= SHARD_NAME_MAX && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Shards named <stem>-NNNNN-of-MMMMM.safetensors: all of 1..MMMMM with one stem and one MMMMM. */
static int check_numbering(const char **uniq, int nu, char *err, size_t errlen)
{
    int numbered = 0, total = -1;
    for (int i = 0; i < nu; i++) {
        const char *s = uniq[i];
        size_t n = strlen(s);
        int k, m;
        char tail[32];
        if (n < 27 || sscanf(s + n - 27, "-%5d-of-%5d%19s", &k, &m, tail) != 3 || strcmp(tail, ".safetensors"))
            continue;
        numbered++;
        if (total < 0) total = m;
        if (m != total || k < 1 || k > m)
            return recur__errf(err, errlen, "model.safetensors.index.json: shard \"%.80s\" does not fit the "
                               "numbering of the others (1..%d)", s, total);
    }
    if (numbered && numbered != total)
        return recur__errf(err, errlen, "model.safetensors.index.json: %d of %d numbered shards are named "
                           "(a shard is missing)", numbered, total);
    return RECUR_OK;
}

int recur__ckpt_parse_index(const char *text, size_t len, void **tree, const char ***names,
                            const char ***shards, int *n, char *err, size_t errlen)
{
    const char *F = "model.safetensors.index.json";
    cJSON *root;
    int rc = recur__hf_json_parse(text, len, F, &root, err, errlen);
    if (rc) return rc;
    const cJSON *map = NULL, *it;
    rc = cJSON_IsObject(root) ? RECUR_OK : recur__errf(err, errlen, "%s: not a JSON object", F);
    for (it = rc ? NULL : root->child; it && !rc; it = it->next) {
        if (!strcmp(it->string, "weight_map")) map = it;
        else if (strcmp(it->string, "metadata") || !cJSON_IsObject(it))
            rc = recur__errf(err, errlen, "%s: unexpected key \"%.64s\" (weight_map and metadata only)", F, it->string);
    }
    if (!rc && !cJSON_IsObject(map)) rc = recur__errf(err, errlen, "%s: no \"weight_map\" object", F);
    int k = rc ? 0 : cJSON_GetArraySize(map);
    const char **nm = NULL, **sh = NULL;
    if (!rc && k < 1) rc = recur__errf(err, errlen, "%s: empty weight_map", F);
    if (!rc && (!(nm = malloc(sizeof *nm * (size_t)k)) || !(sh = malloc(sizeof *sh * (size_t)k)))) rc = RECUR_ENOMEM;
    int i = 0;
    for (it = rc ? NULL : map->child; it && !rc; it = it->next, i++) {
        if (!cJSON_IsString(it) || !plain_name(it->valuestring))
            rc = recur__errf(err, errlen, "%s: tensor \"%.80s\" maps to something that is not a file name in the "
                             "folder", F, it->string);
        nm[i] = it->string;
        sh[i] = rc ? NULL : it->valuestring;
    }
    if (!rc) {
        /* the distinct shard names, bounded, and their numbering */
        const char **u = malloc(sizeof *u * (size_t)k);
        if (!u) rc = RECUR_ENOMEM;
        int nu = 0;
        if (u) {
            memcpy(u, sh, sizeof *u * (size_t)k);
            qsort(u, (size_t)k, sizeof *u, cmp_str);
            for (int j = 0; j < k; j++)
                if (!nu || strcmp(u[nu - 1], u[j])) u[nu++] = u[j];
            if (nu > RECUR_CKPT_MAX_SHARDS)
                rc = recur__errf(err, errlen, "%s: %d shards (limit RECUR_CKPT_MAX_SHARDS = %d)", F, nu,
                                 RECUR_CKPT_MAX_SHARDS);
            if (!rc) rc = check_numbering(u, nu, err, errlen);
            free(u);
        }
    }
    if (rc) {
        free(nm);
        free(sh);
        cJSON_Delete(root);
        return rc;
    }
    *tree = root;
    *names = nm;
    *shards = sh;
    *n = k;
    return RECUR_OK;
}

/* Open the shards the index names, then check that the index and the files agree exactly. */
static int open_sharded(const char *dir, const char *text, size_t len, recur__ckpt *c, char *err, size_t errlen)
{
    void *tree;
    const char **names, **shards;
    int n, rc = recur__ckpt_parse_index(text, len, &tree, &names, &shards, &n, err, errlen);
    if (rc) return rc;
    /* distinct shards in first-seen order */
    const char **u = malloc(sizeof *u * (size_t)n);
    int *which = malloc(sizeof *which * (size_t)n);
    c->files = calloc((size_t)n, sizeof *c->files);
    if (!u || !which || !c->files) { rc = RECUR_ENOMEM; goto out; }
    for (int i = 0; i < n; i++) {
        int f = 0;
        while (f < c->n_files && strcmp(u[f], shards[i])) f++;
        if (f == c->n_files) {
            char path[PATH_CAP];
            snprintf(path, sizeof path, "%s/%s", dir, shards[i]);
            u[f] = shards[i];
            rc = recur__st_open(path, &c->files[f]);
            if (rc) { recur__errf(err, errlen, "shard %s %s", shards[i], st_error(rc)); goto out; }
            c->n_files++;
        }
        which[i] = f;
    }
    for (int i = 0; i < n; i++)
        if (!recur__st_find(&c->files[which[i]], names[i])) {
            rc = recur__errf(err, errlen, "model.safetensors.index.json maps tensor \"%.80s\" to shard %s, "
                             "which does not hold it", names[i], u[which[i]]);
            goto out;
        }
    if ((rc = build_list(c, err, errlen))) goto out;
    if (c->n != n) {
        /* every mapped name was found in its shard and names are unique: the rest are unlisted */
        for (int f = 0; f < c->n_files; f++)
            for (int t = 0; t < c->files[f].n; t++) {
                int listed = 0;
                for (int i = 0; i < n && !listed; i++) listed = !strcmp(names[i], c->files[f].t[t].name);
                if (!listed) {
                    rc = recur__errf(err, errlen, "shard %s holds tensor \"%.80s\", which the index does not "
                                     "list", u[f], c->files[f].t[t].name);
                    goto out;
                }
            }
        rc = recur__errf(err, errlen, "model.safetensors.index.json and its shards disagree");
    }
out:
    free(u);
    free(which);
    free(names);
    free(shards);
    cJSON_Delete(tree);
    /* names inside the files stay valid: the tensors point into each file's own header */
    return rc;
}

int recur__ckpt_open_dir(const char *dir, recur__ckpt *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    char path[PATH_CAP];
    if (strlen(dir) > PATH_CAP - 64) return RECUR_EINVAL;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (access(path, F_OK) == 0) return recur__ckpt_open_file(path, c, err, errlen);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    char *text;
    size_t len;
    int rc = recur__read_small_file(path, RECUR_CKPT_MAX_INDEX_BYTES, &text, &len);
    if (rc == RECUR_EIO) {
        recur__errf(err, errlen, "%s holds neither model.safetensors nor model.safetensors.index.json", dir);
        return rc;
    }
    if (rc == RECUR_EFORMAT)
        return recur__errf(err, errlen, "model.safetensors.index.json is larger than RECUR_CKPT_MAX_INDEX_BYTES "
                           "(%zu)", RECUR_CKPT_MAX_INDEX_BYTES);
    if (rc) return rc;
    rc = open_sharded(dir, text, len, c, err, errlen);
    free(text);
    if (rc) recur__ckpt_close(c);
    return rc;
}

const recur__st_tensor *recur__ckpt_find(const recur__ckpt *c, const char *name)
{
    recur__st_tensor key = {.name = name};
    const recur__st_tensor *kp = &key, *const *r;
    if (!c->n) return NULL;
    r = bsearch(&kp, c->t, (size_t)c->n, sizeof *c->t, cmp_tensor);
    return r ? *r : NULL;
}

void recur__ckpt_close(recur__ckpt *c)
{
    for (int i = 0; i < c->n_files; i++) recur__st_close(&c->files[i]);
    free(c->files);
    free(c->t);
    memset(c, 0, sizeof *c);
}
