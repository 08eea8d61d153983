#!/usr/bin/env python3
"""INT8 on the GPU (bench/int8_gpu.sh runs it on the GPU machine): build time, speed against Kiln's
own FP16 engines, the per-layer profile, and agreement with the CPU INT8 engine.

For ResNet-50 and MobileNetV2 (torchvision topology, exported by PyTorch at opset 17):
  - `kiln optimize --device gpu --int8 --calib DIR --batch 256` with 512 calibration images (random
    ImageNet-normalized data: the figure is the build time, not accuracy), timed, writing a
    calibration cache;
  - `kiln bench --cuda-graph --no-transfers` for FP16, INT8 and --best (INT8 forced, and as the
    builder's timed INT8-or-float16 choice leaves it) at batch 1 and 256,
    reusing that cache;
  - `kiln bench --profile` of the INT8 ResNet-50 at batch 256;
  - the GPU INT8 engine against a CPU INT8 engine built from the same cache on 8 images: the INT8
    kernels agree to one quantization step (the channels-last cuDNN kernels round their epilogue in
    their own order), float steps between them to rounding, so a small difference;
  - the peer, in the same run: torch.compile (default mode) of the FP16 channels-last model, the
    figure the issue's "2.5x the FP16 torch.compile throughput" is measured against (--no-compile
    skips it).
Writes int8_gpu.json and int8_gpu.md to --out and prints the table.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import cuda_median_ms, figure  # noqa: E402

MODELS = {"resnet50": torchvision.models.resnet50, "mobilenet_v2": torchvision.models.mobilenet_v2}


def run(cmd, log):
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write(" ".join(cmd) + f"\n[{time.time() - t0:.1f} s, exit {r.returncode}]\n" + r.stdout + r.stderr + "\n")
    if r.returncode != 0:
        print(f"FAILED: {' '.join(cmd)}\n{r.stderr[-3000:]}", file=sys.stderr)
    return r, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    ap.add_argument("--batches", default="1,256")
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = os.path.join(a.out, "int8_gpu.log")
    rng = np.random.default_rng(0)
    calib = os.path.join(a.out, "calib")
    os.makedirs(calib, exist_ok=True)
    for i in range(8):  # 8 stacks of 64: 512 images
        np.save(os.path.join(calib, f"{i}.npy"), rng.normal(0, 1, (64, 3, 224, 224)).astype(np.float32))
    results = {"device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "rows": []}
    lines = []
    for name in a.models.split(","):
        model = MODELS[name]().eval()
        onnx_path = os.path.join(a.out, f"{name}.onnx")
        torch.onnx.export(model, torch.randn(1, 3, 224, 224), onnx_path, opset_version=17, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "batch"}}, dynamo=False)
        cache = os.path.join(a.out, f"{name}_calib.json")
        tcache = os.path.join(a.out, "timing_cache.json")
        engine = os.path.join(a.out, f"{name}_int8_b256.kiln")
        r, build_s = run([a.kiln, "optimize", onnx_path, "--device", "gpu", "--batch", "256", "--int8", "--force-int8",
                          "--calib", calib,
                          "--calib-cache", cache, "--timing-cache", tcache, "-v", "-o", engine], log)
        row = {"model": name, "int8_build_s": build_s if r.returncode == 0 else None}
        print(f"{name}: INT8 build (batch 256, 512 calibration images) {build_s:.1f} s", flush=True)
        for batch in [int(b) for b in a.batches.split(",")]:
            if not a.no_compile:
                m16 = MODELS[name]().eval().cuda().half().to(memory_format=torch.channels_last)
                x16 = torch.randn(batch, 3, 224, 224, device="cuda").half().to(memory_format=torch.channels_last)
                t0 = time.time()
                c16 = torch.compile(m16)
                row[f"compile_b{batch}"] = figure(cuda_median_ms(c16, x16, 50 if batch == 1 else 20, warmup=5), batch)
                print(f"  torch.compile FP16 batch {batch}: {row[f'compile_b{batch}']} ({time.time() - t0:.0f} s)",
                      flush=True)
                torch._dynamo.reset()
                del m16, c16
            # int8 / best: the INT8 kernels themselves (--force-int8); auto: what `--best` builds
            # after timing INT8 against float16 (bench/../src/build/engine_timing.h). A timing
            # cache per precision, as separate builds would have. (Before timing-cache format 2 a
            # --best build that read the --int8 build's cache took the verdicts of close calls
            # made in the --int8 engine, and measured 0.250 ms at batch 1 where fresh --best builds
            # measured 0.245-0.247 ms: session 22. The cache now keeps verdicts per engine.)
            tcaches = {"fp16": os.path.join(a.out, f"{name}_timing_fp16.json"), "int8": tcache,
                       "best": os.path.join(a.out, f"{name}_timing_best.json")}
            tcaches["auto"] = tcaches["best"]
            for mode, flags in (("fp16", ["--fp16"]), ("int8", ["--int8", "--force-int8", "--calib-cache", cache]),
                                ("best", ["--best", "--force-int8", "--calib-cache", cache]),
                                ("auto", ["--best", "--calib-cache", cache])):
                js = os.path.join(a.out, f"{name}_{mode}_b{batch}.json")
                r, _ = run([a.kiln, "bench", onnx_path, "--device", "gpu", "--batch", str(batch), "--cuda-graph",
                            "--no-transfers", "--duration", "2", "--timing-cache", tcaches[mode], "--json", js] + flags,
                           log)
                ms = json.load(open(js))["gpu_compute_ms"]["median"] if r.returncode == 0 else None
                row[f"{mode}_b{batch}"] = ms if ms is None or batch == 1 else batch * 1000 / ms
                choice = [l for l in r.stderr.splitlines() if "per run on this GPU" in l]
                if mode == "auto":
                    row[f"auto_choice_b{batch}"] = choice[0] if choice else "no choice made"
                print(f"  {mode} batch {batch}: {row[f'{mode}_b{batch}']}" + (f" ({choice[0]})" if choice else ""),
                      flush=True)
        if name == "resnet50":
            r, _ = run([a.kiln, "bench", engine, "--profile", "--duration", "2", "--no-transfers"], log)
            with open(os.path.join(a.out, "resnet50_int8_profile.txt"), "w") as f:
                f.write(r.stdout)
        # GPU vs CPU INT8 engines from the same calibration cache, on 8 images.
        x = rng.normal(0, 1, (8, 3, 224, 224)).astype(np.float32)
        xin = os.path.join(a.out, "x8.npy")
        np.save(xin, x)
        outs = {}
        for dev in ("gpu", "cpu"):
            e = os.path.join(a.out, f"{name}_int8_b8_{dev}.kiln")
            run([a.kiln, "optimize", onnx_path, "--device", dev, "--batch", "8", "--int8", "--calib-cache", cache,
                 "-o", e] + (["--force-int8"] if dev == "gpu" else []), log)
            od = os.path.join(a.out, f"out_{name}_{dev}")
            run([a.kiln, "run", e, "--input", f"input={xin}", "--outputs", od], log)
            outs[dev] = np.load(os.path.join(od, "output_0.npy"))
        diff = float(np.abs(outs["gpu"] - outs["cpu"]).max() / np.abs(outs["cpu"]).max())
        agree = float(np.mean(outs["gpu"].argmax(1) == outs["cpu"].argmax(1)))
        row["gpu_vs_cpu_int8_rel_err"], row["gpu_vs_cpu_top1_agree"] = diff, agree
        print(f"  GPU vs CPU INT8: max rel err {diff:.3g}, top-1 agreement {agree:.3f}", flush=True)
        results["rows"].append(row)

    def f(v, b):
        return "failed" if v is None else (f"{v:.3f} ms" if b == 1 else f"{v:,.0f} img/s")

    lines = [f"Device: {results['device']}; {results['date']}; kiln bench --cuda-graph --no-transfers medians.", "",
             "| model | batch | torch.compile FP16 | Kiln FP16 | Kiln INT8 (forced) | Kiln --best (forced) |"
             " Kiln --best (timed choice) | best vs compile | INT8 build (b256, 512 images) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        for b in [int(x) for x in a.batches.split(",")]:
            comp, best = r.get(f"compile_b{b}"), r.get(f"best_b{b}")
            ratio = "-" if not comp or not best else f"{(comp / best if b == 1 else best / comp):.2f}x"
            build = "failed" if r["int8_build_s"] is None else f"{r['int8_build_s']:.1f} s"
            lines.append(f"| {r['model']} | {b} | {f(comp, b) if comp else '-'} | {f(r.get(f'fp16_b{b}'), b)} | "
                         f"{f(r.get(f'int8_b{b}'), b)} | {f(best, b)} | {f(r.get(f'auto_b{b}'), b)} | {ratio} | "
                         f"{build} |")
    table = "\n".join(lines)
    json.dump(results, open(os.path.join(a.out, "int8_gpu.json"), "w"), indent=1)
    open(os.path.join(a.out, "int8_gpu.md"), "w").write(table + "\n")
    print("\n" + table)


if __name__ == "__main__":
    main()
