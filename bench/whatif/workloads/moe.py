"""A mixture-of-experts feed-forward service: per request 2,048 tokens (bfloat16, width 1024)
go through 4 MoE layers of 8 experts each (top-2 routing, softmax gates); each expert is a
1024 -> 2816 -> 1024 SiLU feed-forward.

Written (2026-12-02) before any zym output was seen for it, the way eager MoE code is often
written: tokens are dispatched per expert with ``torch.nonzero(mask)`` (a device-to-host
synchronisation per expert: the number of rows must be known on the CPU), and the router's
load-balancing loss is logged per layer with ``.item()``.
"""
from __future__ import annotations

import torch
from torch import nn

TOKENS, WIDTH, HIDDEN, EXPERTS, TOPK, LAYERS = 2048, 1024, 2816, 8, 2, 4
VARIANTS = {
    "base": "as written",
    "counts_once": "syncs.*: tokens sorted by expert on the GPU, the per-expert counts read "
                   "once per layer (one .tolist()) instead of a nonzero() per expert",
    "log_once": "syncs.scalar-readback: the balancing losses summed on the GPU and read once "
                "per request",
    "all": "counts_once + log_once",
}


class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, 2 * HIDDEN, bias=False)
        self.down = nn.Linear(HIDDEN, WIDTH, bias=False)

    def forward(self, x):
        a, b = self.up(x).chunk(2, -1)
        return self.down(nn.functional.silu(a) * b)


class MoE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(WIDTH, EXPERTS, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(EXPERTS))

    def route(self, x):
        gates = self.router(x).float().softmax(-1)
        weight, chosen = gates.topk(TOPK, -1)
        balance = EXPERTS * (gates.mean(0) * nn.functional.one_hot(chosen[:, 0], EXPERTS)
                             .float().mean(0)).sum()
        return weight.to(x.dtype), chosen, balance

    def forward_per_expert(self, x):
        weight, chosen, balance = self.route(x)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.nonzero(chosen == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            y = expert(x[rows]) * weight[rows, slot].unsqueeze(-1)
            out.index_add_(0, rows, y)
        return out, balance

    def forward_sorted(self, x):
        weight, chosen, balance = self.route(x)
        flat = chosen.reshape(-1)
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=EXPERTS).tolist()
        rows = order // TOPK
        w = weight.reshape(-1)[order].unsqueeze(-1)
        out = torch.zeros_like(x)
        start = 0
        for e, n in enumerate(counts):
            if n:
                r = rows[start:start + n]
                out.index_add_(0, r, self.experts[e](x[r]) * w[start:start + n])
            start += n
        return out, balance


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MoE() for _ in range(LAYERS))
        self.norms = nn.ModuleList(nn.LayerNorm(WIDTH) for _ in range(LAYERS))


def make_requests(n: int = 6, seed: int = 0) -> list[int]:
    return [seed * 1000 + i for i in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = {"counts_once", "log_once"} if variant == "all" else {variant}
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.model = Model().to(device, dtype).eval()
        self.dtype = dtype
        self.sorted, self.log_once = "counts_once" in fixes, "log_once" in fixes
        self.requests = make_requests()
        self.log: list[float] = []

    def handle(self, seed: int) -> torch.Tensor:
        g = torch.Generator(device=self.device).manual_seed(seed)
        h = torch.randn(TOKENS, WIDTH, device=self.device, dtype=self.dtype, generator=g)
        losses = []
        for moe, norm in zip(self.model.layers, self.model.norms):
            y, balance = (moe.forward_sorted if self.sorted else moe.forward_per_expert)(norm(h))
            h = h + y
            if self.log_once:
                losses.append(balance)
            else:
                self.log.append(balance.item())
        if self.log_once:
            self.log.append(torch.stack(losses).sum().item())
        return h


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"moe: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
