/* test_prefix_cache.c — server/prefix_cache.c (included, to reach its entries): exact matching
 * on token ids (a hash never decides a hit), longest prefix first, byte-accurate LRU accounting
 * and eviction, spill to a real directory and reload, and spill files that fail a check refused
 * and quarantined. Reference for a restored state: the storing session's own snapshot bytes. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prefix_cache.c"

static const char *CFG = "{\"name\":\"pc\",\"vocab_size\":16,\"d_model\":8,\"n_layers\":2,\"n_heads\":2,"
                         "\"head_k\":4,\"head_v\":4,\"d_ff\":8,\"mixers\":[\"linear\",\"gated_deltanet\"],"
                         "\"tied_embeddings\":true}";

static recur_model *M;
static recur_workspace *WS;
static int V;
static uv_loop_t LOOP;
static char DIR_[256];

static void setup(void)
{
    cr_assert_eq(recur_model_init_seed(CFG, 5, &M), 0);
    cr_assert_eq(recur_workspace_create(M, 64, &WS), 0);
    V = recur_model_get_info(M)->vocab_size;
    cr_assert_eq(uv_loop_init(&LOOP), 0);
    snprintf(DIR_, sizeof DIR_, "/tmp/test_prefix_cache_XXXXXX");
    cr_assert_not_null(mkdtemp(DIR_));
}

static void teardown(void)
{
    uv_run(&LOOP, UV_RUN_DEFAULT);
    uv_loop_close(&LOOP);
    recur_workspace_free(WS);
    recur_model_free(M);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", DIR_);
    if (system(cmd) != 0)
        cr_log_warn("could not remove %s", DIR_);
}

/* A session that folded t[0..n) (n <= 64), or a fresh one (n == 0). */
static srv_session *sess(const int32_t *t, size_t n)
{
    srv_session *s = calloc(1, sizeof *s);
    cr_assert_eq(recur_state_create(M, &s->state), 0);
    s->logits = calloc((size_t)V, sizeof(float));
    if (n) {
        float *lg = malloc(n * (size_t)V * sizeof *lg);
        cr_assert_eq(recur_model_prefill(M, WS, s->state, t, (int64_t)n, lg), 0);
        memcpy(s->logits, lg + (n - 1) * (size_t)V, (size_t)V * sizeof *lg);
        free(lg);
        s->has_logits = 1;
    }
    s->tokens_seen = recur_state_tokens_seen(s->state);
    return s;
}

static void sess_free(srv_session *s)
{
    srv_pcache_hist_drop(s); /* a restored session shares its entry's ids */
    recur_state_destroy(s->state);
    free(s->logits);
    free(s);
}

/* The state blob of s: what a restored session must equal, byte for byte. */
static uint8_t *blob_of(const srv_session *s, size_t *len)
{
    uint8_t *b;
    cr_assert_eq(srv_state_capture(s, V, &b, len), 0);
    return b;
}

static void assert_same_state(const srv_session *a, const srv_session *b)
{
    size_t la, lb;
    uint8_t *x = blob_of(a, &la), *y = blob_of(b, &lb);
    cr_assert_eq(la, lb);
    cr_assert(memcmp(x, y, la) == 0, "restored state differs from the stored one");
    free(x);
    free(y);
}

static srv_pcache *cache(size_t bytes, size_t disk, int spill)
{
    srv_pcache_config c = {bytes, disk, 0, spill ? DIR_ : NULL};
    srv_pcache *pc;
    char err[256];
    cr_assert_eq(srv_pcache_create(&c, M, &LOOP, &pc, err, sizeof err), 0, "%s", err);
    return pc;
}

static void seq(int32_t *t, size_t n, int32_t base)
{
    for (size_t i = 0; i < n; i++)
        t[i] = (int32_t)((base + (int32_t)i * 7) % 16);
}

/* An entry's cost in bytes as the bound counts it. */
static size_t cost(size_t n, const srv_session *s)
{
    size_t bl;
    uint8_t *b = blob_of(s, &bl);
    free(b);
    return sizeof(pentry) + sizeof(srv_ids) + n * sizeof(int32_t) + bl; /* its own id buffer */
}

