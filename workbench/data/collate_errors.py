"""Say why torch's default ``collate_fn`` could not put a dataset's samples in a batch, and what to change.

torch says "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found <class
'PIL.Image.Image'>" or "stack expects each tensor to be equal size" from deep inside the DataLoader (or, with
workers, inside "Caught TypeError in DataLoader worker process 0" and a worker's traceback, where unequal
shapes read "Trying to resize storage that is not resizable"). `explained` wraps a loader's batches and turns
those errors into one sentence naming the samples and the fix; an error of the user's own dataset or
``collate_fn`` passes untouched. Any failure ends the loader's worker processes at once (`worker_exit`).

Example:
    >>> import torch
    >>> from torch.utils.data import DataLoader
    >>> ragged = [(torch.zeros(n), 0) for n in (3, 4)]
    >>> next(explained(DataLoader(ragged, batch_size=2)))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the dataset's samples differ in shape (stack expects each tensor to be equal size, ...
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data._utils.collate import default_collate

from workbench.data.batch import describe_batch
from workbench.data.worker_exit import end_workers

COLLATE_SOURCE = "_utils/collate.py"  # the file of torch's default_collate, in a traceback
# What a worker's default collate says of samples of unequal shapes: it sizes a shared-memory batch from
# the first sample, and resizing it for the others fails before torch.stack could name the shapes.
UNEQUAL_IN_WORKER = "Trying to resize storage that is not resizable"


def explained(loader: DataLoader, iterator: Iterator[Any] | None = None) -> Iterator[Any]:
    """The batches of `loader` (from `iterator`, one it started); a failure of torch's default collate says
    what to change (ValueError). Any error (or an interrupt) ends the loader's worker processes first."""
    iterator = iter(loader) if iterator is None else iterator
    try:
        yield from iterator
    except GeneratorExit:  # the consumer stopped early: persistent workers stay for the next epoch
        raise
    except BaseException as error:
        end_workers(loader, iterator)
        said = explain_collate_error(loader, error) if isinstance(error, TypeError | RuntimeError) else None
        if said is None:
            raise
        raise ValueError(said) from error


def explain_collate_error(loader: DataLoader, error: BaseException) -> str | None:
    """One sentence on why torch's default collate failed on `loader`'s samples, or None when the error
    came from elsewhere (the dataset, a collate_fn of the user's)."""
    if loader.collate_fn is not default_collate or not _from_default_collate(error):
        return None
    words = _torch_words(error)
    sample = _first_sample(loader)
    shown = f" ({describe_batch(sample)} each)" if sample is not None else ""
    if _holds_image(sample):
        return (
            f"the dataset's samples hold PIL images{shown}, which torch cannot put in a batch: convert each "
            "to a tensor in the dataset (torchvision's transforms.PILToTensor() or ToTensor() in its "
            "transform), or give LoaderConfig(collate_fn=...) that builds the batch"
        )
    if UNEQUAL_IN_WORKER in words:  # a worker's words for unequal shapes: name two samples that differ
        differ = _unequal_samples(loader, sample) or f"{words}, in a DataLoader worker"
    else:
        differ = words if "equal size" in words else None
    if differ is not None:
        return (
            f"the dataset's samples differ in shape ({differ}): torch's default collate_fn stacks samples of "
            "one shape; pad them in a collate_fn (LoaderConfig(collate_fn=...), e.g. with "
            "torch.nn.utils.rnn.pad_sequence), or crop or resize them in the dataset"
        )
    return (
        f"torch's default collate_fn cannot put the dataset's samples{shown} in a batch ({words}): return "
        "tensors, numbers or arrays (or tuples and dicts of them) from the dataset, or give "
        "LoaderConfig(collate_fn=...) that builds the batch"
    )


def _from_default_collate(error: BaseException) -> bool:
    """Whether `error` was raised inside torch's default collate (here, or in a worker: then its text holds
    the worker's traceback)."""
    if COLLATE_SOURCE in str(error):
        return True
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and frame.tb_frame.f_code.co_filename.replace("\\", "/").endswith(COLLATE_SOURCE)


def _torch_words(error: BaseException) -> str:
    """torch's own message: the last line of a worker's traceback, or the error's text."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else type(error).__name__
    return last.split(": ", 1)[1] if last.startswith(f"{type(error).__name__}: ") else last


def _first_sample(loader: DataLoader) -> Any:
    """The dataset's first sample, to show what a sample holds; None when it cannot be had cheaply."""
    if isinstance(loader.dataset, IterableDataset):
        return None
    try:
        return loader.dataset[0]
    except Exception:  # the user's dataset: showing a sample is a courtesy, its error is not ours to raise
        return None


def _unequal_samples(loader: DataLoader, first_sample: Any) -> str | None:
    """Two samples of a batch's worth from the start of a map-style dataset that differ (`first_sample`, from
    `_first_sample`, against the next ones), as "samples 0 and 1 are (1,) float32 and (2,) float32", or None
    when none differ there or the dataset gives no samples cheaply."""
    if first_sample is None:  # an iterable dataset, or one whose first sample failed
        return None
    first = describe_batch(first_sample)
    try:
        for index in range(1, min(len(loader.dataset), loader.batch_size or 1)):
            other = describe_batch(loader.dataset[index])
            if other != first:
                return f"samples 0 and {index} are {first} and {other}"
    except Exception:  # the user's dataset: as in _first_sample
        return None
    return None


def _holds_image(sample: Any) -> bool:
    if isinstance(sample, dict):
        return any(_holds_image(part) for part in sample.values())
    if isinstance(sample, tuple | list):
        return any(_holds_image(part) for part in sample)
    return type(sample).__module__.startswith("PIL.")
