#!/usr/bin/env python3
"""Kiln's CPU engines next to onnxruntime's CPU provider, same machine, same run, same thread count
(issue 42): ResNet-18 and MobileNetV2 (tools/make_models.py's torchvision topologies), a
BERT-base-shaped encoder (2 layers, 128 tokens, hidden 768, 12 heads) and LeNet-5 (the demo's
network), at batch 1 and 64 (LeNet-5: 256), random weights. Kiln FP32 and, for the convolutional
ones, Kiln INT8 (calibrated on random inputs: a speed figure, not an accuracy one; `--int8` keeps
the float32 engine where INT8 times slower, which the table then says).
Kiln: engines built once (`kiln optimize --device cpu`), then `kiln bench ENGINE --threads T --json`
(median latency after warm-up); onnxruntime: median of timed runs after warm-up,
intra_op_num_threads=T, default optimizations. The sides take turns for --rounds rounds (onnxruntime,
Kiln FP32, Kiln INT8, again), so that a slower or faster period of a shared machine falls on all of
them; a figure is the median over rounds, a ratio the median of the rounds' ratios.

  bench/cpu_ort.py --kiln build/kiln [--threads 2] [--rounds 3] [--models resnet18,...] [--out bench/results/cpu_ort]

Writes OUT/cpu_ort.md (the table), OUT/cpu_ort.json and OUT/cpu_ort.svg (Kiln's speed over
onnxruntime's per model and batch).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import make_models  # noqa: E402


def lenet5(batch):
    rng = np.random.default_rng(5)
    inits, nodes = [], []

    def w(name, shape):
        inits.append(numpy_helper.from_array(rng.normal(0, 1 / np.sqrt(np.prod(shape[1:])), shape).astype(np.float32),
                                             name))
        return name

    def b(name, n):
        inits.append(numpy_helper.from_array(np.zeros(n, np.float32), name))
        return name

    nodes += [h.make_node("Conv", ["image", w("c1w", [6, 1, 5, 5]), b("c1b", 6)], ["c1"], pads=[2, 2, 2, 2]),
              h.make_node("Relu", ["c1"], ["r1"]),
              h.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
              h.make_node("Conv", ["p1", w("c2w", [16, 6, 5, 5]), b("c2b", 16)], ["c2"]),
              h.make_node("Relu", ["c2"], ["r2"]),
              h.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
              h.make_node("Flatten", ["p2"], ["f"]),
              h.make_node("Gemm", ["f", w("f1w", [120, 400]), b("f1b", 120)], ["g1"], transB=1),
              h.make_node("Relu", ["g1"], ["r3"]),
              h.make_node("Gemm", ["r3", w("f2w", [84, 120]), b("f2b", 84)], ["g2"], transB=1),
              h.make_node("Relu", ["g2"], ["r4"]),
              h.make_node("Gemm", ["r4", w("f3w", [10, 84]), b("f3b", 10)], ["logits"], transB=1)]
    g = h.make_graph(nodes, "lenet5", [h.make_tensor_value_info("image", T.FLOAT, ["batch", 1, 28, 28])],
                     [h.make_tensor_value_info("logits", T.FLOAT, ["batch", 10])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8), (batch, 1, 28, 28)


def bert_encoder(batch, layers=2, seq=128, d=768, heads=12, ff=3072):
    """BERT-base's encoder layers as PyTorch exports them (MatMul + Add biases, Q/K/V heads through
    Reshape/Transpose, scaled Softmax, erf GELU, post-norm LayerNormalization), without embeddings."""
    bld = make_models.Builder(11)
    dh = d // heads
    w = lambda *s: bld.const("w", bld.rng.normal(0, 0.02, s).astype(np.float32))
    zeros = lambda n: bld.const("b", np.zeros(n, np.float32))
    ln = lambda x: bld.op("LayerNormalization", [x, bld.const("g", np.ones(d, np.float32)), zeros(d)], "ln", axis=-1,
                          epsilon=1e-12)
    linear = lambda x, i, o: bld.op("Add", [bld.op("MatMul", [x, w(i, o)]), zeros(o)])
    shape = lambda *s: bld.const("shape", np.array(s, np.int64))
    x = "input"
    for _ in range(layers):
        split = lambda t: bld.op("Transpose", [bld.op("Reshape", [t, shape(batch, seq, heads, dh)])], perm=[0, 2, 1, 3])
        q, k, v = (split(linear(x, d, d)) for _ in range(3))
        att = bld.op("MatMul", [q, bld.op("Transpose", [k], perm=[0, 1, 3, 2])])
        att = bld.op("Softmax", [bld.op("Div", [att, bld.const("scale", np.float32(np.sqrt(dh)))])], axis=-1)
        o = bld.op("Transpose", [bld.op("MatMul", [att, v])], perm=[0, 2, 1, 3])
        x = ln(bld.op("Add", [x, linear(bld.op("Reshape", [o, shape(batch, seq, d)]), d, d)]))
        m = linear(x, d, ff)
        gelu = bld.op("Mul", [bld.op("Mul", [m, bld.const("half", np.float32(0.5))]),
                              bld.op("Add", [bld.op("Erf", [bld.op("Div", [m, bld.const("sqrt2", np.float32(np.sqrt(2)))])]),
                                             bld.const("one", np.float32(1))])])
        x = ln(bld.op("Add", [x, linear(gelu, ff, d)]))
    return bld.model("bert_encoder", [batch, seq, d], x, [batch, seq, d]), (batch, seq, d)


MODELS = {  # name: (maker, batches, convolutional)
    "resnet18": (make_models.resnet18, (1, 64), True),
    "mobilenetv2": (make_models.mobilenetv2, (1, 64), True),
    "bert_encoder": (bert_encoder, (1, 64), False),
    "lenet5": (lenet5, (1, 256), True),
}


class OrtSide:
    """One onnxruntime session, timed again each round."""

    def __init__(self, path, x, threads):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self.s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.feed = {self.s.get_inputs()[0].name: x}
        for _ in range(3):
            self.s.run(None, self.feed)

    def median_ms(self, min_s):
        times, start = [], time.perf_counter()
        while len(times) < 10 or time.perf_counter() - start < min_s:
            t0 = time.perf_counter()
            self.s.run(None, self.feed)
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times))


def kiln_run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def kiln_build(kiln, path, engine, extra):
    """Builds the engine; for --int8, which one the builder kept ("INT8" or "float32": it times them)."""
    out = kiln_run([kiln, "optimize", path, "--device", "cpu", "-o", engine] + extra)
    return "float32" if "kept float32" in out else "INT8"


def kiln_median_ms(kiln, engine, threads, min_s, work):
    out = os.path.join(work, "bench.json")
    kiln_run([kiln, "bench", engine, "--threads", str(threads), "--warmup", "3", "--iterations", "10",
              "--duration", str(min_s), "--json", out])
    with open(out) as f:
        return json.load(f)["latency_ms"]["median"]


def svg(rows, path):
    """Horizontal bars: Kiln FP32's and INT8's speed over onnxruntime's, 1.0 and 0.9 marked."""
    bar_h, left, width = 16, 190, 420
    top = 30
    scale = width / max(1.5, max(max(r["fp32_vs_ort"], r.get("int8_vs_ort") or 0) for r in rows) * 1.05)
    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 60}" '
             f'height="{top + len(rows) * (2 * bar_h + 8) + 30}" font-family="sans-serif" font-size="12">',
             f'<text x="{left}" y="16">Kiln CPU speed / onnxruntime (same machine, same threads)</text>']
    y = top
    for r in rows:
        lines.append(f'<text x="{left - 6}" y="{y + bar_h - 3}" text-anchor="end">{r["model"]} b{r["batch"]}</text>')
        for key, color in (("fp32_vs_ort", "#4878a8"), ("int8_vs_ort", "#e08030")):
            v = r.get(key)
            if v:
                lines.append(f'<rect x="{left}" y="{y}" width="{v * scale:.1f}" height="{bar_h - 2}" fill="{color}"/>')
                lines.append(f'<text x="{left + v * scale + 4:.1f}" y="{y + bar_h - 4}">{v:.2f}x'
                             f'{" INT8" if key == "int8_vs_ort" else ""}</text>')
            y += bar_h
        y += 8
    for mark in (0.9, 1.0):
        x = left + mark * scale
        lines.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{y}" stroke="#888" stroke-dasharray="3,3"/>')
        lines.append(f'<text x="{x:.1f}" y="{y + 14}" text-anchor="middle">{mark}</text>')
    lines.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--duration", type=float, default=1.0, help="seconds each side measures per round, at least")
    ap.add_argument("--rounds", type=int, default=3, help="turns each side takes (medians over them)")
    ap.add_argument("--no-int8", action="store_true")
    ap.add_argument("--out", default="bench/results/cpu_ort")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in a.models.split(","):
            maker, batches, conv = MODELS[name]
            for batch in batches:
                model, shape = maker(batch)
                path = os.path.join(work, f"{name}_b{batch}.onnx")
                onnx.save(model, path)
                x = np.random.default_rng(batch).standard_normal(shape).astype(np.float32)
                calib = os.path.join(work, f"{name}_calib")
                os.makedirs(calib, exist_ok=True)
                for i in range(4):  # a few batches of random inputs: enough to time INT8
                    np.save(os.path.join(calib, f"{i}.npy"), np.random.default_rng(i).standard_normal(shape)
                            .astype(np.float32))
                symbolic = model.graph.input[0].type.tensor_type.shape.dim[0].dim_param != ""
                shape_flags = ["--batch", str(batch)] if symbolic else []
                engines = {"fp32": os.path.join(work, f"{name}_b{batch}_fp32.kiln")}
                int8_kept = None
                kiln_build(a.kiln, path, engines["fp32"], shape_flags)
                if conv and not a.no_int8:
                    engines["int8"] = os.path.join(work, f"{name}_b{batch}_int8.kiln")
                    int8_kept = kiln_build(a.kiln, path, engines["int8"], shape_flags + ["--int8", "--calib", calib])
                ort_side = OrtSide(path, x, a.threads)
                per_round = []  # {"ort": ms, "fp32": ms, "int8": ms} per round
                for _ in range(a.rounds):
                    t = {"ort": ort_side.median_ms(a.duration)}
                    for k, e in engines.items():
                        t[k] = kiln_median_ms(a.kiln, e, a.threads, a.duration, work)
                    per_round.append(t)
                med = lambda f: float(np.median([f(t) for t in per_round]))
                ort_ms, fp32 = med(lambda t: t["ort"]), med(lambda t: t["fp32"])
                int8 = med(lambda t: t["int8"]) if "int8" in engines else None
                row = {"model": name, "batch": batch, "ort_ms": ort_ms, "kiln_fp32_ms": fp32, "kiln_int8_ms": int8,
                       "fp32_vs_ort": med(lambda t: t["ort"] / t["fp32"]),
                       "int8_vs_ort": med(lambda t: t["ort"] / t["int8"]) if int8 else None,
                       "int8_vs_fp32": med(lambda t: t["fp32"] / t["int8"]) if int8 else None,
                       "int8_kept": int8_kept, "rounds": per_round}
                rows.append(row)
                print(f"{name:13s} b{batch:<4d} onnxruntime {ort_ms:9.3f} ms   Kiln FP32 {fp32:9.3f} ms "
                      f"({row['fp32_vs_ort']:.2f}x)" + (f"   INT8 {int8:9.3f} ms ({row['int8_vs_fp32']:.2f}x FP32)"
                                                       if int8 else ""), flush=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    meta = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu, "cores": os.cpu_count(), "threads": a.threads,
            "rounds": a.rounds, "seconds_per_round": a.duration,
            "onnxruntime": ort.__version__, "python": platform.python_version()}
    with open(os.path.join(a.out, "cpu_ort.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(os.path.join(a.out, "cpu_ort.md"), "w") as f:
        f.write(f"{meta['date']}, {cpu}, {a.threads} threads, onnxruntime {ort.__version__}; medians in ms over "
                f"{a.rounds} rounds of at least {a.duration:g} s a side; speed = onnxruntime's time / Kiln's (median "
                "of the rounds' ratios)\n\n")
        f.write("| model | batch | onnxruntime | Kiln FP32 | FP32 vs ORT | Kiln INT8 | INT8 vs FP32 |\n|---|---|---|---|---|---|---|\n")
        for r in rows:
            kept = "" if r["int8_kept"] == "INT8" else " (the builder kept float32)"
            i8 = f"{r['kiln_int8_ms']:.3f}{kept} | {r['int8_vs_fp32']:.2f}x" if r["kiln_int8_ms"] else "- | -"
            f.write(f"| {r['model']} | {r['batch']} | {r['ort_ms']:.3f} | {r['kiln_fp32_ms']:.3f} | "
                    f"{r['fp32_vs_ort']:.2f}x | {i8} |\n")
    svg(rows, os.path.join(a.out, "cpu_ort.svg"))
    print(f"wrote {a.out}/cpu_ort.md, .json, .svg")


if __name__ == "__main__":
    main()
