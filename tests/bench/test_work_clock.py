"""WorkClock counts CPU of threads that end inside its block, not their sleep, and time inside callbacks."""

import threading
import time

from workbench.bench.work_clock import WorkClock
from workbench.train.events import Callback


def _busy(seconds: float) -> None:
    started = time.thread_time()
    while time.thread_time() - started < seconds:
        pass


def _run_thread(target, *args) -> None:
    worker = threading.Thread(target=target, args=args)
    worker.start()
    worker.join()


def test_threads_count_their_cpu_not_their_sleep_and_only_inside_the_block():
    clock = WorkClock()
    with clock.threads():
        _run_thread(_busy, 0.05)
        _run_thread(time.sleep, 0.3)
    _run_thread(_busy, 0.2)  # after the block: not counted
    assert 0.05 <= clock.threads_cpu_s < 0.1


def test_clocked_callbacks_forward_every_event_and_add_up_their_time():
    seen = []

    class Slow(Callback):
        def on_fit_start(self, info):
            seen.append("fit_start")

        def on_step(self, metrics):
            time.sleep(0.02)
            seen.append(metrics["step"])

        def on_fit_end(self, summary):
            seen.append(summary["status"])

    clock = WorkClock()
    [clocked] = clock.clocked([Slow()])
    clocked.on_fit_start({})
    clocked.on_step({"step": 1})
    clocked.on_eval({"step": 1})
    clocked.on_fit_end({"status": "finished"})
    assert seen == ["fit_start", 1, "finished"]
    assert 0.02 <= clock.callbacks_s < 0.2 and clock.threads_cpu_s == 0
    assert 0 < clock.fit_edges_s < 0.01  # on_fit_start and on_fit_end only
