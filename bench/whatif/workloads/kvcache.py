"""A continuation service: per request 16 documents of 1,024 tokens each (one batch), 48 tokens
generated greedily for each by a small bfloat16 GPT (6 layers, d_model 1024, 16 heads, vocabulary
50,304) with a key/value cache; each document's new tokens are sent back, cut after its first
end-of-text token.

Written (2026-12-06, the third blind round) before any zym output was seen for it, with what such
services often have: the key/value cache grown by ``torch.cat`` at every step (the whole cache
copied into a new allocation per layer per step); the prompt's forward pass computing (and
casting to float32) the logits of every position, when only the last one is used; the stop test
(``if finished.all(): break``) run at every step.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

VOCAB, D, HEADS, LAYERS, FFN = 50_304, 1024, 16, 6, 4096
HD = D // HEADS
BATCH, PROMPT, NEW, REQUESTS = 16, 1024, 48, 2
EOS, PAD, CHECK_EVERY = 50_256, 50_256, 8
DTYPE = torch.bfloat16
VARIANTS = {
    "base": "as written",
    "static_cache": "the key/value cache preallocated for the prompt and the new tokens, each "
                    "step's keys and values written into it in place, attention over a slice",
    "last_logits": "the prompt's forward pass keeps only the last position before the final "
                   "norm and the vocabulary projection",
    "check_every": f"the stop test (finished.all()) run every {CHECK_EVERY} steps, not every step",
    "all": "static_cache + last_logits + check_every",
}


class CatCache:
    """The cache as the past's tensors, the new keys and values concatenated on."""

    def __init__(self) -> None:
        self.k = self.v = None

    def update(self, k: torch.Tensor, v: torch.Tensor, pos: int):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
        return self.k, self.v


class StaticCache:
    """The cache allocated once for the whole generation, written in place."""

    def __init__(self, batch: int, length: int, device: str) -> None:
        self.k = torch.empty((batch, HEADS, length, HD), dtype=DTYPE, device=device)
        self.v = torch.empty_like(self.k)

    def update(self, k: torch.Tensor, v: torch.Tensor, pos: int):
        end = pos + k.shape[2]
        self.k[:, :, pos:end] = k
        self.v[:, :, pos:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.qkv, self.proj = nn.LayerNorm(D), nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.ln2, self.fc1, self.fc2 = nn.LayerNorm(D), nn.Linear(D, FFN), nn.Linear(FFN, D)

    def forward(self, x: torch.Tensor, cache, pos: int) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        k, v = cache.update(k, v, pos)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=n > 1)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(PROMPT + NEW, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, caches: list, pos: int,
                last_only: bool = False) -> torch.Tensor:
        x = self.wte(ids) + self.wpe.weight[pos:pos + ids.shape[1]]
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache, pos)
        if last_only:
            x = x[:, -1:]
        return self.head(self.ln_f(x))


def make_requests(n: int = REQUESTS, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, EOS, (BATCH, PROMPT), dtype=np.int64) for _ in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = {"static_cache", "last_logits", "check_every"} if variant == "all" else {variant}
        self.model = GPT().to(device=device, dtype=DTYPE).eval()
        self.static_cache = "static_cache" in fixes
        self.last_logits = "last_logits" in fixes
        self.check_every = CHECK_EVERY if "check_every" in fixes else 1
        self.requests = make_requests()

    def new_caches(self, batch: int) -> list:
        if self.static_cache:
            return [StaticCache(batch, PROMPT + NEW, self.device) for _ in range(LAYERS)]
        return [CatCache() for _ in range(LAYERS)]

    def handle(self, prompts: np.ndarray) -> list[list[int]]:
        ids = torch.from_numpy(prompts).to(self.device)
        b, pos = ids.shape
        caches = self.new_caches(b)
        logits = self.model(ids, caches, 0, last_only=self.last_logits).float()
        tok = logits[:, -1].argmax(-1)
        finished = tok == EOS
        out = [tok]
        for step in range(1, NEW):
            if step % self.check_every == 0 and finished.all():
                break
            logits = self.model(tok[:, None], caches, pos).float()
            tok = logits[:, -1].argmax(-1).masked_fill(finished, PAD)
            finished = finished | (tok == EOS)
            out.append(tok)
            pos += 1
        rows = torch.stack(out, 1).tolist()
        return [row[:row.index(EOS) + 1] if EOS in row else row for row in rows]


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"kvcache: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
