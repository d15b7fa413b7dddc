"""``TrainConfig(checkpoint_every_steps=N)`` saves the run's checkpoint every N optimizer steps within an
epoch as well (Hugging Face's ``save_steps``), so a failure in a long epoch, or in a stream whose epoch never
ends, loses at most N steps: the resume goes on from the last one bit-identically. The save's time is no
step's time. Before, the only checkpoints were at epochs' ends (and at a stop), and a crash in a stream of
10,000 steps lost them all."""

from __future__ import annotations

import json
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from tests.streams import Stream
from workbench.cli import main
from workbench.train import OptimizerConfig, TrainConfig, Trainer, read_metrics
from workbench.train.run_record import RunRecord

X = torch.randn(96, 6, generator=torch.Generator().manual_seed(0))
SPLITS = (TensorDataset(X, (X[:, 0] > 0).long()), TensorDataset(X[:32], (X[:32, 0] > 0).long()))
CONFIG = TrainConfig(epochs=2, batch_size=16, log_every=1, optimizer=OptimizerConfig("sgd", lr=0.1))


class CrashAt:
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step(self, event) -> None:
        if event["step"] == self.step:
            raise RuntimeError("node lost")


def _trainer(config, splits=SPLITS, **options) -> Trainer:
    torch.manual_seed(0)
    return Trainer(nn.Linear(6, 2), F.cross_entropy, splits, config, progress=False, **options)


@pytest.mark.parametrize("splits", [SPLITS, (Stream(), SPLITS[1])], ids=["dataset", "stream"])
def test_a_crash_loses_at_most_n_steps_and_the_resume_is_bit_identical(tmp_path, splits):
    length = {} if splits is SPLITS else {"epochs": TrainConfig.epochs, "max_steps": 12}  # a stream: steps
    config = CONFIG.replace(checkpoint_every_steps=4, **length)
    whole = _trainer(config, splits)
    whole.fit()
    with pytest.raises(RuntimeError, match="node lost"):
        _trainer(config, splits, run="r", runs_dir=tmp_path, callbacks=[CrashAt(11)]).fit()
    resumed = _trainer(config, splits, run="r", runs_dir=tmp_path)
    result = resumed.fit(resume=True)
    assert read_metrics(tmp_path / "r", "fit_start")[-1]["start_step"] == 8  # the save at step 8, not at 6
    assert result.step == 12 and [e["step"] for e in read_metrics(tmp_path / "r", "step")] == list(
        range(1, 13)
    )
    for a, b in zip(whole.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_saves_fall_on_every_nth_step_the_epochs_ends_included(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(RunRecord, "save", lambda self, where, *rest: saved.append(where.step))
    _trainer(CONFIG.replace(checkpoint_every_steps=4, checkpoint_every=2), run="r", runs_dir=tmp_path).fit()
    assert saved == [4, 8, 12, 12]  # 6 steps an epoch: epoch 1's end is no epoch for checkpoint_every=2
    saved.clear()  # and without a run directory: nothing to save, nothing said
    _trainer(CONFIG.replace(checkpoint_every_steps=4)).fit()
    assert saved == []


def test_the_time_spent_saving_is_no_steps_time(tmp_path, monkeypatch):
    save = RunRecord.save

    def slow_save(self, *args, **kwargs):
        time.sleep(0.2)
        save(self, *args, **kwargs)

    monkeypatch.setattr(RunRecord, "save", slow_save)
    seen = []

    class Throughput:
        def on_step(self, event) -> None:
            seen.append(event["samples_per_s"])

    config = CONFIG.replace(epochs=1, checkpoint_every_steps=2)
    trainer = _trainer(config, run="r", runs_dir=tmp_path, callbacks=[Throughput()])
    trainer.fit()
    assert min(seen) > 400  # a 0.2 s save counted in a 16-sample step's window: < 80 samples/s


def test_peers_name_it_and_workbench_train_takes_it(tmp_path, capsys):
    with pytest.raises(TypeError, match=r"takes no argument save_steps; write checkpoint_every_steps=500"):
        TrainConfig(save_steps=500)
    with pytest.raises(ValueError, match="checkpoint_every_steps must be an integer ≥ 1, got 0"):
        TrainConfig(checkpoint_every_steps=0)
    argv = ["train", "digits-mlp", "--max-steps", "12", "--checkpoint-every-steps", "5", "--run", "c"]
    assert main([*argv, "--runs-dir", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "c" / "config.json").read_text())["checkpoint_every_steps"] == 5
