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
import functools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workbench._validate import check_choice
from workbench.data import as_splits
from workbench.train import gradients
from workbench.train.activation_checkpointing import ActivationCheckpointing
from workbench.train.arguments import (
    check_arguments,
    check_device,
    check_optimizer,
    check_resume,
    check_training_split,
    warn_unevaluated_metrics,
)
from workbench.train.batches import (
    check_epoch_trained,
    count_steps,
    end_workers,
    epoch_steps,
    fit_done,
    split_loaders,
)
from workbench.train.best_epoch import BestEpoch
from workbench.train.compilation import check_can_compile, compile_module
from workbench.train.config import TrainConfig
from workbench.train.control import Changes, Settings, TrainControl
from workbench.train.evaluation import evaluate_shard
from workbench.train.events import Callback, CallbackList
from workbench.train.fit_events import FitEvents
from workbench.train.instruments import InstrumentReadings, StepInstruments
from workbench.train.interrupts import after_interrupt, one_line_interrupts
from workbench.train.job import InProcessJob
from workbench.train.log_window import LogWindow
from workbench.train.loss_check import NonFiniteLossError, check_finite
from workbench.train.lr_scheduler import LrScheduler, lr_policy
from workbench.train.metrics_log import MetricsLog
from workbench.train.objective import Objective, StepFn
from workbench.train.optim import OptimizerFactory
from workbench.train.precision import resolve_precision
from workbench.train.predict import predict_outputs, prediction_batches
from workbench.train.progress import fit_progress_shown
from workbench.train.run_dir import LoopPosition, RunDir, val_epoch
from workbench.train.run_record import RunRecord
from workbench.train.step_time import NO_CLOCK, Clock, clocked_forward_backward
from workbench.train.strategy import Batch, LossFn, SingleDevice, Strategy
from workbench.train.supervision import supervised_config, supervised_control_and_callbacks
from workbench.train.trained_what import trained_what
from workbench.train.trainer_keywords import PeersAttributes, explaining_unknown_keywords
from workbench.train.weight_average import WeightAverage

__all__ = ["Batch", "FitResult", "LossFn", "NonFiniteLossError", "StepFn", "Trainer"]


@dataclass(frozen=True)
class FitResult:
    """What `Trainer.fit` returns.

    Attributes:
        status: ``"finished"`` or ``"stopped"`` (a stop request; a checkpoint was saved when possible).
        step, epoch: optimizer steps and whole epochs done.
        seconds: wall time of this `fit` call.
        train_loss: the last logged training loss.
        metrics: last evaluation per split, e.g. ``{"val": {"loss": 0.1, "accuracy": 0.97}}``; with early
            stopping's ``restore_best``, val's are the best epoch's, whose weights the model then has.
        checkpoint: the last checkpoint written, if the trainer has a run directory.
        best_epoch, best_step: with ``TrainConfig(early_stopping=...)``, the epoch of the best val evaluation,
            numbered from 0 as the events and the progress lines number them, and the optimizer step it came
            after (None before any evaluation).

    Example:
        >>> import torch, torch.nn.functional as F
        >>> from torch.utils.data import TensorDataset
        >>> data = TensorDataset(torch.randn(64, 3), torch.arange(64) % 2)
        >>> result = Trainer(torch.nn.Linear(3, 2), F.cross_entropy, (data, data), TrainConfig(epochs=2,
        ...                  batch_size=16), progress=False).fit()
        >>> result.status, result.step, result.epoch, sorted(result.metrics["val"]), result.checkpoint
        ('finished', 8, 2, ['accuracy', 'loss'], None)
    """

    status: str
    step: int
    epoch: int
    seconds: float
    train_loss: float | None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    checkpoint: Path | None = None
    best_epoch: int | None = None
    best_step: int | None = None

    @classmethod
    def of(
        cls,
        status: str,
        where: tuple[int, int, tuple[int | None, int | None], float],
        last: dict[str, dict[str, float]],
        checkpoint: Path | None,
    ) -> FitResult:
        """The result of a fit at `where` (steps, epochs, the best evaluation's epoch and step or Nones, and
        its seconds) whose `last` metrics per split (``"train"``: its loss) are known."""
        metrics = {split: values for split, values in last.items() if split != "train"}
        train_loss = last.get("train", {}).get("loss")
        step, epoch, best, seconds = where
        return cls(status, step, epoch, seconds, train_loss, metrics, checkpoint, *best)


