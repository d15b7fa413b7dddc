import math
import threading
import time

import pytest

from workbench._validate import check_positive
from workbench.widgets.throttle import Throttle


def _wait_for(condition, timeout=3.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_many_pokes_become_few_pushes_from_the_timer_thread():
    pushes = []
    throttle = Throttle(lambda: pushes.append(threading.current_thread().name), max_per_s=20)
    started = time.monotonic()
    while time.monotonic() - started < 0.3:
        throttle.poke()
        time.sleep(0.0005)
    throttle.stop()
    assert 2 <= len(pushes) <= 0.3 * 20 + 1
    assert set(pushes) == {"workbench-throttle"}
    assert not throttle.running


def test_flush_pushes_a_pending_change_once_on_the_caller():
    pushes = []
    throttle = Throttle(lambda: pushes.append(threading.current_thread().name), max_per_s=1)
    throttle.poke()
    throttle.stop()
    throttle.flush()
    throttle.flush()
    assert pushes == [threading.current_thread().name]


def test_the_timer_ends_after_a_quiet_spell_and_restarts_on_the_next_poke():
    pushes = []
    throttle = Throttle(lambda: pushes.append(1), max_per_s=50, idle_s=0.05)
    throttle.poke()
    assert _wait_for(lambda: not throttle.running)
    assert pushes == [1]
    throttle.poke()
    assert throttle.running
    assert _wait_for(lambda: len(pushes) == 2)
    throttle.stop()


def test_start_and_stop_are_idempotent():
    threads_before = set(threading.enumerate())
    throttle = Throttle(lambda: None, max_per_s=4)
    throttle.start()
    throttle.start()
    assert throttle.running
    throttle.stop()
    throttle.stop()
    assert not throttle.running
    assert [t for t in threading.enumerate() if t not in threads_before and t.is_alive()] == []


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "4", True, None])
def test_check_positive_rejects_everything_but_finite_positive_numbers(bad):
    with pytest.raises(ValueError, match="rate must be a finite number > 0"):
        check_positive("rate", bad)


def test_check_positive_accepts_ints_and_floats():
    assert check_positive("rate", 4) == 4.0 and check_positive("rate", 0.5) == 0.5


@pytest.mark.parametrize("field", ["max_per_s", "idle_s"])
def test_throttle_arguments_are_checked(field):
    kwargs = {"max_per_s": 4, "idle_s": 5.0, field: 0}
    with pytest.raises(ValueError, match=field):
        Throttle(lambda: None, **kwargs)
