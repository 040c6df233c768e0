"""A Go engine's network evaluator (the GPU service behind a game-review server's tree search:
the search threads send the leaves they reached, the service returns each leaf's prior over
moves and its value): per request 32 leaf positions of one search (a 19x19 board, the last
eight board states as int8 planes, 0 empty, 1 black, 2 white, the side to move, and the legal
moves, as the engine knows them). Each leaf is encoded as AlphaGo Zero's 17 input planes (the
side to move's stones and the opponent's over the last eight states, and a colour plane) and,
for an analysis-quality evaluation, in all eight symmetries of the board (rotations and
reflections); a residual tower (a 3x3 stem and 20 blocks of two 3x3 convolutions of 256
channels with batch norm, float32; cuDNN's TF32 convolutions, torch's default) with a policy
head (a 1x1 convolution to two planes and a linear layer to 361 points and pass) and a value
head (a 1x1 convolution to one plane, two linear layers, tanh) evaluates the 256 boards. Each
symmetry's policy is turned back to the board's orientation, the illegal moves masked out, a
softmax taken and the eight averaged, as are the eight values. Sent back: per leaf its value
for the side to move, its best move and its prior over every legal move (GTP names, 'pass'
included), as Python values.

The priors and values come back once per request (the engine needs all of them); the legal
moves go up as a (leaves, 362) bool array.

Written (2026-12-08, the thirteenth blind round) before any profile of it was seen, with what
such services often have: the network called once per leaf (a Python loop over the 32 leaves,
each leaf's eight symmetric boards one batch of eight, as a search thread hands a leaf over),
where one batch of all 256 boards gives the same evaluations (up to the convolutions'
algorithms, which cuDNN picks per batch size); the input planes built on the host (numpy: the
history compared against the side to move, the colour plane, the eight symmetries gathered,
transposed to (boards, 17, 19, 19) float32, 6.3 MB a request) and uploaded from pageable
memory, where the int8 history (92 KB) uploaded and the same 0/1 planes built on the GPU give
identical inputs; and the tower run in float32 (channels first), where float16 autocast with
channels-last weights and activations, as Go engines run their nets, gives priors within
~1e-3 and values within a few 1e-3 of the float32 ones (the best move's prior within ~1%).
"""
from __future__ import annotations

import functools
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SMALL = os.environ.get("WHATIF_SMALL") == "1"  # a smaller tower and request, for a CPU check
N = 19
POINTS = N * N
MOVES = POINTS + 1  # and pass
HISTORY = 8
PLANES = 2 * HISTORY + 1
SYMMETRIES = 8
WIDTH = 32 if SMALL else 256
BLOCKS = 2 if SMALL else 20
LEAVES = 6 if SMALL else 32
REQUESTS = 2 if SMALL else 6
MAX_DEPTH = 6  # moves a leaf lies below the search's root
COLUMNS = "ABCDEFGHJKLMNOPQRST"
MOVE_NAMES = [f"{COLUMNS[p % N]}{N - p // N}" for p in range(POINTS)] + ["pass"]
FIXES = ("batched_leaves", "gpu_planes", "fp16")
VARIANTS = {
    "base": "as written",
    "batched_leaves": "every leaf's eight symmetric boards in one forward pass of 256 boards, "
                      "not a Python loop of one forward pass (a batch of eight) per leaf",
    "gpu_planes": "the int8 history uploaded and the 17 planes and eight symmetries built on "
                  "the GPU, not built in numpy on the host and the float32 planes (68x the "
                  "bytes) uploaded from pageable memory",
    "fp16": "the tower and heads under float16 autocast with channels-last weights and "
            "activations, not float32 channels first",
    "all": "batched_leaves + gpu_planes + fp16",
}


@functools.lru_cache(maxsize=1)
def neighbours() -> tuple[tuple[int, ...], ...]:
    out = []
    for p in range(POINTS):
        r, c = divmod(p, N)
        out.append(tuple(q for q, ok in ((p - N, r > 0), (p + N, r < N - 1), (p - 1, c > 0),
                                         (p + 1, c < N - 1)) if ok))
    return tuple(out)


def group(board: np.ndarray, p: int) -> tuple[list[int], bool]:
    """The stones of the group at ``p`` and whether it has a liberty."""
    nb, colour = neighbours(), board[p]
    stones, todo, seen, free = [], [p], {p}, False
    while todo:
        q = todo.pop()
        stones.append(q)
        for r in nb[q]:
            if board[r] == 0:
                free = True
            elif board[r] == colour and r not in seen:
                seen.add(r)
                todo.append(r)
    return stones, free


def play(board: np.ndarray, p: int, colour: int) -> np.ndarray | None:
    """``board`` (361,) int8 after ``colour`` plays ``p`` (captures made), or None if illegal
    (occupied or suicide; ko is the engine's business)."""
    if board[p]:
        return None
    b = board.copy()
    b[p] = colour
    for q in neighbours()[p]:
        if b[q] == 3 - colour:
            stones, free = group(b, q)
            if not free:
                b[stones] = 0
    return b if group(b, p)[1] else None


