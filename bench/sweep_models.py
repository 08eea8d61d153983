"""The architectures of the model sweep (bench/sweep.py): torchvision classifiers, segmentation and
video models, a U-Net, transformer encoders and decoders written in torch.nn, LSTM/GRU models and
a DeepSpeech2-style speech model. Random weights from fixed seeds (the machines cannot download
weights). Works with PyTorch 1.13 (Debian 12, CI) and 2.x (the GPU machine).

Each entry: a builder returning the module in eval mode, its example inputs at a given batch, the
input and output names, and the batch sizes the sweep runs it at. `size` picks the full shapes
("full": 224x224 images, BERT-base, GPT-2-small) or the CI subset's small ones ("small").
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Spec:
    def __init__(self, name, build, inputs, in_names=("input",), out_names=("output",), batches=(1,),
                 expect_refused=None, stats=True, detections=False, init=None, opset=17):
        self.name = name
        self.build = build          # () -> nn.Module
        self.inputs = inputs        # (batch, generator) -> tuple of tensors
        self.in_names = list(in_names)
        self.out_names = list(out_names)
        self.batches = list(batches)
        self.expect_refused = expect_refused  # Kiln refuses it (data-dependent shapes): one clear message
        self.stats = stats          # one training-mode pass to give BatchNorm real statistics
        # Outputs are detections (boxes, scores, labels): compared as sets, with float32 references
        # (float64 would order near-tied scores differently from any float32 run).
        self.detections = detections
        self.init = init            # (module, example inputs) -> None: weights of its own, before the export
        self.opset = opset          # the export's opset


def images(c, h, w):
    return lambda b, g: (torch.randn(b, c, h, w, generator=g),)


# ---- transformers in torch.nn ------------------------------------------------------------------

class SelfAttention(nn.Module):
    """Multi-head attention as Hugging Face writes it: Q, K, V projections, heads split by
    view/transpose, scores scaled by 1/sqrt(d), an additive mask, Softmax, then the heads merged."""

    def __init__(self, d, heads):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.dk).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dk) + mask
        y = torch.matmul(torch.softmax(s, dim=-1), v)
        b, _, t, _ = y.shape
        return self.o(y.transpose(1, 2).reshape(b, t, self.h * self.dk))


class BertLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.attn = SelfAttention(d, heads)
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-12), nn.LayerNorm(d, eps=1e-12)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x, mask):
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class Bert(nn.Module):
    """BERT encoder: token + position + segment embeddings, post-LN layers, a padding mask, pooler."""

    def __init__(self, layers=12, d=768, heads=12, ff=3072, vocab=30522, max_len=512):
        super().__init__()
        self.tok, self.pos, self.seg = nn.Embedding(vocab, d), nn.Embedding(max_len, d), nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d, heads, ff) for _ in range(layers))
        self.pool = nn.Linear(d, d)

    def forward(self, ids, mask):
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device).unsqueeze(0)
        x = self.ln(self.tok(ids) + self.pos(pos) + self.seg(torch.zeros_like(ids)))
        add = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, add)
        return x, torch.tanh(self.pool(x[:, 0]))


class GptBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.h, self.dk = heads, d // heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, causal):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, self.dk).transpose(1, 2) for z in (q, k, v))
        s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.dk))
        s = s.masked_fill(causal[:, :, :t, :t] == 0, float("-inf"))
        y = torch.matmul(torch.softmax(s, dim=-1), v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    """GPT-2 decoder: pre-LN blocks, a causal mask, tanh GELU, the LM head tied to the embedding."""

    def __init__(self, layers=12, d=768, heads=12, vocab=50257, ctx=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(GptBlock(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.register_buffer("causal", torch.tril(torch.ones(ctx, ctx)).view(1, 1, ctx, ctx))

    def forward(self, ids):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device).unsqueeze(0))
        for blk in self.blocks:
            x = blk(x, self.causal)
        return torch.matmul(self.ln(x), self.wte.weight.t())


class TorchEncoder(nn.Module):
    """nn.TransformerEncoder with a key padding mask (bool, True = padding)."""

    def __init__(self, layers, d, heads, ff):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x, pad):
        return self.enc(x, src_key_padding_mask=pad)


class TorchDecoder(nn.Module):
    """nn.TransformerDecoder with a causal target mask over an encoder's memory."""

    def __init__(self, layers, d, heads, ff):
        super().__init__()
        layer = nn.TransformerDecoderLayer(d, heads, ff, dropout=0.0, batch_first=True, norm_first=True)
        self.dec = nn.TransformerDecoder(layer, layers)

    def forward(self, tgt, memory):
        t = tgt.shape[1]
        causal = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        return self.dec(tgt, memory, tgt_mask=causal)


