"""Issue 40's INT8 accuracy figure: BERT-base (bench/sweep_models.py's encoder, 128 tokens, padding
mask) with a 10-class head on the pooled output, random weights, exported by PyTorch (opset 17).
Kiln builds it in float and INT8 (`--int8` on the CPU, `--best` on the GPU), calibrated on its own
random token sequences, with the accuracy guard (`--validate`, agreement with the float engine,
`--accuracy-budget 1`), and both engines run the same N other random sequences. The oracle is
PyTorch's float32 logits (TF32 off): argmax agreement of each engine with them, and the logits'
largest error over their range. Writes OUT/bert_int8.json, OUT/optimize_*.log (the guard's report)
and prints a table.

  bert_int8_accuracy.py --kiln build/kiln --out DIR [--device cpu|gpu] [--n 1000] [--batch 50]"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_models import Bert  # noqa: E402

SEQ, VOCAB, CLASSES = 128, 30522, 10


class BertClassifier(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.bert = Bert(layers=layers)
        self.head = nn.Linear(768, CLASSES)

    def forward(self, input_ids, attention_mask):
        return self.head(self.bert(input_ids, attention_mask)[1])


def sequences(n, seed):
    """n random token sequences, each 25% to 100% real tokens and the rest padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    lengths = torch.randint(SEQ // 4, SEQ + 1, (n,), generator=g)
    mask = (torch.arange(SEQ)[None, :] < lengths[:, None]).to(torch.int64)
    return ids, mask


def write_folder(path, ids, mask, batch):
    """Kiln's multi-input .npy layout: one sub-folder per chunk with NAME.npy per input."""
    for i in range(0, len(ids), batch):
        d = os.path.join(path, f"{i // batch:04d}")
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "input_ids.npy"), ids[i:i + batch].numpy())
        np.save(os.path.join(d, "attention_mask.npy"), mask[i:i + batch].numpy())


def run(cmd, log):
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(map(str, cmd)) + f"\n({time.time() - t:.1f} s)\n" + r.stdout + r.stderr + "\n")
    if r.returncode != 0:
        raise RuntimeError(f"failed: {' '.join(map(str, cmd))}\n{r.stderr[-3000:]}")
    return r.stdout + r.stderr


def kiln_logits(kiln, engine, val, out, device_args):
    """The engine's logits over every chunk of the validation folder, in order."""
    chunks = sorted(os.listdir(val))
    res = []
    for c in chunks:
        d = os.path.join(out, c)
        run([kiln, "run", engine, "--input", f"input_ids={val}/{c}/input_ids.npy",
             "--input", f"attention_mask={val}/{c}/attention_mask.npy", "--outputs", d] + device_args,
            os.path.join(out, "run.log"))
        res.append(np.load(os.path.join(d, "output_0.npy")))
    return np.concatenate(res).astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--n", type=int, default=1000, help="validation sequences")
    ap.add_argument("--calib-n", type=int, default=200, help="calibration sequences")
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--budget", type=float, default=1.0, help="--accuracy-budget (points of agreement)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = os.path.join(a.out, "optimize.log")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    torch.manual_seed(0)
    model = BertClassifier(a.layers).eval()
    onnx_path = os.path.join(a.out, "bert_cls.onnx")
    ids, mask = sequences(a.batch, 1)
    kw = dict(input_names=["input_ids", "attention_mask"], output_names=["logits"], opset_version=17)
    try:
        torch.onnx.export(model, (ids, mask), onnx_path, dynamo=False, **kw)  # PyTorch 2.5+: the TorchScript exporter
    except TypeError:
        torch.onnx.export(model, (ids, mask), onnx_path, **kw)

    calib, val = os.path.join(a.out, "calib"), os.path.join(a.out, "val")
    write_folder(calib, *sequences(a.calib_n, 2), a.batch)
    vids, vmask = sequences(a.n, 3)
    write_folder(val, vids, vmask, a.batch)
    with torch.no_grad():
        ref = torch.cat([model(vids[i:i + 200], vmask[i:i + 200]) for i in range(0, a.n, 200)]).double().numpy()
    ref_class = ref.argmax(1)
    top2 = np.sort(ref, 1)[:, -2:]
    res = {"date": time.strftime("%Y-%m-%d"), "device": a.device, "sequences": a.n, "layers": a.layers,
           "classes_predicted": np.bincount(ref_class, minlength=CLASSES).tolist(),
           "median_top2_margin_over_range": float(np.median(top2[:, 1] - top2[:, 0]) / np.ptp(ref)), "engines": {}}

    dev = ["--device", a.device]
    builds = {"float": ["--fp16"] if a.device == "gpu" else [],
              "int8": (["--best"] if a.device == "gpu" else ["--int8"]) +
                      ["--calib", calib, "--validate", val, "--accuracy-budget", str(a.budget)]}
    for name, flags in builds.items():
        engine = os.path.join(a.out, f"{name}.kiln")
        t = time.time()
        text = run([a.kiln, "optimize", onnx_path, "--batch", str(a.batch), "-o", engine] + dev + flags, log)
        build_s = time.time() - t
        logits = kiln_logits(a.kiln, engine, val, os.path.join(a.out, f"{name}_out"), ["--device", a.device])
        agree = float((logits.argmax(1) == ref_class).mean())
        err = float(np.abs(logits - ref).max() / np.ptp(ref))
        res["engines"][name] = {"flags": " ".join(flags).replace(a.out + "/", ""), "build_s": round(build_s, 1),
                                "argmax_agreement_with_pytorch_fp32": agree, "max_error_over_range": err,
                                "guard": [ln for ln in text.splitlines() if "accuracy guard" in ln or ln.startswith("result:")]}
        print(f"{name:6s} agreement with PyTorch FP32 {100 * agree:6.2f}%  max error {err:.2e} of the range"
              f"  (build {build_s:.0f} s)", flush=True)
    with open(os.path.join(a.out, "bert_int8.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
