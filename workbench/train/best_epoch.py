"""`BestEpoch`: what ``TrainConfig(early_stopping=EarlyStopping(...))`` keeps while a fit runs: the best value
of the watched val metric, its epoch, its metrics and weights, and whether the patience has run out.

Every rank evaluates the same val numbers (they are summed over ranks), so every rank comes to the same
verdict without a message between them. Each rank copies the best weights as it holds them (a shard under
FSDP or tensor parallel, its stage under pipeline parallel) to the CPU, and gives them back when the fit
finishes; a named run also keeps the whole model's in ``best.pt`` (rank 0 writes it as it writes
checkpoints), where a resumed fit finds the best epoch it had before, and where you load them later:
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
from collections.abc import Mapping
from typing import Any

import torch

from workbench.train.checkpoint import load_checkpoint, save_checkpoint
from workbench.train.config import EarlyStopping
from workbench.train.metrics import F1, Accuracy
from workbench.train.objective import Objective
from workbench.train.run_record import RunRecord

BEST_FILE = "best.pt"


class BestEpoch:
    """The best epoch of one trainer's fits under its config's early stopping rule (``record.config``; None:
    no early stopping, and every method does nothing).

    Raises ValueError when the rule cannot be followed, naming the fix: no val split to watch, a metric the
    Trainer does not compute, or a metric of yours whose better direction only ``mode=`` can say; warns
    (on the main rank) when ``max_steps`` ends the fit before any epoch's end (`steps_per_epoch`: None when
    unknown), where it judges.
    """

    def __init__(
        self, objective: Objective, loaders: Mapping[str, Any], record: RunRecord, steps_per_epoch: int | None
    ) -> None:
        rule: EarlyStopping | None = record.config.early_stopping
        self.rule, self.strategy, self.run_dir = rule, record.strategy, record.run_dir
        self.value: float | None = None
        self.epoch: int | None = None  # the 0-based epoch whose val gave `value`
        self.metrics: dict[str, float] = {}  # that epoch's val metrics
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
        max_steps = record.config.max_steps
        short = max_steps is not None and (steps_per_epoch is None or max_steps < steps_per_epoch)
        if short and record.strategy.is_main:
            _warn_no_epoch_ends(max_steps, steps_per_epoch)

    def start(self, epochs_done: int, resumed: bool) -> None:
        """A fit starts after `epochs_done` whole epochs: fresh (a stale ``best.pt`` goes), or resumed (the
        best epoch before it comes back from ``best.pt``, and how long the metric has not improved since)."""
        self.value = self.epoch = self._weights = None
        self.metrics, self.stopped, self.restored = {}, False, False
        path = self.path
        if path is None:
            return
        if not resumed:  # a run started over: another fit's best epoch is no more
            if self.strategy.is_main:
                path.unlink(missing_ok=True)
            return
        if self.rule is None or not path.is_file():
            return
        kept = load_checkpoint(path)
        if kept.get("metric") != self.rule.metric or kept.get("epoch", epochs_done) >= epochs_done:
            return  # another metric was watched, or the resume went back before that epoch
        self.value, self.epoch, self.metrics = kept["value"], kept["epoch"], kept.get("metrics", {})
        self.stopped = epochs_done - 1 - self.epoch >= self.rule.patience

    def after_eval(self, epoch: int, metrics: dict[str, float], model: torch.nn.Module) -> None:
        """Epoch `epoch`'s val `metrics` (every rank calls it with the same ones): keep the model's weights
        when they are the best so far, else count toward the patience."""
        if self.rule is None or not metrics:
            return
        if self.rule.metric not in metrics:
            raise ValueError(
                f"early_stopping watches metric={self.rule.metric!r}, and val gave only "
                f"{', '.join(map(repr, metrics))} (accuracy is computed for classification only); give "
                f"EarlyStopping(metric='loss') or metrics={{{self.rule.metric!r}: fn}}"
            )
        value = float(metrics[self.rule.metric])
        if self._improves(value):
            self.value, self.epoch, self.metrics = value, epoch, dict(metrics)
            if self.rule.restore_best:
                self._weights = _local_state(model)
            self._write(model)
        elif self.epoch is not None and epoch - self.epoch >= self.rule.patience:
            self.stopped = True

    def finish(self, model: torch.nn.Module, last_epoch: int, last: dict[str, dict[str, float]]) -> int:
        """At the end of a finished fit whose last evaluated epoch is `last_epoch`: give `model` the best
        epoch's weights (``restore_best``), its val metrics to `last` (the fit's last metrics per split),
        and say so on rank 0. Returns the epoch whose weights the model has."""
        if self.rule is None or self.epoch is None:
            return last_epoch
        restore = self.rule.restore_best and self.epoch != last_epoch
        self.restored = restore
        if restore:
            if self._weights is not None:
                _load_local_state(model, self._weights)
            else:  # the best epoch came before a resume: its weights are in best.pt
                self.strategy.load_model_state(model, load_checkpoint(self.path)["model"])
        if self.strategy.is_main and (self.stopped or restore):
            print(f"early stopping: {self.describe(last_epoch, restore)}", file=sys.stderr)
        if restore and self.metrics:
            last["val"] = self.metrics
        return self.epoch if restore else last_epoch

    def describe(self, last_epoch: int, restored: bool) -> str:
        """One line: why the fit stopped or ended, and which epoch's weights the model has."""
        rule = self.rule
        assert rule is not None and self.epoch is not None
        best = f"val {rule.metric} {self.value:.6g} (epoch {self.epoch})"
        said = (
            f"stopped after epoch {last_epoch}: {rule.patience} epochs without beating {best}"
            if self.stopped
            else f"the best was {best}"
        )
        if min_delta := rule.min_delta:
            said += f" by {min_delta:g}"
        weights = (
            f"epoch {self.epoch}'s weights" if restored else f"the last epoch's weights (epoch {last_epoch})"
        )
        kept = f"; {self.path} holds them" if restored and self.path is not None else ""
        return f"{said}; the model has {weights}{kept}"

    def summary(self) -> dict[str, Any]:
        """What the fit's last event says of it (``early_stopping``), or nothing without a rule."""
        if self.rule is None or self.epoch is None:
            return {}
        return {
            "early_stopping": {
                "metric": self.rule.metric,
                "best": self.value,
                "best_epoch": self.epoch,
                "stopped": self.stopped,
                "restored": self.restored,  # the model ended with the best epoch's weights
            }
        }

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
            kept = {"metric": self.rule.metric, "value": self.value, "epoch": self.epoch}
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


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of `tensor`: a DTensor's local shard, or the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _local_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of this rank's part of every parameter and buffer of `model`."""
    return {name: _local(t).detach().to("cpu", copy=True) for name, t in model.state_dict().items()}


def _load_local_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` (from `_local_state`) back into `model`'s parameters and buffers, in place."""
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            _local(tensor).copy_(state[name])


def _warn_no_epoch_ends(max_steps: int, steps_per_epoch: int | None) -> None:
    """Early stopping judges val at the epochs' ends, and a fit of `max_steps` may reach none."""
    reach = (
        f"ends before its first epoch's end ({steps_per_epoch} steps)"
        if steps_per_epoch is not None
        else "may reach no epoch's end (the training data has no length: a stream never ends its epoch)"
    )
    warnings.warn(
        f"early_stopping judges val at the epochs' ends, and this fit of max_steps={max_steps} {reach}: it "
        "would neither stop early nor give back the best weights; fit in epochs (epochs=..., no max_steps), "
        "or leave early_stopping out",
        stacklevel=5,  # the Trainer's caller
    )
