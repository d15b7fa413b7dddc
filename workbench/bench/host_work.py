"""The Trainer's host work per step: the Python around forward, backward and the optimizer, measured where
nothing hides it.

    workbench bench trainer --host-work

The model is many tiny layers (`blocks` × (Linear 4→4, ReLU): 181 modules and 120 parameters at the default
60), a batch of 4: the arithmetic is negligible, so a step costs what its Python costs. Two pairs of loops:

- in-memory batches: the hand-written loop (zero_grad, forward, loss, backward, fused AdamW's step) over the
  Trainer's own in-memory loader, against the Trainer on that workbench `Dataset`;
- your torch data: the hand-written loop over ``DataLoader(random_split(TensorDataset(x, y)))`` (fetching
  sample by sample, as a DataLoader does), against the Trainer on the same split (fetching a batch at a
  time: `workbench.data.batched_tensors`).

On a GPU the kernels run while the host queues the next ones, so the host's work per step is what a fast
GPU exposes; per module and per parameter it grows with the model. The loops alternate in one process; each
number is the median µs per optimizer step over `repeats`, with the range of the per-repeat ratios.

Example:
    >>> result = benchmark_host_work(repeats=1, blocks=2, samples=32)
    >>> result.steps, result.modules, result.parameters, sorted(result.timings)
    (8, 7, 4, ['hand', 'hand_loader', 'trainer', 'trainer_loader'])
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset, random_split

from workbench._validate import check_choice, check_int
from workbench.data import ShardedLoader, Splits
from workbench.data.datasets import Dataset
from workbench.tables import text_table
from workbench.train import OptimizerConfig, TrainConfig, Trainer

BATCH = 4
PAIRS = (  # (baseline, variant, the rows' names)
    ("hand", "trainer", "hand-written loop, in-memory batches", "Trainer on the same Dataset"),
    (
        "hand_loader",
        "trainer_loader",
        "hand-written loop over a DataLoader",
        "Trainer on the same TensorDataset",
    ),
)


@dataclass(frozen=True)
class HostWork:
    """µs per optimizer step of each loop (`PAIRS`), one entry per repeat (alternating)."""

    steps: int
    modules: int
    parameters: int
    device: str
    timings: dict[str, tuple[float, ...]]

    def ratios(self, variant: str, baseline: str) -> list[float]:
        """`variant` / `baseline` µs per step, one per repeat."""
        return [v / b for v, b in zip(self.timings[variant], self.timings[baseline], strict=True)]

    def extra_us(self, variant: str, baseline: str) -> float:
        """µs per step `variant` adds to `baseline` (median of the repeats' differences)."""
        pairs = zip(self.timings[variant], self.timings[baseline], strict=True)
        return statistics.median(v - b for v, b in pairs)

    def table(self) -> str:
        rows = []
        for baseline, variant, baseline_name, variant_name in PAIRS:
            ratios = self.ratios(variant, baseline)
            rows.append([baseline_name, f"{statistics.median(self.timings[baseline]):,.0f} µs", "1.000", ""])
            rows.append(
                [
                    variant_name,
                    f"{statistics.median(self.timings[variant]):,.0f} µs",
                    f"{statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})",
                    f"{self.extra_us(variant, baseline):+,.0f} µs a step",
                ]
            )
        return (
            text_table(["loop", "per optimizer step", "ratio (range over repeats)", "host work added"], rows)
            + f"\n{self.modules} modules, {self.parameters} parameters, batch {BATCH}, {self.steps} steps a "
            f"run (7/8 of them on the split) on {self.device}, median of {len(self.timings['hand'])} "
            "alternating runs"
        )


def benchmark_host_work(
    *, repeats: int = 9, blocks: int = 60, samples: int = 2048, device: str = "cpu"
) -> HostWork:
    """Time the loops of `PAIRS` on `blocks` tiny layers (see the module docstring)."""
    check_int("repeats", repeats, minimum=1)
    check_int("blocks", blocks, minimum=1)
    check_int("samples", samples, minimum=2 * BATCH)
    check_choice("device", device, ("cpu", "cuda"))
    generator = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(samples, 4, generator=generator), torch.randint(0, 4, (samples,))
    data = Dataset("host-work", inputs, targets, "classification", num_classes=4)
    train = random_split(TensorDataset(inputs, targets), [samples - samples // 8, samples // 8], generator)[0]
    config = TrainConfig(
        epochs=1, batch_size=BATCH, optimizer=OptimizerConfig("adamw", lr=1e-3), device=device, seed=0
    )
    loops: dict[str, Callable[[], float]] = {
        "hand": lambda: _hand_written(ShardedLoader(data, BATCH, shuffle=True, seed=0), config, blocks),
        "trainer": lambda: _trainer(Splits(data), config, blocks),
        "hand_loader": lambda: _hand_written(DataLoader(train, BATCH, shuffle=True), config, blocks),
        "trainer_loader": lambda: _trainer(train, config, blocks),
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
        timings={name: tuple(seconds) for name, seconds in timings.items()},
    )


def _model(blocks: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(blocks)])


def _hand_written(batches: Iterable, config: TrainConfig, blocks: int) -> float:
    """µs per step of the plain loop over `batches`."""
    model = _model(blocks).to(config.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optimizer.lr, fused=True)
    model.train()
    _synchronize(config.device)
    started, steps = time.perf_counter(), 0
    for x, y in batches:
        optimizer.zero_grad()
        x, y = x.to(config.device, non_blocking=True), y.to(config.device, non_blocking=True)
        functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        steps += 1
    _synchronize(config.device)
    return 1e6 * (time.perf_counter() - started) / steps


def _trainer(data: object, config: TrainConfig, blocks: int) -> float:
    """µs per step of `Trainer.fit` on the same model and `data` (its start and end included)."""
    trainer = Trainer(_model(blocks), functional.cross_entropy, data, config, progress=False)
    _synchronize(config.device)
    started = time.perf_counter()
    steps = trainer.fit().step
    _synchronize(config.device)
    return 1e6 * (time.perf_counter() - started) / steps


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
