"""`largest_batch_size`: the largest batch per device whose memory estimate fits a device, with the estimate's
own uncertainty as headroom. Lightning's batch-size finder tries real steps until one runs out of memory, on
the device itself; this asks `estimate_memory`, so it answers for hardware you do not have (an 80 GB GPU from
a laptop) in seconds.

The search: estimates at two batches give the bytes per sample (memory grows linearly in the batch: the
activations, attention's T × T scores and backward's temporaries all scale with it), a guess from that line,
then a few estimates around the guess until the largest batch that fits sits next to the smallest that does
not.

Example:
    >>> import torch
    >>> from workbench import models
    >>> fit = largest_batch_size(models.mlp(64, 10), sample=torch.zeros(1, 64), memory_bytes=64 * 2**20,
    ...                          method="analytic")
    >>> fit.batch_size > 1000, fit.estimate.total * (1 + fit.estimate.uncertainty) <= 64 * 2**20
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench._validate import check_int
from workbench.estimate.memory import MemoryEstimate, estimate_memory

MAXIMUM = 2**20  # the search stops at this batch
PROBES = (8, 16)  # the two batches whose estimates draw the line (small ones are all fixed costs)


@dataclass(frozen=True)
class BatchFit:
    """The answer: `batch_size` (0: not even one sample fits), its `estimate`, the device's `memory_bytes`,
    and `estimates`, how many estimates the search took.

    Example (a million parameters with Adam, 16 bytes each, and 4 KiB of activations a sample):
        >>> fit = largest_batch_size(1_000_000, activation_bytes_per_sample=4096, memory_bytes=2**30)
        >>> fit.describe()
        'batch 137,793 per device: 0.54 of 1 GiB (±85%, analytic)'
    """

    batch_size: int
    estimate: MemoryEstimate
    memory_bytes: int
    estimates: int

    def describe(self) -> str:
        """One line, e.g. ``"batch 412 per device: 71.30 of 80 GiB (±5%, traced ...)"`` (MiB below 1 GiB)."""
        unit, name = (2**30, "GiB") if self.memory_bytes >= 2**30 else (2**20, "MiB")
        total, device = self.estimate.total / unit, self.memory_bytes / unit
        used = f"{total:.2f} of {device:.4g} {name} ({self.estimate.describe()})"
        if self.batch_size == 0:
            return f"not even a batch of 1 fits: {used}"
        ceiling = " (the search's ceiling)" if self.batch_size == MAXIMUM else ""
        return f"batch {self.batch_size:,} per device{ceiling}: {used}"


def largest_batch_size(model: Any, *, memory_bytes: int, **options: Any) -> BatchFit:
    """The largest batch per device whose `estimate_memory` total, raised by its uncertainty, is at most
    `memory_bytes`.

    Args:
        model: what `estimate_memory` takes (an nn.Module with ``sample=``, a `ModelProfile`, a count).
        memory_bytes: one device's memory (e.g. ``80 * 2**30``); leave what the framework and other
            processes hold out of it.
        options: `estimate_memory`'s other arguments (sample, precision, optimizer, strategy, devices,
            ema_decay, activation_checkpointing, method, ...), all but batch_size. With method ``"auto"``
            the search traces without the real steps that check a trace (they do not depend on the batch),
            and the answer is estimated with them.
    """
    check_int("memory_bytes", memory_bytes, minimum=1)
    if "batch_size" in options:
        raise ValueError("largest_batch_size finds batch_size: leave it out of the options")
    answering = searching = _Fits(model, memory_bytes, options)
    if options.get("method", "auto") == "auto":
        try:
            searching = _Fits(model, memory_bytes, {**options, "method": "traced"})
            searching.estimate(1)
        except ValueError:  # not traceable: the rules, as "auto" falls back to
            searching = answering
    largest = _search(searching) if searching.fits(1) else 0
    if searching is not answering and largest and not answering.fits(largest):  # real steps saw more
        largest = _bisect(answering.fits, 1, largest) if answering.fits(1) else 0
    count = searching.count + (answering.count if answering is not searching else 0)
    return BatchFit(largest, answering.estimate(max(largest, 1)), memory_bytes, count)


class _Fits:
    """Memory estimates by batch (each made once) and whether they fit."""

    def __init__(self, model: Any, memory_bytes: int, options: dict[str, Any]) -> None:
        self.model, self.memory_bytes, self.options = model, memory_bytes, options
        self.known: dict[int, MemoryEstimate] = {}

    @property
    def count(self) -> int:
        return len(self.known)

    def estimate(self, batch: int) -> MemoryEstimate:
        if batch not in self.known:
            self.known[batch] = estimate_memory(self.model, batch_size=batch, **self.options)
        return self.known[batch]

    def fits(self, batch: int) -> bool:
        memory = self.estimate(batch)
        return memory.total * (1 + memory.uncertainty) <= self.memory_bytes

    def guess(self, low: int, high: int) -> int:
        """Where the line through the estimates at `low` and `high` meets the memory, less the uncertainty."""
        per_sample = max((self.estimate(high).total - self.estimate(low).total) / (high - low), 1.0)
        budget = self.memory_bytes / (1 + self.estimate(high).uncertainty)
        return int(min(max(high + (budget - self.estimate(high).total) / per_sample, 1), MAXIMUM))


def _search(fits: _Fits) -> int:
    """The largest batch in 1..MAXIMUM that fits (1 does): a line through two small batches, a second line
    through the first guess (memory is nearly linear in the batch), then steps outward from that guess until
    the answer is bracketed, and halving."""
    guess = fits.guess(*PROBES)
    if guess > PROBES[1]:
        guess = fits.guess(PROBES[1], guess)
    step = max(1, guess // 256)
    if fits.fits(guess):
        low, high = guess, guess + step
        while high <= MAXIMUM and fits.fits(high):
            low, step = high, step * 2
            high = low + step
        high = min(high, MAXIMUM + 1)
    else:
        low, high = max(1, guess - step), guess
        while low > 1 and not fits.fits(low):
            high, step = low, step * 2
            low = max(1, high - step)
    return _bisect(fits.fits, low, high)


def _bisect(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest batch in [low, high) that fits, where `low` fits and `high` does not (or is past the
    ceiling): halving the gap."""
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
