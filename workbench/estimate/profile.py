"""What a model costs per sample, whatever the precision and strategy: `ModelProfile`, and `profile_model`,
which measures one from a forward pass (the analytic basis of `workbench.estimate.memory`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from workbench._validate import check_choice
from workbench.train.choices import PRECISIONS

FP32 = 4
HALF = 2
# Leaf modules whose backward needs their output (ReLU keeps its result), not their input.
_KEEP_OUTPUT = (nn.ReLU, nn.Sigmoid, nn.Tanh, nn.ELU)
# Leaf modules that keep nothing sized like the activations (views, or backward needs only shapes).
_KEEP_NOTHING = (nn.Flatten, nn.Unflatten, nn.Identity)


@dataclass(frozen=True)
class ModelProfile:
    """What a model costs per sample, independent of precision and strategy (`profile_model` measures one;
    give one by hand for a model you do not have).

    Args:
        param_count: trainable parameters.
        activation_elements: floating-point elements autograd keeps for backward, per sample (stored at
            the activation precision: 4 bytes in fp32, 2 in bf16/fp16).
        activation_fixed_bytes: bytes kept per sample whatever the precision (max-pool int64 indices,
            dropout masks, integer inputs), or the whole activation figure when given as a plain number.
        output_elements: model output elements per sample; the loss keeps two tensors of this size in
            fp32 (log-softmax or the prediction, and the target).
        linear_param_count: parameters in nn.Linear layers (what tensor parallelism splits).
        largest_layer_param_count: parameters of the largest layer (what FSDP gathers at once).

    Example (1M parameters, 4096 activations and 10 outputs a sample, bf16 autocast, AdamW):
        >>> profile = ModelProfile(param_count=1_000_000, activation_elements=4096, output_elements=10)
        >>> profile.activation_bytes_per_sample("bf16")  # 2 bytes each, the loss's two fp32 tensors
        8272.0
        >>> from workbench.estimate import estimate_memory
        >>> estimate_memory(profile, batch_size=32, precision="bf16", optimizer="adamw").activations
        264704
    """

    param_count: int
    activation_elements: float = 0.0
    activation_fixed_bytes: float = 0.0
    output_elements: float = 0.0
    linear_param_count: int = 0
    largest_layer_param_count: int = 0

    def activation_bytes_per_sample(self, precision: str = "fp32") -> float:
        """Bytes autograd keeps per sample at `precision` (the loss runs in fp32 under autocast)."""
        check_choice("precision", precision, PRECISIONS)
        element = FP32 if precision == "fp32" else HALF
        return (
            self.activation_elements * element + self.activation_fixed_bytes + 2 * self.output_elements * FP32
        )


def profile_model(model: nn.Module, sample: torch.Tensor) -> ModelProfile:
    """Count parameters and run one forward on `sample` (batch first; one sample is enough) to see what
    each leaf layer keeps for backward.

    Rules, per leaf module: Linear/Conv keep their input; ReLU/Sigmoid/Tanh/ELU keep their output;
    MaxPool keeps its input and int64 indices (output-sized); AdaptiveAvgPool to 1×1 (a mean), Flatten,
    Unflatten and Identity keep nothing; Dropout keeps a 1-byte mask; any other leaf keeps its input.
    Tensors sharing a storage count once (a ReLU's output is the next Linear's input). Functional calls
    inside a module's own ``forward`` are not seen. The forward runs under ``torch.no_grad()``.

    Example:
        >>> profile_model(nn.Linear(10, 1), torch.zeros(4, 10)).activation_elements
        10.0
    """
    from workbench.estimate.trace import checked_sample, on_model_device, sample_output

    sample = on_model_device(model, checked_sample(sample))
    kept: dict[int, tuple[torch.Tensor, bool]] = {}  # storage address -> (tensor, precision-dependent)
    fixed = [0]
    outputs: list[torch.Tensor] = []

    def keep(tensor: torch.Tensor) -> None:
        if isinstance(tensor, torch.Tensor):
            kept.setdefault(tensor.untyped_storage().data_ptr(), (tensor, tensor.is_floating_point()))

    def hook(module: nn.Module, inputs: tuple, output: object) -> None:
        outputs.append(output)  # held so that no address is reused during the trace
        if isinstance(output, tuple | list):  # e.g. MaxPool(return_indices=True): (values, indices)
            output = output[0]
        if not isinstance(output, torch.Tensor):
            return
        if isinstance(module, _KEEP_NOTHING) or _is_mean(module):
            return
        if isinstance(module, _KEEP_OUTPUT):
            keep(output)
            return
        if inputs:
            keep(inputs[0])
        if isinstance(module, nn.modules.pooling._MaxPoolNd):
            fixed[0] += output.numel() * 8  # int64 indices
        elif isinstance(module, nn.modules.dropout._DropoutNd):
            fixed[0] += output.numel()  # bool mask

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        output = sample_output(model, sample)
    finally:
        for handle in handles:
            handle.remove()
    batch = sample.shape[0]
    floating = sum(t.numel() for t, is_float in kept.values() if is_float)
    fixed[0] += sum(t.numel() * t.element_size() for t, is_float in kept.values() if not is_float)
    return ModelProfile(
        param_count=sum(p.numel() for p in model.parameters() if p.requires_grad),
        activation_elements=floating / batch,
        activation_fixed_bytes=fixed[0] / batch,
        output_elements=output.numel() / batch,
        linear_param_count=sum(
            p.numel() for m in model.modules() if isinstance(m, nn.Linear) for p in m.parameters()
        ),
        largest_layer_param_count=max((sum(p.numel() for p in m.parameters()) for m in leaves), default=0),
    )


def _is_mean(module: nn.Module) -> bool:
    size = getattr(module, "output_size", None)
    return isinstance(module, nn.modules.pooling._AdaptiveAvgPoolNd) and size in (1, (1, 1), (1, 1, 1))
