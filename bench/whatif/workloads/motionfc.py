"""A motion-forecasting service (the prediction stage of a robotaxi fleet's remote-assistance
view: where will everyone around the vehicle be in the next 6 s): per request one scene
snapshot, the map tile the vehicle is on (the city's HD map is held by the service: 4 tiles of
300 x 300 m, each 400 to 480 lane centre lines of 20 points 2.5 m apart, in UTM metres, with a
lane type, a speed limit and a signal flag), the ego position (UTM) and the tracker's output:
40 to 120 tracked agents (vehicles, pedestrians, cyclists; the first is the ego vehicle), each
a record of its last 5 s at 10 Hz (UTM position, heading, speed and a validity flag per step:
recently appeared agents have fewer valid steps, the current step is always valid). A
query-centric forecaster (after HiVT/QCNet; width 128, 8 heads, float32) encodes every lane
in its own frame (a PointNet polyline encoder over its 19 segments, then two layers of
lane-to-lane attention within 80 m whose keys and values carry the relative pose of the other
lane, from an edge MLP over all lane pairs), every agent's history in its own frame (a
temporal transformer of three layers over the 50 steps, invalid steps masked out of the keys),
fuses them (two rounds of agent-to-lane attention within 60 m, the nearest lane always, and
agent-to-agent attention within 60 m, both with relative-pose edges) and decodes 6 modes per
agent (a learned mode query added to the agent's token, an MLP, a 60-step displacement head
added to a constant-speed prior in the agent's frame, and a mode score), the modes sorted by
probability. Sent back: per agent its id, the 6 modes' probabilities and their (6, 60, 2)
trajectories in UTM metres (float64), as numpy arrays.

Positions are UTM metres (northings of 4.5 million): float32 there keeps a quarter to half a
metre, so the scene frame (the tracks and the lanes relative to the ego position) is taken in
float64 and the trajectories are put back into UTM in float64, on the GPU; the client needs
the float64 trajectories, one copy back per request.

Written (2026-12-07, the eleventh blind round) before any zym output was seen for it, with
what such services often have: the tracker's records uploaded field by field and agent by agent
(``torch.as_tensor(..., device=...)`` in list comprehensions, then stacked: four small
pageable copies an agent, each a synchronisation, 160 to 480 a request), where each field of
all agents could be stacked on the host and uploaded at once (five copies a request, the
types' included); the map
tile's lane encoding (the host-side lane frames, two uploads, the polyline encoder and the
lane-to-lane attention over all ~200k lane pairs, about 80 kernels on ~100 MB edge tensors)
recomputed for every request although it depends on the tile only (that is what the
query-centric frames are for), where it could be computed once per tile and kept; and the
temporal transformer's attention written out by hand (a matrix product, a masked fill, a
softmax and a matrix product, the (agents, 8, 50, 50) scores materialised) where
``F.scaled_dot_product_attention`` does the same in one kernel. The float64 work (the
subtraction of the ego position from the tracks and the tile origin, the trajectories put
back into UTM) and the copy of the trajectories back have no such fix: float32 cannot hold
UTM positions to the centimetre, and the client needs the trajectories.
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SMALL = os.environ.get("WHATIF_SMALL") == "1"  # a narrower net, fewer lanes, for a CPU check
D = 32 if SMALL else 128
HEADS = 4 if SMALL else 8
DH = D // HEADS
HIST = 10 if SMALL else 50  # history steps at 10 Hz
FUT = 12 if SMALL else 60  # future steps
DT = 0.1
MODES = 6
TILES = 2 if SMALL else 4
TILE_M = 150.0 if SMALL else 300.0
LANES = (40, 56) if SMALL else (400, 480)  # per tile
POINTS = 20
SPACING = 2.5
AGENTS = (6, 12) if SMALL else (40, 120)
TEMPORAL_LAYERS = 1 if SMALL else 3
FUSION_LAYERS = 1 if SMALL else 2
MAP_LAYERS = 1 if SMALL else 2
MAP_RADIUS, AGENT_RADIUS = 80.0, 60.0
LANE_FEATS = 4 + 6  # a segment's two ends in the lane's frame, the lane's attributes
CITY = (585_000.0, 4_511_000.0)  # UTM (zone 18T) of the mapped area's south-west corner
REQUESTS = 3 if SMALL else 40
FIXES = ("packed_upload", "map_cache", "sdpa_history")
VARIANTS = {
    "base": "as written",
    "packed_upload": "each field of the tracker's records stacked for all agents on the host "
                     "and uploaded at once (five copies a request), not uploaded agent by agent "
                     "and field by field with torch.as_tensor in list comprehensions and "
                     "stacked on the GPU (four pageable copies, each a synchronisation, an "
                     "agent)",
    "map_cache": "each map tile's lane tokens (host lane frames, uploads, the polyline "
                 "encoder, the edge MLP over all lane pairs and the lane-to-lane attention) "
                 "computed once per tile and kept, not recomputed for every request: they "
                 "depend on the tile only",
    "sdpa_history": "the temporal transformer's attention by F.scaled_dot_product_attention "
                    "with the validity mask, not written out by hand (matmul, masked_fill, "
                    "softmax, matmul, the scores materialised)",
    "all": "packed_upload + map_cache + sdpa_history",
}


def tile_origin(t: int) -> np.ndarray:
    return np.array([CITY[0] + (t % 2) * TILE_M, CITY[1] + (t // 2) * TILE_M])


@functools.lru_cache(maxsize=1)
def make_tiles() -> tuple[dict, ...]:
    """The HD map: per tile its UTM origin, (lanes, 20, 2) float64 UTM centre lines (arcs of
    constant curvature) and (lanes, 6) float32 attributes (lane type one-hot, speed limit,
    signal)."""
    tiles = []
    for t in range(TILES):
        rng = np.random.default_rng(100 + t)
        n = int(rng.integers(*LANES))
        start = rng.uniform(0.0, TILE_M, (n, 2))
        s = np.arange(POINTS - 1) * SPACING
        theta = rng.uniform(-np.pi, np.pi, n)[:, None] + rng.uniform(-0.02, 0.02, n)[:, None] * s
        steps = np.stack([np.cos(theta), np.sin(theta)], -1) * SPACING
        pts = start[:, None] + np.concatenate([np.zeros((n, 1, 2)), np.cumsum(steps, 1)], 1)
        kind = np.eye(4)[rng.integers(0, 4, n)]
        attrs = np.concatenate([kind, rng.choice([25.0, 40.0, 55.0], n)[:, None] / 50.0,
                                (rng.random(n) < 0.2)[:, None]], 1).astype(np.float32)
        origin = tile_origin(t)
        tiles.append({"origin": origin, "points": origin + pts, "attrs": attrs})
    return tuple(tiles)


def scene(rng: np.random.Generator) -> dict:
    """A tracker snapshot: agents within 60 m of the ego vehicle, each moving at a constant
    speed and turn rate (plus tracking noise); a quarter appeared during the last 5 s (the
    steps before that invalid, zeros as the tracker pads them)."""
    t = int(rng.integers(TILES))
    margin = 0.2 * TILE_M
    ego = tile_origin(t) + rng.uniform(margin, TILE_M - margin, 2)
    n = int(rng.integers(*AGENTS))
    types = rng.choice(3, n, p=[0.6, 0.3, 0.1])
    types[0] = 0
    now = ego + rng.uniform(-AGENT_RADIUS, AGENT_RADIUS, (n, 2))
    now[0] = ego
    heading = rng.uniform(-np.pi, np.pi, n)
    speed = np.where(types == 0, rng.uniform(0.0, 15.0, n),
                     np.where(types == 1, rng.uniform(0.0, 2.0, n), rng.uniform(2.0, 7.0, n)))
    yaw = rng.uniform(-0.15, 0.15, n)
    back = (HIST - 1 - np.arange(HIST)) * DT  # seconds before now, oldest first
    head = heading[:, None] - yaw[:, None] * back
    mid = heading[:, None] - yaw[:, None] * back / 2  # the chord's heading
    xy = now[:, None] - (speed[:, None] * back)[..., None] * np.stack([np.cos(mid), np.sin(mid)],
                                                                       -1)
    xy += rng.normal(0.0, 0.05, xy.shape)
    valid = np.ones((n, HIST), dtype=bool)
    late = rng.random(n) < 0.25
    late[0] = False
    valid[late] = np.arange(HIST)[None] >= rng.integers(1, HIST - 1, int(late.sum()))[:, None]
    records = []
    for i in range(n):
        v = valid[i]
        records.append({"id": int(1000 + rng.integers(9000)), "type": int(types[i]),
                        "xy": np.where(v[:, None], xy[i], 0.0),
                        "heading": np.where(v, head[i], 0.0),
                        "speed": np.where(v, speed[i] + rng.normal(0.0, 0.1, HIST),
                                          0.0).astype(np.float32),
                        "valid": v.copy()})
    return {"tile": t, "ego": ego, "agents": records}


@functools.lru_cache(maxsize=2)
def make_requests(n: int = REQUESTS, seed: int = 0) -> tuple[dict, ...]:
    rng = np.random.default_rng(seed)
    return tuple(scene(rng) for _ in range(n))


def lane_inputs(tile: dict) -> tuple[np.ndarray, np.ndarray]:
    """A tile's (lanes, 19, 10) float32 segment features, each lane in its own frame (origin
    at its centroid, x along its chord), and its (lanes, 3) float32 lane poses (centroid in
    the tile's frame, heading): host float64 numpy."""
    pts = tile["points"] - tile["origin"]
    centre = pts.mean(1)
    chord = pts[:, -1] - pts[:, 0]
    theta = np.arctan2(chord[:, 1], chord[:, 0])
    c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
    rel = pts - centre[:, None]
    local = np.stack([rel[..., 0] * c + rel[..., 1] * s, -rel[..., 0] * s + rel[..., 1] * c], -1)
    seg = np.concatenate([local[:, :-1], local[:, 1:]], -1) / 25.0
    attrs = np.broadcast_to(tile["attrs"][:, None], (len(pts), POINTS - 1, 6))
    pose = np.concatenate([centre, theta[:, None]], 1)
    return (np.concatenate([seg, attrs], -1).astype(np.float32), pose.astype(np.float32))


def rel_edges(pos_q: torch.Tensor, head_q: torch.Tensor, pos_k: torch.Tensor,
              head_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Nq, Nk, 5) relative poses of the keys in each query's frame (position / 50 m, heading
    difference as cosine and sine, distance / 50 m) and the (Nq, Nk) distances."""
    d = pos_k[None] - pos_q[:, None]
    c, s = torch.cos(head_q)[:, None], torch.sin(head_q)[:, None]
    x = d[..., 0] * c + d[..., 1] * s
    y = -d[..., 0] * s + d[..., 1] * c
    dth = head_k[None] - head_q[:, None]
    dist = d.norm(dim=-1)
    return torch.stack([x / 50.0, y / 50.0, torch.cos(dth), torch.sin(dth), dist / 50.0], -1), dist


def mlp(cin: int, hidden: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(cin, hidden), nn.LayerNorm(hidden), nn.ReLU(),
                         nn.Linear(hidden, cout))


class PolylineEncoder(nn.Module):
    """PointNet over a polyline's segments: an MLP, a max-pool appended to every segment, an
    MLP, a max-pool."""

    def __init__(self, cin: int) -> None:
        super().__init__()
        self.first = mlp(cin, D, D)
        self.second = mlp(2 * D, D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        h = torch.cat([h, h.amax(1, keepdim=True).expand_as(h)], -1)
        return self.second(h).amax(1)


class RelAttention(nn.Module):
    """Attention whose keys and values carry each (query, key) pair's relative-pose edge
    embedding; pre-norm, residual, a feed-forward block."""

    def __init__(self) -> None:
        super().__init__()
        self.norm_q, self.norm_k, self.norm_ff = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
        self.k_edge, self.v_edge = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)
        self.out = nn.Linear(D, D)
        self.ff = mlp(D, 2 * D, D)

    def forward(self, xq: torch.Tensor, xk: torch.Tensor, edge: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """(Nq, D) queries, (Nk, D) keys, (Nq, Nk, D) edges, (Nq, Nk) bool -> (Nq, D)."""
        nq, nk = edge.shape[:2]
        q = self.q(self.norm_q(xq)).view(nq, 1, HEADS, DH)
        kx = self.norm_k(xk)
        k = (self.k(kx)[None] + self.k_edge(edge)).view(nq, nk, HEADS, DH)
        v = (self.v(kx)[None] + self.v_edge(edge)).view(nq, nk, HEADS, DH)
        score = (q * k).sum(-1) / math.sqrt(DH)
        attn = score.masked_fill(~mask[..., None], float("-inf")).softmax(1)
        x = xq + self.out((attn[..., None] * v).sum(1).reshape(nq, D))
        return x + self.ff(self.norm_ff(x))


class TemporalLayer(nn.Module):
    """A pre-norm transformer layer over an agent's history steps, invalid steps masked out of
    the keys."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.ff = mlp(D, 4 * D, D)

    def forward(self, x: torch.Tensor, valid: torch.Tensor, sdpa: bool = False) -> torch.Tensor:
        a, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(a, t, 3, HEADS, DH).permute(2, 0, 3, 1, 4)
        keys = valid[:, None, None, :]
        if sdpa:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=keys)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(DH)
            o = scores.masked_fill(~keys, float("-inf")).softmax(-1) @ v
        x = x + self.out(o.transpose(1, 2).reshape(a, t, D))
        return x + self.ff(self.norm2(x))