TestSuite(prefix_cache, .init = setup, .fini = teardown, .timeout = 60);

Test(prefix_cache, exact_longest_prefix)
{
    srv_pcache *pc = cache(1 << 20, 0, 0);
    int32_t t[40];
    seq(t, 40, 3);
    srv_session *a = sess(t, 10), *b = sess(t, 25);
    srv_pcache_store(pc, t, 10, a);
    srv_pcache_store(pc, t, 25, b);
    srv_session *f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, t, 40, f), 25); /* the longest */
    assert_same_state(f, b);
    cr_assert_eq(f->tokens_seen, 25);
    sess_free(f);
    f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, t, 25, f), 25); /* a whole prompt may come from the cache */
    sess_free(f);
    f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, t, 24, f), 10);
    assert_same_state(f, a);
    sess_free(f);
    /* one token different anywhere before 25 (after 10): only the 10-token entry may serve */
    for (int at = 10; at < 25; at++) {
        int32_t u[40];
        memcpy(u, t, sizeof u);
        u[at] = (u[at] + 1) % 16;
        f = sess(NULL, 0);
        cr_assert_eq(srv_pcache_restore(pc, u, 40, f), 10, "edit at %d", at);
        sess_free(f);
    }
    int32_t u[40];
    memcpy(u, t, sizeof u);
    u[0] = (u[0] + 1) % 16;
    f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, u, 40, f), 0);
    cr_assert_eq(f->tokens_seen, 0);
    cr_assert_eq(f->has_logits, 0); /* a miss leaves the session as it was */
    sess_free(f);
    srv_pcache_stats st = srv_pcache_get_stats(pc);
    cr_assert_eq(st.hits, 3 + 15);
    cr_assert_eq(st.hit_tokens, 25 + 25 + 10 + 15 * 10);
    cr_assert_eq(st.misses, 1);
    sess_free(a);
    sess_free(b);
    srv_pcache_free(pc);
}

Test(prefix_cache, a_matching_hash_is_not_a_hit)
{
    /* Make an entry claim (by its hash) to be the prefix of another prompt: the ids decide. */
    srv_pcache *pc = cache(1 << 20, 0, 0);
    int32_t t[20], u[20];
    seq(t, 20, 1);
    seq(u, 20, 2);
    srv_session *a = sess(t, 12);
    srv_pcache_store(pc, t, 12, a);
    pc->mem.head->h = srv_pcache_hash(RECUR_FNV_OFFSET, u, 12); /* a forged collision */
    srv_session *f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, u, 20, f), 0);
    cr_assert_eq(f->tokens_seen, 0);
    sess_free(f);
    sess_free(a);
    srv_pcache_free(pc);
}

Test(prefix_cache, the_carried_hash_is_fnv1a_of_the_ids_bytes)
{
    /* Reference: FNV-1a 64 over the ids' little-endian bytes in one call (the spill files'
     * names and checks use it); the carried hash continues over any split of the ids. */
    int32_t t[40];
    uint8_t le[160];
    seq(t, 40, 3);
    t[7] = -5; /* a negative id: its two's-complement bytes */
    for (int i = 0; i < 40; i++)
        recur_put_le32(le + 4 * i, (uint32_t)t[i]);
    for (size_t k = 0; k <= 40; k++) {
        uint64_t want = recur_fnv1a64(RECUR_FNV_OFFSET, le, 4 * k);
        cr_assert_eq(srv_pcache_hash(RECUR_FNV_OFFSET, t, k), want, "k=%zu", k);
        for (size_t a = 0; a <= k; a += 3)
            cr_assert_eq(srv_pcache_hash(srv_pcache_hash(RECUR_FNV_OFFSET, t, a), t + a, k - a), want);
    }
    /* restore_h says the hash of the prefix it restored */
    seq(t, 40, 3);
    for (int i = 0; i < 40; i++)
        recur_put_le32(le + 4 * i, (uint32_t)t[i]);
    srv_pcache *pc = cache(1 << 20, 0, 0);
    srv_session *a = sess(t, 17);
    srv_pcache_store(pc, t, 17, a);
    srv_session *f = sess(NULL, 0);
    uint64_t h = 0;
    cr_assert_eq(srv_pcache_restore_h(pc, t, 40, f, &h), 17);
    cr_assert_eq(h, recur_fnv1a64(RECUR_FNV_OFFSET, le, 4 * 17));
    srv_session *g = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore_h(pc, t, 16, g, &h), 0);
    cr_assert_eq(h, RECUR_FNV_OFFSET);
    sess_free(g);
    sess_free(f);
    sess_free(a);
    srv_pcache_free(pc);
}

