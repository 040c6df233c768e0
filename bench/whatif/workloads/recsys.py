"""A ranking service: per request 32 users, each with 64 candidate items; every item is the mean
of its 8 feature embeddings (an EmbeddingBag of 200,000 x 256), scored with the user's context
by a float32 MLP (512 -> 4096 -> 4096 -> 1), and each user's 20 best items are sent back with
their scores.

Written (2026-12-06, the second blind round) before any zym output was seen for it, with what
such services often have: the feature ids arrive as numpy arrays and are uploaded from pageable
memory; the MLP kept in float32 (no TF32); each returned score read with ``float(...)`` in the
loop that builds the answer.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

USERS, CANDIDATES, FEATS, TABLE, DIM, HIDDEN, TOP = 32, 64, 8, 200_000, 256, 4096, 20
VARIANTS = {
    "base": "as written",
    "tf32": "compute.fp32-matmul-no-tf32: torch.backends.cuda.matmul.allow_tf32 = True",
    "scores_once": "syncs.*: the top items and scores read with one .tolist() each",
    "pinned_ids": "transfers.pageable-memory: the ids staged in a reused pinned buffer, "
                  "uploaded with non_blocking=True",
    "all": "tf32 + scores_once + pinned_ids",
}


class Ranker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.items = nn.EmbeddingBag(TABLE, DIM, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(2 * DIM, HIDDEN), nn.ReLU(),
                                 nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))

    def forward(self, ids: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        items = self.items(ids.view(-1, FEATS)).view(USERS, CANDIDATES, DIM)
        ctx = context[:, None, :].expand(-1, CANDIDATES, -1)
        return self.mlp(torch.cat([items, ctx], -1)).squeeze(-1)  # (USERS, CANDIDATES)


def make_requests(n: int = 12, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, TABLE, (USERS, CANDIDATES, FEATS), dtype=np.int64),
             rng.standard_normal((USERS, DIM), dtype=np.float32)) for _ in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = {"tf32", "scores_once", "pinned_ids"} if variant == "all" else {variant}
        self.model = Ranker().to(device).eval()
        self.requests = make_requests()
        self.tf32 = "tf32" in fixes
        self.scores_once = "scores_once" in fixes
        self.pinned = None
        if "pinned_ids" in fixes and device == "cuda":
            self.pinned = (torch.empty((USERS, CANDIDATES, FEATS), dtype=torch.int64).pin_memory(),
                           torch.empty((USERS, DIM), dtype=torch.float32).pin_memory())

    def upload(self, ids: np.ndarray, context: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pinned is not None:
            self.pinned[0].copy_(torch.from_numpy(ids))
            self.pinned[1].copy_(torch.from_numpy(context))
            return (self.pinned[0].to(self.device, non_blocking=True),
                    self.pinned[1].to(self.device, non_blocking=True))
        return torch.from_numpy(ids).to(self.device), torch.from_numpy(context).to(self.device)

    def handle(self, request: tuple[np.ndarray, np.ndarray]) -> list[list[tuple[int, float]]]:
        ids, context = self.upload(*request)
        scores = self.model(ids, context)
        best, which = scores.topk(TOP, dim=-1)
        if self.scores_once:
            return [list(zip(w, b)) for w, b in zip(which.tolist(), best.tolist())]
        answer = []
        for u in range(USERS):
            answer.append([(int(which[u, k]), float(best[u, k])) for k in range(TOP)])
        return answer


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"recsys: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
