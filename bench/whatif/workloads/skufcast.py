"""A retail demand-forecasting service (the GPU step of a grocery chain's nightly replenishment
run: for each distribution centre the planner asks for the next four weeks' demand of every
SKU it stocks and what to order today): per request one distribution centre's 512 SKUs, with
their last 420 days of daily unit sales (int32; SKUs listed later than 420 days ago have their
first day, the days before it count as missing), their daily shelf price and promotion flag
over those days and the 28 to come (the planned ones), their category (16), units on hand and
supplier lead time (2 to 14 days), and the run's date (the same for every centre of the run).
Each SKU's sales are scaled by its mean over the days it was listed and log1p'd, the price
taken relative to its mean; with a calendar (day of week, yearly Fourier terms, the chain's
holidays, a decay towards the next one, pay-day days) every day is a token of 4 + 16 features,
the 28 future days' tokens with the sales missing. A small transformer (a linear embedding,
sinusoidal positions and a category embedding; four pre-LN layers of 128 wide, four heads of
32, a 512-wide GELU MLP, the key padding mask hiding days before a SKU was listed; float32)
reads the 448 tokens and a linear head gives, for each future day, the 10%, 50% and 90%
quantiles in the scaled log space around the SKU's last four weeks' level. The quantiles are
put in order (the head's three outputs may cross), turned back to units, an order proposed
per SKU (the median demand over the lead time and a week's review period, a safety stock from
the 90% quantile, less what is on hand, rounded up) and the median demand summed per
category. Sent back as Python values: per SKU its three quantile curves and its order, per
category its daily median demand, in one copy to the host.

Sizes: six requests (centres) of 512 SKUs x (420 + 28) days; with WHATIF_SMALL=1 two of 24
SKUs x (84 + 28) days, two layers of 32 wide.

Written (2026-12-08, the fourteenth blind round) before any profile of it was seen, with what
such services often have: attention written out by hand, as forecasting models' own layers
often are (the (SKUs, heads, 448, 448) scores materialised, the mask added, a softmax, a second
batched matmul), where torch's scaled_dot_product_attention with the same additive mask runs a
fused kernel that never writes the scores (fused_attention; another summation order: the
quantiles within ~1e-5 relative); the calendar rebuilt for every request (a Python loop over
the 448 dates: weekday, Fourier terms, the distance to the next holiday; then a table of
sinusoidal positions on the device), although every centre of the run has the same dates,
where the tables cached per run date give identical results (cached_calendar); and the head's
quantiles copied to the host mid-request to be put in order with numpy's sort and uploaded
again for the unscaling, the orders and the category sums, where sorting them on the device
gives identical results (gpu_sort).
"""
from __future__ import annotations

import datetime as dt
import functools
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SMALL = os.environ.get("WHATIF_SMALL") == "1"  # a smaller model and request, for a CPU check
SKUS = 24 if SMALL else 512
CONTEXT = 84 if SMALL else 420  # days of history (T a multiple of 16)
HORIZON = 28
DAYS = CONTEXT + HORIZON
WIDTH = 32 if SMALL else 128
HEADS = 4
LAYERS = 2 if SMALL else 4
CATEGORIES = 16
QUANTILES = (0.1, 0.5, 0.9)
REVIEW = 7  # days between orders
REQUESTS = 2 if SMALL else 6
RUN_DATE = dt.date(2026, 11, 16)  # the nightly run's date: forecasts from the 17th
CALENDAR = 16
FEATURES = 4 + CALENDAR
CATEGORY_NAMES = ("dairy", "bakery", "produce", "meat", "frozen", "snacks", "beverages",
                  "cereal", "canned", "pasta & rice", "household", "personal care", "baby",
                  "pet", "seasonal", "deli")
