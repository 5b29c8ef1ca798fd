/* model_prefill.c — the prefill dtype (recur.h recur_model_set_prefill_dtype, docs/MODEL.md
 * "Prefill dtype"): the bf16 panels of a model's GEMM matrices, and the one GEMM call of the
 * forward pass that picks them for prefill rows (recur__model_gemm).
 *
 * Which GEMMs: every GEMM the prefill entry points run inside the layers (projections, MLP,
 * low-rank gates, every family's block matrices), whatever the piece's row count, so a prefill's
 * result does not depend on how its tokens were split (each row's GEMM result is independent of
 * the other rows, bf16_gemm.h). The LM head keeps the model's path: a prefill needs logits of a
 * few rows (a request's last token), where the bf16 kernel gains nothing, and the vocabulary's
 * matrix is often the largest one to duplicate. Decode (step, step_batch) never reads the panels,
 * so its results do not change. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "bf16_gemm.h"
#include "hf_config.h"
#include "isa.h"
#include "model_internal.h"
#include "quant.h"

struct recur_prefill_panels {
    const void *w;      /* the model's packed matrix */
    const uint32_t *wb; /* its bf16 panels */
};

/* recur__quant_each_matrix's step: collect the model's matrices (dst == src: the same model) */
typedef struct {
    recur_matrix *list;
    int n;
} matrix_list;

static void collect(void *ctx, void *dst, const void *src, int N, int K)
{
    matrix_list *ml = ctx;
    (void)src;
    ml->list[ml->n++] = (recur_matrix){dst, N, K};
}

void recur__prefill_panels_free(recur_model *m)
{
    recur__big_free(m->pf_block, m->pf_bytes);
    free(m->pf);
    m->pf = NULL;
    m->pf_block = NULL;
    m->pf_n = 0;
    m->pf_bytes = 0;
}

static int by_address(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t)((const struct recur_prefill_panels *)a)->w,
                    y = (uintptr_t)((const struct recur_prefill_panels *)b)->w;
    return x < y ? -1 : x > y;
}

/* one matrix's bf16 panels in the shared block, rounded up to a cache line */
static size_t panel_span(const recur_matrix *mt)
{
    return (recur__bf16_packed_bytes(mt->N, mt->K) + 63) / 64 * 64;
}

/* the bf16 panels of every matrix but the LM head (the last one listed) */
static int build_panels(recur_model *m)
{
    recur_matrix *mt = malloc(sizeof *mt * RECUR_MAX_MATRICES);
    if (!mt) return RECUR_ENOMEM;
    matrix_list ml = {mt, 0};
    recur__quant_each_matrix(m, m, collect, &ml); /* every packed matrix, the LM head last */
    const int n = ml.n - 1;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += panel_span(&mt[i]);
    struct recur_prefill_panels *pf = malloc(sizeof *pf * (size_t)(n > 0 ? n : 1));
    unsigned char *block = bytes ? recur__big_alloc(bytes) : NULL;
    if (!pf || (bytes && !block)) {
        free(mt), free(pf), recur__big_free(block, bytes);
        return RECUR_ENOMEM;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        uint32_t *wb = (uint32_t *)(block + off);
        recur__pack_bf16(wb, mt[i].w, m->wtype, mt[i].N, mt[i].K);
        pf[i].w = mt[i].w;
        pf[i].wb = wb;
        off += panel_span(&mt[i]);
    }
    free(mt);
    qsort(pf, (size_t)n, sizeof *pf, by_address);
    m->pf = pf;
    m->pf_n = n;
    m->pf_block = block;
    m->pf_bytes = bytes;
    return RECUR_OK;
}

int recur_model_set_prefill_dtype(recur_model *m, const char *prefill_dtype, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!m || !prefill_dtype) return RECUR_EINVAL;
    const int bf16 = !strcasecmp(prefill_dtype, "bf16");
    if (!bf16 && strcasecmp(prefill_dtype, "f32"))
        return recur__errf(err, errlen, "prefill_dtype \"%.16s\": not a prefill dtype recurd implements (f32, bf16)",
                           prefill_dtype), RECUR_EINVAL;
    if (bf16 && !recur__isa_bf16())
        return recur__errf(err, errlen,
                           "prefill_dtype bf16 needs the AVX-512 BF16 instructions (vdpbf16ps, CPUID avx512_bf16), "
                           "which this kernel path lacks (path %s%s); use prefill_dtype f32",
                           recur_isa_name(), getenv("RECUR_ISA") && getenv("RECUR_ISA")[0] ? ", forced by RECUR_ISA" : ""),
               RECUR_EINVAL;
    if (bf16 && recur__wtype_quant(m->wtype))
        return recur__errf(err, errlen, "prefill_dtype bf16 with %s weights: not implemented (quantized matrices "
                                        "prefill through their own integer GEMM); use prefill_dtype f32",
                           m->info.weights_dtype), RECUR_EINVAL;
    recur__prefill_panels_free(m);
    if (bf16) {
        int rc = build_panels(m);
        if (rc) {
            snprintf(m->info.prefill_dtype, sizeof m->info.prefill_dtype, "F32");
            m->info.prefill_bytes = 0;
            return recur__errf(err, errlen, "prefill_dtype bf16: %s", recur_strerror(rc)), rc;
        }
    }
    snprintf(m->info.prefill_dtype, sizeof m->info.prefill_dtype, "%s", bf16 ? "BF16" : "F32");
    m->info.prefill_bytes = m->pf_bytes;
    return RECUR_OK;
}

void recur__model_gemm(const recur_model *m, int prefill, int R, int N, int K, const float *x, int ldx,
                       const void *W, float beta, float *y, int ldy)
{
    if (prefill && m->pf) {
        int lo = 0, hi = m->pf_n - 1;
        while (lo <= hi) { /* binary search by address */
            const int mid = (lo + hi) / 2;
            const uintptr_t a = (uintptr_t)m->pf[mid].w;
            if (a == (uintptr_t)W) {
                recur__bf16_gemm(R, N, K, x, ldx, m->pf[mid].wb, beta, y, ldy);
                return;
            }
            if (a < (uintptr_t)W) lo = mid + 1;
            else hi = mid - 1;
        }
    }
    recur__packed_gemm_t(R, N, K, x, ldx, W, m->wtype, beta, y, ldy);
}
