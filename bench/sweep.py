#!/usr/bin/env python3
"""The model sweep: architectures nobody here wrote (bench/sweep_models.py), exported by PyTorch,
through Kiln as a user runs it, compared with PyTorch's own outputs.

For each model: torch.onnx.export (opset 17 unless the model says, the TorchScript exporter, a dynamic batch axis), the
reference outputs from PyTorch in float64 at every batch size the model lists, then per
configuration `kiln optimize` (timed), `kiln run` (outputs compared) and `kiln bench` (latency):

  cpu    FP32 on the CPU                       max|kiln - torch| <= 1e-3 of the output's range
  gpu    FP32 on the GPU                       1e-3
  fp16   --fp16 on the GPU                     3e-2, or PyTorch's own float16 error where larger
                                                (--torch-fp16: PyTorch in float16 on the GPU)
  best   --best (INT8, calibrated on random data, FP16 elsewhere)   reported, not judged
  cache  the fp16 build again with the timing cache the first one wrote (build time only)

Detectors (SSDlite, RetinaNet, Faster R-CNN) give as many boxes as the data make: their float32
reference is PyTorch's own, and detection_error matches Kiln's boxes, scores and labels with
PyTorch's as sets; at most DETECTION_TOL of them may go unmatched.

A model Kiln does not support (`expect_refused`) must be refused at import with one message naming
the unsupported op types and nothing about the nodes downstream of them; no model may crash, hang or
give wrong numbers. GPU builds must take under 30 s (5 s
with a timing cache). Writes a JSON of every row and a Markdown table; exits 1 if a row fails.

  bench/sweep.py --kiln build/kiln --work /tmp/sweep [--size full|small] [--configs cpu,gpu,fp16,best,cache]
                 [--models a,b] [--json F] [--table F] [--budget SECONDS] [--cpu-jobs N] [--threads N]
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = {"cpu": 1e-3, "gpu": 1e-3, "fp16": 3e-2}
# The share of detections either side may leave unmatched (detection_error). float16 rounds
# near-saturated scores into ties and moves them across thresholds, which reorders what TopK and
# NMS keep: an fp16 cell is judged only next to PyTorch's own float16 (--torch-fp16), at the larger
# of 0.1 and PyTorch's share.
DETECTION_TOL = {"cpu": 0.02, "gpu": 0.02, "fp16": 0.1}
FLAGS = {"cpu": ["--device", "cpu"], "gpu": ["--device", "gpu"], "fp16": ["--device", "gpu", "--fp16"],
         "best": ["--device", "gpu", "--best"], "cache": ["--device", "gpu", "--fp16"]}
BUILD_LIMIT_S = {"gpu": 30, "fp16": 30, "cache": 5}
CALIB_SAMPLES = 8


# ---- export (PyTorch) ----------------------------------------------------------------------------

def export_model(spec, work, device, torch_fp16=False):
    """Exports spec to WORK/NAME/model.onnx and writes, per batch B, the inputs (bB/NAME.npy), the
    float64 reference outputs (bB/ref_K.npy) and calibration data (bB/calib); with torch_fp16 also
    PyTorch's own float16 outputs on the GPU (bB/torch16_K.npy), the peer of Kiln's --fp16 column.
    Returns a status."""
    import copy
    import torch
    d = os.path.join(work, spec.name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    model = spec.build()
    if spec.init:
        spec.init(model, spec.inputs(1, torch.Generator().manual_seed(2)))
    with torch.no_grad():  # layers initialised to zeros (ViT's head) would make outputs constant
        for p in model.parameters():
            if p.dim() > 1 and not p.any():
                p.normal_(0, 0.02)
    g = torch.Generator().manual_seed(1)
    if spec.stats:
        # Random initialisation leaves BatchNorm at mean 0, variance 1, so activations shrink or
        # grow layer by layer (MobileNetV2 ends near 1e-9, Inception v3 near 1e10: beyond float16's
        # range either way); a trained net does not. One training-mode pass over random inputs, with
        # the running statistics set to that batch's (momentum None: a cumulative average), gives
        # the statistics of real activations.
        bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None
        with torch.no_grad():
            model.train()
            model(*spec.inputs(8, g))
    model.eval()
    example = spec.inputs(1, g)
    path = os.path.join(d, "model.onnx")
    axes = {n: {0: "batch"} for n in spec.in_names + spec.out_names}
    kw = dict(opset_version=spec.opset, input_names=spec.in_names, output_names=spec.out_names, dynamic_axes=axes)
    t0 = time.time()
    # Not under no_grad: as a user exports (nn.TransformerEncoder's fused inference path, which
    # does not export, stays off while gradients are on).
    try:
        torch.onnx.export(model, example, path, dynamo=False, **kw)
    except TypeError:  # PyTorch before 2.5 has no dynamo switch
        torch.onnx.export(model, example, path, **kw)
    export_s = time.time() - t0
    if spec.detections:  # for bench/detector_latency.py, which times PyTorch next to Kiln
        torch.save(model, os.path.join(d, "model.pt"))
    half_model = copy.deepcopy(model).half().cuda() if torch_fp16 and torch.cuda.is_available() else None
    ref_model = model if spec.detections else model.double()
    # Detections' float32 reference on the CPU: on the GPU PyTorch convolves in TF32 by default,
    # whose rounding reorders near-tied scores (half of SSDlite's boxes differ from the CPU's).
    dev = torch.device("cpu" if spec.detections else device)
    ref_model.to(dev)
    for b in spec.batches:
        bd = os.path.join(d, f"b{b}")
        os.makedirs(os.path.join(bd, "calib"), exist_ok=True)
        gb = torch.Generator().manual_seed(100 + b)
        xs = spec.inputs(b, gb)
        for name, x in zip(spec.in_names, xs):
            np.save(os.path.join(bd, name + ".npy"), x.numpy())
        with torch.no_grad():
            ys = ref_model(*[(x.to(torch.float32 if spec.detections else torch.float64) if x.is_floating_point()
                              else x).to(dev) for x in xs])
        for k, y in enumerate(flatten_outputs(ys)):
            np.save(os.path.join(bd, f"ref_{k}.npy"), y.cpu().numpy())
        if half_model is not None:
            with torch.no_grad():
                ys = half_model(*[(x.half() if x.is_floating_point() else x).cuda() for x in xs])
            for k, y in enumerate(flatten_outputs(ys)):
                np.save(os.path.join(bd, f"torch16_{k}.npy"), y.float().cpu().numpy())
        # Calibration: CALIB_SAMPLES more random inputs, one stacked file per input.
        gc = torch.Generator().manual_seed(200 + b)
        cal = [spec.inputs(1, gc) for _ in range(CALIB_SAMPLES)]
        if len(spec.in_names) == 1:
            np.save(os.path.join(bd, "calib", "x.npy"), np.concatenate([c[0].numpy() for c in cal]))
        else:
            os.makedirs(os.path.join(bd, "calib", "s0"), exist_ok=True)
            for i, name in enumerate(spec.in_names):
                np.save(os.path.join(bd, "calib", "s0", name + ".npy"), np.concatenate([c[i].numpy() for c in cal]))
    return {"export_s": round(export_s, 2)}


def flatten_outputs(ys):
    """The tensors of a model's output in the order the exporter writes them (nested tuples, lists
    and dicts, as torchvision's segmentation and detection models return)."""
    import torch
    if isinstance(ys, torch.Tensor):
        return [ys]
    if isinstance(ys, dict):
        ys = list(ys.values())
    return [t for y in ys for t in flatten_outputs(y)]


