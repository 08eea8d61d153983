#!/usr/bin/env bash
# Builds Kiln here and packs what the GPU machine needs into build-dev/pack.tar.xz (build-dev/ is
# listed in .git/info/exclude): the stripped kiln binary, the builder-side shared libraries the GPU
# machine's image lacks, and the stripped GPU test binaries. The binaries share most of their bytes
# (the CUDA kernels), so one xz stream with a dictionary as large as all of them keeps the pack small
# enough to carry (64 MiB limit). Then, from the device tool: carry build-dev and run bench/gpu_tests.sh,
# bench/gpu_bench.sh, bench/gpu_check.sh or bench/peers.sh; they unpack it there
# (bench/device_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# ONNX's backend test data (Debian's libonnx-testdata; the GPU machine has none) for
# bench/gpu_suite.sh, so that both backends run the same tests as CI does (5.8 MB).
pack_testdata() {
  if [ -d /usr/share/libonnx-testdata/data ]; then
    tar -C /usr/share/libonnx-testdata -cf - data | xz -6 -T2 > build-dev/testdata.tar.xz
    ls -la build-dev/testdata.tar.xz
  fi
}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/tests"
strip -o "$stage/kiln" build/kiln
# The shared libraries kiln links that the GPU machine's image lacks (ONNX, protobuf, fmt, gRPC,
# cpp-httplib, abseil, ...): every one ldd resolves, except the C/C++ runtime and CUDA's own (the
# machine has those).
ldd build/kiln | awk '$3 ~ /^\// {print $3}' |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libz|ld-linux[^/]*)\.so|/usr/local/cuda' |
  xargs -I{} cp -L {} "$stage/lib/"
cp -L /lib/x86_64-linux-gnu/libbenchmark.so.1debian "$stage/lib/"
for t in build/tests/*_gpu_test build/bench/gpu_*_bench build/bench/gpu_engine_timing; do
  [ -x "$t" ] || continue
  strip -o "$stage/tests/$(basename "$t")" "$t"
done
# With --kiln-only [BINARY...]: only kiln and its libraries in build-dev/pack.tar.xz (about 15 MB),
# plus the named test or benchmark binaries (e.g. ops_gpu_test gpu_kernels_bench), for the
# end-to-end runs (bench/int8_gpu.sh, bench/experiments/int8_profiles.sh) and a few GPU tests.
# With --serve: kiln and its libraries, libtriton_kiln.so, and in build-serve/serve-tools.tar.xz the
# serving tools the GPU machine lacks, from the serving venv (scripts/install_serve_deps.sh):
# perf_analyzer with libcudart.so.12 and libb64, and PyTriton's Triton Inference Server with its
# libraries; for bench/serve_gpu.sh.
if [ "${1:-}" = "--serve" ]; then
  rm -rf "$stage/tests" build-dev && mkdir -p build-dev
  strip -o "$stage/libtriton_kiln.so" build/src/triton_backend/libtriton_kiln.so
  tar -C "$stage" -cf - . | xz -9 --lzma2=preset=9,dict=256MiB -T1 > build-dev/pack.tar.xz
  if [ -f build-serve/serve-tools.tar.xz ]; then ls -la build-dev/ build-serve/; exit 0; fi  # made before
  venv=${KILN_SERVE_VENV:-$HOME/.cache/kiln/serve-venv}
  site=$(echo "$venv"/lib/python3*/site-packages)
  tools=$(mktemp -d)
  mkdir -p "$tools/bin" "$tools/lib" "$tools/site/pytriton/tritonserver/bin"
  cp "$venv/bin/perf_analyzer" "$tools/bin/"
  cp -L "$site"/nvidia/cuda_runtime/lib/libcudart.so.12 /usr/lib/x86_64-linux-gnu/libb64.so.0d "$tools/lib/"
  cp "$site/pytriton/tritonserver/bin/tritonserver" "$tools/site/pytriton/tritonserver/bin/"
  cp -r "$site/nvidia_pytriton.libs" "$tools/site/"  # tritonserver's RUNPATH: $ORIGIN/../../../nvidia_pytriton.libs
  mkdir -p build-serve
  tar -C "$tools" -cf - . | xz -9 -T2 > build-serve/serve-tools.tar.xz
  rm -rf "$tools"
  ls -la build-dev/ build-serve/
  exit 0
fi
if [ "${1:-}" = "--kiln-only" ]; then
  shift
  keep=$(mktemp -d)
  for b in "$@"; do mv "$stage/tests/$b" "$keep/"; done
  rm -rf "$stage/tests" build-dev && mkdir -p build-dev
  mv "$keep" "$stage/tests"
  tar -C "$stage" -cf - . | xz -9 -T2 > build-dev/pack.tar.xz
  ls -la build-dev/pack.tar.xz
  pack_testdata
  exit 0
fi
# With --slim: only kiln and its libraries plus all of Fashion-MNIST, in build-slim/ (about 45 MB),
# for the training runs (bench/train_bench.sh --fashion build-slim/fashion-mnist after copying
# build-slim/pack.tar.xz into build-dev/), whose data would not fit next to the full pack.
if [ "${1:-}" = "--slim" ]; then
  rm -rf build-slim && mkdir -p build-slim
  rm -rf "$stage/tests"
  tar -C "$stage" -cf - . | xz -9 -T2 > build-slim/pack.tar.xz
  [ -d /usr/share/datasets/fashion-mnist ] && cp -r /usr/share/datasets/fashion-mnist build-slim/fashion-mnist
  du -sh build-slim/*
  exit 0
fi
rm -rf build-dev && mkdir -p build-dev
# Fashion-MNIST's test split (4.5 MB) for the INT8 accuracy check there (bench/int8_gpu.sh).
if [ -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p build-dev/fashion-mnist
  cp /usr/share/datasets/fashion-mnist/t10k-*.gz build-dev/fashion-mnist/
fi
# One xz stream whose dictionary spans all the binaries (each carries the same CUDA kernels, about
# 60 MB apart in the tar): with xz's default 64 MiB window the pack was 129 MB; decompressing needs
# 1 GiB of memory there.
tar -C "$stage" -cf - . | xz -9 --lzma2=preset=9,dict=1GiB -T1 > build-dev/pack.tar.xz
ls -la build-dev/pack.tar.xz
# With --with-fashion: Fashion-MNIST (31 MB, gzipped IDX) for bench/train_bench.sh --fashion
# build-dev/fashion-mnist; it may take the carry past its limit together with the pack.
if [ "${1:-}" = "--with-fashion" ] && [ -d /usr/share/datasets/fashion-mnist ]; then
  cp -r /usr/share/datasets/fashion-mnist build-dev/fashion-mnist
  du -sh build-dev/fashion-mnist
fi
pack_testdata
