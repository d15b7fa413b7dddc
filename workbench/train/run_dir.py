"""A run directory, ``runs_dir/run/``: where a named run keeps ``config.json``, ``metrics.jsonl`` and
``checkpoint.pt``, what a checkpoint holds, and which checkpoints a run may resume from.

The `Trainer` decides *when* to save; this module decides *what* a checkpoint is and *whether* it fits:

- `RunDir` owns the paths and writes config.json and checkpoints (atomically, `save_checkpoint`);
- `LoopPosition` is where the loop stands (step, epoch, micro-batches used, lr and clipping in force);
- `capture_training_state` / `restore_training_state` turn model, optimizer, scaler, position and every
  rank's RNG state into a checkpoint and back;
- `check_resumable` refuses a checkpoint whose data order or step count differs from the config's.

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
from workbench.train.strategy import Strategy

CHECKPOINT_FILE = "checkpoint.pt"
CONFIG_FILE = "config.json"
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
        return cls(Path(runs_dir) / run)

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_FILE

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    def latest_checkpoint(self) -> Path | None:
        """This run's checkpoint, or None before its first save."""
        return self.checkpoint_path if self.checkpoint_path.is_file() else None

    def write_config(self, config: TrainConfig) -> Path:
        """Create the directory and write ``config.json`` (the config this run trains with now)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(config.to_dict(), indent=2))
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


def capture_training_state(
    strategy: Strategy,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    where: LoopPosition,
    config: TrainConfig,
) -> dict[str, Any]:
    """Everything a resume needs, as a checkpoint dict. Every rank calls it (state and RNGs are gathered)."""
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
    }


def restore_training_state(
    path: Path,
    strategy: Strategy,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    config: TrainConfig,
) -> LoopPosition:
    """Load the checkpoint at `path` into model, optimizer, scaler and this rank's RNGs, after checking it
    fits `config` (`check_resumable`); returns where the loop stood."""
    state = load_checkpoint(path, map_location=strategy.device)
    saved = TrainConfig.from_dict(state["config"])
    check_resumable(path, saved, state.get("data_shards", 1), config, strategy.data_world_size)
    strategy.load_model_state(model, state["model"])
    strategy.load_optimizer_state(model, optimizer, state["optimizer"])
    if scaler is not None and state["scaler"] is not None:
        scaler.load_state_dict(state["scaler"])
    rank_rngs = state.get("rank_rngs") or []
    rng = rank_rngs[strategy.rank] if strategy.rank < len(rank_rngs) else state["rng"]
    torch.set_rng_state(rng.cpu())
    if strategy.device.type == "cuda" and state["cuda_rng"]:
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    return LoopPosition(
        state["step"], state["epoch"], state["position"], state["lr"], state["clip_norm"], state["clip_value"]
    )


def check_resumable(
    path: str | os.PathLike, saved: TrainConfig, saved_shards: int, config: TrainConfig, shards: int
) -> None:
    """Raise ValueError if a checkpoint trained with `saved` on `saved_shards` data shards cannot go on
    with `config` on `shards`: the data order or step count would change (epochs may only grow; the
    number of ranks may change when batch_size × shards stays the same)."""
    for name in RESUME_MUST_MATCH:
        was, now = getattr(saved, name), getattr(config, name)
        if name == "epochs" and was <= now:
            continue
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


def resume_path(resume: bool | str | os.PathLike, run_dir: RunDir | None) -> Path | None:
    """The checkpoint ``fit(resume=...)`` continues from: ``True``, the run's own (None before its first
    save: a fresh start); a path, that file; ``False``, none."""
    if resume is True:
        if run_dir is None:
            raise ValueError("resume=True needs a run name (Trainer(..., run='name')); or pass a path")
        return run_dir.latest_checkpoint()
    return Path(resume) if resume else None