def export_worker(args):
    size, name, work, device, torch_fp16 = args
    import torch
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 4))
    sys.path.insert(0, HERE)
    import sweep_models
    spec = next(s for s in sweep_models.specs(size) if s.name == name)
    try:
        return name, export_model(spec, work, device, torch_fp16)
    except Exception as e:  # noqa: BLE001 - an exporter failure is a row of the table, not a crash
        return name, {"export_error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
                      "trace": traceback.format_exc()[-2000:]}


# ---- Kiln ------------------------------------------------------------------------------------------

def run(cmd, timeout):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.time() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, out, err, time.time() - t0


def crash_or_error(rc, err):
    if rc is None:
        return "timed out"
    if rc < 0 or rc >= 128:
        return f"crashed (signal {-rc if rc < 0 else rc - 128})"
    lines = [l for l in err.strip().splitlines() if l.strip()]
    return "error: " + (" | ".join(lines[:3])[:300] if lines else f"exit {rc}")


def rel_error(out, ref):
    if out.shape != ref.shape:
        return float("inf"), f"shape {list(out.shape)} != torch's {list(ref.shape)}"
    if ref.size == 0:
        return 0.0, ""
    o, r = out.astype(np.float64), ref.astype(np.float64)
    if not np.all(np.isfinite(o)) and not np.array_equal(np.isnan(o), np.isnan(r)):
        return float("inf"), "non-finite values"
    span = float(np.nanmax(r) - np.nanmin(r))
    if not span > 0 and r.size > 1:
        return float("inf"), "the reference output is constant: the comparison would prove nothing"
    span = span or float(np.nanmax(np.abs(r))) or 1.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(o - r)
    diff[np.isnan(o) & np.isnan(r)] = 0
    diff[(o == r)] = 0  # equal infinities
    return float(np.nanmax(diff)) / span, ""


