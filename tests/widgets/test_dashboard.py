"""The Dashboard driven through its widget objects, as a user's clicks would (no browser)."""

import threading
import time

import pytest
import torch
from torch.nn import functional

from tests.streams import Stream
from workbench import models
from workbench.train import Callback, OptimizerConfig, TrainConfig, Trainer, load_checkpoint
from workbench.widgets.dashboard import Dashboard


@pytest.fixture
def splits():
    from workbench.data import load_dataset, split_dataset

    return split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)


@pytest.fixture
def regression_trainer():
    from workbench.data import load_dataset, split_dataset

    splits = split_dataset(load_dataset("regression", n_samples=200), (0.8, 0.2, 0.0), seed=0)
    config = TrainConfig(epochs=1, batch_size=32, optimizer=OptimizerConfig("sgd", lr=0.1))
    return Trainer(models.linear(10), functional.mse_loss, splits, config, run=None)


def _trainer(splits, tmp_path=None, callbacks=(), **config):
    torch.manual_seed(0)
    settings = {
        "epochs": 2,
        "batch_size": 64,
        "optimizer": OptimizerConfig("sgd", lr=0.1),
        "log_every": 1,
        **config,
    }
    return Trainer(
        models.mlp(64, 10, hidden=(32,)),
        functional.cross_entropy,
        splits,
        TrainConfig(**settings),
        callbacks=callbacks,
        run=None if tmp_path is None else "dash",
        runs_dir=tmp_path or "runs",
    )


class Gate(Callback):
    """Holds the training thread after step `at` until the test releases it."""

    def __init__(self, at):
        self.at = at
        self.reached = threading.Event()
        self.release = threading.Event()
        self.lrs = []

    def on_step(self, metrics):
        self.lrs.append(metrics["lr"])
        if metrics["step"] == self.at:
            self.reached.set()
            assert self.release.wait(10)


