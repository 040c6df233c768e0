"""A classification service whose requests are text: each request (16 texts of ~400 words)
is tokenized in Python (lower-casing, splitting, a vocabulary lookup per word, padding), then
embedded and classified on the GPU by a small bfloat16 transformer encoder, and the labels are
read back with one .tolist().

Written (2026-12-02) before any zym output was seen for it, as such services are often first
written: the CPU's tokenization and the GPU's work take turns, each idle while the other runs.
"""
from __future__ import annotations

import random
import threading

import torch
from torch import nn

TEXTS, WORDS, VOCAB, SEQ, WIDTH, LAYERS, CLASSES = 16, 400, 20000, 512, 768, 4, 8
VARIANTS = {
    "base": "as written",
    "overlap": "utilization.*: the next request tokenized in a second thread while the GPU "
               "runs this one (a prefetching pipeline)",
    # added 2026-12-06 (not blind: after utilization.cpu-bound-step was written), to measure
    # what that rule's estimate is an upper bound of: the tokenization off the request's path
    "pretokenized": "utilization.cpu-bound-step: the requests tokenized before they are served "
                    "(by the client, or another process ahead of time)",
}


def make_words(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 8)))
            for _ in range(VOCAB)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        words = make_words()
        self.vocab = {w: i for i, w in enumerate(words)}
        rng = random.Random(1)
        self.requests = [[" ".join(rng.choice(words).upper() for _ in range(WORDS))
                          for _ in range(TEXTS)] for _ in range(8)]
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        layer = nn.TransformerEncoderLayer(WIDTH, 12, 4 * WIDTH, batch_first=True, dropout=0.0)
        self.embed = nn.Embedding(VOCAB, WIDTH).to(device, dtype)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).to(
            device, dtype).eval()
        self.head = nn.Linear(WIDTH, CLASSES).to(device, dtype)
        self.overlap = variant == "overlap"
        self._next: dict = {}
        self._ready = ({id(t): self.tokenize(t) for t in self.requests}
                       if variant == "pretokenized" else {})

    def tokenize(self, texts: list[str]) -> torch.Tensor:
        rows = []
        for t in texts:
            ids = [self.vocab.get(w.lower(), 0) for w in t.split()][:SEQ]
            rows.append(ids + [0] * (SEQ - len(ids)))
        return torch.tensor(rows)

    def _prefetch(self, texts: list[str]) -> None:
        self._next[id(texts)] = self.tokenize(texts)

    def handle(self, texts: list[str]) -> list[int]:
        ids = self._next.pop(id(texts), None)
        if ids is None:
            ids = self._ready.get(id(texts))
        if ids is None:
            ids = self.tokenize(texts)
        if self.overlap:   # start the next request's tokenization before this one's GPU work
            i = self.requests.index(texts)
            nxt = self.requests[(i + 1) % len(self.requests)]
            worker = threading.Thread(target=self._prefetch, args=(nxt,))
            worker.start()
        x = self.embed(ids.to(self.device, non_blocking=True))
        logits = self.head(self.encoder(x).mean(1))
        labels = logits.argmax(-1).tolist()
        if self.overlap:
            worker.join()
        return labels


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"preproc: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
