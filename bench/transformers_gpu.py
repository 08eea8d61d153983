"""Issue 40's figures on the GPU machine, step by step: BERT-base (128 tokens, padding mask) and
GPT-2-small (128 tokens, causal) by default, or any model of bench/sweep_models.py's full list
by name (--models deepspeech2,gru_bi_3x512: the recurrent ones), exported by PyTorch
(TorchScript exporter, opset 17, random weights), built FP16 by Kiln with and without a pass
(`--ablate fuse-attention`), each timed by `kiln bench --fp16 --cuda-graph --no-transfers` (median
GPU time of the whole engine), with the engine's steps and its error against PyTorch's float32
outputs (max |kiln - torch| over the output's range). Optionally torch.compile (reduce-overhead,
or --compile-mode) in the same run. Writes OUT/transformers.json and prints a table.

  transformers_gpu.py --kiln build-dev/kiln --out DIR [--ablate fuse-attention] [--compile]"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_models import Bert, Gpt2, full_specs, tokens  # noqa: E402

MODELS = {
    "bert_base": (lambda: Bert(), tokens(30522, 128, True), ["input_ids", "attention_mask"], ["hidden", "pooled"]),
    "gpt2_small": (lambda: Gpt2(), tokens(50257, 128, False), ["input_ids"], ["logits"]),
}


def model_entry(name):
    """(builder, inputs, input names, output names, weight init or None) of a model by name (the sweep's
    init: ViT's zero-initialized head would make every output equal)."""
    if name in MODELS:
        return MODELS[name] + (None,)
    for spec in full_specs():
        if spec.name == name:
            return spec.build, spec.inputs, spec.in_names, spec.out_names, spec.init
    raise SystemExit(f"unknown model {name}: not in MODELS nor in sweep_models.full_specs()")


def nonzero_linears(model):
    """Random weights for Linear layers initialized to zeros (torchvision's ViT head): with them every
    output is equal and the error check says nothing."""
    g = torch.Generator().manual_seed(3)
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and not m.weight.any():
            with torch.no_grad():
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.02)


def run(cmd, log):
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write(" ".join(map(str, cmd)) + "\n" + r.stdout + r.stderr + "\n")
    if r.returncode != 0:
        raise RuntimeError(f"failed: {' '.join(map(str, cmd))}\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ablate", action="append", default=[], help="also build without this pass")
    ap.add_argument("--compile", action="store_true", help="torch.compile in the same run")
    ap.add_argument("--compile-mode", default="reduce-overhead",
                    help="torch.compile's mode (issue 40's peer at batch 32: max-autotune-no-cudagraphs)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--verbose", action="store_true", help="kiln optimize -v: the builder's tactic timings in the log")
    ap.add_argument("--profile", action="store_true", help="also write each engine's per-layer profile (kiln bench --profile)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = os.path.join(a.out, "transformers.log")
    res = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(), "batch": a.batch, "models": {}}
    tag = "" if a.batch == 1 else f"_b{a.batch}"
    for name in a.models.split(","):
        make, inputs, in_names, out_names, init = model_entry(name)
        torch.manual_seed(0)
        model = make().eval()
        g = torch.Generator().manual_seed(1)
        example = inputs(a.batch, g)
        if init:
            init(model, example)
        nonzero_linears(model)
        onnx = os.path.join(a.out, name + tag + ".onnx")
        torch.onnx.export(model, example, onnx, opset_version=17, input_names=in_names, output_names=out_names,
                          dynamo=False)
        with torch.no_grad():
            ref = [t.numpy() for t in (lambda y: y if isinstance(y, tuple) else (y,))(model(*example))]
        feed = os.path.join(a.out, name + tag + "_inputs")
        os.makedirs(feed, exist_ok=True)
        for n, t in zip(in_names, example):
            np.save(os.path.join(feed, n + ".npy"), t.numpy())
        row = {}
        for variant, disabled in [("kiln", [])] + [("no " + p, [p]) for p in a.ablate]:
            engine = os.path.join(a.out, f"{name}{tag}_{variant.replace(' ', '_')}.kiln")
            t0 = time.time()
            flags = sum((["--disable-pass", p] for p in disabled), []) + (["-v"] if a.verbose else [])
            run([a.kiln, "optimize", onnx, "-o", engine, "--device", "gpu", "--fp16"] + flags, log)
            build_s = time.time() - t0
            js = engine + ".json"
            run([a.kiln, "bench", engine, "--cuda-graph", "--no-transfers", "--duration", str(a.duration), "--json", js],
                log)
            b = json.load(open(js))
            if a.profile:
                with open(engine.replace(".kiln", ".profile.txt"), "w") as f:
                    f.write(run([a.kiln, "bench", engine, "--cuda-graph", "--no-transfers", "--profile", "--duration", "1"],
                                log))
            outdir = engine + "_out"
            run([a.kiln, "run", engine, "--outputs", outdir] +
                sum((["--input", f"{n}={os.path.join(feed, n + '.npy')}"] for n in in_names), []), log)
            errs = []
            for k, r in enumerate(ref):
                y = np.load(os.path.join(outdir, f"output_{k}.npy")).astype(np.float64)
                errs.append(float(np.abs(y - r).max() / max(1e-12, float(r.max() - r.min()))))
            try:
                steps = json.loads(run([a.kiln, "inspect", engine, "--json"], log)).get("steps", [])
            except (ValueError, RuntimeError):
                steps = []
            row[variant] = {"gpu_ms": b["gpu_compute_ms"]["median"], "build_s": build_s, "steps": len(steps),
                            "ops": sorted({s.get("op", "") for s in steps}), "err_over_range": max(errs)}
            print(f"{name} {variant}: {row[variant]['gpu_ms']:.3f} ms, {len(steps)} steps, "
                  f"error {max(errs):.2e} of the range, built in {build_s:.1f} s", flush=True)
        if a.compile:
            m = model.cuda().half()  # the reference outputs are taken: the model may move
            xs = [t.cuda().half() if t.is_floating_point() else t.cuda() for t in example]
            c = torch.compile(m, mode=a.compile_mode)
            with torch.no_grad():
                for _ in range(20):
                    c(*xs)
                torch.cuda.synchronize()
                times = []
                for _ in range(200):
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    c(*xs)
                    e.record()
                    e.synchronize()
                    times.append(s.elapsed_time(e))
            row["torch.compile"] = {"gpu_ms": float(np.median(times)), "mode": a.compile_mode}
            print(f"{name} torch.compile ({a.compile_mode}): {row['torch.compile']['gpu_ms']:.3f} ms", flush=True)
        res["models"][name] = row
    json.dump(res, open(os.path.join(a.out, f"transformers{tag}.json"), "w"), indent=1)
    print(f"batch {a.batch}")
    print("| model | variant | GPU ms | sequences/s | steps | error / range |")
    print("|---|---|---|---|---|---|")
    for name, row in res["models"].items():
        for v, r in row.items():
            print(f"| {name} | {v} | {r['gpu_ms']:.3f} | {a.batch / r['gpu_ms'] * 1000:.0f} | {r.get('steps', '')} | "
                  f"{r.get('err_over_range', '')} |")


if __name__ == "__main__":
    main()
