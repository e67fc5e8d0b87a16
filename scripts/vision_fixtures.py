#!/usr/bin/env python3
"""Generate small PyTorch reference fixtures for the vision models.

Writes, into tests/fixtures/vision/ (relative to the repository root):

  resnet20.safetensors            CIFAR ResNet-20 (torchvision naming, 1x1-conv
                                  downsample shortcuts, 272,474 parameters)
  mobilenetv2_0.25.safetensors    torchvision mobilenet_v2(num_classes=10,
                                  width_mult=0.25) with a stride-1 stem
                                  (features.0.0) and classifier dropout p=0

Each file holds, all float32 and contiguous:
  <state_dict name>               every state_dict entry except
                                  num_batches_tracked, BEFORE the train step
  input [4,3,32,32], labels [4]   labels are integer values stored as float32
  eval.logits [4,10]              model.eval() forward, initial running stats
  train.logits [4,10]             model.train() forward
  train.loss [1]                  F.cross_entropy(train.logits, labels), mean
  grad.<param name>               d(train.loss)/d(param) for every parameter
  after.<bn>.running_mean/_var    BN running stats after that one train
                                  forward (momentum 0.1, unbiased running_var)
and metadata {"model", "batch", "classes", "torch"}.

With --counts it instead prints parameter / BN-buffer counts for a set of
CIFAR ResNets, torchvision ResNets and MobileNetV2 widths, plus conv+linear
multiply-accumulate counts per sample for a few models.

Requires: pip install torch torchvision safetensors
CI does NOT run this script; its outputs are committed to the repository.
"""

import argparse
import json
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import BasicBlock, conv1x1
from safetensors.torch import save_file

BATCH = 4
CLASSES = 10
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(REPO, "tests", "fixtures", "vision")


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

