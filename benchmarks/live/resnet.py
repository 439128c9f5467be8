"""ResNet-18 and ResNet-50 (He et al., 2016) for the training benchmarks, written here so the
benchmarks need nothing beyond torch: basic blocks (two 3x3 convolutions) for ResNet-18,
bottleneck blocks (1x1, 3x3, 1x1, expansion 4) for ResNet-50, stages of [2, 2, 2, 2] and
[3, 4, 6, 3] blocks. `small_input=True` is the CIFAR-style stem (one 3x3 convolution, no
max-pool) for 32x32 images; otherwise the ImageNet stem (7x7 stride 2, max-pool)."""

from __future__ import annotations

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class _Block(nn.Module):
    def __init__(self, cin: int, width: int, stride: int, bottleneck: bool) -> None:
        super().__init__()
        cout = width * (4 if bottleneck else 1)
        if bottleneck:
            layers = [*_conv_bn(cin, width, 1), nn.ReLU(inplace=True),
                      *_conv_bn(width, width, 3, stride), nn.ReLU(inplace=True),
                      *_conv_bn(width, cout, 1)]
        else:
            layers = [*_conv_bn(cin, width, 3, stride), nn.ReLU(inplace=True),
                      *_conv_bn(width, cout, 3)]
        self.body = nn.Sequential(*layers)
        self.shortcut = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                         if stride != 1 or cin != cout else nn.Identity())
        self.out_channels = cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet(depth: int, num_classes: int = 10, small_input: bool = False) -> nn.Module:
    """ResNet-18 (`depth=18`) or ResNet-50 (`depth=50`)."""
    stages = {18: ([2, 2, 2, 2], False), 50: ([3, 4, 6, 3], True)}
    if depth not in stages:
        raise ValueError("depth must be 18 or 50")
    counts, bottleneck = stages[depth]
    stem = (_conv_bn(3, 64, 3) if small_input
            else [*_conv_bn(3, 64, 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)])
    layers: list[nn.Module] = [*stem, nn.ReLU(inplace=True)]
    cin = 64
    for i, count in enumerate(counts):
        for j in range(count):
            block = _Block(cin, 64 * 2 ** i, 2 if (j == 0 and i > 0) else 1, bottleneck)
            layers.append(block)
            cin = block.out_channels
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)
