#!/usr/bin/env bash
# Cross-compiles Kiln for aarch64 without the CUDA backend (qemu runs no GPU code) and runs, under
# qemu-aarch64, what proves the Arm build: every op's CPU kernel against its reference, the integer
# and quantized kernels, engine files, ONNX import, INT8 quantization; the command line's errors
# through the same Python test as on x86-64 (build-aarch64/kiln-emulated runs kiln under qemu); then
# optimize, run (against onnxruntime's outputs) and bench of two models by hand.
#
#   scripts/test_jetson.sh        (scripts/test.sh, and so CI, runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${KILN_AARCH64_BUILD:-build-aarch64}
export KILN_AARCH64_BUILD=$B
# Under qemu a test runs about 9 times slower than natively (op_cases_cpu_test: 208 s against 24 s),
# so CI runs these, not every CPU test: every op's kernel, the integer and quantized kernels (Arm has
# no AVX2 path), engine files, ONNX import, INT8 quantization.
gtests=(op_cases_cpu_test ops_gemm_test ops_quant_test ops_qfused_test igemm_test engine_file_test import_test
        quantize_int8_test)
ctests="cli_errors"
bash scripts/build_jetson.sh --cpu-only kiln "${gtests[@]}"
start=$(date +%s)
rc=0
# qemu's CPU has Arm's dot products: the int8 kernels must take them (tests/cpu/igemm_test.cpp).
export KILN_EXPECT_DOTPROD=1
# Each test binary in two shards at once (its cases are mostly too small for the kernels' threads).
for t in "${gtests[@]}"; do
  printf '== %-24s ' "$t"
  logs=()
  for i in 0 1; do
    logs+=("$(mktemp)")
    GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i qemu-aarch64-static "$B/tests/$t" --gtest_brief=1 >"${logs[$i]}" 2>&1 &
  done
  failed=0
  for pid in $(jobs -p); do wait "$pid" || failed=1; done
  if [ $failed -eq 0 ]; then
    cat "${logs[@]}" | awk '/^\[  PASSED  \]/ {n += $4} END {print n " tests passed"}'
  else
    rc=1
    echo "FAILED"
    tail -n 40 "${logs[@]}"
  fi
  rm -f "${logs[@]}"
done
echo "== command-line tests under qemu: ${ctests//|/, }"
(cd "$B" && ctest -R "^(${ctests})$" -j"$(nproc)" --output-on-failure --timeout 1800) || rc=1

echo "== optimize, run and bench by hand (tools/make_models.py: onnxruntime's outputs as the oracle)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 tools/make_models.py "$work" --models mobilenetv2,transformer >/dev/null
k="$B/kiln-emulated"
for m in mobilenetv2 transformer; do
  $k optimize "$work/$m/model.onnx" --device cpu -o "$work/$m.kiln" | tail -n 1
  $k run "$work/$m.kiln" --inputs "$work/$m/test_data_set_0" --expect "$work/$m/test_data_set_0" \
    --rtol 1e-3 --atol 1e-4 | tail -n 2 || rc=1
  $k bench "$work/$m.kiln" --warmup 1 --iterations 3 --duration 0 | grep -iE "median|latency" | head -n 2 || rc=1
done
echo "== aarch64 tests: $([ $rc -eq 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s under qemu"
exit $rc
