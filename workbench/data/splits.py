"""Train/val/test splits: deterministic by seed for workbench datasets, and `as_splits`, which takes the
shapes users bring (one dataset, a ``random_split`` tuple, a dict, an object with ``.train``)."""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from workbench._validate import check_int
from workbench.data.datasets import Dataset

SPLIT_NAMES = ("train", "val", "test")
# other names of the splits, as dict keys or attributes: Hugging Face's DatasetDict says "validation"
SPLIT_ALIASES = {"training": "train", "validation": "val", "valid": "val", "testing": "test"}


@dataclass(frozen=True)
class Splits:
    """The three disjoint parts of a dataset; val and test may be left out (None).

    Each part is a workbench `Dataset` (the in-memory fast path), any map-style or iterable
    ``torch.utils.data.Dataset``, or a ``DataLoader``.

    Example:
        >>> import torch
        >>> from torch.utils.data import TensorDataset, random_split
        >>> data = TensorDataset(torch.randn(100, 3), torch.randn(100, 1))
        >>> train, val = random_split(data, [80, 20], generator=torch.Generator().manual_seed(0))
        >>> Splits(train, val=val).sizes()
        {'train': 80, 'val': 20, 'test': 0}
    """

    train: Any
    val: Any = None
    test: Any = None

    def sizes(self) -> dict[str, int | None]:
        """Samples in each split (None where unknown: an iterable dataset without ``__len__``), e.g.
        ``{'train': 1437, 'val': 180, 'test': 180}``."""
        return {name: split_size(getattr(self, name)) for name in SPLIT_NAMES}


def split_size(split: Any) -> int | None:
    """Samples in one split (0 for None; a DataLoader's dataset's; None when it has no length).

    Example:
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> data = TensorDataset(torch.zeros(100, 3))
        >>> split_size(data), split_size(DataLoader(data, batch_size=8)), split_size(None)
        (100, 100, 0)
    """
    if split is None:
        return 0
    if isinstance(split, DataLoader):
        split = split.dataset
    try:
        return len(split)
    except TypeError:
        return None


ACCEPTED = (
    "a workbench Dataset or Splits, a torch.utils.data Dataset (map-style or IterableDataset), a "
    "DataLoader, a tuple/list (train, val, test) of those (val and test optional, None allowed), a dict "
    "with 'train' (and optionally 'val', 'test'), or an object with .train/.val/.test attributes"
)


def as_splits(data: Any, argument: str = "splits") -> Splits:
    """`data` as `Splits`, whatever shape of "my data" it came in; TypeError naming `argument` otherwise.

    Example:
        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> data = TensorDataset(torch.randn(10, 3), torch.arange(10))
        >>> as_splits(data).sizes(), as_splits((data, data)).sizes()["val"]
        ({'train': 10, 'val': 0, 'test': 0}, 10)
        >>> as_splits((torch.randn(10, 3), torch.arange(10)))
        Traceback (most recent call last):
        ...
        TypeError: splits must be ...; got a tuple of (Tensor, Tensor). ...TensorDataset(x, y)
    """
    if (table := _table(data)) is not None:
        raise TypeError(f"{argument} is {table}")
    if isinstance(data, Splits):
        parts = (data.train, data.val, data.test)
    elif isinstance(data, Mapping):
        parts = _named_parts(data, argument)
    elif isinstance(data, tuple | list) and not _is_dataset(data):
        if not 1 <= len(data) <= 3 or not all(part is None or _is_dataset(part) for part in data):
            kinds = ", ".join(type(part).__name__ for part in data[:4])
            raise TypeError(
                f"{argument} must be {ACCEPTED}; got a {type(data).__name__} of ({kinds}){_hint(data)}"
            )
        if _features_and_targets(data):  # (X, y) arrays would train on X and validate on y
            kinds = ", ".join(_kind(part) for part in data)
            raise TypeError(
                f"{argument} must be {ACCEPTED}; got a {type(data).__name__} of ({kinds}), read as "
                "(train, val). Arrays of features and targets: wrap them as "
                "torch.utils.data.TensorDataset(torch.as_tensor(x), torch.as_tensor(y))"
            )
        parts = (*data, None, None)[:3]
    elif _is_dataset(data):
        parts = (data, None, None)
    elif isinstance(data, torch.nn.Module):  # its .train() and .training are no splits
        raise TypeError(f"{argument} is a model ({type(data).__name__}), not data: give {ACCEPTED}")
    elif hasattr(data, "train") or hasattr(data, "training"):
        named = {key: getattr(data, key) for key in (*SPLIT_NAMES, *SPLIT_ALIASES) if hasattr(data, key)}
        parts = _named_parts(named, argument, "an object with the attributes")
    elif isinstance(data, Iterator):  # a generator: read once, and every epoch must read the data again
        raise TypeError(
            f"{argument} must be {ACCEPTED}; got a {type(data).__name__}, which can be read only once. Wrap "
            "the code that makes it in an IterableDataset whose __iter__ starts it again each epoch (a class "
            "Samples(torch.utils.data.IterableDataset) with def __iter__(self): yield from your_generator())"
        )
    else:
        raise TypeError(f"{argument} must be {ACCEPTED}; got {type(data).__name__}")
    for name, part in zip(SPLIT_NAMES, parts, strict=True):
        if part is not None and not _is_dataset(part):
            raise TypeError(
                f"{argument}.{name} must be a dataset or DataLoader ({ACCEPTED}); got {_split_kind(part)}"
            )
    if parts[0] is None:
        raise TypeError(f"{argument}.train is None; give a training split ({ACCEPTED})")
    return Splits(*parts)


