"""Notebook 01's "blocks per SM" check: the right answer passes, each left-out limit is named."""

import dataclasses
import math

import pytest

from workbench.exercises import ExerciseMismatch, check_blocks_per_sm
from workbench.exercises.occupancy import CASES, H100
from workbench.kernels.static import occupancy


def rule(unit=256, reserved=1024, cap=32, threads_limit=True, sub_partitions=4):
    def blocks_per_sm(registers, threads, shared_bytes):
        warps = math.ceil(threads / 32)
        per_warp = math.ceil(registers * 32 / unit) * unit
        by_registers = 65_536 // sub_partitions // per_warp * sub_partitions // warps
        by_shared = 228 * 1024 // max(shared_bytes + reserved, 1)
        by_threads = 2048 // threads if threads <= 1024 or not threads_limit else 0
        return min(by_registers, by_shared, by_threads, cap)

    return blocks_per_sm


def test_the_reference_answer_passes():
    assert check_blocks_per_sm(rule()) == "blocks_per_sm agrees with the occupancy rule on all 9 kernels"


def test_each_case_is_decided_by_the_limit_it_names():
    """Every case's answer changes when its deciding limit is taken away, so each limit is exercised."""
    answers = [occupancy(c.registers, c.threads, c.shared_bytes, H100)[0] for c in CASES]
    assert answers == [8, 4, 12, 6, 32, 0, 0, 4, 24]
    # the last: pooling the whole register file (the rule before issue 43) gives 25
    pooled = occupancy(33, 64, 0, dataclasses.replace(H100, sub_partitions=1))[0]
    assert pooled == 25


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (rule(unit=1), r"\(33, 128, 0\) returned 15; H100 holds 12 .*not rounded up per warp"),
        (rule(reserved=0), r"\(32, 128, 32768\) returned 7; H100 holds 6 .*1 KB the system reserves"),
        (rule(cap=10**9), r"\(16, 32, 0\) returned 64; H100 holds 32 .*cap of 32 blocks"),
        (rule(threads_limit=False), r"\(32, 2048, 0\) returned 1; H100 holds 0 block\(s\)"),
        (rule(sub_partitions=1), r"\(33, 64, 0\) returned 25; H100 holds 24 .*pooled over the whole SM"),
        (lambda r, t, s: 65_536 // (r * t) // s, r"<lambda>\(32, 256, 0\) raised ZeroDivisionError"),
    ],
)
def test_each_slip_is_named(answer, message):
    with pytest.raises(ExerciseMismatch, match=message):
        check_blocks_per_sm(answer)
