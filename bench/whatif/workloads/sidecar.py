"""A decode loop with a monitoring thread beside it: the request's thread greedily decodes 32
tokens per request with a small MLP language model, reading each token with ``.item()``; a
background thread (started once, shared by every variant) reads a GPU statistic every ~1 ms
with its own ``.item()``, on the same CUDA stream. Two threads launch onto one stream, and only
one of them runs the steps. The variants measure a fix on each thread: the request thread's
is what a user would want to know; the background's changes the steps only through the GPU
and the GIL they share.
"""
from __future__ import annotations

import atexit
import threading
import time

import torch
from torch import nn

VOCAB, DIM, TOKENS, REQUESTS = 1000, 512, 32, 8
VARIANTS = {"base": "as written",
            "main_gpu": "syncs.scalar-readback (request thread): the tokens kept on the GPU, "
                        "one .tolist() per request instead of .item() per token",
            "bg_batched": "syncs.scalar-readback (background thread): the statistic summed on "
                          "the GPU, read with .item() every 100 readings",
            "graphed": "compute.launch-bound-step: each token's forward replayed as one CUDA "
                       "graph (its input uploaded and its .item() as before)"}

_BG: dict = {"mode": "base", "thread": None, "stop": threading.Event(), "reads": 0}


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.body = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(DIM, DIM), nn.GELU())])
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tok):
        return self.head(self.body(self.emb(tok)))


def _monitor(device: str) -> None:
    """Every ~1 ms: a small reduction on the GPU, read back (or summed and read every 100)."""
    buf = torch.randn(256, 256, device=device)
    acc = torch.zeros((), device=device)
    k = 0
    with torch.inference_mode():
        while not _BG["stop"].is_set():
            stat = (buf @ buf).abs().mean()
            if _BG["mode"] == "bg_batched":
                acc += stat
                k += 1
                if k % 100 == 0:
                    _BG["reads"] += 1
                    float(acc.item())
            else:
                _BG["reads"] += 1
                float(stat.item())
            time.sleep(0.001)


def _stop() -> None:
    """Stopped and joined before the interpreter exits (a thread inside a CUDA call at exit
    aborts the process)."""
    _BG["stop"].set()
    if _BG["thread"] is not None:
        _BG["thread"].join(timeout=5)


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        self.model = LM().to(device).eval()
        g = torch.Generator().manual_seed(1)
        self.requests = [int(x) for x in torch.randint(0, VOCAB, (REQUESTS,), generator=g)]
        if variant == "graphed" and device == "cuda":
            self._capture()
        if _BG["thread"] is None:
            _BG["thread"] = threading.Thread(target=_monitor, args=(device,), daemon=True,
                                             name="monitor")
            _BG["thread"].start()
            atexit.register(_stop)

    def _capture(self) -> None:
        """The forward and argmax of one token as a CUDA graph on static tensors (warmed up on
        a side stream first; captured thread-locally: the monitor keeps running)."""
        self.static_in = torch.zeros(1, dtype=torch.long, device=self.device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(3):
                self.model(self.static_in).argmax(-1)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(self.graph,
                                                      capture_error_mode="thread_local"):
            self.static_out = self.model(self.static_in).argmax(-1)

    def handle(self, first: int) -> list[int]:
        _BG["mode"] = self.variant
        with torch.inference_mode():
            if self.variant == "graphed" and self.device == "cuda":
                tokens, tok = [], first
                for _ in range(TOKENS):
                    self.static_in.copy_(torch.tensor([tok], device=self.device))
                    self.graph.replay()
                    tok = int(self.static_out.item())
                    tokens.append(tok)
                return tokens
            if self.variant == "main_gpu":
                tok = torch.tensor([first], device=self.device)
                out = []
                for _ in range(TOKENS):
                    tok = self.model(tok).argmax(-1)
                    out.append(tok)
                return torch.cat(out).tolist()
            tokens, tok = [], first
            for _ in range(TOKENS):
                logits = self.model(torch.tensor([tok], device=self.device))
                tok = int(logits.argmax(-1).item())
                tokens.append(tok)
            return tokens


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"sidecar: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
