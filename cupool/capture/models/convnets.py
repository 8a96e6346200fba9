"""The two convolutional networks, in torchvision's layout: ResNet-50 (bottleneck blocks,
v1.5) and MobileNetV2 (inverted residuals). See :mod:`cupool.capture.models` for why the
layout follows the reference implementation line for line."""

from __future__ import annotations

from torch import nn

# -- ResNet-50 (torchvision layout) --------------------------------------------------------


class Bottleneck(nn.Module):
    """torchvision's ``Bottleneck`` (ResNet v1.5); the residual sum is out of place."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        # The nesting decides when PyTorch frees each intermediate (a variable holds a
        # tensor until it is rebound): the second and third convolutions are one expression.
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn3(self.conv3(self.relu(self.bn2(self.conv2(out)))))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Sequential):
    """torchvision's ResNet with bottleneck blocks, children flattened into one Sequential:
    ``conv1, bn1, relu, maxpool, <blocks>, avgpool, Flatten, fc`` (ResNet-50 for
    ``blocks=(3, 4, 6, 3), width=64``)."""

    def __init__(self, blocks=(3, 4, 6, 3), width: int = 64, num_classes: int = 1000) -> None:
        layers: list[nn.Module] = [nn.Conv2d(3, width, 7, 2, 3, bias=False),
                                   nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                                   nn.MaxPool2d(3, 2, 1)]
        inplanes = width
        for stage, count in enumerate(blocks):
            planes = width * 2 ** stage
            for block in range(count):
                layers.append(Bottleneck(inplanes, planes, 2 if block == 0 and stage else 1))
                inplanes = planes * Bottleneck.expansion
        layers += [nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(1), nn.Linear(inplanes, num_classes)]
        super().__init__(*layers)


# -- MobileNetV2 (torchvision layout) -------------------------------------------------------


def _make_divisible(value: float, divisor: int = 8) -> int:
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * value else new


class ConvBNReLU6(nn.Sequential):
    """torchvision's ``Conv2dNormActivation`` with ReLU6: convolution, batch norm, ReLU6."""

    def __init__(self, inp: int, out: int, kernel: int = 3, stride: int = 1,
                 groups: int = 1) -> None:
        super().__init__(nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups,
                                   bias=False),
                         nn.BatchNorm2d(out), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """torchvision's MobileNetV2 block: expand (1×1), depthwise 3×3, linear 1×1 projection."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = round(inp * expand_ratio)
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(inp, hidden, kernel=1))
        layers += [ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


_MOBILENET_V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(nn.Sequential):
    """torchvision's MobileNetV2 as ``Sequential(features, AdaptiveAvgPool2d, Flatten,
    Dropout(0.2), Linear)``."""

    def __init__(self, width_mult: float = 1.0, num_classes: int = 1000) -> None:
        channels = _make_divisible(32 * width_mult)
        last = _make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU6(3, channels, stride=2)]
        for t, c, n, s in _MOBILENET_V2_SETTING:
            out = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(channels, out, s if i == 0 else 1, t))
                channels = out
        features.append(ConvBNReLU6(channels, last, kernel=1))
        super().__init__(nn.Sequential(*features), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(1),
                         nn.Dropout(0.2), nn.Linear(last, num_classes))
