"""A standalone Spark cluster for real: a master and two one-core workers on 127.0.0.1, started from the
pyspark wheel's own `spark-class` by a fixture and stopped afterwards with every process they started;
`workbench train --spark-master spark://...` runs its two ranks as barrier tasks on the two workers."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

from workbench.parallel.launching.spark import check_java  # noqa: E402
from workbench.train import read_metrics  # noqa: E402


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory, free_port):
    """``spark://127.0.0.1:PORT`` of a master with two workers (1 core, 1 GiB each)."""
    try:
        check_java()
    except RuntimeError as error:
        pytest.skip(str(error))
    home = Path(pyspark.__file__).parent
    folder = tmp_path_factory.mktemp("spark-cluster")
    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(folder)}
    env["PYSPARK_PYTHON"] = sys.executable
    spark_class = [str(home / "bin" / "spark-class")]
    master = [
        *spark_class,
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    started = [_start([*master, "--webui-port", str(ui)], env, folder / "master.log")]
    url = f"spark://127.0.0.1:{port}"
    for n in range(2):
        worker = [*spark_class, "org.apache.spark.deploy.worker.Worker", "--cores", "1", "--memory", "1g"]
        worker += [
            "--host",
            "127.0.0.1",
            "--webui-port",
            str(free_port()),
            "--work-dir",
            str(folder / f"w{n}"),
        ]
        started.append(_start([*worker, url], env, folder / f"worker{n}.log"))
    try:
        deadline = time.monotonic() + 120
        while _alive_workers(ui) < 2:
            assert time.monotonic() < deadline, (folder / "master.log").read_text()[-3000:]
            assert all(p.poll() is None for p in started), "a Spark daemon exited; logs in " + str(folder)
            time.sleep(0.5)
        yield url
    finally:
        family = [psutil.Process(p.pid) for p in started if p.poll() is None]
        family += [child for p in list(family) for child in p.children(recursive=True)]
        for process in started:
            process.terminate()
        _, alive = psutil.wait_procs(family, timeout=30)
        for process in alive:
            process.kill()
        assert not alive, f"left behind after SIGTERM: {[p.pid for p in alive]}"


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as reply:
            return int(json.load(reply).get("aliveworkers", 0))
    except OSError:
        return 0


def test_workbench_train_runs_its_two_ranks_on_a_standalone_cluster_like_two_local_processes(
    spark_cluster, tmp_path
):
    train = [sys.executable, "-m", "workbench", "train", "digits-mlp", "--strategy", "ddp", "--epochs", "1"]
    train += ["--nproc-per-node", "2", "--runs-dir", str(tmp_path)]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    on_spark = subprocess.run(
        [*train, "--run", "cluster", "--spark-master", spark_cluster],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert on_spark.returncode == 0, on_spark.stderr[-3000:]
    local = subprocess.run([*train, "--run", "local"], capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr
    cluster_steps = read_metrics(tmp_path / "cluster", kind="step")
    local_steps = read_metrics(tmp_path / "local", kind="step")
    assert [s["step"] for s in cluster_steps] == [s["step"] for s in local_steps] == [10, 12]
    assert [s["loss"] for s in cluster_steps] == pytest.approx([s["loss"] for s in local_steps], rel=1e-5)
    assert {e["world_size"] for e in read_metrics(tmp_path / "cluster", kind="fit_start")} == {2}
