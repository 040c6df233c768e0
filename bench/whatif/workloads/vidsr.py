"""A video super-resolution service (a streaming platform's upscaling of 360p uploads to 720p
before they are re-encoded): per request a chunk of 8 consecutive frames, 360 x 640 RGB uint8
(height, width, channel, as the decoder hands them over), with one more frame on either side
for context. The global motion between consecutive frames is estimated by phase correlation on
half-resolution luma (the frames' mean removed, a Hann window, the normalised cross-power
spectrum's inverse FFT, its peak), and a multi-frame network upscales each frame from its
window of three (the previous, the frame itself and the next): a feature extractor (a 3 x 3
convolution and 8 residual blocks of two 3 x 3 convolutions, 64 channels, at the input's
resolution) for each frame of the window, the neighbours' features shifted by the estimated
motion onto the centre frame, fused by a 1 x 1 convolution, 4 more residual blocks, a 3 x 3
convolution to 12 channels and a pixel shuffle giving a residual added to the bilinearly
upsampled frame (float32; cuDNN's default TF32 convolutions). Sent back: the 8 frames at
720 x 1280 as one uint8 (frames, height, width, channel) array (clamped to [0, 1], times 255,
rounded) and the estimated motion between consecutive frames in pixels.

Written (2026-12-07, the eighth blind round) before any zym output was seen for it, with what
such services often have: the motion estimated on the host in float64 numpy, pair by pair (each
pair converts both frames to luma and transforms both again: 9 pairs, 27 FFTs of 180 x 320 a
request), where the 10 frames already on the GPU could be converted and transformed at once
(one batched fft2, one ifft2, an argmax and one small copy back); the feature extractor run on
every window's three frames (24 frames a request), so each frame's features are computed three
times, where running it once on the 10 frames and slicing the windows gives the same features
for about half the network's work; and the output copied back as float32 (88 MB from the GPU a
request) and clamped, scaled, rounded, cast and transposed in numpy, where the same operations
on the GPU leave a quarter of the bytes to copy and nothing to do on the host.
"""
from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SMALL = os.environ.get("WHATIF_SMALL") == "1"  # smaller frames and a narrower net, for a CPU check
H, W = (64, 96) if SMALL else (360, 640)
FRAMES = 3 if SMALL else 8  # upscaled a request; one more frame either side for context
SCALE = 2
CH = 16 if SMALL else 64
EXTRACT_BLOCKS = 2 if SMALL else 8
RECON_BLOCKS = 1 if SMALL else 4
RES_SCALE = 0.2
MAX_PAN = 6  # pixels a frame, even: whole pixels at the motion estimate's half resolution
LUMA = np.array([0.299, 0.587, 0.114])
REQUESTS = 3
FIXES = ("gpu_motion", "shared_features", "gpu_pack")
VARIANTS = {
    "base": "as written",
    "gpu_motion": "the motion between consecutive frames estimated on the GPU for the whole "
                  "chunk at once (luma, half resolution, window, one batched fft2 and ifft2 in "
                  "float32, an argmax, one copy back), not pair by pair in float64 numpy on "
                  "the host",
    "shared_features": "the feature extractor run once on the chunk's 10 frames and each "
                       "window's three frames' features sliced from it, not run on every "
                       "window's three frames (24 frames: each frame's features three times)",
    "gpu_pack": "the output clamped, scaled to 0-255, rounded, cast to uint8 and transposed to "
                "(frames, height, width, channel) on the GPU and copied back as uint8, not "
                "copied back as float32 and converted in numpy",
    "all": "gpu_motion + shared_features + gpu_pack",
}


