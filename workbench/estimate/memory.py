"""Per-device training memory from a model (or counts), batch, precision, optimizer and strategy.

Two bases, and each estimate says which it used and how sure it is (`MemoryEstimate.basis`, `uncertainty`):

- **traced** (a model and a sample given, single device, DDP or FSDP): `workbench.estimate.trace` runs two
  training steps on fake tensors at the full batch and takes the peak the dispatcher saw: attention's scores,
  autocast's dtypes, backward's transients and the optimizer's temporaries included.
- **analytic** (a `ModelProfile` or a parameter count, pipeline and tensor parallel): `profile_model` runs
  one forward on a sample and records what each leaf layer keeps for backward; the rules below turn it into
  bytes. It misses what a module computes inside its own ``forward`` (attention), backward's transients and
  temporaries: it under-estimates, by up to the `ANALYTIC_UNCERTAINTY` measured on the test matrix.

`workbench.estimate.measure.measure_peak` measures the real allocator peak of a training step; the test
matrix (``tests/estimate/test_peak_matrix.py``) holds both bases against it.

Example:
    >>> from workbench import models
    >>> model = models.mlp(64, 10, hidden=(128, 128))
    >>> rules = estimate_memory(model, sample=torch.zeros(1, 64), batch_size=64, method="analytic")  # Adam
    >>> rules.params == 26_122 * 4, rules.optimizer_state == 2 * 26_122 * 4, rules.describe()
    (True, True, '±85%, analytic')
    >>> traced = estimate_memory(model, sample=torch.zeros(1, 64), batch_size=64, optimizer="adam")
    >>> traced.basis.startswith("traced (checked"), traced.describe().startswith("±5%, traced")
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workbench._validate import (
    check_choice,
    check_int,
    check_nonnegative,
    check_number,
    naming_unknown_arguments,
)
from workbench.estimate.profile import FP32, HALF, PRECISIONS, ModelProfile, profile_model
from workbench.parallel.strategies.registry import COMPOSED, DEFAULT_TP, STRATEGIES

OPTIMIZERS = ("sgd", "adam", "adamw")
METHODS = ("auto", "traced", "analytic")
# |estimate − allocator peak| / peak, the largest on tests/estimate/test_peak_matrix.py's models (CPU),
# rounded up: traced steps land within 4% there; the analytic rules under-estimate by up to this much (81%:
# an LSTM, whose gates and workspaces no leaf-module rule sees; 58% on hand-written attention)
TRACED_UNCERTAINTY = 0.05
ANALYTIC_UNCERTAINTY = 0.85
EXTRAPOLATED_UNCERTAINTY = 0.15  # the bound for a small measured step extrapolated in batch
# method="auto" checks a trace against real steps at batch 4 and 8 for models up to this many parameters (a
# copy trains on the model's device); where they differ by more than CHECK_TOLERANCE it extrapolates those
CALIBRATION_MAX_PARAMS = 16_000_000
CHECK_TOLERANCE = 0.03


@dataclass(frozen=True)
class Cluster:
    """The devices available: how many, and optionally the memory of each (bytes).

    Example:
        >>> Cluster(devices=8, memory_bytes=80 * 2**30).devices
        8
    """

    devices: int
    memory_bytes: int | None = None

    def __post_init__(self) -> None:
        check_int("cluster.devices", self.devices, minimum=1)
        if self.memory_bytes is not None:
            check_int("cluster.memory_bytes", self.memory_bytes, minimum=1)


naming_unknown_arguments(Cluster, aliases={"gpus": "devices", "num_gpus": "devices"})


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device; `total` is their sum. `comm_buffers` holds what a strategy allocates for
    communication: DDP's gradient buckets, or FSDP's all-gathered largest layer (parameters, their gradients).

    Example (a profile given by hand, bf16 autocast: fp32 weights and their 2-byte copies):
        >>> from workbench.tables import text_table
        >>> profile = ModelProfile(param_count=1_000_000, activation_elements=4096, output_elements=10)
        >>> estimate = estimate_memory(profile, batch_size=32, precision="bf16", optimizer="adamw")
        >>> print(text_table(["component", "bytes", "MiB"], estimate.rows()))
        component        bytes     MiB
        ---------------  --------  -----
        params           6000000   5.72
        grads            4000000   3.81
        optimizer_state  8000000   7.63
        activations      264704    0.25
        temporaries      0         0.00
        comm_buffers     0         0.00
        total            18264704  17.42
        >>> estimate.describe(), estimate.fits(16 * 2**20), estimate.fits(24 * 2**20)
        ('±85%, analytic', False, True)
    """

    params: int
    grads: int
    optimizer_state: int
    activations: int
    comm_buffers: int = 0
    temporaries: int = 0  # traced: backward's transients, the optimizer's, the batch and the loss at the peak
    weight_average: int = 0  # with ema_decay: the averaged weights (fp32 parameters and float buffers)
    basis: str = "analytic"  # "traced" or "analytic" (see the module docstring)
    uncertainty: float = ANALYTIC_UNCERTAINTY  # relative, from the test matrix
    checked_on: str | None = None  # the device type a traced estimate's real steps ran on ("cpu", "cuda")

    @property
    def total(self) -> int:
        parts = (self.params, self.grads, self.optimizer_state, self.activations, self.comm_buffers)
        return sum(parts) + self.temporaries + self.weight_average

    def describe(self) -> str:
        """How sure the estimate is, e.g. ``"±5%, traced"``."""
        return f"±{100 * self.uncertainty:.0f}%, {self.basis}"

    def fits(self, memory_bytes: int) -> bool:
        """Whether `total` fits in a device of `memory_bytes`."""
        return self.total <= memory_bytes

    def rows(self) -> list[tuple[str, int, str]]:
        """(component, bytes, MiB) rows for `workbench.tables.text_table`, the total last (weight_average only
        where there is one)."""
        names = ("params", "grads", "optimizer_state", "activations", "temporaries", "comm_buffers")
        names += ("weight_average", "total") if self.weight_average else ("total",)
        return [(name, getattr(self, name), f"{getattr(self, name) / 2**20:.2f}") for name in names]