FIXES = ("fused_attention", "cached_calendar", "gpu_sort")
VARIANTS = {
    "base": "as written",
    "fused_attention": "F.scaled_dot_product_attention with the same additive mask, not the "
                       "scores materialised, masked, softmaxed and multiplied by hand",
    "cached_calendar": "the calendar and positional tables built once per run date and kept "
                       "on the device, not rebuilt (a Python loop over 448 dates) per request",
    "gpu_sort": "the quantiles put in order with torch.sort on the device, not copied to the "
                "host, sorted with numpy and uploaded again mid-request",
    "all": "fused_attention + cached_calendar + gpu_sort",
    # added after zym's first analysis (the fifty-ninth round), to measure a finding no blind
    # fix answers: not one of the round's blind fixes (not in "all")
    "tf32": "the model's float32 matmuls on TF32 tensor cores (the harness's process-wide switch "
            "while the service runs), not full float32",
}


def easter(year: int) -> dt.date:
    """Gregorian Easter Sunday (the anonymous algorithm)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    f = (b + 8) // 25
    g = (b - f + 1) // 3
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    m = (32 + 2 * e + 2 * i - h - k) % 7
    n = (a + 11 * h + 22 * m) // 451
    month, day = divmod(h + m - 7 * n + 114, 31)
    return dt.date(year, month, day + 1)


def holidays(years: range) -> list[dt.date]:
    """The chain's trading holidays: New Year, Easter, Memorial Day, 4 July, Labor Day,
    Thanksgiving, Black Friday, Christmas Eve and Day, New Year's Eve."""
    out = []
    for y in years:
        may31 = dt.date(y, 5, 31)
        sep1 = dt.date(y, 9, 1)
        nov1 = dt.date(y, 11, 1)
        thanks = nov1 + dt.timedelta(days=(3 - nov1.weekday()) % 7 + 21)
        out += [dt.date(y, 1, 1), easter(y), may31 - dt.timedelta(days=may31.weekday()),
                dt.date(y, 7, 4), sep1 + dt.timedelta(days=(7 - sep1.weekday()) % 7),
                thanks, thanks + dt.timedelta(days=1), dt.date(y, 12, 24), dt.date(y, 12, 25),
                dt.date(y, 12, 31)]
    return sorted(out)


def calendar(run_date: dt.date) -> np.ndarray:
    """(DAYS, 16) float32 per day from CONTEXT days before the run to HORIZON after: weekday
    one-hot (7), yearly Fourier terms (3 harmonics, 6), holiday, exp(-days to next holiday / 7),
    pay-day period (the 1st-3rd and 15th-17th)."""
    first = run_date - dt.timedelta(days=CONTEXT - 1)
    hol = holidays(range(first.year, run_date.year + 2))
    rows = []
    for i in range(DAYS):
        d = first + dt.timedelta(days=i)
        week = [0.0] * 7
        week[d.weekday()] = 1.0
        phase = 2 * math.pi * d.timetuple().tm_yday / 365.25
        fourier = [f(k * phase) for k in (1, 2, 3) for f in (math.sin, math.cos)]
        to_next = min((h - d).days for h in hol if h >= d)
        rows.append(week + fourier + [float(d in hol), math.exp(-to_next / 7),
                                      float(d.day in (1, 2, 3, 15, 16, 17))])
    return np.array(rows, np.float32)


def positions(device) -> torch.Tensor:
    """(DAYS, WIDTH) sinusoidal positions (Vaswani et al.), built on ``device``."""
    pos = torch.arange(DAYS, device=device, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, WIDTH, 2, device=device, dtype=torch.float32)
                     * (-math.log(10000.0) / WIDTH))
    table = torch.zeros(DAYS, WIDTH, device=device)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


