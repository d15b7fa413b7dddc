"""A torch lr scheduler of yours in a fit (``Trainer(..., scheduler=LrScheduler(factory, every=...))``): it
steps where a hand-written loop steps it, its lrs are the logged ones, a Dashboard's Apply scales them, and a
resume goes on with it exactly (a ReduceLROnPlateau interrupted between its epoch's checkpoint and its step
too). Before, ``scheduler=`` was refused with the config's three schedules as the only way, so OneCycleLR,
step decay at epoch milestones and ReduceLROnPlateau could not be had at all."""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import lr_scheduler
from torch.utils.data import TensorDataset

from workbench.train import LrScheduler, OptimizerConfig, TrainConfig, Trainer

X = torch.randn(96, 6, generator=torch.Generator().manual_seed(0))
DATA = TensorDataset(X, (X[:, 0] > 0).long())
SPLITS = (DATA, TensorDataset(X[:32], (X[:32, 0] > 0).long()))
CONFIG = TrainConfig(epochs=3, batch_size=16, log_every=1, optimizer=OptimizerConfig("sgd", lr=0.1))
STEPS = 3 * 6  # 96 samples in batches of 16, 3 epochs

ONE_CYCLE = LrScheduler(
    lambda optimizer, plan: lr_scheduler.OneCycleLR(optimizer, plan.lr, plan.steps), "step"
)


class Seen:
    """The lr each logged step used, and each val evaluation."""

    def __init__(self) -> None:
        self.lrs: list[float] = []
        self.vals: list[dict] = []

    def on_step(self, event) -> None:
        self.lrs.append(event["lr"])

    def on_eval(self, event) -> None:
        if event["split"] == "val":
            self.vals.append(event)


def _fit(scheduler, config: TrainConfig = CONFIG, splits=SPLITS, **options) -> tuple[Trainer, Seen]:
    torch.manual_seed(0)
    seen = Seen()
    trainer = Trainer(nn.Linear(6, 2), F.cross_entropy, splits, config, scheduler=scheduler, callbacks=[seen],
                      progress=False, **options)  # fmt: skip
    trainer.fit()
    return trainer, seen


def _hand_loop_lrs(make, steps: int, lr: float = 0.1) -> list[float]:
    """The lr each step of a hand-written loop uses: optimizer.step(), then scheduler.step()."""
    optimizer = torch.optim.SGD(nn.Linear(6, 2).parameters(), lr=lr)
    scheduler = make(optimizer)
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def test_one_cycle_gives_every_step_the_lr_a_hand_written_loop_gives_it():
    trainer, seen = _fit(ONE_CYCLE)
    expected = _hand_loop_lrs(lambda optimizer: lr_scheduler.OneCycleLR(optimizer, 0.1, STEPS), STEPS)
    assert seen.lrs == pytest.approx(expected, rel=1e-12)
    assert max(seen.lrs) == pytest.approx(0.1, rel=0.01) and seen.lrs[0] < 0.005  # it warmed up to plan.lr
    assert type(trainer.scheduler).__name__ == "OneCycleLR" and trainer.scheduler.last_epoch == STEPS


def test_an_every_epoch_scheduler_steps_after_each_epoch_at_its_milestones():
    multistep = LrScheduler(lambda optimizer, plan: lr_scheduler.MultiStepLR(optimizer, [1, 2], 0.1), "epoch")
    _, seen = _fit(multistep)
    assert seen.lrs == pytest.approx([0.1] * 6 + [0.01] * 6 + [0.001] * 6)


def test_a_second_fit_starts_its_scheduler_over():
    trainer, seen = _fit(ONE_CYCLE)
    trainer.fit()  # OneCycleLR at its end would refuse another step ("Tried to step 19 times")
    assert seen.lrs[STEPS:] == pytest.approx(seen.lrs[:STEPS])


