"""`WeightAverage`: what ``TrainConfig(ema_decay=0.999)`` keeps while a fit runs: an exponential moving
average of the model's weights (and float buffers, such as BatchNorm's running statistics), updated after
every optimizer step. Val and test evaluate the averaged weights, early stopping judges and keeps them, and
the model holds them when the fit ends; the trained weights go on training, and a checkpoint keeps both, so a
resume continues the average where it was.

The decay after `n` updates is ``min(ema_decay, (1 + n) / (10 + n))`` (TensorFlow's
``ExponentialMovingAverage(num_updates=...)``, timm's warm-up): early on the average follows the weights
closely instead of remembering their random start for thousands of steps.

Each rank averages the weights as it holds them (a shard under FSDP or tensor parallel, its stage under
pipeline parallel) on their device, with one foreach call a step; every rank takes the same steps, so the
averages agree as the weights do. A checkpoint gathers the averaged model as it gathers the model.

Example:
    >>> import torch, torch.nn.functional as F
    >>> from torch.utils.data import TensorDataset
    >>> from workbench.train import OptimizerConfig, TrainConfig, Trainer
    >>> x = torch.randn(256, 4)
    >>> data = TensorDataset(x, x @ torch.tensor([[1.0], [2.0], [3.0], [4.0]]))
    >>> config = TrainConfig(epochs=20, batch_size=16, optimizer=OptimizerConfig("sgd", lr=0.05),
    ...                      ema_decay=0.99)
    >>> model = torch.nn.Linear(4, 1)
    >>> result = Trainer(model, F.mse_loss, (data, data), config, progress=False).fit()
    >>> model.weight.detach().round(decimals=1)  # the average of the last ~100 steps' weights
    tensor([[1., 2., 3., 4.]])
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from workbench.train.gradients import local
from workbench.train.run_dir import ResumedState
from workbench.train.strategy import Strategy

WARMUP = 10  # the decay after n updates is at most (1 + n) / (WARMUP + n)


def decay_after(decay: float, updates: int) -> float:
    """The decay of the update that follows `updates` earlier ones: `decay`, or less while the average is
    young (the warm-up).

    Example:
        >>> decay_after(0.999, 0), decay_after(0.999, 90), decay_after(0.9, 1000)
        (0.1, 0.91, 0.9)
    """
    return min(decay, (1 + updates) / (WARMUP + updates))


class WeightAverage:
    """The moving average of `model`'s weights that a fit with ``ema_decay`` (None: none, and every method
    does nothing) keeps; `strategy` gathers and loads it for checkpoints."""

    def __init__(self, decay: float | None, model: torch.nn.Module, strategy: Strategy) -> None:
        self.decay, self.model, self.strategy = decay, model, strategy
        self.updates = 0  # optimizer steps averaged
        self._live: list[torch.Tensor] = []  # this rank's part of each float parameter and buffer
        self._average: list[torch.Tensor] = []  # their averages, on the same devices
        self._swapped: list[torch.Tensor] | None = None  # the trained weights while the average is in

    @property
    def active(self) -> bool:
        """Between a fit's `start` and `finish`: the model holds the trained weights, the average apart."""
        return bool(self._live)

    def start(self, resumed: ResumedState | None) -> None:
        """A fit starts: the average starts at the model's weights, or, `resumed`, where its checkpoint left
        it (a checkpoint without one: at the weights it holds)."""
        if self.decay is None:
            return
        views = (local(t) for t in self.model.state_dict().values())  # of the parameters and buffers
        self._live = [t for t in views if t.is_floating_point()]  # (counters such as BatchNorm's stay)
        self._average = [t.detach().clone() for t in self._live]
        self.updates = 0
        saved = None if resumed is None else resumed.weight_average
        if saved is not None:
            self.updates = int(saved["updates"])
            with self._trained_kept():  # the checkpoint's average through the model, where a strategy loads
                self.strategy.load_model_state(self.model, saved["model"])
                torch._foreach_copy_(self._average, self._live)

    def update(self) -> None:
        """After an optimizer step: move the average toward the weights."""
        if not self.active:
            return
        assert self.decay is not None
        with torch.no_grad():
            torch._foreach_lerp_(self._average, self._live, 1.0 - decay_after(self.decay, self.updates))
        self.updates += 1

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The model holds the average inside (an evaluation, a best epoch's copy); the trained weights come
        back after it. Nothing changes outside a fit, or inside another `applied`."""
        if not self.active or self._swapped is not None:
            yield
            return
        with self._trained_kept():
            torch._foreach_copy_(self._live, self._average)
            yield

    def finish(self) -> None:
        """The fit ended (finished, stopped or failed): the model keeps the average, and evaluations from now
        on evaluate the weights the model holds. Nothing happens a second time."""
        if self.active:
            with torch.no_grad():
                torch._foreach_copy_(self._live, self._average)
        self._live, self._average = [], []

    def state(self) -> dict[str, Any] | None:
        """What a checkpoint keeps: the averaged model, gathered as the model is (every rank calls it; the
        ranks that do not write get None in the model's place)."""
        if not self.active:
            return None
        with self.applied():
            model = self.strategy.model_state(self.model)
            if model is not None:  # copied where it is the weights' own storage (one process, DDP's replica)
                live = {_storage(t) for t in self._live}
                model = {name: _unshared(value, live) for name, value in model.items()}
        return {"updates": self.updates, "decay": self.decay, "model": model}

    @contextlib.contextmanager
    def _trained_kept(self) -> Iterator[None]:
        with torch.no_grad():
            self._swapped = [t.clone() for t in self._live]
            try:
                yield
            finally:
                torch._foreach_copy_(self._live, self._swapped)
                self._swapped = None


def _storage(tensor: torch.Tensor) -> tuple[torch.device, int]:
    return tensor.device, tensor.untyped_storage().data_ptr()


def _unshared(value: Any, live: set[tuple[torch.device, int]]) -> Any:
    """`value`, or a copy of it where it shares storage with the live weights (a gathered shard is new)."""
    return value.clone() if torch.is_tensor(value) and _storage(value) in live else value
