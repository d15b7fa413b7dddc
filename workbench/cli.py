"""The ``workbench`` command (also ``python -m workbench``).

workbench doctor                  print the device report (CPU, GPUs, CUDA, numba backend)
workbench doctor --json           the same as JSON
workbench kernel install          install the `workbench` Jupyter kernelspec for this interpreter
workbench tutorials [DIR]         copy the tutorial notebooks into DIR (./workbench-tutorials) to open them
workbench train digits-mlp        train a preset with a progress bar and print the final metrics
workbench train --list            the presets (digits-mlp, regression-linear, images-cnn)
workbench train digits-mlp --strategy ddp --nproc-per-node 2      data parallel on 2 local processes
workbench train text-transformer --strategy pipeline --microbatches 4   (also fsdp, tensor)
workbench train digits-mlp --strategy ddp --nnodes 2 --master-addr HOST   print the torchrun command
torchrun --nproc-per-node 2 -m workbench train digits-mlp --strategy ddp  the same under torchrun
workbench bench trainer           the Trainer and Dashboard against a hand-written loop (ratios)
workbench bench trainer --peers   the same training in a hand loop, the Trainer, Lightning, Fabric, Accelerate
workbench bench launch --engines  seconds to start the same training via launch, torchrun, mpirun, Spark
workbench bench hardware          memory bandwidth and matmul FLOP/s of this CPU and GPU (--full: larger)
workbench bench kernel-env        the workbench kernel's environment vs plain python (training on CPU)
workbench bench kernels           numba kernels against torch/cuBLAS on a GPU (--full: 4096³, 100M params)
workbench bench compile           eager vs TrainConfig(compile=...) per step on presets (speed-up, compile s)
workbench bench ddp               throughput of 2 processes × 1 thread vs 1 × 1 (data-parallel speed-up)
workbench bench launch            seconds to start launch's workers: fork, fork server, spawn side by side
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import re
import shlex
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from workbench.parallel.registry import DISTRIBUTED, STRATEGIES, strategy_spec


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["torchrun"]:  # torchrun's own arguments, passed through untouched
        return _torchrun(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = argv
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.run(args)
    except KeyboardInterrupt:  # one line, not a traceback through whatever was running
        print(f"\nworkbench {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130


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

    tutorials = commands.add_parser("tutorials", help="copy the tutorial notebooks into a folder of yours")
    tutorials.add_argument(
        "folder", nargs="?", default=None, help="where to (default: ./workbench-tutorials)"
    )
    tutorials.add_argument("--force", action="store_true", help="replace notebooks you edited there")
    tutorials.set_defaults(command="tutorials", run=_tutorials)

    _add_train(commands)

    runs = commands.add_parser("runs", help="the runs under a runs directory, and what differs between two")
    runs.add_argument("--runs-dir", default="runs", help="where the runs are (default: runs)")
    runs.add_argument(
        "--diff", nargs=2, metavar=("A", "B"), help="the config fields that differ between A and B"
    )
    runs.set_defaults(command="runs", run=_runs)

    gpu_check = commands.add_parser(
        "gpu-check", help="check every GPU path on this machine's GPU and write the report (docs/gpu)"
    )
    from workbench.bench.gpu_check import add_arguments as add_gpu_check_arguments

    add_gpu_check_arguments(gpu_check)
    gpu_check.set_defaults(command="gpu-check", run=_gpu_check)

    bench = commands.add_parser("bench", help="benchmarks that print measured ratios")
    bench_commands = bench.add_subparsers(title="benchmarks", metavar="WHAT", required=True)
    trainer = bench_commands.add_parser("trainer", help="Trainer and Dashboard vs a hand-written loop")
    trainer.add_argument("--repeats", type=int, default=5, help="runs of each variant (median)")
    trainer.add_argument("--epochs", type=int, default=6)
    trainer.add_argument("--history", type=int, default=1_000_000, help="loss-plot points before timing")
    trainer.add_argument(
        "--peers", action="store_true", help="instead: the same training in Lightning, Fabric, Accelerate"
    )
    trainer.set_defaults(command="bench trainer", run=_bench_trainer)
    kernel_env = bench_commands.add_parser(
        "kernel-env", help="the workbench kernel's environment vs plain python, training in child processes"
    )
    kernel_env.add_argument("--repeats", type=int, default=3, help="child processes per variant (median)")
    kernel_env.add_argument("--epochs", type=int, default=3, help="epochs per timed run")
    kernel_env.set_defaults(command="bench kernel-env", run=_bench_kernel_env)
    hardware = bench_commands.add_parser("hardware", help="memory bandwidth and matmul FLOP/s, CPU and GPU")
    hardware.add_argument("--repeats", type=int, default=5, help="timed runs of each measurement (median)")
    hardware.add_argument("--full", action="store_true", help="larger sizes: slower, closer to peak")
    hardware.set_defaults(command="bench hardware", run=_bench_hardware)
    kernels = bench_commands.add_parser("kernels", help="numba kernels against torch (GPU; says so without)")
    kernels.add_argument("--repeats", type=int, default=5, help="timed samples per measurement (median)")
    kernels.add_argument("--full", action="store_true", help="matmul 4096³, 100M-parameter Adam and clipping")
    kernels.add_argument("--static", action="store_true", help="no GPU: compile, predict from the roofline")
    kernels.add_argument(
        "--host", action="store_true", help="no GPU: host time of one Adam step, launches stubbed"
    )
    kernels.set_defaults(command="bench kernels", run=_bench_kernels)
    compiled = bench_commands.add_parser("compile", help="eager vs compiled training, per step")
    compiled.add_argument("--presets", nargs="+", default=None, help="presets to compare (default: 3)")
    compiled.add_argument("--mode", default="default", help="torch.compile mode (default: default)")
    compiled.add_argument("--repeats", type=int, default=5, help="alternating fits of each variant (median)")
    compiled.add_argument("--epochs", type=int, default=1, help="epochs per timed fit")
    compiled.set_defaults(command="bench compile", run=_bench_compile)
    ddp = bench_commands.add_parser("ddp", help="data parallel: N processes vs 1 on a compute-bound MLP")
    ddp.add_argument("--nprocs", type=int, default=2, help="processes of the parallel run (default 2)")
    ddp.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    ddp.add_argument("--steps", type=int, default=15, help="training steps per run, warm-up included")
    ddp.add_argument("--batch", type=int, default=2048, help="samples per rank per step")
    ddp.set_defaults(command="bench ddp", run=_bench_ddp)
    start = bench_commands.add_parser(
        "launch", help="launch's start methods side by side: fork, forkserver, spawn"
    )
    start.add_argument("--nprocs", type=int, default=2, help="workers per launch (default 2)")
    start.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="launches per start method (default 5) or engine (default 1)",
    )
    start.add_argument(
        "--engines",
        action="store_true",
        help="instead: the same 2-rank training through launch, torchrun, mpirun and Spark (seconds to "
        "training start and to result)",
    )
    start.set_defaults(command="bench launch", run=_bench_launch)
    return parser


def _add_train(commands: argparse._SubParsersAction) -> None:
    from workbench.train.compilation import COMPILE_MODES
    from workbench.train.config import OPTIMIZERS, PRECISIONS, SCHEDULES

    train = commands.add_parser("train", help="train a preset model with a progress bar")
    train.add_argument("preset", nargs="?", help="which experiment; see --list")
    train.add_argument("--list", action="store_true", help="list the presets and exit")
    train.add_argument("--epochs", type=int)
    train.add_argument("--batch-size", type=int, help="samples per step on each rank (the preset's default)")
    train.add_argument("--optimizer", choices=OPTIMIZERS)
    train.add_argument("--lr", type=float)
    train.add_argument("--momentum", type=float)
    train.add_argument("--weight-decay", type=float)
    train.add_argument("--schedule", choices=SCHEDULES)
    train.add_argument("--warmup-steps", type=int)
    train.add_argument("--precision", choices=PRECISIONS)
    train.add_argument(
        "--compile", choices=COMPILE_MODES, help="torch.compile mode (single process or ddp; default off)"
    )
    train.add_argument("--clip-norm", type=float)
    train.add_argument("--clip-value", type=float)
    train.add_argument("--accumulate", type=int, help="micro-batches per optimizer step")
    train.add_argument("--seed", type=int)
    train.add_argument("--device", choices=("auto", "cpu", "cuda"))
    train.add_argument("--n-samples", type=int, help="dataset size (regression, images-cnn, text)")
    train.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    train.add_argument(
        "--run",
        "--run-name",  # the spelling to use under torchrun, whose parser takes --run for --run-path
        dest="run_name",
        help="run name: metrics, config and checkpoints go to RUNS_DIR/RUN/",
    )
    train.add_argument("--runs-dir", default="runs")
    train.add_argument(
        "--log",
        choices=["tensorboard", "mlflow"],
        action="append",
        default=[],
        help="also log to TensorBoard, in RUNS_DIR/tensorboard/RUN (the tensorboard extra), or to MLflow, in "
        "the SQLite store RUNS_DIR/mlflow.db (the mlflow extra); give --log twice for both",
    )
    train.add_argument("--resume", action="store_true", help="continue from the run's checkpoint")
    ddp = train.add_argument_group(f"several processes (--strategy {', '.join(DISTRIBUTED)})")
    ddp.add_argument("--strategy", choices=tuple(STRATEGIES), default="single")
    ddp.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        help="process-group backend (default: nccl with a GPU per process on this machine, else gloo)",
    )
    ddp.add_argument(
        "--pipeline-schedule", choices=("1f1b", "gpipe"), default="1f1b", help="--strategy pipeline"
    )
    ddp.add_argument("--microbatches", type=int, default=4, help="--strategy pipeline: per batch (default 4)")
    ddp.add_argument("--split-points", help="--strategy pipeline: layers where stages begin, e.g. block1")
    ddp.add_argument("--nproc-per-node", type=int, default=2, help="processes per machine (default 2)")
    ddp.add_argument(
        "--global-batch-size",
        type=int,
        help="--strategy ddp or fsdp: samples per step over all ranks, each rank taking its share (instead "
        "of --batch-size per rank), so that a job restarted on fewer machines (torchrun --nnodes MIN:MAX) "
        "keeps its batch and resumes",
    )
    ddp.add_argument(
        "--spark-master",
        metavar="URL",
        help="run the --nproc-per-node ranks as Spark tasks through TorchDistributor on this master, e.g. "
        "local[2] or spark://host:7077 (the spark extra)",
    )
    ddp.add_argument(
        "--spark-on-driver",
        action="store_true",
        help="with --spark-master: run the ranks on the driver (TorchDistributor's local_mode)",
    )
    ddp.add_argument("--nnodes", type=int, default=1, help="machines; > 1 prints the torchrun command")
    ddp.add_argument(
        "--master-addr", default=None, help="rendezvous host: the first machine (needed with --nnodes > 1)"
    )
    ddp.add_argument("--master-port", type=int, default=29500, help="rendezvous port")
    ddp.add_argument(
        "--join-timeout",
        type=int,
        default=300,
        help="seconds the printed torchrun command waits for every machine to join (default 300)",
    )
    ddp.add_argument(
        "--collective-timeout",
        type=int,
        default=300,
        help="under torchrun, mpirun or srun: seconds a rank waits for the others (a stopped or cut-off "
        "machine) before the job stops with the peer named (default 300)",
    )
    ddp.add_argument("--print-command", action="store_true", help="print the torchrun command and exit")
    train.set_defaults(command="train", run=_train)


def _doctor(args: argparse.Namespace) -> int:
    from workbench.devices import device_report

    report = device_report()
    if args.json:
        print(json.dumps(dataclasses.asdict(report), indent=2, default=str))
    else:
        print(report)
    return 0


def _gpu_check(args: argparse.Namespace) -> int:
    from workbench.bench.gpu_check import run

    return run(args)


def _runs(args: argparse.Namespace) -> int:
    from workbench.tables import text_table
    from workbench.train.runs import RUN_COLUMNS, config_diff, list_runs

    skipped: list[str] = []
    try:
        runs = list_runs(args.runs_dir, on_skip=lambda path, why: skipped.append(f"{path.name}: {why}"))
    except FileNotFoundError as error:
        print(f"workbench runs: error: {error}", file=sys.stderr)
        return 2
    for line in skipped:
        print(f"workbench runs: skipped {line}", file=sys.stderr)
    if args.diff is None:
        print(text_table(RUN_COLUMNS, [run.row() for run in runs]) if runs else f"no runs in {args.runs_dir}")
        return 0
    by_name = {run.name: run for run in runs}
    missing = [name for name in args.diff if name not in by_name]
    if missing:
        known = ", ".join(by_name) or "none"
        print(
            f"workbench runs: error: no run {missing[0]!r} in {args.runs_dir}; runs: {known}", file=sys.stderr
        )
        return 2
    differ = config_diff([by_name[name] for name in args.diff])
    if not differ:
        print(f"{args.diff[0]} and {args.diff[1]} have the same config")
        return 0
    rows = [[name, *(json.dumps(value) for value in values)] for name, values in differ.items()]
    print(text_table(["config field", *args.diff], rows))
    return 0


def _kernel_install(args: argparse.Namespace) -> int:
    from workbench.kernelspec import MissingKernelspecError, install_kernelspec

    try:
        path = install_kernelspec(user=args.user, prefix=args.prefix)
    except MissingKernelspecError as error:
        print(f"workbench kernel install: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a prefix that cannot be created or written
        where = args.prefix or ("your user's Jupyter directory" if args.user else sys.prefix)
        print(
            f"workbench kernel install: error: cannot write the kernelspec under {where} "
            f"({error.strerror or error}); choose a writable --prefix, or --user",
            file=sys.stderr,
        )
        return 2
    print(f"installed kernelspec 'workbench' in {path} (runs {sys.executable})")
    return 0


def _tutorials(args: argparse.Namespace) -> int:
    from workbench._distribution import pip_install
    from workbench.kernelspec import KERNEL_NAME
    from workbench.tutorials import DEFAULT_FOLDER, copy_tutorials

    try:
        done = copy_tutorials(args.folder or DEFAULT_FOLDER, force=args.force)
    except OSError as error:  # edited notebooks, a file for a folder, an unwritable folder: said in one line
        print(f"workbench tutorials: error: {error.strerror or error}", file=sys.stderr)
        return 2
    folder = done.folder.resolve()
    changed = done.copied + done.replaced
    print(
        f"{_count(len(changed), 'tutorial notebook')} copied into {folder}"
        + (f" ({', '.join(done.replaced)} replaced: edited)" if done.replaced else "")
        + (f"; {len(done.unchanged)} already up to date" if done.unchanged else "")
    )
    print(f"open them:  jupyter lab {shlex.quote(str(folder))}")
    if importlib.util.find_spec("jupyterlab") is None:
        print(f"JupyterLab is not installed here: {pip_install('lab')}")
    if KERNEL_NAME not in _jupyter_kernels():
        print(f"the notebooks run on the '{KERNEL_NAME}' kernel: workbench kernel install --user")
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _jupyter_kernels() -> set[str]:
    from jupyter_client.kernelspec import KernelSpecManager

    return set(KernelSpecManager().find_kernel_specs())


def _train(args: argparse.Namespace) -> int:
    import torch

    from workbench.parallel import WorkerFailed
    from workbench.presets import PRESETS
    from workbench.tables import text_table
    from workbench.train.compilation import CompilerMissingError
    from workbench.train.loss_check import NonFiniteLossError
    from workbench.train.run_lock import RunInUseError

    if args.list or args.preset is None:
        print(text_table(["preset", "what"], [[name, p.description] for name, p in PRESETS.items()]))
        return 0
    try:
        if args.threads is not None:
            if args.threads < 1:
                raise ValueError(f"--threads must be ≥ 1, got {args.threads}")
            torch.set_num_threads(args.threads)
        try:
            _loggers(args.log, Path(args.runs_dir))  # a missing extra is said before any rank starts
        except ModuleNotFoundError as missing:
            print(f"workbench train: error: --log: {missing}", file=sys.stderr)
            return 2
        if args.strategy == "single":
            _refuse_distributed_options(args)
            return _train_here(args, strategy=None)
        return _train_distributed(args)
    except NonFiniteLossError as error:  # the training diverged: said as it is, not as a traceback
        print(f"workbench train: error: {error}", file=sys.stderr)
        return 1
    except CompilerMissingError as error:
        print(f"workbench train: error: {error}", file=sys.stderr)
        return 2
    except WorkerFailed as error:  # what failed where; the rank's traceback is for the API, not the terminal
        print(f"workbench train: error: {str(error).split(chr(10) * 2)[0]}", file=sys.stderr)
        return 1
    except (ValueError, OSError, RunInUseError) as error:  # OSError: a run directory it cannot write
        said = error.strerror if isinstance(error, OSError) and error.strerror else error  # no "[Errno 27]"
        print(f"workbench train: error: {said}", file=sys.stderr)
        return 2


def _refuse_distributed_options(args: argparse.Namespace) -> None:
    """ValueError naming the options that only act with several ranks (the single strategy ignored them)."""
    given = [
        flag
        for flag, value, default in (
            ("--global-batch-size", args.global_batch_size, None),
            ("--spark-master", args.spark_master, None),
            ("--spark-on-driver", args.spark_on_driver, False),
            ("--nnodes", args.nnodes, 1),
            ("--master-addr", args.master_addr, None),
            ("--print-command", args.print_command, False),
        )
        if value != default
    ]
    if given:
        raise ValueError(
            f"{', '.join(given)} {'act' if len(given) > 1 else 'acts'} on several ranks, and --strategy "
            "single trains one process here: add --strategy ddp (or fsdp, pipeline, tensor), or leave "
            f"{'them' if len(given) > 1 else 'it'} out (--batch-size sets the batch of one process)"
        )


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
)


def _experiment(args: argparse.Namespace) -> Any:
    from workbench.presets import build_experiment

    changes = {name: getattr(args, name) for name in _CHANGEABLE if getattr(args, name) is not None}
    return build_experiment(args.preset, **changes)


def _loggers(tools: list[str], runs_dir: Path) -> list[Any]:
    """The `--log` loggers, each once (ModuleNotFoundError with the install line when an extra is missing)."""
    from workbench.train.loggers import MLflowLogger, TensorBoardLogger

    made = {"tensorboard": lambda: TensorBoardLogger(runs_dir / "tensorboard")}
    made["mlflow"] = lambda: MLflowLogger(runs_dir / "mlflow.db")
    return [made[tool]() for tool in dict.fromkeys(tools)]


def _resume_after_restart(resume: bool, run_dir: Any, main: bool) -> bool:
    """`--resume`, except after torchrun restarted the workers before the run's first checkpoint: then the
    metrics log is this job's own failed try, and training starts over (a plain fit rewrites the log)."""
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if not (resume and restart.isdigit() and int(restart) > 0 and run_dir is not None):
        return resume
    if run_dir.latest_checkpoint() is not None:
        return True
    if main:
        print(
            f"workbench train: restart {restart} of this torchrun job, and no checkpoint was saved "
            "before it: training starts over",
            file=sys.stderr,
        )
    return False


