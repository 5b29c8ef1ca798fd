/*
 * isa.h — which kernel path this process runs (private to core/; public name: recur_isa_name).
 *
 * One binary carries every path: the AVX-512 and AVX2+FMA+F16C kernels are compiled with GCC
 * target pragmas whatever the build's -march, the portable one is plain C. The path is chosen
 * once, at the first call, from what the CPU reports (__builtin_cpu_supports, which also checks
 * that the OS saves the registers), and the environment variable RECUR_ISA may force one:
 *   RECUR_ISA=avx512    avx512f+bw+vl+dq, fma, f16c (and avx512_vnni when the CPU has it: the
 *                       quantized GEMM's vpdpbusd, quant.h)
 *   RECUR_ISA=avx512-novnni  the AVX-512 path without vpdpbusd (tests of the widening kernel)
 *   RECUR_ISA=avx512-nobf16  the AVX-512 path as on a CPU without avx512_bf16: the bf16 prefill
 *                       (bf16_gemm.h) is refused (tests of the refusal)
 *   RECUR_ISA=avx2      avx2, fma, f16c
 *   RECUR_ISA=portable  plain C (SSE2 at -march=x86-64), never a fused multiply-add
 * A forced path the CPU lacks, or an unknown name, is refused: recur__isa_check returns
 * RECUR_EISA and every model load fails with it (the kernels, if called anyway, run the best
 * path the CPU has).
 *
 * Results: each path is deterministic and bit-identical across batch sizes; paths differ from
 * each other in the last bits (the AVX paths fuse each multiply-add, the portable one rounds the
 * product and the sum separately; chunk_mm uses OpenBLAS sgemm off AVX-512).
 */
#ifndef RECUR_ISA_H
#define RECUR_ISA_H

#include <stddef.h>

typedef enum { RECUR_ISA_PORTABLE = 0, RECUR_ISA_AVX2 = 1, RECUR_ISA_AVX512 = 2 } recur_isa;

/* The path in use (resolved once; a refused RECUR_ISA falls back to the best supported). */
recur_isa recur__isa(void);

/* Whether the AVX-512 path may use avx512_vnni (the CPU has it, RECUR_ISA is not avx512-novnni). */
int recur__isa_vnni(void);

/* Whether the AVX-512 path may use avx512_bf16 (vdpbf16ps: CPUID leaf 7 subleaf 1 EAX bit 5;
 * RECUR_ISA is not avx512-nobf16). The bf16 prefill runs only where this holds. */
int recur__isa_bf16(void);

/* 0, or RECUR_EISA with err (may be NULL) naming RECUR_ISA's value and what the CPU lacks. */
int recur__isa_check(char *err, size_t errlen);

/* Per-ISA objects. The GEMMs above carry their vector kernels as target functions; the rest of
 * the hot path (Makefile ISA_FILES: forward pass, mixers, chunkwise products, blocks) is plain C
 * the compiler vectorises, so a -march=x86-64 build would run it as SSE2 on every path. The
 * Makefile compiles each of those files once per path instead — the same source, its global
 * names suffixed by isa_rename.h: _base with the build's flags, _avx2 with -mavx2 -mfma -mf16c,
 * _avx512 with -mavx512f/bw/vl/dq too — and isa.c defines the unsuffixed entry points
 * (isa_entry.def) as one jump through the table of the path recur__isa() chose (portable runs
 * _base). A path's objects call only each other, so each path is deterministic and bit-identical
 * across batch sizes. A -march=native build compiles them once (RECUR_ISA_MULTI=0: _base runs on
 * every path, only the GEMMs follow RECUR_ISA there).
 * "avx512", "avx2" or "base": whose objects the entry points run. */
const char *recur__isa_objects(void);

/* "avx512", "avx2" or "portable". */
const char *recur__isa_str(recur_isa isa);

/* GCC target strings of the two vector paths (the functions compiled for them). */
#define RECUR_TARGET_AVX512 "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"
#define RECUR_TARGET_AVX2 "avx2,fma,f16c"

#endif /* RECUR_ISA_H */
