#!/usr/bin/env python3
"""PyTorch's side of `cargo bench --bench loader`: images/s per loader thread of a
DataLoader (num_workers=0: the main process does the work, one thread) with torchvision
transforms, over the files that benchmark wrote:

  ImageNet style: ImageFolder(DIR/jpeg) + RandomResizedCrop(224) + RandomHorizontalFlip +
                  ToTensor + Normalize(ImageNet), batches of 64, one pass (every file decoded)
  CIFAR style:    DIR/cifar/data_batch_1.bin records + RandomCrop(32, padding=4) +
                  RandomHorizontalFlip + ToTensor + Normalize(CIFAR-10), batches of 64

  python3 scripts/bench_loader.py [DIR]     (default target/loader-bench)

Requires: pip install torch torchvision
"""

import sys
import time

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

torch.set_num_threads(1)


class CifarBin(Dataset):
    def __init__(self, path, transform):
        raw = np.fromfile(path, dtype=np.uint8).reshape(-1, 3073)
        self.labels = raw[:, 0].astype(np.int64)
        self.images = raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy()
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.images[i])), self.labels[i]


def rate(ds):
    loader = DataLoader(ds, batch_size=64, shuffle=False, num_workers=0)
    t = time.perf_counter()
    n = 0
    for x, _ in loader:
        n += x.shape[0]
    return n / (time.perf_counter() - t)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "target/loader-bench"
    imagenet = T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    cifar = T.Compose([
        T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]),
    ])
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, 1 thread")
    for r in range(1, 4):
        j = rate(torchvision.datasets.ImageFolder(f"{d}/jpeg", imagenet))
        c = rate(CifarBin(f"{d}/cifar/data_batch_1.bin", cifar))
        print(f"round {r}: jpeg 500x375 -> rrc 224 + flip: {j:.0f} images/s/thread | cifar crop:4 + flip: {c:.0f} images/s/thread")


if __name__ == "__main__":
    main()
