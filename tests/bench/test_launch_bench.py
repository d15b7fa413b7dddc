"""The launch benchmark times every start method (its numbers are read, not asserted, here)."""

from workbench.bench.launch import benchmark_launch
from workbench.cli import main
from workbench.parallel.launching.launcher import START_METHODS


def test_every_start_method_is_timed_side_by_side():
    result = benchmark_launch(nprocs=2, repeats=1)
    assert set(result.seconds) == set(START_METHODS)
    assert all(len(samples) == 1 and samples[0] > 0 for samples in result.seconds.values())
    table = result.table()
    assert all(method in table for method in START_METHODS)


def test_cli_reports_bad_values(capsys):
    assert main(["bench", "launch", "--repeats", "0"]) == 2
    assert "repeats must be an integer ≥ 1" in capsys.readouterr().err


def test_interactive_ranks_are_timed_against_launch_from_the_command_line(capsys):
    assert main(["bench", "launch", "--ranks", "--nprocs", "2", "--repeats", "1"]) == 0
    table = capsys.readouterr().out
    for row in ("RankPool(2).start()", "launch(fn, 2) of a function that returns", "warm %%ranks cell: pass"):
        assert row in table
    assert "× launch" in table
