"""Run a workbench training function on a Spark cluster, through Spark's own `TorchDistributor`.

``run_on_spark(fn, 2)`` calls ``fn(strategy, *args)`` on each of 2 ranks that TorchDistributor starts: on
the driver (``local_mode=True``: torchrun there) or as a barrier stage of Spark tasks on the executors
(``local_mode=False``), with the strategy (a `DataParallel` unless ``strategy=`` names another) bound to
their process group. It returns rank 0's value, whichever rank's copy Spark hands back: every rank returns
rank 0's, broadcast. `fn` may be defined in a notebook (it travels by value, with cloudpickle); the ranks
work in the driver's working directory when their machine has it, so ``Trainer(run=...)`` writes the run
where the driver, and `follow_metrics`, can read it (on a cluster: a shared filesystem, or an absolute
``runs_dir`` there). Executors need workbench and torch installed, as TorchDistributor needs torch. A rank
whose process fails is one line (``workbench: rank 1's process ended with exit code -9 (SIGKILL)``), not
torchrun's report.

Before anything starts, what would otherwise fail late or never end is refused with the fix: no Java, no
active SparkSession, fewer task slots than processes in ``local_mode=False`` (Spark would wait for slots
forever), and, on a local master, Python workers that cannot import torch (Spark starts ``PYSPARK_PYTHON``,
else whatever ``python3`` is on PATH, not necessarily this interpreter).

    os.environ["PYSPARK_PYTHON"] = sys.executable          # the Python Spark's workers on this machine run
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    metrics = run_on_spark(train, 2)                       # torchrun on the driver
    metrics = run_on_spark(train, 2, local_mode=False)     # 2 Spark tasks on the executors
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from workbench._distribution import pip_install
from workbench._validate import check_int
from workbench.parallel.launching._worker import dumps_by_value
from workbench.parallel.launching.spark_output import (
    quiet_task_failure_logs,
    say_started,
    torchrun_reports_in_one_line,
)

SPARK_INSTALL = f"{pip_install('spark')} (or pip install pyspark)"


@contextmanager
def spark_session(master: str, app_name: str = "workbench train") -> Iterator[Any]:
    """A SparkSession on `master` (``local[2]``, ``spark://host:7077``), stopped on leaving; Java and
    pyspark checked first, with the fix, and Python workers on this machine run this interpreter. A failed
    task is not logged with its Java stack, and no stage progress bar cuts into the ranks' lines: the
    caller says why a job failed (`spark_failure`)."""
    try:
        from pyspark.sql import SparkSession
    except ModuleNotFoundError:
        raise ValueError(f"a Spark master needs pyspark, which is not installed: {SPARK_INSTALL}") from None
    try:
        check_java()
    except RuntimeError as error:
        raise ValueError(str(error)) from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers on a local master run this one
    builder = SparkSession.builder.master(master).appName(app_name)
    session = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    quiet_task_failure_logs(session)
    try:
        yield session
    finally:
        session.stop()


def run_on_spark(
    fn: Callable[..., Any],
    num_processes: int,
    *,
    args: Sequence[Any] = (),
    strategy: Any = None,
    local_mode: bool = True,
    use_gpu: bool = False,
    spark: Any = None,
    backend: str | None = None,
    timeout_s: float = 1800,
) -> Any:
    """Run ``fn(strategy, *args)`` on `num_processes` ranks through TorchDistributor; rank 0's return value.

    Args:
        fn: the training function (see `launch`); it may be defined in a notebook.
        num_processes: ranks, ≥ 1.
        args: more arguments for `fn` (a tuple or list).
        strategy: a `DistributedStrategy` (its options; each rank binds its own copy); default `DataParallel`.
        local_mode: True: the ranks run on the driver (torchrun); False: as Spark tasks on the executors.
        use_gpu: give each rank a GPU (TorchDistributor's ``spark.task.resource.gpu.amount``).
        spark: the SparkSession; default the active one.
        backend: ``"gloo"``, ``"nccl"`` or None (nccl where each process has a GPU).
        timeout_s: how long collectives wait for a rank.
    """
    check_int("num_processes", num_processes, minimum=1)
    if not isinstance(args, tuple | list):
        raise TypeError(f"args must be a tuple or list of arguments for fn, got {type(args).__name__}")
    check_java()
    session = _session(spark)
    if not local_mode:
        _check_local_workers_python(session.sparkContext)
        slots = session.sparkContext.defaultParallelism
        if slots < num_processes:
            raise ValueError(
                f"local_mode=False runs {num_processes} Spark tasks at once (a barrier stage), and this "
                f"Spark application has {slots} task slot(s) ({session.sparkContext.master}), so it would "
                f"wait forever. Fix: num_processes ≤ {slots}, more executor cores (e.g. master "
                f"'local[{num_processes}]'), or local_mode=True"
            )
    from pyspark.ml.torch.distributor import TorchDistributor

    payload = dumps_by_value((fn, tuple(args), strategy, os.getcwd(), list(sys.path)), fn)
    distributor = TorchDistributor(num_processes=num_processes, local_mode=local_mode, use_gpu=use_gpu)
    with torchrun_reports_in_one_line(local_master=session.sparkContext.master.startswith("local")):
        return distributor.run(_spark_rank, payload, backend, timeout_s)


def _spark_rank(payload: bytes, backend: str | None, timeout_s: float) -> Any:
    """One rank, inside a process TorchDistributor started (torchrun's variables are set)."""
    import cloudpickle
    import torch.distributed as dist

    from workbench.parallel.group.process_group import join_process_group_from_env, lost_peer
    from workbench.parallel.strategies.data_parallel import DataParallel

    fn, args, strategy, cwd, path = cloudpickle.loads(payload)
    if os.path.isdir(cwd):
        os.chdir(cwd)  # relative run directories land where the driver reads them
    sys.path[:] = list(dict.fromkeys([*sys.path, *path]))
    strategy = strategy if strategy is not None else DataParallel()
    say_started(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    join_process_group_from_env(backend, timeout_s, who="run_on_spark")
    strategy.bind()
    failed = True
    try:
        value = [fn(strategy, *args)]
        dist.broadcast_object_list(value, src=0)  # whichever rank's output Spark returns, it is rank 0's
        failed = False
        return value[0]
    except Exception as error:
        lost = lost_peer(error)
        if lost is None:
            raise
        print(
            f"workbench: error: rank {dist.get_rank()} lost {lost} (another rank's Spark task stopped, or "
            "the network between them failed)",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(1) from None  # one line, not gloo's error and the traceback of a barrier after it
    finally:
        strategy.close(wait_for_others=not failed)


def spark_failure(error: BaseException) -> str | None:
    """One line for a Spark job that failed under `run_on_spark` (the Py4J error that carries Spark's
    reason and its Java stack), or None for any other error.

    Example:
        >>> spark_failure(RuntimeError("my own bug")) is None
        True
    """
    if type(error).__module__.split(".")[0] not in ("py4j", "pyspark"):
        return None
    text = str(error)
    found = re.search(r"Most recent failure reason: ([^\n]*)", text)
    found = found or re.search(r"Exception: ([^\n]*)", text)
    reason = (found.group(1) if found else text.strip().splitlines()[0]).strip().rstrip(".")
    return (
        f"the Spark job failed: {reason}. The ranks' own lines above say why; Spark does not retry a failed "
        "barrier stage: run the command again (with --resume to continue from the last checkpoint)"
    )


def _session(spark: Any) -> Any:
    try:
        from pyspark.sql import SparkSession
    except ModuleNotFoundError:
        missing = f"run_on_spark needs pyspark, which is not installed: {SPARK_INSTALL}"
        raise ModuleNotFoundError(missing) from None
    session = spark if spark is not None else SparkSession.getActiveSession()
    if session is None:
        raise RuntimeError(
            "run_on_spark needs an active SparkSession and there is none. Fix: create one first, e.g. "
            "SparkSession.builder.master('local[2]').getOrCreate() (or master('spark://host:7077') for a "
            "cluster), or pass spark=your_session"
        )
    return session


def _check_local_workers_python(context: Any) -> None:
    """On a local master the Python workers run on this machine: they must be able to import workbench."""
    python = context.pythonExec  # PYSPARK_PYTHON when the session started, else python3
    if not context.master.startswith("local") or os.path.realpath(python) == os.path.realpath(sys.executable):
        return
    found = shutil.which(python) or python
    probe = subprocess.run([found, "-c", "import torch, workbench"], capture_output=True, timeout=120)
    if probe.returncode != 0:
        raise RuntimeError(
            f"Spark's Python workers on this machine run {python!r} (PYSPARK_PYTHON, else python3), which "
            "cannot import torch and workbench. Fix: os.environ['PYSPARK_PYTHON'] = sys.executable before "
            "creating the SparkSession (a new session: stop this one), or export PYSPARK_PYTHON"
        )


def check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    in_java_home = bool(java_home) and os.path.exists(os.path.join(java_home, "bin", "java"))
    if shutil.which("java") is None and not in_java_home:
        raise RuntimeError(
            "Spark needs Java 17 or newer and none is on PATH or in JAVA_HOME. Fix: install one (Debian: "
            "apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
        )
