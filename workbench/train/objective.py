"""How a batch becomes a loss, three ways, and the checks that catch a wrong loss on the first batch.

1. ``loss_fn(model(inputs), target)`` for ``(inputs, target)`` batches (``F.cross_entropy``, ``F.mse_loss``);
   ``loss_fn(model(x1, x2), target)`` for ``(x1, x2, target)``.
2. ``step_fn(model, batch) -> loss`` or ``-> (loss, outputs)``, for any batch structure.
3. Neither (``loss_fn=None``): the model computes its own loss. A dict batch is passed as ``model(**batch)``,
   a tuple as ``model(*batch)``; the loss is the result itself (a scalar tensor), its ``.loss`` or
   ``["loss"]``, or the scalar in a returned tuple (``(logits, loss)`` or ``(loss, logits)``).

On the first batch the loss must be a floating scalar tensor that requires grad, and a torch `loss_fn`
(``F.mse_loss``, ``nn.L1Loss()``, ...) must get outputs and floating-point targets of the same shape (a
``(B, 1)`` output against ``(B,)`` targets broadcasts to ``(B, B)`` and gives a wrong loss silently), as must
a torch loss inside a `loss_fn` of yours; otherwise training stops before any update with a message that
shows the shapes and the fix.

    >>> import torch
    >>> objective = Objective(torch.nn.functional.mse_loss)
    >>> model = torch.nn.Linear(3, 1)
    >>> loss, outputs = objective(model, (torch.randn(4, 3), torch.randn(4)))
    Traceback (most recent call last):
    ...
    ValueError: loss_fn got outputs of shape (4, 1) and targets of shape (4,): they broadcast to (4, 4), ...
"""

from __future__ import annotations

import inspect
import itertools
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from workbench._validate import refuse_class
from workbench.data import Dataset, batch_size_of, describe_batch
from workbench.train.diagnose import (
    BROADCAST_WARNING,
    explain_loss_error,
    explain_model_error,
    is_torch_loss,
    raise_explained,
    shape_mismatch,
)
from workbench.train.metrics import Accuracy, Metric, MetricError, as_metric
from workbench.train.predictions import is_classification

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
StepFn = Callable[[torch.nn.Module, Any], Any]