Test(prefix_cache, a_conversation_shares_one_id_buffer)
{
    /* A store from a session's history and a session restored from it share the ids (no
     * copy); the frontier appends in place, another holder copies first; entries keep their
     * prefix; the buffer is charged once. Reference: the ids themselves and their hash. */
    int32_t t[64], u[5] = {1, 2, 3, 4, 5};
    seq(t, 64, 6);
    srv_pcache *pc = cache(1 << 22, 0, 0);
    srv_session *a = sess(t, 20);
    srv_pcache_hist_append(a, t, 20, 1000);
    srv_pcache_store_hist(pc, a);
    size_t bl;
    free(blob_of(a, &bl));
    const srv_ids *buf = a->pc_hist;
    size_t one = sizeof(pentry) + bl, shared = sizeof(srv_ids) + buf->cap * sizeof(int32_t);
    cr_assert_eq(srv_pcache_get_stats(pc).bytes, one + shared);
    srv_session *f = sess(NULL, 0);
    uint64_t h;
    cr_assert_eq(srv_pcache_restore_h(pc, t, 40, f, &h), 20);
    cr_assert_eq(f->pc_hist, buf, "the restored history is the entry's buffer");
    cr_assert_eq(f->pc_hist_n, 20);
    srv_pcache_hist_append(f, t + 20, 10, 1000); /* the next turn: in place */
    cr_assert_eq(f->pc_hist, buf);
    cr_assert_eq(f->pc_hist_h, srv_pcache_hash(RECUR_FNV_OFFSET, t, 30));
    srv_pcache_hist_append(a, u, 5, 1000); /* not the frontier any more: its own copy */
    cr_assert_neq(a->pc_hist, buf);
    cr_assert(memcmp(a->pc_hist->ids, t, 20 * sizeof(int32_t)) == 0);
    cr_assert(memcmp(a->pc_hist->ids + 20, u, 5 * sizeof(int32_t)) == 0);
    cr_assert(memcmp(buf->ids, t, 30 * sizeof(int32_t)) == 0, "f's ids were not overwritten");
    /* a session at 30 tokens with f's history: its entry costs its struct and blob alone */
    srv_session *g = sess(t, 30);
    srv_pcache_hist_copy(g, f);
    srv_pcache_store_hist(pc, g);
    size_t bl30;
    free(blob_of(g, &bl30));
    cr_assert_eq(srv_pcache_get_stats(pc).bytes, one + shared + sizeof(pentry) + bl30);
    srv_session *k = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore_h(pc, t, 64, k, &h), 30);
    assert_same_state(k, g);
    srv_session *m = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore_h(pc, t, 25, m, &h), 20, "the 20-token entry still holds t");
    sess_free(m);
    sess_free(k);
    sess_free(g);
    sess_free(f);
    sess_free(a);
    srv_pcache_free(pc);
}