def detection_error(outs, refs, rel):
    """Detections (boxes [n, 4], then scores [n] and labels [n] in either order, as torchvision's
    detectors return them) against PyTorch's, as sets: one-to-one matches of the same label whose
    score and box agree within `rel` of the reference's ranges. The error is the share of
    detections on either side left unmatched: a score within rounding of another's, or of a
    threshold, can keep a different box."""
    def split(ts):
        b, x, y = ts[:3]
        return (b, y, x) if np.issubdtype(y.dtype, np.floating) else (b, x, y)  # boxes, scores, labels
    (bo, so, lo), (br, sr, lr) = split(outs), split(refs)
    if bo.ndim != 2 or bo.shape[1:] != (4,) or not (len(bo) == len(so) == len(lo)):
        return float("inf"), f"shapes {bo.shape}, {so.shape}, {lo.shape} are not detections"
    if len(sr) == 0 and len(so) == 0:
        return 0.0, "no detections on either side"
    box_tol = rel * ((float(np.ptp(br)) if br.size else 0.0) or 1.0)
    score_tol = rel * ((float(np.ptp(sr)) if sr.size > 1 else 0.0) or 1.0)
    used = np.zeros(len(sr), bool)
    matched = 0
    for i in range(len(so)):
        ok = ~used & (lr == lo[i]) & (np.abs(sr - so[i]) <= score_tol)
        if len(br):
            ok &= np.abs(br - bo[i]).max(axis=1) <= box_tol
        hit = np.flatnonzero(ok)
        if len(hit):
            used[hit[0]] = True
            matched += 1
    unmatched = len(so) + len(sr) - 2 * matched
    return unmatched / max(len(so), len(sr)), f"{len(so)} detections, PyTorch {len(sr)}, {matched} matched"