def _train_here(args: argparse.Namespace, strategy: Any, experiment: Any = None) -> int:
    """Train the preset (`experiment`, else built from `args`) in this process, alone or as one rank of a
    distributed job; rank 0 prints."""
    import torch

    from workbench.tables import text_table
    from workbench.train import Trainer
    from workbench.train.compilation import describe_compile
    from workbench.train.progress import ConsoleProgress

    experiment = _experiment(args) if experiment is None else experiment
    main = strategy is None or strategy.is_main
    callbacks: list[Any] = [ConsoleProgress()] if main else []
    if main:
        callbacks.extend(_loggers(args.log, Path(args.runs_dir)))
    trainer = Trainer(
        experiment.model,
        experiment.loss_fn,
        experiment.splits,
        experiment.config,
        callbacks=callbacks,
        run=args.run_name,
        runs_dir=args.runs_dir,
        strategy=strategy,
    )
    with _stop_on_ctrl_c(trainer.control, alone=strategy is None) as pressed:
        result = trainer.fit(resume=_resume_after_restart(args.resume, trainer.run_dir, main))
    if pressed:
        saved = (
            f"checkpoint {result.checkpoint}: continue with --resume" if result.checkpoint else "not saved"
        )
        print(f"workbench train: stopped at step {result.step} (Ctrl-C); {saved}", file=sys.stderr)
        return 130
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


