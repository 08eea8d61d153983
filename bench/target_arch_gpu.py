#!/usr/bin/env python3
"""Kiln on a Jetson's kernels, measured on the H100/H200 (bench/target_arch_gpu.sh runs it there).

`kiln optimize --target-arch sm_87` builds an engine that uses only the kernels a compute
capability 8.7 GPU (Jetson Orin) has: Kiln's mma.sync/cp.async kernels compiled for this GPU, no
wgmma, clusters, TMA or programmatic dependent launch, at most 163 KiB of shared memory per block.
cuDNN and cuBLASLt still pick their kernels for the GPU they run on (on the board, their sm_87 ones).

For ResNet-50 and MobileNetV2 (torchvision, opset 17) at batch 1 and 256: `kiln bench --cuda-graph
--no-transfers` of FP16 and --best (INT8 forced: the INT8 kernels themselves), with and without
--target-arch sm_87, from one calibration cache (512 random images). Then an Orin estimate from the
engine's work: the multiply-adds of its convolutions and GEMMs (from the ONNX model's shapes) and
the bytes an inference moves at least (weights once, every activation written once and read once,
from `kiln inspect`), against AGX Orin's and Orin Nano's GPU peaks: a lower bound, labelled an
estimate. Writes target_arch.json and target_arch.md to --out and prints the table.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import torch
import torchvision
from onnx import shape_inference

MODELS = {"resnet50": torchvision.models.resnet50, "mobilenet_v2": torchvision.models.mobilenet_v2}

# Orin's GPU (NVIDIA's Jetson AGX Orin and Orin Nano data sheets): dense tensor throughput (the
# sheets' sparse INT8 TOPS halved; FP16 half of dense INT8) and memory bandwidth.
ORIN = {
    "AGX Orin 64GB": {"int8_tops": 85.0, "fp16_tflops": 42.5, "gb_s": 204.8},
    "Orin Nano 8GB": {"int8_tops": 10.0, "fp16_tflops": 5.0, "gb_s": 68.0},
}


def run(cmd, log):
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write(" ".join(cmd) + f"\n[{time.time() - t0:.1f} s, exit {r.returncode}]\n" + r.stdout + r.stderr + "\n")
    if r.returncode != 0:
        print(f"FAILED: {' '.join(cmd)}\n{r.stderr[-2000:]}", file=sys.stderr)
    return r


def macs_per_image(path):
    """Multiply-adds of the model's Conv, Gemm and MatMul nodes for one image."""
    m = shape_inference.infer_shapes(onnx.load(path))
    shapes = {}
    for v in list(m.graph.value_info) + list(m.graph.output) + list(m.graph.input):
        shapes[v.name] = [d.dim_value or 1 for d in v.type.tensor_type.shape.dim]
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)
    total = 0
    for n in m.graph.node:
        if n.op_type == "Conv":
            w, y = shapes[n.input[1]], shapes[n.output[0]]
            total += int(np.prod(y)) * int(np.prod(w[1:]))
        elif n.op_type in ("Gemm", "MatMul"):
            a, y = shapes[n.input[0]], shapes[n.output[0]]
            total += int(np.prod(y)) * a[-1]
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    ap.add_argument("--batches", default="1,256")
    ap.add_argument("--duration", default="1")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = os.path.join(a.out, "target_arch.log")
    rng = np.random.default_rng(0)
    calib = os.path.join(a.out, "calib")
    os.makedirs(calib, exist_ok=True)
    for i in range(8):  # 8 stacks of 64: 512 images
        np.save(os.path.join(calib, f"{i}.npy"), rng.normal(0, 1, (64, 3, 224, 224)).astype(np.float32))
    res = {"device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "rows": [], "estimates": []}
    batches = [int(b) for b in a.batches.split(",")]
    for name in a.models.split(","):
        onnx_path = os.path.join(a.out, f"{name}.onnx")
        torch.onnx.export(MODELS[name]().eval(), torch.randn(1, 3, 224, 224), onnx_path, opset_version=17,
                          input_names=["input"], output_names=["logits"], dynamic_axes={"input": {0: "batch"}},
                          dynamo=False)
        cache = os.path.join(a.out, f"{name}_calib.json")
        run([a.kiln, "optimize", onnx_path, "--device", "gpu", "--int8", "--force-int8", "--calib", calib,
             "--calib-cache", cache, "-o", os.path.join(a.out, "calibrate.kiln")], log)
        for batch in batches:
            for arch in ("", "sm_87"):
                for mode, flags in (("fp16", ["--fp16"]), ("best", ["--best", "--force-int8", "--calib-cache", cache])):
                    tag = f"{name}_{mode}_b{batch}{'_' + arch if arch else ''}"
                    engine = os.path.join(a.out, tag + ".kiln")
                    t0 = time.time()
                    r = run([a.kiln, "optimize", onnx_path, "--device", "gpu", "--batch", str(batch), "-o", engine] +
                            flags + (["--target-arch", arch] if arch else []), log)
                    build_s = time.time() - t0
                    js = os.path.join(a.out, tag + ".json")
                    ms = None
                    if r.returncode == 0 and run([a.kiln, "bench", engine, "--cuda-graph", "--no-transfers",
                                                  "--duration", a.duration, "--json", js], log).returncode == 0:
                        ms = json.load(open(js))["gpu_compute_ms"]["median"]
                    row = {"model": name, "batch": batch, "mode": mode, "kernels": arch or "own", "ms": ms,
                           "build_s": build_s}
                    if r.returncode == 0:
                        s = json.loads(run([a.kiln, "inspect", engine, "--json"], log).stdout)
                        row.update(weight_bytes=s["weight_bytes"], activation_bytes=s["activation_bytes"],
                                   kernel_arch=s.get("kernel_arch", 0))
                    res["rows"].append(row)
                    print(f"{tag}: {ms} ms (built in {build_s:.1f} s)", flush=True)
        # The estimate, per image at batch 1: INT8 (--best) engine's bytes, the model's multiply-adds.
        macs = macs_per_image(onnx_path)
        for row in res["rows"]:
            if row["model"] != name or row["batch"] != 1 or row["kernels"] != "sm_87" or "weight_bytes" not in row:
                continue
            moved = row["weight_bytes"] + 2 * row["activation_bytes"]
            for board, p in ORIN.items():
                ops = p["int8_tops"] if row["mode"] == "best" else p["fp16_tflops"]
                compute_ms = 2 * macs / (ops * 1e12) * 1e3
                memory_ms = moved / (p["gb_s"] * 1e9) * 1e3
                res["estimates"].append({"model": name, "mode": row["mode"], "board": board, "gmacs": macs / 1e9,
                                         "mbytes": moved / 1e6, "compute_ms": compute_ms, "memory_ms": memory_ms,
                                         "bound_ms": max(compute_ms, memory_ms)})

    def f(ms, b):
        return "failed" if ms is None else (f"{ms:.3f} ms" if b == 1 else f"{b * 1000 / ms:,.0f} img/s")

    lines = [f"Device: {res['device']}; {res['date']}; kiln bench --cuda-graph --no-transfers medians.", "",
             "| model | batch | mode | this GPU's kernels | sm_87's kernels only | sm_87 vs own |", "|---|---|---|---|---|---|"]
    for name in a.models.split(","):
        for b in batches:
            for mode in ("fp16", "best"):
                get = {r["kernels"]: r for r in res["rows"] if (r["model"], r["batch"], r["mode"]) == (name, b, mode)}
                own, lim = get.get("own", {}).get("ms"), get.get("sm_87", {}).get("ms")
                ratio = f"{lim / own:.2f}x the time" if own and lim else "-"
                lines.append(f"| {name} | {b} | {mode} | {f(own, b)} | {f(lim, b)} | {ratio} |")
    lines += ["", "Orin estimate (a lower bound: the GPU at its dense peak or its memory at full bandwidth, whichever "
              "is slower; batch 1, one image):", "",
              "| model | mode | board | GMACs | MB moved | compute bound | memory bound | estimate |",
              "|---|---|---|---|---|---|---|---|"]
    for e in res["estimates"]:
        lines.append(f"| {e['model']} | {e['mode']} | {e['board']} | {e['gmacs']:.2f} | {e['mbytes']:.1f} | "
                     f"{e['compute_ms']:.3f} ms | {e['memory_ms']:.3f} ms | >= {e['bound_ms']:.3f} ms |")
    table = "\n".join(lines)
    json.dump(res, open(os.path.join(a.out, "target_arch.json"), "w"), indent=1)
    open(os.path.join(a.out, "target_arch.md"), "w").write(table + "\n")
    print("\n" + table)


if __name__ == "__main__":
    main()
