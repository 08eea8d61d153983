#!/usr/bin/env bash
# The training flow end to end, as a user runs it: LeNet-5 trained on Fashion-MNIST (Debian's
# dataset-fashion-mnist), exported to ONNX and checked against onnxruntime, optimized into an FP32
# engine and a calibrated INT8 one (calibration reads the training split; the accuracy guard, 2,000
# training images, keeps in float what would cost more than 0.3 points), both evaluated on the
# 10,000 test images and benchmarked, then a summary table (also in OUT/summary.txt).
# scripts/demo.sh runs it first.
#
#   scripts/train_demo.sh [--device cpu|gpu] [--epochs N] [--data DIR] [--out DIR] [--kiln BIN]
#
# --device defaults to gpu when nvidia-smi finds one. Both train on the 54,000 training images (6,000
# held out for validation): the GPU for 15 epochs (SGD, cosine schedule: about 90.5% test accuracy),
# the CPU for 5 with Adam (about 88.5%, half a minute of training on 2 cores). The engines are built
# for the same device: batch 256 for accuracy and throughput, batch 1 for latency (GPU: CUDA graph).
# --kiln BIN uses that kiln and skips installing and building (scripts/demo.sh has done it; on a
# machine without network, the Python check is then skipped when onnxruntime is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
device="" epochs="" data=/usr/share/datasets/fashion-mnist out=out/demo/train kiln=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --kiln) kiln=$2; shift 2 ;;
    *) echo "usage: $0 [--device cpu|gpu] [--epochs N] [--data DIR] [--out DIR] [--kiln BIN]" >&2; exit 2 ;;
  esac
done
setup=0
if [ -z "$kiln" ]; then
  bash scripts/install_deps.sh
  bash scripts/build.sh
  kiln=build/kiln setup=1
fi
if [ -z "$device" ]; then
  if nvidia-smi -L >/dev/null 2>&1; then device=gpu; else device=cpu; fi
fi
case "$device" in
  gpu) train=(--device gpu --epochs "${epochs:-15}" --batch 128 --solver sgd --lr 0.05 --weight-decay 0.0005
              --lr-schedule cosine)
       build=(--device gpu --timing-cache "$out/timing_cache.json")
       bench=(--cuda-graph) ;;
  cpu) train=(--epochs "${epochs:-5}" --batch 64 --solver adam)
       build=()
       bench=() ;;
  *) echo "--device $device: expected cpu or gpu" >&2; exit 2 ;;
esac
mkdir -p "$out"

echo "== kiln train (LeNet-5 on Fashion-MNIST, $device)"
"$kiln" train --net lenet5 --data "$data" "${train[@]}" \
  --metrics "$out/metrics.csv" --plot "$out/curves.svg" --example "$out/example" -o "$out/lenet5.onnx"

echo "== onnxruntime on the exported model against Kiln's own forward pass"
if [ "$setup" = 1 ] || python3 -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  python3 - "$out" <<'PY'
import sys, numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
out = sys.argv[1]
load = lambda p: numpy_helper.to_array(onnx.load_tensor(p))
x, ref = load(f"{out}/example/input_0.pb"), load(f"{out}/example/output_0.pb")
y = ort.InferenceSession(f"{out}/lenet5.onnx", providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
err = np.abs(y - ref).max()
print(f"max |onnxruntime - kiln| = {err:.3g} (logits up to {np.abs(ref).max():.3g})")
sys.exit(0 if err <= 1e-4 * max(1.0, np.abs(ref).max()) else 1)
PY
else
  echo "   (skipped: this Python has no onnx/onnxruntime)"
fi

# The accuracy guard's labelled data: the last 2,000 training images as the model takes them
# ([n, 1, 28, 28] in [0, 1]) and their labels, so that the test images the summary reports on do
# not choose the INT8 layers. Standard library only (the demo runs without numpy).
python3 - "$data" "$out/guard" <<'PY'
import gzip, os, struct, sys
data, dst = sys.argv[1], sys.argv[2]
n = 2000
with gzip.open(os.path.join(data, "train-images-idx3-ubyte.gz")) as f:
    _, count, rows, cols = struct.unpack(">4I", f.read(16))
    f.seek(16 + (count - n) * rows * cols)
    pixels = f.read(n * rows * cols)
with gzip.open(os.path.join(data, "train-labels-idx1-ubyte.gz")) as f:
    f.seek(8 + count - n)
    labels = f.read(n)
def npy(path, descr, shape, payload):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload)
os.makedirs(dst, exist_ok=True)
npy(os.path.join(dst, "images.npy"), "<f4", (n, 1, rows, cols), struct.pack(f"<{len(pixels)}f", *(p / 255 for p in pixels)))
npy(os.path.join(dst, "labels.npy"), "<i8", (n,), struct.pack(f"<{n}q", *labels))
PY

