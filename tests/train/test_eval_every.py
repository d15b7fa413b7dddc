"""``TrainConfig(eval_every_steps=N)``: val is evaluated every N optimizer steps within an epoch as well as at
its end (once there, not twice), for the plots and logs of a long epoch; the evaluating is no step's time, a
resume after it goes on bit-identically, early stopping judges each evaluation, and a ReduceLROnPlateau
judges the epochs' ends (every="epoch") or each evaluation (every="eval"). Before, a fit over one long epoch
(a big dataset, a fine-tuning run) showed val once, at its end."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import lr_scheduler
from torch.utils.data import TensorDataset

from tests.streams import Stream
from workbench.train import LrScheduler, OptimizerConfig, TrainConfig, Trainer

X = torch.randn(96, 6, generator=torch.Generator().manual_seed(0))
SPLITS = (TensorDataset(X, (X[:, 0] > 0).long()), TensorDataset(X[:32], (X[:32, 0] > 0).long()))
CONFIG = TrainConfig(epochs=2, batch_size=16, log_every=1, optimizer=OptimizerConfig("sgd", lr=0.1))


class Seen:
    def __init__(self) -> None:
        self.evals: list[tuple[str, int, int]] = []
        self.steps: list[dict] = []

    def on_step(self, event) -> None:
        self.steps.append(event)

    def on_eval(self, event) -> None:
        self.evals.append((event["split"], event["step"], event["epoch"]))


def _fit(config: TrainConfig, **options) -> tuple[Trainer, Seen]:
    torch.manual_seed(0)
    seen = Seen()
    trainer = Trainer(
        nn.Linear(6, 2), F.cross_entropy, SPLITS, config, callbacks=[seen], progress=False, **options
    )
    trainer.fit()
    return trainer, seen


def test_val_is_evaluated_every_n_steps_within_the_epoch_and_once_at_its_end():
    _, seen = _fit(CONFIG.replace(eval_every_steps=2))  # 6 steps an epoch
    val = [(step, epoch) for split, step, epoch in seen.evals if split == "val"]
    assert val == [(2, 0), (4, 0), (6, 0), (8, 1), (10, 1), (12, 1)]
    _, without = _fit(CONFIG)
    assert [(step, epoch) for split, step, epoch in without.evals if split == "val"] == [(6, 0), (12, 1)]


def test_the_time_spent_evaluating_is_no_steps_time():
    def slow(outputs, batch):  # a metric that takes long: val's two batches take 0.4 s
        time.sleep(0.2)
        return 1.0

    _, seen = _fit(CONFIG.replace(epochs=1, log_every=3, eval_every_steps=4), metrics={"slow": slow})
    window = next(event for event in seen.steps if event["step"] == 6)  # steps 4-6, val after step 4
    assert window["samples_per_s"] > 48 / 0.4 * 4  # 48 samples; with the 0.4 s of val they would be ~120/s


def test_a_resume_after_a_mid_epoch_evaluation_goes_on_bit_identically(tmp_path):
    config = CONFIG.replace(eval_every_steps=2)
    straight, _ = _fit(config)
    torch.manual_seed(0)
    stopped = Trainer(
        nn.Linear(6, 2), F.cross_entropy, SPLITS, config, run="r", runs_dir=tmp_path, progress=False
    )
    stop_at_5 = type("Stop", (), {"on_step": lambda self, e: e["step"] == 5 and stopped.control.stop()})()
    stopped.add_callback(stop_at_5)
    assert stopped.fit().status == "stopped"
    resumed = Trainer(
        nn.Linear(6, 2), F.cross_entropy, SPLITS, config, run="r", runs_dir=tmp_path, progress=False
    )
    resumed.fit(resume=True)
    for mine, theirs in zip(resumed.model.parameters(), straight.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_a_plateau_scheduler_judges_the_epochs_ends_and_early_stopping_every_evaluation():
    """As Lightning's and Hugging Face's early stopping do: patience counts val evaluations (one an epoch
    without eval_every_steps), so a long epoch or a stream can stop early; a ReduceLROnPlateau, stepped per
    epoch, judges the epochs' ends."""
    from workbench.train import EarlyStopping

    plateau = LrScheduler(
        lambda optimizer, plan: lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0),
        "epoch",
        monitor="flat",
    )
    flat = {"flat": lambda outputs, batch: 1.0}  # never improves: the plateau halves, the patience runs out
    _, plain = _fit(CONFIG.replace(epochs=3), scheduler=plateau, metrics=flat)
    _, often = _fit(CONFIG.replace(epochs=3, eval_every_steps=1), scheduler=plateau, metrics=flat)
    assert [event["lr"] for event in often.steps] == [event["lr"] for event in plain.steps]
    assert [event["lr"] for event in plain.steps][-1] == 0.05  # halved once, at epoch 1's end
    config = CONFIG.replace(epochs=3, early_stopping=EarlyStopping("flat", patience=1, mode="min"))
    by_epoch, _ = _fit(config, metrics=flat)
    assert (by_epoch.epoch, by_epoch._best.epoch) == (2, 0)  # one evaluation an epoch: epochs, as before
    by_evaluation, seen = _fit(config.replace(eval_every_steps=2), metrics=flat)
    assert (by_evaluation.step, by_evaluation._best.step) == (4, 2)  # step 4's val did not beat step 2's
    assert [(split, step) for split, step, _ in seen.evals] == [("val", 2), ("val", 4)]  # and no more


