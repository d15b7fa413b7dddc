"""Notebook 02's "write the optimizers yourself" checks: right answers pass, each classic mistake is named."""

import pytest
import torch

from workbench.exercises import (
    OPTIMIZER_CHECKS,
    ExerciseMismatch,
    check_optimizer_step,
    follow_trajectory,
    quadratic,
    steps_to_reach,
    trajectory_figure,
)


def sgd_step(p, g, state, *, lr):
    p -= lr * g


def sgd_weight_decay_step(p, g, state, *, lr, weight_decay):
    p -= lr * (g + weight_decay * p)


def momentum_step(p, g, state, *, lr, momentum):
    velocity = state.get("velocity")
    state["velocity"] = velocity = g.clone() if velocity is None else momentum * velocity + g
    p -= lr * velocity


def adam_step(p, g, state, *, lr, betas, eps):
    (beta1, beta2), t = betas, state.get("t", 0) + 1
    state["t"] = t
    m = state["m"] = beta1 * state.get("m", 0.0) + (1 - beta1) * g
    v = state["v"] = beta2 * state.get("v", 0.0) + (1 - beta2) * g * g
    p -= lr * (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps)


def adamw_step(p, g, state, *, lr, betas, eps, weight_decay):
    p *= 1 - lr * weight_decay
    adam_step(p, g, state, lr=lr, betas=betas, eps=eps)


RIGHT = {
    "sgd": sgd_step,
    "sgd_weight_decay": sgd_weight_decay_step,
    "momentum": momentum_step,
    "adam": adam_step,
    "adamw": adamw_step,
}


def test_every_exercise_has_a_reference_answer_here():
    assert set(RIGHT) == set(OPTIMIZER_CHECKS)


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_a_right_answer_matches_torch_optim(name):
    summary = check_optimizer_step(RIGHT[name], name)
    assert summary.startswith(
        f"{RIGHT[name].__name__} matches torch.optim.{OPTIMIZER_CHECKS[name].reference.__name__}"
    )


def momentum_with_dampening(p, g, state, *, lr, momentum):  # v ← μv + (1 − μ)g: an EMA, not torch's velocity
    state["v"] = momentum * state.get("v", torch.zeros_like(g)) + (1 - momentum) * g
    p -= lr * state["v"]


def adam_without_bias_correction(p, g, state, *, lr, betas, eps):
    m = state["m"] = betas[0] * state.get("m", 0.0) + (1 - betas[0]) * g
    v = state["v"] = betas[1] * state.get("v", 0.0) + (1 - betas[1]) * g * g
    p -= lr * m / (v.sqrt() + eps)


def adam_with_eps_inside_the_root(p, g, state, *, lr, betas, eps):
    (beta1, beta2), t = betas, state.get("t", 0) + 1
    state["t"] = t
    m = state["m"] = beta1 * state.get("m", 0.0) + (1 - beta1) * g
    v = state["v"] = beta2 * state.get("v", 0.0) + (1 - beta2) * g * g
    p -= lr * (m / (1 - beta1**t)) / (v / (1 - beta2**t) + eps).sqrt()


def adamw_as_l2(p, g, state, *, lr, betas, eps, weight_decay):  # what torch.optim.Adam(weight_decay=...) does
    adam_step(p, g + weight_decay * p, state, lr=lr, betas=betas, eps=eps)


def adam_forgetting_its_state(p, g, state, *, lr, betas, eps):  # every step looks like the first
    adam_step(p, g, {}, lr=lr, betas=betas, eps=eps)


def sgd_rebinding(p, g, state, *, lr):
    p = p - lr * g  # the mistake under test


def sgd_without_keywords(p, g, lr):
    p -= lr * g


WRONG = [
    (momentum_with_dampening, "momentum", "no \\(1 − momentum\\)"),
    (adam_without_bias_correction, "adam", "bias correction"),
    (adam_with_eps_inside_the_root, "adam", "differs from torch.optim.Adam at step"),
    (adam_forgetting_its_state, "adam", "Keep|count the step t in `state`"),
    (adamw_as_l2, "adamw", "adding weight_decay·p to g is Adam with L2"),
    (sgd_step, "sgd_weight_decay", "cannot be called as sgd_step\\(p, g, state, \\*, lr, weight_decay\\)"),
    (sgd_rebinding, "sgd", "left the parameter unchanged at step 1"),
    (sgd_without_keywords, "sgd", "cannot be called as sgd_step\\(p, g, state, \\*, lr\\)"),
]


@pytest.mark.parametrize(("update", "name", "says"), WRONG, ids=[w[0].__name__ for w in WRONG])
def test_a_classic_mistake_is_caught_and_the_message_points_at_it(update, name, says):
    with pytest.raises(ExerciseMismatch, match=says):
        check_optimizer_step(update, name)


def test_an_unknown_exercise_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"optimizer='lion' is not one of the exercises: \['adam', 'adamw'"):
        check_optimizer_step(sgd_step, "lion")


def test_gd_steps_grow_with_the_condition_number_and_adam_is_blind_to_it_only_on_aligned_axes():
    def counts(angle):
        found = {}
        for kappa in (25.0, 100.0):
            bowl = quadratic((1.0, kappa), angle)
            gd = follow_trajectory(sgd_step, bowl, (-3.0, 1.0), 1000, lr=1.8 / kappa)
            adam = follow_trajectory(adam_step, bowl, (-3.0, 1.0), 1000, lr=0.3, betas=(0.9, 0.999), eps=1e-8)
            found[kappa] = (steps_to_reach(bowl, gd, 1e-3), steps_to_reach(bowl, adam, 1e-3))
        return found

    aligned, turned = counts(0.0), counts(45.0)
    assert 3.5 < aligned[100.0][0] / aligned[25.0][0] < 4.5  # GD: steps ∝ κ
    assert 0.9 < aligned[100.0][1] / aligned[25.0][1] < 1.2  # Adam on the axes it rescales
    assert turned[100.0][1] / turned[25.0][1] > 2  # Adam on a turned bowl


def test_steps_to_reach_needs_the_loss_to_stay_below_the_target():
    bowl = quadratic((1.0, 1.0))
    path = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    assert steps_to_reach(bowl, path, 0.1) == 3
    assert steps_to_reach(bowl, path[:3], 0.1) is None


def test_a_bowl_needs_two_positive_curvatures():
    with pytest.raises(ValueError, match=r"curvatures=\(1.0, 0.0\): give two positive numbers"):
        quadratic((1.0, 0.0))


def test_the_figure_draws_the_contours_and_one_path_and_curve_per_optimizer():
    bowl = quadratic((1.0, 25.0))
    paths = {"GD": follow_trajectory(sgd_step, bowl, (-3.0, 1.0), 10, lr=0.07)}
    figure = trajectory_figure(bowl, paths)
    kinds = [trace.type for trace in figure.data]
    assert kinds == ["contour", "scatter", "scatter"]
    assert len(figure.data[1].x) == 11 and min(figure.data[2].y) > 0
