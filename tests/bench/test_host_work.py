"""The host-work benchmark runs end to end on tiny sizes, from the command line too (its numbers are read, not
checked here: on a shared 2-core machine a 100 µs difference is within the noise of one run)."""

import functools

import pytest

from workbench.bench import host_work
from workbench.cli import main


def test_a_small_run_times_both_loops_and_tables_them():
    result = host_work.benchmark_host_work(repeats=2, blocks=3, samples=40)
    assert (result.steps, result.modules, result.parameters) == (10, 10, 6)
    assert sorted(result.timings) == ["hand", "hand_loader", "trainer", "trainer_loader"]
    assert all(len(us) == 2 and min(us) > 0 for us in result.timings.values())
    ratios = result.ratios("trainer_loader", "hand_loader")
    assert ratios[1] == result.timings["trainer_loader"][1] / result.timings["hand_loader"][1]
    lines = result.table().splitlines()
    assert lines[0].split() == ["loop", "per", "optimizer", "step", "ratio", "(range", "over", "repeats)",
                                "host", "work", "added"]  # fmt: skip
    names = [line.split("  ")[0] for line in lines[2:6]]
    assert names == [name for pair in host_work.PAIRS for name in pair[2:]]
    assert "µs a step" in lines[3] and "µs a step" in lines[5]
    assert lines[6] == (
        "10 modules, 6 parameters, batch 4, 10 steps a run (7/8 of them on the split) on cpu, median of 2 "
        "alternating runs"
    )


def test_the_command_prints_the_table(monkeypatch, capsys):
    small = functools.partial(host_work.benchmark_host_work, blocks=2, samples=16)
    monkeypatch.setattr(host_work, "benchmark_host_work", small)
    assert main(["bench", "trainer", "--host-work", "--repeats", "1"]) == 0
    assert "7 modules, 4 parameters, batch 4, 4 steps a run (7/8 of them" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("field", "value"), [("repeats", 0), ("blocks", 0), ("samples", 7), ("device", "tpu")]
)
def test_bad_sizes_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        host_work.benchmark_host_work(**{field: value})
