/* model_forward.c — the forward pass of docs/MODEL.md over a block of rows, and the workspace.
 *
 * One code path serves both callers:
 *   - batched decode: row r is session states[r] folding tokens[r] (one token each);
 *   - prefill: rows are consecutive tokens of one session (a piece of at most ws->rows tokens).
 * Projections, MLP and LM head go through the packed GEMM over the rows (packed_gemm.h). The mixer
 * core is a fused loop per session for decode (AVX-512 with the head's vectors in registers when
 * head_v % 16 == 0), and the kernels' chunkwise form (chunk 64) for prefill. Decode computes every per-row step (norms, activations, gates, the state update) with
 * the same code on each row whatever the batch, so a session's logits and state after a batched
 * step are bit-identical to recur_model_step's (tests/unit/test_batch_identity.c).
 * Nothing here allocates: every buffer is in the workspace. */
#include <cblas.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "exp_nonpos.h"
#include "model_internal.h"
#include "packed_gemm.h"

#define PREFILL_PIECE 256 /* tokens per prefill piece (a multiple of the chunk) */
#define PREFILL_CHUNK 64

struct recur_workspace {
    const recur_model *m;
    int max_batch;
    int rows;       /* R = max(max_batch, PREFILL_PIECE) */
    float *x;       /* [R][d]      residual stream */
    float *h;       /* [R][d]      normed input of a sub-block */
    float *proj;    /* [R][max_in] mixer input projections: q | k | v | g | gk | b | a */
    float *q, *k;   /* [R][H][K] */
    float *v;       /* [R][H][V] */
    float *gk;      /* [R][H][K]   gla gates (log space) */
    float *gs;      /* [R][H]      gated DeltaNet gates (log space) */
    float *beta;    /* [R][H] */
    float *o;       /* [R][H][V]   mixer core output */
    float *ff;      /* [R][2*d_ff] gate | up, then silu(gate)*up in the first half */
    float *tmp;     /* [max(K,V) * 2] */
    float *scores;  /* [PREFILL_PIECE][max_context] softmax layers only */
    float *backup;  /* [rec_floats] a session's recurrent state before a prefill (rollback) */
    void *block;    /* every buffer above (recur__big_alloc) */
    size_t block_bytes;
};

/* ---------------------------------------------------------------- workspace */

int recur_workspace_create(const recur_model *m, int max_batch, recur_workspace **out)
{
    if (!m || !out) return RECUR_EINVAL;
    if (max_batch < 1 || max_batch > 4096) return RECUR_ESHAPE;
    const recur_config *c = &m->cfg;
    size_t R = (size_t)(max_batch > PREFILL_PIECE ? max_batch : PREFILL_PIECE);
    size_t d = (size_t)c->d_model, H = (size_t)c->n_heads, K = (size_t)c->head_k, V = (size_t)c->head_v;
    size_t sizes[] = {
        R * d, R * d, R * (size_t)m->max_in, R * H * K, R * H * K, R * H * V, R * H * K, R * H, R * H,
        R * H * V, R * 2 * (size_t)c->d_ff, 2 * (K > V ? K : V),
        m->n_softmax ? (size_t)PREFILL_PIECE * (size_t)c->max_context : 0,
        m->rec_floats,
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += (sizes[i] + 15) / 16 * 16;
    recur_workspace *ws = calloc(1, sizeof *ws);
    float *b = recur__big_alloc(total * sizeof(float));
    if (!ws || !b) { free(ws); recur__big_free(b, total * sizeof(float)); return RECUR_ENOMEM; }
    memset(b, 0, total * sizeof(float)); /* touch once, here, never on the hot path */
    float **slots[] = {&ws->x, &ws->h, &ws->proj, &ws->q, &ws->k, &ws->v, &ws->gk, &ws->gs,
                       &ws->beta, &ws->o, &ws->ff, &ws->tmp, &ws->scores, &ws->backup};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *slots[i] = b + off;
        off += (sizes[i] + 15) / 16 * 16;
    }
    ws->block = b;
    ws->block_bytes = total * sizeof(float);
    ws->m = m;
    ws->max_batch = max_batch;
    ws->rows = (int)R;
    *out = ws;
    return RECUR_OK;
}