def optimizer_state_tensors(optimizer: str, momentum: float = 0.0) -> int:
    """State tensors per parameter: SGD 0 (1 with momentum), Adam/AdamW 2 (first and second moments).

    Example:
        >>> optimizer_state_tensors("sgd", momentum=0.9), optimizer_state_tensors("adamw")
        (1, 2)
    """
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_nonnegative("momentum", momentum)
    if optimizer == "sgd":
        return 1 if momentum else 0
    return 2


def estimate_memory(
    model: nn.Module | ModelProfile | int,
    *,
    batch_size: int,
    sample: torch.Tensor | None = None,
    activation_bytes_per_sample: float | None = None,
    precision: str = "fp32",
    optimizer: str = "adam",
    momentum: float = 0.0,
    strategy: str = "single",
    devices: int = 1,
    cluster: Cluster | None = None,
    micro_batches: int | None = None,
    gradient_as_bucket_view: bool = False,
    tp: int = DEFAULT_TP,
    pp: int = DEFAULT_TP,
    method: str = "auto",
    target: torch.Tensor | None = None,
    loss_fn: Any = None,
    ema_decay: float | None = None,
    activation_checkpointing: str | tuple[str, ...] | None = None,
) -> MemoryEstimate:
    """Training memory per device.

    Args:
        model: an nn.Module (traced, or profiled on `sample`), a `ModelProfile`, or a parameter count (then
            give `activation_bytes_per_sample`, in bytes at `precision`).
        method: ``"traced"`` (an nn.Module and `sample`; single, ddp, fsdp), ``"analytic"`` (the rules
            below), or ``"auto"``: traced where it can be, else analytic; a traced model of at most
            `CALIBRATION_MAX_PARAMS` parameters is also trained for real at two small batches on a copy, and
            where the trace misses what the kernels allocate (by more than `CHECK_TOLERANCE`: oneDNN's LSTM
            on CPU, cuDNN's RNN and convolution workspaces on GPUs), the real peaks are extrapolated in batch
            (basis "measured at batch 4 and 8, ..."). They run on the model's device: estimate GPU runs there.
        target, loss_fn: for a traced step, one target sample and the loss (default: the output's mean
            square in fp32; see `workbench.estimate.trace`).
        batch_size: samples per device per step (for ``"pipeline"``: the batch entering the pipeline).
        precision: ``"fp32"`` (4 bytes everywhere) or ``"bf16"``/``"fp16"`` mixed precision (autocast):
            fp32 parameters, gradients and optimizer state, plus 2-byte working copies of the weights
            that autocast keeps for backward; 2-byte activations; the loss stays fp32.
        optimizer, momentum: ``"sgd"`` (a momentum buffer when `momentum` > 0), ``"adam"``/``"adamw"``
            (two moments), each state tensor the size of the parameters in fp32.
        strategy, devices: how `devices` devices share the work (rules below).
        cluster: the devices available; more `devices` than it has is an error.
        micro_batches: pipeline micro-batches per step (default `devices`).
        gradient_as_bucket_view: DDP's option; False (its default) keeps gradient buckets beside ``.grad``.
        tp: for ``"fsdp+tp"`` and ``"ddp+tp"``: ranks per tensor-parallel group (it divides `devices`).
        pp: for ``"ddp+pp"``: stages per pipeline (it divides `devices`).
        ema_decay: the Trainer's ``TrainConfig.ema_decay``; with a decay, the moving average of the weights
            it keeps counts as `weight_average`: an fp32 copy of each device's parameters (sharded as they
            are) and of the model's float buffers (BatchNorm's statistics, never sharded).
        activation_checkpointing: ``TrainConfig.activation_checkpointing``: the step is traced (and checked)
            with those modules recomputed in backward; the rules cannot say what that saves, so it needs a
            traced estimate.

    Rules (P parameter bytes, G gradient bytes, S optimizer state bytes, A activation bytes of the batch):
        - ``single``: P + G + S + A; ``devices`` must be 1.
        - ``ddp``: a full replica plus DDP's gradient buckets (flat buffers of G bytes in all, allocated
          besides ``.grad`` unless `gradient_as_bucket_view`; measured, see tests).
        - ``fsdp``: (P + G + S) / N per device, A unchanged, plus the transient all-gathered largest
          layer (its parameters at compute precision and its unsharded fp32 gradients).
        - ``pipeline``: (P + G + S) / N (stages balanced by parameter count); each stage keeps 1/N of
          the layers' activations for min(M, N) in-flight micro-batches of B/M samples (1F1B schedule).
        - ``tensor``: parameters, gradients and state of nn.Linear layers divided by N, the rest
          replicated; activations counted unsplit (an upper bound: Megatron-style layers split some).
        - ``fsdp+tp`` / ``ddp+tp`` on N = d × tp devices: what ``tensor`` leaves on each of the tp ranks,
          then divided by d for FSDP (plus its gathered largest layer, of which each rank gathers 1/tp);
          DDP × tp averages the gradients in place (no buckets). Activations: a data rank's batch.
        - ``ddp+pp`` on N = d × pp devices: ``pipeline`` over pp stages (micro-batches default pp), and
          the gradients averaged in place over the d replicas (no buckets).

    Example:
        >>> estimate_memory(1_000_000, activation_bytes_per_sample=0, batch_size=1, optimizer="adam",
        ...                 strategy="fsdp", devices=4).params
        1000000
    """
    check_int("batch_size", batch_size, minimum=1)
    check_choice("precision", precision, PRECISIONS)
    state_tensors = optimizer_state_tensors(optimizer, momentum)
    check_choice("strategy", strategy, STRATEGIES)
    check_int("devices", devices, minimum=1)
    if cluster is not None and devices > cluster.devices:
        raise ValueError(f"devices={devices} exceeds the cluster's {cluster.devices} devices")
    if strategy == "single" and devices != 1:
        raise ValueError(f"devices={devices} with strategy='single'; use 1 or another strategy")
    inner = pp if strategy == "ddp+pp" else tp  # the model dimension's ranks
    if strategy in COMPOSED:
        name = "pp" if strategy == "ddp+pp" else "tp"
        check_int(name, inner, minimum=1)
        if devices % inner:
            raise ValueError(
                f"strategy={strategy!r} with {name}={inner} needs devices divisible by {inner}, got "
                f"{devices}; use a multiple of {inner}, or a {name} that divides {devices}"
            )
    stages = inner if strategy == "ddp+pp" else devices
    micro = check_int("micro_batches", stages if micro_batches is None else micro_batches, minimum=1)
    check_choice("method", method, METHODS)
    if ema_decay is not None:
        check_number("ema_decay", ema_decay, above=0, below=1)
    from workbench.estimate import trace  # at call time, as `_traced` (the class it raises is this module's)

    trace.checked_model(model, sample)  # a class or a name: said; an nn.Module's sample: one input tensor
    traceable = isinstance(model, nn.Module) and sample is not None and strategy in ("single", "ddp", "fsdp")
    if activation_checkpointing is not None and (not traceable or method == "analytic"):
        raise ValueError(
            f"activation_checkpointing={activation_checkpointing!r} is estimated by tracing a step: give an "
            "nn.Module with sample=, strategy 'single', 'ddp' or 'fsdp', and method 'auto' or 'traced'"
        )
    if method == "traced" and not traceable:
        raise ValueError(
            f"method='traced' needs an nn.Module with sample= and strategy 'single', 'ddp' or 'fsdp' (got "
            f"{type(model).__name__}, strategy={strategy!r}); use method='analytic' or 'auto'"
        )
    untraced = ""  # why "auto" fell back to the rules
    if traceable and method != "analytic":
        try:
            return _traced(
                model, sample, batch_size, target, loss_fn, precision, optimizer, momentum, strategy, devices,
                gradient_as_bucket_view, calibrate=method == "auto", averaged=ema_decay is not None,
                activation_checkpointing=activation_checkpointing,
            )  # fmt: skip
        except trace.TraceFailed as failed:
            if method == "traced" or activation_checkpointing is not None:
                raise ValueError(f"{failed}; method='analytic' (or 'auto') estimates by the rules") from None
            untraced = f" (not traced: {failed.reason})"
    profile = _profile(model, sample, activation_bytes_per_sample)

    mixed = precision != "fp32"
    param_element = FP32 + (HALF if mixed else 0)
    activations = profile.activation_bytes_per_sample(precision) * batch_size
    shard = {"fsdp": devices, "pipeline": devices, "ddp+pp": stages}.get(strategy, 1)
    count = profile.param_count / shard
    if strategy == "tensor":
        count = profile.param_count - profile.linear_param_count * (1 - 1 / devices)
    if strategy in ("fsdp+tp", "ddp+tp"):
        count = profile.param_count - profile.linear_param_count * (1 - 1 / tp)
        count /= devices // tp if strategy == "fsdp+tp" else 1
    if strategy in ("pipeline", "ddp+pp"):
        activations = activations / stages * min(micro, stages) / micro
    buffers = 0.0
    if strategy == "ddp" and not gradient_as_bucket_view:
        buffers = profile.param_count * FP32
    elif strategy == "fsdp":
        buffers = profile.largest_layer_param_count * ((HALF if mixed else FP32) + FP32)
    elif strategy == "fsdp+tp":
        buffers = profile.largest_layer_param_count / tp * ((HALF if mixed else FP32) + FP32)
    return MemoryEstimate(
        params=round(count * param_element),
        grads=round(count * FP32),
        optimizer_state=round(count * FP32 * state_tensors),
        activations=round(activations),
        comm_buffers=round(buffers),
        weight_average=round(_average_bytes(model, count)) if ema_decay is not None else 0,
        basis=f"analytic{untraced}",
    )