def kiln_config(a, spec, b, cfg, peer_fp16=None):
    """One (model, batch, configuration): build, run, compare, time. Returns the row's cell."""
    d = os.path.join(a.work, spec.name)
    bd = os.path.join(d, f"b{b}")
    eng = os.path.join(bd, f"{cfg}.kiln")
    cell = {"config": cfg}
    cmd = [a.kiln, "optimize", os.path.join(d, "model.onnx"), "-o", eng, "--batch", str(b)] + FLAGS[cfg]
    if cfg == "best":
        cmd += ["--calib", os.path.join(bd, "calib"), "--calib-batches", str(CALIB_SAMPLES)]
    if cfg in ("fp16", "cache"):
        cmd += ["--timing-cache", os.path.join(bd, "fp16.timing")]
    if cfg == "cache" and not os.path.exists(os.path.join(bd, "fp16.timing")):
        return {"config": cfg, "status": "skipped", "detail": "no timing cache from the fp16 build"}
    if cfg != "cpu" and a.verbose:
        cmd.append("-v")
    rc, out, err, secs = run(cmd, a.build_timeout)
    with open(os.path.join(bd, f"{cfg}_build.log"), "w") as f:
        f.write(" ".join(cmd) + f"\n# exit {rc}, {secs:.1f} s\n" + out + err)
    cell["build_s"] = round(secs, 2)
    m = re.search(r"(\d+) nodes -> (\d+) steps", out)
    if m:
        cell["nodes"], cell["steps"] = int(m.group(1)), int(m.group(2))
    if cfg == "best":  # the builder's INT8-or-float verdict
        choice = [l for l in err.splitlines() if "INT8" in l or "float" in l.lower()]
        if choice:
            cell["precision"] = choice[-1].strip()[:200]
    if rc != 0:
        if spec.expect_refused and rc == 2:
            named = "unsupported op types" in err
            noise = sum("no earlier node" in l for l in err.splitlines())
            cell["status"] = "refused" if named and noise == 0 else "fail"
            cell["detail"] = " ".join(err.split())[:300] + (f" ({noise} lines of downstream noise)" if noise else "")
            return cell
        cell["status"], cell["detail"] = "fail", crash_or_error(rc, err)
        return cell
    if spec.expect_refused:
        cell["note"] = "built, though expected to be refused"
    if cfg == "cache":
        limit = BUILD_LIMIT_S[cfg]
        cell["status"] = "ok" if secs <= limit else "slow"
        return cell
    outdir = os.path.join(bd, f"out_{cfg}")
    os.makedirs(outdir, exist_ok=True)
    cmd = [a.kiln, "run", eng, "--outputs", outdir] + [
        x for n in spec.in_names for x in ("--input", f"{n}={os.path.join(bd, n + '.npy')}")]
    if cfg == "cpu":
        cmd += ["--threads", str(a.threads)]
    rc, out, err, _ = run(cmd, a.run_timeout)
    if rc != 0:
        cell["status"], cell["detail"] = "fail", "run " + crash_or_error(rc, err)
        return cell
    worst, detail = 0.0, ""
    if spec.detections:
        outs = [np.load(os.path.join(outdir, f"output_{k}.npy")) for k in range(3)]
        refs = [np.load(os.path.join(bd, f"ref_{k}.npy")) for k in range(3)]
        worst, detail = detection_error(outs, refs, 2e-2 if cfg == "fp16" else 1e-3)
        cell["error"] = worst
        cell["detail"] = detail
        tol = DETECTION_TOL.get(cfg)
        if cfg == "fp16":  # judged against PyTorch's own float16 where it ran, else only reported
            tol = max(tol, peer_fp16) if peer_fp16 is not None and np.isfinite(peer_fp16) else None
        cell["status"] = "reported" if tol is None else "ok" if worst <= tol else "fail"
        return cell
    for k in range(len(spec.out_names)):
        ref_path = os.path.join(bd, f"ref_{k}.npy")
        if not os.path.exists(ref_path):
            continue
        e, why = rel_error(np.load(os.path.join(outdir, f"output_{k}.npy")), np.load(ref_path))
        if e > worst:
            worst, detail = e, why
    cell["error"] = worst
    tol = TOL.get(cfg)
    # float16 has its own error on a model, which a deep net amplifies: where PyTorch's own float16
    # misses 3e-2 (Inception v3 6e-2, DeepLabV3 1.4e-1), Kiln's must be no worse than PyTorch's.
    # Non-finite PyTorch outputs (Swin-V2-T) relax nothing.
    if cfg == "fp16" and peer_fp16 is not None and np.isfinite(peer_fp16):
        tol = max(tol, peer_fp16)
    cell["status"] = "ok" if tol is None or worst <= tol else "fail"
    if detail:
        cell["detail"] = detail
    if cell["status"] == "ok" and cfg in BUILD_LIMIT_S and secs > BUILD_LIMIT_S[cfg]:
        cell["status"] = "slow"
    return cell


