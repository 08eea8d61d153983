#!/usr/bin/env python3
"""Range engines against fixed ones, on the GPU machine (issue 38; bench/ranges.sh runs it).

ResNet-50 (torchvision, random weights, a dynamic batch axis) built `--best --batch 1..64` and at
the fixed batches 1, 8 and 64; a BERT-base-shaped encoder (bench/sweep_models.py: 12 layers, d 768,
a padding mask) built `--fp16 --shape input_ids=1x1..512` (buckets 32, 64, 128, 256, 384, 512) and
at fixed lengths; 100 tokens run on the bucket of 128, padded, the padding masked. Every engine is
timed by `kiln bench --cuda-graph --no-transfers` (median GPU compute), the range engine at each
size with `--batch N` / `--shape`, next to the fixed engine of that size, alternating. Build times
are wall-clock `kiln optimize` runs, each with a timing cache of its own (none to start with) and
one calibration cache for all INT8 builds, so that every engine has the same INT8 scales.
Prints a table; JSON to OUT/ranges.json.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_models import Bert  # noqa: E402


def export_resnet50(path):
    import torchvision
    torch.manual_seed(0)
    m = torchvision.models.resnet50()
    for bn in (x for x in m.modules() if isinstance(x, torch.nn.BatchNorm2d)):  # real-looking statistics
        bn.reset_running_stats()
        bn.momentum = None
    with torch.no_grad():
        m.train()
        m(torch.randn(8, 3, 224, 224))
    m.eval()
    torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), path, opset_version=17, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      dynamo=False)


def export_bert(path):
    torch.manual_seed(0)
    m = Bert().eval()
    ids = torch.randint(0, 30522, (1, 128))
    mask = torch.ones(1, 128, dtype=torch.int64)
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "hidden": {0: "batch", 1: "seq"}, "pooled": {0: "batch"}}
    torch.onnx.export(m, (ids, mask), path, opset_version=17, input_names=["input_ids", "attention_mask"],
                      output_names=["hidden", "pooled"], dynamic_axes=axes, dynamo=False)


def run(cmd, log):
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write(" ".join(cmd) + "\n" + r.stdout + r.stderr + "\n")
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return time.time() - t0, r.stdout


def optimize(a, onnx, engine, args, cache=None):
    """Builds with a timing cache of its own: empty, or a copy of `cache` (then the layers it has
    timed are not timed again: the same kernel choices)."""
    own = engine + ".timing.json"
    if os.path.exists(own):
        os.remove(own)
    if cache:
        shutil.copy(cache, own)
    s, out = run([a.kiln, "optimize", onnx, "-o", engine, "--device", "gpu", "--timing-cache", own] + args, a.log)
    print(f"  built {os.path.basename(engine)} in {s:.1f} s", flush=True)
    return s


def bench(a, engine, args):
    js = engine + ".bench.json"
    run([a.kiln, "bench", engine, "--cuda-graph", "--no-transfers", "--duration", str(a.duration), "--json", js]
        + args, a.log)
    with open(js) as f:
        return json.load(f)["gpu_compute_ms"]["median"]


def compare(a, name, range_engine, sizes, fixed_engine_of, size_args, rounds, same_of=None):
    """Range engine against the fixed engine of each size (built on its own), and, with same_of,
    against a fixed engine built with the range engine's timing cache (its kernel choices)."""
    rows = []
    for n in sizes:
        r_ms, f_ms, s_ms = [], [], []
        for _ in range(rounds):  # alternating, medians of the rounds
            r_ms.append(bench(a, range_engine, size_args(n)))
            f_ms.append(bench(a, fixed_engine_of(n), []))
            if same_of:
                s_ms.append(bench(a, same_of(n), []))
        r, f = float(np.median(r_ms)), float(np.median(f_ms))
        row = {"model": name, "size": n, "range_ms": r, "fixed_ms": f, "ratio": r / f}
        if same_of:
            row["same_tactics_ms"] = float(np.median(s_ms))
            row["ratio_same_tactics"] = r / row["same_tactics_ms"]
        rows.append(row)
        print(f"  {name} {n}: range {r:.4f} ms, fixed {f:.4f} ms, range/fixed {r / f:.3f}"
              + (f", same tactics {row['same_tactics_ms']:.4f} ms, {row['ratio_same_tactics']:.3f}" if same_of else ""),
              flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    a.log = os.path.join(a.out, "ranges.log")
    res = {"device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "builds": [], "latency": []}
    if "resnet50" in a.models:
        onnx = os.path.join(a.out, "resnet50.onnx")
        export_resnet50(onnx)
        calib = os.path.join(a.out, "calib")
        os.makedirs(calib, exist_ok=True)
        rng = np.random.default_rng(0)
        for i in range(4):
            np.save(os.path.join(calib, f"x{i}.npy"), rng.standard_normal((8, 3, 224, 224)).astype(np.float32))
        best = ["--best", "--calib", calib, "--calib-cache", os.path.join(a.out, "resnet50.calib.json")]
        fixed = {}
        for b in (1, 8, 64):
            fixed[b] = os.path.join(a.out, f"resnet50_b{b}.kiln")
            s = optimize(a, onnx, fixed[b], best + ["--batch", str(b)])
            res["builds"].append({"model": "resnet50", "engine": f"--best --batch {b}", "s": s})
        rng_engine = os.path.join(a.out, "resnet50_1-64.kiln")
        s = optimize(a, onnx, rng_engine, best + ["--batch", "1..64"])
        res["builds"].append({"model": "resnet50", "engine": "--best --batch 1..64 (7 buckets)", "s": s,
                              "bytes": os.path.getsize(rng_engine), "fixed_b64_bytes": os.path.getsize(fixed[64])})
        res["latency"] += compare(a, "resnet50 --best", rng_engine, (1, 8, 64), lambda n: fixed[n],
                                  lambda n: ["--batch", str(n)], a.rounds)
    if "bert" in a.models:
        onnx = os.path.join(a.out, "bert.onnx")
        export_bert(onnx)
        fixed = {}
        for t in (32, 100, 128, 384):
            fixed[t] = os.path.join(a.out, f"bert_t{t}.kiln")
            s = optimize(a, onnx, fixed[t], ["--fp16", "--shape", f"input_ids=1x{t}"])
            res["builds"].append({"model": "bert", "engine": f"--fp16 --shape input_ids=1x{t}", "s": s})
        rng_engine = os.path.join(a.out, "bert_1-512.kiln")
        buckets = "32,64,128,256,384,512"
        s = optimize(a, onnx, rng_engine, ["--fp16", "--shape", "input_ids=1x1..512", "--buckets", buckets])
        res["builds"].append({"model": "bert", "engine": f"--fp16 --shape input_ids=1x1..512 --buckets {buckets}",
                              "s": s, "bytes": os.path.getsize(rng_engine)})
        # The same fixed engines again, their kernels chosen from the range build's timings: the
        # range machinery's own cost, apart from choices that differ between any two builds.
        same = {}
        for t in (32, 128, 384):
            same[t] = os.path.join(a.out, f"bert_t{t}_same.kiln")
            optimize(a, onnx, same[t], ["--fp16", "--shape", f"input_ids=1x{t}"], cache=rng_engine + ".timing.json")
        same[100] = fixed[100]  # no bucket of 100: the padded run against the exact engine
        # 100 tokens run padded to the bucket of 128, their padding masked.
        res["latency"] += compare(a, "bert-base --fp16", rng_engine, (32, 100, 128, 384), lambda t: fixed[t],
                                  lambda t: ["--shape", f"input_ids=1x{t}"], a.rounds, lambda t: same[t])
    with open(os.path.join(a.out, "ranges.json"), "w") as f:
        json.dump(res, f, indent=2)
    print(f"\n{res['device']}, {res['date']}")
    print("| model | size | range engine ms | fixed engine ms | range / fixed | fixed, same kernels ms | range / that |")
    print("|---|---|---|---|---|---|---|")
    for r in res["latency"]:
        same = (f"{r['same_tactics_ms']:.4f} | {r['ratio_same_tactics']:.3f}" if "same_tactics_ms" in r else "- | -")
        print(f"| {r['model']} | {r['size']} | {r['range_ms']:.4f} | {r['fixed_ms']:.4f} | {r['ratio']:.3f} | {same} |")
    print("\n| build | s |\n|---|---|")
    for b in res["builds"]:
        print(f"| {b['model']} {b['engine']} | {b['s']:.1f} |")


if __name__ == "__main__":
    main()
