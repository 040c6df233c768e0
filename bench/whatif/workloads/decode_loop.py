"""A launch-bound decoding loop: a deep, narrow model run one token at a time for a few
concurrent sequences, as small-model and speculative-decoding servers do.

Each decoding step launches ~150 small kernels (24 blocks of layer norm, two linear layers,
GELU and a residual add, then an output head and argmax) that each run for a few
microseconds: the CPU's time to launch them one by one sets the speed. Planted as well: a stop
check (``.item()``) after every token, and the prompt uploaded from a Python list through
pageable memory. A request decodes 48 tokens for 8 sequences.
"""
from __future__ import annotations

import random

import torch
from torch import nn

WIDTH, BLOCKS, VOCAB, BATCH, TOKENS, PROMPT = 256, 24, 512, 8, 48, 16
STOP = -1  # a token id argmax never returns: the check runs, the loop never stops early
VARIANTS = {
    "base": "as written",
    "cuda_graph": "compute.launch-bound-step: each decoding step replayed from a CUDA graph "
                  "(torch.cuda.CUDAGraph over static input/output buffers)",
    "item_first": "syncs.scalar-readback: the stop check on the first token only",
    "pin_upload": "transfers.pageable-memory: prompt staged in a reused pinned buffer",
    "all": "cuda_graph + item_first + pin_upload",
}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, h):
        return h + self.down(torch.nn.functional.gelu(self.up(self.norm(h))))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(WIDTH, VOCAB)

    def step(self, h):
        """One decoding step: the state after this token, and the token."""
        for block in self.blocks:
            h = block(h)
        token = self.head(h).argmax(-1)
        return 0.5 * h + self.embed(token), token


def make_requests(n: int = 6, seed: int = 0) -> list[list[list[int]]]:
    rng = random.Random(seed)
    return [[[rng.randrange(VOCAB) for _ in range(PROMPT)] for _ in range(BATCH)]
            for _ in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = {"cuda_graph", "item_first", "pin_upload"} if variant == "all" else {variant}
        self.model = Model().to(device).half().eval() if device == "cuda" else Model().eval()
        self.requests = make_requests()
        self.item_first = "item_first" in fixes
        self.pinned = (torch.empty((BATCH, PROMPT), dtype=torch.long).pin_memory()
                       if "pin_upload" in fixes and device == "cuda" else None)
        self.graph = None
        if "cuda_graph" in fixes and device == "cuda":
            self._capture()

    def _capture(self) -> None:
        dtype = next(self.model.parameters()).dtype
        self.h_in = torch.zeros((BATCH, WIDTH), device=self.device, dtype=dtype)
        with torch.inference_mode():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm up the kernels outside the graph
                for _ in range(3):
                    self.model.step(self.h_in)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.h_out, self.token_out = self.model.step(self.h_in)


    def decode_step(self, h):
        if self.graph is None:
            return self.model.step(h)
        self.h_in.copy_(h)
        self.graph.replay()
        return self.h_out, self.token_out

    def upload(self, prompt: list[list[int]]) -> torch.Tensor:
        if self.pinned is not None:
            self.pinned.copy_(torch.tensor(prompt))
            return self.pinned.to(self.device, non_blocking=True)
        return torch.tensor(prompt, device=self.device)

    def handle(self, prompt: list[list[int]]) -> torch.Tensor:
        ids = self.upload(prompt)
        h = self.model.embed(ids).mean(1)
        out = torch.empty((BATCH, TOKENS), dtype=torch.long, device=self.device)
        for t in range(TOKENS):
            h, token = self.decode_step(h)
            out[:, t] = token
            if (t == 0 or not self.item_first) and (token == STOP).all().item():
                break
        return out


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"decode_loop: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
