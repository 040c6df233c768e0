"""H200 workload: a small-kernel eager decode loop (one token at a time through a small
transformer, batch 1: hundreds of tiny kernels a step, the CPU issue rate is the bottleneck)."""
import torch
from _common import parse, timed, write


class Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1) @ v
        x = x + self.proj(att)
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))


def main() -> None:
    a = parse(__doc__.splitlines()[0], steps=200, warmup=30)
    d, vocab = 256, 4096
    emb = torch.nn.Embedding(vocab, d).cuda()
    blocks = torch.nn.ModuleList(Block(d) for _ in range(6)).cuda()
    head = torch.nn.Linear(d, vocab).cuda()
    tok = torch.zeros(1, 1, dtype=torch.long, device="cuda")

    @torch.no_grad()
    def step() -> None:
        nonlocal tok
        x = emb(tok)
        for b in blocks:
            x = b(x)
        tok = head(x).argmax(dim=-1)        # stays on the GPU: no host round trip

    write(a, timed(step, a, torch.cuda.synchronize), torch=torch.__version__)


if __name__ == "__main__":
    main()
