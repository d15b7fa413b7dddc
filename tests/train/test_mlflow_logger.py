"""MLflow reads back what the run logged: the same numbers as metrics.jsonl (a DDP run too), the config as
params, the checkpoint as an artifact, a resumed fit in the same MLflow run, and a failure that never stops
training (nor a slow store at the start)."""

import time
import warnings

import pytest

from workbench.presets import build_experiment
from workbench.train import MLflowLogger, Trainer, read_metrics
from workbench.train.events import Callback
from workbench.train.loggers import mlflow_logger

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed")


def _client(store):
    return mlflow.MlflowClient(f"sqlite:///{store}")


def _runs(store, experiment="workbench"):
    client = _client(store)
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id], order_by=["attributes.start_time ASC"])


def _history(store, run_id, key):
    return sorted((m.step, m.value) for m in _client(store).get_metric_history(run_id, key))


def test_mlflow_reads_back_every_step_evaluation_and_param_of_a_ddp_run(tmp_path):
    from workbench.parallel import launch

    e = build_experiment("digits-mlp", epochs=2, log_every=1)
    store = tmp_path / "mlflow.db"
    logger = MLflowLogger(store, flush_every_s=0.05)  # several batches while training

    def train(strategy):
        return Trainer(
            e.model, e.loss_fn, e.splits, e.config, strategy=strategy, run="ddp", runs_dir=tmp_path
        ).fit()

    launch(train, 2, callbacks=[logger], verbose=False)
    [run] = _runs(store)
    assert run.info.run_name == "ddp" and run.info.status == "FINISHED"
    assert run.data.tags["world_size"] == "2" and run.data.tags["workbench.run"] == "ddp"
    assert run.data.params["epochs"] == "2" and run.data.params["optimizer.lr"] == str(e.config.optimizer.lr)
    assert run.data.params["model"].startswith("Sequential, 26,122 parameters (#")  # what it trained
    assert run.data.params["samples.train"] == str(len(e.splits.train))
    logged = [(s["step"], s["loss"]) for s in read_metrics(tmp_path / "ddp", kind="step") if s["rank"] == 0]
    history = _history(store, run.info.run_id, "train/loss")
    assert [step for step, _ in history] == [step for step, _ in logged]  # rank 0's, once each
    assert [v for _, v in history] == pytest.approx([v for _, v in logged], rel=1e-12)
    evals = [ev for ev in read_metrics(tmp_path / "ddp", kind="eval") if ev["split"] == "val"]
    accuracy = _history(store, run.info.run_id, "val/accuracy")
    assert accuracy == [(ev["step"], pytest.approx(ev["accuracy"], rel=1e-12)) for ev in evals]
    assert {"train/lr", "train/grad_norm", "train/samples_per_s", "test/loss"} <= set(run.data.metrics)


