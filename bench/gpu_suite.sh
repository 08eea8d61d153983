#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: ONNX's backend test suite through
# `kiln run --device gpu --expect`, and the same tests on the CPU for the comparison, using the test
# data shipped in the onnx Python package there. Full results in $OUT/suite_{cpu,gpu}.json.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
data=$($PY -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend', 'test', 'data'))")
[ -d /usr/share/libonnx-testdata/data ] && data=/usr/share/libonnx-testdata/data
echo "test data: $data"
for dev in cpu gpu; do
  $PY tools/onnx_suite.py --kiln "$PWD/build-dev/kiln" --data "$data" --device $dev --jobs 16 --min-pass-rate 0 \
    --json "$OUT/suite_$dev.json" > "$OUT/suite_$dev.log" 2>&1
  echo "== $dev"
  grep -E "^(all tests|tests made only)" "$OUT/suite_$dev.log"
done
# Tests that pass on the CPU but not on the GPU: the GPU backend's own failures.
$PY - "$OUT/suite_cpu.json" "$OUT/suite_gpu.json" <<'PY'
import json, sys
cpu, gpu = (json.load(open(p)) for p in sys.argv[1:3])
diff = sorted(k for k in cpu if cpu[k]["status"] == "pass" and gpu.get(k, {}).get("status") != "pass")
print(f"pass on the CPU but not on the GPU: {len(diff)}")
for k in diff[:60]:
    print(f"  {k}: {gpu.get(k, {}).get('detail', '')[:220]}")
PY
