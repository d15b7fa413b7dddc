"""``TrainConfig(early_stopping=EarlyStopping(...))``: the fit stops once the watched val metric has not
improved for `patience` epochs, and ends with the best epoch's weights (the test split judges those; a named
run keeps them in best.pt, where a resume finds them). Before, there was no way to stop early, and a
Lightning `EarlyStopping` in `callbacks=` failed at the fit's first event with "missing 1 required positional
argument: 'pl_module'"."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from workbench.train import EarlyStopping, TrainConfig, TrainControl, Trainer, read_metrics
from workbench.train.best_epoch import BEST_FILE

X = torch.randn(96, 6, generator=torch.Generator().manual_seed(0))
DATA = TensorDataset(X, (X[:, 0] > 0).long())


class Scripted:
    """A val metric that gives `values` one evaluation after another, higher better (as torchmetrics
    metrics say with `higher_is_better`)."""

    higher_is_better = True

    def __init__(self, values: list[float]) -> None:
        self.values = list(values)

    def sums(self, outputs, batch) -> torch.Tensor:
        return torch.ones(1, dtype=torch.float64)

    def compute(self, totals: torch.Tensor) -> float:
        return self.values.pop(0)


class Snapshots:
    """The model's weights after each epoch's evaluation, by epoch."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.weights = model, {}

    def on_eval(self, event) -> None:
        if event["split"] == "val":
            self.weights[event["epoch"]] = {k: v.clone() for k, v in self.model.state_dict().items()}


def _same(model: nn.Module, weights: dict) -> bool:
    return all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())


def _fit(scores, rule: EarlyStopping, epochs: int = 10, resume: bool = False, extra=(), **options):
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    snapshots = Snapshots(model)
    config = TrainConfig(epochs=epochs, batch_size=32, early_stopping=rule)
    trainer = Trainer(
        model, F.cross_entropy, (DATA, DATA), config, metrics={"score": Scripted(scores)},
        callbacks=[snapshots, *extra], progress=False, **options,
    )  # fmt: skip
    return trainer, trainer.fit(resume=resume), snapshots


def test_the_fit_stops_when_the_patience_runs_out_and_ends_with_the_best_epochs_weights(capsys):
    trainer, result, snapshots = _fit([0.5, 0.7, 0.6, 0.65, 0.9, 0.9], EarlyStopping("score", patience=2))
    assert (result.status, result.epoch, result.best_epoch) == ("finished", 4, 1)
    assert sorted(snapshots.weights) == [0, 1, 2, 3]
    assert _same(trainer.model, snapshots.weights[1]) and not _same(trainer.model, snapshots.weights[3])
    assert result.metrics["val"]["score"] == 0.7  # the best epoch's val, as the model now holds it
    assert capsys.readouterr().err.strip() == (
        "early stopping: stopped after epoch 3: 2 epochs without beating val score 0.7 (epoch 1); the model "
        "has epoch 1's weights"
    )


def test_min_delta_is_what_an_improvement_must_beat_by_and_restore_best_false_keeps_the_last_weights():
    rule = EarlyStopping("score", patience=2, min_delta=0.1, restore_best=False)
    trainer, result, snapshots = _fit([0.5, 0.55, 0.65, 0.7, 0.72, 0.9], rule)
    assert (result.epoch, result.best_epoch) == (5, 2)  # 0.55, 0.7 and 0.72 beat the best by less than 0.1
    assert _same(trainer.model, snapshots.weights[4])
    assert result.metrics["val"]["score"] == 0.72  # the last epoch's: the model has its weights


def test_without_a_stop_the_model_still_ends_with_the_best_epochs_weights():
    trainer, result, snapshots = _fit([0.5, 0.9, 0.6], EarlyStopping("score", patience=5), epochs=3)
    assert (result.epoch, result.best_epoch) == (3, 1)
    assert _same(trainer.model, snapshots.weights[1])