class Objective:
    """The loss of a batch (one of the three ways in the module doc) and the metrics to evaluate.

    Args:
        loss_fn: ``loss_fn(outputs, target) -> scalar tensor``, or None.
        step_fn: ``step_fn(model, batch) -> loss | (loss, outputs)``; only with ``loss_fn=None``.
        metrics: name → ``fn(outputs, batch) -> float`` or a `Metric`, evaluated on val/test.
        classification: add accuracy to the metrics; None: decide from the first batch (class scores
            ``(..., C)`` against integer targets ``(...)``).
    """

    def __init__(
        self,
        loss_fn: LossFn | None,
        step_fn: StepFn | None = None,
        metrics: Mapping[str, Any] | None = None,
        *,
        classification: bool | None = None,
    ) -> None:
        fix = "give an instance, loss_fn={name}(), or a function such as torch.nn.functional.cross_entropy"
        refuse_class("loss_fn", loss_fn, fix)
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(
                f"loss_fn must be a function loss_fn(outputs, target) -> scalar tensor (e.g. "
                f"torch.nn.functional.cross_entropy), or None when the model computes its loss; got "
                f"{type(loss_fn).__name__}"
            )
        if step_fn is not None and not callable(step_fn):
            raise TypeError(
                f"step_fn must be a function step_fn(model, batch) -> loss; got {type(step_fn).__name__}"
            )
        if loss_fn is not None and step_fn is not None:
            raise ValueError(
                "give loss_fn or step_fn, not both: step_fn computes the loss itself (pass loss_fn=None)"
            )
        if metrics is not None and not isinstance(metrics, Mapping):
            raise TypeError(
                f"metrics must be a dict of name -> fn(outputs, batch), e.g. {{'mae': mae}}; got "
                f"{type(metrics).__name__}"
            )
        self.loss_fn, self.step_fn = loss_fn, step_fn
        self.metrics = {str(k): as_metric(str(k), m, batch_size_of) for k, m in (metrics or {}).items()}
        self.classification = classification
        self._checked_shapes = False
        self._loss_device: torch.device | None = None  # where a loss module's tensors were last seen to be
        self._checked_grad = False
        self._checked_metrics = not self.metrics  # the user's metrics tried on the first training batch

    @classmethod
    def for_data(cls, loss_fn: Any, step_fn: Any, metrics: Mapping[str, Any] | None, train: Any) -> Objective:
        """The objective for training on `train`: classification as a workbench `Dataset`'s task says, else
        decided from the first batch."""
        task = train.task if isinstance(train, Dataset) else None
        classification = None if task is None else task == "classification"
        return cls(loss_fn, step_fn, metrics, classification=classification)

    @property
    def source(self) -> str:
        """Who computes the loss, for messages: "loss_fn", "step_fn" or "the model"."""
        return (
            "loss_fn" if self.loss_fn is not None else "step_fn" if self.step_fn is not None else "the model"
        )

    def samples(self, batch: Any) -> int:
        """Samples in `batch` (the leading dimension of its first tensor)."""
        return batch_size_of(batch)

    def pair(self, batch: Any) -> tuple[Any, Any]:
        """``(inputs, target)`` of a batch for `loss_fn`: the last element is the target, and several inputs
        before it are `ModelInputs`; TypeError with the fix for any other shape."""
        if isinstance(batch, tuple | list) and len(batch) == 2:
            return batch[0], batch[1]
        if isinstance(batch, tuple | list) and len(batch) > 2:
            return ModelInputs(batch[:-1]), batch[-1]
        raise TypeError(
            f"with loss_fn, batches must be (inputs, target) or (input1, input2, ..., target); this batch is "
            f"{describe_batch(batch)}. "
            "Give a collate_fn (LoaderConfig) that returns (inputs, target), or pass loss_fn=None with "
            "step_fn=lambda model, batch: ... (or a model that returns its own loss)"
        )

    def __call__(self, model: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, Any]:
        """The loss and the outputs of `model` on `batch` (already on the model's device)."""
        if self.loss_fn is not None:
            inputs, target = self.pair(batch)
            try:
                outputs = forward(model, inputs)
            except (RuntimeError, ValueError, TypeError) as error:
                explained = several_inputs_fix(model, inputs, batch) or explain_model_error(
                    model, inputs, error
                )
                raise_explained(error, explained)
            if self._checked_shapes:
                loss = self._loss(outputs, target)
            else:
                self._checked_shapes = True
                loss = self._first_loss(outputs, target)
        elif self.step_fn is not None:
            loss, outputs = unpack_loss(self.step_fn(model, batch), "step_fn")
        else:
            loss, outputs = unpack_loss(call_model(model, batch), "the model")
        if not self._checked_grad:
            check_loss(loss, self.source, training=torch.is_grad_enabled() and model.training)
            self._checked_grad = torch.is_grad_enabled() and model.training
        if self.classification is None:
            self.classification = is_classification(outputs, batch)
        if not self._checked_metrics:
            self._check_metrics(outputs, batch)
        return loss, outputs

    def _check_metrics(self, outputs: Any, batch: Any) -> None:
        """Each of the user's metrics on the first training batch, before any step: one that raises or
        returns no number would otherwise fail at the first evaluation, an epoch later."""
        self._checked_metrics = True
        if outputs is None:  # a loss alone: the metrics would fail at the first evaluation, an epoch later
            fix = (
                "return (loss, outputs) from step_fn"
                if self.step_fn is not None
                else "have the model return (loss, outputs), or a dict or object with the loss and 'logits'"
            )
            raise MetricError(
                f"metrics {sorted(self.metrics)} are computed from the outputs, and {self.source} returned "
                f"only the loss: {fix}"
            )
        with torch.no_grad():
            for name, metric in self.metrics.items():
                try:
                    metric.sums(outputs, batch)  # under no_grad: nothing reaches the graph
                except Exception as error:  # the user's code: name the metric, keep its error as the cause
                    raise MetricError(
                        f"metrics[{name!r}] failed on the first training batch, before any step (it runs on "
                        f"val after each epoch and on test at the end): {error}"
                    ) from error

    def evaluate(
        self, model: torch.nn.Module, batch: Any, predict: Callable[[torch.nn.Module, Any], Any]
    ) -> tuple[torch.Tensor | None, Any]:
        """Loss and outputs for evaluation; ``(None, None)`` on a rank with no output (a pipeline stage
        before the last). `predict` is the strategy's forward for `loss_fn` inputs."""
        if self.loss_fn is None:
            return self(model, batch)
        inputs, target = self.pair(batch)
        try:
            outputs = predict(model, inputs)
        except (RuntimeError, ValueError, TypeError) as error:  # e.g. a val split of another width
            raise_explained(error, explain_model_error(model, inputs, error), "on an evaluation batch, ")
        if outputs is None:
            return None, None
        if self.classification is None:
            self.classification = is_classification(outputs, batch)
        return self._loss(outputs, target), outputs

    def _first_loss(self, outputs: Any, target: Any) -> torch.Tensor:
        """The first batch's loss. Outputs and float targets of different shapes are refused before a torch
        loss (it would broadcast them, or fail deep inside); a loss of yours may reshape them itself, and is
        stopped only when a torch loss inside it warns that it broadcast the target."""
        if not (isinstance(outputs, torch.Tensor) and isinstance(target, torch.Tensor)):
            return self._loss(outputs, target)
        if outputs.shape == target.shape:
            return self._loss(outputs, target)
        if target.is_floating_point() and is_torch_loss(self.loss_fn):
            raise ValueError(shape_mismatch(outputs, target))
        try:
            torch.broadcast_shapes(outputs.shape, target.shape)
        except RuntimeError:  # no silent broadcast: the loss raises, and `_loss` names the mismatch
            return self._loss(outputs, target)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=BROADCAST_WARNING, category=UserWarning)
            try:
                return self._loss(outputs, target)
            except UserWarning as warning:
                explained = explain_loss_error(outputs, target, warning) or shape_mismatch(outputs, target)
                raise ValueError(explained) from warning

    def _loss(self, outputs: Any, target: Any) -> torch.Tensor:
        """``loss_fn(outputs, target)``; a mismatch torch reports deep inside is named (`diagnose`). A loss
        module's tensors (class weights, ``pos_weight``) go where the outputs are, as the model went to its
        device (torch would refuse the CPU weights of ``nn.CrossEntropyLoss(weight=w)`` on a GPU)."""
        moved = isinstance(outputs, torch.Tensor) and outputs.device != self._loss_device
        if moved and isinstance(self.loss_fn, torch.nn.Module):  # checked once per device, not per batch
            held = next(itertools.chain(self.loss_fn.parameters(), self.loss_fn.buffers()), None)
            if held is not None and held.device != outputs.device:
                self.loss_fn.to(outputs.device)
            self._loss_device = outputs.device
        try:
            return self.loss_fn(outputs, target)
        except (RuntimeError, IndexError, ValueError, TypeError, AttributeError) as error:
            raise_explained(error, explain_loss_error(outputs, target, error))

    def evaluation_metrics(self) -> dict[str, Metric]:
        """The metrics evaluated on val/test: accuracy for classification, then the user's."""
        defaults = {"accuracy": Accuracy()} if self.classification else {}
        return {**defaults, **self.metrics}


