"""The stop button (SIGINT) during training: stop at a step boundary, save, and one line, in a notebook cell
(IPython renders only the line), for `Trainer.fit`, a blocking `launch` and a job waited for by a runner."""

import json
import os
import re
import signal
import threading
import time

import pytest
from IPython.core.interactiveshell import InteractiveShell

from workbench.parallel import Launch, launch
from workbench.presets import build_experiment
from workbench.train import Callback, Trainer
from workbench.train.interrupts import TrainingInterrupted
from workbench.train.job_runner import JobRunner


class InterruptAt(Callback):
    """Sends SIGINT to this process (what Jupyter's stop button does) at `steps`; `pause_s` per step after."""

    def __init__(self, *steps, pause_s=0.0):
        self.steps, self.pause_s, self.sent = set(steps), pause_s, []

    def on_step(self, metrics):
        if metrics.get("rank", 0) == 0 and metrics["step"] in self.steps:
            self.sent.append(metrics["step"])
            os.kill(os.getpid(), signal.SIGINT)
        if self.sent:
            time.sleep(self.pause_s)


def _trainer(tmp_path, *callbacks):
    e = build_experiment("digits-mlp", epochs=200)
    return Trainer(
        e.model, e.loss_fn, e.splits, e.config, callbacks=list(callbacks), run="x", runs_dir=tmp_path
    )


def test_fit_stops_after_the_step_saves_and_raises_one_line(tmp_path, capsys):
    before = signal.getsignal(signal.SIGINT)  # Python's, or one another library installed (Spark's)
    with pytest.raises(TrainingInterrupted) as stopped:
        _trainer(tmp_path, InterruptAt(10)).fit()
    line, step = str(stopped.value), stopped.value.step
    assert line == (
        f"stopped training (1 process on cpu) at step {step} of 4600 after an interrupt; checkpoint "
        f"{tmp_path / 'x' / 'checkpoint.pt'} (fit(resume=True) continues from it)"
    )
    assert stopped.value.result.status == "stopped" and step in (10, 11)
    assert (tmp_path / "x" / "checkpoint.pt").is_file()
    end = json.loads((tmp_path / "x" / "metrics.jsonl").read_text().splitlines()[-1])
    assert (end["event"], end["status"]) == ("fit_end", "stopped")
    assert (
        "stopping after this step and saving (interrupt again: quit without saving)"
        in capsys.readouterr().out
    )
    assert signal.getsignal(signal.SIGINT) is before  # the handler was put back


def test_a_second_interrupt_quits_at_once_without_saving(tmp_path):
    with pytest.raises(
        TrainingInterrupted, match=r"quit training \(1 process on cpu\) at step \d+ of 4600 without"
    ):
        _trainer(tmp_path, InterruptAt(10), InterruptAt(10, pause_s=1.0)).fit()
    assert not (tmp_path / "x" / "checkpoint.pt").exists()


def test_a_notebook_shows_one_line_and_no_traceback(tmp_path, capsys):
    shell = InteractiveShell.instance()
    try:
        shell.user_ns.update(make=lambda: _trainer(tmp_path, InterruptAt(10)))
        result = shell.run_cell("make().fit()")
    finally:
        InteractiveShell.clear_instance()
    out = capsys.readouterr()
    assert isinstance(result.error_in_exec, TrainingInterrupted)
    shown = [line for line in (out.out + out.err).splitlines() if line.strip()]
    assert re.match(
        r"stopped training \(1 process on cpu\) at step 1[01] of 4600 after an interrupt", shown[-1]
    )
    assert "Traceback" not in out.out + out.err


def _train(strategy, runs_dir):
    e = build_experiment("digits-mlp", epochs=200)
    trainer = Trainer(e.model, e.loss_fn, e.splits, e.config, strategy=strategy, run="ddp", runs_dir=runs_dir)
    return trainer.fit().step


def test_a_blocking_launch_stops_every_rank_at_one_step_saves_and_says_so(tmp_path):
    job = Launch(_train, 2, args=(tmp_path,), callbacks=[InterruptAt(10)], verbose=False)
    with pytest.raises(TrainingInterrupted) as stopped:
        job.fit()
    line = str(stopped.value)
    assert (
        line.startswith("stopped training (2 processes) at step ") and " of 2400 after an interrupt; " in line
    )
    assert line.endswith(
        f"checkpoint {tmp_path / 'ddp' / 'checkpoint.pt'} (Trainer.fit(resume=True) in your function "
        "continues from it)"
    )
    assert stopped.value.result == stopped.value.step  # rank 0's return value: the step it stopped at
    assert (tmp_path / "ddp" / "checkpoint.pt").is_file()


def _no_step_boundary(strategy):
    time.sleep(60)


def test_a_launch_without_step_boundaries_is_stopped_after_the_grace_period(monkeypatch):
    monkeypatch.setattr("workbench.parallel.launching.launcher.GRACE_S", 1.0)  # 5 s for a person
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    began = time.monotonic()
    with pytest.raises(TrainingInterrupted, match=r"quit training \(2 processes\) at step 0 without saving"):
        launch(_no_step_boundary, 2, verbose=False)
    assert time.monotonic() - began < 2 + 1 + 5  # the interrupt, the grace period, stopping


def test_a_runner_interrupted_while_waiting_says_where_it_stopped(tmp_path):
    runner = JobRunner(_trainer(tmp_path))
    runner.start()
    time.sleep(1.0)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(
        TrainingInterrupted, match=r"stopped training \(1 process on cpu\) at step \d+ of 4600 after"
    ):
        runner.wait()
    assert (tmp_path / "x" / "checkpoint.pt").is_file()
