"""Notebook 04a's exercise: what one rank holds between training steps at each ZeRO stage.

With `P` bytes of fp32 parameters and AdamW (two moments: `2P`) on `N` ranks, a learner's
``bytes_between_steps(P, N, stage)`` counts, for stages 0 (plain DDP) to 3, the parameters, the gradients
still alive between steps (DDP keeps them in its buckets; FSDP frees its sharded ones) and the moments,
each whole or divided by `N`. `check_zero_bytes` compares it with that count for several `P` and `N` and
names the part that differs; the notebook then compares it with what the ranks measured.

Example:
    >>> def bytes_between_steps(P, N, stage):
    ...     parameters = P / N if stage >= 2 else P
    ...     gradients = P if stage <= 1 else 0
    ...     moments = 2 * P / N if stage >= 1 else 2 * P
    ...     return parameters + gradients + moments
    >>> check_zero_bytes(bytes_between_steps)
    'bytes_between_steps gives every stage 0-3 for P = 1,000,000 and 4,096 bytes on 2, 4 and 8 ranks'
"""

from __future__ import annotations

from collections.abc import Callable

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.waiting import waits_for_learner

_PARTS = {  # stage → (parameters, gradients, moments), each a multiple of P / N ("/N") or of P
    0: ((1, ""), (1, ""), (2, "")),
    1: ((1, ""), (1, ""), (2, "/N")),
    2: ((1, "/N"), (0, ""), (2, "/N")),
    3: ((1, "/N"), (0, ""), (2, "/N")),
}
_HINT = {
    0: "plain DDP: every rank keeps all parameters, its gradient buckets and both AdamW moments",
    1: "ZeRO-1 shards the optimizer state only: the moments are divided by N; DDP's buckets stay",
    2: "FSDP keeps parameters sharded between steps and frees its gradients after the optimizer step",
    3: "as stage 2 between steps (stage 3 differs during the step: it frees each unit after its forward)",
}


def reference_bytes(P: float, N: int, stage: int) -> float:
    """The count the check compares with: parameters + gradients alive + moments, whole or 1/N."""
    return sum(k * P / (N if per == "/N" else 1) for k, per in _PARTS[stage])


@waits_for_learner
def check_zero_bytes(bytes_between_steps: Callable[[float, int, int], float]) -> str:
    """Run the learner's function for P in (1e6, 4096), N in (2, 4, 8), stages 0–3 against the count."""
    name = getattr(bytes_between_steps, "__name__", "bytes_between_steps")
    for P in (1_000_000, 4096):
        for N in (2, 4, 8):
            for stage in range(4):
                got, want = bytes_between_steps(P, N, stage), reference_bytes(P, N, stage)
                if not isinstance(got, int | float) or abs(got - want) > 1e-9 * want:
                    shown = f"{got:,.0f}" if isinstance(got, int | float) else repr(got)
                    raise ExerciseMismatch(
                        f"{name}(P={P:,}, N={N}, stage={stage}) = {shown}, expected {want:,.0f} "
                        f"({_formula(stage)}). Hint: {_HINT[stage]}"
                    )
    return f"{name} gives every stage 0-3 for P = 1,000,000 and 4,096 bytes on 2, 4 and 8 ranks"


def _formula(stage: int) -> str:
    terms = [f"{k}P{per}" if k != 1 else f"P{per}" for k, per in _PARTS[stage] if k]
    return " + ".join(terms)
