/* test_session_table.c — server/session_table.c (included): the recency list stays sorted by
 * last use through touches, drops and removals; the changed list holds every session a request
 * may have changed until its owner unlinks it; and states larger than glibc's default mmap
 * threshold come from the heap (one mapping each fragments into one mapping per freed state
 * under churn, up to vm.max_map_count); the open-addressed table finds exactly the sessions an
 * array model holds through random churn with colliding and wrapping ids, and a miss reads no
 * session struct; freed states keep their values until a new session takes one (then zeroed),
 * and srv_table_drop_keep hands a state over untouched. Reference: an independent array model
 * of the same operations. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session_table.c"

/* 4 layers x 4 heads x 64 x 64 floats: 256 KiB of state, above the 128 KiB threshold */
static const char *CFG = "{\"name\":\"st\",\"vocab_size\":16,\"d_model\":32,\"n_layers\":4,\"n_heads\":4,"
                         "\"head_k\":64,\"head_v\":64,\"d_ff\":8,\"mixers\":[\"linear\",\"linear\","
                         "\"linear\",\"linear\"],\"tied_embeddings\":true}";

static recur_model *M;

static void setup(void)
{
    cr_assert_eq(recur_model_init_seed(CFG, 3, &M), 0);
    cr_assert_gt(recur_model_get_info(M)->state_bytes, (size_t)(128u << 10));
}

static void teardown(void)
{
    recur_model_free(M);
}

/* Walk the recency list: it must hold exactly want[0..n), in order, each linked both ways. */
static void check_lru(srv_table *t, srv_session **want, size_t n)
{
    size_t i = 0;
    srv_session *prev = NULL;
    for (srv_session *s = srv_table_lru_first(t); s; prev = s, s = s->lru_next, i++) {
        cr_assert_lt(i, n, "recency list longer than %zu", n);
        cr_assert_eq(s, want[i], "position %zu", i);
        cr_assert_eq(s->lru_prev, prev);
        if (prev)
            cr_assert_leq(prev->last_used_ms, s->last_used_ms);
    }
    cr_assert_eq(i, n);
    cr_assert_eq(srv_table_count(t), n);
}

static size_t changed_count(srv_table *t)
{
    size_t n = 0;
    for (srv_session *s = srv_table_changed_first(t); s; s = s->chg_next) {
        cr_assert(s->chg_linked);
        n++;
    }
    return n;
}

Test(session_table, recency_list_follows_touches_and_drops, .init = setup, .fini = teardown)
{
    srv_table *t = srv_table_create(M, 100);
    enum { N = 6 };
    srv_session *s[N], *want[N];
    for (int i = 0; i < N; i++) {
        cr_assert_eq(srv_table_new(t, 10 + (uint64_t)i, &s[i]), 0);
        want[i] = s[i];
    }
    check_lru(t, want, N);
    /* touch 1 then 3: they move to the end, in that order */
    srv_table_touch(t, s[1], 100);
    srv_table_touch(t, s[3], 101);
    srv_session *w1[N] = {s[0], s[2], s[4], s[5], s[1], s[3]};
    check_lru(t, w1, N);
    /* touching the last one keeps the order and updates the time */
    srv_table_touch(t, s[3], 102);
    check_lru(t, w1, N);
    cr_assert_eq(s[3]->last_used_ms, 102);
    /* drop the head, one in the middle and the tail */
    srv_table_drop(t, s[0]);
    srv_table_remove(t, s[4]);
    srv_table_drop(t, s[3]);
    srv_session *w2[] = {s[2], s[5], s[1]};
    check_lru(t, w2, 3);
    /* a session found by id is the same one, and lookups do not reorder */
    char id[33];
    memcpy(id, s[5]->id, 33);
    cr_assert_eq(srv_table_find(t, id), s[5]);
    check_lru(t, w2, 3);
    /* a new session (from the pool of freed states) goes to the end */
    srv_session *n;
    cr_assert_eq(srv_table_new(t, 200, &n), 0);
    srv_session *w3[] = {s[2], s[5], s[1], n};
    check_lru(t, w3, 4);
    srv_table_destroy(t);
}