def bench_cell(a, spec, b, cell):
    """Median latency of a built engine, alone on the machine (a phase of its own after the builds)."""
    eng = os.path.join(a.work, spec.name, f"b{b}", f"{cell['config']}.kiln")
    cmd = [a.kiln, "bench", eng, "--warmup", "3"]
    cmd += ["--iterations", "3", "--duration", "0"] if cell["config"] == "cpu" else \
        ["--iterations", "20", "--duration", "0.2", "--cuda-graph", "--no-transfers"]
    rc, out, err, _ = run(cmd, a.run_timeout)
    m = re.search(r"latency +ms +min [0-9.]+ +mean [0-9.]+ +median ([0-9.]+)", out)
    if cell["config"] != "cpu":
        m = re.search(r"GPU compute +mean [0-9.]+ +median ([0-9.]+)", out) or m
    if rc == 0 and m:
        cell["latency_ms"] = float(m.group(1))
    else:
        cell["bench"] = crash_or_error(rc, err)


# ---- table -----------------------------------------------------------------------------------------

def fmt_cell(c):
    if not c:
        return "-"
    st = c.get("status")
    if st == "refused":
        return "refused"
    if st == "skipped":
        return "-"
    parts = []
    if "build_s" in c:
        parts.append(f"{c['build_s']:.1f} s")
    if "error" in c:
        parts.append(f"{c['error']:.1e}")
    if "latency_ms" in c:
        parts.append(f"{c['latency_ms']:.3g} ms")
    s = " / ".join(parts)
    if st in ("fail", "slow", "not run"):
        s = f"**{st.upper()}** {s}".strip()
    if st == "reported":
        s += " (not judged)"
    return s


def write_table(rows, configs, path):
    peer = any("torch_fp16_error" in r for r in rows)
    head = "| model | batch | nodes | steps | " + " | ".join(configs) + (" | PyTorch fp16 |" if peer else " |")
    lines = [head, "|" + "---|" * (4 + len(configs) + peer)]
    for r in rows:
        cells = r["cells"]
        any_cell = next((c for c in cells.values() if "nodes" in c), {})
        gpu = cells.get("fp16") or cells.get("gpu") or {}
        steps = gpu.get("steps", any_cell.get("steps", "-"))
        lines.append(f"| {r['model']} | {r['batch']} | {any_cell.get('nodes', '-')} | {steps} | " +
                     " | ".join(fmt_cell(cells.get(c)) for c in configs) +
                     (f" | {r['torch_fp16_error']:.1e} |" if "torch_fp16_error" in r else (" | - |" if peer else " |")))
    notes = []
    for r in rows:
        if r.get("export_error"):
            notes.append(f"- {r['model']}: export failed: {r['export_error']}")
        for c in r["cells"].values():
            if c.get("status") in ("fail", "refused", "not run") or c.get("note"):
                notes.append(f"- {r['model']} b{r['batch']} {c['config']}: {c.get('status')}: "
                             f"{c.get('detail', '')} {c.get('note', '')}".rstrip())
    text = "\n".join(lines) + ("\n\nCells: build time / max error over the output's range (detectors: the share of "
                               "detections unmatched) / median latency.\n")
    if notes:
        text += "\n" + "\n".join(notes) + "\n"
    with open(path, "w") as f:
        f.write(text)
    return text


