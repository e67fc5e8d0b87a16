#!/usr/bin/env python3
"""Turn PyTorch weights into a safetensors file that `mgtop-train --init` reads.

  python3 scripts/pth_to_safetensors.py checkpoint.pth out.safetensors
      a torch.save()d state_dict, or a checkpoint dict holding one under
      "state_dict", "model" or "model_state_dict"; a DataParallel "module."
      prefix is removed.
  python3 scripts/pth_to_safetensors.py --torchvision mobilenet_v2 out.safetensors
      torchvision's ImageNet weights for that model (resnet18, resnet34,
      resnet50, mobilenet_v2; downloaded by torchvision into its cache).

Tensors are written as contiguous float32 (integer buffers such as BatchNorm's
num_batches_tracked are kept as they are; mgtop-train ignores them).

Requires: pip install torch torchvision safetensors
"""

import argparse
import sys

import torch
from safetensors.torch import save_file

TORCHVISION = {
    "resnet18": "ResNet18_Weights",
    "resnet34": "ResNet34_Weights",
    "resnet50": "ResNet50_Weights",
    "mobilenet_v2": "MobileNet_V2_Weights",
}


def state_dict_of(obj):
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        for key in ("state_dict", "model_state_dict", "model"):
            inner = obj.get(key)
            if isinstance(inner, dict) or isinstance(inner, torch.nn.Module):
                return state_dict_of(inner)
        if all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
    sys.exit("no state_dict found: expected a state_dict or a checkpoint dict holding one")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="a .pth file, or with --torchvision a model name")
    ap.add_argument("out", help="the .safetensors file to write")
    ap.add_argument("--torchvision", action="store_true", help="source names a torchvision model: use its ImageNet weights")
    a = ap.parse_args()
    if a.torchvision:
        import torchvision

        if a.source not in TORCHVISION:
            sys.exit(f"--torchvision takes one of {', '.join(TORCHVISION)}")
        weights = getattr(torchvision.models, TORCHVISION[a.source]).IMAGENET1K_V1
        state = getattr(torchvision.models, a.source)(weights=weights).state_dict()
    else:
        state = state_dict_of(torch.load(a.source, map_location="cpu", weights_only=True))
    out = {}
    for name, t in state.items():
        if name.startswith("module."):
            name = name[len("module."):]
        out[name] = (t.float() if t.is_floating_point() else t).contiguous()
    save_file(out, a.out, metadata={"format": "pt"})
    print(f"wrote {len(out)} tensors to {a.out}")


if __name__ == "__main__":
    main()
