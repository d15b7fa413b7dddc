"""The training loop for one device: `Trainer(model, loss_fn, splits, config).fit()`.

One public method, `fit`; the steps are private (`_run_epoch`, `_run_step`, `_evaluate`, `_save`).
The loop publishes plain-dict events to callbacks (`workbench.train.events`) and reads requests from a
`TrainControl` at step boundaries; it imports no UI code.

    from workbench import models
    from workbench.data import load_dataset, split_dataset
    from workbench.train import Trainer, TrainConfig, OptimizerConfig
    splits = split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)
    trainer = Trainer(models.mlp(64, 10), torch.nn.functional.cross_entropy, splits,
                      TrainConfig(epochs=5, optimizer=OptimizerConfig("adam", lr=3e-3)), run="digits")
    result = trainer.fit()          # runs/digits/{metrics.jsonl,checkpoint.pt,config.json}
    trainer.fit(resume=True)        # continue from runs/digits/checkpoint.pt
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workbench.data import Dataset, as_splits, split_size
from workbench.train import gradients
from workbench.train.arguments import check_arguments, check_optimizer
from workbench.train.batches import (
    device_batches,
    lockstep,
    needs_lockstep,
    split_loaders,
    step_groups,
    with_last,
)
from workbench.train.compilation import CompileWatch, check_can_compile, compile_module
from workbench.train.config import TrainConfig
from workbench.train.control import Changes, TrainControl
from workbench.train.evaluation import evaluate_shard
from workbench.train.events import Callback, CallbackList, Event
from workbench.train.log_window import LogWindow
from workbench.train.loss_check import NonFiniteLossError, loss_sum_over_ranks, non_finite_message
from workbench.train.memory import StepMemoryProbe
from workbench.train.metrics_log import MetricsLog
from workbench.train.objective import Objective, StepFn
from workbench.train.optim import OptimizerFactory, build_optimizer, lr_factor, optimizer_step
from workbench.train.precision import resolve_precision
from workbench.train.profiling import ProfileResult, StepProfiler
from workbench.train.run_dir import (
    LoopPosition,
    RunDir,
    capture_training_state,
    restore_training_state,
    resume_path,
)
from workbench.train.run_lock import RunLock
from workbench.train.step_time import NO_CLOCK, Clock, StepClock, takes_clock
from workbench.train.strategy import Batch, LossFn, SingleDevice, Strategy
from workbench.train.supervision import current_supervision

__all__ = ["Batch", "FitResult", "LossFn", "NonFiniteLossError", "StepFn", "Trainer"]


@dataclass(frozen=True)
class FitResult:
    """What `Trainer.fit` returns.

    Attributes:
        status: ``"finished"`` or ``"stopped"`` (a stop request; a checkpoint was saved when possible).
        step, epoch: optimizer steps and whole epochs done.
        seconds: wall time of this `fit` call.
        train_loss: the last logged training loss.
        metrics: last evaluation per split, e.g. ``{"val": {"loss": 0.1, "accuracy": 0.97}}``.
        checkpoint: the last checkpoint written, if the trainer has a run directory.
    """

    status: str
    step: int
    epoch: int
    seconds: float
    train_loss: float | None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    checkpoint: Path | None = None


class Trainer:
    """Trains `model` on the training split, evaluating on val and test after each epoch.

    Args:
        model: a torch module; moved to the config's device.
        loss_fn: ``loss_fn(output, target) -> scalar tensor`` with mean reduction (e.g. F.cross_entropy)
            for ``(inputs, target)`` batches; None when `step_fn` or the model itself computes the loss
            (see `workbench.train.objective`).
        splits: the data: workbench `Splits`/`Dataset` (the in-memory fast path), any torch map-style or
            iterable ``Dataset``, a ``DataLoader``, a tuple ``(train, val, test)`` of those (val, test
            optional), ``Splits(train, val=..., test=...)`` or a dict; see `workbench.data.as_splits`.
        config: a `TrainConfig` (``config.loader`` sets DataLoader workers, pinning, collate_fn).
        step_fn: ``step_fn(model, batch) -> loss`` or ``-> (loss, outputs)`` for batches of any structure
            (dicts, nested); only with ``loss_fn=None``. Evaluation uses it too.
        metrics: name → ``fn(outputs, batch) -> float`` (or a `workbench.train.metrics.Metric` such as
            ``F1``), evaluated on val/test, exact over ranks; accuracy is added for classification.
        callbacks: receivers of the loop's events (dashboards, loggers, progress bars).
        control: a `TrainControl` through which another thread pauses, stops or changes lr/clipping
            (under a launcher, its control unless given here: see `workbench.train.supervision`).
        run: a run name; with it, metrics, config and checkpoints go to ``runs_dir/run/``.
        runs_dir: where run directories live (default ``runs``).
        optimizer_factory: ``factory(params, optimizer_config) -> torch.optim.Optimizer`` for optimizers
            beyond sgd/adam/adamw (e.g. the fused numba ones).
        strategy: where to train: `SingleDevice` (default, on ``config.device``), `DataParallel` or
            `FullyShardedDataParallel` (one process per rank, each on its shard of the data; batch_size is
            per rank, so the global batch is batch_size × ranks), `PipelineParallel` or `TensorParallel`
            (every rank on the same batches of batch_size).

    Example:
        >>> from workbench import models
        >>> from workbench.data import load_dataset, split_dataset
        >>> from workbench.train import OptimizerConfig
        >>> splits = split_dataset(load_dataset("regression", n_samples=512), (0.8, 0.1, 0.1), seed=0)
        >>> config = TrainConfig(epochs=2, batch_size=64, optimizer=OptimizerConfig("sgd", lr=0.1))
        >>> result = Trainer(models.linear(10), torch.nn.functional.mse_loss, splits, config).fit()
        >>> result.status, result.step
        ('finished', 14)

        Your own torch data (a map-style dataset here) takes the same call:

        >>> from torch.utils.data import TensorDataset
        >>> x = torch.randn(256, 10)
        >>> data = TensorDataset(x, x.sum(dim=1, keepdim=True))
        >>> Trainer(models.linear(10), torch.nn.functional.mse_loss, data, config).fit().step
        8
    """

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: LossFn | None,
        splits: Any,
        config: TrainConfig | None = None,
        *,
        step_fn: StepFn | None = None,
        metrics: dict[str, Any] | None = None,
        callbacks: Iterable[Callback] = (),
        control: TrainControl | None = None,
        run: str | None = None,
        runs_dir: str | os.PathLike = "runs",
        optimizer_factory: OptimizerFactory | None = None,
        strategy: Strategy | None = None,
    ) -> None:
        check_arguments(model, config, strategy, callbacks, optimizer_factory)
        self.config = config if config is not None else TrainConfig()
        self.strategy = strategy if strategy is not None else SingleDevice(self.config.device)
        splits = as_splits(splits)
        train = splits.train
        if (len(train) if isinstance(train, Dataset) else split_size(train)) == 0:
            raise ValueError("splits.train is empty (the training split); give it at least one sample")
        task = train.task if isinstance(train, Dataset) else None
        self.objective = Objective(
            loss_fn, step_fn, metrics, classification=None if task is None else task == "classification"
        )
        self.strategy.check_objective(self.objective)
        self._strategy_takes_clock = takes_clock(self.strategy.forward_backward)
        self.run = run
        self.run_dir = RunDir.named(run, runs_dir) if run is not None else None
        self.strategy.bind()
        self.strategy.validate(model, self.config)
        self.device = self.strategy.device
        if self.config.device not in ("auto", self.device.type):
            raise ValueError(
                f"config.device={self.config.device!r} but the strategy trains on {self.device}; "
                "use device='auto' with a distributed strategy"
            )
        self.precision = resolve_precision(self.config.precision, self.device)
        check_can_compile(self.config.compile, self.device)
        self.rank, self.world_size = self.strategy.rank, self.strategy.world_size
        self.model = self.strategy.wrap(model)  # on the device (a pipeline moves only its stage)
        # the module the training steps call: compiled with TrainConfig(compile=...), else the model
        compiling = self.config.compile != "off"
        self._step_model = compile_module(self.model, self.config.compile) if compiling else self.model
        self._compile_watch: CompileWatch | None = None
        self.compile_report: dict[str, Any] | None = None  # the last fit's compile totals (compile=...)
        self.loss_fn = loss_fn
        self.splits = splits
        supervision = current_supervision()  # a launcher's event stream and control, inside its workers
        if control is None:
            control = supervision.control if supervision.control is not None else TrainControl()
        self.control = control
        callbacks = [*supervision.callbacks, *callbacks]
        if self.run_dir is not None and self.strategy.is_main:
            callbacks.insert(0, MetricsLog(self.run_dir.path))
        self.events = CallbackList(callbacks)
        factory = optimizer_factory if optimizer_factory is not None else build_optimizer
        self.optimizer = check_optimizer(factory(self.model.parameters(), self.config.optimizer))
        self.scaler = self.precision.scaler()
        self._loaders = split_loaders(splits, self.config, self.strategy)
        if "train" not in self._loaders:
            raise ValueError(
                "the training split gives no batches (every batch dropped: drop_last with "
                "fewer samples per rank than batch_size); lower batch_size or set drop_last=False"
            )
        batches = self._loaders["train"].length
        # None: an iterable dataset without __len__ (progress shows the steps done, no total)
        self.steps_per_epoch = None if batches is None else math.ceil(batches / self.config.accumulate)
        self.total_steps = None if batches is None else self.steps_per_epoch * self.config.epochs
        schedule = self.config.optimizer.schedule
        if self.total_steps is None and schedule != "constant":
            raise ValueError(
                f"schedule={schedule!r} needs the number of steps, but the training split's length is "
                "unknown (an IterableDataset without __len__); give the dataset a __len__ or use "
                "schedule='constant' (warm-up still works)"
            )
        # Where the loop stands; a checkpoint holds exactly these plus the model/optimizer/RNG state.
        self.step = 0
        self.epoch = 0
        self._position = 0  # micro-batches of the current epoch already used
        self.lr = self.config.optimizer.lr
        self._resume_changes = ""  # the optimizer settings a resume changed, as one line
        self.clip_norm = self.config.clip_norm
        self.clip_value = self.config.clip_value
        self.checkpoint: Path | None = None
        self._last: dict[str, dict[str, float]] = {}
        # a fit measures memory at its second step (its first when it has one): the first also does
        # one-off work (a pipeline's shape inference), and from the second on the optimizer state exists
        self._memory_step = 1
        self._memory: dict[str, Any] | None = None  # measured, to send with the next logged step
        self._profiler: StepProfiler | None = None
        self._profile_published = False  # the finished profile went out with a step event
        self.profile: ProfileResult | None = None  # the last fit's profile (TrainConfig.profile_steps)
        steps = self.config.profile_steps
        if steps is not None and self.total_steps is not None and steps[1] > self.total_steps:
            raise ValueError(
                f"profile_steps={steps!r} ends after the fit's last step ({self.total_steps} = "
                f"{self.steps_per_epoch} steps × {self.config.epochs} epochs); "
                f"choose steps ≤ {self.total_steps}"
            )

    # ------------------------------------------------------------------ public

    def add_callback(self, callback: Callback) -> None:
        """Subscribe `callback` to this trainer's events (a dashboard attaching itself, for example)."""
        self.events.callbacks.append(callback)

    def describe(self) -> str:
        """Where this trainer runs, e.g. "1 process on cpu"."""
        return self.strategy.describe()

    def terminate(self) -> None:
        """Stop at the next step boundary, from any thread: the loop runs in this process and cannot be
        cut short in the middle of a step (`control.stop()` does the same)."""
        self.control.stop()

    def worker_pids(self) -> None:
        """None: a Trainer trains in this process (`Job`)."""
        return None

    def fit(self, resume: bool | str | os.PathLike = False) -> FitResult:
        """Train until the configured epochs are done or a stop is requested.

        Args:
            resume: ``True`` continues from this run's checkpoint (a run that never started starts
                fresh; one that logged but never saved is refused); a path continues from that checkpoint.
                Optimizer settings the config changes apply and are reported. Resuming on CPU continues
                bit-identically.

        Raises:
            NonFiniteLossError: the loss became NaN/inf; the last good checkpoint stays as it was.
            RunInUseError: another live process is fitting this run name (it is named).
            ValueError: the checkpoint does not fit (config, optimizer kind, model) or is not readable.
        """
        if not isinstance(resume, bool | str | os.PathLike):
            raise TypeError(
                f"resume must be True (this run's checkpoint), False, or a checkpoint's path; got "
                f"{type(resume).__name__} {resume!r}"
            )
        started = time.perf_counter()
        lock = self._lock_run_dir()
        try:
            status = self._fit(resume)
        finally:
            if lock is not None:
                lock.release()
        train = self._last.get("train", {})
        return FitResult(
            status=status,
            step=self.step,
            epoch=self.epoch,
            seconds=time.perf_counter() - started,
            train_loss=train.get("loss"),
            metrics={k: v for k, v in self._last.items() if k != "train"},
            checkpoint=self.checkpoint,
        )

    def _fit(self, resume: bool | str | os.PathLike) -> str:
        watch = CompileWatch() if self.config.compile != "off" else None
        with watch if watch is not None else contextlib.nullcontext():
            self._compile_watch = watch
            try:
                return self._fit_watched(resume)
            finally:
                self._compile_watch = None
                if watch is not None:
                    self.compile_report = watch.report()

    def _fit_watched(self, resume: bool | str | os.PathLike) -> str:
        self._start(resume)
        status = "finished"
        try:
            self.events.on_fit_start(self._info())
            while self.epoch < self.config.epochs:
                if not self._run_epoch():
                    status = "stopped"
                    break
            if status == "stopped" or self._due_checkpoint():
                self._save()
        except BaseException as error:
            self._finish_profile()
            self.events.on_fit_end(self._summary("failed", error))
            raise
        self._finish_profile()
        self.events.on_fit_end(self._summary(status, None))
        return status

    def _finish_profile(self) -> None:
        """Write the profile of a fit that ended before (or right after) its last profiled step."""
        if self._profiler is not None:
            self._profiler.finish()
            self.profile = self._profiler.result

    def _lock_run_dir(self) -> RunLock | None:
        """Rank 0 of a named run holds its directory for the fit: a second fit on it is refused."""
        if self.run_dir is None or not self.strategy.is_main:
            return None
        lock = RunLock(self.run_dir.path)
        try:
            lock.acquire()
        except OSError as error:  # no such directory, read-only, permission denied
            raise OSError(
                f"cannot write the run directory {self.run_dir.path} ({error.strerror or error}); "
                "choose runs_dir= on a writable disk, or train without run=",
            ) from None
        if lock.took_over:
            print(
                f"{self.run_dir.path}: took over the lock of a run that is gone ({lock.took_over})",
                file=sys.stderr,
            )
        return lock

    def evaluate(self, split: str = "val") -> dict[str, float]:
        """Mean loss and metrics (accuracy for classification, and the `metrics` given) of the model on
        `split` ("train", "val", "test")."""
        if split not in ("train", "val", "test"):
            raise ValueError(f"split={split!r} is not supported; allowed values: 'train', 'val', 'test'")
        if split not in self._loaders:
            return {}  # an empty split
        model = self.strategy.unwrap(self.model)  # ranks see different numbers of batches: no DDP here
        return evaluate_shard(model, self._loaders[split], self.strategy, self.objective, self.precision)

    # ------------------------------------------------------------------ loop

    def _run_epoch(self) -> bool:
        """Run the rest of the current epoch; False if a stop was requested."""
        loader = self._loaders["train"]
        loader.set_epoch(self.epoch)
        interval = LogWindow()
        groups = step_groups(device_batches(loader, self.device, self._position), self.config.accumulate)
        if needs_lockstep(loader, self.strategy):
            groups = lockstep(groups, self.strategy)
        batches = iter(with_last(groups))
        from_start, steps_before = self._position == 0, self.step
        while True:
            fetching = time.perf_counter()
            item = next(batches, None)
            if item is None:
                break
            group, last = item
            paused_at = time.perf_counter()
            stop = self._step_boundary()
            interval.exclude(time.perf_counter() - paused_at)  # requests and pauses are outside the step
            if stop:
                self._check_finite(interval)  # never checkpoint a model that saw a non-finite loss
                return False
            logged = (self.step + 1) % self.config.log_every == 0 or last
            clock = NO_CLOCK
            if logged and self.config.time_breakdown:
                clock = StepClock(self.device, started=time.perf_counter())
                clock.add("data", paused_at - fetching)
            if self._profiler is not None:
                self._profiler.before_step(self.step + 1)
            loss, samples, grad_norm, checked_sum = self._run_step(group, interval if logged else None, clock)
            if self._compile_watch is not None:  # compiling is reported apart, not as the step's time
                compiled = self._compile_watch.take()
                interval.exclude(sum(compiled.values()))
                for phase, seconds in compiled.items():
                    clock.set_aside(phase, seconds)
            self.step += 1
            if self._profiler is not None:
                self._profiler.after_step(self.step)
            self._position += len(group)
            interval.add(loss, samples)
            if logged:
                self._publish_step(interval, grad_norm, checked_sum, clock)
                interval = LogWindow()
        if from_start and self.step == steps_before:
            raise ValueError(
                f"the training data gave no batch in epoch {self.epoch + 1}, so nothing was trained: an "
                "IterableDataset whose __iter__ yields nothing (or a generator already used up: __iter__ "
                "must start a new pass each time it is called)"
            )
        self.epoch += 1
        self._position = 0
        if self._due_checkpoint():  # before evaluating: a metric that fails costs its epoch nothing
            self._save()
        for split in ("val", "test"):
            metrics = self.evaluate(split)
            if metrics:
                self._last[split] = metrics
                self.events.on_eval(self._event(epoch=self.epoch - 1, split=split, **metrics))
        return True

    def _run_step(
        self, group: list[Batch], check: LogWindow | None, clock: Clock = NO_CLOCK
    ) -> tuple[torch.Tensor, int, float | None, float | None]:
        """Forward/backward over the micro-batches, clip, one optimizer step.

        Returns the (detached) mean loss, the number of samples and, on a logged step (`check` given: the
        steps since the last logged one), the gradient norm before clipping and the interval's loss sum
        averaged over ranks. On a logged step a non-finite loss in this step or the unchecked ones before
        it raises before the optimizer step. `clock` times the step's phases (a logged step's).
        """
        measure = check is not None
        self.model.train()
        samples = sum(self.objective.samples(batch) for batch in group)
        probe = StepMemoryProbe(self.model, self.device) if self.step + 1 == self._memory_step else None
        clock.mark("other")
        with probe if probe is not None else contextlib.nullcontext():
            parts = (self._step_model, group, self.objective, self.precision, self.scaler)
            if self._strategy_takes_clock:
                step_loss = self.strategy.forward_backward(*parts, clock)
            else:  # a strategy's own forward_backward written before the clock existed
                step_loss = self.strategy.forward_backward(*parts)
                clock.mark("forward")
                clock.explain(
                    f"{type(self.strategy).__name__}.forward_backward takes no clock argument: its copy, "
                    "forward, backward and communication are all counted as forward"
                )
        if step_loss is None:  # a rank that computes no loss (a pipeline stage before the last)
            step_loss = torch.zeros((), device=self.device)
        checked_sum = self._check_finite(check, step_loss) if check is not None else None
        clock.mark("comm" if self.world_size > 1 else "other")  # the loss summed over ranks (logged steps)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = gradients.clip_(
            self.model.parameters(),
            clip_value=self.clip_value,
            clip_norm=self.clip_norm,
            norm_of=self.strategy.total_norm,
            measure=measure,
        )
        schedule = self.config.optimizer
        factor = lr_factor(schedule.schedule, self.step, self.total_steps or 0, schedule.warmup_steps)
        optimizer_step(self.optimizer, self.scaler, self.lr * factor)
        clock.mark("optimizer")
        if probe is not None:
            self._memory = probe.report(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        clock.mark("other")
        return step_loss, samples, grad_norm, checked_sum

    def _step_boundary(self) -> bool:
        """Apply control requests (waiting while paused); True if training should stop.

        With several ranks, rank 0's requests are broadcast so every rank stops or changes at the same step.
        """
        changes = self.control.at_step_boundary() if self.strategy.is_main else Changes()
        changes, stop = self.strategy.sync_requests(changes, self.control.stop_requested)
        self._apply(changes)
        return stop

    def _apply(self, changes: Changes) -> None:
        if changes.profile_steps is not None:
            self._request_profile(changes.profile_steps)
        if changes.lr is not None:
            self.lr = changes.lr
        if changes.clip_norm is not None:
            self.clip_norm = changes.clip_norm
        if changes.clip_value is not None:
            self.clip_value = changes.clip_value
        if (changes.lr, changes.clip_norm, changes.clip_value) != (None, None, None):
            self._write_config()

    def _write_config(self) -> None:
        """config.json as training runs now: the config, with the lr and clipping in force (a dashboard's
        change, or a resume's), so that the run's record never says what no step used."""
        if self.run_dir is None or not self.strategy.is_main:  # one writer, also on a shared filesystem
            return
        optimizer = dataclasses.replace(self.config.optimizer, lr=self.lr)
        self.run_dir.write_config(
            dataclasses.replace(
                self.config, optimizer=optimizer, clip_norm=self.clip_norm, clip_value=self.clip_value
            )
        )

    def _request_profile(self, steps: int) -> None:
        """Profile the next `steps` optimizer steps (a control request) unless one is scheduled or running."""
        if self._profiler is not None and self._profiler.result is None:
            return
        first = self.step + 1
        last = first + steps - 1 if self.total_steps is None else min(first + steps - 1, self.total_steps)
        directory = self.run_dir.path if self.run_dir is not None else None
        self._profiler = StepProfiler((first, max(first, last)), self.device, directory, self.rank)
        self._profile_published = False

    # ------------------------------------------------------------------ events

    def _publish_step(
        self, window: LogWindow, grad_norm: float | None, all_ranks_sum: float | None, clock: Clock
    ) -> None:
        metrics = {**window.step_metrics(self.strategy, all_ranks_sum), **self.strategy.step_details()}
        if self._memory is not None:
            metrics["memory"], self._memory = self._memory, None
        if isinstance(clock, StepClock):
            metrics["step_time"] = clock.report()
        profiler = self._profiler
        if profiler is not None and profiler.result is not None and not self._profile_published:
            self.profile, self._profile_published = profiler.result, True
            metrics["profile"] = profiler.result.event()
        if self._compile_watch is not None:
            metrics["compile"] = self._compile_watch.report()
        self._last["train"] = {"loss": metrics["loss"]}
        self.events.on_step(
            self._event(lr=self.optimizer.param_groups[0]["lr"], grad_norm=grad_norm, **metrics)
        )

    def _event(self, **metrics: Any) -> Event:
        return {"step": self.step, "epoch": self.epoch, **metrics, "rank": self.rank, "time": time.time()}

    def _info(self) -> Event:
        return {
            "run": self.run,
            "rank": self.rank,
            "world_size": self.world_size,
            "strategy": self.strategy.describe(),
            "epochs": self.config.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": self.total_steps,
            "start_step": self.step,
            "config": self.config.to_dict(),
            "time": time.time(),
            **({"resume_changes": self._resume_changes} if self._resume_changes else {}),
        }

    def _summary(self, status: str, error: BaseException | None) -> Event:
        summary = {
            "status": status,
            "error": None if error is None else f"{type(error).__name__}: {error}",
            "checkpoint": None if self.checkpoint is None else str(self.checkpoint),
        }
        if self._compile_watch is not None:
            summary["compile"] = self._compile_watch.report()
        summary.update(self._last)
        return self._event(**summary)

    def _check_finite(self, interval: LogWindow, pending: torch.Tensor | None = None) -> float | None:
        """Raise NonFiniteLossError if a loss since the last check (plus `pending`) was NaN or infinite.

        Returns the loss sum checked (averaged over ranks), or None when there was nothing to check.
        """
        total = interval.loss_sum_with(pending)
        if total is None:
            return None
        value = loss_sum_over_ranks(self.strategy, total)  # one sync checks the whole interval
        if not math.isfinite(value):
            first = self.step - interval.steps + 1
            last = self.step + (1 if pending is not None else 0)
            state = dict(epoch=self.epoch, checkpoint=self.checkpoint, lr=self.lr, clip_norm=self.clip_norm)
            message = non_finite_message(value, first, last, precision=self.config.precision, **state)
            raise NonFiniteLossError(message)
        return value

    # ------------------------------------------------------------------ state

    def _start(self, resume: bool | str | os.PathLike) -> None:
        path = self._agreed_resume_path(resume)
        self._memory = None
        self._resume_changes = ""
        if path is None:
            self.step = self.epoch = self._position = 0
            # ranks on different data draw different dropout masks; ranks sharing data (tensor parallel)
            # draw the same ones, so their replicated activations stay equal
            torch.manual_seed(self.config.seed + self.strategy.data_rank)
        else:
            resumed = restore_training_state(
                path, self.strategy, self.model, self.optimizer, self.scaler, self.config
            )
            where, self._resume_changes = resumed.where, resumed.describe()
            if self._resume_changes and self.strategy.is_main:
                print(f"resuming from {path} with new settings: {self._resume_changes}", file=sys.stderr)
            self.step, self.epoch, self._position = where.step, where.epoch, where.position
            self.lr, self.clip_norm, self.clip_value = where.lr, where.clip_norm, where.clip_value
            self.checkpoint = path
        self._profiler = None  # a request of an earlier fit does not carry over
        if self.config.profile_steps is not None:
            directory = self.run_dir.path if self.run_dir is not None else None
            self._profiler = StepProfiler(self.config.profile_steps, self.device, directory, self.rank)
            self._profile_published = False
        known = self.total_steps is not None
        self._memory_step = self.step + (1 if known and self.total_steps - self.step < 2 else 2)
        self._write_config()

    def _agreed_resume_path(self, resume: bool | str | os.PathLike) -> Path | None:
        """Rank 0's answer to "resume from where?", taken by every rank. The run's files change while the
        ranks look (rank 0 starts the metrics log as soon as it has decided), so ranks deciding alone could
        disagree: one resuming, another refusing a run that "logged but never saved"."""
        decision: Path | ValueError | None = None
        if self.strategy.is_main:
            try:
                decision = resume_path(resume, self.run_dir)
            except ValueError as error:
                decision = error
        agreed = self.strategy.gather_object(decision)[0]
        if isinstance(agreed, ValueError):
            raise ValueError(str(agreed))
        return agreed

    def _save(self) -> None:
        """Rank 0 writes the checkpoint (every rank takes part in gathering the state and RNGs)."""
        if self.run_dir is None:
            return
        where = LoopPosition(self.step, self.epoch, self._position, self.lr, self.clip_norm, self.clip_value)
        state = capture_training_state(
            self.strategy, self.model, self.optimizer, self.scaler, where, self.config
        )
        self.checkpoint = self.run_dir.save(state) if self.strategy.is_main else self.run_dir.checkpoint_path

    def _due_checkpoint(self) -> bool:
        return self.run_dir is not None and self.epoch % self.config.checkpoint_every == 0
