#!/usr/bin/env python3
"""Reference for GPU runs: the seed CNN (Conv2d(1,32,3) -> ReLU -> MaxPool2d(2) -> Linear(5408,10))
with Adam(lr=1e-3) and cross-entropy on 60000 random 1x28x28 images, 10 classes, held on the GPU
(one randperm + index_select per batch, PyTorch's fastest loader), in eager mode or with the whole
step captured in a CUDA graph. Timing: CUDA events around --epochs timed epochs after one warm-up.

Usage: python torch_gpu_cnn.py B [--graph] [--epochs 2]
Prints: torch-gpu-cnn mode=eager|graph B=... samples_per_s=... final_loss=... device=...
"""
import argparse

import torch
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("B", type=int)
    ap.add_argument("--graph", action="store_true")
    ap.add_argument("--epochs", type=int, default=2)
    a = ap.parse_args()
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(0)
    n = 60000
    x = torch.randn(n, 1, 28, 28, generator=g).to(dev)
    y = torch.randint(0, 10, (n,), generator=g).to(dev)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 13 * 13, 10)
    ).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=a.graph)
    loss_fn = nn.CrossEntropyLoss()
    B = a.B
    steps = n // B
    if a.graph:
        sx = torch.zeros(B, 1, 28, 28, device=dev)
        sy = torch.zeros(B, dtype=torch.long, device=dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                loss_fn(model(sx), sy).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = loss_fn(model(sx), sy)
            static_loss.backward()
            opt.step()

    def epoch():
        perm = torch.randperm(n, device=dev)
        last = None
        for i in range(steps):
            idx = perm[i * B:(i + 1) * B]
            if a.graph:
                sx.copy_(x.index_select(0, idx))
                sy.copy_(y.index_select(0, idx))
                graph.replay()
                last = static_loss
            else:
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(x.index_select(0, idx)), y.index_select(0, idx))
                loss.backward()
                opt.step()
                last = loss
        return last

    epoch()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.epochs):
        last = epoch()
    end.record()
    torch.cuda.synchronize()
    secs = start.elapsed_time(end) / 1e3
    mode = "graph" if a.graph else "eager"
    print(f"torch-gpu-cnn mode={mode} B={B} samples_per_s={a.epochs * steps * B / secs:.0f} "
          f"final_loss={last.item():.4f} device='{torch.cuda.get_device_name()}' torch={torch.__version__}")


if __name__ == "__main__":
    main()
