"""Notebook 04b's exercise: pipeline schedules on a simulated clock, where the bubble formula holds exactly.

A schedule says, for each of the `p` stages, the order in which it runs its ``2m`` operations: ``("F", k)``
is micro-batch `k`'s forward on that stage, ``("B", k)`` its backward. `simulate` runs one on a clock where
every forward takes 1 unit and every backward 2, each stage one operation at a time in its own order, a
forward waiting for the previous stage's forward of the same micro-batch and a backward for the next
stage's backward (the last stage's for its own forward). It returns when each operation ran, the bubble
(the share of stage-time spent waiting) and each stage's peak of micro-batches whose activations it holds
(forwarded, not yet backwarded).

`check_schedules(gpipe, one_f_one_b)` runs a learner's two schedule functions for several `p` and `m`:
GPipe's bubble must be exactly (p−1)/(m+p−1), 1F1B's the same, with at most `p` micro-batches' activations
held per stage where GPipe holds all `m`.

Example:
    >>> gpipe = lambda p, m: [[("F", k) for k in range(m)] + [("B", k) for k in range(m)] for _ in range(p)]
    >>> simulate(gpipe(2, 4)).bubble
    Fraction(1, 5)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.waiting import waits_for_learner

Op = tuple[str, int]
Schedule = Sequence[Sequence[Op]]
DURATION = {"F": 1, "B": 2}
_CASES = ((2, 1), (2, 4), (4, 4), (4, 8), (3, 6))
_HINT = (
    "1F1B: stage s runs min(p − s − 1, m) warm-up forwards, then alternates one forward and one backward, "
    "then runs the backwards left"
)


@dataclass(frozen=True)
class SimulatedStep:
    """When each operation ran on each stage (``spans[s][op] = (start, end)``), the makespan, the bubble and
    each stage's peak number of micro-batches held."""

    spans: list[dict[Op, tuple[int, int]]]
    makespan: int
    bubble: Fraction
    peak_held: list[int]


def simulate(schedule: Schedule) -> SimulatedStep:
    """Run `schedule` (a list of operations per stage) on the clock; ExerciseMismatch if it cannot finish."""
    stages = len(schedule)
    micro = _check_shape(schedule)
    done: dict[tuple[int, Op], int] = {}  # (stage, op) → end time
    free, position = [0] * stages, [0] * stages
    spans: list[dict[Op, tuple[int, int]]] = [{} for _ in range(stages)]
    while any(position[s] < len(schedule[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if position[s] == len(schedule[s]):
                continue
            kind, k = schedule[s][position[s]]
            needs = (
                (s - 1, ("F", k)) if kind == "F" else (s + 1, ("B", k)) if s < stages - 1 else (s, ("F", k))
            )
            if needs[0] >= 0 and needs not in done:
                continue
            start = max(free[s], done.get(needs, 0))
            end = start + DURATION[kind]
            done[s, (kind, k)] = free[s] = end
            spans[s][kind, k] = (start, end)
            position[s] += 1
            progressed = True
        if not progressed:
            waiting = [
                f"stage {s} at {schedule[s][position[s]]}" for s in range(stages) if position[s] < micro * 2
            ]
            raise ExerciseMismatch(
                f"the schedule cannot finish: {', '.join(waiting)} wait for operations that come later in "
                "their stages' orders (a backward before its forward reached the last stage?)"
            )
    makespan = max(free)
    busy = sum(DURATION[kind] for stage in schedule for kind, _ in stage)
    return SimulatedStep(
        spans, makespan, 1 - Fraction(busy, stages * makespan), [_peak(stage) for stage in schedule]
    )


def _check_shape(schedule: Schedule) -> int:
    if not schedule or not all(isinstance(stage, list | tuple) for stage in schedule):
        raise ExerciseMismatch(
            f"a schedule is a list with one list of operations per stage, got {schedule!r}"
        )
    micro = len(schedule[0]) // 2
    want = sorted([("B", k) for k in range(micro)] + [("F", k) for k in range(micro)])
    for s, stage in enumerate(schedule):
        if sorted(tuple(op) for op in stage) != want:
            missing = sorted(set(want) - {tuple(op) for op in stage})
            raise ExerciseMismatch(
                f"stage {s} must run ('F', k) and ('B', k) once for each of the {micro} micro-batches"
                + (f"; missing {missing[:3]}" if missing else f"; got {list(stage)[:6]}...")
            )
    return micro


def _peak(stage: Sequence[Op]) -> int:
    held = peak = 0
    for kind, _ in stage:
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


@waits_for_learner
def check_schedules(
    gpipe: Callable[[int, int], Schedule], one_f_one_b: Callable[[int, int], Schedule]
) -> str:
    """Both schedules for p, m in a few cases: the bubble exactly (p−1)/(m+p−1); 1F1B holding at most p."""
    for p, m in _CASES:
        formula = Fraction(p - 1, m + p - 1)
        for name, build in (("gpipe", gpipe), ("one_f_one_b", one_f_one_b)):
            step = simulate(build(p, m))
            if len(step.spans) != p:
                raise ExerciseMismatch(f"{name}({p}, {m}) gave {len(step.spans)} stages, not {p}")
            if step.bubble != formula:
                raise ExerciseMismatch(
                    f"{name}({p}, {m}): bubble {step.bubble} ({float(step.bubble):.1%}), the formula "
                    f"(p−1)/(m+p−1) = {formula} ({float(formula):.1%}); a stage idles longer than it must"
                    + (f". Hint: {_HINT}" if name == "one_f_one_b" else "")
                )
        held = simulate(one_f_one_b(p, m)).peak_held[0]
        if held > min(p, m):
            raise ExerciseMismatch(
                f"one_f_one_b({p}, {m}): stage 0 holds {held} micro-batches' activations at once; 1F1B holds "
                f"at most p = {p}, starting backwards as soon as the last stage can. Hint: {_HINT}"
            )
    return (
        f"both schedules: bubble = (p−1)/(m+p−1) exactly for (p, m) in {list(_CASES)}; stage 0 holds at most "
        "p micro-batches with 1F1B, all m with GPipe"
    )
