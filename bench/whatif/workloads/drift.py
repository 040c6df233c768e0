"""A ranking service whose traffic drifts over a pass, with rare host reads: a long trace that
is not the same step over and over (the sampled analysis's check, issue 15: does a sample of
a long, changing trace say what the whole says, and name the rare lines it does not hold?).

A pass serves REQUESTS requests in three phases: small batches (1-8 rows: launch-bound), then
mixed (1-64), then large (48-128 rows: the GPU busy). Each request embeds its rows, runs them
through an fp32 MLP, and keeps the top scores (``.topk``, read back with ``.tolist()``: every
request syncs at one line). Rare lines: every LOG_EVERY-th request logs the mean score with
``.item()`` (``log_metrics``); every SNAPSHOT_EVERY-th copies the last layer's weights to the
host (``snapshot``: a 4 MB pageable copy and its sync). Not planted for a fix: the variants
are for the trace alone.
"""
from __future__ import annotations

import random

import torch
from torch import nn

WIDTH, LAYERS, VOCAB, FEATURES = 1024, 6, 32768, 16
REQUESTS, LOG_EVERY, SNAPSHOT_EVERY = 600, 97, 331
VARIANTS = {
    "base": "as written",
    "graphs": "compute.launch-bound-step: the model's forward captured in a CUDA graph per "
              "batch size (captured the first time a size comes, replayed after)",
    "pinned": "transfers.pageable-memory (snapshot): the weights copied into a pinned buffer "
              "allocated once, non_blocking, then waited for",
}


class Ranker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, WIDTH, mode="mean")
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS))
        self.score = nn.Linear(WIDTH, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for layer in self.layers:
            h = torch.relu(layer(h))
        return self.score(h).squeeze(-1)


def make_requests(n: int = REQUESTS, seed: int = 0) -> list[list[list[int]]]:
    """Rows of feature ids per request; the batch size drifts over the pass."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        phase = 3 * i // n
        rows = (rng.randint(1, 8), rng.randint(1, 64), rng.randint(48, 128))[phase]
        out.append([[rng.randrange(VOCAB) for _ in range(FEATURES)] for _ in range(rows)])
    return out


def log_metrics(scores: torch.Tensor) -> float:
    return scores.mean().item()


def snapshot(model: Ranker, pinned: torch.Tensor | None = None) -> torch.Tensor:
    if pinned is None:
        return model.layers[-1].weight.detach().cpu()
    pinned.copy_(model.layers[-1].weight.detach(), non_blocking=True)
    torch.cuda.current_stream().synchronize()
    return pinned


class Graphs:
    """The model's forward as CUDA graphs, one per batch size (static input and output)."""

    def __init__(self, model: Ranker) -> None:
        self.model, self.graphs = model, {}

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        got = self.graphs.get(ids.shape[0])
        if got is None:
            static = ids.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self.model(static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.model(static)
            got = self.graphs[ids.shape[0]] = (graph, static, out)
        graph, static, out = got
        static.copy_(ids)
        graph.replay()
        return out


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        self.model = Ranker().to(device).eval()
        self.forward = Graphs(self.model) if variant == "graphs" and device == "cuda" \
            else self.model
        self.requests = make_requests()
        self.served = 0
        weight = self.model.layers[-1].weight
        self.pinned = torch.empty(weight.shape, dtype=weight.dtype, pin_memory=True) \
            if variant == "pinned" and device == "cuda" else None

    def handle(self, rows: list[list[int]]) -> list[float]:
        ids = torch.tensor(rows, device=self.device)
        scores = self.forward(ids)
        top = scores.topk(min(4, scores.numel())).values.tolist()
        self.served += 1
        if self.served % LOG_EVERY == 0:
            log_metrics(scores)
        if self.served % SNAPSHOT_EVERY == 0:
            snapshot(self.model, self.pinned)
        return top


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"drift: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
