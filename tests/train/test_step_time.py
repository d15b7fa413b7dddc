"""Where a step's time goes on one device: each phase holds the time put there on purpose (a slow loader,
forward, backward and optimizer), the parts add up to the wall time between logged steps, and the
breakdown reaches the events and metrics.jsonl; off, it is absent."""

from __future__ import annotations

import itertools
import statistics
import time

import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from workbench.train import OptimizerConfig, TrainConfig, Trainer
from workbench.train.metrics_log import read_metrics
from workbench.train.step_time import PHASES

BATCH = 4
DELAYS = {"data": 0.020, "forward": 0.010, "backward": 0.015, "optimizer": 0.012}  # seconds per step


class SlowSamples(Dataset):
    """A map-style dataset whose every batch takes DELAYS["data"] to load (the user's slow loader)."""

    def __len__(self):
        return 8 * BATCH

    def __getitem__(self, index):
        time.sleep(DELAYS["data"] / BATCH)
        return torch.full((3,), float(index)), torch.tensor([float(index % 2)])


class SlowModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, x):
        time.sleep(DELAYS["forward"])
        out = self.linear(x)
        out.register_hook(lambda grad: time.sleep(DELAYS["backward"]))  # runs inside backward
        return out


class SlowSGD(torch.optim.SGD):
    def step(self, closure=None):
        time.sleep(DELAYS["optimizer"])
        return super().step(closure)


class Steps:
    """Only the hook it needs: a duck-typed callback."""

    def __init__(self):
        self.events = []

    def on_step(self, metrics):
        self.events.append((time.perf_counter(), metrics))


def _fit(tmp_path, **config):
    steps = Steps()
    config = TrainConfig(epochs=1, batch_size=BATCH, log_every=1, optimizer=OptimizerConfig("sgd"), **config)
    trainer = Trainer(
        SlowModel(),
        torch.nn.functional.mse_loss,
        SlowSamples(),
        config,
        callbacks=[steps],
        run="slow",
        runs_dir=tmp_path,
        optimizer_factory=lambda params, cfg: SlowSGD(params, lr=cfg.lr),
    )
    trainer.fit()
    return steps.events


def test_each_phase_holds_its_own_time_and_the_parts_add_up_to_the_step(tmp_path):
    events = _fit(tmp_path)
    times = [metrics["step_time"] for _, metrics in events]
    assert len(times) == 8
    for phase, delay in DELAYS.items():
        measured = statistics.median(t[phase] for t in times)
        assert delay <= measured <= delay + 0.010, (
            f"{phase}: {measured * 1e3:.1f} ms for {delay * 1e3:.0f} ms"
        )
    assert all(t["comm"] == 0 and t["comm_overlapped"] == 0 and "note" not in t for t in times)
    for t in times:
        assert sum(t[phase] for phase in PHASES) == pytest.approx(t["total"])
    # measured apart: the wall time from one logged step's event to the next (steps 2..8)
    between = statistics.median(b - a for (a, _), (b, _) in itertools.pairwise(events))
    total = statistics.median(t["total"] for t in times[1:])
    assert total == pytest.approx(between, rel=0.05)
    logged = [line for line in read_metrics(tmp_path / "slow") if line["event"] == "step"]
    assert [line["step_time"]["total"] for line in logged] == [t["total"] for t in times]


def test_off_it_leaves_no_step_time(tmp_path):
    events = _fit(tmp_path, time_breakdown=False)
    assert events and all("step_time" not in metrics for _, metrics in events)


def test_time_breakdown_must_be_a_bool():
    with pytest.raises(ValueError, match="time_breakdown must be True or False, got 'yes'"):
        TrainConfig(time_breakdown="yes")


def test_a_strategy_whose_forward_backward_predates_the_clock_still_trains_and_says_so(tmp_path):
    from workbench.train.strategy import SingleDevice

    class OwnStrategy(SingleDevice):
        def forward_backward(self, model, group, objective, precision, scaler):  # the old five arguments
            return super().forward_backward(model, group, objective, precision, scaler)

    steps = Steps()
    config = TrainConfig(
        epochs=1, batch_size=BATCH, log_every=1, optimizer=OptimizerConfig("sgd"), device="cpu"
    )
    data = TensorDataset(torch.randn(2 * BATCH, 3), torch.zeros(2 * BATCH, 1))
    Trainer(torch.nn.Linear(3, 1), torch.nn.functional.mse_loss, data, config, callbacks=[steps],
            strategy=OwnStrategy("cpu")).fit()  # fmt: skip
    times = [metrics["step_time"] for _, metrics in steps.events]
    assert len(times) == 2 and all("OwnStrategy.forward_backward takes no clock" in t["note"] for t in times)
    assert all(t["forward"] > 0 and t["backward"] == 0 for t in times)