Test(prefix_cache, lru_bytes_are_exact_and_bounded)
{
    int32_t t[64];
    seq(t, 64, 4);
    srv_session *s[6];
    size_t c[6];
    for (int i = 0; i < 6; i++) {
        int32_t u[64];
        seq(u, 64, 4 + i);
        s[i] = sess(u, (size_t)(20 + i));
        c[i] = cost((size_t)(20 + i), s[i]);
    }
    size_t bound = c[0] + c[1] + c[2] + 10; /* three entries fit, a fourth does not */
    srv_pcache *pc = cache(bound, 0, 0);
    size_t sum = 0;
    for (int i = 0; i < 3; i++) {
        int32_t u[64];
        seq(u, 64, 4 + i);
        srv_pcache_store(pc, u, (size_t)(20 + i), s[i]);
        sum += c[i];
        cr_assert_eq(srv_pcache_get_stats(pc).bytes, sum, "bytes after %d stores", i + 1);
    }
    /* touch entry 0 (a hit): entry 1 is now the least recently used */
    int32_t u0[64];
    seq(u0, 64, 4);
    srv_session *f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, u0, 64, f), 20);
    sess_free(f);
    int32_t u3[64];
    seq(u3, 64, 7);
    srv_pcache_store(pc, u3, 23, s[3]);
    srv_pcache_stats st = srv_pcache_get_stats(pc);
    cr_assert_leq(st.bytes, bound);
    cr_assert_eq(st.bytes, c[0] + c[2] + c[3]);
    cr_assert_eq(st.evictions, 1);
    cr_assert_eq(st.entries, 3);
    int32_t u1[64];
    seq(u1, 64, 5);
    f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, u1, 64, f), 0); /* evicted, no spill: gone */
    sess_free(f);
    /* the same ids again only refresh their entry */
    srv_pcache_store(pc, u3, 23, s[3]);
    cr_assert_eq(srv_pcache_get_stats(pc).bytes, c[0] + c[2] + c[3]);
    cr_assert_eq(srv_pcache_get_stats(pc).stores, 4);
    /* an entry larger than the whole bound is not stored */
    srv_pcache *tiny = cache(c[0] - 1, 0, 0);
    srv_pcache_store(tiny, u0, 20, s[0]);
    cr_assert_eq(srv_pcache_get_stats(tiny).entries, 0);
    cr_assert_eq(srv_pcache_get_stats(tiny).bytes, 0);
    srv_pcache_free(tiny);
    for (int i = 0; i < 6; i++)
        sess_free(s[i]);
    srv_pcache_free(pc);
}

/* Run the loop until no spill write is in flight. */
static void settle(srv_pcache *pc)
{
    while (pc->inflight)
        uv_run(&LOOP, UV_RUN_ONCE);
}

static int count_files(const char *sub)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls '%s/%s' 2>/dev/null | grep -c snap", DIR_, sub);
    FILE *p = popen(cmd, "r");
    int n = 0;
    if (fscanf(p, "%d", &n) != 1)
        n = 0;
    pclose(p);
    return n;
}

Test(prefix_cache, spill_and_reload_after_restart)
{
    int32_t a[30], b[30];
    seq(a, 30, 1);
    seq(b, 30, 9);
    srv_session *sa = sess(a, 30), *sb = sess(b, 30);
    size_t ca = cost(30, sa);
    srv_pcache *pc = cache(ca + 10, (size_t)1 << 30, 1); /* one entry in memory */
    srv_pcache_store(pc, a, 30, sa);
    srv_pcache_store(pc, b, 30, sb); /* evicts a: written to a file */
    settle(pc);
    srv_pcache_stats st = srv_pcache_get_stats(pc);
    cr_assert_eq(st.evictions, 1);
    cr_assert_eq(st.spill_writes, 1);
    cr_assert_eq(count_files("."), 1);
    srv_session *f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, a, 30, f), 30); /* read back from its file */
    assert_same_state(f, sa);
    sess_free(f);
    cr_assert_eq(srv_pcache_get_stats(pc).spill_loads, 1);
    settle(pc);
    srv_pcache_shutdown(pc); /* the memory entries not on disk yet */
    settle(pc);
    srv_pcache_free(pc);
    cr_assert_eq(count_files("."), 2);
    /* a new cache on the same directory: both are hits, from the files */
    pc = cache(1 << 20, (size_t)1 << 30, 1);
    cr_assert_eq(srv_pcache_get_stats(pc).disk_entries, 2);
    cr_assert_eq(srv_pcache_get_stats(pc).entries, 0);
    f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, b, 30, f), 30);
    assert_same_state(f, sb);
    sess_free(f);
    int32_t b2[30];
    memcpy(b2, b, sizeof b2);
    b2[29] = (b2[29] + 1) % 16; /* same length, same name length, other ids: a miss */
    f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, b2, 30, f), 0);
    sess_free(f);
    srv_pcache_free(pc);
    sess_free(sa);
    sess_free(sb);
}

