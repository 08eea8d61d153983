#!/usr/bin/env python3
"""Calibration methods against an independent numpy implementation, through the command line.

A model whose first op reads the input x is calibrated on .npy batches (Laplace-distributed, of
growing scale, so the histogram's bin width doubles twice) with each --calib-method; the range
Kiln chose for x is read from the calibration cache and compared with numpy's:
  minmax      max |x| exactly;
  percentile  the upper edge of the first bin reaching p% of the counts, exactly;
  entropy     TensorRT's KL-divergence search (written here with np.digitize level assignment, as
              NVIDIA's pytorch-quantization does): Kiln's range must be a minimum of numpy's
              divergence curve (equal up to 1e-9 relative, as the two sums round differently);
  mse         likewise on the squared-error curve.
The histogram itself is numpy's at the final bin width, which follows the rule of calib/stats.h
(width = max|first batch| / 2047, doubled while a batch's max / width >= 2048).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BINS = 2048


def model(path):
    w = numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "calib",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2, 8, 8])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def reference_histogram(batches):
    w = 0.0
    for b in batches:
        m = float(np.abs(b.astype(np.float64)).max())
        if m == 0:
            continue
        if w == 0:
            w = m / (BINS - 1)
        while m / w >= BINS:
            w *= 2
    a = np.abs(np.concatenate([b.ravel() for b in batches]).astype(np.float64))
    idx = np.minimum(np.floor(a / w), BINS - 1).astype(np.int64)
    return np.bincount(idx, minlength=BINS).astype(np.float64), w


def kl_curve(hist):
    bins = hist.copy()
    bins[0] = bins[1]
    out = {}
    for i in range(128, BINS + 1):
        p = bins[:i].copy()
        p[i - 1] += bins[i:].sum()
        level = np.digitize(np.arange(i), np.linspace(0, i, 129)) - 1
        nz = bins[:i] != 0
        sums = np.bincount(level[nz], weights=bins[:i][nz], minlength=128)
        counts = np.bincount(level[nz], minlength=128)
        q = np.zeros(i)
        q[nz] = sums[level[nz]] / counts[level[nz]]
        if q.sum() == 0:
            out[i] = np.inf
            continue
        p, q = p / p.sum(), q / q.sum()
        m = p > 0
        out[i] = np.inf if np.any(q[m] == 0) else float(np.sum(p[m] * np.log(p[m] / q[m])))
    return out


def mse_curve(hist, w):
    c = (np.arange(BINS) + 0.5) * w
    out = {}
    for i in range(128, BINS + 1):
        s = i * w / 127
        q = s * np.minimum(np.round(c / s), 127)
        out[i] = float(np.sum(hist * (c - q) ** 2))
    return out


def is_minimum(curve, i, what):
    best = min(curve.values())
    ok = curve[i] <= best * (1 + 1e-9) + 1e-300
    print(f"  {what}: kiln bin {i}, value {curve[i]:.9g}; numpy minimum {best:.9g} at bin "
          f"{min(curve, key=curve.get)}: {'ok' if ok else 'MISMATCH'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(3)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, "m.onnx")
        model(onnx_path)
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        batches = [rng.laplace(0, s, (4, 3, 8, 8)).astype(np.float32) for s in (0.5, 1.0, 4.0, 1.5)]
        for k, b in enumerate(batches):
            np.save(os.path.join(data, f"{k}.npy"), b)
        hist, w = reference_histogram(batches)
        absmax = float(np.abs(np.concatenate([b.ravel() for b in batches])).max())
        for method, extra in (("minmax", []), ("percentile", []), ("percentile", ["--calib-percentile", "99.9"]),
                              ("entropy", []), ("mse", [])):
            cache = os.path.join(tmp, f"{method}{len(extra)}.json")
            cmd = [a.kiln, "optimize", onnx_path, "-o", os.path.join(tmp, "m.kiln"), "--int8", "--calib", data,
                   "--calib-method", method, "--calib-cache", cache] + extra
            subprocess.run(cmd, check=True, capture_output=True)
            with open(cache) as f:
                c = json.load(f)
            assert c["format"] == "kiln calibration cache" and c["version"] == 1 and c["method"] == method, c
            assert c["samples"] == 16, c["samples"]
            amax = c["tensors"]["x"]["amax"]
            assert abs(c["tensors"]["x"]["scale"] - amax / 127) <= 1e-6 * amax, c["tensors"]["x"]
            print(f"{method} {' '.join(extra)}: amax {amax:.9g} (bin width {w:.6g})")
            if method == "minmax":
                ok = amax == absmax
            elif method == "percentile":
                p = float(extra[1]) if extra else 99.99
                cum = np.cumsum(hist)
                want = min((int(np.argmax(cum >= p / 100 * cum[-1])) + 1) * w, absmax)
                ok = abs(amax - want) <= 1e-12 * want
                print(f"  numpy: {want:.9g}")
            else:
                i = int(round(amax / w))
                assert abs(i * w - amax) <= 1e-9 * amax, "the range is not on a bin edge"
                ok = is_minimum(kl_curve(hist) if method == "entropy" else mse_curve(hist, w), i, method)
            failures += not ok
            if not ok:
                print("  MISMATCH")
    print("all methods match numpy" if failures == 0 else f"{failures} method(s) differ from numpy")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