void recur_workspace_free(recur_workspace *ws)
{
    if (!ws) return;
    recur__big_free(ws->block, ws->block_bytes);
    free(ws);
}

/* ---------------------------------------------------------------- small math */

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* softplus(x) = log(1 + e^x), without overflow */
static inline float softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

/* silu(x) = x sigma(x) with sigma(x) = (x >= 0 ? 1 : e) / (1 + e), e = exp(-|x|) <= 1: only a
 * non-positive argument is exponentiated (recur__exp_nonpos, rel. error < 1e-7) and the select is
 * arithmetic, so loops over it vectorise (libm's expf does not). */
static inline float silu_v(float x)
{
    uint32_t xi;
    memcpy(&xi, &x, sizeof xi);
    float neg = (float)(xi >> 31); /* 1 for x < 0 */
    uint32_t ai = xi & 0x7fffffffu;
    float ax;
    memcpy(&ax, &ai, sizeof ax);
    float e = recur__exp_nonpos(-ax);
    return x * (1.0f + neg * (e - 1.0f)) / (1.0f + e);
}

/* sum(x^2): 16 independent float lanes (vectorisable without reassociation), added in double */
static double sumsq(const float *x, int n)
{
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += x[i + j] * x[i + j];
    double ss = 0.0;
    for (int j = 0; j < 16; j++) ss += acc[j];
    for (; i < n; i++) ss += (double)x[i] * x[i];
    return ss;
}

/* y = x / sqrt(mean(x^2) + eps) * w */
static void rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
    float r = (float)(1.0 / sqrt(sumsq(x, n) / n + eps));
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* L2norm(x) = x / sqrt(sum(x^2) + 1e-6) */
static void l2norm(float *x, int n)
{
    float r = (float)(1.0 / sqrt(sumsq(x, n) + 1e-6));
    for (int i = 0; i < n; i++) x[i] *= r;
}

/* C[R][N] = beta * C + A[R][Kd] W[N][Kd]^T   (nn.Linear on R rows), W packed at load, elements
 * of the model's wtype (fp32, or the weights file's F16 / BF16 widened in the kernel). One kernel
 * for every row count: a row's result is the same bits whether it is stepped alone, in a batch
 * at any position, or in a prefill piece (packed_gemm.h); and with W pre-packed it is faster than
 * sgemv at one row and than sgemm (which repacks W per call) at 8 to 256 rows. */
static void linear_rows(const recur_model *m, int R, int N, int Kd, const float *A, int lda, const void *Wp,
                        float beta, float *C, int ldc)
{
    recur__packed_gemm_t(R, N, Kd, A, lda, Wp, m->wtype, beta, C, ldc);
}

/* ---------------------------------------------------------------- mixer: decode (one token) */

#ifdef __AVX512F__
/* Decode step of one head on a block of NZ x 16 value columns (NZ <= 4), the block's vectors
 * (v or u, and o) held in zmm registers across the K rows of S instead of being reloaded and
 * stored per row (the loops below in plain C keep them in memory: ~2x slower per step). Columns
 * are independent in every rule, so blocking them changes nothing but speed. Needs V % 16 == 0;
 * S, v, o point at the block's first column, S rows V apart. */
#define ZB 4 /* zmm per block: 64 columns */
#define INLINE static inline __attribute__((always_inline))

