"""An image classification service: per request a batch of 16 decoded images (uint8, 3x320x320)
arrives from the CPU, is uploaded, normalised and classified by a float32 CNN (eight 3x3
conv/batch-norm/ReLU blocks, pooling, a linear head), and the top class of each image is sent
back with its probability.

Written (2026-12-02) before any zym output was seen for it, with what such services often have:
the images are uploaded from pageable numpy memory; a ``torch.cuda.synchronize()`` left from a
latency measurement after the upload; the per-image answer read with two ``.item()`` calls per
image; the model kept in float32 (cuDNN's convolutions use TF32 by default in PyTorch, the
matmul of the head does not).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

BATCH, SIZE, WIDTHS, CLASSES = 16, 320, (32, 64, 64, 128, 128, 256, 256, 256), 1000
VARIANTS = {
    "base": "as written",
    "pin_upload": "transfers.pageable-memory: images staged in a reused pinned buffer, uploaded "
                  "with non_blocking=True",
    "no_sync": "syncs.*: the torch.cuda.synchronize() after the upload removed",
    "read_once": "syncs.scalar-readback: top classes and probabilities read with one .tolist()",
    "tf32": "compute.fp32-matmul-no-tf32: torch.backends.cuda.matmul.allow_tf32 = True",
    "bf16": "the model run under torch.autocast(bfloat16)",
    "all": "pin_upload + no_sync + read_once",
}


def block(cin: int, cout: int, stride: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers, cin = [], 3
        for i, w in enumerate(WIDTHS):
            layers.append(block(cin, w, 2 if i in (0, 2, 4, 6) else 1))
            cin = w
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, CLASSES)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def make_requests(n: int = 8, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (BATCH, SIZE, SIZE, 3), dtype=np.uint8) for _ in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = {"pin_upload", "no_sync", "read_once"} if variant == "all" else {variant}
        self.model = Net().to(device).eval()
        self.requests = make_requests()
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
        self.tf32, self.bf16 = "tf32" in fixes, "bf16" in fixes
        self.sync_after_upload = "no_sync" not in fixes and device == "cuda"
        self.read_once = "read_once" in fixes
        self.pinned = (torch.empty((BATCH, SIZE, SIZE, 3), dtype=torch.uint8).pin_memory()
                       if "pin_upload" in fixes and device == "cuda" else None)

    def upload(self, images: np.ndarray) -> torch.Tensor:
        if self.pinned is not None:
            self.pinned.copy_(torch.from_numpy(images))
            return self.pinned.to(self.device, non_blocking=True)
        return torch.from_numpy(images).to(self.device)

    def handle(self, images: np.ndarray) -> list[tuple[int, float]]:
        x = self.upload(images)
        if self.sync_after_upload:
            torch.cuda.synchronize()
        x = (x.permute(0, 3, 1, 2).float() - self.mean) / self.std
        with torch.autocast("cuda", torch.bfloat16, enabled=self.bf16):
            logits = self.model(x)
        probs = logits.float().softmax(-1)
        top_p, top_c = probs.max(-1)
        if self.read_once:
            return list(zip(top_c.tolist(), top_p.tolist()))
        out = []
        for i in range(images.shape[0]):
            out.append((top_c[i].item(), top_p[i].item()))
        return out


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"vision: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
