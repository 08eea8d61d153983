#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ unpacked: ResNet-50 `--best --force-int8`
# at batch 1, built once, then (1) its steps (kiln inspect), (2) the per-layer profile and the CUDA
# graph's GPU compute, (3) each kernel's own duration under Nsight Compute (one inference launched
# step by step, after warm-up). Shows where batch 1's time goes: kernels against the gaps between them.
# Usage: bash bench/experiments/b1_kernels.sh [torchvision model, default resnet50]. Nsight Compute keeps the
# caches warm between kernels (as in the graph); NCU_CACHE=all flushes them before each kernel.
# Then (4) the graph with and without the side stream (`--no-side-stream`), alternated three times.
# Writes $OUT/build_b1.txt, inspect_b1.txt, prof_b1.txt, ncu_b1.csv, side_b1.txt; prints the kernel
# table and the comparison.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
NCU=/opt/nvidia/nsight-compute/2025.3.1/ncu
work=$(mktemp -d)
model=${1:-resnet50}
$PY bench/torchvision_onnx.py "$work" "$model"
e="$work/$model.kiln"
build-dev/kiln optimize "$work/$model.onnx" --device gpu --batch 1 --best --force-int8 --calib "$work/calib" \
  --timing-cache "$work/tc.json" -v -o "$e" > "$OUT/build_b1.txt" 2>&1 || { tail "$OUT/build_b1.txt"; exit 1; }
build-dev/kiln inspect "$e" > "$OUT/inspect_b1.txt" 2>&1
build-dev/kiln bench "$e" --device gpu --cuda-graph --no-transfers --duration 1 --profile > "$OUT/prof_b1.txt" 2>&1
steps=$(grep -cE '^ +[0-9]+ +[A-Za-z]' "$OUT/prof_b1.txt")
# Warm-up inferences are launched step by step without a graph: skip 10 of them, time the 11th.
"$NCU" --clock-control none --cache-control ${NCU_CACHE:-none} --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size --csv \
  --launch-skip $((steps * 10)) --launch-count $((steps * 3)) \
  build-dev/kiln bench "$e" --device gpu --no-transfers --warmup 12 --iterations 1 --duration 0 \
  > "$OUT/ncu_b1.csv" 2> "$OUT/ncu_b1.err"
$PY - "$OUT/ncu_b1.csv" <<'PYEOF'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, mi, vi = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value")
ii = hdr.index("ID")
k = collections.OrderedDict()
for r in rows:
    d = k.setdefault(r[ii], {"name": r[ki][:70]})
    d[r[mi]] = r[vi]
tot = 0.0
for i, d in k.items():
    ns = float(d.get("gpu__time_duration.sum", "0").replace(",", ""))
    tot += ns
    print(f"{i:>4} {ns/1000:8.2f} us  grid {d.get('launch__grid_size','?'):>6} blk {d.get('launch__block_size','?'):>4}  {d['name']}")
print(f"kernels {len(k)}  sum {tot/1000:.1f} us")
PYEOF
grep -E '^GPU compute' "$OUT/prof_b1.txt"
echo "side steps: $(grep -c 'side stream' "$OUT/inspect_b1.txt")"
for r in 1 2 3; do
  for mode in side --no-side-stream; do
    flag=$([ "$mode" = side ] || echo "$mode")
    # shellcheck disable=SC2086
    m=$(graph_median build-dev/kiln "$e" "$OUT/side_b1.txt" $flag)
    echo "round $r  ${mode#--}  GPU compute median $m ms"
  done
done
