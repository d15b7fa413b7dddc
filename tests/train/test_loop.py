import math
import threading
import time

import pytest
import torch
from torch.nn import functional
from torch.utils.data import TensorDataset

from workbench import models
from workbench.data import ShardedLoader
from workbench.train import (
    Callback,
    NonFiniteLossError,
    OptimizerConfig,
    TrainConfig,
    TrainControl,
    Trainer,
    load_checkpoint,
    read_metrics,
)


def _mlp(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    return models.mlp(64, 10, hidden=(32,), dropout=dropout)


def _hand_written_loop(model, splits, config, fused=True):
    """What a PyTorch user writes by hand: the reference the Trainer must match exactly (with the optimizer
    the Trainer builds: torch's fused Adam), or closely (with torch's default Adam: `fused=False`)."""
    torch.manual_seed(config.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.optimizer.lr, fused=fused)
    loader = ShardedLoader(splits.train, config.batch_size, shuffle=True, seed=config.seed)
    for epoch in range(config.epochs):
        loader.set_epoch(epoch)
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
    return model


class Recorder(Callback):
    def __init__(self):
        self.steps, self.evals, self.starts, self.ends = [], [], [], []

    def on_fit_start(self, info):
        self.starts.append(info)

    def on_step(self, metrics):
        self.steps.append(metrics)

    def on_eval(self, metrics):
        self.evals.append(metrics)

    def on_fit_end(self, summary):
        self.ends.append(summary)


def _assert_same_parameters(a, b):
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_same_final_parameters_as_a_hand_written_loop(digits_splits):
    config = TrainConfig(epochs=3, batch_size=64, optimizer=OptimizerConfig("adam", lr=3e-3), seed=5)
    trained = _mlp(dropout=0.2)
    Trainer(trained, functional.cross_entropy, digits_splits, config).fit()
    reference = _hand_written_loop(_mlp(dropout=0.2), digits_splits, config)
    _assert_same_parameters(trained, reference)
    # torch's default Adam (one parameter at a time) is the same math, to float rounding
    default = _hand_written_loop(_mlp(dropout=0.2), digits_splits, config, fused=False)
    for p, q in zip(trained.parameters(), default.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_accumulation_equals_one_big_batch(regression_splits):
    big = TrainConfig(epochs=2, batch_size=96, optimizer=OptimizerConfig("sgd", lr=0.05), log_every=100)
    small = big.replace(batch_size=32, accumulate=3)
    torch.manual_seed(0)
    a, b = models.linear(10), models.linear(10)
    b.load_state_dict(a.state_dict())
    Trainer(a, functional.mse_loss, regression_splits, big).fit()
    Trainer(b, functional.mse_loss, regression_splits, small).fit()
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_events_carry_the_documented_metrics(digits_splits):
    recorder = Recorder()
    config = TrainConfig(epochs=2, batch_size=128, log_every=2)
    result = Trainer(_mlp(), functional.cross_entropy, digits_splits, config, callbacks=[recorder]).fit()
    steps_per_epoch = math.ceil(len(digits_splits.train) / 128)
    assert recorder.starts[0]["total_steps"] == 2 * steps_per_epoch == result.step
    assert {"step", "epoch", "loss", "lr", "samples_per_s", "grad_norm", "rank", "time"} <= set(
        recorder.steps[0]
    )
    # every 2nd step plus the last step of each epoch
    assert [m["step"] for m in recorder.steps] == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24]
    assert all(m["samples_per_s"] > 0 and m["grad_norm"] > 0 for m in recorder.steps)
    # val after each epoch, test once when the fit finished
    assert [(m["split"], m["epoch"]) for m in recorder.evals] == [("val", 0), ("val", 1), ("test", 1)]
    assert 0 <= recorder.evals[-1]["accuracy"] <= 1
    assert recorder.ends[0]["status"] == "finished" and recorder.ends[0]["error"] is None
    assert result.metrics["test"] == {k: recorder.evals[-1][k] for k in ("loss", "accuracy")}


def test_metrics_log_persists_the_run(tmp_path, digits_splits):
    config = TrainConfig(epochs=2, batch_size=256)
    recorder = Recorder()
    Trainer(
        _mlp(),
        functional.cross_entropy,
        digits_splits,
        config,
        callbacks=[recorder],
        run="r1",
        runs_dir=tmp_path,
    ).fit()
    steps = read_metrics(tmp_path / "r1", kind="step")
    assert [s["loss"] for s in steps] == [m["loss"] for m in recorder.steps]
    kinds = [e["event"] for e in read_metrics(tmp_path / "r1")]
    assert kinds[0] == "fit_start" and kinds[-1] == "fit_end" and kinds.count("eval") == 3  # val, val, test
    assert read_metrics(tmp_path / "r1", kind="fit_end")[0]["status"] == "finished"
    assert (tmp_path / "r1" / "config.json").is_file() and (tmp_path / "r1" / "checkpoint.pt").is_file()
    with pytest.raises(ValueError, match="kind='steps'"):
        read_metrics(tmp_path / "r1", kind="steps")
    with pytest.raises(FileNotFoundError):
        read_metrics(tmp_path / "nothing")


class StopAt(Callback):
    def __init__(self, control, step):
        self.control, self.step = control, step

    def on_step(self, metrics):
        if metrics["step"] == self.step:
            self.control.stop()


def test_resume_from_checkpoint_equals_uninterrupted_training(tmp_path, digits_splits):
    config = TrainConfig(epochs=3, batch_size=64, optimizer=OptimizerConfig("adamw", lr=3e-3), seed=1)
    uninterrupted = _mlp(dropout=0.3)
    Trainer(uninterrupted, functional.cross_entropy, digits_splits, config).fit()

    control = TrainControl()
    first = Trainer(
        _mlp(dropout=0.3),
        functional.cross_entropy,
        digits_splits,
        config,
        control=control,
        callbacks=[StopAt(control, 30)],
        run="resume",
        runs_dir=tmp_path,
    )
    stopped = first.fit()
    assert stopped.status == "stopped" and stopped.step == 30 and stopped.checkpoint is not None
    assert load_checkpoint(stopped.checkpoint)["step"] == 30  # mid-epoch: 23 steps per epoch

    resumed_model = _mlp(seed=99, dropout=0.3)  # different init: everything must come from the checkpoint
    torch.manual_seed(1234)  # a disturbed global RNG: the checkpoint's RNG state must win
    second = Trainer(
        resumed_model, functional.cross_entropy, digits_splits, config, run="resume", runs_dir=tmp_path
    )
    result = second.fit(resume=True)
    assert result.status == "finished" and result.step == 3 * 23
    _assert_same_parameters(resumed_model, uninterrupted)
    assert len(read_metrics(tmp_path / "resume", kind="fit_start")) == 2


def test_resume_refuses_a_different_data_order(tmp_path, digits_splits):
    config = TrainConfig(epochs=1, batch_size=64)
    Trainer(_mlp(), functional.cross_entropy, digits_splits, config, run="r", runs_dir=tmp_path).fit()
    other = Trainer(
        _mlp(),
        functional.cross_entropy,
        digits_splits,
        config.replace(batch_size=32),
        run="r",
        runs_dir=tmp_path,
    )
    with pytest.raises(ValueError, match="batch_size was 64 there and is 32 now"):
        other.fit(resume=True)


def test_resume_true_needs_a_run_name(digits_splits):
    with pytest.raises(ValueError, match="resume=True needs a run name"):
        Trainer(_mlp(), functional.cross_entropy, digits_splits).fit(resume=True)


def test_fit_again_trains_the_epochs_again_on_the_model_as_it_is(tmp_path, digits_splits):
    config = TrainConfig(epochs=1, batch_size=256, optimizer=OptimizerConfig("adam", lr=1e-3))
    trainer = Trainer(_mlp(), functional.cross_entropy, digits_splits, config, progress=False)
    first = trainer.fit()
    trained = [p.detach().clone() for p in trainer.model.parameters()]
    second = trainer.fit()
    assert second.step == first.step == 6  # steps counted from the start again
    adam_steps = {float(state["step"]) for state in trainer.optimizer.state.values()}
    assert adam_steps == {12.0}  # the optimizer's state carried on
    assert not any(torch.equal(a, b) for a, b in zip(trained, trainer.model.parameters(), strict=True))
    named = Trainer(
        _mlp(),
        functional.cross_entropy,
        digits_splits,
        config,
        run="again",
        runs_dir=tmp_path,
        progress=False,
    )
    named.fit()
    with pytest.raises(ValueError, match=r"continue it with fit\(resume=True\)"):
        named.fit()


class Explode(Callback):
    """Makes the next steps produce NaN by poisoning a weight after step `at`."""

    def __init__(self, model, at):
        self.model, self.at = model, at

    def on_step(self, metrics):
        if metrics["step"] == self.at:
            with torch.no_grad():
                self.model[1].weight[0, 0] = float("nan")


def test_nan_loss_stops_with_a_clear_message_and_keeps_the_last_good_checkpoint(tmp_path, digits_splits):
    model = _mlp()
    recorder = Recorder()
    config = TrainConfig(epochs=3, batch_size=64, log_every=1)
    trainer = Trainer(
        model,
        functional.cross_entropy,
        digits_splits,
        config,
        run="nan",
        runs_dir=tmp_path,
        callbacks=[Explode(model, at=30), recorder],
    )
    with pytest.raises(NonFiniteLossError, match=r"loss became nan at step 31, epoch 1; .*checkpoint") as err:
        trainer.fit()
    assert "nan" in str(err.value) and str(tmp_path / "nan" / "checkpoint.pt") in str(err.value)
    assert load_checkpoint(tmp_path / "nan" / "checkpoint.pt")["step"] == 23  # end of epoch 0, not after
    assert recorder.ends[0]["status"] == "failed" and "NonFiniteLossError" in recorder.ends[0]["error"]
    assert read_metrics(tmp_path / "nan", kind="fit_end")[0]["status"] == "failed"


class SetLr(Callback):
    def __init__(self, control, at, lr):
        self.control, self.at, self.lr = control, at, lr

    def on_step(self, metrics):
        if metrics["step"] == self.at:
            self.control.set_lr(self.lr)
            self.control.set_clipping(norm=0.5)


def test_lr_and_clipping_changes_apply_from_the_next_step(digits_splits):
    control = TrainControl()
    recorder = Recorder()
    config = TrainConfig(epochs=1, batch_size=64, optimizer=OptimizerConfig("sgd", lr=0.1), log_every=1)
    trainer = Trainer(
        _mlp(),
        functional.cross_entropy,
        digits_splits,
        config,
        control=control,
        callbacks=[SetLr(control, 5, 0.01), recorder],
    )
    trainer.fit()
    lrs = [m["lr"] for m in recorder.steps]
    assert lrs[:5] == [0.1] * 5 and lrs[5:] == [0.01] * (len(lrs) - 5)
    assert trainer.settings.clip_norm == 0.5


def test_clipping_by_norm_bounds_the_update(regression_splits):
    torch.manual_seed(0)
    model = models.linear(10)
    before = [p.detach().clone() for p in model.parameters()]
    config = TrainConfig(epochs=1, batch_size=480, optimizer=OptimizerConfig("sgd", lr=1.0), clip_norm=1e-3)
    recorder = Recorder()
    Trainer(model, functional.mse_loss, regression_splits, config, callbacks=[recorder]).fit()
    moved = torch.sqrt(sum(((p - b) ** 2).sum() for p, b in zip(model.parameters(), before, strict=True)))
    assert recorder.steps[0]["grad_norm"] > 1e-3  # the raw norm is reported, before clipping
    assert moved <= 1e-3 * (1 + 1e-5)  # one step of lr 1 with a gradient clipped to norm 1e-3


def test_clipping_by_value_bounds_every_element(regression_splits):
    torch.manual_seed(0)
    model = models.linear(10)
    before = [p.detach().clone() for p in model.parameters()]
    config = TrainConfig(epochs=1, batch_size=480, optimizer=OptimizerConfig("sgd", lr=1.0), clip_value=1e-3)
    Trainer(model, functional.mse_loss, regression_splits, config).fit()
    assert all(((p - b).abs() <= 1e-3 + 1e-7).all() for p, b in zip(model.parameters(), before, strict=True))


def test_pause_holds_at_a_step_boundary_until_resumed(digits_splits):
    control = TrainControl()
    recorder = Recorder()

    class PauseAt(Callback):
        def on_step(self, metrics):
            if metrics["step"] == 3:
                control.pause()

    config = TrainConfig(epochs=1, batch_size=64, log_every=1)
    trainer = Trainer(
        _mlp(),
        functional.cross_entropy,
        digits_splits,
        config,
        control=control,
        callbacks=[PauseAt(), recorder],
    )
    thread = threading.Thread(target=trainer.fit)
    thread.start()
    deadline = time.monotonic() + 10
    while trainer.step < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    assert trainer.step == 3 and thread.is_alive()
    control.resume()
    thread.join(10)
    assert not thread.is_alive() and trainer.step == 23


def test_stop_during_a_pause_ends_training(digits_splits):
    control = TrainControl()
    control.pause()
    trainer = Trainer(_mlp(), functional.cross_entropy, digits_splits, TrainConfig(epochs=1), control=control)
    thread = threading.Thread(target=trainer.fit)
    thread.start()
    time.sleep(0.2)
    assert trainer.step == 0 and thread.is_alive()
    control.stop()
    thread.join(10)
    assert not thread.is_alive() and trainer.step == 0


def test_a_stopped_fit_is_not_scored_on_the_test_split(digits_splits):
    recorder, control = Recorder(), TrainControl()
    recorder.on_eval = lambda metrics: (recorder.evals.append(metrics), control.stop())
    config = TrainConfig(epochs=3, batch_size=128)
    trainer = Trainer(
        _mlp(), functional.cross_entropy, digits_splits, config, callbacks=[recorder], control=control
    )
    result = trainer.fit()
    assert result.status == "stopped" and [(m["split"], m["epoch"]) for m in recorder.evals] == [("val", 0)]
    assert "test" not in result.metrics and "val" in result.metrics


def test_bf16_autocast_trains_on_cpu(digits_splits):
    config = TrainConfig(
        epochs=3, batch_size=64, optimizer=OptimizerConfig("adam", lr=3e-3), precision="bf16"
    )
    result = Trainer(_mlp(), functional.cross_entropy, digits_splits, config).fit()
    assert result.metrics["test"]["accuracy"] > 0.85


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_fp16_on_cpu_is_refused_naming_the_field(digits_splits):
    with pytest.raises(ValueError, match="precision='fp16' needs a CUDA device"):
        Trainer(_mlp(), functional.cross_entropy, digits_splits, TrainConfig(precision="fp16", device="cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_cuda_without_a_gpu_is_refused(digits_splits):
    with pytest.raises(ValueError, match="device='cuda'"):
        Trainer(_mlp(), functional.cross_entropy, digits_splits, TrainConfig(device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fp16_with_grad_scaler_trains_on_gpu(digits_splits):
    config = TrainConfig(
        epochs=3, batch_size=64, optimizer=OptimizerConfig("adam", lr=3e-3), precision="fp16"
    )
    trainer = Trainer(_mlp(), functional.cross_entropy, digits_splits, config)
    assert trainer.scaler is not None
    assert trainer.fit().metrics["test"]["accuracy"] > 0.85


@pytest.mark.parametrize("run", ["", "a/b", "..", 3])
def test_bad_run_name(run, digits_splits):
    with pytest.raises(ValueError, match="run must be"):
        Trainer(_mlp(), functional.cross_entropy, digits_splits, run=run)


def test_evaluate_unknown_split(digits_splits):
    with pytest.raises(ValueError, match="split='dev'"):
        Trainer(_mlp(), functional.cross_entropy, digits_splits).evaluate("dev")


def test_empty_training_split_is_refused(digits_splits):
    empty = type(digits_splits)(
        digits_splits.train.subset(torch.arange(0)), digits_splits.val, digits_splits.test
    )
    with pytest.raises(ValueError, match=r"splits\.train is empty"):
        Trainer(_mlp(), functional.cross_entropy, empty)


def test_custom_optimizer_factory_plugs_in(digits_splits):
    made = []

    def factory(params, config):
        made.append(config.lr)
        return torch.optim.RMSprop(params, lr=config.lr)

    trainer = Trainer(
        _mlp(), functional.cross_entropy, digits_splits, TrainConfig(epochs=1), optimizer_factory=factory
    )
    assert isinstance(trainer.optimizer, torch.optim.RMSprop) and made == [1e-3]
    assert trainer.fit().status == "finished"


def test_a_fresh_fit_starts_the_log_over_and_a_resumed_one_appends(tmp_path, digits_splits):
    config = TrainConfig(epochs=1, batch_size=256)
    for overwrite in (False, True):  # the second: asked to start the run over (refused otherwise)
        Trainer(
            _mlp(), functional.cross_entropy, digits_splits, config, run="again", runs_dir=tmp_path,
            overwrite=overwrite,
        ).fit()  # fmt: skip
    assert len(read_metrics(tmp_path / "again", kind="fit_start")) == 1
    longer = config.replace(epochs=2)
    Trainer(_mlp(), functional.cross_entropy, digits_splits, longer, run="again", runs_dir=tmp_path).fit(
        resume=True
    )
    assert [e["start_step"] for e in read_metrics(tmp_path / "again", kind="fit_start")] == [0, 6]


def test_empty_val_and_test_splits_are_skipped(digits_splits):
    recorder = Recorder()
    empty = digits_splits.val.subset(torch.arange(0))
    splits = type(digits_splits)(digits_splits.train, empty, empty)
    result = Trainer(
        _mlp(), functional.cross_entropy, splits, TrainConfig(epochs=1), callbacks=[recorder]
    ).fit()
    assert result.status == "finished" and result.metrics == {} and recorder.evals == []


def test_a_nan_between_logged_steps_is_caught_at_the_next_one(tmp_path, digits_splits):
    model = _mlp()
    config = TrainConfig(epochs=3, batch_size=64, log_every=10)
    trainer = Trainer(
        model,
        functional.cross_entropy,
        digits_splits,
        config,
        run="nan10",
        runs_dir=tmp_path,
        callbacks=[Explode(model, at=30)],
    )
    with pytest.raises(
        NonFiniteLossError, match=r"loss became nan in steps 31-40 \(checked every log_every\)"
    ):
        trainer.fit()
    assert load_checkpoint(tmp_path / "nan10" / "checkpoint.pt")["step"] == 23


def test_a_nan_loss_from_missing_values_in_the_data_names_the_data_not_the_lr():
    """A table with gaps (NaN in a column, in most rows): the loss is NaN from the first step, and a lower
    lr (the guard's usual advice) would not help."""
    x = torch.randn(96, 5)
    x[::3, 2] = float("nan")  # a third of the rows miss feature 2
    y = (x[:, 0] > 0).long()
    config = TrainConfig(epochs=1, batch_size=16, log_every=2)
    with pytest.raises(NonFiniteLossError) as raised:
        Trainer(torch.nn.Linear(5, 2), functional.cross_entropy, TensorDataset(x, y), config).fit()
    said = str(raised.value)
    assert (
        "loss became nan in steps 1-2 (checked every log_every), epoch 0: step 2's batch[0] ((16, 5) " in said
    )
    assert "float32) holds nan in " in said and " of 80 values;" in said, said
    assert said.endswith(
        "Clean the data before training (drop those samples, or fill them: torch.nan_to_num(x))."
    )
    assert "lower lr" not in said and "; step 1 had already updated the weights" in said


def test_stop_after_an_unchecked_nan_raises_instead_of_saving(tmp_path, digits_splits):
    model = _mlp()
    control = TrainControl()

    config = TrainConfig(epochs=3, batch_size=64, log_every=10)
    poison = Explode(model, at=30)
    trainer = Trainer(
        model,
        functional.cross_entropy,
        digits_splits,
        config,
        run="nanstop",
        runs_dir=tmp_path,
        control=control,
        callbacks=[poison],
    )
    original = trainer._run_step

    def run_step_then_stop_at_33(group, check, clock):
        result = original(group, check, clock)
        if trainer.step + 1 == 33:
            control.stop()
        return result

    trainer._run_step = run_step_then_stop_at_33
    with pytest.raises(NonFiniteLossError, match=r"in steps 31-33"):
        trainer.fit()
    assert load_checkpoint(tmp_path / "nanstop" / "checkpoint.pt")["step"] == 23


def test_the_model_trains_in_train_mode_set_after_each_evaluation_not_before_every_step(digits_splits):
    """model.train() walks every module (~2 µs each): the loop calls it where the mode changed (a model
    handed over in eval mode, an evaluation), not before every step (`workbench bench trainer --host-work`:
    1.30× → 1.06× the hand loop's time on 181 tiny modules). Dropout still trains and evaluates as it must."""
    calls, modes = [], []

    class Counted(torch.nn.Sequential):
        def train(self, mode=True):
            calls.append(mode)
            return super().train(mode)

    torch.manual_seed(0)
    model = Counted(
        torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 10)
    )
    model[2].register_forward_pre_hook(
        lambda layer, inputs: modes.append((layer.training, torch.is_grad_enabled()))
    )
    model.eval()  # loaded for inference, then trained
    calls.clear()
    config = TrainConfig(epochs=3, batch_size=256, optimizer=OptimizerConfig("adam", lr=1e-3))
    result = Trainer(model, functional.cross_entropy, digits_splits, config, progress=False).fit()
    assert result.step == 18  # 1437 samples: 6 steps an epoch
    assert calls.count(True) == 3  # the first step, and the first after each of the two val evaluations
    training = [mode for mode, grad in modes if grad]
    assert len(training) == 18 and all(training)  # dropout on in every training forward
    assert not any(mode for mode, grad in modes if not grad)  # and off in every evaluation's


def test_a_step_without_clipping_or_a_logged_norm_reads_no_gradient():
    from workbench.train import gradients

    def parameters():
        raise AssertionError("clip_ walked the parameters")
        yield

    assert gradients.clip_(parameters(), clip_value=0.0, clip_norm=0.0, measure=False) is None
    with pytest.raises(AssertionError, match="walked"):
        gradients.clip_(parameters(), clip_value=0.0, clip_norm=0.0, measure=True)