/* A directory with one spill file: the state after a[0..30) (seq base 3). Returns the storing
 * session; *h: the ids' hash (the file's name). */
static srv_session *one_spill_file(int32_t a[30], uint64_t *h)
{
    seq(a, 30, 3);
    srv_session *sa = sess(a, 30);
    srv_pcache *pc = cache(1 << 20, (size_t)1 << 30, 1);
    srv_pcache_store(pc, a, 30, sa);
    srv_pcache_shutdown(pc);
    settle(pc);
    *h = pc->mem.head->h;
    srv_pcache_free(pc);
    return sa;
}

/* Corrupt the one spill file (at offset off, or truncate when off < 0; reseal: recompute the
 * file's own checksum, so a check behind it must catch the change), then look it up. */
static void corrupted_is_refused_ex(long off, const char *reason, int reseal)
{
    int32_t a[30];
    pentry e = {0};
    e.n = 30;
    srv_session *sa = one_spill_file(a, &e.h);
    srv_pcache *pc;
    char id[33], path[400];
    entry_id(&e, id);
    snprintf(path, sizeof path, "%s/%s.snap", DIR_, id);
    FILE *fp = fopen(path, "r+b");
    cr_assert_not_null(fp);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    if (off < 0) {
        cr_assert_eq(ftruncate(fileno(fp), size + off), 0);
    } else {
        fseek(fp, off, SEEK_SET);
        int c = fgetc(fp);
        fseek(fp, off, SEEK_SET);
        fputc(c ^ 0x04, fp);
    }
    if (reseal) {
        uint8_t *buf = malloc((size_t)size);
        fseek(fp, 0, SEEK_SET);
        cr_assert_eq(fread(buf, 1, (size_t)size, fp), (size_t)size);
        seal(buf, (size_t)size);
        fseek(fp, 0, SEEK_SET);
        cr_assert_eq(fwrite(buf, 1, (size_t)size, fp), (size_t)size);
        free(buf);
    }
    fclose(fp);
    pc = cache(1 << 20, (size_t)1 << 30, 1);
    srv_session *f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, a, 30, f), 0, "a corrupted file was used (%s)", reason);
    cr_assert_eq(f->tokens_seen, 0);
    cr_assert_eq(f->has_logits, 0);
    cr_assert_eq(srv_pcache_get_stats(pc).quarantined, 1);
    cr_assert_eq(srv_pcache_get_stats(pc).disk_entries, 0);
    cr_assert_eq(count_files("."), 0);
    cr_assert_eq(count_files("quarantine"), 1);
    sess_free(f);
    srv_pcache_free(pc);
    sess_free(sa);
}

static void corrupted_is_refused(long off, const char *reason)
{
    corrupted_is_refused_ex(off, reason, 0);
}

Test(prefix_cache, corrupted_header_is_refused) { corrupted_is_refused(9, "version"); }
Test(prefix_cache, corrupted_token_is_refused) { corrupted_is_refused(40 + 4 * 7, "token"); }
Test(prefix_cache, corrupted_state_is_refused) { corrupted_is_refused(40 + 4 * 30 + 100, "state"); }
Test(prefix_cache, truncated_file_is_refused) { corrupted_is_refused(-20, "truncated"); }
/* behind a valid file checksum: the ids' hash against the name, the state blob's own checks */
Test(prefix_cache, resealed_token_is_refused) { corrupted_is_refused_ex(40 + 4 * 7, "hash", 1); }
Test(prefix_cache, resealed_state_is_refused) { corrupted_is_refused_ex(40 + 4 * 30 + 100, "blob", 1); }
Test(prefix_cache, resealed_count_is_refused) { corrupted_is_refused_ex(24, "n", 1); }

