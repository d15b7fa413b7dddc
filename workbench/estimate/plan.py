"""One answer for one training plan: memory per device, communication and time per step, whether it fits.

`estimate_training` combines `estimate_memory`, `communication_bytes` and `predict_step_time` for a model
profile, a batch, a precision, an optimizer, a strategy, a device count and a device; the `Estimator`
widget draws what it returns.

Example:
    >>> import torch
    >>> from workbench import models
    >>> from workbench.devices.datasheets import DATASHEETS
    >>> from workbench.estimate.hardware import hardware_from_datasheet
    >>> from workbench.estimate.profile import profile_model
    >>> from workbench.estimate.step_time import training_flops
    >>> model, sample = models.mlp(64, 10), torch.zeros(1, 64)
    >>> hardware = hardware_from_datasheet(next(iter(DATASHEETS.values())))
    >>> plan = estimate_training(profile_model(model, sample), training_flops(model, sample), 1_437, hardware,
    ...                          batch_size=64, strategy="ddp", devices=4)
    >>> plan.fits, plan.steps_per_epoch, plan.comm.sent_bytes > 0
    (True, 6, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.estimate.comm import CommEstimate, communication_bytes
from workbench.estimate.hardware import Hardware
from workbench.estimate.memory import MemoryEstimate, estimate_memory
from workbench.estimate.profile import ModelProfile
from workbench.estimate.step_time import StepTimeEstimate, predict_step_time
from workbench.parallel.strategies.registry import strategy_spec


@dataclass(frozen=True)
class TrainingEstimate:
    """One answer: memory per device, communication and time per step, whether it fits."""

    strategy: str
    devices: int
    hardware: Hardware
    memory: MemoryEstimate
    comm: CommEstimate
    time: StepTimeEstimate
    steps_per_epoch: int

    @property
    def fits(self) -> bool:
        return self.memory.fits(self.hardware.memory_bytes)

    @property
    def epoch_s(self) -> float:
        return self.time.epoch_s(self.steps_per_epoch)


def estimate_training(
    profile: ModelProfile,
    flops_per_sample: float,
    samples_per_epoch: int,
    hardware: Hardware,
    *,
    batch_size: int,
    precision: str = "fp32",
    optimizer: str = "adam",
    strategy: str = "single",
    devices: int = 1,
    memory: MemoryEstimate | None = None,
) -> TrainingEstimate:
    """Memory, communication and step time of training `profile`'s model with this plan on `hardware`.

    Args:
        profile, flops_per_sample: from `profile_model` and `training_flops` (per sample).
        samples_per_epoch: training samples per epoch (for the epoch time).
        batch_size: samples per device per step (the batch entering the pipeline for ``"pipeline"``).
        precision, optimizer, strategy, devices: as for `estimate_memory` (SGD with momentum 0.9).
        memory: the memory per device when already estimated (a traced `estimate_memory`); default: the
            analytic rules on `profile`.

    Raises:
        ValueError: a plan that cannot run (e.g. ``strategy="single"`` on several devices).
    """
    memory = memory or estimate_memory(
        profile,
        batch_size=batch_size,
        precision=precision,
        optimizer=optimizer,
        momentum=0.9 if optimizer == "sgd" else 0.0,
        strategy=strategy,
        devices=devices,
    )
    comm = communication_bytes(
        strategy,
        profile.param_count,
        devices,
        precision=precision,
        activation_bytes=profile.activation_bytes_per_sample(precision) * batch_size,
    )
    # Each byte of the step's working set is written once and read once (a rough, stated assumption).
    time = predict_step_time(
        flops_per_sample * batch_size,
        2 * memory.total,
        comm.sent_bytes,
        flops_per_s=hardware.flops(precision),
        memory_bandwidth=hardware.memory_bandwidth,
        link_bandwidth=hardware.link_bandwidth,
    )
    global_batch = batch_size * (devices if strategy_spec(strategy).shards_data else 1)
    steps = math.ceil(samples_per_epoch / global_batch)
    return TrainingEstimate(strategy, devices, hardware, memory, comm, time, steps)
