"""The same training function through Spark's TorchDistributor (the spark extra): on the driver and as Spark
tasks of a local[2] session, reaching the parameters of one process; rank 0's value back; the run written
where the driver reads it; and the mistakes that would hang or fail late, refused first."""

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

from tests.test_docs_pages import code_blocks  # noqa: E402
from workbench.parallel.launching import spark as spark_module  # noqa: E402
from workbench.parallel.launching.spark import run_on_spark  # noqa: E402

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the Python workers run this interpreter (as README says)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("workbench tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    yield session
    session.stop()
    if before is None:
        del os.environ["PYSPARK_PYTHON"]
    else:
        os.environ["PYSPARK_PYTHON"] = before


def _train_case(strategy, out, case_path):
    spec = importlib.util.spec_from_file_location("torchrun_case", case_path)
    case = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(case)
    import torch

    from workbench.train import Trainer

    net = case.model()
    Trainer(
        net, torch.nn.functional.mse_loss, case.splits(), case.CONFIG, strategy=strategy, run="spark"
    ).fit()
    case.save_rank(Path(out), net, strategy)
    return f"rank {strategy.rank} of {strategy.world_size}"


@pytest.mark.parametrize("local_mode", [True, False], ids=["on the driver", "as Spark tasks"])
def test_two_ranks_through_torch_distributor_match_one_process_and_write_the_run_where_the_driver_reads_it(
    spark, tmp_path, local_mode, torchrun_case, monkeypatch
):
    from workbench.train import read_metrics

    monkeypatch.chdir(tmp_path)  # the driver's working directory: a named run goes to ./runs there
    value = run_on_spark(
        _train_case, 2, args=(str(tmp_path), str(HERE / "torchrun_case.py")), local_mode=local_mode
    )
    assert value == "rank 0 of 2"  # whichever rank's output Spark hands back
    torchrun_case.assert_ranks_match_reference(tmp_path, world_size=2)
    assert read_metrics(tmp_path / "runs" / "spark", kind="fit_end")[0]["status"] == "finished"


def test_the_scaling_out_page_runs_its_spark_block_as_written(spark, tmp_path, monkeypatch):
    """docs/scaling-out.md's Spark block, after the `train` its first block defines (not its launch)."""
    first, spark_block = code_blocks("scaling-out.md")["python"][:2]
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "docs_scaling_out"}  # as a notebook's functions: Spark pickles them by value
    exec(first[: first.index("\nresult = launch(")], namespace)
    exec(spark_block, namespace)
    assert namespace["result"].status == "finished" and namespace["result"].step > 0


def _train_named_run(strategy):
    from workbench.presets import build_experiment
    from workbench.train import Trainer

    e = build_experiment("digits-mlp", epochs=1)
    return Trainer(e.model, e.loss_fn, e.splits, e.config, strategy=strategy, run="spark").fit().status


def test_what_would_hang_or_fail_late_is_refused_with_the_fix(spark, monkeypatch):
    with pytest.raises(ValueError, match=r"has 2 task slot\(s\) \(local\[2\]\), so it would wait forever"):
        run_on_spark(_train_named_run, 3, local_mode=False)
    from pyspark.sql import SparkSession

    with monkeypatch.context() as patched:
        patched.setattr(SparkSession, "getActiveSession", staticmethod(lambda: None))
        with pytest.raises(RuntimeError, match=r"needs an active SparkSession .*\.master\('local\[2\]'\)"):
            run_on_spark(_train_named_run, 2)
    monkeypatch.setattr(spark_module.shutil, "which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(RuntimeError, match=r"Spark needs Java 17 or newer .* openjdk-17-jre-headless"):
        run_on_spark(_train_named_run, 2)


def test_python_workers_that_cannot_import_torch_are_refused_on_a_local_master(tmp_path):
    import types

    bare = tmp_path / "python3"  # a Python without torch, as `python3` on PATH often is
    bare.write_text("#!/bin/sh\nexit 1\n")
    bare.chmod(0o755)
    context = types.SimpleNamespace(pythonExec=str(bare), master="local[2]")
    with pytest.raises(
        RuntimeError, match=r"cannot import torch and workbench. Fix: os.environ\['PYSPARK_PYTHON'\]"
    ):
        spark_module._check_local_workers_python(context)
    spark_module._check_local_workers_python(
        types.SimpleNamespace(pythonExec=sys.executable, master="local[2]")
    )


def test_workbench_train_runs_its_ranks_as_spark_tasks(tmp_path):
    command = [
        str(Path(sys.executable).parent / "workbench"), "train", "regression-linear", "--strategy", "ddp",
        "--n-samples", "2000", "--epochs", "1", "--run-name", "sp", "--runs-dir", str(tmp_path),
        "--spark-master", "local[2]",
    ]  # fmt: skip
    environment = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "sp" / "checkpoint.pt").is_file()


KILLED_RANK_SCRIPT = """
import argparse, os, signal, sys, time
import torch, torch.distributed as dist
from workbench.cli.train_distributed import _train_on_spark

def train(strategy):
    if strategy.rank == 1:
        time.sleep(1)
        os.kill(os.getpid(), signal.SIGKILL)  # the rank's process dies as a lost executor's would
    for _ in range(400):
        dist.all_reduce(torch.ones(1))
        time.sleep(0.05)

args = argparse.Namespace(spark_master="local[2]", nproc_per_node=2, spark_on_driver=False, backend=None,
                          collective_timeout=30)
sys.exit(_train_on_spark(args, train, None))
"""


def test_a_killed_rank_is_one_line_per_rank_with_no_java_stack_or_torchrun_report(tmp_path):
    """`workbench train --spark-master` with a rank's process killed mid-run: one line from each rank and the
    job's one-line summary; none of torchrun's ChildFailedError reports, Spark's Java stacks, its stage
    progress bar, or a line twice (pyspark writes a task's first line to the executor's stderr too)."""
    environment = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-c", KILLED_RANK_SCRIPT], capture_output=True, text=True, timeout=300,
        env=environment, cwd=tmp_path,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 1, said[-3000:]
    ours = [line for line in said.splitlines() if line.startswith("workbench")]
    host = socket.gethostname()
    assert sorted(ours[:-1]) == [
        "workbench: error: rank 0 lost the connection to 127.0.0.1 (another rank's Spark task stopped, or "
        "the network between them failed)",
        f"workbench: rank 0 of 2 runs on {host}",
        "workbench: rank 0's process ended with exit code 1",
        f"workbench: rank 1 of 2 runs on {host}",
        "workbench: rank 1's process ended with exit code -9 (SIGKILL)",
    ], said[-3000:]
    assert ours[-1].startswith("workbench train: error: the Spark job failed: "), said[-3000:]
    noises = ("\tat org.apache", "Traceback", "ChildFailedError", "exitcode:", "[Stage 0:", "ERROR Executor")
    for noise in noises:
        assert noise not in said, f"{noise!r} in:\n{said[-3000:]}"
    assert len(said.splitlines()) <= 12, said
