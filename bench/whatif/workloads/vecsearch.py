"""A semantic passage-retrieval service (the retrieval step of a question-answering assistant
over a knowledge base of 200,000 passages): per request a micro-batch of 32 questions, already
tokenised by the gateway (WordPiece ids, 4 to 32 tokens). The questions are embedded by a
MiniLM-sized bi-encoder (6 post-norm layers of width 384, 12 heads, float32; mean pooling over
the real tokens, centred by the mean embedding of a reference batch, L2-normalised) and searched
exhaustively against the passages' normalised embeddings (an exact inner-product index,
200,000 x 384 float32, 307 MB); the 100 best passages per question are kept and the first 16
rescored by a cross-encoder of the same size (the question and the passage as one sequence,
[CLS] q [SEP] p [SEP] with segment ids, the [CLS] state through a tanh pooler and a linear
scorer), in batches of 128 pairs. Sent back, per question: the 10 best passages after
reranking, their cross-encoder scores and their retrieval scores, as Python values.

Written (2026-12-07, the eighth blind round) before any zym output was seen for it, with what
such services often have: the index kept in host memory as the numpy array the embedding job
wrote (the code came from a CPU flat index) and moved to the GPU for every search, 307 MB from
pageable memory per request, where it could be uploaded once at start-up and stay resident; the
100 best passages found by copying the whole (32 x 200,000) score matrix to the host and running
numpy's argpartition and argsort on it, where torch.topk on the GPU and a copy of the (32 x 100)
result give the same passages; and every sequence padded to the tokenizer's model_max_length
(``padding="max_length"``: 512 tokens) for both encoders, where padding each batch to its own
longest sequence (about 35 tokens for the questions, 200 for the pairs) gives the real tokens
the same outputs (the padding is masked out of attention and pooling) for a fraction of the
matmuls.
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SMALL = os.environ.get("WHATIF_SMALL") == "1"  # a smaller corpus and model, for a CPU check
DOCS = 5000 if SMALL else 200_000
TOPICS = 50 if SMALL else 2000
DIM, LAYERS, HEADS = (64, 2, 4) if SMALL else (384, 6, 12)
FF = 4 * DIM
VOCAB = 30522
MAX_LEN = 128 if SMALL else 512  # the tokenizer's model_max_length
PAD, CLS, SEP = 0, 101, 102
QUERIES = 8 if SMALL else 32
QUERY_TOKENS = (4, 32)
PASSAGE_TOKENS = (10, 40) if SMALL else (40, 160)
RETRIEVE = 20 if SMALL else 100
RERANK = 8 if SMALL else 16
RETURN = 5 if SMALL else 10
RERANK_BATCH = 32 if SMALL else 128
REQUESTS = 3
FIXES = ("resident_index", "gpu_topk", "dynamic_padding")
VARIANTS = {
    "base": "as written",
    "resident_index": "the passage index uploaded to the GPU once at start-up and kept there, "
                      "not moved from the host's numpy array (307 MB, pageable) for every "
                      "search",
    "gpu_topk": "the 100 best passages per question by torch.topk on the GPU and a copy of the "
                "(32, 100) scores and ids, not the whole (32, 200,000) score matrix copied to "
                "the host for numpy's argpartition and argsort",
    "dynamic_padding": "each encoder batch padded to its own longest sequence (the padding "
                       "masked as before), not every sequence to the tokenizer's "
                       "model_max_length of 512 tokens",
    "all": "resident_index + gpu_topk + dynamic_padding",
}


@functools.lru_cache(maxsize=1)
def make_corpus(seed: int = 1) -> dict:
    """The knowledge base: ``index``, (DOCS, DIM) float32 unit vectors around TOPICS topic
    centres (as the offline embedding job wrote them), and the passages' token ids, ``tokens``
    (int32, concatenated) split by ``offsets``. Built once a process (every variant reads it)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((TOPICS, DIM))
    centres = (centres / np.linalg.norm(centres, axis=1, keepdims=True)).astype(np.float32)
    topic = rng.integers(0, TOPICS, DOCS)
    index = rng.standard_normal((DOCS, DIM), dtype=np.float32)
    index *= np.float32(0.8 / math.sqrt(DIM))
    index += centres[topic]
    index /= np.linalg.norm(index, axis=1, keepdims=True)
    lengths = rng.integers(PASSAGE_TOKENS[0], PASSAGE_TOKENS[1] + 1, DOCS)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = rng.integers(1000, VOCAB, int(offsets[-1]), dtype=np.int32)
    return {"index": np.ascontiguousarray(index), "tokens": tokens, "offsets": offsets}