def test_plateau_halves_the_lr_when_the_watched_val_metric_stops_improving():
    plateau = LrScheduler(
        lambda optimizer, plan: lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0),
        "epoch",
        monitor="flat",
    )
    config = CONFIG.replace(epochs=4)
    _, seen = _fit(plateau, config, metrics={"flat": lambda outputs, batch: 1.0})  # never improves
    per_epoch = [seen.lrs[6 * epoch] for epoch in range(4)]
    assert per_epoch == pytest.approx([0.1, 0.1, 0.05, 0.025])
    assert [val["flat"] for val in seen.vals] == [1.0] * 4


def test_a_dashboards_apply_scales_every_lr_the_scheduler_gives_from_that_step():
    _, reference = _fit(ONE_CYCLE)
    torch.manual_seed(0)
    seen = Seen()
    trainer = Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, CONFIG, scheduler=ONE_CYCLE, progress=False)

    def apply_at_step_7(event):
        seen.on_step(event)
        if event["step"] == 7:
            trainer.control.set_lr(0.2)  # what the Apply button sends: the run's lr, twice the config's

    trainer.add_callback(type("Apply", (), {"on_step": staticmethod(apply_at_step_7)})())
    trainer.fit()
    assert seen.lrs[:7] == pytest.approx(reference.lrs[:7])
    assert seen.lrs[7:] == pytest.approx([2 * lr for lr in reference.lrs[7:]])


def _stopped_after(step: int, scheduler, tmp_path, config: TrainConfig = CONFIG, **options) -> Seen:
    torch.manual_seed(0)
    seen = Seen()
    trainer = Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, config, scheduler=scheduler, run="r",
                      runs_dir=tmp_path, progress=False, **options)  # fmt: skip

    def stop(event):
        seen.on_step(event)
        if event["step"] == step:
            trainer.control.stop()

    trainer.add_callback(type("Stop", (), {"on_step": staticmethod(stop)})())
    assert trainer.fit().status == "stopped"
    return seen


def _resumed(scheduler, tmp_path, config: TrainConfig = CONFIG, **options) -> tuple[Trainer, Seen]:
    seen = Seen()
    trainer = Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, config, scheduler=scheduler, run="r",
                      runs_dir=tmp_path, callbacks=[seen], progress=False, **options)  # fmt: skip
    trainer.fit(resume=True)
    return trainer, seen


def test_a_resume_mid_epoch_goes_on_with_the_scheduler_bit_identically(tmp_path):
    straight, reference = _fit(ONE_CYCLE)
    before = _stopped_after(8, ONE_CYCLE, tmp_path)
    resumed, after = _resumed(ONE_CYCLE, tmp_path)
    assert before.lrs + after.lrs == reference.lrs  # the same floats, step by step
    for mine, theirs in zip(resumed.model.parameters(), straight.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_a_plateau_cut_off_between_its_epochs_checkpoint_and_its_step_takes_that_step_on_resume(tmp_path):
    """The checkpoint after an epoch is written before val is evaluated (a metric that fails costs the epoch
    nothing), so a ReduceLROnPlateau's step for that epoch is not in it: the resume evaluates val again and
    takes it, and the lrs go on as in a fit that was never cut off."""
    plateau = LrScheduler(
        lambda optimizer, plan: lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0),
        "epoch",
        monitor="flat",
    )
    config = CONFIG.replace(epochs=4)
    _, reference = _fit(plateau, config, metrics={"flat": lambda outputs, batch: 1.0})
    calls = []

    def fails_at_the_second_epochs_val(outputs, batch):
        calls.append(1)
        if len(calls) == 4:  # tried once on a training batch first; then val, two batches an epoch
            raise RuntimeError("the metric failed")
        return 1.0

    torch.manual_seed(0)
    seen = Seen()
    trainer = Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, config, scheduler=plateau, run="r",
                      runs_dir=tmp_path, callbacks=[seen], progress=False,
                      metrics={"flat": fails_at_the_second_epochs_val})  # fmt: skip
    with pytest.raises(Exception, match=r"metrics\['flat'\] failed: the metric failed"):
        trainer.fit()
    _, after = _resumed(plateau, tmp_path, config, metrics={"flat": lambda outputs, batch: 1.0})
    assert seen.lrs + after.lrs == reference.lrs
    assert [after.lrs[6 * epoch] for epoch in range(2)] == pytest.approx([0.05, 0.025])


