"""`workbench bench ddp`: both runs go through launch + Trainer; the table and the speed-up come from them."""

import pytest

from workbench.bench.data_parallel import DataParallelBenchmark, Throughput, benchmark_data_parallel
from workbench.cli import main


def test_a_small_run_measures_both_configurations():
    result = benchmark_data_parallel(nprocs=2, steps=4, warmup=1, batch_per_rank=16)
    assert (result.baseline.processes, result.parallel.processes) == (1, 2)
    assert result.baseline.samples_per_s > 0 and result.parallel.samples_per_s > 0
    assert result.speedup == result.parallel.samples_per_s / result.baseline.samples_per_s


def test_the_table_shows_the_ratio_to_one_process():
    result = DataParallelBenchmark(Throughput(1, 1, 1000.0, 0.1), Throughput(2, 1, 1800.0, 0.111), 100, 10)
    assert result.speedup == pytest.approx(1.8)
    lines = result.table().splitlines()
    assert lines[2].split()[-1] == "1.00" and lines[3].split()[-1] == "1.80"
    assert "2 processes × 1 thread" in lines[3]


def test_the_command_prints_the_speedup(capsys):
    assert main(["bench", "ddp", "--steps", "4", "--batch", "16"]) == 0
    out = capsys.readouterr().out
    assert "speed-up" in out and "(ideal 2×)" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nprocs", "1"], "nprocs must be an integer ≥ 2"),
        (["--steps", "3"], "steps must be an integer ≥ 4"),
    ],
)
def test_bad_values_are_named(argv, message, capsys):
    assert main(["bench", "ddp", *argv]) == 2
    assert message in capsys.readouterr().err
