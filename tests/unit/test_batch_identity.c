/* test_batch_identity.c — batched decode gives exactly the per-session results of unbatched
 * decode (issue 5): for every mixer kind alone and for hybrids with softmax, a session stepped
 * inside a batch of any size (1..256), at any position, next to any other sessions, ends with
 * logits memcmp-equal to recur_model_step's on a twin of its state, and with a state whose
 * snapshot (recurrent state and live KV rows) is byte-equal to the twin's. Sessions start at
 * different positions (prefills of different lengths), and the compositions change every step.
 * The same holds for a model whose matrices are held as F16 / BF16 halves (a half weights file,
 * here seeded values rounded to half: recur__model_init_seed_wtype; Q8_0 / Q4_0: quantized). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h" /* recur__model_init_seed_wtype */
#include "recur.h"

#define CFG(name, vocab, d, H, K, V, ff, nl, mixers)                                              \
    "{\"name\":\"" name "\",\"vocab_size\":" #vocab ",\"d_model\":" #d ",\"n_layers\":" #nl        \
    ",\"n_heads\":" #H ",\"head_k\":" #K ",\"head_v\":" #V ",\"d_ff\":" #ff ",\"mixers\":[" mixers \
    "],\"tied_embeddings\":false,\"max_context\":96,\"norm_eps\":1e-5}"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)((rng >> 16) % n);
}

enum { NS = 256 };

static void snap(const recur_state *s, uint8_t **buf, size_t *len)
{
    *len = recur_snapshot_size(s);
    *buf = malloc(*len);
    size_t w = 0;
    cr_assert_eq(recur_snapshot_write(s, *buf, *len, &w), 0);
    cr_assert_eq(w, *len);
}

static void check_identity_wt(const char *cfg, int steps, recur_wtype wt)
{
    recur_model *m;
    recur_workspace *ws;
    cr_assert_eq(recur__model_init_seed_wtype(cfg, 3, wt, &m), 0);
    cr_assert_eq(m->wtype, wt);
    cr_assert_eq(recur_workspace_create(m, NS, &ws), 0);
    const int vocab = recur_model_get_info(m)->vocab_size;
    recur_state **a = calloc(NS, sizeof *a), **b = calloc(NS, sizeof *b), **batch = calloc(NS, sizeof *batch);
    int32_t *tok = calloc(NS, sizeof *tok);
    int *perm = calloc(NS, sizeof *perm);
    float *lb = malloc(sizeof(float) * NS * vocab), *ls = malloc(sizeof(float) * vocab);
    /* session i starts after i % 23 prefilled tokens; b[i] is its twin, stepped alone */
    for (int i = 0; i < NS; i++) {
        cr_assert_eq(recur_state_create(m, &a[i]), 0);
        cr_assert_eq(recur_state_create(m, &b[i]), 0);
        int32_t pre[23];
        for (int j = 0; j < i % 23; j++) pre[j] = (int32_t)((7 * i + 3 * j) % vocab);
        cr_assert_eq(recur_model_prefill(m, ws, a[i], pre, i % 23, NULL), 0);
        cr_assert_eq(recur_state_copy(b[i], a[i]), 0);
    }
    static const int sizes[] = {1, 2, 3, 7, 8, 9, 16, 17, 63, 64, 65, 67, 128, 255, 256};
    for (int t = 0; t < steps; t++) {
        int B = sizes[(size_t)t % (sizeof sizes / sizeof *sizes)];
        for (int i = 0; i < NS; i++) perm[i] = i; /* B distinct sessions in a random order */
        for (int i = 0; i < B; i++) {
            int j = i + (int)rnd((uint32_t)(NS - i)), x = perm[i];
            perm[i] = perm[j];
            perm[j] = x;
            batch[i] = a[perm[i]];
            tok[i] = (int32_t)rnd((uint32_t)vocab);
        }
        cr_assert_eq(recur_model_step_batch(m, ws, batch, tok, B, lb), 0);
        for (int i = 0; i < B; i++) {
            int s = perm[i];
            cr_assert_eq(recur_model_step(m, ws, b[s], tok[i], ls), 0);
            cr_assert_eq(memcmp(lb + (size_t)i * vocab, ls, sizeof(float) * vocab), 0,
                         "step %d: session %d at position %d of B = %d: logits differ from recur_model_step",
                         t, s, i, B);
            uint8_t *sa, *sb;
            size_t na, nb;
            snap(a[s], &sa, &na);
            snap(b[s], &sb, &nb);
            cr_assert(na == nb && memcmp(sa, sb, na) == 0, "step %d: session %d at position %d of B = %d: state differs",
                      t, s, i, B);
            free(sa);
            free(sb);
        }
    }
    for (int i = 0; i < NS; i++) {
        recur_state_destroy(a[i]);
        recur_state_destroy(b[i]);
    }
    free(a); free(b); free(batch); free(tok); free(perm); free(lb); free(ls);
    recur_workspace_free(ws);
    recur_model_free(m);
}

