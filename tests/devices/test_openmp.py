"""Training started on a second thread must not share the cores with the calling thread's idle OpenMP team."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from workbench.devices import openmp
from workbench.train import Trainer
from workbench.train.job_runner import JobRunner


def _os_threads() -> set[str]:
    return set(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not openmp.loaded_libgomps(), reason="torch's OpenMP runtime here is not libgomp")
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