class Forecaster(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lane_encoder = PolylineEncoder(LANE_FEATS)
        self.lane_edge = mlp(5, D, D)
        self.map_layers = nn.ModuleList(RelAttention() for _ in range(MAP_LAYERS))
        self.step_in = nn.Linear(6, D)
        self.time_emb = nn.Parameter(0.1 * torch.randn(HIST, D))
        self.type_emb = nn.Embedding(3, D)
        self.temporal = nn.ModuleList(TemporalLayer() for _ in range(TEMPORAL_LAYERS))
        self.a2m_edge, self.a2a_edge = mlp(5, D, D), mlp(5, D, D)
        self.a2m = nn.ModuleList(RelAttention() for _ in range(FUSION_LAYERS))
        self.a2a = nn.ModuleList(RelAttention() for _ in range(FUSION_LAYERS))
        self.mode_emb = nn.Parameter(torch.randn(MODES, D))
        self.decoder = mlp(D, 2 * D, D)
        self.traj = nn.Linear(D, FUT * 2)
        self.score = nn.Linear(D, 1)
        with torch.no_grad():  # as if trained: displacements of decimetres a step
            self.traj.weight.mul_(0.5)

    def encode_map(self, seg: torch.Tensor, pose: torch.Tensor) -> torch.Tensor:
        """(L, 19, 10) segment features and (L, 3) lane poses (tile frame) -> (L, D) tokens."""
        tok = self.lane_encoder(seg)
        feats, dist = rel_edges(pose[:, :2], pose[:, 2], pose[:, :2], pose[:, 2])
        edge, mask = self.lane_edge(feats), dist < MAP_RADIUS
        for layer in self.map_layers:
            tok = layer(tok, tok, edge, mask)
        return tok

    def encode_agents(self, feats: torch.Tensor, valid: torch.Tensor, types: torch.Tensor,
                      sdpa: bool) -> torch.Tensor:
        """(A, HIST, 6) step features (agent frame), (A, HIST) validity, (A,) types ->
        (A, D) tokens (the current step's)."""
        h = self.step_in(feats) + self.time_emb + self.type_emb(types)[:, None]
        for layer in self.temporal:
            h = layer(h, valid, sdpa)
        return h[:, -1]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.tf32 = False
        self.packed = "packed_upload" in fixes
        self.cache_maps = "map_cache" in fixes
        self.sdpa = "sdpa_history" in fixes
        self.model = Forecaster().to(device).eval()
        self.tiles = make_tiles()
        self.maps: dict[int, dict] = {}
        self.requests = list(make_requests())

    def lane_tokens(self, t: int) -> dict:
        """A tile's lane tokens, lane poses (tile frame) and UTM origin (float64), on the
        device."""
        if self.cache_maps and t in self.maps:
            return self.maps[t]
        tile = self.tiles[t]
        seg, pose = lane_inputs(tile)
        seg = torch.from_numpy(seg).to(self.device)
        pose = torch.from_numpy(pose).to(self.device)
        out = {"tok": self.model.encode_map(seg, pose), "pos": pose[:, :2], "head": pose[:, 2],
               "origin": torch.from_numpy(tile["origin"]).to(self.device)}
        if self.cache_maps:
            self.maps[t] = out
        return out

    def tracks(self, agents: list) -> tuple[torch.Tensor, ...]:
        """The records as (A, HIST, 2) float64 UTM, (A, HIST) float64 heading, (A, HIST)
        float32 speed, (A, HIST) bool validity and (A,) types, on the device."""
        types = torch.tensor([a["type"] for a in agents], device=self.device)
        if self.packed:
            return (*(torch.from_numpy(np.stack([a[k] for a in agents])).to(self.device)
                      for k in ("xy", "heading", "speed", "valid")), types)
        xy = torch.stack([torch.as_tensor(a["xy"], device=self.device) for a in agents])
        heading = torch.stack([torch.as_tensor(a["heading"], device=self.device)
                               for a in agents])
        speed = torch.stack([torch.as_tensor(a["speed"], device=self.device) for a in agents])
        valid = torch.stack([torch.as_tensor(a["valid"], device=self.device) for a in agents])
        return xy, heading, speed, valid, types

    def handle(self, req: dict) -> list[dict]:
        m = self.model
        agents = req["agents"]
        xy, heading, speed, valid, types = self.tracks(agents)
        origin = torch.as_tensor(req["ego"], device=self.device)
        # the scene frame, in float64: UTM northings need it (float32 keeps ~0.5 m there)
        pos = (xy - origin).float()
        lanes = self.lane_tokens(req["tile"])
        lane_pos = lanes["pos"] + (lanes["origin"] - origin).float()
        # each agent's history in its own frame (position and heading at the current step)
        cur, th = pos[:, -1], heading[:, -1].float()
        c, s = torch.cos(th)[:, None], torch.sin(th)[:, None]
        rel = pos - cur[:, None]
        dth = heading.float() - th[:, None]
        feats = torch.stack([(rel[..., 0] * c + rel[..., 1] * s) / 10.0,
                             (-rel[..., 0] * s + rel[..., 1] * c) / 10.0,
                             torch.cos(dth), torch.sin(dth), speed / 10.0, valid.float()], -1)
        feats = feats * valid[..., None]
        tok = m.encode_agents(feats, valid, types, self.sdpa)
        # fusion with the lanes (within 60 m, the nearest always) and the other agents
        e_am, d_am = rel_edges(cur, th, lane_pos, lanes["head"])
        near = d_am < AGENT_RADIUS
        near[torch.arange(len(agents), device=self.device), d_am.argmin(1)] = True
        edge_am = m.a2m_edge(e_am)
        e_aa, d_aa = rel_edges(cur, th, cur, th)
        edge_aa, close = m.a2a_edge(e_aa), d_aa < AGENT_RADIUS
        for a2m, a2a in zip(m.a2m, m.a2a):
            tok = a2m(tok, lanes["tok"], edge_am, near)
            tok = a2a(tok, tok, edge_aa, close)
        # six modes: displacements on a constant-speed prior, in the agent's frame
        h = m.decoder(tok[:, None] + m.mode_emb[None])
        ahead = speed[:, -1, None] * DT * torch.arange(1, FUT + 1, device=self.device)
        local = m.traj(h).view(len(agents), MODES, FUT, 2).cumsum(2)
        local = local + torch.stack([ahead, torch.zeros_like(ahead)], -1)[:, None]
        prob, order = m.score(h)[..., 0].softmax(-1).sort(-1, descending=True)
        local = local.gather(1, order[..., None, None].expand(-1, -1, FUT, 2))
        c, s = c[..., None], s[..., None]
        world = torch.stack([local[..., 0] * c - local[..., 1] * s,
                             local[..., 0] * s + local[..., 1] * c], -1) + cur[:, None, None]
        utm = (world.double() + origin).cpu().numpy()  # back to UTM in float64: the client's
        prob = prob.cpu().numpy()
        return [{"id": a["id"], "probs": prob[i], "trajectories": utm[i]}
                for i, a in enumerate(agents)]


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"motionfc: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