class CifarResNet(nn.Module):
    """CIFAR ResNet-(6n+2) with torchvision attribute names.

    conv1 3x3/1 (3->16, no bias), bn1, relu, no max pool; layer1..3 of n
    torchvision BasicBlocks at widths 16/32/64 (stride 2 on the first block of
    layer2/layer3, downsample = Sequential(conv1x1 stride s, BatchNorm2d));
    adaptive avg pool to 1x1; fc Linear(64, num_classes).
    """

    def __init__(self, n, num_classes=10):
        super().__init__()
        self.inplanes = 16
        self.conv1 = nn.Conv2d(3, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(16, n, 1)
        self.layer2 = self._make_layer(32, n, 2)
        self.layer3 = self._make_layer(64, n, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(64, num_classes)
        # Same init as torchvision ResNet.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes, stride), nn.BatchNorm2d(planes)
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        for _ in range(1, blocks):
            layers.append(BasicBlock(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet_cifar(depth, num_classes=10):
    assert (depth - 2) % 6 == 0
    return CifarResNet((depth - 2) // 6, num_classes)


def mobilenet_v2_small(width, num_classes=10):
    m = torchvision.models.mobilenet_v2(num_classes=num_classes, width_mult=width)
    m.features[0][0].stride = (1, 1)  # small-input stem for 32x32 images
    m.classifier[0].p = 0.0  # dropout off: deterministic fixture
    return m


def tv_resnet(name, num_classes, cifar_stem=False):
    m = getattr(torchvision.models, name)(num_classes=num_classes)
    if cifar_stem:
        m.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
        m.maxpool = nn.Identity()
    return m


# --------------------------------------------------------------------------
# Counting
# --------------------------------------------------------------------------

def n_params(m):
    return sum(p.numel() for p in m.parameters())


def n_bn_buffers(m):
    return sum(
        mod.running_mean.numel() + mod.running_var.numel()
        for mod in m.modules()
        if isinstance(mod, nn.modules.batchnorm._BatchNorm)
    )


def macs(model, shape):
    """Conv + linear multiply-accumulates per sample for input shape (C,H,W)."""
    total = [0]

    def conv_hook(mod, inp, out):
        _, oc, oh, ow = out.shape
        kh, kw = mod.kernel_size
        total[0] += oh * ow * oc * (mod.in_channels // mod.groups) * kh * kw

    def lin_hook(mod, inp, out):
        total[0] += mod.in_features * mod.out_features

    hooks = []
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):
            hooks.append(mod.register_forward_hook(conv_hook))
        elif isinstance(mod, nn.Linear):
            hooks.append(mod.register_forward_hook(lin_hook))
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, *shape))
    for h in hooks:
        h.remove()
    return total[0]


def print_counts():
    rows = []

    def add(label, m):
        rows.append((label, n_params(m), n_bn_buffers(m)))

    for depth in (20, 32, 44, 56):
        for c in (10, 100):
            add(f"cifar resnet{depth} c={c}", resnet_cifar(depth, c))
    for name in ("resnet18", "resnet34", "resnet50"):
        for c in (1000, 10):
            add(f"tv {name} c={c}", tv_resnet(name, c))
        add(f"tv {name} c=10 cifar-stem", tv_resnet(name, 10, cifar_stem=True))
    add("mobilenet_v2 w=1.0 c=1000", torchvision.models.mobilenet_v2(num_classes=1000))
    for w in (1.0, 0.5, 0.25, 1.4):
        add(f"mobilenet_v2 w={w} c=10",
            torchvision.models.mobilenet_v2(num_classes=10, width_mult=w))

    print(f"{'model':36} {'params':>12} {'bn buffers':>12}")
    for label, p, b in rows:
        print(f"{label:36} {p:>12,} {b:>12,}")

    print()
    print(f"{'model (conv+linear MACs/sample)':44} {'MACs':>15}")
    for label, m, shape in (
        ("cifar resnet20 c=10 3x32x32", resnet_cifar(20, 10), (3, 32, 32)),
        ("mobilenet_v2 w=1.0 c=10 3x32x32 stride-1 stem",
         mobilenet_v2_small(1.0, 10), (3, 32, 32)),
        ("mobilenet_v2 w=0.25 c=10 3x32x32 stride-1 stem",
         mobilenet_v2_small(0.25, 10), (3, 32, 32)),
        ("tv resnet50 c=1000 3x224x224", tv_resnet("resnet50", 1000), (3, 224, 224)),
    ):
        print(f"{label:44} {macs(m, shape):>15,}")

    print()
    print("mobilenet_v2 w=0.25 blocks (index: t, in->out, stride, residual):")
    m = torchvision.models.mobilenet_v2(num_classes=10, width_mult=0.25)
    stem = m.features[0][0]
    print(f"  features.0: stem conv 3->{stem.out_channels}, stride 2 (1 in fixture)")
    for i, blk in enumerate(m.features[1:18], start=1):
        convs = [mod for mod in blk.conv.modules() if isinstance(mod, nn.Conv2d)]
        inp = convs[0].in_channels
        hid = convs[-2].out_channels
        out = convs[-1].out_channels
        t = hid // inp
        stride = [c for c in convs if c.groups > 1][0].stride[0]
        print(f"  features.{i}: t={t} {inp}->{hid}->{out} s={stride} "
              f"res={blk.use_res_connect}")
    last = m.features[18][0]
    print(f"  features.18: last conv {last.in_channels}->{last.out_channels}; "
          f"last_channel={m.last_channel}")


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------

def randomize_bn(model, gen):
    def u(t, lo, hi):
        return torch.rand(t.shape, generator=gen) * (hi - lo) + lo

    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.weight.copy_(u(mod.weight, 0.5, 1.5))
                mod.bias.copy_(u(mod.bias, -0.2, 0.2))
                mod.running_mean.copy_(u(mod.running_mean, -0.1, 0.1))
                mod.running_var.copy_(u(mod.running_var, 0.5, 1.5))


def canonicalize_header(path):
    """Rewrite the safetensors JSON header with sorted keys.

    safetensors serializes __metadata__ from a hash map, so its key order (and
    thus the file bytes) changes from run to run; sorting makes the output
    byte-reproducible. Tensor data and offsets are unchanged.
    """
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    new = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    new += b" " * (-len(new) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(new)) + new + raw[8 + n:])


def make_fixture(name, build):
    torch.manual_seed(0)
    model = build().float()
    randomize_bn(model, torch.Generator().manual_seed(1234))
    x = torch.randn(BATCH, 3, 32, 32)
    labels = torch.randint(0, CLASSES, (BATCH,))

    t = {}
    for k, v in model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            continue
        t[k] = v.detach().clone()
    t["input"] = x.clone()
    t["labels"] = labels.float()

    model.eval()
    with torch.no_grad():
        t["eval.logits"] = model(x).detach().clone()

    model.train()
    model.zero_grad(set_to_none=True)
    logits = model(x)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    t["train.logits"] = logits.detach().clone()
    t["train.loss"] = loss.detach().reshape(1).clone()
    for pname, p in model.named_parameters():
        t["grad." + pname] = p.grad.detach().clone()
    for mname, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            t[f"after.{mname}.running_mean"] = mod.running_mean.detach().clone()
            t[f"after.{mname}.running_var"] = mod.running_var.detach().clone()

    t = {k: v.to(torch.float32).contiguous() for k, v in t.items()}
    meta = {"model": name, "batch": str(BATCH), "classes": str(CLASSES),
            "torch": torch.__version__}
    path = os.path.join(OUT_DIR, name + ".safetensors")
    save_file(t, path, metadata=meta)
    canonicalize_header(path)
    print(f"{path}: {len(t)} tensors, {os.path.getsize(path):,} bytes, "
          f"params {n_params(model):,}, loss {loss.item():.6f}")
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", action="store_true",
                    help="print parameter/buffer/MAC counts instead of writing fixtures")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    if args.counts:
        print_counts()
        return 0

    os.makedirs(OUT_DIR, exist_ok=True)
    r20 = make_fixture("resnet20", lambda: resnet_cifar(20, CLASSES))
    assert n_params(r20) == 272_474, n_params(r20)
    make_fixture("mobilenetv2_0.25", lambda: mobilenet_v2_small(0.25, CLASSES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
