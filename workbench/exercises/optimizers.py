"""Notebook 02's exercise: write SGD, momentum, Adam and AdamW yourself, check them against ``torch.optim``.

A learner's update is a function ``step(p, g, state, **hyperparameters)`` that changes the parameter tensor
``p`` in place from its gradient ``g``; ``state`` is that parameter's own dict, empty at the first step,
for whatever the optimizer keeps (a velocity, moment estimates, a step count). :func:`check_optimizer_step`
runs it beside the torch optimizer on the same seeded parameters and gradients; :func:`quadratic`,
:func:`follow_trajectory` and :func:`trajectory_figure` put the updates on an ill-conditioned 2-D problem
where they differ.

Example:
    >>> def sgd_step(p, g, state, *, lr):
    ...     p -= lr * g
    >>> check_optimizer_step(sgd_step, "sgd")
    'sgd_step matches torch.optim.SGD: 2 settings × 30 steps, within 1e-05'
    >>> def lazy_sgd(p, g, state, *, lr):
    ...     p = p - lr * g  # a new tensor: the caller's parameter never moves
    >>> check_optimizer_step(lazy_sgd, "sgd")
    Traceback (most recent call last):
    ...
    workbench.exercises.mismatch.ExerciseMismatch: lazy_sgd left the parameter unchanged at step 1 ...
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.waiting import waits_for_learner

Step = Callable[..., Any]


@dataclass(frozen=True)
class OptimizerCheck:
    """The torch optimizer a learner's update must match, the settings it is tried with, and a hint."""

    reference: type[torch.optim.Optimizer]
    signature: str
    settings: tuple[Mapping[str, Any], ...]
    hint: str


_BETAS = {"betas": (0.9, 0.999), "eps": 1e-8}
OPTIMIZER_CHECKS: dict[str, OptimizerCheck] = {
    "sgd": OptimizerCheck(
        torch.optim.SGD,
        "sgd_step(p, g, state, *, lr)",
        ({"lr": 0.1}, {"lr": 0.01}),
        "plain SGD is p ← p − lr·g, done in place (p -= ..., or p.add_(g, alpha=-lr))",
    ),
    "sgd_weight_decay": OptimizerCheck(
        torch.optim.SGD,
        "sgd_step(p, g, state, *, lr, weight_decay)",
        ({"lr": 0.1, "weight_decay": 0.01}, {"lr": 0.01, "weight_decay": 0.5}),
        "torch's SGD adds the decay to the gradient (L2, coupled): g ← g + weight_decay·p, then p ← p − lr·g",
    ),
    "momentum": OptimizerCheck(
        torch.optim.SGD,
        "momentum_step(p, g, state, *, lr, momentum)",
        ({"lr": 0.05, "momentum": 0.9}, {"lr": 0.01, "momentum": 0.5}),
        "torch keeps a velocity v: v ← g at the first step, then v ← momentum·v + g (no (1 − momentum) "
        "factor on g); then p ← p − lr·v. Keep v in `state` between calls",
    ),
    "adam": OptimizerCheck(
        torch.optim.Adam,
        "adam_step(p, g, state, *, lr, betas, eps)",
        ({"lr": 0.01, **_BETAS}, {"lr": 0.001, "betas": (0.8, 0.99), "eps": 1e-6}),
        "count the step t in `state`; m ← β1·m + (1 − β1)·g, v ← β2·v + (1 − β2)·g²; bias correction "
        "m̂ = m / (1 − β1^t), v̂ = v / (1 − β2^t); then p ← p − lr·m̂ / (√v̂ + eps)",
    ),
    "adamw": OptimizerCheck(
        torch.optim.AdamW,
        "adamw_step(p, g, state, *, lr, betas, eps, weight_decay)",
        ({"lr": 0.01, "weight_decay": 0.1, **_BETAS}, {"lr": 0.003, "weight_decay": 0.5, **_BETAS}),
        "AdamW decays the weights apart from the gradient: first p ← p·(1 − lr·weight_decay), then the Adam "
        "step with g unchanged (adding weight_decay·p to g is Adam with L2, which torch.optim.Adam does)",
    ),
}


