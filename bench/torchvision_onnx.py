"""Writes what the ResNet-50 / MobileNetV2 GPU scripts build engines from (run with PyTorch's
Python on the GPU machine): WORK/MODEL.onnx for each torchvision MODEL named (comma-separated;
random weights, opset 17, input "input" with a symbolic batch, output "logits"), and
WORK/calib/calib.npy, IMAGES (default 256) random 3x224x224 images for calibration.
Usage: python bench/torchvision_onnx.py WORK resnet50[,mobilenet_v2,...] [IMAGES]"""
import os
import sys

import numpy as np
import torch
import torchvision

work, models = sys.argv[1], sys.argv[2].split(",")
images = int(sys.argv[3]) if len(sys.argv) > 3 else 256
os.makedirs(f"{work}/calib", exist_ok=True)
np.save(f"{work}/calib/calib.npy", np.random.default_rng(0).normal(0, 1, (images, 3, 224, 224)).astype(np.float32))
for m in models:
    net = getattr(torchvision.models, m)().eval()
    torch.onnx.export(net, torch.randn(1, 3, 224, 224), f"{work}/{m}.onnx", opset_version=17,
                      input_names=["input"], output_names=["logits"], dynamic_axes={"input": {0: "batch"}},
                      dynamo=False)
