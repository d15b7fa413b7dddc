"""follow_metrics: a run written by another process arrives as live events, in order, exactly once."""

import time

import pytest

from workbench.train import Callback, MetricsLog
from workbench.train.follow import follow_metrics


class Recorder(Callback):
    def __init__(self):
        self.seen = []

    def on_fit_start(self, info):
        self.seen.append(("start", info["start_step"]))

    def on_step(self, metrics):
        self.seen.append(("step", metrics["step"]))

    def on_eval(self, metrics):
        self.seen.append(("eval", metrics["split"]))

    def on_fit_end(self, summary):
        self.seen.append(("end", summary["status"]))


def _until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_events_arrive_while_the_run_is_written_and_the_end_ends_the_wait(tmp_path):
    recorder = Recorder()
    follower = follow_metrics(tmp_path / "run", [recorder], interval=0.02)  # the log does not exist yet
    log = MetricsLog(tmp_path / "run")
    log.on_fit_start({"start_step": 0})
    log.on_eval({"step": 0, "split": "val", "loss": 1.0})  # evaluations flush
    _until(lambda: ("eval", "val") in recorder.seen)
    assert not follower.wait(0)
    log.on_step({"step": 1, "loss": 0.5})
    log.on_fit_end({"status": "finished"})
    assert follower.wait(5)
    follower.stop()
    assert recorder.seen == [("start", 0), ("eval", "val"), ("step", 1), ("end", "finished")]


def test_steps_are_flushed_at_least_once_a_second(tmp_path):
    recorder = Recorder()
    log = MetricsLog(tmp_path)
    log.on_fit_start({"start_step": 0})
    follower = follow_metrics(tmp_path, [recorder], interval=0.02)
    step = 0
    deadline = time.monotonic() + 3
    while ("step", 1) not in recorder.seen:
        assert time.monotonic() < deadline, "steps never reached the follower before the end of the fit"
        step += 1
        log.on_step({"step": step, "loss": 1.0})
        time.sleep(0.05)
    follower.stop()


def test_a_partial_line_waits_and_a_restarted_log_is_read_from_the_start(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"event": "fit_start", "start_step": 0}\n{"event": "step", "st')
    recorder = Recorder()
    follower = follow_metrics(path, [recorder], interval=10)  # the thread polls once, then tests poll
    _until(lambda: recorder.seen == [("start", 0)])
    with path.open("a") as file:
        file.write('ep": 1, "loss": 0.5}\n')
    assert follower.poll() == 1 and recorder.seen[-1] == ("step", 1)
    # a fresh fit started the log over, and wrote more than was read before the next poll
    path.write_text(
        '{"event": "fit_start", "start_step": 0, "run": "again"}\n' + '{"event": "step", "step": 1}\n' * 3
    )
    assert follower.poll() == 4 and recorder.seen[-4:] == [("start", 0)] + [("step", 1)] * 3
    follower.stop()


def test_the_interval_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="interval must be a finite number > 0"):
        follow_metrics(tmp_path, [], interval=0)


def test_a_follower_reads_the_resume_after_a_torn_line_is_cut(tmp_path):
    """The writer was killed mid-line; the follower had read that fragment. The resume cuts it and appends
    its fit_start: the follower read on from where the fragment ended, so it glued the fragment to the
    resume's line, skipped it as malformed, and never heard that the fit resumed."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"event": "fit_start", "start_step": 0}\n{"event": "step", "step": 1}\n{"event": "st')
    recorder = Recorder()
    follower = follow_metrics(tmp_path, [recorder], interval=10)  # the thread polls once, then tests poll
    _until(lambda: recorder.seen == [("start", 0), ("step", 1)])
    log = MetricsLog(tmp_path)
    log.on_fit_start({"start_step": 1})
    log.on_fit_end({"status": "finished"})
    assert follower.poll() == 2 and follower.skipped == 0
    assert recorder.seen[2:] == [("start", 1), ("end", "finished")]
    follower.stop()