class ModelInputs(tuple):
    """The inputs of a batch of several, ``(x1, x2)`` of ``(x1, x2, target)``: `forward` calls
    ``model(x1, x2)``, where one input ``x`` (of ``(x, target)``) is ``model(x)`` whatever it holds."""

    __slots__ = ()


def forward(model: torch.nn.Module, inputs: Any) -> Any:
    """``model(*inputs)`` for `ModelInputs`, ``model(inputs)`` otherwise."""
    return model(*inputs) if isinstance(inputs, ModelInputs) else model(inputs)


def several_inputs_fix(model: torch.nn.Module, inputs: Any, batch: Any) -> str | None:
    """Why ``model(x1, x2)`` of an ``(x1, x2, target)`` batch failed when the model does not take that many
    inputs (a batch with sample weights, say), else None."""
    if not isinstance(inputs, ModelInputs):
        return None
    try:
        inspect.signature(model.forward).bind(*inputs)
    except TypeError:
        forward = f"{type(model).__name__}.forward{inspect.signature(model.forward)}"
        return (
            f"with loss_fn, a batch of {len(batch)}, {describe_batch(batch)}, is {len(inputs)} inputs and "
            f"the target: model(*batch[:-1]), but {forward} does not take {len(inputs)} inputs. For a batch "
            "of other parts (sample weights, ...) give step_fn=lambda model, batch: loss and loss_fn=None"
        )
    except ValueError:  # no signature to read
        return None
    return None


