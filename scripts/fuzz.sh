#!/usr/bin/env bash
# Builds Kiln's libFuzzer targets with clang + ASan + UBSan, makes a seed corpus and runs each
# fuzzer for SECONDS (default 60). Exits non-zero if any fuzzer finds a crash, a sanitizer report,
# a leak, an uncaught exception or a timeout; the reproducer is left in build-fuzz/artifacts/.
#
#   scripts/fuzz.sh [SECONDS]
#
# Reproduce a finding: build-fuzz/tests/fuzz/<fuzzer> build-fuzz/artifacts/<fuzzer>-crash-...
# Environment: JOBS (build parallelism, default 2), KILN_FUZZ_BUILD (build folder, default build-fuzz),
# KILN_ONNX_TESTDATA (default /usr/share/libonnx-testdata/data), KILN_FUZZ_SEED_KILN (the kiln that
# makes the seed engines, default build/kiln; built here, with sanitizers, where there is none).
set -euo pipefail

SECONDS_PER_FUZZER="${1:-60}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${KILN_FUZZ_BUILD:-$ROOT/build-fuzz}"
JOBS="${JOBS:-2}"
TESTDATA="${KILN_ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}"
# halt_on_error=1 (below) makes every UBSan report fatal.
SAN_FLAGS="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-omit-frame-pointer"

# Without oneDNN: the fuzzers exercise Kiln's parsers and its own kernels (oneDNN's JIT code is not
# instrumented). -O1 -gline-tables-only, as OSS-Fuzz builds: stack traces keep their lines, and the build (a third
# full build in CI, after x86-64 and aarch64) takes a fifth less time than with -O2 -g.
mkdir -p "$BUILD"
echo "== configure $BUILD"
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -G Ninja "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DKILN_FUZZ=ON -DKILN_CUDA=OFF -DKILN_TESTS=OFF -DKILN_BENCH=OFF -DKILN_ONEDNN=OFF \
  -DCMAKE_CXX_FLAGS="$SAN_FLAGS" >/dev/null

# The seed engines come from a `kiln` built without sanitizers where there is one (build/, which
# scripts/test.sh makes first; channels-first CPU engines, as this build's own kiln would make):
# the fuzz build then leaves out the command line and the trainer.
SEED_KILN="${KILN_FUZZ_SEED_KILN:-$ROOT/build/kiln}"
targets=(tensor_file_fuzz engine_fuzz onnx_import_fuzz idx_fuzz conv_fuzz serve_request_fuzz conv_sweep_asan_test)
if [[ ! -x "$SEED_KILN" ]]; then
  SEED_KILN="$BUILD/kiln"
  targets+=(kiln)
fi
echo "== build"
ninja -C "$BUILD" -j"$JOBS" "${targets[@]}"

FUZZ_BIN="$BUILD/tests/fuzz"
SEEDS="$BUILD/corpus-seed"
CORPUS="$BUILD/corpus"
ARTIFACTS="$BUILD/artifacts"
WORK="$BUILD/fuzz-cwd"  # empty working directory: nothing there for relative paths to find
mkdir -p "$CORPUS"/{engine,onnx,tensor_file,idx,conv,serve} "$ARTIFACTS" "$WORK"
rm -rf "$SEEDS"
mkdir -p "$SEEDS"/{engine,onnx,tensor_file,idx,conv,serve}

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

echo "== the convolution geometry sweep under ASan and UBSan"
if ! "$BUILD/tests/fuzz/conv_sweep_asan_test" --gtest_brief=1 >"$BUILD/conv_sweep_asan_test.log" 2>&1; then
  echo "conv_sweep_asan_test FAILED: see $BUILD/conv_sweep_asan_test.log" >&2
  grep -E "ERROR|SUMMARY|runtime error|Failure|FAILED|#[0-9]+ 0x" "$BUILD/conv_sweep_asan_test.log" | head -40 >&2
  exit 1
fi
tail -n 1 "$BUILD/conv_sweep_asan_test.log" | sed 's/^/   /'