Test(session_table, changed_list_holds_every_changed_session, .init = setup, .fini = teardown)
{
    srv_table *t = srv_table_create(M, 100);
    srv_session *a, *b, *c;
    cr_assert_eq(srv_table_new(t, 1, &a), 0);
    cr_assert_eq(srv_table_new(t, 2, &b), 0);
    cr_assert_eq(srv_table_new(t, 3, &c), 0);
    cr_assert_eq(changed_count(t), 3); /* new sessions are not on disk */
    srv_table_changed_unlink(t, a);
    srv_table_changed_unlink(t, b);
    srv_table_changed_unlink(t, b); /* twice: a no-op */
    cr_assert_eq(changed_count(t), 1);
    uint64_t g = b->mut_gen;
    srv_table_changed(t, b);
    srv_table_changed(t, b); /* linked once, counted twice */
    cr_assert_eq(b->mut_gen, g + 2);
    cr_assert_eq(changed_count(t), 2);
    srv_table_drop(t, c); /* dropping unlinks */
    cr_assert_eq(changed_count(t), 1);
    cr_assert_eq(srv_table_changed_first(t), b);
    cr_assert_not(a->chg_linked);
    srv_table_destroy(t);
}

/* Lines of /proc/self/maps: one per mapping. */
static int mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert_not_null(f);
    int n = 0, ch;
    while ((ch = fgetc(f)) != EOF)
        n += ch == '\n';
    fclose(f);
    return n;
}

Test(session_table, states_do_not_take_a_mapping_each, .init = setup, .fini = teardown)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("ASan's allocator maps large blocks itself: glibc's thresholds do not apply");
#endif
    srv_table *t = srv_table_create(M, 10000);
    enum { N = 1000 };
    static srv_session *s[N];
    int before = mappings();
    for (int i = 0; i < N; i++)
        cr_assert_eq(srv_table_new(t, (uint64_t)i, &s[i]), 0);
    /* churn: every third session goes (past the pool of 64 freed states, they are freed). With
     * one mapping per state each free punches a hole: one more mapping per hole, and a daemon
     * with churn reaches vm.max_map_count */
    for (int i = 0; i < N; i += 3)
        srv_table_drop(t, s[i]);
    int after = mappings();
    cr_assert_lt(after - before, N / 20, "%d more mappings after %d sessions and %d drops",
                 after - before, N, (N + 2) / 3);
    srv_table_destroy(t);
}

/* An id whose hash (its first 16 hex digits) is hi:lo, the rest from tail. */
static void make_id(char *id, uint32_t hi, uint32_t lo, uint32_t tail)
{
    snprintf(id, 33, "%08x%08x%08x%08x", hi, lo, tail, tail ^ 0x5a5a5a5au);
}

/* The table against an array model through random adopts, drops, removes, detached sessions
 * linked or discarded, with ids that collide on the slot index (same low hash bits, and homes at
 * the last slot, so runs wrap around) until the slots double several times: every id is found
 * exactly while in the model, count and foreach agree, and no run holds an entry out of place. */