/* GLA / retention:  S_i = dec_i S_i + k_i v^T  (row i) ;  o = s S^T q */
INLINE void gla_block(const int NZ, float *S, int K, int V, const float *dec, const float *kh,
                      const float *qh, float scale, const float *vh, float *oh)
{
    __m512 vv[ZB], acc[ZB];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) { vv[z] = _mm512_loadu_ps(vh + 16 * z); acc[z] = _mm512_setzero_ps(); }
    for (int i = 0; i < K; i++) {
        float *row = S + (size_t)i * V;
        __m512 d = _mm512_set1_ps(dec[i]), ki = _mm512_set1_ps(kh[i]), qi = _mm512_set1_ps(scale * qh[i]);
#pragma GCC unroll 4
        for (int z = 0; z < NZ; z++) {
            __m512 r = _mm512_fmadd_ps(d, _mm512_loadu_ps(row + 16 * z), _mm512_mul_ps(ki, vv[z]));
            _mm512_storeu_ps(row + 16 * z, r);
            acc[z] = _mm512_fmadd_ps(qi, r, acc[z]);
        }
    }
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) _mm512_storeu_ps(oh + 16 * z, acc[z]);
}

/* (gated) delta rule:  u = b (v - dec S^T k) ;  S = dec S + k u^T ;  o = s S^T q  (two passes) */
INLINE void delta_block(const int NZ, float *S, int K, int V, float dec, float b, const float *kh,
                        const float *qh, float scale, const float *vh, float *oh)
{
    __m512 u[ZB], acc[ZB];
    const __m512 vd = _mm512_set1_ps(dec), vb = _mm512_set1_ps(b);
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) { u[z] = _mm512_setzero_ps(); acc[z] = _mm512_setzero_ps(); }
    for (int i = 0; i < K; i++) {
        const float *row = S + (size_t)i * V;
        __m512 ki = _mm512_set1_ps(kh[i]);
#pragma GCC unroll 4
        for (int z = 0; z < NZ; z++) u[z] = _mm512_fmadd_ps(ki, _mm512_loadu_ps(row + 16 * z), u[z]);
    }
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) u[z] = _mm512_mul_ps(vb, _mm512_fnmadd_ps(vd, u[z], _mm512_loadu_ps(vh + 16 * z)));
    for (int i = 0; i < K; i++) {
        float *row = S + (size_t)i * V;
        __m512 ki = _mm512_set1_ps(kh[i]), qi = _mm512_set1_ps(scale * qh[i]);
#pragma GCC unroll 4
        for (int z = 0; z < NZ; z++) {
            __m512 r = _mm512_fmadd_ps(ki, u[z], _mm512_mul_ps(vd, _mm512_loadu_ps(row + 16 * z)));
            _mm512_storeu_ps(row + 16 * z, r);
            acc[z] = _mm512_fmadd_ps(qi, r, acc[z]);
        }
    }
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) _mm512_storeu_ps(oh + 16 * z, acc[z]);
}

/* One head, column block by column block: delta == 0 is GLA / retention (dec [K]: the decay of
 * each key row, all equal for retention), delta != 0 the delta rule (decay ddec, beta b).
 * Returns 0 (nothing done) when V is not a multiple of 16. */
static int head_step_blocked(int delta, float *Sh, int K, int V, const float *dec, float ddec, float b,
                             const float *kh, const float *qh, float scale, const float *vh, float *oh)
{
    if (V % 16) return 0;
    for (int j0 = 0; j0 < V; j0 += 16 * ZB) {
        int nz = (V - j0) / 16 < ZB ? (V - j0) / 16 : ZB;
#define BLK(N) do { if (delta) delta_block(N, Sh + j0, K, V, ddec, b, kh, qh, scale, vh + j0, oh + j0); \
                    else gla_block(N, Sh + j0, K, V, dec, kh, qh, scale, vh + j0, oh + j0); } while (0)
        switch (nz) {
        case 4: BLK(4); break;
        case 3: BLK(3); break;
        case 2: BLK(2); break;
        default: BLK(1); break;
        }
#undef BLK
    }
    return 1;
}
#endif

/* One token of one session through a recurrent core, per head, fused loops (DESIGN.md §3).
 * q, k [H][K], v [H][V], o [H][V]; S [H][K][V] (and z [H][K] for linear). */