@waits_for_learner
def check_optimizer_step(step: Step, optimizer: str, *, steps: int = 30, tolerance: float = 1e-5) -> str:
    """Run ``step`` beside the torch optimizer named ``optimizer`` and say whether they agree.

    Two parameter tensors start from the same seeded values; every step both get the same random gradient,
    its scale varying from 1e-5 to 10 over the steps (what Adam normalises, and where its eps matters).
    After each step the learner's parameters must equal torch's within ``tolerance`` (relative, and
    absolute near 0). Returns a one-line summary; raises :class:`ExerciseMismatch` at the first difference.
    """
    if optimizer not in OPTIMIZER_CHECKS:
        raise ValueError(f"optimizer={optimizer!r} is not one of the exercises: {sorted(OPTIMIZER_CHECKS)}")
    check = OPTIMIZER_CHECKS[optimizer]
    name = getattr(step, "__name__", repr(step))
    for setting in check.settings:
        _check_signature(step, name, check, setting)
        _compare_on_one_setting(step, name, check, dict(setting), steps, tolerance)
    return (
        f"{name} matches torch.optim.{check.reference.__name__}: "
        f"{len(check.settings)} settings × {steps} steps, within {tolerance:.0e}"
    )


def _check_signature(step: Step, name: str, check: OptimizerCheck, setting: Mapping[str, Any]) -> None:
    try:
        inspect.signature(step).bind(torch.zeros(1), torch.zeros(1), {}, **setting)
    except TypeError as error:
        raise ExerciseMismatch(
            f"{name} cannot be called as {check.signature} ({error}); define it with that signature"
        ) from None
    except ValueError:  # a builtin without a signature: just try it
        pass


def _compare_on_one_setting(
    step: Step, name: str, check: OptimizerCheck, setting: dict[str, Any], steps: int, tolerance: float
) -> None:
    generator = torch.Generator().manual_seed(0)
    start = [torch.randn(5, 3, generator=generator), torch.randn(4, generator=generator)]
    reference = [p.clone().requires_grad_(True) for p in start]
    optimizer = check.reference(reference, **setting)
    mine = [p.clone() for p in start]
    states: list[dict[str, Any]] = [{} for _ in mine]
    for t in range(1, steps + 1):
        scale = 10.0 ** (6.0 * torch.rand((), generator=generator).item() - 5.0)
        grads = [scale * torch.randn(p.shape, generator=generator) for p in start]
        for p, g in zip(reference, grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
        before = [p.clone() for p in mine] if t == 1 else None  # to catch an update that never lands
        with torch.no_grad():
            for p, g, state in zip(mine, grads, states, strict=True):
                step(p, g.clone(), state, **setting)
        for index, (p, expected) in enumerate(zip(mine, reference, strict=True)):
            if before is not None and torch.equal(p, before[index]):
                raise ExerciseMismatch(
                    f"{name} left the parameter unchanged at step 1 with {setting}: update p in place "
                    "(p -= ..., p.mul_(...), p.addcdiv_(...)); `p = ...` inside the function only renames "
                    "a new tensor"
                )
            if not torch.allclose(p, expected.detach(), rtol=tolerance, atol=tolerance):
                difference = (p - expected.detach()).abs().max().item()
                raise ExerciseMismatch(
                    f"{name} differs from torch.optim.{check.reference.__name__} at step {t} of {steps} with "
                    f"{setting}: largest difference {difference:.2e} in parameter {index}. Hint: {check.hint}"
                )


@dataclass(frozen=True)
class Quadratic:
    """f(w) = ½ Σ λᵢ (Rw)ᵢ², a bowl whose curvatures are ``curvatures`` along axes turned by ``angle``."""

    curvatures: tuple[float, float]
    angle_degrees: float = 0.0

    @property
    def condition_number(self) -> float:
        return max(self.curvatures) / min(self.curvatures)

    def _rotation(self) -> torch.Tensor:
        a = math.radians(self.angle_degrees)
        return torch.tensor([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]], dtype=torch.float64)

    @cached_property  # built once: value and gradient run every step and at every contour point
    def hessian(self) -> torch.Tensor:
        rotation = self._rotation()
        return rotation.T @ torch.diag(torch.tensor(self.curvatures, dtype=torch.float64)) @ rotation

    def value(self, w: torch.Tensor) -> torch.Tensor:
        return 0.5 * (w @ self.hessian.to(w.dtype) @ w)

    def gradient(self, w: torch.Tensor) -> torch.Tensor:
        return self.hessian.to(w.dtype) @ w


def quadratic(curvatures: tuple[float, float] = (1.0, 25.0), angle_degrees: float = 0.0) -> Quadratic:
    """An ill-conditioned bowl: condition number max/min curvature (25 by default), minimum at 0.

    Example:
        >>> bowl = quadratic((1.0, 25.0))
        >>> bowl.condition_number, float(bowl.value(torch.tensor([1.0, 1.0], dtype=torch.float64)))
        (25.0, 13.0)
    """
    if len(curvatures) != 2 or min(curvatures) <= 0:
        raise ValueError(f"curvatures={curvatures!r}: give two positive numbers, e.g. (1.0, 25.0)")
    return Quadratic((float(curvatures[0]), float(curvatures[1])), float(angle_degrees))


