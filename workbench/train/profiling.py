"""A torch.profiler trace of chosen optimizer steps: ``TrainConfig(profile_steps=(first, last))``.

The loop profiles steps `first` to `last` (1-based, inclusive) on every rank, each step under a
``record_function("step N")`` range, and writes into the run directory ``profile/rank<R>.json`` (a Chrome /
Perfetto trace: open it at ui.perfetto.dev or chrome://tracing) and ``profile/top_ops_rank<R>.txt`` (the
operators taking the most time on this rank). Without a run directory nothing is written; the summary is
`Trainer.profile` either way. It also says how much of the profiled time went to the libraries' compute
kernels (matrix products, convolutions, attention: `library_share`): the part `torch.compile` calls as it is,
so ``1 / (library_share)`` bounds what compiling the rest can gain.

Example:
    >>> import torch
    >>> profiler = StepProfiler((2, 3), torch.device("cpu"), directory=None, rank=0)
    >>> for step in (1, 2, 3, 4):
    ...     profiler.before_step(step)
    ...     _ = torch.ones(64, 64) @ torch.ones(64, 64)
    ...     profiler.after_step(step)
    >>> profiler.result.steps, any(row.name == "aten::mm" for row in profiler.result.top_ops)
    ((2, 3), True)
    >>> 0 < profiler.result.library_share <= 1
    True
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workbench._profiler import profile
from workbench.tables import html_table, text_table

TOP_OPS = 15  # rows in the summary
# The libraries' compute kernels (oneDNN/MKL/cuBLAS products, convolutions, fused attention), both directions
LIBRARY_KERNEL = re.compile(r"aten::(_?(add|b|baddb)?mm|.*(convolution|scaled_dot_product|_attention).*)")


@dataclass(frozen=True)
class OpTime:
    """One operator's totals over the profiled steps (ms)."""

    name: str
    calls: int
    self_ms: float  # in the operator itself
    total_ms: float  # with the operators it called


@dataclass(frozen=True)
class ProfileResult:
    """What `StepProfiler` measured: the steps, the trace file (None without a run directory), top ops."""

    steps: tuple[int, int]
    rank: int
    trace: Path | None
    top_ops: tuple[OpTime, ...]
    self_ms: float = 0.0  # every operator's and range's own time, summed (the profiled steps' time)
    library_ms: float = 0.0  # of which in the libraries' compute kernels (`LIBRARY_KERNEL`; GPU: kernel time)

    @property
    def library_share(self) -> float:
        """The share of the profiled time spent in matrix-product, convolution and attention kernels."""
        return self.library_ms / self.self_ms if self.self_ms else 0.0

    def event(self) -> dict[str, Any]:
        """What a step event says of this profile (the Dashboard shows it): steps, trace path, top ops."""
        return {
            "steps": list(self.steps),
            "trace": None if self.trace is None else str(self.trace),
            "top_ops": [op.name for op in self.top_ops[:5]],
        }

    def table(self) -> str:
        """The top operators as a text table (the notebook shows it as HTML), and the library share."""
        return f"{text_table(*self._rows())}\n{self._library_line()}"

    def _repr_html_(self) -> str:
        first, last = self.steps
        caption = f"rank {self.rank}, steps {first}–{last}: top operators; {self._library_line()}"
        return html_table(*self._rows(), caption=caption)

    def _library_line(self) -> str:
        return f"{self.library_share:.0%} of the time in matrix-product, convolution and attention kernels"

    def _rows(self) -> tuple[list[str], list[list[object]]]:
        rows = [[op.name, op.calls, f"{op.self_ms:.3f}", f"{op.total_ms:.3f}"] for op in self.top_ops]
        return ["operator", "calls", "self ms", "total ms"], rows


class StepProfiler:
    """Profiles optimizer steps `steps` = (first, last) through the loop's `before_step` / `after_step`.

    Args:
        steps: (first, last), 1-based and inclusive.
        device: the training device (CUDA kernels are traced too on a GPU).
        directory: the run directory to write ``profile/`` into, or None.
        rank: this process's rank (names the files).
    """

    def __init__(
        self, steps: tuple[int, int], device: torch.device, directory: Path | None, rank: int
    ) -> None:
        self.first, self.last = steps
        self._activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            self._activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.directory = directory
        self.rank = rank
        self._profile: Any = None
        self._range: contextlib.AbstractContextManager | None = None
        self.result: ProfileResult | None = None

    def before_step(self, step: int) -> None:
        """Step `step` (1-based) is about to run."""
        if step == self.first and self._profile is None:
            self._profile = profile(activities=self._activities)
            self._profile.__enter__()
        if self._profile is not None:
            self._range = torch.profiler.record_function(f"step {step}")
            self._range.__enter__()

    def after_step(self, step: int) -> None:
        """Step `step` ended; the last profiled one writes the trace and the summary."""
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None
        if self._profile is not None and step >= self.last:
            self.finish()

    def finish(self) -> None:
        """Stop profiling and write what was recorded (the fit ended early, or the last step is done)."""
        if self._profile is None:
            return
        if self._range is not None:  # a step that raised
            self._range.__exit__(None, None, None)
            self._range = None
        profile, self._profile = self._profile, None
        profile.__exit__(None, None, None)
        averages = sorted(profile.key_averages(), key=lambda e: -e.self_cpu_time_total)
        top = tuple(
            OpTime(e.key, e.count, e.self_cpu_time_total / 1e3, e.cpu_time_total / 1e3)
            for e in averages
            if not e.key.startswith("step ")
        )[:TOP_OPS]
        on_gpu = torch.profiler.ProfilerActivity.CUDA in self._activities
        own_us = [(e.key, e.self_device_time_total if on_gpu else e.self_cpu_time_total) for e in averages]
        library_us = sum(us for key, us in own_us if LIBRARY_KERNEL.fullmatch(key))
        trace = None if self.directory is None else self.directory / "profile" / f"rank{self.rank}.json"
        steps, total_ms = (self.first, self.last), sum(us for _, us in own_us) / 1e3
        self.result = ProfileResult(steps, self.rank, trace, top, total_ms, library_us / 1e3)
        if trace is not None:
            trace.parent.mkdir(parents=True, exist_ok=True)
            profile.export_chrome_trace(str(trace))
            summary = trace.parent / f"top_ops_rank{self.rank}.txt"
            summary.write_text(self.result.table() + "\n", encoding="utf-8")
