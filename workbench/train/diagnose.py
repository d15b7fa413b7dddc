"""Name the mismatch behind an error torch raised inside the user's model or loss.

torch's own words ("mat1 and mat2 shapes cannot be multiplied (16x10 and 7x10)", "Target 8 is out of
bounds.") say what failed deep inside a layer, not which of the user's things disagree nor what to change.
These functions look at the model, the batch and the error and, when they recognise the case, return one
sentence that names both sides and the fix; otherwise None, and the original error stands.

Example:
    >>> import torch
    >>> model = torch.nn.Linear(7, 3)
    >>> inputs = torch.zeros(16, 10)
    >>> try:
    ...     model(inputs)
    ... except RuntimeError as error:
    ...     print(explain_model_error(model, inputs, error))  # doctest: +ELLIPSIS
    the model's first Linear layer takes 7 features per sample, but the inputs have 10 (inputs (16, 10)): ...
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

import torch

BROADCAST_WARNING = "Using a target size"  # torch's words when mse_loss, l1_loss, ... broadcast the target
IGNORE_INDEX = -100  # cross_entropy's and nll_loss's default: a target that counts for nothing
# torch's words for tensors on two devices in one operation (CUDA, the CPU's dispatcher, indexing, conv)
DEVICE_WORDS = ("same device", "expected device", "should be the same", "on the same device as")


def explain_model_error(model: torch.nn.Module, inputs: Any, error: BaseException) -> str | None:
    """One sentence on why ``model(inputs)`` raised `error`, or None when the case is not recognised."""
    message = str(error)
    if "Expected to have finished reduction in the prior iteration" in message:
        return _unused_parameters(model, message)
    if "Expected more than 1 value per channel when training" in message:
        return (
            f"a BatchNorm layer got a batch of 1 sample while training ({_describe(inputs)}): an epoch's "
            "last batch holds 1 sample when the training split leaves 1 after the full batches; set "
            "LoaderConfig(drop_last=True), or a batch_size that leaves more than 1"
        )
    if (devices := _mixed_devices(model, message)) is not None:
        return devices
    if not isinstance(inputs, torch.Tensor):
        return None
    dtype = _parameter_dtype(model)
    about_types = any(words in message for words in ("dtype", "scalar type", "type (", "not implemented for"))
    if about_types and inputs.is_floating_point() and dtype is not None and inputs.dtype != dtype:
        want, got = _name(dtype), _name(inputs.dtype)
        return (
            f"the inputs are {got} but the model's parameters are {want}: convert the data "
            f"(x.to(torch.{want}), e.g. TensorDataset(x.to(torch.{want}), y)) or the model "
            f"(model.to(torch.{got}))"
        )
    embeds = any(isinstance(m, torch.nn.Embedding | torch.nn.EmbeddingBag) for m in model.modules())
    integers = not inputs.is_floating_point() and not inputs.is_complex()
    if about_types and integers and not embeds and dtype is not None:
        want = _name(dtype)
        return (
            f"the inputs are {_name(inputs.dtype)} (integers) but the model computes in {want}: convert "
            f"them (x.to(torch.{want}), e.g. TensorDataset(x.float(), y)); integer inputs suit a model that "
            "starts with nn.Embedding"
        )
    first = next(
        (m for m in model.modules() if isinstance(m, torch.nn.Linear | torch.nn.modules.conv._ConvNd)), None
    )
    linear = isinstance(first, torch.nn.Linear) and "cannot be multiplied" in message
    if linear and inputs.ndim >= 1 and inputs.shape[-1] != first.in_features:
        width = inputs.shape[-1]
        return (
            f"the model's first Linear layer takes {first.in_features} features per sample, but the "
            f"inputs have {width} ({_describe(inputs)}): make it nn.Linear({width}, ...), or check the data"
        )
    if isinstance(first, torch.nn.modules.conv._ConvNd) and "channels" in message and inputs.ndim >= 2:
        channels = inputs.shape[1] if inputs.ndim == first.weight.ndim else inputs.shape[0]
        if channels != first.in_channels:
            return (
                f"the model's first {type(first).__name__} takes {first.in_channels} input channels, but "
                f"the inputs have {channels} ({_describe(inputs)}, channels first: (batch, channels, ...)): "
                f"make it {type(first).__name__}({channels}, ...), or check the data's layout"
            )
    return None


def explain_loss_error(outputs: Any, target: Any, error: BaseException) -> str | None:
    """One sentence on why ``loss_fn(outputs, target)`` raised `error`, or None when not recognised."""
    if not isinstance(outputs, torch.Tensor) and isinstance(target, torch.Tensor):
        return _outputs_fix(outputs)
    if not (isinstance(outputs, torch.Tensor) and isinstance(target, torch.Tensor)):
        return None
    if any(words in str(error) for words in DEVICE_WORDS) and outputs.device == target.device:
        device = outputs.device
        return (
            f"the loss mixes devices: the outputs and targets are on {device}, and a tensor the loss holds "
            f"(class weights, pos_weight) is not: give it there (weight=w.to('{device}')), or give the loss "
            "as a module (nn.CrossEntropyLoss(weight=w)), which the Trainer moves where the outputs are"
        )
    if (
        fix := _classes_last_fix(outputs, target) or _integer_target_fix(outputs, target, str(error))
    ) is not None:
        return fix
    about_target = "target" in str(error).lower()  # beyond that, the tensors tell the case (wordings vary)
    if about_target and outputs.ndim >= 2 and outputs.shape[1] > 1:
        shape = _target_shape_fix(outputs, target)
        if shape is not None:
            return shape
    if (
        target.is_floating_point()
        or outputs.ndim < 2
        or target.ndim != outputs.ndim - 1
        or not target.numel()
    ):
        return None
    classes = outputs.shape[1]
    if classes == 1 and (fix := _class_index_fix(outputs, target, str(error))) is not None:
        return fix  # one output per sample: a loss such as BCE, not class scores
    bad = target[(target >= classes) | ((target < 0) & (target != IGNORE_INDEX))]
    if not bad.numel():
        return _class_index_fix(outputs, target, str(error))
    largest, smallest = int(bad.max()), int(bad.min())
    if largest >= classes:
        fix = f"give the last layer {largest + 1} outputs (nn.Linear(..., {largest + 1})), or map the labels"
        return (
            f"the targets hold class {largest}, but the model outputs {classes} class scores per sample "
            f"(outputs {tuple(outputs.shape)}): {fix} to 0..{classes - 1}"
        )
    return (
        f"the targets hold class {smallest}: class indices run from 0 to {classes - 1} (the number of class "
        f"scores the model outputs), and {IGNORE_INDEX} marks a sample to ignore; map the labels to "
        f"0..{classes - 1}"
    )


def _integer_target_fix(outputs: torch.Tensor, target: torch.Tensor, message: str) -> str | None:
    """Integer targets of the outputs' own shape that the loss refused: one score per sample given to
    cross_entropy, or a loss that compares outputs with targets as numbers (BCE); else None."""
    if target.is_floating_point() or target.shape != outputs.shape:
        return None
    out, tgt = tuple(outputs.shape), f"integer targets {tuple(target.shape)} {_name(target.dtype)}"
    if outputs.ndim == 1 and "class probabilities" in message:
        return (
            f"loss_fn got one score per sample {out} and {tgt}, but cross_entropy takes a score per class, "
            f"({out[0]}, classes): give the model a last layer of one output per class and keep it (no "
            "squeeze); with one score per sample for a yes/no target, use F.binary_cross_entropy_with_logits "
            "and y.float()"
        )
    if "cast" in message:
        return f"loss_fn got outputs {out} and {tgt}; this loss takes float targets: y.float()"
    return None


def _classes_last_fix(outputs: torch.Tensor, target: torch.Tensor) -> str | None:
    """Integer targets ``(B, T)`` against a sequence model's scores ``(B, T, classes)``, where cross_entropy
    takes the classes in dimension 1 (``(B, classes, T)``): how to reshape, else None."""
    out, tgt = tuple(outputs.shape), tuple(target.shape)
    if target.is_floating_point() or len(out) < 3 or tgt != out[:-1] or tgt == (out[0], *out[2:]):
        return None
    return (
        f"loss_fn got outputs {out} with the class scores last and targets {tgt}, but cross_entropy takes "
        f"the classes in dimension 1, {(out[0], out[-1], *out[1:-1])}: flatten both, loss_fn=lambda outputs, "
        "y: F.cross_entropy(outputs.flatten(0, -2), y.flatten()), or move the classes, outputs.movedim(-1, 1)"
    )


def class_column(outputs_shape: tuple[int, ...], target_shape: tuple[int, ...]) -> bool:
    """Whether targets of `target_shape` are class scores' (batch, classes, ...) indices in a column:
    (batch, 1, ...), every other dimension the outputs'.

    Example:
        >>> class_column((16, 10), (16, 1)), class_column((2, 5, 4, 4), (2, 1, 4, 3))
        (True, False)
    """
    if len(target_shape) != len(outputs_shape) or len(outputs_shape) < 2 or outputs_shape[1] == 1:
        return False
    return target_shape[1] == 1 and (target_shape[0], *target_shape[2:]) == (
        outputs_shape[0],
        *outputs_shape[2:],
    )


def _target_shape_fix(outputs: torch.Tensor, target: torch.Tensor) -> str | None:
    """Class-score `outputs` (batch, classes, ...) against targets in a column (batch, 1, ...), or integer
    targets shaped like the outputs (one-hot as integers): what to change, else None."""
    per_sample = (outputs.shape[0], *outputs.shape[2:])
    if class_column(tuple(outputs.shape), tuple(target.shape)):
        fix = "y.squeeze(1)" + (".long()" if target.is_floating_point() else "")
        return (
            f"the targets have shape {tuple(target.shape)}, a column of class indices, but the loss takes "
            f"one index per sample, shape {per_sample}, for outputs {tuple(outputs.shape)}: {fix} (e.g. "
            f"TensorDataset(x, {fix}))"
        )
    if target.shape == outputs.shape and not target.is_floating_point():
        return (
            f"the targets have the outputs' shape {tuple(target.shape)} but are {_name(target.dtype)}: "
            "one-hot or multi-label targets must be floats (y.float()); or give class indices, one per "
            "sample (y.argmax(1))"
        )
    return None


def _outputs_fix(outputs: Any) -> str | None:
    """The model returned a tuple, dict or object where ``loss_fn`` takes a tensor: which part to pick."""
    if isinstance(outputs, dict | tuple | list):
        parts = outputs.items() if isinstance(outputs, dict) else enumerate(outputs)
        tensors = {key: part for key, part in parts if isinstance(part, torch.Tensor) and part.ndim >= 1}
        if not tensors:
            return None
        key = "logits" if "logits" in tensors else next(iter(tensors))
        what = "dict" if isinstance(outputs, dict) else type(outputs).__name__
        shown, pick = f"{what} {_shapes(outputs)}", f"[{key!r}]"
    elif isinstance(getattr(outputs, "logits", None), torch.Tensor):
        shown, pick = f"{type(outputs).__name__} with .logits {tuple(outputs.logits.shape)}", ".logits"
    else:
        return None
    return (
        f"the model returned a {shown}, and loss_fn(outputs, target) got all of it as its outputs: pick the "
        f"tensor to compare with the targets, loss_fn=lambda outputs, y: your_loss(outputs{pick}, y), or "
        "have the model return that tensor alone"
    )


def _shapes(outputs: dict | tuple | list) -> str:
    """``{'logits': (16, 2)}`` or ``((16, 2), ())``: the shapes of the parts, for messages."""
    if isinstance(outputs, dict):
        return "{" + ", ".join(f"{key!r}: {_shape(part)}" for key, part in outputs.items()) + "}"
    return "(" + ", ".join(_shape(part) for part in outputs) + ")"


def _shape(part: Any) -> str:
    return str(tuple(part.shape)) if isinstance(part, torch.Tensor) else type(part).__name__


def _class_index_fix(outputs: torch.Tensor, target: torch.Tensor, message: str) -> str | None:
    """Valid class indices the loss refused: of the wrong integer type for cross_entropy, or given to a loss
    that compares outputs with targets of their own shape (mse_loss, l1_loss, BCE)."""
    per_sample = (outputs.shape[0], *outputs.shape[2:])
    if tuple(target.shape) != per_sample:
        return None
    indices = f"integer targets {tuple(target.shape)} {_name(target.dtype)}"
    if "dtype" in message and target.dtype not in (torch.int64, torch.uint8):
        return f"the {indices} are class indices, which cross_entropy takes as int64: y.long()"
    if "size" not in message.lower():
        return None
    classes, out = outputs.shape[1], tuple(outputs.shape)
    if classes == 1:
        return (
            f"loss_fn got one output per sample {out} and {indices}; a loss on one output per sample "
            f"(binary_cross_entropy_with_logits, mse_loss) takes float targets of the outputs' shape {out}: "
            "y.float().unsqueeze(1)"
        )
    return (
        f"loss_fn got outputs {out} and {indices}, one class index per sample as cross_entropy takes "
        f"them, but this loss compares the outputs with targets of their own shape: give one-hot float "
        f"targets {out}, F.one_hot(y, {classes}).float(); or use F.cross_entropy"
    )


def is_torch_loss(loss_fn: Any) -> bool:
    """Whether `loss_fn` is one of torch's losses: a ``torch.nn.functional`` function or an ``nn`` loss
    module, maybe in a ``functools.partial``."""
    loss_fn = getattr(loss_fn, "func", loss_fn)
    return isinstance(loss_fn, torch.nn.modules.loss._Loss) or (
        getattr(loss_fn, "__module__", None) == "torch.nn.functional"
    )


def shape_mismatch(outputs: torch.Tensor, target: torch.Tensor) -> str:
    """The sentence for a loss given outputs and targets of different shapes: both shapes, whether they
    broadcast, and the fix."""
    out, tgt = tuple(outputs.shape), tuple(target.shape)
    try:
        shape = tuple(torch.broadcast_shapes(outputs.shape, target.shape))
        broadcast = f"they broadcast to {shape}, so the loss would be wrong without an error"
    except RuntimeError:
        broadcast = "they do not broadcast"
    fix = "Make them match"
    if (extra := _singleton_at(out, tgt)) is not None:  # (B, 1) against (B,); (B, 1, H, W) against (B, H, W)
        fix += (
            f": targets as {out} (y.unsqueeze({extra}), or TensorDataset(x, y.unsqueeze({extra}))) or "
            f"outputs as {tgt} (model(x).squeeze({extra}))"
        )
    elif (missing := _singleton_at(tgt, out)) is not None:
        grow = "a last layer with 1 output" if missing == len(out) else f"model(x).unsqueeze({missing})"
        fix += f": outputs as {tgt} ({grow}) or targets as {out} (y.squeeze({missing}))"
    elif class_column(out, tgt):
        fix += " (a column of class indices? cross_entropy takes them as integers, one per sample: "
        fix += "y.squeeze(1).long())"
    elif target.is_floating_point() and len(out) == len(tgt) + 1:
        fix += " (class-index targets for cross_entropy must be integers: y.long())"
    return f"loss_fn got outputs of shape {out} and targets of shape {tgt}: {broadcast}. {fix}"


def _singleton_at(longer: tuple[int, ...], shorter: tuple[int, ...]) -> int | None:
    """The dimension of size 1 in `longer` without which it is `shorter`, e.g. 1 for (4, 1, 8) and (4, 8)."""
    if len(longer) != len(shorter) + 1:
        return None
    return next(
        (d for d, size in enumerate(longer) if size == 1 and longer[:d] + longer[d + 1 :] == shorter), None
    )


def raise_explained(error: BaseException, explained: str | None, prefix: str = "") -> NoReturn:
    """Raise ValueError(`prefix` + `explained`) from `error`; `error` itself when there is no explanation.
    Call it from the ``except`` block that caught `error`."""
    if explained is None:
        raise error
    raise ValueError(prefix + explained) from error


def _unused_parameters(model: torch.nn.Module, message: str) -> str:
    """DDP's "Expected to have finished reduction" (at the step after one whose loss left parameters without
    a gradient) as the parameters' names and the two fixes."""
    module = _inner_module(model)  # DDP's own indices count its module's trained parameters
    names = [name for name, parameter in module.named_parameters() if parameter.requires_grad]
    indices = re.search(r"Parameter indices which did not receive grad for rank \d+: ([\d ]+)", message)
    named = re.search(r"Parameters which did not receive grad for rank \d+: (.+)", message)  # DEBUG=DETAIL
    if indices is not None:
        unused = [names[int(i)] if int(i) < len(names) else f"#{i}" for i in indices[1].split()]
    else:
        unused = named[1].strip().split(", ") if named is not None else ["some"]
    shown = ", ".join(unused[:6]) + (f" and {len(unused) - 6} more" if len(unused) > 6 else "")
    return (
        f"the model's parameters {shown} got no gradient from the last step's loss, and DDP all-reduces "
        "every parameter's gradient in each step: if they serve on some steps only (a branch, an auxiliary "
        "head), give strategy=DataParallel(find_unused_parameters=True); if never, freeze them "
        "(p.requires_grad_(False)) or leave them out of the model"
    )


