"""Step and epoch time from FLOPs, memory traffic and communication (a roofline model).

Assumptions: a step's compute takes max(FLOPs / peak FLOP/s, bytes moved / memory bandwidth) — the
slower of arithmetic and memory traffic bounds it, the two overlap perfectly; communication adds
bytes sent / link bandwidth, not overlapped with compute (DDP overlaps part of it, so this is an upper
bound); no kernel-launch, data-loading or Python overhead. Use achievable rates (often 30–60 % of peak
FLOP/s) for realistic numbers.

Example:
    >>> t = predict_step_time(1e12, 1e9, 0, flops_per_s=1e14, memory_bandwidth=1e12, link_bandwidth=1e11)
    >>> round(t.step_s, 6), t.bound
    (0.01, 'compute')
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from workbench._validate import check_int, check_nonnegative
from workbench.train.activation_checkpointing import ActivationCheckpointing


@dataclass(frozen=True)
class StepTimeEstimate:
    """Seconds per step: `compute_s` (FLOP-bound), `memory_s` (bandwidth-bound), `comm_s`, and the total.

    Example (compute and memory traffic overlap; communication adds):
        >>> estimate = StepTimeEstimate(compute_s=0.010, memory_s=0.004, comm_s=0.012)
        >>> estimate.step_s, estimate.bound, round(estimate.epoch_s(steps=100), 6)
        (0.022, 'communication', 2.2)
    """

    compute_s: float
    memory_s: float
    comm_s: float

    @property
    def step_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.comm_s

    @property
    def bound(self) -> str:
        """What limits the step: ``"compute"``, ``"memory"`` or ``"communication"``."""
        if self.comm_s > max(self.compute_s, self.memory_s):
            return "communication"
        return "compute" if self.compute_s >= self.memory_s else "memory"

    def epoch_s(self, steps: int) -> float:
        """Seconds for `steps` steps (steps per epoch = ceil(samples / (batch per device × devices)))."""
        return check_int("steps", steps, minimum=0) * self.step_s


def predict_step_time(
    flops_per_step: float,
    bytes_moved: float,
    comm_bytes: float,
    *,
    flops_per_s: float,
    memory_bandwidth: float,
    link_bandwidth: float,
) -> StepTimeEstimate:
    """Roofline step time (see the module docstring for the assumptions).

    Args:
        flops_per_step: FLOPs per device per step (`training_flops` counts them for Linear/Conv models).
        bytes_moved: bytes read and written in device memory per step (at least parameters, gradients,
            optimizer state and activations once each).
        comm_bytes: bytes each device sends per step (`CommEstimate.sent_bytes`).
        flops_per_s, memory_bandwidth, link_bandwidth: device FLOP/s, memory bytes/s, link bytes/s, > 0.

    Example:
        >>> predict_step_time(0, 2e9, 1e9, flops_per_s=1e12, memory_bandwidth=1e12,
        ...                   link_bandwidth=1e10).comm_s
        0.1
    """
    for name, value in (("flops_per_step", flops_per_step), ("bytes_moved", bytes_moved)):
        check_nonnegative(name, value)
    check_nonnegative("comm_bytes", comm_bytes)
    rates = {
        "flops_per_s": flops_per_s,
        "memory_bandwidth": memory_bandwidth,
        "link_bandwidth": link_bandwidth,
    }
    for name, value in rates.items():
        if check_nonnegative(name, value) == 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")
    return StepTimeEstimate(
        compute_s=flops_per_step / flops_per_s,
        memory_s=bytes_moved / memory_bandwidth,
        comm_s=comm_bytes / link_bandwidth,
    )


def forward_flops(model: nn.Module, sample: torch.Tensor, within: list[nn.Module] | None = None) -> int:
    """FLOPs of one forward on `sample`, counting Linear and Conv layers only (2 per multiply-add;
    biases, activations and pooling ignored); `within`: only those inside these modules.

    Example:
        >>> forward_flops(nn.Linear(10, 5), torch.zeros(3, 10))
        300
    """
    from workbench.estimate.trace import checked_sample, on_model_device, sample_output

    sample = on_model_device(model, checked_sample(sample))
    total = [0]

    def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if isinstance(module, nn.Linear):
            total[0] += 2 * module.in_features * output.numel()
        else:  # a convolution: each output element is a dot product over (C_in / groups) × kernel
            fan_in = module.in_channels // module.groups * module.weight[0, 0].numel()
            total[0] += 2 * fan_in * output.numel()

    counted = model.modules() if within is None else (m for part in within for m in part.modules())
    layers = [m for m in counted if isinstance(m, nn.Linear | nn.modules.conv._ConvNd)]
    handles = [m.register_forward_hook(hook) for m in layers]
    try:
        sample_output(model, sample)
    finally:
        for handle in handles:
            handle.remove()
    return total[0]


def training_flops(
    model: nn.Module, sample: torch.Tensor, activation_checkpointing: str | tuple[str, ...] | None = None
) -> int:
    """FLOPs of forward + backward on `sample`: 3 × forward (backward computes input and weight gradients),
    plus, with `activation_checkpointing` (``TrainConfig``'s), the recomputed modules' forward once more.

    Example:
        >>> training_flops(nn.Linear(10, 5), torch.zeros(3, 10))
        900
        >>> blocks = nn.Sequential(nn.Sequential(nn.Linear(10, 10)), nn.Sequential(nn.Linear(10, 10)))
        >>> training_flops(blocks, torch.zeros(3, 10)), training_flops(blocks, torch.zeros(3, 10), "blocks")
        (3600, 4800)
    """
    flops = 3 * forward_flops(model, sample)
    if activation_checkpointing is None:
        return flops
    recomputed = ActivationCheckpointing(model, activation_checkpointing).modules(model)
    return flops + forward_flops(model, sample, within=recomputed)