@functools.lru_cache(maxsize=2)
def make_requests(n: int = REQUESTS, seed: int = 0) -> tuple[dict, ...]:
    """Per centre SKUS SKUs' synthetic histories: a level (log-normal, 0.2 to 200 units a
    day), a trend, weekly and yearly seasonality, holiday and promotion lifts, price
    elasticity, negative-binomial noise; a tenth listed during the window."""
    rng = np.random.default_rng(seed)
    cal = calendar(RUN_DATE)
    week, year, hol = cal[:, :7], cal[:, 7:9], cal[:, 13]
    t = np.arange(DAYS) / 365.0
    out = []
    for c in range(n):
        level = np.exp(rng.normal(1.0, 1.4, SKUS)).clip(0.2, 200)[:, None]
        trend = 1 + rng.normal(0, 0.15, SKUS)[:, None] * t
        weekly = np.exp(rng.normal(0, 0.15, (SKUS, 7)) @ week.T)
        yearly = np.exp(rng.normal(0, 0.2, (SKUS, 2)) @ year.T)
        base_price = np.exp(rng.normal(1.2, 0.8, SKUS)).round(2)[:, None]
        promo = rng.random((SKUS, DAYS)) < rng.uniform(0, 0.12, SKUS)[:, None]
        price = (base_price * np.where(promo, rng.uniform(0.7, 0.9, (SKUS, 1)), 1.0)
                 * (1 + 0.03 * (t > 0.5))).round(2)
        elastic = rng.uniform(-2.5, -0.5, SKUS)[:, None]
        mu = (level * trend * weekly * yearly * (1 + rng.uniform(0, 1.5, SKUS)[:, None] * hol)
              * (price / base_price) ** elastic)
        shape = rng.uniform(2, 20, SKUS)[:, None]
        sales = rng.negative_binomial(shape, shape / (shape + mu))[:, :CONTEXT]
        first = np.where(rng.random(SKUS) < 0.1, rng.integers(1, CONTEXT - 60, SKUS), 0)
        sales[np.arange(CONTEXT)[None] < first[:, None]] = 0
        out.append({"centre": f"DC-{c + 1:02d}", "run_date": RUN_DATE,
                    "skus": [f"{c + 1:02d}-{s:06d}" for s in rng.choice(10 ** 6, SKUS, False)],
                    "sales": sales.astype(np.int32), "price": price.astype(np.float32),
                    "promo": promo.astype(np.uint8), "first_day": first.astype(np.int64),
                    "category": rng.integers(0, CATEGORIES, SKUS),
                    "on_hand": rng.poisson(level[:, 0] * 6).astype(np.int32),
                    "lead_time": rng.integers(2, 15, SKUS)})
    return tuple(out)


class Layer(nn.Module):
    """Pre-LN: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, fused: bool) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        if fused:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5 + mask
            a = scores.softmax(-1) @ v
        x = x + self.out(a.transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Forecaster(nn.Module):
    """(SKUs, DAYS, FEATURES) tokens -> (SKUs, HORIZON, 3) quantiles around the level."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, WIDTH)
        self.category = nn.Embedding(CATEGORIES, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, len(QUANTILES))

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, category: torch.Tensor,
                mask: torch.Tensor, fused: bool) -> torch.Tensor:
        x = self.embed(tokens) + pos + self.category(category)[:, None]
        for layer in self.layers:
            x = layer(x, mask, fused)
        return self.head(self.norm(x[:, -HORIZON:]))


def inputs(req: dict, cal: torch.Tensor, device) -> tuple[torch.Tensor, ...]:
    """The request on ``device``: tokens (SKUs, DAYS, FEATURES), the additive key mask
    (SKUs, 1, 1, DAYS), each SKU's scale (mean units a listed day + 1) and level (its last four
    weeks' scaled log mean)."""
    sales = torch.from_numpy(req["sales"]).to(device).float()
    price = torch.from_numpy(req["price"]).to(device)
    promo = torch.from_numpy(req["promo"]).to(device).float()
    first = torch.from_numpy(req["first_day"]).to(device)
    listed = torch.arange(CONTEXT, device=device)[None] >= first[:, None]
    days = listed.sum(1, keepdim=True)
    scale = (sales * listed).sum(1, keepdim=True) / days + 1.0
    y = torch.log1p(sales / scale) * listed
    level = y[:, -HORIZON:].mean(1)
    ref = (price[:, :CONTEXT] * listed).sum(1, keepdim=True) / days
    known = F.pad(listed.float(), (0, HORIZON))
    tokens = torch.cat([F.pad(y, (0, HORIZON))[..., None], known[..., None],
                        torch.log(price / ref)[..., None], promo[..., None],
                        cal.expand(len(sales), -1, -1)], 2)
    valid = torch.cat([listed, listed.new_ones(len(listed), HORIZON)], 1)
    mask = torch.zeros(valid.shape, device=device).masked_fill(~valid, torch.finfo().min)
    return tokens, mask[:, None, None], scale, level


