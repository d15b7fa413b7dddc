"""A ``TensorDataset`` (or `random_split`'s ``Subset`` of one) served a batch at a time.

A ``DataLoader`` fetches a map-style dataset's samples one by one and stacks them: for a TensorDataset,
whose samples are rows of tensors already in memory, that is a Python call per sample and a stack per
tensor per batch. `BatchedTensors` gives the DataLoader ``__getitems__`` (torch's batched fetch), which
indexes each tensor once with the batch's indices; `already_batched` is the collate function that keeps the
result. The batches are equal to the sample-by-sample ones, in the same order (the loader's sampler is
unchanged); workers, pinning and prefetching work as before.

Example:
    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset, random_split
    >>> data = TensorDataset(torch.arange(10.0).unsqueeze(1), torch.arange(10))
    >>> train, _ = random_split(data, [6, 4], generator=torch.Generator().manual_seed(0))
    >>> fast = batched_tensors(train)
    >>> batches = zip(DataLoader(fast, 4, collate_fn=already_batched), DataLoader(train, 4), strict=True)
    >>> all(torch.equal(a, b) for got, want in batches for a, b in zip(got, want, strict=True))
    True
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset, Subset, TensorDataset


class BatchedTensors(Dataset):
    """`source`'s samples (rows `index` of `tensors`, or all rows), fetched a batch at a time."""

    def __init__(
        self, source: Dataset, tensors: tuple[torch.Tensor, ...], index: torch.Tensor | None
    ) -> None:
        self.source, self.tensors, self.index = source, tensors, index

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        return self.source[i]

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        rows = torch.as_tensor(indices, dtype=torch.long)
        if self.index is not None:
            rows = self.index[rows]
        return [tensor[rows] for tensor in self.tensors]

    def __repr__(self) -> str:
        return f"BatchedTensors({type(self.source).__name__}, {len(self)} samples)"


def already_batched(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    """The collate function for `BatchedTensors`: its ``__getitems__`` returns the batch, as
    ``default_collate`` would have built it from the samples (a list with one tensor per field)."""
    return batch


def batched_tensors(dataset: Any) -> BatchedTensors | None:
    """`dataset` as `BatchedTensors` when it is a TensorDataset or a chain of Subsets of one (exact types:
    a subclass may change what a sample is); else None."""
    maps = []
    source = dataset
    while type(source) is Subset:
        maps.append(torch.as_tensor(source.indices, dtype=torch.long))
        source = source.dataset
    if type(source) is not TensorDataset:
        return None
    index = maps[0] if maps else None
    for inner in maps[1:]:  # sample i of the outer Subset is row inner[...outer[i]] of the tensors
        index = inner[index]
    return BatchedTensors(dataset, tuple(source.tensors), index)
