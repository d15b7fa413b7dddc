"""``workbench bench WHAT``: benchmarks that print measured ratios (one table, `BENCHMARKS`, drives them)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _bench_kernel_env(args: argparse.Namespace) -> int:
    from workbench.bench.kernel_env import benchmark_kernel_environment

    result = benchmark_kernel_environment(repeats=args.repeats, epochs=args.epochs)
    settings = " ".join(f"{k}={v}" for k, v in result.environment.items()) or "(none)"
    print(f"the workbench kernel's environment: {settings}; {args.repeats} child processes per variant")
    print(result.table())
    return 0


def _bench_trainer(args: argparse.Namespace) -> int:
    from workbench.bench.trainer import benchmark_trainer

    if args.peers:
        return _bench_peers(args)
    if args.host_work:
        from workbench.bench.host_work import benchmark_host_work

        print(benchmark_host_work(repeats=args.repeats, device=args.device).table())
        return 0
    result = benchmark_trainer(repeats=args.repeats, epochs=args.epochs, history=args.history)
    print(f"{result.steps} optimizer steps per run, median of {args.repeats} runs each")
    print(result.table())
    return 0


def _bench_peers(args: argparse.Namespace) -> int:
    from workbench.bench.peers import benchmark_peers

    result = benchmark_peers(repeats=args.repeats, epochs=args.epochs, device=args.device)
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
    flags += ["--launch"] if args.launch else []
    return bench_kernels(["--repeats", str(args.repeats), *flags])


def _bench_launch(args: argparse.Namespace) -> int:
    from workbench.bench.engines import benchmark_engines
    from workbench.bench.launch import benchmark_launch

    if args.ranks:
        from workbench.bench.rank_pool import benchmark_rank_pool

        result = benchmark_rank_pool(nprocs=args.nprocs, repeats=5 if args.repeats is None else args.repeats)
    elif args.engines:
        result = benchmark_engines(repeats=1 if args.repeats is None else args.repeats)
    else:
        result = benchmark_launch(nprocs=args.nprocs, repeats=5 if args.repeats is None else args.repeats)
    print(result.table())
    return 0


def _bench_compile(args: argparse.Namespace) -> int:
    from workbench.bench.compile import DEFAULT_PRESETS, compare_compile, table

    presets = tuple(args.presets) if args.presets else DEFAULT_PRESETS
    results = compare_compile(presets, mode=args.mode, repeats=args.repeats, epochs=args.epochs)
    print(f"torch.compile mode={args.mode!r}, {args.repeats} alternating fits of each (training steps only)")
    print(table(results))
    return 0


def _bench_ddp(args: argparse.Namespace) -> int:
    from workbench.bench.data_parallel import benchmark_data_parallel

    result = benchmark_data_parallel(
        nprocs=args.nprocs, threads=args.threads, steps=args.steps, batch_per_rank=args.batch
    )
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

    result = benchmark_hardware(repeats=args.repeats, quick=not args.full)
    print(result.table())
    mode = "quick" if result.quick else "full"
    print(f"{mode} run, median of {args.repeats}, {result.seconds:.1f} s")
    if result.gpu is None:
        print("no CUDA device here: the GPU measurements were skipped (see the reasons above)")
    else:
        print(f"GPU: {result.gpu}")
    return 0


@dataclass(frozen=True)
class Benchmark:
    """One ``workbench bench`` subcommand: its help, options as (flags, ``add_argument`` keywords), what
    runs it, and the errors said in one line (exit 2) instead of a traceback."""

    help: str
    options: list[tuple[tuple[str, ...], dict[str, Any]]]
    run: Callable[[argparse.Namespace], int]
    errors: tuple[type[Exception], ...] = (ValueError,)


# one table drives the subcommands
BENCHMARKS: dict[str, Benchmark] = {
    "trainer": Benchmark(
        "Trainer and Dashboard vs a hand-written loop",
        [
            (("--repeats",), {"type": int, "default": 5, "help": "runs of each variant (median)"}),
            (("--epochs",), {"type": int, "default": 6}),
            (("--history",), {"type": int, "default": 1_000_000, "help": "loss-plot points before timing"}),
            (
                ("--peers",),
                {
                    "action": "store_true",
                    "help": "instead: the same training in Lightning, Fabric, Accelerate",
                },
            ),
            (
                ("--host-work",),
                {
                    "action": "store_true",
                    "help": "instead: the loop's host work per step, on 180 tiny modules (compute ≈ 0)",
                },
            ),
            (
                ("--device",),
                {
                    "choices": ("cpu", "cuda"),
                    "default": "cpu",
                    "help": "where --peers and --host-work train (cuda: a GPU)",
                },
            ),
        ],
        _bench_trainer,
    ),
    "kernel-env": Benchmark(
        "the workbench kernel's environment vs plain python, training in child processes",
        [
            (("--repeats",), {"type": int, "default": 3, "help": "child processes per variant (median)"}),
            (("--epochs",), {"type": int, "default": 3, "help": "epochs per timed run"}),
        ],
        _bench_kernel_env,
        (ValueError, FileNotFoundError),
    ),
    "hardware": Benchmark(
        "memory bandwidth and matmul FLOP/s, CPU and GPU",
        [
            (("--repeats",), {"type": int, "default": 5, "help": "timed runs of each measurement (median)"}),
            (("--full",), {"action": "store_true", "help": "larger sizes: slower, closer to peak"}),
        ],
        _bench_hardware,
    ),
    "kernels": Benchmark(
        "numba kernels against torch (GPU; says so without)",
        [
            (("--repeats",), {"type": int, "default": 5, "help": "timed samples per measurement (median)"}),
            (("--full",), {"action": "store_true", "help": "matmul 4096³, 100M-parameter Adam and clipping"}),
            (("--static",), {"action": "store_true", "help": "no GPU: compile, predict from the roofline"}),
            (
                ("--host",),
                {"action": "store_true", "help": "no GPU: host time of one Adam step, launches stubbed"},
            ),
            (
                ("--launch",),
                {"action": "store_true", "help": "host µs of one kernel call from torch tensors (GPU)"},
            ),
        ],
        _bench_kernels,
        (),  # `workbench.bench.kernels.main` says its own errors
    ),
    "compile": Benchmark(
        "eager vs compiled training, per step",
        [
            (("--presets",), {"nargs": "+", "default": None, "help": "presets to compare (default: 3)"}),
            (("--mode",), {"default": "default", "help": "torch.compile mode (default: default)"}),
            (
                ("--repeats",),
                {"type": int, "default": 5, "help": "alternating fits of each variant (median)"},
            ),
            (("--epochs",), {"type": int, "default": 1, "help": "epochs per timed fit"}),
        ],
        _bench_compile,
        (ValueError, RuntimeError),
    ),
    "ddp": Benchmark(
        "data parallel: N processes vs 1 on a compute-bound MLP",
        [
            (("--nprocs",), {"type": int, "default": 2, "help": "processes of the parallel run (default 2)"}),
            (("--threads",), {"type": int, "default": 1, "help": "torch threads per process (default 1)"}),
            (("--steps",), {"type": int, "default": 15, "help": "training steps per run, warm-up included"}),
            (("--batch",), {"type": int, "default": 2048, "help": "samples per rank per step"}),
        ],
        _bench_ddp,
    ),
    "launch": Benchmark(
        "launch's start methods side by side: fork, forkserver, spawn",
        [
            (("--nprocs",), {"type": int, "default": 2, "help": "workers per launch (default 2)"}),
            (
                ("--repeats",),
                {
                    "type": int,
                    "default": None,
                    "help": "launches per start method (default 5) or engine (default 1)",
                },
            ),
            (
                ("--engines",),
                {
                    "action": "store_true",
                    "help": "instead: the same 2-rank training through launch, torchrun, mpirun and Spark "
                    "(seconds to training start and to result)",
                },
            ),
            (
                ("--ranks",),
                {
                    "action": "store_true",
                    "help": "instead: interactive ranks: a RankPool's start against launch's, and a "
                    "warm cell's overhead",
                },
            ),
        ],
        _bench_launch,
    ),
}


def add(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="benchmarks that print measured ratios")
    benchmarks = bench.add_subparsers(title="benchmarks", metavar="WHAT", required=True)
    for name, benchmark in BENCHMARKS.items():
        parser = benchmarks.add_parser(name, help=benchmark.help)
        for flags, keywords in benchmark.options:
            parser.add_argument(*flags, **keywords)
        parser.set_defaults(command=f"bench {name}", run=_saying_errors(name, benchmark))


def _saying_errors(name: str, benchmark: Benchmark) -> Callable[[argparse.Namespace], int]:
    """`benchmark.run`, its `errors` said as ``workbench bench NAME: error: ...`` with exit status 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return benchmark.run(args)
        except benchmark.errors as error:
            print(f"workbench bench {name}: error: {error}", file=sys.stderr)
            return 2

    return run