@contextlib.contextmanager
def _stop_on_ctrl_c(control: Any, *, alone: bool) -> Iterator[list[bool]]:
    """While training alone in the main thread, Ctrl-C asks the loop to stop after its step and save (as the
    Dashboard's Stop does); a second Ctrl-C quits at once. Yields a list that holds True once pressed."""
    pressed: list[bool] = []
    if not alone or threading.current_thread() is not threading.main_thread():
        yield pressed
        return

    def stop(signum: int, frame: Any) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(True)
        print(
            "\nworkbench train: stopping after this step (Ctrl-C again: quit without saving)", file=sys.stderr
        )
        control.stop()

    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def _strategy(args: argparse.Namespace) -> Any:
    """The strategy --strategy names, with its options (not yet bound to a process group)."""
    strategy_class = strategy_spec(args.strategy).load()
    if args.strategy == "pipeline":
        points = None if args.split_points is None else [p for p in args.split_points.split(",") if p]
        return strategy_class(
            split_points=points, schedule=args.pipeline_schedule, microbatches=args.microbatches
        )
    return strategy_class()


def _train_distributed(args: argparse.Namespace) -> int:
    """Under a launcher (torchrun, mpirun, srun): be one rank. Otherwise: print the torchrun command, or
    launch local processes."""
    from workbench.parallel import launch
    from workbench.parallel.process_group import join_process_group_from_env, lost_peer, under_a_launcher

    strategy = _strategy(args)
    if not 1 <= args.collective_timeout <= 86400:
        raise ValueError(f"--collective-timeout must be 1..86400 seconds, got {args.collective_timeout}")
    if under_a_launcher():  # torchrun, TorchDistributor, mpirun or srun started this process
        timeout = args.collective_timeout
        join_process_group_from_env(args.backend, timeout, who=f"--strategy {args.strategy}")
        strategy.bind()
        _share_global_batch(args, strategy.data_world_size)
        failed = True
        try:
            status = _train_here(args, strategy)
            failed = False
            return status
        except Exception as error:
            lost = lost_peer(error)
            if lost is None:
                raise
            print(
                f"workbench train: error: rank {strategy.rank} lost {lost} (its process stopped, or the "
                f"network between the machines failed, or it did not answer for --collective-timeout "
                f"{timeout:g} s); see that machine's log",
                file=sys.stderr,
            )
            return 1
        finally:
            strategy.close(wait_for_others=not failed)  # after a failure the others may be gone
    for flag in ("nproc_per_node", "nnodes"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be ≥ 1, got {getattr(args, flag)}")
    _share_global_batch(args, args.nnodes * args.nproc_per_node)  # checked here; under torchrun each rank
    experiment = _experiment(args)  # shares it again over the world it finds. Checked before anything starts
    strategy.validate(experiment.model, experiment.config, world_size=args.nnodes * args.nproc_per_node)
    if args.nnodes > 1 and args.master_addr is None:
        raise ValueError(
            f"--nnodes {args.nnodes} needs --master-addr: the host name or IP address of the first machine, "
            "which every machine can reach, e.g. --master-addr 10.0.0.1 (to try it in two terminals of this "
            "machine: --master-addr 127.0.0.1)"
        )
    if args.master_addr is None:
        args.master_addr = "127.0.0.1"
    if args.nnodes > 1 or args.print_command:
        _check_endpoint(args.master_addr, args.master_port)
        if not 1 <= args.join_timeout <= 86400:
            raise ValueError(f"--join-timeout must be 1..86400 seconds, got {args.join_timeout}")
        print(_torchrun_command(args))
        return 0

    def train(strategy: Any) -> int:  # the workers train the experiment built (and checked) here
        return _train_here(args, strategy, experiment)

    if args.spark_master is not None:
        return _train_on_spark(args, train, strategy)
    return launch(train, args.nproc_per_node, strategy=strategy, backend=args.backend)


def _share_global_batch(args: argparse.Namespace, ranks: int) -> None:
    """Set ``args.batch_size`` to this rank's share of ``--global-batch-size`` over `ranks` data shards."""
    total = args.global_batch_size
    if total is None:
        return
    if args.strategy not in ("ddp", "fsdp"):
        raise ValueError(
            f"--global-batch-size is for --strategy ddp or fsdp (each rank a share of the batch); "
            f"--strategy {args.strategy} takes --batch-size"
        )
    if args.batch_size is not None:
        raise ValueError(
            f"give --batch-size (per rank) or --global-batch-size (over all ranks), not both: got "
            f"--batch-size {args.batch_size} and --global-batch-size {total}"
        )
    if total < 1 or total % ranks:
        raise ValueError(
            f"--global-batch-size {total} does not split evenly over {ranks} ranks; give a multiple of "
            f"{ranks} (a multiple of every world size the job may run at, e.g. of 2 and 1 for "
            "--nnodes 1:2 with one process each)"
        )
    args.batch_size = total // ranks


def _train_on_spark(args: argparse.Namespace, train: Any, strategy: Any) -> int:
    """The ranks as Spark tasks (or on the driver) of a session on --spark-master."""
    import os

    from workbench.parallel.spark import SPARK_INSTALL, check_java, run_on_spark

    try:
        from pyspark.sql import SparkSession
    except ModuleNotFoundError:
        raise ValueError(f"--spark-master needs pyspark, which is not installed: {SPARK_INSTALL}") from None
    try:
        check_java()
    except RuntimeError as error:
        raise ValueError(str(error)) from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers on a local master run this one
    session = SparkSession.builder.master(args.spark_master).appName("workbench train").getOrCreate()
    try:
        return run_on_spark(
            train,
            args.nproc_per_node,
            strategy=strategy,
            local_mode=args.spark_on_driver,
            spark=session,
            backend=args.backend,
        )
    finally:
        session.stop()


_LAUNCHER_FLAGS = (
    "--strategy",
    "--nproc-per-node",
    "--nnodes",
    "--master-addr",
    "--master-port",
    "--join-timeout",
)


def _torchrun(argv: list[str]) -> int:
    """``workbench torchrun ARGS``: torchrun with ARGS, ending in one line when machines do not all join."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousTimeoutError
    from torch.distributed.run import main as torchrun_main

    from workbench.parallel.multi_node import stop_agent_after_its_workers

    try:
        argv = _with_network_settings(argv)
    except ValueError as error:
        print(f"workbench torchrun: error: {error}", file=sys.stderr)
        return 2
    timeout = _option(argv, "--collective-timeout")
    stop_agent_after_its_workers(grace_s=(int(timeout) if timeout and timeout.isdigit() else 300) + 30)
    try:
        torchrun_main(argv)
    except ChildFailedError as error:  # the ranks said why; torchrun's summary, without its traceback
        print(str(error).strip(), file=sys.stderr)
        return 1
    except RendezvousTimeoutError:
        endpoint = _option(argv, "--rdzv-endpoint", "--rdzv_endpoint") or "the rendezvous endpoint"
        conf = _option(argv, "--rdzv-conf", "--rdzv_conf") or ""
        timeout = next(
            (part.split("=", 1)[1] for part in conf.split(",") if part.startswith("join_timeout=")), "600"
        )
        nodes = _option(argv, "--nnodes") or "all"
        print(
            f"workbench torchrun: error: not all {nodes} machines joined the rendezvous at {endpoint} within "
            f"{timeout} s; run the same command on each machine, check that {endpoint} is reachable from "
            "them (host name, open port, firewall), or give --join-timeout more seconds",
            file=sys.stderr,
        )
        return 2
    return 0


def _endpoint_host(endpoint: str) -> str:
    """The host of ``host:port``, ``[v6]:port`` or a bare host (an IPv6 address has colons of its own)."""
    has_port = endpoint.count(":") == 1 or endpoint.startswith("[")
    return (endpoint.rsplit(":", 1)[0] if has_port else endpoint).strip("[]")


def _with_network_settings(argv: list[str]) -> list[str]:
    """`argv` with what this machine needs to join the other machines (see `workbench.parallel.multi_node`):
    nothing where its name resolves to a routable address."""
    import os

    from workbench.parallel.multi_node import torchrun_network_settings

    endpoint = _option(argv, "--rdzv-endpoint", "--rdzv_endpoint")
    nnodes = (_option(argv, "--nnodes") or "1").split(":")[-1]
    if endpoint is None or not nnodes.isdigit():
        return argv
    script = argv.index("-m") if "-m" in argv else len(argv)
    options, rest = argv[:script], argv[script:]
    conf_names = ("--rdzv-conf", "--rdzv_conf")
    settings = torchrun_network_settings(
        _endpoint_host(endpoint),
        nnodes=int(nnodes),
        rdzv_conf=_option(options, *conf_names) or "",
        local_addr=_option(options, "--local-addr", "--local_addr"),
    )
    if not settings.args and not settings.env:
        return argv
    print(f"workbench torchrun: {settings.reason}", file=sys.stderr)
    os.environ.update(settings.env)  # the workers inherit it
    if "--rdzv-conf" in settings.args:  # it holds the given conf too: drop the given one
        kept, skip = [], False
        for word in options:
            if skip:
                skip = False
            elif word in conf_names:
                skip = True
            elif not word.startswith(tuple(f"{name}=" for name in conf_names)):
                kept.append(word)
        options = kept
    return [*options, *settings.args, *rest]


def _option(argv: list[str], *names: str) -> str | None:
    """The value of option `names` in `argv` (``--name value`` or ``--name=value``), or None."""
    for index, word in enumerate(argv):
        for name in names:
            if word == name and index + 1 < len(argv):
                return argv[index + 1]
            if word.startswith(f"{name}="):
                return word.split("=", 1)[1]
    return None


def _check_endpoint(host: str, port: int) -> None:
    """A host name or IP address and a TCP port, before they go into a command people paste."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]*|\[?[0-9A-Fa-f:.]+\]?", host):
        raise ValueError(
            f"--master-addr must be a host name or IP address of the first machine, got {host!r}; "
            "e.g. node0, node0.cluster.local or 10.0.0.1"
        )
    if not 1 <= port <= 65535:
        raise ValueError(f"--master-port must be a TCP port in 1..65535, got {port}; the default is 29500")