def test_a_longer_resumed_fit_rebuilds_the_scheduler_for_its_plan_where_it_was(tmp_path):
    cosine = LrScheduler(
        lambda optimizer, plan: lr_scheduler.CosineAnnealingLR(optimizer, plan.steps), "step"
    )
    _stopped_after(8, cosine, tmp_path)
    said = r"built for 18 steps in 3 epochs, and this fit has 36 in 6: .* moved 8 steps on"
    with pytest.warns(UserWarning, match=said) as caught:
        _, after = _resumed(cosine, tmp_path, CONFIG.replace(epochs=6))
    assert caught[0].filename == __file__  # said where fit(resume=True) was called
    longer = _hand_loop_lrs(lambda optimizer: lr_scheduler.CosineAnnealingLR(optimizer, 36), 36)
    assert after.lrs == pytest.approx(longer[8:])


def test_a_resume_needs_the_scheduler_the_checkpoint_was_trained_with(tmp_path):
    _stopped_after(4, ONE_CYCLE, tmp_path)
    with pytest.raises(
        ValueError, match=r"trained with scheduler OneCycleLR \(every='step'\), whose lrs the "
    ):
        _resumed(None, tmp_path)
    multistep = LrScheduler(lambda optimizer, plan: lr_scheduler.MultiStepLR(optimizer, [1]), "epoch")
    with pytest.raises(ValueError, match="this Trainer has MultiStepLR \\(every='epoch'\\); give the same"):
        _resumed(multistep, tmp_path)
    _resumed(ONE_CYCLE, tmp_path)  # the same one goes on


def test_adding_a_scheduler_to_a_run_trained_without_one_is_refused(tmp_path):
    _stopped_after(4, None, tmp_path)
    with pytest.raises(ValueError, match="it was trained without one, on OptimizerConfig's schedule"):
        _resumed(ONE_CYCLE, tmp_path)


def test_a_scheduler_built_for_too_few_steps_says_what_the_fit_has():
    short = LrScheduler(
        lambda optimizer, plan: lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=10), "step"
    )
    with pytest.raises(ValueError, match=r"OneCycleLR.step\(\) failed after step 11: Tried to step 11 times.*"
                       r"plan.steps = 18, plan.epochs = 3"):  # fmt: skip
        _fit(short)


@pytest.mark.parametrize(
    "scheduler, message",
    [
        (lambda optimizer: lr_scheduler.StepLR(optimizer, 3),
         "scheduler=StepLR(...) is built on an optimizer of yours; .* scheduler=LrScheduler(lambda "
         "optimizer, plan: StepLR(optimizer, step_size=3), every='epoch') (or every='step': after each "
         "batch)"),
        (lambda optimizer: lr_scheduler.OneCycleLR,
         "scheduler=OneCycleLR(...) is a class; .* every='step') (workbench"),
        (lambda optimizer: (lambda o, p: None),
         "scheduler= takes LrScheduler(<lambda>, every='step', 'epoch' or 'eval')"),
        (lambda optimizer: "cosine", "the built-in schedules are OptimizerConfig's schedule"),
        (lambda optimizer: 3, "scheduler must be LrScheduler(factory, every=...) or None, got int"),
    ],
)  # fmt: skip
def test_what_scheduler_takes_and_the_line_for_what_it_does_not(scheduler, message):
    given = scheduler(torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1))
    with pytest.raises(TypeError) as caught:
        Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, CONFIG, scheduler=given)
    assert caught.match(".*".join(re.escape(part) for part in message.split(" .* ")))


