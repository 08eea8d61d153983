#!/usr/bin/env python3
"""Exports torchvision classifiers with torch.onnx.export (opset 17, TorchScript exporter) and
checks `kiln optimize` + `kiln run --expect` against onnxruntime on the same input.

Runs where PyTorch and torchvision are installed (the GPU machine; see bench/gpu_check.sh).
Weights are torchvision's random initialisation from a fixed seed (no downloads there): the
graphs are exactly what torch.onnx.export writes for these architectures.
Tolerance: max|kiln - ort| <= tol * max|ort| (norm-wise relative, see tests/python/models_test.py), with
tol 1e-4 on the CPU, 1e-3 for GPU FP32 engines, 1e-2 for GPU FP16 engines (--variants).
"""
import argparse
import re
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torchvision
from onnx import numpy_helper

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "squeezenet1_1", "densenet121",
          "efficientnet_b0", "shufflenet_v2_x1_0", "googlenet", "vgg11", "alexnet", "regnet_y_400mf"]


def export(name, path):
    torch.manual_seed(0)
    kwargs = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    model = getattr(torchvision.models, name)(weights=None, **kwargs)
    # Random initialisation leaves BatchNorm's running statistics at mean 0, variance 1, so some
    # nets (MobileNetV2) end with logits near 1e-9, below float16's range; a trained net does not.
    # One training-mode pass over random images gives the statistics real activations would.
    with torch.no_grad():
        model.train()
        model(torch.randn(16, 3, 224, 224))
    model.eval()
    x = torch.randn(1, 3, 224, 224)
    try:
        torch.onnx.export(model, x, path, opset_version=17, input_names=["input"], output_names=["logits"],
                          dynamo=False)
    except TypeError:  # older torch without the dynamo switch
        torch.onnx.export(model, x, path, opset_version=17, input_names=["input"], output_names=["logits"])
    return x.numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--variants", default="cpu,gpu,gpu-fp16",
                    help="cpu (1e-4), gpu (FP32, 1e-3), gpu-fp16 (1e-2): tolerances relative to max|ort|")
    a = ap.parse_args()
    variants = a.variants.split(",")
    rows, failed = [], 0
    for name in a.models.split(","):
        d = os.path.join(a.out, name)
        data = os.path.join(d, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        x = export(name, path)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        t0 = time.perf_counter()
        (y,) = sess.run(None, {"input": x})
        ort_ms = 1000 * (time.perf_counter() - t0)
        onnx.save_tensor(numpy_helper.from_array(x, "input"), os.path.join(data, "input_0.pb"))
        onnx.save_tensor(numpy_helper.from_array(y, "logits"), os.path.join(data, "output_0.pb"))
        ymax = float(np.abs(y).max())
        results = []
        for v in variants:
            rel = {"cpu": 1e-4, "gpu": 1e-3, "gpu-fp16": 1e-2}[v]
            opts = {"cpu": ["--device", "cpu"], "gpu": ["--device", "gpu"], "gpu-fp16": ["--device", "gpu", "--fp16"]}[v]
            engine = os.path.join(d, f"model_{v}.kiln")
            p1 = subprocess.run([a.kiln, "optimize", path, "-o", engine] + opts, capture_output=True, text=True)
            p2 = subprocess.run([a.kiln, "run", engine, "--inputs", data, "--expect", data, "--rtol", f"{rel}",
                                 "--atol", f"{rel * ymax:.3g}"], capture_output=True, text=True) \
                if p1.returncode == 0 else p1
            ok = p1.returncode == 0 and p2.returncode == 0
            failed += not ok
            m = re.search(r"max abs err ([0-9.e+-]+)", p2.stdout)
            err = f"{float(m.group(1)) / ymax:.1e}" if m else "-"
            results.append(("match" if ok else "FAIL") + f" ({err})")
            detail = (p2.stdout + p2.stderr).strip().replace("\n", " | ")[-300:]
            print(f"{name} {v}: {'match' if ok else 'FAIL'}: {detail}", flush=True)
        nodes = len(onnx.load(path, load_external_data=False).graph.node)
        rows.append((name, nodes, results, f"{ort_ms:.1f}"))
    print("\nKiln vs onnxruntime (CPU, no graph optimizations); in parentheses max|kiln - ort| / max|ort|")
    print("| model | ONNX nodes | " + " | ".join(variants) + " | ORT CPU ms |")
    print("|---|---|" + "---|" * len(variants) + "---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | " + " | ".join(r[2]) + f" | {r[3]} |")
    print(f"{len(rows) * len(variants) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