def test_the_test_split_and_the_val_metrics_are_the_restored_models(tmp_path):
    """On real losses: what fit reports for val and test is what the model it leaves computes."""
    torch.manual_seed(0)
    x = torch.randn(600, 20)
    y = (x[:, :2].sum(1) + torch.randn(600) > 0).long()
    train, val, test = (TensorDataset(x[i : i + 200], y[i : i + 200]) for i in (0, 200, 400))
    model = nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 2))
    config = TrainConfig(epochs=100, batch_size=16, early_stopping=EarlyStopping(patience=3))
    trainer = Trainer(model, F.cross_entropy, (train, val, test), config, run="r", runs_dir=tmp_path)
    result = trainer.fit()
    assert result.best_epoch < result.epoch - 3 < 96  # it stopped, three epochs after the best one
    logged = [e for e in read_metrics(tmp_path / "r", kind="eval") if e["split"] == "val"]
    assert (
        result.metrics["val"]["loss"] == logged[result.best_epoch]["loss"] == min(e["loss"] for e in logged)
    )
    assert trainer.evaluate("val")["loss"] == pytest.approx(result.metrics["val"]["loss"], rel=1e-6)
    assert trainer.evaluate("test")["loss"] == pytest.approx(result.metrics["test"]["loss"], rel=1e-6)
    best = torch.load(tmp_path / "r" / BEST_FILE, weights_only=True)
    assert (best["metric"], best["epoch"], best["value"]) == (
        "loss",
        result.best_epoch,
        logged[result.best_epoch]["loss"],
    )
    fresh = nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 2))
    fresh.load_state_dict(best["model"])  # the line the docs give
    assert _same(fresh, model.state_dict())
    end = read_metrics(tmp_path / "r", kind="fit_end")[-1]
    assert end["early_stopping"] == {
        "metric": "loss",
        "best": best["value"],
        "best_epoch": best["epoch"],
        "best_step": best["step"],
        "stopped": True,
        "restored": True,
    }
    config_json = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config_json["early_stopping"]["patience"] == 3  # the run's record says how it stopped
    assert TrainConfig.from_dict(config_json).early_stopping == EarlyStopping(patience=3)


def test_a_resumed_fit_counts_the_patience_from_the_best_epoch_before_it(tmp_path, capsys):
    control = TrainControl()

    class StopAfterEpoch2:
        def on_eval(self, event):
            if event["split"] == "val" and event["epoch"] == 2:
                control.stop()

    rule, where = EarlyStopping("score", patience=2), {"run": "r", "runs_dir": tmp_path}
    _, stopped, before = _fit([0.5, 0.7, 0.6], rule, control=control, extra=[StopAfterEpoch2()], **where)
    assert (stopped.status, stopped.epoch) == ("stopped", 3)  # the stop came before the patience ran out
    trainer, result, _ = _fit([0.65, 0.9], rule, resume=True, **where)
    assert (result.status, result.epoch, result.best_epoch) == ("finished", 4, 1)  # 0.65 was the 2nd in a row
    assert _same(trainer.model, before.weights[1])  # from best.pt: the best came before the resume
    assert (
        "stopped after epoch 3: 2 epochs without beating val score 0.7 (epoch 1)" in capsys.readouterr().err
    )
    again = Trainer(
        nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)), F.cross_entropy, (DATA, DATA),
        TrainConfig(epochs=10, batch_size=32), progress=False, overwrite=True, **where,
    )  # fmt: skip
    again.fit()
    assert not (tmp_path / "r" / BEST_FILE).exists()  # a run started over keeps no other fit's best epoch


def test_under_two_ranks_each_stops_at_the_same_epoch_with_its_part_of_the_best_weights():
    """FSDP holds each parameter as a shard on each rank (a DTensor): each rank keeps and gives back its own
    shard; the val loss of the model it leaves is the best epoch's, on every rank."""
    from workbench.parallel import FullyShardedDataParallel, launch

    results = launch(_sharded_fit, 2, strategy=FullyShardedDataParallel())
    assert len(results) == 2
    for best_epoch, epochs, evaluated, logged in results:
        assert (best_epoch, epochs) == (1, 4)
        assert evaluated == pytest.approx(logged, rel=1e-6)


