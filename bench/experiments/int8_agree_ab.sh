#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: GPU-vs-CPU INT8 agreement of two
# builds of Kiln on the same model, calibration cache and images, so that a kernel change's effect
# on accuracy is not hidden by the fresh random weights of each bench/int8_gpu.py run.
# build-dev/kiln (this tree) against build-dev/base_kiln.xz (as for bench/experiments/b1_ab.sh). For each
# torchvision model named (default mobilenet_v2,resnet50): one calibration cache (this tree's
# binary), the CPU INT8 engine at batch 8, and each binary's GPU `--int8 --force-int8` engine at
# batch 8; prints max |gpu - cpu| / max |cpu| and the top-1 agreement of each on 8 images.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
models=${1:-mobilenet_v2,resnet50}
work=$(mktemp -d)
unpack_base "$work/base_kiln" || exit 2
$PY bench/torchvision_onnx.py "$work" "$models" 64
$PY -c "import numpy as np; np.save('$work/x8.npy', np.random.default_rng(1).normal(0, 1, (8, 3, 224, 224)).astype(np.float32))"
for m in ${models//,/ }; do
  cache="$work/${m}_calib.json"
  build-dev/kiln optimize "$work/$m.onnx" --device cpu --batch 8 --int8 --calib "$work/calib" --calib-cache "$cache" \
    -o "$work/${m}_cpu.kiln" > "$OUT/${m}_cpu_build.txt" 2>&1 || { tail "$OUT/${m}_cpu_build.txt"; exit 1; }
  build-dev/kiln run "$work/${m}_cpu.kiln" --input "input=$work/x8.npy" --outputs "$work/out_${m}_cpu" > /dev/null
  for which in new base; do
    bin=$([ "$which" = new ] && echo build-dev/kiln || echo "$work/base_kiln")
    "$bin" optimize "$work/$m.onnx" --device gpu --batch 8 --int8 --force-int8 --calib-cache "$cache" \
      -o "$work/${m}_$which.kiln" > "$OUT/${m}_${which}_build.txt" 2>&1 || { tail "$OUT/${m}_${which}_build.txt"; exit 1; }
    "$bin" inspect "$work/${m}_$which.kiln" > "$OUT/${m}_${which}_inspect.txt" 2>&1
    "$bin" run "$work/${m}_$which.kiln" --input "input=$work/x8.npy" --outputs "$work/out_${m}_$which" > /dev/null
  done
  $PY - "$work" "$m" <<'PYEOF'
import sys
import numpy as np
work, m = sys.argv[1], sys.argv[2]
cpu = np.load(f"{work}/out_{m}_cpu/output_0.npy")
for which in ("new", "base"):
    gpu = np.load(f"{work}/out_{m}_{which}/output_0.npy")
    err = float(np.abs(gpu - cpu).max() / np.abs(cpu).max())
    agree = float(np.mean(gpu.argmax(1) == cpu.argmax(1)))
    print(f"{m} {which}: GPU vs CPU INT8 max rel err {err:.4f}, top-1 agreement {agree:.3f}")
PYEOF
done
