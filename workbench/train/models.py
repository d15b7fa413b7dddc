"""Small models for the tutorials: an MLP, linear regression and a CNN.

Example:
    >>> import torch
    >>> mlp(64, 10, hidden=(32,))(torch.zeros(5, 1, 8, 8)).shape
    torch.Size([5, 10])
    >>> small_cnn(3, 10)(torch.zeros(2, 3, 32, 32)).shape
    torch.Size([2, 10])
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from workbench._validate import check_int


def mlp(
    in_features: int, num_classes: int, hidden: Sequence[int] = (128, 128), dropout: float = 0.0
) -> nn.Sequential:
    """Flatten, then Linear-ReLU(-Dropout) per hidden width, then a Linear to `num_classes` logits."""
    check_int("in_features", in_features, minimum=1)
    check_int("num_classes", num_classes, minimum=1)
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for i, size in enumerate(hidden):
        layers += [nn.Linear(width, check_int(f"hidden[{i}]", size, minimum=1)), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        width = size
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def linear(in_features: int, out_features: int = 1) -> nn.Linear:
    """Linear regression: y = x·W + b."""
    check_int("in_features", in_features, minimum=1)
    return nn.Linear(in_features, check_int("out_features", out_features, minimum=1))


def small_cnn(channels: int, num_classes: int, width: int = 16) -> nn.Sequential:
    """Two conv-ReLU-pool blocks, global average pooling, a Linear classifier (any image size ≥ 4)."""
    check_int("channels", channels, minimum=1)
    check_int("num_classes", num_classes, minimum=1)
    check_int("width", width, minimum=1)
    return nn.Sequential(
        nn.Conv2d(channels, width, 3, padding=1),  # (B, w, H, W)
        nn.ReLU(),
        nn.MaxPool2d(2),  # (B, w, H/2, W/2)
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # (B, 2w, H/4, W/4)
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),  # (B, 2w)
        nn.Linear(2 * width, num_classes),
    )
