"""Notebook 05's "write GradScaler's update" check: the right rule passes, each classic slip is caught."""

import pytest

from workbench.exercises import ExerciseMismatch, check_scale_update, simulate_loss_scaling
from workbench.exercises.grad_scaler import overflow_pattern, torch_scales


def update_scale(state, found_inf, *, growth_factor, backoff_factor, growth_interval):
    if found_inf:
        state["scale"] *= backoff_factor
        state["clean"] = 0
        return
    state["clean"] = state.get("clean", 0) + 1
    if state["clean"] == growth_interval:
        state["scale"] *= growth_factor
        state["clean"] = 0


def keeps_counting_after_an_overflow(state, found_inf, *, growth_factor, backoff_factor, growth_interval):
    if found_inf:
        state["scale"] *= backoff_factor
        return
    state["clean"] = state.get("clean", 0) + 1
    if state["clean"] % growth_interval == 0:
        state["scale"] *= growth_factor


def grows_one_step_late(state, found_inf, *, growth_factor, backoff_factor, growth_interval):
    if found_inf:
        state["scale"] *= backoff_factor
        state["clean"] = 0
        return
    state["clean"] = state.get("clean", 0) + 1
    if state["clean"] > growth_interval:
        state["scale"] *= growth_factor
        state["clean"] = 0


def never_grows(state, found_inf, *, growth_factor, backoff_factor, growth_interval):
    state["scale"] *= backoff_factor if found_inf else 1.0


def test_the_rule_matches_torch_amp_grad_scaler():
    summary = check_scale_update(update_scale)
    assert summary == "update_scale matches torch.amp.GradScaler: 2 settings × 80 steps"


@pytest.mark.parametrize("wrong", [keeps_counting_after_an_overflow, grows_one_step_late, never_grows])
def test_a_wrong_rule_is_caught_with_the_step_and_both_scales(wrong):
    with pytest.raises(ExerciseMismatch, match=rf"{wrong.__name__} gives scale \d+ after step \d+ .*has \d+"):
        check_scale_update(wrong)


def test_torch_backs_off_on_an_overflow_and_grows_after_the_interval():
    assert torch_scales([True, False, False], growth_interval=2) == [32768.0, 32768.0, 65536.0]
    assert sum(overflow_pattern(700, seed=1)) in range(70, 131)  # about one step in seven


def test_the_simulation_overflows_where_the_scaled_gradient_passes_fp16s_largest_number():
    scales, overflows = simulate_loss_scaling(update_scale, [0.5, 1.5, 0.1, 0.1], growth_interval=2)
    assert scales == [65536.0, 65536.0, 32768.0, 32768.0]
    assert overflows == [False, True, False, False]  # 1.5 × 65536 > 65504; 0.5 × 65536 is not