static void core_step(const recur_model *m, const recur_layer *L, float *S, const float *q,
                      const float *k, const float *v, const float *gk, const float *gs,
                      const float *beta, float *o, float *tmp)
{
    const int H = m->cfg.n_heads, K = m->cfg.head_k, V = m->cfg.head_v;
    const float scale = 1.0f / sqrtf((float)K);
    for (int hd = 0; hd < H; hd++) {
        float *Sh = S + (size_t)hd * K * V;
        const float *qh = q + (size_t)hd * K, *kh = k + (size_t)hd * K, *vh = v + (size_t)hd * V;
        float *oh = o + (size_t)hd * V;
        for (int j = 0; j < V; j++) oh[j] = 0.0f;
        switch (L->kind) {
        case RECUR_MIXER_LINEAR: {
            /* S += phi(k) v^T ; z += phi(k) ; o = (s phi(q))^T S / ((s phi(q))^T z + eps), phi = elu+1 */
            float *z = S + (size_t)H * K * V + (size_t)hd * K;
            float den = 0.0f;
            for (int i = 0; i < K; i++) {
                float pk = kh[i] > 0 ? kh[i] + 1.0f : expf(kh[i]);
                float pq = scale * (qh[i] > 0 ? qh[i] + 1.0f : expf(qh[i]));
                float *row = Sh + (size_t)i * V;
                for (int j = 0; j < V; j++) {
                    row[j] += pk * vh[j];
                    oh[j] += pq * row[j];
                }
                z[i] += pk;
                den += pq * z[i];
            }
            float inv = 1.0f / (den + RECUR_LINEAR_EPS);
            for (int j = 0; j < V; j++) oh[j] *= inv;
            break;
        }
        case RECUR_MIXER_RETENTION:
        case RECUR_MIXER_GLA: {
            /* S = Diag(decay) S + k v^T ; o = s S^T q   (retention: decay = gamma_h) */
            float gamma = 1.0f - exp2f(-5.0f - (float)hd);
#ifdef __AVX512F__
            for (int i = 0; i < K; i++) tmp[i] = L->kind == RECUR_MIXER_GLA ? expf(gk[(size_t)hd * K + i]) : gamma;
            if (head_step_blocked(0, Sh, K, V, tmp, 0.0f, 0.0f, kh, qh, scale, vh, oh)) break;
#endif
            for (int i = 0; i < K; i++) {
                float dec = L->kind == RECUR_MIXER_GLA ? expf(gk[(size_t)hd * K + i]) : gamma;
                float ki = kh[i], qi = scale * qh[i];
                float *row = Sh + (size_t)i * V;
                for (int j = 0; j < V; j++) {
                    row[j] = dec * row[j] + ki * vh[j];
                    oh[j] += qi * row[j];
                }
            }
            break;
        }
        case RECUR_MIXER_DELTANET:
        case RECUR_MIXER_GATED_DELTANET: {
            /* S' = e^g S ; u = S'^T k ; S = S' + beta k (v - u)^T ; o = s S^T q
             * (two passes over S: the first only reads it, u = e^g (S^T k)) */
            float dec = L->kind == RECUR_MIXER_GATED_DELTANET ? expf(gs[hd]) : 1.0f;
            float b = beta[hd];
#ifdef __AVX512F__
            if (head_step_blocked(1, Sh, K, V, NULL, dec, b, kh, qh, scale, vh, oh)) break;
#endif
            float *u = tmp;
            for (int j = 0; j < V; j++) u[j] = 0.0f;
            for (int i = 0; i < K; i++) {
                const float *row = Sh + (size_t)i * V;
                float ki = kh[i];
                for (int j = 0; j < V; j++) u[j] += ki * row[j];
            }
            for (int j = 0; j < V; j++) u[j] = b * (vh[j] - dec * u[j]);
            for (int i = 0; i < K; i++) {
                float *row = Sh + (size_t)i * V;
                float ki = kh[i], qi = scale * qh[i];
                for (int j = 0; j < V; j++) {
                    row[j] = dec * row[j] + ki * u[j];
                    oh[j] += qi * row[j];
                }
            }
            break;
        }
        default:
            break;
        }
    }
}

