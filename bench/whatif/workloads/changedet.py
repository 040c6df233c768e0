"""A satellite change-detection service (a land-monitoring platform's alerting for clear-cuts
and new construction): per request an area of interest (AOI) of 12.8 x 12.8 km, its reference
scene (the cloud-free mosaic the AOI is monitored against) and a new acquisition, both
Sentinel-2-like 4-band rasters (blue, green, red, near infrared; 1280 x 1280 pixels of 10 m,
uint16 reflectance x 10,000, 0 where there is no data). Each scene is stretched band by band
between its 2nd and 98th percentiles (taken, as map viewers do, on a 1-in-4 decimated grid of
its valid pixels) into [0, 1], no-data pixels set to 0, and cut into 25 tiles of 256 x 256. An
FC-Siam-diff network (a shared U-Net encoder of 4 stages, widths 32 to 256, conv-BN-ReLU; the
decoder fed the absolute differences of the two scenes' features at every scale; float32,
convolutions as cuDNN runs them) gives a change probability per pixel. Sent back: the
probability map as uint8 (x 255, 0 where either scene has no data), the changed area (p > 0.5)
in hectares and per tile.

The tiles are independent of each other (no overlap, no context across tile borders).

Written (2026-12-07, the ninth blind round) before any zym output was seen for it, with what
such services often have: both scenes stretched on the host in float64 numpy (6.5 M values a
scene: a cast, a subtraction, a division and a clip, and a percentile per band) and the float32
results (26 MB a scene) uploaded from pageable memory, where the raw uint16 rasters (half the
bytes) could be uploaded and the same float64 arithmetic and percentiles (torch.quantile) run
on the GPU; the network called once per tile in a Python loop (the encoder twice and the
decoder once per tile, batch 1: 75 calls a request), where the 25 tiles stack into one batch;
and the reference scene stretched and encoded again for every request, although an AOI's
reference stays the same for every new acquisition, where its encoder features (and its
no-data mask) could be kept on the GPU per AOI after the first request.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SMALL = os.environ.get("WHATIF_SMALL") == "1"  # a smaller scene and model, for a CPU check
SCENE = 256 if SMALL else 1280  # pixels a side
TILE = 128 if SMALL else 256
SIDE = SCENE // TILE
BANDS = 4
WIDTHS = (8, 16, 32, 64) if SMALL else (32, 64, 128, 256)
DECIMATE = 4
P_LO, P_HI = 2.0, 98.0
PIXEL_HA = 0.01  # a 10 m pixel
HEAD_GAIN, HEAD_BIAS = 6.0, -4.5
REQUESTS = 4
# reflectance x 10,000 of blue, green, red, NIR: water, forest, crops, urban, bare soil
SIGNATURES = np.array([[300, 400, 250, 150], [250, 450, 300, 3000], [500, 800, 600, 3500],
                       [1200, 1300, 1400, 2000], [1100, 1300, 1600, 2200]], dtype=np.float64)
FIXES = ("gpu_stretch", "batched_tiles", "reference_cache")
VARIANTS = {
    "base": "as written",
    "gpu_stretch": "the raw uint16 scenes uploaded and stretched on the GPU (the same float64 "
                   "arithmetic, percentiles by torch.quantile), not in numpy on the host with "
                   "the float32 result uploaded from pageable memory",
    "batched_tiles": "the 25 tiles of each scene stacked into one batch: the encoder called "
                     "once per scene and the decoder once, not each tile through the network "
                     "in a Python loop",
    "reference_cache": "each AOI's reference-scene encoder features and no-data mask kept on "
                       "the GPU after its first request, not the reference stretched, uploaded "
                       "and encoded again for every new acquisition",
    "all": "gpu_stretch + batched_tiles + reference_cache",
}


def land_cover(rng: np.random.Generator) -> np.ndarray:
    """(SCENE, SCENE) class map: 40-pixel parcels of 5 classes."""
    cells = -(-SCENE // 40)
    return np.kron(rng.integers(0, 5, (cells, cells)), np.ones((40, 40), np.int64))[:SCENE, :SCENE]


def render(classes: np.ndarray, gain: float, rng: np.random.Generator) -> np.ndarray:
    refl = SIGNATURES[classes].transpose(2, 0, 1) * gain  # (BANDS, S, S)
    refl *= 1 + rng.normal(0, 0.06, refl.shape)
    return np.ascontiguousarray(np.clip(np.rint(refl), 1, 10000).astype(np.uint16))


@functools.lru_cache(maxsize=2)
def make_requests(n: int = REQUESTS, seed: int = 0) -> tuple[dict, ...]:
    """Per AOI a reference and a new scene: the same parcels under another illumination, with
    clear-cuts (forest to bare soil) and new buildings (to urban) in 12 to 20 rectangles, and a
    corner outside the new acquisition's swath. Built once a process."""
    rng = np.random.default_rng(seed)
    out = []
    for aoi in range(n):
        before = land_cover(rng)
        after = before.copy()
        for _ in range(int(rng.integers(12, 21))):
            y, x = rng.integers(0, SCENE - 60, 2)
            h, w = rng.integers(8, 60, 2)
            after[y:y + h, x:x + w] = rng.choice([3, 4])
        ref = render(before, 1.0, rng)
        new = render(after, float(rng.uniform(0.9, 1.1)), rng)
        yy, xx = np.mgrid[0:SCENE, 0:SCENE]
        new[:, xx + yy < int(0.25 * SCENE)] = 0
        out.append({"aoi": f"aoi-{aoi:03d}", "reference": ref, "image": new})
    return tuple(out)