static void check_against(srv_table *t, srv_session **model, size_t n, char (*gone)[33], size_t n_gone)
{
    cr_assert_eq(srv_table_count(t), n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(srv_table_peek(t, model[i]->id), model[i], "id %s", model[i]->id);
    for (size_t i = 0; i < n_gone; i++)
        cr_assert_null(srv_table_peek(t, gone[i]), "gone id %s still found", gone[i]);
    /* every entry is reachable from its home: no empty slot between home and it */
    size_t mask = t->n_slots - 1, full = 0;
    for (size_t i = 0; i < t->n_slots; i++) {
        if (!t->slots[i].s)
            continue;
        full++;
        cr_assert_eq(t->slots[i].h, id_hash(t->slots[i].s->id));
        for (size_t j = t->slots[i].h & mask; j != i; j = (j + 1) & mask)
            cr_assert_not_null(t->slots[j].s, "hole at %zu before the entry at %zu", j, i);
    }
    cr_assert_eq(full, n);
    cr_assert_leq(2 * t->n_live, t->n_slots);
}

static void count_one(srv_session *s, void *arg)
{
    cr_assert(s->in_table);
    (*(size_t *)arg)++;
}

Test(session_table, open_addressing_matches_a_model, .init = setup, .fini = teardown)
{
    srv_table *t = srv_table_create(M, 100000);
    enum { N = 3000, G = 4000 };
    static srv_session *model[N];
    static char gone[G][33];
    size_t n = 0, n_gone = 0;
    srand(7);
    uint32_t serial = 1;
    for (int step = 0; step < 12000; step++) {
        int op = rand() % 10;
        if (op < 6 && n < N) {
            char id[33];
            uint32_t k = serial++;
            switch (rand() % 3) {
            case 0: make_id(id, k, 0, k); break;                  /* home slot 0 at any size */
            case 1: make_id(id, k, 0xffffffffu, k); break;        /* home: the last slot */
            default: make_id(id, (uint32_t)rand(), (uint32_t)rand(), k); break;
            }
            srv_session *s;
            if (rand() % 4 == 0) { /* a resume: built detached, then linked or discarded */
                cr_assert_eq(srv_table_detached(t, id, &s), 0);
                cr_assert_null(srv_table_peek(t, id));
                if (rand() % 3 == 0) {
                    srv_table_discard(t, s);
                    if (n_gone < G)
                        memcpy(gone[n_gone++], id, 33);
                    continue;
                }
                srv_table_link(t, s, (uint64_t)step);
            } else {
                cr_assert_eq(srv_table_adopt(t, id, (uint64_t)step, &s), 0);
            }
            model[n++] = s;
        } else if (n > 0) {
            size_t i = (size_t)rand() % n;
            if (n_gone < G)
                memcpy(gone[n_gone++], model[i]->id, 33);
            if (op % 2)
                srv_table_drop(t, model[i]);
            else
                srv_table_remove(t, model[i]);
            model[i] = model[--n];
        }
        if (step % 500 == 0)
            check_against(t, model, n, gone, n_gone);
    }
    check_against(t, model, n, gone, n_gone);
    cr_assert_geq(t->n_slots, (size_t)4096, "the slots never grew: %zu", t->n_slots);
    size_t seen = 0;
    srv_table_foreach(t, count_one, &seen);
    cr_assert_eq(seen, n);
    /* the slab: freed structs are reused before a new block is taken */
    size_t blocks = t->n_blocks;
    for (size_t i = 0; i < 100 && n > 0; i++)
        srv_table_drop(t, model[--n]);
    for (int i = 0; i < 100; i++) {
        srv_session *s;
        cr_assert_eq(srv_table_new(t, 1, &s), 0);
    }
    cr_assert_eq(t->n_blocks, blocks);
    srv_table_destroy(t);
}

static void drop_one(srv_session *s, void *arg)
{
    srv_table_drop(arg, s);
}

Test(session_table, foreach_may_remove_the_session_it_is_given, .init = setup, .fini = teardown)
{
    srv_table *t = srv_table_create(M, 10000);
    for (int i = 0; i < 700; i++) { /* past one slab block and a growth of the slots */
        srv_session *s;
        cr_assert_eq(srv_table_new(t, 1, &s), 0);
    }
    srv_table_foreach(t, drop_one, t);
    cr_assert_eq(srv_table_count(t), 0);
    cr_assert_null(srv_table_lru_first(t));
    cr_assert_null(srv_table_changed_first(t));
    srv_table_destroy(t);
}

/* A miss reads slots only: slots whose pointers lead nowhere (any read of a struct would fault)
 * answer a lookup of an id with another hash; a hit compares the hash before the id. */
Test(session_table, a_miss_reads_no_session)
{
    enum { NS = 16 };
    slot slots[NS] = {{0}};
    srv_table t = {.n_slots = NS, .slots = slots};
    char id[33];
    make_id(id, 1, 3, 9); /* home slot 3 */
    for (size_t i = 3; i < 8; i++) /* a run 3..7 of other hashes, same home or later */
        slots[i] = (slot){((uint64_t)(i + 100) << 32) | i, (srv_session *)(uintptr_t)(0x10 + i * 8)};
    slots[3].h = ((uint64_t)7 << 32) | 3; /* same slot index as id, another hash */
    cr_assert_eq(probe_id(&t, id_hash(id), id), &slots[8]);
    srv_session real = {0};
    memcpy(real.id, id, 33);
    slots[8] = (slot){id_hash(id), &real};
    cr_assert_eq(probe_id(&t, id_hash(id), id), &slots[8]);
}

/* s's state as recur_state_checkpoint gives it (tokens_seen, then the recurrent block): malloc'd */
static uint8_t *state_bytes_of(const srv_session *s, size_t *n)
{
    *n = recur_state_checkpoint_bytes(s->state);
    uint8_t *b = malloc(*n);
    cr_assert_not_null(b);
    recur_state_checkpoint(s->state, b);
    return b;
}

static int all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

/* Freed states are kept with their values: a new session's state is zeroed when it is given out
 * (srv_table_new), a state about to be overwritten (srv_table_detached, srv_table_adopt) is not
 * touched; srv_table_drop_keep hands the state over instead of keeping it. */
Test(session_table, freed_states_are_zeroed_only_for_new_sessions, .init = setup, .fini = teardown)
{
    srv_table *t = srv_table_create(M, 100);
    srv_session *a;
    cr_assert_eq(srv_table_new(t, 1, &a), 0);
    size_t n;
    uint8_t *fill = state_bytes_of(a, &n);
    cr_assert(all_zero(fill, n));
    uint64_t seen = 7;
    memcpy(fill, &seen, sizeof seen);
    for (size_t i = sizeof seen; i < n; i += sizeof(float)) {
        float v = 0.25f * (float)(i % 97);
        memcpy(fill + i, &v, sizeof v);
    }
    recur_state_rollback(a->state, fill);
    char id[33];
    memcpy(id, a->id, 33);
    int spares = srv_table_spare_count(t);
    srv_table_drop(t, a); /* kept, not zeroed */
    cr_assert_eq(srv_table_spare_count(t), spares + 1);
    srv_session *d;
    cr_assert_eq(srv_table_detached(t, id, &d), 0);
    size_t dn;
    uint8_t *got = state_bytes_of(d, &dn);
    cr_assert_eq(dn, n);
    cr_assert_eq(memcmp(got, fill, n), 0, "a detached session's state was touched");
    free(got);
    srv_table_discard(t, d);
    srv_session *b;
    cr_assert_eq(srv_table_new(t, 2, &b), 0);
    got = state_bytes_of(b, &dn);
    cr_assert(all_zero(got, dn), "a new session's state is not zero");
    free(got);
    /* drop_keep: the state goes to the caller, untouched; given back, a new session zeroes it */
    recur_state_rollback(b->state, fill);
    recur_state *st = b->state;
    float *lg = b->logits;
    recur_state *kst;
    float *klg;
    spares = srv_table_spare_count(t);
    srv_table_drop_keep(t, b, &kst, &klg);
    cr_assert_eq(kst, st);
    cr_assert_eq(klg, lg);
    cr_assert_eq(srv_table_spare_count(t), spares);
    cr_assert_eq(srv_table_count(t), 0);
    srv_table_spare_return(t, kst, klg);
    cr_assert_eq(srv_table_spare_count(t), spares + 1);
    srv_session *c;
    cr_assert_eq(srv_table_new(t, 3, &c), 0);
    cr_assert_eq(c->state, st);
    got = state_bytes_of(c, &dn);
    cr_assert(all_zero(got, dn), "a given-back state was not zeroed for a new session");
    free(got);
    free(fill);
    srv_table_destroy(t);
}