@functools.lru_cache(maxsize=1)
@torch.no_grad()
def trained() -> dict:
    """Weights as if trained (on the CPU, once per process, the same for every variant and
    device): the head scaled so that its outputs spread ~0.2 about the level (on 32 SKUs of a
    reference centre) and its biases set to the three quantiles' offsets, -0.45, 0 and +0.4 (so
    the raw outputs cross now and then, as an unconstrained quantile head's do)."""
    torch.manual_seed(0)
    net = Forecaster().eval()
    req = make_requests(1, seed=99)[0]
    req = {k: v[:32] if isinstance(v, np.ndarray) else v for k, v in req.items()}
    tokens, mask, _, _ = inputs(req, torch.from_numpy(calendar(RUN_DATE)), "cpu")
    cat = torch.from_numpy(req["category"])
    out = net(tokens, positions("cpu"), cat, mask, False)
    net.head.weight.mul_(0.2 / (out - net.head.bias).std(dim=(0, 1))[:, None])
    net.head.bias.copy_(torch.tensor([-0.45, 0.0, 0.4]))
    return {k: t.clone() for k, t in net.state_dict().items()}


class Service:
    def __init__(self, variant: str, device: str) -> None:
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.tf32 = variant == "tf32"
        self.fused = "fused_attention" in fixes
        self.cache_calendar = "cached_calendar" in fixes
        self.gpu_sort = "gpu_sort" in fixes
        self.net = Forecaster()
        self.net.load_state_dict(trained())
        self.net.eval().to(device)
        self.cache: dict[dt.date, tuple[torch.Tensor, torch.Tensor]] = {}
        self.requests = list(make_requests())

    def tables(self, run_date: dt.date) -> tuple[torch.Tensor, torch.Tensor]:
        """The calendar (DAYS, 16) and positions (DAYS, WIDTH) on the device."""
        return (torch.from_numpy(calendar(run_date)).to(self.device), positions(self.device))

    def cached_tables(self, run_date: dt.date) -> tuple[torch.Tensor, torch.Tensor]:
        if run_date not in self.cache:
            self.cache[run_date] = self.tables(run_date)
        return self.cache[run_date]

    def handle(self, req: dict) -> dict:
        dev = self.device
        cal, pos = (self.cached_tables if self.cache_calendar else self.tables)(req["run_date"])
        tokens, mask, scale, level = inputs(req, cal, dev)
        category = torch.from_numpy(req["category"]).to(dev)
        q = self.net(tokens, pos, category, mask, self.fused) + level[:, None, None]
        if self.gpu_sort:
            q = q.sort(-1).values
        else:  # non-crossing quantiles, on the host
            q = torch.from_numpy(np.sort(q.cpu().numpy(), -1)).to(dev)
        units = torch.expm1(q).clamp_min(0) * scale[..., None]  # (SKUs, HORIZON, 3)
        lead = torch.from_numpy(req["lead_time"]).to(dev)
        cover = torch.arange(HORIZON, device=dev)[None] < (lead + REVIEW)[:, None]
        p50, p90 = units[..., 1], units[..., 2]
        need = (p50 * cover).sum(1) + ((p90 - p50) ** 2 * cover).sum(1).sqrt()
        on_hand = torch.from_numpy(req["on_hand"]).to(dev)
        order = (need - on_hand).clamp_min(0).ceil()
        totals = F.one_hot(category, CATEGORIES).float().T @ p50  # (CATEGORIES, HORIZON)
        packed = torch.cat([units.flatten(), order, totals.flatten()]).cpu().numpy()
        n = SKUS * HORIZON * 3
        curves = packed[:n].reshape(SKUS, HORIZON, 3).transpose(0, 2, 1).tolist()
        orders = packed[n:n + SKUS].astype(np.int64).tolist()
        sums = packed[n + SKUS:].reshape(CATEGORIES, HORIZON).tolist()
        return {"centre": req["centre"],
                "skus": [{"sku": s, "p10": c[0], "p50": c[1], "p90": c[2], "order": o}
                         for s, c, o in zip(req["skus"], curves, orders)],
                "categories": dict(zip(CATEGORY_NAMES, sums))}


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"skufcast: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