def test_eval_every_steps_is_checked_and_peers_names_lead_to_it():
    with pytest.raises(ValueError, match="eval_every_steps must be an integer ≥ 1, got 0"):
        TrainConfig(eval_every_steps=0)
    with pytest.raises(TypeError, match="takes no argument eval_steps; write eval_every_steps=100"):
        TrainConfig(eval_steps=100)
    with pytest.raises(TypeError, match=r"write config=TrainConfig\(eval_every_steps=50\)"):
        Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, val_check_interval=50)


def test_the_command_line_evaluates_within_the_epoch(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "train", "digits-mlp", "--epochs", "1",
         "--eval-every-steps", "10", "--run", "often", "--runs-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    from workbench.train import read_metrics

    val = [event["step"] for event in read_metrics(tmp_path / "often") if event.get("split") == "val"]
    assert val == [10, 20, 23]  # 23 steps in the epoch


def test_early_stopping_ends_a_stream_and_gives_back_the_best_evaluations_weights():
    from workbench.train import EarlyStopping

    scores = {2: 0.5, 4: 0.9, 6: 0.8, 8: 0.7}  # step 4's is not beaten by the next two: the fit stops at 8
    config = CONFIG.replace(
        max_steps=1000, eval_every_steps=2, early_stopping=EarlyStopping("score", patience=2, mode="max")
    )
    kept = {}

    class Weights:
        def on_eval(self, event) -> None:
            kept[event["step"]] = [p.detach().clone() for p in trainer.model.parameters()]

    torch.manual_seed(0)
    score = {"score": lambda outputs, batch: scores.get(trainer.step, 0.0)}  # 0 on the check before step 1
    trainer = Trainer(
        nn.Linear(6, 2), F.cross_entropy, (Stream(), SPLITS[1]), config.replace(epochs=10),
        metrics=score, callbacks=[Weights()], progress=False,
    )  # fmt: skip
    result = trainer.fit()
    assert (result.step, result.best_step, result.best_epoch, result.metrics["val"]["score"]) == (
        8,
        4,
        0,
        0.9,
    )
    assert all(torch.equal(a, b) for a, b in zip(trainer.model.parameters(), kept[4], strict=True))


def _cut(first: Trainer, cut: str) -> None:
    """Fit `first` until `cut`: a stop at step 5 (saved there, after step 4's val), or a crash at step 7 (the
    last checkpoint: the epoch's end at step 6, saved before its val)."""

    class Cut:
        def on_step(self, event) -> None:
            if cut == "stop at step 5" and event["step"] == 5:
                first.control.stop()
            if cut == "crash at step 7" and event["step"] == 7:
                raise RuntimeError("node lost")

    first.add_callback(Cut())
    if cut == "stop at step 5":
        assert first.fit().status == "stopped"
    else:
        with pytest.raises(RuntimeError, match="node lost"):
            first.fit()


@pytest.mark.parametrize("cut", ["stop at step 5", "crash at step 7"])
def test_the_patience_counted_in_evaluations_goes_on_across_a_resume(tmp_path, cut):
    """A stop saves within the epoch (after step 4's val); a crash falls back on the epoch's end at step 6,
    saved before its val: either way the resumed fit stops where the uninterrupted one did."""
    from workbench.train import EarlyStopping

    flat = {"flat": lambda outputs, batch: 1.0}
    config = CONFIG.replace(
        epochs=3, eval_every_steps=2, early_stopping=EarlyStopping("flat", patience=3, mode="min")
    )
    straight, _ = _fit(config, metrics=flat)
    assert (straight.step, straight._best.step) == (8, 2)  # steps 4, 6 and 8 did not beat step 2

    def trainer():
        return Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, config, run="r", runs_dir=tmp_path,
                       metrics=flat, progress=False)  # fmt: skip

    _cut(trainer(), cut)
    resumed = trainer()
    assert resumed.fit(resume=True).step == 8 and resumed._best.step == 2


