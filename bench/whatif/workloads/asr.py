"""A speech recognition service: per request 8 clips of 10 s of audio (16 kHz float32, numpy)
become log-mel features on the CPU with numpy (25 ms windows every 10 ms, an FFT, 80 mel
bands), are uploaded, run through a bfloat16 encoder (two strided convolutions, then 8
transformer layers of width 512) and a CTC head over 1,024 tokens, and are decoded greedily:
the per-frame argmax brought back with ``.cpu()``, repeats and blanks collapsed in Python.

Written (2026-12-06, the second blind round) before any zym output was seen for it.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

CLIPS, RATE, SECONDS, WIN, HOP, NFFT, MELS = 8, 16_000, 10, 400, 160, 512, 80
WIDTH, LAYERS, HEADS, TOKENS = 512, 8, 8, 1024
VARIANTS = {
    "base": "as written",
    "gpu_features": "utilization.*: the log-mel features computed on the GPU (torch.stft and "
                    "the mel matmul after uploading the audio), not with numpy on the CPU",
    "pinned": "transfers.pageable-memory: the features uploaded from a reused pinned buffer "
              "with non_blocking=True",
    "all": "gpu_features (the raw audio uploaded through a pinned buffer)",
}


def mel_filters() -> np.ndarray:
    """Triangular mel filters, (NFFT // 2 + 1, MELS)."""
    mel = lambda f: 2595 * np.log10(1 + f / 700)
    edges = 700 * (10 ** (np.linspace(mel(0), mel(RATE / 2), MELS + 2) / 2595) - 1)
    bins = np.linspace(0, RATE / 2, NFFT // 2 + 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    return np.maximum(0, np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid))).T.astype(
        np.float32)


def features_numpy(audio: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """(CLIPS, frames, MELS) log-mel features of (CLIPS, samples) audio."""
    frames = 1 + (audio.shape[1] - WIN) // HOP
    idx = np.arange(WIN)[None, :] + HOP * np.arange(frames)[:, None]
    window = np.hanning(WIN).astype(np.float32)
    spec = np.abs(np.fft.rfft(audio[:, idx] * window, NFFT)) ** 2
    return np.log(spec.astype(np.float32) @ filters + 1e-6)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sub = nn.Sequential(nn.Conv1d(MELS, WIDTH, 3, 2, 1), nn.GELU(),
                                 nn.Conv1d(WIDTH, WIDTH, 3, 2, 1), nn.GELU())
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, batch_first=True,
                                           dropout=0.0)
        self.layers = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, TOKENS + 1)  # + the CTC blank (0)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        h = self.sub(feats.transpose(1, 2)).transpose(1, 2)
        return self.head(self.layers(h))


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        self.dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.model = Encoder().to(device, self.dtype).eval()
        rng = np.random.default_rng(0)
        self.requests = [rng.standard_normal((CLIPS, RATE * SECONDS), dtype=np.float32) * 0.1
                         for _ in range(6)]
        self.filters = mel_filters()
        self.gpu_features = variant in ("gpu_features", "all")
        self.filters_gpu = torch.from_numpy(self.filters).to(device)
        self.window_gpu = torch.hann_window(WIN, periodic=False, device=device)
        frames = 1 + (RATE * SECONDS - WIN) // HOP
        self.pinned = None
        if variant in ("pinned", "all") and device == "cuda":
            shape = (CLIPS, RATE * SECONDS) if self.gpu_features else (CLIPS, frames, MELS)
            self.pinned = torch.empty(shape, dtype=torch.float32).pin_memory()

    def upload(self, array: np.ndarray) -> torch.Tensor:
        if self.pinned is not None:
            self.pinned.copy_(torch.from_numpy(array))
            return self.pinned.to(self.device, non_blocking=True)
        return torch.from_numpy(array).to(self.device)

    def features(self, audio: np.ndarray) -> torch.Tensor:
        if not self.gpu_features:
            return self.upload(features_numpy(audio, self.filters))
        x = self.upload(audio)
        spec = torch.stft(x, NFFT, HOP, WIN, self.window_gpu, center=False,
                          return_complex=True).abs() ** 2  # (CLIPS, NFFT // 2 + 1, frames)
        return torch.log(spec.transpose(1, 2) @ self.filters_gpu + 1e-6)

    def handle(self, audio: np.ndarray) -> list[list[int]]:
        feats = self.features(audio).to(self.dtype)
        best = self.model(feats).argmax(-1).cpu().numpy()
        out = []
        for row in best:
            text, prev = [], 0
            for t in row:
                if t != prev and t != 0:
                    text.append(int(t))
                prev = t
            out.append(text)
        return out


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"asr: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
