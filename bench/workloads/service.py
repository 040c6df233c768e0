"""H200 workload: a service with per-request host round trips (embed a batch of queries,
score candidates, pull the top ids to the host, rerank the chosen ones, read scores back):
a few hundred CUDA calls and several device-to-host syncs per request."""
import torch
from _common import parse, timed, write


def main() -> None:
    a = parse(__doc__.splitlines()[0], steps=150, warmup=20)
    torch.manual_seed(0)
    d, n_docs = 384, 20000
    enc = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.GELU(), torch.nn.Linear(d, d),
                              torch.nn.LayerNorm(d)).cuda()
    rerank = torch.nn.Sequential(torch.nn.Linear(2 * d, d), torch.nn.ReLU(),
                                 torch.nn.Linear(d, 1)).cuda()
    docs = torch.nn.functional.normalize(torch.randn(n_docs, d, device="cuda"), dim=-1)
    queries = torch.randn(64, 8, d)             # 64 requests of 8 queries, on the host

    @torch.no_grad()
    def request(i: int = 0) -> None:
        q = enc(queries[i % len(queries)].cuda(non_blocking=False))
        q = torch.nn.functional.normalize(q, dim=-1)
        top = (q @ docs.T).topk(16, dim=-1).indices
        ids = top.tolist()                                      # host round trip
        for row, qi in zip(ids, q):
            cand = docs[torch.tensor(row, device="cuda")]
            score = rerank(torch.cat([qi.expand_as(cand), cand], dim=-1)).squeeze(-1)
            best = int(score.argmax().item())                   # host round trip
            _ = row[best]

    state = {"i": 0}

    def step() -> None:
        request(state["i"])
        state["i"] += 1

    write(a, timed(step, a, torch.cuda.synchronize), torch=torch.__version__)


if __name__ == "__main__":
    main()
