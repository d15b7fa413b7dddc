"""Training started on a second thread must not share the cores with the calling thread's idle OpenMP team."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

from workbench.devices import openmp
from workbench.train import Trainer
from workbench.train.control import TrainControl
from workbench.train.job_runner import JobRunner

libgomp_only = pytest.mark.skipif(
    not openmp.loaded_libgomps(), reason="torch's OpenMP runtime here is not libgomp"
)


def _os_threads() -> set[str]:
    return set(os.listdir("/proc/self/task"))


@libgomp_only
def test_releasing_frees_the_calling_threads_idle_team_and_the_next_op_builds_it_again():
    seen: dict[str, object] = {}

    def on_a_thread_of_its_own() -> None:  # this thread's team only: pytest's main thread keeps its own
        torch.set_num_threads(2)  # per thread: the team of this one has a worker whatever the cores
        before = _os_threads()
        x = torch.ones(1_000_000).exp()  # parallel ops: libgomp starts this thread's team
        team = _os_threads() - before
        seen["team"], seen["released"] = team, openmp.release_idle_threads()
        deadline = time.monotonic() + 10
        while team & _os_threads() and time.monotonic() < deadline:
            time.sleep(0.01)  # the workers leave asynchronously
        seen["left"] = team - _os_threads()
        before = _os_threads()
        x.exp()
        seen["rebuilt"] = _os_threads() - before

    threads = torch.get_num_threads()
    try:
        worker = threading.Thread(target=on_a_thread_of_its_own)
        worker.start()
        worker.join()
    finally:
        torch.set_num_threads(threads)
    assert seen["team"] and seen["released"] is True
    assert seen["left"] == seen["team"]  # its idle workers left
    assert seen["rebuilt"]  # and new ones came with the next parallel op


def test_starting_a_job_in_the_background_releases_the_callers_team_first(monkeypatch, regression_splits):
    calls = []
    monkeypatch.setattr(openmp, "release_idle_threads", lambda: calls.append(threading.current_thread()))
    runner = JobRunner(Trainer(torch.nn.Linear(10, 1), torch.nn.functional.mse_loss, regression_splits))
    runner.start()
    assert runner.wait().status == "finished"
    assert calls == [threading.current_thread()]  # on the caller's thread, whose team would sit idle
    runner.run_here()  # training on this very thread: its team is the one it uses
    assert len(calls) == 1


class _WaitingJob:
    """A job that waits to be told to end, using no CPU: the only OpenMP team is the one cells build."""

    def __init__(self) -> None:
        self.control, self.end = TrainControl(), threading.Event()

    def fit(self, resume: bool = False) -> str:
        self.end.wait(60)
        return "ended"


def _leave_within(threads: set[str], seconds: float) -> set[str]:
    """Those of `threads` still there after waiting up to `seconds` for them to leave."""
    deadline = time.monotonic() + seconds
    while threads & _os_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return threads & _os_threads()


@libgomp_only
def test_a_cell_that_runs_while_a_job_trains_gives_its_idle_team_back_when_it_ends():
    """Run All goes on while the Dashboard trains: a later cell's torch ops build the kernel thread's team
    again, which would throttle the job's ops for the rest of the training; the end of the cell frees it."""
    shell, threads, job = InteractiveShell.instance(), torch.get_num_threads(), _WaitingJob()
    hooks = list(shell.events.callbacks["post_run_cell"])
    runner = JobRunner(job)
    try:
        torch.set_num_threads(2)  # per thread: this thread's team has a worker whatever the cores
        shell.run_cell("import os, torch\nx = torch.ones(1_000_000)")
        runner.start()
        before = _os_threads()
        shell.run_cell("x.exp()\nthreads_in_the_cell = set(os.listdir('/proc/self/task'))")
        team = shell.user_ns["threads_in_the_cell"] - before
        assert team and runner.running  # the cell's op built a team while the job ran
        assert not _leave_within(team, 10)  # gone once the cell ended
        job.end.set()
        assert runner.wait() == "ended"
        shell.run_cell("x.exp()")  # the first cell after the job: the hook takes itself away
        assert shell.events.callbacks["post_run_cell"] == hooks
    finally:
        job.end.set()
        runner.join()
        torch.set_num_threads(threads)
        InteractiveShell.clear_instance()
