"""A decoding service that checks after every token, on the host, whether every sequence has
stopped: ``if (token == STOP).all().item(): break`` inside the step function, once per call
of it, then some host bookkeeping per step (a scheduler's per-token accounting).

Planted: the ``.item()`` waits for the whole step's kernels, and the GPU then idles while the
host does its bookkeeping and launches the next step (``syncs.scalar-readback``, one per call
of ``decode_step``: no batching within a call). The fix the rule names for a value the host
needs: the flag copied without waiting into a pinned buffer, read after the next step's
kernels are queued (a step of lag: at most one extra step decoded). Same model as
``readback`` (fp32, 64 sequences, 48 tokens a request); the stop token never comes.
"""
from __future__ import annotations

import time

import torch
from readback import BATCH, STOP_TEXT, TOKENS, VOCAB, Model, make_requests

STOP = VOCAB  # a token id argmax never returns
VARIANTS = {
    "base": "as written",
    "late_flag": "syncs.scalar-readback: the stop flag copied non_blocking into a pinned "
                 "buffer with an event, read after the next step's kernels are queued",
}


class Ledger:
    """Per-token host bookkeeping: per sequence, tokens counted, the step's time kept, and a
    status line with the last steps' times."""

    def __init__(self) -> None:
        self.count = [0] * BATCH
        self.times: list[list[float]] = [[] for _ in range(BATCH)]
        self.status = [""] * BATCH

    def tick(self, t: int, now: float) -> None:
        for i in range(BATCH):
            self.count[i] += 1
            self.times[i].append(now)
            last = " ".join(f"{x:.6f}" for x in self.times[i][-6:])
            self.status[i] = f"seq {i}: {self.count[i]} tokens, step {t} [{last}] {STOP_TEXT!r}"


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        self.model = Model().to(device).eval()
        self.requests = make_requests()
        self.late = variant == "late_flag" and device == "cuda"
        self.flags = ([torch.zeros((), dtype=torch.bool).pin_memory() for _ in range(2)]
                      if self.late else [])
        self.events = [torch.cuda.Event() for _ in range(2)] if self.late else []

    def decode_step(self, h, out, t: int) -> tuple[torch.Tensor, bool]:
        h, token = self.model.step(h)
        out[:, t] = token
        if not self.late:
            return h, bool((token == STOP).all().item())
        slot = t % 2
        self.flags[slot].copy_((token == STOP).all(), non_blocking=True)
        self.events[slot].record()
        if t == 0:
            return h, False
        self.events[1 - slot].synchronize()   # the previous step's flag, this step queued
        return h, bool(self.flags[1 - slot])

    def handle(self, prompt: list[list[int]]) -> torch.Tensor:
        ids = torch.tensor(prompt, device=self.device)
        h = self.model.embed(ids).mean(1)
        out = torch.empty((BATCH, TOKENS), dtype=torch.long, device=self.device)
        ledger = Ledger()
        for t in range(TOKENS):
            h, stop = self.decode_step(h, out, t)
            ledger.tick(t, time.perf_counter())
            if stop:
                break
        return out


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"stopcheck: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
