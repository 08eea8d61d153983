#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried (kiln and tests/gpu_engine_timing):
# one close call of ResNet-50 `--best --force-int8` at batch 1, measured by the builder's engine
# timing and by `kiln bench`. Engine A is a fresh build; engine B the same build with the other of
# tactics 2008 and 2009 on layer3's stride-1 3x3 layers (256 channels, 14x14), through an edited
# timing cache. Then bench/micro/gpu_engine_timing.cpp times A and B the builder's way and others, and
# `kiln bench` times them alternately. Logs in $OUT/b1_close_call/.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
work=$(mktemp -d)
logs="$OUT/b1_close_call"
mkdir -p "$logs"
K=build-dev/kiln
T=build-dev/tests/gpu_engine_timing
[ -x "$T" ] || { echo "no $T: bench/prepare_device_build.sh --kiln-only gpu_engine_timing"; exit 2; }
$PY bench/torchvision_onnx.py "$work" resnet50 || exit 1
flags=(--device gpu --batch 1 --best --force-int8 --calib "$work/calib" --calib-cache "$work/calib.cache")
"$K" optimize "$work/resnet50.onnx" "${flags[@]}" --timing-cache "$work/tc_a.json" -v -o "$work/a.kiln" \
  > "$logs/build_a.txt" 2>&1 || { tail "$logs/build_a.txt"; exit 1; }
$PY - "$work/tc_a.json" "$work/tc_b.json" <<'PYEOF' || exit 1
import json, sys
c = json.load(open(sys.argv[1]))
hits = [k for k in c["layers"] if "int8[1,14,14,256] " in k and "int8[256,3,3,256]c" in k and k.endswith("| int8[1,14,14,256]")]
assert len(hits) == 1, hits
key = hits[0]
verdicts = [calls[key] for calls in c["engines"].values() if key in calls]
e = verdicts[0] if verdicts else c["layers"][key]
print(f"layer3 3x3: A has tactic {e['tactic']}; {e.get('verdict', 'no close call')}")
other = 2009 if e["tactic"] == 2008 else 2008
for v in verdicts:
    v["tactic"] = other
if not verdicts:
    c["layers"][key]["tactic"] = other
    c["layers"][key].pop("rivals", None)
print(f"layer3 3x3: B has tactic {other}")
json.dump(c, open(sys.argv[2], "w"))
PYEOF
"$K" optimize "$work/resnet50.onnx" "${flags[@]}" --timing-cache "$work/tc_b.json" -v -o "$work/b.kiln" \
  > "$logs/build_b.txt" 2>&1 || { tail "$logs/build_b.txt"; exit 1; }
"$T" "$work/a.kiln" "$work/b.kiln" 2>&1 | tee "$logs/engine_timing.txt"
for r in 1 2; do
  for e in a b; do
    echo "round $r  kiln bench $e  $(graph_median "$K" "$work/$e.kiln" "$logs/bench_$e.txt") ms"
  done
done
