#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: the kernel
# microbenchmarks build-dev/tests/gpu_kernels_bench (bench/micro/gpu_kernels_bench.cpp, gpu_fc_bench.cpp,
# gpu_graph_bench.cpp), as a table on stdout and as JSON in $OUT/gpu_kernels_bench.json. Extra
# arguments go to Google Benchmark, e.g. --benchmark_filter='BM_(Relu|Softmax)'.
set -euo pipefail
source bench/device_env.sh
if [ ! -x build-dev/tests/gpu_kernels_bench ]; then
  echo "no build-dev/tests/gpu_kernels_bench: run bench/prepare_device_build.sh on the build machine first" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader 2>&1 | head -n 1
build-dev/tests/gpu_kernels_bench --benchmark_counters_tabular=true --benchmark_out="$OUT/gpu_kernels_bench.json" \
  --benchmark_out_format=json "$@"
