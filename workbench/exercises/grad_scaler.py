"""Notebook 05's exercise: write GradScaler's loss-scale update yourself, check it against ``torch.amp``.

fp16 gradients underflow below ~6e-8, so mixed precision multiplies the loss (and with it every gradient)
by a large **scale** before backward and divides it out before the optimizer step. When a scaled gradient
overflows (inf or NaN), the step is skipped and the scale backs off; after ``growth_interval`` clean steps
in a row it grows again. A learner's update is ``update(state, found_inf, **options)``: it changes
``state["scale"]`` (65536.0 at first) and keeps whatever else it needs in ``state``.

Example:
    >>> def update(state, found_inf, *, growth_factor, backoff_factor, growth_interval):
    ...     state["scale"] *= backoff_factor if found_inf else 1.0  # never grows: wrong
    >>> check_scale_update(update)
    Traceback (most recent call last):
    ...
    workbench.exercises.mismatch.ExerciseMismatch: update gives scale 4096 after step 18 ...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.waiting import waits_for_learner

FP16_MAX = torch.finfo(torch.float16).max  # 65504: a scaled gradient above it is inf in fp16
_OPTIONS = {"growth_factor": 2.0, "backoff_factor": 0.5}
_HINT = (
    "on an overflow multiply by backoff_factor and restart the count of clean steps; after each clean step "
    "count one, and when the count reaches growth_interval multiply by growth_factor and restart the count"
)


def overflow_pattern(steps: int, *, every: int = 7, seed: int = 0) -> list[bool]:
    """Which steps overflow: about one in ``every``, seeded, and never two settings alike."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(steps, generator=generator) < 1.0 / every).tolist()


def torch_scales(found_infs: Sequence[bool], growth_interval: int) -> list[float]:
    """The scale ``torch.amp.GradScaler`` holds after each step, when the steps in ``found_infs`` overflow."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=growth_interval, **_OPTIONS)
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=0.1)
    scales = []
    for found_inf in found_infs:
        optimizer.zero_grad()
        scaler.scale(parameter.sum()).backward()
        if found_inf:
            parameter.grad.fill_(float("inf"))  # what an fp16 overflow leaves in a gradient
        scaler.step(optimizer)  # skipped when a gradient is not finite
        scaler.update()
        scales.append(scaler.get_scale())
    return scales


@waits_for_learner
def check_scale_update(update: Callable[..., Any], *, steps: int = 80) -> str:
    """Run ``update`` beside ``torch.amp.GradScaler`` over the same overflowing and clean steps.

    Two settings (growth every 5 and every 3 clean steps), each over ``steps`` steps of which about one in
    seven overflows. Returns a one-line summary; raises :class:`ExerciseMismatch` at the first step whose
    scale differs from torch's.
    """
    name = getattr(update, "__name__", repr(update))
    for growth_interval in (5, 3):
        found_infs = overflow_pattern(steps, seed=growth_interval)
        expected = torch_scales(found_infs, growth_interval)
        state: dict[str, Any] = {"scale": 2.0**16}
        for step, (found_inf, scale) in enumerate(zip(found_infs, expected, strict=True), start=1):
            update(state, found_inf, growth_interval=growth_interval, **_OPTIONS)
            if state["scale"] != scale:
                what = "overflowed" if found_inf else "was clean"
                raise ExerciseMismatch(
                    f"{name} gives scale {state['scale']:g} after step {step} (which {what}, growth_interval="
                    f"{growth_interval}); torch.amp.GradScaler has {scale:g}. Hint: {_HINT}"
                )
    return f"{name} matches torch.amp.GradScaler: 2 settings × {steps} steps"


def simulate_loss_scaling(
    update: Callable[..., Any], largest_gradients: Sequence[float], *, growth_interval: int
) -> tuple[list[float], list[bool]]:
    """The scale before each step and whether the step overflowed, for unscaled largest gradients.

    A step overflows when its largest gradient times the scale exceeds fp16's largest number (65504).

    Example:
        >>> def update(state, found_inf, *, growth_factor, backoff_factor, growth_interval):
        ...     state["scale"] *= backoff_factor if found_inf else 1.0
        >>> simulate_loss_scaling(update, [1.0, 1.0, 0.1], growth_interval=2)
        ([65536.0, 32768.0, 32768.0], [True, False, False])
    """
    state: dict[str, Any] = {"scale": 2.0**16}
    scales, overflows = [], []
    for gradient in largest_gradients:
        scales.append(state["scale"])
        found_inf = gradient * state["scale"] > FP16_MAX
        overflows.append(found_inf)
        update(state, found_inf, growth_interval=growth_interval, **_OPTIONS)
    return scales, overflows
