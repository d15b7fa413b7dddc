"""Notebook 02's schedule exercise: linear warm-up, then cosine decay, as the Trainer runs it.

A learner's function ``warmup_cosine(step, total_steps, warmup_steps)`` returns the multiplier of the peak lr
for optimizer step `step` (0-based) of `total_steps`. `check_lr_schedule` compares it at every step of a few
runs with `workbench.train.optim.lr_factor("cosine", ...)`, what ``TrainConfig(optimizer=OptimizerConfig(...,
schedule="cosine", warmup_steps=...))`` applies, and names the usual slips.

Example:
    >>> import math
    >>> def warmup_cosine(step, total_steps, warmup_steps):
    ...     if step < warmup_steps:
    ...         return (step + 1) / (warmup_steps + 1)  # the first step already moves
    ...     progress = (step - warmup_steps) / max(total_steps - warmup_steps - 1, 1)  # 0 … 1 after warm-up
    ...     return 0.5 * (1 + math.cos(math.pi * progress))
    >>> print(check_lr_schedule(warmup_cosine))
    warmup_cosine matches the Trainer's warm-up + cosine schedule at every step of 4 runs
"""

from __future__ import annotations

import math
from collections.abc import Callable

from workbench.exercises.mismatch import ExerciseMismatch, learners_code
from workbench.exercises.waiting import waits_for_learner
from workbench.train.optim import lr_factor

TOLERANCE = 1e-9
RUNS = ((10, 0), (10, 3), (100, 10), (7, 6))  # (total_steps, warmup_steps)
_HINT = (
    "warm-up rises linearly to 1 over warmup_steps steps, starting above 0: (step + 1) / (warmup_steps + 1); "
    "then the cosine goes from 1 at the first step after warm-up to 0 at the last step, total_steps - 1"
)


@waits_for_learner
def check_lr_schedule(warmup_cosine: Callable[[int, int, int], float]) -> str:
    """Run ``warmup_cosine(step, total_steps, warmup_steps)`` over every step of `RUNS`; raise
    `ExerciseMismatch` at the first step where it differs from the Trainer's rule."""
    name = getattr(warmup_cosine, "__name__", "warmup_cosine")
    for total, warmup in RUNS:
        for step in range(total):
            want = lr_factor("cosine", step, total, warmup)
            call = f"{name}({step}, {total}, {warmup})"
            with learners_code(call, _HINT):
                got = warmup_cosine(step, total, warmup)
            if not isinstance(got, int | float) or not math.isclose(got, want, rel_tol=0, abs_tol=TOLERANCE):
                raise ExerciseMismatch(
                    f"{call} returned {got!r}; the Trainer's multiplier at step {step} of {total} with "
                    f"{warmup} warm-up steps is {want:.6g}{_diagnose(got, step, total, warmup)}. "
                    f"Hint: {_HINT}"
                )
    return f"{name} matches the Trainer's warm-up + cosine schedule at every step of {len(RUNS)} runs"


def _diagnose(got: object, step: int, total: int, warmup: int) -> str:
    """Name the slip when `got` is one of the usual wrong answers at this step."""
    if not isinstance(got, int | float):
        return ": return a number (the multiplier of the peak lr)"
    slips = {}
    if step < warmup:
        slips["warm-up starting at 0: the first step would not move the weights"] = step / warmup
    else:
        from_zero = (step - warmup) / max(total - warmup, 1)
        slips["the cosine ending one step late: it should reach 0 at the last step"] = 0.5 * (
            1 + math.cos(math.pi * from_zero)
        )
        slips["the cosine counted from step 0, not from the end of warm-up"] = 0.5 * (
            1 + math.cos(math.pi * min(step / max(total - 1, 1), 1.0))
        )
    for slip, value in slips.items():
        if math.isclose(got, value, rel_tol=0, abs_tol=TOLERANCE):
            return f": that is {slip}"
    return ""
