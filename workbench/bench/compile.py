"""What `TrainConfig(compile=...)` changes: eager and compiled Trainers on the same preset, side by side.

    workbench bench compile                          # text-transformer, digits-mlp, images-cnn
    workbench bench compile --presets text-transformer --repeats 7 --mode max-autotune-no-cudagraphs

For each preset two Trainers start from the same weights (the preset's model and data, training split only,
so evaluation does not dilute the steps): one eager, one compiled. The compiled one's first fit compiles
(its seconds come from the Trainer's `compile_report`, apart), after ``torch.compiler.reset()``: graphs this
process compiled before (an earlier preset, a notebook's cells) would be reused, and the compile would read
0 s; inductor's cache on disk still shortens a compile another process made before. Then the two fit one
epoch each, alternating, `repeats` times; each fit's seconds per step give the ratio eager / compiled of that
repeat (> 1: compiled is faster). Printed: the medians, the ratios' median and range, compile seconds,
graphs and graph breaks, and where the eager step's time goes: the share spent in the libraries'
matrix-product, convolution and attention kernels (a torch.profiler run of the eager Trainer,
`ProfileResult.library_share`). Compile calls those kernels as they are and fuses the rest, so
``1 / library_share`` is the most compiling could gain (were everything else free): a ceiling printed beside
the speed-up.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from dataclasses import dataclass

import torch

from workbench._validate import check_choice, check_int
from workbench.data import Splits
from workbench.presets import PRESETS, build_experiment
from workbench.tables import text_table
from workbench.train import Trainer
from workbench.train.choices import COMPILE_MODES

DEFAULT_PRESETS = ("text-transformer", "digits-mlp", "images-cnn")


@dataclass(frozen=True)
class CompileComparison:
    """One preset's eager and compiled seconds per step (every repeat, in order) and its compile report."""

    preset: str
    mode: str
    steps: int
    eager_s: tuple[float, ...]
    compiled_s: tuple[float, ...]
    compile_report: dict
    library_share: float = 0.0  # of the eager step's time, in matrix-product/convolution/attention kernels

    @property
    def ceiling(self) -> float:
        """The most compiling could gain: the eager step with everything but the library kernels free."""
        return 1 / self.library_share if self.library_share else float("inf")

    @property
    def speedups(self) -> list[float]:
        """eager / compiled per repeat (the two fits of a repeat ran one after the other)."""
        return [e / c for e, c in zip(self.eager_s, self.compiled_s, strict=True)]

    @property
    def speedup(self) -> float:
        return statistics.median(self.speedups)


def compare_compile(
    presets: tuple[str, ...] = DEFAULT_PRESETS, *, mode: str = "default", repeats: int = 5, epochs: int = 1
) -> list[CompileComparison]:
    """Eager against compiled training of each preset (see the module's docstring)."""
    check_int("repeats", repeats, minimum=1)
    check_int("epochs", epochs, minimum=1)
    check_choice("mode", mode, COMPILE_MODES[1:])
    for name in presets:
        check_choice("presets", name, PRESETS)
    return [_compare(name, mode, repeats, epochs) for name in presets]


def _compare(name: str, mode: str, repeats: int, epochs: int) -> CompileComparison:
    experiment = build_experiment(name, epochs=epochs, log_every=10**6)
    splits = Splits(experiment.splits.train)  # training steps only
    trainers = {}
    for variant in ("off", mode):
        model = copy.deepcopy(experiment.model)  # the same starting weights
        config = experiment.config.replace(compile=variant)
        trainers[variant] = Trainer(model, experiment.loss_fn, splits, config)
    torch.compiler.reset()  # a compile of its own, whatever this process compiled before
    trainers[mode].fit()  # compiles (and a fit of the eager one, so both are warm)
    report = trainers[mode].compile_report or {}
    trainers["off"].fit()
    seconds: dict[str, list[float]] = {"off": [], mode: []}
    for _ in range(repeats):
        for variant, trainer in trainers.items():
            started = time.perf_counter()
            result = trainer.fit()
            seconds[variant].append((time.perf_counter() - started) / result.step)
    return CompileComparison(
        name,
        mode,
        trainers["off"].total_steps or 0,
        tuple(seconds["off"]),
        tuple(seconds[mode]),
        report,
        _library_share(experiment, splits),
    )


def _library_share(experiment, splits: Splits) -> float:
    """The share of an eager fit's profiled steps (after the first) spent in the libraries' kernels."""
    steps = math.ceil(len(splits.train) / experiment.config.batch_size)  # one epoch's (the last may be short)
    config = experiment.config.replace(epochs=1, profile_steps=(min(2, steps), min(steps, 21)))
    trainer = Trainer(copy.deepcopy(experiment.model), experiment.loss_fn, splits, config)
    trainer.fit()
    return trainer.profile.library_share if trainer.profile is not None else 0.0


def table(results: list[CompileComparison]) -> str:
    """The comparison as a text table: ms per step, speed-up (median and range), compile cost."""
    rows = []
    for result in results:
        speedups, report = result.speedups, result.compile_report
        rows.append(
            [
                result.preset,
                str(result.steps),
                f"{1e3 * statistics.median(result.eager_s):.2f}",
                f"{1e3 * statistics.median(result.compiled_s):.2f}",
                f"{result.speedup:.2f}× ({min(speedups):.2f}–{max(speedups):.2f})",
                f"{result.library_share:.0%}",
                f"{result.ceiling:.2f}×",
                f"{report.get('seconds', 0):.1f} s",
                str(report.get("graphs", 0)),
                str(report.get("graph_breaks", 0)),
            ]
        )
    header = ["preset", "steps", "eager ms/step", "compiled ms/step", "speed-up", "library", "ceiling"]
    header += ["compile", "graphs", "breaks"]
    threads = torch.get_num_threads()
    note = (
        f"(torch threads: {threads}; speed-up = eager / compiled time per step; library = the eager step's"
        " share in matrix-product, convolution and attention kernels, which compile leaves as they are;"
        " ceiling = 1 / library, the speed-up were everything else free)"
    )
    return f"{text_table(header, rows)}\n{note}"
