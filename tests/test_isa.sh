#!/bin/sh
# test_isa.sh — every kernel path this CPU has, forced one at a time by RECUR_ISA, in each build
# given (directories holding librecur.so and tests-core/): the packed GEMM, quantized GEMM, bf16 GEMM, chunk_mm
# and batch bit-identity unit suites, and the C model against its PyTorch twin (test_model_parity.py).
# `make test-isa` runs it on the portable build (-march=x86-64) and the native one.
set -u
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has() { for x in "$@"; do case " $flags " in *" $x "*) ;; *) return 1 ;; esac; done; }
paths=portable
has avx2 fma f16c && paths="$paths avx2"
has avx512f avx512bw avx512vl avx512dq fma f16c && paths="$paths avx512"
# the AVX-512 path without vpdpbusd (the quantized GEMM's widening kernel, core/quant_gemm.c)
has avx512f avx512bw avx512vl avx512dq fma f16c avx512_vnni && paths="$paths avx512-novnni"
# the AVX-512 path as on a CPU without avx512_bf16 (the bf16 prefill refused, core/bf16_gemm.c's
# scalar formula in its unit suite)
has avx512f avx512bw avx512vl avx512dq fma f16c avx512_bf16 && paths="$paths avx512-nobf16"
PY=${PY:-/usr/bin/python3}
fail=0 pass=0
for b in "$@"; do
  for isa in $paths; do
    for t in "$b"/tests-core/*; do
      echo "== $b RECUR_ISA=$isa $(basename "$t")"
      if RECUR_ISA=$isa OPENBLAS_NUM_THREADS=1 "$t" --jobs 2 >"$b/isa_$isa.log" 2>&1; then pass=$((pass+1));
      else fail=$((fail+1)); tail -20 "$b/isa_$isa.log"; echo "FAILED: RECUR_ISA=$isa $t"; fi
    done
    echo "== $b RECUR_ISA=$isa test_model_parity.py"
    if RECUR_ISA=$isa RECUR_BUILD=$(cd "$b" && pwd) OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1 \
       $PY -m pytest -q -p no:cacheprovider tests/python/test_model_parity.py >"$b/isa_$isa.log" 2>&1; then
      pass=$((pass+1)); tail -1 "$b/isa_$isa.log"
    else fail=$((fail+1)); tail -30 "$b/isa_$isa.log"; echo "FAILED: RECUR_ISA=$isa parity in $b"; fi
  done
done
echo "isa suites ($paths): $pass passed, $fail failed"
[ $fail = 0 ]
