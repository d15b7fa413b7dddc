"""``TrainConfig(ema_decay=...)``: val, test, early stopping and the model at the end get the moving average
of the weights; training goes on from the trained ones; a checkpoint keeps both and a resume continues alike.

The model is one weight per input under a loss with a constant gradient (the mean output of inputs of 1), so
plain SGD moves every weight by exactly -lr a step and the average has a closed form to compare with."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from workbench.parallel import DataParallel, FullyShardedDataParallel, launch
from workbench.train import EarlyStopping, OptimizerConfig, TrainConfig, TrainControl, Trainer
from workbench.train.checkpoint import load_checkpoint
from workbench.train.weight_average import WARMUP

START, LR = 2.0, 0.01


def _ones(n: int, sign: float = 1.0, width: int = 1) -> TensorDataset:
    return TensorDataset(sign * torch.ones(n, width), torch.zeros(n))


def _mean_output(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return output.mean()  # its gradient with respect to each weight is the input, 1


def _model(width: int = 1) -> torch.nn.Module:
    model = torch.nn.Linear(width, 1, bias=False)
    torch.nn.init.constant_(model.weight, START)
    return model


def _config(epochs: int = 5, decay: float | None = 0.9, **changes) -> TrainConfig:
    sgd = OptimizerConfig("sgd", lr=LR)
    return TrainConfig(epochs=epochs, batch_size=8, optimizer=sgd, ema_decay=decay, log_every=1, **changes)


def _average_after(steps: int, decay: float = 0.9, since: int = 0) -> float:
    """The closed form: the weight after step n is START - LR × n; the average starts at step `since`'s."""
    average = START - LR * since
    for n in range(steps - since):
        weight = START - LR * (since + n + 1)
        rate = min(decay, (1 + n) / (WARMUP + n))
        average = rate * average + (1 - rate) * weight
    return average


class _Evaluations:
    def __init__(self) -> None:
        self.val: list[float] = []
        self.test: list[float] = []

    def on_eval(self, metrics) -> None:
        getattr(self, metrics["split"]).append(metrics["loss"])


def test_val_test_and_the_model_at_the_end_are_the_average_and_training_goes_on_from_the_trained_weights(
    tmp_path,
):
    evaluations = _Evaluations()
    model = _model()
    splits = (_ones(64), _ones(16), _ones(16))  # 8 steps an epoch
    trainer = Trainer(model, _mean_output, splits, _config(), callbacks=[evaluations], run="ema",
                      runs_dir=tmp_path, progress=False)  # fmt: skip
    result = trainer.fit()
    assert result.step == 40
    expected = [_average_after(8 * epoch) for epoch in range(1, 6)]
    assert evaluations.val == pytest.approx(expected, rel=1e-5)
    assert evaluations.test == pytest.approx([expected[-1]], rel=1e-5)
    assert model.weight.item() == pytest.approx(expected[-1], rel=1e-5)
    assert trainer.evaluate("val")["loss"] == pytest.approx(expected[-1], rel=1e-5)  # after the fit
    saved = load_checkpoint(result.checkpoint)
    assert saved["model"]["weight"].item() == pytest.approx(START - LR * 40)  # the trained weight
    assert saved["weight_average"]["model"]["weight"].item() == pytest.approx(expected[-1], rel=1e-5)
    assert saved["weight_average"]["updates"] == 40
    assert expected[-1] - (START - LR * 40) > 0.03  # (the average lags the weights: the two are told apart)


def test_without_ema_decay_val_evaluates_the_trained_weights():
    evaluations = _Evaluations()
    model = _model()
    config = _config(epochs=2, decay=None)
    splits = (_ones(64), _ones(16))
    Trainer(model, _mean_output, splits, config, callbacks=[evaluations], progress=False).fit()
    assert evaluations.val == pytest.approx([START - LR * 8, START - LR * 16])
    assert model.weight.item() == pytest.approx(START - LR * 16)


def test_a_resumed_fit_ends_with_the_same_average_as_one_that_ran_straight_through(tmp_path):
    """With BatchNorm (its running statistics are averaged, its step counter kept) and momentum."""

    def fit(run: str, epochs: int, resume: bool = False) -> tuple[dict, dict]:
        torch.manual_seed(0)
        x = torch.randn(96, 4)
        data = TensorDataset(x, (x[:, 0] > 0).long())
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                    torch.nn.Linear(8, 2))  # fmt: skip
        sgd = OptimizerConfig("sgd", lr=0.1, momentum=0.9)
        config = TrainConfig(epochs=epochs, batch_size=16, optimizer=sgd, ema_decay=0.95)
        trainer = Trainer(model, torch.nn.functional.cross_entropy, (data, data), config, run=run,
                          runs_dir=tmp_path, progress=False)  # fmt: skip
        result = trainer.fit(resume=resume)
        return model.state_dict(), result.metrics["val"]

    straight, straight_val = fit("straight", 4)
    fit("resumed", 2)
    resumed, resumed_val = fit("resumed", 4, resume=True)
    assert straight.keys() == resumed.keys()
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name
    assert resumed_val == straight_val
    trained = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")["model"]
    assert not torch.equal(trained["0.weight"], straight["0.weight"])  # the model ended with the average