def stretch_host(scene: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(BANDS, S, S) uint16 -> (BANDS, S, S) float32 in [0, 1] and the (S, S) valid mask."""
    x = scene.astype(np.float64)
    valid = (scene > 0).all(0)
    sample = valid[::DECIMATE, ::DECIMATE]
    out = np.empty(scene.shape, dtype=np.float32)
    for b in range(BANDS):
        lo, hi = np.percentile(x[b, ::DECIMATE, ::DECIMATE][sample], [P_LO, P_HI])
        out[b] = np.clip((x[b] - lo) / (hi - lo), 0.0, 1.0)
    out[:, ~valid] = 0.0
    return out, valid


def stretch_device(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same on the GPU from the raw rasters (int16 bits of the uint16 values)."""
    x = (raw.int() & 0xFFFF).double()
    valid = (x > 0).all(0)
    sample = x[:, ::DECIMATE, ::DECIMATE][:, valid[::DECIMATE, ::DECIMATE]]  # (BANDS, n)
    q = torch.tensor([P_LO / 100, P_HI / 100], dtype=torch.float64, device=raw.device)
    lo, hi = torch.quantile(sample, q, dim=1)[:, :, None, None]  # (BANDS, 1, 1) each
    out = ((x - lo) / (hi - lo)).clamp(0.0, 1.0).float()
    return torch.where(valid, out, 0.0), valid


def tiles(x: torch.Tensor) -> torch.Tensor:
    """(C, S, S) -> (SIDE * SIDE, C, TILE, TILE), row-major."""
    c = x.shape[0]
    return x.view(c, SIDE, TILE, SIDE, TILE).permute(1, 3, 0, 2, 4).reshape(-1, c, TILE, TILE)


def untile(t: torch.Tensor) -> torch.Tensor:
    """(SIDE * SIDE, 1, TILE, TILE) -> (S, S)."""
    return t.view(SIDE, SIDE, TILE, TILE).permute(0, 2, 1, 3).reshape(SCENE, SCENE)


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class SiamDiff(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        w = WIDTHS
        self.enc = nn.ModuleList([double_conv(BANDS, w[0]), double_conv(w[0], w[1]),
                                  double_conv(w[1], w[2]), double_conv(w[2], w[3])])
        self.ups = nn.ModuleList([nn.ConvTranspose2d(w[i + 1], w[i], 2, 2) for i in range(3)])
        self.dec = nn.ModuleList([double_conv(2 * w[i], w[i]) for i in range(3)])
        self.head = nn.Conv2d(w[0], 1, 1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.ConvTranspose2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):  # as if trained
                nn.init.uniform_(m.running_mean, -0.1, 0.1)
                nn.init.uniform_(m.running_var, 0.5, 1.5)
        with torch.no_grad():  # larger feature differences, higher change logits
            self.head.weight.copy_(self.head.weight.abs() * HEAD_GAIN)
            self.head.bias.fill_(HEAD_BIAS)

    def encode(self, x: torch.Tensor) -> list[torch.Tensor]:
        """(B, BANDS, T, T) -> the 4 stages' features, at T, T/2, T/4, T/8."""
        feats = []
        for i, stage in enumerate(self.enc):
            x = stage(F.max_pool2d(x, 2) if i else x)
            feats.append(x)
        return feats

    def decode(self, fa: list[torch.Tensor], fb: list[torch.Tensor]) -> torch.Tensor:
        """Both scenes' features -> (B, 1, T, T) change logits."""
        d = [(a - b).abs() for a, b in zip(fa, fb)]
        y = d[3]
        for i in (2, 1, 0):
            y = self.dec[i](torch.cat([self.ups[i](y), d[i]], 1))
        return self.head(y)


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.tf32 = False
        self.gpu_stretch = "gpu_stretch" in fixes
        self.batched = "batched_tiles" in fixes
        self.cache: dict | None = {} if "reference_cache" in fixes else None
        self.model = SiamDiff().to(device).eval()
        self.requests = list(make_requests())

    def prepare(self, scene: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """A scene -> its (SIDE * SIDE, BANDS, TILE, TILE) stretched tiles and (S, S) valid
        mask, on the GPU."""
        if self.gpu_stretch:
            x, valid = stretch_device(torch.from_numpy(scene.view(np.int16)).to(self.device))
        else:
            x_h, valid_h = stretch_host(scene)
            x, valid = (torch.from_numpy(a).to(self.device) for a in (x_h, valid_h))
        return tiles(x), valid

    def encode(self, t: torch.Tensor) -> list:
        """Tiles -> features: per scale a (SIDE * SIDE, C, h, w) tensor if batched, else per
        tile its list of scales."""
        if self.batched:
            return self.model.encode(t)
        return [self.model.encode(t[i:i + 1]) for i in range(len(t))]

    def reference(self, req: dict) -> tuple[list, torch.Tensor]:
        if self.cache is not None and req["aoi"] in self.cache:
            return self.cache[req["aoi"]]
        t, valid = self.prepare(req["reference"])
        entry = (self.encode(t), valid)
        if self.cache is not None:
            self.cache[req["aoi"]] = entry
        return entry

    def handle(self, req: dict) -> dict:
        ref_feats, ref_valid = self.reference(req)
        t, valid = self.prepare(req["image"])
        new_feats = self.encode(t)
        if self.batched:
            logits = self.model.decode(ref_feats, new_feats)
        else:
            logits = torch.cat([self.model.decode(fa, fb)
                                for fa, fb in zip(ref_feats, new_feats)])
        prob = torch.where(valid & ref_valid, untile(torch.sigmoid(logits)), 0.0)
        u8 = torch.round(prob * 255.0).to(torch.uint8)
        changed = (prob > 0.5).view(SIDE, TILE, SIDE, TILE).sum((1, 3)).flatten()
        u8_h, per_tile = u8.cpu().numpy(), changed.cpu().tolist()
        return {"prob": u8_h, "changed_ha": sum(per_tile) * PIXEL_HA,
                "tile_ha": [c * PIXEL_HA for c in per_tile]}


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"changedet: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
