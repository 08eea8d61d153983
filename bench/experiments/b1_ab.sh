#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: two builds of Kiln on one model at
# batch 1. build-dev/kiln (this tree) against a baseline binary carried as build-dev/base_kiln.xz
# (`strip -o k build/kiln && xz -9 -c k > build-dev/base_kiln.xz` on a checkout of the baseline
# commit; it must read and write the same engine format). Each builds ResNet-50 (or the torchvision
# model given) `--best --force-int8` at batch 1 with its own timing cache and one shared calibration
# cache; then `kiln bench --cuda-graph --no-transfers` on each engine, alternated three times.
# BATCH: another batch size than 1. BASE_FLAGS: more `kiln optimize` flags for the baseline's
# build; with them and no base_kiln.xz the baseline is this tree's binary
# (BASE_FLAGS="--disable-pass fuse-conv-pool" measures one pass).
# Logs in $OUT/b1_ab/; prints the steps and the GPU compute medians last.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
model=${1:-resnet50}
batch=${BATCH:-1}
work=$(mktemp -d)
logs="$OUT/b1_ab"
mkdir -p "$logs"
base_flags=${BASE_FLAGS:-}
if [ -n "$base_flags" ] && [ ! -f build-dev/base_kiln.xz ]; then
  cp build-dev/kiln "$work/base_kiln"
else
  unpack_base "$work/base_kiln" || exit 2
fi
$PY bench/torchvision_onnx.py "$work" "$model"
for which in new base; do
  bin=$([ "$which" = new ] && echo build-dev/kiln || echo "$work/base_kiln")
  flags=$([ "$which" = new ] || echo "$base_flags")
  # shellcheck disable=SC2086
  "$bin" optimize "$work/$model.onnx" --device gpu --batch "$batch" --best --force-int8 --calib "$work/calib" $flags \
    --calib-cache "$work/calib.cache" --timing-cache "$work/tc_$which.json" -v -o "$work/$which.kiln" \
    > "$logs/build_$which.txt" 2>&1 || { tail "$logs/build_$which.txt"; exit 1; }
  "$bin" inspect "$work/$which.kiln" > "$logs/inspect_$which.txt" 2>&1
  "$bin" bench "$work/$which.kiln" --device gpu --cuda-graph --no-transfers --duration 1 --profile \
    > "$logs/prof_$which.txt" 2>&1
done
table=""
for r in 1 2 3; do
  for which in new base; do
    bin=$([ "$which" = new ] && echo build-dev/kiln || echo "$work/base_kiln")
    m=$(graph_median "$bin" "$work/$which.kiln" "$logs/bench_$which.txt")
    table+="round $r  $which  GPU compute median ${m} ms"$'\n'
  done
done
for which in new base; do
  echo "$which: $(grep -E ': [0-9]+ nodes -> [0-9]+ steps' "$logs/build_$which.txt")"
  grep -E '^ +[01] ' "$logs/prof_$which.txt"
  tail -n 6 "$logs/prof_$which.txt" | head -n 5
done
printf '%s' "$table"
