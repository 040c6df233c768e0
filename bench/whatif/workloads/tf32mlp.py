"""A reranking service: a 6-layer float32 transformer encoder (width 1024, 16 heads, 4x
feed-forward) scoring 64 candidate passages of 128 tokens per request, 6 requests a pass, in
eval mode under inference mode. TF32 is allowed (``tf32``: as
``torch.set_float32_matmul_precision("high")`` does), so its matmuls already run on tensor
cores; the model's weights and activations stay float32.

Written for ``compute.tf32-matmul-could-be-bf16`` (the model in bfloat16), so not blind.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LAYERS, WIDTH, HEADS, BATCH, SEQ, VOCAB, REQUESTS = 6, 1024, 16, 64, 128, 30522, 6
VARIANTS = {
    "base": "as written",
    "bf16": "compute.tf32-matmul-could-be-bf16: the model and its activations in bfloat16",
}


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)
        self.n1, self.n2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, s, _ = h.shape
        q, k, v = self.qkv(self.n1(h)).view(b, s, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        h = h + self.out(a.transpose(1, 2).reshape(b, s, WIDTH))
        return h + self.down(F.gelu(self.up(self.n2(h))))


class Ranker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.score = nn.Linear(WIDTH, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h)
        return self.score(h[:, 0]).float().squeeze(-1)


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        self.tf32 = True
        dtype = torch.bfloat16 if variant == "bf16" and device == "cuda" else torch.float32
        self.model = Ranker().to(device, dtype).eval()
        g = torch.Generator().manual_seed(1)
        self.requests = [torch.randint(0, VOCAB, (BATCH, SEQ), generator=g).to(device)
                         for _ in range(REQUESTS)]

    def handle(self, ids: torch.Tensor) -> list[int]:
        return self.model(ids).topk(8).indices.tolist()


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"tf32mlp: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