class Trainer(InProcessJob, InstrumentReadings, PeersAttributes):  # a Job here; peers' attributes explained
    """Trains `model` on the training split, evaluating val after each epoch (and every ``eval_every_steps``)
    and test once, when the fit finishes (not when stopped: test judges the final model, never a choice).

    Args:
        model: a torch module; moved to the config's device.
        loss_fn: ``loss_fn(output, target) -> scalar tensor`` with mean reduction (e.g. F.cross_entropy)
            for ``(inputs, target)`` batches (``(x1, x2, target)``: ``model(x1, x2)``); None when `step_fn`
            or the model itself computes the loss (see `workbench.train.objective`).
        splits: the data: workbench `Splits`/`Dataset` (the in-memory fast path), any torch map-style or
            iterable ``Dataset``, a ``DataLoader``, a tuple ``(train, val, test)`` of those (val, test
            optional), ``Splits(train, val=..., test=...)`` or a dict; see `workbench.data.as_splits`.
        config: a `TrainConfig` (``config.loader`` sets DataLoader workers, pinning, collate_fn).
        step_fn: ``step_fn(model, batch) -> loss`` or ``-> (loss, outputs)`` for batches of any structure
            (dicts, nested); only with ``loss_fn=None``. Evaluation uses it too.
        metrics: name → ``fn(outputs, batch) -> float``, a `Metric` such as ``F1`` or a torchmetrics metric,
            evaluated on val/test, exact over ranks; accuracy is added for classification.
        callbacks: receivers of the loop's events (dashboards, loggers, progress bars).
        control: a `TrainControl` through which another thread pauses, stops or changes lr/clipping
            (under a launcher, its control unless given here: see `workbench.train.supervision`).
        run: a run name; with it, metrics, config and checkpoints go to ``runs_dir/run/``; a fresh fit on a
            name that holds a run is refused (``fit(resume=True)`` continues it) unless ``overwrite=True``.
        runs_dir: where run directories live (default ``runs``).
        optimizer_factory: ``factory(params, optimizer_config) -> torch.optim.Optimizer`` for optimizers
            beyond sgd/adam/adamw (e.g. the fused numba ones) or param groups of your own (each keeps its lr
            as a multiple of ``optimizer_config.lr`` through the schedule: `workbench.train.optim.GroupLrs`).
        scheduler: a torch lr scheduler on its optimizer (``trainer.scheduler``) in the config's schedule's
            place: ``LrScheduler(lambda optimizer, plan: OneCycleLR(optimizer, plan.lr, plan.steps), "step")``
        strategy: where to train: `SingleDevice` (default, on ``config.device``), `DataParallel` or
            `FullyShardedDataParallel` (one process per rank, each on its shard of the data; batch_size is
            per rank, so the global batch is batch_size × ranks), `PipelineParallel` or `TensorParallel`
            (every rank on the same batches of batch_size).
        progress: a progress bar for each fit (a widget in a notebook, else text on stderr); None: in a
            notebook or terminal unless a callback shows progress (a `Dashboard`), on the main rank only.

    Example (your own torch data; a workbench `Splits` takes the same call):
        >>> from torch.utils.data import TensorDataset
        >>> from workbench import models
        >>> from workbench.train import OptimizerConfig
        >>> data = TensorDataset(x := torch.randn(256, 10), x.sum(dim=1, keepdim=True))  # a map-style dataset
        >>> config = TrainConfig(epochs=2, batch_size=64, optimizer=OptimizerConfig("sgd", lr=0.1))
        >>> result = Trainer(models.linear(10), torch.nn.functional.mse_loss, data, config).fit()
        >>> result.status, result.step
        ('finished', 8)
    """

    @explaining_unknown_keywords  # optimizer=, scheduler=, epochs=...: what was meant, and the line to write
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
        scheduler: LrScheduler | None = None,
        strategy: Strategy | None = None,
        overwrite: bool = False,
        progress: bool | None = None,
    ) -> None:
        check_arguments(model, config, strategy, callbacks, optimizer_factory)
        self.config = supervised_config(config)  # inside a launcher's workers: Launch(config=...)'s
        self.strategy = strategy if strategy is not None else SingleDevice(self.config.device)
        self.loss_fn, self.splits, self.progress = loss_fn, as_splits(splits), progress
        what = trained_what(model, self.splits.sizes())  # the model as given: a strategy may shard it
        check_training_split(self.splits.train)
        self.objective = Objective.for_data(loss_fn, step_fn, metrics, self.splits.train)
        self.strategy.check_objective(self.objective)
        self._forward_backward = clocked_forward_backward(self.strategy)
        self.run, self.run_dir = run, RunDir.named(run, runs_dir) if run is not None else None
        self.strategy.bind()
        self.strategy.validate(model, self.config)
        self.device = check_device(self.config, self.strategy.device)
        self.precision = resolve_precision(self.config.precision, self.device)
        check_can_compile(self.config.compile, self.device)
        self.rank, self.world_size = self.strategy.rank, self.strategy.world_size
        self._checkpointing = ActivationCheckpointing(model, self.config.activation_checkpointing)  # as given
        self.model = self.strategy.wrap(model)  # on the device (a pipeline moves only its stage)
        self._step_model = compile_module(self.model, self.config.compile)  # what steps call: compiled or not
        self.control, callbacks = supervised_control_and_callbacks(control, callbacks)  # a launcher's
        if self.run_dir is not None and self.strategy.is_main:
            callbacks.insert(0, MetricsLog(self.run_dir.path))
        self.events = CallbackList(callbacks)
        self.report = FitEvents(self.events, self.strategy, self.config, run, what)  # the typed events
        self.optimizer = check_optimizer(optimizer_factory, self.model.parameters(), self.config.optimizer)
        self.scaler = self.precision.scaler()
        self._loaders = split_loaders(self.splits, self.config, self.strategy)
        main, val_metrics = self.strategy.is_main, self.objective.metrics if "val" in self._loaders else None
        self.steps_per_epoch, self.total_steps = steps = count_steps(self._loaders, self.config, warn=main)
        self._lrs = lr_policy(self.optimizer, self.config, scheduler, steps, val_metrics, warn=main)
        warn_unevaluated_metrics(self.splits, metrics, warn=main)
        self.step = self.epoch = self._position = 0  # steps, epochs, micro-batches: what a checkpoint holds
        self.settings = Settings.of(self.config)  # the lr and clipping in force
        described = self._lrs.described()
        self.record = RunRecord(self.run_dir, self.strategy, self.config, overwrite, described, what["model"])
        self._average = WeightAverage(self.config.ema_decay, self.model, self.strategy)  # None: no average
        self._best = BestEpoch(self.objective, self._loaders, self.record, steps[0], self._average)
        self.instruments = StepInstruments(self.config, self.device, self.rank, self.record.folder, *steps)

    @property
    def scheduler(self) -> Any:
        """The torch lr scheduler of ``scheduler=`` (built anew at each fresh fit), or None."""
        return getattr(self._lrs, "scheduler", None)

    def fit(self, resume: bool | str | os.PathLike = False) -> FitResult:
        """Train until the configured epochs (or ``max_steps``) are done or a stop is requested.

        Args:
            resume: ``True`` continues from this run's checkpoint (a run that never started starts fresh;
                one that logged but never saved is refused), a path from that checkpoint; changed optimizer
                settings apply and are reported; on CPU a resume continues bit-identically.

        Raises:
            TrainingInterrupted: the stop button, Ctrl-C or SIGTERM stopped the fit after its step, saved;
                `RanksStopped` on ranks from `from_env()`: a signal stopped every rank at one step, saved.
            NonFiniteLossError: the loss became NaN/inf; the last good checkpoint stays as it was.
            RunInUseError: another live process is fitting this run name (it is named).
            ValueError: the checkpoint does not fit (config, optimizer kind, model) or is not readable.
        """
        check_resume(resume)
        started = time.perf_counter()
        shown = fit_progress_shown(self.progress, self.events, is_main=self.strategy.is_main)
        held = self.record.held(), self.instruments.watching_fit(), self._checkpointing.applied(self.model)
        with shown, one_line_interrupts(self) as pressed, _all_of(held):
            status = self._fit(resume)
        where = (self.step, self.epoch, (self._best.epoch, self._best.step), time.perf_counter() - started)
        return after_interrupt(self, pressed, FitResult.of(status, where, self.report.last, self.checkpoint))

    def _fit(self, resume: bool | str | os.PathLike) -> str:
        resume_changes, unlogged_val = self._start(resume)
        try:
            self.report.fit_start(self.step, (self.steps_per_epoch, self.total_steps), resume_changes)
            if unlogged_val is not None:  # the val after the checkpoint, which a crash kept out of the log
                self.report.evaluated(self.step, val_epoch(self.epoch, self._position), "val", unlogged_val())
            running = True  # until a stop is requested
            while running and not fit_done(self.config, self.step, self.epoch) and not self._best.stopped:
                running = self._run_epoch()
            status = "finished" if running else "stopped"
            if status == "stopped" or self._position or self.record.due(self.epoch):  # inside: after val
                self._save()
            if status == "finished":  # the held-out split once, on the final (or best) model: never to choose
                evaluated = val_epoch(self.epoch, self._position)  # the epoch of the last val evaluation
                held = self._best.finish(self.model, (self.step, evaluated), self.report.last)  # the best's
                self.report.evaluated(self.step, max(held, 0), "test", self.evaluate("test"))
        except BaseException as error:
            end_workers(self._loaders.values())  # now, not at the gc that frees the traceback
            self.report.fit_end((self.step, self.epoch), "failed", error, **self._ending())
            raise
        self.report.fit_end((self.step, self.epoch), status, None, **self._ending())
        return status

    def evaluate(self, split: str = "val") -> dict[str, float]:
        """Mean loss and metrics (accuracy for classification, and the `metrics` given) of the model on
        `split` ("train", "val", "test")."""
        check_choice("split", split, ("train", "val", "test"))
        if split not in self._loaders:
            return {}  # an empty split
        model = self.strategy.unwrap(self.model)  # ranks see different numbers of batches: no DDP here
        with self._average.applied():  # within a fit, the averaged weights (ema_decay)
            return evaluate_shard(model, self._loaders[split], self.strategy, self.objective, self.precision)

    def predict(self, data: Any) -> Any:
        """The model's outputs on `data` (a split's name, a tensor of inputs, a Dataset or a DataLoader that
        does not shuffle), in its order, on the CPU: ``trainer.predict("test").argmax(dim=1)`` gives the
        test split's classes (`workbench.train.predict`)."""
        batches = prediction_batches(data, self.splits, self.config)
        model = self.strategy.unwrap(self.model)  # every rank predicts every batch, as evaluation forwards
        return predict_outputs(model, batches, self.strategy, self.objective, self.precision)

    def _run_epoch(self) -> bool:
        """Run the rest of the current epoch; False if a stop was requested."""
        interval = LogWindow()
        batches = epoch_steps(self._loaders["train"], self.epoch, self._position, self.config, self.strategy)
        from_start, steps_before = self._position == 0, self.step
        fetching = time.perf_counter()
        for group, last in batches:
            ends = last or self.step + 1 == self.config.max_steps  # the epoch's or the fit's last step
            paused_at = time.perf_counter()
            stop = self._step_boundary()
            interval.exclude(time.perf_counter() - paused_at)  # requests and pauses are outside the step
            if stop:
                self._check_finite(interval)  # never checkpoint a model that saw a non-finite loss
                return False
            logged = (self.step + 1) % self.config.log_every == 0 or ends
            clock = self.instruments.before_step(self.step + 1, logged, data_s=paused_at - fetching)
            loss, samples, grad_norm, checked_sum = self._run_step(group, interval if logged else None, clock)
            self.step += 1
            self.instruments.after_step(self.step, interval, clock)  # compile seconds leave the step's time
            self._position += len(group)
            interval.add(loss, samples)
            if logged:
                extras = {"lr": self._lrs.now, "grad_norm": grad_norm, **self.instruments.step_metrics(clock)}
                self.report.step((self.step, self.epoch), interval, checked_sum, **extras)
                interval = LogWindow()
            if ends and not last:  # max_steps ends the fit inside this epoch: saved, val on its model
                self._save()  # (an epoch's scheduler steps at whole epochs only)
                self._val(self.epoch)
                return True
            every = self.config.eval_every_steps
            if every and self.step % every == 0 and not ends:  # val within the epoch too; its end evaluates
                with interval.excluding():  # evaluating is no step's time
                    self._val(self.epoch)
                if self._best.stopped:
                    return True  # early stopping's patience ran out within the epoch
            if self.record.due_at_step(self.step) and not ends:  # the epoch's (or fit's) end saves below
                with interval.excluding():
                    self._save()
            fetching = time.perf_counter()  # the next batch's wait starts
        check_epoch_trained(self.epoch, from_start, self.step - steps_before)
        self.epoch, self._position = self.epoch + 1, 0
        if self.record.due(self.epoch) or self.record.due_at_step(self.step):  # before val, which may fail
            self._save()
        self._lrs.epoch_done(self._val(self.epoch - 1))  # a torch scheduler of yours steps (every="epoch")
        return True

    def _val(self, epoch: int) -> dict[str, float]:
        """Val after this step, in epoch `epoch`: evaluated, reported and judged by early stopping."""
        val = self.report.evaluated(self.step, epoch, "val", self.evaluate("val"))
        self._best.after_eval(self.step, epoch, val, self.model)  # the best evaluation and the patience
        self._lrs.evaluated(self.step, val)  # a torch scheduler of yours steps (every="eval")
        return val

    def _run_step(
        self, group: list[Batch], check: LogWindow | None, clock: Clock = NO_CLOCK
    ) -> tuple[torch.Tensor, int, float | None, float | None]:
        """Forward/backward over the micro-batches, clip, one optimizer step; the (detached) mean loss, the
        samples and, on a logged step (`check`: the steps since the last logged one), the gradient norm before
        clipping and the loss sum over ranks, checked finite before the optimizer step."""
        _train_mode(self.model, self.strategy)
        samples = sum(self.objective.samples(batch) for batch in group)
        clock.mark("other")
        with self.instruments.measuring_memory(self.step + 1, self.model):
            parts = (self._step_model, group, self.objective, self.precision, self.scaler)
            step_loss = self._forward_backward(*parts, clock)
        if step_loss is None:  # a rank that computes no loss (a pipeline stage before the last)
            step_loss = torch.zeros((), device=self.device)
        checked_sum = self._check_finite(check, step_loss, group) if check is not None else None
        clock.mark("comm" if self.world_size > 1 else "other")  # the loss summed over ranks (logged steps)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        settings = self.settings
        limits = dict(clip_value=settings.clip_value, clip_norm=settings.clip_norm, measure=check is not None)
        grad_norm = gradients.clip_(self.model.parameters(), norm_of=self.strategy.total_norm, **limits)
        self._lrs.step_optimizer(self.optimizer, self.scaler, self.step, self.settings.lr)  # at its lrs
        self._average.update()
        clock.mark("optimizer")
        self.instruments.optimizer_stepped(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        clock.mark("other")
        return step_loss, samples, grad_norm, checked_sum

    def _step_boundary(self) -> bool:
        """Apply rank 0's control requests on every rank at this step (waiting while paused); True: stop."""
        changes = self.control.at_step_boundary() if self.strategy.is_main else Changes()
        changes, stop = self.strategy.sync_requests(changes, self.control.stop_requested)
        if changes.profile_steps is not None:
            self.instruments.request_profile(changes.profile_steps, self.step)
        if self.settings.apply(changes):
            self.record.write_config(self.settings)  # the record never says what no step used
        return stop

    def _ending(self) -> dict[str, Any]:
        """Instruments stopped, the model given the averaged weights (ema_decay); the last event's extras."""
        self.instruments.finish()
        self._average.finish()
        return {"checkpoint": self.checkpoint, **self.instruments.summary(), **self._best.summary()}

    def _check_finite(self, window: LogWindow, pending: torch.Tensor | None = None, group=()) -> float | None:
        """The loss sum over ranks since the last check (`check_finite`: raises if NaN or infinite)."""
        at = dict(step=self.step, epoch=self.epoch, checkpoint=self.checkpoint, settings=self.settings)
        return check_finite(self.strategy, window, pending, group, self.config.precision, self.control, **at)

    def _start(self, resume: bool | str | os.PathLike) -> tuple[str, Callable[[], dict[str, float]] | None]:
        """Where a fit starts (seeded, or as `resume` left off); its changes, and the val its log lacks."""
        resumed = self.record.resume(resume, self.model, self.optimizer, self.scaler)
        if resumed is None:
            self.step = self.epoch = self._position = 0
            torch.manual_seed(self.config.seed + self.strategy.data_rank)  # each data shard its dropout masks
        else:  # a LoopPosition: step, epoch, position, then the settings (as `_save` writes it)
            self.step, self.epoch, self._position, *settings = dataclasses.astuple(resumed.where)
            self.settings = Settings(*settings)
        self._average.start(resumed)
        val_again = functools.cache(lambda: self.evaluate("val"))  # the val after the checkpoint, once
        self._lrs.begin(self.optimizer, resumed, self.settings.lr, val_again)
        self._best.start(resumed, val_again, self.model)
        self.instruments.start(self.step)
        self.record.write_config(self.settings)
        unlogged = self.record.lacks_val(resumed)  # a crash during the val after the checkpoint
        return (resumed.describe() if resumed else ""), (val_again if unlogged else None)

    def _save(self) -> None:
        where = LoopPosition(self.step, self.epoch, self._position, *dataclasses.astuple(self.settings))
        loop = (self._lrs.state(), self._best.state(), self._average)
        self.record.save(where, self.model, self.optimizer, self.scaler, *loop)


@contextlib.contextmanager
def _all_of(managers: Iterable[contextlib.AbstractContextManager]) -> Iterator[None]:
    """Inside each of `managers`, entered in order (and left in reverse)."""
    with contextlib.ExitStack() as stack:
        for manager in managers:
            stack.enter_context(manager)
        yield


def _train_mode(model: torch.nn.Module, strategy: Strategy) -> None:
    """`model` in train mode where an evaluation (which switches the unwrapped module) or its owner left it
    in eval mode; not on every step: ``train()`` walks every module, ~2 µs each."""
    if not (model.training and strategy.unwrap(model).training):
        model.train()
