"""Offline datasets, built in memory: nothing is downloaded at run time.

- ``digits``: scikit-learn's bundled 8×8 handwritten digits (1,797 images, 10 classes), scaled to [0, 1].
- ``regression``: ``make_regression``-style linear data, y = X·w + b + noise·ε (default 1,000,000 × 10).
- ``synthetic_images``: class templates plus Gaussian noise, for CNN-sized shapes of any size.
- ``text``: windows of a grammar-made character text (`workbench.data.text`), for next-character prediction.

    >>> from workbench.data import load_dataset
    >>> load_dataset("regression", n_samples=1000, noise=0.1)
    Dataset('regression', 1000 samples, features (10,) float32, targets (1,) float32)
"""

from __future__ import annotations

import gzip
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import numpy as np
import torch

from workbench._validate import check_choice, check_int, check_nonnegative
from workbench.data.text import VOCAB, encode, generate_text

TASKS = ("classification", "regression")


@dataclass(frozen=True)
class Dataset:
    """An in-memory dataset: sample ``i`` is ``(features[i], targets[i])``.

    Args:
        name: the registry name it was built from.
        features: float32 tensor, shape ``(N, ...)``, or int64 token ids ``(N, T)`` for text.
        targets: int64 class labels for classification, ``(N,)`` or ``(N, T)`` (one per token); float32
            ``(N, 1)`` for regression.
        task: ``"classification"`` or ``"regression"``.
        num_classes: number of classes (classification only).
        info: how it was made (generator parameters, true coefficients, ...).

    Example (your tensors as one; `load_dataset` gives the built-in ones):
        >>> data = Dataset("xor", torch.randn(100, 2), torch.randint(0, 2, (100,)), "classification", 2)
        >>> len(data), data.features.shape[1:]
        (100, torch.Size([2]))
    """

    name: str
    features: torch.Tensor
    targets: torch.Tensor
    task: str
    num_classes: int | None = None
    info: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice("task", self.task, TASKS)
        if len(self.features) != len(self.targets):
            raise ValueError(
                f"features and targets differ in length: {len(self.features)} != {len(self.targets)}"
            )

    def __len__(self) -> int:
        return len(self.features)

    def subset(self, indices: torch.Tensor) -> Dataset:
        """The samples at ``indices`` (a 1-D int64 tensor), as a new Dataset."""
        return Dataset(
            self.name, self.features[indices], self.targets[indices], self.task, self.num_classes, self.info
        )

    def __repr__(self) -> str:
        shape = tuple(self.features.shape[1:])
        dtype = str(self.features.dtype).removeprefix("torch.")
        if self.task == "classification":
            kind = f"{self.num_classes} classes"
        else:
            tdtype = str(self.targets.dtype).removeprefix("torch.")
            kind = f"targets {tuple(self.targets.shape[1:])} {tdtype}"
        return f"Dataset({self.name!r}, {len(self)} samples, features {shape} {dtype}, {kind})"


def digits() -> Dataset:
    """scikit-learn's bundled handwritten digits: features ``(1797, 1, 8, 8)`` in [0, 1], 10 classes."""
    rows = _digits_rows()
    images = torch.from_numpy(rows[:, :-1].reshape(-1, 1, 8, 8).astype(np.float32) / 16.0)  # (N, 1, 8, 8)
    labels = torch.from_numpy(rows[:, -1].astype(np.int64))  # (N,)
    return Dataset("digits", images, labels, "classification", num_classes=10, info={"source": "sklearn"})


def _digits_rows() -> np.ndarray:
    """scikit-learn's ``digits.csv.gz`` as ``load_digits`` reads it (64 pixels and the label per row), read
    from its file: importing scikit-learn takes ~0.9 s, a fifth of a tutorial's wait for its first step."""
    package = importlib.util.find_spec("sklearn")  # finds the package without importing it
    folders = package.submodule_search_locations if package is not None else None
    path = Path(folders[0]) / "datasets" / "data" / "digits.csv.gz" if folders else None
    if path is None or not path.is_file():  # another layout: scikit-learn's own loader
        from sklearn.datasets import load_digits

        raw = load_digits()
        return np.column_stack([raw.data, raw.target])
    with gzip.open(path, "rt") as text:
        return np.loadtxt(text, delimiter=",")


def regression(
    *, n_samples: int = 1_000_000, n_features: int = 10, noise: float = 0.1, seed: int = 0
) -> Dataset:
    """Linear data y = X·w + b + noise·ε with X, w, b, ε standard normal; the best test MSE is ≈ noise².

    ``info`` holds the true ``coef`` (n_features,) and ``bias`` so learned weights can be compared.
    """
    check_int("n_samples", n_samples, minimum=1)
    check_int("n_features", n_features, minimum=1)
    check_nonnegative("noise", noise)
    rng = np.random.default_rng(seed)
    coef = rng.standard_normal(n_features).astype(np.float32)
    bias = np.float32(rng.standard_normal())
    x = rng.standard_normal((n_samples, n_features), dtype=np.float32)  # (N, F)
    eps = rng.standard_normal(n_samples, dtype=np.float32)
    y = (x @ coef + bias + np.float32(noise) * eps)[:, None]  # (N, 1)
    info = {"coef": coef.tolist(), "bias": float(bias), "noise": float(noise), "seed": seed}
    return Dataset("regression", torch.from_numpy(x), torch.from_numpy(y), "regression", info=info)


