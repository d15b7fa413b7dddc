"""Peak memory of a training step, traced without running it: the `traced` basis of `estimate_memory`.

`trace_step_memory` copies the model into fake tensors (``torch._subclasses.FakeTensorMode``: shapes, dtypes
and devices, no data, no memory), builds the optimizer the `Trainer` would, runs one training step to create
its state, then a second at the full batch size under torch's `MemTracker`
(``torch.distributed._tools.mem_tracker``), which follows every tensor the dispatcher creates and frees:
parameters, gradients, optimizer state, what autograd saves, backward's transients, autocast's
low-precision weight copies, attention's T × T scores, an unfused optimizer's temporaries (a fused one updates
in place). Its peak is the estimate. Nothing is extrapolated: the trace runs at the batch and sequence length
asked, in milliseconds to seconds.

What it cannot see: memory a kernel allocates below the dispatcher (oneDNN scratch buffers on CPU, cuDNN and
cuBLAS workspaces on GPUs) and the CUDA caching allocator's rounding and fragmentation. `calibrate`'s real
steps, on the model's device, see them (on an H100 a CPU-made estimate missed a GRU step's 32.5 MiB block).

Example:
    >>> from workbench import models
    >>> traced = trace_step_memory(models.mlp(64, 10), torch.zeros(1, 64), batch_size=32, optimizer="adam")
    >>> traced.parts["params"] == 26_122 * 4 and traced.parts["optimizer_state"] >= 2 * 26_122 * 4
    True
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workbench._module_copy import copied_with
from workbench._one_line import error_in_one_line
from workbench._validate import BUILD_THE_MODEL, check_int, refuse_class
from workbench.train.activation_checkpointing import ActivationCheckpointing
from workbench.train.config import OptimizerConfig
from workbench.train.optim import build_optimizer, plain_tensors
from workbench.train.precision import autocast_dtype

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# MemTracker's categories → ours
_PARTS = {
    "Parameter": "params",
    "Buffer": "params",
    "Gradient": "grads",
    "Optstate": "optimizer_state",
    "Activation": "activations",
    "Temp": "temporaries",
    "Input": "temporaries",
    "Other": "temporaries",
}


@dataclass(frozen=True)
class TracedStep:
    """The traced step's peak bytes, its parts at the peak (params, grads, optimizer_state, activations,
    temporaries) and the seconds the trace took."""

    peak: int
    parts: dict[str, int]
    seconds: float


def trace_step_memory(
    model: nn.Module,
    sample: torch.Tensor,
    *,
    batch_size: int,
    target: torch.Tensor | None = None,
    loss_fn: LossFn | None = None,
    precision: str = "fp32",
    optimizer: str = "adam",
    momentum: float = 0.0,
    activation_checkpointing: str | tuple[str, ...] | None = None,
) -> TracedStep:
    """Trace a training step of `model` on a fake batch of `batch_size` (see the module docstring).

    Args:
        model: the module (left untouched: a fake copy is traced).
        sample: one input with its batch dimension (its dtype and trailing shape make the batch).
        target, loss_fn: one target sample and ``loss_fn(output, target)``; without them the loss is the
            mean square of the output in fp32 (it keeps one fp32 copy of the output, as cross-entropy keeps
            its log-probabilities).
        precision: ``"fp32"``, or ``"bf16"``/``"fp16"`` autocast as the Trainer runs it.
        optimizer, momentum: the optimizer the Trainer builds (`workbench.train.optim.build_optimizer`).
        activation_checkpointing: the modules the Trainer would recompute in backward (``TrainConfig``'s).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    if loss_fn is not None and target is None:
        raise ValueError("loss_fn needs target= (one target sample, as `sample` is one input)")
    started = time.perf_counter()
    dtype = autocast_dtype(precision)
    sample, target = _on_model_device(model, sample, target)
    config = OptimizerConfig(optimizer, lr=1e-3, momentum=momentum)
    fused = plain_tensors(list(model.parameters()))  # outside the mode: inside, .data is a fake tensor
    recomputed = ActivationCheckpointing(model, activation_checkpointing)
    try:
        with _fake_tensor_log_quiet(), FakeTensorMode(allow_non_fake_inputs=True) as mode:
            arguments = (model, mode, sample, target, batch_size, loss_fn, dtype, config, fused, recomputed)
            snapshot = _peak_of_a_step(*arguments)
    except Exception as error:  # what fake tensors cannot run (the real forward ran: check_sample_and_target)
        raise TraceFailed(error) from error
    parts = dict.fromkeys(("params", "grads", "optimizer_state", "activations", "temporaries"), 0)
    peak = 0
    for by_kind in snapshot.values():
        for kind, nbytes in by_kind.items():
            if kind == "Total":
                peak += nbytes
            else:
                name = _PARTS.get(getattr(kind, "value", str(kind)), "temporaries")
                parts[name] += nbytes
    return TracedStep(peak, parts, time.perf_counter() - started)


def _peak_of_a_step(
    model: nn.Module,
    mode: Any,
    sample: torch.Tensor,
    target: torch.Tensor | None,
    batch_size: int,
    loss_fn: LossFn | None,
    dtype: torch.dtype | None,
    config: OptimizerConfig,
    fused: bool,
    recomputed: ActivationCheckpointing,
) -> dict:
    """MemTracker's peak snapshot of the second of two training steps of a fake copy of `model` (in
    FakeTensorMode `mode`) on a fake batch of `batch_size`; `fused`: the optimizer the Trainer would build
    for the real parameters."""
    from torch.distributed._tools.mem_tracker import MemTracker

    fake = _fake_copy(model, mode)
    inputs = _batch_like(sample, batch_size)
    targets = None if target is None else _batch_like(target, batch_size)
    optim = build_optimizer(fake.parameters(), config, fused=fused)

    def step(update: bool) -> None:
        with torch.autocast(sample.device.type, dtype=dtype, enabled=dtype is not None):
            loss = _loss(fake(inputs), targets, loss_fn)
        loss.backward()
        if update:
            optim.step()
            optim.zero_grad(set_to_none=True)

    with recomputed.applied(fake):
        step(update=True)  # untracked: creates the optimizer state
        tracker = MemTracker()
        tracker.track_external(fake, optim, *(t for t in (inputs, targets) if t is not None))
        with tracker:
            # A fused optimizer updates in place, allocating nothing; its fake kernel allocates outputs, so
            # a fused step's peak is the end of backward (traced), an unfused one's is traced in full.
            step(update=not fused)
    return tracker.get_tracker_snapshot("peak")


def _fake_copy(model: nn.Module, mode: Any) -> nn.Module:
    """`model` copied with every parameter and buffer a fake tensor of the same shape, dtype and device
    (no real tensor is copied)."""
    return copied_with(model, mode.from_tensor)


def checked_model(model: Any, sample: Any = None) -> None:
    """TypeError for a class or a name where a model belongs; an nn.Module's `sample` is `checked_sample`d.

    Example:
        >>> checked_model(nn.Linear)
        Traceback (most recent call last):
        ...
        TypeError: model is the class Linear; build the model first: Linear(...)
    """
    refuse_class("model", model, BUILD_THE_MODEL)
    if isinstance(model, str | bytes):
        raise TypeError(
            f"model must be an nn.Module, a ModelProfile or a parameter count; got the name {model!r}: build "
            "or load the model first"
        )
    if isinstance(model, nn.Module) and sample is not None:
        checked_sample(sample)


def checked_sample(sample: Any) -> torch.Tensor:
    """`sample` if it is one input tensor, batch first, with at least one sample; else the error that says
    what was given and what to pass.

    Example:
        >>> checked_sample((torch.zeros(1, 4), torch.tensor([1])))
        Traceback (most recent call last):
        ...
        TypeError: sample= must be one input tensor, batch first (x[:1] of your data); got a tuple of \
(Tensor (1, 4), Tensor (1,)): an (input, target) pair? pass sample=x[:1] (and target=y[:1] with loss_fn=)
    """
    if isinstance(sample, torch.Tensor):
        check_int("sample batch size", sample.shape[0] if sample.dim() else 0, minimum=1)
        return sample
    given = f"got {type(sample).__name__}"
    if isinstance(sample, dict):
        given = f"got a dict with keys {list(sample)[:6]}"
    elif isinstance(sample, tuple | list):
        given = f"got a {type(sample).__name__} of ({', '.join(_kind(part) for part in sample[:6])})"
    pair = isinstance(sample, tuple | list) and len(sample) == 2
    if pair and all(isinstance(part, torch.Tensor) for part in sample):
        fix = "an (input, target) pair? pass sample=x[:1] (and target=y[:1] with loss_fn=)"
    else:  # a model of several inputs
        fix = "a model that takes a dict or several inputs is estimated through a module whose forward takes "
        fix += "one tensor (forward(self, x): return model(features=x))"
    raise TypeError(f"sample= must be one input tensor, batch first (x[:1] of your data); {given}: {fix}")


def _kind(value: Any) -> str:
    return f"Tensor {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__


def on_model_device(model: nn.Module, sample: torch.Tensor) -> torch.Tensor:
    """`sample` on the device of `model`'s first parameter or buffer (a trained model is often on the GPU
    while a sample taken from a dataset is on the CPU; a forward across the two fails inside torch).

    Example:
        >>> on_model_device(nn.Linear(2, 1).to("meta"), torch.zeros(1, 2)).device
        device(type='meta')
    """
    checked_model(model)
    device = next((t.device for t in (*model.parameters(), *model.buffers())), sample.device)
    return sample if sample.device == device else sample.to(device)


_FAKE_FAILURES = {  # what fake tensors cannot run, in the user's words
    "DataDependentOutputException": (
        "forward reads a number from a tensor: .item(), float(), branches on data"
    ),
    "DynamicOutputShapeException": "an output's shape depends on the data: nonzero(), a boolean mask",
}


class TraceFailed(Exception):
    """Tracing a step on fake tensors failed where the real forward on the sample ran (an operation
    without a fake implementation, a shape that depends on the data); `reason` says which, in one line."""

    def __init__(self, error: Exception) -> None:
        self.reason = _FAKE_FAILURES.get(type(error).__name__, error_in_one_line(error)[:200])
        super().__init__(f"tracing a training step on fake tensors failed ({self.reason})")


@contextmanager
def _fake_tensor_log_quiet() -> Iterator[None]:
    """torch logs a traceback at ERROR level when an operation fails on fake tensors, before raising it;
    `trace_step_memory` reports the failure itself (`TraceFailed`)."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def check_sample_and_target(
    model: nn.Module, sample: torch.Tensor, target: torch.Tensor | None, loss_fn: LossFn | None
) -> None:
    """The sample through the model and, with `loss_fn`, the loss of its output against `target`, for real
    at the sample's own batch: a mistake in them is a ValueError naming the argument (`sample_output`)."""
    sample, target = _on_model_device(model, sample, target)
    output = sample_output(model, sample)
    if loss_fn is None or target is None:
        return
    try:
        with torch.no_grad():
            loss_fn(output, target)
    except Exception as error:  # whatever the user's loss raises on them
        raise ValueError(
            f"loss_fn(output, target) fails on the model's output of sample= and target= of shape "
            f"{tuple(target.shape)} ({error_in_one_line(error)}); pass the target of the same sample(s), "
            "batch first"
        ) from error


def sample_output(model: nn.Module, sample: torch.Tensor) -> Any:
    """``model(sample)`` without gradients, `sample` already on the model's device; a sample the model
    cannot take, or a 1-D one the model reads as one unbatched input, is a ValueError that says so and how
    to pass it (the estimates take the sample's first dimension as the batch).

    Example:
        >>> sample_output(nn.Linear(20, 2), torch.zeros(20))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: sample= of shape (20,) gave an output of shape (2,): ... sample.unsqueeze(0)
    """
    shape = tuple(sample.shape)
    try:
        with torch.no_grad():
            output = model(sample)
    except Exception as error:  # whatever the user's forward raises on it
        raise ValueError(
            f"sample= of shape {shape} does not go through the model ({error_in_one_line(error)}); pass "
            "a batch of what the model takes, batch first: one sample is enough (x[:1] of your data)"
        ) from error
    if (
        sample.dim() == 1
        and isinstance(output, torch.Tensor)
        and output.dim() >= 1
        and len(output) != len(sample)
    ):
        raise ValueError(
            f"sample= of shape {shape} gave an output of shape {tuple(output.shape)}: the model took it as "
            "one input without a batch dimension, and the estimate reads the first dimension as the batch; "
            "pass it batch first: sample.unsqueeze(0)"
        )
    return output


def _on_model_device(
    model: nn.Module, sample: torch.Tensor, target: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`sample` and `target` where `model` is (a model on the GPU, a sample from a dataset on the CPU)."""
    return on_model_device(model, sample), None if target is None else on_model_device(model, target)


def _batch_like(sample: torch.Tensor, batch_size: int) -> torch.Tensor:
    """A (fake) batch of `batch_size` samples shaped and typed like `sample` (whose first dimension is
    the batch)."""
    shape = (batch_size, *sample.shape[1:]) if sample.dim() else (batch_size,)
    return torch.empty(shape, dtype=sample.dtype, device=sample.device)


def _loss(output: Any, targets: torch.Tensor | None, loss_fn: LossFn | None) -> torch.Tensor:
    if loss_fn is not None and targets is not None:
        return loss_fn(output, targets)
    tensor = output if isinstance(output, torch.Tensor) else output[0]
    return tensor.float().pow(2).mean()


@dataclass(frozen=True)
class Calibration:
    """Real allocator peaks of training steps at two small batches (a copy of the model) beside the traced
    ones: whether the trace sees what the kernels allocate (`agrees`), and the real peaks to extrapolate;
    `device`: the device type the real steps ran on (the model's)."""

    batches: tuple[int, int]
    real: tuple[int, int]
    traced: tuple[int, int]
    device: str

    @property
    def error(self) -> float:
        """The trace's relative error at the larger batch."""
        return self.traced[1] / self.real[1] - 1

    def agrees(self, tolerance: float) -> bool:
        return abs(self.error) <= tolerance

    def outgrows(self, traced_peak: int, batch_size: int, tolerance: float) -> bool:
        """Whether the real peaks, extrapolated to `batch_size`, exceed the trace's peak there by more than
        `tolerance`: the trace misses something that grows with the batch (seen: bf16 on a CPU without native
        bf16 grew 6.5 KB a sample for real, 1 KB traced), which a check at a small batch cannot see.

        Example:
            >>> check = Calibration((4, 8), (100, 140), (100, 140), "cpu")
            >>> check.outgrows(220, 16, 0.03), check.outgrows(200, 16, 0.03)
            (False, True)
        """
        return self.extrapolate(batch_size) > traced_peak * (1 + tolerance)

    def extrapolate(self, batch_size: int) -> int:
        """The real peak at `batch_size`, linear in the batch through the two measured ones.

        Example:
            >>> Calibration((4, 8), (100, 140), (90, 120), "cpu").extrapolate(16)
            220
        """
        (first, second), (low, high) = self.batches, self.real
        if first == second:
            return high
        return round(high + (batch_size - second) * (high - low) / (second - first))


CALIBRATION_BATCH = 8  # the larger of the two real steps (capped at the batch asked); the smaller is half


def calibrate(
    model: nn.Module,
    sample: torch.Tensor,
    *,
    batch_size: int,
    target: torch.Tensor | None = None,
    loss_fn: LossFn | None = None,
    precision: str = "fp32",
    optimizer: str = "adam",
    momentum: float = 0.0,
    activation_checkpointing: str | tuple[str, ...] | None = None,
) -> Calibration:
    """Train a copy of `model` for real at two small batches (`CALIBRATION_BATCH` and half of it, at most
    `batch_size`; zeros shaped like `sample` and `target`; a first step creates the optimizer state) and trace
    the same steps: some kernels allocate workspaces the dispatcher never sees (oneDNN's LSTM on CPU), which
    only real steps show. (At a batch of 1 or 2 fixed workspaces dominate: too small to compare.)"""
    from workbench.estimate.measure import measure_peak

    dtype = autocast_dtype(precision)
    sample, target = _on_model_device(model, sample, target)
    larger = min(CALIBRATION_BATCH, batch_size)
    batches = (max(1, larger // 2), larger)
    real, traced = [], []
    for batch in batches:
        inputs = torch.zeros_like(_batch_like(sample, batch))
        targets = None if target is None else torch.zeros_like(_batch_like(target, batch))
        copy_ = copy.deepcopy(model)
        optim = build_optimizer(copy_.parameters(), OptimizerConfig(optimizer, lr=1e-3, momentum=momentum))
        loss = (lambda output, _: _loss(output, None, None)) if loss_fn is None else loss_fn
        dummy = targets if targets is not None else torch.zeros(0)
        with ActivationCheckpointing(model, activation_checkpointing).applied(copy_):
            real.append(
                measure_peak(copy_, optim, loss, inputs, dummy, autocast_dtype=dtype, proxy=False).peak
            )
        options = {"target": target, "loss_fn": loss_fn, "precision": precision}
        options.update(
            optimizer=optimizer, momentum=momentum, activation_checkpointing=activation_checkpointing
        )
        traced.append(trace_step_memory(model, sample, batch_size=batch, **options).peak)
    return Calibration(batches, (real[0], real[1]), (traced[0], traced[1]), sample.device.type)
