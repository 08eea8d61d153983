#!/usr/bin/env python3
"""Kiln next to PyTorch eager and torch.compile, on one GPU, in one run (bench/peers.sh runs it).

Exports torchvision ResNet-50 and MobileNetV2 (and LeNet-5) with PyTorch at opset 17, builds Kiln
engines with `kiln bench` (FP32 and --fp16, batch 1 and 256), and times PyTorch on the same
device: eager FP32 (its default, TF32 convolutions), eager FP16 channels-last, torch.compile FP16.
Every figure is the median of per-iteration CUDA-event times over device-resident tensors (Kiln:
`kiln bench --no-transfers`, its "GPU compute" median), so host copies are left out on both sides.
Batch-1 figures are latencies in ms, batch-256 figures throughputs in images/s.

Writes peers.json and peers.md (the table) to --out and prints the table last.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torchvision


class LeNet5(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = torch.nn.Conv2d(6, 16, 5)
        self.f1 = torch.nn.Linear(16 * 5 * 5, 120)
        self.f2 = torch.nn.Linear(120, 84)
        self.f3 = torch.nn.Linear(84, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        return self.f3(torch.relu(self.f2(torch.relu(self.f1(x)))))


MODELS = {
    "resnet50": (lambda: torchvision.models.resnet50(), (3, 224, 224)),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(), (3, 224, 224)),
    "lenet5": (LeNet5, (1, 28, 28)),
}


def cuda_median_ms(fn, x, iters, warmup=10):
    with torch.inference_mode():
        for _ in range(warmup):
            fn(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(x)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def figure(ms, batch):
    return ms if batch == 1 else batch * 1000.0 / ms


def kiln_bench(kiln, onnx_path, batch, fp16, out, cache):
    js = os.path.join(out, f"kiln_{os.path.basename(onnx_path)}_{batch}_{'fp16' if fp16 else 'fp32'}.json")
    cmd = [kiln, "bench", onnx_path, "--device", "gpu", "--batch", str(batch), "--cuda-graph", "--no-transfers",
           "--duration", "2", "--json", js, "--timing-cache", cache] + (["--fp16"] if fp16 else [])
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(os.path.join(out, "kiln_bench.log"), "a") as log:
        log.write(" ".join(cmd) + "\n" + r.stdout + r.stderr + "\n")
    if r.returncode != 0:
        print(f"kiln bench failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}", file=sys.stderr)
        return None
    with open(js) as f:
        j = json.load(f)
    print(f"  kiln {os.path.basename(onnx_path)} b{batch} {'fp16' if fp16 else 'fp32'}: "
          f"{j['gpu_compute_ms']['median']:.4f} ms ({time.time() - t0:.0f} s incl. build)", flush=True)
    return j["gpu_compute_ms"]["median"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="resnet50,mobilenet_v2,lenet5")
    ap.add_argument("--batches", default="1,256")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--compile-mode-b1", default="reduce-overhead")
    ap.add_argument("--compile-mode-large", default="max-autotune-no-cudagraphs")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--compile-only", default="", help="e.g. resnet50:256,lenet5:1 - torch.compile only these")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cudnn.benchmark = True
    dev = torch.cuda.get_device_name(0)
    rows, results = [], {"device": dev, "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__}
    cache = os.path.join(a.out, "timing_cache.json")
    for name in a.models.split(","):
        make, chw = MODELS[name]
        model = make().eval().cuda()
        onnx_path = os.path.join(a.out, f"{name}.onnx")
        torch.onnx.export(model, torch.randn(1, *chw, device="cuda"), onnx_path, opset_version=17,
                          input_names=["input"], output_names=["logits"], dynamic_axes={"input": {0: "batch"}},
                          dynamo=False)
        batches = [1] if name == "lenet5" else [int(b) for b in a.batches.split(",")]
        for batch in batches:
            x32 = torch.randn(batch, *chw, device="cuda")
            iters = a.iters if batch == 1 else max(10, a.iters // 5)
            r = {"model": name, "batch": batch}
            r["eager_fp32"] = figure(cuda_median_ms(model.float(), x32, iters), batch)
            m16 = make().eval().cuda().half().to(memory_format=torch.channels_last)
            x16 = x32.half().to(memory_format=torch.channels_last)
            r["eager_fp16"] = figure(cuda_median_ms(m16, x16, iters), batch)
            wanted = not a.compile_only or f"{name}:{batch}" in a.compile_only.split(",")
            if not a.no_compile and wanted:
                mode = a.compile_mode_b1 if batch == 1 else a.compile_mode_large
                t0 = time.time()
                c16 = torch.compile(m16, mode=mode)
                r["compile_fp16"] = figure(cuda_median_ms(c16, x16, iters, warmup=5), batch)
                r["compile_mode"] = mode
                print(f"  torch.compile {name} b{batch} ({mode}): {time.time() - t0:.0f} s", flush=True)
                torch._dynamo.reset()
            for fp16 in (False, True):
                ms = kiln_bench(a.kiln, onnx_path, batch, fp16, a.out, cache)
                r["kiln_fp16" if fp16 else "kiln_fp32"] = figure(ms, batch) if ms else None
            rows.append(r)
            print(json.dumps(r), flush=True)
    results["rows"] = rows
    with open(os.path.join(a.out, "peers.json"), "w") as f:
        json.dump(results, f, indent=1)

    def fmt(v, batch):
        if v is None:
            return "failed"
        return f"{v:.3f} ms" if batch == 1 else f"{v:,.0f} img/s"

    lines = [f"Device: {dev}; {results['date']}; PyTorch {torch.__version__}; medians of CUDA-event times.", "",
             "| model | batch | eager FP32 | Kiln FP32 | eager FP16 | torch.compile FP16 | Kiln FP16 | Kiln FP16 vs compile |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r["batch"]
        comp = r.get("compile_fp16")
        ratio = ""
        if comp and r.get("kiln_fp16"):
            ratio = f"{(comp / r['kiln_fp16']) if b == 1 else (r['kiln_fp16'] / comp):.2f}x"
        lines.append(f"| {r['model']} | {b} | {fmt(r['eager_fp32'], b)} | {fmt(r.get('kiln_fp32'), b)} | "
                     f"{fmt(r['eager_fp16'], b)} | {fmt(comp, b) if comp else '-'} ({r.get('compile_mode', '')}) | "
                     f"{fmt(r.get('kiln_fp16'), b)} | {ratio} |")
    table = "\n".join(lines)
    with open(os.path.join(a.out, "peers.md"), "w") as f:
        f.write(table + "\n")
    print("\n" + table)


if __name__ == "__main__":
    main()