def test_the_checkpoint_is_an_artifact_and_a_resumed_fit_continues_the_same_mlflow_run(tmp_path):
    store = tmp_path / "store" / "mlflow.db"
    e = build_experiment("digits-mlp", epochs=1)
    Trainer(
        e.model, e.loss_fn, e.splits, e.config, run="r", runs_dir=tmp_path,
        callbacks=[MLflowLogger(store, log_checkpoint=True)],
    ).fit()  # fmt: skip
    more = build_experiment("digits-mlp", epochs=2)
    Trainer(
        more.model, more.loss_fn, more.splits, more.config, run="r", runs_dir=tmp_path,
        callbacks=[MLflowLogger(store, log_checkpoint=True)],
    ).fit(resume=True)  # fmt: skip
    [run] = _runs(store)  # one MLflow run: the resumed fit appended to it
    steps = [s["step"] for s in read_metrics(tmp_path / "r", kind="step")]
    assert [step for step, _ in _history(store, run.info.run_id, "train/loss")] == steps
    assert steps[-1] == 2 * steps[len(steps) // 2 - 1] and run.info.status == "FINISHED"
    assert run.data.params["epochs"] == "1"  # params are the first fit's; MLflow keeps them fixed
    local = _client(store).download_artifacts(run.info.run_id, "checkpoint", str(tmp_path / "down"))
    assert (tmp_path / "down" / "checkpoint" / "checkpoint.pt").read_bytes() == (
        tmp_path / "r" / "checkpoint.pt"
    ).read_bytes(), local
    assert (tmp_path / "store" / "mlartifacts").is_dir()  # artifacts beside the store


def test_a_stopped_fit_ends_killed_and_a_failed_one_failed_with_its_error(tmp_path):
    from workbench.train import Callback

    class StopAtFive(Callback):
        def __init__(self):
            self.trainer = None

        def on_step(self, metrics):
            if metrics["step"] >= 5:
                self.trainer.control.stop()

    e = build_experiment("digits-mlp", epochs=2, log_every=1)
    stopper = StopAtFive()
    trainer = Trainer(e.model, e.loss_fn, e.splits, e.config, run="s", runs_dir=tmp_path,
                      callbacks=[MLflowLogger(tmp_path / "m.db"), stopper])  # fmt: skip
    stopper.trainer = trainer
    assert trainer.fit().status == "stopped"

    class Boom(Callback):
        def on_step(self, metrics):
            if metrics["step"] == 3:
                raise RuntimeError("a bug in my callback")

    failing = Trainer(e.model, e.loss_fn, e.splits, e.config, run="f", runs_dir=tmp_path,
                      callbacks=[MLflowLogger(tmp_path / "m.db"), Boom()])  # fmt: skip
    with pytest.raises(RuntimeError, match="a bug in my callback"):
        failing.fit()
    stopped, failed = _runs(tmp_path / "m.db")
    assert (stopped.info.run_name, stopped.info.status) == ("s", "KILLED")
    assert (failed.info.run_name, failed.info.status) == ("f", "FAILED")
    assert failed.data.tags["error"] == "RuntimeError: a bug in my callback"


def test_an_mlflow_failure_mid_run_warns_once_and_training_and_the_jsonl_go_on(tmp_path, monkeypatch):
    e = build_experiment("digits-mlp", epochs=2, log_every=1)
    logger = MLflowLogger(tmp_path / "m.db", flush_every_s=1e-9)  # a batch per step
    calls = {"n": 0}
    original = mlflow.MlflowClient.log_batch

    def server_gone_after_ten_batches(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 10:
            raise mlflow.exceptions.MlflowException("API request failed: connection refused")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(mlflow.MlflowClient, "log_batch", server_gone_after_ten_batches)
    trainer = Trainer(e.model, e.loss_fn, e.splits, e.config, callbacks=[logger], run="r", runs_dir=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = trainer.fit()
    assert result.status == "finished"
    said = [str(w.message) for w in caught if "MLflowLogger" in str(w.message)]
    assert said == [
        f"MLflowLogger stopped logging to {logger.tracking_uri} (MlflowException: API request failed: "
        "connection refused); training goes on and metrics.jsonl keeps every event"
    ]
    assert len(read_metrics(tmp_path / "r", kind="step")) == 46 and logger.failed is not None
    [run] = _runs(tmp_path / "m.db")
    assert len(_client(tmp_path / "m.db").get_metric_history(run.info.run_id, "train/loss")) >= 5


def test_the_fit_does_not_wait_for_the_mlflow_run_and_a_store_that_fails_at_start_warns_once(
    tmp_path, monkeypatch
):
    e = build_experiment("digits-mlp", epochs=1, log_every=1)
    logger = MLflowLogger(tmp_path / "m.db")
    seen: dict[str, float] = {}

    def slow_then_unreachable(self, *args, **kwargs):
        time.sleep(1.0)
        seen["create_run_failed"] = time.monotonic()
        raise mlflow.exceptions.MlflowException("API request failed: connection refused")

    class FirstStep(Callback):
        def on_step(self, metrics):
            seen.setdefault("first_step", time.monotonic())

    monkeypatch.setattr(mlflow.MlflowClient, "create_run", slow_then_unreachable)
    trainer = Trainer(
        e.model, e.loss_fn, e.splits, e.config, callbacks=[logger, FirstStep()], run="r", runs_dir=tmp_path
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = trainer.fit()
    assert result.status == "finished" and seen["first_step"] < seen["create_run_failed"]
    said = [str(w.message) for w in caught if "MLflowLogger" in str(w.message)]
    assert said == [
        f"MLflowLogger stopped logging to {logger.tracking_uri} (MlflowException: API request failed: "
        "connection refused); training goes on and metrics.jsonl keeps every event"
    ]
    assert [e["event"] for e in read_metrics(tmp_path / "r")][-1] == "fit_end"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tracking_uri": ""}, "tracking_uri must be a file path (a local SQLite store) or an MLflow"),
        ({"tracking_uri": 5}, "tracking_uri must be a file path"),
        ({"tracking_uri": "FOLDER"}, "is a folder; give the SQLite file to create in it"),
        ({"experiment": " "}, "experiment must be a non-empty name, got ' '"),
        ({"flush_every_s": 0}, "flush_every_s must be a finite number > 0, got 0"),
    ],
)
def test_bad_arguments_are_named(tmp_path, kwargs, message):
    if kwargs.get("tracking_uri") == "FOLDER":
        kwargs = {"tracking_uri": str(tmp_path)}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MLflowLogger(**{"tracking_uri": tmp_path / "m.db", **kwargs})


def test_without_the_extra_the_logger_and_the_cli_say_how_to_install_it(tmp_path, monkeypatch, capsys):
    from workbench.cli import main
    from workbench.train.loggers import rank_zero

    real = rank_zero.importlib.util.find_spec
    monkeypatch.setattr(
        rank_zero.importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'gpu-training-workbench\[mlflow\]'"):
        MLflowLogger(tmp_path / "m.db")
    argv = ["train", "digits-mlp", "--epochs", "1", "--run", "x", "--runs-dir", str(tmp_path)]
    assert main([*argv, "--log", "mlflow"]) == 2
    assert capsys.readouterr().err.startswith(
        "workbench train: error: --log: MLflowLogger needs the mlflow package, which is not installed"
    )
    assert not (tmp_path / "x").exists()  # said before training


def test_workbench_train_log_mlflow_writes_the_run_to_the_runs_dir_store(tmp_path):
    from workbench.cli import main

    argv = ["train", "digits-mlp", "--epochs", "1", "--run", "cli", "--runs-dir", str(tmp_path)]
    assert main([*argv, "--log", "mlflow", "--log", "tensorboard"]) == 0
    [run] = _runs(tmp_path / "mlflow.db")
    steps = read_metrics(tmp_path / "cli", kind="step")
    assert [step for step, _ in _history(tmp_path / "mlflow.db", run.info.run_id, "train/loss")] == [
        s["step"] for s in steps
    ]
    assert (tmp_path / "tensorboard" / "cli").is_dir()
    assert mlflow_logger._params({"a": {"b": 1}, "c": [1, 2]}) == {"a.b": "1", "c": "[1, 2]"}


def test_a_tracking_server_nobody_runs_is_one_warning_and_the_fit_returns_promptly(free_port):
    """Issue 44: with nothing at the address MLflow retried for minutes and fit() waited at its end."""
    import time

    from workbench.presets import build_experiment
    from workbench.train import Trainer

    e = build_experiment("digits-mlp", epochs=1)
    port = free_port()
    started = time.monotonic()
    with pytest.warns(
        UserWarning, match=rf"no MLflow server answers at 127.0.0.1:{port} \(Connection refused\)"
    ):
        result = Trainer(
            e.model, e.loss_fn, e.splits, e.config, callbacks=[MLflowLogger(f"http://127.0.0.1:{port}")]
        ).fit()
    assert result.status == "finished" and time.monotonic() - started < 60


def test_a_store_folder_it_cannot_make_is_one_warning_at_the_fit_not_an_error_before(tmp_path):
    from workbench.presets import build_experiment
    from workbench.train import Trainer

    blocked = tmp_path / "file"
    blocked.write_text("")
    logger = MLflowLogger(blocked / "mlflow.db")  # its folder would have to be a file: refused later
    e = build_experiment("digits-mlp", epochs=1)
    with pytest.warns(UserWarning, match=r"MLflowLogger stopped logging to sqlite:///.*file/mlflow.db"):
        result = Trainer(e.model, e.loss_fn, e.splits, e.config, callbacks=[logger]).fit()
    assert result.status == "finished"
