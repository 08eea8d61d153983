#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: Kiln next to
# PyTorch eager and torch.compile on ResNet-50, MobileNetV2 and LeNet-5 (bench/peers.py). Logs and
# JSON go to $OUT; the table is printed last. Extra arguments go to peers.py.
set -uo pipefail
source bench/device_env.sh
/opt/torch/.venv/bin/python bench/peers.py --kiln "$PWD/build-dev/kiln" --out "$OUT/peers" "$@" 2>&1 | tee "$OUT/peers.log" | grep -v "^{" | tail -n 40
