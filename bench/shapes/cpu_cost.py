"""What operator-shape recording costs the host, on this machine (no GPU): the decode loop of
bench/workloads/eager_decode.py (6 small transformer blocks, batch 1, ~150 torch operators a
step) run on the CPU, where like on the GPU host each operator's Python and dispatch work is
most of a step. Arms, each a fresh process, in rotating order per round: ``none`` (no
recorder), ``entry`` (the default scope: torch's matmul entry points wrapped) and ``all`` (the
dispatch mode on every operator); the recorder is installed as the agent installs it, writing
to a discarded sink (no CUPTI, no eBPF: the recorder's own cost).

    python3 bench/shapes/cpu_cost.py [--rounds 7] [--steps 300] [--out RESULT.json]

Prints per round the median step time of each arm, then the median and spread of the ratios.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parents[2] / "capture" / "cupti" / "opshapes_target.py"
CHILD = r"""
import importlib.util, json, statistics, sys, time
import torch
arm, steps = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)
if arm != "none":
    spec = importlib.util.spec_from_file_location("ot", sys.argv[3])
    ot = importlib.util.module_from_spec(spec); spec.loader.exec_module(ot)
    rec, _ = ot.install(lambda kind, payload: None, sys.argv[4], arm)

class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1) @ v
        x = x + self.proj(att)
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))

d, vocab = 64, 512
emb = torch.nn.Embedding(vocab, d)
blocks = torch.nn.ModuleList(Block(d) for _ in range(6))
head = torch.nn.Linear(d, vocab)
tok = torch.zeros(1, 1, dtype=torch.long)
times = []
with torch.no_grad():
    for i in range(steps + 30):
        t0 = time.perf_counter()
        x = emb(tok)
        for b in blocks:
            x = b(x)
        tok = head(x).argmax(dim=-1)
        if i >= 30:
            times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps(statistics.median(times)))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from zym.analysis.matmul import MATMUL_OPS

    arms = ["none", "entry", "all"]
    rounds = []
    for r in range(a.rounds):
        order = arms[r % 3:] + arms[:r % 3]
        got = {}
        for arm in order:
            out = subprocess.run([sys.executable, "-c", CHILD, arm, str(a.steps), str(TARGET),
                                  ",".join(MATMUL_OPS)], capture_output=True, text=True,
                                 check=True)
            got[arm] = json.loads(out.stdout.splitlines()[-1])
        rounds.append(got)
        print(f"round {r + 1} ({', '.join(order)}): "
              + "  ".join(f"{k} {v:.3f} ms" for k, v in got.items()), flush=True)
    summary = {}
    for arm in ("entry", "all"):
        ratios = [g[arm] / g["none"] for g in rounds]
        summary[arm] = {"median_ratio": statistics.median(ratios), "min": min(ratios),
                        "max": max(ratios),
                        "median_extra_ms": statistics.median(g[arm] - g["none"] for g in rounds)}
        print(f"{arm}/none: median {summary[arm]['median_ratio']:.3f} "
              f"({summary[arm]['min']:.3f}-{summary[arm]['max']:.3f}), "
              f"+{summary[arm]['median_extra_ms']:.3f} ms a step")
    if a.out:
        Path(a.out).write_text(json.dumps({"rounds": rounds, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
