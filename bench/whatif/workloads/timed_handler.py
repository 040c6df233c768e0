"""A scoring service that times its GPU work per request: ``handle`` parses the request (its
JSON body, ~1 MB with the attached features, and its texts into token ids: CPU work a service
does before it touches the GPU, in a few C calls, so torch.profiler records few events of it), then
``infer`` brackets the model with ``torch.cuda.synchronize()`` at its top and at its end, to
measure the GPU time alone (a common pattern in services that log latency).

Written to check one claim of zym's fix models on real hardware: ``syncs.explicit-sync-in-
loop`` fires on ``infer`` (two syncs per call, many calls) and its batching fix keeps the last
sync; the first one goes. Removing it saves what that sync costs (the GPU is idle when it is
called: the previous request's end sync drained it), not the parsing before it, which is the
caller's work and stays whatever ``infer`` does.
"""
from __future__ import annotations

import json
import random
import time

import torch
from torch import nn

D_MODEL, LAYERS, VOCAB, BATCH, WORDS = 1024, 6, 50_000, 16, 600
VARIANTS = {
    "base": "as written",
    "no_top_sync": "syncs.explicit-sync-in-loop: the torch.cuda.synchronize() at the top of "
                   "infer removed (the one at its end stays: it times the GPU work)",
}


class Scorer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, D_MODEL, mode="mean")
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(D_MODEL, D_MODEL), nn.GELU())
                                      for _ in range(LAYERS)])
        self.out = nn.Linear(D_MODEL, 1)

    def forward(self, ids, offsets):
        return self.out(self.layers(self.embed(ids, offsets))).squeeze(-1)


def make_requests(n: int = 16, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(5000)]
    return [{"body": json.dumps({
        "texts": [" ".join(rng.choice(words) for _ in range(WORDS)) for _ in range(BATCH)],
        "features": [rng.random() for _ in range(50_000)]})} for _ in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        self.top_sync = variant != "no_top_sync"
        self.model = Scorer().to(device).eval()
        self.requests = make_requests()
        self.vocab = {f"w{i}": (i * 7919) % VOCAB for i in range(5000)}
        self.gpu_s: list[float] = []

    def parse(self, request: dict) -> tuple[list[int], list[int]]:
        body = json.loads(request["body"])
        ids, offsets = [], []
        for text in body["texts"]:
            offsets.append(len(ids))
            ids.extend(map(self.vocab.__getitem__, text.split()))
        return ids, offsets

    def infer(self, ids: list[int], offsets: list[int]) -> torch.Tensor:
        cuda = self.device == "cuda"
        if self.top_sync and cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        scores = self.model(torch.tensor(ids, device=self.device),
                            torch.tensor(offsets, device=self.device))
        if cuda:
            torch.cuda.synchronize()
        self.gpu_s.append(time.perf_counter() - start)
        return scores

    def handle(self, request: dict) -> torch.Tensor:
        return self.infer(*self.parse(request))


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"timed_handler: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
