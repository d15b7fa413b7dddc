"""`BestEpoch`: what ``TrainConfig(early_stopping=EarlyStopping(...))`` keeps while a fit runs: the best value
of the watched val metric, the step and epoch of its evaluation, its metrics and weights, how many val
evaluations since have not beaten it (a checkpoint keeps that count) and whether the patience has run out.

Every rank evaluates the same val numbers (they are summed over ranks), so every rank comes to the same
verdict without a message between them. Each rank copies the best weights as it holds them (a shard under
FSDP or tensor parallel, its stage under pipeline parallel) to the CPU, and gives them back when the fit
finishes; a named run also keeps the whole model's in ``best.pt`` (rank 0 writes it as it writes
checkpoints), where a resumed fit finds the best evaluation it had before, and where you load them later:
``model.load_state_dict(torch.load("runs/name/best.pt")["model"])``.

Example:
    >>> from workbench import models
    >>> from workbench.data import load_dataset, split_dataset
    >>> from workbench.train import EarlyStopping, TrainConfig, Trainer
    >>> splits = split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)
    >>> config = TrainConfig(epochs=100, early_stopping=EarlyStopping("accuracy", patience=2))
    >>> result = Trainer(models.mlp(64, 10), torch.nn.functional.cross_entropy, splits, config).fit()
    >>> result.epoch < 100, result.best_epoch < result.epoch - 2  # stopped, with the best epoch's weights
    (True, True)
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from workbench.train.batches import no_epoch_end
from workbench.train.checkpoint import load_checkpoint, save_checkpoint
from workbench.train.config import EarlyStopping
from workbench.train.gradients import local
from workbench.train.metrics import F1, Accuracy
from workbench.train.objective import Objective
from workbench.train.run_dir import ResumedState, val_epoch
from workbench.train.run_record import RunRecord
from workbench.train.weight_average import WeightAverage

BEST_FILE = "best.pt"


class BestEpoch:
    """The best epoch of one trainer's fits under its config's early stopping rule (``record.config``; None:
    no early stopping, and every method does nothing).

    With a moving average of the weights (`average`, ``ema_decay``), the averaged weights are evaluated, so
    they are the ones kept. Raises ValueError when the rule cannot be followed, naming the fix: no val split
    to watch, a metric the Trainer does not compute, or a metric of yours whose better direction only
    ``mode=`` can say; warns (on the main rank) when ``max_steps`` ends the fit before any epoch's end
    (`steps_per_epoch`: None when unknown), where it judges.
    """

    def __init__(
        self,
        objective: Objective,
        loaders: Mapping[str, Any],
        record: RunRecord,
        steps_per_epoch: int | None,
        average: WeightAverage,
    ) -> None:
        rule: EarlyStopping | None = record.config.early_stopping
        self.rule, self.strategy, self.run_dir = rule, record.strategy, record.run_dir
        self.average = average
        self.within_epochs = record.config.eval_every_steps is not None  # val comes within epochs too
        self.value: float | None = None
        self.epoch: int | None = None  # the 0-based epoch of the val evaluation that gave `value`
        self.step: int | None = None  # the optimizer step it came after (None: from an older best.pt)
        self.metrics: dict[str, float] = {}  # that evaluation's val metrics
        self.waited = 0  # evaluations since that one that did not beat it
        self.judged = 0  # the step of the last evaluation judged
        self.stopped = False  # the patience ran out
        self.restored = False  # the model was given the best epoch's weights back at the end
        self._weights: dict[str, torch.Tensor] | None = None  # this rank's part of the best epoch's model
        self.mode = "min"  # is a lower value better ("min") or a higher one ("max")
        if rule is None:
            return
        if "val" not in loaders:  # no val split, or an empty one
            raise ValueError(
                f"early_stopping watches the val split's {rule.metric} after each epoch, and the data has no "
                "val split: give one, Trainer(model, loss_fn, (train, val), config), or early_stopping=None"
            )
        known = {"loss", "accuracy", *objective.metrics}
        if rule.metric not in known:
            raise ValueError(
                f"early_stopping watches metric={rule.metric!r}, which the Trainer does not compute; it "
                f"computes {', '.join(map(repr, sorted(known)))} on val (accuracy for classification; give "
                f"another as metrics={{{rule.metric!r}: fn}})"
            )
        self.mode = rule.mode or _better(rule.metric, objective.metrics.get(rule.metric))
        short = no_epoch_end(record.config, steps_per_epoch)
        if short and not self.within_epochs and record.strategy.is_main:
            warnings.warn(
                f"early_stopping judges val evaluations, which come at the epochs' ends, and {short}: it "
                "would neither stop early nor give back the best weights; give eval_every_steps=... (val "
                "within epochs, each evaluation judged), fit in epochs, or leave early_stopping out",
                stacklevel=4,  # the Trainer's caller
            )

    def start(
        self,
        resumed: ResumedState | None,
        evaluate_val: Callable[[], dict[str, float]],
        model: torch.nn.Module,
    ) -> None:
        """A fit starts: fresh (a stale ``best.pt`` goes), or `resumed` (the best evaluation before it comes
        back from ``best.pt``, and how many evaluations since have not beaten it). Where the val evaluation
        that followed the checkpoint was not judged (a crash cut it short, or came before the next save),
        `evaluate_val` gives it again and it is judged on `model`, as it would have been."""
        self.value = self.epoch = self.step = self._weights = None
        self.metrics, self.stopped, self.restored, self.waited, self.judged = {}, False, False, 0, 0
        path = self.path
        if path is None:
            return
        if resumed is None:  # a run started over: another fit's best evaluation is no more
            if self.strategy.is_main:
                path.unlink(missing_ok=True)
            return
        if self.rule is None:
            return
        self._restore(path, resumed)
        where, saved = resumed.where, resumed.early_stopping
        unjudged = saved is not None and where.step > saved["judged"] and self.step != where.step
        if resumed.val_follows and unjudged:
            self.after_eval(where.step, val_epoch(where.epoch, where.position), evaluate_val(), model)

    def _restore(self, path: Any, resumed: ResumedState) -> None:
        """The best evaluation before `resumed`'s checkpoint (from ``best.pt``), and the patience spent."""
        assert self.rule is not None
        if resumed.early_stopping is not None:
            self.judged = int(resumed.early_stopping["judged"])
        if not path.is_file():
            return
        kept, where = load_checkpoint(path), resumed.where
        step = kept.get("step")  # None in a best.pt from before evaluations were told apart by step
        after = kept.get("epoch", where.epoch) >= where.epoch if step is None else step > where.step
        if kept.get("metric") != self.rule.metric or after:
            return  # another metric was watched, or the resume went back before that evaluation
        self.value, self.epoch, self.step = kept["value"], kept["epoch"], step
        self.metrics = kept.get("metrics", {})
        self.waited = self._waited_since(resumed)
        self.stopped = self.waited >= self.rule.patience

    def _waited_since(self, resumed: ResumedState) -> int:
        """Evaluations without an improvement between the best one and `resumed`'s checkpoint."""
        where, saved = resumed.where, resumed.early_stopping
        if self.step == where.step:
            return 0  # the best was the val evaluated right after the checkpoint (an epoch's end saves first)
        if saved is None:  # a checkpoint from before early stopping's state was kept: one evaluation an epoch
            return where.epoch - 1 - self.epoch
        return int(saved["waited"])

    def after_eval(self, step: int, epoch: int, metrics: dict[str, float], model: torch.nn.Module) -> None:
        """Val's `metrics` after optimizer step `step` in epoch `epoch` (every rank calls it with the same
        ones): keep the model's weights when they are the best so far, else count toward the patience."""
        if self.rule is None or not metrics:
            return
        if self.rule.metric not in metrics:
            raise ValueError(
                f"early_stopping watches metric={self.rule.metric!r}, and val gave only "
                f"{', '.join(map(repr, metrics))} (accuracy is computed for classification only); give "
                f"EarlyStopping(metric='loss') or metrics={{{self.rule.metric!r}: fn}}"
            )
        value, self.judged = float(metrics[self.rule.metric]), step
        if self._improves(value):
            self.value, self.epoch, self.step, self.waited = value, epoch, step, 0
            self.metrics = dict(metrics)
            with self.average.applied():  # the weights evaluated
                if self.rule.restore_best:
                    self._weights = _local_state(model)
                self._write(model)
        elif self.epoch is not None:
            self.waited += 1
            self.stopped = self.waited >= self.rule.patience

    def finish(
        self, model: torch.nn.Module, last: tuple[int, int], metrics: dict[str, dict[str, float]]
    ) -> int:
        """At the end of a finished fit whose last val evaluation came after step and epoch `last`: give
        `model` the best evaluation's weights (``restore_best``), its val metrics to `metrics` (the fit's last
        metrics per split), and say so on rank 0; else the averaged weights (``ema_decay``), or the last.
        Returns the epoch whose weights the model has."""
        self.average.finish()  # the weights evaluated last: the average's
        last_step, last_epoch = last
        if self.rule is None or self.epoch is None:
            return last_epoch
        latest = self.epoch == last_epoch if self.step is None else self.step == last_step
        restore = self.rule.restore_best and not latest
        self.restored = restore
        if restore:
            if self._weights is not None:
                _load_local_state(model, self._weights)
            else:  # the best evaluation came before a resume: its weights are in best.pt
                self.strategy.load_model_state(model, load_checkpoint(self.path)["model"])
        if self.strategy.is_main and (self.stopped or restore):
            print(f"early stopping: {self.describe(last, restore)}", file=sys.stderr)
        if restore and self.metrics:
            metrics["val"] = self.metrics
        return self.epoch if restore else last_epoch

    def describe(self, last: tuple[int, int], restored: bool) -> str:
        """One line: why the fit stopped or ended (`last`: the step and epoch of its last val evaluation),
        and which evaluation's weights the model has."""
        rule = self.rule
        assert rule is not None and self.epoch is not None
        best = f"val {rule.metric} {self.value:.6g} ({self._at(self.step, self.epoch)})"
        waited = "evaluations" if self.within_epochs else "epochs"
        said = (
            f"stopped after {self._at(*last)}: {rule.patience} {waited} without beating {best}"
            if self.stopped
            else f"the best was {best}"
        )
        if min_delta := rule.min_delta:
            said += f" by {min_delta:g}"
        weights = (
            f"{self._at(self.step, self.epoch)}'s weights"
            if restored
            else f"the last weights ({self._at(*last)})"
            if self.within_epochs
            else f"the last epoch's weights (epoch {last[1]})"
        )
        kept = f"; {self.path} holds them" if restored and self.path is not None else ""
        return f"{said}; the model has {weights}{kept}"

    def _at(self, step: int | None, epoch: int) -> str:
        """An evaluation as the line names it: its epoch, and its step where val comes within epochs."""
        return f"step {step}, epoch {epoch}" if self.within_epochs and step is not None else f"epoch {epoch}"

    def summary(self) -> dict[str, Any]:
        """What the fit's last event says of it (``early_stopping``), or nothing without a rule."""
        if self.rule is None or self.epoch is None:
            return {}
        return {
            "early_stopping": {
                "metric": self.rule.metric,
                "best": self.value,
                "best_epoch": self.epoch,
                "best_step": self.step,
                "stopped": self.stopped,
                "restored": self.restored,  # the model ended with the best evaluation's weights
            }
        }

    def state(self) -> dict[str, int] | None:
        """What a checkpoint keeps of it: the evaluations since the best, and the step of the last judged."""
        return None if self.rule is None else {"waited": self.waited, "judged": self.judged}

    @property
    def path(self) -> Any:
        """``best.pt`` in the run directory, or None without one."""
        return None if self.run_dir is None else self.run_dir.path / BEST_FILE

    def _improves(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.value is None:
            return True
        delta = self.rule.min_delta if self.rule is not None else 0.0
        return value < self.value - delta if self.mode == "min" else value > self.value + delta

    def _write(self, model: torch.nn.Module) -> None:
        """``best.pt`` for a named run: the whole model (every rank takes part in gathering it)."""
        if self.path is None or self.rule is None:
            return
        state = self.strategy.model_state(model)
        if self.strategy.is_main:
            kept = {"metric": self.rule.metric, "value": self.value, "epoch": self.epoch, "step": self.step}
            save_checkpoint({"model": state, **kept, "metrics": self.metrics}, self.path)


def _better(name: str, metric: Any) -> str:
    """ "min" or "max" for the val metric `name` (`metric`: the Trainer's for it, None for loss/accuracy);
    ValueError when only the user can say."""
    if name == "loss":
        return "min"
    if (name == "accuracy" and metric is None) or isinstance(metric, Accuracy | F1):
        return "max"
    higher = getattr(getattr(metric, "metric", metric), "higher_is_better", None)  # torchmetrics' own
    if isinstance(higher, bool):
        return "max" if higher else "min"
    raise ValueError(
        f"early_stopping cannot tell whether a higher or a lower {name} is better: give "
        f"EarlyStopping({name!r}, mode='max') (an accuracy, a score) or mode='min' (an error, a distance)"
    )


def _local_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of this rank's part of every parameter and buffer of `model`."""
    return {name: local(t).detach().to("cpu", copy=True) for name, t in model.state_dict().items()}


def _load_local_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` (from `_local_state`) back into `model`'s parameters and buffers, in place."""
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            local(tensor).copy_(state[name])
