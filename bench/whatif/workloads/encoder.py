"""A text-embedding service: a 6-layer encoder built the way Hugging Face models are (dropout
on the embeddings, on the attention probabilities and after each sublayer, p = 0.1), bfloat16,
serving requests of 32 sequences of up to 256 token ids and returning each sequence's pooled,
normalised embedding.

Planted, as a service written in a hurry often has it: the model is never put in eval mode
(``model.eval()``: every dropout still draws its random mask and scales), and the forward pass
runs with autograd on (no ``torch.inference_mode()``/``torch.no_grad()``: every op records
its backward node and keeps its inputs alive). The harness's inference mode is turned off for
the variants that do not fix it (``grad``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LAYERS, WIDTH, HEADS, FF, VOCAB, BATCH, SEQ, REQUESTS, P = 6, 768, 12, 3072, 30522, 32, 256, 6, 0.1
VARIANTS = {
    "base": "as written",
    "eval": "compute.train-mode-modules: model.eval() once after loading (no dropout)",
    "no_grad": "compute.autograd-in-inference: the forward pass under torch.inference_mode()",
    "all": "eval + no_grad",
}


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.drop = nn.Dropout(P)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = h.shape
        q, k, v = self.qkv(h).view(b, s, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / (WIDTH // HEADS) ** 0.5 + mask
        probs = self.drop(scores.softmax(-1))
        return self.drop(self.out((probs @ v).transpose(1, 2).reshape(b, s, WIDTH)))


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Attention()
        self.n1, self.n2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.ff = nn.Sequential(nn.Linear(WIDTH, FF), nn.GELU(), nn.Linear(FF, WIDTH),
                                nn.Dropout(P))

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.n1(h + self.attn(h, mask))
        return self.n2(h + self.ff(h))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(SEQ, WIDTH)
        self.norm, self.drop = nn.LayerNorm(WIDTH), nn.Dropout(P)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

    def forward(self, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        h = self.drop(self.norm(self.tok(ids) + self.pos(positions)))
        mask = (1.0 - keep[:, None, None, :].to(h.dtype)) * -1e4
        for layer in self.layers:
            h = layer(h, mask)
        pooled = (h * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)
        return F.normalize(pooled.float(), dim=-1)


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = {"eval", "no_grad"} if variant == "all" else {variant}
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.model = Encoder().to(device, dtype)
        if "eval" in fixes:
            self.model.eval()
        self.grad = "no_grad" not in fixes  # the harness: autograd on while this one serves
        g = torch.Generator().manual_seed(1)
        self.requests = []
        for _ in range(REQUESTS):
            ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
            lengths = torch.randint(SEQ // 2, SEQ + 1, (BATCH,), generator=g)
            keep = (torch.arange(SEQ)[None, :] < lengths[:, None]).long()
            self.requests.append((ids.to(device), keep.to(device)))

    def handle(self, request: tuple[torch.Tensor, torch.Tensor]) -> list[list[float]]:
        ids, keep = request
        emb = self.model(ids, keep)
        return emb[:, :4].tolist()  # the reply: a few coordinates of each embedding


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"encoder: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
