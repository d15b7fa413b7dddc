"""A fit resumed from its checkpoint after a failure (a crash, a non-finite loss, a restarted worker) redoes
the steps after that checkpoint, which the failed try had logged already. The run's history is then the
resumed one: `read_metrics` (and so the runs browser's summaries and curves), a live `LossPlot` (the
Dashboard's) and a replay through `follow_metrics` leave the failed try's later steps and evaluations out,
and TensorBoard is told to forget them. Before, each showed steps 7-9 twice, the curve turning back on itself,
and a val score of the abandoned try could stand as the run's best. metrics.jsonl still keeps every line."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from workbench.train import OptimizerConfig, TrainConfig, Trainer, follow_metrics, read_metrics
from workbench.train.metrics import MetricError
from workbench.train.runs import summarize_run
from workbench.widgets import LossPlot, MetricPlot

X = torch.randn(96, 6, generator=torch.Generator().manual_seed(0))
SPLITS = (TensorDataset(X, (X[:, 0] > 0).long()), TensorDataset(X[:32], (X[:32, 0] > 0).long()))
CONFIG = TrainConfig(epochs=3, batch_size=16, log_every=1, optimizer=OptimizerConfig("sgd", lr=0.1))
# 6 steps an epoch: checkpoints at steps 6, 12, 18; val every 4 steps too, and at each epoch's end


class Crash:
    """The process dies at step 9, three steps past its last checkpoint (step 6)."""

    def on_step(self, event) -> None:
        if event["step"] == 9:
            raise RuntimeError("node lost")


class Best:
    """What the failed try saw at step 8: a val loss no later evaluation reaches (for the callbacks after
    this one; its line in metrics.jsonl, written before any callback, is rewritten to say it too)."""

    def on_eval(self, event) -> None:
        if event["step"] == 8:
            event["loss"] = 0.001


def _crash_then_resume(tmp_path, *callbacks) -> None:
    config = CONFIG.replace(eval_every_steps=4)
    with pytest.raises(RuntimeError, match="node lost"):
        torch.manual_seed(0)
        model = nn.Linear(6, 2)
        Trainer(model, F.cross_entropy, SPLITS, config, run="r", runs_dir=tmp_path, progress=False,
                callbacks=[Best(), *callbacks, Crash()]).fit()  # fmt: skip
    log = tmp_path / "r" / "metrics.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    lines = [{**e, "loss": 0.001} if e["event"] == "eval" and e["step"] == 8 else e for e in lines]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    resumed = Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, config, run="r", runs_dir=tmp_path,
                      progress=False, callbacks=list(callbacks))  # fmt: skip
    assert resumed.fit(resume=True).step == 18


def test_the_run_reads_as_it_stands_after_a_resume_and_the_file_keeps_every_line(tmp_path):
    _crash_then_resume(tmp_path)
    assert [event["step"] for event in read_metrics(tmp_path / "r", "step")] == list(range(1, 19))
    val = [event["step"] for event in read_metrics(tmp_path / "r", "eval") if event["split"] == "val"]
    assert val == [4, 6, 8, 12, 16, 18]  # the failed try's 8 left out; the resumed one's 8 kept
    assert [e["loss"] for e in read_metrics(tmp_path / "r", "eval") if e["step"] == 8] != [0.001]
    logged = read_metrics(tmp_path / "r", "step", superseded=True)
    assert [event["step"] for event in logged] == [*range(1, 10), *range(7, 19)]
    assert summarize_run(tmp_path / "r").best[1] > 0.001  # not the abandoned try's val loss


def test_a_live_loss_plot_continues_the_curve_from_the_checkpoint(tmp_path):
    plot = LossPlot()
    _crash_then_resume(tmp_path, plot)
    plot.flush()
    x, _ = plot._runs["r"].series["train"].points()
    assert x.tolist() == list(range(1, 19))  # one point a step, never turning back
    val_steps, val_losses = plot._runs["r"].series["val"].points()
    assert val_steps.tolist() == [4, 6, 8, 12, 16, 18] and val_losses.min() > 0.001


def test_a_live_metric_plot_continues_its_curves_from_the_checkpoint(tmp_path):
    plot = MetricPlot()
    _crash_then_resume(tmp_path, plot)
    plot.flush()
    assert plot._series["lr"][0].points()[0].tolist() == list(range(1, 19))
    assert plot._series["val accuracy"][0].points()[0].tolist() == [4, 6, 8, 12, 16, 18]


def test_a_replay_of_the_log_and_its_history_plot_draw_the_run_once(tmp_path):
    _crash_then_resume(tmp_path)
    plot = LossPlot()
    follower = follow_metrics(tmp_path / "r", [plot], interval=0.05)
    assert follower.wait(timeout=30)
    follower.stop()
    plot.flush()
    assert plot._runs["r"].series["train"].points()[0].tolist() == list(range(1, 19))
    history = LossPlot()
    history.plot_history("r", tmp_path / "r")
    assert history.point_counts()["r train"] == 18


def test_tensorboard_forgets_what_the_failed_try_logged_past_the_checkpoint(tmp_path):
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="the tensorboard extra is not installed",
    )
    from workbench.train.loggers import TensorBoardLogger

    _crash_then_resume(tmp_path, TensorBoardLogger(tmp_path / "tb"))
    board = accumulator.EventAccumulator(str(tmp_path / "tb" / "r"))
    board.Reload()
    assert [event.step for event in board.Scalars("train/loss")] == list(range(1, 19))
    assert [event.step for event in board.Scalars("val/loss")] == [4, 6, 8, 12, 16, 18]
    assert min(event.value for event in board.Scalars("val/loss")) > 0.001


def test_a_line_torn_by_a_killed_writer_is_cut_before_the_resume_appends(tmp_path):
    """SIGKILL (the OOM killer, a lost node) stops the log mid-line: the buffer reaches the disk whenever it
    fills. The resume appended its fit_start to that fragment, making one malformed line: the resume was
    lost, steps 5-7 read twice, and every read of the run warned."""
    from workbench.train import MetricsLog

    log = tmp_path / "metrics.jsonl"
    steps = [{"event": "step", "step": step, "loss": 1.0} for step in range(1, 8)]
    written = "".join(json.dumps(e) + "\n" for e in [{"event": "fit_start", "start_step": 0}, *steps])
    log.write_text(written + '{"event": "step", "step": 8, "lo')
    resumed = MetricsLog(tmp_path)
    resumed.on_fit_start({"start_step": 4})
    for step in range(5, 10):
        resumed.on_step({"step": step, "loss": 0.5})
    resumed.on_fit_end({"status": "finished", "step": 9})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no malformed line left to warn of
        assert [e["step"] for e in read_metrics(tmp_path, kind="step")] == list(range(1, 10))
        every = read_metrics(tmp_path, kind="step", superseded=True)
        assert [e["step"] for e in every][7:] == [5, 6, 7, 8, 9]
    assert log.read_text().startswith(written)  # the complete lines are kept


def test_a_val_a_crash_cut_short_is_evaluated_and_logged_when_the_fit_resumes(tmp_path):
    """A crash during the val after an epoch's checkpoint (the OOM killer, a lost node) left that epoch with
    no val row: the log, the runs browser and the live plots read as if it was never evaluated, and the
    resume went on without it. The resume now evaluates it on the checkpoint's weights and logs it, once,
    right after its fit_start, as the uninterrupted fit would have."""

    class CrashOnCall:
        """A val metric whose `crash_on`-th call fails (call 1 checks the first training batch)."""

        def __init__(self, crash_on: int | None) -> None:
            self.calls, self.crash_on = 0, crash_on

        def __call__(self, outputs, batch) -> torch.Tensor:
            self.calls += 1
            if self.calls == self.crash_on:
                raise RuntimeError("node lost")
            return (outputs.argmax(dim=1) == batch[1]).float().mean()

    class Heard:
        def __init__(self) -> None:
            self.events = []

        def on_fit_start(self, event) -> None:
            self.events.append(("fit_start", event["start_step"]))

        def on_eval(self, event) -> None:
            self.events.append(("eval", event["step"]))

    def fit(run: str, crash_on: int | None, resume: bool = False, callbacks=()):
        torch.manual_seed(0)
        metrics = {"acc": CrashOnCall(crash_on)}
        trainer = Trainer(nn.Linear(6, 2), F.cross_entropy, SPLITS, CONFIG, run=run, runs_dir=tmp_path,
                          metrics=metrics, progress=False, callbacks=callbacks)  # fmt: skip
        return trainer.fit(resume=resume)

    fit("whole", crash_on=None)
    with pytest.raises(MetricError, match="node lost"):
        fit("r", crash_on=5)  # calls 2-3: the val after step 6; 4-5: after step 12, its checkpoint saved
    assert [e["step"] for e in read_metrics(tmp_path / "r", "eval")] == [6]
    heard = Heard()
    assert fit("r", crash_on=None, resume=True, callbacks=[heard]).step == 18
    assert heard.events[:2] == [("fit_start", 12), ("eval", 12)]
    val = [(e["step"], e["epoch"], e["loss"], e["acc"]) for e in read_metrics(tmp_path / "r", "eval")]
    whole = [(e["step"], e["epoch"], e["loss"], e["acc"]) for e in read_metrics(tmp_path / "whole", "eval")]
    assert [row[:2] for row in val] == [(6, 0), (12, 1), (18, 2)] and val == whole
