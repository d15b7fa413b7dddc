"""torch.profiler as workbench starts it (the Trainer's profiled steps, `measure_peak` on a CPU): one
cycle, and quiet in a notebook.

- ``acc_events=True``: a profile without a schedule is one cycle, so keeping events across cycles changes
  nothing, but torch 2.10 and 2.11 warn "Profiler clears events at the end of each cycle" on every profile
  started without it (pytorch#180348).
- ``KINETO_LOG_LEVEL``: from torch 2.12 kineto prints ``USDT: ... profiler_start`` and ``profiler_stop`` on
  stderr at every profile, which a notebook shows under the cell. Unless you set the variable, it is set
  to 6 before the first profile (kineto reads it then, once per process), which also hides kineto's own
  messages; ``KINETO_LOG_LEVEL=4`` before that shows them.
"""

from __future__ import annotations

import os
from typing import Any

import torch

QUIET_KINETO = "6"  # kineto prints what is at this severity or above; its highest (USDT) is 5


def profile(**options: Any) -> torch.profiler.profile:
    """``torch.profiler.profile(**options)``, one cycle and quiet (see the module docstring).

    Example:
        >>> with profile(activities=[torch.profiler.ProfilerActivity.CPU]) as recorded:
        ...     _ = torch.ones(4) * 2
        >>> any(event.name == "aten::mul" for event in recorded.events())
        True
    """
    os.environ.setdefault("KINETO_LOG_LEVEL", QUIET_KINETO)
    return torch.profiler.profile(acc_events=True, **options)