/* One token of causal softmax attention against a session's KV cache; position pos is written. */
static void softmax_step(const recur_model *m, float *kc, float *vc, int64_t pos, const float *q,
                         const float *k, const float *v, float *o, float *scores)
{
    const int H = m->cfg.n_heads, K = m->cfg.head_k, V = m->cfg.head_v;
    const size_t HK = (size_t)H * K, HV = (size_t)H * V;
    const float scale = 1.0f / sqrtf((float)K);
    memcpy(kc + (size_t)pos * HK, k, HK * sizeof(float));
    memcpy(vc + (size_t)pos * HV, v, HV * sizeof(float));
    for (int hd = 0; hd < H; hd++) {
        const float *qh = q + (size_t)hd * K;
        float mx = -INFINITY;
        for (int64_t j = 0; j <= pos; j++) {
            const float *kj = kc + (size_t)j * HK + (size_t)hd * K;
            float sdot = 0.0f;
            for (int i = 0; i < K; i++) sdot += qh[i] * kj[i];
            scores[j] = sdot * scale;
            if (scores[j] > mx) mx = scores[j];
        }
        float *oh = o + (size_t)hd * V;
        for (int c = 0; c < V; c++) oh[c] = 0.0f;
        double sum = 0.0;
        for (int64_t j = 0; j <= pos; j++) {
            float p = expf(scores[j] - mx);
            sum += p;
            const float *vj = vc + (size_t)j * HV + (size_t)hd * V;
            for (int c = 0; c < V; c++) oh[c] += p * vj[c];
        }
        float inv = (float)(1.0 / sum);
        for (int c = 0; c < V; c++) oh[c] *= inv;
    }
}

/* ---------------------------------------------------------------- mixer: prefill (T tokens) */

/* Causal softmax over T new rows appended at pos0 to the cache: sgemm per head. */
static void softmax_prefill(const recur_model *m, float *kc, float *vc, int64_t pos0, int T,
                            const float *q, const float *k, const float *v, float *o, float *scores)
{
    const int H = m->cfg.n_heads, K = m->cfg.head_k, V = m->cfg.head_v;
    const int HK = H * K, HV = H * V;
    const float scale = 1.0f / sqrtf((float)K);
    memcpy(kc + (size_t)pos0 * HK, k, (size_t)T * HK * sizeof(float));
    memcpy(vc + (size_t)pos0 * HV, v, (size_t)T * HV * sizeof(float));
    const int n = (int)pos0 + T;
    for (int hd = 0; hd < H; hd++) {
        /* scores[T][n] = scale Q_h K_h^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, n, K, scale, q + (size_t)hd * K, HK,
                    kc + (size_t)hd * K, HK, 0.0f, scores, n);
        for (int t = 0; t < T; t++) {
            float *row = scores + (size_t)t * n;
            int last = (int)pos0 + t; /* keys 0..last are visible */
            float mx = -INFINITY;
            for (int j = 0; j <= last; j++) if (row[j] > mx) mx = row[j];
            double sum = 0.0;
            for (int j = 0; j <= last; j++) { row[j] = expf(row[j] - mx); sum += row[j]; }
            float inv = (float)(1.0 / sum);
            for (int j = 0; j <= last; j++) row[j] *= inv;
            for (int j = last + 1; j < n; j++) row[j] = 0.0f;
        }
        /* O_h[T][V] = P V_h */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, V, n, 1.0f, scores, n,
                    vc + (size_t)hd * V, HV, 0.0f, o + (size_t)hd * V, HV);
    }
}

