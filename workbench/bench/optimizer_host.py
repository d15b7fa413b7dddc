"""What the host spends on one fused optimizer step, with every kernel launch stubbed out: one launch over a
param group's buffer (FusedAdam) against one launch per tensor (how it stepped before, and what a fused
kernel without flat buffers costs), on models of few and many tensors. Runs anywhere (no GPU: the simulator's
argument conversion stands in for numba's, so absolute times differ on a GPU; the launch counts do not).

    workbench bench kernels --host

Each repeat alternates the variants; the table gives medians and ranges over repeats of the mean over
`steps` steps.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from workbench.tables import text_table

HEADERS = (
    "tensors",
    "clipping",
    "variant",
    "launches per step",
    "host µs per step",
    "per tensor ÷ one launch",
)


@dataclass(frozen=True)
class OptimizerHostBenchmark:
    """Rows of (tensors, clipping, variant, launches per step, median µs, (min µs, max µs))."""

    rows: list[tuple[int, bool, str, int, float, tuple[float, float]]]

    def ratio(self, tensors: int, clipping: bool) -> float:
        """Host time per step, one launch per tensor ÷ one launch per group, for one model."""
        times = {r[2]: r[4] for r in self.rows if r[0] == tensors and r[1] == clipping}
        return times["one launch per tensor"] / times["one launch per group"]

    def table(self) -> str:
        lines = []
        for tensors, clipping, variant, launches, median, (low, high) in self.rows:
            ratio = f"{self.ratio(tensors, clipping):.1f}×" if variant == "one launch per tensor" else ""
            lines.append(
                [
                    tensors,
                    "yes" if clipping else "no",
                    variant,
                    launches,
                    f"{median:.0f} [{low:.0f}–{high:.0f}]",
                    ratio,
                ]
            )
        return text_table(list(HEADERS), lines)


@contextmanager
def _stubbed_launches() -> Iterator[list[str]]:
    """Kernel launches of the optimizer, clipping and reduction modules replaced by a counter."""
    from workbench.kernels import clip, optim_kernels, reduce

    launched: list[str] = []
    saved = {module: module.launch for module in (optim_kernels, clip, reduce)}
    for module in saved:
        module.launch = lambda kernel, *args: launched.append("launch")
    try:
        yield launched
    finally:
        for module, launch in saved.items():
            module.launch = launch


def _model(tensors: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(tensors // 2)))


def _per_tensor_step(params: list[torch.nn.Parameter], clipping: bool) -> Callable[[], None]:
    """A fused Adam kernel launched once per tensor (and torch-style clipping: two launches per tensor)."""
    from workbench.kernels.clip import clip_grad_norm
    from workbench.kernels.optim_kernels import adam_step

    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]

    def step() -> None:
        if clipping:
            clip_grad_norm([p.grad for p in params], 1.0)
        for p, (m, v) in zip(params, moments, strict=True):
            adam_step(p, p.grad, m, v, step=1, lr=1e-3)

    return step


def _one_launch_step(params: list[torch.nn.Parameter], clipping: bool) -> Callable[[], None]:
    from workbench.kernels.optimizers import FusedAdam

    return FusedAdam(params, lr=1e-3, max_grad_norm=1.0 if clipping else 0.0).step


def benchmark_optimizer_host(
    tensor_counts: tuple[int, ...] = (8, 32, 128), repeats: int = 7, steps: int = 20
) -> OptimizerHostBenchmark:
    """Host µs per Adam step, launches stubbed, for models of `tensor_counts` tensors, with and without
    clipping by the global norm.

    Example:
        >>> result = benchmark_optimizer_host(tensor_counts=(4,), repeats=1, steps=1)
        >>> [(r[2], r[3]) for r in result.rows if not r[1]]
        [('one launch per group', 1), ('one launch per tensor', 4)]
    """
    rows = []
    variants: dict[str, Callable[[list[torch.nn.Parameter], bool], Callable[[], None]]] = {
        "one launch per group": _one_launch_step,
        "one launch per tensor": _per_tensor_step,
    }
    for tensors in tensor_counts:
        for clipping in (False, True):
            samples: dict[str, list[float]] = {name: [] for name in variants}
            launches: dict[str, int] = {}
            steppers: dict[str, Any] = {}
            for name, make in variants.items():
                params = list(_model(tensors).parameters())
                for p in params:
                    p.grad = torch.ones_like(p)
                steppers[name] = make(params, clipping)
            with _stubbed_launches() as launched:
                for name, step in steppers.items():  # warm-up; counts the launches of one step
                    launched.clear()
                    step()
                    launches[name] = len(launched)
                for _ in range(repeats):
                    for name, step in steppers.items():  # alternating the variants
                        started = time.perf_counter()
                        for _ in range(steps):
                            step()
                        samples[name].append((time.perf_counter() - started) / steps * 1e6)
            for name in variants:
                values = samples[name]
                rows.append(
                    (
                        tensors,
                        clipping,
                        name,
                        launches[name],
                        statistics.median(values),
                        (min(values), max(values)),
                    )
                )
    return OptimizerHostBenchmark(rows)
