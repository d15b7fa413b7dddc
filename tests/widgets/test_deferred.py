import threading
import time

from workbench.train.events import Callback
from workbench.widgets.deferred import DeferredCallbacks


class Recorder(Callback):
    def __init__(self):
        self.events, self.threads = [], set()

    def on_fit_start(self, info):
        self.events.append(("start", info["start_step"]))

    def on_step(self, metrics):
        self.threads.add(threading.current_thread().name)
        self.events.append(("step", metrics["step"]))

    def on_eval(self, metrics):
        self.events.append(("eval", metrics["step"]))

    def on_fit_end(self, summary):
        self.events.append(("end", summary["status"]))


class Broken(Callback):
    def on_step(self, metrics):
        raise ValueError("cannot draw")


def test_steps_reach_the_views_from_the_timer_thread_in_order_and_all_by_the_end():
    recorder = Recorder()
    deferred = DeferredCallbacks([recorder])
    deferred.on_fit_start({"start_step": 0})
    for step in range(1, 6):
        deferred.on_step({"step": step})  # queued: the timer thread delivers
    deferred.on_eval({"step": 5})
    deadline = time.monotonic() + 3
    while len(recorder.events) < 7 and time.monotonic() < deadline:  # the timer delivers within ~0.1 s
        time.sleep(0.01)
    assert recorder.threads == {"workbench-throttle"}
    deferred.on_step({"step": 6})
    deferred.on_fit_end({"status": "finished"})  # delivers what is queued, then itself, on this thread
    steps = [("step", step) for step in range(1, 7)]
    assert recorder.events == [("start", 0), *steps[:5], ("eval", 5), steps[5], ("end", "finished")]


def test_a_view_that_raises_is_reported_and_the_others_still_get_every_event():
    recorder, reported = Recorder(), []
    deferred = DeferredCallbacks([Broken(), recorder], on_error=lambda view, error: reported.append(error))
    deferred.on_fit_start({"start_step": 0})
    for step in range(1, 4):
        deferred.on_step({"step": step})
    deferred.on_fit_end({"status": "finished"})
    assert [e for e in recorder.events if e[0] == "step"] == [("step", 1), ("step", 2), ("step", 3)]
    assert len(reported) == 3 and deferred.errors[0] == "Broken: ValueError: cannot draw"