static int core_prefill(const recur_model *m, const recur_layer *L, recur_workspace *ws,
                        recur_state *s, int T)
{
    const recur_config *c = &m->cfg;
    recur_dims dims = {.T = T, .H = c->n_heads, .K = c->head_k, .V = c->head_v};
    float *S = s->rec + L->state_off;
    size_t HKV = (size_t)c->n_heads * c->head_k * c->head_v;
    switch (L->kind) {
    case RECUR_MIXER_LINEAR:
        return recur_linear_attention(&dims, ws->q, ws->k, ws->v, 1, RECUR_FMAP_ELU1, 0.0f,
                                      RECUR_FORM_CHUNKWISE, PREFILL_CHUNK, S, S + HKV, ws->o);
    case RECUR_MIXER_RETENTION:
        return recur_retention(&dims, ws->q, ws->k, ws->v, NULL, 0.0f, RECUR_FORM_CHUNKWISE,
                               PREFILL_CHUNK, S, ws->o);
    case RECUR_MIXER_GLA:
        return recur_gla(&dims, ws->q, ws->k, ws->v, ws->gk, 1, 0.0f, RECUR_FORM_CHUNKWISE,
                         PREFILL_CHUNK, S, ws->o);
    case RECUR_MIXER_DELTANET:
        return recur_delta_rule(&dims, ws->q, ws->k, ws->v, ws->beta, NULL, 0.0f,
                                RECUR_FORM_CHUNKWISE, PREFILL_CHUNK, S, ws->o);
    case RECUR_MIXER_GATED_DELTANET:
        return recur_delta_rule(&dims, ws->q, ws->k, ws->v, ws->beta, ws->gs, 0.0f,
                                RECUR_FORM_CHUNKWISE, PREFILL_CHUNK, S, ws->o);
    case RECUR_MIXER_SOFTMAX: {
        int l = (int)(L - m->layers);
        softmax_prefill(m, s->kcache[l], s->vcache[l], (int64_t)s->tokens_seen, T, ws->q, ws->k,
                        ws->v, ws->o, ws->scores);
        return RECUR_OK;
    }
    }
    return RECUR_EINVAL;
}

/* ---------------------------------------------------------------- the block stack */

/* Split the projected row into the core's inputs (docs/MODEL.md, Mixer table). */
static void preprocess_rows(const recur_model *m, const recur_layer *L, recur_workspace *ws, int R)
{
    const int H = m->cfg.n_heads, K = m->cfg.head_k, V = m->cfg.head_v;
    const size_t HK = (size_t)H * K, HV = (size_t)H * V;
    for (int r = 0; r < R; r++) {
        const float *p = ws->proj + (size_t)r * L->n_in;
        float *q = ws->q + r * HK, *k = ws->k + r * HK, *v = ws->v + r * HV;
        memcpy(q, p, HK * sizeof(float));
        memcpy(k, p + HK, HK * sizeof(float));
        memcpy(v, p + 2 * HK, HV * sizeof(float));
        switch (L->kind) {
        case RECUR_MIXER_GLA:
            /* g = logsigmoid(gk_proj h) / 16 = -softplus(-x) / 16; kept finite like the gated
             * DeltaNet gate below (fmaxf also maps NaN to the bound) */
            for (size_t i = 0; i < HK; i++)
                ws->gk[r * HK + i] = fmaxf(-softplus(-p[L->off_gk + i]) / 16.0f, -1e30f);
            break;
        case RECUR_MIXER_GATED_DELTANET:
            /* g = -exp(A_log) * softplus(a_proj h + dt_bias); an overflow to -inf (or NaN from
             * overflowing activations) is kept finite, exp(g) is 0 either way: the chunkwise kernel
             * never sees a non-finite gate, so prefill fails on numerics no more than a step does */
            for (int hd = 0; hd < H; hd++)
                ws->gs[(size_t)r * H + hd] =
                    fmaxf(-expf(L->A_log[hd]) * softplus(p[L->off_a + hd] + L->dt_bias[hd]), -1e30f);
            /* fall through */
        case RECUR_MIXER_DELTANET:
            /* q, k = L2norm(silu(.)) per head ; beta = sigmoid(b_proj h), kept inside (0, 1] */
            for (size_t i = 0; i < HK; i++) { q[i] = silu_v(q[i]); k[i] = silu_v(k[i]); }
            for (int hd = 0; hd < H; hd++) { l2norm(q + (size_t)hd * K, K); l2norm(k + (size_t)hd * K, K); }
            for (int hd = 0; hd < H; hd++)
                ws->beta[(size_t)r * H + hd] = fmaxf(sigmoid(p[L->off_b + hd]), FLT_MIN);
            break;
        default:
            break;
        }
    }
}

