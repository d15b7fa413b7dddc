"""The trainer benchmark runs end to end on tiny sizes (its numbers are checked by reading them, not here)."""

import pytest

from workbench.bench.trainer import benchmark_trainer
from workbench.cli import main


def test_small_benchmark_measures_every_row():
    result = benchmark_trainer(repeats=1, epochs=1, n_samples=256, history=500)
    assert result.steps == 2  # 230 training samples, batch 128
    timings = (result.hand_written_s, result.trainer_s, result.hand_loader_s, result.trainer_loader_s)
    assert min(*timings, result.dashboard_s, result.background_s, result.logged_s) > 0
    assert result.second_thread_s > 0 and result.own_thread_s > 0
    assert result.loader_ratio == result.trainer_loader_s / result.hand_loader_s
    assert result.hand_fused_s > 0 and result.loop_ratio == result.trainer_s / result.hand_fused_s
    assert result.untimed_s > 0 and result.breakdown_ratio == result.trainer_s / result.untimed_s
    assert 0 < result.breakdown_s < 1e-3 and result.logged_steps == 1  # of 2 steps, the epoch's last
    assert result.breakdown_work_ratio == pytest.approx(1 + result.breakdown_s / result.trainer_s)
    assert (
        result.logs_thread_s > result.logs_events_s > 0 and result.logs_cpu_s >= 0
    )  # metrics.jsonl's writer
    assert result.logs_events_ratio == pytest.approx(1 + result.logs_events_s / result.trainer_s)
    assert result.logs_work_ratio == pytest.approx(
        1 + (result.logs_thread_s + result.logs_cpu_s) / result.trainer_s
    )
    assert result.dashboard_us_per_step_mean > 0 and result.history_points == 500
    assert 0 <= result.sampler_core_fraction < 1
    table = result.table()
    rows = (
        "hand-written loop",
        "the hand-written loop with fused Adam too",
        "Trainer over a torch Dataset",
        "Trainer, time breakdown on (default) / off",
        "the step clock's own work in the logged steps",
        "Trainer + logs",
        "the logs' own work in step and evaluation events",
        "once per fit",
        "Trainer + Dashboard",
        "Trainer on a second thread (JobRunner.start) / on this one",
        "on a thread of your own (this thread's OpenMP team kept)",
        "device sampler",
    )
    assert all(row in table for row in rows)


@pytest.mark.parametrize(
    ("field", "value"), [("repeats", 0), ("epochs", 0), ("n_samples", 8), ("history", -1)]
)
def test_bad_sizes_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        benchmark_trainer(**{field: value})


def test_cli_reports_bad_values(capsys):
    assert main(["bench", "trainer", "--repeats", "0"]) == 2
    assert "repeats must be an integer ≥ 1" in capsys.readouterr().err
