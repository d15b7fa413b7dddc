"""A supervisor's callbacks and control reach the trainers built under it, and only those."""

from __future__ import annotations

import threading

import torch

from workbench.train import Callback, Supervision, TrainConfig, TrainControl, Trainer, supervised
from workbench.train.supervision import current_supervision


class Steps(Callback):
    def __init__(self):
        self.steps = []

    def on_step(self, metrics):
        self.steps.append(metrics["step"])


def _trainer(splits, **options):
    return Trainer(
        torch.nn.Linear(10, 1), torch.nn.functional.mse_loss, splits, TrainConfig(epochs=1), **options
    )


def test_a_trainer_built_under_supervision_reports_and_obeys(regression_splits):
    watcher, control = Steps(), TrainControl()
    with supervised(Supervision(callbacks=(watcher,), control=control)):
        trainer = _trainer(regression_splits)
    assert trainer.control is control
    control.stop()
    assert trainer.fit().status == "stopped"
    trainer.control.reset()
    trainer.fit()
    assert watcher.steps  # the supervisor's callback saw the steps


def test_the_trainers_own_control_and_callbacks_come_too(regression_splits):
    watcher, own, control, mine = Steps(), Steps(), TrainControl(), TrainControl()
    with supervised(Supervision(callbacks=(watcher,), control=control)):
        trainer = _trainer(regression_splits, callbacks=[own], control=mine)
    assert trainer.control is mine  # given explicitly: wins over the supervisor's
    trainer.fit()
    assert watcher.steps == own.steps and own.steps


def test_outside_the_block_and_on_other_threads_nothing_is_attached(regression_splits):
    seen = []
    with supervised(Supervision(callbacks=(Steps(),), control=TrainControl())):
        thread = threading.Thread(target=lambda: seen.append(current_supervision()))
        thread.start()
        thread.join()
    assert seen == [Supervision()]
    assert current_supervision() == Supervision()
    assert _trainer(regression_splits).events.callbacks == []