echo "== seed corpus"
# ONNX models and tensors: the small node tests of the ONNX backend test data.
if [[ -d "$TESTDATA/node" ]]; then
  for dir in "$TESTDATA"/node/test_*; do
    name="$(basename "$dir")"
    model="$dir/model.onnx"
    [[ -f "$model" ]] || continue
    if [[ $(stat -c %s "$model") -le 8192 ]]; then cp "$model" "$SEEDS/onnx/$name.onnx"; fi
    for pb in "$dir"/test_data_set_0/input_0.pb; do
      if [[ -f "$pb" && $(stat -c %s "$pb") -le 4096 ]]; then cp "$pb" "$SEEDS/tensor_file/$name.pb"; fi
    done
  done
  for dir in "$TESTDATA"/simple/*; do
    [[ -f "$dir/model.onnx" && $(stat -c %s "$dir/model.onnx") -le 8192 ]] &&
      cp "$dir/model.onnx" "$SEEDS/onnx/simple_$(basename "$dir").onnx"
  done
else
  echo "warning: $TESTDATA not found; the ONNX and tensor corpora start empty" >&2
fi
# Inputs that found bugs before (tests/fuzz/regressions/<corpus>/): libFuzzer runs every seed
# first, so a bug that comes back fails at once.
for dir in "$ROOT"/tests/fuzz/regressions/*/; do
  cp "$dir"* "$SEEDS/$(basename "$dir")/" 2>/dev/null || true
done
# A model calling its own functions (the ONNX test data of this version has none).
python3 "$ROOT/tests/fuzz/functions_seed.py" "$SEEDS/onnx/functions_seed.onnx" 2>/dev/null || true
# IDX: Fashion-MNIST's gzipped test labels (5 KB) and a small plain uint8 [2, 2] file.
[[ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]] &&
  cp /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz "$SEEDS/idx/labels.gz"
printf '\x00\x00\x08\x02\x00\x00\x00\x02\x00\x00\x00\x02\x01\x02\x03\x04' >"$SEEDS/idx/small"
# Convolutions (conv_fuzz decodes a geometry from the bytes): a few random starts.
for i in 1 2 3 4 5 6 7 8; do head -c 600 /dev/urandom >"$SEEDS/conv/random$i"; done
# Inference requests (serve_request_fuzz: first byte the mode, then two length bytes, then the body):
# JSON, JSON + binary data, a shared memory reference, and a gRPC request.
printf '\x00\x00\x00{"id":"a","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4.5]]}],"outputs":[{"name":"x","parameters":{"binary_data":true}}]}' >"$SEEDS/serve/json"
printf '\x00\x00\x00{"inputs":[{"name":"b","shape":[3],"datatype":"BOOL","data":[true,false,true]},{"name":"i","shape":[2],"datatype":"INT8","data":[-128,127]}],"parameters":{"binary_data_output":true}}' >"$SEEDS/serve/types"
hdr='{"inputs":[{"name":"x","shape":[1,2],"datatype":"INT32","parameters":{"binary_data_size":8}}]}'
printf "\x80\x$(printf %02x ${#hdr})\x00%s\x01\x00\x00\x00\x02\x00\x00\x00" "$hdr" >"$SEEDS/serve/binary"
printf '\x00\x00\x00{"inputs":[{"name":"x","shape":[1],"datatype":"FP16","parameters":{"shared_memory_region":"r","shared_memory_byte_size":2}}]}' >"$SEEDS/serve/shm"
# gRPC: model_name "m", one input "x" FP32 [1] with raw contents 4 bytes.
printf '\xc0\x00\x00\x0a\x01m\x2a\x0c\x0a\x01x\x12\x04FP32\x1a\x01\x01\x3a\x04\x00\x00\x80\x3f' >"$SEEDS/serve/grpc"
# Engines: `kiln optimize` of a spread of small node tests (whatever builds).
ENGINE_TESTS=(test_relu test_add test_add_bcast test_conv_with_strides_padding test_gemm_default_single_elem_vector_bias
  test_gather_0 test_gather_negative_indices test_reshape_extended_dims test_softmax_axis_1 test_matmul_2d
  test_maxpool_2d_default test_averagepool_2d_pads test_concat_2d_axis_0 test_transpose_default test_slice
  test_split_equal_parts_1d test_resize_upsample_scales_nearest test_reduce_sum_keepdims_example
  test_batchnorm_example test_where_example test_expand_dim_changed test_clip
  test_constant_pad test_top_k test_layer_normalization_2d_axis0 test_flatten_axis1 test_sigmoid
  test_argmax_default_axis_example test_cumsum_1d test_scatter_elements_with_axis test_tile test_range_float_type_positive_delta
  test_einsum_batch_matmul test_depthtospace_example test_onehot_with_axis test_instancenorm_example
  test_nonzero_example test_nonmaxsuppression_two_batches test_if)
