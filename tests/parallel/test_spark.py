"""The same training function through Spark's TorchDistributor (the spark extra): on the driver and as Spark
tasks of a local[2] session, reaching the parameters of one process; rank 0's value back; the run written
where the driver reads it; and the mistakes that would hang or fail late, refused first."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

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
    torch.save(net.state_dict(), Path(out) / f"rank{strategy.rank}.pt")
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
