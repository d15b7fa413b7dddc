"""The training loop for one device: `Trainer(model, loss_fn, splits, config).fit()`.

One public method, `fit`; the steps are private (`_run_epoch`, `_run_step`, `_evaluate`, `_save`).
The loop publishes plain-dict events to callbacks (`workbench.train.events`) and reads requests from a
`TrainControl` at step boundaries; it imports no UI code.

    from workbench.data import load_dataset, split_dataset
    from workbench.train import Trainer, TrainConfig, OptimizerConfig, models
    splits = split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)
    trainer = Trainer(models.mlp(64, 10), torch.nn.functional.cross_entropy, splits,
                      TrainConfig(epochs=5, optimizer=OptimizerConfig("adam", lr=3e-3)), run="digits")
    result = trainer.fit()          # runs/digits/{metrics.jsonl,checkpoint.pt,config.json}
    trainer.fit(resume=True)        # continue from runs/digits/checkpoint.pt
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workbench.data import ShardedLoader, Splits
from workbench.train import gradients
from workbench.train.checkpoint import load_checkpoint, save_checkpoint
from workbench.train.config import TrainConfig
from workbench.train.control import Changes, TrainControl
from workbench.train.events import Broadcast, Callback, Event
from workbench.train.memory import StepMemoryProbe
from workbench.train.metrics_log import MetricsLog
from workbench.train.optim import OptimizerFactory, build_optimizer, lr_factor
from workbench.train.precision import resolve_precision
from workbench.train.strategy import Batch, LossFn, SingleDevice, Strategy

CHECKPOINT_FILE = "checkpoint.pt"
CONFIG_FILE = "config.json"
# Changing these between a checkpoint and its resume would change the data order or the step count
# (batch_size as the global batch: per rank × shards of the data, so the number of ranks may change).
_RESUME_MUST_MATCH = ("batch_size", "accumulate", "seed", "epochs")

__all__ = ["Batch", "FitResult", "LossFn", "NonFiniteLossError", "Trainer"]


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; training stopped before the optimizer step."""


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
    """Trains `model` on ``splits.train`` with `loss_fn`, evaluating on val and test after each epoch.

    Args:
        model: a torch module; moved to the config's device.
        loss_fn: ``loss_fn(output, target) -> scalar tensor`` with mean reduction (e.g. F.cross_entropy).
        splits: train/val/test datasets from `workbench.data.split_dataset`; val or test may be empty.
        config: a `TrainConfig`.
        callbacks: receivers of the loop's events (dashboards, loggers, progress bars).
        control: a `TrainControl` through which another thread pauses, stops or changes lr/clipping.
        run: a run name; with it, metrics, config and checkpoints go to ``runs_dir/run/``.
        runs_dir: where run directories live (default ``runs``).
        optimizer_factory: ``factory(params, optimizer_config) -> torch.optim.Optimizer`` for optimizers
            beyond sgd/adam/adamw (e.g. the fused numba ones).
        strategy: where to train: `SingleDevice` (default, on ``config.device``), `DataParallel` or
            `FullyShardedDataParallel` (one process per rank, each on its shard of the data; batch_size is
            per rank, so the global batch is batch_size × ranks), `PipelineParallel` or `TensorParallel`
            (every rank on the same batches of batch_size).

    Example:
        >>> from workbench.data import load_dataset, split_dataset
        >>> from workbench.train import OptimizerConfig, models
        >>> splits = split_dataset(load_dataset("regression", n_samples=512), (0.8, 0.1, 0.1), seed=0)
        >>> config = TrainConfig(epochs=2, batch_size=64, optimizer=OptimizerConfig("sgd", lr=0.1))
        >>> result = Trainer(models.linear(10), torch.nn.functional.mse_loss, splits, config).fit()
        >>> result.status, result.step
        ('finished', 14)
    """

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: LossFn,
        splits: Splits,
        config: TrainConfig | None = None,
        *,
        callbacks: Iterable[Callback] = (),
        control: TrainControl | None = None,
        run: str | None = None,
        runs_dir: str | os.PathLike = "runs",
        optimizer_factory: OptimizerFactory | None = None,
        strategy: Strategy | None = None,
    ) -> None:
        self.config = config if config is not None else TrainConfig()
        self.strategy = strategy if strategy is not None else SingleDevice(self.config.device)
        if len(splits.train) == 0:
            raise ValueError("splits.train is empty; give the training split at least one sample")
        if run is not None and (not isinstance(run, str) or not run or "/" in run or run in (".", "..")):
            raise ValueError(f"run must be a non-empty name without '/', got {run!r}")
        self.strategy.bind()
        self.strategy.validate(model, self.config)
        self.device = self.strategy.device
        if self.config.device not in ("auto", self.device.type):
            raise ValueError(
                f"config.device={self.config.device!r} but the strategy trains on {self.device}; "
                "use device='auto' with a distributed strategy"
            )
        self.precision = resolve_precision(self.config.precision, self.device)
        self.rank, self.world_size = self.strategy.rank, self.strategy.world_size
        self.model = self.strategy.wrap(model)  # on the device (a pipeline moves only its stage)
        self.loss_fn = loss_fn
        self.splits = splits
        self.classification = splits.train.task == "classification"
        if control is None:
            control = self.strategy.control if self.strategy.control is not None else TrainControl()
        self.control = control
        self.run = run
        self.run_dir = Path(runs_dir) / run if run is not None else None
        callbacks = [*self.strategy.callbacks, *callbacks]
        if self.run_dir is not None and self.strategy.is_main:
            callbacks.insert(0, MetricsLog(self.run_dir))
        self.events = Broadcast(callbacks)
        factory = optimizer_factory if optimizer_factory is not None else build_optimizer
        self.optimizer = factory(self.model.parameters(), self.config.optimizer)
        self.scaler = self.precision.scaler()
        self._loaders = {
            name: ShardedLoader(
                getattr(splits, name),
                self.config.batch_size,
                shuffle=name == "train",
                seed=self.config.seed,
                rank=self.strategy.data_rank,
                world_size=self.strategy.data_world_size,
                remainder="pad" if name == "train" else "uneven",
            )
            for name in ("train", "val", "test")
            if len(getattr(splits, name)) > 0
        }
        self.steps_per_epoch = math.ceil(len(self._loaders["train"]) / self.config.accumulate)
        self.total_steps = self.steps_per_epoch * self.config.epochs
        # Where the loop stands; a checkpoint holds exactly these plus the model/optimizer/RNG state.
        self.step = 0
        self.epoch = 0
        self._position = 0  # micro-batches of the current epoch already used
        self.lr = self.config.optimizer.lr
        self.clip_norm = self.config.clip_norm
        self.clip_value = self.config.clip_value
        self.checkpoint: Path | None = None
        self._last: dict[str, dict[str, float]] = {}
        # a fit measures memory at its second step (its first when it has one): the first also does
        # one-off work (a pipeline's shape inference), and from the second on the optimizer state exists
        self._memory_step = 1
        self._memory: dict[str, Any] | None = None  # measured, to send with the next logged step

    # ------------------------------------------------------------------ public

    def add_callback(self, callback: Callback) -> None:
        """Subscribe `callback` to this trainer's events (a dashboard attaching itself, for example)."""
        self.events.callbacks.append(callback)

    def fit(self, resume: bool | str | os.PathLike = False) -> FitResult:
        """Train until the configured epochs are done or a stop is requested.

        Args:
            resume: ``True`` continues from this run's checkpoint (fresh start if there is none yet);
                a path continues from that checkpoint. Resuming on CPU continues bit-identically.

        Raises:
            NonFiniteLossError: the loss became NaN/inf; the last good checkpoint stays as it was.
        """
        started = time.perf_counter()
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
            self.events.on_fit_end(self._summary("failed", error))
            raise
        self.events.on_fit_end(self._summary(status, None))
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

    def evaluate(self, split: str = "val") -> dict[str, float]:
        """Mean loss (and accuracy for classification) of the model on `split` ("train", "val", "test")."""
        if split not in ("train", "val", "test"):
            raise ValueError(f"split={split!r} is not supported; allowed values: 'train', 'val', 'test'")
        if split not in self._loaders:
            return {}  # an empty split
        loader = self._loaders[split]
        model = self.strategy.unwrap(self.model)  # ranks see different numbers of batches: no DDP here
        model.eval()
        # loss sum, correct predictions, samples, predictions: summed over this rank's shard, then over
        # the ranks whose results count (one per shard of the data)
        totals = torch.zeros(4, dtype=torch.float64, device=self.device)
        # where every rank must join every forward (FSDP), a rank out of batches repeats a sample uncounted
        spare = getattr(self.splits, split)
        rounds = self.strategy.forward_rounds(len(loader))
        extra = itertools.repeat((spare.features[:1], spare.targets[:1], False), rounds - len(loader))
        with torch.no_grad():
            for x, y, counted in itertools.chain(((x, y, True) for x, y in loader), extra):
                x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
                with self.precision.autocast():
                    output = self.strategy.predict(model, x)
                    if output is None or not counted or not self.strategy.counts_loss:
                        continue
                    loss = self.loss_fn(output, y)
                totals[0] += loss.double() * len(x)
                if self.classification:  # per sample, or per token (outputs (B, T, classes), targets (B, T))
                    totals[1] += (output.argmax(dim=-1) == y).sum()
                    totals[3] += y.numel()
                totals[2] += len(x)
        loss_sum, correct, count, predictions = self.strategy.all_reduce(totals).tolist()
        if count == 0:
            return {}
        metrics = {"loss": loss_sum / count}
        if self.classification:
            metrics["accuracy"] = correct / predictions
        return metrics

    # ------------------------------------------------------------------ loop

    def _run_epoch(self) -> bool:
        """Run the rest of the current epoch; False if a stop was requested."""
        loader = self._loaders["train"]
        loader.set_epoch(self.epoch)
        interval = _Interval()
        for group in self._step_groups(loader):
            paused_at = time.perf_counter()
            stop = self._step_boundary()
            interval.exclude(time.perf_counter() - paused_at)
            if stop:
                self._check_finite(interval)  # never checkpoint a model that saw a non-finite loss
                return False
            logged = (self.step + 1) % self.config.log_every == 0 or self._position + len(group) >= len(
                loader
            )
            loss, samples, grad_norm, checked_sum = self._run_step(group, interval if logged else None)
            self.step += 1
            self._position += len(group)
            interval.add(loss, samples)
            if logged:
                self._publish_step(interval, grad_norm, checked_sum)
                interval = _Interval()
        self.epoch += 1
        self._position = 0
        for split in ("val", "test"):
            metrics = self.evaluate(split)
            if metrics:
                self._last[split] = metrics
                self.events.on_eval(self._event(epoch=self.epoch - 1, split=split, **metrics))
        if self._due_checkpoint():
            self._save()
        return True

    def _step_groups(self, loader: ShardedLoader) -> Iterator[list[Batch]]:
        """Micro-batches grouped per optimizer step, skipping those already used (resume)."""
        group: list[Batch] = []
        for index, batch in enumerate(loader):
            if index < self._position:
                continue
            group.append(batch)
            if len(group) == self.config.accumulate:
                yield group
                group = []
        if group:
            yield group

    def _run_step(
        self, group: list[Batch], check: _Interval | None
    ) -> tuple[torch.Tensor, int, float | None, float | None]:
        """Forward/backward over the micro-batches, clip, one optimizer step.

        Returns the (detached) mean loss, the number of samples and, on a logged step (`check` given: the
        steps since the last logged one), the gradient norm before clipping and the interval's loss sum
        averaged over ranks. On a logged step a non-finite loss in this step or the unchecked ones before
        it raises before the optimizer step.
        """
        measure = check is not None
        self.model.train()
        samples = sum(len(x) for x, _ in group)
        probe = StepMemoryProbe(self.model, self.device) if self.step + 1 == self._memory_step else None
        with probe if probe is not None else contextlib.nullcontext():
            step_loss = self.strategy.forward_backward(
                self.model, group, self.loss_fn, self.precision, self.scaler
            )
        if step_loss is None:  # a rank that computes no loss (a pipeline stage before the last)
            step_loss = torch.zeros((), device=self.device)
        checked_sum = self._check_finite(check, step_loss) if check is not None else None
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = self._clip_gradients(measure)
        factor = lr_factor(
            self.config.optimizer.schedule, self.step, self.total_steps, self.config.optimizer.warmup_steps
        )
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = self.lr * factor
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if probe is not None:
            self._memory = probe.report(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        return step_loss, samples, grad_norm, checked_sum

    def _clip_gradients(self, measure: bool) -> float | None:
        """Clip by value, then by global norm; returns the norm before clipping when measured or clipped."""
        params = [p for p in self.model.parameters() if p.grad is not None]
        grads = [p.grad for p in params]
        norm = None
        if measure or self.clip_norm:
            norm = self.strategy.total_norm(grads)
        if self.clip_value:
            gradients.clip_by_value_(params, self.clip_value)
        if self.clip_norm:
            clip_norm = self.strategy.total_norm(grads) if self.clip_value else norm
            gradients.clip_by_norm_(params, self.clip_norm, clip_norm)
        return float(norm) if measure else None

    def _step_boundary(self) -> bool:
        """Apply control requests (waiting while paused); True if training should stop.

        With several ranks, rank 0's requests are broadcast so every rank stops or changes at the same step.
        """
        changes = self.control.at_step_boundary() if self.strategy.is_main else Changes()
        changes, stop = self.strategy.agree(changes, self.control.stop_requested)
        self._apply(changes)
        return stop

    def _apply(self, changes: Changes) -> None:
        if changes.lr is not None:
            self.lr = changes.lr
        if changes.clip_norm is not None:
            self.clip_norm = changes.clip_norm
        if changes.clip_value is not None:
            self.clip_value = changes.clip_value

    # ------------------------------------------------------------------ events

    def _publish_step(
        self, interval: _Interval, grad_norm: float | None, all_ranks_sum: float | None
    ) -> None:
        loss = interval.mean_loss()
        metrics: dict[str, Any] = self.strategy.step_details()
        if self.world_size > 1:  # `loss` is the mean over all ranks; each rank's own is `rank_loss`
            assert all_ranks_sum is not None  # a logged step checked (and reduced) its interval
            if self.strategy.counts_loss:
                metrics["rank_loss"] = loss
            loss = all_ranks_sum / interval.steps
        if self._memory is not None:
            metrics["memory"], self._memory = self._memory, None
        self._last["train"] = {"loss": loss}
        self.events.on_step(
            self._event(
                loss=loss,
                lr=self.optimizer.param_groups[0]["lr"],
                # ranks that share their data with a counted rank do not add to the throughput
                samples_per_s=interval.samples_per_s() if self.strategy.counts_loss else None,
                grad_norm=grad_norm,
                **metrics,
            )
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
        }

    def _summary(self, status: str, error: BaseException | None) -> Event:
        summary = {
            "status": status,
            "error": None if error is None else f"{type(error).__name__}: {error}",
            "checkpoint": None if self.checkpoint is None else str(self.checkpoint),
        }
        summary.update(self._last)
        return self._event(**summary)

    def _check_finite(self, interval: _Interval, pending: torch.Tensor | None = None) -> float | None:
        """Raise NonFiniteLossError if a loss since the last check (plus `pending`) was NaN or infinite.

        Returns the loss sum checked (averaged over ranks), or None when there was nothing to check.
        """
        total = interval.loss_sum
        if pending is not None:
            total = pending if total is None else total + pending
        if total is None:
            return None
        if self.world_size > 1:  # every rank sees a NaN on any rank, so all stop at the same step
            # the mean over the shards of the data: ranks that share a shard with a counted rank add 0
            total = (
                total.detach().float().clone()
                if self.strategy.counts_loss
                else torch.zeros_like(total).float()
            )
            total = self.strategy.all_reduce(total, "sum") / self.strategy.data_world_size
        value = float(total)  # NaN and inf survive the sum, so one sync checks every step of the interval
        if not math.isfinite(value):
            first = self.step - interval.steps + 1
            last = self.step + (1 if pending is not None else 0)
            raise NonFiniteLossError(self._non_finite_message(value, first, last))
        return value

    def _non_finite_message(self, value: float, first: int, last: int) -> str:
        where = f"at step {last}" if first == last else f"in steps {first}-{last} (checked every log_every)"
        kept = (
            f"the last good checkpoint {self.checkpoint} is kept"
            if self.checkpoint is not None
            else "no checkpoint was written before it"
        )
        hints = [f"a lower lr (now {self.lr:g})"]
        if not self.clip_norm:
            hints.append("clipping (clip_norm)")
        if self.config.precision != "fp32":
            hints.append("precision='fp32'")
        return (
            f"training loss became {value} {where}, epoch {self.epoch}; training stopped before the "
            f"optimizer step and {kept}. Try " + " or ".join(hints) + "."
        )

    # ------------------------------------------------------------------ state

    def _start(self, resume: bool | str | os.PathLike) -> None:
        path = None
        if resume is True:
            if self.run_dir is None:
                raise ValueError("resume=True needs a run name (Trainer(..., run='name')); or pass a path")
            candidate = self.run_dir / CHECKPOINT_FILE
            path = candidate if candidate.is_file() else None
        elif resume:
            path = Path(resume)
        self._memory = None
        if path is None:
            self.step = self.epoch = self._position = 0
            # ranks on different data draw different dropout masks; ranks sharing data (tensor parallel)
            # draw the same ones, so their replicated activations stay equal
            torch.manual_seed(self.config.seed + self.strategy.data_rank)
        else:
            self._load(path)
        self._memory_step = self.step + (2 if self.total_steps - self.step >= 2 else 1)
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / CONFIG_FILE).write_text(json.dumps(self.config.to_dict(), indent=2))

    def _state(self) -> dict[str, Any]:
        return {
            "model": self.strategy.model_state(self.model),
            "optimizer": self.strategy.optimizer_state(self.model, self.optimizer),
            "scaler": None if self.scaler is None else self.scaler.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "position": self._position,
            "lr": self.lr,
            "clip_norm": self.clip_norm,
            "clip_value": self.clip_value,
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else [],
            "rank_rngs": self.strategy.gather_object(torch.get_rng_state()) if self.world_size > 1 else [],
            "data_shards": self.strategy.data_world_size,
            "config": self.config.to_dict(),
        }

    def _save(self) -> None:
        """Rank 0 writes the checkpoint (every rank takes part in gathering the RNG states)."""
        if self.run_dir is None:
            return
        state = self._state()
        path = self.run_dir / CHECKPOINT_FILE
        self.checkpoint = save_checkpoint(state, path) if self.strategy.is_main else path

    def _due_checkpoint(self) -> bool:
        return self.run_dir is not None and self.epoch % self.config.checkpoint_every == 0

    def _check_resumable(self, path: Path, saved: TrainConfig, saved_shards: int) -> None:
        """Refuse a checkpoint whose data order or step count differs from this run's."""
        for name in _RESUME_MUST_MATCH:
            was, now = getattr(saved, name), getattr(self.config, name)
            if name == "epochs" and was <= now:
                continue
            shards = self.strategy.data_world_size
            if name == "batch_size" and saved_shards != shards:
                if was * saved_shards != now * shards:
                    raise ValueError(
                        f"cannot resume from {path}: the global batch was {was} × {saved_shards} data "
                        f"shards = {was * saved_shards} there and is {now} × {shards} = {now * shards} now; "
                        "keep batch_size × ranks the same"
                    )
            elif was != now:
                raise ValueError(
                    f"cannot resume from {path}: {name} was {was!r} there and is {now!r} now; use the same "
                    f"{name} (epochs may only grow)"
                )

    def _load(self, path: Path) -> None:
        state = load_checkpoint(path, map_location=self.device)
        self._check_resumable(path, TrainConfig.from_dict(state["config"]), state.get("data_shards", 1))
        self.strategy.load_model_state(self.model, state["model"])
        self.strategy.load_optimizer_state(self.model, self.optimizer, state["optimizer"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self._position = state["step"], state["epoch"], state["position"]
        self.lr, self.clip_norm, self.clip_value = state["lr"], state["clip_norm"], state["clip_value"]
        rank_rngs = state.get("rank_rngs") or []
        rng = rank_rngs[self.rank] if self.rank < len(rank_rngs) else state["rng"]
        torch.set_rng_state(rng.cpu())
        if self.device.type == "cuda" and state["cuda_rng"]:
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
        self.checkpoint = path


class _Interval:
    """Loss and throughput accumulated between two published steps (losses stay on the device)."""

    def __init__(self) -> None:
        self.loss_sum: torch.Tensor | None = None
        self.steps = 0
        self.samples = 0
        self.started = time.perf_counter()
        self.excluded = 0.0

    def add(self, loss: torch.Tensor, samples: int) -> None:
        self.loss_sum = loss if self.loss_sum is None else self.loss_sum + loss
        self.steps += 1
        self.samples += samples

    def exclude(self, seconds: float) -> None:
        """Time not spent training (a pause) leaves the throughput alone."""
        self.excluded += seconds

    def mean_loss(self) -> float:
        return float(self.loss_sum) / self.steps

    def samples_per_s(self) -> float:
        elapsed = time.perf_counter() - self.started - self.excluded
        return self.samples / elapsed if elapsed > 0 else math.nan