made=0
for t in "${ENGINE_TESTS[@]}"; do
  model="$TESTDATA/node/$t/model.onnx"
  [[ -f "$model" ]] || continue
  out="$SEEDS/engine/$t.kiln"
  if (cd "$WORK" && KILN_CPU_KERNELS=kiln "$SEED_KILN" optimize "$model" -o "$out" >/dev/null 2>&1); then
    made=$((made + 1))
  else
    rm -f "$out"
  fi
done
# An engine with views (a Concat written in place, free Splits, a Flatten), when python3 has onnx.
if python3 "$ROOT/tests/fuzz/views_seed.py" "$WORK/views_seed.onnx" 2>/dev/null &&
  (cd "$WORK" && KILN_CPU_KERNELS=kiln "$SEED_KILN" optimize views_seed.onnx -o "$SEEDS/engine/views.kiln" >/dev/null 2>&1); then
  made=$((made + 1))
fi
# A range engine (one plan per batch bucket, weights shared) of the same model.
if python3 "$ROOT/tests/fuzz/views_seed.py" "$WORK/views_seed.onnx" --symbolic-batch 2>/dev/null &&
  (cd "$WORK" && KILN_CPU_KERNELS=kiln "$SEED_KILN" optimize views_seed.onnx --batch 1..3 -o "$SEEDS/engine/range.kiln" >/dev/null 2>&1); then
  made=$((made + 1))
fi
rm -f "$WORK/views_seed.onnx"
echo "   $(ls "$SEEDS/onnx" | wc -l) ONNX models, $(ls "$SEEDS/tensor_file" | wc -l) tensors, $made engines"
if [[ $made -eq 0 ]]; then
  echo "error: no seed engine could be built" >&2
  exit 2
fi
# Every seed engine must fit in max_len (libFuzzer cuts longer inputs, and a cut engine is useless).
ENGINE_MAX=$(stat -c %s "$SEEDS"/engine/* | sort -n | tail -1)
ENGINE_MAX=$((ENGINE_MAX < 16384 ? 16384 : ENGINE_MAX))

run_fuzzer() {  # name corpus max_len; returns non-zero on a finding
  local name="$1" corpus="$2" max_len="$3"
  if (cd "$WORK" && "$FUZZ_BIN/$name" \
        -max_total_time="$SECONDS_PER_FUZZER" -max_len="$max_len" -timeout=25 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$name-" \
        "$CORPUS/$corpus" "$SEEDS/$corpus" >"$BUILD/$name.log" 2>&1); then
    echo "== $name: ${SECONDS_PER_FUZZER}s, no findings"
    grep -E "^stat::(number_of_executed_units|new_units_added)|^Done" "$BUILD/$name.log" | sed 's/^/   /' || true
  else
    echo "== $name: FAILED: see $BUILD/$name.log and $ARTIFACTS/$name-*" >&2
    grep -E "ERROR|SUMMARY|runtime error|==[0-9]+==|uncaught|deadly|#[0-9]+ 0x" "$BUILD/$name.log" | head -40 >&2 || true
    return 1
  fi
}

# The six fuzzers run at the same time; each is given SECONDS.
echo "== fuzzing engine_fuzz, onnx_import_fuzz, tensor_file_fuzz, idx_fuzz, conv_fuzz and serve_request_fuzz for ${SECONDS_PER_FUZZER}s each, concurrently"
run_fuzzer engine_fuzz engine "$ENGINE_MAX" & pid_engine=$!
run_fuzzer onnx_import_fuzz onnx 8192 & pid_onnx=$!
run_fuzzer tensor_file_fuzz tensor_file 4096 & pid_tensor=$!
run_fuzzer idx_fuzz idx 8192 & pid_idx=$!
run_fuzzer conv_fuzz conv 4096 & pid_conv=$!
run_fuzzer serve_request_fuzz serve 4096 & pid_serve=$!
failed=()
wait "$pid_engine" || failed+=(engine_fuzz)
wait "$pid_onnx" || failed+=(onnx_import_fuzz)
wait "$pid_tensor" || failed+=(tensor_file_fuzz)
wait "$pid_idx" || failed+=(idx_fuzz)
wait "$pid_conv" || failed+=(conv_fuzz)
wait "$pid_serve" || failed+=(serve_request_fuzz)

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzzing found problems in: ${failed[*]}" >&2
  exit 1
fi
echo "no crashes"
