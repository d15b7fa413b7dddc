"""The ``workbench`` command (also ``python -m workbench``).

workbench doctor                  print the device report (CPU, GPUs, CUDA, numba backend)
workbench doctor --json           the same as JSON
workbench kernel install          install the `workbench` Jupyter kernelspec for this interpreter
workbench train digits-mlp        train a preset with a progress bar and print the final metrics
workbench train --list            the presets (digits-mlp, regression-linear, images-cnn)
workbench bench trainer           the Trainer and Dashboard against a hand-written loop (ratios)
workbench bench hardware          memory bandwidth and matmul FLOP/s of this CPU and GPU (--full: larger)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.run(args)


def _parser() -> argparse.ArgumentParser:
    from workbench import __version__

    parser = argparse.ArgumentParser(prog="workbench", description="Jupyter workbench for fast training.")
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    parser.set_defaults(command=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="print what this machine offers for training")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(command="doctor", run=_doctor)

    kernel = commands.add_parser("kernel", help="manage the `workbench` Jupyter kernelspec")
    kernel_commands = kernel.add_subparsers(title="kernel commands", metavar="ACTION", required=True)
    install = kernel_commands.add_parser("install", help="install the kernelspec for this interpreter")
    where = install.add_mutually_exclusive_group()
    where.add_argument("--sys-prefix", action="store_true", help="into this environment (the default)")
    where.add_argument("--user", action="store_true", help="into this user's Jupyter directory")
    where.add_argument("--prefix", help="into the environment at PREFIX")
    install.set_defaults(command="kernel install", run=_kernel_install)

    _add_train(commands)

    bench = commands.add_parser("bench", help="benchmarks that print measured ratios")
    bench_commands = bench.add_subparsers(title="benchmarks", metavar="WHAT", required=True)
    trainer = bench_commands.add_parser("trainer", help="Trainer and Dashboard vs a hand-written loop")
    trainer.add_argument("--repeats", type=int, default=5, help="runs of each variant (median)")
    trainer.add_argument("--epochs", type=int, default=6)
    trainer.add_argument("--history", type=int, default=1_000_000, help="loss-plot points before timing")
    trainer.set_defaults(command="bench trainer", run=_bench_trainer)
    hardware = bench_commands.add_parser("hardware", help="memory bandwidth and matmul FLOP/s, CPU and GPU")
    hardware.add_argument("--repeats", type=int, default=5, help="timed runs of each measurement (median)")
    hardware.add_argument("--full", action="store_true", help="larger sizes: slower, closer to peak")
    hardware.set_defaults(command="bench hardware", run=_bench_hardware)
    return parser


def _add_train(commands: argparse._SubParsersAction) -> None:
    from workbench.train.config import OPTIMIZERS, PRECISIONS, SCHEDULES

    train = commands.add_parser("train", help="train a preset model with a progress bar")
    train.add_argument("preset", nargs="?", help="which experiment; see --list")
    train.add_argument("--list", action="store_true", help="list the presets and exit")
    train.add_argument("--epochs", type=int)
    train.add_argument("--batch-size", type=int)
    train.add_argument("--optimizer", choices=OPTIMIZERS)
    train.add_argument("--lr", type=float)
    train.add_argument("--momentum", type=float)
    train.add_argument("--weight-decay", type=float)
    train.add_argument("--schedule", choices=SCHEDULES)
    train.add_argument("--warmup-steps", type=int)
    train.add_argument("--precision", choices=PRECISIONS)
    train.add_argument("--clip-norm", type=float)
    train.add_argument("--clip-value", type=float)
    train.add_argument("--accumulate", type=int, help="micro-batches per optimizer step")
    train.add_argument("--seed", type=int)
    train.add_argument("--device", choices=("auto", "cpu", "cuda"))
    train.add_argument("--n-samples", type=int, help="dataset size (regression, images-cnn)")
    train.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    train.add_argument(
        "--run", dest="run_name", help="run name: metrics, config and checkpoints go to RUNS_DIR/RUN/"
    )
    train.add_argument("--runs-dir", default="runs")
    train.add_argument("--resume", action="store_true", help="continue from the run's checkpoint")
    train.set_defaults(command="train", run=_train)


def _doctor(args: argparse.Namespace) -> int:
    from workbench.devices import device_report

    report = device_report()
    if args.json:
        print(json.dumps(dataclasses.asdict(report), indent=2, default=str))
    else:
        print(report)
    return 0


def _kernel_install(args: argparse.Namespace) -> int:
    from workbench.kernelspec import install_kernelspec

    path = install_kernelspec(user=args.user, prefix=args.prefix)
    print(f"installed kernelspec 'workbench' in {path} (runs {sys.executable})")
    return 0


def _train(args: argparse.Namespace) -> int:
    import torch

    from workbench.tables import text_table
    from workbench.train import PRESETS, Trainer, build_experiment
    from workbench.widgets.console import ConsoleProgress

    if args.list or args.preset is None:
        print(text_table(["preset", "what"], [[name, p.description] for name, p in PRESETS.items()]))
        return 0
    names = (
        "epochs",
        "batch_size",
        "optimizer",
        "lr",
        "momentum",
        "weight_decay",
        "schedule",
        "warmup_steps",
        "precision",
        "clip_norm",
        "clip_value",
        "accumulate",
        "seed",
        "device",
        "n_samples",
    )
    changes = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    try:
        if args.threads is not None:
            if args.threads < 1:
                raise ValueError(f"--threads must be ≥ 1, got {args.threads}")
            torch.set_num_threads(args.threads)
        experiment = build_experiment(args.preset, **changes)
        trainer = Trainer(
            experiment.model,
            experiment.loss_fn,
            experiment.splits,
            experiment.config,
            callbacks=[ConsoleProgress()],
            run=args.run_name,
            runs_dir=args.runs_dir,
        )
        result = trainer.fit(resume=args.resume)
    except (ValueError, FileNotFoundError) as error:
        print(f"workbench train: error: {error}", file=sys.stderr)
        return 2
    rows = [["train", "loss", f"{result.train_loss:.5f}"]]
    for split, metrics in result.metrics.items():
        rows += [[split, name, f"{value:.5f}"] for name, value in metrics.items()]
    print(text_table(["split", "metric", "value"], rows))
    print(
        f"{result.status}: {result.step} steps, {result.epoch} epochs in {result.seconds:.2f} s on "
        f"{trainer.device} ({torch.get_num_threads()} threads)"
        + (f"; checkpoint {result.checkpoint}" if result.checkpoint else "")
    )
    return 0


def _bench_trainer(args: argparse.Namespace) -> int:
    from workbench.bench.trainer import benchmark_trainer

    try:
        result = benchmark_trainer(repeats=args.repeats, epochs=args.epochs, history=args.history)
    except ValueError as error:
        print(f"workbench bench trainer: error: {error}", file=sys.stderr)
        return 2
    print(f"{result.steps} optimizer steps per run, median of {args.repeats} runs each")
    print(result.table())
    return 0


def _bench_hardware(args: argparse.Namespace) -> int:
    from workbench.devices.microbench import benchmark_hardware

    try:
        result = benchmark_hardware(repeats=args.repeats, quick=not args.full)
    except ValueError as error:
        print(f"workbench bench hardware: error: {error}", file=sys.stderr)
        return 2
    print(result.table())
    mode = "quick" if result.quick else "full"
    print(f"{mode} run, median of {args.repeats}, {result.seconds:.1f} s")
    if result.gpu is None:
        print("no CUDA device here: the GPU measurements were skipped (see the reasons above)")
    else:
        print(f"GPU: {result.gpu}")
    return 0
