#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: issue 41's
# "ResNet-50 --best builds within 2 GB of device memory and 2 GB of host memory". Exports
# torchvision's ResNet-50 (opset 17), writes 512 random calibration images, and builds `--best`
# at batch 1 with `--memory-limit 2G` and without a limit, printing kiln optimize's memory line
# (Kiln's device buffers at their peak, the GPU's use before the build, the peak resident host
# memory) and GNU time's maximum resident set.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
W=$(mktemp -d)
$PY - "$W" <<'PYEOF'
import os, sys
import numpy as np, torch, torchvision
w = sys.argv[1]
torch.onnx.export(torchvision.models.resnet50().eval(), torch.randn(1, 3, 224, 224), f"{w}/resnet50.onnx",
                  opset_version=17, input_names=["input"], output_names=["logits"],
                  dynamic_axes={"input": {0: "batch"}}, dynamo=False)
os.makedirs(f"{w}/calib")
rng = np.random.default_rng(0)
for i in range(8):
    np.save(f"{w}/calib/{i}.npy", rng.normal(0, 1, (64, 3, 224, 224)).astype(np.float32))
PYEOF
T=()
[ -x /usr/bin/time ] && T=(/usr/bin/time -f "GNU time: max resident %M KiB, %e s")
for limit in 2G none; do
  flags=()
  [ "$limit" != none ] && flags=(--memory-limit "$limit")
  echo "== kiln optimize resnet50.onnx --best --batch 1 ${flags[*]}"
  "${T[@]}" build-dev/kiln optimize "$W/resnet50.onnx" --device gpu --best \
    --batch 1 --calib "$W/calib" "${flags[@]}" -o "$W/r50.kiln" 2>&1 | grep -E "memory|GNU time|error|steps|INT8"
done
rm -rf "$W"
