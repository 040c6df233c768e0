"""A human pose estimation service (top-down, SimpleBaseline-style, for a sports-analytics
product): per request one 1080 x 1920 RGB frame (uint8, height x width x channels, as the video
decoder hands it over) and the boxes and scores of the 10 to 14 people the upstream detector
found in it. Each person's box is enlarged by a quarter, widened or heightened to the network's
3 : 4 aspect and sampled bilinearly (zeros outside the frame) into a 256 x 192 crop, normalised
with ImageNet's mean and deviation, and run with its mirror image (flip test) through a
ResNet-18 backbone and three deconvolutions (256 channels, batch norm, float32) to 17 COCO
keypoint heatmaps of 64 x 48; the mirrored heatmaps are flipped back, their left and right joints
swapped, shifted a pixel and averaged with the others. Each joint is read off its heatmap DARK's
way: the heatmap blurred by an 11 x 11 Gaussian (sigma 2, zeros beyond the edge) and rescaled to
its old maximum (the joint's confidence), the blurred peak's cell, the log, and a second-order
Taylor step from the peak (a 2 x 2 Hessian solved in float64); the position is mapped back into
the frame. Sent back: for every person, 17 (x, y, confidence) triples and a person score (box
score times mean confidence), as Python numbers.

Written (2026-12-07, the seventh blind round) before any zym output was seen for it, with what
such services often have: each person's crop warped on the host by a numpy bilinear sampler (four
gathers from the frame and their weighted sum in float32, as a stand-in for cv2.warpAffine),
normalised, mirrored and uploaded as two float32 arrays from pageable memory, where the uint8
frame could be uploaded once and every crop sampled by one ``F.grid_sample``; the network called
person by person, once for the crop and once for its mirror image (24 or so calls of one crop,
~75 kernels each, as in the reference evaluation code), where one call takes all the crops and
their mirrors at once; and the heatmaps copied to the host and decoded joint by joint in a
Python loop over people and joints (a padded separable blur of 22 numpy operations, a log and a
dozen scalar reads and sums each, about 200 joints a frame), where the same blur, log and
Taylor step run over all the heatmaps at once on the GPU and only the keypoints come back.
"""
from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SMALL = os.environ.get("WHATIF_SMALL") == "1"  # a smaller frame, crops and crowd, for a CPU check
FRAME_H, FRAME_W = (540, 960) if SMALL else (1080, 1920)
IN_H, IN_W = (128, 96) if SMALL else (256, 192)
HM_H, HM_W = IN_H // 4, IN_W // 4
PEOPLE = (3, 5) if SMALL else (10, 15)  # per frame: at least, fewer than
JOINTS = 17
FLIP_PAIRS = ((1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12), (13, 14), (15, 16))
PAD, ASPECT = 1.25, IN_W / IN_H
BLUR_K, BLUR_SIGMA = 11, 2.0
BORDER = (BLUR_K - 1) // 2
WIDTHS, DECONV = (64, 128, 256, 512), 256
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
REQUESTS = 4
FIXES = ("gpu_crops", "batched_people", "gpu_decode")
VARIANTS = {
    "base": "as written",
    "gpu_crops": "the uint8 frame uploaded once and every person's crop sampled, normalised and "
                 "mirrored on the GPU (one F.grid_sample for all the boxes), not warped with "
                 "numpy on the host and uploaded person by person as float32 from pageable "
                 "memory",
    "batched_people": "the network called once on all the crops and their mirror images, not "
                      "twice per person with a batch of one",
    "gpu_decode": "the heatmaps decoded on the GPU all at once (argmax, the Gaussian blur as the "
                  "same 22 shifted multiply-adds, log and Taylor step) and only the keypoints "
                  "copied back, not copied to the host and decoded joint by joint in a Python "
                  "loop of numpy operations",
    "all": "gpu_crops + batched_people + gpu_decode",
}