/*
 * Run R rows through the model. mode_prefill == 0: row r belongs to states[r] (decode);
 * otherwise every row belongs to states[0], at positions tokens_seen + r. Everything has been
 * validated by the caller. logits [R][vocab] or NULL.
 */
static int forward_rows(const recur_model *m, recur_workspace *ws, recur_state *const *states,
                        const int32_t *tokens, int R, int prefill, float *logits)
{
    const recur_config *c = &m->cfg;
    const int d = c->d_model, H = c->n_heads, K = c->head_k, V = c->head_v, ff = c->d_ff;
    const size_t HK = (size_t)H * K, HV = (size_t)H * V;
    const float eps = (float)c->norm_eps;

    // x = embed[token]
    for (int r = 0; r < R; r++)
        memcpy(ws->x + (size_t)r * d, m->embed + (size_t)tokens[r] * d, (size_t)d * sizeof(float));

    for (int l = 0; l < c->n_layers; l++) {
        const recur_layer *L = &m->layers[l];
        // h = RMSNorm_attn(x) ; proj = [q|k|v|g|gk|b|a] = W_in h
        for (int r = 0; r < R; r++)
            rmsnorm(ws->h + (size_t)r * d, ws->x + (size_t)r * d, L->attn_norm, d, eps);
        linear_rows(m, R, L->n_in, d, ws->h, d, L->w_in, 0.0f, ws->proj, L->n_in);
        preprocess_rows(m, L, ws, R);

        // o = core(q, k, v, gates; state)
        if (prefill) {
            int rc = core_prefill(m, L, ws, states[0], R);
            if (rc) return rc;
        } else {
            for (int r = 0; r < R; r++) {
                recur_state *s = states[r];
                if (L->kind == RECUR_MIXER_SOFTMAX)
                    softmax_step(m, s->kcache[l], s->vcache[l], (int64_t)s->tokens_seen, ws->q + r * HK,
                                 ws->k + r * HK, ws->v + r * HV, ws->o + r * HV, ws->scores);
                else
                    core_step(m, L, s->rec + L->state_off, ws->q + r * HK, ws->k + r * HK,
                              ws->v + r * HV, ws->gk + r * HK, ws->gs + (size_t)r * H,
                              ws->beta + (size_t)r * H, ws->o + r * HV, ws->tmp);
            }
        }

        // o_i = RMSNorm_o(o_i) per head ; o = o * silu(g_proj h) ; x += o_proj o
        for (int r = 0; r < R; r++) {
            float *o = ws->o + r * HV;
            const float *g = ws->proj + (size_t)r * L->n_in + L->off_g;
            for (int hd = 0; hd < H; hd++) rmsnorm(o + (size_t)hd * V, o + (size_t)hd * V, L->o_norm, V, eps);
            for (size_t i = 0; i < HV; i++) o[i] *= silu_v(g[i]);
        }
        linear_rows(m, R, d, (int)HV, ws->o, (int)HV, L->wo, 1.0f, ws->x, d);

        // h = RMSNorm_mlp(x) ; x += down( silu(gate h) * (up h) )
        for (int r = 0; r < R; r++)
            rmsnorm(ws->h + (size_t)r * d, ws->x + (size_t)r * d, L->mlp_norm, d, eps);
        linear_rows(m, R, 2 * ff, d, ws->h, d, L->w_gate_up, 0.0f, ws->ff, 2 * ff);
        for (int r = 0; r < R; r++) {
            float *f = ws->ff + (size_t)r * 2 * ff;
            for (int j = 0; j < ff; j++) f[j] = silu_v(f[j]) * f[ff + j];
        }
        linear_rows(m, R, d, ff, ws->ff, 2 * ff, L->w_down, 1.0f, ws->x, d);
    }

    if (logits) {
        // logits = lm_head RMSNorm_f(x)
        for (int r = 0; r < R; r++)
            rmsnorm(ws->h + (size_t)r * d, ws->x + (size_t)r * d, m->norm_f, d, eps);
        linear_rows(m, R, c->vocab_size, d, ws->h, d, m->lm_head, 0.0f, logits, c->vocab_size);
    }
    return RECUR_OK;
}

