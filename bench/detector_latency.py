#!/usr/bin/env python3
"""Detector latency on the GPU: Kiln's engines next to PyTorch eager, same models, same image.

Runs after bench/sweep.py on the GPU machine (bench/sweep.sh with --models of detectors and
--configs gpu,fp16), reading from its work folder each detector's PyTorch model (model.pt, saved
by the export), the image (b1/input.npy) and Kiln's engines (b1/gpu.kiln, b1/fp16.kiln). PyTorch
runs eagerly (a detector's post-processing does not compile), in float32 with its defaults (TF32
convolutions) and in float16 (.half()); the median of --runs timed by torch.cuda.synchronize.
Kiln: `kiln bench --device gpu` (host time of a run: the waits for data-dependent sizes are part
of it). Prints a Markdown table.
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import numpy as np
import torch


def torch_ms(model, x, runs):
    with torch.no_grad():
        for _ in range(5):
            model(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def kiln_ms(kiln, engine):
    p = subprocess.run([kiln, "bench", engine, "--device", "gpu", "--duration", "2"], capture_output=True, text=True)
    m = re.search(r"latency\s+ms\s+min \S+\s+mean \S+\s+median (\S+)", p.stdout)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True, help="bench/sweep.py's --work folder")
    ap.add_argument("--models", required=True)
    ap.add_argument("--runs", type=int, default=50)
    a = ap.parse_args()
    print("| model | PyTorch FP32 | Kiln FP32 | PyTorch FP16 | Kiln FP16 | Kiln FP32 vs PyTorch FP32 |")
    print("|---|---|---|---|---|---|")
    for name in a.models.split(","):
        d = os.path.join(a.work, name)
        model = torch.load(os.path.join(d, "model.pt"), weights_only=False).cuda().eval()
        x = torch.from_numpy(np.load(os.path.join(d, "b1", "input.npy"))).cuda()
        t32 = torch_ms(model, x, a.runs)
        t16 = torch_ms(model.half(), x.half(), a.runs)
        k32 = kiln_ms(a.kiln, os.path.join(d, "b1", "gpu.kiln"))
        k16 = kiln_ms(a.kiln, os.path.join(d, "b1", "fp16.kiln"))
        fmt = lambda v: f"{v:.2f} ms" if v is not None else "-"  # noqa: E731
        ratio = f"{t32 / k32:.2f}x" if k32 else "-"
        print(f"| {name} | {fmt(t32)} | {fmt(k32)} | {fmt(t16)} | {fmt(k16)} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
