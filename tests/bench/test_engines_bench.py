"""The engines benchmark runs the commands users type for each engine and reads rank 0's training start."""

import shutil

import pytest

from workbench.bench import engines
from workbench.bench.engines import benchmark_engines


def test_launch_and_torchrun_are_timed_to_training_start_and_to_result():
    result = benchmark_engines(engines=("launch", "torchrun"))
    for engine in ("launch", "torchrun"):
        [start], [end] = result.to_start[engine], result.to_result[engine]
        assert 0 < start < end < 120
    table = result.table()
    assert "torchrun --standalone" in table and "fork server" in table and "mpirun" not in table


def test_an_engine_this_machine_lacks_is_listed_with_the_reason(monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(engines.shutil, "which", lambda name: None if name == "mpirun" else real_which(name))
    result = benchmark_engines(engines=("mpirun",))
    assert result.missing == {"mpirun": "no mpirun (apt-get install openmpi-bin)"} and result.to_start == {}
    assert "no mpirun (apt-get install openmpi-bin)" in result.table()


def test_unknown_engines_are_named():
    with pytest.raises(
        ValueError, match="engines must be some of launch, torchrun, mpirun, spark, got slurm"
    ):
        benchmark_engines(engines=("slurm",))