def _traced(
    model: nn.Module,
    sample: torch.Tensor,
    batch_size: int,
    target: torch.Tensor | None,
    loss_fn: Any,
    precision: str,
    optimizer: str,
    momentum: float,
    strategy: str,
    devices: int,
    gradient_as_bucket_view: bool,
    calibrate: bool,
    averaged: bool,
    activation_checkpointing: str | tuple[str, ...] | None,
) -> MemoryEstimate:
    """One device's traced step (checked by real small steps if `calibrate`), DDP's buckets, FSDP's shards."""
    from workbench.estimate import trace

    options = {"target": target, "loss_fn": loss_fn, "precision": precision}
    options.update(optimizer=optimizer, momentum=momentum, activation_checkpointing=activation_checkpointing)
    trace.check_sample_and_target(model, sample, target, loss_fn)  # the user's mistakes, before the trace's
    step = trace.trace_step_memory(model, sample, batch_size=batch_size, **options)
    parts = dict(step.parts)
    basis, uncertainty, checked_on = "traced", TRACED_UNCERTAINTY, None
    if calibrate and sum(p.numel() for p in model.parameters()) <= CALIBRATION_MAX_PARAMS:
        check = trace.calibrate(model, sample, batch_size=batch_size, **options)
        checked_on = check.device
        low, high = check.batches
        extrapolated = check.extrapolate(batch_size)
        if not check.agrees(CHECK_TOLERANCE):
            why = f"traced was {check.error:+.0%}"
        elif check.outgrows(step.peak, batch_size, CHECK_TOLERANCE):
            short = step.peak / extrapolated - 1
            why = f"traced grows more slowly with the batch: {short:+.0%} at {batch_size}"
        else:
            why = ""
        if not why:
            basis = f"traced (checked: {check.error:+.1%} at batch {high})"
        else:  # kernels allocate what the trace cannot see: what it misses counts as temporaries
            parts["temporaries"] += extrapolated - step.peak
            basis = f"measured at batch {low} and {high}, extrapolated ({why})"
            uncertainty = EXTRAPOLATED_UNCERTAINTY if batch_size > high else TRACED_UNCERTAINTY
    buffers = 0.0
    if strategy == "ddp" and not gradient_as_bucket_view:
        buffers = sum(p.numel() for p in model.parameters() if p.requires_grad) * FP32
    elif strategy == "fsdp":
        for name in ("params", "grads", "optimizer_state"):
            parts[name] = parts[name] / devices
        largest = max((sum(p.numel() for p in m.parameters()) for m in model.children()), default=0)
        buffers = largest * ((HALF if precision != "fp32" else FP32) + FP32)
    average = 0.0  # with ema_decay: this device's share of the parameters, and the buffers
    if averaged:
        shards = devices if strategy == "fsdp" else 1
        average = _average_bytes(model, sum(p.numel() for p in model.parameters()) / shards)
    return MemoryEstimate(
        params=round(parts["params"]),
        grads=round(parts["grads"]),
        optimizer_state=round(parts["optimizer_state"]),
        activations=round(parts["activations"]),
        comm_buffers=round(buffers),
        temporaries=round(parts["temporaries"]),
        weight_average=round(average),
        basis=basis,
        uncertainty=uncertainty,
        checked_on=checked_on,
    )


def _average_bytes(model: nn.Module | ModelProfile | int, param_count: float) -> float:
    """What `workbench.train.weight_average` keeps on a device holding `param_count` parameters: an fp32 copy
    of them and of `model`'s float buffers (an nn.Module's; no strategy shards them)."""
    buffers = model.buffers() if isinstance(model, nn.Module) else ()
    return param_count * FP32 + sum(b.numel() * b.element_size() for b in buffers if b.is_floating_point())


def _profile(
    model: nn.Module | ModelProfile | int, sample: torch.Tensor | None, activation_bytes: float | None
) -> ModelProfile:
    if isinstance(model, ModelProfile):
        return model
    if isinstance(model, nn.Module):
        if sample is None:
            raise ValueError("sample is required with an nn.Module (a batch of one input is enough)")
        return profile_model(model, sample)
    count = check_int("model (parameter count)", model, minimum=1)
    if activation_bytes is None:
        raise ValueError("activation_bytes_per_sample is required with a parameter count")
    return ModelProfile(
        param_count=count,
        activation_fixed_bytes=check_nonnegative("activation_bytes_per_sample", activation_bytes),
        linear_param_count=count,
    )
