"""A text-line recognition service (the second stage of a document OCR pipeline): per request the
48 line crops of one scanned page, 32 x 512 grey-scale (uint8, as the layout stage cuts them),
read by a convolutional stem (4 convolutions, the height pooled to 1, a column every 4 pixels:
128 frames a line) and a 12-layer transformer encoder (width 256, 8 heads, float32), then a
linear layer to 96 classes (95 printable characters and the CTC blank); the frames decoded
greedily (best class per frame, repeats merged, blanks dropped). Sent back for each line: its
text, its confidence (the geometric mean of the best class's probability over the frames) and,
for every word of it, its rank in a 60,000-word lexicon (-1 when the word is not in it), as
Python lists, strings and numbers.

Written (2026-12-06, the fifth blind round) before any zym output was seen for it, with what such
services often have: the attention computed head by head in a Python loop (a slice of the
query, key and value columns, a matmul, a scaling, a softmax and a second matmul per head, the
heads then concatenated), where one batched matmul over all heads does the same; the CTC decoding
done on the host after copying every frame's full probability vector back (a numpy argmax per
line and a Python loop over its frames to merge repeats and drop blanks), where the argmax and
the confidence need only a (lines, frames) index array and one number per line; the lexicon's
lookup table (lower-cased word to rank, a dict of 60,000 entries) rebuilt from the word list on
every request, where it could be built once at start-up.
"""
from __future__ import annotations

import math
import string

import numpy as np
import torch
from torch import nn

ALPHABET = string.printable[:95]  # digits, letters, punctuation, space; class 0 is the CTC blank
NCLS = len(ALPHABET) + 1
CHARS = np.array([""] + list(ALPHABET))  # class index to character ("" for the blank)
PUNCT = string.punctuation
LINES, HEIGHT, WIDTH, REQUESTS = 48, 32, 512, 8
FRAMES = WIDTH // 4
D, HEADS, LAYERS, FF = 256, 8, 12, 512
DH = D // HEADS
LEXICON = 60_000
FIXES = ("batched_heads", "device_decode", "lexicon_once")
VARIANTS = {
    "base": "as written",
    "batched_heads": "the attention of all heads computed at once (queries, keys and values viewed "
                     "as batch x heads x frames x head width, one matmul, scaling, softmax and "
                     "matmul), not head by head in a Python loop",
    "device_decode": "the best class and its log-probability per frame taken on the GPU and only "
                     "the (lines, frames) class indices and one confidence per line copied back, "
                     "repeats and blanks removed with numpy, not a copy of every frame's full "
                     "probability vector and a Python loop over frames",
    "lexicon_once": "the lexicon's lookup table (lower-cased word to rank) built once at start-up, "
                    "not rebuilt from the word list on every request",
    "all": "batched_heads + device_decode + lexicon_once",
}


def make_lexicon(n: int = LEXICON, seed: int = 1) -> list[str]:
    """Words of 2 to 10 letters in frequency order, some capitalised (names, places)."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(2, 11, n)
    letters = rng.integers(0, 26, (n, 10)) + ord("a")
    letters[rng.random(n) < 0.15, 0] -= 32
    return [row[:m].astype(np.uint8).tobytes().decode() for row, m in zip(letters, lens)]


def build_index(words: list[str]) -> dict[str, int]:
    return {w.lower(): rank for rank, w in enumerate(words)}


def make_requests(n: int = REQUESTS, seed: int = 0) -> list[np.ndarray]:
    """Line crops: dark strokes (blocks of 4 x 4 pixels) on a light, noisy background."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ink = rng.random((LINES, HEIGHT // 4, WIDTH // 4)) < 0.3
        img = np.where(np.repeat(np.repeat(ink, 4, 1), 4, 2), 40.0, 225.0)
        img += rng.normal(0.0, 10.0, img.shape)
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