static void check_identity(const char *cfg, int steps) { check_identity_wt(cfg, steps, RECUR_WT_F32); }

/* small odd shapes (N and K off the panel width) */
#define SMALL(mixers, nl) CFG("small", 40, 24, 2, 8, 6, 20, nl, mixers)
/* panel-sized and larger shapes: d 64, H*K = 96, vocab 300 (a partial last panel) */
#define WIDE(mixers, nl) CFG("wide", 300, 64, 3, 32, 32, 96, nl, mixers)

Test(batch_identity, linear) { check_identity(SMALL("\"linear\"", 1), 15); }
Test(batch_identity, retention) { check_identity(SMALL("\"retention\"", 1), 15); }
Test(batch_identity, gla) { check_identity(SMALL("\"gla\"", 1), 15); }
Test(batch_identity, deltanet) { check_identity(SMALL("\"deltanet\"", 1), 15); }
Test(batch_identity, gated_deltanet) { check_identity(SMALL("\"gated_deltanet\"", 1), 15); }
Test(batch_identity, softmax) { check_identity(SMALL("\"softmax\"", 1), 15); }
Test(batch_identity, hybrid_every_kind)
{
    check_identity(SMALL("\"linear\",\"retention\",\"gla\",\"deltanet\",\"gated_deltanet\",\"softmax\"", 6), 15);
}
Test(batch_identity, hybrid_wide, .timeout = 120)
{
    check_identity(WIDE("\"gated_deltanet\",\"softmax\",\"gla\",\"linear\",\"deltanet\",\"retention\"", 6), 15);
}
Test(batch_identity, f16_hybrid_every_kind)
{
    check_identity_wt(SMALL("\"linear\",\"retention\",\"gla\",\"deltanet\",\"gated_deltanet\",\"softmax\"", 6), 15,
                      RECUR_WT_F16);
}
Test(batch_identity, f16_hybrid_wide, .timeout = 120)
{
    check_identity_wt(WIDE("\"gated_deltanet\",\"softmax\",\"gla\",\"linear\",\"deltanet\",\"retention\"", 6), 15,
                      RECUR_WT_F16);
}
Test(batch_identity, bf16_gated_deltanet_wide, .timeout = 120)
{
    check_identity_wt(WIDE("\"gated_deltanet\",\"gated_deltanet\"", 2), 15, RECUR_WT_BF16);
}
/* quantized matrices (Q8_0, Q4_0): the rows' activations are quantized per row, so still exact */
Test(batch_identity, quantized_hybrids, .timeout = 240)
{
    static const recur_wtype q[] = {RECUR_WT_Q8_0, RECUR_WT_Q4_0};
    check_identity_wt(SMALL("\"linear\",\"retention\",\"gla\",\"deltanet\",\"gated_deltanet\",\"softmax\"", 6), 15,
                      RECUR_WT_Q8_0);
    for (int i = 0; i < 2; i++)
        check_identity_wt(WIDE("\"gated_deltanet\",\"softmax\",\"gla\",\"linear\",\"deltanet\",\"retention\"", 6), 15,
                          q[i]);
}
