#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: what bounds each kernel of
# ResNet-50 `--best --force-int8` at batch 256. Nsight Compute's speed-of-light, occupancy and
# warp-state sections on every kernel of one inference (stream launches, after a warm-up run),
# then one line per kernel: time, SM and DRAM throughput, issue slots busy, achieved occupancy,
# shared-memory pipe, warp cycles per issued instruction. Full report: $OUT/ncu_b256.csv.
# Usage: bench/experiments/ncu_b256.sh [MODEL] [BATCH]
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
NCU=/opt/nvidia/nsight-compute/2025.3.1/ncu
work=$(mktemp -d)
model=${1:-resnet50}
batch=${2:-256}
$PY bench/torchvision_onnx.py "$work" "$model" > /dev/null 2>&1
e="$work/$model.kiln"
build-dev/kiln optimize "$work/$model.onnx" --device gpu --batch "$batch" --best --force-int8 --calib "$work/calib" \
  -o "$e" > "$OUT/build_ncu.txt" 2>&1 || { tail "$OUT/build_ncu.txt"; exit 1; }
# Every kernel of the warm-up and the measured inference (--warmup 1, --iterations 1): the second
# half of the list is the measured one.
"$NCU" --clock-control none --cache-control none \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
  --launch-count 400 -o "$work/k" \
  build-dev/kiln bench "$e" --device gpu --no-transfers --warmup 1 --iterations 1 --duration 0 > "$OUT/ncu_run.txt" 2>&1
"$NCU" --import "$work/k.ncu-rep" --page details --csv > "$OUT/ncu_b256.csv" 2>&1
$PY - "$OUT/ncu_b256.csv" <<'PYEOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[0]
ix = {k: hdr.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value", "Metric Unit")}
kern = {}
for r in rows[1:]:
    if len(r) <= ix["Metric Value"] or not r[ix["Metric Name"]]:
        continue
    k = kern.setdefault(r[ix["ID"]], {"name": r[ix["Kernel Name"]]})
    k[r[ix["Metric Name"]]] = (r[ix["Metric Value"]], r[ix["Metric Unit"]])
want = [("Duration", "us"), ("Compute (SM) Throughput", "SM%"), ("DRAM Throughput", "DRAM%"),
        ("Issue Slots Busy", "issue%"), ("Achieved Occupancy", "occ%"), ("Warp Cycles Per Issued Instruction", "cyc/inst"),
        ("Registers Per Thread", "regs"), ("Dynamic Shared Memory Per Block", "smem")]
print("  id  " + "  ".join(f"{w[1]:>8}" for w in want) + "  kernel")
ids = sorted(kern, key=int)
for i in ids[len(ids) // 2:]:
    k = kern[i]
    vals = []
    for name, _ in want:
        v, unit = k.get(name, ("-", ""))
        if name == "Duration" and unit == "ms":
            v = f"{float(v.replace(',', '')) * 1000:.1f}"
        vals.append(f"{v:>8}")
    print(f"{int(i):4d}  " + "  ".join(vals) + "  " + k["name"][:70])
PYEOF
