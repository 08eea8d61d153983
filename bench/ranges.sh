#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: range engines
# next to fixed ones (bench/ranges.py). Logs and JSON go to $OUT/ranges; the table is printed last.
# Extra arguments go to ranges.py (--models resnet50 or bert, to split the work over two calls).
set -uo pipefail
source bench/device_env.sh
/opt/torch/.venv/bin/python bench/ranges.py --kiln "$PWD/build-dev/kiln" --out "$OUT/ranges" "$@" 2>&1 |
  tee "$OUT/ranges.log" | tail -n 30
