"""The GPU check's training measurements, run on the CPU at toy sizes: each yields its checks, with values
and the issue's targets (on a GPU `workbench gpu-check` runs them at GPU size)."""

from __future__ import annotations

import pytest

from workbench.bench import gpu_training


@pytest.fixture(autouse=True)
def one_repeat(monkeypatch):
    monkeypatch.setattr(gpu_training, "REPEATS", 1)


def _by_name(checks):
    return {check.name.split(",")[0]: check for check in checks}


def test_the_trainer_against_a_hand_loop_and_the_breakdown():
    checks = _by_name(gpu_training.trainer_against_hand_loop(samples=64, device="cpu", width=16))
    assert set(checks) == {"Trainer step", "step-time breakdown on"}
    assert checks["Trainer step"].target == "<= 1.02" and checks["Trainer step"].value > 0
    assert "ms/step" in checks["Trainer step"].detail


def test_the_dashboard_against_the_trainer_alone():
    per_step, per_fit = gpu_training.dashboard_overhead(samples=128, device="cpu", width=16, precision="fp32")
    assert per_step.name.startswith("Trainer + Dashboard per step") and per_step.target == "<= 1.02"
    assert per_step.value > 0 and "fits of 1 and 4 steps" in per_step.detail
    assert (
        per_fit.name.startswith("Dashboard once per fit") and per_fit.unit == "ms" and per_fit.passed is None
    )


def test_the_input_paths():
    resident, wait = gpu_training.input_paths(device="cpu", epochs=1, loader_workers=1)
    assert resident.target == ">= 3" and resident.value > 0
    assert wait.unit == "of step time" and 0 <= wait.value <= 1 and "logged steps" in wait.detail
    assert "the loader alone" in wait.detail and "a step" in wait.detail
    keeps_up = "does not keep up" not in wait.detail
    assert wait.target == ("<= 0.05" if keeps_up else "") and (wait.passed is None) != keeps_up