def _torchrun_command(args: argparse.Namespace) -> str:
    """The command to run on each machine, with this command's training options."""
    kept, skip = [], False
    for word in args.argv:
        if skip:
            skip = False
        elif word == "--print-command":
            continue
        elif word in _LAUNCHER_FLAGS:
            skip = True
        elif word == "--run" or word.startswith("--run="):  # torchrun would read it as --run-path
            kept.append(word.replace("--run", "--run-name", 1))
        elif not word.startswith(tuple(f"{flag}=" for flag in _LAUNCHER_FLAGS)):
            kept.append(word)
    host = args.master_addr.strip("[]")
    endpoint = f"[{host}]:{args.master_port}" if ":" in host else f"{host}:{args.master_port}"  # IPv6
    words = [
        "workbench torchrun",  # torchrun, with one clear line when not every machine joins
        f"--nnodes {args.nnodes}",
        f"--nproc-per-node {args.nproc_per_node}",
        "--rdzv-backend c10d",
        f"--rdzv-endpoint {shlex.quote(endpoint)}",
        f"--rdzv-id {shlex.quote(args.run_name or args.preset)}",
        f"--rdzv-conf join_timeout={args.join_timeout}",
        "-m workbench",
        shlex.join([*kept, "--strategy", args.strategy]),
    ]
    machines = "this machine" if args.nnodes == 1 else f"each of the {args.nnodes} machines"
    return (
        f"# run on {machines}; {args.master_addr} must be reachable from all of them "
        f"(port {args.master_port} open); the run waits {args.join_timeout} s for every machine to join "
        "(--join-timeout):\n" + " \\\n    ".join(words)
    )


