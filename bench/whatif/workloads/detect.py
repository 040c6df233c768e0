"""Object-detection post-processing as a service: per request the raw outputs of a detector's
head for 4 images (20,000 anchors each: 4 box coordinates and 20 class scores, float16) are
turned into detections: per image and class, the anchors scoring above 0.3 are kept, and the
best 50 of them (score, box) go back to the client.

Written (2026-12-02) before any zym output was seen for it, the way such code is often written:
per image (``postprocess_image``), a loop over the classes selects with boolean masks
(``scores[keep, c]``, ``boxes[keep]``: each a ``nonzero`` whose size the host must read).
"""
from __future__ import annotations

import torch

IMAGES, ANCHORS, CLASSES, THRESHOLD, TOP = 4, 20_000, 20, 0.3, 50
VARIANTS = {
    "base": "as written",
    "per_image_once": "syncs.data-dependent-size: one nonzero per image over all classes, the "
                      "per-class counts read with one .tolist(), then slices",
    "fixed_shapes": "syncs.data-dependent-size: no boolean masks: scores below the threshold "
                    "set to -inf with torch.where, the top 50 per class taken for every class "
                    "at once (fixed shapes), filtered on the host",
    "all": "fixed_shapes",
}


def make_requests(n: int = 6, seed: int = 0, device: str = "cuda") -> list[tuple]:
    g = torch.Generator(device="cpu").manual_seed(seed)
    out = []
    for _ in range(n):
        boxes = torch.rand(IMAGES, ANCHORS, 4, generator=g)
        logits = torch.randn(IMAGES, ANCHORS, CLASSES, generator=g) - 2.5
        out.append((boxes.to(device, torch.float16), logits.to(device, torch.float16)))
    return out


def postprocess_image(boxes: torch.Tensor, scores: torch.Tensor) -> list:
    found = []
    for c in range(CLASSES):
        keep = scores[:, c] > THRESHOLD
        s = scores[keep, c]
        b = boxes[keep]
        if s.numel() > TOP:
            s, order = s.topk(TOP)
            b = b[order]
        found.append((c, s, b))
    return found


def postprocess_image_once(boxes: torch.Tensor, scores: torch.Tensor) -> list:
    anchor, cls = torch.nonzero(scores > THRESHOLD, as_tuple=True)
    order = torch.argsort(cls, stable=True)
    anchor, cls = anchor[order], cls[order]
    counts = torch.bincount(cls, minlength=CLASSES).tolist()
    found, start = [], 0
    for c, n in enumerate(counts):
        a = anchor[start:start + n]
        s = scores[a, c]
        b = boxes[a]
        if n > TOP:
            s, o = s.topk(TOP)
            b = b[o]
        found.append((c, s, b))
        start += n
    return found


class Service:
    def __init__(self, variant: str, device: str) -> None:
        self.variant, self.device = variant, device
        self.requests = make_requests(device=device)
        self.mode = "fixed_shapes" if variant == "all" else variant

    def handle(self, request: tuple) -> list:
        boxes, logits = request
        scores = logits.float().sigmoid()
        if self.mode == "fixed_shapes":
            masked = torch.where(scores > THRESHOLD, scores, float("-inf"))
            s, idx = masked.topk(TOP, dim=1)                     # images x TOP x classes
            b = torch.gather(boxes.float().unsqueeze(2).expand(-1, -1, CLASSES, -1), 1,
                             idx.unsqueeze(-1).expand(-1, -1, -1, 4))
            s, b = s.tolist(), b.tolist()
            return [[(c, [(s[i][k][c], b[i][k][c]) for k in range(TOP)
                          if s[i][k][c] != float("-inf")]) for c in range(CLASSES)]
                    for i in range(IMAGES)]
        post = postprocess_image_once if self.mode == "per_image_once" else postprocess_image
        results = []
        for i in range(IMAGES):
            found = post(boxes[i].float(), scores[i])
            results.append([(c, list(zip(s.tolist(), b.tolist()))) for c, s, b in found])
        return results


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"detect: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
