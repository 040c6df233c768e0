"""A multi-speaker text-to-speech service: per request 8 utterances (40 to 100 phoneme tokens
each) and, for each, one of 4 enrolled voices; a convolutional text encoder with a duration
predictor (each token held for 1 to 12 mel frames), the voice's speaker embedding (a 2-layer LSTM
speaker encoder, GE2E style, over partial windows of the voice's enrolment clip), a 2-layer GRU
decoder to 80-band mel frames, and a HiFi-GAN style vocoder (transposed convolutions upsampling
8 x 8 x 2 x 2, dilated residual blocks, weight-normalised convolutions, float32) turning 256
samples a frame; each utterance's waveform goes back as a float32 numpy array.

Written (2026-12-06, the fourth blind round) before any zym output was seen for it, with what such
services often have: the speaker embedding recomputed from the voice's enrolment clip for every
utterance of every request (eight LSTM passes a request over clips that never change); the decoder
GRU run as two ``nn.GRUCell`` stepped frame by frame in a Python loop (some 550 steps, three small
kernels a cell a step), the layout of the trained checkpoint, where one cuDNN ``nn.GRU`` call over
the whole sequence computes the same; the vocoder's weight normalisation (a training device) left
in place, every convolution's weight recomputed from its direction and norm at every call.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

VOCAB, D, MELS, HOP = 96, 256, 80, 256
BATCH, MIN_TOKENS, MAX_TOKENS, REQUESTS = 8, 40, 100, 2
VOICES, ENROL_FRAMES, PARTIAL, PARTIAL_STEP, SPK, SPK_LAYERS = 4, 480, 160, 80, 256, 2
DEC_LAYERS, MAX_DUR, MEAN_DUR = 2, 12, 5.0
UPSAMPLE, VOC_CH, DILATIONS = (8, 8, 2, 2), 256, (1, 3, 5)
FIXES = ("cache_voices", "cudnn_gru", "fold_weight_norm")
VARIANTS = {
    "base": "as written",
    "cache_voices": "each voice's speaker embedding computed on first use and kept, not "
                    "recomputed for every utterance",
    "cudnn_gru": "the decoder's GRU cells loaded into one 2-layer nn.GRU (cuDNN) run over the "
                 "whole frame sequence in one call, not stepped frame by frame",
    "fold_weight_norm": "the vocoder's weight normalisation removed at load (each weight computed "
                        "once from its direction and norm), not at every call",
    "all": "cache_voices + cudnn_gru + fold_weight_norm",
}


class TextEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(D, D, 5, padding=2) for _ in range(3))
        self.norms = nn.ModuleList(nn.BatchNorm1d(D) for _ in range(3))
        self.duration = nn.Sequential(nn.Conv1d(D, D, 3, padding=1), nn.ReLU(),
                                      nn.Conv1d(D, D, 3, padding=1), nn.ReLU())
        self.log_duration = nn.Linear(D, 1)
        for m in self.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
        nn.init.constant_(self.log_duration.bias, math.log(MEAN_DUR))

    def forward(self, tokens: torch.Tensor):
        """(B, L) token ids -> (B, L, D) states and (B, L) log durations."""
        x = self.embed(tokens).transpose(1, 2)
        for conv, norm in zip(self.convs, self.norms):
            x = F.relu(norm(conv(x)))
        log_dur = self.log_duration(self.duration(x).transpose(1, 2)).squeeze(-1)
        return x.transpose(1, 2), log_dur


class SpeakerEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(MELS, SPK, SPK_LAYERS, batch_first=True)
        self.proj = nn.Linear(SPK, SPK)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """(frames, MELS) enrolment clip -> (SPK,) unit-norm embedding, averaged over partials."""
        partials = mel.unfold(0, PARTIAL, PARTIAL_STEP).transpose(1, 2).contiguous()
        _, (hidden, _) = self.lstm(partials)
        e = F.relu(self.proj(hidden[-1])).mean(0)
        return e / e.norm()


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.speaker = nn.Linear(SPK, D)
        self.cells = nn.ModuleList(nn.GRUCell(D, D) for _ in range(DEC_LAYERS))
        self.mel = nn.Linear(D, MELS)
        self.rnn = None

    def fuse(self) -> None:
        """The cells' weights in one multi-layer nn.GRU (same gates, same order)."""
        rnn = nn.GRU(D, D, DEC_LAYERS, batch_first=True).to(self.mel.weight.device)
        with torch.no_grad():
            for i, cell in enumerate(self.cells):
                getattr(rnn, f"weight_ih_l{i}").copy_(cell.weight_ih)
                getattr(rnn, f"weight_hh_l{i}").copy_(cell.weight_hh)
                getattr(rnn, f"bias_ih_l{i}").copy_(cell.bias_ih)
                getattr(rnn, f"bias_hh_l{i}").copy_(cell.bias_hh)
        self.rnn = rnn.eval()

    def forward(self, frames: torch.Tensor, spk: torch.Tensor) -> torch.Tensor:
        """(B, T, D) frame states, (B, SPK) speaker embeddings -> (B, T, MELS)."""
        x = frames + self.speaker(spk)[:, None, :]
        if self.rnn is not None:
            out, _ = self.rnn(x)
            return self.mel(out)
        h = [x.new_zeros((x.shape[0], D)) for _ in self.cells]
        steps = []
        for t in range(x.shape[1]):
            inp = x[:, t]
            for i, cell in enumerate(self.cells):
                h[i] = cell(inp, h[i])
                inp = h[i]
            steps.append(inp)
        return self.mel(torch.stack(steps, 1))


