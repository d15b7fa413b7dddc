"""TensorBoard reads back what the run logged: the same numbers as metrics.jsonl, for a DDP run too."""

import warnings

import pytest

from workbench.presets import build_experiment
from workbench.train import Trainer, read_metrics
from workbench.train.loggers import TensorBoardLogger, tensorboard_logger

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator", reason="the tensorboard extra is not installed"
)


def _read_back(folder):
    accumulator = event_accumulator.EventAccumulator(str(folder))
    accumulator.Reload()
    return accumulator


def test_tensorboard_reads_back_every_step_and_evaluation_of_a_ddp_run(tmp_path):
    from workbench.parallel import launch

    e = build_experiment("digits-mlp", epochs=2, log_every=1)
    logger = TensorBoardLogger(tmp_path / "tb")

    def train(strategy):
        return Trainer(
            e.model, e.loss_fn, e.splits, e.config, strategy=strategy, run="ddp", runs_dir=tmp_path
        ).fit()

    launch(train, 2, callbacks=[logger], verbose=False)  # the launcher relays every rank's events
    board = _read_back(tmp_path / "tb" / "ddp")
    steps = read_metrics(tmp_path / "ddp", kind="step")
    logged = [(s["step"], s["loss"]) for s in steps if s["rank"] == 0]
    scalars = [(event.step, event.value) for event in board.Scalars("train/loss")]
    assert [step for step, _ in scalars] == [step for step, _ in logged]  # rank 0's, once each
    assert [value for _, value in scalars] == pytest.approx([value for _, value in logged], rel=1e-6)
    evals = [e for e in read_metrics(tmp_path / "ddp", kind="eval") if e["split"] == "val"]
    accuracy = [(event.step, event.value) for event in board.Scalars("val/accuracy")]
    assert accuracy == [(ev["step"], pytest.approx(ev["accuracy"], rel=1e-6)) for ev in evals]
    assert {"train/lr", "train/grad_norm", "train/samples_per_s", "test/loss"} <= set(board.Tags()["scalars"])
    assert "config/text_summary" in board.Tags()["tensors"]
    [config] = board.Tensors("config/text_summary")
    assert (
        b'"epochs": 2' in config.tensor_proto.string_val[0]
        and b'"parameters": 26122' in config.tensor_proto.string_val[0]
    )


def test_a_logger_that_fails_mid_run_warns_once_and_training_and_the_jsonl_go_on(tmp_path, monkeypatch):
    logger = TensorBoardLogger(tmp_path / "tb")
    e = build_experiment("digits-mlp", epochs=2, log_every=1)
    trainer = Trainer(e.model, e.loss_fn, e.splits, e.config, callbacks=[logger], run="r", runs_dir=tmp_path)
    calls = {"n": 0}
    original = tensorboard_logger._EventFile.write_scalars

    def disk_full_after_ten_steps(self, scalars, step):
        calls["n"] += 1
        if calls["n"] > 10:
            raise OSError(28, "No space left on device")
        original(self, scalars, step)

    monkeypatch.setattr(tensorboard_logger._EventFile, "write_scalars", disk_full_after_ten_steps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = trainer.fit()
    assert result.status == "finished"
    said = [str(w.message) for w in caught if "TensorBoardLogger" in str(w.message)]
    assert said == [
        f"TensorBoardLogger stopped logging to {tmp_path / 'tb'} (OSError: [Errno 28] No space left on "
        "device); training goes on and metrics.jsonl keeps every event"
    ]
    assert len(read_metrics(tmp_path / "r", kind="step")) == 46 and logger.failed is not None


def test_workbench_train_log_tensorboard_writes_the_run_beside_its_metrics(tmp_path):
    from workbench.cli import main

    argv = ["train", "digits-mlp", "--epochs", "1", "--run", "cli", "--runs-dir", str(tmp_path)]
    assert main([*argv, "--log", "tensorboard"]) == 0
    board = _read_back(tmp_path / "tensorboard" / "cli")
    steps = read_metrics(tmp_path / "cli", kind="step")
    assert [event.step for event in board.Scalars("train/loss")] == [s["step"] for s in steps]


def test_tensorboard_sees_steps_while_the_fit_runs_and_bad_flush_intervals_are_named(tmp_path):
    from workbench.train.events import Callback

    e = build_experiment("digits-mlp", epochs=2, log_every=1)
    seen_while_training = []

    class ReadsTensorBoard(Callback):
        def on_step(self, metrics):
            if metrics["step"] == 20:
                board = _read_back(tmp_path / "tb" / "live")
                seen_while_training.extend(event.step for event in board.Scalars("train/loss"))

    logger = TensorBoardLogger(tmp_path / "tb", flush_every_s=1e-9)  # flushed at every step
    callbacks = [logger, ReadsTensorBoard()]
    Trainer(e.model, e.loss_fn, e.splits, e.config, callbacks=callbacks, run="live", runs_dir=tmp_path).fit()
    assert seen_while_training == list(range(1, 21))
    with pytest.raises(ValueError, match="flush_every_s must be a finite number > 0, got 0"):
        TensorBoardLogger(tmp_path / "tb", flush_every_s=0)