def _sharded_fit(strategy):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    losses = {}

    class ValLosses:
        def on_eval(self, event):
            if event["split"] == "val":
                losses[event["epoch"]] = event["loss"]

    config = TrainConfig(epochs=10, batch_size=16, early_stopping=EarlyStopping("score", patience=2))
    trainer = Trainer(
        model, F.cross_entropy, (DATA, DATA), config, metrics={"score": Scripted([0.5, 0.7, 0.6, 0.65, 0.9])},
        callbacks=[ValLosses()], strategy=strategy, progress=False,
    )  # fmt: skip
    result = trainer.fit()
    mine = (result.best_epoch, result.epoch, trainer.evaluate("val")["loss"], losses[result.best_epoch])
    return strategy.gather_object(mine)  # every rank's


@pytest.mark.parametrize(
    ("rule", "options", "said"),
    [
        (
            EarlyStopping(), {"splits": DATA},
            "early_stopping watches the val split's loss after each epoch, and the data has no val split: "
            "give one, Trainer(model, loss_fn, (train, val), config), or early_stopping=None",
        ),
        (
            EarlyStopping("f1"), {},
            "early_stopping watches metric='f1', which the Trainer does not compute; it computes 'accuracy', "
            "'loss' on val (accuracy for classification; give another as metrics={'f1': fn})",
        ),
        (
            EarlyStopping("mine"), {"metrics": {"mine": lambda outputs, batch: 0.0}},
            "early_stopping cannot tell whether a higher or a lower mine is better: give "
            "EarlyStopping('mine', mode='max') (an accuracy, a score) or mode='min' (an error, a distance)",
        ),
    ],
    ids=["no val split", "a metric not computed", "a function of yours without mode"],
)  # fmt: skip
def test_a_rule_that_cannot_be_followed_is_refused_when_the_trainer_is_built(rule, options, said):
    arguments = {"splits": (DATA, DATA), **options}
    model = nn.Linear(6, 2)
    with pytest.raises(ValueError) as refused:
        Trainer(model, F.cross_entropy, config=TrainConfig(early_stopping=rule), **arguments)
    assert str(refused.value) == said


def test_accuracy_watched_on_a_regression_is_refused_at_the_first_evaluation():
    data = TensorDataset(X, X.sum(1, keepdim=True))
    config = TrainConfig(epochs=3, batch_size=32, early_stopping=EarlyStopping("accuracy"))
    trainer = Trainer(nn.Linear(6, 1), F.mse_loss, (data, data), config, progress=False)
    with pytest.raises(
        ValueError, match=r"^early_stopping watches metric='accuracy', and val gave only 'loss'"
    ):
        trainer.fit()


@pytest.mark.parametrize(
    ("write", "said"),
    [
        (lambda: TrainConfig(patience=3), "write early_stopping=EarlyStopping(patience=3)"),
        (
            lambda: EarlyStopping(monitor="accuracy"),
            "EarlyStopping() takes no argument monitor; write metric=",
        ),
        (lambda: EarlyStopping("val_loss"), "write metric='loss'"),
        (lambda: TrainConfig(early_stopping=5), "write early_stopping=EarlyStopping('loss', patience=5)"),
    ],
    ids=["patience in TrainConfig", "Lightning's monitor", "a split prefix", "a number"],
)
def test_a_setting_in_another_trainers_words_says_what_to_write(write, said):
    with pytest.raises((TypeError, ValueError)) as refused:
        write()
    assert said in str(refused.value)


