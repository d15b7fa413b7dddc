"""`workbench bench kernels --launch` and the GPU check's launch-cost row, without a GPU: the reason, the
alternation of the variants, and the verdict against the kernels issue's 15 µs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workbench.bench import gpu_check, launch_cost
from workbench.bench.kernels import main as bench_kernels
from workbench.bench.launch_cost import BARE, DIRECT, DISPATCHER, LaunchCost, alternate, summary


def test_without_a_gpu_nothing_is_timed_and_the_reason_is_printed(capsys):
    result = launch_cost.benchmark_launch_cost()
    assert result.micros == {} and "torch.cuda.is_available() is False" in result.reason
    assert bench_kernels(["--launch"]) == 0
    assert capsys.readouterr().out.startswith("launch cost: nothing measured: torch.cuda.is_available()")
    assert bench_kernels(["--launch", "--repeats", "0"]) == 2
    assert "bench kernels --launch: error: --repeats must be ≥ 1, got 0" in capsys.readouterr().err
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "bench", "kernels", "--launch"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("launch cost: nothing measured: torch.cuda.is_available() is False")


def test_each_round_alternates_the_variants():
    order = []

    def stretch(name):
        return lambda calls: order.append((name, calls))

    samples = alternate({"a": stretch("a"), "b": stretch("b")}, repeats=3, calls=5, settle=lambda: None)
    assert order == [("a", 5), ("b", 5)] * 3
    assert {name: len(times) for name, times in samples.items()} == {"a": 3, "b": 3}
    assert summary({"a": [3.0, 1.0, 2.0]}) == {"a": (2.0, (1.0, 3.0))}


def _measured(bare: float, direct: float, numba: float) -> LaunchCost:
    return LaunchCost(
        {BARE: (bare, (bare, bare)), DIRECT: (direct, (direct, direct)), DISPATCHER: (numba, (numba, numba))},
        "GPU",
        None,
    )


@pytest.mark.parametrize(("direct", "passed"), [(31.0, True), (40.0, False)])
def test_the_check_passes_within_15_microseconds_of_a_bare_launch(monkeypatch, direct, passed):
    monkeypatch.setattr(launch_cost, "benchmark_launch_cost", lambda: _measured(20.0, direct, 54.0))
    (check,) = gpu_check._launch_cost()
    assert (check.value, check.passed, check.target) == (direct - 20.0, passed, "<= 15")
    assert "numba's dispatcher 54.0 µs" in check.detail
    table = _measured(20.0, direct, 54.0).table()
    assert f"{direct:.1f} [{direct:.1f}–{direct:.1f}]" in table and f"+{direct - 20:.1f}" in table
