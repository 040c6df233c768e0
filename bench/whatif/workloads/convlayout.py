"""An image-embedding service: a ResNet-style CNN (a stem, 3 stages of 3 residual blocks of 3x3
convolutions, widths 64/128/256, batch norm folded away: eval mode), bfloat16, serving
requests of 32 images of 3 x 224 x 224 and returning each image's pooled embedding.

Planted: the model and its inputs are in PyTorch's default memory format (NCHW), which
cuDNN's tensor-core convolutions do not use: it converts each convolution's input and output
between NCHW and NHWC around the kernel (``nchwToNhwcKernel``/``nhwcToNchwKernel``).
"""
from __future__ import annotations

import torch
from torch import nn

WIDTHS, BLOCKS, BATCH, SIZE, REQUESTS = (64, 128, 256), 3, 32, 224, 6
VARIANTS = {
    "base": "as written",
    "channels_last": "compute.conv-layout-conversions: model and inputs in "
                     "torch.channels_last",
}


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(width, width, 3, padding=1)
        self.c2 = nn.Conv2d(width, width, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.c2(torch.relu(self.c1(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, WIDTHS[0], 4, stride=4), nn.ReLU()]
        for i, width in enumerate(WIDTHS):
            if i:
                layers += [nn.Conv2d(WIDTHS[i - 1], width, 2, stride=2), nn.ReLU()]
            layers += [Block(width) for _ in range(BLOCKS)]
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).mean((2, 3))


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.variant, self.device = variant, device
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        fmt = torch.channels_last if variant == "channels_last" else torch.contiguous_format
        self.model = Net().to(device, dtype, memory_format=fmt).eval()
        g = torch.Generator().manual_seed(1)
        self.requests = [torch.randn(BATCH, 3, SIZE, SIZE, generator=g).to(
            device, dtype, memory_format=fmt) for _ in range(REQUESTS)]

    def handle(self, images: torch.Tensor) -> list[list[float]]:
        return self.model(images)[:, :4].tolist()


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"convlayout: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
