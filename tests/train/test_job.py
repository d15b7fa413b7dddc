"""Trainer and Launch are both a Job: what a dashboard drives, without asking which it has."""

from __future__ import annotations

import pytest
import torch

from workbench.parallel import Launch
from workbench.train import Job, Trainer


def test_trainer_and_launch_are_jobs(regression_splits):
    trainer = Trainer(torch.nn.Linear(10, 1), torch.nn.functional.mse_loss, regression_splits)
    launch = Launch(lambda strategy: None, 2, verbose=False)
    for job in (trainer, launch):
        assert isinstance(job, Job)
        assert job.step == 0 and job.config is not None and job.control is not None
    assert trainer.describe() == "1 process on cpu"
    assert launch.describe().startswith("2 processes (gloo, CPU")
    assert trainer.worker_pids() is None and launch.worker_pids() == {}  # no run yet: no workers


def test_terminating_a_trainer_stops_it_at_the_next_step_boundary(regression_splits):
    trainer = Trainer(torch.nn.Linear(10, 1), torch.nn.functional.mse_loss, regression_splits)
    trainer.terminate()
    result = trainer.fit()
    assert result.status == "stopped" and result.step == 0


def test_a_dashboard_refuses_what_is_not_a_job():
    from workbench.widgets import Dashboard

    with pytest.raises(
        TypeError, match=r"Dashboard drives a training job .* got Linear; build one with Trainer"
    ):
        Dashboard(torch.nn.Linear(2, 2), monitor=False)
