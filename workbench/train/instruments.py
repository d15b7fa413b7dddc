"""`StepInstruments`: what watches the training steps from outside them, as hooks the loop calls on every
step: a torch.profiler trace of chosen steps (`profiling`), the seconds torch.compile spends, set apart from
the step's own time (`compilation`), the memory of one step (`memory`), and the phases of a logged step (the
step clock, `step_time`). Each instrument decides on its own whether a step concerns it, so the loop has
no branch for any of them.

The life of one step, as the loop calls them::

    clock = instruments.before_step(step + 1, logged, data_s)   # the step clock; the profiler's range
    with instruments.measuring_memory(step + 1, model):          # the probed step's forward and backward
        loss = forward_backward(...)
    optimizer_step(...); instruments.optimizer_stepped(optimizer)
    instruments.after_step(step + 1, window, clock)              # compile seconds set aside; profile written
    event.update(instruments.step_metrics(clock))                # a logged step: memory, step_time, ...
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from workbench.train.compilation import CompileWatch
from workbench.train.config import TrainConfig
from workbench.train.log_window import LogWindow
from workbench.train.memory import StepMemoryProbe
from workbench.train.profiling import ProfileResult, StepProfiler
from workbench.train.step_time import NO_CLOCK, Clock, StepClock


class InstrumentReadings:
    """What a trainer's `instruments` measured in its last fit, read from the trainer."""

    instruments: StepInstruments

    @property
    def profile(self) -> ProfileResult | None:
        """The last fit's torch.profiler summary (``TrainConfig.profile_steps``, or the Profile button)."""
        return self.instruments.profile

    @property
    def compile_report(self) -> dict[str, Any] | None:
        """The last fit's compile totals (``TrainConfig(compile=...)``): seconds, graphs, graph breaks."""
        return self.instruments.compile_report


