"""A run directory, ``runs_dir/run/``: where a named run keeps ``config.json``, ``metrics.jsonl`` and
``checkpoint.pt``, what a checkpoint holds, and which checkpoints a run may resume from.

The `Trainer` decides *when* to save; this module decides *what* a checkpoint is and *whether* it fits:

- `RunDir` owns the paths and writes config.json and checkpoints (atomically, `save_checkpoint`);
- `LoopPosition` is where the loop stands (step, epoch, micro-batches used, lr and clipping in force);
- `capture_training_state` / `restore_training_state` turn model, optimizer, scaler, position and every
  rank's RNG state into a checkpoint and back;
- `check_resumable` refuses a checkpoint whose data order or step count differs from the config's, or that
  another kind of optimizer wrote;
- the resume rule for optimizer settings: a value the new config changes (lr, weight decay, betas,
  momentum, Nesterov, schedule, warm-up) applies from the first resumed step, and the change is reported
  (`ResumedState.changes`, printed and logged in ``fit_start``); an unchanged one keeps what was in force
  at the save (an lr a dashboard set, say).

Example:
    >>> import tempfile
    >>> from workbench.train.config import TrainConfig
    >>> run = RunDir.named("demo", runs_dir=tempfile.mkdtemp())
    >>> run.latest_checkpoint() is None
    True
    >>> _ = run.write_config(TrainConfig(epochs=3))
    >>> sorted(p.name for p in run.path.iterdir())
    ['config.json']
    >>> check_resumable("ckpt.pt", TrainConfig(epochs=3), 1, TrainConfig(epochs=5), 1)  # epochs may grow
    >>> check_resumable("ckpt.pt", TrainConfig(seed=0), 1, TrainConfig(seed=1), 1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: cannot resume from ckpt.pt: seed was 0 there and is 1 now; use the same seed ...
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workbench.train.checkpoint import load_checkpoint, save_checkpoint
from workbench.train.config import TrainConfig
from workbench.train.metrics_log import METRICS_FILE
from workbench.train.run_files import CHECKPOINT_FILE, CONFIG_FILE, open_run_file
from workbench.train.strategy import Strategy
from workbench.train.trained_what import ModelSummary, model_text

# Changing these between a checkpoint and its resume would change the data order or the step count
# (batch_size as the global batch: per rank × shards of the data, so the number of ranks may change).
RESUME_MUST_MATCH = ("batch_size", "accumulate", "seed", "epochs")


class RunDir:
    """The directory of one named run: ``runs_dir/run/``.

    Args:
        path: the run's directory (created when the run starts, not here).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    @classmethod
    def named(cls, run: str, runs_dir: str | os.PathLike = "runs") -> RunDir:
        """``runs_dir/run``; `run` must be a plain name (no '/', not '.' or '..')."""
        if not isinstance(run, str) or not run or "/" in run or run in (".", ".."):
            raise ValueError(f"run must be a non-empty name without '/', got {run!r}")
        if any(ord(c) < 32 or c == "\x7f" for c in run) or len(run.encode()) > 200:
            raise ValueError(
                f"run must be a name of printable characters, at most 200 bytes (a directory name), got "
                f"{run[:40]!r}{'…' if len(run) > 40 else ''} ({len(run.encode())} bytes)"
            )
        return cls(Path(runs_dir).expanduser() / run)  # "~/runs" is the home folder, as in a shell

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_FILE

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    def latest_checkpoint(self) -> Path | None:
        """This run's checkpoint, or None before its first save."""
        return self.checkpoint_path if self.checkpoint_path.is_file() else None

    def write_config(self, config: TrainConfig, scheduler: dict[str, Any] | None = None) -> Path:
        """Create the directory and write ``config.json`` (the config this run trains with now, and the torch
        lr `scheduler` it steps, if any: its kind and when it steps)."""
        self.path.mkdir(parents=True, exist_ok=True)
        descriptor = open_run_file(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        written = config.to_dict() | ({"scheduler": scheduler} if scheduler is not None else {})
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(json.dumps(written, indent=2))
        return self.config_path

    def save(self, state: dict[str, Any]) -> Path:
        """Write `state` (from `capture_training_state`) as this run's checkpoint, atomically."""
        return save_checkpoint(state, self.checkpoint_path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"


@dataclass(frozen=True)
class LoopPosition:
    """Where the training loop stands: optimizer steps and whole epochs done, micro-batches of the current
    epoch already used, and the lr and clipping in force (a dashboard may have changed them)."""

    step: int
    epoch: int
    position: int
    lr: float
    clip_norm: float
    clip_value: float


def val_epoch(epoch: int, position: int) -> int:
    """The epoch of the val evaluated where the loop stands, `epoch` whole epochs and `position` micro-batches
    in: the epoch just ended at an epoch's end (position 0), else the one in progress (a val within it, or
    max_steps ending the fit there).

    Example:
        >>> val_epoch(3, 0), val_epoch(3, 5)
        (2, 3)
    """
    return epoch - 1 if position == 0 else epoch


def capture_training_state(
    strategy: Strategy,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    where: LoopPosition,
    config: TrainConfig,
    scheduler: dict[str, Any] | None = None,
    early_stopping: dict[str, Any] | None = None,
    model_summary: ModelSummary | None = None,
    weight_average: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything a resume needs, as a checkpoint dict (`scheduler`: a torch scheduler's state, from
    `TorchSchedule.state`; `early_stopping`: `BestEpoch.state`; `model_summary`: the model as the fit was
    given it, which a resume compares with its own; `weight_average`: `WeightAverage.state`). Every rank
    calls it (state and RNGs are gathered)."""
    cuda = strategy.device.type == "cuda"
    return {
        "model": strategy.model_state(model),
        "optimizer": strategy.optimizer_state(model, optimizer),
        "scaler": None if scaler is None else scaler.state_dict(),
        "step": where.step,
        "epoch": where.epoch,
        "position": where.position,
        "lr": where.lr,
        "clip_norm": where.clip_norm,
        "clip_value": where.clip_value,
        "rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if cuda else [],
        "rank_rngs": strategy.gather_object(torch.get_rng_state()) if strategy.world_size > 1 else [],
        "data_shards": strategy.data_world_size,
        "config": config.to_dict(),
        "scheduler": scheduler,
        "early_stopping": early_stopping,
        "model_summary": model_summary,
        "weight_average": weight_average,
    }


# Optimizer settings a resume may change (each applies from the first resumed step and is reported).
CHANGEABLE_ON_RESUME = ("lr", "weight_decay", "betas", "momentum", "nesterov", "schedule", "warmup_steps")
_PARAM_GROUP_KEYS = ("weight_decay", "betas", "momentum", "nesterov")  # lr is set at every step


@dataclass(frozen=True)
class ResumedState:
    """What `restore_training_state` found: where the loop stood, the optimizer settings the new config
    changes (name → (at the save, now)), the lr in force at the save, a torch scheduler's state, early
    stopping's and the weight average's (None without one, or from a checkpoint older than it).
    `val_follows`: the fit evaluated val right after this save (an epoch's end, or max_steps reached inside
    an epoch, save first), so what judges evaluations (early stopping, an every="eval" scheduler) may have
    one to catch up on."""

    where: LoopPosition
    changes: dict[str, tuple[Any, Any]]
    lr_at_save: float
    scheduler: dict[str, Any] | None = None
    early_stopping: dict[str, Any] | None = None
    val_follows: bool = False
    weight_average: dict[str, Any] | None = None

    def describe(self) -> str:
        """The changes as one line, e.g. ``lr 0.003 → 0.0001, weight_decay 0.0 → 0.5``; "" when none."""
        return ", ".join(f"{name} {was!r} → {now!r}" for name, (was, now) in self.changes.items())


def restore_training_state(
    path: Path,
    strategy: Strategy,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    config: TrainConfig,
    model_summary: ModelSummary | None = None,
) -> ResumedState:
    """Load the checkpoint at `path` into model, optimizer, scaler and this rank's RNGs, after checking it
    fits `config` (`check_resumable`); returns where the loop stood and the optimizer settings `config`
    changes, which are applied (see the module docstring). `model_summary`: the model as given to the fit;
    where the checkpoint names its own, a refusal names both, and another model whose weights fit (an
    activation changed, say) is reported among the changes."""
    state = load_checkpoint(path, map_location=strategy.device)
    missing = [key for key in ("model", "optimizer", "config", "step", "epoch") if key not in state]
    if missing:
        raise ValueError(f"{path} is not a workbench checkpoint: it has no {', '.join(missing)}")
    try:
        saved = TrainConfig.from_dict(state["config"])
    except (TypeError, ValueError) as error:
        raise ValueError(f"cannot resume from {path}: {error}") from None
    check_resumable(path, saved, state.get("data_shards", 1), config, strategy.data_world_size)
    models = _models(state.get("model_summary"), model_summary)  # (the checkpoint's, this fit's) or None
    try:
        strategy.load_model_state(model, state["model"])
    except RuntimeError as error:  # another architecture: missing/unexpected keys, size mismatches
        details = "; ".join(line.strip() for line in str(error).splitlines()[1:4] if line.strip())
        which = f"; it holds a {models[0]}, this is a {models[1]}" if models else ""
        raise ValueError(
            f"cannot resume from {path}: its weights do not fit this model ({details}){which}; build the "
            "model the checkpoint was trained with, or start a new run"
        ) from None
    groups = optimizer.param_groups
    built = [{name: group[name] for name in _PARAM_GROUP_KEYS if name in group} for group in groups]
    strategy.load_optimizer_state(model, optimizer, state["optimizer"])
    changes = {
        name: (getattr(saved.optimizer, name), getattr(config.optimizer, name))
        for name in CHANGEABLE_ON_RESUME
        if getattr(saved.optimizer, name) != getattr(config.optimizer, name)
    }
    if models and models[0] != models[1]:  # the weights fit another model: say so
        changes["model"] = models
    # the loaded state brought the old values back: the new ones win, as the optimizer was just built with
    # them (a factory's group of its own, such as biases without weight decay, keeps its own)
    for group, values in zip(optimizer.param_groups, built, strict=False):  # the loaded groups
        for name, value in values.items():
            if name in changes:
                group[name] = value
    if scaler is not None and state["scaler"] is not None:
        scaler.load_state_dict(state["scaler"])
    rank_rngs = state.get("rank_rngs") or []
    rng = rank_rngs[strategy.rank] if strategy.rank < len(rank_rngs) else state["rng"]
    torch.set_rng_state(rng.cpu())
    if strategy.device.type == "cuda" and state["cuda_rng"]:
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    lr = config.optimizer.lr if "lr" in changes else state["lr"]
    clipping = {}  # what the config now asks wins; else what was in force at the save (a dashboard's, too)
    for name in ("clip_norm", "clip_value"):
        asked, before = getattr(config, name), getattr(saved, name)
        clipping[name] = asked if asked != before else state[name]
        if asked != before:
            changes[name] = (state[name], asked)
    if saved.ema_decay != config.ema_decay:  # from the resumed weights where the checkpoint kept no average
        changes["ema_decay"] = (saved.ema_decay, config.ema_decay)
    where = LoopPosition(state["step"], state["epoch"], state["position"], lr, **clipping)
    val_follows = where.step > 0 and (where.position == 0 or where.step == saved.max_steps)
    kept = state.get("scheduler"), state.get("early_stopping")
    average = state.get("weight_average")
    return ResumedState(where, changes, state["lr"], *kept, val_follows=val_follows, weight_average=average)


def _models(saved: ModelSummary | None, given: ModelSummary | None) -> tuple[str, str] | None:
    """The checkpoint's model and this fit's, as text, where both are known (older checkpoints name none)."""
    return (model_text(saved), model_text(given)) if saved and given else None


def check_resumable(
    path: str | os.PathLike, saved: TrainConfig, saved_shards: int, config: TrainConfig, shards: int
) -> None:
    """Raise ValueError if a checkpoint trained with `saved` on `saved_shards` data shards cannot go on
    with `config` on `shards`: the data order or step count would change (epochs may only grow; the
    number of ranks may change when batch_size × shards stays the same), or another optimizer kind wrote
    it (its state would not fit)."""
    if saved.optimizer.name != config.optimizer.name:
        raise ValueError(
            f"cannot resume from {path}: it was trained with optimizer {saved.optimizer.name!r} and the "
            f"config asks for {config.optimizer.name!r}, whose state differs; resume with "
            f"optimizer {saved.optimizer.name!r} (other settings such as lr may change), or start a new run"
        )
    if None not in (saved.max_steps, config.max_steps) and config.max_steps < saved.max_steps:
        raise ValueError(
            f"cannot resume from {path}: max_steps was {saved.max_steps} there and is {config.max_steps} "
            "now; the fit's length may only grow"
        )
    for name in RESUME_MUST_MATCH:
        was, now = getattr(saved, name), getattr(config, name)
        if name == "epochs" and (was <= now or saved.max_steps or config.max_steps):
            continue  # epochs may grow; max_steps, where given, is the fit's length
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


def resume_path(
    resume: bool | str | os.PathLike, run_dir: RunDir | None, overwrite: bool = False
) -> Path | None:
    """The checkpoint ``fit(resume=...)`` continues from: ``True``, the run's own (None for a run that never
    started: a fresh start; refused for a run that logged but never saved, so its log is not rewritten); a
    path, that file; ``False``, none, and then a run name that already holds a run (its metrics log or
    checkpoint) is refused unless `overwrite`: a fresh fit would replace them."""
    if resume is True:
        if run_dir is None:
            raise ValueError("resume=True needs a run name (Trainer(..., run='name')); or pass a path")
        checkpoint = run_dir.checkpoint_path
        if checkpoint.is_file():
            return checkpoint
        if checkpoint.exists():
            raise ValueError(f"cannot resume: {checkpoint} is not a file; move it away or start a new run")
        if (run_dir.path / METRICS_FILE).exists():  # a run that never saved: resuming would start it over
            raise ValueError(
                f"nothing to resume in {run_dir.path}: it has a metrics log but no {CHECKPOINT_FILE} (the "
                "run stopped before its first save); start it over with overwrite=True (--overwrite; its "
                "metrics.jsonl is then rewritten), or train under another run name"
            )
        return None  # a run that never started: nothing to lose, a fresh start
    if resume:
        return Path(resume)
    held = [name for name in (METRICS_FILE, CHECKPOINT_FILE) if run_dir and _holds(run_dir.path / name)]
    if held and not overwrite:
        assert run_dir is not None
        raise ValueError(
            f"the run {run_dir.path.name!r} already holds a run ({' and '.join(held)} in {run_dir.path}), "
            "which a fresh fit would replace; continue it with fit(resume=True) (--resume), train under "
            "another run name, or start it over with Trainer(..., overwrite=True) (--overwrite)"
        )
    return None


def agreed_resume_path(
    resume: bool | str | os.PathLike, run_dir: RunDir | None, strategy: Strategy, overwrite: bool = False
) -> Path | None:
    """Rank 0's answer to "resume from where?" (`resume_path`), taken by every rank. The run's files change
    while the ranks look (rank 0 starts the metrics log as soon as it has decided), so ranks deciding alone
    could disagree: one resuming, another refusing a run that "logged but never saved"."""
    decision: Path | ValueError | None = None
    if strategy.is_main:
        try:
            decision = resume_path(resume, run_dir, overwrite)
        except ValueError as error:
            decision = error
    agreed = strategy.gather_object(decision)[0]
    if isinstance(agreed, ValueError):
        raise ValueError(str(agreed))
    return agreed


def _holds(path: Path) -> bool:
    """`path` is a file a fit wrote (a planted symbolic link is not: writing through it is refused)."""
    return path.exists() and not path.is_symlink()
