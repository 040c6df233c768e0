"""A torch.compile service: its kernels are Triton code Inductor generated and, with
mode="reduce-overhead", CUDA-graph replays. zym must name the user's line that called the
compiled model as the site (the generated code is framework), and report compilation as
startup, not steady state. Only a baseline: it checks attribution, not a fix.
"""
from __future__ import annotations

import torch
from torch import nn

VARIANTS = {"base": "torch.compile(mode='reduce-overhead') of a small MLP"}


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(512, 2048), nn.GELU(),
                                                    nn.Linear(2048, 512), nn.LayerNorm(512))
                                      for _ in range(6)])

    def forward(self, x):
        return self.layers(x)


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.device = device
        model = MLP().to(device).eval()
        if device == "cuda":
            model = model.half()
        self.model = torch.compile(model, mode="reduce-overhead") if device == "cuda" else model
        dtype = torch.float16 if device == "cuda" else torch.float32
        self.requests = [torch.randn(32, 512, device=device, dtype=dtype) for _ in range(16)]


    def handle(self, x):
        y = self.model(x)  # the user's line: the site of the compiled kernels
        return float(y.float().abs().mean().item())


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"compiled: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