def synthetic_images(
    *,
    n_samples: int = 10_000,
    image_size: int = 32,
    channels: int = 3,
    num_classes: int = 10,
    noise: float = 0.5,
    seed: int = 0,
) -> Dataset:
    """Images ``(N, channels, image_size, image_size)``: a smooth random template per class plus noise.

    Learnable by a small CNN; ``noise`` sets how hard (templates have unit variance).
    """
    for name, value, minimum in (
        ("n_samples", n_samples, 1),
        ("image_size", image_size, 4),
        ("channels", channels, 1),
        ("num_classes", num_classes, 2),
    ):
        check_int(name, value, minimum=minimum)
    check_nonnegative("noise", noise)
    rng = np.random.default_rng(seed)
    coarse = torch.from_numpy(rng.standard_normal((num_classes, channels, 4, 4), dtype=np.float32))
    templates = torch.nn.functional.interpolate(
        coarse, size=(image_size, image_size), mode="bilinear", align_corners=True
    )  # (K, C, H, W)
    templates = (templates - templates.mean()) / templates.std()
    labels = torch.from_numpy(rng.integers(0, num_classes, n_samples, dtype=np.int64))  # (N,)
    pixels = rng.standard_normal((n_samples, channels, image_size, image_size), dtype=np.float32)
    images = templates[labels] + noise * torch.from_numpy(pixels)  # (N, C, H, W)
    info = {"noise": float(noise), "seed": seed}
    return Dataset("synthetic_images", images, labels, "classification", num_classes=num_classes, info=info)


def text(*, n_samples: int = 2048, context: int = 32, seed: int = 0) -> Dataset:
    """Next-character prediction on the grammar text of `workbench.data.text`, ``len(VOCAB)`` classes.

    Sample ``i`` is the window ``ids[i·context : (i+1)·context]`` of the encoded text (features ``(N,
    context)`` int64) and the same window shifted by one character (targets ``(N, context)`` int64). The
    windows do not overlap (stride = context), so train, val and test never share a character; the text is
    ``n_samples·context + 1`` characters long. ``info`` holds the ``vocab``, ``context``, ``stride``,
    ``seed`` and the first 300 characters as ``text``.

        >>> from workbench.data.text import decode
        >>> data = text(n_samples=4, context=8)
        >>> decode(data.features[0], data.info["vocab"]), decode(data.targets[0], data.info["vocab"])
        ('An angry', 'n angry ')
    """
    check_int("n_samples", n_samples, minimum=1)
    check_int("context", context, minimum=2)
    corpus = generate_text(n_samples * context + 1, seed=seed)
    ids = encode(corpus, VOCAB)  # (N·T + 1,)
    features = ids[:-1].view(n_samples, context)  # (N, T)
    targets = ids[1:].view(n_samples, context)  # (N, T): each token's next character
    info = {"vocab": VOCAB, "context": context, "stride": context, "seed": seed, "text": corpus[:300]}
    return Dataset("text", features, targets, "classification", num_classes=len(VOCAB), info=info)


DATASETS: Mapping[str, Callable[..., Dataset]] = MappingProxyType(
    {"digits": digits, "regression": regression, "synthetic_images": synthetic_images, "text": text}
)


def load_dataset(name: str, **options: object) -> Dataset:
    """Build the dataset registered as ``name`` with its keyword ``options``.

    Args:
        name: one of ``DATASETS`` (``"digits"``, ``"regression"``, ``"synthetic_images"``, ``"text"``).
        **options: the builder's keyword arguments, e.g. ``n_samples=1000`` for ``"regression"``.

    Raises:
        ValueError: unknown name or option, naming what is allowed.

    Example:
        >>> load_dataset("digits")
        Dataset('digits', 1797 samples, features (1, 8, 8) float32, 10 classes)
        >>> load_dataset("text", n_samples=2048, context=32, seed=0)
        Dataset('text', 2048 samples, features (32,) int64, 37 classes)
    """
    check_choice("name", name, DATASETS)
    allowed = dataset_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"dataset {name!r} takes no option {', '.join(unknown)}; "
            f"allowed options: {', '.join(allowed) if allowed else 'none'}"
        )
    return DATASETS[name](**options)


def dataset_options(name: str) -> list[str]:
    """The keyword options the dataset registered as `name` takes, in its builder's order.

    Example:
        >>> dataset_options("text"), dataset_options("digits")
        (['n_samples', 'context', 'seed'], [])
    """
    return list(inspect.signature(DATASETS[name]).parameters)