def _inner_module(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside a compiled (``TrainConfig(compile=...)``) and a DDP wrapper."""
    module = getattr(model, "_orig_mod", model)
    return getattr(module, "module", module)


def _mixed_devices(model: torch.nn.Module, message: str) -> str | None:
    """A forward that mixed devices: the plain tensor attributes ``.to(device)`` left behind (not parameters
    nor buffers), or the tensors the forward makes; None for another error."""
    if not any(words in message for words in DEVICE_WORDS):
        return None
    module = _inner_module(model)
    device = next((p.device for p in module.parameters()), None)
    left = [
        f"{prefix}{'.' if prefix else ''}{name} ({tuple(value.shape)} on {value.device})"
        for prefix, part in module.named_modules()
        for name, value in vars(part).items()
        if isinstance(value, torch.Tensor) and value.device != device
    ]
    if left:
        kind = "is a plain tensor attribute" if len(left) == 1 else "are plain tensor attributes"
        return (
            f"the model's forward mixes devices: the Trainer moved its parameters and buffers to {device}, "
            f"but {', '.join(left[:4])} {kind}, which .to(device) leaves where it is: register it as a "
            "buffer in __init__ (self.register_buffer('name', tensor)) and it moves with the model"
        )
    return (
        f"the model's forward mixes devices: its parameters are on {device}, and a tensor it makes without "
        "device= (torch.zeros(n), torch.arange(T), torch.tensor(...)) stays on the CPU: make it where the "
        "inputs are (torch.arange(T, device=x.device)), or keep it as a buffer (self.register_buffer(...))"
    )


def _parameter_dtype(model: torch.nn.Module) -> torch.dtype | None:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), None)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _describe(inputs: Any) -> str:
    if isinstance(inputs, torch.Tensor):
        return f"inputs {tuple(inputs.shape)}"
    return f"inputs of type {type(inputs).__name__}"
