"""`measure_peak`: what a step began with counts the model, its optimizer state and the batch, not a dataset
the batch is a view of."""

import os
import subprocess
import sys

import pytest
import torch
from torch.nn import functional

from workbench.estimate.measure import measure_peak


def test_a_batch_sliced_from_a_dataset_counts_as_the_batch_alone():
    dataset_x, dataset_y = torch.randn(10_000, 16), torch.randn(10_000, 1)  # 680 kB
    peaks = []
    for x, y in ((dataset_x[:8], dataset_y[:8]), (dataset_x[:8].clone(), dataset_y[:8].clone())):
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        peaks.append(measure_peak(model, optimizer, functional.mse_loss, x, y, proxy=False))
    view, copy = peaks
    batch_and_state = 8 * 17 * 4 + 2 * 17 * 4  # the batch, the parameters and their momentum
    assert view.before == copy.before == batch_and_state


def test_a_peak_does_not_drift_with_memory_an_earlier_profile_left_allocated():
    """The profiler's "Total Allocated" counts what earlier profiles allocated and kept: the peak is taken
    relative to the counter where this profile starts."""
    from workbench.estimate.measure import allocator_peak

    cpu = torch.device("cpu")

    def step():
        return torch.ones(2000) * 2  # 16 kB alive together

    first = allocator_peak(step, [], cpu)
    kept = []
    allocator_peak(lambda: kept.append(torch.zeros(10 * 2**20 // 4)), [], cpu)  # 10 MiB, still alive
    second = allocator_peak(step, [], cpu)
    assert first.during == second.during and 16_000 <= first.during < 17_000


def test_measuring_a_cpu_peak_does_not_warn_about_profiler_cycles_on_torch_2_11(profiler_warnings):
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    measure_peak(model, optimizer, functional.mse_loss, torch.randn(8, 16), torch.randn(8, 1))
    assert not [w for w in profiler_warnings if "clears events" in str(w.message)]


CHILD = """
import os, torch
from torch.nn import functional
from workbench.estimate.measure import measure_peak
model = torch.nn.Linear(16, 1)
measure_peak(model, torch.optim.SGD(model.parameters(), lr=0.1), functional.mse_loss, torch.randn(8, 16),
             torch.randn(8, 1))
print(os.environ["KINETO_LOG_LEVEL"])
"""


@pytest.mark.parametrize("chosen", [None, "4"])
def test_a_profile_prints_nothing_on_stderr_unless_kineto_s_log_level_is_chosen(chosen):
    """torch 2.12+'s kineto prints "USDT: ... profiler_start" and "profiler_stop" at every profile, which a
    notebook shows under the cell; workbench quiets it unless the user chose a level (then kept, and on such
    a torch the lines come back: what the first case would see without the fix)."""
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    if chosen is not None:
        env["KINETO_LOG_LEVEL"] = chosen
    command = [sys.executable, "-c", CHILD]
    child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == [chosen or "6"]
    prints_usdt = torch.__version__ >= (2, 12)  # kineto's USDT messages came with torch 2.12
    assert ("USDT" in child.stderr) == (chosen is not None and prints_usdt), child.stderr
