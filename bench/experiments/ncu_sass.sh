#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: where one kernel of ResNet-50
# `--best --force-int8` at batch 1 spends its time, instruction by instruction. Nsight Compute's
# full set on one launch of the kernels matching the regex given (default the stem,
# small_c_kernel), after warm-up; its source page (SASS, with warp-stall samples and executed
# instructions per instruction) goes to $OUT/sass.csv. Prints the instructions per warp and the
# share of stall samples and of executed instructions per block of 40 instructions, with the
# opcodes each block holds: the kernel's phases (copies, weight loads, conversion, multiplies,
# epilogue) show as runs of blocks.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
NCU=/opt/nvidia/nsight-compute/2025.3.1/ncu
work=$(mktemp -d)
regex=${1:-small_c_kernel}
$PY bench/torchvision_onnx.py "$work" resnet50 > /dev/null 2>&1
e="$work/resnet50.kiln"
build-dev/kiln optimize "$work/resnet50.onnx" --device gpu --batch 1 --best --force-int8 --calib "$work/calib" \
  -o "$e" > "$OUT/build_sass.txt" 2>&1 || { tail "$OUT/build_sass.txt"; exit 1; }
"$NCU" --clock-control none --cache-control none --set full --import-source no -k "regex:$regex" \
  --launch-skip 10 --launch-count 1 -o "$work/k" \
  build-dev/kiln bench "$e" --device gpu --no-transfers --warmup 12 --iterations 1 --duration 0 > /dev/null 2>&1
"$NCU" --import "$work/k.ncu-rep" --page source --csv --print-source sass > "$OUT/sass.csv" 2>&1
$PY - "$OUT/sass.csv" <<'PYEOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr, data = rows[1], rows[2:]
src, stall, execd = hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)"), hdr.index("Instructions Executed")
num = lambda x: float(x.replace(",", "") or 0)
ts = sum(num(r[stall]) for r in data) or 1.0
te = sum(num(r[execd]) for r in data) or 1.0
print(f"{rows[0][1][:100]}\n{len(data)} instructions, {te:.0f} executed")
for i in range(0, len(data), 40):
    seg = data[i:i + 40]
    s, e = sum(num(r[stall]) for r in seg) / ts, sum(num(r[execd]) for r in seg) / te
    if s < 0.01 and e < 0.01:
        continue
    ops = sorted({r[src].split()[0].split(".")[0] for r in seg if r[src].split() and not r[src].startswith("@")})
    print(f"{i:5d}  stalls {100 * s:5.1f}%  executed {100 * e:5.1f}%  {' '.join(ops)[:90]}")
PYEOF