def make_requests(n: int = REQUESTS, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"queries": [rng.integers(1000, VOCAB, int(rng.integers(QUERY_TOKENS[0],
                                                                    QUERY_TOKENS[1] + 1)))
                         for _ in range(QUERIES)]}
            for _ in range(n)]


def padded(seqs: list[np.ndarray], segs: list[np.ndarray],
           length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sequences -> (B, length) int64 ids and segment ids, and the (B, length) bool mask of
    real tokens."""
    ids = np.full((len(seqs), length), PAD, dtype=np.int64)
    seg = np.zeros((len(seqs), length), dtype=np.int64)
    mask = np.zeros((len(seqs), length), dtype=bool)
    for i, (s, g) in enumerate(zip(seqs, segs)):
        ids[i, :len(s)], seg[i, :len(g)], mask[i, :len(s)] = s, g, True
    return ids, seg, mask


class Layer(nn.Module):
    """A post-norm BERT layer."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.ln1, self.ln2 = nn.LayerNorm(DIM, eps=1e-12), nn.LayerNorm(DIM, eps=1e-12)
        self.fc1, self.fc2 = nn.Linear(DIM, FF), nn.Linear(FF, DIM)

    def forward(self, x: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attend)
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, t, DIM)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(MAX_LEN, DIM)
        self.seg = nn.Embedding(2, DIM)
        self.ln = nn.LayerNorm(DIM, eps=1e-12)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

    def forward(self, ids: torch.Tensor, seg: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, L) ids, segment ids and mask of real tokens -> (B, L, DIM) states (those of the
        padding are meaningless)."""
        x = self.ln(self.tok(ids) + self.pos.weight[:ids.shape[1]] + self.seg(seg))
        attend = mask[:, None, None, :]  # keys: the real tokens only
        for layer in self.layers:
            x = layer(x, attend)
        return x


class CrossEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()
        self.pool = nn.Linear(DIM, DIM)
        self.score = nn.Linear(DIM, 1)
        nn.init.normal_(self.score.weight, std=3.0 / math.sqrt(DIM))

    def forward(self, ids: torch.Tensor, seg: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, L) pairs -> (B,) relevance scores."""
        cls = self.encoder(ids, seg, mask)[:, 0]
        return self.score(torch.tanh(self.pool(cls)))[:, 0]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = set(FIXES) if variant == "all" else {variant}
        self.tf32 = False
        self.resident_index = "resident_index" in fixes
        self.gpu_topk = "gpu_topk" in fixes
        self.dynamic_padding = "dynamic_padding" in fixes
        self.corpus = make_corpus()
        self.index = (torch.from_numpy(self.corpus["index"]).to(device)
                      if self.resident_index else None)
        self.bi = Encoder().to(device).eval()
        self.cross = CrossEncoder().to(device).eval()
        # the embeddings' centre, the mean of a reference batch's (the same path for every
        # variant: padded to the longest question)
        ref = [q for r in make_requests(8, seed=99) for q in r["queries"]]
        with torch.no_grad():
            seqs = [self.question(q) for q in ref]
            self.centre = self.pooled(seqs, max(map(len, seqs))).mean(0)
        self.requests = make_requests()

    def upload(self, *arrays: np.ndarray) -> list[torch.Tensor]:
        return [torch.from_numpy(a).to(self.device) for a in arrays]

    def pad_length(self, seqs: list[np.ndarray]) -> int:
        return max(map(len, seqs)) if self.dynamic_padding else MAX_LEN

    @staticmethod
    def question(q: np.ndarray) -> np.ndarray:
        return np.concatenate([[CLS], q[:MAX_LEN - 2], [SEP]]).astype(np.int64)

    def pair(self, q: np.ndarray, doc: int) -> tuple[np.ndarray, np.ndarray]:
        """[CLS] q [SEP] p [SEP] (the passage truncated to fit) and its segment ids."""
        off = self.corpus["offsets"]
        p = self.corpus["tokens"][off[doc]:off[doc + 1]][:MAX_LEN - len(q) - 3]
        ids = np.concatenate([[CLS], q, [SEP], p, [SEP]]).astype(np.int64)
        seg = np.concatenate([np.zeros(len(q) + 2, np.int64), np.ones(len(p) + 1, np.int64)])
        return ids, seg

    def pooled(self, seqs: list[np.ndarray], length: int) -> torch.Tensor:
        """The bi-encoder's mean of the real tokens' states: (B, DIM), before centring."""
        ids, seg, mask = self.upload(*padded(seqs, [np.zeros(len(s), np.int64) for s in seqs],
                                             length))
        h = self.bi(ids, seg, mask)
        m = mask[..., None].float()
        return (h * m).sum(1) / m.sum(1)

    def embed(self, queries: list[np.ndarray]) -> torch.Tensor:
        seqs = [self.question(q) for q in queries]
        return F.normalize(self.pooled(seqs, self.pad_length(seqs)) - self.centre, dim=-1)

    def search(self, q: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(Q, DIM) unit queries -> the RETRIEVE best passages' scores and ids, best first:
        (Q, RETRIEVE) float32 and int64 numpy arrays."""
        index = (self.index if self.resident_index
                 else torch.from_numpy(self.corpus["index"]).to(self.device))
        scores = q @ index.T  # (Q, DOCS)
        if self.gpu_topk:
            s, i = scores.topk(RETRIEVE, dim=1)
            return s.cpu().numpy(), i.cpu().numpy()
        h = scores.cpu().numpy()
        part = np.argpartition(-h, RETRIEVE - 1, axis=1)[:, :RETRIEVE]
        s = np.take_along_axis(h, part, 1)
        order = np.argsort(-s, axis=1, kind="stable")
        return np.take_along_axis(s, order, 1), np.take_along_axis(part, order, 1)

    def rerank(self, queries: list[np.ndarray], cand: np.ndarray) -> np.ndarray:
        """The (Q, RERANK) candidates' cross-encoder scores, (Q, RERANK) float32."""
        pairs = [self.pair(q, int(d)) for q, row in zip(queries, cand) for d in row]
        out = []
        for s in range(0, len(pairs), RERANK_BATCH):
            chunk = pairs[s:s + RERANK_BATCH]
            seqs, segs = [p[0] for p in chunk], [p[1] for p in chunk]
            out.append(self.cross(*self.upload(*padded(seqs, segs, self.pad_length(seqs)))))
        return torch.cat(out).view(len(queries), -1).cpu().numpy()

    def handle(self, req: dict) -> list[dict]:
        queries = req["queries"]
        ret_scores, ret_ids = self.search(self.embed(queries))
        cand = ret_ids[:, :RERANK]
        ce = self.rerank(queries, cand)
        order = np.argsort(-ce, axis=1, kind="stable")[:, :RETURN]
        return [{"ids": cand[i, o].tolist(), "scores": ce[i, o].tolist(),
                 "retrieval": ret_scores[i, o].tolist()} for i, o in enumerate(order)]


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"vecsearch: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
