"""A decoding service that reads each step's tokens back to the host to detokenize them and
check stop strings, as text-generation servers do.

Planted: the tokens are copied to the host without waiting, in a helper (``fetch``:
``.to("cpu", non_blocking=True)``), and the loop then calls ``torch.cuda.synchronize()`` at its
own line before the host reads them: every step the CPU waits for the whole step's kernels,
then detokenizes while the GPU has nothing queued (``syncs.sync-after-async-dtoh``). The fix
the rule names: an event recorded after the copy, waited for only after the next step's
kernels are queued, so the host detokenizes step t while the GPU runs step t + 1 (one step of
lag, as servers with asynchronous output processing do). A request decodes 48 tokens for 64
sequences (fp32, ~4.3 GB of weights read a step); no stop string comes: every token is decoded.
"""
from __future__ import annotations

import random
import unicodedata

import torch
from torch import nn

WIDTH, BLOCKS, VOCAB, BATCH, TOKENS, PROMPT = 4096, 8, 8192, 64, 48, 16
STOP_TEXT = "<|never|>"
VARIANTS = {
    "base": "as written",
    "late_wait": "syncs.sync-after-async-dtoh: an event recorded after the copy, waited for "
                 "(done.synchronize()) after the next step's kernels are queued; the host "
                 "detokenizes the previous step meanwhile",
    "event_now": "control, no rule's fix as a whole: the event waited for at once (the copy's "
                 "stream only, no lag); on one stream this waits as long as the synchronize",
}
PIECES = [f"tok{i % 97}{chr(97 + i % 26)}" for i in range(VOCAB)]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, h):
        return h + self.down(torch.nn.functional.gelu(self.up(self.norm(h))))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(WIDTH, VOCAB)

    def step(self, h):
        for block in self.blocks:
            h = block(h)
        token = self.head(h).argmax(-1)
        return 0.5 * h + self.embed(token), token


class Detokenizer:
    """The host's per-token work, as incremental detokenization does it: per sequence, decode
    a window of the last tokens with and without the new one, keep what the new one adds,
    and check the stop string in the text's tail."""

    def __init__(self) -> None:
        self.ids: list[list[int]] = [[] for _ in range(BATCH)]
        self.texts: list[list[str]] = [[] for _ in range(BATCH)]

    def add(self, tokens: list[int]) -> bool:
        """Append one step's tokens; True when every sequence has hit the stop string."""
        stopped = 0
        for ids, text, tok in zip(self.ids, self.texts, tokens, strict=True):
            ids.append(tok)
            prefix = "".join(PIECES[t] for t in ids[-12:-1])
            full = unicodedata.normalize("NFC", "".join(PIECES[t] for t in ids[-12:]))
            text.append(full[len(prefix):])
            stopped += STOP_TEXT in "".join(text[-8:])
        return stopped == len(self.texts)


def fetch(tokens: torch.Tensor) -> torch.Tensor:
    return tokens.to("cpu", non_blocking=True)   # queued; the host must wait before reading


def make_requests(n: int = 6, seed: int = 0) -> list[list[list[int]]]:
    rng = random.Random(seed)
    return [[[rng.randrange(VOCAB) for _ in range(PROMPT)] for _ in range(BATCH)]
            for _ in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        self.model = Model().to(device).eval()
        self.requests = make_requests()
        self.late_wait = variant == "late_wait" and device == "cuda"
        self.event_now = variant == "event_now" and device == "cuda"

    def handle(self, prompt: list[list[int]]) -> list[str]:
        ids = torch.tensor(prompt, device=self.device)
        h = self.model.embed(ids).mean(1)
        detok = Detokenizer()
        pending = None
        for _ in range(TOKENS):
            h, token = self.model.step(h)
            host = fetch(token)
            if self.event_now:
                done = torch.cuda.Event()
                done.record()
                done.synchronize()
            if not self.late_wait:
                if self.device == "cuda" and not self.event_now:
                    torch.cuda.synchronize()
                if detok.add(host.tolist()):
                    break
                continue
            done = torch.cuda.Event()
            done.record()
            if pending is not None:       # the previous step's tokens, while this one runs
                pending[1].synchronize()
                if detok.add(pending[0].tolist()):
                    pending = None
                    break
            pending = (host, done)
        if pending is not None:
            pending[1].synchronize()
            detok.add(pending[0].tolist())
        return ["".join(seq) for seq in detok.texts]


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"readback: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