# One engine per precision and batch; the INT8 ones share one calibration (the cache file) and
# keep in float the layers that would cost more than 0.3 points of top-1 on the guard's images.
for p in fp32 int8; do
  q=()
  [ "$p" = int8 ] && q=(--int8 --calib "$data" --calib-cache "$out/calib_cache.json"
                       --validate "$out/guard" --accuracy-budget 0.3)
  for b in 256 1; do
    opts=(--batch "$b" "${build[@]}" "${q[@]}")
    echo "== kiln optimize ${opts[*]}"
    "$kiln" optimize "$out/lenet5.onnx" -o "$out/lenet5_${p}_b$b.kiln" "${opts[@]}"
  done
  "$kiln" inspect "$out/lenet5_${p}_b256.kiln" --json > "$out/inspect_$p.json"
  echo "== kiln eval lenet5_${p}_b256.kiln (test set)"
  "$kiln" eval "$out/lenet5_${p}_b256.kiln" --data "$data" --json "$out/eval_$p.json" > "$out/eval_$p.txt"
  if [ "$p" = fp32 ]; then cat "$out/eval_$p.txt"; else sed -n 1p "$out/eval_$p.txt"; fi
  for b in 1 256; do
    echo "== kiln bench lenet5_${p}_b$b.kiln${bench[*]:+ ${bench[*]}}"
    "$kiln" bench "$out/lenet5_${p}_b$b.kiln" "${bench[@]}" --warmup 20 --duration 1 --json "$out/bench_${p}_b$b.json"
  done
done

echo "== summary"
python3 - "$out" "$device" <<'PY' | tee "$out/summary.txt"
import csv, json, os, sys
out, device = sys.argv[1], sys.argv[2]
epochs = [r for r in csv.DictReader(open(f"{out}/metrics.csv")) if r["kind"] == "epoch"]
train_s = sum(float(r["seconds"]) for r in epochs)
print(f"LeNet-5 trained on {device}: {len(epochs)} epochs in {train_s:.0f} s, "
      f"validation accuracy {100 * float(epochs[-1]['val_accuracy']):.2f}%; curves: {out}/curves.svg")
def size(path):
    n = os.path.getsize(path)
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"
# What each engine holds (kiln inspect): the builder keeps float where no INT8 kernel is faster.
LAYERS = {"Conv", "FusedConv", "NhwcConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul"}
INT8 = {"QConv", "NhwcQConv", "QMatMul"}
def holds(p):
    ops = [s["op"].removeprefix("kiln.") for s in json.load(open(f"{out}/inspect_{p}.json"))["steps"]]
    n8, total = sum(o in INT8 for o in ops), sum(o in LAYERS | INT8 for o in ops)
    if p == "int8" and n8 == 0:
        return "float (INT8 was not faster here)"
    return f"INT8 in {n8} of {total} layers" if n8 else "float32"
rows = [("engine", "holds", "test top-1", "engine size", "latency, batch 1 (median)", "throughput, batch 256")]
acc = {}
for p in ("fp32", "int8"):
    acc[p] = json.load(open(f"{out}/eval_{p}.json"))["accuracy"]
    b1, b256 = (json.load(open(f"{out}/bench_{p}_b{b}.json")) for b in (1, 256))
    rows.append((p.upper(), holds(p), f"{100 * acc[p]:.2f}%", size(f"{out}/lenet5_{p}_b1.kiln"),
                 f"{b1['latency_ms']['median']:.3f} ms", f"{b256['throughput_samples_per_s']:,.0f} images/s"))
widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
for r in rows:
    print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
print(f"INT8 - FP32: {100 * (acc['int8'] - acc['fp32']):+.2f} points of top-1 on the 10,000 test images")
PY