def make_requests(n: int = REQUESTS, seed: int = 0) -> list[dict]:
    """Frames of a pitch (a coarse green-brown texture with noise) with people (two-colour
    blocks for shirt and shorts, a skin-coloured head), some cut by the frame's edge; their
    detector boxes with a little jitter and scores."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        coarse = rng.integers(60, 140, (FRAME_H // 60 + 1, FRAME_W // 60 + 1, 3))
        frame = np.repeat(np.repeat(coarse, 60, 0), 60, 1)[:FRAME_H, :FRAME_W]
        frame = frame + rng.integers(-20, 21, frame.shape)
        count = int(rng.integers(*PEOPLE))
        boxes = []
        for _ in range(count):
            h = rng.uniform(0.18, 0.55) * FRAME_H
            w = h * rng.uniform(0.35, 0.5)
            x0 = rng.uniform(-0.1 * w, FRAME_W - 0.9 * w)
            y0 = rng.uniform(-0.1 * h, FRAME_H - 0.9 * h)
            ys, xs = slice(max(0, int(y0)), int(y0 + h)), slice(max(0, int(x0)), int(x0 + w))
            frame[ys, xs] = rng.integers(0, 256, 3)
            legs = slice(max(0, int(y0 + 0.55 * h)), int(y0 + h))
            frame[legs, xs] = rng.integers(0, 256, 3)
            head = slice(max(0, int(y0)), int(y0 + 0.15 * h))
            frame[head, slice(max(0, int(x0 + 0.3 * w)), int(x0 + 0.7 * w))] = (224, 172, 140)
            boxes.append([x0, y0, x0 + w, y0 + h] + rng.normal(0, 0.02 * h, 4))
        out.append({"frame": np.clip(frame, 0, 255).astype(np.uint8),
                    "boxes": np.array(boxes, dtype=np.float32),
                    "scores": rng.uniform(0.5, 1.0, count).astype(np.float32)})
    return out


def crop_params(boxes: np.ndarray) -> np.ndarray:
    """(N, 4) boxes -> (N, 4) float64: the crop's top-left corner in the frame and its size."""
    b = boxes.astype(np.float64)
    cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
    w, h = (b[:, 2] - b[:, 0]) * PAD, (b[:, 3] - b[:, 1]) * PAD
    w, h = np.maximum(w, h * ASPECT), np.maximum(h, w / ASPECT)
    return np.column_stack([cx - w / 2, cy - h / 2, w, h])


def sample_coords(p, ax, ay) -> tuple:
    """Crops' pixel centres in frame pixels (float64): xs (..., IN_W) and ys (..., IN_H), from
    crop parameters ``p`` (..., 4) and the pixel indices ``ax`` (IN_W,) and ``ay`` (IN_H,)."""
    xs = p[..., 0:1] + (ax + 0.5) * (p[..., 2:3] / IN_W) - 0.5
    ys = p[..., 1:2] + (ay + 0.5) * (p[..., 3:4] / IN_H) - 0.5
    return xs, ys


