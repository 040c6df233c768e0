"""The launch-bound decoding loop of ``decode_loop`` (the same model, requests and planted
stop check and pageable prompt), served with autograd on: the service never turns it off
(no ``torch.inference_mode()``/``torch.no_grad()``), so each of a step's ~150 small ops
records its backward node. The harness's inference mode is off while it serves (``grad``).
"""
from __future__ import annotations

import decode_loop

VARIANTS = {
    "base": "as written",
    "no_grad": "compute.autograd-in-inference: the decoding under torch.inference_mode()",
}


class Service(decode_loop.Service):
    def __init__(self, variant: str, device: str) -> None:
        super().__init__("base", device)
        self.variant = variant
        self.grad = variant != "no_grad"


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"graddecode: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