# ---- main --------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--size", default="full", choices=["full", "small"])
    ap.add_argument("--configs", default="cpu,gpu,fp16,best,cache")
    ap.add_argument("--models", default="")
    ap.add_argument("--skip", default="", help="models to leave out")
    ap.add_argument("--json")
    ap.add_argument("--table")
    ap.add_argument("--budget", type=float, default=0, help="seconds after which no new GPU build starts")
    ap.add_argument("--cpu-jobs", type=int, default=max(1, (os.cpu_count() or 2) // 4))
    ap.add_argument("--threads", type=int, default=4, help="kiln run --threads for CPU engines")
    ap.add_argument("--export-jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2) // 4)))
    ap.add_argument("--build-timeout", type=float, default=300)
    ap.add_argument("--run-timeout", type=float, default=300)
    ap.add_argument("--bench", default="fp16", help="configurations whose engines are timed (kiln bench), one "
                    "at a time after all builds")
    ap.add_argument("--gpu-jobs", type=int, default=1, help="GPU builds at once (more than 1 shortens the sweep; "
                    "builds then time kernels beside each other, so build times are upper bounds)")
    ap.add_argument("--ref-device", default="cpu", help="where PyTorch computes the float64 reference (cpu leaves "
                    "the GPU to the builds, whose kernel timings another process would disturb)")
    ap.add_argument("--torch-fp16", action="store_true", help="also PyTorch's own float16 outputs on the GPU, "
                    "the peer of the fp16 column")
    ap.add_argument("-v", dest="verbose", action="store_true", help="GPU builds with -v (their logs: WORK/MODEL/bB)")
    ap.add_argument("--logs", help="pack every build log into this .tar.gz")
    a = ap.parse_args()
    a.kiln = os.path.abspath(a.kiln)
    a.work = os.path.abspath(a.work)
    os.makedirs(a.work, exist_ok=True)
    sys.path.insert(0, HERE)
    import sweep_models
    import torch
    specs = sweep_models.specs(a.size)
    if a.models:
        want = a.models.split(",")
        specs = [s for s in specs if s.name in want]
    skip = set(a.skip.split(",")) if a.skip else set()
    specs = [s for s in specs if s.name not in skip]
    configs = [c for c in a.configs.split(",") if c]
    ref_device = a.ref_device
    t_start = time.time()
    print(f"sweep: {len(specs)} models, configs {','.join(configs)}, PyTorch {torch.__version__}, "
          f"reference on {ref_device}", flush=True)

    rows = {(s.name, b): {"model": s.name, "batch": b, "cells": {}} for s in specs for b in s.batches}
    lock = threading.Lock()
    gpu_cfgs = [c for c in configs if c != "cpu"]
    cpu_pool = cf.ThreadPoolExecutor(a.cpu_jobs)
    # GPU work, one build at a time: every model's gpu, fp16 and cache cells first, then the
    # slower best (INT8) cells, so that a budget cut leaves the INT8 column short, not the others.
    gpu_queue, gpu_later = [], []
    gpu_ready = threading.Condition(lock)
    exports_done = [False]
    futures = []
    order = [s.name for s in specs]

    def save_json():
        if not a.json:
            return
        ordered = [rows[(s.name, b)] for s in specs for b in s.batches]
        with open(a.json + ".part", "w") as f:
            json.dump({"meta": {"partial": True}, "rows": ordered}, f, indent=1)
        os.replace(a.json + ".part", a.json)

    def record(spec, b, cell):
        with lock:
            rows[(spec.name, b)]["cells"][cell["config"]] = cell
            save_json()
        flag = "" if cell.get("status") in ("ok", "refused", "skipped") else f"  <- {cell.get('status')}"
        print(f"  {spec.name} b{b} {cell['config']}: {fmt_cell(cell)}{flag}", flush=True)

    def cpu_task(spec, b):
        if a.budget and time.time() - t_start > a.budget:
            record(spec, b, {"config": "cpu", "status": "not run", "detail": "sweep budget spent"})
            return
        try:
            record(spec, b, kiln_config(a, spec, b, "cpu"))
        except Exception as e:  # noqa: BLE001
            record(spec, b, {"config": "cpu", "status": "fail", "detail": f"sweep error {e}"})

    def gpu_worker():
        while True:
            with gpu_ready:
                while not gpu_queue and not exports_done[0]:
                    gpu_ready.wait()
                if gpu_queue:
                    spec, b, chain = gpu_queue.pop(0)
                elif gpu_later:
                    gpu_later.sort(key=lambda t: (order.index(t[0].name), t[1]))
                    spec, b, chain = gpu_later.pop(0)
                else:
                    return
            for cfg in chain:  # in order: the cache build reads the timing cache the fp16 build wrote
                if a.budget and time.time() - t_start > a.budget:
                    record(spec, b, {"config": cfg, "status": "not run", "detail": "sweep budget spent"})
                    continue
                try:
                    record(spec, b, kiln_config(a, spec, b, cfg, rows[(spec.name, b)].get("torch_fp16_error")))
                except Exception as e:  # noqa: BLE001
                    record(spec, b, {"config": cfg, "status": "fail", "detail": f"sweep error {e}"})

    gpu_threads = [threading.Thread(target=gpu_worker) for _ in range(a.gpu_jobs if gpu_cfgs else 0)]
    for t in gpu_threads:
        t.start()
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(a.export_jobs, mp_context=ctx) as ex:
        jobs = {ex.submit(export_worker, (a.size, s.name, a.work, ref_device, a.torch_fp16)): s for s in specs}
        for f in cf.as_completed(jobs):
            spec = jobs[f]
            name, res = f.result()
            print(f"exported {name}: {res.get('export_error') or str(res['export_s']) + ' s'}", flush=True)
            if "export_error" in res:
                for b in spec.batches:
                    rows[(name, b)]["export_error"] = res["export_error"]
                continue
            for b in spec.batches:  # PyTorch's own float16, where it ran (--torch-fp16)
                bd = os.path.join(a.work, name, f"b{b}")
                outs = [os.path.join(bd, f"torch16_{k}.npy") for k in range(len(spec.out_names))]
                refs = [os.path.join(bd, f"ref_{k}.npy") for k in range(len(spec.out_names))]
                errs = [rel_error(np.load(o), np.load(r))[0] for o, r in zip(outs, refs) if os.path.exists(o)]
                if spec.detections and errs:
                    errs = [detection_error([np.load(o) for o in outs], [np.load(r) for r in refs], 2e-2)[0]]
                if errs:
                    rows[(name, b)]["torch_fp16_error"] = max(errs)
            for b in spec.batches:
                if "cpu" in configs:
                    futures.append(cpu_pool.submit(cpu_task, spec, b))
                with gpu_ready:
                    chain = [c for c in gpu_cfgs if c != "best"]
                    if chain:
                        gpu_queue.append((spec, b, chain))
                    if "best" in gpu_cfgs:
                        gpu_later.append((spec, b, ["best"]))
                    gpu_ready.notify_all()
    with gpu_ready:
        exports_done[0] = True
        gpu_ready.notify_all()
    for t in gpu_threads:
        t.join()
    for f in futures:
        f.result()
    cpu_pool.shutdown()
    benched = [(s, b, rows[(s.name, b)]["cells"][c]) for c in a.bench.split(",") if c for s in specs for b in s.batches
               if rows[(s.name, b)]["cells"].get(c, {}).get("status") in ("ok", "slow")]
    print(f"timing {len(benched)} engines, one at a time", flush=True)
    for spec, b, cell in benched:
        bench_cell(a, spec, b, cell)
    save_json()

    ordered = [rows[(s.name, b)] for s in specs for b in s.batches]
    bad = [(r["model"], r["batch"], c["config"], c.get("status")) for r in ordered for c in r["cells"].values()
           if c.get("status") in ("fail", "slow")]
    bad += [(r["model"], r["batch"], "export", "failed") for r in ordered if r.get("export_error")]
    meta = {"torch": torch.__version__, "size": a.size, "configs": configs, "seconds": round(time.time() - t_start),
            "date": time.strftime("%Y-%m-%d")}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": ordered}, f, indent=1)
    text = write_table(ordered, configs, a.table or os.path.join(a.work, "sweep.md"))
    if a.logs:
        subprocess.run(["tar", "-C", a.work, "-czf", a.logs] +
                       [os.path.relpath(os.path.join(dp, f), a.work) for dp, _, fs in os.walk(a.work)
                        for f in fs if f.endswith(".log")], check=False)
    print(text)
    n_models = len(specs)
    print(f"sweep: {n_models} models, {len(ordered)} rows, {len(bad)} failures, {meta['seconds']} s")
    for b in bad:
        print("  FAILED", *b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
