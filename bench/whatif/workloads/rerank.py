"""A reranking service: per request, 24 candidate passages are encoded by a float32 transformer
encoder and scored; the scores are read back one by one.

Planted, as such services often have them: the encoder runs in float32 on CUDA cores (a model
exported in fp32 and never cast), the token ids are uploaded from Python lists through pageable
memory, and the scores are read with ``scores[i].item()`` in a loop: the first read waits for
the encoder, the other 23 are host round trips of their own.
"""
from __future__ import annotations

import random

import torch
from torch import nn

D_MODEL, HEADS, LAYERS, SEQ, CANDIDATES, VOCAB = 768, 12, 4, 96, 24, 30522
VARIANTS = {
    "base": "as written",
    "tolist": "syncs.scalar-readback: scores.tolist() once instead of scores[i].item() per "
              "candidate",
    "tf32": "compute.fp32-matmul-no-tf32: torch.backends.cuda.matmul.allow_tf32 = True",
    "pin_upload": "transfers.pageable-memory: ids staged in a reused pinned buffer, uploaded "
                  "with non_blocking=True",
    "all": "tolist + tf32 + pin_upload",
}


class Reranker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, 4 * D_MODEL, batch_first=True,
                                           dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.score = nn.Linear(D_MODEL, 1)

    def forward(self, ids):
        h = self.encoder(self.embed(ids))
        return self.score(h[:, 0]).squeeze(-1)


def make_requests(n: int = 12, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"query": q, "doc_ids": list(range(CANDIDATES)),
             "ids": [[rng.randrange(1000, VOCAB) for _ in range(SEQ)] for _ in range(CANDIDATES)]}
            for q in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = {"tolist", "tf32", "pin_upload"} if variant == "all" else {variant}
        self.model = Reranker().to(device).eval()
        self.requests = make_requests()
        self.tf32, self.tolist = "tf32" in fixes, "tolist" in fixes
        self.pinned = (torch.empty((CANDIDATES, SEQ), dtype=torch.long).pin_memory()
                       if "pin_upload" in fixes and device == "cuda" else None)


    def upload(self, rows: list[list[int]]) -> torch.Tensor:
        if self.pinned is not None:
            self.pinned.copy_(torch.tensor(rows))
            return self.pinned.to(self.device, non_blocking=True)
        return torch.tensor(rows, device=self.device)

    def handle(self, request: dict) -> list:
        ids = self.upload(request["ids"])
        scores = self.model(ids)
        if self.tolist:
            values = scores.tolist()
        else:
            values = []
            for i in range(len(request["doc_ids"])):
                values.append(scores[i].item())
        ranked = sorted(zip(request["doc_ids"], values), key=lambda x: -x[1])
        return ranked[:10]


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"rerank: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