def _bench_kernel_env(args: argparse.Namespace) -> int:
    from workbench.bench.kernel_env import benchmark_kernel_environment

    try:
        result = benchmark_kernel_environment(repeats=args.repeats, epochs=args.epochs)
    except (ValueError, FileNotFoundError) as error:
        print(f"workbench bench kernel-env: error: {error}", file=sys.stderr)
        return 2
    settings = " ".join(f"{k}={v}" for k, v in result.environment.items()) or "(none)"
    print(f"the workbench kernel's environment: {settings}; {args.repeats} child processes per variant")
    print(result.table())
    return 0


def _bench_trainer(args: argparse.Namespace) -> int:
    from workbench.bench.trainer import benchmark_trainer

    if args.peers:
        return _bench_peers(args)
    try:
        result = benchmark_trainer(repeats=args.repeats, epochs=args.epochs, history=args.history)
    except ValueError as error:
        print(f"workbench bench trainer: error: {error}", file=sys.stderr)
        return 2
    print(f"{result.steps} optimizer steps per run, median of {args.repeats} runs each")
    print(result.table())
    return 0


def _bench_peers(args: argparse.Namespace) -> int:
    from workbench.bench.peers import benchmark_peers

    try:
        result = benchmark_peers(repeats=args.repeats, epochs=args.epochs)
    except ValueError as error:
        print(f"workbench bench trainer: error: {error}", file=sys.stderr)
        return 2
    print(
        f"{result.steps} optimizer steps per run (a DataLoader over TensorDatasets, validation each epoch), "
        f"{args.repeats} alternating runs each"
    )
    print(result.table())
    return 0