Test(prefix_cache, another_models_file_is_refused)
{
    int32_t a[30];
    uint64_t h;
    srv_session *sa = one_spill_file(a, &h);
    srv_pcache *pc;
    /* the same directory under another model (other weights): its fingerprint differs */
    recur_model *m2;
    cr_assert_eq(recur_model_init_seed(CFG, 6, &m2), 0);
    srv_pcache_config c = {1 << 20, (size_t)1 << 30, 0, DIR_};
    char err[256];
    cr_assert_eq(srv_pcache_create(&c, m2, &LOOP, &pc, err, sizeof err), 0);
    srv_session *f = calloc(1, sizeof *f);
    cr_assert_eq(recur_state_create(m2, &f->state), 0);
    f->logits = calloc((size_t)V, sizeof(float));
    cr_assert_eq(srv_pcache_restore(pc, a, 30, f), 0);
    cr_assert_eq(srv_pcache_get_stats(pc).quarantined, 1);
    recur_state_destroy(f->state);
    free(f->logits);
    free(f);
    srv_pcache_free(pc);
    recur_model_free(m2);
    sess_free(sa);
}

Test(prefix_cache, disk_bound_removes_the_least_recently_used)
{
    int32_t t[3][30];
    srv_session *s[3];
    for (int i = 0; i < 3; i++) {
        seq(t[i], 30, 2 * i + 1);
        s[i] = sess(t[i], 30);
    }
    size_t fb = file_size(30, 0);
    size_t bl;
    uint8_t *b = blob_of(s[0], &bl);
    free(b);
    fb += bl;
    srv_pcache *pc = cache(cost(30, s[0]) + 10, 2 * fb + 10, 1); /* 1 in memory, 2 files */
    for (int i = 0; i < 3; i++) {
        srv_pcache_store(pc, t[i], 30, s[i]);
        settle(pc);
    }
    srv_pcache_stats st = srv_pcache_get_stats(pc);
    cr_assert_eq(st.disk_entries, 2);
    cr_assert_leq(st.disk_bytes, 2 * fb + 10);
    srv_pcache_shutdown(pc); /* t[2] is written; t[0], the oldest file, goes */
    settle(pc);
    st = srv_pcache_get_stats(pc);
    cr_assert_eq(st.disk_entries, 2);
    cr_assert_eq(count_files("."), 2);
    srv_session *f = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(pc, t[0], 30, f), 0);
    sess_free(f);
    srv_pcache_free(pc);
    for (int i = 0; i < 3; i++)
        sess_free(s[i]);
}

/* The shared tier (prefix_redis.c) hands adopt the bytes of another node's entry: the store hook
 * sees every store from a session, adopt restores the exact state only for the prompt whose
 * first n ids are the entry's, refuses other ids under a matching hash (what a hash collision
 * would be) and damaged bytes, and keeps a hit in memory without calling the hook again. */
typedef struct {
    int calls;
    uint8_t *bytes;
    size_t len, n;
    uint64_t h;
} hook_seen;

static srv_pcache *HOOKED;

static void hook(void *ctx, const int32_t *ids, size_t n, uint64_t h, const uint8_t *blob,
                 size_t blob_len)
{
    hook_seen *w = ctx;
    w->calls++;
    free(w->bytes);
    w->bytes = srv_pcache_entry_bytes(HOOKED, ids, n, blob, blob_len, &w->len);
    w->n = n;
    w->h = h;
}