def call_model(model: torch.nn.Module, batch: Any) -> Any:
    """``model(**batch)`` for a dict, ``model(*batch)`` for a tuple/list, ``model(batch)`` otherwise."""
    args, kwargs = (
        ((), dict(batch))
        if isinstance(batch, Mapping)
        else ((tuple(batch), {}) if isinstance(batch, tuple | list) else ((batch,), {}))
    )
    try:
        return model(*args, **kwargs)
    except (RuntimeError, ValueError) as error:
        inputs = args[0] if len(args) == 1 and not kwargs else batch
        raise_explained(error, explain_model_error(model, inputs, error))
    except TypeError:
        try:
            inspect.signature(model.forward).bind(*args, **kwargs)
        except TypeError as mismatch:
            call = "model(**batch)" if kwargs else "model(*batch)" if len(args) > 1 else "model(batch)"
            forward = f"{type(model).__name__}.forward{inspect.signature(model.forward)}"
            raise TypeError(
                f"with loss_fn=None the model computes its loss, called as {call} with "
                f"{describe_batch(batch)}, but {forward} "
                f"does not take that ({mismatch}). For (inputs, target) batches give loss_fn(outputs, "
                "target); for other batches give step_fn(model, batch) -> loss"
            ) from None
        raise


def unpack_loss(result: Any, source: str) -> tuple[torch.Tensor, Any]:
    """(loss, outputs) of what `source` returned; TypeError saying what is accepted otherwise."""
    if isinstance(result, torch.Tensor):
        return result, None
    if isinstance(result, Mapping) and "loss" in result:
        return result["loss"], result
    if isinstance(getattr(result, "loss", None), torch.Tensor):
        return result.loss, result
    if isinstance(result, tuple | list):
        scalars = [i for i, part in enumerate(result) if isinstance(part, torch.Tensor) and part.ndim == 0]
        if scalars:
            rest = [part for i, part in enumerate(result) if i != scalars[0]]
            return result[scalars[0]], rest[0] if len(rest) == 1 else tuple(rest)
    shown = describe_batch(result) if isinstance(result, tuple | list | Mapping) else type(result).__name__
    raise TypeError(
        f"{source} returned {shown}, which holds no loss: return the loss as a scalar tensor, (loss, "
        "outputs), a dict with 'loss', or an object with .loss; or give loss_fn(outputs, target) and have "
        "the model return its outputs"
    )


def check_loss(loss: Any, source: str, *, training: bool) -> None:
    """Raise TypeError/ValueError unless `loss` is a floating scalar tensor (requiring grad in training)."""
    if not isinstance(loss, torch.Tensor):
        raise TypeError(
            f"{source} returned a loss of type {type(loss).__name__}; it must be a scalar tensor "
            "(keep it a tensor: no .item() or float() on it)"
        )
    if loss.ndim != 0 and source == "the model":
        raise ValueError(
            f"the model returned a tensor of shape {tuple(loss.shape)}, not a scalar loss: with loss_fn=None "
            "the model must return its loss (a scalar, .loss or ['loss']). If these are its outputs, give "
            "loss_fn(outputs, target), or step_fn(model, batch) -> loss"
        )
    if loss.ndim != 0:
        raise ValueError(
            f"{source} returned a loss of shape {tuple(loss.shape)}, not a scalar: reduce it over the "
            "batch (reduction='mean', or loss.mean())"
        )
    if not loss.is_floating_point():
        raise ValueError(f"{source} returned a loss of dtype {loss.dtype}; it must be floating point")
    if training and not loss.requires_grad:
        raise ValueError(
            f"{source} returned a loss that does not require grad, so backward cannot train the model: "
            "compute it from the model's outputs without .detach(), .item(), .numpy() or torch.no_grad()"
        )
