"""A vocal-separation service (the back end of a karaoke app: the app streams a song to it in
windows as it plays, and gets back the backing track to play, the vocals to blend in at the
volume the singer chooses, and the sung melody the singer is scored against): per request a
2.5 to 3.5 s window of a stereo song (44.1 kHz, int16 PCM, interleaved). The window is
uploaded and converted to float on the GPU; its short-time Fourier transform (2048-point
periodic Hann window, hop 512, centred) gives the mixture's spectrogram; a Spleeter-style
2-stem model (for each of the vocals and the accompaniment a U-Net over the log-magnitude of
the lowest 1024 bins of both channels, standardised per bin by statistics fitted at start-up
on a reference song: six 5x5 stride-2 convolutions of widths 16 to 512 with batch norm and
leaky ReLU, six 5x5 stride-2 transposed convolutions with skip connections, ReLU and batch
norm, a 3x3 convolution and a sigmoid; float32) gives each stem a magnitude estimate, and the
stems' ratio masks (each estimate squared over the sum of both, the top bin taking the mask of
the one below) applied to the mixture's complex spectrogram and inverted (inverse FFT and
overlap-add) give each stem's stereo waveform, sent back as int16 PCM. The melody: a harmonic
salience (eight harmonics' weighted magnitudes of the mono vocal-stem spectrogram, a matrix
product, for 73 pitch candidates from C3 to C6 in half-semitone steps) and a voicing score from
the vocal stem's frame energy give each frame's emission scores, and a Viterbi decoder over the
candidates and an unvoiced state (pitch jumps cost in proportion to their size) picks the
melody. Sent back: per stem the (samples, 2) int16 PCM, and per frame (11.6 ms) the melody's
MIDI pitch or None where unvoiced.

The Viterbi decoder is sequential in the frames (each frame's best predecessor depends on the
scores the earlier frames left) and runs on the host in numpy over the emission scores, read
back once per request; the stems' PCM is what the client plays, one copy back per request.

Written (2026-12-07, the eleventh blind round) before any zym output was seen for it, with
what such services often have: the stems inverted on the host (the masks and the mixture's
spectrogram read back, ~13 MB a request from pageable memory, multiplied in numpy and inverted
by a librosa-style float64 numpy helper: an inverse FFT of every frame and a Python loop of
overlap-adds over the ~260 frames, then the int16 conversion), where ``torch.istft`` on the GPU
and the int16 conversion there leave 1 MB of PCM to copy back; the analysis window taken from
numpy (``np.hanning``, float64) so that ``torch.stft`` promotes the float32 waveform and gives
a complex128 spectrogram (the mask product and the readback of the spectrogram, or the GPU
inversion, in double precision too), where a float32 window (``torch.hann_window``) keeps it
all in single precision; and ``torch.cuda.empty_cache()`` after every request (added after an
out-of-memory on a long upload), which returns the caching allocator's blocks to the driver
(a ``cudaFree`` each, synchronising) so that the next request allocates them again with
``cudaMalloc``, where leaving the cache alone costs nothing. The melody's readback and its
Viterbi loop on the host, and the copy of the stems' PCM back, have no such fix: the decoder is
sequential, and the client needs the PCM.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SMALL = os.environ.get("WHATIF_SMALL") == "1"  # a narrower net, shorter windows, for a CPU check
SR = 44100
N_FFT, HOP = 2048, 512
BINS = N_FFT // 2 + 1
F_NET = 1024  # the bins the U-Nets see
CLIP_S = (0.9, 1.3) if SMALL else (2.5, 3.5)
WIDTHS = (4, 8, 8, 16, 16, 32) if SMALL else (16, 32, 64, 128, 256, 512)
STEMS = ("vocals", "accompaniment")
EPS = 1e-10  # the ratio masks' (Spleeter's)
MIDI_LO, MIDI_HI = 48, 84  # the melody's pitch candidates, half-semitone steps
CANDIDATES = 2 * (MIDI_HI - MIDI_LO) + 1
HARMONICS = 8
SHARPNESS = 4.0
REQUESTS = 3 if SMALL else 20
SCALE = np.array([0, 2, 4, 5, 7, 9, 11])
FIXES = ("gpu_istft", "float32_stft", "keep_cache")
VARIANTS = {
    "base": "as written",
    "gpu_istft": "the stems' masked spectrograms inverted by torch.istft on the GPU and "
                 "converted to int16 there (the PCM copied back), not read back (masks and "
                 "mixture spectrogram) and inverted by a float64 numpy helper (inverse FFTs, a "
                 "Python overlap-add loop over the frames, the int16 conversion) on the host",
    "float32_stft": "the analysis window made by torch.hann_window (float32), so the "
                    "spectrogram, the masked spectrograms and their readback are complex64, "
                    "not numpy's float64 np.hanning promoting them all to complex128",
    "keep_cache": "no torch.cuda.empty_cache() after each request: the caching allocator "
                  "keeps its blocks, not handing them back to the driver (cudaFree) for the "
                  "next request to cudaMalloc again",
    "all": "gpu_istft + float32_stft + keep_cache",
}


def midi_hz(m):
    return 440.0 * 2.0 ** ((np.asarray(m, dtype=np.float64) - 69.0) / 12.0)


def tone(freq: np.ndarray, amps) -> np.ndarray:
    """A harmonic tone following the per-sample frequency ``freq`` (Hz)."""
    phase = 2 * np.pi * np.cumsum(freq) / SR
    return sum(a * np.sin(k * phase) for k, a in enumerate(amps, 1))


def song(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """A synthetic pop song's window: (samples, 2) int16. A I-vi-IV-V progression in a random
    key at 85 to 135 BPM: drums (a kick on every beat, a snare on the off-beats, hi-hats on
    the eighths), a bass on the chord's root, the chord's triad panned, and a sung melody
    (notes of half a beat to two beats on the scale, a quarter of them rests, vibrato and
    eight harmonics) in the centre."""
    n = int(seconds * SR)
    t = np.arange(n) / SR
    beat = 60.0 / rng.uniform(85.0, 135.0)
    root = int(rng.integers(40, 52))
    offset = rng.uniform(0.0, 4 * beat)  # where in the bar the window starts
    tb = t + offset
    degree = np.array([0, 5, 3, 4])[(tb // (4 * beat)).astype(int) % 4]
    in_beat = tb % beat
    bass = 0.35 * tone(midi_hz(root + SCALE[degree]), (1.0, 0.4, 0.2)) * np.exp(-in_beat / beat)
    chords = np.zeros((n, 2))
    for j, pan in zip(range(3), (0.3, 0.5, 0.7)):
        step = degree + 2 * j
        m = root + 12 + SCALE[step % 7] + 12 * (step // 7)
        c = 0.08 * tone(midi_hz(m), (1.0, 0.5, 0.33, 0.25, 0.2))
        chords += c[:, None] * np.array([1.0 - pan, pan])
    drums = np.zeros(n)
    first = int(np.ceil(offset / (beat / 2)))
    for k in range(first, int((offset + seconds) / (beat / 2)) + 1):
        s0 = int((k * beat / 2 - offset) * SR)
        d = np.arange(min(int(0.3 * SR), n - s0)) / SR
        if k % 2 == 0:  # on the beat: kick, and the snare on the off-beats
            drums[s0:s0 + len(d)] += 0.6 * np.exp(-d / 0.08) * np.sin(
                2 * np.pi * (50 * d + 1.5 * (1 - np.exp(-d / 0.02))))
            if k % 4 == 2:
                drums[s0:s0 + len(d)] += 0.3 * np.exp(-d / 0.05) * rng.normal(0, 1, len(d))
        drums[s0:s0 + len(d)] += 0.08 * np.exp(-d / 0.01) * np.diff(rng.normal(0, 1, len(d) + 1))
    pitch, amp, at = np.zeros(n), np.zeros(n), 0
    while at < n:
        dur = int(rng.choice([0.5, 1.0, 1.5, 2.0]) * beat * SR)
        if rng.random() > 0.25:
            m = 57 + SCALE[rng.integers(7)] + 12 * (rng.random() < 0.25)
            pitch[at:at + dur] = m
            ramp = np.minimum(1.0, np.minimum(np.arange(dur), dur - np.arange(dur)) / (0.03 * SR))
            amp[at:at + dur] = ramp[:n - at]
        at += dur
    vibrato = 0.3 * np.sin(2 * np.pi * 5.5 * t)
    vocal = 0.3 * amp * tone(midi_hz(np.where(pitch > 0, pitch, 60) + vibrato),
                             (1.0, 0.7, 0.5, 0.35, 0.25, 0.15, 0.1, 0.07))
    mix = chords + (bass + drums + vocal)[:, None] + rng.normal(0.0, 0.002, (n, 2))
    mix *= 0.8 / np.abs(mix).max()
    return np.round(mix * 32767).astype(np.int16)


@functools.lru_cache(maxsize=2)
def make_requests(n: int = REQUESTS, seed: int = 0) -> tuple[dict, ...]:
    rng = np.random.default_rng(seed)
    return tuple({"pcm": song(rng, rng.uniform(*CLIP_S))} for _ in range(n))


def harmonic_matrix() -> np.ndarray:
    """(CANDIDATES, BINS) float32: each pitch candidate's harmonics' weights (0.8 ** (h - 1)),
    shared linearly between the two nearest bins."""
    f0 = midi_hz(MIDI_LO + 0.5 * np.arange(CANDIDATES))
    out = np.zeros((CANDIDATES, BINS))
    for h in range(1, HARMONICS + 1):
        pos = h * f0 * N_FFT / SR
        lo = np.floor(pos).astype(int)
        ok = lo + 1 < BINS
        rows = np.arange(CANDIDATES)[ok]
        np.add.at(out, (rows, lo[ok]), 0.8 ** (h - 1) * (1 - (pos - lo)[ok]))
        np.add.at(out, (rows, lo[ok] + 1), 0.8 ** (h - 1) * (pos - lo)[ok])
    return out.astype(np.float32)


def transitions() -> np.ndarray:
    """(states, states) float64 log-probabilities, from row to column: the pitch candidates,
    then the unvoiced state; a pitch jump costs 0.35 a half-semitone, voicing changes 3."""
    idx = np.arange(CANDIDATES)
    score = np.zeros((CANDIDATES + 1, CANDIDATES + 1))
    score[:CANDIDATES, :CANDIDATES] = -0.35 * np.abs(idx[:, None] - idx[None])
    score[:CANDIDATES, CANDIDATES] = -3.0
    score[CANDIDATES, :CANDIDATES] = -3.0
    top = score.max(1, keepdims=True)
    return score - top - np.log(np.exp(score - top).sum(1, keepdims=True))


def viterbi(emis: np.ndarray, trans: np.ndarray) -> list[int]:
    """(states, frames) emission and (states, states) transition log-probabilities -> the
    best state path, frame by frame."""
    states, frames = emis.shape
    delta = emis[:, 0].copy()
    back = np.zeros((frames, states), dtype=np.int64)
    cols = np.arange(states)
    for t in range(1, frames):
        cand = delta[:, None] + trans
        back[t] = cand.argmax(0)
        delta = cand[back[t], cols] + emis[:, t]
    path = [int(delta.argmax())]
    for t in range(frames - 1, 0, -1):
        path.append(int(back[t, path[-1]]))
    return path[::-1]


WINDOW64 = np.hanning(N_FFT + 1)[:-1]  # the periodic Hann window, float64


def istft_host(spec: np.ndarray, length: int) -> np.ndarray:
    """(..., BINS, frames) complex -> (..., length) float64: the inverse of a centred STFT with
    the periodic Hann window (inverse FFTs, overlap-add, divided by the window's squared
    envelope), in float64 numpy as librosa does it."""
    spec = np.asarray(spec, dtype=np.complex128)
    frames = np.fft.irfft(spec, n=N_FFT, axis=-2) * WINDOW64[:, None]
    count = spec.shape[-1]
    total = N_FFT + HOP * (count - 1)
    out = np.zeros(spec.shape[:-2] + (total,))
    env = np.zeros(total)
    for i in range(count):
        out[..., i * HOP:i * HOP + N_FFT] += frames[..., i]
        env[i * HOP:i * HOP + N_FFT] += WINDOW64 ** 2
    start = N_FFT // 2
    return out[..., start:start + length] / env[start:start + length]


class UNet(nn.Module):
    """One stem's Spleeter-style U-Net: (B, 2, F_NET, frames) standardised log-magnitudes
    (frames a multiple of 64) -> (B, 2, F_NET, frames) magnitude estimates in (0, 1)."""

    def __init__(self) -> None:
        super().__init__()
        chans = (2, *WIDTHS)
        self.down = nn.ModuleList(nn.Conv2d(chans[i], chans[i + 1], 5, 2, 2)
                                  for i in range(len(WIDTHS)))
        self.down_norms = nn.ModuleList(nn.BatchNorm2d(c) for c in WIDTHS)
        ins = (WIDTHS[-1], *(2 * w for w in WIDTHS[-2::-1]))
        outs = (*WIDTHS[-2::-1], 8)
        self.up = nn.ModuleList(nn.ConvTranspose2d(i, o, 5, 2, 2, output_padding=1)
                                for i, o in zip(ins, outs))
        self.up_norms = nn.ModuleList(nn.BatchNorm2d(o) for o in outs)
        self.head = nn.Conv2d(8, 2, 3, padding=1)
        for bn in (*self.down_norms, *self.up_norms):  # as if trained
            nn.init.uniform_(bn.running_mean, -0.2, 0.2)
            nn.init.uniform_(bn.running_var, 0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for conv, bn in zip(self.down, self.down_norms):
            x = F.leaky_relu(bn(conv(x)), 0.2)
            skips.append(x)
        x = skips.pop()
        for conv, bn in zip(self.up, self.up_norms):
            x = bn(F.relu(conv(x)))
            if skips:
                x = torch.cat([x, skips.pop()], 1)
        return torch.sigmoid(self.head(x))


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.tf32 = False
        self.gpu_istft = "gpu_istft" in fixes
        self.keep_cache = "keep_cache" in fixes
        self.nets = nn.ModuleList(UNet() for _ in STEMS).to(device).eval()
        if "float32_stft" in fixes:
            self.window = torch.hann_window(N_FFT, device=device)
        else:
            self.window = torch.from_numpy(WINDOW64).to(device)
        self.harmonics = torch.from_numpy(harmonic_matrix()).to(device)
        self.trans = transitions()
        # the U-Nets' input standardisation: per-bin log-magnitude statistics of a reference
        # song (float32, the same for every variant)
        ref = song(np.random.default_rng(99), CLIP_S[1])
        with torch.no_grad():
            x = torch.from_numpy(ref).to(device).T.float() / 32768.0
            mag = torch.stft(x, N_FFT, HOP, window=torch.hann_window(N_FFT, device=device),
                             return_complex=True).abs()[:, :F_NET]
            logmag = torch.log1p(mag)
            self.mean = logmag.mean((0, 2))[:, None]
            self.std = logmag.std((0, 2))[:, None] + 1e-3
        self.requests = list(make_requests())

    def separate(self, mag: torch.Tensor) -> torch.Tensor:
        """The mixture's (2, BINS, frames) magnitudes -> the stems' (stems, 2, BINS, frames)
        ratio masks."""
        frames = mag.shape[-1]
        x = (torch.log1p(mag[:, :F_NET]) - self.mean) / self.std
        x = F.pad(x, (0, -frames % 64))[None]
        est = torch.cat([net(x) for net in self.nets])[..., :frames]
        power = est.square()
        masks = (power + EPS / len(STEMS)) / (power.sum(0, keepdim=True) + EPS)
        return torch.cat([masks, masks[:, :, -1:]], 2)

    def melody(self, vocal: torch.Tensor) -> list:
        """The vocal stem's (2, BINS, frames) magnitudes -> per frame the MIDI pitch, or None
        where unvoiced."""
        mono = vocal.mean(0)
        salience = torch.log1p(self.harmonics @ mono)  # (CANDIDATES, frames)
        energy = torch.log(mono.square().sum(0) + 1e-8)
        voicing = 2.0 * (energy - energy.mean()) / (energy.std() + 1e-6) + 1.0
        emis = torch.cat([F.logsigmoid(voicing)[None] + (SHARPNESS * salience).log_softmax(0),
                          F.logsigmoid(-voicing)[None] - np.log(CANDIDATES)])
        path = viterbi(emis.double().cpu().numpy(), self.trans)  # sequential: on the host
        return [None if s == CANDIDATES else MIDI_LO + 0.5 * s for s in path]

    def handle(self, req: dict) -> dict:
        pcm = req["pcm"]
        n = len(pcm)
        x = torch.from_numpy(pcm).to(self.device).T.float() / 32768.0  # (2, samples)
        spec = torch.stft(x, N_FFT, HOP, window=self.window, return_complex=True)
        mag = spec.abs().float()
        masks = self.separate(mag)
        melody = self.melody(masks[0] * mag)
        if self.gpu_istft:
            y = torch.istft((masks * spec).flatten(0, 1), N_FFT, HOP, window=self.window,
                            length=n)
            stems = ((y * 32768.0).round().clamp(-32768, 32767).to(torch.int16)
                     .view(len(STEMS), 2, n).cpu().numpy())
        else:
            y = istft_host(masks.cpu().numpy() * spec.cpu().numpy(), n)
            stems = np.clip(np.round(y * 32768.0), -32768, 32767).astype(np.int16)
        if not self.keep_cache and self.device == "cuda":
            torch.cuda.empty_cache()  # give this request's memory back
        return {"stems": {k: stems[i].T for i, k in enumerate(STEMS)}, "melody": melody,
                "frame_s": HOP / SR}


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"vocalsep: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