def _halving(every: str) -> LrScheduler:
    """A ReduceLROnPlateau that halves the lr at every val evaluation after the first (the metric is flat)."""
    return LrScheduler(
        lambda optimizer, plan: lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0),
        every,
        monitor="flat",
    )


FLAT = {"flat": lambda outputs, batch: 1.0}


def test_a_plateau_scheduler_every_eval_judges_each_evaluation():
    """every="eval": a ReduceLROnPlateau steps at each val evaluation, within the epochs too, as Hugging
    Face's Trainer steps it; every="epoch" judged only the epochs' ends (a stream's never came)."""
    config = CONFIG.replace(epochs=2, eval_every_steps=2)
    _, seen = _fit(config, scheduler=_halving("eval"), metrics=FLAT)
    lrs = [event["lr"] for event in seen.steps]  # vals at steps 2, 4, …, 12: halved from the second on
    assert lrs == [0.1] * 4 + [0.05] * 2 + [0.025] * 2 + [0.0125] * 2 + [0.00625] * 2
    _, by_epoch = _fit(config, scheduler=_halving("epoch"), metrics=FLAT)
    assert [event["lr"] for event in by_epoch.steps] == [0.1] * 12  # one epoch's end before the last step


@pytest.mark.parametrize("cut", ["stop at step 5", "crash at step 7"])
def test_a_plateau_scheduler_every_eval_goes_on_across_a_resume(tmp_path, cut):
    """A stop saves after step 4's val (judged); a crash falls back on the epoch's end at step 6, saved
    before its val: the resume evaluates it again and the scheduler judges it. The lrs are the straight
    run's."""
    config = CONFIG.replace(epochs=3, eval_every_steps=2)
    _, straight = _fit(config, scheduler=_halving("eval"), metrics=FLAT)
    seen = Seen()

    def trainer():
        return Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, config, run="r", runs_dir=tmp_path,
                       metrics=FLAT, scheduler=_halving("eval"), callbacks=[seen],
                       progress=False)  # fmt: skip

    _cut(trainer(), cut)
    seen.steps.clear()
    assert trainer().fit(resume=True).step == 18
    resumed_from = seen.steps[0]["step"] - 1
    assert [e["lr"] for e in seen.steps] == [e["lr"] for e in straight.steps][resumed_from:]


def test_a_plateau_scheduler_every_step_names_the_two_that_work_and_every_epoch_warns_on_a_stream():
    with pytest.raises(ValueError, match=r"give every='epoch' \(at the epochs' ends\) or every='eval'"):
        Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, CONFIG, metrics=FLAT, scheduler=_halving("step"))
    stream = CONFIG.replace(max_steps=8)
    with pytest.warns(UserWarning, match=r"every='epoch'\) steps at the epochs' ends, and this fit") as said:
        Trainer(nn.Linear(6, 2), F.cross_entropy, (Stream(), SPLITS[1]), stream, scheduler=_halving("epoch"),
                metrics=FLAT, progress=False)  # fmt: skip
    assert "may reach no epoch's end" in str(said[0].message) and said[0].filename == __file__
    assert "give every='eval' with eval_every_steps=" in str(said[0].message)


def test_early_stopping_counts_the_val_where_max_steps_ended_a_fit_when_it_resumes(tmp_path):
    """max_steps=5 ends the fit inside its first epoch: val at step 5 (not beating step 2's) counts toward
    the patience once across the resume, as an epoch's end's does (a guard: the fit's last save follows
    it)."""
    from workbench.train import EarlyStopping

    config = CONFIG.replace(
        epochs=3, eval_every_steps=2, early_stopping=EarlyStopping("flat", patience=4, mode="min")
    )

    def trainer(config):
        return Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, config, run="r", runs_dir=tmp_path,
                       metrics=FLAT, progress=False)  # fmt: skip

    assert trainer(config.replace(max_steps=5)).fit().step == 5  # vals at 2, 4 and 5
    resumed = trainer(config).fit(resume=True)  # then 6 and 8: the fourth without beating step 2's
    assert (resumed.status, resumed.step, resumed.best_step) == ("finished", 8, 2)


def test_every_eval_without_a_val_split_is_refused_with_the_fix():
    steps = LrScheduler(lambda optimizer, plan: lr_scheduler.StepLR(optimizer, 2), "eval")
    with pytest.raises(ValueError, match="every='eval' steps the StepLR after each val evaluation, and the"):
        Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS[0], CONFIG, scheduler=steps)
