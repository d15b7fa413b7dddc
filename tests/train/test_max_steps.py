"""``TrainConfig(max_steps=N)``: the fit is N optimizer steps long, in epochs' place (Hugging Face's
``max_steps``), going through the data as many times as that takes and ending inside an epoch when it falls
there: val is evaluated on the final model and a checkpoint saved at that point, from which a longer fit goes
on bit-identically. It gives a stream without an end (an IterableDataset with no ``__len__``) its length, so
it can end, and so a schedule can span it. Before, such a fit ran until stopped by hand, and "train for 2000
steps" had to be worked out in epochs."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import lr_scheduler
from torch.utils.data import TensorDataset

from tests.streams import Stream
from workbench.cli import main
from workbench.train import EarlyStopping, LrScheduler, OptimizerConfig, TrainConfig, Trainer
from workbench.train.lr_scheduler import FitPlan

X = torch.randn(96, 6, generator=torch.Generator().manual_seed(0))
SPLITS = (TensorDataset(X, (X[:, 0] > 0).long()), TensorDataset(X[:32], (X[:32, 0] > 0).long()))
CONFIG = TrainConfig(batch_size=16, log_every=4, optimizer=OptimizerConfig("sgd", lr=0.1))  # 6 steps an epoch


class Seen:
    def __init__(self) -> None:
        self.start: dict = {}
        self.evals: list[tuple[str, int, int]] = []
        self.steps: list[dict] = []

    def on_fit_start(self, event) -> None:
        self.start = event

    def on_step(self, event) -> None:
        self.steps.append(event)

    def on_eval(self, event) -> None:
        self.evals.append((event["split"], event["step"], event["epoch"]))


def _trainer(config: TrainConfig, splits=SPLITS, **options) -> tuple[Trainer, Seen]:
    torch.manual_seed(0)
    seen = Seen()
    model = nn.Linear(6, 2)
    return Trainer(model, F.cross_entropy, splits, config, callbacks=[seen], progress=False, **options), seen


def test_the_fit_takes_max_steps_steps_through_the_data_as_often_as_that_takes():
    trainer, seen = _trainer(CONFIG.replace(max_steps=15))
    result = trainer.fit()
    assert (result.status, result.step, result.epoch) == ("finished", 15, 2)  # 2 whole epochs and 3 steps
    assert (seen.start["total_steps"], seen.start["epochs"]) == (15, 3)  # the progress bar's total
    assert [event["step"] for event in seen.steps][-1] == 15  # the last step is logged, inside the epoch
    val = [(step, epoch) for split, step, epoch in seen.evals if split == "val"]
    assert val == [(6, 0), (12, 1), (15, 2)]  # the final model's val, in the epoch it ended inside
    assert result.metrics["val"] == trainer.evaluate("val")


def test_max_steps_at_an_epochs_end_ends_there_as_an_epoch_does():
    trainer, seen = _trainer(CONFIG.replace(max_steps=12))
    result = trainer.fit()
    assert (result.step, result.epoch) == (12, 2)
    assert [(step, epoch) for split, step, epoch in seen.evals if split == "val"] == [(6, 0), (12, 1)]


def test_a_stream_without_an_end_stops_at_max_steps_with_its_schedule_spanning_them():
    config = CONFIG.replace(
        max_steps=10,
        log_every=1,
        eval_every_steps=4,
        optimizer=OptimizerConfig("sgd", lr=0.1, schedule="cosine"),
    )
    trainer, seen = _trainer(config, (Stream(), SPLITS[1]))
    result = trainer.fit()
    assert (result.status, result.step, result.epoch) == ("finished", 10, 0)
    lrs = [event["lr"] for event in seen.steps]
    assert lrs[0] == pytest.approx(0.1) and lrs[-1] == pytest.approx(0.0, abs=1e-12)  # cosine over 10 steps
    assert all(a > b for a, b in itertools.pairwise(lrs))
    assert [step for split, step, _ in seen.evals if split == "val"] == [
        4,
        8,
        10,
    ]  # once at the end, not twice
    assert seen.start["total_steps"] == 10 and seen.start["epochs"] is None


def test_your_own_scheduler_is_planned_for_max_steps_and_steps_to_its_end():
    plans = []

    def one_cycle(optimizer, plan):
        plans.append(plan)
        return lr_scheduler.OneCycleLR(optimizer, plan.lr, plan.steps)

    trainer, _ = _trainer(CONFIG.replace(max_steps=15), scheduler=LrScheduler(one_cycle, every="step"))
    assert trainer.fit().step == 15  # OneCycleLR refuses a step past its total_steps
    assert set(plans) == {FitPlan(lr=0.1, epochs=3, steps_per_epoch=6, steps=15)}  # built, then at the fit
    _trainer(CONFIG.replace(max_steps=7), (Stream(), SPLITS[1]), scheduler=LrScheduler(one_cycle, "step"))
    assert plans[-1] == FitPlan(lr=0.1, epochs=None, steps_per_epoch=None, steps=7)


def test_without_max_steps_a_schedule_on_a_stream_says_to_give_it():
    config = CONFIG.replace(optimizer=OptimizerConfig("sgd", lr=0.1, schedule="cosine"))
    with pytest.raises(ValueError, match=r"TrainConfig\(max_steps=\.\.\.\)"):
        _trainer(config, (Stream(), SPLITS[1]))


def test_a_fit_ended_inside_an_epoch_goes_on_bit_identically_with_more_steps(tmp_path):
    whole, _ = _trainer(CONFIG.replace(max_steps=15))
    whole.fit()
    first, _ = _trainer(CONFIG.replace(max_steps=8), run="steps", runs_dir=tmp_path)
    assert first.fit().checkpoint is not None  # saved at step 8, 2 steps into epoch 1
    then, seen = _trainer(CONFIG.replace(max_steps=15), run="steps", runs_dir=tmp_path)
    result = then.fit(resume=True)
    assert (result.step, result.epoch, seen.start["start_step"]) == (15, 2, 8)
    for a, b in zip(whole.model.parameters(), then.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_resume_may_lengthen_max_steps_and_not_shorten_it(tmp_path):
    first, _ = _trainer(CONFIG.replace(max_steps=8), run="steps", runs_dir=tmp_path)
    first.fit()
    shorter, _ = _trainer(CONFIG.replace(max_steps=5), run="steps", runs_dir=tmp_path)
    with pytest.raises(ValueError, match="max_steps was 8 there and is 5 now"):
        shorter.fit(resume=True)
    in_epochs, _ = _trainer(CONFIG.replace(epochs=3), run="steps", runs_dir=tmp_path)  # epochs from now on
    assert in_epochs.fit(resume=True).step == 18


def test_epochs_given_beside_max_steps_that_would_end_it_sooner_are_said_not_to():
    with pytest.warns(
        UserWarning, match=r"max_steps=20 sets the fit's length \(3.33 epochs of 6 steps\).*epochs=3"
    ):
        _trainer(CONFIG.replace(epochs=3, max_steps=20))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _trainer(CONFIG.replace(max_steps=20))  # the default epochs: nothing to say
        _trainer(CONFIG.replace(epochs=3, max_steps=10))  # a config's epochs, and fewer steps: as meant


def test_peers_spellings_of_the_fits_length_lead_to_max_steps():
    with pytest.raises(ValueError, match=r"max_steps=-1 is 'no limit'.*max_steps=None"):
        TrainConfig(max_steps=-1)
    with pytest.raises(ValueError, match="max_steps must be an integer ≥ 1, got 0"):
        TrainConfig(max_steps=0)
    with pytest.raises(
        TypeError, match=r"TrainConfig\(\) takes no argument num_training_steps; write max_steps=100"
    ):
        TrainConfig(num_training_steps=100)


def test_early_stopping_judges_the_val_where_max_steps_ends_inside_an_epoch():
    config = CONFIG.replace(max_steps=15, early_stopping=EarlyStopping("loss", patience=5))
    trainer, seen = _trainer(config)
    result = trainer.fit()
    assert [(step, epoch) for split, step, epoch in seen.evals if split == "val"] == [
        (6, 0),
        (12, 1),
        (15, 2),
    ]
    assert (result.step, result.best_epoch, trainer._best.step) == (15, 2, 15)  # the final model, the best
    assert not trainer._best.restored


def test_workbench_train_takes_max_steps_in_the_presets_epochs_place(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the preset's epochs=20 is its default, not one given beside it
        assert main(["train", "digits-mlp", "--max-steps", "30"]) == 0
    assert (
        capsys.readouterr().out.splitlines()[-1].startswith("finished: 30 steps, 1 epochs in ")
    )  # 23 a epoch


def test_early_stopping_on_a_fit_that_reaches_no_epochs_end_is_said_to_do_nothing():
    early = EarlyStopping("loss", patience=2)
    with pytest.warns(
        UserWarning, match=r"max_steps=4 ends before its first epoch.s end \(6 steps\).*eval_every_steps"
    ):
        _trainer(CONFIG.replace(max_steps=4, early_stopping=early))
    with pytest.warns(UserWarning, match="may reach no epoch's end .*a stream never ends its epoch"):
        _trainer(CONFIG.replace(max_steps=40, early_stopping=early), (Stream(), SPLITS[1]))
