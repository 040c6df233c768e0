"""A sentence-embedding service: per request 64 texts (already tokenized: 4 to 256 token ids each,
mostly 15 to 60), encoded by a small BERT-like encoder (6 post-norm layers, d_model 384, 12 heads,
feed-forward 1536, at most 256 positions), mean-pooled over each text's tokens and L2-normalised;
each text's 384-float vector is sent back as a numpy array.

Written (2026-12-06, the third blind round) before any zym output was seen for it, with what such
services often have: every batch padded to the model's maximum length (256) rather than to its
longest text; the encoder run in float32 as loaded (no autocast, no TF32); the vectors brought
to the CPU one by one (``emb[i].cpu().numpy()``) in the loop that builds the answer.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

VOCAB, D, HEADS, LAYERS, FFN, MAX_LEN = 30_522, 384, 12, 6, 1536, 256
HD = D // HEADS
TEXTS, REQUESTS = 64, 8
VARIANTS = {
    "base": "as written",
    "pad_longest": "each batch padded to its longest text instead of to MAX_LEN",
    "autocast": "the encoder run under torch.autocast(dtype=torch.bfloat16)",
    "rows_once": "the pooled vectors brought to the CPU with one .cpu().numpy(), then split "
                 "into rows",
    "all": "pad_longest + autocast + rows_once",
}


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out, self.ln1 = nn.Linear(D, 3 * D), nn.Linear(D, D), nn.LayerNorm(D)
        self.fc1, self.fc2, self.ln2 = nn.Linear(D, FFN), nn.Linear(FFN, D), nn.LayerNorm(D)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, n, D)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(MAX_LEN, D)
        self.ln = nn.LayerNorm(D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

    def forward(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        x = self.ln(self.tok(ids) + self.pos.weight[:ids.shape[1]])
        mask = valid[:, None, None, :]  # (b, 1, 1, n): which keys each query may see
        for layer in self.layers:
            x = layer(x, mask)
        return x


def make_requests(n: int = REQUESTS, seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(n):
        lengths = np.clip(rng.lognormal(np.log(30.0), 0.6, TEXTS), 4, MAX_LEN).astype(int)
        requests.append([rng.integers(1000, VOCAB, m, dtype=np.int64) for m in lengths])
    return requests


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = {"pad_longest", "autocast", "rows_once"} if variant == "all" else {variant}
        self.model = Encoder().to(device).eval()
        self.pad_longest = "pad_longest" in fixes
        self.autocast = "autocast" in fixes
        self.rows_once = "rows_once" in fixes
        self.requests = make_requests()

    def batch(self, texts: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        n = max(len(t) for t in texts) if self.pad_longest else MAX_LEN
        ids = np.zeros((len(texts), n), dtype=np.int64)
        valid = np.zeros((len(texts), n), dtype=bool)
        for i, t in enumerate(texts):
            ids[i, :len(t)] = t
            valid[i, :len(t)] = True
        return torch.from_numpy(ids).to(self.device), torch.from_numpy(valid).to(self.device)

    def handle(self, texts: list[np.ndarray]) -> list[np.ndarray]:
        ids, valid = self.batch(texts)
        device_type = "cuda" if self.device.startswith("cuda") else "cpu"
        with (torch.autocast(device_type, dtype=torch.bfloat16) if self.autocast
              else contextlib.nullcontext()):
            h = self.model(ids, valid)
        m = valid[..., None].to(torch.float32)
        emb = F.normalize((h.float() * m).sum(1) / m.sum(1), dim=-1)
        if self.rows_once:
            return list(emb.cpu().numpy())
        return [emb[i].cpu().numpy() for i in range(len(texts))]


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"embedsvc: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
