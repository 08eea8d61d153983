#!/usr/bin/env python3
"""kiln train next to PyTorch eager: same network, batch and precision, same GPU, one run
(bench/train_bench.sh runs it on the GPU machine).

Figures (training images per second):
  - LeNet-5, FP32, batch 256, on 28x28 one-channel images;
  - ResNet-8, FP16 (Kiln --fp16; PyTorch autocast + GradScaler), batch 256, on 3x32x32 images;
  - with --scaling: zoo resnet8 and bench/wide_resnet8.prototxt in FP32 on one GPU (batch 256)
    and on two (--gpus 2, batch 512: 256 per GPU), and the speed-up;
  - with --fashion DIR: LeNet-5 trained on Fashion-MNIST, the wall time until the validation
    accuracy first reaches 90%, and the exported model's test accuracy (kiln eval).

The throughput data sets are random uint8 images in the numpy layout, written under --out. Kiln's
figure is its own per-epoch images/s (the best epoch after the first, which plans cuDNN), which
includes gathering each batch on the host and copying it to the GPU. PyTorch's runs from images
already on the GPU (its best case), shuffled per epoch on the GPU, with cudnn.benchmark on and
TF32 off (the same precision as Kiln's FP32); its figure is steps x batch over the CUDA-event
time of kSteps steps after a warm-up. Writes train_peers.json and train_peers.md to --out and
prints the table last.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

kSteps = 400
kWarmup = 30


class LeNet5(torch.nn.Module):  # zoo lenet5 (and bench/peers.py's)
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = torch.nn.Conv2d(6, 16, 5)
        self.f1 = torch.nn.Linear(16 * 5 * 5, 120)
        self.f2 = torch.nn.Linear(120, 84)
        self.f3 = torch.nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.c1(x)), 2)
        x = F.max_pool2d(torch.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        return self.f3(torch.relu(self.f2(torch.relu(self.f1(x)))))


class Block(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(cout)
        self.c2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride, bias=False), torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet8(torch.nn.Module):  # zoo resnet8 (width 1) and bench/wide_resnet8.prototxt (width 4)
    def __init__(self, width=1):
        super().__init__()
        w = [16 * width, 32 * width, 64 * width]
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, w[0], 3, 1, 1, bias=False), torch.nn.BatchNorm2d(w[0]),
                                        torch.nn.ReLU())
        self.blocks = torch.nn.Sequential(Block(w[0], w[0], 1), Block(w[0], w[1], 2), Block(w[1], w[2], 2))
        self.fc = torch.nn.Linear(w[2], 10)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_data(folder, n, shape, seed):
    """Random uint8 images and labels in Kiln's numpy layout (x_train.npy, y_train.npy)."""
    os.makedirs(folder, exist_ok=True)
    if not os.path.exists(os.path.join(folder, "y_train.npy")):
        rng = np.random.default_rng(seed)
        np.save(os.path.join(folder, "x_train.npy"), rng.integers(0, 256, (n, *shape), dtype=np.uint8))
        np.save(os.path.join(folder, "y_train.npy"), rng.integers(0, 10, n, dtype=np.int64))
    return folder