class ResBlock(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(weight_norm(nn.Conv1d(ch, ch, 3, dilation=d, padding=d))
                                    for d in DILATIONS)
        self.convs2 = nn.ModuleList(weight_norm(nn.Conv1d(ch, ch, 3, padding=1))
                                    for _ in DILATIONS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2):
            x = x + c2(F.leaky_relu(c1(F.leaky_relu(x, 0.1)), 0.1))
        return x


class Vocoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        chs = [VOC_CH // 2 ** i for i in range(len(UPSAMPLE) + 1)]
        self.pre = weight_norm(nn.Conv1d(MELS, chs[0], 7, padding=3))
        self.ups = nn.ModuleList(
            weight_norm(nn.ConvTranspose1d(chs[i], chs[i + 1], 2 * u, stride=u, padding=u // 2))
            for i, u in enumerate(UPSAMPLE))
        self.blocks = nn.ModuleList(ResBlock(c) for c in chs[1:])
        self.post = weight_norm(nn.Conv1d(chs[-1], 1, 7, padding=3))

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """(B, MELS, T) -> (B, 1, T * HOP) in [-1, 1]."""
        x = self.pre(mel)
        for up, block in zip(self.ups, self.blocks):
            x = block(up(F.leaky_relu(x, 0.1)))
        return torch.tanh(self.post(F.leaky_relu(x)))

    def remove_weight_norm(self) -> None:
        for m in list(self.modules()):
            if parametrize.is_parametrized(m, "weight"):
                parametrize.remove_parametrizations(m, "weight")


class TTS(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = TextEncoder()
        self.speaker = SpeakerEncoder()
        self.decoder = Decoder()
        self.vocoder = Vocoder()


def make_requests(n: int = REQUESTS, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"tokens": [rng.integers(1, VOCAB, int(rng.integers(MIN_TOKENS, MAX_TOKENS + 1)))
                        for _ in range(BATCH)],
             "voices": rng.integers(0, VOICES, BATCH).tolist()} for _ in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.cache_voices = "cache_voices" in fixes
        self.model = TTS().to(device).eval()
        if "cudnn_gru" in fixes:
            self.model.decoder.fuse()
        if "fold_weight_norm" in fixes:
            self.model.vocoder.remove_weight_norm()
        rng = np.random.default_rng(1)
        self.enrolment = [torch.from_numpy(rng.standard_normal((ENROL_FRAMES, MELS),
                                                               dtype=np.float32)).to(device)
                          for _ in range(VOICES)]
        self.voice_cache: dict[int, torch.Tensor] = {}
        self.requests = make_requests()

    def voice(self, v: int) -> torch.Tensor:
        if not self.cache_voices:
            return self.model.speaker(self.enrolment[v])
        if v not in self.voice_cache:
            self.voice_cache[v] = self.model.speaker(self.enrolment[v])
        return self.voice_cache[v]

    def handle(self, request: dict) -> list[np.ndarray]:
        tokens = request["tokens"]
        b, longest = len(tokens), max(len(t) for t in tokens)
        padded = np.zeros((b, longest), dtype=np.int64)
        for i, t in enumerate(tokens):
            padded[i, :len(t)] = t
        ids = torch.from_numpy(padded).to(self.device)
        states, log_dur = self.model.encoder(ids)
        dur = torch.clamp(torch.round(torch.exp(log_dur)), 1, MAX_DUR).long() * (ids != 0)
        frames = dur.sum(1)
        lengths = frames.tolist()
        steps = torch.arange(max(lengths), device=self.device).expand(b, -1).contiguous()
        token_of = torch.searchsorted(dur.cumsum(1), steps, right=True).clamp_(max=longest - 1)
        x = torch.gather(states, 1, token_of[..., None].expand(-1, -1, D))
        spk = torch.stack([self.voice(v) for v in request["voices"]])
        mel = self.model.decoder(x, spk).masked_fill((steps >= frames[:, None])[..., None], 0.0)
        wav = self.model.vocoder(mel.transpose(1, 2)).squeeze(1).cpu().numpy()
        return [wav[i, :n * HOP] for i, n in enumerate(lengths)]


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"ttsvoc: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