def warp_host(frame: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Bilinear sampling of one crop, zeros outside the frame: (IN_H, IN_W, 3) float32."""
    xs, ys = sample_coords(p, np.arange(IN_W, dtype=np.float64),
                           np.arange(IN_H, dtype=np.float64))
    xf, yf = np.floor(xs), np.floor(ys)
    wx, wy = (xs - xf).astype(np.float32), (ys - yf).astype(np.float32)
    xi, yi = xf.astype(np.int64), yf.astype(np.int64)
    out = np.zeros((IN_H, IN_W, 3), dtype=np.float32)
    for dy, wyv in ((0, 1 - wy), (1, wy)):
        yy = yi + dy
        vy = wyv * ((yy >= 0) & (yy < FRAME_H))
        for dx, wxv in ((0, 1 - wx), (1, wx)):
            xx = xi + dx
            vx = wxv * ((xx >= 0) & (xx < FRAME_W))
            pix = frame[np.clip(yy, 0, FRAME_H - 1)[:, None], np.clip(xx, 0, FRAME_W - 1)[None, :]]
            out += (vy[:, None] * vx[None, :])[..., None] * pix.astype(np.float32)
    return out


def gaussian_taps() -> np.ndarray:
    """cv2.getGaussianKernel(11, 2): float32 taps summing to 1."""
    t = np.arange(BLUR_K) - BORDER
    g = np.exp(-t.astype(np.float64) ** 2 / (2 * BLUR_SIGMA ** 2))
    return (g / g.sum()).astype(np.float32)


TAPS = gaussian_taps()


def blur_host(h: np.ndarray) -> np.ndarray:
    """One (HM_H, HM_W) float32 heatmap, zero-padded, blurred row-wise then column-wise."""
    p = np.zeros((HM_H + 2 * BORDER, HM_W + 2 * BORDER), dtype=np.float32)
    p[BORDER:-BORDER, BORDER:-BORDER] = h
    t = TAPS[0] * p[:, 0:HM_W]
    for k in range(1, BLUR_K):
        t = t + TAPS[k] * p[:, k:k + HM_W]
    out = TAPS[0] * t[0:HM_H]
    for k in range(1, BLUR_K):
        out = out + TAPS[k] * t[k:k + HM_H]
    return out


def blur_device(h: torch.Tensor) -> torch.Tensor:
    """The same for (M, HM_H, HM_W) heatmaps at once: the same products and sums, in order."""
    p = F.pad(h, (BORDER, BORDER, BORDER, BORDER))
    taps = [float(t) for t in TAPS]
    t = taps[0] * p[:, :, 0:HM_W]
    for k in range(1, BLUR_K):
        t = t + taps[k] * p[:, :, k:k + HM_W]
    out = taps[0] * t[:, 0:HM_H]
    for k in range(1, BLUR_K):
        out = out + taps[k] * t[:, k:k + HM_H]
    return out


def decode_host(hm: np.ndarray, params: np.ndarray, scores: np.ndarray) -> list[dict]:
    """(N, JOINTS, HM_H, HM_W) float32 heatmaps -> every person's keypoints, joint by joint."""
    people = []
    for n in range(len(hm)):
        x0, y0, w, h = params[n].tolist()
        kps = []
        for j in range(JOINTS):
            heat = hm[n, j]
            maxval = heat.max()
            b = blur_host(heat)
            b = b * (maxval / b.max())
            py, px = divmod(int(np.argmax(b)), HM_W)
            lh = np.log(np.maximum(b, 1e-10).astype(np.float64))
            fx, fy = float(px), float(py)
            if 1 < px < HM_W - 2 and 1 < py < HM_H - 2:
                dx = 0.5 * (lh[py, px + 1] - lh[py, px - 1])
                dy = 0.5 * (lh[py + 1, px] - lh[py - 1, px])
                dxx = 0.25 * (lh[py, px + 2] - 2 * lh[py, px] + lh[py, px - 2])
                dxy = 0.25 * (lh[py + 1, px + 1] - lh[py - 1, px + 1] - lh[py + 1, px - 1]
                              + lh[py - 1, px - 1])
                dyy = 0.25 * (lh[py + 2, px] - 2 * lh[py, px] + lh[py - 2, px])
                det = dxx * dyy - dxy * dxy
                if det != 0:
                    fx -= (dyy * dx - dxy * dy) / det
                    fy -= (dxx * dy - dxy * dx) / det
            kps.append([float(x0 + (fx + 0.5) * (w / HM_W) - 0.5),
                        float(y0 + (fy + 0.5) * (h / HM_H) - 0.5), float(maxval)])
        people.append({"keypoints": kps,
                       "score": float(scores[n]) * float(np.mean([k[2] for k in kps]))})
    return people


def decode_device(hm: torch.Tensor, params: torch.Tensor, scores: np.ndarray) -> list[dict]:
    """The same for every joint of every person at once on the GPU; (N, JOINTS, 3) comes back."""
    n = hm.shape[0]
    flat = hm.reshape(n * JOINTS, HM_H * HM_W)
    maxval = flat.amax(1)
    b = blur_device(hm.reshape(n * JOINTS, HM_H, HM_W))
    b = b * (maxval / b.flatten(1).amax(1))[:, None, None]
    idx = b.flatten(1).argmax(1)
    py, px = idx // HM_W, idx % HM_W
    lh = F.pad(b.clamp(min=1e-10).double().log(), (2, 2, 2, 2))
    rows = torch.arange(n * JOINTS, device=hm.device)

    def at(dy: int, dx: int) -> torch.Tensor:
        return lh[rows, py + 2 + dy, px + 2 + dx]

    dx = 0.5 * (at(0, 1) - at(0, -1))
    dy = 0.5 * (at(1, 0) - at(-1, 0))
    dxx = 0.25 * (at(0, 2) - 2 * at(0, 0) + at(0, -2))
    dxy = 0.25 * (at(1, 1) - at(-1, 1) - at(1, -1) + at(-1, -1))
    dyy = 0.25 * (at(2, 0) - 2 * at(0, 0) + at(-2, 0))
    det = dxx * dyy - dxy * dxy
    ok = (px > 1) & (px < HM_W - 2) & (py > 1) & (py < HM_H - 2) & (det != 0)
    safe = torch.where(ok, det, torch.ones_like(det))
    fx = torch.where(ok, px - (dyy * dx - dxy * dy) / safe, px.double())
    fy = torch.where(ok, py - (dxx * dy - dxy * dx) / safe, py.double())
    p = params.repeat_interleave(JOINTS, 0)
    x = p[:, 0] + (fx + 0.5) * (p[:, 2] / HM_W) - 0.5
    y = p[:, 1] + (fy + 0.5) * (p[:, 3] / HM_H) - 0.5
    kps = torch.stack([x, y, maxval.double()], 1).view(n, JOINTS, 3).cpu().tolist()
    return [{"keypoints": k, "score": float(scores[i]) * float(np.mean([j[2] for j in k]))}
            for i, k in enumerate(kps)]


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class PoseResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                   nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for i, w in enumerate(WIDTHS):
            layers += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
            cin = w
        for _ in range(3):
            layers += [nn.ConvTranspose2d(cin, DECONV, 4, 2, 1, bias=False),
                       nn.BatchNorm2d(DECONV), nn.ReLU(inplace=True)]
            cin = DECONV
        self.body = nn.Sequential(*layers)
        self.final = nn.Conv2d(DECONV, JOINTS, 1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.ConvTranspose2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):  # as if trained
                nn.init.uniform_(m.running_mean, -0.2, 0.2)
                nn.init.uniform_(m.running_var, 0.5, 2.0)
        nn.init.normal_(self.final.weight, std=0.002)
        nn.init.constant_(self.final.bias, 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 3, IN_H, IN_W) normalised crops -> (B, JOINTS, HM_H, HM_W) heatmaps."""
        return self.final(self.body(x))


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.gpu_crops = "gpu_crops" in fixes
        self.batched = "batched_people" in fixes
        self.gpu_decode = "gpu_decode" in fixes
        self.net = PoseResNet().to(device).eval()
        self.mean = torch.from_numpy(MEAN).to(device).view(1, 3, 1, 1)
        self.std = torch.from_numpy(STD).to(device).view(1, 3, 1, 1)
        self.flip_index = list(range(JOINTS))
        for a, b in FLIP_PAIRS:
            self.flip_index[a], self.flip_index[b] = b, a
        self.ax = torch.arange(IN_W, dtype=torch.float64, device=device)
        self.ay = torch.arange(IN_H, dtype=torch.float64, device=device)
        self.requests = make_requests()

    def crops_host(self, frame: np.ndarray, params: np.ndarray) -> list[tuple]:
        """Per person: its normalised (3, IN_H, IN_W) crop and its mirror image, float32."""
        out = []
        for p in params:
            c = (warp_host(frame, p) / 255.0 - MEAN) / STD
            c = np.ascontiguousarray(c.transpose(2, 0, 1))
            out.append((c, np.ascontiguousarray(c[:, :, ::-1])))
        return out

    def crops_device(self, frame: np.ndarray, params: np.ndarray) -> torch.Tensor:
        """(N, 3, IN_H, IN_W) normalised crops, sampled from the uploaded frame at once."""
        img = torch.from_numpy(frame).to(self.device).permute(2, 0, 1)[None].float()
        p = torch.from_numpy(params).to(self.device)
        xs, ys = sample_coords(p, self.ax, self.ay)  # (N, IN_W), (N, IN_H)
        gx, gy = xs * (2 / (FRAME_W - 1)) - 1, ys * (2 / (FRAME_H - 1)) - 1
        n = len(params)
        grid = torch.stack([gx[:, None, :].expand(n, IN_H, IN_W),
                            gy[:, :, None].expand(n, IN_H, IN_W)], -1).float()
        crops = F.grid_sample(img, grid.view(1, n * IN_H, IN_W, 2), mode="bilinear",
                              padding_mode="zeros", align_corners=True)
        crops = crops.view(3, n, IN_H, IN_W).transpose(0, 1)
        return (crops / 255.0 - self.mean) / self.std

    def unflip(self, h: torch.Tensor) -> torch.Tensor:
        """Heatmaps of mirrored crops -> heatmaps of the crops (SimpleBaseline's flip_back and
        its one-pixel shift)."""
        h = h.flip(3)[:, self.flip_index]
        h[:, :, :, 1:] = h[:, :, :, :-1].clone()
        return h

    def heatmaps(self, frame: np.ndarray, params: np.ndarray) -> torch.Tensor:
        """(N, JOINTS, HM_H, HM_W) flip-averaged heatmaps of the frame's people."""
        n = len(params)
        if self.gpu_crops:
            crops = self.crops_device(frame, params)
            flips = crops.flip(3)
        else:
            host = self.crops_host(frame, params)
        if self.batched:
            if self.gpu_crops:
                x = torch.cat([crops, flips])
            else:
                x = torch.from_numpy(np.stack([c for c, _ in host] + [f for _, f in host]))
                x = x.to(self.device)
            h = self.net(x)
            return (h[:n] + self.unflip(h[n:])) * 0.5
        out = []
        for i in range(n):
            if self.gpu_crops:
                c, f = crops[i:i + 1], flips[i:i + 1]
            else:
                c = torch.from_numpy(host[i][0])[None].to(self.device)
                f = torch.from_numpy(host[i][1])[None].to(self.device)
            out.append((self.net(c) + self.unflip(self.net(f))) * 0.5)
        return torch.cat(out)

    def handle(self, req: dict) -> list[dict]:
        params = crop_params(req["boxes"])
        hm = self.heatmaps(req["frame"], params)
        if self.gpu_decode:
            return decode_device(hm, torch.from_numpy(params).to(self.device), req["scores"])
        return decode_host(hm.cpu().numpy(), params, req["scores"])


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"posekpt: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
