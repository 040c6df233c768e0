"""An encoder service that returns its cache to the driver after every request: 32 sequences
of 256 tokens (bfloat16, width 1024, 6 transformer layers) per request, pooled embeddings sent
back; ``torch.cuda.empty_cache()`` at the end of each request, "to keep memory low", as
services often do. The next request's activations are then allocated from the driver again
(cudaMalloc), and each empty_cache's cudaFree waits for the device.

Written (2026-12-02) with zym's memory.allocator-churn rule (that rule was written first,
from the CUDA documentation and the caching allocator's behaviour, not from this workload).
"""
from __future__ import annotations

import torch
from torch import nn

BATCH, SEQ, WIDTH, LAYERS, HEADS = 32, 256, 1024, 6, 16
VARIANTS = {
    "base": "as written",
    "keep_cache": "memory.allocator-churn (all): no torch.cuda.empty_cache() per request",
}


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, batch_first=True,
                                           dropout=0.0)
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.model = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).to(
            device, dtype).eval()
        self.dtype = dtype
        self.empty_cache = variant != "keep_cache" and device == "cuda"
        g = torch.Generator().manual_seed(1)
        self.requests = [torch.randn(BATCH, SEQ, WIDTH, generator=g).to(device, dtype)
                         for _ in range(6)]

    def handle(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x).mean(1)
        if self.empty_cache:
            torch.cuda.empty_cache()
        return out


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"churn: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