def tokens(vocab, t, padded):
    def make(b, g):
        ids = torch.randint(0, vocab, (b, t), generator=g)
        if not padded:
            return (ids,)
        mask = torch.ones(b, t, dtype=torch.int64)
        for i in range(b):  # sentence i is 60% to 100% of the length, the rest padding
            mask[i, int(t * (0.6 + 0.4 * i / max(1, b))):] = 0
        mask[0, :] = 1
        return ids, mask
    return make


def padded_seq(t, d):
    def make(b, g):
        pad = torch.zeros(b, t, dtype=torch.bool)
        pad[:, int(t * 0.75):] = True
        pad[0, :] = False
        return torch.randn(b, t, d, generator=g), pad
    return make


# ---- recurrent and speech models ---------------------------------------------------------------

class Rnn(nn.Module):
    def __init__(self, cell, inp, hidden, layers, bidirectional, classes=32):
        super().__init__()
        self.rnn = cell(inp, hidden, layers, batch_first=True, bidirectional=bidirectional)
        self.fc = nn.Linear(hidden * (2 if bidirectional else 1), classes)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y)


class DeepSpeech2(nn.Module):
    """Two 2-D convolutions over a spectrogram [N, 1, freq, time] (41x11 / 2x2, 21x11 / 2x1, as in
    DeepSpeech2), Hardtanh, then a bidirectional GRU stack over time and a classifier per frame."""

    def __init__(self, freq=161, hidden=512, layers=3, classes=29, channels=32):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, channels, (41, 11), (2, 2), (20, 5), bias=False), nn.BatchNorm2d(channels),
            nn.Hardtanh(0, 20),
            nn.Conv2d(channels, channels, (21, 11), (2, 1), (10, 5), bias=False), nn.BatchNorm2d(channels),
            nn.Hardtanh(0, 20))
        f = (freq + 40 - 41) // 2 + 1
        f = (f + 20 - 21) // 2 + 1
        self.gru = nn.GRU(channels * f, hidden, layers, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        x = self.conv(x)
        n, c, f, t = x.shape
        x = x.reshape(n, c * f, t).transpose(1, 2)
        y, _ = self.gru(x)
        return self.fc(y).log_softmax(-1)


class Wav2Letter(nn.Module):
    """1-D convolutions over audio features: a wide strided first layer, dilated layers."""

    def __init__(self, feats=40, classes=29, width=250):
        super().__init__()
        layers, c = [], feats
        for k, s, d in [(48, 2, 1), (7, 1, 1), (7, 1, 2), (7, 1, 4), (32, 1, 1), (1, 1, 1)]:
            layers += [nn.Conv1d(c, width, k, s, padding=d * (k - 1) // 2, dilation=d), nn.ReLU()]
            c = width
        layers.append(nn.Conv1d(c, classes, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class UNet(nn.Module):
    """A U-Net: two 3x3 convolutions per level, max-pool down, ConvTranspose up, skip concats."""

    def __init__(self, cin=3, classes=2, base=32, depth=4):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
        ch = [base * 2 ** i for i in range(depth + 1)]
        self.down = nn.ModuleList([block(cin, ch[0])] + [block(ch[i], ch[i + 1]) for i in range(depth)])
        self.up = nn.ModuleList(nn.ConvTranspose2d(ch[i + 1], ch[i], 2, 2) for i in reversed(range(depth)))
        self.dec = nn.ModuleList(block(2 * ch[i], ch[i]) for i in reversed(range(depth)))
        self.head = nn.Conv2d(ch[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, d in enumerate(self.down):
            x = d(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        for up, dec, s in zip(self.up, self.dec, reversed(skips[:-1])):
            x = dec(torch.cat([up(x), s], 1))
        return self.head(x)


class SmallCnn(nn.Module):
    """The geometries that crashed Kiln's CPU convolution, small: AlexNet's 11x11 / 4 pads 2 stem,
    DeepSpeech2's 41x11 / 2x2 and 21x11 / 2x1, a dilated depthwise layer, an asymmetric stride."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 16, 11, 4, 2)
        self.b = nn.Conv2d(16, 16, (41, 11), (2, 2), (20, 5))
        self.c = nn.Conv2d(16, 16, (21, 11), (2, 1), (10, 5))
        self.d = nn.Conv2d(16, 16, 3, 1, padding=4, dilation=4, groups=16)
        self.e = nn.Conv2d(16, 8, (1, 5), (3, 1), (0, 2))

    def forward(self, x):
        for conv in (self.a, self.b, self.c, self.d, self.e):
            x = F.relu(conv(x))
        return x


# ---- the list ----------------------------------------------------------------------------------

def tv(name, **kw):
    import torchvision
    return lambda: getattr(torchvision.models, name)(**kw)


def tv_seg(name, **kw):
    import torchvision
    return lambda: getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None, **kw)


def tv_video(name):
    import torchvision
    return lambda: getattr(torchvision.models.video, name)()


def tv_has(name, module=None):
    try:
        import torchvision
    except ImportError:
        return False
    return hasattr(module(torchvision) if module else torchvision.models, name)


def full_specs():
    img = images(3, 224, 224)
    s = []
    classifiers = ["alexnet", "vgg11_bn", "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2",
                   "densenet121", "squeezenet1_1", "googlenet", "inception_v3", "mobilenet_v2",
                   "mobilenet_v3_small", "mobilenet_v3_large", "shufflenet_v2_x1_0", "mnasnet1_0",
                   "efficientnet_b0", "efficientnet_v2_s", "regnet_x_400mf", "regnet_y_400mf", "convnext_tiny",
                   "vit_b_16", "swin_t", "swin_v2_t", "maxvit_t"]
    b8 = {"resnet50", "mobilenet_v2", "efficientnet_b0", "convnext_tiny", "vit_b_16", "swin_t"}
    for name in classifiers:
        if not tv_has(name):
            continue
        kw = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
        s.append(Spec(name, tv(name, **kw), img, out_names=["logits"], batches=[1, 8] if name in b8 else [1]))
    for name in ["fcn_resnet50", "deeplabv3_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]:
        if tv_has(name, lambda tv: tv.models.segmentation):
            s.append(Spec(name, tv_seg(name, num_classes=21), img, out_names=["out"],
                          batches=[1, 8] if name == "deeplabv3_mobilenet_v3_large" else [1]))
    if tv_has("r3d_18", lambda tv: tv.models.video):
        s.append(Spec("r3d_18", tv_video("r3d_18"), lambda b, g: (torch.randn(b, 3, 8, 112, 112, generator=g),),
                      out_names=["logits"]))
    s.append(Spec("unet", lambda: UNet(), images(3, 224, 224), out_names=["mask"], batches=[1, 8]))
    s.append(Spec("bert_base", lambda: Bert(), tokens(30522, 128, True), in_names=["input_ids", "attention_mask"],
                  out_names=["hidden", "pooled"], batches=[1, 8]))
    s.append(Spec("gpt2_small", lambda: Gpt2(), tokens(50257, 128, False), in_names=["input_ids"],
                  out_names=["logits"], batches=[1, 8]))
    s.append(Spec("torch_encoder", lambda: TorchEncoder(6, 512, 8, 2048), padded_seq(64, 512),
                  in_names=["x", "padding"], batches=[1, 8]))
    s.append(Spec("torch_decoder", lambda: TorchDecoder(6, 512, 8, 2048),
                  lambda b, g: (torch.randn(b, 32, 512, generator=g), torch.randn(b, 48, 512, generator=g)),
                  in_names=["tgt", "memory"]))
    seq = lambda b, g: (torch.randn(b, 100, 80, generator=g),)  # noqa: E731
    s.append(Spec("lstm_2x256", lambda: Rnn(nn.LSTM, 80, 256, 2, False), seq, batches=[1, 8]))
    s.append(Spec("lstm_bi_2x256", lambda: Rnn(nn.LSTM, 80, 256, 2, True), seq))
    s.append(Spec("gru_2x256", lambda: Rnn(nn.GRU, 80, 256, 2, False), seq))
    s.append(Spec("gru_bi_3x512", lambda: Rnn(nn.GRU, 80, 512, 3, True), seq, batches=[1, 8]))
    s.append(Spec("deepspeech2", lambda: DeepSpeech2(), lambda b, g: (torch.randn(b, 1, 161, 200, generator=g),),
                  in_names=["spectrogram"], batches=[1, 8]))
    s.append(Spec("wav2letter", lambda: Wav2Letter(), lambda b, g: (torch.randn(b, 40, 400, generator=g),)))
    s += detector_specs("full")
    return s


def small_specs():
    """The CI subset: small inputs, two-layer transformers; what crashed, and one of each family."""
    s = [Spec("conv_geometries", lambda: SmallCnn(), images(3, 227, 227), batches=[1, 2])]
    have_tv = tv_has("resnet18")
    if have_tv:
        s.append(Spec("alexnet", tv("alexnet"), images(3, 224, 224), out_names=["logits"]))
        for name in ["resnet18", "mobilenet_v3_small", "shufflenet_v2_x1_0", "efficientnet_b0", "regnet_y_400mf",
                     "convnext_tiny", "squeezenet1_1"]:
            if tv_has(name):
                s.append(Spec(name, tv(name), images(3, 64, 64), out_names=["logits"]))
        if tv_has("swin_t"):
            s.append(Spec("swin_t", tv("swin_t"), images(3, 64, 64), out_names=["logits"]))
        if tv_has("deeplabv3_mobilenet_v3_large", lambda tv: tv.models.segmentation):
            s.append(Spec("deeplabv3_mobilenet_v3_large", tv_seg("deeplabv3_mobilenet_v3_large", num_classes=5),
                          images(3, 96, 96), out_names=["out"]))
    s.append(Spec("unet", lambda: UNet(base=8, depth=3), images(3, 64, 64), out_names=["mask"]))
    s.append(Spec("bert_2layer", lambda: Bert(layers=2, d=128, heads=4, ff=512, vocab=1000, max_len=64),
                  tokens(1000, 32, True), in_names=["input_ids", "attention_mask"], out_names=["hidden", "pooled"],
                  batches=[1, 3]))
    s.append(Spec("gpt2_2layer", lambda: Gpt2(layers=2, d=128, heads=4, vocab=1000, ctx=64), tokens(1000, 32, False),
                  in_names=["input_ids"], out_names=["logits"]))
    s.append(Spec("torch_encoder_2layer", lambda: TorchEncoder(2, 64, 4, 128), padded_seq(16, 64),
                  in_names=["x", "padding"]))
    s.append(Spec("torch_decoder_2layer", lambda: TorchDecoder(2, 64, 4, 128),
                  lambda b, g: (torch.randn(b, 8, 64, generator=g), torch.randn(b, 12, 64, generator=g)),
                  in_names=["tgt", "memory"]))
    seq = lambda b, g: (torch.randn(b, 20, 16, generator=g),)  # noqa: E731
    s.append(Spec("lstm_bi_2x32", lambda: Rnn(nn.LSTM, 16, 32, 2, True, 8), seq, batches=[1, 2]))
    s.append(Spec("gru_2x32", lambda: Rnn(nn.GRU, 16, 32, 2, False, 8), seq))
    s.append(Spec("deepspeech2_small", lambda: DeepSpeech2(freq=81, hidden=32, layers=2, channels=8),
                  lambda b, g: (torch.randn(b, 1, 81, 50, generator=g),), in_names=["spectrogram"]))
    s.append(Spec("wav2letter_small", lambda: Wav2Letter(feats=16, width=32),
                  lambda b, g: (torch.randn(b, 16, 120, generator=g),)))
    s += detector_specs("small")
    return s


# ---- detectors ---------------------------------------------------------------------------------

class TinyBackbone(nn.Module):
    """Two feature levels of `out_channels` channels (strides 8 and 16): torchvision's detection
    heads and post-processing (anchors, box decoding, score filtering, TopK, batched NMS, RoIAlign)
    over a backbone small enough for the CI subset."""

    def __init__(self, out_channels=16):
        super().__init__()
        self.out_channels = out_channels
        c = out_channels
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 4, 1), nn.ReLU(), nn.Conv2d(c, c, 3, 2, 1), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(c, c, 3, 2, 1), nn.ReLU())

    def forward(self, x):
        from collections import OrderedDict
        a = self.stem(x)
        return OrderedDict([("0", a), ("1", self.down(a))])


def spread_init(model, example):
    """He-normal weights and biases of 0.5 spread in every convolution and linear layer, then one
    pass over `example` that scales each so that its output has unit variance (LSUV). A detector's
    own initialisation gives every anchor almost the same score (RetinaNet's classification prior
    puts them all at 0.01), and He's alone saturates them at 1.0 after a ResNet-50: either way ties,
    not the model, would decide which boxes TopK and NMS keep. The export traces this model too, so
    it must find boxes on its example (Faster R-CNN's box decoding reshapes only when it does)."""
    g = torch.Generator().manual_seed(7)
    layers = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]

    def unit_variance(m, inputs, out):
        s = float(out.std()) if out.numel() > 1 else 0.0
        if not (s > 0 and math.isfinite(s)):
            return None
        m.weight.div_(s)
        if m.bias is not None:
            m.bias.div_(s)
        return out / s

    with torch.no_grad():
        for m in layers:
            fan_in = m.weight[0].numel()
            m.weight.copy_(torch.randn(m.weight.shape, generator=g) * math.sqrt(2.0 / fan_in))
            if m.bias is not None:
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.5)
        hooks = [m.register_forward_hook(unit_variance) for m in layers]
        model.eval()
        model(*example)
        for h in hooks:
            h.remove()


def detector_specs(size):
    """torchvision's SSDlite, RetinaNet and Faster R-CNN as their builders make them (full: their
    own backbones at 320x320), or small: SSDlite with 4 classes, and the others' heads and
    post-processing on TinyBackbone at 128x128. Weights by spread_init."""
    if not tv_has("ssdlite320_mobilenet_v3_large", lambda tv: tv.models.detection):
        return []
    import torchvision.models.detection as det
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.ops import MultiScaleRoIAlign
    outs = ["boxes", "scores", "labels"]  # SSD's and RetinaNet's order; Faster R-CNN's dict has labels first
    if size == "full":
        px = 320
        ssd = lambda: det.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)  # noqa: E731
        retina = lambda: det.retinanet_resnet50_fpn(weights=None, weights_backbone=None,  # noqa: E731
                                                    min_size=px, max_size=px)
        frcnn = lambda: det.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None)  # noqa: E731
        names = ["ssdlite320", "retinanet_resnet50_fpn", "fasterrcnn_mobilenet_v3_320_fpn"]
    else:
        px = 128
        anchors = lambda: AnchorGenerator(((16, 32), (64, 128)), ((0.5, 1.0, 2.0),) * 2)  # noqa: E731

        def ssd():
            return det.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=5)

        def retina():
            return det.RetinaNet(TinyBackbone(), num_classes=4, anchor_generator=anchors(), min_size=px,
                                 max_size=px, detections_per_img=50)

        def frcnn():
            c = 16
            return det.FasterRCNN(TinyBackbone(c), min_size=px, max_size=px, rpn_anchor_generator=anchors(),
                                  box_roi_pool=MultiScaleRoIAlign(["0", "1"], 7, 2),
                                  box_head=TwoMLPHead(c * 49, 32), box_predictor=FastRCNNPredictor(32, 4),
                                  rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=100,
                                  box_detections_per_img=50)
        names = ["ssdlite_small", "retinanet_small", "fasterrcnn_small"]
    img = lambda b, g: (torch.rand(b, 3, px, px, generator=g),)  # noqa: E731
    # Faster R-CNN at opset 15: from opset 16 on, a RoiAlign without coordinate_transformation_mode
    # means half_pixel, and PyTorch 1.13's exporter (Debian's, which CI runs) writes torchvision's
    # aligned=False RoIAlign without it, a graph that differs from the model (onnxruntime agrees).
    return [Spec(n, f, img, out_names=outs if not n.startswith("fasterrcnn") else ["boxes", "labels", "scores"],
                 stats=False, detections=True, init=spread_init, opset=15 if n.startswith("fasterrcnn") else 17)
            for n, f in zip(names, [ssd, retina, frcnn])]


def specs(size):
    return full_specs() if size == "full" else small_specs()