Test(prefix_cache, adopt_bytes_of_another_nodes_entry)
{
    srv_pcache *a = cache(1 << 20, 0, 0), *b = cache(1 << 20, 0, 0);
    hook_seen w = {0};
    HOOKED = a;
    srv_pcache_set_store_hook(a, hook, &w);
    srv_pcache_set_store_hook(b, hook, &w);
    int32_t t[40];
    seq(t, 40, 5);
    srv_session *src = sess(t, 30);
    srv_pcache_store(a, t, 30, src);
    cr_assert_eq(w.calls, 1);
    cr_assert_eq(w.n, 30);
    cr_assert_eq(w.h, srv_pcache_hash(RECUR_FNV_OFFSET, t, 30));
    cr_assert_leq(w.len, srv_pcache_entry_max_bytes(a, 30));
    uint8_t *bytes = w.bytes;
    size_t len = w.len;
    w.bytes = NULL;
    const char *why;
    /* the same hash, other ids (the 4th differs): sound bytes, not a hit; s untouched */
    int32_t other[40];
    memcpy(other, t, sizeof t);
    other[3] = (other[3] + 1) % 16;
    srv_session *s = sess(NULL, 0);
    cr_assert_eq(srv_pcache_adopt(b, other, 30, w.h, bytes, len, s, &why), 1);
    cr_assert_str_eq(why, "prefix_ids");
    cr_assert_eq(s->tokens_seen, 0);
    /* a damaged byte of the state: refused by the checksum, s untouched */
    bytes[len / 2] ^= 0x40;
    cr_assert_eq(srv_pcache_adopt(b, t, 30, w.h, bytes, len, s, &why), -1);
    cr_assert_str_eq(why, "prefix_checksum");
    cr_assert_eq(s->tokens_seen, 0);
    bytes[len / 2] ^= 0x40;
    /* a key that claims another length: refused */
    cr_assert_eq(srv_pcache_adopt(b, t, 29, w.h, bytes, len, s, &why), -1);
    /* the right prompt: the exact state, its history, kept in b's memory, no hook call */
    cr_assert_eq(srv_pcache_adopt(b, t, 30, w.h, bytes, len, s, &why), 0);
    assert_same_state(s, src);
    cr_assert_eq(s->pc_hist_n, 30);
    cr_assert_eq(s->pc_hist_h, w.h);
    cr_assert_eq(w.calls, 1);
    cr_assert_eq(srv_pcache_get_stats(b).entries, 1);
    srv_session *again = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(b, t, 40, again), 30);
    assert_same_state(again, src);
    free(bytes);
    sess_free(src);
    sess_free(s);
    sess_free(again);
    srv_pcache_free(a);
    srv_pcache_free(b);
}

/* blob (a state blob, core and logits trailer) as format version 2 wrote it: version 2, FNV-1a
 * 64 as the core's checksum, the trailer's over everything before it (proto/state_blob.h) */
static void as_version2(uint8_t *blob, size_t len)
{
    size_t core;
    cr_assert_eq(recur_snapshot_length(blob, len, &core), 0);
    recur_put_le32(blob + 8, 2);
    recur_put_le64(blob + core - 8, recur_fnv1a64(RECUR_FNV_OFFSET, blob, core - 8));
    if (len > core)
        recur_put_le64(blob + len - 8, recur_fnv1a64(RECUR_FNV_OFFSET, blob, len - 8));
}

/* An entry of an older format version (a spill file written before the lane checksum, or
 * another node's during an upgrade) is restored with every check, and what stays in memory is
 * this process's own bytes: the next hit, from memory (srv_state_restore_own, which takes only
 * the versions this build writes), is a hit too. */
Test(prefix_cache, an_old_format_entry_is_kept_as_own_bytes)
{
    srv_pcache *a = cache(1 << 20, 0, 0), *b = cache(1 << 20, 0, 0);
    hook_seen w = {0};
    HOOKED = a;
    int32_t t[40];
    seq(t, 40, 7);
    srv_session *src = sess(t, 30);
    size_t blen;
    uint8_t *blob = blob_of(src, &blen);
    as_version2(blob, blen);
    size_t len;
    uint8_t *bytes = srv_pcache_entry_bytes(a, t, 30, blob, blen, &len);
    uint64_t h = srv_pcache_hash(RECUR_FNV_OFFSET, t, 30);
    srv_session *s = sess(NULL, 0);
    const char *why;
    cr_assert_eq(srv_pcache_adopt(b, t, 30, h, bytes, len, s, &why), 0);
    assert_same_state(s, src);
    cr_assert_eq(recur_get_le32(b->mem.head->blob + 8), 4u, "kept as written by this build");
    srv_session *again = sess(NULL, 0);
    cr_assert_eq(srv_pcache_restore(b, t, 40, again), 30);
    assert_same_state(again, src);
    cr_assert_eq(w.calls, 0);
    free(bytes);
    free(blob);
    free(w.bytes);
    sess_free(src);
    sess_free(s);
    sess_free(again);
    srv_pcache_free(a);
    srv_pcache_free(b);
}