def _named_parts(
    data: Mapping[Any, Any], argument: str, what: str = "a dict with the keys"
) -> tuple[Any, ...]:
    """(train, val, test) of a dict (or an object's attributes) keyed by split names or their aliases;
    TypeError naming an unknown key or two keys for one split."""
    parts: dict[str, Any] = {}
    for key, part in data.items():
        name = key if key in SPLIT_NAMES else SPLIT_ALIASES.get(key)
        if name is None:
            close = difflib.get_close_matches(str(key), [*SPLIT_NAMES, *SPLIT_ALIASES], n=1)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(
                f"{argument} as {what} {sorted(map(str, data))}: {key!r} is no split{guess}; the splits are "
                f"'train' (needed), 'val' and 'test' (optional), also named "
                f"{', '.join(map(repr, SPLIT_ALIASES))}"
            )
        if name in parts:
            raise TypeError(f"{argument} names the {name} split twice: {sorted(map(str, data))}; keep one")
        parts[name] = part
    if "train" not in parts:
        raise TypeError(
            f"{argument} as {what} {sorted(map(str, data))} has no 'train' (or 'training') split; give "
            "the data to train on under 'train'"
        )
    return tuple(parts.get(name) for name in SPLIT_NAMES)


def _is_dataset(value: Any) -> bool:
    """A workbench Dataset, a torch Dataset or DataLoader, or a duck-typed map-style dataset."""
    if isinstance(value, Dataset | torch.utils.data.Dataset | DataLoader):
        return True
    if isinstance(value, torch.Tensor | str | bytes | Mapping | tuple | list) or _table(value) is not None:
        return False
    return hasattr(value, "__getitem__") and hasattr(value, "__len__")


def _table(value: Any) -> str | None:
    """A pandas or polars table (its [] picks columns, not samples: no dataset), described with the fix; or
    None."""
    library = type(value).__module__.split(".")[0]
    if library not in ("pandas", "polars") or not hasattr(value, "shape"):
        return None
    return (
        f"a {library} {type(value).__name__} {tuple(value.shape)}, whose [] picks columns, not samples: make "
        "tensors of its features and targets, TensorDataset(torch.tensor(df[features].to_numpy(), "
        "dtype=torch.float32), torch.tensor(df[target].to_numpy()))"
    )


