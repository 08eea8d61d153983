#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: LeNet-5 as bench/peers.py exports it
# (PyTorch, opset 17), at batch 1 and 8, FP32 and FP16, CUDA graphs, no transfers, timed by `kiln
# bench` with the whole-network kernel (--whole-net) and without (the default), side by side: the
# "GPU compute" medians in ms. Full outputs (the last of each with --profile) go to $OUT.
set -uo pipefail
source bench/device_env.sh
work=$(mktemp -d)
/opt/torch/.venv/bin/python - "$work/lenet5.onnx" <<'EOF'
import sys
import torch
sys.path.insert(0, "bench")
from peers import LeNet5
torch.onnx.export(LeNet5().eval(), torch.randn(1, 1, 28, 28), sys.argv[1], opset_version=17, input_names=["input"],
                  output_names=["logits"], dynamic_axes={"input": {0: "batch"}}, dynamo=False)
EOF
median() { awk '/^GPU compute/ {print $6}' "$1"; }
printf '%-6s %-5s %12s %12s\n' batch prec whole-net steps
for b in 1 8; do
  for p in fp32 fp16; do
    flag=""
    [ $p = fp16 ] && flag=--fp16
    common=("$work/lenet5.onnx" --batch $b $flag --cuda-graph --no-transfers --duration 1 --timing-cache "$work/cache.json")
    build-dev/kiln bench "${common[@]}" --whole-net > "$OUT/lenet5_b${b}_${p}_whole.txt" 2>&1
    build-dev/kiln bench "${common[@]}" > "$OUT/lenet5_b${b}_${p}_steps.txt" 2>&1
    printf '%-6s %-5s %12s %12s   %s\n' $b $p "$(median "$OUT/lenet5_b${b}_${p}_whole.txt")" \
      "$(median "$OUT/lenet5_b${b}_${p}_steps.txt")" "$(grep -E '^kernels' "$OUT/lenet5_b${b}_${p}_whole.txt")"
  done
done