def legal(board: np.ndarray, colour: int) -> np.ndarray:
    """(362,) bool: the empty points ``colour`` may play (no suicide), and pass."""
    nb = neighbours()
    out = np.zeros(MOVES, bool)
    out[POINTS] = True
    for p in np.flatnonzero(board == 0).tolist():
        out[p] = any(board[q] == 0 for q in nb[p]) or play(board, p, colour) is not None
    return out


def random_move(rng: np.random.Generator, board: np.ndarray, colour: int,
                last: int | None) -> tuple[int, np.ndarray]:
    """A plausible move: mostly near the last move or the board's lines 3 and 4, never a
    suicide; (POINTS, board) for a pass when none is found."""
    for _ in range(40):
        if last is not None and rng.random() < 0.6:
            r, c = divmod(last, N)
            r, c = r + int(rng.integers(-3, 4)), c + int(rng.integers(-3, 4))
            if not (0 <= r < N and 0 <= c < N):
                continue
            p = r * N + c
        else:
            p = int(rng.integers(POINTS))
        b = play(board, p, colour)
        if b is not None:
            return p, b
    return POINTS, board


@functools.lru_cache(maxsize=2)
def make_requests(n: int = REQUESTS, seed: int = 0) -> tuple[dict, ...]:
    """Per request a game played to move 30-200 (the search's root) and LEAVES leaves 1 to
    MAX_DEPTH moves below it: their last eight boards, side to move and legal moves."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        boards, colour, last = [np.zeros(POINTS, np.int8)], 1, None
        for _ in range(int(rng.integers(30, 201))):
            last, b = random_move(rng, boards[-1], colour, last)
            boards.append(b)
            colour = 3 - colour
        hist, to_move, moves = [], [], []
        for _ in range(LEAVES):
            line, c, lm = list(boards[-HISTORY:]), colour, last
            for _ in range(int(rng.integers(1, MAX_DEPTH + 1))):
                lm, b = random_move(rng, line[-1], c, lm)
                line.append(b)
                c = 3 - c
            h = np.zeros((HISTORY, POINTS), np.int8)
            recent = line[::-1][:HISTORY]
            h[:len(recent)] = recent
            hist.append(h.reshape(HISTORY, N, N))
            to_move.append(c)
            moves.append(legal(line[-1], c))
        out.append({"history": np.stack(hist), "to_move": np.array(to_move, np.int8),
                    "legal": np.stack(moves)})
    return tuple(out)


@functools.lru_cache(maxsize=1)
def symmetries() -> tuple[np.ndarray, np.ndarray]:
    """(8, 361) gathers: a symmetric board's point j is the board's point perm[k, j]; and the
    inverses, the board's point i is the symmetric board's point inv[k, i]."""
    idx = np.arange(POINTS).reshape(N, N)
    perm = np.stack([np.rot90(idx.T if k >= 4 else idx, k % 4).ravel() for k in range(8)])
    inv = np.argsort(perm, axis=1)
    return perm, inv


def planes_host(history: np.ndarray, to_move: np.ndarray) -> np.ndarray:
    """(L, 8, 19, 19) int8 history, (L,) side to move -> (8L, 17, 19, 19) float32 planes, each
    leaf's eight symmetries in a row (numpy)."""
    tm = to_move[:, None, None, None]
    x = np.concatenate([(history == tm).astype(np.float32),
                        (history == 3 - tm).astype(np.float32),
                        np.broadcast_to((tm == 1).astype(np.float32), tm.shape[:1] + (1, N, N))],
                       axis=1).reshape(len(history), PLANES, POINTS)
    x = x[:, :, symmetries()[0]]  # (L, 17, 8, 361)
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(-1, PLANES, N, N)


def planes_device(history: torch.Tensor, to_move: torch.Tensor,
                  perm: torch.Tensor) -> torch.Tensor:
    """The same planes from the uploaded int8 history, on the device."""
    tm = to_move[:, None, None, None]
    x = torch.cat([(history == tm).float(), (history == 3 - tm).float(),
                   (tm == 1).float().expand(-1, 1, N, N)], 1).view(len(history), PLANES, POINTS)
    x = x[:, :, perm]  # (L, 17, 8, 361)
    return x.transpose(1, 2).reshape(-1, PLANES, N, N)