def test_a_resume_that_turns_the_average_on_starts_it_at_the_resumed_weights_and_says_so(tmp_path, capsys):
    splits = (_ones(64), _ones(16))
    Trainer(_model(), _mean_output, splits, _config(epochs=1, decay=None), run="later", runs_dir=tmp_path,
            progress=False).fit()  # fmt: skip
    model = _model()
    Trainer(model, _mean_output, splits, _config(epochs=3), run="later", runs_dir=tmp_path,
            progress=False).fit(resume=True)  # fmt: skip
    assert "with new settings: ema_decay None → 0.9" in capsys.readouterr().err
    assert model.weight.item() == pytest.approx(_average_after(24, since=8), rel=1e-5)


def test_early_stopping_judges_and_gives_back_the_averaged_weights_it_evaluated(tmp_path):
    """Val's inputs are -1: its loss, -weight, grows as training lowers the weight, so the first evaluation
    is the best; the model ends with that evaluation's averaged weight, not the trained weight of then."""
    model = _model()
    stopping = EarlyStopping("loss", patience=2)
    config = _config(epochs=10, early_stopping=stopping)
    trainer = Trainer(model, _mean_output, (_ones(64), _ones(16, sign=-1.0)), config, run="best",
                      runs_dir=tmp_path, progress=False)  # fmt: skip
    result = trainer.fit()
    assert (result.epoch, result.best_epoch) == (3, 0)
    best = _average_after(8)
    assert model.weight.item() == pytest.approx(best, rel=1e-5)
    assert result.metrics["val"]["loss"] == pytest.approx(-best, rel=1e-5)
    assert trainer.evaluate("val")["loss"] == pytest.approx(-best, rel=1e-5)
    kept = load_checkpoint(tmp_path / "best" / "best.pt")["model"]["weight"].item()
    assert kept == pytest.approx(best, rel=1e-5)
    assert best - (START - LR * 8) > 0.005  # (the average and the weight of then are told apart)


def test_a_stopped_fit_ends_with_the_average_of_the_steps_it_took():
    control = TrainControl()

    class StopAt:
        def on_step(self, metrics) -> None:
            if metrics["step"] == 11:
                control.stop()

    model = _model()
    result = Trainer(model, _mean_output, _ones(64), _config(), callbacks=[StopAt()], control=control,
                     progress=False).fit()  # fmt: skip
    assert (result.status, result.step) == ("stopped", 11)
    assert model.weight.item() == pytest.approx(_average_after(11), rel=1e-5)


def _average_on_ranks(strategy, tmp_path) -> list[tuple[list[float], list[float]]]:
    """4 weights, each moved by -lr a step (sharded 2 and 2 under FSDP), one epoch, then one more resumed
    (the average gathered into the checkpoint comes back to each rank's part; an FSDP resume of plain SGD,
    whose optimizer keeps no state, stopped in torch's loader before the fix); every rank's whole weight
    after the fit, and the checkpoint's average."""
    splits = (_ones(64, width=4), _ones(16, width=4))  # 64 samples over 2 ranks of batch 8: 4 steps an epoch
    for epochs in (1, 2):
        model = _model(width=4)
        Trainer(model, _mean_output, splits, _config(epochs=epochs), strategy=strategy, run="ranks",
                runs_dir=tmp_path, progress=False).fit(resume=epochs == 2)  # fmt: skip
    weight = model.weight
    full = weight.full_tensor() if hasattr(weight, "full_tensor") else weight  # FSDP's DTensor
    strategy.barrier()  # rank 0 has written the checkpoint
    saved = load_checkpoint(tmp_path / "ranks" / "checkpoint.pt")["weight_average"]["model"]["weight"]
    ranks: list = [None, None]
    torch.distributed.all_gather_object(ranks, (full.detach().flatten().tolist(), saved.flatten().tolist()))
    return ranks


@pytest.mark.parametrize("strategy", [DataParallel(), FullyShardedDataParallel()], ids=["ddp", "fsdp"])
def test_on_two_ranks_each_averages_its_part_and_a_checkpoint_gathers_the_whole_average_and_gives_it_back(
    strategy, tmp_path
):
    expected = [pytest.approx(_average_after(8), rel=1e-5)] * 4
    for weights, saved in launch(_average_on_ranks, 2, strategy=strategy, args=(tmp_path,), verbose=False):
        assert weights == expected
        assert saved == expected


def test_a_bad_decay_is_named_with_what_it_accepts():
    for bad in (1.0, 0, -0.5, "0.99", True):
        with pytest.raises(ValueError, match=r"ema_decay must be a finite number > 0 and < 1, got"):
            TrainConfig(ema_decay=bad)
    with pytest.raises(TypeError, match=r"write ema_decay=0\.999"):
        TrainConfig(model_ema_decay=0.999)  # timm's name
