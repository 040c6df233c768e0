"""A text-generation service on Hugging Face transformers (third-party code between the user's
line and the GPU): a Llama-architecture model (8 layers, width 1024, random weights from a
config: no download) answers each request, a batch of 8 prompts of 64 tokens, with greedy
``model.generate(max_new_tokens=24)``.

Written (2026-12-02) before any zym output was seen for it, as such services are often first
written: the model loaded without a ``dtype`` (float32 weights, and PyTorch's default of no
TF32 for float32 matmuls); prompts tokenized on the CPU and uploaded per request.
"""
from __future__ import annotations

import torch

LAYERS, WIDTH, HEADS, VOCAB, BATCH, PROMPT, NEW = 8, 1024, 16, 32000, 8, 64, 24
VARIANTS = {
    "base": "as written",
    "tf32": "compute.fp32-matmul-no-tf32: torch.backends.cuda.matmul.allow_tf32 = True",
    "bf16": "the model cast to bfloat16 (model.to(torch.bfloat16))",
}


def make_model(device: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=4 * WIDTH,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      num_key_value_heads=HEADS, max_position_embeddings=512,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device).eval()


def make_requests(n: int = 4, seed: int = 0) -> list[list[list[int]]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (BATCH, PROMPT), generator=g).tolist() for _ in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        self.variant, self.device = variant, device
        self.model = make_model(device)
        if variant == "bf16":
            self.model = self.model.to(torch.bfloat16)
        self.tf32 = variant == "tf32"
        self.requests = make_requests()

    def handle(self, prompts: list[list[int]]) -> list[list[int]]:
        ids = torch.tensor(prompts, device=self.device)
        out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                  max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                                  pad_token_id=0)
        return out[:, PROMPT:].tolist()


# Added after zym's first analysis of the baseline named it (its top finding's fix text:
# "Hugging Face generate: a static cache with torch.compile"), below the code the capture
# recorded so that its lines stay where the capture saw them. model.forward wrapped in
# torch.compile(mode="reduce-overhead") by hand failed there (CUDA-graph outputs overwritten
# by the next step); generate compiles a static cache's forward itself, marking each step.
VARIANTS["static_compile"] = (
    "compute.launch-bound-step: generation_config.cache_implementation = 'static' (generate "
    "then compiles the forward itself, compile_config's default mode 'reduce-overhead')")


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"hf_generate: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    svc = Service(variant, device)
    if variant == "static_compile":
        svc.model.generation_config.cache_implementation = "static"
    return svc
