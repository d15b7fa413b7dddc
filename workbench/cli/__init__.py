"""The ``workbench`` command (also ``python -m workbench``).

workbench doctor                  print the device report (CPU, GPUs, CUDA, numba backend)
workbench doctor --json           the same as JSON
workbench gpu-check               on a GPU machine: the GPU tests and benchmarks into docs/gpu/<gpu>.md
workbench kernel install          install the `workbench` Jupyter kernelspec for this interpreter
workbench tutorials [DIR]         copy the tutorial notebooks into DIR (./workbench-tutorials) to open them
workbench train digits-mlp        train a preset with a progress bar and print the final metrics
workbench train --list            the presets (digits-mlp, regression-linear, images-cnn, …)
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

One module per command adds its parser and runs it (`COMMANDS`); the training command is split into
train (its options), train_local (one process), train_distributed (ranks) and torchrun (several machines).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.cli import bench, doctor, kernel, runs, train, tutorials

# the commands in the order `workbench --help` lists them; each module adds its parser(s)
COMMANDS = (doctor, kernel, tutorials, train, runs, bench)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["torchrun"]:  # torchrun's own arguments, passed through untouched
        from workbench.cli.torchrun import torchrun

        return torchrun(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = argv
    if args.command is None:
        parser.print_help()
        return 0
    try:
        with warnings.catch_warnings():  # restored after: main() also runs inside other programs' processes
            warnings.showwarning = _warning_line(args.command)
            return args.run(args)
    except KeyboardInterrupt:  # one line, not a traceback through whatever was running
        print(f"\nworkbench {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130


def _warning_line(command: str) -> Callable[..., None]:
    """How the command shows a warning: ``workbench train: warning: <message>``, as its errors read, in place
    of Python's ``path:line: UserWarning: <message>`` and the source line under it; a warning of another
    library keeps its kind and where it came from."""
    package = str(Path(__file__).resolve().parent.parent)

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, *rest: Any) -> None:
        ours = str(Path(filename).resolve()).startswith(package) and category is UserWarning
        origin = "" if ours else f" ({category.__name__}, {filename}:{lineno})"
        print(f"workbench {command}: warning: {message}{origin}", file=sys.stderr)

    return show


def _parser() -> argparse.ArgumentParser:
    from workbench import __version__

    parser = argparse.ArgumentParser(prog="workbench", description="Jupyter workbench for fast training.")
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    parser.set_defaults(command=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in COMMANDS:
        command.add(commands)
    return parser