@pytest.mark.parametrize(
    "factory, every, monitor, config, message",
    [
        (lambda o, p: lr_scheduler.OneCycleLR(o, 0.1, p.steps), "step", None,
         CONFIG.replace(optimizer={"schedule": "cosine"}), "would both set the lr; keep one"),
        (lambda o, p: None, "step", None, CONFIG, "factory returned NoneType, not a torch lr scheduler"),
        (lambda o, p: lr_scheduler.StepLR(torch.optim.SGD(nn.Linear(1, 1).parameters()), 2), "step", None,
         CONFIG, "built a StepLR on another optimizer than the one it was given"),
        (lambda o, p: lr_scheduler.ReduceLROnPlateau(o), "step", None, CONFIG, "give every='epoch'"),
        (lambda o, p: lr_scheduler.ReduceLROnPlateau(o), "epoch", "f1", CONFIG,
         "watches monitor='f1', which the Trainer does not compute"),
        (lambda o, p: lr_scheduler.ReduceLROnPlateau(o), "epoch", "accuracy", CONFIG,
         "watches val accuracy, for which higher is better: build it with mode='max'"),
        (lambda o, p: lr_scheduler.StepLR(o, 2), "epoch", "loss", CONFIG, "leave monitor out"),
    ],
)  # fmt: skip
def test_a_scheduler_that_cannot_run_as_asked_is_refused_when_the_trainer_is_built(
    factory, every, monitor, config, message
):
    with pytest.raises((ValueError, TypeError), match=message):
        Trainer(
            nn.Linear(6, 2), F.cross_entropy, SPLITS, config, scheduler=LrScheduler(factory, every, monitor)
        )


def test_a_plateau_without_a_val_split_is_refused():
    plateau = LrScheduler(lambda optimizer, plan: lr_scheduler.ReduceLROnPlateau(optimizer), "epoch")
    with pytest.raises(
        ValueError, match="watches the val split's loss after each epoch, and the data has no val"
    ):
        Trainer(nn.Linear(6, 2), F.cross_entropy, DATA, CONFIG, scheduler=plateau)


@pytest.mark.parametrize(
    "factory, every, error, message",
    [
        (lr_scheduler.MultiStepLR, "epoch", TypeError, "factory is the class MultiStepLR; give a function"),
        (lambda optimizer: None, "step", TypeError,
         r"called as factory\(optimizer, plan\), but <lambda>\(optimizer\)"),
        (3, "step", TypeError, "factory must be a function factory"),
        (lambda o, p: None, "batch", ValueError,
         "every='batch' is not supported; allowed values: 'step', 'epoch'"),
    ],
)  # fmt: skip
def test_lr_scheduler_checks_its_arguments(factory, every, error, message):
    with pytest.raises(error, match=message):
        LrScheduler(factory, every)


def test_lr_scheduler_keyword_of_other_trainers_points_to_scheduler():
    with pytest.raises(TypeError, match=r"lr_scheduler.*scheduler=LrScheduler\(lambda optimizer, plan: "):
        Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, CONFIG, lr_scheduler=object())


def test_the_optimizer_order_warning_of_a_skipped_fp16_step_is_not_shown():
    """GradScaler skips the optimizer step whose gradients overflowed, and torch then warns that the
    scheduler stepped first; the Trainer steps it on every step, as the config's schedules count steps."""
    trainer = Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, CONFIG, scheduler=ONE_CYCLE, progress=False)
    with warnings.catch_warnings():  # no optimizer step before it: what a skipped one looks like to torch
        warnings.simplefilter("error")
        trainer._lrs.stepped()


