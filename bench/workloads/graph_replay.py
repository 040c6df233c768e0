"""H200 workload: a CUDA-graph replay loop (a small MLP captured once; each step copies the
input in, replays the graph and reads one number back: ~5 CUDA calls a step)."""
import torch
from _common import parse, timed, write


def main() -> None:
    a = parse(__doc__.splitlines()[0], steps=2000, warmup=50)
    d = 512
    model = torch.nn.Sequential(*[torch.nn.Linear(d, d) for _ in range(8)]).cuda().eval()
    static_in = torch.zeros(8, d, device="cuda")
    host = torch.randn(8, d).pin_memory()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        static_out = model(static_in).sum()

    def step() -> None:
        static_in.copy_(host, non_blocking=True)
        g.replay()
        _ = static_out.item()                   # host round trip

    write(a, timed(step, a, torch.cuda.synchronize), torch=torch.__version__)


if __name__ == "__main__":
    main()
