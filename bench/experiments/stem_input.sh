#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: what fuse-conv-input (the stem
# reading the float32 image itself, without the Cast and Transpose steps before it) is worth.
# ResNet-50 (or the torchvision model given) `--best --force-int8` at batch 1 and 256, built with
# and without `--disable-pass fuse-conv-input` (one calibration cache and one timing cache, so the
# other layers keep their tactics), then `kiln bench --cuda-graph --no-transfers` on each,
# alternated three times. Logs in $OUT/stem_input/; prints the GPU compute medians last.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
model=${1:-resnet50}
work=$(mktemp -d)
logs="$OUT/stem_input"
mkdir -p "$logs"
$PY bench/torchvision_onnx.py "$work" "$model"
for b in 1 256; do
  for mode in on off; do
    flag=$([ "$mode" = on ] || echo "--disable-pass fuse-conv-input")
    start=$(date +%s%N)
    # shellcheck disable=SC2086
    build-dev/kiln optimize "$work/$model.onnx" --device gpu --batch $b --best --force-int8 --calib "$work/calib" \
      --calib-cache "$work/calib.cache" --timing-cache "$work/tc.json" $flag -v -o "$work/${mode}_b$b.kiln" \
      > "$logs/build_${mode}_b$b.txt" 2>&1 || { tail "$logs/build_${mode}_b$b.txt"; exit 1; }
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "built $mode b$b in $((ms / 1000)).$(printf %03d $((ms % 1000))) s: $(grep -E ': [0-9]+ nodes -> [0-9]+ steps' "$logs/build_${mode}_b$b.txt")"
  done
  build-dev/kiln inspect "$work/on_b$b.kiln" > "$logs/inspect_on_b$b.txt" 2>&1
  build-dev/kiln bench "$work/on_b$b.kiln" --device gpu --cuda-graph --no-transfers --duration 1 --profile \
    > "$logs/prof_on_b$b.txt" 2>&1
  build-dev/kiln bench "$work/off_b$b.kiln" --device gpu --cuda-graph --no-transfers --duration 1 --profile \
    > "$logs/prof_off_b$b.txt" 2>&1
done
table=""
for b in 1 256; do
  for r in 1 2 3; do
    for mode in on off; do
      m=$(graph_median build-dev/kiln "$work/${mode}_b$b.kiln" "$logs/bench_${mode}_b$b.txt")
      table+="batch $b  round $r  fuse-conv-input $mode  GPU compute median ${m} ms"$'\n'
    done
  done
done
echo "---- stem steps (profile, fuse-conv-input on / off)"
for b in 1 256; do
  grep -m3 -E '^ +[0-9]+ +(NhwcConv|Cast|Transpose)' "$logs/prof_on_b$b.txt" | sed "s/^/on  b$b /"
  grep -m3 -E '^ +[0-9]+ +(NhwcConv|Cast|Transpose)' "$logs/prof_off_b$b.txt" | sed "s/^/off b$b /"
done
printf '%s' "$table"