def conv_bn(ci: int, co: int, k: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(ci, co, k, 1, k // 2, bias=False), nn.BatchNorm2d(co))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = conv_bn(WIDTH, WIDTH, 3), conv_bn(WIDTH, WIDTH, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.b(F.relu(self.a(x))))


class Net(nn.Module):
    """(B, 17, 19, 19) planes -> (B, 362) policy logits, (B,) values."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = conv_bn(PLANES, WIDTH, 3)
        self.tower = nn.Sequential(*(Block() for _ in range(BLOCKS)))
        self.policy_conv = conv_bn(WIDTH, 2, 1)
        self.policy = nn.Linear(2 * POINTS, MOVES)
        self.value_conv = conv_bn(WIDTH, 1, 1)
        self.value1, self.value2 = nn.Linear(POINTS, 256), nn.Linear(256, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.tower(F.relu(self.stem(x)))
        p = self.policy(F.relu(self.policy_conv(x)).flatten(1))
        v = self.value2(F.relu(self.value1(F.relu(self.value_conv(x)).flatten(1))))
        return p, torch.tanh(v[:, 0])


@functools.lru_cache(maxsize=1)
@torch.no_grad()
def trained() -> dict:
    """The net's weights as if trained (on the CPU, once per process, the same for every
    variant and device): batch norms' running statistics from reference positions, the
    policy layer scaled for priors about as peaked as a trained net's (the best move about a tenth)
    and the value layer for values spread over (-1, 1), both as the eight symmetries' average."""
    torch.manual_seed(0)
    net = Net()
    req = make_requests(1, seed=99)[0]
    x = torch.from_numpy(planes_host(req["history"][:4], req["to_move"][:4]))
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None
    net.train()
    net(x)
    net.eval()
    for block in net.tower:  # a trained tower's residual branches are small
        block.b[1].weight.mul_(0.4)
    p, v = net(x)
    board = p[:, :POINTS].view(-1, SYMMETRIES, POINTS)
    board = board.gather(2, torch.from_numpy(symmetries()[1]).expand(len(board), -1, -1))
    sd = p.std()
    p = torch.cat([board, p[:, POINTS:].view(-1, SYMMETRIES, 1)], 2) / sd
    scale = min(2.0 ** np.arange(0, 6, 0.25), key=lambda t: abs(
        float((t * p).softmax(2).mean(1).max(1).values.mean()) - 0.1))
    net.policy.weight.mul_(float(scale) / sd)
    net.policy.bias.mul_(float(scale) / sd)
    pre = torch.atanh(v.clamp(-0.999, 0.999)).view(-1, SYMMETRIES).mean(1)
    net.value2.weight.mul_(0.6 / pre.std())
    net.value2.bias.sub_(pre.mean()).mul_(0.6 / pre.std())
    return {k: t.clone() for k, t in net.state_dict().items()}


class Service:
    def __init__(self, variant: str, device: str) -> None:
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.tf32 = False
        self.batched = "batched_leaves" in fixes
        self.gpu_planes = "gpu_planes" in fixes
        self.fp16 = "fp16" in fixes
        self.net = Net()
        self.net.load_state_dict(trained())
        self.net.eval().to(device)
        if self.fp16:
            self.net.to(memory_format=torch.channels_last)
        perm, inv = symmetries()
        self.perm = torch.from_numpy(perm).to(device)
        self.unperm = torch.from_numpy(inv).to(device)
        self.requests = list(make_requests())

    def evaluate(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, 17, 19, 19) planes -> float32 (B, 362) logits and (B,) values."""
        if self.fp16:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(torch.device(self.device).type, torch.float16, enabled=self.fp16):
            if self.batched:
                p, v = self.net(x)
            else:  # a leaf at a time: its eight symmetric boards
                outs = [self.net(x[i:i + SYMMETRIES]) for i in range(0, len(x), SYMMETRIES)]
                p, v = torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])
        return p.float(), v.float()

    def handle(self, req: dict) -> list[dict]:
        if self.gpu_planes:
            x = planes_device(torch.from_numpy(req["history"]).to(self.device),
                              torch.from_numpy(req["to_move"]).to(self.device), self.perm)
        else:
            x = torch.from_numpy(planes_host(req["history"], req["to_move"])).to(self.device)
        legal_moves = torch.from_numpy(req["legal"]).to(self.device)
        logits, values = self.evaluate(x)
        leaves = len(req["legal"])
        logits = logits.view(leaves, SYMMETRIES, MOVES)
        board = logits[..., :POINTS].gather(2, self.unperm.expand(leaves, -1, -1))
        logits = torch.cat([board, logits[..., POINTS:]], 2)
        prior = logits.masked_fill(~legal_moves[:, None], -torch.inf).softmax(2).mean(1)
        value = values.view(leaves, SYMMETRIES).mean(1)
        packed = torch.cat([prior, value[:, None]], 1).cpu().numpy()
        out = []
        for row, ok in zip(packed, req["legal"]):
            moves = np.flatnonzero(ok)
            priors = row[moves].tolist()
            out.append({"value": float(row[MOVES]),
                        "best": MOVE_NAMES[int(moves[int(np.argmax(priors))])],
                        "priors": dict(zip((MOVE_NAMES[m] for m in moves.tolist()), priors))})
        return out


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"goeval: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
