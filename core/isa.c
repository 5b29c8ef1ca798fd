/* isa.c — the kernel path of this process: detected once, RECUR_ISA may force one (isa.h). */
#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "isa.h"
#include "recur.h"

/* F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c" */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

/* AVX512_VNNI from CPUID leaf 7 (ECX bit 11), for the same reason */
static int has_vnni(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 11));
}

/* AVX512_BF16 from CPUID leaf 7 subleaf 1 (EAX bit 5): vdpbf16ps, the bf16 prefill (bf16_gemm.h) */
static int has_bf16(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
}

static int has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma") && has_f16c();
}

static int has_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
}

const char *recur__isa_str(recur_isa isa)
{
    return isa == RECUR_ISA_AVX512 ? "avx512" : isa == RECUR_ISA_AVX2 ? "avx2" : "portable";
}

/* resolved once; -1 before. A race resolves twice to the same value (env and CPU are fixed). */
static int isa_cached = -1, isa_refused, isa_vnni, isa_bf16;

static void resolve(void)
{
    __builtin_cpu_init();
    recur_isa best = has_avx512() ? RECUR_ISA_AVX512 : has_avx2() ? RECUR_ISA_AVX2 : RECUR_ISA_PORTABLE;
    recur_isa isa = best;
    int refused = 0, vnni = best == RECUR_ISA_AVX512 && has_vnni(), bf16 = best == RECUR_ISA_AVX512 && has_bf16();
    const char *want = getenv("RECUR_ISA");
    if (want && want[0]) {
        if (!strcmp(want, "avx512")) isa = RECUR_ISA_AVX512;
        else if (!strcmp(want, "avx512-novnni")) isa = RECUR_ISA_AVX512, vnni = 0;
        else if (!strcmp(want, "avx512-nobf16")) isa = RECUR_ISA_AVX512, bf16 = 0;
        else if (!strcmp(want, "avx2")) isa = RECUR_ISA_AVX2;
        else if (!strcmp(want, "portable")) isa = RECUR_ISA_PORTABLE;
        else refused = 1;
        if (!refused && isa > best) refused = 1;
        if (refused) isa = best;
    }
    __atomic_store_n(&isa_refused, refused, __ATOMIC_RELAXED);
    __atomic_store_n(&isa_vnni, vnni && isa == RECUR_ISA_AVX512, __ATOMIC_RELAXED);
    __atomic_store_n(&isa_bf16, bf16 && isa == RECUR_ISA_AVX512, __ATOMIC_RELAXED);
    __atomic_store_n(&isa_cached, (int)isa, __ATOMIC_RELEASE);
}

recur_isa recur__isa(void)
{
    int v = __atomic_load_n(&isa_cached, __ATOMIC_ACQUIRE);
    if (v < 0) {
        resolve();
        v = __atomic_load_n(&isa_cached, __ATOMIC_ACQUIRE);
    }
    return (recur_isa)v;
}

int recur__isa_vnni(void)
{
    recur__isa();
    return __atomic_load_n(&isa_vnni, __ATOMIC_RELAXED);
}

int recur__isa_bf16(void)
{
    recur__isa();
    return __atomic_load_n(&isa_bf16, __ATOMIC_RELAXED);
}

int recur__isa_check(char *err, size_t errlen)
{
    recur__isa();
    if (!__atomic_load_n(&isa_refused, __ATOMIC_RELAXED)) return 0;
    if (err && errlen) {
        const char *want = getenv("RECUR_ISA");
        snprintf(err, errlen,
                 "RECUR_ISA=%s: not a kernel path this CPU supports (avx512 needs avx512f/bw/vl/dq+fma+f16c, "
                 "avx2 needs avx2+fma+f16c; known: avx512, avx512-novnni, avx512-nobf16, avx2, portable; this CPU's best: %s)",
                 want ? want : "", recur__isa_str(has_avx512() ? RECUR_ISA_AVX512 : has_avx2() ? RECUR_ISA_AVX2 : RECUR_ISA_PORTABLE));
    }
    return RECUR_EISA;
}

const char *recur_isa_name(void)
{
    return recur__isa_str(recur__isa());
}

/* ---------------------------------------------------------------- per-ISA objects (isa.h) */

#include "block_rwkv7.h"
#include "chunk_decay.h"
#include "chunk_mm.h"
#include "generalized_delta.h"
#include "mixer.h"
#include "short_conv.h"

#define RECUR_ISA_VOID(name, params, args) RECUR_ISA_ENTRY(void, name, params, args)

/* the suffixed definitions of each compiled path */
#define RECUR_ISA_ENTRY(ret, name, params, args) ret name##_base params;
#include "isa_entry.def"
#undef RECUR_ISA_ENTRY
#if RECUR_ISA_MULTI
#define RECUR_ISA_ENTRY(ret, name, params, args) ret name##_avx2 params; ret name##_avx512 params;
#include "isa_entry.def"
#undef RECUR_ISA_ENTRY
#endif

struct isa_entries {
#define RECUR_ISA_ENTRY(ret, name, params, args) ret(*name) params;
#include "isa_entry.def"
#undef RECUR_ISA_ENTRY
};

#define RECUR_ISA_ENTRY(ret, name, params, args) .name = name##_base,
static const struct isa_entries entries_base = {
#include "isa_entry.def"
};
#undef RECUR_ISA_ENTRY
#if RECUR_ISA_MULTI
#define RECUR_ISA_ENTRY(ret, name, params, args) .name = name##_avx2,
static const struct isa_entries entries_avx2 = {
#include "isa_entry.def"
};
#undef RECUR_ISA_ENTRY
#define RECUR_ISA_ENTRY(ret, name, params, args) .name = name##_avx512,
static const struct isa_entries entries_avx512 = {
#include "isa_entry.def"
};
#undef RECUR_ISA_ENTRY
#endif

/* The one dispatch point: the table of the path recur__isa() chose (the base objects when the
 * build compiled ISA_FILES once, RECUR_ISA_MULTI=0: they then run for every path). */
static const struct isa_entries *entries(void)
{
    static const struct isa_entries *cached;
    const struct isa_entries *e = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (!e) {
        e = &entries_base;
#if RECUR_ISA_MULTI
        switch (recur__isa()) {
        case RECUR_ISA_AVX512: e = &entries_avx512; break;
        case RECUR_ISA_AVX2: e = &entries_avx2; break;
        case RECUR_ISA_PORTABLE: break;
        }
#endif
        __atomic_store_n(&cached, e, __ATOMIC_RELEASE);
    }
    return e;
}

const char *recur__isa_objects(void)
{
    const struct isa_entries *e = entries();
#if RECUR_ISA_MULTI
    if (e == &entries_avx512) return "avx512";
    if (e == &entries_avx2) return "avx2";
#endif
    return e == &entries_base ? "base" : "?";
}

/* the unsuffixed entry points: one jump through the table */
#define RECUR_ISA_ENTRY(ret, name, params, args) ret name params { return entries()->name args; }
#undef RECUR_ISA_VOID
#define RECUR_ISA_VOID(name, params, args) void name params { entries()->name args; }
#include "isa_entry.def"
#undef RECUR_ISA_ENTRY
#undef RECUR_ISA_VOID
