"""Training a preset in this process, alone or as one rank of a job: the Trainer, its console progress,
loggers, Ctrl-C and a torchrun restart."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

_CHANGEABLE = (
    "epochs",
    "batch_size",
    "optimizer",
    "lr",
    "momentum",
    "weight_decay",
    "schedule",
    "warmup_steps",
    "precision",
    "compile",
    "clip_norm",
    "clip_value",
    "accumulate",
    "seed",
    "device",
    "n_samples",
    "eval_every_steps",
    "max_steps",
    "checkpoint_every_steps",
    "ema_decay",
    "activation_checkpointing",
)


def experiment_from(args: argparse.Namespace) -> Any:
    from workbench.presets import build_experiment

    changes = {name: getattr(args, name) for name in _CHANGEABLE if getattr(args, name) is not None}
    if args.patience is not None:
        from workbench.train import EarlyStopping

        changes["early_stopping"] = EarlyStopping(args.monitor or "loss", patience=args.patience)
    elif args.monitor is not None:
        raise ValueError(
            f"--monitor {args.monitor} needs --patience: the epochs without an improvement to stop at"
        )
    return build_experiment(args.preset, **changes)


def loggers(tools: list[str], runs_dir: Path) -> list[Any]:
    """The `--log` loggers, each once (ModuleNotFoundError with the install line when an extra is missing)."""
    from workbench.train.loggers import MLflowLogger, TensorBoardLogger

    made = {"tensorboard": lambda: TensorBoardLogger(runs_dir / "tensorboard")}
    made["mlflow"] = lambda: MLflowLogger(runs_dir / "mlflow.db")
    return [made[tool]() for tool in dict.fromkeys(tools)]


_RESTART_COUNTS = {
    "TORCHELASTIC_RESTART_COUNT": "torchrun job",
    "SLURM_RESTART_COUNT": "Slurm job (requeued)",
}


def _resume_after_restart(resume: bool, run_dir: Any, main: bool) -> bool:
    """`--resume`, except after torchrun restarted the workers, or Slurm the requeued job, before the run's
    first checkpoint: then the metrics log is this job's own failed try, and training starts over (False:
    the caller overwrites it)."""
    restarts = {name: os.environ.get(name, "0") for name in _RESTART_COUNTS}
    restarted = [name for name, count in restarts.items() if count.isdigit() and int(count) > 0]
    if not (resume and restarted and run_dir is not None):
        return resume
    if run_dir.latest_checkpoint() is not None:
        return True
    if main:
        print(
            f"workbench train: restart {restarts[restarted[0]]} of this {_RESTART_COUNTS[restarted[0]]}, and "
            "no checkpoint was saved before it: training starts over",
            file=sys.stderr,
        )
    return False


def _launcher(signalled_ranks: bool) -> str | None:
    """The launcher that started this rank (torchrun, Slurm, Open MPI...); None where the command launched
    its own processes (whose workers carry torchrun's variables as well)."""
    from workbench.parallel.group.launch_env import detect_launch_env

    launch = detect_launch_env() if signalled_ranks else None
    return None if launch is None else launch.launcher


def _signals_ask_stop(control: Any, main: bool) -> contextlib.AbstractContextManager[list[signal.Signals]]:
    """While a rank trains: the first SIGTERM or SIGINT asks every rank to stop (`TrainControl.ask_stop`:
    they agree at the next logged step, save and end); a second quits at once. Yields the signals received."""
    from workbench.train.interrupts import say_stopping_ranks, stop_on_interrupt

    return stop_on_interrupt(control, on_first=say_stopping_ranks if main else None, every_rank=True)


def train_here(
    args: argparse.Namespace, strategy: Any, experiment: Any = None, *, signalled_ranks: bool = False
) -> int:
    """Train the preset (`experiment`, else built from `args`) in this process, alone or as one rank of a
    distributed job; rank 0 prints. `signalled_ranks`: a rank of a launcher that signals every rank itself
    (torchrun, srun, mpirun): SIGTERM or SIGINT stops the ranks together at the next logged step, saved."""
    import torch

    from workbench.cli.run_command import CommandRecorder
    from workbench.tables import text_table
    from workbench.train import Trainer
    from workbench.train.compilation import describe_compile
    from workbench.train.progress import ConsoleProgress

    experiment = experiment_from(args) if experiment is None else experiment
    main = strategy is None or strategy.is_main
    callbacks: list[Any] = [ConsoleProgress()] if main else []
    if main:
        callbacks.extend(loggers(args.log, Path(args.runs_dir)))
    if main and args.run_name is not None:  # the command, for `workbench train --run NAME --resume`
        folder = Path(args.runs_dir) / args.run_name
        callbacks.append(CommandRecorder(folder, args.kept_command, _launcher(signalled_ranks)))
    trainer = Trainer(
        experiment.model,
        experiment.loss_fn,
        experiment.splits,
        experiment.config,
        callbacks=callbacks,
        run=args.run_name,
        runs_dir=args.runs_dir,
        strategy=strategy,
        overwrite=args.overwrite,
    )
    resume = _resume_after_restart(args.resume, trainer.run_dir, main)
    trainer.record.overwrite |= args.resume and not resume  # a restart's own failed try, started over
    asking = _signals_ask_stop(trainer.control, main) if signalled_ranks else contextlib.nullcontext([])
    with asking as signals:  # alone: Ctrl-C and SIGTERM stop the fit after its step, saved (`run` says so)
        result = trainer.fit(resume=resume)
    if signalled_ranks and result.status == "stopped":  # only a signal stops such a rank's fit
        then = f"checkpoint {result.checkpoint}: continue with --resume" if result.checkpoint else "not saved"
        how = signals[0].name if signals else "another rank's signal"
        if main:
            print(f"workbench train: stopped at step {result.step} ({how}); {then}", file=sys.stderr)
        return 128 + (signals[0] if signals else signal.SIGTERM)
    if not main:
        return 0
    rows = [["train", "loss", f"{result.train_loss:.5f}"]]
    for split, metrics in result.metrics.items():
        rows += [[split, name, f"{value:.5f}"] for name, value in metrics.items()]
    print(text_table(["split", "metric", "value"], rows))
    print(
        f"{result.status}: {result.step} steps, {result.epoch} epochs in {result.seconds:.2f} s on "
        f"{trainer.strategy.describe()}"
        + (f" ({torch.get_num_threads()} threads)" if strategy is None else "")
        + (f"; checkpoint {result.checkpoint}" if result.checkpoint else "")
    )
    if trainer.compile_report is not None:
        print(describe_compile(trainer.compile_report))
    return 0
