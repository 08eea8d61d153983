#!/usr/bin/env python3
"""What the op types Kiln imports as function bodies cost on the CPU, next to onnxruntime's own
kernels for them, in the same run: GridSample (a spatial transformer's sampling), RoiAlign (Faster
R-CNN's box head input) and STFT (a speech front end). Kiln: `kiln bench --device cpu`, median
latency; onnxruntime: median of timed runs after warm-up; both with the same thread count.

  bench/micro/bodies_cpu.py --kiln build/kiln [--threads 2]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper


def grid_sample(mode):
    g = h.make_graph([h.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, align_corners=0)],
                     f"grid_sample_{mode}",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 32, 64, 64]),
                      h.make_tensor_value_info("grid", T.FLOAT, [1, 64, 64, 2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 32, 64, 64])])
    rng = np.random.default_rng(0)
    return (h.make_model(g, opset_imports=[h.make_opsetid("", 16)], ir_version=8),
            {"x": rng.standard_normal((1, 32, 64, 64)).astype(np.float32),
             "grid": rng.uniform(-1, 1, (1, 64, 64, 2)).astype(np.float32)})


def roi_align():
    g = h.make_graph([h.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=7, output_width=7,
                                  sampling_ratio=2, spatial_scale=1 / 16)], "roi_align",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 256, 50, 68]),
                      h.make_tensor_value_info("rois", T.FLOAT, [100, 4]),
                      h.make_tensor_value_info("batch", T.INT64, [100])],
                     [h.make_tensor_value_info("y", T.FLOAT, [100, 256, 7, 7])])
    rng = np.random.default_rng(1)
    xy = rng.uniform(0, 700, (100, 2))
    wh = rng.uniform(16, 300, (100, 2))
    rois = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    return (h.make_model(g, opset_imports=[h.make_opsetid("", 16)], ir_version=8),
            {"x": rng.standard_normal((1, 256, 50, 68)).astype(np.float32), "rois": rois,
             "batch": np.zeros(100, np.int64)})


def stft():
    inits = [numpy_helper.from_array(np.array(160, np.int64), "step"),
             numpy_helper.from_array(np.hanning(400).astype(np.float32), "window")]
    g = h.make_graph([h.make_node("STFT", ["audio", "step", "window"], ["spec"])], "stft",
                     [h.make_tensor_value_info("audio", T.FLOAT, [1, 16000, 1])],
                     [h.make_tensor_value_info("spec", T.FLOAT, [1, 98, 201, 2])], inits)
    rng = np.random.default_rng(2)
    return (h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8),
            {"audio": rng.standard_normal((1, 16000, 1)).astype(np.float32)})


def ort_median_ms(path, feeds, threads, seconds=2.0):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for _ in range(10):
        sess.run(None, feeds)
    times, start = [], time.perf_counter()
    while len(times) < 50 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def kiln_median_ms(kiln, path, threads, tmp):
    out = os.path.join(tmp, "bench.json")
    p = subprocess.run([kiln, "bench", path, "--device", "cpu", "--threads", str(threads), "--json", out],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip() or p.stdout.strip())
    with open(out) as f:
        return json.load(f)["latency_ms"]["median"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    cases = [("GridSample bilinear 32x64x64", grid_sample("bilinear")),
             ("GridSample bicubic 32x64x64", grid_sample("bicubic")),
             ("RoiAlign 100 boxes 256x7x7", roi_align()),
             ("STFT 1 s of 16 kHz, 400/160", stft())]
    print(f"| op (CPU, {args.threads} threads) | onnxruntime | Kiln | Kiln vs onnxruntime |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, feeds) in cases:
            path = os.path.join(tmp, "model.onnx")
            onnx.save(model, path)
            o = ort_median_ms(path, feeds, args.threads)
            k = kiln_median_ms(args.kiln, path, args.threads, tmp)
            print(f"| {name} | {o:.3f} ms | {k:.3f} ms | {o / k:.2f}x |")


if __name__ == "__main__":
    main()
