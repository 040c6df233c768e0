"""A 12-lead ECG triage service (the back end of a hospital's ECG management system: the carts
on the wards upload their resting ECGs, and the cardiologists' worklist is sorted by what this
service finds): per request a batch of 16 ten-second 12-lead recordings (500 Hz, int16 at
4.88 uV a step, as the carts' export gives them). Each recording is band-passed (zero phase, in
the frequency domain: a raised-cosine high-pass from 0.3 to 0.7 Hz against baseline wander, a
raised-cosine low-pass from 35 to 45 Hz against muscle noise and a 50 Hz notch against the mains,
after one second of reflect padding either side, in float64) and given, as float32 millivolts,
to a rhythm classifier (a 1-D ResNet after Ribeiro et al.: a width-64 convolution and four
residual blocks of kernel 15 widths 128 to 320, each a fourth the length of the last, batch
norm, a linear head; six sigmoid outputs: first-degree AV block, right and left bundle branch
block, sinus bradycardia, atrial fibrillation, sinus tachycardia). The R peaks come from a
Pan-Tompkins-style detector (a five-point derivative of every lead, squared and summed over the
leads, a 150 ms moving average; local maxima within +-100 ms above a quarter of the recording's
largest, read back and thinned on the host with a 250 ms refractory period), and every beat
whose window (-256 ms to +384 ms around the R peak, 12 leads) lies in the recording is labelled
by a beat classifier (four convolutions with batch norm, three max-pools, an average pool, and
an MLP that also sees the beat's previous and next RR intervals and the recording's median RR;
the AAMI classes N, S, V, F, Q by softmax). Sent back per recording: the six rhythm
probabilities and the flags above 0.5, the heart rate from the median RR, and per beat its
sample, label and confidence, as Python values. (The nets' weights are random; their batch norms
and output layers are fitted at start-up on reference recordings, as if trained.)

The peak thinning is sequential in the candidates (which one survives depends on those kept
before) and runs on the host over the detector's output, read back once per request; the rhythm
probabilities and the beats' labels are what the worklist shows.

Written (2026-12-08, the twelfth blind round) before any profile of it was seen, with what such
services often have: the band-pass on the host in numpy (the notebook's float64 FFT filter: the
recordings converted to float64, padded, transformed, filtered and transformed back, about
1.2 M samples a request, then the float32 copy uploaded from pageable memory), where the int16
recordings uploaded as they are and the same float64 filter run by cuFFT on the GPU leave the
host nothing to do; the beats classified one at a time (a Python loop over the ~200 beats of a
request: per beat its RR features made into a tensor on the GPU, one forward of the beat
classifier on a batch of one, ~20 small kernels, and the label and confidence read back by two
``.item()``-style reads), where one gather of every beat's window and one forward of the whole
batch, read back once, gives the same labels; and the rhythm probabilities read back one by one
(``float(probs[i, c])``: 96 reads a request, each a synchronising copy of four bytes), where one
copy of the (16, 6) matrix does. The detector's readback and the host's peak thinning have no
such fix.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SMALL = os.environ.get("WHATIF_SMALL") == "1"  # fewer recordings, narrower nets, for a CPU check
SR = 500
N = 10 * SR  # samples a recording
LEADS = 12
MV_PER_LSB = 4.88e-3
PAD = SR  # reflect padding either side of the band-pass
NF = N + 2 * PAD
BATCH = 4 if SMALL else 16
RHYTHMS = ("1dAVb", "RBBB", "LBBB", "SB", "AF", "ST")
BEATS = ("N", "S", "V", "F", "Q")
KERNEL = 15
STEM = 16 if SMALL else 64
WIDTHS = (24, 32, 48, 64) if SMALL else (128, 196, 256, 320)
L_NET = 5120  # the rhythm net's input length: N zero-padded to a multiple of 4 ** 4
PRE, POST = 128, 192  # a beat's window around its R peak, in samples
WIN = PRE + POST
MWI = 75  # the detector's moving average, 150 ms
LOCAL = 50  # a candidate is the largest within +-100 ms
REFRACTORY = 125  # 250 ms
PEAK_FRACTION = 0.25
RR_MU, RR_SD = 0.85, 0.2  # the beat classifier's RR standardisation (s)
REQUESTS = 2 if SMALL else 4
FIXES = ("gpu_filter", "batched_beats", "bulk_readback")
VARIANTS = {
    "base": "as written",
    "gpu_filter": "the int16 recordings uploaded as they are and band-passed on the GPU (the "
                  "same float64 reflect padding, FFT, response and inverse FFT, by torch.fft), "
                  "not converted, padded and filtered in float64 numpy on the host and the "
                  "float32 result uploaded",
    "batched_beats": "every beat's window gathered at once (unfold and one index) with its RR "
                     "features uploaded as one array, one forward of the beat classifier over "
                     "all the beats and one readback of their probabilities, not a Python loop "
                     "of one forward, one small upload and two scalar reads per beat",
    "bulk_readback": "the rhythm probabilities copied back as one (recordings, 6) array, not "
                     "read one float(probs[i, c]) at a time",
    "all": "gpu_filter + batched_beats + bulk_readback",
}

WAVES = {  # per wave: offset from the R peak (s), width (s), amplitude of the heart's dipole (mV)
    "sinus": (("P", -0.17, 0.022, (0.08, 0.12, 0.02)), ("Q", -0.028, 0.008, (-0.06, -0.08, 0.1)),
              ("R", 0.0, 0.010, (0.9, 1.0, -0.4)), ("S", 0.028, 0.010, (-0.25, -0.15, 0.5)),
              ("T", 0.28, 0.05, (0.2, 0.3, -0.15))),
    "pvc": (("R", 0.0, 0.035, (-0.6, 1.2, 0.9)), ("S", 0.06, 0.03, (0.3, -0.4, -0.5)),
            ("T", 0.32, 0.07, (-0.3, -0.4, 0.4))),
}


def lead_matrix() -> np.ndarray:
    """(12, 3): each lead's projection of the heart's dipole (x left, y down, z back): the
    limb leads from the frontal plane, the chest leads round the horizontal one."""
    x, y, z = np.eye(3)
    i, ii = x, 0.5 * x + 0.866 * y
    iii = ii - i
    limb = [i, ii, iii, -(i + ii) / 2, i - ii / 2, ii - i / 2]
    chest = [np.cos(a) * x - np.sin(a) * z + 0.15 * y
             for a in np.deg2rad([115.0, 95.0, 75.0, 55.0, 30.0, 0.0])]
    return np.array(limb + chest)


def recording(rng: np.random.Generator) -> np.ndarray:
    """A synthetic resting ECG: (12, N) int16. A sinus rhythm of 48 to 115 bpm (a fifth of the
    recordings irregular, as in atrial fibrillation, without P waves), 7 % premature ventricular
    beats (wide, no P wave, a compensatory pause), the dipole turned a little per patient,
    baseline wander, mains hum and noise."""
    t = np.arange(N) / SR
    rr0 = 60.0 / rng.uniform(48.0, 115.0)
    af = rng.random() < 0.2
    turn = np.linalg.qr(np.eye(3) + 0.25 * rng.normal(size=(3, 3)))[0]
    gain = rng.uniform(0.7, 1.3)
    dipole = np.zeros((3, N))
    at = -rng.uniform(0.0, rr0)
    while at < N / SR + 0.5:
        pvc = rng.random() < 0.07
        rr = rr0 * (1.0 + (0.18 if af else 0.03) * rng.normal())
        kind = "pvc" if pvc else "sinus"
        for name, off, width, amp in WAVES[kind]:
            if name == "P" and af:
                continue
            if name == "T":
                off *= np.sqrt(rr0)
            dipole += gain * (turn @ np.array(amp))[:, None] * np.exp(
                -0.5 * ((t - at - off) / width) ** 2)
        at += 0.65 * rr if pvc and rng.random() < 0.5 else rr + (0.35 * rr0 if pvc else 0.0)
    mv = lead_matrix() @ dipole * rng.uniform(0.8, 1.2, (LEADS, 1))
    wander = rng.uniform(0.05, 0.3, (LEADS, 1)) * np.sin(
        2 * np.pi * rng.uniform(0.1, 0.4) * t + rng.uniform(0, 2 * np.pi, (LEADS, 1)))
    hum = rng.uniform(0.0, 0.05, (LEADS, 1)) * np.sin(2 * np.pi * 50.0 * t + rng.uniform(0, 6.3))
    mv = mv + wander + hum + rng.normal(0.0, 0.015, (LEADS, N))
    return np.clip(np.round(mv / MV_PER_LSB), -32768, 32767).astype(np.int16)


@functools.lru_cache(maxsize=2)
def make_requests(n: int = REQUESTS, seed: int = 0) -> tuple[dict, ...]:
    rng = np.random.default_rng(seed)
    return tuple({"ecg": np.stack([recording(rng) for _ in range(BATCH)])} for _ in range(n))


def response() -> np.ndarray:
    """(NF // 2 + 1,) float64: the band-pass's real, zero-phase frequency response."""
    f = np.fft.rfftfreq(NF, 1.0 / SR)
    high = 0.5 - 0.5 * np.cos(np.pi * np.clip((f - 0.3) / 0.4, 0.0, 1.0))
    low = 0.5 + 0.5 * np.cos(np.pi * np.clip((f - 35.0) / 10.0, 0.0, 1.0))
    notch = 1.0 - np.exp(-0.5 * ((f - 50.0) / 1.0) ** 2)
    return high * low * notch


def he_init(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Conv1d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class ResBlock(nn.Module):
    def __init__(self, ci: int, co: int, down: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(ci, co, KERNEL, padding=KERNEL // 2, bias=False)
        self.bn1 = nn.BatchNorm1d(co)
        self.conv2 = nn.Conv1d(co, co, KERNEL, stride=down, padding=KERNEL // 2, bias=False)
        self.bn2 = nn.BatchNorm1d(co)
        self.pool = nn.MaxPool1d(down)
        self.skip = nn.Conv1d(ci, co, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv2(F.relu(self.bn1(self.conv1(x))))
        return F.relu(self.bn2(h + self.skip(self.pool(x))))


class RhythmNet(nn.Module):
    """(B, 12, L_NET) millivolts -> (B, 6) logits."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv1d(LEADS, STEM, KERNEL, padding=KERNEL // 2, bias=False)
        self.bn = nn.BatchNorm1d(STEM)
        chans = (STEM, *WIDTHS)
        self.blocks = nn.Sequential(*(ResBlock(chans[i], chans[i + 1])
                                      for i in range(len(WIDTHS))))
        self.head = nn.Linear(WIDTHS[-1] * (L_NET // 4 ** len(WIDTHS)), len(RHYTHMS))
        he_init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(F.relu(self.bn(self.stem(x))))
        return self.head(x.flatten(1))


class BeatNet(nn.Module):
    """(B, 12, WIN) millivolts and (B, 3) standardised RR features -> (B, 5) logits."""

    def __init__(self) -> None:
        super().__init__()
        spec = ((LEADS, 32, 7), (32, 64, 7), (64, 128, 5), (128, 128, 5))
        self.convs = nn.ModuleList(nn.Conv1d(ci, co, k, padding=k // 2) for ci, co, k in spec)
        self.norms = nn.ModuleList(nn.BatchNorm1d(co) for _, co, _ in spec)
        self.fc1, self.fc2 = nn.Linear(128 + 3, 64), nn.Linear(64, len(BEATS))
        he_init(self)

    def forward(self, x: torch.Tensor, rr: torch.Tensor) -> torch.Tensor:
        for i, (conv, bn) in enumerate(zip(self.convs, self.norms)):
            x = F.relu(bn(conv(x)))
            if i < len(self.convs) - 1:
                x = F.max_pool1d(x, 2)
        x = torch.cat([x.mean(2), rr], 1)
        return self.fc2(F.relu(self.fc1(x)))


def thin(mwi: np.ndarray, cand: np.ndarray) -> list[np.ndarray]:
    """Per recording the R peaks: the candidates, highest first, each kept unless within the
    refractory period of one kept before; in time order."""
    out = []
    for row, mask in zip(mwi, cand):
        idx = np.flatnonzero(mask)
        keep: list[int] = []
        for p in idx[np.argsort(-row[idx], kind="stable")].tolist():
            if all(abs(p - q) >= REFRACTORY for q in keep):
                keep.append(p)
        out.append(np.array(sorted(keep), dtype=np.int64))
    return out


def detect_peaks(sig: torch.Tensor) -> list[np.ndarray]:
    """Pan-Tompkins-style R peaks of (B, 12, N) millivolts: per recording, sample indices."""
    xp = F.pad(sig, (2, 2))
    d = (2 * (xp[..., 3:-1] - xp[..., 1:-3]) + xp[..., 4:] - xp[..., :-4]) / 8
    energy = d.square().sum(1)[:, None]  # (B, 1, N)
    mwi = F.avg_pool1d(energy, MWI, 1, MWI // 2)[:, 0]
    local = F.max_pool1d(mwi[:, None], 2 * LOCAL + 1, 1, LOCAL)[:, 0]
    cand = (mwi == local) & (mwi > PEAK_FRACTION * mwi.amax(1, keepdim=True))
    return thin(mwi.cpu().numpy(), cand.cpu().numpy())


def rr_features(peaks: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The beats whose window lies in the recording, their (beats, 3) float32 RR features
    (previous and next RR, the median RR; the median where a neighbour is missing), and the
    median RR (s)."""
    rr = np.diff(peaks) / SR
    med = float(np.median(rr)) if len(rr) else 1.0
    beats = np.flatnonzero((peaks >= PRE) & (peaks + POST <= N))
    prev = np.array([rr[j - 1] if j > 0 else med for j in beats])
    nxt = np.array([rr[j] if j < len(rr) else med for j in beats])
    feats = np.column_stack([prev, nxt, np.full(len(beats), med)]).reshape(-1, 3)
    return beats, feats.astype(np.float32), med


def bandpass(ecg: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """(B, 12, N) int16 -> (B, 12, N) float64 band-passed millivolts (numpy, on the host)."""
    x = ecg.astype(np.float64) * MV_PER_LSB
    x = np.pad(x, ((0, 0), (0, 0), (PAD, PAD)), mode="reflect")
    return np.fft.irfft(np.fft.rfft(x, axis=-1) * gain, n=NF, axis=-1)[..., PAD:PAD + N]


@torch.no_grad()
def fit_heads(logits: torch.Tensor, head: nn.Linear, bias: torch.Tensor) -> None:
    """Scale ``head`` so that its logits over a reference batch spread by 2 per output and
    centre them on ``bias``."""
    mean, std = logits.mean(0), logits.std(0) + 1e-6
    head.weight *= 2.0 / std[:, None]
    head.bias.copy_((head.bias - mean) * 2.0 / std + bias)


@torch.no_grad()
def calibrate(rhythm_net: RhythmNet, beat_net: BeatNet) -> None:
    """The nets as if trained (on the CPU, the same for every variant and device): batch norms'
    running statistics from a reference batch of recordings and their beats, the heads scaled
    to a spread of logits and centred on a plausible prevalence."""
    ecg = np.stack([recording(np.random.default_rng(99 + i)) for i in range(4)])
    sig = torch.from_numpy(bandpass(ecg, response()).astype(np.float32))
    windows, rr = [], []
    for i, p in enumerate(detect_peaks(sig)):
        beats, feats, _ = rr_features(p)
        windows += [sig[i, :, p[j] - PRE:p[j] + POST] for j in beats]
        rr.append(torch.from_numpy(feats))
    windows, rr = torch.stack(windows), (torch.cat(rr) - RR_MU) / RR_SD
    x = F.pad(sig, (0, L_NET - N))
    for net, args in ((rhythm_net, (x,)), (beat_net, (windows, rr))):
        for m in net.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.momentum = None  # a cumulative average: this batch's statistics
        net.train()
        net(*args)
        net.eval()
    fit_heads(rhythm_net(x), rhythm_net.head, torch.full((len(RHYTHMS),), -1.5))
    fit_heads(beat_net(windows, rr), beat_net.fc2, torch.tensor([2.0, 0.0, 0.5, -0.5, -1.0]))


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.tf32 = False
        self.gpu_filter = "gpu_filter" in fixes
        self.batched_beats = "batched_beats" in fixes
        self.bulk_readback = "bulk_readback" in fixes
        self.rhythm_net, self.beat_net = RhythmNet(), BeatNet()
        calibrate(self.rhythm_net, self.beat_net)
        self.rhythm_net.to(device)
        self.beat_net.to(device)
        self.response = response()
        self.response_t = torch.from_numpy(self.response).to(device)
        self.requests = list(make_requests())

    def filtered(self, ecg: np.ndarray) -> torch.Tensor:
        """(B, 12, N) int16 -> (B, 12, N) float32 band-passed millivolts on the device."""
        if self.gpu_filter:
            x = torch.from_numpy(ecg).to(self.device).double() * MV_PER_LSB
            x = F.pad(x, (PAD, PAD), mode="reflect")
            y = torch.fft.irfft(torch.fft.rfft(x) * self.response_t, n=NF)[..., PAD:PAD + N]
            return y.float()
        y = bandpass(ecg, self.response)
        return torch.from_numpy(y.astype(np.float32)).to(self.device)

    def classify_beats(self, sig: torch.Tensor, peaks: list[np.ndarray]) -> list[list[dict]]:
        per_rec = [rr_features(p) for p in peaks]
        if self.batched_beats:
            rec = np.concatenate([np.full(len(b), i) for i, (b, _, _) in enumerate(per_rec)])
            start = np.concatenate([p[b] - PRE for p, (b, _, _) in zip(peaks, per_rec)])
            out: list[list[dict]] = [[] for _ in peaks]
            if not len(rec):
                return out
            rr = torch.from_numpy(np.concatenate([f for _, f, _ in per_rec])).to(self.device)
            rec_t = torch.from_numpy(rec).to(self.device)
            start_t = torch.from_numpy(start).to(self.device)
            windows = sig.unfold(2, WIN, 1)[rec_t, :, start_t].contiguous()  # (M, 12, WIN)
            probs = torch.softmax(self.beat_net(windows, (rr - RR_MU) / RR_SD), 1)
            probs = probs.cpu().numpy()
            labels = probs.argmax(1)
            for i, s, k, pr in zip(rec.tolist(), start.tolist(), labels.tolist(), probs):
                out[i].append({"sample": s + PRE, "label": BEATS[k], "confidence": float(pr[k])})
            return out
        out = []
        for i, (p, (beats, feats, _)) in enumerate(zip(peaks, per_rec)):
            rec_beats = []
            for j, f in zip(beats.tolist(), feats.tolist()):
                s = int(p[j])
                rr = torch.tensor([f], dtype=torch.float32, device=self.device)
                logits = self.beat_net(sig[i:i + 1, :, s - PRE:s + POST], (rr - RR_MU) / RR_SD)
                prob = torch.softmax(logits, 1)[0]
                k = int(prob.argmax())
                rec_beats.append({"sample": s, "label": BEATS[k], "confidence": float(prob[k])})
            out.append(rec_beats)
        return out

    def handle(self, req: dict) -> list[dict]:
        sig = self.filtered(req["ecg"])
        probs = torch.sigmoid(self.rhythm_net(F.pad(sig, (0, L_NET - N))))
        peaks = detect_peaks(sig)
        beats = self.classify_beats(sig, peaks)
        if self.bulk_readback:
            rows = probs.cpu().numpy().tolist()
        else:
            rows = [[float(probs[i, c]) for c in range(len(RHYTHMS))] for i in range(len(sig))]
        out = []
        for row, p, b in zip(rows, peaks, beats):
            rr = np.diff(p) / SR
            out.append({"rhythm": dict(zip(RHYTHMS, row)),
                        "flags": [k for k, v in zip(RHYTHMS, row) if v > 0.5],
                        "heart_rate": float(60.0 / np.median(rr)) if len(rr) else None,
                        "beats": b})
        return out


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"ecgtriage: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