def attend_per_head(qkv: torch.Tensor) -> torch.Tensor:
    """(B, T, 3D) queries, keys, values -> (B, T, D), one head at a time."""
    q, k, v = qkv.chunk(3, -1)
    heads = []
    for h in range(HEADS):
        cols = slice(h * DH, (h + 1) * DH)
        scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(DH)  # (B, T, T)
        heads.append(scores.softmax(-1) @ v[..., cols])  # (B, T, DH)
    return torch.cat(heads, -1)


def attend_batched(qkv: torch.Tensor) -> torch.Tensor:
    """The same, every head at once."""
    b, t, _ = qkv.shape
    q, k, v = qkv.view(b, t, 3, HEADS, DH).permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, T, DH)
    scores = q @ k.transpose(-2, -1) / math.sqrt(DH)  # (B, H, T, T)
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, D)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.norm2 = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, FF), nn.GELU(), nn.Linear(FF, D))

    def forward(self, h: torch.Tensor, attend) -> torch.Tensor:
        h = h + self.proj(attend(self.qkv(self.norm1(h))))
        return h + self.ff(self.norm2(h))


class Recognizer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 16 x W/2
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 8 x W/4
            nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d((2, 1)),  # 4 x W/4
            nn.Conv2d(256, D, (4, 1)))  # 1 x W/4
        self.pos = nn.Parameter(torch.randn(FRAMES, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, NCLS)

    def forward(self, x: torch.Tensor, attend) -> torch.Tensor:
        """(B, 1, HEIGHT, WIDTH) -> (B, FRAMES, NCLS) logits."""
        h = self.stem(x).squeeze(2).transpose(1, 2) + self.pos
        for block in self.blocks:
            h = block(h, attend)
        return self.head(self.norm(h))


def decode_host(probs: np.ndarray) -> list[tuple[str, float]]:
    """Greedy CTC decoding of (B, T, NCLS) probabilities, line by line and frame by frame."""
    out = []
    for p in probs:
        best = p.argmax(-1)
        chars, prev = [], 0
        for t in range(len(best)):
            c = best[t]
            if c != prev and c != 0:
                chars.append(ALPHABET[c - 1])
            prev = c
        conf = float(np.exp(np.log(p.max(-1)).mean()))
        out.append(("".join(chars), conf))
    return out


def decode_device(logits: torch.Tensor) -> list[tuple[str, float]]:
    """The same from the logits: best class and its log-probability per frame on the device."""
    logp, best = logits.log_softmax(-1).max(-1)  # (B, T) each
    conf = logp.mean(1).exp().cpu().numpy()
    best = best.cpu().numpy()
    prev = np.zeros_like(best)
    prev[:, 1:] = best[:, :-1]
    keep = (best != prev) & (best != 0)
    return [("".join(CHARS[row[k]].tolist()), float(c)) for row, k, c in zip(best, keep, conf)]


def lookup(index: dict[str, int], text: str) -> list[int]:
    return [index.get(word.strip(PUNCT).lower(), -1) for word in text.split()]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.attend = attend_batched if "batched_heads" in fixes else attend_per_head
        self.device_decode = "device_decode" in fixes
        self.lexicon_once = "lexicon_once" in fixes
        self.model = Recognizer().to(device).eval()
        self.words = make_lexicon()
        self.index = build_index(self.words) if self.lexicon_once else None
        self.requests = make_requests()

    def handle(self, lines: np.ndarray) -> list[dict]:
        x = torch.from_numpy(lines).to(self.device)[:, None].float() / 127.5 - 1.0
        logits = self.model(x, self.attend)
        if self.device_decode:
            decoded = decode_device(logits)
        else:
            decoded = decode_host(logits.softmax(-1).cpu().numpy())
        index = self.index if self.lexicon_once else build_index(self.words)
        return [{"text": text, "confidence": conf, "words": lookup(index, text)}
                for text, conf in decoded]


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"lineocr: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
