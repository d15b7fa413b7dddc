"""The host-work benchmark runs end to end on tiny sizes, from the command line too (its numbers are read, not
checked here: on a shared 2-core machine a 100 µs difference is within the noise of one run)."""

import functools

import pytest

from workbench.bench import host_work
from workbench.cli import main


def test_a_small_run_times_both_loops_and_tables_them():
    result = host_work.benchmark_host_work(repeats=2, blocks=3, samples=40)
    assert (result.steps, result.modules, result.parameters) == (10, 10, 6)
    assert len(result.hand_us) == len(result.trainer_us) == 2 and min(result.hand_us + result.trainer_us) > 0
    assert len(result.ratios) == 2 and result.ratios[0] == result.trainer_us[0] / result.hand_us[0]
    lines = result.table().splitlines()
    assert lines[0].split() == ["loop", "per", "optimizer", "step", "ratio", "(range", "over", "repeats)",
                                "host", "work", "added"]  # fmt: skip
    assert lines[2].startswith("hand-written loop") and lines[3].startswith("Trainer")
    assert "µs a step" in lines[3]
    assert (
        lines[4] == "10 modules, 6 parameters, batch 4, 10 steps a run on cpu, median of 2 alternating runs"
    )


def test_the_command_prints_the_table(monkeypatch, capsys):
    small = functools.partial(host_work.benchmark_host_work, blocks=2, samples=16)
    monkeypatch.setattr(host_work, "benchmark_host_work", small)
    assert main(["bench", "trainer", "--host-work", "--repeats", "1"]) == 0
    assert "7 modules, 4 parameters, batch 4, 4 steps a run on cpu, median of 1" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("field", "value"), [("repeats", 0), ("blocks", 0), ("samples", 3), ("device", "tpu")]
)
def test_bad_sizes_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        host_work.benchmark_host_work(**{field: value})