@pytest.mark.parametrize(
    "built, lrs_per_epoch",
    [
        (lambda optimizer: lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5), [0.1, 0.05, 0.025]),
        (lambda optimizer: lr_scheduler.MultiStepLR(optimizer, milestones=[2], gamma=0.1), [0.1, 0.1, 0.01]),
        (lambda optimizer: lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", patience=0), None),
        (lambda optimizer: lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=1000), None),
    ],
)
def test_the_line_printed_for_a_scheduler_built_on_your_optimizer_trains_when_pasted(built, lrs_per_epoch):
    """A peer's habit, ``scheduler=StepLR(optimizer, ...)``: the refusal prints the LrScheduler line with the
    settings it was built with, and that line, pasted, trains."""
    given = built(torch.optim.SGD(nn.Linear(6, 2).parameters(), lr=0.1))
    with pytest.raises(TypeError) as caught:
        Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, CONFIG, scheduler=given)
    line = re.search(
        r"scheduler=(LrScheduler\(.*?\)\)?, every='\w+'(, monitor='\w+')?\))", str(caught.value)
    )[1]
    pasted = eval(line, {"LrScheduler": LrScheduler, **vars(lr_scheduler)})  # what the user pastes
    trainer, seen = _fit(pasted)
    assert type(trainer.scheduler) is type(given)
    if lrs_per_epoch is not None:
        assert [seen.lrs[6 * epoch] for epoch in range(3)] == pytest.approx(lrs_per_epoch)


def test_config_json_says_which_scheduler_the_run_steps_and_the_runs_browser_tells_runs_apart(tmp_path):
    from workbench.train.runs import config_diff, list_runs

    plateau = LrScheduler(lambda optimizer, plan: lr_scheduler.ReduceLROnPlateau(optimizer), "epoch")
    for run, scheduler in (("one-cycle", ONE_CYCLE), ("plateau", plateau), ("config's", None)):
        options = dict(scheduler=scheduler, run=run, runs_dir=tmp_path, progress=False)
        Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, CONFIG, **options).fit()
    written = json.loads((tmp_path / "plateau" / "config.json").read_text())
    assert written["scheduler"] == {"kind": "ReduceLROnPlateau", "every": "epoch", "monitor": "loss"}
    runs = sorted(list_runs(tmp_path), key=lambda run: run.name)
    assert config_diff(runs)["scheduler.kind"] == [None, "OneCycleLR", "ReduceLROnPlateau"]


class _Stream(torch.utils.data.IterableDataset):
    """Samples without a length: the fit's number of steps is unknown."""

    def __iter__(self):
        yield from zip(X, (X[:, 0] > 0).long(), strict=True)


def test_a_scheduler_that_needs_the_fits_length_says_why_it_is_missing_and_one_that_does_not_trains():
    with pytest.raises(ValueError, match="total_steps") as caught:
        Trainer(nn.Linear(6, 2), F.cross_entropy, _Stream(), CONFIG, scheduler=ONE_CYCLE)
    assert "the fit's length is unknown (a training split without __len__" in caught.value.__notes__[0]
    halving = LrScheduler(lambda optimizer, plan: lr_scheduler.StepLR(optimizer, 1, 0.5), "epoch")
    _, seen = _fit(halving, splits=_Stream())
    assert seen.lrs[0] == 0.1 and seen.lrs[-1] == 0.025


def test_a_finished_run_resumed_for_more_epochs_goes_on_along_the_longer_epoch_plan(tmp_path):
    cosine = LrScheduler(lambda opt, plan: lr_scheduler.CosineAnnealingLR(opt, T_max=plan.epochs), "epoch")
    options = dict(scheduler=cosine, run="r", runs_dir=tmp_path, progress=False)
    Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, CONFIG, **options).fit()
    with pytest.warns(
        UserWarning, match="built for 18 steps in 3 epochs, and this fit has 36 in 6: .* 3 epochs on"
    ):
        _, after = _resumed(cosine, tmp_path, CONFIG.replace(epochs=6))
    longer = _hand_loop_lrs(lambda optimizer: lr_scheduler.CosineAnnealingLR(optimizer, T_max=6), 6)
    assert [after.lrs[6 * epoch] for epoch in range(3)] == pytest.approx(longer[3:])
