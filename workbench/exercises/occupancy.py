"""Notebook 01's occupancy exercise: how many blocks of a kernel one H100 SM holds at once.

A learner's function ``blocks_per_sm(registers, threads, shared_bytes)`` gets a kernel's registers per thread,
threads per block and shared memory per block, and returns the resident blocks per SM of an H100 (sm_90):
the fewest allowed by its four limits (threads, blocks, registers, shared memory), 0 when one block does not
fit. `check_blocks_per_sm` compares it on cases where each limit decides with `workbench.kernels.static.
occupancy`, the rule the static kernel report applies to what ``ptxas`` says of every kernel, and names the
limit or rounding the learner left out.

Example:
    >>> import math
    >>> def blocks_per_sm(registers, threads, shared_bytes):
    ...     warps = math.ceil(threads / 32)
    ...     per_warp = math.ceil(registers * 32 / 256) * 256  # handed out per warp, 256 at a time
    ...     by_registers = 16_384 // per_warp * 4 // warps  # a warp's registers: from one of 4 quarters
    ...     by_shared = 228 * 1024 // (shared_bytes + 1024)  # 1 KB of each block's share is the system's
    ...     by_threads = 2048 // threads if threads <= 1024 else 0
    ...     return min(by_registers, by_shared, by_threads, 32)
    >>> check_blocks_per_sm(blocks_per_sm)
    'blocks_per_sm agrees with the occupancy rule on all 9 kernels'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from workbench.exercises.mismatch import ExerciseMismatch, learners_code
from workbench.exercises.waiting import waits_for_learner
from workbench.kernels.static import LIMITS, SmLimits, occupancy

H100 = LIMITS["sm_90"]
_HINT = (
    "the SM holds the fewest blocks any limit allows: 2048 threads, 32 blocks, 65,536 registers (handed out "
    "per warp in units of 256, each warp's from one of 4 sub-partitions of 16,384) and 228 KB of shared "
    "memory (each block also uses 1 KB the system keeps)"
)


class OccupancyCase(NamedTuple):
    registers: int  # per thread
    threads: int  # per block
    shared_bytes: int  # per block
    decides: str  # which limit sets the answer


CASES = (
    OccupancyCase(32, 256, 0, "threads: 2048 / 256"),
    OccupancyCase(64, 256, 0, "registers"),
    OccupancyCase(33, 128, 0, "registers, rounded up per warp to a multiple of 256"),
    OccupancyCase(32, 128, 32 * 1024, "shared memory, with 1 KB reserved per block"),
    OccupancyCase(16, 32, 0, "blocks: at most 32 per SM"),
    OccupancyCase(128, 1024, 0, "registers: 128 × 1024 do not fit"),
    OccupancyCase(32, 2048, 0, "threads: a block has at most 1024"),
    OccupancyCase(40, 96, 47 * 1024, "shared memory"),
    OccupancyCase(33, 64, 0, "registers, a warp's from one of 4 sub-partitions"),
)

# What the usual slips compute instead: the rule without one of its parts.
_SLIPS = {
    "registers not rounded up per warp to a multiple of 256": dataclasses.replace(H100, register_unit=1),
    "the 1 KB the system reserves per block left out": dataclasses.replace(H100, shared_reserved=0),
    "the cap of 32 blocks per SM left out": dataclasses.replace(H100, max_blocks=10**9),
    "registers pooled over the whole SM, not per sub-partition": dataclasses.replace(H100, sub_partitions=1),
}


@waits_for_learner
def check_blocks_per_sm(blocks_per_sm: Callable[[int, int, int], int], limits: SmLimits = H100) -> str:
    """Run ``blocks_per_sm(registers, threads, shared_bytes)`` on `CASES`; raise `ExerciseMismatch` at the
    first kernel where it differs from `workbench.kernels.static.occupancy` for `limits` (the H100)."""
    name = getattr(blocks_per_sm, "__name__", "blocks_per_sm")
    for case in CASES:
        want = occupancy(case.registers, case.threads, case.shared_bytes, limits)[0]
        call = f"{name}({case.registers}, {case.threads}, {case.shared_bytes})"
        kernel = f"{case.registers} registers × {case.threads} threads, {case.shared_bytes:,} bytes shared"
        with learners_code(call, _HINT, f" ({kernel}; {case.decides} decides)"):
            got = blocks_per_sm(case.registers, case.threads, case.shared_bytes)
        if got != want:
            raise ExerciseMismatch(
                f"{call} returned {got!r}; {limits.gpu} "
                f"holds {want} block(s) of that kernel ({kernel}; {case.decides} decides)"
                f"{_diagnose(got, case)}. Hint: {_HINT}"
            )
    return f"{name} agrees with the occupancy rule on all {len(CASES)} kernels"


def _diagnose(got: object, case: OccupancyCase) -> str:
    """Name the slip when `got` is what the rule gives without one of its parts."""
    for slip, limits in _SLIPS.items():
        if got == occupancy(case.registers, case.threads, case.shared_bytes, limits)[0]:
            return f": that is the count with {slip}"
    return ""