def _wait_until(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_start_button_trains_in_the_background_and_fills_the_progress_bar(splits):
    dashboard = Dashboard(_trainer(splits), monitor=False)
    assert dashboard.progress.max == 46 and dashboard.progress.value == 0
    dashboard.start_button.click()
    assert dashboard.start_button.disabled and not dashboard.stop_button.disabled
    result = dashboard.wait(timeout=60)
    assert result.status == "finished" and result.step == 46
    assert dashboard.progress.value == dashboard.progress.max == 46
    assert "finished" in dashboard.status.value and "test" in dashboard.status.value
    assert not dashboard.start_button.disabled and dashboard.stop_button.disabled
    assert dashboard.loss_plot.point_counts()  # the plot got the run


def test_pause_button_holds_training_at_a_step_boundary_and_resume_continues(splits):
    gate = Gate(at=5)
    dashboard = Dashboard(_trainer(splits, callbacks=[gate]), monitor=False)
    dashboard.start()
    assert gate.reached.wait(10)
    dashboard.pause_button.value = True  # the user presses Pause during step 5's events
    assert dashboard.pause_button.description == "Resume"
    gate.release.set()
    time.sleep(0.3)
    assert dashboard.trainer.step == 5 and dashboard.running
    dashboard.pause_button.value = False
    assert dashboard.wait(timeout=60).step == 46


def test_stop_button_finishes_the_step_and_saves_a_checkpoint(splits, tmp_path):
    gate = Gate(at=7)
    dashboard = Dashboard(_trainer(splits, tmp_path, callbacks=[gate]), monitor=False)
    dashboard.start()
    assert gate.reached.wait(10)
    dashboard.stop_button.click()
    gate.release.set()
    result = dashboard.wait(timeout=30)
    assert result.status == "stopped" and result.step == 7
    assert load_checkpoint(result.checkpoint)["step"] == 7
    assert "stopped" in dashboard.status.value
    dashboard.start(resume=True)  # Start again continues from the checkpoint
    assert dashboard.wait(timeout=60).step == 46


def test_apply_sets_lr_and_clipping_from_the_next_step(splits):
    gate = Gate(at=3)
    dashboard = Dashboard(_trainer(splits, callbacks=[gate]), monitor=False)
    dashboard.start()
    assert gate.reached.wait(10)
    dashboard.lr_input.value = 0.02
    dashboard.clip_input.value = 0.5
    dashboard.apply_button.click()
    gate.release.set()
    dashboard.wait(timeout=60)
    assert gate.lrs[:3] == [0.1] * 3 and set(gate.lrs[3:]) == {0.02}
    assert dashboard.trainer.settings.clip_norm == 0.5


@pytest.mark.parametrize("lr", [-1.0, 1e6])  # 1e6: past the config's cap, which a live change also keeps
def test_apply_with_a_bad_value_shows_an_error_and_changes_nothing(splits, lr):
    dashboard = Dashboard(_trainer(splits), monitor=False)
    dashboard.lr_input.value = lr
    dashboard.apply_button.click()
    assert "not applied" in dashboard.error.value and "lr must be" in dashboard.error.value
    assert not dashboard.control.at_step_boundary().any()


def test_a_failure_shows_in_the_widget_and_wait_raises_it(splits):
    class Boom(Callback):
        def on_step(self, metrics):
            if metrics["step"] == 4:
                raise RuntimeError("the data went away")

    dashboard = Dashboard(_trainer(splits, callbacks=[Boom()]), monitor=False)
    dashboard.start()
    with pytest.raises(RuntimeError, match="the data went away"):
        dashboard.wait(timeout=30)
    assert "training failed at step 4" in dashboard.error.value
    assert "RuntimeError: the data went away" in dashboard.error.value
    assert "failed" in dashboard.status.value and not dashboard.start_button.disabled


def test_start_while_running_and_wait_before_start_are_refused(splits):
    gate = Gate(at=2)
    dashboard = Dashboard(_trainer(splits, callbacks=[gate]), monitor=False)
    with pytest.raises(RuntimeError, match="nothing to wait for"):
        dashboard.wait()
    dashboard.start()
    assert gate.reached.wait(10)
    with pytest.raises(RuntimeError, match="already running"):
        dashboard.start()
    with pytest.raises(TimeoutError, match="still running"):
        dashboard.wait(timeout=0.1)
    gate.release.set()
    dashboard.wait(timeout=60)


def test_device_monitor_samples_while_training_and_stops_after(splits):
    dashboard = Dashboard(_trainer(splits, epochs=3), sample_interval=0.02)
    dashboard.fit()
    assert not dashboard.sampler.running
    assert len(dashboard.sampler.samples()) >= 1
    dashboard.close()


def test_the_dashboard_renders_as_one_widget(splits):
    dashboard = Dashboard(_trainer(splits), monitor=True)
    bundle = dashboard._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "workbench-dashboard" in dashboard.widget._dom_classes
    dashboard.close()


def test_interrupting_wait_stops_training_at_a_step_boundary(splits, monkeypatch):
    gate = Gate(at=4)
    dashboard = Dashboard(_trainer(splits, callbacks=[gate]), monitor=False)
    dashboard.start()
    assert gate.reached.wait(10)
    thread = dashboard.runner.thread
    real_join = thread.join
    calls = []

    def join_interrupted_once(timeout=None):
        if not calls:
            calls.append(1)
            gate.release.set()
            raise KeyboardInterrupt  # what the kernel's interrupt raises in the waiting cell
        return real_join(timeout)

    monkeypatch.setattr(thread, "join", join_interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        dashboard.wait()
    assert not dashboard.running
    assert dashboard.trainer.step < 46 and "stopped" in dashboard.status.value


def test_fit_trains_on_the_calling_thread_and_raises_failures(splits):
    class Boom(Callback):
        def on_step(self, metrics):
            assert threading.current_thread() is threading.main_thread()
            if metrics["step"] == 2:
                raise ValueError("bad batch")

    dashboard = Dashboard(_trainer(splits, callbacks=[Boom()]), monitor=False)
    with pytest.raises(ValueError, match="bad batch"):
        dashboard.fit()
    assert "training failed at step 2" in dashboard.error.value
    with pytest.raises(RuntimeError, match="nothing to wait for"):
        dashboard.wait()


def test_a_launch_shows_every_rank_live_and_returns_rank_0s_value():
    import torch

    from workbench import models
    from workbench.data import load_dataset, split_dataset
    from workbench.parallel import Launch
    from workbench.train import OptimizerConfig, TrainConfig, Trainer

    splits = split_dataset(load_dataset("regression", n_samples=400), (0.8, 0.2, 0.0), seed=0)
    config = TrainConfig(epochs=2, batch_size=16, log_every=2, optimizer=OptimizerConfig("sgd", lr=0.05))
    model = models.linear(10)

    def train(strategy):
        trainer = Trainer(model, torch.nn.functional.mse_loss, splits, config, strategy=strategy, run=None)
        return trainer.fit().step

    job = Launch(train, 2, config=config, model=model, verbose=False)
    dashboard = Dashboard(job, monitor=False)
    assert "2 processes (gloo, CPU, 1 thread each)" in dashboard.placement.value
    assert dashboard.fit() == 20  # 320 samples / 2 ranks / batch 16 × 2 epochs
    assert dashboard.placement.value.endswith(" · Linear, 11 parameters, on 320 training samples</small>")
    counts = dashboard.loss_plot.point_counts()
    assert counts["run 1 train"] == counts["run 1 rank 0"] == counts["run 1 rank 1"] == 10
    assert counts["run 1 val"] == 2
    assert "samples/s rank 0" in dashboard.status.value and "rank 1" in dashboard.status.value
    assert dashboard.progress.value == dashboard.progress.max == 20
    assert repr(dashboard).startswith("Dashboard(finished, step 20/20, 2 processes (gloo, CPU")
    assert dashboard._repr_mimebundle_()["text/plain"] == repr(dashboard)


def test_a_launch_dashboard_samples_each_worker_and_plots_every_metric_on_one_time_axis():
    from workbench.data import load_dataset, split_dataset
    from workbench.parallel import Launch

    splits = split_dataset(load_dataset("regression", n_samples=400), (0.8, 0.2, 0.0), seed=0)
    config = TrainConfig(epochs=60, batch_size=16, log_every=2, optimizer=OptimizerConfig("sgd", lr=0.01))

    def train(strategy):
        model = models.mlp(10, 1, hidden=(256, 256))  # a few ms a step: the run lasts a few samples
        trainer = Trainer(model, functional.mse_loss, splits, config, strategy=strategy, run=None)
        return trainer.fit().step

    job = Launch(train, 2, config=config, verbose=False)
    dashboard = Dashboard(job, sample_interval=0.1)
    assert dashboard.fit() == 600
    watched = [s["processes"] for s in dashboard.sampler.samples() if s.get("processes")]
    seen = [process for sample in watched for process in sample]  # a rank that ended drops out of a sample
    assert {p["pid"] for p in seen} == set(job.pids)  # the workers, not this process
    assert {p["rank"] for p in seen} == {0, 1}
    assert any(len(sample) == 2 for sample in watched)  # both at once while they trained
    counts = dashboard.device_monitor.point_counts()
    for line in ("rank 0 CPU", "rank 1 CPU", "rank 0 RAM", "rank 1 RAM", "CPU", "loss"):
        assert counts.get(line, 0) >= 1, (line, counts)
    cpu = next(t for t in dashboard.device_monitor.figure.data if t.name == "rank 1 CPU")
    assert max(cpu.y) > 0  # the worker was busy
    assert {"lr", "grad_norm", "samples_per_s"} <= set(dashboard.metric_plot.metrics)  # in arrival order
    dashboard.metric_plot.selector.value = "samples_per_s"  # what choosing it in the dropdown does
    assert set(dashboard.metric_plot.point_counts()) == {"rank 0", "rank 1"}


def test_interrupting_wait_on_a_stuck_launch_terminates_its_workers_within_10_seconds(monkeypatch):
    import psutil

    from workbench.parallel import Launch

    def stuck(strategy):
        time.sleep(600)  # never reaches a step boundary

    job = Launch(stuck, 2, verbose=False)
    dashboard = Dashboard(job, monitor=False)
    dashboard.start()
    deadline = time.monotonic() + 10
    while len(job.pids) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    thread, real_join, calls = dashboard.runner.thread, dashboard.runner.thread.join, []

    def join_interrupted_once(timeout=None):
        if not calls:
            calls.append(1)
            raise KeyboardInterrupt
        return real_join(timeout)

    monkeypatch.setattr(thread, "join", join_interrupted_once)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        dashboard.wait()
    assert time.monotonic() - started < 10
    assert not any(psutil.pid_exists(pid) for pid in job.pids)
    assert isinstance(dashboard.runner.error, KeyboardInterrupt)


def _figures(widget):
    """Every plotly figure inside `widget`, depth first."""
    import plotly.graph_objects as go

    if isinstance(widget, go.FigureWidget):
        return [widget]
    return [figure for child in getattr(widget, "children", ()) for figure in _figures(child)]


def _holds_data(figure):
    return any(len(values) for trace in figure.data for values in (trace.x, trace.y) if values is not None)


def _fake_fit(dashboard, steps, extras=lambda step, rank: {}, ranks=(0,)):
    """Feed the trainer's subscribers a run of `steps` logged steps by hand (no training)."""
    events = dashboard.trainer.events
    for rank in ranks:
        events.on_fit_start({"run": "fake", "rank": rank, "start_step": 0, "total_steps": steps})
    for step in range(1, steps + 1):
        for rank in ranks:
            rate = None if rank else 100.0  # pipeline: only one rank counts the samples
            metrics = {"step": step, "epoch": 0, "loss": 1.0 / step, "lr": 0.1, "rank": rank}
            events.on_step({**metrics, "samples_per_s": rate, **extras(step, rank)})
    events.on_fit_end({"status": "finished", "step": steps, "epoch": 0, "error": None, "rank": 0})


MEMORY = {"params": 2**20, "grads": 2**20, "optimizer_state": 2**21, "activations": 2**19, "cuda_peak": None}


def _timeline(step, rank):
    spans = [["F", 0, 100.0 + rank, 101.0 + rank], ["B", 0, 103.0 - rank, 104.0 - rank]]
    payload = {"stage": rank, "stages": 2, "microbatches": 1, "schedule": "GPipe", "spans": spans}
    return {"timeline": payload}


def test_memory_plot_and_timeline_join_the_dashboard_only_with_data(regression_trainer):
    dashboard = Dashboard(regression_trainer, monitor=False)
    assert dashboard.memory_plot.widget not in dashboard.widget.children
    assert dashboard.timeline.widget not in dashboard.widget.children
    _fake_fit(dashboard, 3)
    assert dashboard.memory_plot.widget not in dashboard.widget.children
    assert dashboard.timeline.widget not in dashboard.widget.children
    _fake_fit(dashboard, 3, lambda step, rank: {"memory": MEMORY} if step == 1 else {}, ranks=(0, 1))
    assert dashboard.widget.children[-1] is dashboard.memory_plot.widget
    assert dashboard.memory_plot.bars() == ["rank 0", "rank 1"]
    assert dashboard.timeline.widget not in dashboard.widget.children
    assert "samples/s" not in dashboard.status.value  # rank 1 reported no rate: nothing to compare
    _fake_fit(dashboard, 2, lambda step, rank: _timeline(step, rank) if rank == 0 else {}, ranks=(0, 1))
    assert dashboard.timeline.widget not in dashboard.widget.children  # stage 1 never reported
    _fake_fit(dashboard, 2, _timeline, ranks=(0, 1))
    children = dashboard.widget.children
    assert children[-2:] == (dashboard.memory_plot.widget, dashboard.timeline.widget)
    assert children.count(dashboard.memory_plot.widget) == 1
    assert dashboard.timeline.latest()[0] == 2
    assert dashboard.timeline.bubble() == pytest.approx((0.5, 0.5))
    figures = _figures(dashboard.widget)
    assert len(figures) == 4 and all(_holds_data(figure) for figure in figures)  # what the browser sees


def test_the_throttled_push_shows_the_memory_plot_while_training(regression_trainer):
    dashboard = Dashboard(regression_trainer, monitor=False)
    events = dashboard.trainer.events
    events.on_fit_start({"run": "fake", "rank": 0, "start_step": 0, "total_steps": 5})
    events.on_step({"step": 1, "epoch": 0, "loss": 1.0, "lr": 0.1, "rank": 0, "memory": MEMORY})
    _wait_until(lambda: dashboard.memory_plot.widget in dashboard.widget.children, timeout=2)
    assert _holds_data(dashboard.memory_plot.figure)
    events.on_fit_end({"status": "finished", "step": 1, "epoch": 0, "error": None, "rank": 0})


def test_every_figure_in_a_trained_dashboard_holds_data(regression_trainer):
    dashboard = Dashboard(regression_trainer, monitor=False)
    dashboard.fit()
    figures = _figures(dashboard.widget)
    assert figures and all(_holds_data(figure) for figure in figures)
    assert dashboard.step_time_plot.widget in dashboard.widget.children  # where the time went, by default
    assert dashboard.step_time_plot.bars() == ["one process"]


def test_an_epoch_of_unknown_length_shows_the_steps_done_without_a_total():
    config = TrainConfig(epochs=2, batch_size=10, optimizer=OptimizerConfig("sgd", lr=0.01), log_every=3)
    trainer = Trainer(
        models.linear(10), functional.mse_loss, Stream(10, regression=True, count=100, seed=0), config
    )
    dashboard = Dashboard(trainer, monitor=False)
    result = dashboard.fit()
    assert result.step == 20 and trainer.total_steps is None
    assert dashboard.progress.value == dashboard.progress.max == 20
    assert "step 20/?" in dashboard.status.value
    assert "epoch length unknown" in dashboard._status_text("running")  # what a running push shows
    assert dashboard.loss_plot.point_counts()["run 1 train"] == 8  # steps 3, 6, 9, 10 (epoch end), 13...


def test_a_stream_without_an_end_counts_to_max_steps_with_an_eta():
    config = TrainConfig(max_steps=25, batch_size=10, optimizer=OptimizerConfig("sgd", lr=0.01), log_every=5)
    trainer = Trainer(models.linear(10), functional.mse_loss, Stream(10, regression=True, seed=0), config)
    dashboard = Dashboard(trainer, monitor=False)
    assert dashboard.fit().step == 25
    assert dashboard.progress.value == dashboard.progress.max == 25
    assert "step 25/25" in dashboard.status.value
    assert "ETA" in dashboard._status_text("running")  # a total: the running line has an ETA


def test_evaluation_metrics_of_your_own_show_in_the_status_line(splits):
    def top_class_share(outputs, batch):
        return (outputs.argmax(-1) == 0).float().mean()

    config = TrainConfig(epochs=1, batch_size=64, optimizer=OptimizerConfig("adam", lr=3e-3))
    trainer = Trainer(
        models.mlp(64, 10), functional.cross_entropy, splits, config, metrics={"zeros": top_class_share}
    )
    dashboard = Dashboard(trainer, monitor=False)
    dashboard.fit()
    assert "val: loss" in dashboard.status.value and "accuracy" in dashboard.status.value
    assert "zeros" in dashboard.status.value


def test_showing_a_dashboard_hands_every_view_its_current_figure(regression_trainer):
    dashboard = Dashboard(regression_trainer, monitor=False)
    dashboard.fit()
    dashboard._repr_mimebundle_()
    for view in (dashboard.loss_plot, dashboard.metric_plot):
        assert len(view.figure._widget_data) == len(view.figure.data) > 0


def test_a_fit_that_stopped_early_fills_the_bar_and_says_which_epochs_weights_the_model_has(splits):
    from workbench.train import EarlyStopping

    stopping = EarlyStopping("accuracy", patience=1, min_delta=0.5)  # no epoch beats the first by 0.5
    trainer = _trainer(splits, epochs=20, early_stopping=stopping)
    dashboard = Dashboard(trainer, monitor=False)
    result = dashboard.fit()
    assert (result.epoch, result.best_epoch) == (2, 0) and result.step < trainer.total_steps
    assert dashboard.progress.value == dashboard.progress.max == result.step  # done, not 10% done
    best = result.metrics["val"]["accuracy"]
    steps = trainer.steps_per_epoch
    said = f"stopped early: best val accuracy {best:.4g} at epoch 0 (step {steps}), the model has its weights"
    assert said in dashboard.status.value  # the epoch as the console's line, the events and best_epoch say it
    assert f"step {result.step}/{trainer.total_steps}, epoch 1" in dashboard.status.value  # 2 done: 0 and 1
    assert f"val: loss {result.metrics['val']['loss']:.4f}" in dashboard.status.value  # the best epoch's