def follow_trajectory(
    step: Step, problem: Quadratic, start: tuple[float, float], steps: int, **hyperparameters: Any
) -> torch.Tensor:
    """The points ``step`` visits from ``start`` on ``problem`` with exact gradients: shape (steps + 1, 2).

    Example:
        >>> def sgd_step(p, g, state, *, lr):
        ...     p -= lr * g
        >>> follow_trajectory(sgd_step, quadratic((1.0, 4.0)), (1.0, 1.0), 2, lr=0.25).tolist()
        [[1.0, 1.0], [0.75, 0.0], [0.5625, 0.0]]
    """
    w = torch.tensor(start, dtype=torch.float64)
    state: dict[str, Any] = {}
    points = [w.clone()]
    for _ in range(steps):
        step(w, problem.gradient(w), state, **hyperparameters)
        points.append(w.clone())
    return torch.stack(points)


def steps_to_reach(problem: Quadratic, trajectory: torch.Tensor, target: float) -> int | None:
    """The first step whose loss is below ``target`` and stays below it, or None if it never settles.

    Example (plain gradient descent on a bowl 25 times steeper one way than the other):
        >>> def sgd_step(p, g, state, *, lr):
        ...     p -= lr * g
        >>> bowl = quadratic((1.0, 25.0))
        >>> steps_to_reach(bowl, follow_trajectory(sgd_step, bowl, (1.0, 1.0), 100, lr=0.07), 1e-3)
        43
        >>> steps_to_reach(bowl, follow_trajectory(sgd_step, bowl, (1.0, 1.0), 100, lr=0.09), 1e-3) is None
        True
    """
    values = [float(problem.value(w)) for w in trajectory]
    last_above = max((index for index, v in enumerate(values) if v >= target), default=-1)
    return last_above + 1 if last_above + 1 < len(values) else None


def trajectory_figure(problem: Quadratic, trajectories: Mapping[str, torch.Tensor]):
    """Contours of ``problem`` with each optimizer's path (left) and its loss per step, log scale (right).

    Example (a plotly figure: show it in a notebook with ``figure.show()``):
        >>> def sgd_step(p, g, state, *, lr):
        ...     p -= lr * g
        >>> bowl = quadratic((1.0, 25.0))
        >>> paths = {f"lr {lr}": follow_trajectory(sgd_step, bowl, (1, 1), 30, lr=lr) for lr in (0.02, 0.07)}
        >>> figure = trajectory_figure(bowl, paths)
        >>> [trace.name for trace in figure.data if trace.name]  # each one's path, then its loss
        ['lr 0.02', 'lr 0.02', 'lr 0.07', 'lr 0.07']
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    every = torch.cat(list(trajectories.values()))
    reach = float(every.abs().max()) * 1.1
    grid = torch.linspace(-reach, reach, 41, dtype=torch.float64)
    surface = [[round(float(problem.value(torch.stack([x, y]))), 4) for x in grid] for y in grid]
    figure = make_subplots(rows=1, cols=2, subplot_titles=("paths on the loss surface", "loss per step"))
    figure.add_trace(
        go.Contour(
            x=grid.tolist(),
            y=grid.tolist(),
            z=surface,
            contours_coloring="lines",
            ncontours=25,
            showscale=False,
            line_width=1,
            colorscale="Greys",
            hoverinfo="skip",
        ),
        row=1,
        col=1,
    )
    for index, (name, points) in enumerate(trajectories.items()):
        color = _COLORS[index % len(_COLORS)]
        figure.add_trace(
            go.Scatter(
                x=points[:, 0].tolist(),
                y=points[:, 1].tolist(),
                mode="lines+markers",
                marker_size=4,
                name=name,
                legendgroup=name,
                line_color=color,
            ),
            row=1,
            col=1,
        )
        losses = [max(float(problem.value(w)), 1e-12) for w in points]
        figure.add_trace(
            go.Scatter(
                y=losses, mode="lines", name=name, legendgroup=name, showlegend=False, line_color=color
            ),
            row=1,
            col=2,
        )
    figure.update_yaxes(scaleanchor="x", scaleratio=1, row=1, col=1)
    figure.update_yaxes(type="log", title_text="f(w)", row=1, col=2)
    figure.update_xaxes(title_text="step", row=1, col=2)
    figure.update_layout(
        height=420,
        title=f"condition number {problem.condition_number:g}, axes turned {problem.angle_degrees:g}°",
        margin={"t": 70, "l": 50, "r": 20, "b": 40},
    )
    return figure


_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