def _bench_kernels(args: argparse.Namespace) -> int:
    from workbench.bench.kernels import main as bench_kernels

    flags = [*(["--full"] if args.full else []), *(["--static"] if args.static else [])]
    flags += ["--host"] if args.host else []
    return bench_kernels(["--repeats", str(args.repeats), *flags])


def _bench_launch(args: argparse.Namespace) -> int:
    from workbench.bench.engines import benchmark_engines
    from workbench.bench.launch import benchmark_launch

    try:
        if args.engines:
            result = benchmark_engines(repeats=1 if args.repeats is None else args.repeats)
        else:
            result = benchmark_launch(nprocs=args.nprocs, repeats=5 if args.repeats is None else args.repeats)
    except ValueError as error:
        print(f"workbench bench launch: error: {error}", file=sys.stderr)
        return 2
    print(result.table())
    return 0


def _bench_compile(args: argparse.Namespace) -> int:
    from workbench.bench.compile import DEFAULT_PRESETS, compare_compile, table

    presets = tuple(args.presets) if args.presets else DEFAULT_PRESETS
    try:
        results = compare_compile(presets, mode=args.mode, repeats=args.repeats, epochs=args.epochs)
    except (ValueError, RuntimeError) as error:
        print(f"workbench bench compile: error: {error}", file=sys.stderr)
        return 2
    print(f"torch.compile mode={args.mode!r}, {args.repeats} alternating fits of each (training steps only)")
    print(table(results))
    return 0


def _bench_ddp(args: argparse.Namespace) -> int:
    from workbench.bench.data_parallel import benchmark_data_parallel

    try:
        result = benchmark_data_parallel(
            nprocs=args.nprocs, threads=args.threads, steps=args.steps, batch_per_rank=args.batch
        )
    except ValueError as error:
        print(f"workbench bench ddp: error: {error}", file=sys.stderr)
        return 2
    print(
        f"MLP with {result.parameters:,} parameters, {result.batch_per_rank} samples per rank per step, "
        f"{args.steps} steps (throughput after warm-up)"
    )
    print(result.table())
    print(f"speed-up {result.speedup:.2f}× with {args.nprocs} processes (ideal {args.nprocs}×)")
    print(result.breakdown())
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
