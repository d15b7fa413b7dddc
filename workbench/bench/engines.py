"""What each engine costs to start the same 2-rank training: workbench's own launch, torchrun, mpirun and
Spark's TorchDistributor, side by side.

    workbench bench launch --engines       # one run each; --repeats for more (alternating)

Each sample runs the command a user types for that engine, as a child process, on the same preset, seed
and epochs (``digits-mlp``, DDP, 2 ranks of 1 thread): the time from the call until rank 0's training
starts (its ``fit_start`` event in ``metrics.jsonl``) and until the command returns. Python's start and
the imports are in every row; Spark's row also starts a JVM and a ``local[2]`` session. Engines not on this
machine (no ``mpirun``, no pyspark or Java) are listed with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from workbench._validate import check_int
from workbench.tables import text_table

ENGINES = ("launch", "torchrun", "mpirun", "spark")


@dataclass(frozen=True)
class EnginesBenchmark:
    """Per engine: seconds to rank 0's training start and to the command's return (every repeat), or why
    it could not run here."""

    to_start: dict[str, tuple[float, ...]]
    to_result: dict[str, tuple[float, ...]]
    missing: dict[str, str]

    def table(self) -> str:
        rows = []
        for engine in (e for e in ENGINES if e in self.missing or e in self.to_start):
            if engine in self.missing:
                rows.append([_LABELS[engine], "—", "—", self.missing[engine]])
                continue
            start, result = self.to_start[engine], self.to_result[engine]
            rows.append([_LABELS[engine], _seconds(start), _seconds(result), ""])
        return text_table(["engine (2 ranks, digits-mlp)", "to training start", "to result", "note"], rows)


_LABELS = {
    "launch": "workbench train --nproc-per-node 2 (fork server)",
    "torchrun": "torchrun --standalone",
    "mpirun": "mpirun -np 2 (Open MPI)",
    "spark": "--spark-master local[2] (TorchDistributor)",
}


def benchmark_engines(
    *, repeats: int = 1, epochs: int = 1, engines: tuple[str, ...] = ENGINES
) -> EnginesBenchmark:
    """Run each available engine of `engines` `repeats` times (alternating) and time it (see the module
    docstring)."""
    check_int("repeats", repeats, minimum=1)
    check_int("epochs", epochs, minimum=1)
    unknown = [engine for engine in engines if engine not in ENGINES]
    if unknown or not engines:
        raise ValueError(f"engines must be some of {', '.join(ENGINES)}, got {', '.join(engines) or 'none'}")
    missing = {engine: why for engine in engines if (why := _missing(engine))}
    to_start: dict[str, list[float]] = {engine: [] for engine in engines if engine not in missing}
    to_result: dict[str, list[float]] = {engine: [] for engine in to_start}
    with tempfile.TemporaryDirectory(prefix="workbench-engines-") as folder:
        for repeat in range(repeats):
            for engine in to_start:
                run = f"{engine}-{repeat}"
                started, result_s = _timed(_command(engine, epochs, run, folder), folder)
                to_start[engine].append(_fit_start(Path(folder) / run) - started)
                to_result[engine].append(result_s)
    return EnginesBenchmark(
        {e: tuple(s) for e, s in to_start.items()}, {e: tuple(s) for e, s in to_result.items()}, missing
    )


def _missing(engine: str) -> str:
    if engine == "mpirun" and shutil.which("mpirun") is None:
        return "no mpirun (apt-get install openmpi-bin)"
    if engine == "spark":
        import importlib.util

        if importlib.util.find_spec("pyspark") is None:
            return "no pyspark (the spark extra)"
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            return "no Java (apt-get install openjdk-17-jre-headless)"
    return ""


def _command(engine: str, epochs: int, run: str, folder: str) -> list[str]:
    train = ["train", "digits-mlp", "--strategy", "ddp", "--epochs", str(epochs), "--runs-dir", folder]
    python = [sys.executable, "-m"]
    if engine == "launch":
        return [*python, "workbench", *train, "--run", run, "--nproc-per-node", "2"]
    if engine == "torchrun":
        torchrun = [*python, "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        return [*torchrun, "-m", "workbench", *train, "--run-name", run]
    if engine == "mpirun":
        return ["mpirun", "--oversubscribe", "-np", "2", *python, "workbench", *train, "--run-name", run]
    return [*python, "workbench", *train, "--run", run, "--nproc-per-node", "2", "--spark-master", "local[2]"]


def _timed(command: list[str], folder: str) -> tuple[float, float]:
    """(wall-clock time at the call, seconds until it returned); raises with its output on failure."""
    environment = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    environment.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_btl="self,tcp",
        OMP_NUM_THREADS="1",
        PYSPARK_PYTHON=sys.executable,
    )
    called, started = time.time(), time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])} … failed ({done.returncode}): {done.stderr[-2000:]}")
    return called, seconds


def _fit_start(run_dir: Path) -> float:
    with (run_dir / "metrics.jsonl").open(encoding="utf-8") as log:
        return float(json.loads(log.readline())["time"])


def _seconds(samples: tuple[float, ...]) -> str:
    if len(samples) == 1:
        return f"{samples[0]:.1f} s"
    return f"{statistics.median(samples):.1f} s ({min(samples):.1f}–{max(samples):.1f})"
