"""A land-cover segmentation service: per request 8 aerial tiles of 512x512 RGB (uint8, as the
client decodes them), labelled pixel by pixel into 7 classes by a U-Net (widths 64 to 1,024,
batch norm, bfloat16 on the GPU); sent back for each tile: its label map (uint8) and, for every
class present, its area in pixels and as a fraction of the tile, its mean softmax confidence and
its bounding box, as Python lists and numbers.

Written (2026-12-06, the fourth blind round) before any zym output was seen for it, with what such
services often have: the tiles converted to float32, normalised and transposed to NCHW in numpy on
the host (the preprocessing of the training data loader, kept), then uploaded as float32, four
times the bytes of the uint8 tiles; the model and its input left in the default NCHW memory format
while running in bfloat16 (the convolutions' kernels want channels-last); the per-class statistics
(area, mean confidence, bounding box) computed on the host by a numpy loop over tiles and classes,
each class a full-tile mask, ``np.nonzero`` and a masked mean, after copying the label map and the
full-resolution confidence map back.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

CLASSES = ("background", "building", "road", "water", "barren", "forest", "agriculture")
NCLS = len(CLASSES)
BATCH, SIZE, REQUESTS = 8, 512, 4
WIDTHS = (64, 128, 256, 512, 1024)
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
FIXES = ("gpu_preproc", "channels_last", "gpu_stats")
VARIANTS = {
    "base": "as written",
    "gpu_preproc": "the uint8 tiles uploaded as they come (a quarter of the bytes) and converted, "
                   "normalised and put in NCHW order on the GPU, not in numpy on the host",
    "channels_last": "the model's weights and its input in channels-last memory format",
    "gpu_stats": "every class's area, confidence sum and bounding box computed on the GPU for "
                 "the whole batch (bincount, scatter_reduce) and copied back as one small array "
                 "with the label maps, not by a numpy loop over tiles and classes",
    "all": "gpu_preproc + channels_last + gpu_stats",
}


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        w = WIDTHS
        self.downs = nn.ModuleList([double_conv(3, w[0])]
                                   + [double_conv(w[i], w[i + 1]) for i in range(len(w) - 1)])
        self.ups = nn.ModuleList(nn.ConvTranspose2d(w[i + 1], w[i], 2, stride=2)
                                 for i in reversed(range(len(w) - 1)))
        self.fuse = nn.ModuleList(double_conv(2 * w[i], w[i]) for i in reversed(range(len(w) - 1)))
        self.head = nn.Conv2d(w[0], NCLS, 1)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, down in enumerate(self.downs):
            x = down(F.max_pool2d(x, 2) if i else x)
            skips.append(x)
        skips.pop()
        for up, fuse in zip(self.ups, self.fuse):
            x = fuse(torch.cat([up(x), skips.pop()], 1))
        return self.head(x)


def make_requests(n: int = REQUESTS, seed: int = 0) -> list[np.ndarray]:
    """Tiles with some structure (blocks of colour, noise), as the client sends them."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        coarse = rng.integers(0, 256, (BATCH, 16, 16, 3)).astype(np.float32)
        tiles = np.repeat(np.repeat(coarse, SIZE // 16, 1), SIZE // 16, 2)
        tiles += rng.normal(0.0, 12.0, tiles.shape).astype(np.float32)
        out.append(np.clip(tiles, 0, 255).astype(np.uint8))
    return out


def normalise(tiles: np.ndarray) -> np.ndarray:
    """uint8 (B, H, W, 3) to float32 (B, 3, H, W) with the ImageNet mean and deviation."""
    x = tiles.astype(np.float32) / 255.0
    x = (x - MEAN) / STD
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def class_stats(labels: np.ndarray, conf: np.ndarray) -> list[list[dict]]:
    """Per tile, per class present: area, fraction, mean confidence, bounding box."""
    out = []
    for lab, cf in zip(labels, conf):
        classes = []
        for c, name in enumerate(CLASSES):
            mask = lab == c
            area = int(mask.sum())
            if area == 0:
                continue
            ys, xs = np.nonzero(mask)
            classes.append({"class": name, "area": area, "fraction": area / lab.size,
                            "mean_conf": float(cf[mask].mean()),
                            "bbox": [int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())]})
        out.append(classes)
    return out


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.gpu_preproc = "gpu_preproc" in fixes
        self.gpu_stats = "gpu_stats" in fixes
        self.memory_format = (torch.channels_last if "channels_last" in fixes
                              else torch.contiguous_format)
        self.dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        self.model = UNet().to(device=device, dtype=self.dtype,
                               memory_format=self.memory_format).eval()
        self.mean = torch.from_numpy(MEAN).view(1, 3, 1, 1).to(device)
        self.std = torch.from_numpy(STD).view(1, 3, 1, 1).to(device)
        self.requests = make_requests()

    def preprocess(self, tiles: np.ndarray) -> torch.Tensor:
        if self.gpu_preproc:
            x = torch.from_numpy(tiles).to(self.device).permute(0, 3, 1, 2).float()
            x = (x / 255.0 - self.mean) / self.std
        else:
            x = torch.from_numpy(normalise(tiles)).to(self.device)
        return x.to(self.dtype).contiguous(memory_format=self.memory_format)

    def stats_on_device(self, labels: torch.Tensor, conf: torch.Tensor) -> list[list[dict]]:
        b, h, w = labels.shape
        n = b * NCLS
        key = (torch.arange(b, device=labels.device).view(b, 1, 1) * NCLS + labels).reshape(-1)
        ys = torch.arange(h, device=labels.device).view(1, h, 1).expand(b, h, w).reshape(-1)
        xs = torch.arange(w, device=labels.device).view(1, 1, w).expand(b, h, w).reshape(-1)
        area = torch.bincount(key, minlength=n).double()
        conf_sum = torch.bincount(key, weights=conf.reshape(-1).double(), minlength=n)
        lo = torch.full((n,), max(h, w), dtype=torch.long, device=labels.device)
        hi = torch.full((n,), -1, dtype=torch.long, device=labels.device)
        box = [lo.scatter_reduce(0, key, xs, "amin"), lo.scatter_reduce(0, key, ys, "amin"),
               hi.scatter_reduce(0, key, xs, "amax"), hi.scatter_reduce(0, key, ys, "amax")]
        table = torch.stack([area, conf_sum] + [v.double() for v in box], 1)
        table = table.view(b, NCLS, 6).cpu().numpy()
        out = []
        for rows in table:
            classes = []
            for c, (a, s, x0, y0, x1, y1) in enumerate(rows):
                if a == 0:
                    continue
                classes.append({"class": CLASSES[c], "area": int(a), "fraction": int(a) / (h * w),
                                "mean_conf": float(s / a),
                                "bbox": [int(x0), int(y0), int(x1), int(y1)]})
            out.append(classes)
        return out

    def handle(self, tiles: np.ndarray) -> list[dict]:
        x = self.preprocess(tiles)
        logits = self.model(x)
        conf, labels = logits.float().softmax(1).max(1)
        if self.gpu_stats:
            stats = self.stats_on_device(labels, conf)
            label_maps = labels.to(torch.uint8).cpu().numpy()
        else:
            label_maps = labels.to(torch.uint8).cpu().numpy()
            stats = class_stats(label_maps, conf.cpu().numpy())
        return [{"labels": lab, "classes": classes} for lab, classes in zip(label_maps, stats)]


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"segserve: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