def kiln_train(kiln, out, tag, args):
    """Runs kiln train; returns (best images/s of the epochs after the first, the log)."""
    metrics = os.path.join(out, f"kiln_{tag}.json")
    cmd = [kiln, "train", *map(str, args), "--device", "gpu", "--metrics", metrics, "--log-every", "100"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    log = " ".join(cmd) + "\n" + r.stdout + r.stderr
    with open(os.path.join(out, f"kiln_{tag}.log"), "w") as f:
        f.write(log)
    if r.returncode != 0:
        print(f"kiln train failed ({tag}):\n{r.stderr[-3000:]}", file=sys.stderr)
        return None, log
    with open(metrics) as f:
        epochs = json.load(f)["epochs"]
    rates = [e["images_per_s"] for e in epochs[1:]] or [epochs[0]["images_per_s"]]
    return max(rates), log


def torch_train(model, shape, batch, fp16, n=60000):
    """PyTorch eager training images/s from GPU-resident random data."""
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = model.to(dev)
    x_all = torch.rand((n, *shape), device=dev)
    y_all = torch.randint(0, 10, (n,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=fp16)
    steps_per_epoch = n // batch
    perm = torch.randperm(n, device=dev)

    def step(i):
        nonlocal perm
        if i % steps_per_epoch == 0:
            perm = torch.randperm(n, device=dev)
        idx = perm[(i % steps_per_epoch) * batch:(i % steps_per_epoch + 1) * batch]
        x, y = x_all[idx], y_all[idx]
        with torch.autocast("cuda", dtype=torch.float16, enabled=fp16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for i in range(kWarmup):
        step(i)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for i in range(kSteps):
        step(kWarmup + i)
    b.record()
    b.synchronize()
    return kSteps * batch * 1000.0 / a.elapsed_time(b)


def time_to_90(kiln, out, fashion):
    """Trains LeNet-5 on Fashion-MNIST; returns (seconds to 90% validation accuracy, test accuracy)."""
    onnx = os.path.join(out, "lenet5_fashion.onnx")
    # On the CPU backend this recipe reached 90.3% validation accuracy at epoch 7 and 90.5% test accuracy.
    cmd = [kiln, "train", "--net", "lenet5", "--data", fashion, "--device", "gpu", "--epochs", "15", "--batch", "128",
           "--solver", "sgd", "--lr", "0.05", "--weight-decay", "0.0005", "--lr-schedule", "cosine", "-o", onnx,
           "--metrics", os.path.join(out, "kiln_fashion.json")]
    start = time.monotonic()
    reached = None
    with open(os.path.join(out, "kiln_fashion.log"), "w") as log:
        log.write(" ".join(cmd) + "\n")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.PIPE, text=True)
        for line in p.stderr:  # the epoch lines, as each epoch ends
            log.write(line)
            m = re.search(r"val loss \S+ acc ([0-9.]+)%", line)
            if m and reached is None and float(m.group(1)) >= 90.0:
                reached = time.monotonic() - start
        p.wait()
    if p.returncode != 0:
        print("kiln train on Fashion-MNIST failed; see kiln_fashion.log", file=sys.stderr)
        return reached, None
    r = subprocess.run([kiln, "eval", onnx, "--data", fashion], capture_output=True, text=True)
    with open(os.path.join(out, "kiln_fashion_eval.log"), "w") as f:
        f.write(r.stdout + r.stderr)
    m = re.search(r"top-1 accuracy:?\s*([0-9.]+)%", r.stdout + r.stderr)
    return reached, float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--scaling", action="store_true", help="also the 2-GPU scaling runs (needs two GPUs)")
    ap.add_argument("--fashion", help="a Fashion-MNIST folder: also the time to 90%% and the test accuracy")
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = torch.cuda.get_device_name(0)
    d28 = make_data(os.path.join(a.out, "data28"), 120000, (28, 28), 1)
    d32 = make_data(os.path.join(a.out, "data32"), 50000, (3, 32, 32), 2)
    common = ["--epochs", a.epochs, "--val-split", "0.02"]
    rows, results = [], {"gpu": gpu, "torch": torch.__version__}

    def row(name, kiln_ips, torch_ips):
        ratio = kiln_ips / torch_ips if kiln_ips and torch_ips else None
        rows.append(f"| {name} | {kiln_ips or 0:,.0f} | {torch_ips or 0:,.0f} | {ratio:.2f}x |" if ratio else
                    f"| {name} | {kiln_ips or 0:,.0f} | {torch_ips or 0:,.0f} | - |")
        results[name] = {"kiln": kiln_ips, "torch": torch_ips, "ratio": ratio}

    k, _ = kiln_train(a.kiln, a.out, "lenet5_fp32_b256", ["--net", "lenet5", "--data", d28, "--batch", 256, *common])
    row("LeNet-5 FP32 b256", k, torch_train(LeNet5(), (1, 28, 28), 256, False))
    k, _ = kiln_train(a.kiln, a.out, "resnet8_fp16_b256",
                      ["--net", "resnet8", "--data", d32, "--batch", 256, "--fp16", *common])
    row("ResNet-8 FP16 b256", k, torch_train(ResNet8(), (3, 32, 32), 256, True))

    scale_rows = []
    if a.scaling:
        wide = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wide_resnet8.prototxt")
        for name, net in (("resnet8", "resnet8"), ("wide_resnet8", wide)):
            one, _ = kiln_train(a.kiln, a.out, f"{name}_1gpu", ["--net", net, "--data", d32, "--batch", 256, *common])
            two, _ = kiln_train(a.kiln, a.out, f"{name}_2gpu",
                                ["--net", net, "--data", d32, "--batch", 512, "--gpus", 2, *common])
            s = two / one if one and two else None
            results[f"{name} scaling"] = {"1gpu": one, "2gpu": two, "speedup": s}
            scale_rows.append(f"| {name} FP32, 256 per GPU | {one or 0:,.0f} | {two or 0:,.0f} | "
                              f"{f'{s:.2f}x' if s else '-'} |")

    fashion = None
    if a.fashion:
        reached, test = time_to_90(a.kiln, a.out, a.fashion)
        results["fashion"] = {"seconds_to_90": reached, "test_accuracy": test}
        fashion = (f"LeNet-5 on Fashion-MNIST (SGD, cosine, batch 128, 15 epochs): 90% validation accuracy after "
                   f"{f'{reached:.1f} s' if reached else 'never'} (wall time from the start of kiln train); test "
                   f"accuracy of the export {f'{test:.2f}%' if test is not None else 'unknown'}")

    md = [f"Training throughput, images/s ({gpu}, PyTorch {torch.__version__}):", "",
          "| network | Kiln | PyTorch eager | Kiln / PyTorch |", "|---|---|---|---|", *rows]
    if scale_rows:
        md += ["", "Data parallel (Kiln):", "", "| network | 1 GPU | 2 GPUs | speed-up |", "|---|---|---|---|",
               *scale_rows]
    if fashion:
        md += ["", fashion]
    with open(os.path.join(a.out, "train_peers.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(a.out, "train_peers.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
