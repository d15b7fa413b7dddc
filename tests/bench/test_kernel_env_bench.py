"""`workbench bench kernel-env` runs its children in both environments (numbers are read, not asserted)."""

import json

import pytest

from workbench.bench import kernel_env
from workbench.cli import main
from workbench.kernelspec import SOURCE_DIR


def test_the_kernel_environment_is_the_checked_in_kernelspecs():
    assert kernel_env.kernel_environment() == json.loads((SOURCE_DIR / "kernel.json").read_text())["env"]


def test_each_child_runs_in_its_environment_and_every_ratio_is_printed(monkeypatch, capsys):
    seen = []

    def fake_child(command, env, **_):  # what each child would see of MALLOC_TOP_PAD_, and made-up times
        seen.append(env.get("MALLOC_TOP_PAD_"))
        timings = {"hand": 1.0, "background": 1.3 if env.get("MALLOC_TOP_PAD_") is None else 1.01}

        class Done:
            returncode, stdout, stderr = 0, json.dumps(timings) + "\n", ""

        return Done()

    monkeypatch.setattr(kernel_env.subprocess, "run", fake_child)
    monkeypatch.delenv("MALLOC_TOP_PAD_", raising=False)
    assert main(["bench", "kernel-env", "--repeats", "2", "--epochs", "1"]) == 0
    assert seen == [None, "268435456", None, "268435456"]  # alternating plain / kernel
    out = capsys.readouterr().out
    assert "MALLOC_TOP_PAD_=268435456" in out
    assert "Dashboard.start / hand-written, kernel env             1.010 (1.01–1.01)" in out
    assert "Dashboard.start / hand-written, plain python           1.300" in out


def test_a_real_child_times_both_loops():
    timings = kernel_env.child_timings(epochs=1)
    assert set(timings) == {"hand", "background"} and min(timings.values()) > 0


@pytest.mark.parametrize("field", ["repeats", "epochs"])
def test_bad_sizes_name_the_field(field):
    with pytest.raises(ValueError, match=field):
        kernel_env.benchmark_kernel_environment(**{field: 0})
