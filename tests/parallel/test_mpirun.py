"""The same entry points under Open MPI's real `mpirun` (openmpi-bin; `make test` installs it): the ranks
read OMPI_COMM_WORLD_* and reach the parameters of one process on the concatenated batches."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent

MPIRUN = shutil.which("mpirun")
if MPIRUN is None and os.environ.get("WORKBENCH_REQUIRE_MPIRUN"):
    raise RuntimeError(
        "mpirun is missing: make test installs Debian's openmpi-bin (apt-get install openmpi-bin)"
    )
pytestmark = pytest.mark.skipif(
    MPIRUN is None, reason="needs Open MPI's mpirun (apt-get install openmpi-bin)"
)


def _mpirun(*command: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    environment.update(
        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,tcp"
    )
    return subprocess.run(
        [MPIRUN, "--oversubscribe", "-np", "2", *command],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_two_ranks_under_mpirun_train_to_the_parameters_of_one_process(tmp_path, torchrun_case):
    done = _mpirun(sys.executable, str(HERE / "torchrun_case.py"), str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    torchrun_case.assert_ranks_match_reference(tmp_path, world_size=2)


def test_workbench_train_runs_unchanged_under_mpirun(tmp_path):
    workbench = str(Path(sys.executable).parent / "workbench")
    done = _mpirun(
        workbench, "train", "regression-linear", "--strategy", "ddp", "--n-samples", "4000", "--epochs", "2",
        "--run-name", "mpi", "--runs-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("split  metric") == 1  # rank 0 prints, rank 1 stays quiet
    assert "on 2 processes (gloo, cpu, 1 thread each)" in done.stdout
    assert (tmp_path / "mpi" / "checkpoint.pt").is_file()