def _hint(data: tuple | list) -> str:
    """What a tuple or list that is not (train, val, test) most likely is, and how to pass it."""
    tables = [table for table in map(_table, data[:3]) if table is not None]
    if tables:
        return f". Each split is {tables[0]}"
    if any(type(part).__name__ == "Tensor" for part in data[:3]):
        return ". Tensors of features and targets: wrap them as torch.utils.data.TensorDataset(x, y)"
    if len(data) > 3 or any(isinstance(part, tuple | list) for part in data):
        return (
            f". A list of {len(data)} samples is one dataset: stack them into tensors, "
            "TensorDataset(torch.stack(inputs), torch.stack(targets)), or give it a Dataset class"
        )
    return ""


def _features_and_targets(data: tuple | list) -> bool:
    """Two arrays (not datasets) of the same length, the second one value per sample (shape (N,) or (N, 1)):
    X and y."""
    if len(data) != 2 or any(
        isinstance(part, Dataset | torch.utils.data.Dataset | DataLoader) for part in data
    ):
        return False
    shapes = [getattr(part, "shape", None) for part in data]
    if not all(shapes) or shapes[0][0] != shapes[1][0]:
        return False
    return tuple(shapes[1][1:]) in ((), (1,))


def _split_kind(part: Any) -> str:
    """What a split that is not a dataset is, and for arrays of features and targets how to wrap them."""
    if (table := _table(part)) is not None:
        return table
    if not (isinstance(part, tuple | list) and part and all(hasattr(array, "shape") for array in part)):
        return _kind(part)
    kinds = ", ".join(_kind(array) for array in part)
    return (
        f"a {type(part).__name__} of ({kinds}). Arrays of features and targets: wrap them as "
        "torch.utils.data.TensorDataset(torch.as_tensor(x), torch.as_tensor(y))"
    )


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {tuple(value.shape)}" if hasattr(value, "shape") else type(value).__name__


def split_indices(
    n: int, fractions: Sequence[float] = (0.8, 0.1, 0.1), *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Disjoint index tensors (train, val, test) of a random permutation of ``range(n)``.

    Each part gets ``floor(fraction·n)`` samples; when the fractions sum to 1 the few samples left by
    rounding go to train, when they sum to less the rest is left out (a quick way to subsample).

    Example:
        >>> train, val, test = split_indices(1797, (0.8, 0.1, 0.1), seed=0)
        >>> len(train), len(val), len(test), len(set(train.tolist()) | set(val.tolist()) | set(test.tolist()))
        (1439, 179, 179, 1797)
    """
    fractions = _checked_fractions(fractions)
    check_int("seed", seed, minimum=0)
    check_int("n", n, minimum=0)
    order = torch.from_numpy(np.random.default_rng(seed).permutation(n).astype(np.int64))
    n_val, n_test = (int(f * n) for f in fractions[1:])
    n_train = n - n_val - n_test if abs(sum(fractions) - 1.0) < 1e-9 else int(fractions[0] * n)
    return (
        order[:n_train],
        order[n_train : n_train + n_val],
        order[n_train + n_val : n_train + n_val + n_test],
    )


def split_dataset(dataset: Dataset, fractions: Sequence[float] = (0.8, 0.1, 0.1), *, seed: int = 0) -> Splits:
    """Split ``dataset`` into train/val/test by ``fractions``; the same seed gives the same split.

    Args:
        dataset: what to split.
        fractions: (train, val, test), each ≥ 0, summing to at most 1.
        seed: seed of the shuffling.

    Example:
        >>> from workbench.data import load_dataset
        >>> split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0).sizes()
        {'train': 1439, 'val': 179, 'test': 179}
    """
    train, val, test = split_indices(len(dataset), fractions, seed=seed)
    return Splits(dataset.subset(train), dataset.subset(val), dataset.subset(test))


def _checked_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    allowed = "a sequence of 3 numbers (train, val, test), each ≥ 0, summing to at most 1"
    try:
        values = tuple(float(f) for f in fractions)
    except (TypeError, ValueError):
        raise ValueError(f"fractions must be {allowed}; got {fractions!r}") from None
    if len(values) != 3 or any(not f >= 0 for f in values) or sum(values) > 1 + 1e-9:
        raise ValueError(f"fractions must be {allowed}; got {fractions!r}")
    return values
