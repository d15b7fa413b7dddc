"""The Trainer's host work per step: the Python around forward, backward and the optimizer, measured where
nothing hides it.

    workbench bench trainer --host-work

The model is many tiny layers (`blocks` × (Linear 4→4, ReLU): 181 modules and 120 parameters at the default
60), a batch of 4: the arithmetic is negligible, so a step costs what its Python costs, in the hand-written
loop (zero_grad, forward, loss, backward, fused AdamW's step, data from the same in-memory loader) and in the
Trainer. On a GPU the kernels run while the host queues the next ones, so the host's work per step is what a
fast GPU exposes; per module and per parameter it grows with the model. Both loops alternate in one process;
each number is the median µs per optimizer step over `repeats`, with the range of the per-repeat ratios.

Example:
    >>> result = benchmark_host_work(repeats=1, blocks=2, samples=32)
    >>> result.steps, result.modules, result.parameters
    (8, 7, 4)
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional

from workbench._validate import check_choice, check_int
from workbench.data import ShardedLoader, Splits
from workbench.data.datasets import Dataset
from workbench.tables import text_table
from workbench.train import OptimizerConfig, TrainConfig, Trainer

BATCH = 4


@dataclass(frozen=True)
class HostWork:
    """µs per optimizer step of each loop, one entry per repeat (alternating)."""

    steps: int
    modules: int
    parameters: int
    device: str
    hand_us: tuple[float, ...]
    trainer_us: tuple[float, ...]

    @property
    def ratios(self) -> list[float]:
        """Trainer / hand-written µs per step, one per repeat."""
        return [t / h for t, h in zip(self.trainer_us, self.hand_us, strict=True)]

    @property
    def extra_us(self) -> float:
        """The Trainer's host work beyond the hand-written loop's, µs per step (median of the repeats)."""
        return statistics.median(t - h for t, h in zip(self.trainer_us, self.hand_us, strict=True))

    def table(self) -> str:
        ratios = self.ratios
        rows = [
            ["hand-written loop", f"{statistics.median(self.hand_us):,.0f} µs", "1.000", ""],
            [
                "Trainer",
                f"{statistics.median(self.trainer_us):,.0f} µs",
                f"{statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})",
                f"{self.extra_us:+,.0f} µs a step",
            ],
        ]
        return (
            text_table(["loop", "per optimizer step", "ratio (range over repeats)", "host work added"], rows)
            + f"\n{self.modules} modules, {self.parameters} parameters, batch {BATCH}, {self.steps} steps a "
            f"run on {self.device}, median of {len(self.hand_us)} alternating runs"
        )


def benchmark_host_work(
    *, repeats: int = 9, blocks: int = 60, samples: int = 2048, device: str = "cpu"
) -> HostWork:
    """Time the hand-written loop and the Trainer on `blocks` tiny layers (see the module docstring)."""
    check_int("repeats", repeats, minimum=1)
    check_int("blocks", blocks, minimum=1)
    check_int("samples", samples, minimum=BATCH)
    check_choice("device", device, ("cpu", "cuda"))
    generator = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(samples, 4, generator=generator), torch.randint(0, 4, (samples,))
    data = Dataset("host-work", inputs, targets, "classification", num_classes=4)
    config = TrainConfig(
        epochs=1, batch_size=BATCH, optimizer=OptimizerConfig("adamw", lr=1e-3), device=device, seed=0
    )
    loops = {
        "hand": lambda: _hand_written(data, config, blocks),
        "trainer": lambda: _trainer(data, config, blocks),
    }
    for run in loops.values():  # warm-up: allocator, thread pools, first-call costs
        run()
    timings: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(repeats):
        for name, run in loops.items():
            timings[name].append(run())
    model = _model(blocks)
    return HostWork(
        steps=samples // BATCH,
        modules=len(list(model.modules())),
        parameters=len(list(model.parameters())),
        device=device,
        hand_us=tuple(timings["hand"]),
        trainer_us=tuple(timings["trainer"]),
    )


def _model(blocks: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(blocks)])


def _hand_written(data: Dataset, config: TrainConfig, blocks: int) -> float:
    """µs per step of the plain loop over `data`, batches from the Trainer's own in-memory loader."""
    model = _model(blocks).to(config.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optimizer.lr, fused=True)
    loader = ShardedLoader(data, config.batch_size, shuffle=True, seed=config.seed)
    model.train()
    _synchronize(config.device)
    started, steps = time.perf_counter(), 0
    for x, y in loader:
        optimizer.zero_grad()
        x, y = x.to(config.device, non_blocking=True), y.to(config.device, non_blocking=True)
        functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        steps += 1
    _synchronize(config.device)
    return 1e6 * (time.perf_counter() - started) / steps


def _trainer(data: Dataset, config: TrainConfig, blocks: int) -> float:
    """µs per step of `Trainer.fit` on the same model and data (its start and end included)."""
    trainer = Trainer(_model(blocks), functional.cross_entropy, Splits(data), config, progress=False)
    _synchronize(config.device)
    started = time.perf_counter()
    steps = trainer.fit().step
    _synchronize(config.device)
    return 1e6 * (time.perf_counter() - started) / steps


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
