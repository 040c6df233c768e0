"""A video action-recognition service (the GPU step behind a warehouse's safety-camera review:
the recorder cuts an event's video into short clips, and the service says what the people in it
are doing, as a timeline and overall, with an embedding of the video for the "find similar
events" search): per request one event video, as the decoder hands it over, eight clips of 16
frames (every second frame of 30 fps, so a clip spans about a second) at 128x171 pixels, RGB
uint8, (8, 16, 128, 171, 3), with each clip's first frame. On the GPU the frames are scaled to
[0, 1], normalised with the Kinetics statistics and cut into three 112x112 crops (left, centre,
right, as three-crop testing does), 24 views of (3, 16, 112, 112); an R(2+1)D-18 network (the
torchvision architecture: a (2+1)D stem, four stages of two residual blocks of factorised
(1,3,3) spatial and (3,1,1) temporal Conv3d with batch norm, 64 to 512 channels, global
average pooling; float32, cuDNN's TF32 convolutions, torch's default) gives each view a 512-d
feature and a linear head scores 64 workplace actions. Per clip the three crops' softmaxes are
averaged (the timeline: each clip's start in seconds, its most likely action and probability);
the video's probabilities are the clips' average (sent back: its five most likely actions with
their probabilities); the embedding is the views' mean feature, L2-normalised (512 floats).
Everything comes back as Python values, in one copy to the host per request.

Sizes: six requests of 8 clips x 3 crops = 24 views of 16x112x112 (about 40 GMAC a view); with
WHATIF_SMALL=1 two requests of 2 clips x 3 crops of 8x56x56 frames, channels 8 to 64.
In the measuring process every variant shares torch's caching allocator, so base's
empty_cache also hands back what another variant had cached: the pass after a base pass pays
the cudaMallocs once, on its first request.

Written (2026-12-08, the fourteenth blind round) before any profile of it was seen, with what
such services often have: the backbone run twice on the same views (``self.net(x)`` for the
action scores, then ``self.net.features(x)`` again for the search embedding, as two features
added by two people do), where one pass of the backbone feeding both the head and the
embedding gives identical results (shared_backbone); ``torch.cuda.empty_cache()`` after every
request (added to "give the memory back" after an out-of-memory scare), so the caching
allocator hands all its blocks to the driver (cudaFree, which synchronises) and every next
request cudaMallocs its activations again, where keeping the cache gives identical results
(keep_cache); and cuDNN's benchmark mode left off for convolutions whose shapes never change,
so each Conv3d runs the algorithm cuDNN's heuristics guess, where ``cudnn.benchmark = True``
times the candidates once per shape and keeps the fastest (cudnn_benchmark; the same maths,
another TF32 algorithm: probabilities within ~1e-3).
"""
from __future__ import annotations

import contextlib
import functools
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SMALL = os.environ.get("WHATIF_SMALL") == "1"  # a smaller net and request, for a CPU check
CLIPS = 2 if SMALL else 8
FRAMES = 8 if SMALL else 16
HEIGHT, WIDTH = (64, 86) if SMALL else (128, 171)
CROP = 56 if SMALL else 112
CROPS = 3
STEM = 6 if SMALL else 45
CHANNELS = (8, 16, 32, 64) if SMALL else (64, 128, 256, 512)
REQUESTS = 2 if SMALL else 6
FPS = 30.0
STRIDE = 2  # every second frame
MEAN = (0.43216, 0.394666, 0.37645)  # Kinetics-400, as torchvision's video models use
STD = (0.22803, 0.22145, 0.216989)
ACTIONS = (
    "walking", "running", "carrying box", "lifting box", "stacking boxes", "pushing cart",
    "pulling pallet jack", "driving forklift", "climbing ladder", "falling", "slipping",
    "sitting", "standing still", "bending over", "kneeling", "reaching up to shelf",
    "scanning barcode", "using phone", "talking", "waving", "pointing", "throwing object",
    "catching object", "opening door", "closing door", "sweeping floor", "mopping floor",
    "wrapping pallet", "cutting tape", "opening box", "taping box", "loading truck",
    "unloading truck", "operating machine", "welding", "drilling", "hammering", "sawing",
    "painting", "typing", "writing", "eating", "drinking", "smoking", "stretching", "jumping",
    "crawling", "lying on floor", "fighting", "hugging", "shaking hands", "picking item",
    "placing item", "counting items", "inspecting item", "checking clipboard",
    "putting on helmet", "taking off helmet", "putting on gloves", "riding bicycle", "jogging",
    "dancing", "vaulting railing", "entering restricted area")
