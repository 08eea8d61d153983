#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: ONNX's backend test suite through
# `kiln run --device gpu --expect`, and the same tests on the CPU for the comparison, using the test
# data Debian ships (libonnx-testdata), carried in build-dev/testdata.tar.xz, then tests/python/functions_test.py
# on the GPU. Full results in $OUT/suite_{cpu,gpu}.json and $OUT/functions_gpu.log.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
# The test data carried in build-dev/testdata.tar.xz (bench/prepare_device_build.sh), as in CI.
if [ ! -d build-dev/testdata/data ] && [ -f build-dev/testdata.tar.xz ]; then
  mkdir -p build-dev/testdata && xz -dc build-dev/testdata.tar.xz | tar -C build-dev/testdata -xf -
fi
data=$PWD/build-dev/testdata/data
[ -d /usr/share/libonnx-testdata/data ] && data=/usr/share/libonnx-testdata/data
echo "test data: $data"
devices=${*:-cpu gpu}  # e.g. `bench/gpu_suite.sh gpu` when the CPU figures are known
for dev in $devices; do
  $PY tools/onnx_suite.py --kiln "$PWD/build-dev/kiln" --data "$data" --device $dev --jobs 16 --min-pass-rate 0 \
    --json "$OUT/suite_$dev.json" > "$OUT/suite_$dev.log" 2>&1
  echo "== $dev"
  grep -E "^(all tests|tests made only)" "$OUT/suite_$dev.log"
done
# Tests that pass on the CPU but not on the GPU: the GPU backend's own failures.
[ -f "$OUT/suite_cpu.json" ] && [ -f "$OUT/suite_gpu.json" ] && $PY - "$OUT/suite_cpu.json" "$OUT/suite_gpu.json" <<'PY'
import json, sys
cpu, gpu = (json.load(open(p)) for p in sys.argv[1:3])
diff = sorted(k for k in cpu if cpu[k]["status"] == "pass" and gpu.get(k, {}).get("status") != "pass")
print(f"pass on the CPU but not on the GPU: {len(diff)}")
for k in diff[:60]:
    print(f"  {k}: {gpu.get(k, {}).get('detail', '')[:220]}")
PY
# ONNX functions and the op types Kiln imports as bodies, on the GPU, against onnxruntime (CPU).
if [[ " $devices " == *" gpu "* ]]; then
  $PY tests/python/functions_test.py --kiln "$PWD/build-dev/kiln" --device gpu > "$OUT/functions_gpu.log" 2>&1
  echo "== functions_test.py --device gpu: exit $?"
  grep -E "\): exit|MISMATCH|^functions:" "$OUT/functions_gpu.log"
fi
