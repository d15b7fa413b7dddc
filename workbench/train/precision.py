"""Mixed precision: the autocast context and the gradient scaler for a precision on a device."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from workbench.train.choices import PRECISIONS


@dataclass(frozen=True)
class Precision:
    """How forward passes run: ``fp32`` (plain), ``bf16`` (autocast) or ``fp16`` (autocast + GradScaler).

    Build it with `resolve_precision`, which refuses combinations the device cannot run.

    Example (a step of your own loop in bf16 on the CPU; fp16 needs a GPU):
        >>> precision = resolve_precision("bf16", torch.device("cpu"))
        >>> with precision.autocast():
        ...     (torch.randn(2, 3) @ torch.randn(3, 2)).dtype
        torch.bfloat16
        >>> precision.scaler() is None  # loss scaling is fp16's
        True
        >>> resolve_precision("fp16", torch.device("cpu"))
        Traceback (most recent call last):
        ...
        ValueError: precision='fp16' needs a CUDA device (GradScaler); on CPU use 'bf16' or 'fp32'
    """

    name: str
    device_type: str

    def autocast(self) -> AbstractContextManager:
        """Context for the forward pass and loss."""
        dtype = autocast_dtype(self.name)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=dtype)

    def scaler(self) -> torch.amp.GradScaler | None:
        """A GradScaler for fp16 (loss scaling against underflow); None otherwise."""
        if self.name != "fp16":
            return None
        return torch.amp.GradScaler(self.device_type)


def autocast_dtype(name: str) -> torch.dtype | None:
    """The dtype autocast runs a precision's forward in: bf16 and fp16 their own, None for fp32 (no autocast).

    Example:
        >>> autocast_dtype("bf16"), autocast_dtype("fp32")
        (torch.bfloat16, None)
    """
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name)


def resolve_precision(name: str, device: torch.device) -> Precision:
    """`Precision` for `name` on `device`, or ValueError naming ``precision`` when it is unsupported.

    Example:
        >>> resolve_precision("bf16", torch.device("cpu")).name
        'bf16'
        >>> resolve_precision("fp16", torch.device("cpu"))
        Traceback (most recent call last):
        ...
        ValueError: precision='fp16' needs a CUDA device (GradScaler); on CPU use 'bf16' or 'fp32'
    """
    if name not in PRECISIONS:
        allowed = ", ".join(map(repr, PRECISIONS))
        raise ValueError(f"precision={name!r} is not supported; allowed values: {allowed}")
    if name == "fp16" and device.type != "cuda":
        raise ValueError("precision='fp16' needs a CUDA device (GradScaler); on CPU use 'bf16' or 'fp32'")
    if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"precision='bf16' is not supported by {torch.cuda.get_device_name(device)}; use 'fp16' or 'fp32'"
        )
    return Precision(name, device.type)