class StepInstruments:
    """The profiler, compile accounting, memory probe and step clock of one trainer.

    Args:
        config: the trainer's config (``profile_steps``, ``compile``, ``time_breakdown``).
        device: the training device.
        rank: this process's rank (names the profile files).
        run_path: the run directory (traces go to ``profile/`` in it), or None.
        total_steps, steps_per_epoch: the fit's length when known (checks ``profile_steps`` against it).
    """

    def __init__(
        self,
        config: TrainConfig,
        device: torch.device,
        rank: int,
        run_path: Path | None,
        steps_per_epoch: int | None,
        total_steps: int | None,
    ) -> None:
        steps = config.profile_steps
        if steps is not None and total_steps is not None and steps[1] > total_steps:
            raise ValueError(
                f"profile_steps={steps!r} ends after the fit's last step ({total_steps}"
                f"{_length(config, steps_per_epoch)}); choose steps ≤ {total_steps}"
            )
        self.config, self.device, self.rank, self.run_path = config, device, rank, run_path
        self.total_steps = total_steps
        self.profile: ProfileResult | None = None  # the last fit's profile
        self.compile_report: dict[str, Any] | None = None  # the last fit's compile totals (compile=...)
        self._watch: CompileWatch | None = None
        self._profiler: StepProfiler | None = None
        self._profile_published = False  # the finished profile went out with a step event
        self._memory_step = 1  # the step whose memory is measured
        self._probe: StepMemoryProbe | None = None
        self._memory: dict[str, Any] | None = None  # measured, to send with the next logged step

    # ------------------------------------------------------------------ a fit

    @contextlib.contextmanager
    def watching_fit(self) -> Iterator[None]:
        """Around a whole fit: torch.compile's callbacks counted (``compile`` not "off")."""
        watch = CompileWatch() if self.config.compile != "off" else None
        with watch if watch is not None else contextlib.nullcontext():
            self._watch = watch
            try:
                yield
            finally:
                self._watch = None
                if watch is not None:
                    self.compile_report = watch.report()

    def start(self, step: int) -> None:
        """A fit starts (or resumes) after `step` steps: the configured profile is scheduled afresh (a
        request of an earlier fit does not carry over), and the step whose memory is measured chosen: the
        second of the fit (its first when it has one), since the first also does one-off work (a pipeline's
        shape inference) and only from the second on does the optimizer state exist."""
        self._memory, self._profiler, self._probe = None, None, None
        if self.config.profile_steps is not None:
            self._schedule_profile(self.config.profile_steps)
        known = self.total_steps is not None
        self._memory_step = step + (1 if known and self.total_steps - step < 2 else 2)

    def request_profile(self, steps: int, step: int) -> None:
        """Profile the next `steps` steps after `step` (a control request), unless one is scheduled or
        running."""
        if self._profiler is not None and self._profiler.result is None:
            return
        first = step + 1
        last = first + steps - 1 if self.total_steps is None else min(first + steps - 1, self.total_steps)
        self._schedule_profile((first, max(first, last)))

    def finish(self) -> None:
        """The fit ended (also by an error or a stop): the profile of steps it did not finish is written."""
        if self._profiler is not None:
            self._profiler.finish()
            self.profile = self._profiler.result

    def summary(self) -> dict[str, Any]:
        """What the fit's last event adds: the compile totals."""
        return {"compile": self._watch.report()} if self._watch is not None else {}

    # ------------------------------------------------------------------ a step

    def before_step(self, step: int, logged: bool, data_s: float) -> Clock:
        """Step `step` (1-based) is about to run, its batches fetched in `data_s`; the clock to time its
        phases with (a logged step's, with ``time_breakdown``; else one that does nothing)."""
        clock: Clock = NO_CLOCK
        if logged and self.config.time_breakdown:
            clock = StepClock(self.device, started=time.perf_counter())
            clock.add("data", data_s)
        if self._profiler is not None:
            self._profiler.before_step(step)
        return clock

    @contextlib.contextmanager
    def measuring_memory(self, step: int, model: torch.nn.Module) -> Iterator[None]:
        """Around step `step`'s forward and backward: the probed step records its activations."""
        if step != self._memory_step:
            yield
            return
        with StepMemoryProbe(model, self.device) as probe:
            self._probe = probe
            yield

    def optimizer_stepped(self, optimizer: torch.optim.Optimizer) -> None:
        """After the optimizer step, before zero_grad: the probed step's report (gradients still there)."""
        if self._probe is not None:
            self._memory, self._probe = self._probe.report(optimizer), None

    def after_step(self, step: int, window: LogWindow, clock: Clock) -> None:
        """Step `step` ended: compile seconds leave its time (window and clock); the profiler moves on."""
        if self._watch is not None:
            compiled = self._watch.take()
            window.exclude(sum(compiled.values()))
            for phase, seconds in compiled.items():
                clock.set_aside(phase, seconds)
        if self._profiler is not None:
            self._profiler.after_step(step)

    def step_metrics(self, clock: Clock) -> dict[str, Any]:
        """What a logged step's event adds: ``memory`` (once), ``step_time``, ``profile`` (once, when
        written), ``compile`` (totals so far)."""
        metrics: dict[str, Any] = {}
        if self._memory is not None:
            metrics["memory"], self._memory = self._memory, None
        if isinstance(clock, StepClock):
            metrics["step_time"] = clock.report()
        profiler = self._profiler
        if profiler is not None and profiler.result is not None and not self._profile_published:
            self.profile, self._profile_published = profiler.result, True
            metrics["profile"] = profiler.result.event()
        if self._watch is not None:
            metrics["compile"] = self._watch.report()
        return metrics

    def _schedule_profile(self, steps: tuple[int, int]) -> None:
        self._profiler = StepProfiler(steps, self.device, self.run_path, self.rank)
        self._profile_published = False


def _length(config: TrainConfig, steps_per_epoch: int | None) -> str:
    """How the fit's length comes about, to follow its step count: ' = 10 steps × 3 epochs'."""
    if config.max_steps is not None:
        return ": max_steps"
    return f" = {steps_per_epoch} steps × {config.epochs} epochs"
