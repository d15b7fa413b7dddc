"""`Trainer.predict`: the model's outputs on a dataset, in the data's order, on the CPU.

The data is a split of the trainer's (``"test"``, ``"val"``, ``"train"``), a tensor of inputs, a Dataset or
a DataLoader that does not shuffle. Batches are the training's (the target last, left out) or inputs alone
(a tensor, or a one-element tuple). Every rank predicts the whole data with the forward evaluation uses, so
it works under every strategy (FSDP and tensor parallel ranks join each forward); a pipeline's earlier
stages have no outputs and get None.

Example:
    >>> import torch
    >>> from workbench.presets import build_experiment
    >>> from workbench.train import Trainer
    >>> e = build_experiment("digits-mlp", epochs=1)
    >>> trainer = Trainer(e.model, e.loss_fn, e.splits, e.config, progress=False)
    >>> _ = trainer.fit()
    >>> scores = trainer.predict("test")  # one row of class scores per test sample, in order
    >>> scores.shape, scores.device.type
    (torch.Size([179, 10]), 'cpu')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, TensorDataset

from workbench.data import Dataset as InMemory
from workbench.data import describe_batch
from workbench.train.config import TrainConfig
from workbench.train.objective import Objective, call_model, unpack_loss
from workbench.train.precision import Precision
from workbench.train.predictions import logits_of
from workbench.train.strategy import Strategy

SPLITS = ("train", "val", "test")


def prediction_batches(data: Any, splits: Any, config: TrainConfig) -> Any:
    """The batches to predict on, in order: a split's (whole, not a rank's shard), a tensor's or a dataset's
    in batches of ``config.batch_size``, or a DataLoader's own; ValueError for what has no order to keep."""
    if isinstance(data, str):
        if data not in SPLITS:
            raise ValueError(
                f"data={data!r} is not a split; give 'train', 'val' or 'test', a tensor of inputs, a Dataset "
                "or a DataLoader"
            )
        held = getattr(splits, data)
        if held is None:
            raise ValueError(f"the trainer's data has no {data} split; give the data to predict on instead")
        data = held
    if isinstance(data, torch.Tensor):
        data = TensorDataset(data)
    if isinstance(data, InMemory):  # a workbench dataset: its tensors, sliced below
        data = TensorDataset(data.features, data.targets)
    if isinstance(data, TensorDataset):  # slices of its tensors: no per-sample indexing and stacking
        size, tensors = config.batch_size, data.tensors
        return [tuple(t[i : i + size] for t in tensors) for i in range(0, len(tensors[0]), size)]
    if isinstance(data, DataLoader):
        if isinstance(data.sampler, RandomSampler):
            raise ValueError(
                "the DataLoader shuffles (shuffle=True), so its predictions would come in a random order; "
                "give its dataset, or a DataLoader with shuffle=False"
            )
        return data
    if not isinstance(data, Dataset | IterableDataset):
        raise TypeError(
            f"data must be a split's name, a tensor of inputs, a Dataset or a DataLoader; got "
            f"{type(data).__name__}"
        )
    loader = config.loader  # its workers read files in parallel, as the training's did
    workers = loader.num_workers or 0
    return DataLoader(data, config.batch_size, num_workers=workers, collate_fn=loader.collate_fn)


def predict_outputs(
    model: torch.nn.Module,
    batches: Any,
    strategy: Strategy,
    objective: Objective,
    precision: Precision,
) -> Any:
    """The outputs of `model` (unwrapped from DDP) on every batch of `batches`, joined along the first
    dimension on the CPU: a tensor (a model's ``.logits`` or ``["logits"]``), or a tuple of them; floating
    outputs as float32. None on a rank that computes no outputs (a pipeline stage before the last)."""
    model.eval()
    parts: list[Any] = []
    with torch.no_grad():
        for batch in batches:
            batch = strategy.to_device(batch)
            with precision.autocast():
                outputs = _outputs(model, batch, strategy, objective)
            if outputs is None:
                return None
            parts.append(_on_cpu(outputs, batch))
    if not parts:
        raise ValueError("the data to predict on has no samples")
    if isinstance(parts[0], tuple):
        return tuple(torch.cat(column) for column in zip(*parts, strict=True))
    return torch.cat(parts)


def _outputs(model: torch.nn.Module, batch: Any, strategy: Strategy, objective: Objective) -> Any:
    """The model's outputs for one batch, as training computes them (the target left out)."""
    if objective.loss_fn is not None:
        return strategy.predict(model, _inputs(batch, objective))
    if objective.step_fn is not None:
        return unpack_loss(objective.step_fn(model, batch), "step_fn")[1]
    return call_model(model, batch)  # its logits: `_on_cpu` takes a dict's or an object's


def _inputs(batch: Any, objective: Objective) -> Any:
    """The inputs of a batch: the batch itself when it holds inputs alone (a tensor, a one-element tuple),
    else what training gives the model (`Objective.pair`: all but the target, last)."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, tuple | list) and len(batch) == 1:
        return batch[0]
    return objective.pair(batch)[0]


def _on_cpu(outputs: Any, batch: Any) -> Any:
    """`outputs` on the CPU (floating ones as float32): a tensor, or a tuple of tensors."""
    logits = None if isinstance(outputs, torch.Tensor) else logits_of(outputs)
    if logits is not None:  # a dict's or an object's .logits
        outputs = logits
    elif isinstance(outputs, Mapping):
        raise TypeError(
            f"predict joins tensor outputs; the model returned a dict without 'logits' (keys "
            f"{', '.join(map(repr, outputs))}) for a batch of {describe_batch(batch)}"
        )
    if isinstance(outputs, tuple | list) and all(isinstance(part, torch.Tensor) for part in outputs):
        return tuple(_tensor_on_cpu(part) for part in outputs)
    if isinstance(outputs, torch.Tensor):
        return _tensor_on_cpu(outputs)
    raise TypeError(
        f"predict joins tensor outputs (or a .logits of them); the model returned {type(outputs).__name__} "
        f"for a batch of {describe_batch(batch)}"
    )


def _tensor_on_cpu(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.detach().cpu()
    return tensor.float() if tensor.is_floating_point() else tensor
