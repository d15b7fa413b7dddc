import threading

import pytest

from workbench.train import Changes, TrainControl


def test_changes_are_handed_over_once():
    control = TrainControl()
    control.set_lr(0.5)
    control.set_clipping(norm=1.0)
    control.set_clipping(value=0.1)
    assert control.at_step_boundary() == Changes(lr=0.5, clip_norm=1.0, clip_value=0.1)
    assert control.at_step_boundary() == Changes()
    assert not Changes().any() and Changes(lr=1.0).any()


def test_pause_blocks_until_resume():
    control = TrainControl()
    control.pause()
    assert control.paused
    threading.Timer(0.1, control.resume).start()
    control.at_step_boundary(wait=5)
    assert not control.paused


def test_pause_wait_is_bounded():
    control = TrainControl()
    control.pause()
    control.at_step_boundary(wait=0.05)  # returns although still paused
    assert control.paused


def test_reset_forgets_stop_pause_and_pending_changes():
    control = TrainControl()
    control.pause()
    control.stop()
    control.set_lr(0.1)
    control.reset()
    assert not control.paused and not control.stop_requested
    assert control.at_step_boundary() == Changes()


@pytest.mark.parametrize("lr", [0, -1.0, float("nan"), "0.1", True])
def test_bad_lr_is_refused(lr):
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        TrainControl().set_lr(lr)


def test_bad_clipping_is_refused():
    control = TrainControl()
    with pytest.raises(ValueError, match="norm must be a finite number ≥ 0"):
        control.set_clipping(norm=-1.0)
    with pytest.raises(ValueError, match="value must be a finite number ≥ 0"):
        control.set_clipping(value=float("inf"))
    with pytest.raises(ValueError, match="needs norm= or value="):
        control.set_clipping()
