"""An image-classification service: a small ResNet-style network (a stem, 8 residual blocks of
3x3 convolutions with batch norm and ReLU, pooling, dropout before the classifier), bfloat16,
channels-last, serving requests of 32 images of 3 x 160 x 160 and returning the top class of
each.

Planted: the model is never put in eval mode (``model.eval()``: batch norm normalises each
batch by its own statistics and updates its running ones, dropout draws masks), and the
forward pass runs with autograd on (no ``torch.inference_mode()``/``torch.no_grad()``). The
harness's inference mode is turned off for the variants that do not fix it (``grad``).
"""
from __future__ import annotations

import torch
from torch import nn

BLOCKS, WIDTH, BATCH, SIZE, CLASSES, REQUESTS = 8, 96, 32, 160, 1000, 6
VARIANTS = {
    "base": "as written",
    "eval": "compute.train-mode-modules: model.eval() once after loading (batch norm on its "
            "running statistics, no dropout)",
    "no_grad": "compute.autograd-in-inference: the forward pass under torch.inference_mode()",
    "all": "eval + no_grad",
}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = (nn.Conv2d(WIDTH, WIDTH, 3, padding=1, bias=False) for _ in range(2))
        self.b1, self.b2 = nn.BatchNorm2d(WIDTH), nn.BatchNorm2d(WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(x + self.b2(self.c2(y)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, WIDTH, 4, stride=4, bias=False),
                                  nn.BatchNorm2d(WIDTH), nn.ReLU())
        self.blocks = nn.Sequential(*(Block() for _ in range(BLOCKS)))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                                  nn.Linear(WIDTH, CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        fixes = {"eval", "no_grad"} if variant == "all" else {variant}
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.model = Net().to(device, dtype, memory_format=torch.channels_last)
        if "eval" in fixes:
            self.model.eval()
        self.grad = "no_grad" not in fixes  # the harness: autograd on while this one serves
        g = torch.Generator().manual_seed(1)
        self.requests = [torch.randn(BATCH, 3, SIZE, SIZE, generator=g).to(
            device, dtype, memory_format=torch.channels_last) for _ in range(REQUESTS)]

    def handle(self, images: torch.Tensor) -> list[int]:
        return self.model(images).argmax(-1).tolist()


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"gradvision: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
