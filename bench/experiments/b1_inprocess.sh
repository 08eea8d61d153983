#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: does `kiln bench MODEL.onnx` (the
# engine built in the benchmark's own process, as bench/int8_gpu.py runs it) measure the same as
# `kiln bench ENGINE.kiln` of the same build? ResNet-50 (or the torchvision model given) --best
# --force-int8 at batch 1: built once with -o and a timing cache, then the ONNX file (rebuilt with
# that cache: the same tactics) and the engine file benched alternately, three rounds each; then a
# fresh build with a fresh cache, benched from its file. Logs in $OUT/b1_inprocess/.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
model=${1:-resnet50}
work=$(mktemp -d)
logs="$OUT/b1_inprocess"
mkdir -p "$logs"
K=build-dev/kiln
$PY bench/torchvision_onnx.py "$work" "$model" || exit 1
flags=(--device gpu --batch 1 --best --force-int8 --calib "$work/calib" --calib-cache "$work/calib.cache")
for b in a b; do
  "$K" optimize "$work/$model.onnx" "${flags[@]}" --timing-cache "$work/tc_$b.json" -v -o "$work/$b.kiln" \
    > "$logs/build_$b.txt" 2>&1 || { tail "$logs/build_$b.txt"; exit 1; }
  grep -E "choose-tactics:" "$logs/build_$b.txt"
done
table=""
for r in 1 2 3; do
  m=$(graph_median "$K" "$work/a.kiln" "$logs/bench_file.txt")
  table+="round $r  engine file a          ${m} ms"$'\n'
  m=$(graph_median "$K" "$work/$model.onnx" "$logs/bench_onnx.txt" --batch 1 --best --force-int8 \
    --calib-cache "$work/calib.cache" --timing-cache "$work/tc_a.json")
  table+="round $r  onnx, built in process ${m} ms"$'\n'
  m=$(graph_median "$K" "$work/b.kiln" "$logs/bench_file_b.txt")
  table+="round $r  engine file b          ${m} ms"$'\n'
done
"$K" inspect "$work/a.kiln" | grep -o 'tactic [0-9]*' | tr '\n' ' ' > "$logs/tactics_a.txt"
"$K" inspect "$work/b.kiln" | grep -o 'tactic [0-9]*' | tr '\n' ' ' > "$logs/tactics_b.txt"
cmp -s "$logs/tactics_a.txt" "$logs/tactics_b.txt" && echo "builds a and b: same tactics" || echo "builds a and b: tactics differ"
printf '%s' "$table"