FIXES = ("shared_backbone", "keep_cache", "cudnn_benchmark")
VARIANTS = {
    "base": "as written",
    "shared_backbone": "one backbone pass feeding both the action head and the embedding, not "
                       "the full net for the scores and the backbone again for the embedding",
    "keep_cache": "the caching allocator's blocks kept between requests, not "
                  "torch.cuda.empty_cache() after every request",
    "cudnn_benchmark": "torch.backends.cudnn.benchmark on (the fastest algorithm per fixed "
                       "convolution shape, timed once), not cuDNN's heuristic choice",
    "all": "shared_backbone + keep_cache + cudnn_benchmark",
    # added after zym's first analysis (the fifty-ninth round), to measure a finding no blind
    # fix answers: not one of the round's blind fixes (not in "all")
    "channels_last": "the net and its input in channels-last (NDHWC) memory format "
                     "(torch.channels_last_3d), not the default NCDHW",
}


def make_video(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(CLIPS, FRAMES, H, W, 3) uint8 frames of a synthetic scene (a lit floor, shelving,
    three moving people-sized blobs, sensor noise) and each clip's first frame number."""
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    base = np.empty((HEIGHT, WIDTH, 3), np.float32)
    tint = rng.uniform(0.6, 1.0, 3).astype(np.float32)
    base[:] = (60 + 120 * yy / HEIGHT)[..., None] * tint
    for _ in range(3):  # shelving: vertical bands
        x0 = int(rng.integers(0, WIDTH - 12))
        base[:, x0:x0 + int(rng.integers(6, 14))] *= rng.uniform(0.4, 0.8)
    span = FRAMES * STRIDE
    total = int(rng.integers(CLIPS * span, 3 * CLIPS * span))
    starts = np.linspace(0, total - span, CLIPS).astype(np.int64)
    t = starts[:, None] + STRIDE * np.arange(FRAMES)[None]  # (CLIPS, FRAMES) frame numbers
    video = np.broadcast_to(base, (CLIPS, FRAMES, HEIGHT, WIDTH, 3)).copy()
    for _ in range(3):
        cy, cx = rng.uniform(0.3, 0.8) * HEIGHT, rng.uniform(0.1, 0.9) * WIDTH
        vy, vx = rng.normal(0, 0.15, 2) * HEIGHT / 30
        ry, rx = rng.uniform(0.12, 0.25) * HEIGHT, rng.uniform(0.04, 0.09) * WIDTH
        colour = rng.uniform(20, 235, 3).astype(np.float32)
        wobble = rng.uniform(0.5, 3.0)
        for c in range(CLIPS):
            py = (cy + vy * t[c] + 2 * np.sin(t[c] / wobble))[:, None, None]
            px = (cx + vx * t[c])[:, None, None]
            inside = ((yy - py) / ry) ** 2 + ((xx - px) / rx) ** 2 < 1.0  # (FRAMES, H, W)
            video[c][inside] = colour
    video += rng.normal(0, 4.0, video.shape).astype(np.float32)
    return np.clip(video, 0, 255).astype(np.uint8), starts


@functools.lru_cache(maxsize=2)
def make_requests(n: int = REQUESTS, seed: int = 0) -> tuple[dict, ...]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        frames, starts = make_video(rng)
        out.append({"event": f"cam{int(rng.integers(1, 40)):02d}-evt{1000 + i}",
                    "frames": frames, "clip_start_frame": starts.tolist(), "fps": FPS})
    return tuple(out)


def midplanes(cin: int, cout: int) -> int:
    """torchvision's R(2+1)D mid channels: as many parameters as a full 3x3x3 convolution."""
    return (cin * cout * 27) // (cin * 9 + 3 * cout)


class Conv2Plus1D(nn.Sequential):
    def __init__(self, cin: int, cout: int, mid: int, stride: int = 1) -> None:
        super().__init__(
            nn.Conv3d(cin, mid, (1, 3, 3), (1, stride, stride), (0, 1, 1), bias=False),
            nn.BatchNorm3d(mid), nn.ReLU(inplace=True),
            nn.Conv3d(mid, cout, (3, 1, 1), (stride, 1, 1), (1, 0, 0), bias=False))


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(Conv2Plus1D(cin, cout, midplanes(cin, cout), stride),
                                   nn.BatchNorm3d(cout), nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(Conv2Plus1D(cout, cout, midplanes(cout, cout)),
                                   nn.BatchNorm3d(cout))
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv3d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm3d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.down is None else self.down(x)
        return F.relu(self.conv2(self.conv1(x)) + skip)


class R2Plus1D(nn.Module):
    """(B, 3, T, H, W) -> features (B, 512) via ``features``, action logits via ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        c = CHANNELS
        self.stem = nn.Sequential(
            nn.Conv3d(3, STEM, (1, 7, 7), (1, 2, 2), (0, 3, 3), bias=False),
            nn.BatchNorm3d(STEM), nn.ReLU(inplace=True),
            nn.Conv3d(STEM, c[0], (3, 1, 1), 1, (1, 0, 0), bias=False),
            nn.BatchNorm3d(c[0]), nn.ReLU(inplace=True))
        stages, cin = [], c[0]
        for i, cout in enumerate(c):
            stages += [Block(cin, cout, 1 if i == 0 else 2), Block(cout, cout, 1)]
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(c[-1], len(ACTIONS))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x)).mean((2, 3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def views(frames: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(C, T, H, W, 3) uint8 -> (C * 3, 3, T, CROP, CROP) float32: normalised, three crops."""
    x = (frames.float() / 255.0 - mean) / std
    x = x.permute(0, 4, 1, 2, 3)  # (C, 3, T, H, W)
    top = (HEIGHT - CROP) // 2
    lefts = (0, (WIDTH - CROP) // 2, WIDTH - CROP)
    x = torch.stack([x[..., top:top + CROP, a:a + CROP] for a in lefts], 1)
    return x.reshape(-1, 3, FRAMES, CROP, CROP)


@functools.lru_cache(maxsize=1)
@torch.no_grad()
def trained() -> dict:
    """Weights as if trained (on the CPU, once per process, the same for every variant and
    device): batch norms' running statistics from the centre views of four reference videos'
    first clips, the residual branches' last batch norms scaled down as a trained net's are,
    and the head centred on the reference features and scaled so that a view's best action
    gets about a third of the probability."""
    torch.manual_seed(0)
    net = R2Plus1D()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm3d):
            m.momentum = None
    for m in net.stages:
        m.conv2[1].weight.mul_(0.4)
    frames = torch.from_numpy(np.stack([r["frames"][0] for r in make_requests(4, seed=99)]))
    x = views(frames, torch.tensor(MEAN), torch.tensor(STD))[1::CROPS].contiguous()
    net.train()
    f0 = net.features(x)
    net.eval()
    f = f0 - f0.mean(0)
    w = net.fc.weight / (f @ net.fc.weight.T).std()
    scale = min(2.0 ** np.arange(-2, 6, 0.25), key=lambda s: abs(
        float((s * f @ w.T).softmax(1).max(1).values.mean()) - 0.33))
    net.fc.weight.copy_(float(scale) * w)
    net.fc.bias.copy_(-float(scale) * (f0.mean(0) @ w.T))
    return {k: t.clone() for k, t in net.state_dict().items()}


@contextlib.contextmanager
def cudnn_benchmark(on: bool):
    """torch.backends.cudnn.benchmark while one request runs (a process-wide setting, set per
    request here only because every variant shares the measuring process)."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


class Service:
    def __init__(self, variant: str, device: str) -> None:
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.tf32 = False
        self.shared = "shared_backbone" in fixes
        self.keep_cache = "keep_cache" in fixes
        self.benchmark = "cudnn_benchmark" in fixes
        self.channels_last = variant == "channels_last"
        self.net = R2Plus1D()
        self.net.load_state_dict(trained())
        self.net.eval().to(device)
        if self.channels_last:
            self.net.to(memory_format=torch.channels_last_3d)
        self.mean = torch.tensor(MEAN, device=device)
        self.std = torch.tensor(STD, device=device)
        self.requests = list(make_requests())

    def classify(self, req: dict) -> dict:
        frames = torch.from_numpy(req["frames"]).to(self.device)
        x = views(frames, self.mean, self.std)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last_3d)
        if self.shared:
            feats = self.net.features(x)
            logits = self.net.fc(feats)
        else:
            logits = self.net(x)  # the action scores
            feats = self.net.features(x)  # the search embedding
        probs = logits.softmax(1).view(CLIPS, CROPS, -1).mean(1)  # per clip
        video = probs.mean(0)
        top = video.topk(5)
        clip_p, clip_i = probs.max(1)
        emb = F.normalize(feats.view(CLIPS * CROPS, -1).mean(0), dim=0)
        packed = torch.cat([top.values, top.indices.float(), clip_p, clip_i.float(), emb])
        v = packed.cpu().tolist()
        n = len(emb)
        top5 = [(ACTIONS[int(i)], p) for p, i in zip(v[:5], v[5:10])]
        timeline = [{"start_s": round(s / req["fps"], 3), "action": ACTIONS[int(i)], "prob": p}
                    for s, p, i in zip(req["clip_start_frame"], v[10:10 + CLIPS],
                                       v[10 + CLIPS:10 + 2 * CLIPS])]
        return {"event": req["event"], "top5": top5, "timeline": timeline,
                "embedding": v[-n:]}

    def handle(self, req: dict) -> dict:
        with cudnn_benchmark(self.benchmark):
            out = self.classify(req)
        if not self.keep_cache and torch.device(self.device).type == "cuda":
            torch.cuda.empty_cache()  # the request's activations back to the driver
        return out


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"clipaction: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