def test_lightnings_early_stopping_in_callbacks_prints_the_setting_and_the_line_pasted_trains():
    from lightning.pytorch.callbacks import EarlyStopping as LightningEarlyStopping

    given = LightningEarlyStopping(monitor="val_acc", patience=4, mode="max", min_delta=0.01)
    with pytest.raises(TypeError) as refused:
        Trainer(nn.Linear(6, 2), F.cross_entropy, (DATA, DATA), callbacks=[given])
    said = str(refused.value)
    assert said.startswith("callbacks[0] is Lightning's EarlyStopping, whose hooks take (trainer, pl_module)")
    printed = said.split("weights: ")[1].removesuffix(" (workbench.train's EarlyStopping)")
    keywords = eval(f"dict({printed})", {"TrainConfig": TrainConfig, "EarlyStopping": EarlyStopping})
    assert keywords["config"].early_stopping == EarlyStopping(
        "accuracy", patience=4, min_delta=0.01, mode="max"
    )
    config = keywords["config"].replace(epochs=2, batch_size=32)
    assert Trainer(nn.Linear(6, 2), F.cross_entropy, (DATA, DATA), config, progress=False).fit().epoch == 2


def test_our_early_stopping_given_as_a_callback_says_it_is_a_setting():
    with pytest.raises(TypeError, match=r"is an EarlyStopping, which is a setting, not a callback: write "):
        Trainer(nn.Linear(6, 2), F.cross_entropy, (DATA, DATA), callbacks=[EarlyStopping(patience=4)])


def test_the_command_line_stops_early_and_names_the_epoch_kept(tmp_path, capsys):
    from workbench.cli import main

    args = [
        "train",
        "digits-mlp",
        "--epochs",
        "60",
        "--patience",
        "2",
        "--run",
        "es",
        "--runs-dir",
        str(tmp_path),
    ]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "early stopping: stopped after epoch " in err and (tmp_path / "es" / BEST_FILE).is_file()
    end = read_metrics(tmp_path / "es", kind="fit_end")[-1]
    assert end["epoch"] < 60 and end["early_stopping"]["stopped"]


def test_a_launch_given_a_lightning_callback_refuses_it_before_any_process_starts():
    from lightning.pytorch.callbacks import LearningRateMonitor

    from workbench.parallel import Launch

    with pytest.raises(TypeError, match=r"^callbacks\[0\] is Lightning's LearningRateMonitor, whose hooks "):
        Launch(_sharded_fit, 2, callbacks=(c for c in [LearningRateMonitor()]))


def test_a_val_a_crash_cut_short_is_evaluated_again_when_the_fit_resumes_and_judged(tmp_path):
    """A crash during the val after an epoch's checkpoint (the OOM killer, a lost node) left that val without
    a value. The resume counted it as an evaluation that did not improve: with patience=1 the resumed fit
    stopped at once and kept epoch 0, whatever epoch 1's val would have said. Now that val is evaluated
    again on resume and judged (as a plateau scheduler's is)."""

    class CrashWhenOut(Scripted):
        def compute(self, totals: torch.Tensor) -> float:
            if not self.values:
                raise RuntimeError("node lost")
            return super().compute(totals)

    def fit(scores: list[float], resume: bool):
        config = TrainConfig(epochs=4, batch_size=32, early_stopping=EarlyStopping("score", patience=1))
        trainer = Trainer(
            nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)), F.cross_entropy, (DATA, DATA), config,
            metrics={"score": CrashWhenOut(scores)}, run="r", runs_dir=tmp_path, progress=False,
        )  # fmt: skip
        return trainer.fit(resume=resume)

    with pytest.raises(RuntimeError, match="node lost"):
        fit([0.5], resume=False)  # epoch 0's val: 0.5; epoch 1's, after its checkpoint, crashes
    result = fit([0.9, 0.8], resume=True)  # epoch 1's val again: 0.9, the best; epoch 2's: 0.8
    assert (result.epoch, result.best_epoch) == (3, 1)
    val = [(e["epoch"], e["score"]) for e in read_metrics(tmp_path / "r", "eval") if e["split"] == "val"]
    assert val == [(0, 0.5), (1, 0.9), (2, 0.8)]  # evaluated once, judged and logged