/* ---------------------------------------------------------------- public entry points */

static int check_common(const recur_model *m, const recur_workspace *ws, const recur_state *s)
{
    if (!m || !ws || !s) return RECUR_EINVAL;
    if (ws->m != m || s->m != m) return RECUR_EMISMATCH;
    return RECUR_OK;
}

int recur_model_step_batch(const recur_model *m, recur_workspace *ws, recur_state *const *states,
                           const int32_t *tokens, int B, float *logits)
{
    if (!m || !ws || !states || !tokens || !logits) return RECUR_EINVAL;
    if (B < 1 || B > ws->max_batch) return RECUR_ESHAPE;
    /* validate everything before any state moves */
    for (int b = 0; b < B; b++) {
        int rc = check_common(m, ws, states[b]);
        if (rc) return rc;
        if (tokens[b] < 0 || tokens[b] >= m->cfg.vocab_size) return RECUR_ETOKEN;
        if (m->n_softmax && states[b]->tokens_seen >= (uint64_t)m->cfg.max_context) return RECUR_ECONTEXT;
        for (int a = 0; a < b; a++)
            if (states[a] == states[b]) return RECUR_EINVAL;
    }
    int rc = forward_rows(m, ws, states, tokens, B, 0, logits);
    if (rc) return rc;
    for (int b = 0; b < B; b++) states[b]->tokens_seen++;
    return RECUR_OK;
}

int recur_model_step(const recur_model *m, recur_workspace *ws, recur_state *s, int32_t token,
                     float *logits)
{
    return recur_model_step_batch(m, ws, &s, &token, 1, logits);
}

int recur_model_prefill(const recur_model *m, recur_workspace *ws, recur_state *s,
                        const int32_t *tokens, int64_t n, float *logits)
{
    int rc = check_common(m, ws, s);
    if (rc) return rc;
    if (n < 0 || (n > 0 && !tokens)) return RECUR_EINVAL;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size) return RECUR_ETOKEN;
    if (m->n_softmax && s->tokens_seen + (uint64_t)n > (uint64_t)m->cfg.max_context) return RECUR_ECONTEXT;
    /* a kernel can still fail (out of memory): then the state is rolled back to where it was
     * (KV rows past the old tokens_seen are dead by definition) */
    uint64_t seen0 = s->tokens_seen;
    if (n > 0) memcpy(ws->backup, s->rec, m->rec_floats * sizeof(float));
    int piece_max = PREFILL_PIECE;
    for (int64_t off = 0; off < n; off += piece_max) {
        int T = (int)(n - off < piece_max ? n - off : piece_max);
        rc = forward_rows(m, ws, &s, tokens + off, T, 1,
                          logits ? logits + (size_t)off * m->cfg.vocab_size : NULL);
        if (rc) {
            memcpy(s->rec, ws->backup, m->rec_floats * sizeof(float));
            s->tokens_seen = seen0;
            return rc;
        }
        s->tokens_seen += (uint64_t)T;
    }
    return RECUR_OK;
}