def texture(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A (h, w, 3) float image in [0, 1]: blocks at four scales, a colour tint each (edges and
    fine grain, as in real footage, and no periodicity to fool phase correlation)."""
    img = np.zeros((h, w, 3))
    for size, weight in ((48, 0.35), (12, 0.3), (3, 0.2), (1, 0.15)):
        g = rng.random((h // size + 1, w // size + 1, 3)) * rng.uniform(0.6, 1.0, 3)
        img += weight * g.repeat(size, 0).repeat(size, 1)[:h, :w]
    return img


def make_requests(n: int = REQUESTS, seed: int = 0) -> list[dict]:
    """Chunks of a camera panning over a scene at a steady whole (even) number of pixels a
    frame, with sensor noise: (FRAMES + 2, H, W, 3) uint8 each."""
    rng = np.random.default_rng(seed)
    out = []
    span = FRAMES + 1
    margin = MAX_PAN * span
    for _ in range(n):
        scene = texture(rng, H + 2 * margin, W + 2 * margin)
        vy, vx = (int(v) for v in rng.choice(np.arange(-MAX_PAN, MAX_PAN + 1, 2), 2))
        frames = []
        for k in range(FRAMES + 2):
            y0 = margin + vy * k - (vy * span) // 2
            x0 = margin + vx * k - (vx * span) // 2
            f = scene[y0:y0 + H, x0:x0 + W] + rng.normal(0.0, 2.0 / 255, (H, W, 3))
            frames.append(np.clip(np.round(f * 255), 0, 255).astype(np.uint8))
        out.append({"frames": np.stack(frames)})
    return out


def hann2d(h: int, w: int) -> np.ndarray:
    return np.outer(np.hanning(h), np.hanning(w))


def luma_half(frame: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 -> (H / 2, W / 2) float64 luma, 2 x 2 means."""
    y = frame.astype(np.float64) @ LUMA
    return y.reshape(H // 2, 2, W // 2, 2).mean((1, 3))


def wrap(d: int, n: int) -> int:
    return d - n if d > n // 2 else d


def phase_shift(a: np.ndarray, b: np.ndarray, window: np.ndarray) -> tuple[int, int]:
    """The (dy, dx) that moves frame ``b`` onto frame ``a`` (a[y] ~ b[y - d]), at full
    resolution, by phase correlation of their half-resolution lumas."""
    ga, gb = luma_half(a), luma_half(b)
    fa = np.fft.fft2((ga - ga.mean()) * window)
    fb = np.fft.fft2((gb - gb.mean()) * window)
    r = fa * np.conj(fb)
    r /= np.abs(r) + 1e-9
    c = np.fft.ifft2(r).real
    dy, dx = np.unravel_index(int(np.argmax(c)), c.shape)
    return SCALE * wrap(int(dy), c.shape[0]), SCALE * wrap(int(dx), c.shape[1])


def motion_device(u8: torch.Tensor, luma: torch.Tensor, window: torch.Tensor) -> list:
    """(N, H, W, 3) uint8 frames on the device -> the N - 1 consecutive frames' (dy, dx), each
    moving frame i onto frame i + 1, as phase_shift computes them (in float32)."""
    g = (u8.float() @ luma).view(-1, H // 2, 2, W // 2, 2).mean((2, 4))
    g = (g - g.mean((1, 2), keepdim=True)) * window
    f = torch.fft.fft2(g)
    r = f[1:] * f[:-1].conj()
    r = r / (r.abs() + 1e-9)
    c = torch.fft.ifft2(r).real
    peak = c.flatten(1).argmax(1).cpu().tolist()
    h, w = c.shape[1:]
    return [(SCALE * wrap(p // w, h), SCALE * wrap(p % w, w)) for p in peak]


def shift2d(x: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """out[..., y, x] = x[..., y - dy, x - dx], zeros where that falls outside."""
    h, w = x.shape[-2:]
    out = torch.zeros_like(x)
    out[..., max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
        x[..., max(-dy, 0):h - max(dy, 0), max(-dx, 0):w - max(dx, 0)]
    return out


class ResBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(CH, CH, 3, 1, 1)
        self.conv2 = nn.Conv2d(CH, CH, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + RES_SCALE * self.conv2(F.relu(self.conv1(x)))


class MultiFrameSR(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, CH, 3, 1, 1)
        self.extract = nn.Sequential(*(ResBlock() for _ in range(EXTRACT_BLOCKS)))
        self.fuse = nn.Conv2d(3 * CH, CH, 1)
        self.recon = nn.Sequential(*(ResBlock() for _ in range(RECON_BLOCKS)))
        self.up = nn.Conv2d(CH, 3 * SCALE * SCALE, 3, 1, 1)
        with torch.no_grad():  # as if trained: a residual of a few levels on the bilinear frame
            self.up.weight.mul_(0.3)
            self.up.bias.zero_()

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3, H, W) frames in [0, 1] -> (N, CH, H, W) features."""
        return self.extract(F.leaky_relu(self.head(x - 0.5), 0.1))

    def reconstruct(self, fused: torch.Tensor, centre: torch.Tensor) -> torch.Tensor:
        """(N, 3 CH, H, W) aligned windows' features and (N, 3, H, W) centre frames ->
        (N, 3, SCALE H, SCALE W) upscaled frames (not clamped)."""
        y = self.recon(F.leaky_relu(self.fuse(fused), 0.1))
        base = F.interpolate(centre, scale_factor=SCALE, mode="bilinear", align_corners=False)
        return F.pixel_shuffle(self.up(y), SCALE) + base


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.tf32 = False
        self.gpu_motion = "gpu_motion" in fixes
        self.shared_features = "shared_features" in fixes
        self.gpu_pack = "gpu_pack" in fixes
        self.window = hann2d(H // 2, W // 2)
        self.window_t = torch.from_numpy(self.window).float().to(device)
        self.luma_t = torch.from_numpy(LUMA).float().to(device)
        # the windows' frames, in order: window t is frames t, t + 1 (its centre) and t + 2
        self.window_frames = torch.tensor([t + k for t in range(FRAMES) for k in range(3)],
                                          device=device)
        self.model = MultiFrameSR().to(device).eval()
        self.requests = make_requests()

    def align(self, feats: torch.Tensor, shifts: list) -> torch.Tensor:
        return torch.stack([shift2d(f, dy, dx) for f, (dy, dx) in zip(feats, shifts)])

    def handle(self, req: dict) -> dict:
        frames = req["frames"]  # (n + 2, H, W, 3) uint8
        n = len(frames) - 2
        u8 = torch.from_numpy(frames).to(self.device)
        if self.gpu_motion:
            motion = motion_device(u8, self.luma_t, self.window_t)
        else:
            motion = [phase_shift(frames[i + 1], frames[i], self.window) for i in range(n + 1)]
        x = u8.permute(0, 3, 1, 2).float().div(255.0).contiguous()  # (n + 2, 3, H, W)
        if self.shared_features:
            f = self.model.features(x)
            prev, centre, nxt = f[:-2], f[1:-1], f[2:]
        else:
            f = self.model.features(x[self.window_frames[:3 * n]]).reshape(n, 3, CH, H, W)
            prev, centre, nxt = f[:, 0], f[:, 1], f[:, 2]
        # window t's neighbours onto its centre, frame t + 1: frame t moved by motion[t],
        # frame t + 2 moved back by motion[t + 1]
        fused = torch.cat([self.align(prev, motion[:n]), centre,
                           self.align(nxt, [(-dy, -dx) for dy, dx in motion[1:]])], 1)
        out = self.model.reconstruct(fused, x[1:-1])
        if self.gpu_pack:
            img = ((out.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)
                   .permute(0, 2, 3, 1).contiguous().cpu().numpy())
        else:
            y = np.clip(out.cpu().numpy(), 0.0, 1.0)
            img = np.ascontiguousarray((y * 255.0).round().astype(np.uint8).transpose(0, 2, 3, 1))
        return {"frames": img, "motion": [list(m) for m in motion]}


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"vidsr: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
