"""``workbench train``: a preset, in this process or on several ranks (see train_local, train_distributed)."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path

from workbench.cli.train_distributed import train_distributed
from workbench.cli.train_local import loggers, train_here
from workbench.parallel.strategies.registry import DEFAULT_TP, DISTRIBUTED, STRATEGIES


def add(commands: argparse._SubParsersAction) -> None:
    from workbench.cli.run_command import command_options
    from workbench.train.choices import COMPILE_MODES, DEVICES, OPTIMIZERS, PRECISIONS, SCHEDULES

    train = commands.add_parser("train", help="train a preset model with a progress bar")
    train.add_argument("preset", nargs="?", help="which experiment; see --list")
    train.add_argument("--list", action="store_true", help="list the presets and exit")
    train.add_argument("--epochs", type=int)
    train.add_argument(
        "--max-steps", type=int, help="train for this many optimizer steps in all, in --epochs' place"
    )
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
    train.add_argument(
        "--patience",
        type=int,
        help="stop when the val metric (--monitor) has not improved for this many evaluations (epochs, "
        "unless --eval-every-steps); the model keeps the best one's weights (a run's RUNS_DIR/RUN/best.pt)",
    )
    train.add_argument("--monitor", help="with --patience: the val metric watched (default loss; accuracy)")
    train.add_argument(
        "--eval-every-steps", type=int, help="evaluate val also every this many steps within an epoch"
    )
    train.add_argument(
        "--ema-decay",
        type=float,
        help="evaluate and keep an exponential moving average of the weights with this decay (e.g. 0.999)",
    )
    train.add_argument(
        "--activation-checkpointing",
        metavar="blocks|CLASS[,CLASS]",
        help="recompute these modules' activations in backward instead of keeping them: 'blocks' (the "
        "model's repeated blocks) or module class names",
    )
    train.add_argument(
        "--checkpoint-every-steps", type=int, help="with --run: save a checkpoint also every this many steps"
    )
    train.add_argument("--seed", type=int)
    train.add_argument("--device", choices=DEVICES)
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
    train.add_argument(
        "--find-lr",
        action="store_true",
        help="instead of training: a learning-rate range test on the preset with these options (100 steps, "
        "lr 1e-7 to 10), its losses and the command that trains at the suggested lr",
    )
    train.add_argument(
        "--overwrite", action="store_true", help="start the run over if its name holds one (else refused)"
    )
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
    ddp.add_argument(
        "--tp",
        type=int,
        default=DEFAULT_TP,
        help="--strategy fsdp+tp or ddp+tp: ranks per tensor-parallel group (adjacent ranks); the "
        f"data dimension gets ranks / tp (default {DEFAULT_TP})",
    )
    ddp.add_argument(
        "--pp",
        type=int,
        default=DEFAULT_TP,
        help=f"--strategy ddp+pp: stages per pipeline (adjacent ranks); ranks / pp replicas of it train on "
        f"shards of the data (default {DEFAULT_TP})",
    )
    ddp.add_argument("--nproc-per-node", type=int, default=2, help="processes per machine (default 2)")
    ddp.add_argument(
        "--global-batch-size",
        type=int,
        help="--strategy ddp, fsdp, fsdp+tp or ddp+tp: samples per step over all ranks, each data shard "
        "taking its share (instead "
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
    train.set_defaults(command="train", run=run, command_options=command_options(train))


def _parsed(argv: list[str]) -> argparse.Namespace:
    """`argv` (from ``train`` on) parsed as `workbench` parses it."""
    parser = argparse.ArgumentParser(prog="workbench")
    add(parser.add_subparsers())
    args = parser.parse_args(argv)
    args.argv = argv
    return args


def run(args: argparse.Namespace) -> int:
    from workbench.cli.run_command import canonical, merged_command, read_command, say_resuming
    from workbench.preset_catalog import PRESET_DESCRIPTIONS, check_preset
    from workbench.tables import text_table

    args.kept_command = canonical(args, args.command_options)  # as given, before anything fills in args
    presets = text_table(["preset", "what"], [list(item) for item in PRESET_DESCRIPTIONS.items()])
    if args.preset is None and args.resume and args.run_name is not None and not args.list:
        recorded = read_command(Path(args.runs_dir) / args.run_name)
        if recorded is not None:  # the run's own preset and options, with those given now
            resumed = _parsed(merged_command(recorded.argv, args.argv))
            say_resuming([*canonical(resumed, resumed.command_options), "--resume"])
            return run(resumed)
    if args.preset is None and not args.list and args.argv[1:]:  # options, and nothing to apply them to
        unrecorded = (
            f" (run {args.run_name!r} in {args.runs_dir} holds no command to go on with: it was trained from "
            "Python, by an older workbench, or is not there; name the preset that trained it)"
            if args.resume and args.run_name is not None
            else ""
        )
        print(
            f"workbench train: error: no preset named in `workbench {shlex.join(args.argv)}`: the preset "
            f"comes first (`workbench train PRESET [options]`){unrecorded}. The presets:\n{presets}",
            file=sys.stderr,
        )
        return 2
    if args.list or args.preset is None:  # answered without importing torch (~3 s)
        print(presets)
        return 0
    try:
        check_preset(args.preset)
    except ValueError as error:
        print(f"workbench train: error: {error}", file=sys.stderr)
        return 2
    import torch

    from workbench.parallel import WorkerFailed
    from workbench.train.compilation import CompilerMissingError
    from workbench.train.interrupts import TrainingInterrupted
    from workbench.train.loss_check import NonFiniteLossError
    from workbench.train.run_lock import RunInUseError

    try:
        if args.threads is not None:
            if args.threads < 1:
                raise ValueError(f"--threads must be ≥ 1, got {args.threads}")
            torch.set_num_threads(args.threads)
        try:
            loggers(args.log, Path(args.runs_dir))  # a missing extra is said before any rank starts
        except ModuleNotFoundError as missing:
            print(f"workbench train: error: --log: {missing}", file=sys.stderr)
            return 2
        if args.strategy == "single":
            _refuse_distributed_options(args)
        if args.find_lr:
            from workbench.cli.find_lr import find_lr_here

            return find_lr_here(args)
        if args.strategy == "single":
            return train_here(args, strategy=None)
        return train_distributed(args)
    except TrainingInterrupted as stopped:  # Ctrl-C, or SIGTERM (Slurm's time limit, Kubernetes, docker stop)
        saved = stopped.result is not None and stopped.checkpoint is not None
        then = f"checkpoint {stopped.checkpoint}: continue with --resume" if saved else "not saved"
        how = "Ctrl-C" if stopped.signal == signal.SIGINT else stopped.signal.name
        print(f"workbench train: stopped at step {stopped.step} ({how}); {then}", file=sys.stderr)
        return 128 + stopped.signal  # as a shell reports a process that the signal ended
    except NonFiniteLossError as error:  # the training diverged: said as it is, not as a traceback
        print(f"workbench train: error: {error}", file=sys.stderr)
        return 1
    except CompilerMissingError as error:
        print(f"workbench train: error: {error}", file=sys.stderr)
        return 2
    except WorkerFailed as error:  # what failed where; the rank's traceback is for the API, not the terminal
        # (not the message cut at its first blank line: another rank's error, quoted in it, may hold one)
        print(f"workbench train: error: {error.summary}", file=sys.stderr)
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
